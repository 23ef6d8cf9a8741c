//! The slot record: offsets, enums and the plain [`SlotState`] value (format v1).
//!
//! One record per slot, [`SLOT_STRIDE`] bytes apart, 128-byte aligned. Every field is a
//! `u64` word. Words `SEQ` to `STEPS_DONE` are guarded by the per-slot seqlock and have
//! exactly one writer (the engine's compute thread). `PENDING` sits in its own cache line
//! outside the seqlock: the engine's front end adds to it when it queues a task for the
//! slot, and the compute thread subtracts when it takes one.
//!
//! ```text
//! offset size  field              unit / values
//!      0    8  SEQ                seqlock sequence: odd while an update is in progress
//!      8    8  TASK_ID            changes when the slot takes a new task (0 = never used)
//!     16    8  PHASE              0 idle, 1 queued, 2 prefill, 3 decode, 4 save, 5 restore
//!     24    8  FINISH_REASON      last finished task: 0 none, 1 completed, 2 cancelled, 3 error
//!     32    8  ERROR_CODE         0 none, else see `ErrorCode`
//!     40    8  WORK_UNIT          0 none, 1 tokens, 2 bytes
//!     48    8  WORK_DONE          in WORK_UNIT, for the current phase
//!     56    8  WORK_TOTAL         in WORK_UNIT, for the current phase (0 = unknown)
//!     64    8  TOKENS_CACHED      prompt tokens reused from the KV cache
//!     72    8  N_PAST             tokens in the slot's KV cache
//!     80    8  N_CTX              slot context size in tokens
//!     88    8  STATE_SIZE         bytes a state save of the slot produces now
//!     96    8  TASK_START_NS      CLOCK_MONOTONIC
//!    104    8  PHASE_START_NS     CLOCK_MONOTONIC
//!    112    8  LAST_PROGRESS_NS   CLOCK_MONOTONIC of the last WORK_DONE advance
//!    120    8  STEP_START_NS      CLOCK_MONOTONIC start of the step in flight, 0 = none
//!    128    8  STEP_SIZE          tokens (or bytes) the step in flight carries
//!    136    8  LAST_STEP_NS       duration of the last finished step, ns
//!    144    8  STEPS_DONE         steps finished in the current phase
//!    152    8  SUBSTEP_DONE       v1.1: layers finished in the step in flight
//!    160    8  SUBSTEP_TOTAL      v1.1: layers in that forward (0 = no position)
//!    168    8  SUBSTEP_NS         v1.1: CLOCK_MONOTONIC when SUBSTEP_DONE last changed
//!    176    8  SUBSTEP_STEP       v1.1: STEP_START_NS of the step the position belongs to
//!    184    8  STEP_EXPECTED_NS   v1.2: predicted duration of the step in flight, ns (0 = none)
//!    192    8  PENDING            tasks queued for this slot (not seqlock-guarded)
//!    200    8  EXPECTED_STEP      v1.2: STEP_START_NS of the step STEP_EXPECTED_NS is for
//!    208    8  TASK_EXPECTED_END_NS v1.2: CLOCK_MONOTONIC when WORK_TOTAL is predicted done
//!    216    8  EXPECTED_PHASE     v1.2: PHASE_START_NS of the phase that end is for
//!    224    8  EXPECTED_ERROR_PPM v1.2: relative error bound of the predictions, ppm (0 = none)
//!    232    8  LAYERS_SENT        v1.3: layers of the step in flight handed to their devices
//!    240    8  WAIT_DEVICE        v1.3: device id the step in flight is blocked on (0 = none)
//!    248    8  WAIT_SINCE_NS      v1.3: CLOCK_MONOTONIC when that wait began
//!    256       end of the v1.0 record
//! ```

use crate::header::WORD_LEN;

/// Bytes of one v1.0 slot record, and the minimum stride a v1.0 reader accepts.
pub const SLOT_LEN: usize = 256;
/// Stride written by this version.
pub const SLOT_STRIDE: usize = SLOT_LEN;
/// Required alignment of slot records and of the stride.
pub const SLOT_ALIGN: usize = 128;

