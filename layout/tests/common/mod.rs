//! Shared harness of the `hydra-layout` integration tests.
//!
//! - [`Scratch`]: a private temporary directory per test (never `/dev/shm/hydra-progress`);
//! - [`valid_segment`]: the bytes of a real segment made by [`SegmentWriter`], to patch into
//!   hostile files with [`set_word`] and write with [`write_segment`];
//! - [`describe_file`] / [`describe_bytes`]: a segment's header decoded, for failure messages;
//! - [`expect_open_err`]: opens a file that must be refused, and shows what was on disk if
//!   the outcome is not the expected one;
//! - [`spawn_child`] / [`ChildProc`]: re-executes this test binary as a child process
//!   running one `#[ignore]`d child test; the guard kills and reaps it on drop;
//! - [`wait_for`]: polls a condition until a deadline (never a fixed sleep).
//!
//! Every test binary compiles this module but uses only part of it.
#![allow(dead_code)]

use hydra_layout::header as h;
use hydra_layout::{
    Error, FinishReason, OpenOptions, Phase, SegmentConfig, SegmentReader, SegmentWriter,
    SlotState, WorkUnit,
};
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Environment variable carrying a child process's working directory. A child test returns
/// at once when it is unset, so running the ignored tests by hand does nothing harmful.
pub const CHILD_DIR_ENV: &str = "HYDRA_LAYOUT_TEST_CHILD_DIR";

/// A private scratch directory, removed on drop.
pub struct Scratch {
    tmp: tempfile::TempDir,
}

impl Scratch {
    /// Creates a fresh directory under the system temp dir.
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("hydra-layout-test.")
            .tempdir()
            .expect("create scratch directory");
        Self { tmp }
    }

    /// The scratch directory.
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// A path inside the scratch directory (not created).
    pub fn join(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Creates (mode 0750) and returns a subdirectory.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let p = self.join(name);
        std::fs::create_dir(&p).expect("create subdirectory");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        p
    }
}

/// A segment configuration with an empty description.
pub fn config(dir: &Path, engine_id: &str, slot_count: usize) -> SegmentConfig {
    SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: engine_id.into(),
        slot_count,
        description: Default::default(),
    }
}

/// A distinct, fully populated record for slot `i` (every field differs between slots).
pub fn sample_state(i: u64) -> SlotState {
    let b = 1000 * (i + 1);
    SlotState {
        task_id: b + 1,
        phase: Phase::Decode,
        finish_reason: FinishReason::Completed,
        error_code: hydra_layout::ErrorCode::None,
        work_unit: WorkUnit::Tokens,
        work_done: b + 2,
        work_total: b + 3,
        tokens_cached: b + 4,
        n_past: b + 5,
        n_ctx: b + 6,
        state_size: b + 7,
        task_start_ns: b + 8,
        phase_start_ns: b + 9,
        last_progress_ns: b + 10,
        step_start_ns: b + 11,
        step_size: b + 12,
        last_step_ns: b + 13,
        steps_done: b + 14,
    }
}

/// The record the cross-process stress writer publishes for counter `k`: every field is a
/// function of `k`, so a mix of two updates is always detectable.
pub fn stress_record(k: u64) -> SlotState {
    SlotState {
        task_id: k,
        phase: Phase::from_raw(k % 6),
        finish_reason: FinishReason::from_raw(k % 4),
        error_code: hydra_layout::ErrorCode::from_raw(k % 7),
        work_unit: WorkUnit::from_raw(k % 3),
        work_done: k,
        work_total: k.wrapping_mul(2),
        tokens_cached: k ^ 0x5555_5555,
        n_past: k.wrapping_add(1),
        n_ctx: k.wrapping_add(2),
        state_size: k.wrapping_mul(7),
        task_start_ns: k.wrapping_mul(3),
        phase_start_ns: k.wrapping_mul(3),
        last_progress_ns: k.wrapping_mul(3),
        step_start_ns: k.wrapping_mul(3),
        step_size: k.wrapping_add(3),
        last_step_ns: k.wrapping_mul(3),
        steps_done: k.wrapping_add(4),
    }
}

/// Bytes of a real, READY segment with `slot_count` slots, slot `i` holding
/// [`sample_state`]`(i)` and `i` pending tasks. Made by a [`SegmentWriter`] in a scratch
/// directory, read while the writer is live, then the writer closes.
pub fn valid_segment(slot_count: usize) -> Vec<u8> {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&config(scratch.path(), "fixture", slot_count))
        .expect("create fixture segment");
    let pending = w.pending_counter();
    for i in 0..slot_count {
        w.publish(i, &sample_state(i as u64)).expect("publish");
        for _ in 0..i {
            pending.queued(i);
        }
    }
    let bytes = std::fs::read(w.path()).expect("read fixture segment");
    w.close().expect("close fixture writer");
    assert_eq!(bytes.len(), hydra_layout::segment_len(slot_count));
    bytes
}

