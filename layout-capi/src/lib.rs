//! The writer C ABI of hydra-progress (`libhydra_writer.so` / `libhydra_writer.a`, header
//! `include/hydra_writer.h`, generated from this crate by cbindgen).
//!
//! It lets an engine written in C or C++ (an llama.cpp fork, say) publish the same segment
//! the Rust engine does, without building raw records: the library keeps a mirror of each
//! slot's record ([`hydra_layout::SlotState`]), reads CLOCK_MONOTONIC itself (once per
//! call), and publishes the whole record through the per-slot seqlock.
//!
//! ```c
//! HydraWriterDescription d = { .model_name = "llama-3-8b", .device = "cuda:0" };
//! HydraWriter *w = NULL;
//! if (hydra_writer_create("", "engine-0", 4, &d, &w) != HYDRA_WRITER_OK) { /* ... */ }
//! hydra_writer_begin_task(w, 0, 42, HYDRA_WRITER_PHASE_DECODE, HYDRA_WRITER_UNIT_TOKENS, 256);
//! for (uint64_t i = 1; i <= 256; i++) {
//!     hydra_writer_step_start(w, 0, 1);
//!     /* llama_decode(...) */
//!     hydra_writer_step_finish(w, 0, i);
//! }
//! hydra_writer_finish(w, 0, HYDRA_WRITER_FINISH_COMPLETED, HYDRA_WRITER_ERROR_NONE);
//! hydra_writer_close(w);
//! ```
//!
//! # Threads
//! A segment has one writer. The handle guards its state with a mutex, so concurrent calls
//! are memory-safe (they are serialised), but the intended model is that one thread (the
//! compute loop) makes every call except the pending counters;
//! [`hydra_writer_pending_queued`] and [`hydra_writer_pending_dequeued`] may be called from
//! any thread at any time (they are lock-free atomic counters), and so may
//! [`hydra_writer_layer_done_in_step`] (a device's host callback publishing the layer
//! position, format v1.1; the library serialises it with the compute thread's updates of
//! the same slot). [`hydra_writer_close`]
//! must be the last call on a handle, from any one thread, once no other thread uses it.
//!
//! # Conventions
//! Every function returns an `int32_t`: [`HYDRA_WRITER_OK`] or a negative
//! `HYDRA_WRITER_E_*` code, with this thread's message in [`hydra_writer_last_error`]. A
//! NULL pointer argument gives [`HYDRA_WRITER_E_NULL`] (exceptions are documented: the
//! description's strings and `needed` out-parameters may be NULL). No Rust panic crosses
//! the boundary.

#![deny(missing_docs)]

use hydra_ffi_support::{arg_str, copy_out, opt_str, out_ptr, Abi, ErrorKind, FfiError, Overflow};
use hydra_layout::{
    clock, naming, EngineDescription, ErrorCode, FinishCause, FinishReason, Forecaster,
    PendingCounter, Phase, PhaseEnd, SegmentConfig, SegmentWriter, SlotState, Substep,
    SubstepPublisher, WorkUnit, WriterCounters,
};
use std::cell::RefCell;
use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::LocalKey;

/// Version of this ABI. Bumped on any incompatible change (a struct layout, a signature).
/// Version 2: phases, work units, finish reasons and task error codes are `uint64_t`, as
/// the segment's words and the reader ABI's `HydraProbeSlot` fields are (version 1 took
/// them as `int32_t`).
pub const HYDRA_WRITER_ABI_VERSION: u32 = 2;

/// Minor version of this ABI: bumped when a function or constant is added, reset to 0 when
/// [`HYDRA_WRITER_ABI_VERSION`] changes. Minor 1 added `hydra_writer_abi_minor`,
/// `hydra_writer_note_arrival`, `hydra_writer_note_finish`, the capability bits
/// `HYDRA_WRITER_CAP_ARRIVAL_TIMES`, `_FINISH_CAUSES`, `_PROMPT_ARRIVALS` and the
/// `HYDRA_WRITER_CAUSE_*` values (format v1.3 statistics).
pub const HYDRA_WRITER_ABI_MINOR: u32 = 1;

/// Success.
pub const HYDRA_WRITER_OK: i32 = 0;
/// A required pointer argument was NULL.
pub const HYDRA_WRITER_E_NULL: i32 = -1;
/// An argument was invalid: a string that is not UTF-8, an engine id that cannot name a
/// segment, a slot count of 0 or above 4096, an unknown phase, unit, reason or code.
pub const HYDRA_WRITER_E_INVALID_ARGUMENT: i32 = -2;
/// The caller's buffer is too small; the needed size was stored where the call says.
pub const HYDRA_WRITER_E_BUFFER_TOO_SMALL: i32 = -3;
/// The slot index is past the segment's slot count.
pub const HYDRA_WRITER_E_SLOT_OUT_OF_RANGE: i32 = -4;
/// A live engine already publishes under this engine id.
pub const HYDRA_WRITER_E_ENGINE_ID_IN_USE: i32 = -5;
/// The segment directory (or an existing file) was refused for safety: a symbolic link,
/// another owner, world-writable, not a regular file.
pub const HYDRA_WRITER_E_REFUSED: i32 = -6;
/// A system call failed (permission denied, tmpfs full, ...).
pub const HYDRA_WRITER_E_IO: i32 = -7;
/// A bug in this library (a Rust panic, caught before it reached the caller).
pub const HYDRA_WRITER_E_INTERNAL: i32 = -8;

