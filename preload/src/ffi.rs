//! The C types of llama.h (llama.cpp 0c1e570) that the wrapped functions take, mirrored
//! field for field, and the function-pointer types of every symbol this library resolves.
//!
//! The exported wrappers and the real functions use the `C-unwind` ABI: a C++ exception
//! that a host lets escape from libllama then unwinds through our frame as it would have
//! without us, instead of aborting the process.

use std::ffi::c_char;

/// `llama_token`.
pub type LlamaToken = i32;
/// `llama_pos`.
pub type LlamaPos = i32;
/// `llama_seq_id`.
pub type LlamaSeqId = i32;
/// `llama_state_seq_flags`.
pub type LlamaStateSeqFlags = u32;

/// Declares opaque C structs (with their docs): types only ever handled behind pointers,
/// never built or read on this side.
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
        }
    )*};
}

opaque! {
    /// Opaque `struct llama_context`.
    LlamaContext;
    /// Opaque `struct llama_model`.
    LlamaModel;
    /// Opaque `struct llama_memory_i` (`llama_memory_t` is a pointer to it).
    LlamaMemory;
}

/// `struct llama_batch`, passed by value to `llama_decode`.
///
/// ```c
/// typedef struct llama_batch {
///     int32_t n_tokens;
///     llama_token  *  token;
///     float        *  embd;
///     llama_pos    *  pos;
///     int32_t      *  n_seq_id;
///     llama_seq_id ** seq_id;
///     int8_t       *  logits;
/// } llama_batch;
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LlamaBatch {
    /// Number of tokens (or embeddings) in the batch.
    pub n_tokens: i32,
    /// Token ids, or null when the batch carries embeddings.
    pub token: *mut LlamaToken,
    /// Embeddings, or null when the batch carries tokens.
    pub embd: *mut f32,
    /// Positions, or null (llama.cpp then continues each sequence).
    pub pos: *mut LlamaPos,
    /// Sequence count of each token, or null (every token then belongs to sequence 0).
    pub n_seq_id: *mut i32,
    /// Sequence ids of each token, or null (sequence 0).
    pub seq_id: *mut *mut LlamaSeqId,
    /// Which tokens produce output, or null (the last one).
    pub logits: *mut i8,
}

impl LlamaBatch {
    /// A batch with every pointer null and `n_tokens` tokens (what `llama_batch_get_one`
    /// leaves unset): all of it belongs to sequence 0.
    pub const fn empty(n_tokens: i32) -> Self {
        Self {
            n_tokens,
            token: std::ptr::null_mut(),
            embd: std::ptr::null_mut(),
            pos: std::ptr::null_mut(),
            n_seq_id: std::ptr::null_mut(),
            seq_id: std::ptr::null_mut(),
            logits: std::ptr::null_mut(),
        }
    }
}

// Compile-time check of the mirror against llama.h on LP64: 4 + pad 4 + 6 pointers.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<LlamaBatch>() == 56);

/// `int32_t llama_decode(struct llama_context *, struct llama_batch)`.
pub type DecodeFn = unsafe extern "C-unwind" fn(*mut LlamaContext, LlamaBatch) -> i32;
/// `bool llama_memory_seq_rm(llama_memory_t, llama_seq_id, llama_pos p0, llama_pos p1)`.
pub type MemorySeqRmFn =
    unsafe extern "C-unwind" fn(*mut LlamaMemory, LlamaSeqId, LlamaPos, LlamaPos) -> bool;
/// `bool llama_kv_self_seq_rm(struct llama_context *, llama_seq_id, llama_pos, llama_pos)`
/// (older llama.cpp).
pub type KvSelfSeqRmFn =
    unsafe extern "C-unwind" fn(*mut LlamaContext, LlamaSeqId, LlamaPos, LlamaPos) -> bool;
/// `void llama_memory_clear(llama_memory_t, bool data)`.
pub type MemoryClearFn = unsafe extern "C-unwind" fn(*mut LlamaMemory, bool);
/// `void llama_free(struct llama_context *)`.
pub type FreeFn = unsafe extern "C-unwind" fn(*mut LlamaContext);
/// `size_t llama_state_seq_get_data(ctx, uint8_t * dst, size_t size, llama_seq_id)`.
pub type StateSeqGetDataFn =
    unsafe extern "C-unwind" fn(*mut LlamaContext, *mut u8, usize, LlamaSeqId) -> usize;
/// `size_t llama_state_seq_set_data(ctx, const uint8_t * src, size_t size, llama_seq_id)`.
pub type StateSeqSetDataFn =
    unsafe extern "C-unwind" fn(*mut LlamaContext, *const u8, usize, LlamaSeqId) -> usize;