/// Bytes of the segment a v1.2 writer leaves for the same events as [`valid_segment`]: the
/// slot table ends the file (no region directory), minor 2, no v1.3 capability bits.
pub fn v1_2_segment(slot_count: usize) -> Vec<u8> {
    let bytes = valid_segment(slot_count);
    let end = h::HEADER_LEN + slot_count * hydra_layout::slot::SLOT_STRIDE;
    let caps = word(&bytes, h::MODEL_CAPABILITIES_OFFSET) & (h::capabilities::SLOT_STATS - 1);
    patched(
        &bytes[..end],
        &[
            (h::VERSION_MINOR_OFFSET, 2),
            (h::TOTAL_LEN_OFFSET, end as u64),
            (h::REGION_DIR_OFFSET, 0),
            (h::REGION_COUNT_OFFSET, 0),
            (h::MODEL_CAPABILITIES_OFFSET, caps),
        ],
    )
}

/// The native-endian word at byte `offset` of `bytes`.
pub fn word(bytes: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Overwrites the native-endian word at byte `offset` of `bytes`.
pub fn set_word(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}

/// A copy of `bytes` with the given `(offset, value)` words overwritten.
pub fn patched(bytes: &[u8], words: &[(usize, u64)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(offset, value) in words {
        set_word(&mut out, offset, value);
    }
    out
}

/// Writes raw segment bytes to `dir/name` (mode 0640, replacing any file there).
pub fn write_segment(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let mut f = File::create(&path).expect("create raw segment file");
    f.write_all(bytes).expect("write raw segment file");
    f.set_permissions(std::fs::Permissions::from_mode(0o640))
        .expect("chmod raw segment file");
    path
}

/// A human description of what is at `path`: its type, and for a regular file its header
/// decoded (as far as the file is long enough).
pub fn describe_file(path: &Path) -> String {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return format!("{}: {e}", path.display()),
    };
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        format!(
            "symbolic link to {:?}",
            std::fs::read_link(path).unwrap_or_default()
        )
    } else if ft.is_fifo() {
        "FIFO".into()
    } else if ft.is_dir() {
        "directory".into()
    } else if ft.is_file() {
        return match std::fs::read(path) {
            Ok(bytes) => format!(
                "{} (mode {:o}, uid {}):\n{}",
                path.display(),
                meta.permissions().mode() & 0o7777,
                std::os::unix::fs::MetadataExt::uid(&meta),
                describe_bytes(&bytes)
            ),
            Err(e) => format!("{}: read: {e}", path.display()),
        };
    } else {
        "special file".into()
    };
    format!("{}: {kind}", path.display())
}

/// The header words of `bytes` decoded, one per line; stops where the bytes end.
pub fn describe_bytes(bytes: &[u8]) -> String {
    let mut out = format!("  file length      {} bytes\n", bytes.len());
    let have = |off: usize| off + 8 <= bytes.len();
    if have(h::MAGIC_OFFSET) {
        let m = &bytes[h::MAGIC_OFFSET..h::MAGIC_OFFSET + 8];
        out += &format!(
            "  magic            {:?} {m:02x?}\n",
            String::from_utf8_lossy(m)
        );
    }
    if have(h::BYTE_ORDER_OFFSET) {
        let bom = word(bytes, h::BYTE_ORDER_OFFSET);
        let what = match bom {
            h::BYTE_ORDER_MARK => "native",
            h::BYTE_ORDER_MARK_SWAPPED => "swapped",
            _ => "corrupt",
        };
        out += &format!("  byte order       {bom:#018x} ({what})\n");
    }
    let fields: [(&str, usize); 13] = [
        ("version major", h::VERSION_MAJOR_OFFSET),
        ("version minor", h::VERSION_MINOR_OFFSET),
        ("header len", h::HEADER_LEN_OFFSET),
        ("slot offset", h::SLOT_OFFSET_OFFSET),
        ("slot stride", h::SLOT_STRIDE_OFFSET),
        ("slot count", h::SLOT_COUNT_OFFSET),
        ("total len", h::TOTAL_LEN_OFFSET),
        ("state", h::STATE_OFFSET),
        ("pid", h::PID_OFFSET),
        ("instance id", h::INSTANCE_ID_OFFSET),
        ("heartbeat ns", h::HEARTBEAT_NS_OFFSET),
        ("loop iterations", h::LOOP_ITERATIONS_OFFSET),
        ("closed ns", h::CLOSED_NS_OFFSET),
    ];
    for (name, off) in fields {
        if !have(off) {
            return out;
        }
        let v = word(bytes, off);
        let note = if off == h::STATE_OFFSET {
            format!(" ({})", hydra_layout::Lifecycle::from_raw(v).as_str())
        } else {
            String::new()
        };
        out += &format!("  {name:<16} {v}{note}\n");
    }
    if bytes.len() >= h::ENGINE_ID_OFFSET + h::ENGINE_ID_LEN {
        let f = &bytes[h::ENGINE_ID_OFFSET..h::ENGINE_ID_OFFSET + h::ENGINE_ID_LEN];
        let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        out += &format!(
            "  engine id        {:?}\n",
            String::from_utf8_lossy(&f[..end])
        );
    }
    out
}

