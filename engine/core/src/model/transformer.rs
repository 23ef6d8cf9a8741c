//! The decoder every supported family shares: RoPE, attention (with the
//! optional Q/K/V biases and per-head Q/K norms some families add), the
//! SwiGLU MLP and the block stack, run over one slot's KV cache.
//!
//! The arithmetic follows candle-transformers' quantized models
//! (`quantized_llama`, `quantized_qwen2`) step for step (same kernels in the
//! same order), so greedy tokens agree with those references; what differs is
//! that the KV cache lives outside the weights, one per slot. The families
//! themselves ([`super::llama`], [`super::qwen2`], [`super::qwen3`]) only say
//! which of the optional pieces they have.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::Embedding;
use candle_transformers::quantized_nn::RmsNorm;

use super::config::{LlamaConfig, RopeScaling};
use super::kv_cache::KvCache;
use super::layer_hook::LayerHook;
use super::weight::Weight;
use crate::error::{EngineError, Result};
use crate::kernels::attention::{self, CachedSequence, Heads};

/// How a forward's attention finds each row's position: the RoPE rotations of every row
/// (one op for all of them), or else one causal mask per sequence.
type Positions = (Option<[Tensor; 2]>, Vec<Option<Tensor>>);

/// One sequence of a forward: the tokens to run and the cache they extend.
pub(crate) struct Sequence<'a> {
    /// Tokens, already range-checked, at positions `cache.len()..`.
    pub(crate) tokens: &'a [u32],
    /// The slot's cache; the tokens are appended to it when the forward succeeds.
    pub(crate) cache: &'a mut KvCache,
}

/// The inverse frequencies of each rotated pair, with the configured scaling.
pub(crate) fn rope_frequencies(cfg: &LlamaConfig) -> Vec<f32> {
    let head_dim = cfg.head_dim();
    let base: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / cfg.rope_theta.powf(i as f32 / head_dim as f32))
        .collect();
    match &cfg.rope_scaling {
        RopeScaling::None => base,
        RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
        RopeScaling::Factors(factors) => base.iter().zip(factors).map(|(f, d)| f / d).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_context,
        } => {
            let old = *original_context as f32;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// Precomputed RoPE tables for positions `0..n_ctx`.
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    cos: Tensor,
    sin: Tensor,
    n_ctx: usize,
    /// Rotate halves (`x[i]`, `x[i + d/2]`, GPT-NeoX) rather than adjacent pairs.
    neox: bool,
}

impl Rope {
    pub(crate) fn new(cfg: &LlamaConfig, n_ctx: usize, device: &Device) -> Result<Self> {
        let theta = rope_frequencies(cfg);
        let theta = Tensor::new(theta.as_slice(), device)?;
        let idx_theta = Tensor::arange(0, n_ctx as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((n_ctx, 1))?
            .matmul(&theta.reshape((1, theta.elem_count()))?)?;
        Ok(Self {
            cos: idx_theta.cos()?,
            sin: idx_theta.sin()?,
            n_ctx,
            neox: cfg.arch.rope_neox(),
        })
    }

    /// Rotates `x` `(1, heads, n, head_dim)`, whose rows are positions `index_pos..`.
    fn apply(&self, x: &Tensor, index_pos: usize) -> candle_core::Result<Tensor> {
        let (_b, _h, seq_len, _d) = x.dims4()?;
        let cos = self.cos.narrow(0, index_pos, seq_len)?;
        let sin = self.sin.narrow(0, index_pos, seq_len)?;
        self.rotate(x, &cos, &sin)
    }

    /// The tables' rows for tokens at `positions`, each `(rows, 1, d / 2)`: what
    /// [`Rope::apply_rows`] rotates a forward's rows with, each at its own position.
    fn rows(&self, positions: &[u32], device: &Device) -> candle_core::Result<[Tensor; 2]> {
        let idx = Tensor::new(positions, device)?;
        let half = self.cos.dim(1)?;
        let pick = |t: &Tensor| t.index_select(&idx, 0)?.reshape((positions.len(), 1, half));
        Ok([pick(&self.cos)?, pick(&self.sin)?])
    }

    /// Rotates `x` `(rows, heads, 1, head_dim)`, entry `j` at the position of row `j` of
    /// `rows` (from [`Rope::rows`]): one op for every token of a forward, whatever
    /// sequences they belong to.
    fn apply_rows(&self, x: &Tensor, rows: &[Tensor; 2]) -> candle_core::Result<Tensor> {
        self.rotate(x, &rows[0], &rows[1])
    }

    fn rotate(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        if self.neox {
            candle_nn::rotary_emb::rope(&x.contiguous()?, cos, sin)
        } else {
            candle_nn::rotary_emb::rope_i(&x.contiguous()?, cos, sin)
        }
    }
}

#[derive(Debug)]
struct Attention {
    wq: Weight,
    wk: Weight,
    wv: Weight,
    wo: Weight,
    bias: Option<[Tensor; 3]>,
    qk_norm: Option<(RmsNorm, RmsNorm)>,
}

#[derive(Debug)]
struct Mlp {
    w_gate: Weight,
    w_down: Weight,
    w_up: Weight,
}

impl Mlp {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let [gate, up] = Weight::forward_many([&self.w_gate, &self.w_up], xs)?;
        self.w_down
            .forward(&crate::kernels::silu_mul::silu_mul(&gate, &up)?)
    }
}

