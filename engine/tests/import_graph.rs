//! The engine's modules import one another without circles (outside the binary's demo):
//! `scripts/import-cycles.py` draws the `use crate::` / `super::` graph of `engine/src`
//! and lists its strongly connected components.

use std::path::Path;
use std::process::Command;

#[test]
fn engine_modules_import_one_another_without_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/import-cycles.py"))
        .arg(root.join("engine/src"))
        .args(["--exclude", "demo"])
        .output()
        .expect("run python3 scripts/import-cycles.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "import circles in engine/src:\n{text}"
    );
    assert!(text.contains(" 0 circles"), "{text}");
}
