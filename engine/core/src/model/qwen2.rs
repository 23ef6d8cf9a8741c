//! Qwen2 and Qwen2.5 (`general.architecture` `qwen2`): the llama decoder with
//! biases on the Q, K and V projections and GPT-NeoX RoPE (rotating the two
//! halves of each head).

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["qwen2"];

/// Biases on the Q, K and V projections.
pub(crate) const QKV_BIAS: bool = true;

/// No RMS norm over the heads of Q and K.
pub(crate) const QK_NORM: bool = false;

/// Half-rotation RoPE.
pub(crate) const ROPE_NEOX: bool = true;