/// Sequence counter.
pub const SEQ_OFFSET: usize = 0;
/// Task id.
pub const TASK_ID_OFFSET: usize = SEQ_OFFSET + WORD_LEN;
/// [`Phase`].
pub const PHASE_OFFSET: usize = TASK_ID_OFFSET + WORD_LEN;
/// [`FinishReason`].
pub const FINISH_REASON_OFFSET: usize = PHASE_OFFSET + WORD_LEN;
/// [`ErrorCode`].
pub const ERROR_CODE_OFFSET: usize = FINISH_REASON_OFFSET + WORD_LEN;
/// [`WorkUnit`].
pub const WORK_UNIT_OFFSET: usize = ERROR_CODE_OFFSET + WORD_LEN;
/// Work done in the current phase.
pub const WORK_DONE_OFFSET: usize = WORK_UNIT_OFFSET + WORD_LEN;
/// Work total of the current phase.
pub const WORK_TOTAL_OFFSET: usize = WORK_DONE_OFFSET + WORD_LEN;
/// Prompt tokens reused from the cache.
pub const TOKENS_CACHED_OFFSET: usize = WORK_TOTAL_OFFSET + WORD_LEN;
/// Tokens in the KV cache.
pub const N_PAST_OFFSET: usize = TOKENS_CACHED_OFFSET + WORD_LEN;
/// Slot context size.
pub const N_CTX_OFFSET: usize = N_PAST_OFFSET + WORD_LEN;
/// State size in bytes.
pub const STATE_SIZE_OFFSET: usize = N_CTX_OFFSET + WORD_LEN;
/// Task start.
pub const TASK_START_NS_OFFSET: usize = STATE_SIZE_OFFSET + WORD_LEN;
/// Phase start.
pub const PHASE_START_NS_OFFSET: usize = TASK_START_NS_OFFSET + WORD_LEN;
/// Last progress.
pub const LAST_PROGRESS_NS_OFFSET: usize = PHASE_START_NS_OFFSET + WORD_LEN;
/// Start of the step in flight.
pub const STEP_START_NS_OFFSET: usize = LAST_PROGRESS_NS_OFFSET + WORD_LEN;
/// Size of the step in flight.
pub const STEP_SIZE_OFFSET: usize = STEP_START_NS_OFFSET + WORD_LEN;
/// Duration of the last finished step.
pub const LAST_STEP_NS_OFFSET: usize = STEP_SIZE_OFFSET + WORD_LEN;
/// Steps finished in the current phase.
pub const STEPS_DONE_OFFSET: usize = LAST_STEP_NS_OFFSET + WORD_LEN;
/// End of the seqlock-guarded fields written by v1.0.
pub const GUARDED_END: usize = STEPS_DONE_OFFSET + WORD_LEN;
/// Bytes of a cache line, the unit `PENDING` is aligned to so that the front end's
/// increments do not share a line with the seqlock-guarded words.
pub const CACHE_LINE: usize = 64;
/// Pending task count (outside the seqlock, in its own cache line: the first one after the
/// guarded words).
pub const PENDING_OFFSET: usize = GUARDED_END.next_multiple_of(CACHE_LINE);

/// Number of seqlock-guarded data words after `SEQ` (what [`SlotState`] round-trips through).
pub const DATA_WORDS: usize = data_index(GUARDED_END);

/// First minor version whose writers publish the substep words (v1.1).
pub const SUBSTEP_MINOR: u64 = 1;
/// v1.1: sub-units (transformer layers) of the step in flight finished.
pub const SUBSTEP_DONE_OFFSET: usize = GUARDED_END;
/// v1.1: sub-units in the forward the position counts (0 = no position published).
pub const SUBSTEP_TOTAL_OFFSET: usize = SUBSTEP_DONE_OFFSET + WORD_LEN;
/// v1.1: CLOCK_MONOTONIC when `SUBSTEP_DONE` last changed.
pub const SUBSTEP_NS_OFFSET: usize = SUBSTEP_TOTAL_OFFSET + WORD_LEN;
/// v1.1: the `STEP_START_NS` of the step the position belongs to.
pub const SUBSTEP_STEP_OFFSET: usize = SUBSTEP_NS_OFFSET + WORD_LEN;
/// End of the seqlock-guarded words written by v1.1.
pub const SUBSTEP_END: usize = SUBSTEP_STEP_OFFSET + WORD_LEN;
/// Words of the substep group (what [`Substep`] round-trips through).
pub const SUBSTEP_WORDS: usize = (SUBSTEP_END - SUBSTEP_DONE_OFFSET) / WORD_LEN;
/// Guarded data words a v1.1 reader takes in one seqlock read: the v1.0 words, then the
/// substep words right after them.
pub const DATA_WORDS_V1_1: usize = data_index(SUBSTEP_END);

/// First minor version whose writers may publish the prediction words (v1.2).
pub const PREDICTION_MINOR: u64 = 2;
/// v1.2: the cost model's predicted duration of the step in flight, ns (0 = no prediction).
/// The one guarded word between the substep words and `PENDING`.
pub const STEP_EXPECTED_NS_OFFSET: usize = SUBSTEP_END;
/// v1.2: the `STEP_START_NS` of the step `STEP_EXPECTED_NS` predicts (the first word after
/// `PENDING`'s).
pub const EXPECTED_STEP_OFFSET: usize = PENDING_OFFSET + WORD_LEN;
/// v1.2: CLOCK_MONOTONIC when the current phase's `WORK_TOTAL` is predicted to be done
/// (0 = unknown, e.g. no total).
pub const TASK_EXPECTED_END_NS_OFFSET: usize = EXPECTED_STEP_OFFSET + WORD_LEN;
/// v1.2: the `PHASE_START_NS` of the phase `TASK_EXPECTED_END_NS` is for.
pub const EXPECTED_PHASE_OFFSET: usize = TASK_EXPECTED_END_NS_OFFSET + WORD_LEN;
/// v1.2: the model's relative error bound for these predictions, parts per million
/// (1_000_000 = 100%); 0 = no bound yet (the model is not confident).
pub const EXPECTED_ERROR_PPM_OFFSET: usize = EXPECTED_PHASE_OFFSET + WORD_LEN;
/// End of the words a v1.2 reader takes in one seqlock read.
pub const PREDICTION_END: usize = EXPECTED_ERROR_PPM_OFFSET + WORD_LEN;
/// Guarded data words a v1.2 reader takes in one seqlock read: `TASK_ID` up to
/// [`PREDICTION_END`]. `PENDING` lies inside that range; its copy is ignored (it is not
/// guarded, and is read on its own).
pub const DATA_WORDS_V1_2: usize = data_index(PREDICTION_END);
/// The prediction words after `PENDING` (what [`Prediction`] keeps besides
/// `STEP_EXPECTED_NS`).
pub const PREDICTION_TAIL_WORDS: usize = (PREDICTION_END - EXPECTED_STEP_OFFSET) / WORD_LEN;