/// `size_t llama_state_seq_get_data_ext(ctx, dst, size, seq_id, llama_state_seq_flags)`.
pub type StateSeqGetDataExtFn = unsafe extern "C-unwind" fn(
    *mut LlamaContext,
    *mut u8,
    usize,
    LlamaSeqId,
    LlamaStateSeqFlags,
) -> usize;
/// `size_t llama_state_seq_set_data_ext(ctx, src, size, dest_seq_id, llama_state_seq_flags)`.
pub type StateSeqSetDataExtFn = unsafe extern "C-unwind" fn(
    *mut LlamaContext,
    *const u8,
    usize,
    LlamaSeqId,
    LlamaStateSeqFlags,
) -> usize;
/// `size_t llama_state_seq_save_file(ctx, const char * path, llama_seq_id,
/// const llama_token * tokens, size_t n_token_count)`.
pub type StateSeqSaveFileFn = unsafe extern "C-unwind" fn(
    *mut LlamaContext,
    *const c_char,
    LlamaSeqId,
    *const LlamaToken,
    usize,
) -> usize;
/// `size_t llama_state_seq_load_file(ctx, const char * path, llama_seq_id dest,
/// llama_token * tokens_out, size_t n_token_capacity, size_t * n_token_count_out)`.
pub type StateSeqLoadFileFn = unsafe extern "C-unwind" fn(
    *mut LlamaContext,
    *const c_char,
    LlamaSeqId,
    *mut LlamaToken,
    usize,
    *mut usize,
) -> usize;

/// `uint32_t llama_n_seq_max(ctx)`, `llama_n_ctx(ctx)`, `llama_n_ctx_seq(ctx)`.
pub type ContextU32Fn = unsafe extern "C-unwind" fn(*const LlamaContext) -> u32;
/// `const struct llama_model * llama_get_model(ctx)`.
pub type GetModelFn = unsafe extern "C-unwind" fn(*const LlamaContext) -> *const LlamaModel;
/// `llama_memory_t llama_get_memory(ctx)`.
pub type GetMemoryFn = unsafe extern "C-unwind" fn(*const LlamaContext) -> *mut LlamaMemory;
/// `int32_t llama_model_desc(model, char * buf, size_t buf_size)`.
pub type ModelDescFn = unsafe extern "C-unwind" fn(*const LlamaModel, *mut c_char, usize) -> i32;
/// `int32_t llama_model_meta_val_str(model, const char * key, char * buf, size_t buf_size)`.
pub type ModelMetaValStrFn =
    unsafe extern "C-unwind" fn(*const LlamaModel, *const c_char, *mut c_char, usize) -> i32;

opaque! {
    /// Opaque `struct llama_batch_ext` (the extended batch API `llama_process` takes).
    LlamaBatchExt;
}

/// `struct llama_embd`, passed by value to `llama_batch_ext_add_embd`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LlamaEmbd {
    /// Row data.
    pub data: *const f32,
    /// Number of rows.
    pub n_rows: usize,
    /// Size of one row.
    pub n_embd: usize,
}

/// `LLAMA_PROCESS_TYPE_DECODE` of `enum llama_process_type` (ENCODE is 0).
pub const LLAMA_PROCESS_TYPE_DECODE: i32 = 1;

/// `int32_t llama_process(ctx, enum llama_process_type, struct llama_batch_ext *)`.
pub type ProcessFn = unsafe extern "C-unwind" fn(*mut LlamaContext, i32, *mut LlamaBatchExt) -> i32;
/// `void llama_batch_ext_free(batch)` and `void llama_batch_ext_clear(batch)`.
pub type BatchExtFn = unsafe extern "C-unwind" fn(*mut LlamaBatchExt);
/// `int32_t llama_batch_ext_add(batch, llama_seq_id)`.
pub type BatchExtAddFn = unsafe extern "C-unwind" fn(*mut LlamaBatchExt, LlamaSeqId) -> i32;
/// `int32_t llama_batch_ext_add_token(batch, llama_seq_id, llama_token)`.
pub type BatchExtAddTokenFn =
    unsafe extern "C-unwind" fn(*mut LlamaBatchExt, LlamaSeqId, LlamaToken) -> i32;
/// `int32_t llama_batch_ext_add_embd(batch, llama_seq_id, struct llama_embd)`.
pub type BatchExtAddEmbdFn =
    unsafe extern "C-unwind" fn(*mut LlamaBatchExt, LlamaSeqId, LlamaEmbd) -> i32;
