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
