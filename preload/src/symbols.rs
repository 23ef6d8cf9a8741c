//! The real llama.cpp functions, found once with `dlsym(RTLD_NEXT, name)`: the next
//! definition after this library in the lookup order, which is libllama's. A symbol the
//! loaded libllama does not have is `None` and the feature that needs it is skipped.

use crate::ffi::*;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// Looks `name` up after this library; null when absent.
fn next(name: &CStr) -> *mut c_void {
    // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT is valid from code in a shared
    // object (and from an executable, where it searches the libraries after it).
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

macro_rules! resolve {
    ($name:literal as $ty:ty) => {{
        let p = next($name);
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` is the llama.h function `$name`, whose C signature `$ty` mirrors (see
            // `ffi`); function and data pointers have one size wherever dlsym exists.
            Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
        }
    }};
}

/// Declares [`Symbols`], a field for each function (its type and C name listed once), and
/// `Symbols::resolve`, which looks every one of them up.
macro_rules! symbols {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $name:literal;)*) => {
        /// Every function this library calls or wraps, as resolved in this process.
        #[derive(Debug, Clone, Copy, Default)]
        pub struct Symbols {
            $($(#[$doc])* pub $field: Option<$ty>,)*
        }

        impl Symbols {
            fn resolve() -> Self {
                Self {
                    $($field: resolve!($name as $ty),)*
                }
            }
        }
    };
}

symbols! {
    /// `llama_decode`.
    decode: DecodeFn = c"llama_decode";
    /// `llama_process`.
    process: ProcessFn = c"llama_process";
    /// `llama_batch_ext_clear`.
    batch_ext_clear: BatchExtFn = c"llama_batch_ext_clear";
    /// `llama_batch_ext_free`.
    batch_ext_free: BatchExtFn = c"llama_batch_ext_free";
    /// `llama_batch_ext_add`.
    batch_ext_add: BatchExtAddFn = c"llama_batch_ext_add";
    /// `llama_batch_ext_add_token`.
    batch_ext_add_token: BatchExtAddTokenFn = c"llama_batch_ext_add_token";
    /// `llama_batch_ext_add_embd`.
    batch_ext_add_embd: BatchExtAddEmbdFn = c"llama_batch_ext_add_embd";
    /// `llama_batch_ext_add_seq`.
    batch_ext_add_seq: BatchExtAddSeqFn = c"llama_batch_ext_add_seq";
    /// `llama_batch_ext_set_pos`.
    batch_ext_set_pos: BatchExtSetPosFn = c"llama_batch_ext_set_pos";
    /// `llama_memory_seq_rm`.
    memory_seq_rm: MemorySeqRmFn = c"llama_memory_seq_rm";
    /// `llama_kv_self_seq_rm` (older llama.cpp).
    kv_self_seq_rm: KvSelfSeqRmFn = c"llama_kv_self_seq_rm";
    /// `llama_memory_clear`.
    memory_clear: MemoryClearFn = c"llama_memory_clear";
    /// `llama_free`.
    free: FreeFn = c"llama_free";
    /// `llama_state_seq_get_data`.
    state_seq_get_data: StateSeqGetDataFn = c"llama_state_seq_get_data";
    /// `llama_state_seq_set_data`.
    state_seq_set_data: StateSeqSetDataFn = c"llama_state_seq_set_data";
    /// `llama_state_seq_get_data_ext`.
    state_seq_get_data_ext: StateSeqGetDataExtFn = c"llama_state_seq_get_data_ext";
    /// `llama_state_seq_set_data_ext`.
    state_seq_set_data_ext: StateSeqSetDataExtFn = c"llama_state_seq_set_data_ext";
    /// `llama_state_seq_save_file`.
    state_seq_save_file: StateSeqSaveFileFn = c"llama_state_seq_save_file";
    /// `llama_state_seq_load_file`.
    state_seq_load_file: StateSeqLoadFileFn = c"llama_state_seq_load_file";
    /// `llama_n_seq_max`.
    n_seq_max: ContextU32Fn = c"llama_n_seq_max";
    /// `llama_n_ctx`.
    n_ctx: ContextU32Fn = c"llama_n_ctx";
    /// `llama_n_ctx_seq`.
    n_ctx_seq: ContextU32Fn = c"llama_n_ctx_seq";
    /// `llama_get_model`.
    get_model: GetModelFn = c"llama_get_model";
    /// `llama_get_memory`.
    get_memory: GetMemoryFn = c"llama_get_memory";
    /// `llama_model_desc`.
    model_desc: ModelDescFn = c"llama_model_desc";
    /// `llama_model_meta_val_str`.
    model_meta_val_str: ModelMetaValStrFn = c"llama_model_meta_val_str";
    /// `llama_model_n_layer`.
    model_n_layer: ModelNLayerFn = c"llama_model_n_layer";
    /// `llama_n_ubatch`.
    n_ubatch: ContextU32Fn = c"llama_n_ubatch";
    /// `ggml_backend_sched_graph_compute_async` (libggml-base).
    sched_compute: SchedComputeFn = c"ggml_backend_sched_graph_compute_async";
    /// `ggml_backend_sched_set_eval_callback` (libggml-base).
    sched_set_eval_callback: SchedSetEvalCallbackFn = c"ggml_backend_sched_set_eval_callback";
    /// `ggml_backend_sched_free` (libggml-base).
    sched_free: SchedFreeFn = c"ggml_backend_sched_free";
    /// `ggml_backend_sched_synchronize` (libggml-base).
    sched_synchronize: SchedSynchronizeFn = c"ggml_backend_sched_synchronize";
    /// `ggml_backend_sched_get_n_copies` (libggml-base).
    sched_n_copies: SchedNCopiesFn = c"ggml_backend_sched_get_n_copies";
    /// `ggml_graph_n_nodes` (libggml-base).
    graph_n_nodes: GraphNNodesFn = c"ggml_graph_n_nodes";
    /// `ggml_graph_node` (libggml-base).
    graph_node: GraphNodeFn = c"ggml_graph_node";
    /// `ggml_get_name` (libggml-base).
    get_name: GetNameFn = c"ggml_get_name";
    /// `ggml_backend_sched_get_n_backends` (libggml-base).
    sched_n_backends: SchedNBackendsFn = c"ggml_backend_sched_get_n_backends";
    /// `ggml_backend_sched_get_backend` (libggml-base).
    sched_backend: SchedBackendFn = c"ggml_backend_sched_get_backend";
    /// `ggml_backend_sched_get_tensor_backend` (libggml-base).
    sched_tensor_backend: SchedTensorBackendFn = c"ggml_backend_sched_get_tensor_backend";
    /// `ggml_backend_name` (libggml-base).
    backend_name: BackendNameFn = c"ggml_backend_name";
    /// `ggml_backend_get_device` (libggml-base).
    backend_device: BackendDeviceFn = c"ggml_backend_get_device";
    /// `ggml_backend_dev_type` (libggml-base).
    dev_type: DevTypeFn = c"ggml_backend_dev_type";
    /// `ggml_backend_dev_description` (libggml-base).
    dev_description: DevDescriptionFn = c"ggml_backend_dev_description";
    /// `ggml_backend_buffer_get_type` (libggml-base).
    buffer_type: BufferTypeFn = c"ggml_backend_buffer_get_type";
    /// `ggml_backend_buft_get_device` (libggml-base).
    buffer_type_device: BufferTypeDeviceFn = c"ggml_backend_buft_get_device";
    /// `ggml_backend_synchronize` (libggml-base).
    backend_synchronize: BackendSynchronizeFn = c"ggml_backend_synchronize";
    /// `ggml_backend_event_synchronize` (libggml-base).
    event_synchronize: EventSynchronizeFn = c"ggml_backend_event_synchronize";
    /// `ggml_backend_tensor_get` (libggml-base).
    tensor_get: TensorGetFn = c"ggml_backend_tensor_get";
    /// `ggml_backend_tensor_set` (libggml-base).
    tensor_set: TensorSetFn = c"ggml_backend_tensor_set";
    /// `ggml_backend_tensor_copy` (libggml-base).
    tensor_copy: TensorCopyFn = c"ggml_backend_tensor_copy";
    /// `ggml_backend_graph_compute_async` (libggml-base).
    backend_compute: BackendComputeFn = c"ggml_backend_graph_compute_async";
    /// `ggml_backend_buft_get_alloc_size` (libggml-base).
    buft_alloc_size: BuftAllocSizeFn = c"ggml_backend_buft_get_alloc_size";
    /// `ggml_backend_tensor_memset` (libggml-base).
    tensor_memset: TensorMemsetFn = c"ggml_backend_tensor_memset";
    /// `ggml_backend_buffer_clear` (libggml-base).
    buffer_clear: BufferClearFn = c"ggml_backend_buffer_clear";
}

impl Symbols {
    /// Whether every function the layer position needs resolved: the scheduler's compute
    /// and callback setter (to interpose) and the graph/tensor readers (to find layers).
    pub fn layers_available(&self) -> bool {
        self.sched_compute.is_some()
            && self.sched_set_eval_callback.is_some()
            && self.graph_n_nodes.is_some()
            && self.graph_node.is_some()
            && self.get_name.is_some()
    }

    /// Whether the devices can be learnt (the scheduler's backends, their names, devices
    /// and types, and the backend of a layer's output) without any call that talks to a
    /// device: the device table and layer map, and the waits on them.
    pub fn devices_available(&self) -> bool {
        self.sched_n_backends.is_some()
            && self.sched_backend.is_some()
            && self.sched_tensor_backend.is_some()
            && self.backend_name.is_some()
            && self.backend_device.is_some()
            && self.dev_type.is_some()
            && self.dev_description.is_some()
            && self.graph_n_nodes.is_some()
            && self.graph_node.is_some()
            && self.get_name.is_some()
    }

    /// Whether the compute wrapper can tell a call's forward graphs apart (the scheduler's
    /// compute and the graph/tensor readers resolved), so that a call is credited ubatch by
    /// ubatch and each ubatch is a step of its own.
    pub fn ubatches_countable(&self) -> bool {
        self.sched_compute.is_some()
            && self.graph_n_nodes.is_some()
            && self.graph_node.is_some()
            && self.get_name.is_some()
    }
}

/// The symbols of this process, resolved on first use.
pub fn get() -> &'static Symbols {
    static SYMBOLS: OnceLock<Symbols> = OnceLock::new();
    SYMBOLS.get_or_init(Symbols::resolve)
}
