//! The reader C ABI of hydra-progress (`libhydra_probe_ffi.so` / `libhydra_probe_ffi.a`,
//! header `include/hydra_probe.h`, generated from this crate by cbindgen), over the
//! `hydra-probe` library.
//!
//! It exposes the same discovery, snapshot, classification and Hydra meta JSON as the Rust
//! API, so a C, C++, C# (P/Invoke) or Python (ctypes) process answers "is slot N stuck?"
//! in-process with no HTTP and no IPC to the engine. See `docs/c-abi/README.md`.
//!
//! # Conventions
//! - Every function returns an `int32_t` code: [`HYDRA_PROBE_OK`] (0) or a negative
//!   `HYDRA_PROBE_E_*` constant; [`hydra_probe_last_error`] then copies this thread's
//!   message. A successful call clears the message.
//! - Every pointer argument is checked: NULL gives [`HYDRA_PROBE_E_NULL`], never a crash.
//!   The only exceptions are documented on the function (`needed` out-parameters may be
//!   NULL; a buffer may be NULL when its capacity is 0, to ask for the size).
//! - Strings are NUL-terminated UTF-8. Outputs go into caller buffers; the needed size
//!   (bytes, NUL included) is returned through `needed`, with
//!   [`HYDRA_PROBE_E_BUFFER_TOO_SMALL`] when the buffer is shorter.
//! - No Rust panic crosses the boundary: each body runs under `catch_unwind` and a panic
//!   becomes [`HYDRA_PROBE_E_INTERNAL`].
//! - Floats are never NaN or infinite: unknown values are `-1`, as are unknown ages.
//! - A handle ([`HydraProbe`]) may be used by several threads at once (reads only take
//!   `&self`); [`hydra_probe_close`] must be the last call on it, made once.
//! - Times are CLOCK_MONOTONIC nanoseconds (the clock .NET's `Stopwatch` reads on Linux).

#![deny(missing_docs)]

mod devices;
mod error;
mod stats;

pub use devices::*;
pub use stats::*;

/// The reader ABI's error-code mapping (`hydra_ffi_support::Abi::code_of`), for tests that
/// check what the C ABI returns for each error kind.
pub use error::ProbeAbi;
pub use error::{
    HYDRA_PROBE_E_BUFFER_TOO_SMALL, HYDRA_PROBE_E_INTERNAL, HYDRA_PROBE_E_INVALID_ARGUMENT,
    HYDRA_PROBE_E_IO, HYDRA_PROBE_E_NOT_A_SEGMENT, HYDRA_PROBE_E_NOT_FOUND, HYDRA_PROBE_E_NULL,
    HYDRA_PROBE_E_REFUSED, HYDRA_PROBE_E_SLOT_OUT_OF_RANGE, HYDRA_PROBE_E_UNSUPPORTED_VERSION,
    HYDRA_PROBE_OK,
};

use error::{guard, probe_error};
use hydra_ffi_support::{arg_str, copy_out, out_ptr, ErrorKind, FfiError, Overflow};
use hydra_layout::stats::HistogramKind;
use hydra_layout::{
    clock, naming, DeviceKind, ErrorCode, FinishCause, FinishReason, Phase, SegmentReader,
    StepResult, WorkUnit,
};
use hydra_probe::{
    EngineHealth, EngineView, HydraMeta, MetaFigures, ProbeError, SlotClass, SlotView, Thresholds,
};
use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Version of this ABI. Bumped on any incompatible change (a struct layout, a signature).
pub const HYDRA_PROBE_ABI_VERSION: u32 = 1;

/// Minor version of this ABI: bumped when a function or struct is added, reset to 0 when
/// [`HYDRA_PROBE_ABI_VERSION`] changes. A program that calls something added in minor N
/// checks `hydra_probe_abi_minor() >= N` at start-up. Minor 1 added
/// `hydra_probe_abi_minor`, `hydra_probe_describe`, `hydra_probe_read_meta` and
/// `hydra_probe_value_name`, and made `hydra_probe_list` fail on a missing directory.
/// Minor 2 added `hydra_probe_read_layer` and `HydraProbeLayer` (the layer position inside
/// a step, format v1.1), and the layer fields of `hydra_probe_meta_json`'s object.
/// Minor 3 added `HydraProbePrediction` as version 3 of `HydraProbeMeta` (the writer's
/// cost model, format v1.2: where the ETA comes from, the predicted step), and the
/// `eta_source`, `step_expected_ms` and `prediction_error` fields of the meta JSON.
/// Minor 4 added the engine's devices and the device a step waits on (format v1.3):
/// `hydra_probe_read_devices`, `hydra_probe_read_wait`, `HydraProbeWait` as version 4 of
/// `HydraProbeMeta`, `HYDRA_PROBE_VALUE_DEVICE_KIND`, and the `wait_device`, `wait_ms` and
/// `layer_device` fields of the meta JSON.
/// Minor 5 added the wait rule's figures (format v1.3 §19.6) as version 5 of
/// `HydraProbeMeta` (`wait_learnt_max_ns`, `wait_threshold_ns`) and the
/// `wait_learnt_max_ms` and `wait_threshold_ms` fields of the meta JSON.
/// Minor 6 added the statistics and the flight recorder (format v1.3 §17, §18):
/// `hydra_probe_read_stats`, `hydra_probe_histogram_bound`, `hydra_probe_read_history`,
/// and `HYDRA_PROBE_VALUE_FINISH_CAUSE`, `_STEP_RESULT` and `_HISTOGRAM`.
/// Minor 7 added the RPC peer that reads nothing (format v1.3 §19.7): `HydraProbePeer` as
/// version 7 of `HydraProbeMeta`, and the `unread_peer`, `unread_peer_ms` and
/// `unread_peer_threshold_ms` fields of the meta JSON.
pub const HYDRA_PROBE_ABI_MINOR: u32 = 7;

/// `HydraProbePrediction::eta_source`: no ETA.
pub const HYDRA_PROBE_ETA_NONE: u32 = 0;
/// `HydraProbePrediction::eta_source`: the writer's cost model predicts the phase's end.
pub const HYDRA_PROBE_ETA_MODEL: u32 = 1;
/// `HydraProbePrediction::eta_source`: remaining work at the observed rate.
pub const HYDRA_PROBE_ETA_RATE: u32 = 2;

/// Bytes of [`HydraProbeEngineId::id`]: the longest engine id (63 bytes) plus its NUL.
pub const HYDRA_PROBE_ENGINE_ID_LEN: usize = 64;

