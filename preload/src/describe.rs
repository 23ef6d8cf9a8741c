//! What a llama context says about itself, read once when its segment is created: sequence
//! count, context sizes, its memory handle and the model's description strings. Every
//! query goes through the resolved symbols; a missing one leaves its field empty.

use crate::ffi::{LlamaContext, LlamaModel};
use crate::symbols::Symbols;
use hydra_layout::EngineDescription;
use std::ffi::{c_char, CStr};

/// Environment variable naming the model alias clients use (default: the model's name).
pub const MODEL_ALIAS_ENV: &str = "HYDRA_MODEL_ALIAS";
/// Environment variable giving the model file path shown in the header (default: empty;
/// llama.h does not tell it).
pub const MODEL_PATH_ENV: &str = "HYDRA_MODEL_PATH";
/// Environment variable giving the compute device shown in the header (default: empty).
pub const DEVICE_ENV: &str = "HYDRA_DEVICE";

/// A context's shape and description.
#[derive(Debug, Clone, Default)]
pub struct ContextFacts {
    /// Sequences (= slots), at least 1.
    pub n_seqs: usize,
    /// Context size of one sequence, tokens (0 = unknown).
    pub n_ctx_seq: u64,
    /// Context size of the whole context, tokens (0 = unknown).
    pub n_ctx: u64,
    /// `llama_get_memory(ctx)` as an address (0 = unknown); `llama_memory_seq_rm` names it.
    pub memory: usize,
    /// Tokens of one ubatch, the most one graph compute carries (0 = unknown).
    pub n_ubatch: u64,
    /// Transformer layers of the model (0 = unknown).
    pub n_layer: u64,
    /// Header strings.
    pub description: EngineDescription,
}

/// Reads the facts of `ctx`.
///
/// # Safety
/// `ctx` is a live llama context (the host is passing it to a llama.cpp function now) and
/// `sym` holds functions resolved from the libllama that owns it.
pub unsafe fn describe(sym: &Symbols, ctx: *mut LlamaContext) -> ContextFacts {
    // Each call below: the resolved function has the llama.h signature of its name, and
    // `ctx` is live per this function's contract.
    // SAFETY: as above.
    let n_seqs = sym.n_seq_max.map_or(1, |f| unsafe { f(ctx) }).max(1) as usize;
    // SAFETY: as above.
    let n_ctx = sym.n_ctx.map_or(0, |f| u64::from(unsafe { f(ctx) }));
    let n_ctx_seq = sym
        .n_ctx_seq
        // SAFETY: as above.
        .map(|f| u64::from(unsafe { f(ctx) }))
        .unwrap_or(n_ctx / n_seqs as u64);
    // SAFETY: as above.
    let memory = sym.get_memory.map_or(0, |f| unsafe { f(ctx) } as usize);
    let model = sym
        .get_model
        // SAFETY: as above.
        .map_or(std::ptr::null(), |f| unsafe { f(ctx) });
    // SAFETY: as above.
    let n_ubatch = sym.n_ubatch.map_or(0, |f| u64::from(unsafe { f(ctx) }));
    let n_layer = match (model.is_null(), sym.model_n_layer) {
        // SAFETY: `model` is the live context's model (non-null here).
        (false, Some(f)) => u64::try_from(unsafe { f(model) }).unwrap_or(0),
        _ => 0,
    };
    // SAFETY: `model` is null or the live context's model.
    let mut description = unsafe { model_description(sym, model) };
    if crate::layers::available() {
        description.capabilities |= hydra_layout::header::capabilities::LAYER_PROGRESS;
    }
    if crate::devices::available() {
        description.capabilities |= hydra_layout::header::capabilities::DEVICES
            | hydra_layout::header::capabilities::DEVICE_WAIT
            | hydra_layout::header::capabilities::PEER_READS;
        // An armed RPC split of 0c1e570 publishes its layers as sent (see `layers`).
        if crate::layers::available() && crate::symbols::get().process.is_some() {
            description.capabilities |= hydra_layout::header::capabilities::LAYERS_SENT;
        }
    }
    // Every step start is published with the cost model's prediction (format v1.2), and
    // each task's arrival is its prompt's start (llama.cpp never sees a request wait):
    // time to first token and end-to-end time from there, no queue wait (format v1.3).
    description.capabilities |= hydra_layout::header::capabilities::STEP_PREDICTION
        | hydra_layout::header::capabilities::PROMPT_ARRIVALS;
    ContextFacts {
        n_seqs,
        n_ctx_seq,
        n_ctx,
        memory,
        n_ubatch,
        n_layer,
        description,
    }
}

/// Reads a C string that a llama.h function writes into a buffer of `N` bytes.
fn read_string<const N: usize>(write: impl FnOnce(*mut c_char, usize) -> i32) -> Option<String> {
    let mut buf = [0 as c_char; N];
    if write(buf.as_mut_ptr(), N) < 0 {
        return None;
    }
    buf[N - 1] = 0;
    // SAFETY: `buf` is NUL-terminated (its last byte was just set to 0).
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
    let s = s.to_string_lossy().trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// # Safety
/// `model` is null or a live model of the libllama `sym` was resolved from.
unsafe fn model_description(sym: &Symbols, model: *const LlamaModel) -> EngineDescription {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (desc, meta) = if model.is_null() {
        (None, None)
    } else {
        (sym.model_desc, sym.model_meta_val_str)
    };
    // SAFETY: `model` is live (non-null here) and the function has llama.h's signature;
    // the buffer pointer and size come from `read_string`.
    let desc = desc.and_then(|f| read_string::<256>(|b, n| unsafe { f(model, b, n) }));
    let meta_str = |key: &CStr| {
        // SAFETY: as above; `key` is NUL-terminated.
        meta.and_then(|f| read_string::<256>(|b, n| unsafe { f(model, key.as_ptr(), b, n) }))
    };
    let model_name = meta_str(c"general.name")
        .or_else(|| desc.clone())
        .unwrap_or_default();
    // llama_model_desc is "<arch> <size> <file type>": the file type is the quantization.
    let model_quant = desc
        .as_deref()
        .and_then(|d| d.rsplit(' ').next())
        .unwrap_or_default()
        .to_owned();
    EngineDescription {
        model_alias: env(MODEL_ALIAS_ENV).unwrap_or_else(|| model_name.clone()),
        model_name,
        model_quant,
        model_path: env(MODEL_PATH_ENV).unwrap_or_default(),
        tokenizer: meta_str(c"tokenizer.ggml.model").unwrap_or_default(),
        device: env(DEVICE_ENV).unwrap_or_default(),
        capabilities: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::header::capabilities::STEP_PREDICTION;

    #[test]
    fn the_description_says_predictions_are_published() {
        // SAFETY: no symbol resolved, so `describe` calls nothing with the (null) context.
        let facts = unsafe { describe(&Symbols::default(), std::ptr::null_mut()) };
        assert_ne!(facts.description.capabilities & STEP_PREDICTION, 0);
        assert_eq!(
            (facts.n_seqs, facts.n_ubatch),
            (1, 0),
            "nothing else is known"
        );
    }
}