/// Opens `path` with `options`, requires it to fail with an error `expected` accepts, and
/// returns that error. On any other outcome, panics showing what was on disk.
pub fn expect_open_err(
    path: &Path,
    options: &OpenOptions,
    what: &str,
    expected: impl FnOnce(&Error) -> bool,
) -> Error {
    match SegmentReader::open_with(path, options) {
        Ok(r) => panic!(
            "expected {what}, but the open succeeded: {r:?}\n{}",
            describe_file(path)
        ),
        Err(e) => {
            assert!(
                expected(&e),
                "expected {what}, got {e:?} ({e})\n{}",
                describe_file(path)
            );
            e
        }
    }
}

/// Polls `probe` until it returns `Some`, for at most `timeout` (1 ms between polls);
/// panics naming `what` on timeout.
pub fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    let mut polls = 0u64;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        polls += 1;
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} ({polls} polls) waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The directory a parent passed to this child process, or `None` when this is not a child.
pub fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_DIR_ENV).map(PathBuf::from)
}

/// A child process running one test of this binary. Drop kills (SIGKILL) and reaps it.
pub struct ChildProc {
    child: Option<Child>,
    test_name: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// Re-executes this test binary to run the ignored child test `test_name` with
/// [`CHILD_DIR_ENV`] set to `dir`; its output goes to files under `logs`.
pub fn spawn_child(test_name: &str, dir: &Path, logs: &Path) -> ChildProc {
    let exe = std::env::current_exe().expect("current_exe");
    let stdout = logs.join(format!("{test_name}.stdout"));
    let stderr = logs.join(format!("{test_name}.stderr"));
    let child = Command::new(&exe)
        .args([
            "--exact",
            test_name,
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir)
        // Anything the child leaves in its working directory (a core file after a fault)
        // lands in the scratch directory, not in the source tree.
        .current_dir(logs)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout).expect("child stdout file"))
        .stderr(File::create(&stderr).expect("child stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {} {test_name}: {e}", exe.display()));
    ChildProc {
        child: Some(child),
        test_name: test_name.into(),
        stdout,
        stderr,
    }
}

impl ChildProc {
    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("child already reaped")
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child already reaped").id()
    }

    /// `Some(status)` if the child has exited (and is now reaped), `None` while it runs.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        let status = self.child().try_wait().expect("try_wait");
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Panics (with the child's output) if the child has exited.
    pub fn assert_running(&mut self, context: &str) {
        if let Some(status) = self.try_exited() {
            panic!(
                "{context}: child {} exited early with {status}\n{}",
                self.test_name,
                self.logs()
            );
        }
    }

    /// Waits for the child to exit by itself, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let name = format!("child {} to exit", self.test_name);
        let status = match self.child.as_mut() {
            Some(child) => wait_for(&name, timeout, || child.try_wait().expect("try_wait")),
            None => panic!("child {} already reaped", self.test_name),
        };
        self.child = None;
        status
    }

    /// Sends SIGKILL (if still running) and reaps the child; returns its exit status.
    pub fn kill_and_reap(&mut self) -> ExitStatus {
        let child = self.child();
        let _ = child.kill(); // fails only if it already exited; wait reaps either way
        let status = child.wait().expect("wait for killed child");
        self.child = None;
        status
    }

    /// The child's stdout and stderr so far, for failure messages.
    pub fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- child {} stdout ---\n{}--- stderr ---\n{}",
            self.test_name,
            read(&self.stdout),
            read(&self.stderr)
        )
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops a child's work loop when its parent (the test process) is gone.
pub struct ParentWatch {
    ppid: Option<rustix::process::Pid>,
}

impl ParentWatch {
    /// Remembers the current parent.
    pub fn new() -> Self {
        Self {
            ppid: rustix::process::getppid(),
        }
    }

    /// Whether the original parent is still our parent.
    pub fn parent_alive(&self) -> bool {
        rustix::process::getppid() == self.ppid
    }
}

/// Slot `slot`'s state through `reader`, panicking with the decoded file on error.
pub fn read_slot(reader: &SegmentReader, slot: usize) -> SlotState {
    match reader.slot(slot) {
        Ok(snap) => snap.state,
        Err(e) => panic!("reading slot {slot}: {e}\n{}", describe_file(reader.path())),
    }
}
