//! The `hydra-probe` command line over the `hydra-probe` library: argument types (clap
//! derive) and one function per subcommand. `main.rs` only parses, calls [`run`] and maps
//! the outcome to an exit status. A crate of its own so that clap, indicatif, ctrlc and
//! anyhow are linked by this binary only (`tests/dependencies.rs` checks it).
//!
//! A directory that does not exist or cannot be read is an error (exit 3, naming it) in
//! every subcommand that scans one; an empty directory is a host without engines.
//!
//! # Exit status (Nagios style)
//! | status | meaning |
//! |---|---|
//! | 0 | OK (and `--help`, `--version`, a closed output pipe) |
//! | 1 | WARNING: `check` found something slow |
//! | 2 | CRITICAL: `check` found something stalled, dead, hung, orphaned or torn |
//! | 3 | UNKNOWN: any error, usage errors included (unknown engine, unreadable file, ...) |

#![deny(missing_docs)]

mod args;
mod check;
mod gc;
mod history;
mod list;
mod meta;
mod output;
mod show;
mod stats;
mod trace;
mod watch;

pub use args::{Cli, Command};
pub use hydra_probe::ThresholdArgs;
pub use output::{clap_exit_code, is_broken_pipe, render_clap_error};

use std::io::Write;
use std::path::PathBuf;

/// Exit status of a successful run.
pub const EXIT_OK: u8 = 0;
/// Exit status of a health check that found something slow.
pub const EXIT_WARNING: u8 = 1;
/// Exit status of a health check that found something stalled, dead, hung, orphaned or torn.
pub const EXIT_CRITICAL: u8 = 2;
/// Exit status of every error (usage errors included).
pub const EXIT_UNKNOWN: u8 = 3;

/// What every subcommand needs: the resolved directory, output mode and thresholds.
#[derive(Debug, Clone)]
pub struct Context {
    /// Segment directory (`--dir`, else `$HYDRA_PROGRESS_DIR`, else the default).
    pub dir: PathBuf,
    /// Machine-readable output.
    pub json: bool,
    /// Classification thresholds.
    pub thresholds: hydra_probe::Thresholds,
}

/// Runs the parsed command line, writing to `out`; returns the exit status. Errors (exit 3)
/// are returned for `main` to print as one line.
pub fn run(cli: &Cli, out: &mut dyn Write) -> anyhow::Result<u8> {
    let ctx = Context {
        dir: hydra_layout::naming::resolve_dir(cli.dir.as_deref()),
        json: cli.json,
        thresholds: cli.thresholds.thresholds(),
    };
    let code = match &cli.command {
        Command::List => list::run(&ctx, out)?,
        Command::Show { engine, slot } => show::run(&ctx, engine.as_deref(), *slot, out)?,
        Command::Meta { engine, slot } => meta::run(&ctx, engine, *slot, out)?,
        Command::Stats { engine, slot } => stats::run(&ctx, engine.as_deref(), *slot, out)?,
        Command::History { engine, slot } => history::run(&ctx, engine.as_deref(), *slot, out)?,
        Command::Trace {
            engine,
            output,
            seconds,
        } => trace::run(&ctx, engine.as_deref(), output, *seconds, out)?,
        Command::Watch {
            engine,
            interval,
            count,
        } => watch::run(&ctx, engine.as_deref(), *interval, *count, out)?,
        Command::Check { engine } => check::run(&ctx, engine.as_deref(), out)?,
        Command::Gc { dry_run } => gc::run(&ctx, *dry_run, out)?,
    };
    out.flush()?;
    Ok(code)
}