/// Raw phase value (the `phase` field of [`HydraProbeSlot`]): no task.
pub const HYDRA_PROBE_PHASE_IDLE: u64 = 0;
/// Raw phase value: a task waits in the engine's queue.
pub const HYDRA_PROBE_PHASE_QUEUED: u64 = 1;
/// Raw phase value: evaluating prompt tokens.
pub const HYDRA_PROBE_PHASE_PREFILL: u64 = 2;
/// Raw phase value: generating tokens.
pub const HYDRA_PROBE_PHASE_DECODE: u64 = 3;
/// Raw phase value: saving the KV state (work in bytes).
pub const HYDRA_PROBE_PHASE_SAVE: u64 = 4;
/// Raw phase value: restoring the KV state (work in bytes).
pub const HYDRA_PROBE_PHASE_RESTORE: u64 = 5;

/// Kind of raw value for `hydra_probe_value_name`: a phase (`HydraProbeSlot::phase`,
/// `HydraProbeMeta::operation`).
pub const HYDRA_PROBE_VALUE_PHASE: u32 = 0;
/// Kind for `hydra_probe_value_name`: a work unit (`HydraProbeSlot::work_unit`).
pub const HYDRA_PROBE_VALUE_WORK_UNIT: u32 = 1;
/// Kind for `hydra_probe_value_name`: a finish reason (`HydraProbeSlot::finish_reason`).
pub const HYDRA_PROBE_VALUE_FINISH_REASON: u32 = 2;
/// Kind for `hydra_probe_value_name`: an error code (`HydraProbeSlot::error_code`).
pub const HYDRA_PROBE_VALUE_ERROR_CODE: u32 = 3;
/// Kind for `hydra_probe_value_name`: a slot class (`HydraProbeSlotClass`).
pub const HYDRA_PROBE_VALUE_SLOT_CLASS: u32 = 4;
/// Kind for `hydra_probe_value_name`: an engine health (`HydraProbeEngineHealth`).
pub const HYDRA_PROBE_VALUE_ENGINE_HEALTH: u32 = 5;

/// Kind for `hydra_probe_value_name`: a device kind (`HydraProbeDevice::kind`: "cpu",
/// "gpu", "rpc", ...). Added in ABI minor 4.
pub const HYDRA_PROBE_VALUE_DEVICE_KIND: u32 = 6;

/// Kind for `hydra_probe_value_name`: a finish cause (the index of
/// `HydraProbeStats::tasks_by_cause`: "eos", "length", "cancelled", ...). Added in ABI
/// minor 6.
pub const HYDRA_PROBE_VALUE_FINISH_CAUSE: u32 = 7;

/// Kind for `hydra_probe_value_name`: how a step of the flight recorder ended
/// (`HydraProbeStep::result`). Added in ABI minor 6.
pub const HYDRA_PROBE_VALUE_STEP_RESULT: u32 = 8;

/// Kind for `hydra_probe_value_name`: a histogram (`HYDRA_PROBE_HISTOGRAM_*`:
/// "time_to_first_token", "inter_token_latency", ...). Added in ABI minor 6.
pub const HYDRA_PROBE_VALUE_HISTOGRAM: u32 = 9;

// Every raw phase constant is the wire value of its `Phase` (the writer ABI asserts the
// same of its constants, so the two ABIs agree).
const _: () = {
    assert!(HYDRA_PROBE_PHASE_IDLE == Phase::Idle.to_raw());
    assert!(HYDRA_PROBE_PHASE_QUEUED == Phase::Queued.to_raw());
    assert!(HYDRA_PROBE_PHASE_PREFILL == Phase::Prefill.to_raw());
    assert!(HYDRA_PROBE_PHASE_DECODE == Phase::Decode.to_raw());
    assert!(HYDRA_PROBE_PHASE_SAVE == Phase::Save.to_raw());
    assert!(HYDRA_PROBE_PHASE_RESTORE == Phase::Restore.to_raw());
};

/// Classification of a slot (`slot_class` of [`HydraProbeSlot`]; the probe's `classify`
/// module has the rules): one of the `HYDRA_PROBE_SLOT_CLASS_*` values.
pub type HydraProbeSlotClass = i32;
/// No task.
pub const HYDRA_PROBE_SLOT_CLASS_IDLE: HydraProbeSlotClass = 0;
/// A task waits in the engine's queue for this slot.
pub const HYDRA_PROBE_SLOT_CLASS_QUEUED: HydraProbeSlotClass = 1;
/// Active and moving.
pub const HYDRA_PROBE_SLOT_CLASS_PROGRESSING: HydraProbeSlotClass = 2;
/// Moving, but its ETA exceeds the caller's budget.
pub const HYDRA_PROBE_SLOT_CLASS_SLOW: HydraProbeSlotClass = 3;
/// Active with no progress for longer than the stall threshold: stuck.
pub const HYDRA_PROBE_SLOT_CLASS_STALLED: HydraProbeSlotClass = 4;
/// Active (or queued) while its engine is dead or closed: will never finish.
pub const HYDRA_PROBE_SLOT_CLASS_ORPHANED: HydraProbeSlotClass = 5;
/// No consistent copy could be read: the writer stopped in the middle of an update.
pub const HYDRA_PROBE_SLOT_CLASS_TORN: HydraProbeSlotClass = 6;

/// Health of an engine (`engine_health` of [`HydraProbeSlot`]): one of the
/// `HYDRA_PROBE_ENGINE_HEALTH_*` values.
pub type HydraProbeEngineHealth = i32;
/// The writer holds its lock and its loop is not hung.
pub const HYDRA_PROBE_ENGINE_HEALTH_LIVE: HydraProbeEngineHealth = 0;
/// Alive, but its heartbeat is old and every active slot is stalled.
pub const HYDRA_PROBE_ENGINE_HEALTH_HUNG: HydraProbeEngineHealth = 1;
/// The writer exited cleanly.
pub const HYDRA_PROBE_ENGINE_HEALTH_CLOSED: HydraProbeEngineHealth = 2;
/// The writer died (lock free, segment never closed).
pub const HYDRA_PROBE_ENGINE_HEALTH_DEAD: HydraProbeEngineHealth = 3;