/// Phase: no task.
pub const HYDRA_WRITER_PHASE_IDLE: u64 = 0;
/// Phase: a task is posted for the slot and waits in the engine's queue.
pub const HYDRA_WRITER_PHASE_QUEUED: u64 = 1;
/// Phase: evaluating prompt tokens (work in tokens).
pub const HYDRA_WRITER_PHASE_PREFILL: u64 = 2;
/// Phase: generating tokens (work in tokens).
pub const HYDRA_WRITER_PHASE_DECODE: u64 = 3;
/// Phase: saving the KV state (work in bytes).
pub const HYDRA_WRITER_PHASE_SAVE: u64 = 4;
/// Phase: restoring the KV state (work in bytes).
pub const HYDRA_WRITER_PHASE_RESTORE: u64 = 5;

/// Work unit: none.
pub const HYDRA_WRITER_UNIT_NONE: u64 = 0;
/// Work unit: tokens (prefill, decode).
pub const HYDRA_WRITER_UNIT_TOKENS: u64 = 1;
/// Work unit: bytes (state save, restore).
pub const HYDRA_WRITER_UNIT_BYTES: u64 = 2;

/// Finish reason: none.
pub const HYDRA_WRITER_FINISH_NONE: u64 = 0;
/// Finish reason: ran to completion.
pub const HYDRA_WRITER_FINISH_COMPLETED: u64 = 1;
/// Finish reason: cancelled.
pub const HYDRA_WRITER_FINISH_CANCELLED: u64 = 2;
/// Finish reason: failed (see the error code).
pub const HYDRA_WRITER_FINISH_ERROR: u64 = 3;

/// Task error code: none.
pub const HYDRA_WRITER_ERROR_NONE: u64 = 0;
/// Task error code: the prompt or generation did not fit the context.
pub const HYDRA_WRITER_ERROR_CONTEXT_OVERFLOW: u64 = 1;
/// Task error code: invalid request.
pub const HYDRA_WRITER_ERROR_INVALID_INPUT: u64 = 2;
/// Task error code: a state to restore was refused.
pub const HYDRA_WRITER_ERROR_STATE_REJECTED: u64 = 3;
/// Task error code: I/O error while streaming state.
pub const HYDRA_WRITER_ERROR_IO: u64 = 4;
/// Task error code: the forward pass failed.
pub const HYDRA_WRITER_ERROR_COMPUTE: u64 = 5;
/// Task error code: any other internal error.
pub const HYDRA_WRITER_ERROR_INTERNAL: u64 = 6;

/// Capability bit: text completion.
pub const HYDRA_WRITER_CAP_COMPLETION: u64 = 1 << 0;
/// Capability bit: KV state save and restore.
pub const HYDRA_WRITER_CAP_STATE_SAVE_RESTORE: u64 = 1 << 1;
/// Capability bit: chunked prefill with per-chunk progress.
pub const HYDRA_WRITER_CAP_CHUNKED_PREFILL: u64 = 1 << 2;
/// Capability bit: the engine publishes the layer position inside each step
/// ([`hydra_writer_layer_done`]); without it readers report the position unknown.
pub const HYDRA_WRITER_CAP_LAYER_PROGRESS: u64 = 1 << 3;
/// Capability bit (format v1.2): the library keeps a cost model of the engine's steps,
/// learnt from their durations, and publishes with every token step its predicted duration
/// and the predicted end of the phase's work (`work_total`), with an error bound. The
/// shape of a step is its size (`hydra_writer_step_start`) and the slot's cached tokens
/// (`hydra_writer_set_n_past`, to be kept current); each step counts as a forward of its
/// own slot. Steps cut short by `hydra_writer_finish` or a new phase are not learnt.
pub const HYDRA_WRITER_CAP_STEP_PREDICTION: u64 = 1 << 4;
/// Capability bit (format v1.3): the host gives each task's arrival time
/// ([`hydra_writer_note_arrival`], before [`hydra_writer_begin_task`]), so that time to
/// first token, queue wait and end-to-end time are kept. A task begun without one counts
/// as such. (The statistics derived from the steps alone and the flight recorder are
/// always kept: the library sets their bits itself.)
pub const HYDRA_WRITER_CAP_ARRIVAL_TIMES: u64 = 1 << 6;
/// Capability bit (format v1.3): the host says why each task ends
/// ([`hydra_writer_note_finish`], before [`hydra_writer_finish`]), so that tasks by finish
/// cause and failed tasks by error code are kept. A task ended without one counts as
/// `UNSPECIFIED` (or `CANCELLED`, `ERROR` from its finish reason).
pub const HYDRA_WRITER_CAP_FINISH_CAUSES: u64 = 1 << 7;
/// Capability bit (format v1.3): the arrival times the host gives are each task's first
/// compute, not the request's (a host that never sees its requests wait): time to first
/// token and end-to-end time are kept from there, queue wait is not.
/// `HYDRA_WRITER_CAP_ARRIVAL_TIMES`, when set too, takes precedence.
pub const HYDRA_WRITER_CAP_PROMPT_ARRIVALS: u64 = 1 << 12;

