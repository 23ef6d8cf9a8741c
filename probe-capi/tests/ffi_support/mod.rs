//! Shared harness of the C tests (the C ABI tests of probe-capi and layout-capi, and the
//! header check of the layout crate): finds the C libraries that this test build made, and
//! compiles C programs against them with the system C compiler.
//!
//! - The libraries are found next to this test binary (`<target>/<profile>/deps/`), so the
//!   target directory and profile are right whether or not `CARGO_TARGET_DIR` is set, and
//!   the library is always the one built from the current sources (see [`library`]).
//! - The C compiler is `$CC` (split on whitespace) or `cc`; if none runs, the test FAILS
//!   with a message saying so (a silently skipped ABI test would let the ABI rot).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Flags every C source must compile cleanly with.
pub const CFLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"];

/// System libraries a Rust staticlib needs on Linux (`--print native-static-libs`).
pub const STATIC_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// The workspace root.
pub fn workspace() -> PathBuf {
    // Every crate that uses this harness (probe-capi, layout-capi, layout) sits at the
    // workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `<target>/<profile>`: the directory above this test binary's `deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    assert_eq!(
        deps.file_name().and_then(|n| n.to_str()),
        Some("deps"),
        "unexpected test binary location {}",
        exe.display()
    );
    deps.parent().expect("profile directory").to_path_buf()
}

/// Library `lib<name>.a` (or `.so` with `shared`) of the crate under test, as this very
/// test build made it.
///
/// A crate with a cdylib target gets output files *without* a hash (cargo keeps shared
/// library names stable), so cargo writes them to `<target>/<profile>/deps/lib<name>.*`
/// whenever it builds the library for the tests. Those are exactly the files this test
/// binary was linked with. A nested `cargo build` into the same target directory would be
/// worse than useless here: built with other features (no dev-dependencies), it would
/// overwrite the hash-less `deps/lib<name>.rlib` that later builds (doctests, relinks)
/// then pick up, mismatched.
pub fn library(name: &str, shared: bool) -> PathBuf {
    let file = if shared {
        format!("lib{name}.so")
    } else {
        format!("lib{name}.a")
    };
    let path = profile_dir().join("deps").join(file);
    assert!(
        path.exists(),
        "{} missing: cargo builds it with this test (crate-type cdylib and staticlib); \
         was the crate-type removed from Cargo.toml?",
        path.display()
    );
    path
}

/// The reader library (`libhydra_probe_ffi`).
pub fn probe_lib(shared: bool) -> PathBuf {
    library("hydra_probe_ffi", shared)
}

/// The writer library (`libhydra_writer`).
pub fn writer_lib(shared: bool) -> PathBuf {
    library("hydra_writer", shared)
}

/// Compiles `source` against `include/` and the static `libs` into `out_dir`.
pub fn compile_c(source: &Path, out_dir: &Path, libs: &[PathBuf]) -> PathBuf {
    let binary = out_dir.join(source.file_stem().expect("source name"));
    let cc = std::env::var("CC").unwrap_or_default();
    let mut words = cc.split_whitespace();
    let program = words.next().unwrap_or("cc").to_owned();
    let mut cmd = Command::new(&program);
    cmd.args(words)
        .args(CFLAGS)
        .arg("-I")
        .arg(workspace().join("include"))
        .arg(source)
        .args(libs)
        .args(STATIC_LIBS)
        .arg("-o")
        .arg(&binary);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "no working C compiler: could not run {program:?} ({e}). The C ABI tests need \
             one; install cc/gcc/clang or point $CC at one."
        )
    });
    assert!(
        out.status.success(),
        "compiling {} failed ({cmd:?}):\n{}",
        source.display(),
        show(&out)
    );
    binary
}

/// stdout and stderr of a finished command, for failure messages.
pub fn show(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
