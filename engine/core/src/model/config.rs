//! Hyper-parameters of a llama-family model.

use super::{llama, qwen2, qwen3};
use crate::error::{EngineError, Result};

/// The decoder families the engine runs (one file each under `model/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Architecture {
    /// `llama`, `mistral`.
    #[default]
    Llama,
    /// `qwen2`: Q/K/V biases, NeoX RoPE.
    Qwen2,
    /// `qwen3`: per-head Q/K norms, NeoX RoPE.
    Qwen3,
}

impl Architecture {
    /// The family of a `general.architecture` value, if the engine runs it.
    pub fn from_gguf(name: &str) -> Option<Self> {
        if llama::ARCHITECTURES.contains(&name) {
            Some(Self::Llama)
        } else if qwen2::ARCHITECTURES.contains(&name) {
            Some(Self::Qwen2)
        } else if qwen3::ARCHITECTURES.contains(&name) {
            Some(Self::Qwen3)
        } else {
            None
        }
    }

    /// Every `general.architecture` value the engine runs.
    pub fn supported() -> Vec<&'static str> {
        [
            llama::ARCHITECTURES,
            qwen2::ARCHITECTURES,
            qwen3::ARCHITECTURES,
        ]
        .concat()
    }

    /// Whether RoPE rotates the two halves of a head (GPT-NeoX) rather than adjacent pairs.
    pub fn rope_neox(self) -> bool {
        match self {
            Self::Llama => llama::ROPE_NEOX,
            Self::Qwen2 => qwen2::ROPE_NEOX,
            Self::Qwen3 => qwen3::ROPE_NEOX,
        }
    }

    pub(crate) fn attention_parts(self) -> AttentionParts {
        let (qkv_bias, qk_norm) = match self {
            Self::Llama => (llama::QKV_BIAS, llama::QK_NORM),
            Self::Qwen2 => (qwen2::QKV_BIAS, qwen2::QK_NORM),
            Self::Qwen3 => (qwen3::QKV_BIAS, qwen3::QK_NORM),
        };
        AttentionParts { qkv_bias, qk_norm }
    }
}

/// Optional parts of the attention block, as a family has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttentionParts {
    /// Biases on the Q, K and V projections (Qwen2).
    pub(crate) qkv_bias: bool,
    /// RMS norm of each head of Q and K before RoPE (Qwen3).
    pub(crate) qk_norm: bool,
}

/// How RoPE frequencies are scaled for contexts beyond the trained one.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RopeScaling {
    /// Plain RoPE.
    #[default]
    None,
    /// Every frequency divided by `factor` (`rope.scaling.type = linear`).
    Linear {
        /// `rope.scaling.factor`.
        factor: f32,
    },
    /// Llama 3.1's scaling: long wavelengths divided by `factor`, short ones
    /// kept, a smooth blend between (`rope.scaling.type = llama3`).
    Llama3 {
        /// `rope.scaling.factor`.
        factor: f32,
        /// `rope.scaling.low_freq_factor`.
        low_freq_factor: f32,
        /// `rope.scaling.high_freq_factor`.
        high_freq_factor: f32,
        /// `rope.scaling.original_context_length`.
        original_context: usize,
    },
    /// One divisor per rotated pair, from the file's `rope_freqs.weight`
    /// (how llama.cpp's converter stores Llama 3.1's scaling).
    Factors(Vec<f32>),
}

/// Shape and numeric constants of a llama-family decoder.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when smaller than `n_head`).
    pub n_kv_head: usize,
    /// Feed-forward inner size.
    pub n_ff: usize,
    /// Vocabulary size (rows of the embedding matrix).
    pub vocab_size: usize,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RMS norm epsilon.
    pub rms_eps: f64,
    /// Size of one attention head (`attention.key_length`, else `n_embd / n_head`).
    pub head_dim: usize,
    /// The decoder family.
    pub arch: Architecture,
    /// RoPE frequency scaling.
    pub rope_scaling: RopeScaling,
}

impl LlamaConfig {
    /// Size of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Check the relations the forward pass relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| {
            Err(EngineError::InvalidOption {
                name: "model config",
                message: m,
            })
        };
        if self.n_layer == 0 || self.n_embd == 0 || self.n_head == 0 || self.n_kv_head == 0 {
            return bad(format!("zero-sized dimension in {self:?}"));
        }
        if self.head_dim == 0 {
            return bad("zero head size".into());
        }
        if !self.n_head.is_multiple_of(self.n_kv_head) {
            return bad(format!(
                "head count {} is not a multiple of the KV head count {}",
                self.n_head, self.n_kv_head
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return bad(format!("head size {} is odd", self.head_dim()));
        }
        if let RopeScaling::Factors(f) = &self.rope_scaling {
            if f.len() != self.head_dim / 2 {
                return bad(format!(
                    "rope_freqs.weight has {} factors, expected {}",
                    f.len(),
                    self.head_dim / 2
                ));
            }
        }
        if self.vocab_size == 0 || self.n_ctx_train == 0 {
            return bad("empty vocabulary or context".into());
        }
        Ok(())
    }

    /// Bytes of f32 K and V cache one token occupies across all layers.
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.n_layer * self.n_kv_head * self.head_dim() * std::mem::size_of::<f32>()
    }
}
