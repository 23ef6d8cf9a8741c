//! The embedded default model: llama-shaped, with deterministic seeded
//! weights built in memory (no file, no network).
//!
//! | parameter   | value | note                                        |
//! |-------------|-------|---------------------------------------------|
//! | layers      | 4     |                                             |
//! | hidden size | 256   | 8 query heads of 32, 4 KV heads (GQA 2:1)   |
//! | FFN size    | 768   | SwiGLU                                      |
//! | vocabulary  | 260   | the byte tokenizer (256 bytes + 4 specials) |
//! | context     | 4096  | RoPE theta 10000, RMS eps 1e-5              |
//! | weights     | Q4_0  | tied input/output embeddings                |
//!
//! About 3.2M parameters (1.8 MB as Q4_0). Q4_0 because candle's CPU kernel
//! for it quantizes activations the same way whatever the number of rows;
//! for Q8_0 and the K-quants candle picks other kernels (with other
//! activation quantization) depending on the number of rows, so chunked and
//! one-shot prefill differ by quantization noise. (With Q4_0 they still can,
//! when float summation order in attention flips an activation's rounding.)
//!
//! Speed: BENCHMARKS.md (#13); one slot decodes 6,000-9,000 tokens/s on 2
//! cores, so a 512-token generation takes well under a tenth of a second. The
//! weights are random, so the text it writes is noise; the special tokens'
//! embedding rows are zero, which keeps it from ending generation early.

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use super::config::{Architecture, LlamaConfig, RopeScaling};
use crate::error::Result;
use crate::hash::hash64;
use crate::tokenizer::bytes;

/// Seed of the embedded model's weights.
pub const BUILTIN_SEED: u64 = 0x4859_4452_4131_3031;
/// Name reported for the embedded model.
pub const BUILTIN_NAME: &str = "hydra-builtin-4x256";
/// Weight type of the embedded model.
pub const BUILTIN_DTYPE: GgmlDType = GgmlDType::Q4_0;

/// A seeded llama-shaped model description.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinSpec {
    /// Shapes and constants.
    pub config: LlamaConfig,
    /// Seed of the weight generator.
    pub seed: u64,
}

impl Default for BuiltinSpec {
    fn default() -> Self {
        Self {
            config: LlamaConfig {
                n_layer: 4,
                n_embd: 256,
                n_head: 8,
                n_kv_head: 4,
                n_ff: 768,
                vocab_size: bytes::VOCAB_SIZE,
                n_ctx_train: 4096,
                rope_theta: 10_000.0,
                rms_eps: 1e-5,
                head_dim: 32,
                arch: Architecture::Llama,
                rope_scaling: RopeScaling::None,
            },
            seed: BUILTIN_SEED,
        }
    }
}

/// splitmix64: small, fast, good enough for weights.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

