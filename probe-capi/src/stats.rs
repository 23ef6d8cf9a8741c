//! An engine's statistics and a slot's flight recorder (segment format v1.3, FORMAT §17
//! and §18), added in ABI minor 6: `hydra_probe_read_stats`, `hydra_probe_histogram_bound`
//! and `hydra_probe_read_history`.

use crate::error::{guard, probe_error};
use crate::{handle, versioned_out, write_versioned, Versioned};
use hydra_ffi_support::{out_ptr, FfiError};
use hydra_layout::stats::{buckets, Counter, HistogramKind, CAUSE_WORDS, PHASE_WORDS};
use hydra_layout::FlightEntry;
use hydra_probe::{ProbeError, StatsSum};

/// `HydraProbeStats::state` and `HydraProbeHistory::state`: the engine keeps none (a
/// writer before format v1.3, or one without the capability).
pub const HYDRA_PROBE_STATS_ABSENT: u32 = 0;

/// `HydraProbeStats::state` and `HydraProbeHistory::state`: the figures are the engine's.
pub const HYDRA_PROBE_STATS_KNOWN: u32 = 1;

/// Histograms of a slot (`HydraProbeStats::histograms`), indexed by the
/// `HYDRA_PROBE_HISTOGRAM_*` constants.
pub const HYDRA_PROBE_HISTOGRAMS: usize = 12;

/// Buckets of the largest histogram layout: a `HydraProbeHistogram::buckets` array has
/// room for every layout (its `bucket_count` says how many are used).
pub const HYDRA_PROBE_HISTOGRAM_BUCKETS: usize = 54;

/// Entries of the per-cause and per-code arrays.
pub const HYDRA_PROBE_CAUSES: usize = 16;

/// Entries of the per-phase arrays (indexed by the raw phase, `HYDRA_PROBE_PHASE_*`).
pub const HYDRA_PROBE_PHASES: usize = 8;

/// Histogram index: a task's arrival to its first generated token, ns.
pub const HYDRA_PROBE_HISTOGRAM_TTFT: u32 = 0;
/// Histogram index: each decode step's duration per token it produced, ns.
pub const HYDRA_PROBE_HISTOGRAM_ITL: u32 = 1;
/// Histogram index: a task's arrival to its first compute, ns.
pub const HYDRA_PROBE_HISTOGRAM_QUEUE_WAIT: u32 = 2;
/// Histogram index: a task's prefill phase, ns.
pub const HYDRA_PROBE_HISTOGRAM_PREFILL_TIME: u32 = 3;
/// Histogram index: a task's decode phase, ns.
pub const HYDRA_PROBE_HISTOGRAM_DECODE_TIME: u32 = 4;
/// Histogram index: a task's arrival to its end, ns.
pub const HYDRA_PROBE_HISTOGRAM_E2E: u32 = 5;
/// Histogram index: each prefill step, ns.
pub const HYDRA_PROBE_HISTOGRAM_STEP_PREFILL: u32 = 6;
/// Histogram index: each decode step, ns.
pub const HYDRA_PROBE_HISTOGRAM_STEP_DECODE: u32 = 7;
/// Histogram index: each save block, ns.
pub const HYDRA_PROBE_HISTOGRAM_STEP_SAVE: u32 = 8;
/// Histogram index: each restore block, ns.
pub const HYDRA_PROBE_HISTOGRAM_STEP_RESTORE: u32 = 9;
/// Histogram index: actual / predicted duration of each predicted prefill step, Q20 fixed
/// point (1 << 20 is a step that took exactly its prediction).
pub const HYDRA_PROBE_HISTOGRAM_RATIO_PREFILL: u32 = 10;
/// Histogram index: the same for decode steps, Q20.
pub const HYDRA_PROBE_HISTOGRAM_RATIO_DECODE: u32 = 11;

// The constants are literals for the C header; each is the format's own (FORMAT §17).
const _: () = {
    assert!(HYDRA_PROBE_HISTOGRAMS == HistogramKind::ALL.len());
    assert!(HYDRA_PROBE_HISTOGRAM_BUCKETS == buckets::TIME_BUCKETS);
    assert!(buckets::RATIO_BUCKETS <= HYDRA_PROBE_HISTOGRAM_BUCKETS);
    assert!(HYDRA_PROBE_CAUSES == CAUSE_WORDS);
    assert!(HYDRA_PROBE_PHASES == PHASE_WORDS);
    assert!(HistogramKind::ALL[HYDRA_PROBE_HISTOGRAM_TTFT as usize] as u32 == 0);
    assert!(HistogramKind::RatioDecode as u32 == HYDRA_PROBE_HISTOGRAM_RATIO_DECODE);
    assert!(HistogramKind::StepPrefill as u32 == HYDRA_PROBE_HISTOGRAM_STEP_PREFILL);
    assert!(HistogramKind::E2e as u32 == HYDRA_PROBE_HISTOGRAM_E2E);
};

