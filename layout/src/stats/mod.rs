//! Per-slot statistics (format v1.3, FORMAT.md §17): cumulative counters and histograms
//! that the writer derives from the step events it already publishes, in one block per
//! slot with its own seqlock (`STATS_SEQ`), readable at any time, a dead engine's segment
//! included.
//!
//! - [`buckets`]: the two fixed bucket layouts (time in µs, ratios in Q20);
//! - this module: the block's offsets, [`HistogramKind`] and [`Counter`];
//! - [`SlotStats`] (`value`): a reader's consistent copy, with the format's checks;
//! - `recorder`: the writer side, which turns consecutive published records into updates.

pub mod buckets;
pub(crate) mod recorder;
mod value;

pub use value::{Histogram, SlotStats, StatsDefect};

use crate::header::{capabilities as caps, WORD_LEN};

/// Bytes of one slot's statistics in v1.3 (752 words).
pub const STATS_LEN: usize = 6016;
/// Offset of the block's seqlock sequence.
pub const STATS_SEQ_OFFSET: usize = 0;
/// Data words after `STATS_SEQ` (what a reader copies in one seqlock read).
pub const STATS_DATA_WORDS: usize = STATS_LEN / WORD_LEN - 1;

/// Offset of the task-begins counter.
pub const TASKS_BEGUN_OFFSET: usize = 8;
/// Offset of the task-ends counter.
pub const TASKS_ENDED_OFFSET: usize = 16;
/// Offset of the current (or last) task's arrival time (a value, not a counter).
pub const TASK_ARRIVAL_NS_OFFSET: usize = 24;
/// Offset of the count of tasks begun without an arrival time.
pub const TASKS_NO_ARRIVAL_OFFSET: usize = 32;
/// Offset of the last task's finish cause (a value, not a counter).
pub const LAST_FINISH_CAUSE_OFFSET: usize = 40;
/// Offset of the prompt tokens evaluated.
pub const PROMPT_TOKENS_COMPUTED_OFFSET: usize = 48;
/// Offset of the prompt tokens reused from the cache.
pub const PROMPT_TOKENS_REUSED_OFFSET: usize = 56;
/// Offset of the tokens generated.
pub const TOKENS_GENERATED_OFFSET: usize = 64;
/// Offset of `TASKS_BY_CAUSE[16]`, indexed by finish cause (15 = any larger).
pub const TASKS_BY_CAUSE_OFFSET: usize = 128;
/// Offset of `ERRORS_BY_CODE[16]`, indexed by error code (15 = any larger).
pub const ERRORS_BY_CODE_OFFSET: usize = 256;
/// Offset of `BUSY_NS[8]`, indexed by phase.
pub const BUSY_NS_OFFSET: usize = 384;
/// Offset of `STEPS[8]`, indexed by phase.
pub const STEPS_OFFSET: usize = 448;
/// Offset of `STEPS_ABANDONED[8]`, indexed by phase.
pub const STEPS_ABANDONED_OFFSET: usize = 512;
/// Entries of the by-cause and by-code arrays.
pub const CAUSE_WORDS: usize = 16;
/// Entries of the per-phase arrays.
pub const PHASE_WORDS: usize = 8;
/// Offset of the first histogram.
pub const HISTOGRAMS_OFFSET: usize = 640;
/// Bytes of one histogram: `COUNT`, `SUM`, 54 bucket words.
pub const HISTOGRAM_LEN: usize = 448;
/// Offset in a histogram of its observation count.
pub const HIST_COUNT_OFFSET: usize = 0;
/// Offset in a histogram of the sum of its observations.
pub const HIST_SUM_OFFSET: usize = 8;
/// Offset in a histogram of `BUCKET[0]`.
pub const HIST_BUCKETS_OFFSET: usize = 16;