// Each C value is the probe's enum value as an integer (its position; for classes, in
// `SlotClass::ALL`, severity order), and every class and health has its C value.
const _: () = {
    assert!(SlotClass::ALL.len() == HYDRA_PROBE_SLOT_CLASS_TORN as usize + 1);
    let classes = [
        (SlotClass::Idle, HYDRA_PROBE_SLOT_CLASS_IDLE),
        (SlotClass::Queued, HYDRA_PROBE_SLOT_CLASS_QUEUED),
        (SlotClass::Progressing, HYDRA_PROBE_SLOT_CLASS_PROGRESSING),
        (SlotClass::Slow, HYDRA_PROBE_SLOT_CLASS_SLOW),
        (SlotClass::Stalled, HYDRA_PROBE_SLOT_CLASS_STALLED),
        (SlotClass::Orphaned, HYDRA_PROBE_SLOT_CLASS_ORPHANED),
        (SlotClass::Torn, HYDRA_PROBE_SLOT_CLASS_TORN),
    ];
    let mut i = 0;
    while i < classes.len() {
        assert!(classes[i].0 as i32 == classes[i].1);
        assert!(SlotClass::ALL[classes[i].1 as usize] as i32 == classes[i].1);
        i += 1;
    }
    let healths = [
        HYDRA_PROBE_ENGINE_HEALTH_LIVE,
        HYDRA_PROBE_ENGINE_HEALTH_HUNG,
        HYDRA_PROBE_ENGINE_HEALTH_CLOSED,
        HYDRA_PROBE_ENGINE_HEALTH_DEAD,
    ];
    let mut i = 0;
    while i < healths.len() {
        assert!(ENGINE_HEALTHS[i] as i32 == healths[i]);
        i += 1;
    }
};

/// Every engine health, in the order of its C value.
const ENGINE_HEALTHS: [EngineHealth; 4] = [
    EngineHealth::Live,
    EngineHealth::Hung,
    EngineHealth::Closed,
    EngineHealth::Dead,
];

/// Classification thresholds, in seconds (see `hydra_probe_thresholds_default`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HydraProbeThresholds {
    /// Shortest silence that can make an active slot stalled (default 30). Finite, >= 0.
    pub stall_floor_s: f64,
    /// Stalled after this many expected step times of silence (default 10). Finite, > 0.
    pub stall_factor: f64,
    /// A progressing slot whose ETA exceeds this is slow; negative = no budget (default -1).
    pub budget_s: f64,
    /// Heartbeat age beyond which a live engine whose active slots are all stalled is
    /// hung (default 30). Finite, >= 0.
    pub heartbeat_timeout_s: f64,
}

impl From<&Thresholds> for HydraProbeThresholds {
    fn from(t: &Thresholds) -> Self {
        Self {
            stall_floor_s: t.stall_floor.as_secs_f64(),
            stall_factor: t.stall_factor,
            budget_s: t.budget.map_or(-1.0, |b| b.as_secs_f64()),
            heartbeat_timeout_s: t.heartbeat_timeout.as_secs_f64(),
        }
    }
}

impl HydraProbeThresholds {
    /// The library's thresholds, refusing values that make no sense.
    fn to_thresholds(self) -> Result<Thresholds, FfiError> {
        let t = &self;
        let secs = |v: f64, name: &str| {
            Duration::try_from_secs_f64(v).map_err(|_| {
                FfiError::invalid(format!(
                    "threshold {name} = {v} is not a finite number of seconds >= 0"
                ))
            })
        };
        if !(t.stall_factor.is_finite() && t.stall_factor > 0.0) {
            return Err(FfiError::invalid(format!(
                "threshold stall_factor = {} is not a finite number > 0",
                t.stall_factor
            )));
        }
        if t.budget_s.is_nan() {
            return Err(FfiError::invalid("threshold budget_s is NaN"));
        }
        Ok(Thresholds {
            stall_floor: secs(t.stall_floor_s, "stall_floor_s")?,
            stall_factor: t.stall_factor,
            budget: if t.budget_s < 0.0 {
                None
            } else {
                Some(secs(t.budget_s, "budget_s")?)
            },
            heartbeat_timeout: secs(t.heartbeat_timeout_s, "heartbeat_timeout_s")?,
            // The cost-model knobs (format v1.2) are not in this struct: the library's
            // defaults apply, as for every reader that does not set them.
            ..Thresholds::default()
        })
    }
}

/// One engine id, NUL-terminated (filled by `hydra_probe_list`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HydraProbeEngineId {
    /// The id: 1 to 63 bytes of `[A-Za-z0-9._-]`, then NUL padding.
    pub id: [c_char; HYDRA_PROBE_ENGINE_ID_LEN],
}

/// One slot at one moment: the record, plus the figures derived from it, its class and
/// the engine's health. Unknown derived values are -1 (never NaN).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HydraProbeSlot {
    /// Slot index.
    pub slot: u32,
    /// Failed seqlock attempts before the consistent copy.
    pub read_retries: u32,
    /// Classification of the slot.
    pub slot_class: HydraProbeSlotClass,
    /// Health of the engine.
    pub engine_health: HydraProbeEngineHealth,
    /// The CLOCK_MONOTONIC instant (ns) every age below is measured from.
    pub now_ns: u64,
    /// Task id; changes when the slot takes a new task (0 = never used).
    pub task_id: u64,
    /// Raw phase (`HYDRA_PROBE_PHASE_*`; other values come from newer writers).
    pub phase: u64,
    /// Raw finish reason of the last task: 0 none, 1 completed, 2 cancelled, 3 error.
    pub finish_reason: u64,
    /// Raw error code of the last task (0 none; see FORMAT.md).
    pub error_code: u64,
    /// Raw unit of the work counters: 0 none, 1 tokens, 2 bytes.
    pub work_unit: u64,
    /// Work done in the current phase.
    pub work_done: u64,
    /// Work total of the current phase (0 = unknown).
    pub work_total: u64,
    /// Prompt tokens reused from the KV cache.
    pub tokens_cached: u64,
    /// Tokens in the slot's KV cache.
    pub n_past: u64,
    /// Slot context size in tokens.
    pub n_ctx: u64,
    /// Bytes a state save of the slot would produce now.
    pub state_size: u64,
    /// When the current (or last) task started (CLOCK_MONOTONIC ns, 0 = never).
    pub task_start_ns: u64,
    /// When the current phase started.
    pub phase_start_ns: u64,
    /// When the work done last advanced.
    pub last_progress_ns: u64,
    /// Start of the step in flight; 0 when none runs.
    pub step_start_ns: u64,
    /// Tokens (or bytes) the step in flight carries.
    pub step_size: u64,
    /// Duration of the last finished step, ns.
    pub last_step_ns: u64,
    /// Steps finished in the current phase.
    pub steps_done: u64,
    /// Tasks queued for the slot.
    pub pending: u64,
    /// `work_done / work_total` in 0..1; -1 when unknown.
    pub progress: f64,
    /// Observed rate in work units per second; -1 when unknown.
    pub rate_per_s: f64,
    /// Seconds to finish the phase at that rate; -1 when unknown.
    pub eta_s: f64,
    /// ns since the slot last moved (progress, or its phase start); -1 when never.
    pub last_progress_age_ns: i64,
    /// ns since the current phase started; -1 when no phase start.
    pub phase_age_ns: i64,
    /// ns since the step in flight started; -1 when no step runs.
    pub step_age_ns: i64,
    /// Predicted duration of the step in flight, ns; -1 when unknown.
    pub expected_step_ns: i64,
    /// Silence (ns) beyond which this slot counts as stalled.
    pub stall_threshold_ns: u64,
    /// ns since the engine loop's last heartbeat.
    pub heartbeat_age_ns: u64,
}

