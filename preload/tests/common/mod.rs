//! Shared by the preload's integration tests: the built library and workspace binaries,
//! and a scratch segment directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>`, from the running test executable (`target/<profile>/deps/<exe>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps")
        .to_path_buf()
}

/// Runs `cargo build --quiet <args>` in this test's target directory and profile (a no-op
/// when fresh) and returns `target/<profile>`.
fn cargo_build(args: &[&str]) -> PathBuf {
    let profile = profile_dir();
    let target = profile.parent().expect("target dir").to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet"])
        .args(args)
        .env("CARGO_TARGET_DIR", &target);
    if profile.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "cargo build {args:?} failed: {status}");
    profile
}

fn artifact(built: &'static OnceLock<PathBuf>, args: &[&str], name: &str) -> PathBuf {
    let p = built.get_or_init(|| cargo_build(args)).join(name);
    assert!(p.is_file(), "{} missing after build", p.display());
    p
}

static PRELOAD: OnceLock<PathBuf> = OnceLock::new();
static READERS: OnceLock<PathBuf> = OnceLock::new();
const READER_BINS: &[&str] = &["--bins", "-p", "hydra-probe-cli", "-p", "hydra-exporter"];

/// `libhydra_preload.so`.
pub fn preload_so() -> PathBuf {
    artifact(
        &PRELOAD,
        &["--lib", "-p", "hydra-preload"],
        "libhydra_preload.so",
    )
}

/// The `hydra-probe` binary.
pub fn probe() -> PathBuf {
    artifact(&READERS, READER_BINS, "hydra-probe")
}

/// The `hydra-exporter` binary.
pub fn exporter() -> PathBuf {
    artifact(&READERS, READER_BINS, "hydra-exporter")
}

/// Whether a missing external prerequisite may skip a test (`HYDRA_ALLOW_SKIP=1`).
pub fn allow_skip() -> bool {
    std::env::var("HYDRA_ALLOW_SKIP").is_ok_and(|v| v == "1")
}

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

/// `hydra-probe meta <engine> <slot>` parsed as JSON; panics with the probe's output on failure.
pub fn probe_meta(dir: &Path, engine: &str, slot: usize) -> serde_json::Value {
    let (code, out) = run_probe(dir, &["meta", engine, &slot.to_string()]);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("hydra-probe meta {engine} {slot} (exit {code}): {e}: {out}"))
}
