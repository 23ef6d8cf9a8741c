//! Classification threshold flags as clap arguments (feature `clap`), shared by every tool
//! that classifies: the `hydra-probe` CLI and the exporter flatten [`ThresholdArgs`] into
//! their own parsers.

use crate::classify::HUNG_RULE;
use crate::thresholds::{parse_duration, Thresholds};
use clap::Args;
use std::time::Duration;

/// Classification threshold flags, reusable by any tool that classifies (the exporter
/// flattens this into its own parser). Unset flags keep [`Thresholds::default`].
#[derive(Debug, Clone, Default, Args)]
pub struct ThresholdArgs {
    /// Shortest silence that can make an active slot stalled [default: 30s]
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub stall_floor: Option<Duration>,
    /// Stall floor when the writer's cost model is confident (format v1.2) [default: 1s]
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration)]
    pub confident_stall_floor: Option<Duration>,
    /// Largest error bound (0.5 = 50%) at which the writer's prediction is confident [default: 0.5]
    #[arg(long, global = true, value_name = "BOUND", value_parser = parse_factor)]
    pub confident_error: Option<f64>,
    /// A step running past this many times the writer's prediction is slow [default: 4]
    #[arg(long, global = true, value_name = "K", value_parser = parse_factor)]
    pub slow_factor: Option<f64>,
    /// Stalled after this many expected step (or layer) times of silence (if above the floor) [default: 10]
    #[arg(long, global = true, value_name = "K", value_parser = parse_factor)]
    pub stall_factor: Option<f64>,
    /// A progressing slot whose ETA exceeds this is slow (e.g. 120, 90s, 5m) [default: none]
    #[arg(long, global = true, value_name = "SECS", value_parser = parse_duration)]
    pub budget: Option<Duration>,
    /// The heartbeat timeout of the hung verdict (its help states the rule, `HUNG_RULE`).
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_duration,
          help = heartbeat_help())]
    pub heartbeat_timeout: Option<Duration>,
}

/// `--heartbeat-timeout`'s help: the flag and the hung rule, as [`HUNG_RULE`] states it.
fn heartbeat_help() -> String {
    format!("Heartbeat timeout of the hung verdict [default: 30s]; hung = {HUNG_RULE}")
}

impl ThresholdArgs {
    /// The thresholds: defaults overridden by the flags given.
    pub fn thresholds(&self) -> Thresholds {
        let d = Thresholds::default();
        Thresholds {
            stall_floor: self.stall_floor.unwrap_or(d.stall_floor),
            confident_stall_floor: self
                .confident_stall_floor
                .unwrap_or(d.confident_stall_floor),
            confident_error: self.confident_error.unwrap_or(d.confident_error),
            slow_factor: self.slow_factor.unwrap_or(d.slow_factor),
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