/// First minor version whose writers may publish the step's device words (v1.3).
pub const DEVICES_MINOR: u64 = 3;
/// v1.3: layers of the step in flight's forward handed to their devices (0 = none sent, or
/// not published).
pub const LAYERS_SENT_OFFSET: usize = PREDICTION_END;
/// v1.3: the device id (FORMAT §19.2) the step in flight is blocked on now; 0 = none.
pub const WAIT_DEVICE_OFFSET: usize = LAYERS_SENT_OFFSET + WORD_LEN;
/// v1.3: CLOCK_MONOTONIC when that wait began; 0 when `WAIT_DEVICE` is 0.
pub const WAIT_SINCE_NS_OFFSET: usize = WAIT_DEVICE_OFFSET + WORD_LEN;
/// End of the words a v1.3 reader takes in one seqlock read (the end of the record).
pub const DEVICE_WORDS_END: usize = WAIT_SINCE_NS_OFFSET + WORD_LEN;
/// Words of the step's device group (what [`StepDevices`] round-trips through).
pub const DEVICE_WORDS: usize = (DEVICE_WORDS_END - LAYERS_SENT_OFFSET) / WORD_LEN;
/// Guarded data words a v1.3 reader takes in one seqlock read: `TASK_ID` up to the end of
/// the record (`PENDING`'s copy inside it is ignored).
pub const DATA_WORDS_V1_3: usize = data_index(DEVICE_WORDS_END);

const _: () = assert!(LAYERS_SENT_OFFSET == 232 && WAIT_SINCE_NS_OFFSET == 248);
const _: () = assert!(DEVICE_WORDS_END == SLOT_LEN);
const _: () = assert!(DATA_WORDS_V1_3 == 31 && DEVICE_WORDS == 3);
const _: () = assert!(SUBSTEP_END <= PENDING_OFFSET);
const _: () = assert!(STEP_EXPECTED_NS_OFFSET == 184);
const _: () = assert!(STEP_EXPECTED_NS_OFFSET + WORD_LEN == PENDING_OFFSET);
const _: () = assert!(EXPECTED_STEP_OFFSET == 200);
const _: () = assert!(PREDICTION_END == 232);
const _: () = assert!(PREDICTION_END <= SLOT_LEN);
const _: () = assert!(PREDICTION_TAIL_WORDS == 4);
const _: () = assert!(DATA_WORDS_V1_2 == 28);
const _: () = assert!(DATA_WORDS_V1_1 == DATA_WORDS + SUBSTEP_WORDS);
const _: () = assert!(SUBSTEP_WORDS == 4);

const _: () = assert!(GUARDED_END == 152);
const _: () = assert!(PENDING_OFFSET == 192);
const _: () = assert!(GUARDED_END <= PENDING_OFFSET);
const _: () = assert!(PENDING_OFFSET % CACHE_LINE == 0);
const _: () = assert!(PENDING_OFFSET + WORD_LEN <= SLOT_LEN);
const _: () = assert!(SLOT_LEN % SLOT_ALIGN == 0);
const _: () = assert!(DATA_WORDS == 18);

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $text:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A value this version does not know (written by a newer minor or a foreign writer).
            Unknown(u64),
        }

        impl $name {
            /// Decodes a raw word; unknown values are kept, never rejected.
            pub const fn from_raw(raw: u64) -> Self {
                match raw {
                    $( $value => Self::$variant, )*
                    other => Self::Unknown(other),
                }
            }

            /// The raw word.
            pub const fn to_raw(self) -> u64 {
                match self {
                    $( Self::$variant => $value, )*
                    Self::Unknown(raw) => raw,
                }
            }

            /// Lower-case name for display, JSON and metric labels.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )*
                    Self::Unknown(_) => "unknown",
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// What a slot is doing now.
    Phase {
        /// No task.
        #[default]
        Idle = 0 => "idle",
        /// A task is posted for the slot and waits in the engine's queue.
        Queued = 1 => "queued",
        /// Evaluating prompt tokens (work in tokens).
        Prefill = 2 => "prefill",
        /// Generating tokens (work in tokens).
        Decode = 3 => "decode",
        /// Saving the KV state (work in bytes).
        Save = 4 => "save",
        /// Restoring the KV state (work in bytes).
        Restore = 5 => "restore",
    }
}