const _: () = assert!(std::mem::size_of::<HydraProbeSlot>() == 248);
const _: () = assert!(std::mem::size_of::<HydraProbeThresholds>() == 32);

fn age(ns: Option<u64>) -> i64 {
    ns.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

fn figure(x: Option<f64>) -> f64 {
    x.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(-1.0)
}

impl HydraProbeSlot {
    fn from_view(engine: &EngineView, v: &SlotView) -> Self {
        let s = &v.state;
        Self {
            slot: u32::try_from(v.slot).unwrap_or(u32::MAX),
            read_retries: v.read_retries,
            slot_class: v.class as HydraProbeSlotClass,
            engine_health: engine.health as HydraProbeEngineHealth,
            now_ns: engine.now_ns,
            task_id: s.task_id,
            phase: s.phase.to_raw(),
            finish_reason: s.finish_reason.to_raw(),
            error_code: s.error_code.to_raw(),
            work_unit: s.work_unit.to_raw(),
            work_done: s.work_done,
            work_total: s.work_total,
            tokens_cached: s.tokens_cached,
            n_past: s.n_past,
            n_ctx: s.n_ctx,
            state_size: s.state_size,
            task_start_ns: s.task_start_ns,
            phase_start_ns: s.phase_start_ns,
            last_progress_ns: s.last_progress_ns,
            step_start_ns: s.step_start_ns,
            step_size: s.step_size,
            last_step_ns: s.last_step_ns,
            steps_done: s.steps_done,
            pending: v.pending,
            progress: figure(v.derived.progress),
            rate_per_s: figure(v.derived.rate_per_s),
            eta_s: figure(v.derived.eta_s),
            last_progress_age_ns: age(v.derived.last_progress_age_ns),
            phase_age_ns: age(v.derived.phase_age_ns),
            step_age_ns: age(v.derived.step_age_ns),
            expected_step_ns: age(v.derived.expected_step_ns),
            stall_threshold_ns: v.stall_threshold_ns(),
            heartbeat_age_ns: engine.heartbeat_age_ns,
        }
    }
}

/// The layer position inside slot's step in flight (segment format v1.1). Added in ABI
/// minor 2.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeLayer {
    /// 1 when the engine publishes layer positions (format v1.1 or later); 0 when it does
    /// not (a v1.0 writer): then the position is unknown and the fields below are 0 or -1.
    pub published: u32,
    /// 1 when the step in flight has a known position (`layers_done` of `n_layers`); 0
    /// between steps, or before the step's first layer finished.
    pub in_step: u32,
    /// Layers of the step's forward finished.
    pub layers_done: u64,
    /// Layers in the forward.
    pub n_layers: u64,
    /// ns since the last layer finished; -1 when unknown.
    pub layer_age_ns: i64,
    /// For a stalled slot whose position is known: the layer counter it stopped at (the
    /// slot is "stalled at layer k"); -1 otherwise.
    pub stalled_at_layer: i64,
}

const _: () = assert!(std::mem::size_of::<HydraProbeLayer>() == 40);

impl HydraProbeLayer {
    fn from_view(v: &SlotView) -> Self {
        Self {
            published: u32::from(v.substeps_published),
            in_step: u32::from(v.substep_done().is_some()),
            layers_done: v.substep_done().unwrap_or(0),
            n_layers: v.substep_total().unwrap_or(0),
            layer_age_ns: age(v.substep_age_ns()),
            stalled_at_layer: age(v.stalled_at_layer()),
        }
    }
}

/// The writer's cost model for a slot (segment format v1.2) and what the ETA rests on.
/// Added in ABI minor 3 as version 3 of `HydraProbeMeta`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HydraProbePrediction {
    /// 1 when the engine publishes predictions (format v1.2 and the `step_prediction`
    /// capability); 0 when not: the fields below are then -1 (the ETA comes from the rate).
    pub published: u32,
    /// Where `eta_s` comes from: `HYDRA_PROBE_ETA_NONE`, `_MODEL` or `_RATE`.
    pub eta_source: u32,
    /// The writer's predicted duration of the step in flight, ns; -1 when none.
    pub step_expected_ns: i64,
    /// The error bound the writer states for it (0.2 = 20%); -1 when none.
    pub prediction_error: f64,
    /// 1 when that prediction is confident (the short stall floor applies), else 0.
    pub confident: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = assert!(std::mem::size_of::<HydraProbePrediction>() == 32);

impl HydraProbePrediction {
    fn from_view(v: &SlotView) -> Self {
        Self {
            published: u32::from(v.predictions_published),
            eta_source: match v.derived.eta_s.and(v.derived.eta_source) {
                None => HYDRA_PROBE_ETA_NONE,
                Some(hydra_probe::EtaSource::Model) => HYDRA_PROBE_ETA_MODEL,
                Some(hydra_probe::EtaSource::Rate) => HYDRA_PROBE_ETA_RATE,
            },
            step_expected_ns: age(v.derived.predicted_step_ns),
            prediction_error: figure(v.derived.prediction_error),
            confident: u32::from(v.derived.confident),
            reserved: 0,
        }
    }
}

/// A string owned by a handle: `ptr` is NUL-terminated UTF-8 and stays valid until
/// `hydra_probe_close`; `len` is its length in bytes without the NUL (the string itself may
/// hold a NUL when a writer put one there: trust `len`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HydraProbeStr {
    /// The bytes, NUL-terminated.
    pub ptr: *const c_char,
    /// Bytes before the terminating NUL.
    pub len: usize,
}

