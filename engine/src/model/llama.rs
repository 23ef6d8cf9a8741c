//! Llama and Mistral (`general.architecture` `llama`, `mistral`): the plain
//! decoder. RoPE rotates adjacent pairs (llama.cpp's "normal" ordering,
//! which is how GGUF conversion permutes these models' Q and K weights);
//! Llama 3.1+ files scale RoPE with a `rope_freqs.weight` tensor.

use super::transformer::AttentionParts;

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["llama", "mistral"];

/// No Q/K/V biases, no Q/K norms.
pub(crate) const PARTS: AttentionParts = AttentionParts {
    qkv_bias: false,
    qk_norm: false,
};

/// Adjacent-pair RoPE.
pub(crate) const ROPE_NEOX: bool = false;

pub(crate) use super::transformer::{Rope, Sequence};
