//! Shared test harness: a scratch segment directory, a command builder for the
//! `hydra-probe` binary whose failures show the command, its output and the directory
//! (segments decoded), and a guard for a fake writer running in another process.

#![allow(dead_code)]

pub mod fake;

use hydra_layout::{clock, SlotState};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const S: u64 = 1_000_000_000;

pub use hydra_fault::segments::{describe_dir, Scratch};

/// Runs the `hydra-probe` binary against a scratch directory.
pub trait ProbeRun {
    /// Runs `hydra-probe --dir <segs> ARGS`.
    fn probe(&self, args: &[&str]) -> Run;
    /// Runs `hydra-probe ARGS` without `--dir`, with `HYDRA_PROGRESS_DIR` set to `env_dir`
    /// (or to a path that does not exist).
    fn probe_bare(&self, args: &[&str], env_dir: Option<&Path>) -> Run;
    /// Runs `hydra-probe --dir <segs> ARGS` and asserts that it fails with exit status 3
    /// and the one error line `hydra-probe: ...needle...`.
    fn probe_error(&self, args: &[&str], needle: &str) -> Run;
}

impl ProbeRun for Scratch {
    /// Runs `hydra-probe --dir <segs> ARGS`.
    fn probe(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-probe"));
        cmd.arg("--dir").arg(&self.dir).args(args);
        run(cmd, &self.dir, self.tmp.path())
    }

    #[track_caller]
    fn probe_error(&self, args: &[&str], needle: &str) -> Run {
        let run = self.probe(args);
        run.code_is(3).error_is(needle);
        run
    }

    /// Runs `hydra-probe ARGS` without `--dir`.
    fn probe_bare(&self, args: &[&str], env_dir: Option<&Path>) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-probe"));
        cmd.args(args);
        match env_dir {
            Some(d) => cmd.env(hydra_layout::naming::DIR_ENV, d),
            None => cmd.env(
                hydra_layout::naming::DIR_ENV,
                self.tmp.path().join("absent"),
            ),
        };
        run(cmd, &self.dir, self.tmp.path())
    }
}

/// Puts two `.hps` names in `dir` that are no file at all: the directory `adir.hps` and
/// the FIFO `fifo.hps`.
pub fn add_dir_and_fifo(dir: &Path) {
    std::fs::create_dir(dir.join("adir.hps")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.join("fifo.hps").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// Runs `cmd` (never against the real directory: `HYDRA_PROGRESS_DIR` defaults to
/// `<tmp>/absent`) and keeps its output with a listing of `dir`.
fn run(mut cmd: Command, dir: &Path, tmp: &Path) -> Run {
    cmd.env_remove("RUST_BACKTRACE").stdin(Stdio::null());
    if !cmd
        .get_envs()
        .any(|(k, _)| k == hydra_layout::naming::DIR_ENV)
    {
        // Never fall back to the real /dev/shm directory.
        cmd.env(hydra_layout::naming::DIR_ENV, tmp.join("absent"));
    }
    let shown = format!("{cmd:?}");
    let output = cmd.output().expect("run hydra-probe");
    Run {
        cmd: shown,
        output,
        listing: describe_dir(dir),
    }
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

/// A decode record `progress_age` after its last progress, `phase_age` into its phase
/// ([`hydra_fault::segments::decode`] at the current time).
pub fn decode(done: u64, total: u64, phase_age: u64, progress_age: u64) -> SlotState {
    hydra_fault::segments::decode(clock::monotonic_ns(), done, total, phase_age, progress_age)
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

impl ChildWriter {
    /// Kills the writer with SIGKILL (no clean close: its segment stays, its lock frees)
    /// and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
