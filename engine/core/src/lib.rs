//! `hydra-engine-core`: the inference core of hydra-progress, with no HTTP and no command
//! line (the engine server, `hydra-engine-server`, and the `hydra-engine` binary sit on it).
//!
//! A llama-family model (loaded from GGUF through candle, or the embedded
//! seeded default) is shared by N slots, each with its own KV cache. Prompts
//! are prefilled in chunks with a callback around every chunk, tokens are
//! decoded one at a time and sampled outside the model, and a slot's KV
//! state can be saved to and restored from a versioned, checksummed byte
//! stream tied to the model's fingerprint.
//!
//! Main types: [`Model`] (weights, [`ModelInfo`], [`Tokenizer`]),
//! [`Slots`] (per-slot caches: [`Slots::prefill`], [`Slots::decode_step`],
//! [`Slots::save_state`], [`Slots::restore_state`]), [`Sampler`] and
//! [`generate`], [`DeviceSpec`], and the one error type [`EngineError`].
//!
//! ```
//! use std::sync::Arc;
//! use hydra_engine_core::{generate, GenerateParams, Model, Sampler, Slots};
//!
//! let model = Arc::new(Model::builtin()?);
//! let mut slots = Slots::new(model.clone(), 2, 512)?;
//! let slot = slots.id(0)?; // the one check of the slot's bound
//! let prompt = model.tokenizer().encode("Hello", true);
//! let logits = slots.prefill(slot, &prompt, 64, &mut ())?;
//! let params = GenerateParams { n_predict: 8, stop_at_eos: true };
//! let out = generate(&mut slots, slot, logits, &mut Sampler::greedy(), &params, &mut ())?;
//! assert_eq!(slots.n_past(slot), prompt.len() + out.tokens.len());
//! # Ok::<(), hydra_engine_core::EngineError>(())
//! ```
//!
//! The compute thread, progress publishing and the HTTP surfaces are the engine server's
//! (`engine/server`); the command line and the demo are the `hydra-engine` binary's
//! (`engine/cli`).
//!
//! Threads: candle sizes its CPU pools on first use; call
//! [`threads::set_cpu_threads`] first thing in `main` to choose the count.

#![deny(missing_docs)]
// No unsafe code, except the x86 SIMD kernels (`kernels`) and the allocator setting of
// `memory`; `deny` lets those places allow it. Inside an `unsafe fn`
// every unsafe operation still needs its own `unsafe` block and `SAFETY` comment.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod device;
pub mod error;
pub mod gguf;
pub mod hash;
pub mod kernels;
pub mod kv_state;
pub mod logprobs;
// One `mallopt` call.
#[allow(unsafe_code)]
pub mod memory;
pub mod model;
pub mod perplexity;
pub mod sampling;
pub mod slots;
pub mod threads;
pub mod tokenizer;

pub use device::DeviceSpec;
pub use error::{EngineError, Result, StateError};
pub use model::builtin::BuiltinSpec;
pub use model::config::LlamaConfig;
pub use model::quant::{Conversion, QuantTarget};
pub use model::{LoadOptions, Model, ModelInfo};
pub use sampling::{
    generate, GenerateParams, Generation, Generator, Sampler, SamplerConfig, StopReason,
};
pub use slots::{FnObserver, Logits, SlotId, Slots, StepDone, StepObserver, StepStart};
pub use tokenizer::{SpecialIds, StreamDecoder, Tokenizer};
