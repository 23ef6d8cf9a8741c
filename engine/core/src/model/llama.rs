//! Llama and Mistral (`general.architecture` `llama`, `mistral`): the plain
//! decoder. RoPE rotates adjacent pairs (llama.cpp's "normal" ordering,
//! which is how GGUF conversion permutes these models' Q and K weights);
//! Llama 3.1+ files scale RoPE with a `rope_freqs.weight` tensor.

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["llama", "mistral"];

/// No biases on the Q, K and V projections.
pub(crate) const QKV_BIAS: bool = false;

/// No RMS norm over the heads of Q and K.
pub(crate) const QK_NORM: bool = false;

/// Adjacent-pair RoPE.
pub(crate) const ROPE_NEOX: bool = false;