/// `bool llama_batch_ext_add_seq(batch, int32_t idx, llama_seq_id)`.
pub type BatchExtAddSeqFn =
    unsafe extern "C-unwind" fn(*mut LlamaBatchExt, i32, LlamaSeqId) -> bool;
/// `bool llama_batch_ext_set_pos(batch, int32_t idx, const llama_pos * pos)`.
pub type BatchExtSetPosFn =
    unsafe extern "C-unwind" fn(*mut LlamaBatchExt, i32, *const LlamaPos) -> bool;

opaque! {
    /// Opaque `struct ggml_backend_sched` (`ggml_backend_sched_t` is a pointer to it).
    GgmlSched;
    /// Opaque `struct ggml_cgraph`.
    GgmlGraph;
    /// `struct ggml_tensor`: its name is read through `ggml_get_name`, and its `buffer`
    /// (the second field in every ggml generation) through [`tensor_buffer`].
    GgmlTensor;
    /// Opaque `struct ggml_backend` (`ggml_backend_t`).
    GgmlBackend;
    /// Opaque `struct ggml_backend_device` (`ggml_backend_dev_t`).
    GgmlDevice;
    /// Opaque `struct ggml_backend_buffer` (`ggml_backend_buffer_t`).
    GgmlBuffer;
    /// Opaque `struct ggml_backend_buffer_type` (`ggml_backend_buffer_type_t`).
    GgmlBufferType;
    /// `struct ggml_backend_event`: `{ ggml_backend_dev_t device; void * context; }` in
    /// every ggml generation (ggml-backend-impl.h); only `device` is read.
    GgmlEvent;
}

/// The `buffer` field of a live `ggml_tensor`: `struct ggml_tensor { enum ggml_type type;
/// struct ggml_backend_buffer * buffer; ... }` in every ggml generation (the enum is an
/// `int`, so the pointer is at the pointer alignment).
///
/// # Safety
/// `t` is null or points to a live `ggml_tensor`.
pub unsafe fn tensor_buffer(t: *const GgmlTensor) -> *mut GgmlBuffer {
    if t.is_null() {
        return std::ptr::null_mut();
    }
    let at = std::mem::size_of::<*mut GgmlBuffer>();
    // SAFETY: per the contract `t` is a live tensor, whose second field is the buffer
    // pointer at offset `at` (4-byte enum, padded to the pointer's alignment).
    unsafe { t.cast::<u8>().add(at).cast::<*mut GgmlBuffer>().read() }
}

/// The `device` field of a live `ggml_backend_event` (its first field).
///
/// # Safety
/// `e` is null or points to a live `ggml_backend_event`.
pub unsafe fn event_device(e: *const GgmlEvent) -> *mut GgmlDevice {
    if e.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: per the contract; the device pointer is the event's first field.
    unsafe { e.cast::<*mut GgmlDevice>().read() }
}

/// `typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor * t, bool ask,
/// void * user_data)`; nullable, hence the `Option`.
pub type EvalCallback =
    Option<unsafe extern "C-unwind" fn(*mut GgmlTensor, bool, *mut std::ffi::c_void) -> bool>;
/// `enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t,
/// struct ggml_cgraph *)` (the status is an `int`-sized enum; 0 is success).
pub type SchedComputeFn = unsafe extern "C-unwind" fn(*mut GgmlSched, *mut GgmlGraph) -> i32;
/// `void ggml_backend_sched_set_eval_callback(ggml_backend_sched_t, callback, void *)`.
pub type SchedSetEvalCallbackFn =
    unsafe extern "C-unwind" fn(*mut GgmlSched, EvalCallback, *mut std::ffi::c_void);
/// `void ggml_backend_sched_free(ggml_backend_sched_t)`.
pub type SchedFreeFn = unsafe extern "C-unwind" fn(*mut GgmlSched);
/// `void ggml_backend_sched_synchronize(ggml_backend_sched_t)`.
pub type SchedSynchronizeFn = unsafe extern "C-unwind" fn(*mut GgmlSched);
/// `int ggml_backend_sched_get_n_copies(ggml_backend_sched_t)`.
pub type SchedNCopiesFn = unsafe extern "C-unwind" fn(*mut GgmlSched) -> i32;
/// `int ggml_graph_n_nodes(struct ggml_cgraph *)`.
pub type GraphNNodesFn = unsafe extern "C-unwind" fn(*mut GgmlGraph) -> i32;
/// `struct ggml_tensor * ggml_graph_node(struct ggml_cgraph *, int i)` (negative `i` from
/// the end).
pub type GraphNodeFn = unsafe extern "C-unwind" fn(*mut GgmlGraph, i32) -> *mut GgmlTensor;
/// `const char * ggml_get_name(const struct ggml_tensor *)`.
pub type GetNameFn = unsafe extern "C-unwind" fn(*const GgmlTensor) -> *const c_char;
/// `int32_t llama_model_n_layer(const struct llama_model *)`.
pub type ModelNLayerFn = unsafe extern "C-unwind" fn(*const LlamaModel) -> i32;

