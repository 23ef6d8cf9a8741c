//! The CUDA build of `hydra-engine` (`--features cuda`) on a machine without a GPU, as CI
//! runs it: `--device cuda:0` exits at once with one clear line and status 3, and
//! `--device cpu` serves as the CPU build does. The CPU build refuses `cuda:0` the same way.
//!
//! The binary is not this test crate's own (that one is built without CUDA): it is the one
//! `scripts/build-cuda.sh build` leaves, named by `HYDRA_CUDA_ENGINE`, run with
//! `LD_LIBRARY_PATH` set to `HYDRA_CUDA_LIBRARY_PATH` (the toolkit's libraries and its
//! driver stub; `scripts/build-cuda.sh env` prints both and `scripts/test.sh` sets them).
//! Without them the tests fail, unless `HYDRA_ALLOW_SKIP=1`.

use crate::support;

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hydra_fault::process::Server;
use support::{agent, call};

/// Status `hydra-engine` exits with when the device cannot be used (see its `--help`).
const EXIT_DEVICE: i32 = 3;

/// The CUDA binary and the library path to run it with, or `None` (skip allowed).
fn cuda_engine(test: &str) -> Option<(PathBuf, String)> {
    let found = std::env::var_os("HYDRA_CUDA_ENGINE")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .zip(std::env::var("HYDRA_CUDA_LIBRARY_PATH").ok());
    hydra_fault::require::or_skip(
        test,
        found,
        "the CUDA build of hydra-engine is missing (HYDRA_CUDA_ENGINE, HYDRA_CUDA_LIBRARY_PATH)",
        "run `eval \"$(scripts/build-cuda.sh env)\"`, which builds it once",
    )
}

fn command(binary: &PathBuf, library_path: &str, dir: &std::path::Path, device: &str) -> Command {
    let mut cmd = Command::new(binary);
    cmd.args([
        "serve",
        "--builtin",
        "--listen",
        "127.0.0.1:0",
        "--threads",
        "1",
    ])
    .args(["--device", device, "--progress-dir"])
    .arg(dir)
    .env("LD_LIBRARY_PATH", library_path)
    .env("RUST_LOG", "warn")
    .env_remove("RUST_BACKTRACE");
    cmd
}

/// Runs `serve --device cuda:0` (bounded), asserts it exits with status 3, serves nothing,
/// creates no segment and says why on one stderr line; returns that line.
fn refuses_cuda(binary: &PathBuf, library_path: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = command(binary, library_path, dir.path(), "cuda:0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the engine");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not exit within 60 s", binary.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let context = format!("status {status:?}\nstdout:\n{out}\nstderr:\n{err}");
    assert_eq!(status.code(), Some(EXIT_DEVICE), "{context}");
    assert!(out.is_empty(), "nothing is served: {context}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {context}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no segment is created: {context}"
    );
    lines[0].to_string()
}

#[test]
fn cuda_device_without_a_gpu_is_one_line_and_exit_status_3() {
    let Some((binary, library_path)) = cuda_engine("cuda_device_without_a_gpu") else {
        return;
    };
    let line = refuses_cuda(&binary, &library_path);
    assert!(
        line.starts_with("hydra-engine: cannot open device cuda:0: "),
        "{line}"
    );
    assert!(!line.contains("no CUDA support"), "a CUDA build: {line}");
}

#[test]
fn cpu_build_refuses_cuda_with_exit_status_3() {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_hydra-engine"));
    let line = refuses_cuda(&binary, "");
    assert!(
        line.starts_with("hydra-engine: invalid device \"cuda:0\": this build has no CUDA support"),
        "{line}"
    );
}

#[test]
fn cpu_device_serves_from_the_cuda_build() {
    let Some((binary, library_path)) = cuda_engine("cpu_device_serves_from_the_cuda_build") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&binary, &library_path, dir.path(), "cpu");
    cmd.stderr(Stdio::inherit());
    let mut server = Server::spawn(cmd);
    let (status, body) = call(agent().get(&server.url("/health")), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["device"], "cpu", "{body}");
    let (status, body) = call(
        agent().post(&server.url("/completion")),
        Some(r#"{"prompt":"hello","n_predict":4}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tokens_predicted"], 4, "{body}");
    assert!(
        dir.path().join("engine-0.hps").is_file(),
        "the segment is published"
    );
    assert!(server.terminate().success(), "clean exit on SIGTERM");
}