/// The engine's fixed description (filled by `hydra_probe_describe`): its id and the
/// strings and capability bits the writer set when it created the segment, the same for
/// every read of the handle. Version 1 is 128 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HydraProbeDescription {
    /// Set by the caller to `sizeof(HydraProbeDescription)` before the call; the library
    /// stores the bytes it filled (fields added later go at the end).
    pub size: u32,
    /// Capability bits (`model_capabilities` in the meta JSON).
    pub capabilities: u64,
    /// Engine id.
    pub engine_id: HydraProbeStr,
    /// The alias clients use for the model.
    pub model_alias: HydraProbeStr,
    /// Tokenizer family.
    pub tokenizer: HydraProbeStr,
    /// Model name.
    pub model_name: HydraProbeStr,
    /// Quantization.
    pub model_quant: HydraProbeStr,
    /// Model file path.
    pub model_path: HydraProbeStr,
    /// Compute device ("cpu", "cuda:0", ...).
    pub device: HydraProbeStr,
}

/// One slot's Hydra meta as numbers (filled by `hydra_probe_read_meta`): the slot read
/// with its class and the engine's health, plus the figures the meta JSON derives from
/// it. With `hydra_probe_describe`'s strings this is every field of the meta JSON but a
/// torn slot's `read_error` (read that one with `hydra_probe_meta_json`). Raw enum words
/// are named by `hydra_probe_value_name`. Unknown values are -1. Version 1 is 368 bytes;
/// version 2 (ABI minor 2) appends `layer` (408 bytes); version 3 (ABI minor 3) appends
/// `prediction` (440 bytes); version 4 (ABI minor 4) appends `wait` (472 bytes); version
/// 5 (ABI minor 5) appends `wait_learnt_max_ns` and `wait_threshold_ns` (488 bytes);
/// version 7 (ABI minor 7) appends `peer` (520 bytes). A caller built against version 1
/// sets `size` 368 and gets the version 1 fields.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HydraProbeMeta {
    /// Set by the caller to `sizeof(HydraProbeMeta)` before the call; the library stores
    /// the bytes it filled (fields added later go at the end).
    pub size: u32,
    /// 1 when the slot is doing work (prefill, decode, save, restore, or a phase this
    /// library does not know), else 0.
    pub is_processing: u32,
    /// The slot, as `hydra_probe_read_slot` gives it (same read).
    pub slot: HydraProbeSlot,
    /// Raw phase that `operation` names: PREFILL, DECODE, SAVE or RESTORE, else IDLE.
    pub operation: u64,
    /// Progress of the current phase, 0..1; 0 when unknown or not processing.
    pub progress: f64,
    /// Work done in the current phase when it counts tokens, else 0.
    pub tokens_processed: u64,
    /// Work total of the current phase when it counts tokens, else 0 (0 = unknown).
    pub tokens_total: u64,
    /// ms since the current phase started; 0 when not processing.
    pub elapsed_ms: u64,
    /// 1 when a task waits in the queue for this slot, else 0.
    pub queued: u64,
    /// ms since the slot last progressed (or its phase started); -1 when never.
    pub last_progress_age_ms: i64,
    /// Observed rate in work units per second; -1 when unknown.
    pub rate_per_s: f64,
    /// Seconds to finish the phase at that rate; -1 when unknown.
    pub eta_s: f64,
    /// Phase start, Unix epoch ms; -1 when no phase started.
    pub phase_start_unix_ms: i64,
    /// Age in ms of the step in flight; -1 when no step runs.
    pub step_age_ms: i64,
    /// Tokens (or bytes) the step in flight carries; 0 when no step runs.
    pub step_size: u64,
    /// Silence in ms beyond which the slot counts as stalled.
    pub stall_threshold_ms: u64,
    /// ms since the engine loop's last heartbeat.
    pub heartbeat_age_ms: u64,
    /// Version 2 (ABI minor 2): the layer position inside the step in flight, as
    /// `hydra_probe_read_layer` gives it for the same read.
    pub layer: HydraProbeLayer,
    /// Version 3 (ABI minor 3): the writer's cost model and the ETA's source.
    pub prediction: HydraProbePrediction,
    /// Version 4 (ABI minor 4): the device the step in flight waits on, as
    /// `hydra_probe_read_wait` gives it for the same read.
    pub wait: HydraProbeWait,
    /// Version 5 (ABI minor 5): while a decode step waits on a device whose decode waits
    /// are learnt, the longest of them recently, ns; -1 otherwise (no wait, a prefill
    /// wait, no trusted history, or no device waits published).
    pub wait_learnt_max_ns: i64,
    /// Version 5 (ABI minor 5): the wait rule's threshold for that wait, ns (waiting
    /// longer is a stall on the device); -1 when the wait is not judged by a history.
    pub wait_threshold_ns: i64,
    /// Version 7 (ABI minor 7): the RPC peer that has read nothing the longest while the
    /// step is in flight.
    pub peer: HydraProbePeer,
}

const _: () = assert!(std::mem::size_of::<HydraProbeDescription>() == 128);
const _: () = assert!(std::mem::size_of::<HydraProbeMeta>() == 520);

impl HydraProbeMeta {
    fn from_view(engine: &EngineView, v: &SlotView) -> Self {
        let f = MetaFigures::of(engine, v);
        Self {
            size: std::mem::size_of::<Self>() as u32,
            is_processing: f.is_processing.into(),
            slot: HydraProbeSlot::from_view(engine, v),
            operation: f.operation.to_raw(),
            progress: f.progress,
            tokens_processed: f.tokens_processed,
            tokens_total: f.tokens_total,
            elapsed_ms: f.elapsed_ms,
            queued: f.queued.into(),
            last_progress_age_ms: age(f.last_progress_age_ms),
            rate_per_s: figure(f.rate_per_s),
            eta_s: figure(f.eta_s),
            phase_start_unix_ms: age(f.phase_start_unix_ms),
            step_age_ms: age(f.step_age_ms),
            step_size: f.step_size,
            stall_threshold_ms: f.stall_threshold_ms,
            heartbeat_age_ms: f.heartbeat_age_ms,
            layer: HydraProbeLayer::from_view(v),
            prediction: HydraProbePrediction::from_view(v),
            wait: HydraProbeWait::from_view(v),
            wait_learnt_max_ns: age(v.derived.wait_learnt_max_ns),
            wait_threshold_ns: age(v.derived.wait_stall_threshold_ns),
            peer: HydraProbePeer::from_view(v),
        }
    }
}

/// The engine's description strings, each NUL-terminated, owned by the handle (in the
/// order of [`HydraProbeDescription`]).
struct DescriptionStrings([Box<[u8]>; 7]);

impl DescriptionStrings {
    fn of(reader: &SegmentReader) -> Self {
        let i = reader.identity();
        let d = &i.description;
        let z = |s: &str| -> Box<[u8]> { s.bytes().chain([0]).collect() };
        Self([
            z(&i.engine_id),
            z(&d.model_alias),
            z(&d.tokenizer),
            z(&d.model_name),
            z(&d.model_quant),
            z(&d.model_path),
            z(&d.device),
        ])
    }