/// Finish cause (`hydra_writer_note_finish`): completed, the host did not say why.
pub const HYDRA_WRITER_CAUSE_UNSPECIFIED: u64 = 0;
/// Finish cause: the model produced its end-of-generation token.
pub const HYDRA_WRITER_CAUSE_EOS: u64 = 1;
/// Finish cause: the most tokens the task may generate were generated.
pub const HYDRA_WRITER_CAUSE_LENGTH: u64 = 2;
/// Finish cause: a stop string of the request matched.
pub const HYDRA_WRITER_CAUSE_STOP_STRING: u64 = 3;
/// Finish cause: the slot's context is full.
pub const HYDRA_WRITER_CAUSE_CONTEXT_FULL: u64 = 4;
/// Finish cause: a task that generates nothing (prefill, save, restore) did all its work.
pub const HYDRA_WRITER_CAUSE_DONE: u64 = 5;
/// Finish cause: cancelled (client gone, cancel request, shutdown).
pub const HYDRA_WRITER_CAUSE_CANCELLED: u64 = 6;
/// Finish cause: failed (the error code is `hydra_writer_finish`'s).
pub const HYDRA_WRITER_CAUSE_ERROR: u64 = 7;

// Every wire constant is the value the Rust format code writes (the reader ABI asserts the
// same of its phase constants, so the two ABIs agree).
const _: () = {
    use hydra_layout::header::capabilities as cap;
    assert!(HYDRA_WRITER_CAP_COMPLETION == cap::COMPLETION);
    assert!(HYDRA_WRITER_CAP_STATE_SAVE_RESTORE == cap::STATE_SAVE_RESTORE);
    assert!(HYDRA_WRITER_CAP_CHUNKED_PREFILL == cap::CHUNKED_PREFILL);
    assert!(HYDRA_WRITER_CAP_LAYER_PROGRESS == cap::LAYER_PROGRESS);
    assert!(HYDRA_WRITER_CAP_STEP_PREDICTION == cap::STEP_PREDICTION);
    assert!(HYDRA_WRITER_CAP_ARRIVAL_TIMES == cap::ARRIVAL_TIMES);
    assert!(HYDRA_WRITER_CAP_FINISH_CAUSES == cap::FINISH_CAUSES);
    assert!(HYDRA_WRITER_CAP_PROMPT_ARRIVALS == cap::PROMPT_ARRIVALS);
    assert!(HYDRA_WRITER_CAUSE_UNSPECIFIED == FinishCause::Unspecified.to_raw());
    assert!(HYDRA_WRITER_CAUSE_EOS == FinishCause::Eos.to_raw());
    assert!(HYDRA_WRITER_CAUSE_LENGTH == FinishCause::Length.to_raw());
    assert!(HYDRA_WRITER_CAUSE_STOP_STRING == FinishCause::StopString.to_raw());
    assert!(HYDRA_WRITER_CAUSE_CONTEXT_FULL == FinishCause::ContextFull.to_raw());
    assert!(HYDRA_WRITER_CAUSE_DONE == FinishCause::Done.to_raw());
    assert!(HYDRA_WRITER_CAUSE_CANCELLED == FinishCause::Cancelled.to_raw());
    assert!(HYDRA_WRITER_CAUSE_ERROR == FinishCause::Error.to_raw());

    assert!(HYDRA_WRITER_PHASE_IDLE == Phase::Idle.to_raw());
    assert!(HYDRA_WRITER_PHASE_QUEUED == Phase::Queued.to_raw());
    assert!(HYDRA_WRITER_PHASE_PREFILL == Phase::Prefill.to_raw());
    assert!(HYDRA_WRITER_PHASE_DECODE == Phase::Decode.to_raw());
    assert!(HYDRA_WRITER_PHASE_SAVE == Phase::Save.to_raw());
    assert!(HYDRA_WRITER_PHASE_RESTORE == Phase::Restore.to_raw());

    assert!(HYDRA_WRITER_UNIT_NONE == WorkUnit::None.to_raw());
    assert!(HYDRA_WRITER_UNIT_TOKENS == WorkUnit::Tokens.to_raw());
    assert!(HYDRA_WRITER_UNIT_BYTES == WorkUnit::Bytes.to_raw());

    assert!(HYDRA_WRITER_FINISH_NONE == FinishReason::None.to_raw());
    assert!(HYDRA_WRITER_FINISH_COMPLETED == FinishReason::Completed.to_raw());
    assert!(HYDRA_WRITER_FINISH_CANCELLED == FinishReason::Cancelled.to_raw());
    assert!(HYDRA_WRITER_FINISH_ERROR == FinishReason::Error.to_raw());

    assert!(HYDRA_WRITER_ERROR_NONE == ErrorCode::None.to_raw());
    assert!(HYDRA_WRITER_ERROR_CONTEXT_OVERFLOW == ErrorCode::ContextOverflow.to_raw());
    assert!(HYDRA_WRITER_ERROR_INVALID_INPUT == ErrorCode::InvalidInput.to_raw());
    assert!(HYDRA_WRITER_ERROR_STATE_REJECTED == ErrorCode::StateRejected.to_raw());
    assert!(HYDRA_WRITER_ERROR_IO == ErrorCode::Io.to_raw());
    assert!(HYDRA_WRITER_ERROR_COMPUTE == ErrorCode::Compute.to_raw());
    assert!(HYDRA_WRITER_ERROR_INTERNAL == ErrorCode::Internal.to_raw());
};

