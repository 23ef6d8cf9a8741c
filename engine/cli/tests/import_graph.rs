//! The workspace's modules import one another without circles: inside the engine's three
//! crates (whose graph cargo itself keeps acyclic: the core imports neither the server nor
//! the binary) and inside each crate whose circles were broken (layout's
//! reader and writer, the exporter's collect, metrics and exposition), and the rest of the
//! readers and writers beside them. `scripts/import-cycles.py` draws each crate's
//! `use crate::` / `super::` graph and lists its strongly connected components.

use std::path::Path;
use std::process::Command;

/// Each crate's source folder, and the modules left out of its graph.
const CRATES: [(&str, &[&str]); 8] = [
    ("engine/core/src", &[]),
    ("engine/server/src", &[]),
    ("engine/cli/src", &["demo"]),
    ("layout/src", &[]),
    ("probe/src", &[]),
    ("probe-cli/src", &[]),
    ("exporter/src", &[]),
    ("preload/src", &[]),
];

#[test]
fn modules_import_one_another_without_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (src, excluded) in CRATES {
        let mut cmd = Command::new("python3");
        cmd.arg(root.join("scripts/import-cycles.py"))
            .arg(root.join(src));
        for module in excluded {
            cmd.args(["--exclude", module]);
        }
        let out = cmd.output().expect("run python3 scripts/import-cycles.py");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "import circles in {src}:\n{text}");
        assert!(text.contains(" 0 circles"), "{src}: {text}");
    }
}

/// The engine server's compute side never names a surface (`crate::llama`,
/// `crate::openai`) or the HTTP stack (`axum`): the two surfaces are leaves over it. Cargo
/// keeps the crates apart; inside the server crate, this test does.
#[test]
fn the_compute_side_imports_no_surface_and_no_http() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/src");
    let compute_side = [
        "compute.rs",
        "compute",
        "task.rs",
        "task",
        "task_error.rs",
        "progress",
        "layer_signal.rs",
        "config.rs",
        "cancel.rs",
    ];
    let mut files = Vec::new();
    for entry in compute_side {
        let path = src.join(entry);
        if path.is_dir() {
            for f in std::fs::read_dir(&path).expect("read the folder") {
                files.push(f.expect("an entry").path());
            }
        } else {
            files.push(path);
        }
    }
    assert!(files.len() >= 12, "the compute side's files: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read the file");
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for name in [
                "crate::llama",
                "crate::openai",
                "axum::",
                "super::llama",
                "super::openai",
            ] {
                assert!(
                    !code.contains(name),
                    "{}:{}: the compute side names {name}: {line}",
                    file.display(),
                    i + 1
                );
            }
        }
    }
}