/// `int ggml_backend_sched_get_n_backends(ggml_backend_sched_t)`.
pub type SchedNBackendsFn = unsafe extern "C-unwind" fn(*mut GgmlSched) -> i32;
/// `ggml_backend_t ggml_backend_sched_get_backend(ggml_backend_sched_t, int i)`.
pub type SchedBackendFn = unsafe extern "C-unwind" fn(*mut GgmlSched, i32) -> *mut GgmlBackend;
/// `ggml_backend_t ggml_backend_sched_get_tensor_backend(ggml_backend_sched_t, struct
/// ggml_tensor *)`.
pub type SchedTensorBackendFn =
    unsafe extern "C-unwind" fn(*mut GgmlSched, *mut GgmlTensor) -> *mut GgmlBackend;
/// `const char * ggml_backend_name(ggml_backend_t)`.
pub type BackendNameFn = unsafe extern "C-unwind" fn(*mut GgmlBackend) -> *const c_char;
/// `ggml_backend_dev_t ggml_backend_get_device(ggml_backend_t)`.
pub type BackendDeviceFn = unsafe extern "C-unwind" fn(*mut GgmlBackend) -> *mut GgmlDevice;
/// `enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t)` (an `int`).
pub type DevTypeFn = unsafe extern "C-unwind" fn(*mut GgmlDevice) -> i32;
/// `const char * ggml_backend_dev_description(ggml_backend_dev_t)`.
pub type DevDescriptionFn = unsafe extern "C-unwind" fn(*mut GgmlDevice) -> *const c_char;
/// `ggml_backend_buffer_type_t ggml_backend_buffer_get_type(ggml_backend_buffer_t)`.
pub type BufferTypeFn = unsafe extern "C-unwind" fn(*mut GgmlBuffer) -> *mut GgmlBufferType;
/// `ggml_backend_dev_t ggml_backend_buft_get_device(ggml_backend_buffer_type_t)`.
pub type BufferTypeDeviceFn = unsafe extern "C-unwind" fn(*mut GgmlBufferType) -> *mut GgmlDevice;
/// `void ggml_backend_synchronize(ggml_backend_t)`.
pub type BackendSynchronizeFn = unsafe extern "C-unwind" fn(*mut GgmlBackend);
/// `void ggml_backend_event_synchronize(ggml_backend_event_t)`.
pub type EventSynchronizeFn = unsafe extern "C-unwind" fn(*mut GgmlEvent);
/// `void ggml_backend_tensor_get(const struct ggml_tensor *, void * data, size_t offset,
/// size_t size)`.
pub type TensorGetFn =
    unsafe extern "C-unwind" fn(*const GgmlTensor, *mut std::ffi::c_void, usize, usize);
/// `void ggml_backend_tensor_set(struct ggml_tensor *, const void * data, size_t offset,
/// size_t size)`.
pub type TensorSetFn =
    unsafe extern "C-unwind" fn(*mut GgmlTensor, *const std::ffi::c_void, usize, usize);
/// `void ggml_backend_tensor_copy(struct ggml_tensor * src, struct ggml_tensor * dst)`.
pub type TensorCopyFn = unsafe extern "C-unwind" fn(*const GgmlTensor, *mut GgmlTensor);
/// `size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t, const struct
/// ggml_tensor *)`.
pub type BuftAllocSizeFn =
    unsafe extern "C-unwind" fn(*mut GgmlBufferType, *const GgmlTensor) -> usize;
/// `void ggml_backend_tensor_memset(struct ggml_tensor *, uint8_t value, size_t offset,
/// size_t size)`.
pub type TensorMemsetFn = unsafe extern "C-unwind" fn(*mut GgmlTensor, u8, usize, usize);
/// `void ggml_backend_buffer_clear(ggml_backend_buffer_t, uint8_t value)`.
pub type BufferClearFn = unsafe extern "C-unwind" fn(*mut GgmlBuffer, u8);
/// `enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t, struct ggml_cgraph *)`.
pub type BackendComputeFn = unsafe extern "C-unwind" fn(*mut GgmlBackend, *mut GgmlGraph) -> i32;