/// What the engine says about itself, written once at creation. Each string may be NULL
/// (empty); longer strings are cut to their header field (at a UTF-8 boundary).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HydraWriterDescription {
    /// Model name (127 bytes max), e.g. "SmolLM2-135M-Instruct".
    pub model_name: *const c_char,
    /// Quantization (31 bytes max), e.g. "Q4_K_M".
    pub model_quant: *const c_char,
    /// Model file path (255 bytes max).
    pub model_path: *const c_char,
    /// Tokenizer family (31 bytes max), e.g. "gpt2".
    pub tokenizer: *const c_char,
    /// The alias clients use for the model (63 bytes max).
    pub model_alias: *const c_char,
    /// Compute device (63 bytes max), e.g. "cpu", "cuda:0".
    pub device: *const c_char,
    /// `HYDRA_WRITER_CAP_*` bits.
    pub capabilities: u64,
}

/// Engine-wide counters (see `hydra_writer_set_counters`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HydraWriterCounters {
    /// Prompt tokens evaluated since start.
    pub prompt_tokens_total: u64,
    /// Tokens generated since start.
    pub generated_tokens_total: u64,
    /// Requests being processed now.
    pub requests_running: u64,
    /// KV cells in use across slots.
    pub kv_cells_used: u64,
    /// KV cells available across slots.
    pub kv_cells_total: u64,
}

/// The single-writer state: the segment, the per-slot record mirror and, when the
/// description asks for predictions, the cost model.
struct Inner {
    writer: SegmentWriter,
    slots: Vec<SlotState>,
    forecast: Option<Forecaster>,
}

/// What an update does to the step in flight, for the heartbeat and the cost model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Nothing: the step in flight (if any) goes on.
    Plain,
    /// A step starts: predict it (and publish the prediction with the record), beat.
    StepStarted,
    /// The step in flight finished: learn from it, beat.
    StepFinished,
    /// The step in flight (if any) ended without finishing (the task or phase ended):
    /// it is not learnt.
    StepEnded,
}

/// A segment being written (opaque to C).
pub struct HydraWriter {
    inner: Mutex<Inner>,
    pending: PendingCounter,
    substeps: SubstepPublisher,
    path: String,
}

// ---- errors and arguments -------------------------------------------------------------

/// The writer ABI for the shared FFI plumbing (`hydra-ffi-support`).
struct WriterAbi;

thread_local! {
    /// Message of the last failed call on this thread ("" after a successful one).
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Abi for WriterAbi {
    const LIBRARY: &'static str = "libhydra_writer";
    const OK: i32 = HYDRA_WRITER_OK;
    const E_NULL: i32 = HYDRA_WRITER_E_NULL;
    const E_BUFFER_TOO_SMALL: i32 = HYDRA_WRITER_E_BUFFER_TOO_SMALL;
    const E_INTERNAL: i32 = HYDRA_WRITER_E_INTERNAL;

    fn code_of(kind: ErrorKind) -> i32 {
        match kind {
            ErrorKind::InvalidArgument => HYDRA_WRITER_E_INVALID_ARGUMENT,
            ErrorKind::EngineIdInUse => HYDRA_WRITER_E_ENGINE_ID_IN_USE,
            ErrorKind::UnsafeDirectory
            | ErrorKind::Symlink
            | ErrorKind::NotRegularFile
            | ErrorKind::WrongOwner => HYDRA_WRITER_E_REFUSED,
            ErrorKind::SlotOutOfRange => HYDRA_WRITER_E_SLOT_OUT_OF_RANGE,
            ErrorKind::NotFound | ErrorKind::Io => HYDRA_WRITER_E_IO,
            // Reading a segment fails in these ways; creating and publishing never does.
            ErrorKind::Truncated
            | ErrorKind::BadMagic
            | ErrorKind::ByteOrder
            | ErrorKind::UnsupportedVersion
            | ErrorKind::BadGeometry
            | ErrorKind::SizeChanged
            | ErrorKind::NotReady
            | ErrorKind::BadState
            | ErrorKind::Torn
            | ErrorKind::EngineIdMismatch
            | ErrorKind::BadRegion => HYDRA_WRITER_E_INTERNAL,
        }
    }

    fn last_error() -> &'static LocalKey<RefCell<String>> {
        &LAST_ERROR
    }
}

/// Runs an exported function's body under the shared guard with this ABI's codes.
fn guard(body: impl FnOnce() -> Result<(), FfiError>) -> i32 {
    hydra_ffi_support::guard::<WriterAbi>(body)
}

/// A handle argument.
///
/// # Safety
/// `w` is NULL or a handle from `hydra_writer_create` not yet closed, valid for `'a`.
unsafe fn handle<'a>(w: *const HydraWriter) -> Result<&'a HydraWriter, FfiError> {
    // SAFETY: the caller guarantees `w` is NULL or a live handle (a leaked
    // `Box<HydraWriter>`), only accessed through shared references (state behind a mutex).
    unsafe { hydra_ffi_support::handle(w, "writer") }
}

/// A wire value of one of the format's enums, refused when this version does not know it.
fn known<T>(raw: u64, decoded: T, unknown: bool, what: &str) -> Result<T, FfiError> {
    if unknown {
        Err(FfiError::invalid(format!("unknown {what} {raw}")))
    } else {
        Ok(decoded)
    }
}

fn phase(raw: u64) -> Result<Phase, FfiError> {
    let p = Phase::from_raw(raw);
    known(raw, p, matches!(p, Phase::Unknown(_)), "phase")
}

fn unit(raw: u64) -> Result<WorkUnit, FfiError> {
    let u = WorkUnit::from_raw(raw);
    known(raw, u, matches!(u, WorkUnit::Unknown(_)), "work unit")
}

