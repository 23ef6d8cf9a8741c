//! `libhydra_preload.so`: hydra-progress for any llama.cpp-based server without patching it.
//!
//! ```text
//! LD_PRELOAD=/path/to/libhydra_preload.so HYDRA_ENGINE_ID=llama-a llama-server -m model.gguf -np 4
//! ```
//!
//! Every llama.cpp server computes through `llama_decode(ctx, batch)` in `libllama.so`, and
//! each `llama_batch` says which sequence (= server slot) each token belongs to. This
//! library exports `llama_decode` and `llama_process` (the extended-batch decode that
//! llama-server 0c1e570 uses, with the batch builder calls that say what such a batch
//! holds), and the sequence-removal, memory-clear, free and state save/restore functions, so the dynamic linker binds the host's calls to it; each
//! wrapper finds the real function with `dlsym(RTLD_NEXT)`, records the call and passes it
//! on unchanged.
//!
//! - [`ffi`]: the llama.h types mirrored (`llama_batch` is passed by value).
//! - [`symbols`]: the real functions, resolved once; a missing one is absent, never a crash.
//! - [`batch`]: tokens and positions per sequence in a batch (never token ids).
//! - [`ext`]: what the builder calls put in each opaque `llama_batch_ext`.
//! - [`describe`]: a context's sequence count, context sizes and model strings.
//! - [`tracker`]: one context's publisher over hydra-layout's [`hydra_layout::SegmentWriter`]
//!   and its shared slot transitions (prefill/decode steps, idle, save/restore).
//! - [`registry`]: context -> tracker, segment creation, idle sweeper, exit hook.
//! - [`devices`]: the scheduler's devices and layer map, and which device a blocking ggml
//!   call (`ggml_backend_synchronize` and the others, interposed) waits on.
//! - [`waits`]: that wait, published for the tracked call's slots while it lasts.
//! - [`peers`]: whether each RPC peer reads what the host sends it (its socket's
//!   `TCP_INFO`, sampled by the background thread).
//! - [`layers`]: inside one decode call, the ubatch and the layer (the scheduler's compute
//!   and eval callback, interposed in libggml-base), published as the substep words.
//! - [`interpose`]: the wrapper bodies (panic-proof, generic over the real function).
//! - [`exports`]: the `#[no_mangle]` llama.h functions.
//!
//! Totals are unknown to a preload (llama.cpp does not say how long a prompt or a
//! generation will be): slots publish `WORK_TOTAL = 0`, which readers show as unknown.
//!
//! Environment: `HYDRA_PROGRESS_DIR` (segment directory), `HYDRA_ENGINE_ID` (default
//! `llama-<pid>`; a second context gets `-ctx1`), `HYDRA_PRELOAD_IDLE_MS` (default 1000),
//! `HYDRA_MODEL_ALIAS`, `HYDRA_MODEL_PATH`, `HYDRA_DEVICE`, `HYDRA_PRELOAD_LAYERS`
//! (`auto`, `always`, `off`) and `HYDRA_PRELOAD_LAYER_MIN_TOKENS` (see [`layers`]).

#![deny(missing_docs)]

pub mod batch;
pub mod describe;
pub mod devices;
pub mod exports;
pub mod ext;
pub mod ffi;
pub mod interpose;
pub mod layers;
pub(crate) mod log;
pub mod peers;
pub mod registry;
pub mod symbols;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod tracker;
pub mod waits;
