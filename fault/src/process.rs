//! Engine and exporter child processes: started on an ephemeral loopback port, their
//! address read from the `listening on http://...` line, killed and reaped on drop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A server child process (engine or exporter).
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Server {
    /// Spawns `cmd` (stdout piped) and waits up to 60 s for its `listening on ` line.
    pub fn spawn(mut cmd: Command) -> Server {
        cmd.stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn server");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        // Keeps draining stdout for the child's whole life so it never blocks on a pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => Server {
                child: Some(child),
                base,
            },
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("server did not report its address within 60 s (exit: {status:?})");
            }
        }
    }

    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the child is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Resident set size in KiB (`VmRSS` of `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait (at most 30 s) for the exit; returns its status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = c.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("server did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `VmRSS` of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// How to start an engine.
#[derive(Debug, Clone)]
pub struct EngineOpts {
    /// Segment directory.
    pub dir: PathBuf,
    /// Engine id.
    pub id: String,
    /// Slots.
    pub slots: usize,
    /// Context per slot, tokens.
    pub ctx: usize,
    /// Compute threads.
    pub threads: usize,
    /// CPUs to pin the engine to (`taskset -c`), when set.
    pub cpus: Option<String>,
    /// Extra `serve` arguments.
    pub extra: Vec<String>,
    /// Extra environment variables (the test build's fault hooks).
    pub env: Vec<(String, String)>,
    /// The engine binary; [`crate::bins::engine`] when unset (a bench passes its own
    /// `CARGO_BIN_EXE_hydra-engine`, already built in its profile).
    pub bin: Option<PathBuf>,
}

impl EngineOpts {
    /// The embedded model, 2 slots of 4096 tokens, 1 compute thread.
    pub fn new(dir: &Path, id: &str) -> Self {
        Self {
            dir: dir.to_path_buf(),
            id: id.to_string(),
            slots: 2,
            ctx: 4096,
            threads: 1,
            cpus: None,
            extra: Vec::new(),
            env: Vec::new(),
            bin: None,
        }
    }

    /// The segment this engine publishes.
    pub fn segment(&self) -> PathBuf {
        self.dir.join(format!("{}.hps", self.id))
    }
}

/// A command for `program`, run through `taskset -c CPUS` when `cpus` is set (taskset
/// execs the program, so the child's pid is the program's).
pub fn pinned(cpus: Option<&str>, program: &Path) -> Command {
    match cpus {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", c]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Starts `hydra-engine serve --builtin` as configured.
pub fn start_engine(o: &EngineOpts) -> Server {
    let bin = o.bin.clone().unwrap_or_else(crate::bins::engine);
    let mut cmd = pinned(o.cpus.as_deref(), &bin);
    cmd.args(["serve", "--builtin", "--listen", "127.0.0.1:0"])
        .args(["--engine-id", &o.id])
        .args(["--slots", &o.slots.to_string()])
        .args(["--ctx", &o.ctx.to_string()])
        .args(["--threads", &o.threads.to_string()])
        .arg("--progress-dir")
        .arg(&o.dir)
        .args(&o.extra)
        .envs(o.env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    Server::spawn(cmd)
}

/// Starts `hydra-exporter` on `dir`.
pub fn start_exporter(dir: &Path, extra: &[&str]) -> Server {
    let mut cmd = Command::new(crate::bins::exporter());
    cmd.args(["--listen", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    Server::spawn(cmd)
}

/// Runs `cmd` to its end and returns its stdout; panics, showing the command and its
/// stderr, when it cannot be started or does not exit successfully.
pub fn stdout_of(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