fn finish_reason(raw: u64) -> Result<FinishReason, FfiError> {
    let r = FinishReason::from_raw(raw);
    known(
        raw,
        r,
        matches!(r, FinishReason::Unknown(_)),
        "finish reason",
    )
}

fn error_code(raw: u64) -> Result<ErrorCode, FfiError> {
    let c = ErrorCode::from_raw(raw);
    known(raw, c, matches!(c, ErrorCode::Unknown(_)), "error code")
}

impl HydraWriter {
    /// The `STEP_START_NS` of `slot`'s step in flight (0 when none).
    fn step_in_flight(&self, slot: u32) -> Result<u64, FfiError> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .slots
            .get(slot as usize)
            .map(|s| s.step_start_ns)
            .ok_or_else(|| slot_out_of_range(slot, inner.slots.len()))
    }

    /// Publishes `slot`'s layer position in step `step`, stamped now.
    fn publish_layer(&self, slot: u32, step: u64, done: u64, total: u64) -> Result<(), FfiError> {
        let substep = Substep {
            done,
            total,
            at_ns: clock::monotonic_ns(),
            step_start_ns: step,
        };
        self.substeps
            .publish(slot as usize, &substep)
            .map_err(FfiError::from)
    }

    /// Runs `f` on slot `slot`'s mirror with the clock read once, tells the cost model
    /// about `event`, publishes the record (with its prediction when a step starts and the
    /// writer predicts) and, for a step event, stores the loop heartbeat at the same
    /// instant.
    fn update(
        &self,
        slot: u32,
        event: Event,
        f: impl FnOnce(&mut SlotState, u64),
    ) -> Result<(), FfiError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        let count = inner.slots.len();
        let index = slot as usize;
        let s = inner
            .slots
            .get_mut(index)
            .ok_or_else(|| slot_out_of_range(slot, count))?;
        let now = clock::monotonic_ns();
        f(s, now);
        let prediction = match (event, inner.forecast.as_mut()) {
            (Event::StepStarted, Some(fc)) => fc.step_started(index, s),
            (Event::StepFinished, Some(fc)) => {
                fc.step_finished(index, s);
                None
            }
            (Event::StepEnded, Some(fc)) => {
                fc.step_abandoned(index);
                None
            }
            _ => None,
        };
        match prediction {
            Some(p) => inner.writer.publish_with_prediction(index, s, &p)?,
            None => inner.writer.publish(index, s)?,
        }
        if matches!(event, Event::StepStarted | Event::StepFinished) {
            inner.writer.heartbeat(now);
        }
        Ok(())
    }
}

/// The body of every per-slot update: checks the handle, then the other arguments (`args`),
/// and publishes slot `slot`'s record changed by `f` (see [`HydraWriter::update`]).
///
/// # Safety
/// `writer` is NULL or an open handle.
unsafe fn update_slot_with<A>(
    writer: *const HydraWriter,
    slot: u32,
    event: Event,
    args: impl FnOnce() -> Result<A, FfiError>,
    f: impl FnOnce(&mut SlotState, u64, A),
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let args = args()?;
        w.update(slot, event, |s, now| f(s, now, args))
    })
}

impl Event {
    /// [`update_slot_with`] for an update with no argument to check, which is this event
    /// for the step in flight: `f` gets the record and the current time.
    ///
    /// # Safety
    /// `writer` is NULL or an open handle.
    unsafe fn update(
        self,
        writer: *const HydraWriter,
        slot: u32,
        f: impl FnOnce(&mut SlotState, u64),
    ) -> i32 {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        unsafe { update_slot_with(writer, slot, self, || Ok(()), |s, now, ()| f(s, now)) }
    }
}

/// The body of the updates that enter a phase (a task's first, or the next one): checks
/// the wire values `phase` and `work_unit`, then publishes slot `slot`'s record changed by
/// `enter` (given them decoded and the current time). The step in flight, if any, ends
/// without being learnt.
///
/// # Safety
/// `writer` is NULL or an open handle.
unsafe fn enter_phase(
    writer: *const HydraWriter,
    slot: u32,
    phase: u64,
    work_unit: u64,
    enter: impl FnOnce(&mut SlotState, Phase, WorkUnit, u64),
) -> i32 {
    let args = || Ok((self::phase(phase)?, unit(work_unit)?));
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe {
        update_slot_with(
            writer,
            slot,
            Event::StepEnded,
            args,
            |s, now, (phase, unit)| enter(s, phase, unit, now),
        )
    }
}

// ---- exported functions -----------------------------------------------------------------

/// The ABI version, [`HYDRA_WRITER_ABI_VERSION`].
#[unsafe(no_mangle)]
pub extern "C" fn hydra_writer_abi_version() -> u32 {
    HYDRA_WRITER_ABI_VERSION
}

/// Copies the message of this thread's last failed call ("" if the last call succeeded)
/// into `buf` (`cap` bytes), NUL-terminated and truncated to fit (then the call returns
/// `HYDRA_WRITER_E_BUFFER_TOO_SMALL`), and stores the full size needed in `needed` (may be
/// NULL). `buf` may be NULL when `cap` is 0. Does not change the stored message.
///
/// # Safety
/// `buf` is NULL or writable for `cap` bytes; `needed` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_last_error(
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> i32 {
    // SAFETY: the caller's guarantees on `buf`, `cap` and `needed` are copy_last_error's.
    unsafe { hydra_ffi_support::copy_last_error::<WriterAbi>(buf, cap, needed) }
}