/// A family of statistics: what a reader needs, besides `slot_stats`, for it to be
/// present (FORMAT §17.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Derived from the steps alone (`slot_stats`).
    Steps,
    /// Needs the cost model's predictions (`step_prediction`).
    Predictions,
    /// Needs arrival times: the host's (`arrival_times`) or each task's first compute
    /// (`prompt_arrivals`).
    Arrivals,
    /// Needs the host's arrival times of requests (`arrival_times`): the queue wait.
    Queue,
    /// Needs the host's finish causes (`finish_causes`).
    Causes,
}

impl Family {
    /// Whether a writer with capability bits `capabilities` fills this family.
    pub fn present_in(self, capabilities: u64) -> bool {
        let extra = match self {
            Self::Steps => 0,
            Self::Predictions => caps::STEP_PREDICTION,
            Self::Arrivals if capabilities & caps::PROMPT_ARRIVALS != 0 => 0,
            Self::Arrivals | Self::Queue => caps::ARRIVAL_TIMES,
            Self::Causes => caps::FINISH_CAUSES,
        };
        let want = caps::SLOT_STATS | extra;
        capabilities & want == want
    }
}

/// The twelve histograms of a slot, in block order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistogramKind {
    /// Arrival to the first generated token.
    Ttft,
    /// Each decode step's duration per token it produced.
    Itl,
    /// Arrival to the task's first compute.
    QueueWait,
    /// A task's prefill phase.
    PrefillTime,
    /// A task's decode phase.
    DecodeTime,
    /// Arrival to the task's end.
    E2e,
    /// Each prefill step.
    StepPrefill,
    /// Each decode step.
    StepDecode,
    /// Each save block.
    StepSave,
    /// Each restore block.
    StepRestore,
    /// Actual / predicted duration of each predicted prefill step (Q20).
    RatioPrefill,
    /// The same for decode steps.
    RatioDecode,
}

impl HistogramKind {
    /// Every histogram, in block order.
    pub const ALL: [HistogramKind; 12] = [
        Self::Ttft,
        Self::Itl,
        Self::QueueWait,
        Self::PrefillTime,
        Self::DecodeTime,
        Self::E2e,
        Self::StepPrefill,
        Self::StepDecode,
        Self::StepSave,
        Self::StepRestore,
        Self::RatioPrefill,
        Self::RatioDecode,
    ];

    /// Offset of the histogram in the block.
    pub const fn offset(self) -> usize {
        HISTOGRAMS_OFFSET + HISTOGRAM_LEN * self as usize
    }

    /// Whether its values are Q20 ratios (else nanoseconds).
    pub const fn is_ratio(self) -> bool {
        matches!(self, Self::RatioPrefill | Self::RatioDecode)
    }

    /// Its number of buckets.
    pub const fn buckets(self) -> usize {
        if self.is_ratio() {
            buckets::RATIO_BUCKETS
        } else {
            buckets::TIME_BUCKETS
        }
    }

    /// The bucket of a value of this histogram's unit.
    #[inline]
    pub fn bucket_of(self, value: u64) -> usize {
        if self.is_ratio() {
            buckets::ratio_bucket(value)
        } else {
            buckets::time_bucket(value)
        }
    }

    /// The family it belongs to.
    pub const fn family(self) -> Family {
        match self {
            Self::QueueWait => Family::Queue,
            Self::Ttft | Self::E2e => Family::Arrivals,
            Self::RatioPrefill | Self::RatioDecode => Family::Predictions,
            _ => Family::Steps,
        }
    }

    /// The step histogram of a phase (prefill, decode, save, restore).
    pub fn step_of(phase: crate::Phase) -> Option<Self> {
        match phase {
            crate::Phase::Prefill => Some(Self::StepPrefill),
            crate::Phase::Decode => Some(Self::StepDecode),
            crate::Phase::Save => Some(Self::StepSave),
            crate::Phase::Restore => Some(Self::StepRestore),
            _ => None,
        }
    }

