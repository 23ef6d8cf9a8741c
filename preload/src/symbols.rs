//! The real llama.cpp functions, found once with `dlsym(RTLD_NEXT, name)`: the next
//! definition after this library in the lookup order, which is libllama's. A symbol the
//! loaded libllama does not have is `None` and the feature that needs it is skipped.

use crate::ffi::*;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// Every function this library calls or wraps, as resolved in this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Symbols {
    /// `llama_decode`.
    pub decode: Option<DecodeFn>,
    /// `llama_process`.
    pub process: Option<ProcessFn>,
    /// `llama_batch_ext_clear`.
    pub batch_ext_clear: Option<BatchExtFn>,
    /// `llama_batch_ext_free`.
    pub batch_ext_free: Option<BatchExtFn>,
    /// `llama_batch_ext_add`.
    pub batch_ext_add: Option<BatchExtAddFn>,
    /// `llama_batch_ext_add_token`.
    pub batch_ext_add_token: Option<BatchExtAddTokenFn>,
    /// `llama_batch_ext_add_embd`.
    pub batch_ext_add_embd: Option<BatchExtAddEmbdFn>,
    /// `llama_batch_ext_add_seq`.
    pub batch_ext_add_seq: Option<BatchExtAddSeqFn>,
    /// `llama_batch_ext_set_pos`.
    pub batch_ext_set_pos: Option<BatchExtSetPosFn>,
    /// `llama_memory_seq_rm`.
    pub memory_seq_rm: Option<MemorySeqRmFn>,
    /// `llama_kv_self_seq_rm` (older llama.cpp).
    pub kv_self_seq_rm: Option<KvSelfSeqRmFn>,
    /// `llama_memory_clear`.
    pub memory_clear: Option<MemoryClearFn>,
    /// `llama_free`.
    pub free: Option<FreeFn>,
    /// `llama_state_seq_get_data`.
    pub state_seq_get_data: Option<StateSeqGetDataFn>,
    /// `llama_state_seq_set_data`.
    pub state_seq_set_data: Option<StateSeqSetDataFn>,
    /// `llama_state_seq_get_data_ext`.
    pub state_seq_get_data_ext: Option<StateSeqGetDataExtFn>,
    /// `llama_state_seq_set_data_ext`.
    pub state_seq_set_data_ext: Option<StateSeqSetDataExtFn>,
    /// `llama_state_seq_save_file`.
    pub state_seq_save_file: Option<StateSeqSaveFileFn>,
    /// `llama_state_seq_load_file`.
    pub state_seq_load_file: Option<StateSeqLoadFileFn>,
    /// `llama_n_seq_max`.
    pub n_seq_max: Option<ContextU32Fn>,
    /// `llama_n_ctx`.
    pub n_ctx: Option<ContextU32Fn>,
    /// `llama_n_ctx_seq`.
    pub n_ctx_seq: Option<ContextU32Fn>,
    /// `llama_get_model`.
    pub get_model: Option<GetModelFn>,
    /// `llama_get_memory`.
    pub get_memory: Option<GetMemoryFn>,
    /// `llama_model_desc`.
    pub model_desc: Option<ModelDescFn>,
    /// `llama_model_meta_val_str`.
    pub model_meta_val_str: Option<ModelMetaValStrFn>,
    /// `llama_model_n_layer`.
    pub model_n_layer: Option<ModelNLayerFn>,
    /// `llama_n_ubatch`.
    pub n_ubatch: Option<ContextU32Fn>,
    /// `ggml_backend_sched_graph_compute_async` (libggml-base).
    pub sched_compute: Option<SchedComputeFn>,
    /// `ggml_backend_sched_set_eval_callback` (libggml-base).
    pub sched_set_eval_callback: Option<SchedSetEvalCallbackFn>,
    /// `ggml_backend_sched_free` (libggml-base).
    pub sched_free: Option<SchedFreeFn>,
    /// `ggml_backend_sched_get_n_copies` (libggml-base).
    pub sched_n_copies: Option<SchedNCopiesFn>,
    /// `ggml_graph_n_nodes` (libggml-base).
    pub graph_n_nodes: Option<GraphNNodesFn>,
    /// `ggml_graph_node` (libggml-base).
    pub graph_node: Option<GraphNodeFn>,
    /// `ggml_get_name` (libggml-base).
    pub get_name: Option<GetNameFn>,
}

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

