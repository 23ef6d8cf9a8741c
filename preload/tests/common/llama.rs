//! llama.cpp as the preload's tests run it: the cached builds of both API generations
//! (`scripts/llama-cpp.sh`), a `llama-server` child with or without the preload, its ggml
//! RPC peers on loopback ports, and the HTTP calls the tests make.

use hydra_fault::require;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A test of each scenario against each llama.cpp generation: `$current` for the current
/// one, `$legacy` for the legacy one, each passing its own name to the scenario (`use
/// common::llama::*` brings it and [`Gen`]).
#[allow(unused_macros)] // only the real-server test binaries define scenarios
macro_rules! on_both_builds {
    ($($scenario:ident: $current:ident, $legacy:ident;)*) => {$(
        #[test]
        fn $current() {
            $scenario(stringify!($current), Gen::Current);
        }

        #[test]
        fn $legacy() {
            $scenario(stringify!($legacy), Gen::Legacy);
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use on_both_builds;

/// One llama-server at a time: each uses both cores.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// The engine id the preloaded servers publish under.
pub const ENGINE: &str = "llama-preload-test";

/// SmolLM2-135M's transformer layers.
pub const N_LAYER: u64 = 30;

/// A llama.cpp API generation, and the `scripts/llama-cpp.sh` command that builds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gen {
    /// 0c1e570: `llama_process` over `llama_batch_ext`.
    Current,
    /// The llama.cpp of llama-cpp-python 0.3.16: `llama_decode(ctx, llama_batch)`.
    Legacy,
}

impl Gen {
    /// The `scripts/llama-cpp.sh` command that builds it (and prints its prefix).
    pub fn build_command(self) -> &'static str {
        match self {
            Gen::Current => "build",
            Gen::Legacy => "legacy-build",
        }
    }

    /// The `scripts/llama-cpp.sh` command that names its ggml RPC peer binary.
    fn rpc_server_command(self) -> &'static str {
        match self {
            Gen::Current => "rpc-server",
            Gen::Legacy => "legacy-rpc-server",
        }
    }

    /// Its ggml RPC peer binary in `prefix` (`ggml-rpc-server`, `rpc-server`), as the
    /// build script names it.
    pub fn rpc_server(self, prefix: &Path) -> PathBuf {
        let name = llama_cpp_sh(self.rpc_server_command()).expect("the RPC peer's name");
        prefix.join("bin").join(name)
    }
}

/// `scripts/llama-cpp.sh <command>`'s output (its progress goes to the test's stderr);
/// `None` when it fails.
fn llama_cpp_sh(command: &str) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/llama-cpp.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(command)
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The install prefix of `gen` from `scripts/llama-cpp.sh` (returns at once when cached);
/// `None` if it cannot be had.
pub fn llama_prefix(gen: Gen) -> Option<PathBuf> {
    let prefix = PathBuf::from(llama_cpp_sh(gen.build_command())?);
    prefix.join("bin/llama-server").is_file().then_some(prefix)
}

/// What a test needs: the turn to run a llama-server (one at a time), the llama.cpp
/// prefix, the model and the preload library; or a skip (only with HYDRA_ALLOW_SKIP=1).
pub fn prerequisites(
    test: &str,
    gen: Gen,
) -> Option<(MutexGuard<'static, ()>, PathBuf, PathBuf, PathBuf)> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = require::or_skip(
        test,
        llama_prefix(gen),
        "llama.cpp is missing (scripts/llama-cpp.sh build or legacy-build failed)",
        "run scripts/llama-cpp.sh build and scripts/llama-cpp.sh legacy-build",
    )?;
    let model = require::smollm2_gguf(test)?;
    Some((serial, prefix, model, super::preload_so()))
}

/// How a test starts llama-server.
pub struct Launch<'a> {
    /// The preload library, or none.
    pub preload: Option<&'a Path>,
    /// `-b 512 -ub 512` (prompts in 512-token calls) instead of the server's defaults
    /// (`-b 2048 -ub 512`: 2,048-token calls of four ubatches).
    pub small_batches: bool,
    /// More environment for the server.
    pub env: Vec<(&'static str, String)>,
    /// More arguments for the server (`--rpc a,b -ngl 99 -ts 1,1`).
    pub args: Vec<String>,
}

