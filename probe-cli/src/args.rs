//! Command-line arguments.

use clap::{Parser, Subcommand};
use hydra_probe::{parse_duration, ThresholdArgs};
use std::path::PathBuf;
use std::time::Duration;

/// Reads hydra-progress segments: what every engine slot on this host is doing, and whether
/// it is progressing, slow, stalled or dead, without asking the engine.
///
/// Exit status: 0 ok; 1 warning (check: something slow); 2 critical (check: something
/// stalled, dead, hung, orphaned or torn); 3 unknown or error (usage errors included).
#[derive(Debug, Clone, Parser)]
#[command(name = "hydra-probe", version, max_term_width = 100)]
pub struct Cli {
    /// Segment directory [default: $HYDRA_PROGRESS_DIR, else /dev/shm/hydra-progress]
    #[arg(long, global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of text (`meta` always prints JSON)
    #[arg(long, global = true)]
    pub json: bool,
    /// Classification thresholds.
    #[command(flatten)]
    pub thresholds: ThresholdArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// List every engine found: id, pid, health, model, busy/total slots, heartbeat age
    List,
    /// Show one engine's slots: phase, progress, rate, ETA, last-progress age, class
    Show {
        /// Engine id or path to a segment file (may be omitted when only one engine exists)
        engine: Option<String>,
        /// Only this slot
        #[arg(long, value_name = "N")]
        slot: Option<usize>,
    },
    /// Latency histograms (p50/p90/p99) and counters of one engine, its slots summed
    /// (format v1.3 statistics, kept by the writer since the segment was created)
    Stats {
        /// Engine id or path to a segment file (may be omitted when only one engine exists)
        engine: Option<String>,
        /// Only this slot
        #[arg(long, value_name = "N")]
        slot: Option<usize>,
    },
    /// The last steps of each slot from its flight recorder (format v1.3): kind, result,
    /// start, duration against the prediction, layers, device waits; a dead engine's too
    History {
        /// Engine id or path to a segment file (may be omitted when only one engine exists)
        engine: Option<String>,
        /// Only this slot
        #[arg(long, value_name = "N")]
        slot: Option<usize>,
    },
    /// Write the slots' recent steps as Chrome Trace Event JSON (open it in
    /// ui.perfetto.dev or chrome://tracing): one track per slot, one event per step
    Trace {
        /// Engine id or path to a segment file (may be omitted when only one engine exists)
        engine: Option<String>,
        /// The file to write
        #[arg(short = 'o', long, value_name = "FILE")]
        output: std::path::PathBuf,
        /// Also sample the engine for this long first (every 100 ms): each slot's verdict
        /// when it changes, and its layer position
        #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: Option<u64>,
    },
    /// Print the Hydra meta JSON of one slot (the drop-in answer to STATE_META)
    Meta {
        /// Engine id or path to a segment file
        engine: String,
        /// Slot index
        slot: usize,
    },
    /// Live view of one engine, refreshed every --interval (Ctrl-C to stop)
    Watch {
        /// Engine id or path to a segment file (may be omitted when only one engine exists)
        engine: Option<String>,
        /// Refresh interval (e.g. 500ms, 2s)
        #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_interval)]
        interval: Duration,
        /// Stop after this many refreshes
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Health check of one engine (or all): exit 0 healthy, 1 slow, 2 stalled/dead/hung/
    /// orphaned/torn, 3 unknown; one line per finding
    Check {
        /// Engine id or path to a segment file [default: every engine in the directory]
        engine: Option<String>,
    },
    /// Remove segments of dead engines and stale creation temporaries (never a live one)
    Gc {
        /// Only print what would be removed
        #[arg(long)]
        dry_run: bool,
    },
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("interval {s:?} is too short (minimum 10ms)"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use hydra_probe::Thresholds;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn threshold_flags_override_defaults() {
        let cli = Cli::try_parse_from([
            "hydra-probe",
            "check",
            "--stall-floor",
            "5s",
            "--stall-factor",
            "4",
            "--budget",
            "120",
        ])
        .unwrap();
        let t = cli.thresholds.thresholds();
        assert_eq!(t.stall_floor, Duration::from_secs(5));
        assert_eq!(t.stall_factor, 4.0);
        assert_eq!(t.budget, Some(Duration::from_secs(120)));
        assert_eq!(t.heartbeat_timeout, Thresholds::default().heartbeat_timeout);
        assert!(Cli::try_parse_from(["hydra-probe", "check", "--stall-factor", "-1"]).is_err());
        assert!(Cli::try_parse_from(["hydra-probe", "watch", "--interval", "1ms"]).is_err());
    }
}