#[derive(Debug)]
struct Layer {
    attn: Attention,
    mlp: Mlp,
    attn_norm: RmsNorm,
    ffn_norm: RmsNorm,
}

/// The weights of a decoder, shared by every slot.
#[derive(Debug)]
pub(crate) struct DecoderWeights {
    cfg: LlamaConfig,
    embeddings: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: Weight,
    device: Device,
}

fn take(
    tensors: &mut HashMap<String, QTensor>,
    name: &str,
    dims: &[usize],
) -> Result<QTensor, String> {
    let t = tensors
        .remove(name)
        .ok_or_else(|| format!("missing tensor {name}"))?;
    // candle reports (rows, cols), the reverse of the GGUF dims.
    if t.shape().dims() != dims {
        return Err(format!(
            "tensor {name} has shape {:?}, expected {dims:?}",
            t.shape().dims()
        ));
    }
    Ok(t)
}

impl Layer {
    /// Layer `blk.N.` from its named tensors, taken through `get` (name, expected shape).
    fn from_tensors(
        cfg: &LlamaConfig,
        get: &mut dyn FnMut(&str, &[usize]) -> Result<QTensor>,
        device: &Device,
    ) -> Result<Self> {
        let parts = cfg.arch.attention_parts();
        let (e, hd) = (cfg.n_embd, cfg.head_dim());
        let (q_dim, kv_dim) = (cfg.n_head * hd, cfg.n_kv_head * hd);
        let mm = |t: QTensor| Weight::new(Arc::new(t), device);
        let bias = if parts.qkv_bias {
            Some([
                get("attn_q.bias", &[q_dim])?.dequantize(device)?,
                get("attn_k.bias", &[kv_dim])?.dequantize(device)?,
                get("attn_v.bias", &[kv_dim])?.dequantize(device)?,
            ])
        } else {
            None
        };
        let qk_norm = if parts.qk_norm {
            Some((
                RmsNorm::from_qtensor(get("attn_q_norm.weight", &[hd])?, cfg.rms_eps)?,
                RmsNorm::from_qtensor(get("attn_k_norm.weight", &[hd])?, cfg.rms_eps)?,
            ))
        } else {
            None
        };
        Ok(Layer {
            attn: Attention {
                wq: mm(get("attn_q.weight", &[q_dim, e])?)?,
                wk: mm(get("attn_k.weight", &[kv_dim, e])?)?,
                wv: mm(get("attn_v.weight", &[kv_dim, e])?)?,
                wo: mm(get("attn_output.weight", &[e, q_dim])?)?,
                bias,
                qk_norm,
            },
            mlp: Mlp {
                w_gate: mm(get("ffn_gate.weight", &[cfg.n_ff, e])?)?,
                w_down: mm(get("ffn_down.weight", &[e, cfg.n_ff])?)?,
                w_up: mm(get("ffn_up.weight", &[cfg.n_ff, e])?)?,
            },
            attn_norm: RmsNorm::from_qtensor(get("attn_norm.weight", &[e])?, cfg.rms_eps)?,
            ffn_norm: RmsNorm::from_qtensor(get("ffn_norm.weight", &[e])?, cfg.rms_eps)?,
        })
    }
}

