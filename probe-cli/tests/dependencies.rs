//! The command line's dependencies stay with the command line: `cargo tree -e normal` of the
//! reader C ABI, the exporter and the engine must not reach the crates only the
//! `hydra-probe` binary needs, nor build the probe library with its clap feature where no
//! clap parser flattens its flags.

use std::path::Path;
use std::process::Command;

/// `cargo tree -e normal -p <package>`: one `name version features` line per crate.
fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = hydra_fault::process::stdout_of(
        Command::new(&cargo)
            .current_dir(&root)
            .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
            .args(["--format", "{p} [{f}]", "-p", package]),
    );
    String::from_utf8(out)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn crate_line<'a>(lines: &'a [String], name: &str) -> Option<&'a String> {
    lines
        .iter()
        .find(|l| l.split_whitespace().next() == Some(name))
}

/// Crates only the `hydra-probe` binary links.
const CLI_ONLY: [&str; 2] = ["indicatif", "ctrlc"];

#[test]
fn the_reader_c_abi_links_no_command_line_crate() {
    let lines = tree("hydra-probe-capi");
    for name in CLI_ONLY
        .iter()
        .chain(&["clap", "anyhow", "hydra-probe-cli"])
    {
        assert!(
            crate_line(&lines, name).is_none(),
            "hydra-probe-capi links {name}:\n{}",
            lines.join("\n")
        );
    }
    let probe = crate_line(&lines, "hydra-probe").expect("the C ABI reads with hydra-probe");
    assert!(probe.ends_with("[]"), "hydra-probe with features: {probe}");
}

#[test]
fn the_exporter_and_the_engine_link_no_probe_cli_crate() {
    for package in ["hydra-exporter", "hydra-engine"] {
        let lines = tree(package);
        assert!(
            crate_line(&lines, "hydra-probe-cli").is_none(),
            "{package} links the hydra-probe CLI"
        );
        if package == "hydra-exporter" {
            // The exporter parses its flags with clap and flattens the probe's threshold
            // flags into them; nothing of the probe's binary comes along.
            for name in CLI_ONLY {
                assert!(crate_line(&lines, name).is_none(), "{package} links {name}");
            }
        } else {
            let probe = crate_line(&lines, "hydra-probe").expect("the engine classifies");
            assert!(!probe.contains("clap"), "{package}: {probe}");
        }
    }
}

#[test]
fn the_binary_is_where_the_command_line_crates_are() {
    let lines = tree("hydra-probe-cli");
    for name in CLI_ONLY.iter().chain(&["clap", "anyhow"]) {
        assert!(
            crate_line(&lines, name).is_some(),
            "hydra-probe-cli lacks {name}"
        );
    }
}