    fn describe(&self, capabilities: u64) -> HydraProbeDescription {
        let [engine_id, model_alias, tokenizer, model_name, model_quant, model_path, device] =
            self.0.each_ref().map(|b| HydraProbeStr {
                ptr: b.as_ptr().cast(),
                len: b.len() - 1,
            });
        HydraProbeDescription {
            size: std::mem::size_of::<HydraProbeDescription>() as u32,
            capabilities,
            engine_id,
            model_alias,
            tokenizer,
            model_name,
            model_quant,
            model_path,
            device,
        }
    }
}

/// An open segment (opaque to C): a read-only mapping plus the thresholds its reads use.
pub struct HydraProbe {
    reader: SegmentReader,
    thresholds: Mutex<Thresholds>,
    description: DescriptionStrings,
}

impl HydraProbe {
    fn capture(&self) -> Result<EngineView, FfiError> {
        let t = *self.thresholds.lock().unwrap_or_else(|e| e.into_inner());
        EngineView::capture(&self.reader, clock::monotonic_ns(), &t).map_err(probe_error)
    }
}

/// The directory argument: "" means `$HYDRA_PROGRESS_DIR`, else `/dev/shm/hydra-progress`.
fn dir_arg(dir: &str) -> PathBuf {
    if dir.is_empty() {
        naming::resolve_dir(None)
    } else {
        PathBuf::from(dir)
    }
}

/// Checks a handle argument.
///
/// # Safety
/// `h` is NULL or a handle from `hydra_probe_open` not yet closed, valid for `'a`.
unsafe fn handle<'a>(h: *const HydraProbe) -> Result<&'a HydraProbe, FfiError> {
    // SAFETY: the caller guarantees `h` is NULL or a live handle (a `Box<HydraProbe>`
    // leaked by `hydra_probe_open`), only read through shared references.
    unsafe { hydra_ffi_support::handle(h, "probe") }
}

/// The ABI version, [`HYDRA_PROBE_ABI_VERSION`]. Check it at start-up against the header
/// you compiled with.
#[unsafe(no_mangle)]
pub extern "C" fn hydra_probe_abi_version() -> u32 {
    HYDRA_PROBE_ABI_VERSION
}

/// The ABI's minor version, [`HYDRA_PROBE_ABI_MINOR`] (added in minor 1: a library
/// without this symbol is minor 0).
#[unsafe(no_mangle)]
pub extern "C" fn hydra_probe_abi_minor() -> u32 {
    HYDRA_PROBE_ABI_MINOR
}

/// The name the meta JSON gives raw value `raw` of kind `kind` (`HYDRA_PROBE_VALUE_*`):
/// "decode", "tokens", "completed", "context_overflow", "stalled", "dead", ...; "unknown"
/// for a value this library does not know. A static NUL-terminated string; NULL only
/// when `kind` is not a `HYDRA_PROBE_VALUE_*` constant.
#[unsafe(no_mangle)]
pub extern "C" fn hydra_probe_value_name(kind: u32, raw: u64) -> *const c_char {
    value_name(kind, raw).map_or(std::ptr::null(), |n| static_c_str(n).as_ptr())
}

fn value_name(kind: u32, raw: u64) -> Option<&'static str> {
    let unknown = "unknown";
    let index = usize::try_from(raw).unwrap_or(usize::MAX);
    Some(match kind {
        HYDRA_PROBE_VALUE_PHASE => Phase::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_WORK_UNIT => WorkUnit::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_FINISH_REASON => FinishReason::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_ERROR_CODE => ErrorCode::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_SLOT_CLASS => SlotClass::ALL.get(index).map_or(unknown, |c| c.as_str()),
        HYDRA_PROBE_VALUE_ENGINE_HEALTH => {
            ENGINE_HEALTHS.get(index).map_or(unknown, |h| h.as_str())
        }
        HYDRA_PROBE_VALUE_DEVICE_KIND => DeviceKind::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_FINISH_CAUSE => FinishCause::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_STEP_RESULT => StepResult::from_raw(raw).as_str(),
        HYDRA_PROBE_VALUE_HISTOGRAM => HistogramKind::ALL
            .get(index)
            .map_or(unknown, |h| h.as_str()),
        _ => return None,
    })
}

/// `name` as a static NUL-terminated string. The names are the finite set of the
/// library's `as_str` values, so each is made once and kept.
fn static_c_str(name: &'static str) -> &'static CStr {
    static MADE: Mutex<Vec<(&str, &CStr)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = made.iter().find(|(n, _)| *n == name) {
        return c;
    }
    // The names are lower-case words: no NUL inside.
    let c: &'static CStr = Box::leak(CString::new(name).unwrap_or_default().into_boxed_c_str());
    made.push((name, c));
    c
}

/// A `#[repr(C)]` struct whose first field is the `u32` size its caller sets.
trait Versioned: Sized {
    /// Its C name.
    const NAME: &'static str;
    /// Bytes of its first version: the least `size` a caller may set (a caller built
    /// against an older header gets the fields of its version and no more).
    const MIN_SIZE: usize;
}

impl Versioned for HydraProbeDescription {
    const NAME: &'static str = "HydraProbeDescription";
    const MIN_SIZE: usize = 128;
}

impl Versioned for HydraProbeMeta {
    const NAME: &'static str = "HydraProbeMeta";
    const MIN_SIZE: usize = 368;
}

/// Writes `value` to `out` (from [`versioned_out`]) as the first `len` bytes of it, with
/// its `size` saying how many were filled.
///
/// # Safety
/// `out` is writable for `len <= size_of::<T>()` bytes.
unsafe fn write_versioned<T: Versioned>(out: *mut T, value: T, len: usize) {
    let len = len.min(std::mem::size_of::<T>());
    // SAFETY: `value` is a plain `repr(C)` struct of `size_of::<T>() >= len` bytes, and the
    // caller guarantees `out` is writable for `len` bytes; the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping((&value as *const T).cast::<u8>(), out.cast::<u8>(), len);
        out.cast::<u32>().write(len as u32);
    }
}

