//! The exported llama.h functions. Each finds the real one (`dlsym(RTLD_NEXT)`), does its
//! bookkeeping through [`crate::interpose`] and returns exactly what the real one returned.
//! A real function that cannot be found (never the case when the host links libllama,
//! since the host only calls what its libllama has) is logged once and answered with the
//! function's failure value.

use crate::devices;
use crate::ext;
use crate::ffi::*;
use crate::interpose;
use crate::log::warn_once;
use crate::symbols;
use crate::waits;
use hydra_layout::Phase;
use std::ffi::c_char;

/// The real `llama_<field>` from [`symbols`], or (logged once) a return of `$fail`.
macro_rules! real {
    ($field:ident $(, $fail:expr)?) => {
        match symbols::get().$field {
            Some(f) => f,
            None => {
                warn_once!(concat!(
                    "no real llama_",
                    stringify!($field),
                    " after this library; each call returns at once"
                ));
                return $($fail)?;
            }
        }
    };
}

/// `int32_t llama_decode(struct llama_context * ctx, struct llama_batch batch)`.
///
/// # Safety
/// llama.h's contract for `llama_decode`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_decode(ctx: *mut LlamaContext, batch: LlamaBatch) -> i32 {
    let real = real!(decode, -1);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { interpose::decode(real, ctx, batch) }
}

/// `bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id, llama_pos p0, llama_pos p1)`.
///
/// # Safety
/// llama.h's contract for `llama_memory_seq_rm`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_memory_seq_rm(
    mem: *mut LlamaMemory,
    seq_id: LlamaSeqId,
    p0: LlamaPos,
    p1: LlamaPos,
) -> bool {
    let real = real!(memory_seq_rm, false);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe {
        seq_rm(
            real,
            mem,
            seq_id,
            p0,
            p1,
            interpose::seq_removed_from_memory,
        )
    }
}

/// `bool llama_kv_self_seq_rm(struct llama_context *, llama_seq_id, llama_pos, llama_pos)`
/// (llama.cpp before `llama_memory_*`).
///
/// # Safety
/// llama.h's contract for `llama_kv_self_seq_rm`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_kv_self_seq_rm(
    ctx: *mut LlamaContext,
    seq_id: LlamaSeqId,
    p0: LlamaPos,
    p1: LlamaPos,
) -> bool {
    let real = real!(kv_self_seq_rm, false);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe {
        seq_rm(
            real,
            ctx,
            seq_id,
            p0,
            p1,
            interpose::seq_removed_from_context,
        )
    }
}

/// A sequence removal from `target` (a memory or a context): the real call, then, if it
/// succeeded, `removed` records it. Returns what the real call returned.
///
/// # Safety
/// `real` may be called with these arguments (the host's, passed on unchanged).
unsafe fn seq_rm<T>(
    real: unsafe extern "C-unwind" fn(*mut T, LlamaSeqId, LlamaPos, LlamaPos) -> bool,
    target: *mut T,
    seq_id: LlamaSeqId,
    p0: LlamaPos,
    p1: LlamaPos,
    removed: fn(*mut T, i32, i32, i32),
) -> bool {
    // SAFETY: forwarded from this function's contract.
    let ok = unsafe { real(target, seq_id, p0, p1) };
    if ok {
        removed(target, seq_id, p0, p1);
    }
    ok
}

/// `void llama_memory_clear(llama_memory_t mem, bool data)`.
///
/// # Safety
/// llama.h's contract for `llama_memory_clear`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_memory_clear(mem: *mut LlamaMemory, data: bool) {
    let real = real!(memory_clear);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(mem, data) };
    interpose::memory_cleared(mem);
}

/// `void llama_free(struct llama_context * ctx)`: the context's segment closes first.
///
/// # Safety
/// llama.h's contract for `llama_free`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_free(ctx: *mut LlamaContext) {
    let real = real!(free);
    interpose::context_freed(ctx);
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(ctx) }
}

