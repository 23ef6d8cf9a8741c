//! Qwen2 and Qwen2.5 (`general.architecture` `qwen2`): the llama decoder with
//! biases on the Q, K and V projections and GPT-NeoX RoPE (rotating the two
//! halves of each head).

use super::transformer::AttentionParts;

/// `general.architecture` values of this family.
pub(crate) const ARCHITECTURES: &[&str] = &["qwen2"];

/// Q/K/V biases.
pub(crate) const PARTS: AttentionParts = AttentionParts {
    qkv_bias: true,
    qk_norm: false,
};

/// Half-rotation RoPE.
pub(crate) const ROPE_NEOX: bool = true;
