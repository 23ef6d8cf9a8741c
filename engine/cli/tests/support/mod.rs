//! Harness for tests that run the engine as a separate process: the engine child (killed
//! and reaped on drop) and the `hydra-probe` binary, on top of the fault suite's process
//! harness (`hydra_fault::process`, `hydra_fault::http`), which the two share.
// Each test crate uses a different part of this harness.
#![allow(dead_code, unused_imports)]

pub use hydra_fault::http::{agent, call};
use hydra_fault::process::Server;
pub use hydra_fault::wait_for;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `hydra-probe` binary (built once per test process, see `hydra_fault::bins`).
pub fn probe_bin() -> PathBuf {
    hydra_fault::bins::probe()
}

/// `hydra-probe ARGS --dir DIR`, its stdout parsed as one JSON value.
pub fn probe_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(probe_bin())
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run hydra-probe");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "hydra-probe {args:?}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A running `hydra-engine serve`, killed and reaped on drop.
pub struct Engine {
    server: Server,
    pub base: String,
    pub dir: PathBuf,
    pub id: String,
    /// The folder [`Engine::in_scratch`] made for it (`dir`), removed after the engine is
    /// gone (the fields drop in order).
    scratch: Option<tempfile::TempDir>,
}

impl Engine {
    /// Starts the engine on the embedded model (one compute thread) and waits until it
    /// listens.
    pub fn start(dir: &Path, id: &str, extra: &[&str]) -> Engine {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
        cmd.args(["serve", "--builtin", "--engine-id", id])
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .arg("--progress-dir")
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit());
        let server = Server::spawn(cmd);
        Engine {
            base: server.base.clone(),
            server,
            dir: dir.to_path_buf(),
            id: id.to_string(),
            scratch: None,
        }
    }

    /// [`Engine::start`] in a scratch folder of its own (`dir`), removed with the engine.
    pub fn in_scratch(id: &str, extra: &[&str]) -> Engine {
        let scratch = hydra_fault::scratch("hydra-engine-test");
        let engine = Engine::start(scratch.path(), id, extra);
        Engine {
            scratch: Some(scratch),
            ..engine
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    pub fn segment(&self) -> PathBuf {
        self.dir.join(format!("{}.hps", self.id))
    }

    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.server.terminate()
    }
}

/// `hydra-engine serve --builtin ARGS --progress-dir DIR` run to its end, for an engine
/// that must not start: it failed; its exit code and standard error.
pub fn serve_refused(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hydra-engine"))
        .args(["serve", "--builtin"])
        .args(args)
        .arg("--progress-dir")
        .arg(dir)
        .output()
        .expect("run");
    assert!(!out.status.success(), "the engine started: {args:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

pub fn post(e: &Engine, path: &str, body: &str) -> (u16, serde_json::Value) {
    call(agent().post(&e.url(path)), Some(body))
}

pub fn get(e: &Engine, path: &str) -> (u16, serde_json::Value) {
    call(agent().get(&e.url(path)), None)
}

/// `curl -N` POSTing `body` to `url`: the raw stream.
pub fn curl_stream(test: &str, url: &str, body: &str) -> Option<String> {
    let curl = hydra_fault::require::tool(test, "curl", "apt-get install curl")?;
    let out = hydra_fault::process::stdout_of(
        Command::new(curl)
            .args(["-sS", "-N", "--max-time", "120"])
            .args(["-H", "Content-Type: application/json"])
            .args(["-d", body, url]),
    );
    Some(String::from_utf8(out).expect("UTF-8 stream"))
}

/// The `data:` payloads of a server-sent-event stream; every event is one `data:` line
/// and a blank line.
pub fn sse_data(stream: &str) -> Vec<String> {
    assert!(
        stream.ends_with("\n\n"),
        "events end with a blank line: {stream:?}"
    );
    stream
        .split("\n\n")
        .filter(|e| !e.is_empty() && !e.starts_with(':'))
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}
