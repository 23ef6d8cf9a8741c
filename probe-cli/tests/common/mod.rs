//! Shared test harness: a scratch segment directory, a command builder for the
//! `hydra-probe` binary whose failures show the command, its output and the directory
//! (segments decoded), and a guard for a fake writer running in another process.

#![allow(dead_code)]

pub mod fake;

use hydra_layout::{
    clock, EngineDescription, Phase, SegmentConfig, SegmentReader, SegmentWriter, SlotState,
    WorkUnit,
};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const S: u64 = 1_000_000_000;

/// A scratch directory holding a segment directory `segs/`.
pub struct Scratch {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("segs");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o750))
            .expect("chmod");
        Self { tmp, dir }
    }

    /// Creates engine `id` with `slots` slots (held by this process: it is live).
    pub fn writer(&self, id: &str, slots: usize) -> SegmentWriter {
        SegmentWriter::create(&SegmentConfig {
            dir: self.dir.clone(),
            engine_id: id.into(),
            slot_count: slots,
            description: EngineDescription {
                model_name: "tiny-llama".into(),
                model_quant: "Q8_0".into(),
                model_path: "/models/tiny.gguf".into(),
                tokenizer: "gpt2".into(),
                model_alias: "tiny".into(),
                device: "cpu".into(),
                capabilities: 3,
            },
        })
        .expect("create segment")
    }

    /// Runs `hydra-probe --dir <segs> ARGS`.
    pub fn probe(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-probe"));
        cmd.arg("--dir").arg(&self.dir).args(args);
        self.run(cmd)
    }

    /// Runs `hydra-probe ARGS` without `--dir`.
    pub fn probe_bare(&self, args: &[&str], env_dir: Option<&Path>) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-probe"));
        cmd.args(args);
        match env_dir {
            Some(d) => cmd.env(hydra_layout::naming::DIR_ENV, d),
            None => cmd.env(
                hydra_layout::naming::DIR_ENV,
                self.tmp.path().join("absent"),
            ),
        };
        self.run(cmd)
    }

    fn run(&self, mut cmd: Command) -> Run {
        cmd.env_remove("RUST_BACKTRACE").stdin(Stdio::null());
        if !cmd
            .get_envs()
            .any(|(k, _)| k == hydra_layout::naming::DIR_ENV)
        {
            // Never fall back to the real /dev/shm directory.
            cmd.env(
                hydra_layout::naming::DIR_ENV,
                self.tmp.path().join("absent"),
            );
        }
        let shown = format!("{cmd:?}");
        let output = cmd.output().expect("run hydra-probe");
        Run {
            cmd: shown,
            output,
            listing: describe_dir(&self.dir),
        }
    }
}

/// What a directory holds, with each segment's header decoded.
pub fn describe_dir(dir: &Path) -> String {
    let mut s = format!("{}:\n", dir.display());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return s + "  (unreadable)\n";
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let meta = std::fs::symlink_metadata(&p);
        s.push_str(&format!(
            "  {:?} {:?}",
            e.file_name(),
            meta.map(|m| m.file_type())
        ));
        match SegmentReader::open(&p) {
            Ok(r) => {
                let h = r.header().ok();
                s.push_str(&format!(
                    " segment id={} pid={} slots={} liveness={:?} header={h:?}\n",
                    r.identity().engine_id,
                    r.identity().pid,
                    r.slot_count(),
                    r.liveness().ok()
                ));
            }
            Err(err) => s.push_str(&format!(" ({err})\n")),
        }
    }
    s
}

/// The outcome of one `hydra-probe` run.
pub struct Run {
    pub cmd: String,
    pub output: Output,
    pub listing: String,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    fn context(&self) -> String {
        format!(
            "command: {}\nstatus: {:?}\nstdout:\n{}\nstderr:\n{}\n{}",
            self.cmd,
            self.output.status,
            self.stdout(),
            self.stderr(),
            self.listing
        )
    }

    /// Asserts the exit status; returns self for chaining.
    #[track_caller]
    pub fn code_is(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "wrong exit status\n{}",
            self.context()
        );
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Self {
        assert!(
            self.stdout().contains(needle),
            "stdout lacks {needle:?}\n{}",
            self.context()
        );
        self
    }

    /// Asserts stderr is exactly one line starting `hydra-probe: ` and containing `needle`.
    #[track_caller]
    pub fn error_is(&self, needle: &str) -> &Self {
        let err = self.stderr();
        assert!(
            err.starts_with("hydra-probe: ") && err.lines().count() == 1 && err.contains(needle),
            "stderr is not one `hydra-probe: ...{needle}...` line\n{}",
            self.context()
        );
        self
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON: {e}\n{}", self.context()))
    }
}

/// A decode record `progress_age` after its last progress, `phase_age` into its phase.
pub fn decode(done: u64, total: u64, phase_age: u64, progress_age: u64) -> SlotState {
    let now = clock::monotonic_ns();
    SlotState {
        task_id: 42,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: done,
        work_total: total,
        tokens_cached: 10,
        n_past: 10 + done,
        n_ctx: 2048,
        state_size: 123_456,
        task_start_ns: now.saturating_sub(phase_age).max(1),
        phase_start_ns: now.saturating_sub(phase_age).max(1),
        last_progress_ns: now.saturating_sub(progress_age).max(1),
        steps_done: done,
        ..Default::default()
    }
}

/// A fake writer in another process (this test binary, re-executed); killed and reaped on
/// drop.
pub struct ChildWriter {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub path: PathBuf,
}

/// Environment variable that turns a re-executed test binary into a fake writer.
pub const CHILD_ENV: &str = "HYDRA_PROBE_TEST_FAKE_WRITER";

impl ChildWriter {
    /// Starts `test_name` of the current test binary as a fake writer of engine `id` in `dir`
    /// and waits (with a deadline) for it to report its segment.
    pub fn spawn(test_name: &str, dir: &Path, id: &str, slots: usize) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{}\n{id}\n{slots}", dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn fake writer");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let mut guard = Self {
            child,
            _stdin: stdin,
            path: PathBuf::new(),
        };
        // Reading blocks until the child prints; the child prints `ready` right after
        // creating the segment, or exits (EOF) if it fails. Its own deadline bounds this.
        let deadline = Instant::now() + Duration::from_secs(60);
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read child stdout");
            // libtest may print "test NAME ... " on the same line first.
            if let Some(at) = line.find(fake::READY) {
                guard.path = PathBuf::from(line[at + fake::READY.len()..].trim());
                break;
            }
            assert!(Instant::now() < deadline, "fake writer did not start");
        }
        assert!(
            !guard.path.as_os_str().is_empty(),
            "fake writer exited before it was ready"
        );
        guard
    }

    /// If this process is a re-executed fake writer, runs it and returns true.
    pub fn run_if_child() -> bool {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return false;
        };
        let mut parts = spec.split('\n');
        let dir = PathBuf::from(parts.next().unwrap_or_default());
        let id = parts.next().unwrap_or("fake").to_owned();
        let slots = parts.next().and_then(|s| s.parse().ok()).unwrap_or(4);
        fake::run(
            &dir,
            &id,
            slots,
            Duration::from_secs(120),
            Duration::from_micros(50),
        );
        true
    }
}

impl Drop for ChildWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