    /// The ratio histogram of a phase (prefill, decode).
    pub fn ratio_of(phase: crate::Phase) -> Option<Self> {
        match phase {
            crate::Phase::Prefill => Some(Self::RatioPrefill),
            crate::Phase::Decode => Some(Self::RatioDecode),
            _ => None,
        }
    }

    /// Snake-case name for display, JSON and metric names.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ttft => "time_to_first_token",
            Self::Itl => "inter_token_latency",
            Self::QueueWait => "queue_wait",
            Self::PrefillTime => "prefill_time",
            Self::DecodeTime => "decode_time",
            Self::E2e => "e2e_latency",
            Self::StepPrefill => "step_prefill",
            Self::StepDecode => "step_decode",
            Self::StepSave => "step_save",
            Self::StepRestore => "step_restore",
            Self::RatioPrefill => "ratio_prefill",
            Self::RatioDecode => "ratio_decode",
        }
    }
}

/// The scalar words of a slot's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Task-begins events.
    TasksBegun,
    /// Task-ends events.
    TasksEnded,
    /// When the current (or last) task arrived (a value; 0 = not given).
    TaskArrivalNs,
    /// Tasks begun without an arrival time.
    TasksNoArrival,
    /// The cause of the last task that ended (a value).
    LastFinishCause,
    /// Prompt tokens evaluated.
    PromptTokensComputed,
    /// Prompt tokens reused from the cache.
    PromptTokensReused,
    /// Tokens generated.
    TokensGenerated,
}

impl Counter {
    /// Every scalar, in block order.
    pub const ALL: [Counter; 8] = [
        Self::TasksBegun,
        Self::TasksEnded,
        Self::TaskArrivalNs,
        Self::TasksNoArrival,
        Self::LastFinishCause,
        Self::PromptTokensComputed,
        Self::PromptTokensReused,
        Self::TokensGenerated,
    ];

    /// Offset in the block.
    pub const fn offset(self) -> usize {
        TASKS_BEGUN_OFFSET + WORD_LEN * self as usize
    }

    /// The family it belongs to.
    pub const fn family(self) -> Family {
        match self {
            Self::TaskArrivalNs | Self::TasksNoArrival => Family::Arrivals,
            Self::LastFinishCause => Family::Causes,
            _ => Family::Steps,
        }
    }

    /// Whether it only grows (a counter), as opposed to a value that may change freely.
    pub const fn is_monotonic(self) -> bool {
        !matches!(self, Self::TaskArrivalNs | Self::LastFinishCause)
    }

    /// Snake-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TasksBegun => "tasks_begun",
            Self::TasksEnded => "tasks_ended",
            Self::TaskArrivalNs => "task_arrival_ns",
            Self::TasksNoArrival => "tasks_no_arrival",
            Self::LastFinishCause => "last_finish_cause",
            Self::PromptTokensComputed => "prompt_tokens_computed",
            Self::PromptTokensReused => "prompt_tokens_reused",
            Self::TokensGenerated => "tokens_generated",
        }
    }
}

const _: () = assert!(Counter::TokensGenerated.offset() == TOKENS_GENERATED_OFFSET);
const _: () = assert!(Counter::LastFinishCause.offset() == LAST_FINISH_CAUSE_OFFSET);
const _: () = assert!(HistogramKind::Itl.offset() == 1088);
const _: () = assert!(HistogramKind::StepPrefill.offset() == 3328);
const _: () = assert!(HistogramKind::RatioDecode.offset() + HISTOGRAM_LEN == STATS_LEN);
const _: () = assert!(HIST_BUCKETS_OFFSET + buckets::TIME_BUCKETS * WORD_LEN == HISTOGRAM_LEN);
const _: () = assert!(STEPS_ABANDONED_OFFSET + PHASE_WORDS * WORD_LEN <= HISTOGRAMS_OFFSET);
const _: () = assert!(STATS_DATA_WORDS == 751);