impl Phase {
    /// Whether the slot is doing work (prefill, decode, save or restore).
    /// `Queued` is not active: nothing is computing for the slot yet.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            Self::Prefill | Self::Decode | Self::Save | Self::Restore
        )
    }
}

wire_enum! {
    /// How the slot's last task ended.
    FinishReason {
        /// No task has finished yet (or one is running).
        #[default]
        None = 0 => "none",
        /// Ran to completion (EOS, n_predict, or all work done).
        Completed = 1 => "completed",
        /// Cancelled (for example at shutdown).
        Cancelled = 2 => "cancelled",
        /// Failed; see the error code.
        Error = 3 => "error",
    }
}

wire_enum! {
    /// Unit of `WORK_DONE` / `WORK_TOTAL`.
    WorkUnit {
        /// No work measured.
        #[default]
        None = 0 => "none",
        /// Tokens (prefill, decode).
        Tokens = 1 => "tokens",
        /// Bytes (state save, restore).
        Bytes = 2 => "bytes",
    }
}

wire_enum! {
    /// Why the slot's last task failed (meaningful when the finish reason is `error`).
    ErrorCode {
        /// No error.
        #[default]
        None = 0 => "none",
        /// The prompt or generation did not fit the slot's context.
        ContextOverflow = 1 => "context_overflow",
        /// The request was invalid (for example a token id outside the vocabulary).
        InvalidInput = 2 => "invalid_input",
        /// A state to restore was refused (foreign model, corrupt, truncated, wrong version).
        StateRejected = 3 => "state_rejected",
        /// An I/O error while streaming state.
        Io = 4 => "io",
        /// The model's forward pass failed.
        Compute = 5 => "compute",
        /// Any other internal error.
        Internal = 6 => "internal",
    }
}

wire_enum! {
    /// Why a task ended, as finely as the host knows it (format v1.3). Never stored in the
    /// record, whose `FINISH_REASON` keeps its v1.0 values: it indexes the statistics'
    /// tasks-by-cause counters. Each cause implies one [`FinishReason`] ([`Self::reason`]).
    FinishCause {
        /// Completed, and the writer was not told why.
        #[default]
        Unspecified = 0 => "unspecified",
        /// The model produced its end-of-generation token.
        Eos = 1 => "eos",
        /// The most tokens the task may generate were generated.
        Length = 2 => "length",
        /// A stop string of the request matched.
        StopString = 3 => "stop_string",
        /// The slot's context is full.
        ContextFull = 4 => "context_full",
        /// A task that generates nothing (prefill, save, restore) did all its work.
        Done = 5 => "done",
        /// Cancelled (client gone, cancel request, shutdown).
        Cancelled = 6 => "cancelled",
        /// Failed; the error is the record's `ERROR_CODE`.
        Error = 7 => "error",
    }
}

impl FinishCause {
    /// The record's finish reason this cause implies.
    pub fn reason(self) -> FinishReason {
        match self {
            Self::Cancelled => FinishReason::Cancelled,
            Self::Error => FinishReason::Error,
            _ => FinishReason::Completed,
        }
    }

    /// The cause a writer derives when it was told only a finish reason (FORMAT §6.7):
    /// `cancelled` and `error` map to themselves, anything else to `unspecified`.
    pub fn from_reason(reason: FinishReason) -> Self {
        match reason {
            FinishReason::Cancelled => Self::Cancelled,
            FinishReason::Error => Self::Error,
            _ => Self::Unspecified,
        }
    }
}

wire_enum! {
    /// How a step of the flight recorder ended (format v1.3).
    StepResult {
        /// No step (an entry never written).
        #[default]
        None = 0 => "none",
        /// The step ended and `WORK_DONE` advanced.
        Advanced = 1 => "advanced",
        /// The step ended without advancing `WORK_DONE`.
        NoProgress = 2 => "no_progress",
        /// The step was in flight when its task ended cancelled.
        Cancelled = 3 => "cancelled",
        /// The step was in flight when its task ended in error.
        Failed = 4 => "failed",
        /// The step was in flight when its phase changed, a new task began, or its task
        /// ended completed.
        Interrupted = 5 => "interrupted",
    }
}

impl StepResult {
    /// The result of a step in flight abandoned by a task that ended with `reason`.
    pub fn abandoned_by(reason: FinishReason) -> Self {
        match reason {
            FinishReason::Cancelled => Self::Cancelled,
            FinishReason::Error => Self::Failed,
            _ => Self::Interrupted,
        }
    }
}

wire_enum! {
    /// What kind of device a device table entry is (format v1.3, FORMAT §6.9).
    DeviceKind {
        /// Not stated.
        #[default]
        Unspecified = 0 => "unspecified",
        /// The host's CPU.
        Cpu = 1 => "cpu",
        /// A local GPU (CUDA, Metal, Vulkan, ...).
        Gpu = 2 => "gpu",
        /// A remote device reached over the network (ggml RPC); its endpoint names it.
        Rpc = 3 => "rpc",
        /// A local accelerator that is not a GPU (a BLAS or AMX backend).
        Accel = 4 => "accel",
    }
}

