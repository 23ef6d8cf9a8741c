//! The knobs of the stuck / slow / dead classification, with their defaults and reasons.

use std::time::Duration;

/// Thresholds of the classification in [`crate::classify`].
///
/// A slot is **stalled** when it is active and nothing has moved (no step, no layer) for
/// longer than `max(floor, stall_factor x expected step or layer time)`, the floor being
/// `confident_stall_floor` when the writer's own prediction is confident and `stall_floor`
/// otherwise; it is **slow** when its step in flight runs past `slow_factor` times the
/// writer's prediction, or when it progresses but its ETA exceeds `budget`. The engine is **hung** when it is live, its loop heartbeat is
/// older than `heartbeat_timeout`, and every active slot is stalled.
///
/// Every comparison is strict ("longer than"): an age exactly equal to a threshold is still
/// healthy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Shortest silence that can make an active slot stalled. Default **30 s**.
    ///
    /// Why: a decode step takes tens of milliseconds, but the *first* step of a phase has no
    /// observed rate to predict it, and one prefill chunk (a full ubatch on a CPU, or a
    /// large model) can legitimately take tens of seconds. 30 s also rides out swapping,
    /// page-cache stalls and scheduler hiccups, while still answering six times faster than
    /// Hydra Core's 180 s decode budget and a hundred times faster than its 60 ms/token
    /// heuristic on long jobs.
    pub stall_floor: Duration,
    /// Shortest silence that can make an active slot stalled when the writer's cost model
    /// predicts the step in flight with an error bound of at most
    /// [`confident_error`](Self::confident_error) (format v1.2). Default **1 s**.
    ///
    /// Why: the reasons for 30 s are all about not knowing how long a step should take.
    /// A confident model knows it within its bound, and the factor below still allows ten
    /// times the prediction, so the floor only has to ride out the scheduler (a loaded
    /// machine deschedules a thread for tens of milliseconds, not seconds). 1 s turns a
    /// stopped 30 ms decode step into a verdict 30 times sooner than the old floor, and
    /// keeps the verdict under 2 s for a stall inside a prefill layer of a small model.
    pub confident_stall_floor: Duration,
    /// The largest error bound (1.0 = 100%) at which the writer's prediction counts as
    /// confident. Default **0.5**.
    ///
    /// Why: a bound of 50% still leaves the factor of ten five times the worst step the
    /// model expects; a model that misses by more (the first steps of a kind, a step shape
    /// never seen) gets the 30 s floor until it has learnt.
    pub confident_error: f64,
    /// A step in flight that runs longer than this many times the writer's prediction for
    /// it is slow, with or without a budget. Default **4**.
    ///
    /// Why: above the 2-3x a CPU hog or a cold cache causes (which the model learns within
    /// a few steps and which is not a fault), and below the stall factor, so that a step
    /// goes slow well before it could go stalled.
    pub slow_factor: f64,
    /// How many expected step times of silence make a slot stalled. Default **10**.
    ///
    /// Why: step times are not constant. Attention cost grows with context, so later prefill
    /// chunks and later decode tokens are slower than the average that predicts them;
    /// contention from other processes and thermal throttling add more. A factor of 10
    /// tolerates all of that, yet turns a 25 ms/token decode that stops into a verdict as
    /// soon as the floor allows.
    pub stall_factor: f64,
    /// The caller's deadline for the *remaining* work of a slot's phase: a progressing slot
    /// whose ETA (remaining work / observed rate) is longer than this is slow. Default
    /// **none** (nothing is ever slow).
    ///
    /// Why: slowness is relative to what the caller promised its own client (a chat turn,
    /// a batch job), which the probe cannot know; a built-in number would be wrong for most.
    pub budget: Option<Duration>,
    /// How old the engine loop's heartbeat may be before the engine can be called hung
    /// (together with every active slot stalled). Default **30 s**, the same as the floor.
    ///
    /// Why: the compute loop beats on every pass and while idle, so a live engine's beat is
    /// normally milliseconds old; inside one long step it is not, which is why "hung" also
    /// requires every active slot to be stalled by its own step-aware threshold.
    pub heartbeat_timeout: Duration,
}

