//! `hydra-fault-corpus`: writes the hostile-file corpus ([`hydra_fault::corpus`]) into a
//! directory, for readers that are not Rust (the C# library's tests), with a manifest of
//! what each reader must do with each entry.
//!
//! `DIR/segments/<engine_id>.hps` are the entries, `DIR/outside/` the targets of the
//! symbolic links, and `DIR/manifest.tsv` has one line per entry:
//!
//! ```text
//! <engine_id> TAB refused TAB <C ABI codes, comma-separated> TAB <what was done>
//! <engine_id> TAB readable TAB - TAB <what was done>
//! ```
//!
//! The codes are the `HYDRA_PROBE_E_*` values a reader of the C ABI may get when it opens a
//! refused entry (the corpus's expected error kinds, mapped by [`hydra_fault::corpus::c_code`]).

use anyhow::Context as _;
use clap::Parser;
use hydra_fault::corpus::{self, Expect};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Writes the hostile segment corpus and its manifest into a new directory.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Directory to create (it must not exist yet, or be empty); gets `segments/`,
    /// `outside/` and `manifest.tsv`.
    dir: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let not_empty = std::fs::read_dir(&args.dir)
        .with_context(|| format!("read {}", args.dir.display()))?
        .next()
        .is_some();
    anyhow::ensure!(
        !not_empty,
        "{} is not empty: give a new or empty directory",
        args.dir.display()
    );
    let segments = args.dir.join("segments");
    let outside = args.dir.join("outside");
    for d in [&segments, &outside] {
        std::fs::create_dir(d).with_context(|| format!("create {}", d.display()))?;
    }
    let cases = corpus::build(&segments, &outside);
    let mut manifest = String::new();
    for case in &cases {
        // Tabs and newlines cannot occur in ids or descriptions; keep the format safe anyway.
        let name = case.name.replace(['\t', '\n'], " ");
        match case.expect {
            Expect::Refused(kinds) => {
                let codes: BTreeSet<i32> = kinds.iter().map(|k| corpus::c_code(*k)).collect();
                let codes: Vec<String> = codes.iter().map(i32::to_string).collect();
                writeln!(
                    manifest,
                    "{}\trefused\t{}\t{name}",
                    case.engine_id,
                    codes.join(",")
                )?;
            }
            Expect::Readable => writeln!(manifest, "{}\treadable\t-\t{name}", case.engine_id)?,
        }
    }
    let path = args.dir.join("manifest.tsv");
    std::fs::write(&path, manifest).with_context(|| format!("write {}", path.display()))?;
    println!("{} entries in {}", cases.len(), segments.display());
    Ok(())
}