/// The seqlock-guarded content of one slot record, as a plain value.
///
/// The engine keeps one of these per slot, mutates it, and publishes the whole value;
/// readers get one back from a consistent snapshot. Timestamps are CLOCK_MONOTONIC ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotState {
    /// Task id; changes when the slot takes a new task. 0 = never used.
    pub task_id: u64,
    /// Current phase.
    pub phase: Phase,
    /// How the last task ended.
    pub finish_reason: FinishReason,
    /// Why the last task failed.
    pub error_code: ErrorCode,
    /// Unit of `work_done` / `work_total`.
    pub work_unit: WorkUnit,
    /// Work done in the current phase.
    pub work_done: u64,
    /// Work total of the current phase (0 = unknown).
    pub work_total: u64,
    /// Prompt tokens reused from the KV cache.
    pub tokens_cached: u64,
    /// Tokens in the KV cache.
    pub n_past: u64,
    /// Slot context size in tokens.
    pub n_ctx: u64,
    /// Bytes a state save of the slot would produce now.
    pub state_size: u64,
    /// When the current (or last) task started.
    pub task_start_ns: u64,
    /// When the current phase started.
    pub phase_start_ns: u64,
    /// When `work_done` last advanced.
    pub last_progress_ns: u64,
    /// Start of the step in flight; 0 when no step is running.
    pub step_start_ns: u64,
    /// Tokens (or bytes) the step in flight carries.
    pub step_size: u64,
    /// Duration of the last finished step, ns.
    pub last_step_ns: u64,
    /// Steps finished in the current phase.
    pub steps_done: u64,
}

impl SlotState {
    /// Encodes the value as the record's data words (offsets `TASK_ID` .. `GUARDED_END`).
    pub fn to_words(&self) -> [u64; DATA_WORDS] {
        let mut w = [0; DATA_WORDS];
        w[data_index(TASK_ID_OFFSET)] = self.task_id;
        w[data_index(PHASE_OFFSET)] = self.phase.to_raw();
        w[data_index(FINISH_REASON_OFFSET)] = self.finish_reason.to_raw();
        w[data_index(ERROR_CODE_OFFSET)] = self.error_code.to_raw();
        w[data_index(WORK_UNIT_OFFSET)] = self.work_unit.to_raw();
        w[data_index(WORK_DONE_OFFSET)] = self.work_done;
        w[data_index(WORK_TOTAL_OFFSET)] = self.work_total;
        w[data_index(TOKENS_CACHED_OFFSET)] = self.tokens_cached;
        w[data_index(N_PAST_OFFSET)] = self.n_past;
        w[data_index(N_CTX_OFFSET)] = self.n_ctx;
        w[data_index(STATE_SIZE_OFFSET)] = self.state_size;
        w[data_index(TASK_START_NS_OFFSET)] = self.task_start_ns;
        w[data_index(PHASE_START_NS_OFFSET)] = self.phase_start_ns;
        w[data_index(LAST_PROGRESS_NS_OFFSET)] = self.last_progress_ns;
        w[data_index(STEP_START_NS_OFFSET)] = self.step_start_ns;
        w[data_index(STEP_SIZE_OFFSET)] = self.step_size;
        w[data_index(LAST_STEP_NS_OFFSET)] = self.last_step_ns;
        w[data_index(STEPS_DONE_OFFSET)] = self.steps_done;
        w
    }

    /// Decodes the record's data words. Never fails: unknown enum values are kept as `Unknown`.
    pub fn from_words(w: &[u64; DATA_WORDS]) -> Self {
        let at = |offset: usize| w[data_index(offset)];
        Self {
            task_id: at(TASK_ID_OFFSET),
            phase: Phase::from_raw(at(PHASE_OFFSET)),
            finish_reason: FinishReason::from_raw(at(FINISH_REASON_OFFSET)),
            error_code: ErrorCode::from_raw(at(ERROR_CODE_OFFSET)),
            work_unit: WorkUnit::from_raw(at(WORK_UNIT_OFFSET)),
            work_done: at(WORK_DONE_OFFSET),
            work_total: at(WORK_TOTAL_OFFSET),
            tokens_cached: at(TOKENS_CACHED_OFFSET),
            n_past: at(N_PAST_OFFSET),
            n_ctx: at(N_CTX_OFFSET),
            state_size: at(STATE_SIZE_OFFSET),
            task_start_ns: at(TASK_START_NS_OFFSET),
            phase_start_ns: at(PHASE_START_NS_OFFSET),
            last_progress_ns: at(LAST_PROGRESS_NS_OFFSET),
            step_start_ns: at(STEP_START_NS_OFFSET),
            step_size: at(STEP_SIZE_OFFSET),
            last_step_ns: at(LAST_STEP_NS_OFFSET),
            steps_done: at(STEPS_DONE_OFFSET),
        }
    }
}