/// One histogram: its observations per bucket (not cumulative; bucket `k` holds the values
/// in `(bound(k - 1), bound(k)]`, `hydra_probe_histogram_bound`), their count and sum.
/// 464 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeHistogram {
    /// 1 when the writer fills this histogram, else 0 (and the rest is 0).
    pub present: u64,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values: ns for times, Q20 for ratios (saturating).
    pub sum: u64,
    /// Buckets used: 54 for times, 50 for ratios; the last is `+Inf`.
    pub bucket_count: u64,
    /// Observations per bucket.
    pub buckets: [u64; HYDRA_PROBE_HISTOGRAM_BUCKETS],
}

/// An engine's statistics, or one slot's (filled by `hydra_probe_read_stats`): counters
/// and histograms kept by the writer from the segment's creation, never reset by a task.
/// Counters the writer does not fill are -1; absent histograms have `present` 0. Version 1
/// is 6,096 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeStats {
    /// Set by the caller to `sizeof(HydraProbeStats)` before the call; the library stores
    /// the bytes it filled (fields added later go at the end).
    pub size: u32,
    /// `HYDRA_PROBE_STATS_ABSENT` or `_KNOWN`; the fields below are 0 (counters -1) unless
    /// KNOWN.
    pub state: u32,
    /// Slots summed.
    pub slots_summed: u64,
    /// Slots left out: a copy that was torn or failed the format's checks (a faulty or
    /// hostile writer). Their figures are not in the sums.
    pub slots_left_out: u64,
    /// Tasks begun; -1 when not kept.
    pub tasks_begun: i64,
    /// Tasks ended, whatever the cause; -1 when not kept.
    pub tasks_ended: i64,
    /// Tasks begun without an arrival time (absent from the arrival histograms); -1 when
    /// the writer is not given arrival times.
    pub tasks_no_arrival: i64,
    /// Prompt tokens evaluated; -1 when not kept.
    pub prompt_tokens_computed: i64,
    /// Prompt tokens reused from the cache; -1 when not kept.
    pub prompt_tokens_reused: i64,
    /// Tokens generated; -1 when not kept.
    pub tokens_generated: i64,
    /// 1 when the writer gives finish causes (the two arrays below), else 0.
    pub causes_present: u64,
    /// Tasks ended per finish cause, indexed by the raw cause (named by
    /// `hydra_probe_value_name(HYDRA_PROBE_VALUE_FINISH_CAUSE, i)`).
    pub tasks_by_cause: [u64; HYDRA_PROBE_CAUSES],
    /// Failed tasks per error code, indexed by the raw code
    /// (`HYDRA_PROBE_VALUE_ERROR_CODE`).
    pub errors_by_code: [u64; HYDRA_PROBE_CAUSES],
    /// Nanoseconds spent in steps per phase, indexed by the raw phase.
    pub busy_ns: [u64; HYDRA_PROBE_PHASES],
    /// Finished steps per phase.
    pub steps: [u64; HYDRA_PROBE_PHASES],
    /// Abandoned steps per phase (in flight when another event ended them).
    pub steps_abandoned: [u64; HYDRA_PROBE_PHASES],
    /// The histograms, indexed by `HYDRA_PROBE_HISTOGRAM_*`.
    pub histograms: [HydraProbeHistogram; HYDRA_PROBE_HISTOGRAMS],
}

const _: () = assert!(std::mem::size_of::<HydraProbeHistogram>() == 464);
const _: () = assert!(std::mem::size_of::<HydraProbeStats>() == 6096);

impl Versioned for HydraProbeStats {
    const NAME: &'static str = "HydraProbeStats";
    const MIN_SIZE: usize = 6096;
}

const NO_HISTOGRAM: HydraProbeHistogram = HydraProbeHistogram {
    present: 0,
    count: 0,
    sum: 0,
    bucket_count: 0,
    buckets: [0; HYDRA_PROBE_HISTOGRAM_BUCKETS],
};

