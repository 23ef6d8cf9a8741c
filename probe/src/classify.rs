//! The one stuck / slow / dead classification, as pure functions of a slot record, the
//! engine's liveness, `now` and [`Thresholds`].
//!
//! Used by the CLI, the exporter and the C ABI alike, so that every consumer agrees on what
//! "stalled" means. All times are CLOCK_MONOTONIC ns; an age is `now - timestamp`,
//! saturating at 0 (a reader may sample `now` just before the writer stores a later stamp).
//!
//! # Derived figures
//! - **progress** = `work_done / work_total`, clamped to 0..=1; unknown when the total is 0.
//! - **rate** (work units per second: tokens/s for prefill and decode, bytes/s for save and
//!   restore) = `work_done / (last_progress - phase_start)`: the phase's *average* rate over
//!   the interval in which that work was done. Measuring up to the last progress rather than
//!   up to `now` keeps the rate from decaying while a step is in flight (that silence is
//!   what the stall test judges). When that interval is unknown or empty but steps have
//!   finished, the rate of the last step is used instead:
//!   `(work_done / steps_done) / last_step_duration`.
//! - **ETA**: from the writer's own prediction when it publishes one (format v1.2, the
//!   `STEP_PREDICTION` capability): `TASK_EXPECTED_END_NS - now` while that end lies ahead
//!   (source **model**); otherwise `(work_total - work_done) / rate` (source **rate**), 0
//!   when the work is done; unknown without a total or a rate.
//! - **progress reference** = `max(last_progress, phase_start)`: the latest evidence that
//!   the slot moved (a new phase counts as movement).
//! - **expected step time** = the writer's prediction for the step in flight when it
//!   publishes one; otherwise the larger of `step_size / rate` (the step in flight, at the
//!   observed rate) and the last finished step's duration (taking the larger avoids false
//!   stalls when steps grow: later prefill chunks, longer context).
//! - **expected layer time** = expected step time / layers of the forward, while the layer
//!   position of the step in flight is known.
//! - **confident**: the writer's prediction for the step in flight comes with an error
//!   bound of at most [`Thresholds::confident_error`].
//! - **stall floor** = [`Thresholds::confident_stall_floor`] when confident, else
//!   [`Thresholds::stall_floor`].
//! - **stall threshold** = `max(stall floor, stall_factor x expected step)`; **layer stall
//!   threshold** = `max(stall floor, stall_factor x expected layer)`.
//! - **wait stall threshold** (format v1.3, while a decode step waits on a device whose
//!   history is trusted, FORMAT §19.6) = `max(confident stall floor, stall_factor x the
//!   longest recent wait on that device by decode steps)`.
//!
//! # Slot classes (first match wins)
//! 1. **torn**: no consistent copy could be read (the writer stopped in the middle of an
//!    update); the last values are kept for display.
//! 2. **orphaned**: the slot is active *or queued* and its engine is not live (dead, or
//!    closed with work outstanding): that work will never finish. Queued counts because the
//!    client waiting on it is just as stranded.
//! 3. **idle**: phase idle and nothing pending.
//! 4. **queued**: phase queued, or idle with tasks pending for the slot.
//! 5. **stalled**: active, and silent for longer than its stall threshold, or blocked on a
//!    device for far longer than its waits on that device last.
//! 6. **slow**: active, and its step runs far past what was expected, or its ETA exceeds
//!    the caller's budget.
//! 7. **progressing**: every other active slot.
//!
//! What counts as silence and movement, which threshold applies, and when a step is slow
//! are stated once, on [`classify_derived`], the function that applies them.
//!
//! A phase value this reader does not know (written by a newer minor) is judged as active by
//! its timestamps: they mean the same in every minor.

use crate::thresholds::{duration_ns, Thresholds};
use hydra_layout::{HeaderSnapshot, Liveness, Phase, Prediction, SlotState, Substep};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Classification of one slot. See the [module docs](self) for the classes and
/// [`classify_derived`] for the stalled and slow rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotClass {
    /// No task.
    Idle,
    /// A task waits in the engine's queue for this slot.
    Queued,
    /// Active and moving.
    Progressing,
    /// Moving, but its ETA exceeds the caller's budget.
    Slow,
    /// Active with no progress for longer than the stall threshold.
    Stalled,
    /// Active (or queued) while its engine is dead or closed.
    Orphaned,
    /// No consistent copy could be read: the writer stopped in the middle of an update.
    Torn,
}

impl SlotClass {
    /// Every class, in severity order.
    pub const ALL: [SlotClass; 7] = [
        Self::Idle,
        Self::Queued,
        Self::Progressing,
        Self::Slow,
        Self::Stalled,
        Self::Orphaned,
        Self::Torn,
    ];

    /// Lower-case name: "idle", "queued", "progressing", "slow", "stalled", "orphaned", "torn".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Queued => "queued",
            Self::Progressing => "progressing",
            Self::Slow => "slow",
            Self::Stalled => "stalled",
            Self::Orphaned => "orphaned",
            Self::Torn => "torn",
        }
    }

    /// How bad it is for a health check.
    pub fn severity(self) -> Severity {
        match self {
            Self::Idle | Self::Queued | Self::Progressing => Severity::Ok,
            Self::Slow => Severity::Warning,
            Self::Stalled | Self::Orphaned | Self::Torn => Severity::Critical,
        }
    }
}

/// Health of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineHealth {
    /// The writer holds its lock and its loop is not hung.
    Live,
    /// The writer is alive, but its heartbeat is older than the heartbeat timeout and every
    /// active slot is stalled.
    Hung,
    /// The writer exited cleanly.
    Closed,
    /// The lock is free but the segment was never closed: the writer died.
    Dead,
}

impl EngineHealth {
    /// Lower-case name: "live", "hung", "closed", "dead".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Hung => "hung",
            Self::Closed => "closed",
            Self::Dead => "dead",
        }
    }

    /// How bad it is for a health check (a closed engine exited on purpose: not a fault).
    pub fn severity(self) -> Severity {
        match self {
            Self::Live | Self::Closed => Severity::Ok,
            Self::Hung | Self::Dead => Severity::Critical,
        }
    }
}

/// Nagios-style severity of a finding. The numeric value is the plugin exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Healthy (exit 0).
    Ok,
    /// Something is slow (exit 1).
    Warning,
    /// Something is stalled, dead, hung, orphaned or torn (exit 2).
    Critical,
    /// The state could not be determined (exit 3).
    Unknown,
}

impl Severity {
    /// The Nagios exit status: 0, 1, 2 or 3.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Warning => 1,
            Self::Critical => 2,
            Self::Unknown => 3,
        }
    }

    /// Upper-case label ("OK", "WARNING", "CRITICAL", "UNKNOWN").
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Warning => "WARNING",
            Self::Critical => "CRITICAL",
            Self::Unknown => "UNKNOWN",
        }
    }

    /// Rank for "worst of": OK < WARNING < UNKNOWN < CRITICAL (a known critical outranks
    /// an unreadable file).
    pub fn rank(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Warning => 1,
            Self::Unknown => 2,
            Self::Critical => 3,
        }
    }

    /// The worse of two severities.
    pub fn worst(self, other: Self) -> Self {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

/// Where an ETA comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EtaSource {
    /// The writer's cost model (format v1.2): the predicted end of the phase's work.
    Model,
    /// The observed rate: remaining work / average rate of the phase.
    Rate,
}

impl EtaSource {
    /// Lower-case name: "model" or "rate".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Rate => "rate",
        }
    }
}

/// `Display` as the value's [`as_str`](SlotClass::as_str) name.
macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

display_as_str!(SlotClass, EngineHealth, EtaSource);