/// The transitions every writer makes (the engine's compute thread, the C ABI), kept with
/// the record so that the fields that belong together always move together. Each takes the
/// CLOCK_MONOTONIC time `now`, read once per event by the caller.
impl SlotState {
    /// A new task starts in `phase` with `total` units of `unit` to do: new task id and
    /// start time, last finish reason and error cleared.
    pub fn begin_task(&mut self, task_id: u64, phase: Phase, unit: WorkUnit, total: u64, now: u64) {
        self.task_id = task_id;
        self.task_start_ns = now;
        self.finish_reason = FinishReason::None;
        self.error_code = ErrorCode::None;
        self.enter_phase(phase, unit, total, now);
    }

    /// The running task moves to `phase` (e.g. prefill -> decode): work and step figures
    /// restart; the phase start counts as progress.
    pub fn enter_phase(&mut self, phase: Phase, unit: WorkUnit, total: u64, now: u64) {
        self.phase = phase;
        self.work_unit = unit;
        self.work_done = 0;
        self.work_total = total;
        self.phase_start_ns = now;
        self.last_progress_ns = now;
        self.step_start_ns = 0;
        self.step_size = 0;
        self.last_step_ns = 0;
        self.steps_done = 0;
    }

    /// A step carrying `size` units starts (before the forward pass).
    pub fn start_step(&mut self, size: u64, now: u64) {
        self.step_start_ns = now;
        self.step_size = size;
    }

    /// The step in flight finished with `work_done` units done in the phase: records its
    /// duration, clears the step in flight, and counts progress if the work advanced.
    pub fn finish_step(&mut self, work_done: u64, now: u64) {
        if self.step_start_ns != 0 {
            self.last_step_ns = now.saturating_sub(self.step_start_ns);
        }
        self.step_start_ns = 0;
        self.step_size = 0;
        self.steps_done += 1;
        if work_done > self.work_done {
            self.last_progress_ns = now;
        }
        self.work_done = work_done;
    }

    /// Work advanced to `work_done` without an explicit step (e.g. bytes of a state save):
    /// the time since the last progress counts as one step.
    pub fn advance(&mut self, work_done: u64, now: u64) {
        if work_done > self.work_done {
            self.last_step_ns = now.saturating_sub(self.last_progress_ns);
            self.last_progress_ns = now;
            self.steps_done += 1;
        }
        self.work_done = work_done;
    }

    /// The task ended: back to idle with its finish reason and error code (the last work
    /// figures stay for display).
    pub fn finish(&mut self, reason: FinishReason, code: ErrorCode) {
        self.phase = Phase::Idle;
        self.finish_reason = reason;
        self.error_code = code;
        self.step_start_ns = 0;
        self.step_size = 0;
    }
}

/// Where the compute is inside the step in flight (format v1.1): `done` of `total`
/// transformer layers of the forward finished, the last one at `at_ns`. The position is
/// written by whichever thread sees the layer finish (the compute thread on the CPU, the
/// device's host callback on CUDA), independently of the rest of the record, and names
/// the step it belongs to (`step_start_ns`), so a position left over from an earlier step
/// is never taken for the current one ([`Substep::in_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Substep {
    /// Layers finished in the forward.
    pub done: u64,
    /// Layers in the forward (0 = no position).
    pub total: u64,
    /// CLOCK_MONOTONIC when `done` last changed.
    pub at_ns: u64,
    /// `STEP_START_NS` of the step the position belongs to.
    pub step_start_ns: u64,
}

impl Substep {
    /// Encodes the value as the substep words (offsets `SUBSTEP_DONE` .. `SUBSTEP_END`).
    pub fn to_words(&self) -> [u64; SUBSTEP_WORDS] {
        [self.done, self.total, self.at_ns, self.step_start_ns]
    }

    /// Decodes the substep words. Never fails.
    pub fn from_words(w: &[u64; SUBSTEP_WORDS]) -> Self {
        Self {
            done: w[0],
            total: w[1],
            at_ns: w[2],
            step_start_ns: w[3],
        }
    }

    /// The position if it belongs to `state`'s step in flight: a step is running, the
    /// position names it, and it counts something (`total > 0`). Otherwise none: between
    /// steps, or while only a previous step's position is published.
    pub fn in_step(&self, state: &SlotState) -> Option<Self> {
        (state.step_start_ns != 0 && self.step_start_ns == state.step_start_ns && self.total != 0)
            .then_some(*self)
    }
}

/// The step in flight's devices (format v1.3, FORMAT §5.6): how many of its forward's
/// layers were handed to their devices, and the device its thread is blocked on now.
/// Published only by the thread that publishes the slot's step events; every step
/// boundary of a v1.3 writer clears them, so a previous step's values never show with a
/// new step ([`StepDevices::sent_in_step`], [`StepDevices::wait_in_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepDevices {
    /// Layers issued to their devices (`k`: layers `0..k-1`); 0 = none or not published.
    pub layers_sent: u64,
    /// Device id the thread is blocked on (FORMAT §19.2); 0 = none.
    pub wait_device: u64,
    /// CLOCK_MONOTONIC when that wait began; 0 without a wait.
    pub wait_since_ns: u64,
}

