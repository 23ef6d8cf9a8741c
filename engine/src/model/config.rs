//! Hyper-parameters of a llama-family model.

use crate::error::{EngineError, Result};

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
}

impl LlamaConfig {
    /// Size of one attention head.
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
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
        if self.n_embd % self.n_head != 0 {
            return bad(format!(
                "embedding size {} is not a multiple of the head count {}",
                self.n_embd, self.n_head
            ));
        }
        if self.n_head % self.n_kv_head != 0 {
            return bad(format!(
                "head count {} is not a multiple of the KV head count {}",
                self.n_head, self.n_kv_head
            ));
        }
        if self.head_dim() % 2 != 0 {
            return bad(format!("head size {} is odd", self.head_dim()));
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