/// Creates the segment `<dir>/<engine_id>.hps` and stores its writer in `*out` (NULL on
/// failure). `dir` "" = `$HYDRA_PROGRESS_DIR`, else `/dev/shm/hydra-progress` (created
/// 0750 if missing). `engine_id`: 1 to 63 bytes of `[A-Za-z0-9._-]`, not starting with
/// `.`. `slot_count`: 1 to 4096. Every slot starts idle. The writer holds the segment's
/// lock until `hydra_writer_close` (or process exit, which readers then report as a dead
/// engine).
///
/// Errors: `HYDRA_WRITER_E_INVALID_ARGUMENT`, `HYDRA_WRITER_E_ENGINE_ID_IN_USE` (a live
/// engine has this id), `HYDRA_WRITER_E_REFUSED`, `HYDRA_WRITER_E_IO`.
///
/// # Safety
/// `dir`, `engine_id` are NULL or NUL-terminated; `description` is NULL or readable, and
/// each of its strings NULL or NUL-terminated; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_create(
    dir: *const c_char,
    engine_id: *const c_char,
    slot_count: u32,
    description: *const HydraWriterDescription,
    out: *mut *mut HydraWriter,
) -> i32 {
    guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller guarantees `dir` and `engine_id` are NULL or NUL-terminated.
        let (dir, engine_id) = unsafe { (arg_str(dir, "dir")?, arg_str(engine_id, "engine_id")?) };
        // SAFETY: the caller guarantees `description` is NULL or readable.
        let d = unsafe { description.as_ref() }.ok_or_else(|| FfiError::null("description"))?;
        let text = |p: *const c_char, name: &str| -> Result<String, FfiError> {
            // SAFETY: the caller guarantees each string of `d` is NULL or NUL-terminated.
            let s = unsafe { opt_str(p, name) }?;
            Ok(s.unwrap_or_default().to_owned())
        };
        let description = EngineDescription {
            model_name: text(d.model_name, "description.model_name")?,
            model_quant: text(d.model_quant, "description.model_quant")?,
            model_path: text(d.model_path, "description.model_path")?,
            tokenizer: text(d.tokenizer, "description.tokenizer")?,
            model_alias: text(d.model_alias, "description.model_alias")?,
            device: text(d.device, "description.device")?,
            capabilities: d.capabilities,
        };
        let dir = if dir.is_empty() {
            naming::resolve_dir(None)
        } else {
            PathBuf::from(dir)
        };
        let slot_count = slot_count as usize;
        let mut writer = SegmentWriter::create(&SegmentConfig {
            dir,
            engine_id: engine_id.to_owned(),
            slot_count,
            description,
        })?;
        let slots = vec![SlotState::default(); slot_count];
        let forecast = (d.capabilities & HYDRA_WRITER_CAP_STEP_PREDICTION != 0)
            .then(|| Forecaster::new(slot_count, PhaseEnd::Predict));
        for (i, s) in slots.iter().enumerate() {
            writer.publish(i, s)?;
        }
        writer.heartbeat(clock::monotonic_ns());
        let handle = Box::new(HydraWriter {
            pending: writer.pending_counter(),
            substeps: writer.substep_publisher(),
            path: writer.path().display().to_string(),
            inner: Mutex::new(Inner {
                writer,
                slots,
                forecast,
            }),
        });
        // SAFETY: as above; ownership of the box passes to the caller until close.
        unsafe { out.write(Box::into_raw(handle)) };
        Ok(())
    })
}

/// Marks the segment CLOSED, removes it and releases its lock, then frees the handle
/// (also on error: the handle is gone either way). Must be the last call on the handle.
///
/// # Safety
/// `writer` is NULL or a handle from `hydra_writer_create` not yet closed and no longer
/// used by any other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_close(writer: *mut HydraWriter) -> i32 {
    guard(|| {
        let writer = out_ptr(writer, "writer")?;
        // SAFETY: `writer` came from `Box::into_raw` in `hydra_writer_create`; the caller
        // guarantees it is not closed yet and unused elsewhere: we own it again.
        let w = unsafe { Box::from_raw(writer) };
        let inner = w.inner.into_inner().unwrap_or_else(|e| e.into_inner());
        inner.writer.close()?;
        Ok(())
    })
}

/// Stores the segment's slot count in `*count`.
///
/// # Safety
/// `writer` is NULL or an open handle; `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_slot_count(
    writer: *const HydraWriter,
    count: *mut u32,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let count = out_ptr(count, "count")?;
        let n = w
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .slots
            .len();
        // SAFETY: `count` is not NULL and the caller guarantees it is writable.
        unsafe { count.write(u32::try_from(n).unwrap_or(u32::MAX)) };
        Ok(())
    })
}

/// Copies the segment file's path into `buf` (`cap` bytes, NUL-terminated), storing the
/// needed size in `needed` (may be NULL); `HYDRA_WRITER_E_BUFFER_TOO_SMALL` (with a
/// truncated copy) when it does not fit. `buf` may be NULL when `cap` is 0.
///
/// # Safety
/// `writer` is NULL or an open handle; `buf` is NULL or writable for `cap` bytes;
/// `needed` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_path(
    writer: *const HydraWriter,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        // SAFETY: the caller's guarantees on `buf`, `cap`, `needed` are copy_out's.
        unsafe { copy_out(&w.path, buf, cap, needed, Overflow::Truncate) }
    })
}