impl StepDevices {
    /// Encodes the value as the device words (offsets `LAYERS_SENT` .. `DEVICE_WORDS_END`).
    pub fn to_words(&self) -> [u64; DEVICE_WORDS] {
        [self.layers_sent, self.wait_device, self.wait_since_ns]
    }

    /// Decodes the device words. Never fails.
    pub fn from_words(w: &[u64; DEVICE_WORDS]) -> Self {
        Self {
            layers_sent: w[0],
            wait_device: w[1],
            wait_since_ns: w[2],
        }
    }

    /// The layers sent of `state`'s step in flight: a step runs and some were sent.
    pub fn sent_in_step(&self, state: &SlotState) -> Option<u64> {
        (state.step_start_ns != 0 && self.layers_sent != 0).then_some(self.layers_sent)
    }

    /// The wait of `state`'s step in flight, `(device id, since ns)`: a step runs, a device
    /// is named, and the wait began within the step (a record that breaks this shows no
    /// wait).
    pub fn wait_in_step(&self, state: &SlotState) -> Option<(u64, u64)> {
        (state.step_start_ns != 0
            && self.wait_device != 0
            && self.wait_since_ns >= state.step_start_ns)
            .then_some((self.wait_device, self.wait_since_ns))
    }
}

/// The cost model's predictions for a slot (format v1.2), as published by the writer.
///
/// Each prediction names what it is for, like the substep position: the step prediction is
/// the step in flight's only while `step_start_ns` equals the record's `STEP_START_NS`, and
/// the phase end is the current phase's only while `phase_start_ns` equals the record's
/// `PHASE_START_NS`. A stale value (a step or phase that has since ended) is never taken for
/// the current one ([`Prediction::step_in_flight`], [`Prediction::phase_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prediction {
    /// Predicted duration of the step named by `step_start_ns`, ns (0 = none).
    pub step_expected_ns: u64,
    /// `STEP_START_NS` of the step `step_expected_ns` predicts.
    pub step_start_ns: u64,
    /// CLOCK_MONOTONIC when the phase named by `phase_start_ns` is predicted to have done
    /// its `WORK_TOTAL` (the sum of its predicted remaining steps, context growth
    /// included); 0 = unknown.
    pub task_expected_end_ns: u64,
    /// `PHASE_START_NS` of the phase `task_expected_end_ns` is for.
    pub phase_start_ns: u64,
    /// Relative error bound of both predictions, parts per million; 0 = no bound yet.
    pub error_ppm: u64,
}

impl Prediction {
    /// The words after `PENDING` (offsets `EXPECTED_STEP` .. `PREDICTION_END`).
    pub fn tail_words(&self) -> [u64; PREDICTION_TAIL_WORDS] {
        [
            self.step_start_ns,
            self.task_expected_end_ns,
            self.phase_start_ns,
            self.error_ppm,
        ]
    }

    /// Decodes `STEP_EXPECTED_NS` and the words after `PENDING`. Never fails.
    pub fn from_words(step_expected_ns: u64, tail: &[u64; PREDICTION_TAIL_WORDS]) -> Self {
        Self {
            step_expected_ns,
            step_start_ns: tail[0],
            task_expected_end_ns: tail[1],
            phase_start_ns: tail[2],
            error_ppm: tail[3],
        }
    }

    /// The predicted duration of `state`'s step in flight, ns: a step runs, the prediction
    /// names it, and it is not 0.
    pub fn step_in_flight(&self, state: &SlotState) -> Option<u64> {
        (state.step_start_ns != 0
            && self.step_start_ns == state.step_start_ns
            && self.step_expected_ns != 0)
            .then_some(self.step_expected_ns)
    }

    /// When `state`'s current phase is predicted to have done its work (CLOCK_MONOTONIC):
    /// the phase is active with a known total, the prediction names the phase, and it is
    /// not 0.
    pub fn phase_end(&self, state: &SlotState) -> Option<u64> {
        (state.phase.is_active()
            && state.work_total != 0
            && state.phase_start_ns != 0
            && self.phase_start_ns == state.phase_start_ns
            && self.task_expected_end_ns != 0)
            .then_some(self.task_expected_end_ns)
    }

    /// The relative error bound (1.0 = 100%), when the writer states one.
    pub fn rel_error(&self) -> Option<f64> {
        (self.error_ppm != 0).then(|| self.error_ppm as f64 / 1e6)
    }
}

/// Index of the word at `offset` within [`SlotState::to_words`]'s array.
pub const fn data_index(offset: usize) -> usize {
    (offset - TASK_ID_OFFSET) / WORD_LEN
}