impl HydraProbeStats {
    fn of(sum: &StatsSum) -> Self {
        let counter = |c: Counter| {
            sum.counter(c)
                .map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
        };
        let mut histograms = [NO_HISTOGRAM; HYDRA_PROBE_HISTOGRAMS];
        for h in &sum.histograms {
            let out = &mut histograms[h.kind as usize];
            out.present = 1;
            out.count = h.count;
            out.sum = h.sum;
            out.bucket_count = h.buckets.len() as u64;
            for (o, b) in out.buckets.iter_mut().zip(&h.buckets) {
                *o = *b;
            }
        }
        Self {
            size: std::mem::size_of::<Self>() as u32,
            state: if sum.published {
                HYDRA_PROBE_STATS_KNOWN
            } else {
                HYDRA_PROBE_STATS_ABSENT
            },
            slots_summed: sum.slots.len() as u64,
            slots_left_out: sum.left_out.len() as u64,
            tasks_begun: counter(Counter::TasksBegun),
            tasks_ended: counter(Counter::TasksEnded),
            tasks_no_arrival: counter(Counter::TasksNoArrival),
            prompt_tokens_computed: counter(Counter::PromptTokensComputed),
            prompt_tokens_reused: counter(Counter::PromptTokensReused),
            tokens_generated: counter(Counter::TokensGenerated),
            causes_present: u64::from(sum.tasks_by_cause.is_some()),
            tasks_by_cause: sum.tasks_by_cause.unwrap_or_default(),
            errors_by_code: sum.errors_by_code.unwrap_or_default(),
            busy_ns: sum.busy_ns,
            steps: sum.steps,
            steps_abandoned: sum.steps_abandoned,
            histograms,
        }
    }
}

/// Reads the statistics of slot `slot`, or of every slot summed when `slot` is negative,
/// now, into `*out`: each slot's block is copied once and checked; a slot whose copy fails
/// is left out of the sum and counted in `slots_left_out`. An engine that keeps none is
/// not an error: `out->state` says ABSENT. Set `out->size` to `sizeof(HydraProbeStats)`
/// first. Added in ABI minor 6: check `hydra_probe_abi_minor() >= 6` first.
///
/// Errors: `HYDRA_PROBE_E_SLOT_OUT_OF_RANGE` for a slot past the engine's;
/// `HYDRA_PROBE_E_IO` when the file changed size.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_stats(
    probe: *const crate::HydraProbe,
    slot: i64,
    out: *mut HydraProbeStats,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `out` is NULL or readable.
        let (out, len) = unsafe { versioned_out(out) }?;
        let slot = usize::try_from(slot).ok();
        probe
            .reader
            .check_size()
            .map_err(|e| probe_error(e.into()))?;
        let sum = StatsSum::capture(&probe.reader, slot).map_err(probe_error)?;
        // SAFETY: `out` is not NULL and writable for its size (caller).
        unsafe { write_versioned(out, HydraProbeStats::of(&sum), len) };
        Ok(())
    })
}

/// The inclusive upper bound of bucket `k` of histogram `histogram`
/// (`HYDRA_PROBE_HISTOGRAM_*`): nanoseconds for a time histogram (its bounds are whole
/// microseconds), Q20 for a ratio histogram; `UINT64_MAX` for the last (`+Inf`) bucket,
/// past it, and for an unknown histogram. The layouts never change within format major 1
/// (FORMAT §17.2). Added in ABI minor 6.
#[unsafe(no_mangle)]
pub extern "C" fn hydra_probe_histogram_bound(histogram: u32, k: u32) -> u64 {
    let Some(kind) = HistogramKind::ALL.get(histogram as usize) else {
        return u64::MAX;
    };
    let k = k as usize;
    let bound = if kind.is_ratio() {
        buckets::ratio_bound_q20(k)
    } else {
        buckets::time_bound_us(k).map(|us| us * 1000)
    };
    bound.unwrap_or(u64::MAX)
}

/// `HydraProbeHistory`: what `hydra_probe_read_history` found in a slot's flight
/// recorder. Version 1 is 32 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeHistory {
    /// Set by the caller to `sizeof(HydraProbeHistory)` before the call; the library
    /// stores the bytes it filled.
    pub size: u32,
    /// `HYDRA_PROBE_STATS_ABSENT` (the engine keeps no flight recorder) or `_KNOWN`.
    pub state: u32,
    /// Entries read (the slot's last finished steps, at most the ring's capacity).
    pub count: u64,
    /// Positions whose entry was torn (a writer that died writing it) or kept changing:
    /// never shown.
    pub torn: u64,
    /// The ordinal of the last entry written, as the ring's head word says (a hint).
    pub head: u64,
}