/// Checks the out-parameter `out` of a versioned struct: not NULL, and the `size` its
/// caller set at least the struct's first version. Returns it with the bytes to fill: the
/// caller's size, up to this version's.
///
/// # Safety
/// `out` is NULL or readable.
unsafe fn versioned_out<T: Versioned>(out: *mut T) -> Result<(*mut T, usize), FfiError> {
    let out = out_ptr(out, "out")?;
    // SAFETY: `out` is not NULL and readable (caller), and a `Versioned` struct starts
    // with its `u32` size.
    let size = unsafe { out.cast::<u32>().read() } as usize;
    let filled = std::mem::size_of::<T>();
    if size < T::MIN_SIZE {
        return Err(FfiError::invalid(format!(
            "{name}.size is {size}: set it to sizeof({name}) ({filled} bytes in this version) before the call",
            name = T::NAME
        )));
    }
    Ok((out, size.min(filled)))
}

/// The name of an error code ("HYDRA_PROBE_E_NULL", ...), a static NUL-terminated string;
/// never NULL ("HYDRA_PROBE_E_UNKNOWN_CODE" for codes this library does not define).
#[unsafe(no_mangle)]
pub extern "C" fn hydra_probe_error_name(code: i32) -> *const c_char {
    error::code_name(code).as_ptr()
}

/// Copies the message of this thread's last failed call ("" if the last call succeeded)
/// into `buf` (`cap` bytes), NUL-terminated, and stores the needed size in `needed`
/// (may be NULL). A message longer than the buffer is truncated and the call returns
/// `HYDRA_PROBE_E_BUFFER_TOO_SMALL`. This call does not change the stored message.
///
/// # Safety
/// `buf` is NULL (only with `cap == 0`) or writable for `cap` bytes; `needed` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_last_error(
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> i32 {
    // SAFETY: the caller's guarantees on `buf`, `cap` and `needed` are copy_last_error's.
    unsafe { hydra_ffi_support::copy_last_error::<ProbeAbi>(buf, cap, needed) }
}

/// Fills `out` with the default thresholds: stall floor 30 s, stall factor 10, no budget
/// (-1), heartbeat timeout 30 s.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_thresholds_default(out: *mut HydraProbeThresholds) -> i32 {
    guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(HydraProbeThresholds::from(&Thresholds::default())) };
        Ok(())
    })
}

/// Lists the engines publishing in `dir` ("" = `$HYDRA_PROGRESS_DIR`, else
/// `/dev/shm/hydra-progress`), sorted by id. Stores the number found in `*count`, and
/// fills `ids[0..min(count, capacity)]`. Returns `HYDRA_PROBE_E_BUFFER_TOO_SMALL` when
/// `capacity < *count` (the first `capacity` ids are still filled). `ids` may be NULL when
/// `capacity` is 0 (to ask for the count). An empty directory holds 0 engines; a
/// directory that does not exist gives `HYDRA_PROBE_E_NOT_FOUND` and one that cannot be
/// read `HYDRA_PROBE_E_IO`, with a message naming it (since ABI minor 1; before, a missing
/// directory listed as empty).
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `ids` is NULL or writable for `capacity`
/// entries; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_list(
    dir: *const c_char,
    ids: *mut HydraProbeEngineId,
    capacity: usize,
    count: *mut usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `dir` is NULL or a NUL-terminated string.
        let dir = dir_arg(unsafe { arg_str(dir, "dir") }?);
        let count = out_ptr(count, "count")?;
        if ids.is_null() && capacity > 0 {
            return Err(FfiError::null("ids"));
        }
        let found = hydra_probe::discover(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FfiError::new(
                ErrorKind::NotFound,
                format!(
                    "no directory {} (engines create it when they start)",
                    dir.display()
                ),
            ),
            _ => probe_error(ProbeError::from(hydra_layout::Error::io(
                "read directory",
                &dir,
                e,
            ))),
        })?;
        // SAFETY: `count` is not NULL and the caller guarantees it is writable.
        unsafe { count.write(found.len()) };
        for (i, d) in found.iter().take(capacity).enumerate() {
            let mut entry = HydraProbeEngineId {
                id: [0; HYDRA_PROBE_ENGINE_ID_LEN],
            };
            // Ids are at most 63 bytes (naming::engine_id_of validated them).
            for (dst, src) in entry
                .id
                .iter_mut()
                .zip(d.engine_id.bytes().take(HYDRA_PROBE_ENGINE_ID_LEN - 1))
            {
                *dst = src as c_char;
            }
            // SAFETY: `ids` is not NULL (capacity > 0 here) and writable for `capacity`
            // entries (caller); `i < capacity` by `take(capacity)`.
            unsafe { ids.add(i).write(entry) };
        }
        if found.len() > capacity {
            return Err(FfiError::buffer_too_small(format!(
                "{} engines in {}, room for {capacity}",
                found.len(),
                dir.display()
            )));
        }
        Ok(())
    })
}

/// Opens engine `engine` of `dir` read-only and stores a new handle in `*out` (NULL on
/// failure). `engine` is an engine id, or a path to a segment file when it contains a
/// `/` (then `dir` is not used). `dir` "" = `$HYDRA_PROGRESS_DIR`, else
/// `/dev/shm/hydra-progress`. The handle uses the default thresholds until
/// `hydra_probe_set_thresholds`. Close it with `hydra_probe_close`.
///
/// Errors: `HYDRA_PROBE_E_NOT_FOUND` (no such engine), `HYDRA_PROBE_E_NOT_A_SEGMENT`,
/// `HYDRA_PROBE_E_UNSUPPORTED_VERSION`, `HYDRA_PROBE_E_REFUSED` (symlink, FIFO, ...),
/// `HYDRA_PROBE_E_IO`.
///
/// # Safety
/// `dir` and `engine` are NULL or NUL-terminated strings; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_open(
    dir: *const c_char,
    engine: *const c_char,
    out: *mut *mut HydraProbe,
) -> i32 {
    guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller guarantees `dir` and `engine` are NULL or NUL-terminated.
        let (dir, engine) = unsafe { (arg_str(dir, "dir")?, arg_str(engine, "engine")?) };
        if engine.is_empty() {
            return Err(FfiError::invalid("argument `engine` is empty"));
        }
        let reader = hydra_probe::open(&dir_arg(dir), Some(engine)).map_err(probe_error)?;
        let handle = Box::new(HydraProbe {
            description: DescriptionStrings::of(&reader),
            reader,
            thresholds: Mutex::new(Thresholds::default()),
        });
        // SAFETY: as above; ownership of the box passes to the caller until close.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Closes a handle and unmaps its segment. The handle must not be used again (nor be in
/// use by another thread).
///
/// # Safety
/// `probe` is NULL or a handle from `hydra_probe_open` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_close(probe: *mut HydraProbe) -> i32 {
    guard(|| {
        let probe = out_ptr(probe, "probe")?;
        // SAFETY: `probe` came from `Box::into_raw` in `hydra_probe_open` and the caller
        // guarantees it is not closed yet nor used concurrently: we own it again.
        drop(unsafe { Box::from_raw(probe) });
        Ok(())
    })
}

