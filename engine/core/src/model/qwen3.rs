//! Qwen3 (`general.architecture` `qwen3`): no biases, an RMS norm over each
//! head of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`), GPT-NeoX RoPE,
//! and a head size of its own (`qwen3.attention.key_length`, which need not
//! be the embedding size over the head count).

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["qwen3"];

/// No biases on the Q, K and V projections.
pub(crate) const QKV_BIAS: bool = false;

/// An RMS norm over each head of Q and K before RoPE.
pub(crate) const QK_NORM: bool = true;

/// Half-rotation RoPE.
pub(crate) const ROPE_NEOX: bool = true;