impl DecoderWeights {
    /// Build from named GGUF tensors (`token_embd.weight`, `blk.N.attn_q.weight`, ...).
    /// `output.weight` is optional (tied embeddings).
    ///
    /// A missing or misshapen tensor is an [`EngineError::InvalidModel`] naming `source`.
    pub(crate) fn from_tensors(
        cfg: &LlamaConfig,
        mut tensors: HashMap<String, QTensor>,
        device: &Device,
        source: &Path,
    ) -> Result<Self> {
        let invalid = |message: String| EngineError::InvalidModel {
            path: source.to_path_buf(),
            message,
        };
        let (e, v) = (cfg.n_embd, cfg.vocab_size);
        let tok = take(&mut tensors, "token_embd.weight", &[v, e]).map_err(invalid)?;
        let embeddings = Embedding::new(tok.dequantize(device)?, e);
        let output = if tensors.contains_key("output.weight") {
            Weight::new(
                Arc::new(take(&mut tensors, "output.weight", &[v, e]).map_err(invalid)?),
                device,
            )?
        } else {
            // Tied embeddings: the output projection reuses the quantized embedding matrix.
            Weight::new(Arc::new(tok), device)?
        };
        let norm = take(&mut tensors, "output_norm.weight", &[e]).map_err(invalid)?;
        let norm = RmsNorm::from_qtensor(norm, cfg.rms_eps)?;
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let mut get = |name: &str, dims: &[usize]| -> Result<QTensor> {
                    take(&mut tensors, &format!("blk.{i}.{name}"), dims).map_err(invalid)
                };
                Layer::from_tensors(cfg, &mut get, device)
            })
            .collect::<Result<Vec<_>>>()?;
        let matrices = layers.iter().flat_map(|l| {
            let (a, m) = (&l.attn, &l.mlp);
            [&a.wq, &a.wk, &a.wv, &a.wo, &m.w_gate, &m.w_up, &m.w_down]
        });
        let kernels = super::weight::kernel_summary(matrices.chain([&output]));
        tracing::info!(kernels = %kernels, "weight kernels");
        Ok(Self {
            cfg: cfg.clone(),
            embeddings,
            layers,
            norm,
            output,
            device: device.clone(),
        })
    }

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// Q, K (after the optional bias and per-head norm, before RoPE) and V of every row,
    /// each `(1, rows, heads, head_dim)`.
    fn qkv(&self, attn: &Attention, xs: &Tensor) -> candle_core::Result<[Tensor; 3]> {
        let cfg = &self.cfg;
        let (b, s, _) = xs.dims3()?;
        let hd = cfg.head_dim();
        let [mut q, mut k, mut v] = Weight::forward_many([&attn.wq, &attn.wk, &attn.wv], xs)?;
        if let Some([bq, bk, bv]) = &attn.bias {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let mut q = q.reshape((b, s, cfg.n_head, hd))?;
        let mut k = k.reshape((b, s, cfg.n_kv_head, hd))?;
        if let Some((qn, kn)) = &attn.qk_norm {
            q = qn.forward(&q)?;
            k = kn.forward(&k)?;
        }
        Ok([q, k, v.reshape((b, s, cfg.n_kv_head, hd))?])
    }

    /// Run several sequences (a prefill chunk, one decode token per busy slot, or both) in
    /// one forward, each at its own positions against its own cache, and return the logits
    /// of each sequence's last position, `(sequences, vocab)` f32.
    ///
    /// The tokens of every sequence are stacked as rows, so each weight matrix is applied
    /// once to all of them; attention runs per sequence against its own cache (grouped-query
    /// heads share their K/V head through a reshape, with no copy). `hook` hears each layer
    /// as it is issued, once per forward (the caller fans it out to every slot).
    ///
    /// The caches only take the new tokens once every layer has run: a failed forward leaves
    /// each of them holding what it held before.
    pub(crate) fn forward(
        &self,
        seqs: &mut [Sequence<'_>],
        rope: &Rope,
        hook: &mut dyn LayerHook,
    ) -> Result<Tensor> {
        self.forward_rows(seqs, rope, hook, None)
    }

    /// [`Self::forward`] of one sequence, returning the logits after each of its tokens
    /// from `from` on, `(tokens - from, vocab)` f32 (perplexity scores every position).
    pub(crate) fn forward_from(
        &self,
        seq: &mut Sequence<'_>,
        rope: &Rope,
        hook: &mut dyn LayerHook,
        from: usize,
    ) -> Result<Tensor> {
        if from >= seq.tokens.len() {
            return Err(EngineError::InvalidOption {
                name: "forward",
                message: format!("logits from token {from} of {}", seq.tokens.len()),
            });
        }
        self.forward_rows(std::slice::from_mut(seq), rope, hook, Some(from))
    }

    /// [`Self::forward`], or with `from` (one sequence) [`Self::forward_from`]: the
    /// sequences checked and their caches reserved, how attention finds each row's
    /// position, every layer, then the logits of the rows asked for.
    fn forward_rows(
        &self,
        seqs: &mut [Sequence<'_>],
        rope: &Rope,
        hook: &mut dyn LayerHook,
        from: Option<usize>,
    ) -> Result<Tensor> {
        self.reserve(seqs, rope)?;
        let all: Vec<u32> = seqs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let (rows, masks) = self.positions(seqs, rope)?;
        let x = Tensor::new(all.as_slice(), &self.device)?.unsqueeze(0)?;
        let mut h = self.embeddings.forward(&x)?;
        let n_layers = self.layers.len();
        for (i, layer) in self.layers.iter().enumerate() {
            let residual = &h;
            let xs = layer.attn_norm.forward(&h)?;
            let qkv = self.qkv(&layer.attn, &xs)?;
            let y = match &rows {
                Some(rows) => self.attend_rows(i, qkv, seqs, rope, rows)?,
                None => self.attend_chunks(i, qkv, seqs, rope, &masks)?,
            };
            let y = layer.attn.wo.forward(&y)?;
            let h1 = crate::kernels::residual::add(&y, residual)?;
            let residual = &h1;
            let xs = layer.ffn_norm.forward(&h1)?;
            h = crate::kernels::residual::add(&layer.mlp.forward(&xs)?, residual)?;
            if hook.layer_done(&self.device, i + 1, n_layers).is_break() {
                return Err(EngineError::Interrupted {
                    layers_done: i + 1,
                    n_layers,
                });
            }
        }
        for s in seqs.iter_mut() {
            s.cache.commit(s.tokens.len());
        }
        let h = self.norm.forward(&h)?;
        let last = self.last_rows(&h, seqs, all.len(), from)?;
        let logits = self.output.forward(&last)?.squeeze(0)?;
        let logits = logits.to_dtype(DType::F32)?;
        debug_assert_eq!(logits.dim(D::Minus1)?, self.cfg.vocab_size);
        Ok(logits)
    }

    /// Checks that every sequence has tokens and fits the RoPE table and the layers, then
    /// grows each cache to hold its new tokens.
    fn reserve(&self, seqs: &mut [Sequence<'_>], rope: &Rope) -> Result<()> {
        let bad = |message: &str| EngineError::InvalidOption {
            name: "forward",
            message: message.into(),
        };
        if seqs.is_empty() || seqs.iter().any(|s| s.tokens.is_empty()) {
            return Err(bad("a forward needs at least one token per sequence"));
        }
        for s in seqs.iter() {
            if s.cache.len() + s.tokens.len() > rope.n_ctx || s.cache.n_layer() != self.layers.len()
            {
                return Err(bad(
                    "position beyond the RoPE table or cache/layer mismatch",
                ));
            }
        }
        for s in seqs.iter_mut() {
            let total = s.cache.len() + s.tokens.len();
            s.cache
                .reserve(total, rope.n_ctx, &self.cfg, &self.device)?;
        }
        Ok(())
    }

    /// How attention finds each row's position. On the CPU, and for a decode batch
    /// anywhere, RoPE rotates every row in one op at its own position (the rotations,
    /// returned first), and the CPU attends for every row in one kernel call
    /// (`attention::attend_cpu`). Chunks elsewhere go through candle's ops per sequence,
    /// with a causal mask (returned second).
    fn positions(&self, seqs: &[Sequence<'_>], rope: &Rope) -> Result<Positions> {
        let decode = seqs.iter().all(|s| s.tokens.len() == 1);
        if decode || self.device.is_cpu() {
            let positions: Vec<u32> = seqs
                .iter()
                .flat_map(|s| {
                    let past = s.cache.len() as u32;
                    (0..s.tokens.len() as u32).map(move |i| past + i)
                })
                .collect();
            return Ok((Some(rope.rows(&positions, &self.device)?), Vec::new()));
        }
        let masks = seqs
            .iter()
            .map(|s| match s.tokens.len() {
                1 => Ok(None),
                n => candle_transformers::utils::build_causal_mask(n, s.cache.len(), &self.device)
                    .map(Some),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((None, masks))
    }

    /// The hidden rows whose logits are asked for: from row `from` on (one sequence), or
    /// each sequence's last row.
    fn last_rows(
        &self,
        h: &Tensor,
        seqs: &[Sequence<'_>],
        n_rows: usize,
        from: Option<usize>,
    ) -> Result<Tensor> {
        Ok(if let Some(from) = from {
            h.narrow(1, from, n_rows - from)?
        } else if seqs.len() == 1 {
            h.narrow(1, n_rows - 1, 1)?
        } else {
            let mut ends = Vec::with_capacity(seqs.len());
            let mut end = 0u32;
            for s in seqs.iter() {
                end += s.tokens.len() as u32;
                ends.push(end - 1);
            }
            h.index_select(&Tensor::new(ends.as_slice(), &self.device)?, 1)?
        })
    }

    fn heads(&self) -> Heads {
        Heads {
            n_head: self.cfg.n_head,
            n_kv_head: self.cfg.n_kv_head,
            head_dim: self.cfg.head_dim(),
        }
    }

    /// Attention of layer `layer` for sequences of any length, each in turn: RoPE, the cache
    /// write and [`attention::attend`] with a causal mask per sequence (a GPU forward that
    /// holds a prefill chunk). Returns `(1, rows, n_head * head_dim)`.
    fn attend_chunks(
        &self,
        layer: usize,
        [q, k, v]: [Tensor; 3],
        seqs: &[Sequence<'_>],
        rope: &Rope,
        masks: &[Option<Tensor>],
    ) -> candle_core::Result<Tensor> {
        let mut ys = Vec::with_capacity(seqs.len());
        let mut row = 0;
        for (s, mask) in seqs.iter().zip(masks) {
            let (n, pos) = (s.tokens.len(), s.cache.len());
            let heads = |t: &Tensor| -> candle_core::Result<Tensor> {
                t.narrow(1, row, n)?.transpose(1, 2)?.contiguous()
            };
            let q = rope.apply(&heads(&q)?, pos)?;
            let k = rope.apply(&heads(&k)?, pos)?;
            let (k, v) = s.cache.append(layer, &k, &heads(&v)?)?;
            ys.push(attention::attend(&q, &k, &v, mask.as_ref(), self.heads())?);
            row += n;
        }
        rows_of(ys)
    }

    /// Attention of layer `layer` with every row rotated at once: one RoPE op for all the
    /// queries and one for all the keys (`rows`, from [`Rope::rows`]), then per sequence
    /// only the cache write. On the CPU one kernel call attends for every row of every
    /// sequence; elsewhere (a decode batch) [`attention::attend`] runs per sequence.
    /// Returns `(1, rows, n_head * head_dim)`.
    fn attend_rows(
        &self,
        layer: usize,
        [q, k, v]: [Tensor; 3],
        seqs: &[Sequence<'_>],
        rope: &Rope,
        rows: &[Tensor; 2],
    ) -> candle_core::Result<Tensor> {
        let heads = self.heads();
        let b = q.dim(1)?;
        // (1, rows, heads, hd) -> (rows, heads, 1, hd): the same memory, contiguous as it is.
        let by_row = |t: &Tensor, h: usize| -> candle_core::Result<Tensor> {
            t.reshape((b, 1, h, heads.head_dim))?.transpose(1, 2)
        };
        let q = rope.apply_rows(&by_row(&q, heads.n_head)?, rows)?;
        let k = rope.apply_rows(&by_row(&k, heads.n_kv_head)?, rows)?;
        let v = by_row(&v, heads.n_kv_head)?.contiguous()?;
        // A sequence's rows `row..row + n` as the cache takes them, `(1, n_kv_head, n, hd)`.
        let for_cache = |t: &Tensor, row: usize, n: usize| -> candle_core::Result<Tensor> {
            let t = t.narrow(0, row, n)?;
            if n == 1 {
                return Ok(t);
            }
            t.reshape((1, n, heads.n_kv_head, heads.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        if self.device.is_cpu() {
            let mut cached = Vec::with_capacity(seqs.len());
            let mut row = 0;
            for s in seqs {
                let n = s.tokens.len();
                let (kc, vc) =
                    s.cache
                        .write(layer, &for_cache(&k, row, n)?, &for_cache(&v, row, n)?)?;
                cached.push(CachedSequence {
                    k: kc,
                    v: vc,
                    len: s.cache.len() + n,
                    queries: n,
                });
                row += n;
            }
            return attention::attend_cpu(&q, &cached, heads);
        }
        let mut ys = Vec::with_capacity(b);
        for (j, s) in seqs.iter().enumerate() {
            let (kc, vc) = s
                .cache
                .append(layer, &k.narrow(0, j, 1)?, &v.narrow(0, j, 1)?)?;
            ys.push(attention::attend(
                &q.narrow(0, j, 1)?,
                &kc,
                &vc,
                None,
                heads,
            )?);
        }
        rows_of(ys)
    }
}

/// Per-sequence outputs `(1, n_j, width)` stacked as the rows of one `(1, sum n_j, width)`.
fn rows_of(mut ys: Vec<Tensor>) -> candle_core::Result<Tensor> {
    if ys.len() == 1 {
        Ok(ys.swap_remove(0))
    } else {
        Tensor::cat(&ys, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::builtin::BuiltinSpec;

    #[test]
    fn llama3_scaling_keeps_high_and_divides_low_frequencies() {
        let mut cfg = BuiltinSpec::default().config;
        cfg.rope_theta = 500_000.0;
        let plain = rope_frequencies(&cfg);
        cfg.rope_scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        };
        let scaled = rope_frequencies(&cfg);
        // Wavelength below 8192/4 tokens: unchanged; above 8192: divided by the factor.
        for (p, s) in plain.iter().zip(&scaled) {
            let wavelen = 2.0 * std::f32::consts::PI / p;
            if wavelen < 2048.0 {
                assert_eq!(p, s);
            } else if wavelen > 8192.0 {
                assert!((s - p / 8.0).abs() <= 1e-12_f32.max(p * 1e-6), "{p} {s}");
            } else {
                assert!(*s < *p && *s > p / 8.0, "{p} {s}");
            }
        }
        cfg.rope_scaling = RopeScaling::Linear { factor: 4.0 };
        let lin = rope_frequencies(&cfg);
        assert!(plain
            .iter()
            .zip(&lin)
            .all(|(p, l)| (p / 4.0 - l).abs() <= p * 1e-6));
    }
}