/// Figures derived from one slot record at `now`. All `Option`s are `None` when unknown;
/// floats are always finite.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Derived {
    /// `work_done / work_total` in 0..=1.
    pub progress: Option<f64>,
    /// Work units per second (see the module docs).
    pub rate_per_s: Option<f64>,
    /// Seconds to finish the phase (see the module docs for its two sources).
    pub eta_s: Option<f64>,
    /// Where `eta_s` comes from (None when there is no ETA).
    pub eta_source: Option<EtaSource>,
    /// `now - max(last_progress, phase_start)`.
    pub last_progress_age_ns: Option<u64>,
    /// `now - phase_start`.
    pub phase_age_ns: Option<u64>,
    /// `now - step_start` of the step in flight.
    pub step_age_ns: Option<u64>,
    /// Predicted duration of the step in flight (the writer's, when it publishes one).
    pub expected_step_ns: Option<u64>,
    /// The writer's own prediction for the step in flight (format v1.2).
    pub predicted_step_ns: Option<u64>,
    /// The error bound the writer states for its predictions (1.0 = 100%).
    pub prediction_error: Option<f64>,
    /// Whether the writer's prediction for the step in flight is confident (its bound is
    /// at most [`Thresholds::confident_error`]): the short stall floor applies.
    pub confident: bool,
    /// Expected duration of one layer of the step in flight (expected step / layers),
    /// while the layer position is known.
    pub expected_layer_ns: Option<u64>,
    /// `max(floor, factor x expected step)`.
    pub stall_threshold_ns: u64,
    /// `max(floor, factor x expected layer)`; the stall threshold when no layer position
    /// is known.
    pub layer_stall_threshold_ns: u64,
    /// The layer position inside the step in flight (format v1.1 writers only).
    pub layer: Option<Substep>,
    /// `now - layer.at_ns`.
    pub layer_age_ns: Option<u64>,
    /// `now - WAIT_SINCE_NS` while the step in flight waits on a device (format v1.3).
    pub wait_age_ns: Option<u64>,
    /// The longest recent wait on that device by decode steps, while a decode step waits
    /// and that history is trusted (FORMAT §19.6); none otherwise (prefill waits are not
    /// judged by it).
    pub wait_learnt_max_ns: Option<u64>,
    /// `max(confident floor, factor x wait_learnt_max_ns)`: a wait longer than this is a
    /// stall on the device; none without `wait_learnt_max_ns`.
    pub wait_stall_threshold_ns: Option<u64>,
    /// How long an RPC peer has read nothing of what the engine sent it, while the slot's
    /// step is in flight (format v1.3, FORMAT §19.7): the peer unread the longest.
    pub peer_unread_age_ns: Option<u64>,
    /// `max(confident floor, PEER_STALL_STEPS x the step's length)`, the length being the
    /// larger of the expected step and the last step: a peer unread for longer has stopped
    /// (see [`PEER_STALL_STEPS`]); none while neither is known.
    pub peer_stall_threshold_ns: Option<u64>,
    /// The step lengths that threshold allows: [`PEER_STALL_STEPS`], or
    /// [`PEER_WAITED_STEPS`]; none with the threshold.
    pub peer_stall_steps: Option<f64>,
}

impl Derived {
    /// Whether the step in flight has waited on its device for longer than its wait stall
    /// threshold (the wait rule of [`classify_derived`]).
    pub fn stalled_on_wait(&self) -> bool {
        matches!(
            (self.wait_age_ns, self.wait_stall_threshold_ns),
            (Some(age), Some(threshold)) if age > threshold
        )
    }

    /// Whether an RPC peer has read nothing for longer than its threshold while the step is
    /// in flight (the peer rule of [`classify_derived`]).
    pub fn stalled_on_peer(&self) -> bool {
        matches!(
            (self.peer_unread_age_ns, self.peer_stall_threshold_ns),
            (Some(age), Some(threshold)) if age > threshold
        )
    }

    /// The silence beyond which the slot counts as stalled now: the layer stall threshold
    /// while the layer position of the step in flight is known, else the stall threshold.
    pub fn effective_stall_threshold_ns(&self) -> u64 {
        if self.layer_age_ns.is_some() {
            self.layer_stall_threshold_ns
        } else {
            self.stall_threshold_ns
        }
    }
}

/// `Some(x)` when `x` is finite and not negative.
pub(crate) fn finite(x: f64) -> Option<f64> {
    (x.is_finite() && x >= 0.0).then_some(x)
}

fn age(now_ns: u64, stamp: u64) -> Option<u64> {
    (stamp != 0).then(|| now_ns.saturating_sub(stamp))
}

/// How many times the step's length (the larger of the expected step, which is the
/// writer's prediction where it has one, and the last step's duration) an RPC peer may
/// read nothing before the slot is stalled on it (FORMAT §19.7): 2.
///
/// Why: a peer reads the next command as soon as it has finished the graph in flight, and
/// its share of a step cannot take longer than the whole step; a peer that is merely slow
/// still reads once per graph. Twice the step leaves room for a step that runs long while
/// the peer finishes the one before, and is far sooner than ten steps, the step rule's
/// factor, which a host first blocks on seconds after the peer stopped. The prediction's
/// error bound is not used: on a pipeline-parallel RPC split it is wide (over 100x,
/// measured on 0c1e570), while the steps themselves are regular.
pub const PEER_STALL_STEPS: f64 = 2.0;

/// The peer rule's factor (4, the slow factor's default) when the step waits on the very
/// peer that reads nothing and began to wait less than one step's length after the peer
/// stopped reading: the host blocked on the peer about when it stopped reading, so the
/// peer may be computing the graph the host waits for, whose length only the step's
/// prediction bounds, and a prediction for a step of a new size can be far short. Measured
/// on 0c1e570 in the test suite's run: a 1,086-token step predicted at 0.75 s, the host
/// waiting 1.6 s on a peer computing it (2.1 times), which 2 times called stalled. A peer
/// the host ran ahead of for a step or more, as it does of a frozen peer on a pipelined
/// split (4.8 s before it blocked, measured, with steps of 3.5 s), keeps
/// [`PEER_STALL_STEPS`]; one frozen as the host waits on it is named at 4 steps, still
/// well before the step rule's 10.
pub const PEER_WAITED_STEPS: f64 = 4.0;

/// A step is slow by the writer's prediction only once it has run this long (500 ms): a
/// decode step of a few milliseconds that a busy machine delays by a scheduler tick or two
/// is not slow in any sense an operator acts on.
pub const SLOW_STEP_FLOOR_NS: u64 = 500_000_000;

/// Whether a phase counts as active for the classification: prefill, decode, save, restore,
/// and phases this reader does not know.
pub fn is_active(phase: Phase) -> bool {
    phase.is_active() || matches!(phase, Phase::Unknown(_))
}

/// Observed rate of the current phase, work units per second (see the module docs).
pub fn rate_per_s(s: &SlotState) -> Option<f64> {
    if s.work_done > 0 && s.phase_start_ns != 0 && s.last_progress_ns > s.phase_start_ns {
        let secs = (s.last_progress_ns - s.phase_start_ns) as f64 / 1e9;
        if let Some(r) = finite(s.work_done as f64 / secs).filter(|r| *r > 0.0) {
            return Some(r);
        }
    }
    if s.work_done > 0 && s.steps_done > 0 && s.last_step_ns > 0 {
        let per_step = s.work_done as f64 / s.steps_done as f64;
        return finite(per_step / (s.last_step_ns as f64 / 1e9)).filter(|r| *r > 0.0);
    }
    None
}