/// A state save or restore shim: the real function, run as a transfer of sequence `$seq`
/// (see [`interpose::transfer`]) of `$total` bytes (0 when unknown); returns what the real
/// function returned.
macro_rules! state_transfer {
    ($(#[doc = $doc:literal])* $name:ident, $field:ident, $phase:expr,
     ($ctx:ident: $ctx_ty:ty $(, $arg:ident: $ty:ty)*), seq: $seq:ident, total: $total:expr) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        #[doc = concat!("llama.h's contract for `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($ctx: $ctx_ty $(, $arg: $ty)*) -> usize {
            let real = real!($field, 0);
            interpose::transfer($ctx, $seq, Some($phase), $total, || {
                // SAFETY: the host's arguments go to the real function unchanged.
                (unsafe { real($ctx $(, $arg)*) }, None)
            })
        }
    };
}

state_transfer!(
    /// `size_t llama_state_seq_get_data(ctx, uint8_t * dst, size_t size, llama_seq_id)`.
    llama_state_seq_get_data, state_seq_get_data, Phase::Save,
    (ctx: *mut LlamaContext, dst: *mut u8, size: usize, seq_id: LlamaSeqId),
    seq: seq_id, total: size as u64
);

state_transfer!(
    /// `size_t llama_state_seq_set_data(ctx, const uint8_t * src, size_t size, llama_seq_id)`.
    llama_state_seq_set_data, state_seq_set_data, Phase::Restore,
    (ctx: *mut LlamaContext, src: *const u8, size: usize, dest_seq_id: LlamaSeqId),
    seq: dest_seq_id, total: size as u64
);

state_transfer!(
    /// `size_t llama_state_seq_get_data_ext(ctx, dst, size, seq_id, flags)`.
    llama_state_seq_get_data_ext, state_seq_get_data_ext, Phase::Save,
    (ctx: *mut LlamaContext, dst: *mut u8, size: usize, seq_id: LlamaSeqId,
     flags: LlamaStateSeqFlags),
    seq: seq_id, total: size as u64
);

state_transfer!(
    /// `size_t llama_state_seq_set_data_ext(ctx, src, size, dest_seq_id, flags)`.
    llama_state_seq_set_data_ext, state_seq_set_data_ext, Phase::Restore,
    (ctx: *mut LlamaContext, src: *const u8, size: usize, dest_seq_id: LlamaSeqId,
     flags: LlamaStateSeqFlags),
    seq: dest_seq_id, total: size as u64
);

state_transfer!(
    /// `size_t llama_state_seq_save_file(ctx, path, seq_id, tokens, n_token_count)`.
    llama_state_seq_save_file, state_seq_save_file, Phase::Save,
    (ctx: *mut LlamaContext, filepath: *const c_char, seq_id: LlamaSeqId,
     tokens: *const LlamaToken, n_token_count: usize),
    seq: seq_id, total: 0
);

/// `size_t llama_state_seq_load_file(ctx, path, dest_seq_id, tokens_out, n_token_capacity,
/// n_token_count_out)`. With `tokens_out` null it only counts tokens and is not a restore.
///
/// # Safety
/// llama.h's contract for `llama_state_seq_load_file`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_state_seq_load_file(
    ctx: *mut LlamaContext,
    filepath: *const c_char,
    dest_seq_id: LlamaSeqId,
    tokens_out: *mut LlamaToken,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> usize {
    let real = real!(state_seq_load_file, 0);
    let phase = (!tokens_out.is_null()).then_some(Phase::Restore);
    interpose::transfer(ctx, dest_seq_id, phase, 0, || {
        // SAFETY: the host's arguments go to the real function unchanged.
        let n = unsafe {
            real(
                ctx,
                filepath,
                dest_seq_id,
                tokens_out,
                n_token_capacity,
                n_token_count_out,
            )
        };
        let n_past = if n > 0 && !n_token_count_out.is_null() {
            // SAFETY: the caller passed a valid `size_t *`, which the real function just set.
            Some(unsafe { *n_token_count_out } as u64)
        } else {
            None
        };
        (n, n_past)
    })
}