impl<'a> Launch<'a> {
    pub fn preloaded(so: &'a Path) -> Self {
        Self {
            preload: Some(so),
            small_batches: true,
            env: vec![],
            args: vec![],
        }
    }
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// A llama-server child, killed and reaped on drop; its log goes to a file.
pub struct LlamaServer {
    pub child: Child,
    pub base: String,
    pub log: PathBuf,
}

impl LlamaServer {
    pub fn start(prefix: &Path, model: &Path, scratch: &Path, launch: &Launch<'_>) -> Self {
        let port = free_port();
        let log = scratch.join(format!("llama-server-{port}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(prefix.join("bin/llama-server"));
        cmd.arg("-m")
            .arg(model)
            .args(["-np", "2", "-c", "8192", "-t", "2"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log fd"))
            .stderr(file);
        if launch.small_batches {
            cmd.args(["-b", "512", "-ub", "512"]);
        }
        cmd.args(&launch.args);
        if let Some(so) = launch.preload {
            cmd.env("LD_PRELOAD", so)
                .env("HYDRA_PROGRESS_DIR", scratch.join("segments"))
                .env("HYDRA_ENGINE_ID", ENGINE)
                .env("HYDRA_PRELOAD_IDLE_MS", "500")
                .envs(launch.env.iter().map(|(k, v)| (k, v)));
        }
        let child = cmd.spawn().expect("spawn llama-server");
        let mut s = LlamaServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Ok(r) = agent().get(&format!("{}/health", s.base)).call() {
                if r.status() == 200 {
                    break;
                }
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                panic!(
                    "llama-server exited ({status}) while starting:\n{}",
                    s.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy in 180 s:\n{}",
                s.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 llama-server");
        let _ = self.child.wait();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(900))
        .build()
}

/// POST /completion; returns the JSON answer.
pub fn complete(base: &str, body: serde_json::Value) -> Result<serde_json::Value, String> {
    let r = agent()
        .post(&format!("{base}/completion"))
        .send_json(body)
        .map_err(|e| e.to_string())?;
    r.into_json().map_err(|e| e.to_string())
}

/// A request body: greedy, fixed seed, on `slot`.
pub fn request(prompt: &str, n_predict: u32, slot: u32) -> serde_json::Value {
    serde_json::json!({
        "prompt": prompt,
        "n_predict": n_predict,
        "ignore_eos": true,
        "temperature": 0.0,
        "top_k": 1,
        "seed": 42,
        "id_slot": slot,
        "cache_prompt": false,
    })
}

/// About 18 tokens of prose, `n` times.
pub fn prose(n: usize) -> String {
    let s =
        "The quick brown fox jumps over the lazy dog while the farmer counts sheep in the valley. ";
    s.repeat(n)
}

/// About 3,000 tokens of prose.
pub fn long_prompt() -> String {
    prose(165)
}

/// A ggml RPC peer (`ggml-rpc-server`, `rpc-server`) on a loopback port, one CPU thread,
/// killed and reaped on drop (continued first, when a test left it stopped).
pub struct RpcPeer {
    pub child: Child,
    /// `127.0.0.1:<port>`, as llama-server's `--rpc` takes it.
    pub endpoint: String,
    pub log: PathBuf,
}

impl RpcPeer {
    /// Starts `gen`'s peer from `prefix` and waits (at most 30 s) until it accepts
    /// connections.
    pub fn start(gen: Gen, prefix: &Path, scratch: &Path) -> Self {
        let port = free_port();
        let log = scratch.join(format!("rpc-server-{port}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(gen.rpc_server(prefix))
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log fd"))
            .stderr(file)
            .spawn()
            .expect("spawn the RPC peer");
        let mut peer = Self {
            child,
            endpoint: format!("127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&peer.endpoint).is_err() {
            if let Ok(Some(status)) = peer.child.try_wait() {
                panic!("RPC peer exited ({status}):\n{}", peer.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "RPC peer not listening in 30 s:\n{}",
                peer.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        peer
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` to the peer (SIGSTOP, SIGCONT, SIGKILL).
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "signal {signal} to the RPC peer");
    }
}

impl Drop for RpcPeer {
    fn drop(&mut self) {
        // SAFETY: as in `signal`; a stopped peer must run again to die of SIGKILL promptly.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// llama-server's arguments that split the model's layers over `peers` evenly, all
/// layers offloaded: `--rpc a,b -ngl 99 -ts 1,1`.
pub fn rpc_split_args(peers: &[RpcPeer]) -> Vec<String> {
    let endpoints: Vec<&str> = peers.iter().map(|p| p.endpoint.as_str()).collect();
    let split = vec!["1"; peers.len()].join(",");
    ["--rpc", &endpoints.join(","), "-ngl", "99", "-ts", &split]
        .map(String::from)
        .to_vec()
}
