//! Command-line arguments.

use crate::thresholds::{parse_duration, Thresholds};
use clap::{Args, Parser, Subcommand};
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

/// Classification threshold flags, reusable by any tool that classifies (the exporter
/// flattens this into its own parser). Unset flags keep [`Thresholds::default`].
#[derive(Debug, Clone, Default, Args)]
pub struct ThresholdArgs {
    /// Shortest silence that can make an active slot stalled [default: 30s]
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub stall_floor: Option<Duration>,
    /// Stalled after this many expected step times of silence (if above the floor) [default: 10]
    #[arg(long, global = true, value_name = "K", value_parser = parse_factor)]
    pub stall_factor: Option<f64>,
    /// A progressing slot whose ETA exceeds this is slow (e.g. 120, 90s, 5m) [default: none]
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_duration)]
    pub budget: Option<Duration>,
    /// Heartbeat age beyond which a live engine with no progressing slot is hung [default: 30s]
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub heartbeat_timeout: Option<Duration>,
}

impl ThresholdArgs {
    /// The thresholds: defaults overridden by the flags given.
    pub fn thresholds(&self) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            stall_floor: self.stall_floor.unwrap_or(d.stall_floor),
            stall_factor: self.stall_factor.unwrap_or(d.stall_factor),
            budget: self.budget.or(d.budget),
            heartbeat_timeout: self.heartbeat_timeout.unwrap_or(d.heartbeat_timeout),
        }
    }
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(k) if k.is_finite() && k > 0.0 => Ok(k),
        _ => Err(format!(
            "invalid factor {s:?}: expected a positive number such as 10"
        )),
    }
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