/// `int32_t llama_process(ctx, enum llama_process_type type, struct llama_batch_ext *)`:
/// llama-server's decode call since the extended batch API.
///
/// # Safety
/// llama.h's contract for `llama_process`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_process(
    ctx: *mut LlamaContext,
    kind: i32,
    batch: *mut LlamaBatchExt,
) -> i32 {
    let real = real!(process, -1);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { interpose::process_with(real, ctx, kind, batch, || interpose::facts(ctx)) }
}

/// `void llama_batch_ext_clear(struct llama_batch_ext *)`.
///
/// # Safety
/// llama.h's contract for `llama_batch_ext_clear`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_batch_ext_clear(batch: *mut LlamaBatchExt) {
    let real = real!(batch_ext_clear);
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(batch) };
    interpose::record(|| ext::cleared(batch));
}

/// `void llama_batch_ext_free(struct llama_batch_ext *)`.
///
/// # Safety
/// llama.h's contract for `llama_batch_ext_free`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_batch_ext_free(batch: *mut LlamaBatchExt) {
    let real = real!(batch_ext_free);
    interpose::record(|| ext::freed(batch));
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(batch) }
}

/// An entry-adding builder call: the real function, then (when it returned an index) the
/// record of the entry's sequence. Returns the real function's index.
macro_rules! batch_ext_add {
    ($(#[doc = $doc:literal])* $name:ident, $field:ident $(, $arg:ident: $ty:ty)*) => {
        $(#[doc = $doc])*
        ///
        /// # Safety
        #[doc = concat!("llama.h's contract for `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            batch: *mut LlamaBatchExt,
            seq_id: LlamaSeqId
            $(, $arg: $ty)*
        ) -> i32 {
            let real = real!($field, -1);
            // SAFETY: the host's arguments go to the real function unchanged.
            let idx = unsafe { real(batch, seq_id $(, $arg)*) };
            interpose::record(|| ext::added(batch, idx, seq_id));
            idx
        }
    };
}

batch_ext_add!(
    /// `int32_t llama_batch_ext_add(struct llama_batch_ext *, llama_seq_id)`.
    llama_batch_ext_add, batch_ext_add
);

batch_ext_add!(
    /// `int32_t llama_batch_ext_add_token(struct llama_batch_ext *, llama_seq_id, llama_token)`.
    llama_batch_ext_add_token, batch_ext_add_token, id: LlamaToken
);

batch_ext_add!(
    /// `int32_t llama_batch_ext_add_embd(struct llama_batch_ext *, llama_seq_id, struct llama_embd)`.
    llama_batch_ext_add_embd, batch_ext_add_embd, embd: LlamaEmbd
);

/// `bool llama_batch_ext_add_seq(struct llama_batch_ext *, int32_t idx, llama_seq_id)`.
///
/// # Safety
/// llama.h's contract for `llama_batch_ext_add_seq`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_batch_ext_add_seq(
    batch: *mut LlamaBatchExt,
    idx: i32,
    seq_id: LlamaSeqId,
) -> bool {
    let real = real!(batch_ext_add_seq, false);
    // SAFETY: the host's arguments go to the real function unchanged.
    let ok = unsafe { real(batch, idx, seq_id) };
    if ok {
        interpose::record(|| ext::seq_added(batch, idx, seq_id));
    }
    ok
}

/// `bool llama_batch_ext_set_pos(struct llama_batch_ext *, int32_t idx, const llama_pos *)`.
///
/// # Safety
/// llama.h's contract for `llama_batch_ext_set_pos`.
#[no_mangle]
pub unsafe extern "C-unwind" fn llama_batch_ext_set_pos(
    batch: *mut LlamaBatchExt,
    idx: i32,
    pos: *const LlamaPos,
) -> bool {
    let real = real!(batch_ext_set_pos, false);
    // SAFETY: the host's arguments go to the real function unchanged.
    let ok = unsafe { real(batch, idx, pos) };
    if ok && !pos.is_null() {
        // SAFETY: the call succeeded, so `pos` pointed to at least one position.
        let first = unsafe { *pos };
        interpose::record(|| ext::pos_set(batch, idx, first));
    }
    ok
}

