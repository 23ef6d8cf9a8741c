//! Shared by the preload's integration tests: the built library and the probe binary
//! (built by `hydra_fault::bins` in this test's target directory and profile), and a
//! `hydra-probe` runner.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

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