/// Sets the thresholds later reads of this handle classify with. Refuses (with
/// `HYDRA_PROBE_E_INVALID_ARGUMENT`) a negative or non-finite floor or heartbeat timeout,
/// a factor that is not > 0, or a NaN budget.
///
/// # Safety
/// `probe` is NULL or an open handle; `thresholds` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_set_thresholds(
    probe: *mut HydraProbe,
    thresholds: *const HydraProbeThresholds,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `thresholds` is NULL or readable.
        let t = unsafe { thresholds.as_ref() }.ok_or_else(|| FfiError::null("thresholds"))?;
        let t = t.to_thresholds()?;
        *probe.thresholds.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    })
}

/// Stores the engine's slot count in `*count`.
///
/// # Safety
/// `probe` is NULL or an open handle; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_slot_count(probe: *const HydraProbe, count: *mut u32) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        let count = out_ptr(count, "count")?;
        let n = u32::try_from(probe.reader.slot_count()).unwrap_or(u32::MAX);
        // SAFETY: `count` is not NULL and the caller guarantees it is writable.
        unsafe { count.write(n) };
        Ok(())
    })
}

/// Reads slot `slot` now (a consistent seqlock copy, with liveness and every slot's class
/// for the engine health) and fills `*out`.
///
/// Errors: `HYDRA_PROBE_E_SLOT_OUT_OF_RANGE`; `HYDRA_PROBE_E_IO` when the file changed
/// size or the liveness probe failed. A torn slot is not an error: its class says so.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_slot(
    probe: *const HydraProbe,
    slot: u32,
    out: *mut HydraProbeSlot,
) -> i32 {
    // SAFETY: the caller guarantees `probe` is NULL or an open handle, `out` NULL or writable.
    unsafe { read_into(probe, slot, out, HydraProbeSlot::from_view) }
}

/// The body of the per-slot reads: checks the handle and `out`, reads slot `slot` now and
/// writes what `make` makes of it to `*out`.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or writable.
unsafe fn read_into<T>(
    probe: *const HydraProbe,
    slot: u32,
    out: *mut T,
    make: impl FnOnce(&EngineView, &SlotView) -> T,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        let out = out_ptr(out, "out")?;
        let view = probe.capture()?;
        let v = view.slot(slot as usize).map_err(probe_error)?;
        let value = make(&view, v);
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(value) };
        Ok(())
    })
}

/// Reads slot `slot` now (the same read and classification as `hydra_probe_read_slot`)
/// and fills `*out` with the layer position inside its step in flight. Added in ABI minor
/// 2: check `hydra_probe_abi_minor() >= 2` first.
///
/// Errors: those of `hydra_probe_read_slot`.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_layer(
    probe: *const HydraProbe,
    slot: u32,
    out: *mut HydraProbeLayer,
) -> i32 {
    // SAFETY: the caller guarantees `probe` is NULL or an open handle, `out` NULL or writable.
    unsafe { read_into(probe, slot, out, |_, v| HydraProbeLayer::from_view(v)) }
}

/// Fills `*out` with the engine's fixed description: its id, model strings, device and
/// capability bits. The strings belong to the handle and stay valid until
/// `hydra_probe_close`; they never change for a handle, so one call per handle is enough.
/// Set `out->size` to `sizeof(HydraProbeDescription)` first (`HYDRA_PROBE_E_INVALID_ARGUMENT`
/// when it is smaller than this library fills). Added in ABI minor 1.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_describe(
    probe: *const HydraProbe,
    out: *mut HydraProbeDescription,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `out` is NULL or readable.
        let (out, len) = unsafe { versioned_out(out) }?;
        let capabilities = probe.reader.identity().description.capabilities;
        // SAFETY: `out` is not NULL and the caller guarantees it is writable for its size.
        unsafe { write_versioned(out, probe.description.describe(capabilities), len) };
        Ok(())
    })
}

/// Reads slot `slot` now (the same read as `hydra_probe_read_slot`) and fills `*out` with
/// its Hydra meta as numbers: with `hydra_probe_describe`'s strings and
/// `hydra_probe_value_name`'s names, every field `hydra_probe_meta_json` writes, computed
/// by the same code, with no JSON. A torn slot (`slot.slot_class` TORN) also has a
/// `read_error` message: read it through `hydra_probe_meta_json`. Set `out->size` to
/// `sizeof(HydraProbeMeta)` first (`HYDRA_PROBE_E_INVALID_ARGUMENT` when it is smaller
/// than this library fills). Added in ABI minor 1.
///
/// Errors: those of `hydra_probe_read_slot`.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_meta(
    probe: *const HydraProbe,
    slot: u32,
    out: *mut HydraProbeMeta,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `out` is NULL or readable.
        let (out, len) = unsafe { versioned_out(out) }?;
        let view = probe.capture()?;
        let v = view.slot(slot as usize).map_err(probe_error)?;
        let value = HydraProbeMeta::from_view(&view, v);
        // SAFETY: `out` is not NULL and the caller guarantees it is writable for its size.
        unsafe { write_versioned(out, value, len) };
        Ok(())
    })
}

/// Writes slot `slot`'s Hydra meta JSON (one line, the same object `hydra-probe meta`
/// prints) into `buf` (`cap` bytes), NUL-terminated, and stores the needed size in
/// `needed` (may be NULL). When `cap` is too small, `buf` gets an empty string and the
/// call returns `HYDRA_PROBE_E_BUFFER_TOO_SMALL`; call again with at least `*needed`
/// bytes (each call reads anew, so allow some slack, e.g. 1 KiB: the next read may be a
/// few bytes longer). `buf` may be NULL when `cap` is 0.
///
/// # Safety
/// `probe` is NULL or an open handle; `buf` is NULL (only with `cap == 0`) or writable for
/// `cap` bytes; `needed` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_meta_json(
    probe: *const HydraProbe,
    slot: u32,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        if buf.is_null() && cap > 0 {
            return Err(FfiError::null("buf"));
        }
        let view = probe.capture()?;
        view.slot(slot as usize).map_err(probe_error)?;
        let meta = HydraMeta::from_view(&view, slot as usize)
            .ok_or_else(|| FfiError::new(ErrorKind::SlotOutOfRange, "no such slot"))?;
        // SAFETY: the caller's guarantees on `buf`, `cap` and `needed` are copy_out's.
        unsafe { copy_out(&meta.to_json(), buf, cap, needed, Overflow::Empty) }
    })
}

#[cfg(test)]
mod tests;
