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
//! any thread at any time (they are lock-free atomic counters). [`hydra_writer_close`]
//! must be the last call on a handle, from any one thread, once no other thread uses it.
//!
//! # Conventions
//! Every function returns an `int32_t`: [`HYDRA_WRITER_OK`] or a negative
//! `HYDRA_WRITER_E_*` code, with this thread's message in [`hydra_writer_last_error`]. A
//! NULL pointer argument gives [`HYDRA_WRITER_E_NULL`] (exceptions are documented: the
//! description's strings and `needed` out-parameters may be NULL). No Rust panic crosses
//! the boundary.

#![deny(missing_docs)]

use hydra_layout::{
    clock, naming, EngineDescription, ErrorCode, FinishReason, PendingCounter, Phase,
    SegmentConfig, SegmentWriter, SlotState, WorkUnit, WriterCounters,
};
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Mutex;

/// Version of this ABI. Bumped on any incompatible change (a struct layout, a signature).
pub const HYDRA_WRITER_ABI_VERSION: u32 = 1;

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
pub const HYDRA_WRITER_PHASE_IDLE: i32 = 0;
/// Phase: a task is posted for the slot and waits in the engine's queue.
pub const HYDRA_WRITER_PHASE_QUEUED: i32 = 1;
/// Phase: evaluating prompt tokens (work in tokens).
pub const HYDRA_WRITER_PHASE_PREFILL: i32 = 2;
/// Phase: generating tokens (work in tokens).
pub const HYDRA_WRITER_PHASE_DECODE: i32 = 3;
/// Phase: saving the KV state (work in bytes).
pub const HYDRA_WRITER_PHASE_SAVE: i32 = 4;
/// Phase: restoring the KV state (work in bytes).
pub const HYDRA_WRITER_PHASE_RESTORE: i32 = 5;

/// Work unit: none.
pub const HYDRA_WRITER_UNIT_NONE: i32 = 0;
/// Work unit: tokens (prefill, decode).
pub const HYDRA_WRITER_UNIT_TOKENS: i32 = 1;
/// Work unit: bytes (state save, restore).
pub const HYDRA_WRITER_UNIT_BYTES: i32 = 2;

/// Finish reason: none.
pub const HYDRA_WRITER_FINISH_NONE: i32 = 0;
/// Finish reason: ran to completion.
pub const HYDRA_WRITER_FINISH_COMPLETED: i32 = 1;
/// Finish reason: cancelled.
pub const HYDRA_WRITER_FINISH_CANCELLED: i32 = 2;
/// Finish reason: failed (see the error code).
pub const HYDRA_WRITER_FINISH_ERROR: i32 = 3;

/// Task error code: none.
pub const HYDRA_WRITER_ERROR_NONE: i32 = 0;
/// Task error code: the prompt or generation did not fit the context.
pub const HYDRA_WRITER_ERROR_CONTEXT_OVERFLOW: i32 = 1;
/// Task error code: invalid request.
pub const HYDRA_WRITER_ERROR_INVALID_INPUT: i32 = 2;
/// Task error code: a state to restore was refused.
pub const HYDRA_WRITER_ERROR_STATE_REJECTED: i32 = 3;
/// Task error code: I/O error while streaming state.
pub const HYDRA_WRITER_ERROR_IO: i32 = 4;
/// Task error code: the forward pass failed.
pub const HYDRA_WRITER_ERROR_COMPUTE: i32 = 5;
/// Task error code: any other internal error.
pub const HYDRA_WRITER_ERROR_INTERNAL: i32 = 6;

/// Capability bit: text completion.
pub const HYDRA_WRITER_CAP_COMPLETION: u64 = 1 << 0;
/// Capability bit: KV state save and restore.
pub const HYDRA_WRITER_CAP_STATE_SAVE_RESTORE: u64 = 1 << 1;
/// Capability bit: chunked prefill with per-chunk progress.
pub const HYDRA_WRITER_CAP_CHUNKED_PREFILL: u64 = 1 << 2;

const _: () =
    assert!(HYDRA_WRITER_CAP_COMPLETION == hydra_layout::header::capabilities::COMPLETION);
const _: () = assert!(
    HYDRA_WRITER_CAP_STATE_SAVE_RESTORE == hydra_layout::header::capabilities::STATE_SAVE_RESTORE
);
const _: () = assert!(
    HYDRA_WRITER_CAP_CHUNKED_PREFILL == hydra_layout::header::capabilities::CHUNKED_PREFILL
);

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

/// The single-writer state: the segment and the per-slot record mirror.
struct Inner {
    writer: SegmentWriter,
    slots: Vec<SlotState>,
}

/// A segment being written (opaque to C).
pub struct HydraWriter {
    inner: Mutex<Inner>,
    pending: PendingCounter,
    path: String,
}

// ---- errors -------------------------------------------------------------------------

struct FfiError {
    code: i32,
    message: String,
}