/// A task starts on `slot`: sets its task id, enters `phase` (a `HYDRA_WRITER_PHASE_*`;
/// `QUEUED` for a task posted but not yet running) with `work_total` units of `work_unit`
/// to do (0 = unknown), clears the last finish reason and error code, and stamps the task
/// and phase start with the current time. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_begin_task(
    writer: *mut HydraWriter,
    slot: u32,
    task_id: u64,
    phase: u64,
    work_unit: u64,
    work_total: u64,
) -> i32 {
    let begin =
        |s: &mut SlotState, phase, unit, now| s.begin_task(task_id, phase, unit, work_total, now);
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { enter_phase(writer, slot, phase, work_unit, begin) }
}

/// The running task on `slot` moves to another phase (queued -> prefill -> decode): resets
/// the work counters and steps, stamps the phase start. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_begin_phase(
    writer: *mut HydraWriter,
    slot: u32,
    phase: u64,
    work_unit: u64,
    work_total: u64,
) -> i32 {
    let enter = |s: &mut SlotState, phase, unit, now| s.enter_phase(phase, unit, work_total, now);
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { enter_phase(writer, slot, phase, work_unit, enter) }
}

/// A step (one forward pass, one prefill chunk, one block of bytes) carrying `step_size`
/// tokens (or bytes) starts now on `slot`. Readers then know a step is under way and how
/// long it should take. Also stores the loop heartbeat. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_step_start(
    writer: *mut HydraWriter,
    slot: u32,
    step_size: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { Event::StepStarted.update(writer, slot, |s, now| s.start_step(step_size, now)) }
}

/// The step in flight on `slot` finished now, and `work_done` units of the phase are done
/// in all (absolute, not an increment). Records the step's duration, counts it, clears the
/// step in flight, stamps the last progress when `work_done` advanced, and stores the loop
/// heartbeat. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_step_finish(
    writer: *mut HydraWriter,
    slot: u32,
    work_done: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { Event::StepFinished.update(writer, slot, |s, now| s.finish_step(work_done, now)) }
}

/// `work_done` units of `slot`'s phase are done in all (absolute), for work that is not
/// cut into steps (bytes of a state save, say). When it advanced, stamps the last progress
/// and counts the interval since the previous progress as a finished step. Publishes the
/// record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_set_work_done(
    writer: *mut HydraWriter,
    slot: u32,
    work_done: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { Event::Plain.update(writer, slot, |s, now| s.advance(work_done, now)) }
}

/// Changes the work total of `slot`'s phase (0 = unknown). Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_set_work_total(
    writer: *mut HydraWriter,
    slot: u32,
    work_total: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { Event::Plain.update(writer, slot, |s, _| s.work_total = work_total) }
}

/// `slot`'s KV cache now holds `n_past` tokens. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_set_n_past(
    writer: *mut HydraWriter,
    slot: u32,
    n_past: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe { Event::Plain.update(writer, slot, |s, _| s.n_past = n_past) }
}

/// Sets `slot`'s context size (tokens), the prompt tokens its current task reused from
/// the cache, and the bytes a state save of it would produce now. Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_set_slot_info(
    writer: *mut HydraWriter,
    slot: u32,
    n_ctx: u64,
    tokens_cached: u64,
    state_size: u64,
) -> i32 {
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe {
        Event::Plain.update(writer, slot, |s, _| {
            s.n_ctx = n_ctx;
            s.tokens_cached = tokens_cached;
            s.state_size = state_size;
        })
    }
}

/// The task on `slot` ended: the slot goes back to idle with `reason`
/// (`HYDRA_WRITER_FINISH_*`) and `error_code` (`HYDRA_WRITER_ERROR_*`, meaningful with
/// `HYDRA_WRITER_FINISH_ERROR`). The work figures of the last phase stay for display.
/// Publishes the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_finish(
    writer: *mut HydraWriter,
    slot: u32,
    reason: u64,
    error_code: u64,
) -> i32 {
    let args = || Ok((finish_reason(reason)?, self::error_code(error_code)?));
    // SAFETY: the caller guarantees `writer` is NULL or an open handle.
    unsafe {
        update_slot_with(writer, slot, Event::Plain, args, |s, _, (reason, code)| {
            s.finish(reason, code)
        })
    }
}

/// The next task to begin on `slot` arrived at `arrival_ns` (CLOCK_MONOTONIC ns: when the
/// request was queued, before it waited; with `HYDRA_WRITER_CAP_PROMPT_ARRIVALS`, its
/// first compute). Call it just before `hydra_writer_begin_task`: the task's queue wait,
/// time to first token and end-to-end time start there. For a writer created with
/// `HYDRA_WRITER_CAP_ARRIVAL_TIMES` (or `_PROMPT_ARRIVALS`); without, readers show none.
/// Added in writer ABI minor 1.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_note_arrival(
    writer: *mut HydraWriter,
    slot: u32,
    arrival_ns: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let mut inner = w.inner.lock().unwrap_or_else(|e| e.into_inner());
        let count = inner.slots.len();
        inner
            .writer
            .note_arrival(slot as usize, arrival_ns)
            .map_err(|_| slot_out_of_range(slot, count))
    })
}

