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

mod error;

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
use hydra_layout::{clock, naming, Phase, SegmentReader};
use hydra_probe::{
    EngineHealth, EngineView, HydraMeta, ProbeError, SlotClass, SlotView, Thresholds,
};
use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Version of this ABI. Bumped on any incompatible change (a struct layout, a signature).
pub const HYDRA_PROBE_ABI_VERSION: u32 = 1;

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

/// Classification of a slot (see the probe's `classify` module for the rules).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HydraProbeSlotClass {
    /// No task.
    Idle = 0,
    /// A task waits in the engine's queue for this slot.
    Queued = 1,
    /// Active and moving.
    Progressing = 2,
    /// Moving, but its ETA exceeds the caller's budget.
    Slow = 3,
    /// Active with no progress for longer than the stall threshold: stuck.
    Stalled = 4,
    /// Active (or queued) while its engine is dead or closed: will never finish.
    Orphaned = 5,
    /// No consistent copy could be read: the writer stopped in the middle of an update.
    Torn = 6,
}

impl From<SlotClass> for HydraProbeSlotClass {
    fn from(c: SlotClass) -> Self {
        match c {
            SlotClass::Idle => Self::Idle,
            SlotClass::Queued => Self::Queued,
            SlotClass::Progressing => Self::Progressing,
            SlotClass::Slow => Self::Slow,
            SlotClass::Stalled => Self::Stalled,
            SlotClass::Orphaned => Self::Orphaned,
            SlotClass::Torn => Self::Torn,
        }
    }
}

// Each C class value is the position of the same class in `SlotClass::ALL` (severity
// order), and there are as many C values as Rust classes.
const _: () = {
    macro_rules! same {
        ($($c:ident),*) => {$(
            assert!(SlotClass::ALL[HydraProbeSlotClass::$c as usize] as u8 == SlotClass::$c as u8);
        )*};
    }
    same!(Idle, Queued, Progressing, Slow, Stalled, Orphaned, Torn);
    assert!(SlotClass::ALL.len() == HydraProbeSlotClass::Torn as usize + 1);
};

/// Health of an engine.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HydraProbeEngineHealth {
    /// The writer holds its lock and its loop is not hung.
    Live = 0,
    /// Alive, but its heartbeat is old and every active slot is stalled.
    Hung = 1,
    /// The writer exited cleanly.
    Closed = 2,
    /// The writer died (lock free, segment never closed).
    Dead = 3,
}

const _: () = {
    macro_rules! same {
        ($($h:ident),*) => {$(
            assert!(HydraProbeEngineHealth::$h as i32 == EngineHealth::$h as i32);
        )*};
    }
    same!(Live, Hung, Closed, Dead);
};

impl From<EngineHealth> for HydraProbeEngineHealth {
    fn from(h: EngineHealth) -> Self {
        match h {
            EngineHealth::Live => Self::Live,
            EngineHealth::Hung => Self::Hung,
            EngineHealth::Closed => Self::Closed,
            EngineHealth::Dead => Self::Dead,
        }
    }
}

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
            slot_class: v.class.into(),
            engine_health: engine.health.into(),
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
            progress: figure(v.progress),
            rate_per_s: figure(v.rate_per_s),
            eta_s: figure(v.eta_s),
            last_progress_age_ns: age(v.last_progress_age_ns),
            phase_age_ns: age(v.phase_age_ns),
            step_age_ns: age(v.step_age_ns),
            expected_step_ns: age(v.expected_step_ns),
            stall_threshold_ns: v.stall_threshold_ns,
            heartbeat_age_ns: engine.heartbeat_age_ns,
        }
    }
}

/// An open segment (opaque to C): a read-only mapping plus the thresholds its reads use.
pub struct HydraProbe {
    reader: SegmentReader,
    thresholds: Mutex<Thresholds>,
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
/// `capacity` is 0 (to ask for the count). A missing directory holds no engines.
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
        let found = match hydra_probe::discover(&dir) {
            Ok(found) => found,
            // Kept from ABI version 1: a missing directory lists as empty (engines create
            // it when they start); the CLI and the exporter report it instead.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(probe_error(ProbeError::Io {
                    op: "read directory",
                    path: dir.clone(),
                    source: e,
                }))
            }
        };
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
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        let out = out_ptr(out, "out")?;
        let view = probe.capture()?;
        let v = view.slot(slot as usize).map_err(probe_error)?;
        let value = HydraProbeSlot::from_view(&view, v);
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(value) };
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