/// What a writer may publish beside a slot record, read in the same consistent copy as the
/// record. Each is `None` when the writer does not publish it: the substep words before
/// format v1.1 (or without the `LAYER_PROGRESS` capability), the prediction words before
/// v1.2 (or without the `STEP_PREDICTION` capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotExtras {
    /// The layer position inside a step; only a position of the step in flight counts
    /// ([`Substep::in_step`]).
    pub substep: Option<Substep>,
    /// The writer's cost-model predictions; only a prediction of the step in flight and of
    /// the current phase counts ([`Prediction::step_in_flight`], [`Prediction::phase_end`]).
    pub prediction: Option<Prediction>,
    /// The wait of the step in flight on a device (format v1.3), with what the device's
    /// history says its waits take.
    pub wait: Option<WaitFacts>,
    /// Since when the RPC peer unread the longest has read nothing of what the engine sent
    /// it (`DEV_UNREAD_SINCE_NS`, format v1.3); none while every peer keeps up.
    pub peer_unread_since_ns: Option<u64>,
}

impl SlotExtras {
    /// Nothing beside the record (a v1.0 writer, or a caller that only has the record).
    pub const NONE: Self = Self {
        substep: None,
        prediction: None,
        wait: None,
        peer_unread_since_ns: None,
    };
}

/// The step in flight's wait on a device, as the wait rule judges it (FORMAT §5.6, §19.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitFacts {
    /// `WAIT_SINCE_NS`: when the step's thread began to wait.
    pub since_ns: u64,
    /// The longest recent wait on that device by steps of the slot's phase, when that
    /// history is trusted ([`hydra_layout::WaitHistory::learnt_max_ns`]); only a decode
    /// step's is used.
    pub learnt_max_ns: Option<u64>,
    /// The device waited on is the RPC peer of [`SlotExtras::peer_unread_since_ns`] (the
    /// one unread the longest): see [`PEER_WAITED_STEPS`].
    pub on_unread_peer: bool,
}

/// Derives progress, rate, ETA, ages, the writer's prediction, the stall thresholds and the
/// layer position of one slot record and what was read beside it at `now_ns` (see the
/// module docs for each figure).
pub fn derive(s: &SlotState, extras: SlotExtras, now_ns: u64, t: &Thresholds) -> Derived {
    let SlotExtras {
        substep,
        prediction,
        wait,
        peer_unread_since_ns,
    } = extras;
    let layer = substep.and_then(|l| l.in_step(s));
    let progress = (s.work_total > 0)
        .then(|| (s.work_done as f64 / s.work_total as f64).clamp(0.0, 1.0))
        .and_then(finite);
    let rate = rate_per_s(s);
    let model_end = prediction
        .and_then(|p| p.phase_end(s))
        .filter(|end| *end > now_ns);
    let (eta_s, eta_source) = if s.work_total > 0 && s.work_done >= s.work_total {
        (Some(0.0), Some(EtaSource::Rate))
    } else if let Some(end) = model_end {
        (finite((end - now_ns) as f64 / 1e9), Some(EtaSource::Model))
    } else if s.work_total > 0 {
        let eta = rate.and_then(|r| finite((s.work_total - s.work_done) as f64 / r));
        (eta, eta.map(|_| EtaSource::Rate))
    } else {
        (None, None)
    };
    let reference = s.last_progress_ns.max(s.phase_start_ns);
    // Clamped to i64::MAX ns (292 years), the most the C ABI's int64_t carries, so that
    // every reader shows a hostile prediction word as the same figure.
    let predicted_step_ns = prediction
        .and_then(|p| p.step_in_flight(s))
        .map(|ns| ns.min(i64::MAX as u64));
    let prediction_error = prediction
        .filter(|_| predicted_step_ns.is_some())
        .and_then(|p| p.rel_error())
        .and_then(finite);
    let expected_step_ns = predicted_step_ns.or_else(|| observed_step_ns(s, rate));
    let confident =
        predicted_step_ns.is_some() && prediction_error.is_some_and(|e| e <= t.confident_error);
    // Only decode waits are judged by the device's history: a prefill's waits depend on
    // where its ubatch sits in a pipeline (FORMAT §19.6).
    let judged_wait_max = wait
        .filter(|_| s.phase == Phase::Decode)
        .and_then(|w| w.learnt_max_ns);
    let peer_threshold = expected_step_ns
        .map(|e| peer_stall_threshold_ns(e.max(s.last_step_ns), wait, peer_unread_since_ns, t));
    let expected_layer_ns = match (expected_step_ns, layer) {
        (Some(step), Some(l)) if l.total > 0 => Some(step / l.total),
        _ => None,
    };
    Derived {
        progress,
        rate_per_s: rate,
        eta_s,
        eta_source: eta_s.and(eta_source),
        last_progress_age_ns: age(now_ns, reference),
        phase_age_ns: age(now_ns, s.phase_start_ns),
        step_age_ns: age(now_ns, s.step_start_ns),
        expected_step_ns,
        predicted_step_ns,
        prediction_error,
        confident,
        expected_layer_ns,
        stall_threshold_ns: t.stall_threshold_ns(expected_step_ns, confident),
        layer_stall_threshold_ns: t
            .stall_threshold_ns(expected_layer_ns.or(expected_step_ns), confident),
        layer,
        layer_age_ns: layer.and_then(|l| age(now_ns, l.at_ns)),
        wait_age_ns: wait.and_then(|w| age(now_ns, w.since_ns)),
        wait_learnt_max_ns: judged_wait_max,
        wait_stall_threshold_ns: judged_wait_max.map(|max| t.stall_threshold_ns(Some(max), true)),
        peer_unread_age_ns: peer_unread_since_ns
            .filter(|_| s.step_start_ns != 0)
            .and_then(|since| age(now_ns, since)),
        peer_stall_threshold_ns: peer_threshold.map(|(ns, _)| ns),
        peer_stall_steps: peer_threshold.map(|(_, k)| k),
    }
}