/// `enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched,
/// struct ggml_cgraph * graph)` (libggml-base): every ubatch llama.cpp computes.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_sched_graph_compute_async`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_sched_graph_compute_async(
    sched: *mut GgmlSched,
    graph: *mut GgmlGraph,
) -> i32 {
    // GGML_STATUS_FAILED (-1) when there is no real one (never: the host links ggml).
    let real = real!(sched_compute, -1);
    let set = symbols::get().sched_set_eval_callback;
    // SAFETY: the host's arguments go to the real function unchanged; `set` is the real
    // setter of the same library.
    unsafe { interpose::sched_compute_with(real, set, sched, graph) }
}

/// `void ggml_backend_sched_set_eval_callback(ggml_backend_sched_t sched,
/// ggml_backend_sched_eval_callback callback, void * user_data)` (libggml-base): the
/// host's callback is remembered per scheduler and set as asked.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_sched_set_eval_callback`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_sched_set_eval_callback(
    sched: *mut GgmlSched,
    callback: EvalCallback,
    user_data: *mut std::ffi::c_void,
) {
    let real = real!(sched_set_eval_callback);
    interpose::record(|| crate::layers::host_callback_set(sched, callback, user_data));
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(sched, callback, user_data) }
}

/// `void ggml_backend_sched_free(ggml_backend_sched_t sched)` (libggml-base).
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_sched_free`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_sched_free(sched: *mut GgmlSched) {
    let real = real!(sched_free);
    interpose::record(|| {
        crate::layers::sched_freed(sched);
        crate::devices::sched_freed(sched);
    });
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(sched) }
}

/// `void ggml_backend_sched_synchronize(ggml_backend_sched_t sched)` (libggml-base):
/// where the host waits for the outputs of a call that an asynchronous backend still
/// computes (`llama_get_logits*`, `llama_synchronize`).
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_sched_synchronize`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_sched_synchronize(sched: *mut GgmlSched) {
    let real = real!(sched_synchronize);
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { interpose::sched_synchronize_with(real, sched) }
}

// ---- the calls in which the host thread waits on a device (FORMAT §5.6) ----

/// `void ggml_backend_synchronize(ggml_backend_t backend)` (libggml-base): waits for the
/// backend's queued work.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_synchronize`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_synchronize(backend: *mut GgmlBackend) {
    let real = real!(backend_synchronize);
    let _wait = waits::Wait::begin(interpose::lookup(|| devices::of_backend(backend)));
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(backend) }
}

/// `void ggml_backend_event_synchronize(ggml_backend_event_t event)` (libggml-base): waits
/// for an event recorded on a device (the scheduler's pipeline copies).
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_event_synchronize`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_event_synchronize(event: *mut GgmlEvent) {
    let real = real!(event_synchronize);
    // SAFETY: the host passes a live event (the real function reads it too).
    let device = interpose::lookup(|| devices::of_device(unsafe { event_device(event) }));
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's argument goes to the real function unchanged.
    unsafe { real(event) }
}

/// `void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t
/// offset, size_t size)` (libggml-base): copies a tensor out of its device, after the
/// device's work on it (the logits; a split's output fetched from an RPC peer).
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_tensor_get`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_tensor_get(
    tensor: *const GgmlTensor,
    data: *mut std::ffi::c_void,
    offset: usize,
    size: usize,
) {
    let real = real!(tensor_get);
    // SAFETY: the host passes a live tensor (the real function reads it too).
    let device = interpose::lookup(|| unsafe { devices::of_tensor(tensor) });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(tensor, data, offset, size) }
}

/// `void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t
/// offset, size_t size)` (libggml-base): copies host memory into a tensor on its device
/// (a split's inputs sent to an RPC peer, inside a copy between two peers).
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_tensor_set`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_tensor_set(
    tensor: *mut GgmlTensor,
    data: *const std::ffi::c_void,
    offset: usize,
    size: usize,
) {
    let real = real!(tensor_set);
    // SAFETY: the host passes a live tensor (the real function reads it too).
    let device = interpose::lookup(|| unsafe { devices::of_tensor(tensor) });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(tensor, data, offset, size) }
}

/// `void ggml_backend_tensor_copy(struct ggml_tensor * src, struct ggml_tensor * dst)`
/// (libggml-base): a blocking copy between devices (a split's inputs). It waits on the
/// source's device, or on the destination's when the source is in host memory; the get
/// and set it makes between two devices name each side while they run.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_tensor_copy`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_tensor_copy(
    src: *const GgmlTensor,
    dst: *mut GgmlTensor,
) {
    let real = real!(tensor_copy);
    // SAFETY: the host passes live tensors (the real function reads them too).
    let device = interpose::lookup(|| unsafe {
        devices::of_tensor(src).or_else(|| devices::of_tensor(dst))
    });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(src, dst) }
}