impl Thresholds {
    /// Default [`stall_floor`](Self::stall_floor).
    pub const DEFAULT_STALL_FLOOR: Duration = Duration::from_secs(30);
    /// Default [`confident_stall_floor`](Self::confident_stall_floor).
    pub const DEFAULT_CONFIDENT_STALL_FLOOR: Duration = Duration::from_secs(1);
    /// Default [`confident_error`](Self::confident_error).
    pub const DEFAULT_CONFIDENT_ERROR: f64 = 0.5;
    /// Default [`slow_factor`](Self::slow_factor).
    pub const DEFAULT_SLOW_FACTOR: f64 = 4.0;
    /// Default [`stall_factor`](Self::stall_factor).
    pub const DEFAULT_STALL_FACTOR: f64 = 10.0;
    /// Default [`heartbeat_timeout`](Self::heartbeat_timeout).
    pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);

    /// The stall threshold in ns for a slot whose expected step (or layer) time is
    /// `expected_step_ns` (`None` when unknown): `max(floor, factor x expected)`,
    /// saturating; the floor is the confident one when `confident`.
    pub fn stall_threshold_ns(&self, expected_step_ns: Option<u64>, confident: bool) -> u64 {
        let floor = duration_ns(if confident {
            self.confident_stall_floor.min(self.stall_floor)
        } else {
            self.stall_floor
        });
        let scaled = match expected_step_ns {
            Some(e) if self.stall_factor.is_finite() && self.stall_factor > 0.0 => {
                let v = e as f64 * self.stall_factor;
                if v >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    v as u64
                }
            }
            _ => 0,
        };
        floor.max(scaled)
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            stall_floor: Self::DEFAULT_STALL_FLOOR,
            confident_stall_floor: Self::DEFAULT_CONFIDENT_STALL_FLOOR,
            confident_error: Self::DEFAULT_CONFIDENT_ERROR,
            slow_factor: Self::DEFAULT_SLOW_FACTOR,
            stall_factor: Self::DEFAULT_STALL_FACTOR,
            budget: None,
            heartbeat_timeout: Self::DEFAULT_HEARTBEAT_TIMEOUT,
        }
    }
}

/// A [`Duration`] in ns, saturating at `u64::MAX`.
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Parses a human duration: a number followed by `ns`, `us`, `ms`, `s`, `m` or `h`; a bare
/// number means seconds. Fractions are allowed (`1.5s`). Negative, NaN, infinite or
/// overflowing values are refused.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(hydra_probe::parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert_eq!(hydra_probe::parse_duration("2"), Ok(Duration::from_secs(2)));
/// assert!(hydra_probe::parse_duration("-1s").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "invalid duration {s:?}: unknown unit {other:?} (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected a number such as 500ms or 2.5s"))?;
    let secs = value * scale;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {s:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_max_of_floor_and_scaled_step() {
        let t = Thresholds::default();
        assert_eq!(t.stall_threshold_ns(None, false), 30_000_000_000);
        assert_eq!(
            t.stall_threshold_ns(Some(1_000_000_000), false),
            30_000_000_000
        );
        assert_eq!(
            t.stall_threshold_ns(Some(5_000_000_000), false),
            50_000_000_000
        );
        assert_eq!(t.stall_threshold_ns(Some(u64::MAX), false), u64::MAX);
        // Confident: the 1 s floor, the factor unchanged.
        assert_eq!(t.stall_threshold_ns(Some(30_000_000), true), 1_000_000_000);
        assert_eq!(t.stall_threshold_ns(Some(500_000_000), true), 5_000_000_000);
        // A confident floor set above the plain one never raises it.
        let odd = Thresholds {
            confident_stall_floor: Duration::from_secs(60),
            ..t
        };
        assert_eq!(odd.stall_threshold_ns(None, true), 30_000_000_000);
        let weird = Thresholds {
            stall_factor: f64::NAN,
            ..t
        };
        assert_eq!(
            weird.stall_threshold_ns(Some(u64::MAX), false),
            30_000_000_000
        );
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "abc", "-1", "1e999", "5 fortnights", "1..2s", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