const _: () = assert!(data_index(STEPS_DONE_OFFSET) == DATA_WORDS - 1);
const _: () = assert!(data_index(WORK_DONE_OFFSET) == 5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let s = SlotState {
            task_id: 1,
            phase: Phase::Decode,
            finish_reason: FinishReason::Cancelled,
            error_code: ErrorCode::Unknown(99),
            work_unit: WorkUnit::Tokens,
            work_done: 6,
            work_total: 7,
            tokens_cached: 8,
            n_past: 9,
            n_ctx: 10,
            state_size: 11,
            task_start_ns: 12,
            phase_start_ns: 13,
            last_progress_ns: 14,
            step_start_ns: 15,
            step_size: 16,
            last_step_ns: 17,
            steps_done: 18,
        };
        let w = s.to_words();
        assert_eq!(w[data_index(N_PAST_OFFSET)], 9);
        assert_eq!(w[data_index(STEPS_DONE_OFFSET)], 18);
        assert_eq!(SlotState::from_words(&w), s);
    }

    #[test]
    fn transitions_keep_related_fields_together() {
        let mut s = SlotState::default();
        s.begin_task(7, Phase::Prefill, WorkUnit::Tokens, 100, 1_000);
        assert_eq!(
            (
                s.task_id,
                s.task_start_ns,
                s.phase_start_ns,
                s.last_progress_ns
            ),
            (7, 1_000, 1_000, 1_000)
        );
        s.start_step(64, 1_100);
        assert_eq!((s.step_start_ns, s.step_size), (1_100, 64));
        s.finish_step(64, 1_600);
        assert_eq!(
            (
                s.step_start_ns,
                s.step_size,
                s.last_step_ns,
                s.work_done,
                s.last_progress_ns,
                s.steps_done
            ),
            (0, 0, 500, 64, 1_600, 1)
        );
        s.finish_step(64, 1_900); // no advance: no progress
        assert_eq!(s.last_progress_ns, 1_600);
        s.enter_phase(Phase::Decode, WorkUnit::Tokens, 10, 2_000);
        assert_eq!(
            (s.work_done, s.work_total, s.steps_done, s.phase_start_ns),
            (0, 10, 0, 2_000)
        );
        s.advance(5, 2_500);
        assert_eq!(
            (s.work_done, s.last_step_ns, s.last_progress_ns),
            (5, 500, 2_500)
        );
        s.finish(FinishReason::Error, ErrorCode::Compute);
        assert_eq!(
            (s.phase, s.finish_reason, s.error_code, s.work_done),
            (Phase::Idle, FinishReason::Error, ErrorCode::Compute, 5)
        );
        s.begin_task(8, Phase::Save, WorkUnit::Bytes, 9, 3_000);
        assert_eq!(
            (s.finish_reason, s.error_code),
            (FinishReason::None, ErrorCode::None)
        );
    }

    #[test]
    fn substep_belongs_only_to_the_step_it_names() {
        let sub = Substep {
            done: 3,
            total: 30,
            at_ns: 1_500,
            step_start_ns: 1_100,
        };
        assert_eq!(Substep::from_words(&sub.to_words()), sub);
        let mut s = SlotState::default();
        assert_eq!(sub.in_step(&s), None, "no step in flight");
        s.start_step(64, 1_100);
        assert_eq!(sub.in_step(&s), Some(sub));
        s.finish_step(64, 1_600);
        s.start_step(64, 1_700);
        assert_eq!(sub.in_step(&s), None, "a previous step's position");
        let none = Substep {
            total: 0,
            step_start_ns: 1_700,
            ..sub
        };
        assert_eq!(none.in_step(&s), None, "no total: no position");
    }

    #[test]
    fn prediction_belongs_only_to_the_step_and_phase_it_names() {
        let mut s = SlotState::default();
        s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 1000, 1_000);
        s.start_step(64, 1_100);
        let p = Prediction {
            step_expected_ns: 400,
            step_start_ns: 1_100,
            task_expected_end_ns: 9_000,
            phase_start_ns: 1_000,
            error_ppm: 150_000,
        };
        assert_eq!(Prediction::from_words(400, &p.tail_words()), p);
        assert_eq!(p.step_in_flight(&s), Some(400));
        assert_eq!(p.phase_end(&s), Some(9_000));
        assert_eq!(p.rel_error(), Some(0.15));
        s.finish_step(64, 1_500);
        assert_eq!(p.step_in_flight(&s), None, "between steps");
        assert_eq!(
            p.phase_end(&s),
            Some(9_000),
            "the phase end outlives the step"
        );
        s.start_step(64, 1_600);
        assert_eq!(p.step_in_flight(&s), None, "a previous step's prediction");
        s.enter_phase(Phase::Decode, WorkUnit::Tokens, 10, 2_000);
        assert_eq!(p.phase_end(&s), None, "a previous phase's end");
        let unknown_total = SlotState {
            work_total: 0,
            phase_start_ns: 1_000,
            ..s
        };
        assert_eq!(p.phase_end(&unknown_total), None, "no total, no end");
        assert_eq!(Prediction::default().rel_error(), None);
    }

    #[test]
    fn enums_keep_unknown_values() {
        for raw in 0..10 {
            assert_eq!(Phase::from_raw(raw).to_raw(), raw);
            assert_eq!(FinishReason::from_raw(raw).to_raw(), raw);
            assert_eq!(WorkUnit::from_raw(raw).to_raw(), raw);
            assert_eq!(ErrorCode::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(Phase::from_raw(42).as_str(), "unknown");
        assert!(Phase::Decode.is_active());
        assert!(!Phase::Queued.is_active());
    }
}