/// The running task on `slot` ends now because of `cause` (`HYDRA_WRITER_CAUSE_*`). Call
/// it just before `hydra_writer_finish`, whose reason should be the cause's (`CANCELLED`
/// for `CANCELLED`, `ERROR` for `ERROR`, else `COMPLETED`). For a writer created with
/// `HYDRA_WRITER_CAP_FINISH_CAUSES`; without, readers show no causes. Added in writer ABI
/// minor 1.
///
/// Errors: `HYDRA_WRITER_E_INVALID_ARGUMENT` for a cause this library does not know.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_note_finish(
    writer: *mut HydraWriter,
    slot: u32,
    cause: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let cause = match FinishCause::from_raw(cause) {
            FinishCause::Unknown(raw) => {
                return Err(FfiError::invalid(format!("unknown finish cause {raw}")))
            }
            known => known,
        };
        let mut inner = w.inner.lock().unwrap_or_else(|e| e.into_inner());
        let count = inner.slots.len();
        inner
            .writer
            .note_finish(slot as usize, cause, clock::monotonic_ns())
            .map_err(|_| slot_out_of_range(slot, count))
    })
}

/// The ABI's minor version, [`HYDRA_WRITER_ABI_MINOR`] (added in minor 1: a library
/// without this symbol is minor 0).
#[unsafe(no_mangle)]
pub extern "C" fn hydra_writer_abi_minor() -> u32 {
    HYDRA_WRITER_ABI_MINOR
}

/// One pass of the compute loop: stores the heartbeat (now) and counts the iteration.
/// Call it on every pass, idle ones included, from the compute loop itself (a side thread
/// would hide a hung decode).
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_heartbeat(writer: *mut HydraWriter) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let mut inner = w.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.writer.heartbeat(clock::monotonic_ns());
        Ok(())
    })
}

/// Stores the engine-wide counters (each word on its own; not a consistent group). The
/// waiting-requests gauge is kept by the pending counters.
///
/// # Safety
/// `writer` is NULL or an open handle; `counters` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_set_counters(
    writer: *mut HydraWriter,
    counters: *const HydraWriterCounters,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        // SAFETY: the caller guarantees `counters` is NULL or readable.
        let c = unsafe { counters.as_ref() }.ok_or_else(|| FfiError::null("counters"))?;
        let mut inner = w.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.writer.set_counters(&WriterCounters {
            prompt_tokens_total: c.prompt_tokens_total,
            generated_tokens_total: c.generated_tokens_total,
            requests_running: c.requests_running,
            kv_cells_used: c.kv_cells_used,
            kv_cells_total: c.kv_cells_total,
        });
        Ok(())
    })
}

/// Layer `layers_done` of the `n_layers` in the forward of `slot`'s step in flight has
/// finished (format v1.1; create the segment with [`HYDRA_WRITER_CAP_LAYER_PROGRESS`] so
/// that readers show it): publishes the slot's layer position, stamped now, for the step
/// in flight now. Call it where the layer's work is complete (after each layer on the CPU).
/// On an asynchronous device, where the host only enqueues the layer, read the step with
/// [`hydra_writer_step_id`] when enqueueing and publish from the device's host callback
/// with [`hydra_writer_layer_done_in_step`]. Does not touch the rest of the record.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_layer_done(
    writer: *mut HydraWriter,
    slot: u32,
    layers_done: u64,
    n_layers: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let step = w.step_in_flight(slot)?;
        w.publish_layer(slot, step, layers_done, n_layers)
    })
}

/// Stores in `*step` the id of `slot`'s step in flight (its start time, `STEP_START_NS`;
/// 0 when no step runs), for [`hydra_writer_layer_done_in_step`].
///
/// # Safety
/// `writer` is NULL or an open handle; `step` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_step_id(
    writer: *const HydraWriter,
    slot: u32,
    step: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let out = out_ptr(step, "step")?;
        let id = w.step_in_flight(slot)?;
        // SAFETY: `out` is not NULL (checked) and the caller guarantees it is writable.
        unsafe { out.write(id) };
        Ok(())
    })
}

/// Layer `layers_done` of the `n_layers` in the forward of step `step` (from
/// [`hydra_writer_step_id`]) on `slot` has finished: publishes the layer position, stamped
/// now. May be called from any thread, e.g. a CUDA host callback queued after the layer's
/// kernels (`cuLaunchHostFunc`), while the compute thread publishes the same slot: the
/// library serialises the two. Readers show the position only while `step` is the step in
/// flight, so a callback that runs late never shows as the next step's position.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_layer_done_in_step(
    writer: *const HydraWriter,
    slot: u32,
    step: u64,
    layers_done: u64,
    n_layers: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.publish_layer(slot, step, layers_done, n_layers)
    })
}

/// A task for `slot` was queued (any thread, lock-free): adds one to the slot's pending
/// count and to the engine's waiting-requests gauge.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_pending_queued(writer: *const HydraWriter, slot: u32) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        pending_result(w.pending.queued(slot as usize), slot)
    })
}

/// A task for `slot` left the queue (any thread, lock-free): subtracts one from the slot's
/// pending count and the waiting-requests gauge, never below zero.
///
/// # Safety
/// `writer` is NULL or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_writer_pending_dequeued(
    writer: *const HydraWriter,
    slot: u32,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        pending_result(w.pending.dequeued(slot as usize), slot)
    })
}

fn slot_out_of_range(slot: u32, count: usize) -> FfiError {
    FfiError::new(
        ErrorKind::SlotOutOfRange,
        format!("slot {slot} out of range: the segment has {count} slots"),
    )
}

fn pending_result(in_range: bool, slot: u32) -> Result<(), FfiError> {
    if in_range {
        Ok(())
    } else {
        Err(FfiError::new(
            ErrorKind::SlotOutOfRange,
            format!("slot {slot} out of range"),
        ))
    }
}