/// One finished (or abandoned) step of a slot's flight recorder. 112 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeStep {
    /// Its ordinal among the slot's recorded steps, from 1 (gaps are missing steps).
    pub ordinal: u64,
    /// The task it belonged to.
    pub task_id: u64,
    /// Its kind: the raw phase (`HYDRA_PROBE_PHASE_*`).
    pub kind: u64,
    /// How it ended: the raw result (`hydra_probe_value_name(HYDRA_PROBE_VALUE_STEP_RESULT,
    /// result)`: "advanced", "no_progress", "interrupted", ...).
    pub result: u64,
    /// CLOCK_MONOTONIC start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub duration_ns: u64,
    /// Units it carried (tokens; bytes for a save or restore block).
    pub size: u64,
    /// How far the slot's work advanced at its end.
    pub advanced: u64,
    /// The slot's context (`n_past`) when it started.
    pub context: u64,
    /// Layers done when it ended (0 = none published).
    pub layers_done: u64,
    /// Layers in that forward (0 = none).
    pub layers_total: u64,
    /// Predicted duration, ns (0 = none).
    pub predicted_ns: u64,
    /// The device (id in the device table) it waited on longest, 0 = none.
    pub wait_device: u64,
    /// How long that wait lasted, ns.
    pub wait_ns: u64,
}

const _: () = assert!(std::mem::size_of::<HydraProbeHistory>() == 32);
const _: () = assert!(std::mem::size_of::<HydraProbeStep>() == 112);

impl Versioned for HydraProbeHistory {
    const NAME: &'static str = "HydraProbeHistory";
    const MIN_SIZE: usize = 32;
}

impl HydraProbeStep {
    fn of(e: &FlightEntry) -> Self {
        Self {
            ordinal: e.ordinal,
            task_id: e.task_id,
            kind: e.kind.to_raw(),
            result: e.result.to_raw(),
            start_ns: e.start_ns,
            duration_ns: e.duration_ns,
            size: e.size,
            advanced: e.advanced,
            context: e.context,
            layers_done: e.layers_done,
            layers_total: e.layers_total,
            predicted_ns: e.predicted_ns,
            wait_device: e.wait_device,
            wait_ns: e.wait_ns,
        }
    }
}

/// Reads slot `slot`'s flight recorder now: `*history` gets the count of entries found,
/// and `steps[0..min(count, cap)]` the entries, oldest first (each vouched for by its own
/// sequence: a torn entry is counted in `history->torn`, never shown). A shorter array gets
/// the oldest entries that fit and the call returns `HYDRA_PROBE_E_BUFFER_TOO_SMALL`, with
/// `count` stored: the ring holds at most 65,536 entries (the reference writer keeps 64).
/// `steps` may be NULL when `cap` is 0. A dead engine's kept segment reads too. An engine
/// without a flight recorder is not an error: `history->state` says ABSENT. Set
/// `history->size` to `sizeof(HydraProbeHistory)` first. Added in ABI minor 6.
///
/// Errors: `HYDRA_PROBE_E_SLOT_OUT_OF_RANGE`; `HYDRA_PROBE_E_NOT_A_SEGMENT` for a ring whose
/// geometry is unusable (a faulty or hostile writer).
///
/// # Safety
/// `probe` is NULL or an open handle; `history` is NULL or readable and writable; `steps`
/// is NULL or writable for `cap` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_history(
    probe: *const crate::HydraProbe,
    slot: u32,
    history: *mut HydraProbeHistory,
    steps: *mut HydraProbeStep,
    cap: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `history` is NULL or readable.
        let (history, len) = unsafe { versioned_out(history) }?;
        if cap > 0 {
            out_ptr(steps, "steps")?;
        }
        let found = probe
            .reader
            .history(slot as usize)
            .map_err(|e| probe_error(ProbeError::from(e)))?;
        let (state, h) = match found {
            None => (HYDRA_PROBE_STATS_ABSENT, Default::default()),
            Some(h) => (HYDRA_PROBE_STATS_KNOWN, h),
        };
        let head = HydraProbeHistory {
            size: std::mem::size_of::<HydraProbeHistory>() as u32,
            state,
            count: h.entries.len() as u64,
            torn: h.torn as u64,
            head: h.head,
        };
        let n = h.entries.len().min(cap);
        // SAFETY: `history` is writable for its size (caller); `steps` is writable for
        // `cap >= n` entries (caller), not NULL when `cap > 0` (checked above).
        unsafe {
            write_versioned(history, head, len);
            for (i, e) in h.entries[..n].iter().enumerate() {
                steps.add(i).write(HydraProbeStep::of(e));
            }
        }
        if n < h.entries.len() {
            return Err(FfiError::buffer_too_small(format!(
                "{} steps, room for {cap}",
                h.entries.len()
            )));
        }
        Ok(())
    })
}