/// `enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t backend, struct
/// ggml_cgraph * cgraph)` (libggml-base): a split on one backend. For an RPC backend this
/// is a whole round trip in the 0.3.16 generation, and the send of the command in
/// 0c1e570.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_graph_compute_async`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_graph_compute_async(
    backend: *mut GgmlBackend,
    graph: *mut GgmlGraph,
) -> i32 {
    // GGML_STATUS_FAILED (-1) when there is no real one (never: the host links ggml).
    let real = real!(backend_compute, -1);
    let _wait = waits::Wait::begin(interpose::lookup(|| devices::of_backend(backend)));
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(backend, graph) }
}

/// `size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t buft, const struct
/// ggml_tensor * tensor)` (libggml-base): how many bytes a tensor needs in a buffer of
/// that type. ggml's allocator asks for every tensor of a graph it places; an RPC buffer
/// type of 0c1e570 asks its peer for a shape it has not seen (a ubatch of a new size),
/// with a reply that queues behind the graphs in flight: the host blocks here on a frozen
/// peer.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_buft_get_alloc_size`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_buft_get_alloc_size(
    buft: *mut GgmlBufferType,
    tensor: *const GgmlTensor,
) -> usize {
    // 0 (no size) when there is no real one (never: the host links ggml).
    let real = real!(buft_alloc_size, 0);
    // SAFETY: the host passes a live buffer type (the real function reads it too).
    let device = interpose::lookup(|| unsafe { devices::of_buffer_type(buft) });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(buft, tensor) }
}

/// `void ggml_backend_tensor_memset(struct ggml_tensor * tensor, uint8_t value, size_t
/// offset, size_t size)` (libggml-base): fills part of a tensor on its device; a command
/// with a reply to an RPC peer.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_tensor_memset`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_tensor_memset(
    tensor: *mut GgmlTensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    let real = real!(tensor_memset);
    // SAFETY: the host passes a live tensor (the real function reads it too).
    let device = interpose::lookup(|| unsafe { devices::of_tensor(tensor) });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(tensor, value, offset, size) }
}

/// `void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value)`
/// (libggml-base): fills a whole buffer on its device (a KV cache cleared); a command with
/// a reply to an RPC peer.
///
/// # Safety
/// ggml-backend.h's contract for `ggml_backend_buffer_clear`.
#[no_mangle]
pub unsafe extern "C-unwind" fn ggml_backend_buffer_clear(buffer: *mut GgmlBuffer, value: u8) {
    let real = real!(buffer_clear);
    // SAFETY: the host passes a live buffer (the real function reads it too).
    let device = interpose::lookup(|| unsafe { devices::of_buffer(buffer) });
    let _wait = waits::Wait::begin(device);
    // SAFETY: the host's arguments go to the real function unchanged.
    unsafe { real(buffer, value) }
}