impl Symbols {
    fn resolve() -> Self {
        Self {
            decode: resolve!(c"llama_decode" as DecodeFn),
            process: resolve!(c"llama_process" as ProcessFn),
            batch_ext_clear: resolve!(c"llama_batch_ext_clear" as BatchExtFn),
            batch_ext_free: resolve!(c"llama_batch_ext_free" as BatchExtFn),
            batch_ext_add: resolve!(c"llama_batch_ext_add" as BatchExtAddFn),
            batch_ext_add_token: resolve!(c"llama_batch_ext_add_token" as BatchExtAddTokenFn),
            batch_ext_add_embd: resolve!(c"llama_batch_ext_add_embd" as BatchExtAddEmbdFn),
            batch_ext_add_seq: resolve!(c"llama_batch_ext_add_seq" as BatchExtAddSeqFn),
            batch_ext_set_pos: resolve!(c"llama_batch_ext_set_pos" as BatchExtSetPosFn),
            memory_seq_rm: resolve!(c"llama_memory_seq_rm" as MemorySeqRmFn),
            kv_self_seq_rm: resolve!(c"llama_kv_self_seq_rm" as KvSelfSeqRmFn),
            memory_clear: resolve!(c"llama_memory_clear" as MemoryClearFn),
            free: resolve!(c"llama_free" as FreeFn),
            state_seq_get_data: resolve!(c"llama_state_seq_get_data" as StateSeqGetDataFn),
            state_seq_set_data: resolve!(c"llama_state_seq_set_data" as StateSeqSetDataFn),
            state_seq_get_data_ext: resolve!(
                c"llama_state_seq_get_data_ext" as StateSeqGetDataExtFn
            ),
            state_seq_set_data_ext: resolve!(
                c"llama_state_seq_set_data_ext" as StateSeqSetDataExtFn
            ),
            state_seq_save_file: resolve!(c"llama_state_seq_save_file" as StateSeqSaveFileFn),
            state_seq_load_file: resolve!(c"llama_state_seq_load_file" as StateSeqLoadFileFn),
            n_seq_max: resolve!(c"llama_n_seq_max" as ContextU32Fn),
            n_ctx: resolve!(c"llama_n_ctx" as ContextU32Fn),
            n_ctx_seq: resolve!(c"llama_n_ctx_seq" as ContextU32Fn),
            get_model: resolve!(c"llama_get_model" as GetModelFn),
            get_memory: resolve!(c"llama_get_memory" as GetMemoryFn),
            model_desc: resolve!(c"llama_model_desc" as ModelDescFn),
            model_meta_val_str: resolve!(c"llama_model_meta_val_str" as ModelMetaValStrFn),
            model_n_layer: resolve!(c"llama_model_n_layer" as ModelNLayerFn),
            n_ubatch: resolve!(c"llama_n_ubatch" as ContextU32Fn),
            sched_compute: resolve!(c"ggml_backend_sched_graph_compute_async" as SchedComputeFn),
            sched_set_eval_callback: resolve!(
                c"ggml_backend_sched_set_eval_callback" as SchedSetEvalCallbackFn
            ),
            sched_free: resolve!(c"ggml_backend_sched_free" as SchedFreeFn),
            sched_n_copies: resolve!(c"ggml_backend_sched_get_n_copies" as SchedNCopiesFn),
            graph_n_nodes: resolve!(c"ggml_graph_n_nodes" as GraphNNodesFn),
            graph_node: resolve!(c"ggml_graph_node" as GraphNodeFn),
            get_name: resolve!(c"ggml_get_name" as GetNameFn),
        }
    }

    /// Whether every function the layer position needs resolved: the scheduler's compute
    /// and callback setter (to interpose) and the graph/tensor readers (to find layers).
    pub fn layers_available(&self) -> bool {
        self.sched_compute.is_some()
            && self.sched_set_eval_callback.is_some()
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
