//! Qwen3 (`general.architecture` `qwen3`): no biases, an RMS norm over each
//! head of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`), GPT-NeoX RoPE,
//! and a head size of its own (`qwen3.attention.key_length`, which need not
//! be the embedding size over the head count).

use super::transformer::AttentionParts;

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["qwen3"];

/// Per-head Q/K RMS norms.
pub(crate) const PARTS: AttentionParts = AttentionParts {
    qkv_bias: false,
    qk_norm: true,
};

/// Half-rotation RoPE.
pub(crate) const ROPE_NEOX: bool = true;