impl FfiError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn null(arg: &str) -> Self {
        Self::new(HYDRA_WRITER_E_NULL, format!("argument `{arg}` is NULL"))
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(HYDRA_WRITER_E_INVALID_ARGUMENT, message)
    }
}

impl From<hydra_layout::Error> for FfiError {
    fn from(e: hydra_layout::Error) -> Self {
        use hydra_layout::Error as E;
        let code = match &e {
            E::InvalidEngineId { .. } | E::SlotCountOutOfRange { .. } => {
                HYDRA_WRITER_E_INVALID_ARGUMENT
            }
            E::EngineIdInUse { .. } => HYDRA_WRITER_E_ENGINE_ID_IN_USE,
            E::UnsafeDirectory { .. }
            | E::SymlinkDirectory { .. }
            | E::SymlinkFile { .. }
            | E::NotRegularFile { .. }
            | E::WrongOwner { .. } => HYDRA_WRITER_E_REFUSED,
            E::SlotOutOfRange { .. } => HYDRA_WRITER_E_SLOT_OUT_OF_RANGE,
            E::Io { .. } => HYDRA_WRITER_E_IO,
            _ => HYDRA_WRITER_E_INTERNAL,
        };
        Self::new(code, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: String) {
    LAST_ERROR.with(|m| *m.borrow_mut() = message);
}

/// Runs an exported function's body: clears the last error, catches any panic, and turns
/// the outcome into a return code (storing the message of a failure).
fn guard(body: impl FnOnce() -> Result<(), FfiError>) -> i32 {
    set_last_error(String::new());
    // AssertUnwindSafe: after a panic the handle's mutex is recovered with `into_inner`
    // (the mirror is plain data, valid in every state) and the message is rewritten.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => HYDRA_WRITER_OK,
        Ok(Err(e)) => {
            set_last_error(e.message);
            e.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            set_last_error(format!("internal error in libhydra_writer (a bug): {what}"));
            HYDRA_WRITER_E_INTERNAL
        }
    }
}

// ---- argument helpers -----------------------------------------------------------------

/// A NUL-terminated UTF-8 string argument; `None` when `p` is NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid and unchanged for `'a`.
unsafe fn opt_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, FfiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: `p` is not NULL (checked above), and the caller guarantees it is
    // NUL-terminated and valid for `'a`.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| FfiError::invalid(format!("argument `{name}` is not valid UTF-8")))
}

/// A required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// As [`opt_str`].
unsafe fn req_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, FfiError> {
    // SAFETY: the caller's guarantee on `p` is opt_str's.
    unsafe { opt_str(p, name) }?.ok_or_else(|| FfiError::null(name))
}

/// A handle argument.
///
/// # Safety
/// `w` is NULL or a handle from `hydra_writer_create` not yet closed, valid for `'a`.
unsafe fn handle<'a>(w: *const HydraWriter) -> Result<&'a HydraWriter, FfiError> {
    // SAFETY: the caller guarantees `w` is NULL or a live handle (a leaked
    // `Box<HydraWriter>`), only accessed through shared references (state behind a mutex).
    unsafe { w.as_ref() }.ok_or_else(|| FfiError::null("writer"))
}

fn phase(raw: i32) -> Result<Phase, FfiError> {
    match Phase::from_raw(u64::try_from(raw).unwrap_or(u64::MAX)) {
        Phase::Unknown(_) => Err(FfiError::invalid(format!("unknown phase {raw}"))),
        p => Ok(p),
    }
}

fn unit(raw: i32) -> Result<WorkUnit, FfiError> {
    match WorkUnit::from_raw(u64::try_from(raw).unwrap_or(u64::MAX)) {
        WorkUnit::Unknown(_) => Err(FfiError::invalid(format!("unknown work unit {raw}"))),
        u => Ok(u),
    }
}

fn finish_reason(raw: i32) -> Result<FinishReason, FfiError> {
    match FinishReason::from_raw(u64::try_from(raw).unwrap_or(u64::MAX)) {
        FinishReason::Unknown(_) => Err(FfiError::invalid(format!("unknown finish reason {raw}"))),
        r => Ok(r),
    }
}

fn error_code(raw: i32) -> Result<ErrorCode, FfiError> {
    match ErrorCode::from_raw(u64::try_from(raw).unwrap_or(u64::MAX)) {
        ErrorCode::Unknown(_) => Err(FfiError::invalid(format!("unknown error code {raw}"))),
        c => Ok(c),
    }
}

