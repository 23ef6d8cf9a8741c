//! Harness for tests that run the engine as a separate process: a scratch progress
//! directory, the engine child (killed and reaped on drop), a small HTTP client, and the
//! `hydra-probe` binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace's target directory for this build profile (`target/debug`), derived from
/// the test executable's path (`target/debug/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<exe>")
        .to_path_buf()
}

/// The `hydra-probe` binary, built once per test process with the same cargo and target
/// directory (binaries of dependencies are not built for tests by cargo itself).
pub fn probe_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("target dir").to_path_buf();
        let release = profile.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "hydra-probe",
            "--bin",
            "hydra-probe",
        ])
        .env("CARGO_TARGET_DIR", &target);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build for hydra-probe");
        assert!(status.success(), "building hydra-probe failed");
        let bin = profile.join("hydra-probe");
        assert!(bin.is_file(), "{} missing after build", bin.display());
        bin
    })
    .clone()
}

/// A running `hydra-engine serve`, killed and reaped on drop.
pub struct Engine {
    pub child: Option<Child>,
    pub base: String,
    pub dir: PathBuf,
    pub id: String,
}

impl Engine {
    /// Starts the engine on the embedded model and waits until it listens.
    pub fn start(dir: &Path, id: &str, extra: &[&str]) -> Engine {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
        cmd.args([
            "serve",
            "--builtin",
            "--engine-id",
            id,
            "--listen",
            "127.0.0.1:0",
            "--threads",
            "1",
        ])
        .arg("--progress-dir")
        .arg(dir)
        .args(extra)
        .env("HYDRA_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn hydra-engine");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("engine did not report its address within 60 s (exit: {status:?})");
            }
        };
        Engine {
            child: Some(child),
            base,
            dir: dir.to_path_buf(),
            id: id.to_string(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn segment(&self) -> PathBuf {
        self.dir.join(format!("{}.hps", self.id))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
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
                panic!("engine did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build()
}

/// (status, body as JSON or as a string value) of a request, whatever the status.
pub fn call(req: ureq::Request, body: Option<&str>) -> (u16, serde_json::Value) {
    let resp = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    };
    let status = resp.status();
    let text = resp.into_string().expect("body");
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, json)
}

pub fn post(e: &Engine, path: &str, body: &str) -> (u16, serde_json::Value) {
    call(agent().post(&e.url(path)), Some(body))
}

pub fn get(e: &Engine, path: &str) -> (u16, serde_json::Value) {
    call(agent().get(&e.url(path)), None)
}

/// Polls `f` until it returns Some, or panics after `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