impl BuiltinSpec {
    /// A uniform random matrix with the given standard deviation, seeded by name.
    fn random(&self, name: &str, rows: usize, cols: usize, std: f32) -> Result<Tensor> {
        let mut rng = SplitMix(self.seed ^ hash64(name.as_bytes()));
        let a = std * 3f32.sqrt();
        let data: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32() * a).collect();
        Ok(Tensor::from_vec(data, (rows, cols), &Device::Cpu)?)
    }

    /// The GGUF-named tensors of this model, matrices quantized to `dtype`
    /// (norms stay F32). No `output.weight`: embeddings are tied.
    pub fn tensors(&self, dtype: GgmlDType) -> Result<Vec<(String, QTensor)>> {
        let c = &self.config;
        let (e, ff) = (c.n_embd, c.n_ff);
        let kv = c.n_kv_head * c.head_dim();
        let resid_scale = 1.0 / (2.0 * c.n_layer as f32).sqrt();
        let mut out = Vec::new();
        let mut mat = |name: String, rows: usize, cols: usize, std: f32| -> Result<()> {
            let t = self.random(&name, rows, cols, std)?;
            out.push((name, QTensor::quantize(&t, dtype)?));
            Ok(())
        };
        for i in 0..c.n_layer {
            let in_std = 1.0 / (e as f32).sqrt();
            mat(format!("blk.{i}.attn_q.weight"), e, e, in_std)?;
            mat(format!("blk.{i}.attn_k.weight"), kv, e, in_std)?;
            mat(format!("blk.{i}.attn_v.weight"), kv, e, in_std)?;
            mat(
                format!("blk.{i}.attn_output.weight"),
                e,
                e,
                in_std * resid_scale,
            )?;
            mat(format!("blk.{i}.ffn_gate.weight"), ff, e, in_std)?;
            mat(format!("blk.{i}.ffn_up.weight"), ff, e, in_std)?;
            let down_std = resid_scale / (ff as f32).sqrt();
            mat(format!("blk.{i}.ffn_down.weight"), e, ff, down_std)?;
        }
        // Embeddings: specials get zero rows (see the module docs).
        let emb = self.random("token_embd.weight", c.vocab_size, e, 0.25)?;
        let n_plain = c.vocab_size.min(256);
        let emb = if c.vocab_size > n_plain {
            let zeros = Tensor::zeros(
                (c.vocab_size - n_plain, e),
                candle_core::DType::F32,
                &Device::Cpu,
            )?;
            Tensor::cat(&[&emb.narrow(0, 0, n_plain)?, &zeros], 0)?
        } else {
            emb
        };
        out.push(("token_embd.weight".into(), QTensor::quantize(&emb, dtype)?));
        let ones = Tensor::ones(e, candle_core::DType::F32, &Device::Cpu)?;
        for i in 0..c.n_layer {
            for n in ["attn_norm", "ffn_norm"] {
                out.push((
                    format!("blk.{i}.{n}.weight"),
                    QTensor::quantize(&ones, GgmlDType::F32)?,
                ));
            }
        }
        out.push((
            "output_norm.weight".into(),
            QTensor::quantize(&ones, GgmlDType::F32)?,
        ));
        Ok(out)
    }

    /// GGUF metadata describing this model (architecture `llama`), without
    /// tokenizer keys.
    pub fn gguf_metadata(&self, name: &str) -> Vec<(String, Value)> {
        let c = &self.config;
        let u = |v: usize| Value::U32(v as u32);
        vec![
            ("general.architecture".into(), Value::String("llama".into())),
            ("general.name".into(), Value::String(name.into())),
            ("llama.block_count".into(), u(c.n_layer)),
            ("llama.context_length".into(), u(c.n_ctx_train)),
            ("llama.embedding_length".into(), u(c.n_embd)),
            ("llama.feed_forward_length".into(), u(c.n_ff)),
            ("llama.attention.head_count".into(), u(c.n_head)),
            ("llama.attention.head_count_kv".into(), u(c.n_kv_head)),
            ("llama.rope.dimension_count".into(), u(c.head_dim())),
            ("llama.rope.freq_base".into(), Value::F32(c.rope_theta)),
            (
                "llama.attention.layer_norm_rms_epsilon".into(),
                Value::F32(c.rms_eps as f32),
            ),
            ("llama.vocab_size".into(), u(c.vocab_size)),
        ]
    }
}

/// GGUF metadata naming the byte tokenizer (`tokenizer.ggml.model = "hydra-bytes"`).
pub fn byte_tokenizer_metadata() -> Vec<(String, Value)> {
    vec![
        (
            "tokenizer.ggml.model".into(),
            Value::String(bytes::FAMILY.into()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(bytes::BOS)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(bytes::EOS)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded model is assembled without the loader's validation: its constant
    /// configuration is checked here instead.
    #[test]
    fn the_embedded_configuration_is_valid() {
        BuiltinSpec::default().config.validate().unwrap();
    }
}
