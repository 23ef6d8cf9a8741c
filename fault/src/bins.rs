//! The project's binaries, built once per test process.
//!
//! Cargo gives a test the binaries of its own package only, so the suite asks the same
//! cargo (`$CARGO`, set by `cargo test`) for `cargo test --workspace --no-run` in the same
//! target directory and profile as the test executable itself. That is exactly what
//! `cargo test --workspace` has already built (a no-op there) and it builds the three
//! binaries with the same features, dev-dependencies included: a plain `cargo build` of
//! the binaries would unify features differently and rebuild candle.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>`, derived from the running executable (`target/<profile>/deps/<exe>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("executable under target/<profile>/deps")
        .to_path_buf()
}

fn build_all() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let profile = profile_dir();
            let target = profile.parent().expect("target dir").to_path_buf();
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["test", "--quiet", "--workspace", "--no-run"])
                .env("CARGO_TARGET_DIR", &target);
            if profile.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo test --no-run");
            assert!(status.success(), "building the binaries failed: {status}");
            profile
        })
        .clone()
}

fn bin(name: &str) -> PathBuf {
    let path = build_all().join(name);
    assert!(path.is_file(), "{} missing after build", path.display());
    path
}

/// The `hydra-engine` binary.
pub fn engine() -> PathBuf {
    bin("hydra-engine")
}

/// The `hydra-probe` binary.
pub fn probe() -> PathBuf {
    bin("hydra-probe")
}

/// The `hydra-exporter` binary.
pub fn exporter() -> PathBuf {
    bin("hydra-exporter")
}

/// `libhydra_preload.so`, the `LD_PRELOAD` library: the cdylib of `hydra-preload`, which a
/// test build leaves in `deps/` (only `cargo build` copies it up a level).
pub fn preload_library() -> PathBuf {
    bin("deps/libhydra_preload.so")
}
