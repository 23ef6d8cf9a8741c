//! Shared by the preload's integration tests: the built library and the probe binary
//! (built by `hydra_fault::bins` in this test's target directory and profile), a
//! `hydra-probe` runner, and the compile-and-run harness of the C hosts over a stand-in
//! libllama (`fake_host.rs`, `fake_layers.rs`).

#![allow(dead_code)]

pub mod llama;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use hydra_fault::bins::{preload_library as preload_so, probe};

/// Runs `hydra-probe <args> --dir <dir>` and returns (exit code, stdout).
pub fn run_probe(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(probe())
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run hydra-probe");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout)
}

/// `libhydra_preload.so` built with the `test-hooks` feature (its log and its stall
/// fault), in a target directory of its own beside this test's, so the release-shaped
/// library of the suite is never replaced by it.
pub fn preload_so_with_test_hooks() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let profile = hydra_fault::bins::profile_dir();
            let name = profile.file_name().expect("profile name").to_owned();
            let target = profile
                .parent()
                .expect("target dir")
                .join("preload-test-hooks");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "hydra-preload", "--lib"])
                .args(["--features", "test-hooks", "--target-dir"])
                .arg(&target);
            if name == "release" {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "building the test-hooks preload failed");
            let so = target.join(name).join("libhydra_preload.so");
            assert!(so.is_file(), "{} missing after build", so.display());
            so
        })
        .clone()
}

/// Compiles a stand-in C host and its libraries into `dir` with the C compiler (`$CC`, else
/// `cc`): each of `libraries` (`(name, source, libraries it links)`, in build order) as
/// `lib<name>.so`, then `host.c` linked with all of them (the last built first); sources
/// are in `fake`. Returns the host; `None` when no compiler runs. A compile that fails is
/// a test failure, with the compiler's output.
pub fn compile_host(
    dir: &Path,
    fake: &str,
    libraries: &[(&str, &str, &[&str])],
) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let d = dir.to_str().expect("utf-8 temp dir");
    let linking = |names: &mut dyn Iterator<Item = &str>| {
        let mut args = vec![format!("-L{d}")];
        args.extend(names.map(|n| format!("-l{n}")));
        args.push(format!("-Wl,-rpath,{d}"));
        args
    };
    let mut steps: Vec<Vec<String>> = vec![];
    for (name, source, links) in libraries {
        let mut args: Vec<String> = ["-shared", "-fPIC", "-O1", "-o"].map(String::from).into();
        args.extend([format!("{d}/lib{name}.so"), format!("{fake}/{source}")]);
        if !links.is_empty() {
            args.extend(linking(&mut links.iter().copied()));
        }
        steps.push(args);
    }
    let mut host: Vec<String> = ["-O1", "-o"].map(String::from).into();
    host.extend([format!("{d}/host"), format!("{fake}/host.c")]);
    host.extend(linking(&mut libraries.iter().rev().map(|l| l.0)));
    steps.push(host);
    for args in steps {
        let out = Command::new(&cc).args(&args).output().ok()?;
        assert!(
            out.status.success(),
            "{cc} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(dir.join("host"))
}

/// A C host built in a temporary directory, with the preload to run it under and the
/// segment directory to point it at (inside the temporary directory).
pub struct FakeHost {
    pub tmp: tempfile::TempDir,
    pub host: PathBuf,
    pub so: PathBuf,
    pub seg: PathBuf,
}

/// Builds the C host with `compile` in a fresh temporary directory; `None` (the test
/// skips) only without a C compiler and with `HYDRA_ALLOW_SKIP=1`. `libraries` names what
/// the host runs over, for the message.
pub fn fake_host(
    test: &str,
    compile: impl FnOnce(&Path) -> Option<PathBuf>,
    libraries: &str,
) -> Option<FakeHost> {
    let tmp = tempfile::tempdir().unwrap();
    let host = hydra_fault::require::or_skip(
        test,
        compile(tmp.path()),
        &format!("no C compiler (cc, or $CC) to build {libraries}"),
        "apt-get install gcc",
    )?;
    let seg = tmp.path().join("segments");
    Some(FakeHost {
        tmp,
        host,
        so: preload_so(),
        seg,
    })
}

/// Runs a C host set up in `cmd`: on each `checkpoint NAME` line it prints, calls
/// `at_checkpoint(NAME)` and then lets it go on. The host must exit successfully within
/// 30 s; returns every line it printed and its stderr.
pub fn run_host(mut cmd: Command, mut at_checkpoint: impl FnMut(&str)) -> (Vec<String>, String) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn host");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = vec![];
    for line in stdout.lines() {
        let line = line.expect("host stdout");
        if let Some(name) = line.strip_prefix("checkpoint ") {
            at_checkpoint(name);
            stdin.write_all(b"go\n").expect("resume host");
        }
        lines.push(line);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait host") {
            break s;
        }
        assert!(Instant::now() < deadline, "host did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).unwrap();
    assert!(status.success(), "host failed: {status}\n{err}");
    (lines, err)
}