impl HydraWriter {
    /// Runs `f` on slot `slot`'s mirror with the clock read once, publishes the record and,
    /// with `beat`, stores the loop heartbeat at the same instant.
    fn update(
        &self,
        slot: u32,
        beat: bool,
        f: impl FnOnce(&mut SlotState, u64),
    ) -> Result<(), FfiError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        let count = inner.slots.len();
        let s = inner.slots.get_mut(slot as usize).ok_or_else(|| {
            FfiError::new(
                HYDRA_WRITER_E_SLOT_OUT_OF_RANGE,
                format!("slot {slot} out of range: the segment has {count} slots"),
            )
        })?;
        let now = clock::monotonic_ns();
        f(s, now);
        inner.writer.publish(slot as usize, s)?;
        if beat {
            inner.writer.heartbeat(now);
        }
        Ok(())
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
    let message = LAST_ERROR.with(|m| m.borrow().clone());
    // SAFETY: the caller's guarantees on `buf`, `cap` and `needed` are copy_out's.
    match catch_unwind(|| unsafe { copy_out(&message, buf, cap, needed) }) {
        Ok(code) => code,
        Err(_) => HYDRA_WRITER_E_INTERNAL,
    }
}

/// Copies `text` (truncated to fit) and a NUL into `buf`; returns OK or BUFFER_TOO_SMALL.
///
/// # Safety
/// `buf` is NULL or writable for `cap` bytes; `needed` is NULL or writable.
unsafe fn copy_out(text: &str, buf: *mut c_char, cap: usize, needed: *mut usize) -> i32 {
    if buf.is_null() && cap > 0 {
        return HYDRA_WRITER_E_NULL;
    }
    let need = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: `needed` is not NULL and the caller guarantees it is writable.
        unsafe { needed.write(need) };
    }
    if cap == 0 {
        return HYDRA_WRITER_E_BUFFER_TOO_SMALL;
    }
    let mut copy = text.len().min(cap - 1);
    while !text.is_char_boundary(copy) {
        copy -= 1;
    }
    // SAFETY: `buf` is not NULL (cap > 0) and writable for `cap` bytes (caller); `copy + 1 <=
    // cap` keeps both writes in bounds; `text` is Rust-owned and cannot overlap `buf`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), copy);
        buf.add(copy).write(0);
    }
    if need <= cap {
        HYDRA_WRITER_OK
    } else {
        HYDRA_WRITER_E_BUFFER_TOO_SMALL
    }
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
        if out.is_null() {
            return Err(FfiError::null("out"));
        }
        // SAFETY: `out` is not NULL and the caller guarantees it is writable.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller guarantees `dir` and `engine_id` are NULL or NUL-terminated.
        let (dir, engine_id) = unsafe { (req_str(dir, "dir")?, req_str(engine_id, "engine_id")?) };
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
        for (i, s) in slots.iter().enumerate() {
            writer.publish(i, s)?;
        }
        writer.heartbeat(clock::monotonic_ns());
        let handle = Box::new(HydraWriter {
            pending: writer.pending_counter(),
            path: writer.path().display().to_string(),
            inner: Mutex::new(Inner { writer, slots }),
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
        if writer.is_null() {
            return Err(FfiError::null("writer"));
        }
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
        if count.is_null() {
            return Err(FfiError::null("count"));
        }
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
        match unsafe { copy_out(&w.path, buf, cap, needed) } {
            HYDRA_WRITER_OK => Ok(()),
            HYDRA_WRITER_E_NULL => Err(FfiError::null("buf")),
            code => Err(FfiError::new(
                code,
                format!(
                    "buffer of {cap} bytes is too small: {} needed",
                    w.path.len() + 1
                ),
            )),
        }
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
    phase: i32,
    work_unit: i32,
    work_total: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let (phase, unit) = (self::phase(phase)?, self::unit(work_unit)?);
        w.update(slot, false, |s, now| {
            s.begin_task(task_id, phase, unit, work_total, now)
        })
    })
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
    phase: i32,
    work_unit: i32,
    work_total: u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let (phase, unit) = (self::phase(phase)?, self::unit(work_unit)?);
        w.update(slot, false, |s, now| {
            s.enter_phase(phase, unit, work_total, now)
        })
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, true, |s, now| s.start_step(step_size, now))
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, true, |s, now| s.finish_step(work_done, now))
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, false, |s, now| s.advance(work_done, now))
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, false, |s, _| s.work_total = work_total)
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, false, |s, _| s.n_past = n_past)
    })
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
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        w.update(slot, false, |s, _| {
            s.n_ctx = n_ctx;
            s.tokens_cached = tokens_cached;
            s.state_size = state_size;
        })
    })
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
    reason: i32,
    error_code: i32,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `writer` is NULL or an open handle.
        let w = unsafe { handle(writer) }?;
        let (reason, code) = (finish_reason(reason)?, self::error_code(error_code)?);
        w.update(slot, false, |s, _| s.finish(reason, code))
    })
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

fn pending_result(in_range: bool, slot: u32) -> Result<(), FfiError> {
    if in_range {
        Ok(())
    } else {
        Err(FfiError::new(
            HYDRA_WRITER_E_SLOT_OUT_OF_RANGE,
            format!("slot {slot} out of range"),
        ))
    }
}