/// The step in flight's expected duration from what was observed, without a prediction:
/// the longer of its size at the phase's rate and the last step's duration.
fn observed_step_ns(s: &SlotState, rate: Option<f64>) -> Option<u64> {
    let from_step_in_flight = match (s.step_start_ns != 0, rate) {
        (true, Some(r)) if s.step_size > 0 => finite(s.step_size as f64 * 1e9 / r).map(sat_u64),
        _ => None,
    };
    let from_last_step = (s.last_step_ns > 0).then_some(s.last_step_ns);
    match (from_step_in_flight, from_last_step) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// `(max(confident floor, k x step), k)`, saturating: `k` is [`PEER_WAITED_STEPS`] when
/// the step waits on the unread peer and began to wait less than a step after the peer
/// stopped reading, else [`PEER_STALL_STEPS`].
fn peer_stall_threshold_ns(
    step_ns: u64,
    wait: Option<WaitFacts>,
    unread_since_ns: Option<u64>,
    t: &Thresholds,
) -> (u64, f64) {
    let steps = match (wait, unread_since_ns) {
        (Some(w), Some(since))
            if w.on_unread_peer && w.since_ns.saturating_sub(since) < step_ns =>
        {
            PEER_WAITED_STEPS
        }
        _ => PEER_STALL_STEPS,
    };
    let floor = crate::thresholds::duration_ns(t.confident_stall_floor.min(t.stall_floor));
    (floor.max(sat_u64(steps * step_ns as f64)), steps)
}

fn sat_u64(x: f64) -> u64 {
    if x >= u64::MAX as f64 {
        u64::MAX
    } else {
        x as u64
    }
}

/// Classifies one slot whose record was read consistently. `liveness` is the engine's
/// lock-based liveness (not the hung verdict, which depends on the slots).
pub fn classify_slot(
    s: &SlotState,
    pending: u64,
    liveness: Liveness,
    now_ns: u64,
    t: &Thresholds,
) -> SlotClass {
    classify_derived(
        s,
        pending,
        liveness,
        &derive(s, SlotExtras::NONE, now_ns, t),
        t,
    )
}

/// [`classify_slot`] from figures already derived with [`derive()`].
///
/// The stalled and slow rules (every comparison strict: a figure equal to its threshold is
/// still healthy):
/// - **silence** is the time since the slot last moved: the shorter of
///   [`last_progress_age_ns`](Derived::last_progress_age_ns) (its last progress, or its
///   phase start) and [`step_age_ns`](Derived::step_age_ns) (the start of its step in
///   flight: a slot of a batched engine that waited behind another slot's long chunk has
///   moved again once its own step starts); 0 when both are unknown (an active slot
///   always has a phase start, and a writer that left every stamp 0 gives no evidence of
///   silence).
/// - **stalled on a device**: the decode step in flight has waited on one device for longer
///   than [`wait_stall_threshold_ns`](Derived::wait_stall_threshold_ns), `max(confident
///   stall floor, stall factor x the longest recent wait on that device by decode steps)`,
///   known once the device has a trusted history (FORMAT §19.6: two steps). This judges
///   the wait by itself: a peer whose waits take milliseconds and that stopped answering is
///   stalled a second into the wait, whatever the step's prediction allows. (Prefill waits
///   are not judged so: their length depends on where the ubatch sits in a pipeline.)
/// - **stalled on a peer**: while a step is in flight, an RPC peer has read nothing of what
///   the engine sent it for longer than
///   [`peer_stall_threshold_ns`](Derived::peer_stall_threshold_ns), [`PEER_STALL_STEPS`]
///   times the step's length (FORMAT §19.7), whatever the host itself waits on.
/// - **stalled**: while the layer position of the step in flight is known, the shorter of
///   the silence and [`layer_age_ns`](Derived::layer_age_ns) (a finished layer is movement
///   too) is past [`layer_stall_threshold_ns`](Derived::layer_stall_threshold_ns): the
///   slot is stalled at that layer; otherwise the silence is past
///   [`stall_threshold_ns`](Derived::stall_threshold_ns).
/// - **slow**, when not stalled: the silence is past the stall threshold (the step outlived
///   it, but its layers still move); or the writer's prediction for the step in flight is
///   [`confident`](Derived::confident) and the step has run longer than
///   [`SLOW_STEP_FLOOR_NS`] and longer than [`Thresholds::slow_factor`] times that
///   prediction; or a [`budget`](Thresholds::budget) is given and the ETA exceeds it.
pub fn classify_derived(
    s: &SlotState,
    pending: u64,
    liveness: Liveness,
    d: &Derived,
    t: &Thresholds,
) -> SlotClass {
    let active = is_active(s.phase);
    let queued = s.phase == Phase::Queued || (s.phase == Phase::Idle && pending > 0);
    if liveness != Liveness::Live && (active || queued) {
        return SlotClass::Orphaned;
    }
    if queued {
        return SlotClass::Queued;
    }
    if !active {
        return SlotClass::Idle;
    }
    // The rules applied below are stated in the doc comment above.
    if d.stalled_on_wait() || d.stalled_on_peer() {
        return SlotClass::Stalled;
    }
    let silence = match (d.last_progress_age_ns, d.step_age_ns) {
        (Some(progress), Some(step)) => progress.min(step),
        (progress, step) => progress.or(step).unwrap_or_default(),
    };
    match d.layer_age_ns {
        Some(layer) => {
            if layer.min(silence) > d.layer_stall_threshold_ns {
                return SlotClass::Stalled;
            }
        }
        None => {
            if silence > d.stall_threshold_ns {
                return SlotClass::Stalled;
            }
        }
    }
    if silence > d.stall_threshold_ns {
        return SlotClass::Slow;
    }
    // Only a confident prediction judges a step slow: the first steps of a kind (a model
    // that has learnt nothing but a warm-up, or one shape) are no yardstick.
    if let (Some(step_age), Some(predicted), true) =
        (d.step_age_ns, d.predicted_step_ns, d.confident)
    {
        if t.slow_factor.is_finite()
            && step_age > SLOW_STEP_FLOOR_NS
            && step_age as f64 > t.slow_factor * predicted as f64
        {
            return SlotClass::Slow;
        }
    }
    if let (Some(budget), Some(eta)) = (t.budget, d.eta_s) {
        if eta > budget.as_secs_f64() {
            return SlotClass::Slow;
        }
    }
    SlotClass::Progressing
}

/// The rule [`engine_health`] applies for **hung**, in the words every surface uses (the
/// CLI's help for `--heartbeat-timeout`, the `hung` finding): one statement of it.
pub const HUNG_RULE: &str = "alive, its heartbeat older than the heartbeat timeout, and every active slot stalled (none active: the silent heartbeat alone)";

/// The engine's health from its lock-based liveness, its header, the classes of its slots
/// (torn slots count as neither active nor stalled) and `now`.
///
/// Hung: [`HUNG_RULE`]. With no active slot, a silent heartbeat alone means the loop
/// stopped (the engine beats while idle); a slow slot moves, so its engine is not hung.
pub fn engine_health(
    liveness: Liveness,
    header: &HeaderSnapshot,
    slots: &[(Phase, SlotClass)],
    now_ns: u64,
    t: &Thresholds,
) -> EngineHealth {
    match liveness {
        Liveness::Closed => EngineHealth::Closed,
        Liveness::Dead => EngineHealth::Dead,
        Liveness::Live => {
            let beat_age = now_ns.saturating_sub(header.heartbeat_ns);
            let silent = beat_age > duration_ns(t.heartbeat_timeout);
            let all_stalled = slots
                .iter()
                .filter(|(p, c)| is_active(*p) && *c != SlotClass::Torn)
                .all(|(_, c)| *c == SlotClass::Stalled);
            if silent && all_stalled {
                EngineHealth::Hung
            } else {
                EngineHealth::Live
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{EngineCounters, Lifecycle, Prediction, WorkUnit};
    use std::time::Duration;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    /// A "now" far from 0 so every stamp below is valid.
    const NOW: u64 = 1_000 * S;

    fn decode(done: u64, total: u64, phase_age: u64, progress_age: u64) -> SlotState {
        SlotState {
            task_id: 7,
            phase: Phase::Decode,
            work_unit: WorkUnit::Tokens,
            work_done: done,
            work_total: total,
            task_start_ns: NOW - phase_age,
            phase_start_ns: NOW - phase_age,
            last_progress_ns: NOW - progress_age,
            steps_done: done,
            ..Default::default()
        }
    }

    fn class(s: &SlotState, t: &Thresholds) -> SlotClass {
        class_of(s, 0, Liveness::Live, t)
    }

    /// The class of `s` at [`NOW`] with `pending` tasks queued, on an engine of `liveness`.
    fn class_of(s: &SlotState, pending: u64, liveness: Liveness, t: &Thresholds) -> SlotClass {
        classify_slot(s, pending, liveness, NOW, t)
    }

    fn class_at(s: &SlotState, layer: Substep, t: &Thresholds) -> (SlotClass, Derived) {
        let extras = SlotExtras {
            substep: Some(layer),
            ..SlotExtras::NONE
        };
        let d = derive(s, extras, NOW, t);
        (classify_derived(s, 0, Liveness::Live, &d, t), d)
    }

    /// A decode step that started `step_age` ago, its thread waiting on a device since
    /// `wait_age` ago, whose waits took at most `learnt` (none: not trusted yet).
    fn waiting(step_age: u64, wait_age: u64, learnt: Option<u64>) -> (SlotClass, Derived) {
        let mut s = decode(10, 100, 60 * S, step_age);
        s.start_step(1, NOW - step_age);
        let extras = SlotExtras {
            wait: Some(WaitFacts {
                since_ns: NOW - wait_age,
                learnt_max_ns: learnt,
                on_unread_peer: false,
            }),
            ..SlotExtras::NONE
        };
        let t = Thresholds::default();
        let d = derive(&s, extras, NOW, &t);
        (classify_derived(&s, 0, Liveness::Live, &d, &t), d)
    }

    #[test]
    fn a_wait_far_longer_than_the_devices_waits_is_a_stall_on_that_device() {
        // Waits of at most 3 ms: the confident floor (1 s) decides, not 10 x 3 ms; the step
        // itself (1.5 s old, no prediction) is far under the 30 s floor.
        let (class, d) = waiting(1_500 * MS, 1_200 * MS, Some(3 * MS));
        assert_eq!(class, SlotClass::Stalled);
        assert!(d.stalled_on_wait());
        assert_eq!(d.wait_stall_threshold_ns, Some(S));
        assert_eq!(
            (d.wait_age_ns, d.wait_learnt_max_ns),
            (Some(1_200 * MS), Some(3 * MS))
        );
        // Under the threshold, and exactly at it: still progressing.
        assert_eq!(
            waiting(1_500 * MS, 900 * MS, Some(3 * MS)).0,
            SlotClass::Progressing
        );
        assert_eq!(
            waiting(1_500 * MS, S, Some(3 * MS)).0,
            SlotClass::Progressing
        );
    }

    /// A prefill step of 512 started 3 s ago, predicted to take `predicted` with a bound
    /// of 2,000 % (`None`: no prediction), after a step of 4 s, whose RPC peer has read
    /// nothing for `unread`.
    fn peer_unread(predicted: Option<u64>, unread: u64) -> (SlotClass, Derived) {
        peer_unread_waiting(predicted, unread, None)
    }

    /// [`peer_unread`]'s slot, its step waiting since `wait_age` ago on the unread peer
    /// (none: on nothing).
    fn peer_unread_waiting(
        predicted: Option<u64>,
        unread: u64,
        wait_age: Option<u64>,
    ) -> (SlotClass, Derived) {
        let mut s = decode(1_024, 4_000, 30 * S, 3 * S);
        s.phase = Phase::Prefill;
        s.start_step(512, NOW - 3 * S);
        s.last_step_ns = 4 * S;
        let prediction = predicted.map(|p| Prediction {
            step_expected_ns: p,
            step_start_ns: s.step_start_ns,
            task_expected_end_ns: 0,
            phase_start_ns: s.phase_start_ns,
            error_ppm: 20_000_000,
        });
        let extras = SlotExtras {
            prediction,
            wait: wait_age.map(|age| WaitFacts {
                since_ns: NOW - age,
                learnt_max_ns: None,
                on_unread_peer: true,
            }),
            peer_unread_since_ns: Some(NOW - unread),
            ..SlotExtras::NONE
        };
        let t = Thresholds::default();
        let d = derive(&s, extras, NOW, &t);
        (classify_derived(&s, 0, Liveness::Live, &d, &t), d)
    }

    #[test]
    fn a_peer_that_reads_nothing_for_two_steps_stalls_the_slot() {
        // Steps of 4.6 s predicted (whatever the bound says): 2 x 4.6 s = 9.2 s.
        let (class, d) = peer_unread(Some(4_600 * MS), 9_300 * MS);
        assert_eq!(d.peer_stall_threshold_ns, Some(9_200 * MS));
        assert_eq!(d.peer_unread_age_ns, Some(9_300 * MS));
        assert!(d.stalled_on_peer());
        assert_eq!(class, SlotClass::Stalled);
        // Under it and exactly at it: the step itself (3 s of 4.6 s) progresses.
        for unread in [9 * S, 9_200 * MS] {
            let (class, d) = peer_unread(Some(4_600 * MS), unread);
            assert!(!d.stalled_on_peer(), "{unread}");
            assert_eq!(class, SlotClass::Progressing, "{unread}");
        }
        // A prediction under the last step (4 s): the last step decides.
        let (_, d) = peer_unread(Some(S), 0);
        assert_eq!(d.peer_stall_threshold_ns, Some(8 * S));
        // Without a prediction, the rate's expected step (512 tokens at 1,024 tokens in
        // 27 s) is the longer one.
        let (class, d) = peer_unread(None, 30 * S);
        assert_eq!(d.peer_stall_threshold_ns, Some(27 * S));
        assert_eq!(class, SlotClass::Stalled);
    }

    /// [`peer_unread`]'s slot with steps of 4.6 s predicted, its step waiting on the unread
    /// peer since `wait_age` ago.
    fn waiting_on_unread_peer(unread: u64, wait_age: u64) -> Derived {
        peer_unread_waiting(Some(4_600 * MS), unread, Some(wait_age)).1
    }

    #[test]
    fn a_peer_the_host_blocked_on_as_it_stopped_reading_gets_four_steps() {
        // The host blocked on the peer about when it stopped reading (it may compute the
        // graph the host waits for): 4 x 4.6 s.
        let d = waiting_on_unread_peer(9_300 * MS, 9_300 * MS);
        assert_eq!(d.peer_stall_threshold_ns, Some(18_400 * MS));
        assert!(!d.stalled_on_peer());
        assert!(waiting_on_unread_peer(18_500 * MS, 18_000 * MS).stalled_on_peer());
        // It went on for 4.5 s, under one step (4.6 s), before it blocked: still 4 steps.
        let d = waiting_on_unread_peer(9_300 * MS, 4_800 * MS);
        assert_eq!(d.peer_stall_threshold_ns, Some(18_400 * MS));
        // For a step's length or more: 2 steps, as for a peer the host does not wait on.
        let d = waiting_on_unread_peer(9_300 * MS, 4_700 * MS);
        assert_eq!(d.peer_stall_threshold_ns, Some(9_200 * MS));
        assert!(d.stalled_on_peer());
    }

    #[test]
    fn a_fast_step_leaves_the_floor_and_between_steps_the_peer_rule_does_not_speak() {
        let mut s = decode(10, 100, 60 * S, 10 * MS);
        s.start_step(1, NOW - 10 * MS);
        s.last_step_ns = 40 * MS;
        let extras = SlotExtras {
            prediction: Some(Prediction {
                step_expected_ns: 30 * MS,
                step_start_ns: s.step_start_ns,
                task_expected_end_ns: 0,
                phase_start_ns: s.phase_start_ns,
                error_ppm: 100_000,
            }),
            peer_unread_since_ns: Some(NOW - 1_100 * MS),
            ..SlotExtras::NONE
        };
        let t = Thresholds::default();
        let d = derive(&s, extras, NOW, &t);
        assert_eq!(d.peer_stall_threshold_ns, Some(S), "the confident floor");
        assert_eq!(
            classify_derived(&s, 0, Liveness::Live, &d, &t),
            SlotClass::Stalled
        );
        // Between steps the unread peer is no slot's business.
        s.step_start_ns = 0;
        let extras = SlotExtras {
            peer_unread_since_ns: Some(NOW - 100 * S),
            ..SlotExtras::NONE
        };
        let d = derive(&s, extras, NOW, &Thresholds::default());
        assert_eq!(d.peer_unread_age_ns, None);
        assert!(!d.stalled_on_peer());
    }

    #[test]
    fn a_device_whose_waits_are_long_allows_ten_of_them() {
        // Waits of up to 2.7 s (the host waits a whole ubatch on the first peer).
        let (class, d) = waiting(20 * S, 20 * S, Some(2_700 * MS));
        assert_eq!(d.wait_stall_threshold_ns, Some(27 * S));
        assert_eq!(class, SlotClass::Progressing);
        assert_eq!(
            waiting(28 * S, 28 * S, Some(2_700 * MS)).0,
            SlotClass::Stalled
        );
    }

    #[test]
    fn without_a_trusted_history_a_wait_is_judged_by_the_step_alone() {
        let (class, d) = waiting(2 * S, 2 * S, None);
        assert_eq!(class, SlotClass::Progressing);
        assert_eq!(
            (d.wait_age_ns, d.wait_stall_threshold_ns),
            (Some(2 * S), None)
        );
        assert!(!d.stalled_on_wait());
        let (class, d) = waiting(31 * S, 31 * S, None);
        assert_eq!(class, SlotClass::Stalled, "the step rule still applies");
        assert!(!d.stalled_on_wait());
    }

    /// A prefill chunk that started 100 s ago and has been silent since (no step finished
    /// for 100 s, past the 30 s floor), with a layer position of the step in flight.
    fn long_chunk() -> SlotState {
        SlotState {
            task_id: 3,
            phase: Phase::Prefill,
            work_unit: WorkUnit::Tokens,
            work_total: 4096,
            task_start_ns: NOW - 100 * S,
            phase_start_ns: NOW - 100 * S,
            last_progress_ns: NOW - 100 * S,
            step_start_ns: NOW - 100 * S,
            step_size: 4096,
            ..Default::default()
        }
    }

    fn at_layer(s: &SlotState, done: u64, age: u64) -> Substep {
        Substep {
            done,
            total: 30,
            at_ns: NOW - age,
            step_start_ns: s.step_start_ns,
        }
    }

    #[test]
    fn a_long_step_whose_layers_move_is_slow_not_stalled() {
        let t = Thresholds::default();
        let s = long_chunk();
        assert_eq!(class(&s, &t), SlotClass::Stalled, "without layers: stalled");
        let (c, d) = class_at(&s, at_layer(&s, 17, 2 * S), &t);
        assert_eq!(c, SlotClass::Slow);
        assert_eq!(d.layer.map(|l| l.done), Some(17));
        assert_eq!(d.layer_age_ns, Some(2 * S));
        // Within its threshold the same step is just progressing.
        let young = SlotState {
            last_progress_ns: NOW - 5 * S,
            step_start_ns: NOW - 5 * S,
            ..s
        };
        let (c, _) = class_at(&young, at_layer(&young, 3, S), &t);
        assert_eq!(c, SlotClass::Progressing);
    }

    #[test]
    fn a_frozen_layer_counter_is_stalled_at_that_layer() {
        let t = Thresholds::default();
        let s = long_chunk();
        // Frozen for 31 s: past the 30 s floor (strictly).
        let (c, d) = class_at(&s, at_layer(&s, 5, 31 * S), &t);
        assert_eq!(c, SlotClass::Stalled);
        assert_eq!(d.layer.map(|l| l.done), Some(5));
        // Exactly at the threshold is still healthy (strict comparison): slow here.
        let (c, _) = class_at(&s, at_layer(&s, 5, 30 * S), &t);
        assert_eq!(c, SlotClass::Slow);
    }

    #[test]
    fn a_position_of_another_step_is_ignored() {
        let t = Thresholds::default();
        let s = long_chunk();
        let stale = Substep {
            step_start_ns: s.step_start_ns - 1,
            ..at_layer(&s, 29, S)
        };
        let (c, d) = class_at(&s, stale, &t);
        assert_eq!(
            (c, d.layer, d.layer_age_ns),
            (SlotClass::Stalled, None, None)
        );
    }

    #[test]
    fn idle_and_queued() {
        let t = Thresholds::default();
        let idle = SlotState::default();
        assert_eq!(class(&idle, &t), SlotClass::Idle);
        assert_eq!(class_of(&idle, 2, Liveness::Live, &t), SlotClass::Queued);
        let q = SlotState {
            phase: Phase::Queued,
            ..Default::default()
        };
        assert_eq!(class(&q, &t), SlotClass::Queued);
        // An idle slot is never stalled, however old its stamps.
        let old = SlotState {
            last_progress_ns: 1,
            phase_start_ns: 1,
            ..Default::default()
        };
        assert_eq!(class(&old, &t), SlotClass::Idle);
        // Dead engine: idle stays idle, queued is orphaned.
        assert_eq!(class_of(&idle, 0, Liveness::Dead, &t), SlotClass::Idle);
        assert_eq!(class_of(&q, 0, Liveness::Dead, &t), SlotClass::Orphaned);
        assert_eq!(
            class_of(&idle, 1, Liveness::Closed, &t),
            SlotClass::Orphaned
        );
    }

    #[test]
    fn progressing_rate_and_eta() {
        let t = Thresholds::default();
        // 30 tokens in a 2 s phase, last progress 0.5 s ago: the work took 1.5 s.
        let s = decode(30, 100, 2 * S, S / 2);
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.progress, Some(0.3));
        assert_eq!(d.rate_per_s, Some(20.0));
        assert_eq!(d.eta_s, Some(3.5));
        assert_eq!(d.last_progress_age_ns, Some(S / 2));
        assert_eq!(class(&s, &t), SlotClass::Progressing);
    }

    #[test]
    fn rate_falls_back_to_last_step() {
        let t = Thresholds::default();
        let mut s = decode(10, 20, S, S);
        s.last_progress_ns = s.phase_start_ns; // no interval
        s.steps_done = 5;
        s.last_step_ns = 100 * MS; // 2 tokens per step, 0.1 s per step -> 20/s
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.rate_per_s, Some(20.0));
        assert_eq!(d.eta_s, Some(0.5));
        // Nothing known: no rate, no ETA, no progress without a total.
        let mut bare = decode(0, 0, S, S);
        bare.steps_done = 0;
        let d = derive(&bare, SlotExtras::NONE, NOW, &t);
        assert_eq!((d.rate_per_s, d.eta_s, d.progress), (None, None, None));
    }

    #[test]
    fn finished_work_has_zero_eta_and_clamped_progress() {
        let t = Thresholds::default();
        let s = decode(150, 100, 2 * S, S);
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.progress, Some(1.0));
        assert_eq!(d.eta_s, Some(0.0));
    }

    #[test]
    fn stalled_exactly_at_floor_is_not_stalled_just_over_is() {
        let t = Thresholds::default();
        let floor = 30 * S;
        let at = decode(10, 100, 60 * S, floor);
        assert_eq!(
            derive(&at, SlotExtras::NONE, NOW, &t).stall_threshold_ns,
            floor
        );
        assert_eq!(class(&at, &t), SlotClass::Progressing);
        let over = decode(10, 100, 60 * S, floor + 1);
        assert_eq!(class(&over, &t), SlotClass::Stalled);
    }

    #[test]
    fn long_step_in_flight_raises_the_threshold() {
        let t = Thresholds::default();
        // Prefill at 100 tok/s over the phase; a 512-token chunk in flight is expected to
        // take 5.12 s, so the threshold is 10 x 5.12 s = 51.2 s, above the 30 s floor.
        let mut s = decode(1000, 10_000, 20 * S, 10 * S);
        s.phase = Phase::Prefill;
        s.step_start_ns = s.last_progress_ns;
        s.step_size = 512;
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.rate_per_s, Some(100.0));
        assert_eq!(d.expected_step_ns, Some(5_120_000_000));
        assert_eq!(d.stall_threshold_ns, 51_200_000_000);
        assert_eq!(d.step_age_ns, Some(10 * S));
        let mut at = s;
        at.last_progress_ns = NOW - 51_200_000_000;
        at.step_start_ns = at.last_progress_ns;
        // Same rate: move the phase start so work/interval stays 100/s.
        at.phase_start_ns = at.last_progress_ns - 10 * S;
        assert_eq!(
            derive(&at, SlotExtras::NONE, NOW, &t).stall_threshold_ns,
            51_200_000_000
        );
        assert_eq!(class(&at, &t), SlotClass::Progressing);
        let mut over = at;
        over.last_progress_ns -= 1;
        over.phase_start_ns -= 1;
        over.step_start_ns -= 1;
        assert_eq!(class(&over, &t), SlotClass::Stalled);
    }

    #[test]
    fn last_step_duration_wins_when_larger() {
        let t = Thresholds::default();
        let mut s = decode(100, 1000, 10 * S, 0);
        s.step_start_ns = NOW;
        s.step_size = 1; // 1 / 10 tok/s = 0.1 s
        s.last_step_ns = 4 * S; // the last step took 4 s
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.expected_step_ns, Some(4 * S));
        assert_eq!(d.stall_threshold_ns, 40 * S);
    }

    #[test]
    fn no_progress_in_phase_counts_from_phase_start() {
        let t = Thresholds::default();
        let mut s = decode(0, 100, 31 * S, 500 * S);
        s.steps_done = 0;
        assert_eq!(
            derive(&s, SlotExtras::NONE, NOW, &t).last_progress_age_ns,
            Some(31 * S)
        );
        assert_eq!(class(&s, &t), SlotClass::Stalled);
        let fresh = decode(0, 100, 30 * S, 500 * S);
        assert_eq!(class(&fresh, &t), SlotClass::Progressing);
    }

    #[test]
    fn slow_exactly_at_budget_is_not_slow_just_over_is() {
        // 10 tok/s, 50 tokens left: ETA 5 s.
        let s = decode(50, 100, 5 * S, 0);
        assert_eq!(
            derive(&s, SlotExtras::NONE, NOW, &Thresholds::default()).eta_s,
            Some(5.0)
        );
        let at = Thresholds {
            budget: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        assert_eq!(class(&s, &at), SlotClass::Progressing);
        let under = Thresholds {
            budget: Some(Duration::from_nanos(5 * S - 1)),
            ..Default::default()
        };
        assert_eq!(class(&s, &under), SlotClass::Slow);
        // No budget: never slow. Unknown ETA: never slow.
        assert_eq!(class(&s, &Thresholds::default()), SlotClass::Progressing);
        let unknown = decode(50, 0, 5 * S, 0);
        assert_eq!(class(&unknown, &under), SlotClass::Progressing);
        // Stalled outranks slow.
        let stuck = decode(50, 100, 100 * S, 31 * S);
        assert_eq!(class(&stuck, &under), SlotClass::Stalled);
    }

    #[test]
    fn orphaned_when_engine_dead_or_closed() {
        let t = Thresholds::default();
        let s = decode(10, 100, S, 0);
        assert_eq!(class_of(&s, 0, Liveness::Dead, &t), SlotClass::Orphaned);
        assert_eq!(class_of(&s, 0, Liveness::Closed, &t), SlotClass::Orphaned);
        let stuck = decode(10, 100, 100 * S, 90 * S);
        assert_eq!(class_of(&stuck, 0, Liveness::Dead, &t), SlotClass::Orphaned);
    }

    #[test]
    fn unknown_phase_is_judged_by_its_stamps() {
        let t = Thresholds::default();
        let mut s = decode(1, 10, 40 * S, 31 * S);
        s.phase = Phase::Unknown(42);
        assert_eq!(class(&s, &t), SlotClass::Stalled);
    }

    #[test]
    fn future_stamps_do_not_underflow() {
        let t = Thresholds::default();
        let mut s = decode(1, 10, 0, 0);
        s.phase_start_ns = NOW + S;
        s.last_progress_ns = NOW + 2 * S;
        s.step_start_ns = NOW + 3 * S;
        let d = derive(&s, SlotExtras::NONE, NOW, &t);
        assert_eq!(d.last_progress_age_ns, Some(0));
        assert_eq!(d.step_age_ns, Some(0));
        assert_eq!(class(&s, &t), SlotClass::Progressing);
    }

    #[test]
    fn hostile_values_never_produce_nan_or_inf() {
        let t = Thresholds::default();
        for v in [0, 1, u64::MAX / 2, u64::MAX] {
            let s = SlotState {
                phase: Phase::Decode,
                work_done: v,
                work_total: v.wrapping_add(1),
                phase_start_ns: 1,
                last_progress_ns: v,
                step_start_ns: v,
                step_size: v,
                last_step_ns: v,
                steps_done: v,
                ..Default::default()
            };
            let d = derive(&s, SlotExtras::NONE, NOW, &t);
            for x in [d.progress, d.rate_per_s, d.eta_s].into_iter().flatten() {
                assert!(x.is_finite() && x >= 0.0, "{x} from {v}");
            }
            let _ = class(&s, &t);
        }
    }

    fn header(beat_age: u64) -> HeaderSnapshot {
        HeaderSnapshot {
            lifecycle: Lifecycle::Ready,
            heartbeat_ns: NOW - beat_age,
            loop_iterations: 1,
            closed_ns: 0,
            counters: EngineCounters::default(),
        }
    }

    #[test]
    fn engine_health_states() {
        let t = Thresholds::default();
        let beat = 30 * S;
        let stalled = [
            (Phase::Decode, SlotClass::Stalled),
            (Phase::Idle, SlotClass::Idle),
        ];
        let mixed = [
            (Phase::Decode, SlotClass::Stalled),
            (Phase::Prefill, SlotClass::Progressing),
        ];
        let h = |l: Liveness, age: u64, slots: &[(Phase, SlotClass)]| {
            engine_health(l, &header(age), slots, NOW, &t)
        };
        assert_eq!(h(Liveness::Live, beat, &stalled), EngineHealth::Live);
        assert_eq!(h(Liveness::Live, beat + 1, &stalled), EngineHealth::Hung);
        assert_eq!(h(Liveness::Live, beat + 1, &mixed), EngineHealth::Live);
        assert_eq!(h(Liveness::Live, beat + 1, &[]), EngineHealth::Hung);
        // A slow slot moves: not hung. A torn slot counts neither way.
        let slow = [
            (Phase::Decode, SlotClass::Stalled),
            (Phase::Decode, SlotClass::Slow),
        ];
        assert_eq!(h(Liveness::Live, beat + 1, &slow), EngineHealth::Live);
        let torn = [
            (Phase::Decode, SlotClass::Stalled),
            (Phase::Decode, SlotClass::Torn),
        ];
        assert_eq!(h(Liveness::Live, beat + 1, &torn), EngineHealth::Hung);
        let queued = [(Phase::Queued, SlotClass::Queued)];
        assert_eq!(h(Liveness::Live, beat + 1, &queued), EngineHealth::Hung);
        assert_eq!(h(Liveness::Live, 0, &stalled), EngineHealth::Live);
        assert_eq!(h(Liveness::Dead, beat + 1, &stalled), EngineHealth::Dead);
        assert_eq!(
            h(Liveness::Closed, beat + 1, &stalled),
            EngineHealth::Closed
        );
    }

    #[test]
    fn names_and_severities() {
        let names: Vec<_> = SlotClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "idle",
                "queued",
                "progressing",
                "slow",
                "stalled",
                "orphaned",
                "torn"
            ]
        );
        for c in SlotClass::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert_eq!(
            Severity::Warning.worst(Severity::Unknown),
            Severity::Unknown
        );
        assert_eq!(
            Severity::Critical.worst(Severity::Unknown),
            Severity::Critical
        );
        assert_eq!(Severity::Critical.exit_code(), 2);
    }

    /// A decode step in flight for `step_age`, silent since the last step `silence` ago,
    /// with the writer's prediction of `predicted` ns and a bound of `ppm`.
    fn predicted_decode(
        step_age: u64,
        silence: u64,
        predicted: u64,
        ppm: u64,
    ) -> (SlotState, Prediction) {
        let mut s = decode(50, 100, 10 * S, silence);
        s.step_start_ns = NOW - step_age;
        s.step_size = 1;
        s.last_step_ns = predicted;
        let p = Prediction {
            step_expected_ns: predicted,
            step_start_ns: s.step_start_ns,
            task_expected_end_ns: NOW + 4 * S,
            phase_start_ns: s.phase_start_ns,
            error_ppm: ppm,
        };
        (s, p)
    }

    fn class_predicted(
        s: &SlotState,
        p: Prediction,
        layer: Option<Substep>,
    ) -> (SlotClass, Derived) {
        let t = Thresholds::default();
        let extras = SlotExtras {
            substep: layer,
            prediction: Some(p),
            ..SlotExtras::NONE
        };
        let d = derive(s, extras, NOW, &t);
        (classify_derived(s, 0, Liveness::Live, &d, &t), d)
    }

    /// A batched engine's decode slot that waited 3 s behind another slot's prefill chunk
    /// moves again when its own step starts: neither slow nor stalled (it was called slow
    /// once in the mixed run of `scripts/bench-eta.py verdicts`).
    /// llama-server's first prompt ubatch through the preload was predicted at 20 ms from
    /// its warm-up alone and took 1.8 s: without a bound the prediction is no yardstick.
    #[test]
    fn an_unconfident_prediction_does_not_make_a_step_slow() {
        let (s, p) = predicted_decode(1800 * MS, 1800 * MS, 20 * MS, 0);
        assert_eq!(class_predicted(&s, p, None).0, SlotClass::Progressing);
        // A confident one does (1.8 s against 200 ms, within its 2 s stall threshold).
        let (s, p) = predicted_decode(1800 * MS, 1800 * MS, 200 * MS, 100_000);
        assert_eq!(class_predicted(&s, p, None).0, SlotClass::Slow);
    }

    #[test]
    fn a_step_that_just_started_after_a_wait_is_movement() {
        let (s, p) = predicted_decode(10 * MS, 3 * S, 18 * MS, 100_000);
        assert_eq!(class_predicted(&s, p, None).0, SlotClass::Progressing);
        let moving = at_layer(&s, 3, 5 * MS);
        assert_eq!(
            class_predicted(&s, p, Some(moving)).0,
            SlotClass::Progressing
        );
        // The same step 2 s old, its layers silent for as long: stalled.
        let (s, p) = predicted_decode(2 * S, 3 * S, 18 * MS, 100_000);
        let silent = at_layer(&s, 3, 2 * S);
        assert_eq!(class_predicted(&s, p, Some(silent)).0, SlotClass::Stalled);
    }

    #[test]
    fn the_eta_comes_from_the_writers_model_while_its_end_lies_ahead() {
        let (s, p) = predicted_decode(10 * MS, 0, 30 * MS, 100_000);
        let (_, d) = class_predicted(&s, p, None);
        assert_eq!((d.eta_s, d.eta_source), (Some(4.0), Some(EtaSource::Model)));
        // 50 tokens in 10 s: the rate says 10 s left; the model says 4 s.
        assert_eq!(
            derive(&s, SlotExtras::NONE, NOW, &Thresholds::default()).eta_s,
            Some(10.0)
        );
        assert_eq!(
            derive(&s, SlotExtras::NONE, NOW, &Thresholds::default()).eta_source,
            Some(EtaSource::Rate)
        );
        // An end that has passed, or that names another phase: the rate again.
        for q in [
            Prediction {
                task_expected_end_ns: NOW - 1,
                ..p
            },
            Prediction {
                task_expected_end_ns: NOW,
                ..p
            },
            Prediction {
                phase_start_ns: 1,
                ..p
            },
            Prediction {
                task_expected_end_ns: 0,
                ..p
            },
        ] {
            let (_, d) = class_predicted(&s, q, None);
            assert_eq!(
                (d.eta_s, d.eta_source),
                (Some(10.0), Some(EtaSource::Rate)),
                "{q:?}"
            );
        }
        // No total: no ETA at all, whatever the model says.
        let unknown = SlotState { work_total: 0, ..s };
        let (_, d) = class_predicted(&unknown, p, None);
        assert_eq!((d.eta_s, d.eta_source), (None, None));
    }

    #[test]
    fn a_confident_prediction_lowers_the_floor_to_one_second() {
        // A 30 ms decode step, predicted with a 10% bound: stalled after 1 s, not 30 s.
        let (s, p) = predicted_decode(1_100 * MS, 1_100 * MS, 30 * MS, 100_000);
        let (c, d) = class_predicted(&s, p, None);
        assert!(d.confident);
        assert_eq!(d.stall_threshold_ns, S);
        assert_eq!(c, SlotClass::Stalled);
        let (s, p) = predicted_decode(900 * MS, 900 * MS, 30 * MS, 100_000);
        let (c, _) = class_predicted(&s, p, None);
        assert_eq!(
            c,
            SlotClass::Slow,
            "past 4x its prediction, within the threshold"
        );
        let (s, p) = predicted_decode(100 * MS, 100 * MS, 30 * MS, 100_000);
        assert_eq!(
            class_predicted(&s, p, None).0,
            SlotClass::Progressing,
            "3.3x: not slow"
        );
        // Exactly at the threshold: still healthy (strict comparisons).
        let (s, p) = predicted_decode(S, S, 30 * MS, 100_000);
        assert_eq!(class_predicted(&s, p, None).0, SlotClass::Slow);
        // Without a bound, or with one above 50%: the 30 s floor.
        for ppm in [0, 500_001, u64::MAX] {
            let (s, p) = predicted_decode(5 * S, 5 * S, 30 * MS, ppm);
            let (c, d) = class_predicted(&s, p, None);
            assert!(!d.confident, "{ppm}");
            assert_eq!(d.stall_threshold_ns, 30 * S, "{ppm}");
            assert_eq!(
                c,
                SlotClass::Progressing,
                "{ppm}: past 4x an unconfident prediction is not slow, nor stalled"
            );
        }
        let (s, p) = predicted_decode(5 * S, 5 * S, 30 * MS, 500_000);
        assert!(class_predicted(&s, p, None).1.confident, "50% is confident");
        // A prediction naming another step is no prediction.
        let (s, p) = predicted_decode(5 * S, 5 * S, 30 * MS, 100_000);
        let other = Prediction {
            step_start_ns: 1,
            ..p
        };
        let (c, d) = class_predicted(&s, other, None);
        assert_eq!((d.predicted_step_ns, d.confident), (None, false));
        assert_eq!(
            c,
            SlotClass::Progressing,
            "the rate's 30 s floor, no slow rule"
        );
    }

    #[test]
    fn a_silent_layer_is_judged_by_its_predicted_time() {
        // A 3 s prefill chunk of 30 layers (100 ms each), predicted with a 20% bound.
        let mut s = long_chunk();
        s.step_start_ns = NOW - 5 * S;
        s.last_progress_ns = NOW - 5 * S;
        let p = Prediction {
            step_expected_ns: 3 * S,
            step_start_ns: s.step_start_ns,
            task_expected_end_ns: NOW + 60 * S,
            phase_start_ns: s.phase_start_ns,
            error_ppm: 200_000,
        };
        let (c, d) = class_predicted(&s, p, Some(at_layer(&s, 12, 1_100 * MS)));
        assert_eq!(d.expected_layer_ns, Some(100 * MS));
        assert_eq!(d.layer_stall_threshold_ns, S);
        assert_eq!(d.effective_stall_threshold_ns(), S);
        assert_eq!(
            c,
            SlotClass::Stalled,
            "a layer silent for 1.1 s: stalled at layer 12"
        );
        let (c, _) = class_predicted(&s, p, Some(at_layer(&s, 12, 500 * MS)));
        assert_eq!(
            c,
            SlotClass::Progressing,
            "layers move, the step is within 4x"
        );
        // Past 4x its prediction with layers moving: slow.
        let mut late = s;
        late.step_start_ns = NOW - 13 * S;
        let p = Prediction {
            step_start_ns: late.step_start_ns,
            ..p
        };
        let (c, _) = class_predicted(&late, p, Some(at_layer(&late, 29, 50 * MS)));
        assert_eq!(c, SlotClass::Slow);
    }
}
