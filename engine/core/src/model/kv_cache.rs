//! One slot's KV cache: for each layer, a K and a V buffer of
//! `(1, n_kv_head, capacity, head_dim)` f32, written in place at the slot's next positions.
//!
//! A forward writes its new keys and values into the buffers with `slice_set` and attends
//! over a narrowed view of the filled part: nothing is copied per chunk or per token.
//!
//! Memory: capacity grows in blocks, to at least double the previous one (at least
//! [`MIN_CAPACITY`] tokens), never beyond the slot's context. An idle slot holds nothing,
//! so `--slots 4 --ctx 8192` on a big model costs only what the slots actually hold (at
//! most twice that); a 4,000-token prompt is copied into a larger buffer about
//! log2(4000 / 256) = 4 times in all, never per chunk.
//!
//! The tokens held ([`KvCache::len`]) only move when a whole forward has succeeded
//! ([`KvCache::commit`]): a forward that fails part way may have written some layers past
//! the end, which the next forward overwrites, so the cache stays as it was.

use candle_core::{DType, Device, Tensor};

use crate::model::config::LlamaConfig;

/// The smallest capacity a cache grows to, in tokens.
pub(crate) const MIN_CAPACITY: usize = 256;

/// The cached keys and values of one slot, every layer. Not `Clone`: a clone would share
/// the buffers that forwards write in place.
#[derive(Debug)]
pub(crate) struct KvCache {
    /// Per layer: K and V buffers, `(1, n_kv_head, capacity, head_dim)`; empty before first use.
    layers: Vec<(Tensor, Tensor)>,
    n_layer: usize,
    capacity: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache for `n_layer` layers; allocates nothing.
    pub(crate) fn new(n_layer: usize) -> Self {
        Self {
            layers: Vec::new(),
            n_layer,
            capacity: 0,
            len: 0,
        }
    }

    /// A cache holding `len` tokens given as per-layer K and V of
    /// `(1, n_kv_head, len, head_dim)` (a restored state): the tensors become the buffers.
    pub(crate) fn from_layers(layers: Vec<(Tensor, Tensor)>, len: usize) -> Self {
        let n_layer = layers.len();
        if len == 0 {
            return Self::new(n_layer);
        }
        Self {
            layers,
            n_layer,
            capacity: len,
            len,
        }
    }

    /// Tokens held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Layers.
    pub(crate) fn n_layer(&self) -> usize {
        self.n_layer
    }

    /// Tokens the buffers hold room for (0 before first use).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Makes room for `total` tokens (`total <= n_ctx`), growing the buffers by the rule in
    /// the module documentation and copying what they hold once.
    pub(crate) fn reserve(
        &mut self,
        total: usize,
        n_ctx: usize,
        cfg: &LlamaConfig,
        device: &Device,
    ) -> candle_core::Result<()> {
        if total <= self.capacity {
            return Ok(());
        }
        let capacity = total
            .max(self.capacity * 2)
            .max(MIN_CAPACITY)
            .min(n_ctx.max(total));
        let shape = (1, cfg.n_kv_head, capacity, cfg.head_dim());
        let mut layers = Vec::with_capacity(self.n_layer);
        for i in 0..self.n_layer {
            let k = Tensor::zeros(shape, DType::F32, device)?;
            let v = Tensor::zeros(shape, DType::F32, device)?;
            if let Some((old_k, old_v)) = self.layers.get(i) {
                k.slice_set(old_k, 2, 0)?;
                v.slice_set(old_v, 2, 0)?;
            }
            layers.push((k, v));
        }
        self.layers = layers;
        self.capacity = capacity;
        Ok(())
    }

    /// Writes `k` and `v` (`(1, n_kv_head, n, head_dim)`, contiguous) of `layer` at the
    /// positions after those held, and returns the views of that layer's keys and values
    /// up to and including them. [`KvCache::reserve`] must have made room.
    pub(crate) fn append(
        &self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let (kc, vc) = self.write(layer, k, v)?;
        let n = self.len + k.dim(2)?;
        Ok((kc.narrow(2, 0, n)?, vc.narrow(2, 0, n)?))
    }

    /// Writes `k` and `v` as [`KvCache::append`] does and returns that layer's whole
    /// buffers, `(1, n_kv_head, capacity, head_dim)`, of which the first `len() + n`
    /// positions are now filled.
    pub(crate) fn write(
        &self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(&Tensor, &Tensor)> {
        let (kc, vc) = self
            .layers
            .get(layer)
            .ok_or_else(|| candle_core::Error::Msg(format!("no KV buffer for layer {layer}")))?;
        kc.slice_set(k, 2, self.len)?;
        vc.slice_set(v, 2, self.len)?;
        Ok((kc, vc))
    }

    /// Keep the first `n` tokens (all when fewer are held); the buffers stay, the next
    /// forward writes over what follows.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// The `n` tokens the last forward appended are now part of the cache.
    pub(crate) fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// The held keys and values of `layer`, `(1, n_kv_head, len, head_dim)` views (None
    /// while the cache is empty).
    pub(crate) fn layer(&self, layer: usize) -> Option<(Tensor, Tensor)> {
        if self.len == 0 {
            return None;
        }
        let (k, v) = self.layers.get(layer)?;
        Some((
            k.narrow(2, 0, self.len).ok()?,
            v.narrow(2, 0, self.len).ok()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::builtin::BuiltinSpec;
    use crate::model::max_abs_diff;

    fn filled(cfg: &LlamaConfig, n: usize, base: f32) -> Tensor {
        let count = cfg.n_kv_head * n * cfg.head_dim();
        let vals: Vec<f32> = (0..count).map(|i| base + i as f32).collect();
        Tensor::from_vec(vals, (1, cfg.n_kv_head, n, cfg.head_dim()), &Device::Cpu).unwrap()
    }

    #[test]
    fn grows_in_blocks_and_keeps_what_it_holds() {
        let cfg = BuiltinSpec::default().config;
        let dev = Device::Cpu;
        let mut c = KvCache::new(1);
        assert_eq!(c.capacity(), 0, "nothing allocated before first use");
        assert!(c.layer(0).is_none());
        c.reserve(3, 1000, &cfg, &dev).unwrap();
        assert_eq!(c.capacity(), MIN_CAPACITY);
        let a = filled(&cfg, 3, 0.0);
        c.append(0, &a, &a).unwrap();
        c.commit(3);
        c.reserve(300, 1000, &cfg, &dev).unwrap();
        assert_eq!(c.capacity(), 2 * MIN_CAPACITY, "doubles");
        let b = filled(&cfg, 297, 1e6);
        let (k, _) = c.append(0, &b, &b).unwrap();
        c.commit(297);
        assert_eq!(k.dims()[2], 300);
        let want = Tensor::cat(&[&a, &b], 2).unwrap();
        let (k, v) = c.layer(0).unwrap();
        assert_eq!(max_abs_diff(&k, &want), 0.0);
        assert_eq!(max_abs_diff(&v, &want), 0.0);
        c.reserve(999, 1000, &cfg, &dev).unwrap();
        assert_eq!(c.capacity(), 1000, "never beyond the context");
    }

    #[test]
    fn an_uncommitted_append_leaves_the_length() {
        let cfg = BuiltinSpec::default().config;
        let mut c = KvCache::new(2);
        c.reserve(4, 64, &cfg, &Device::Cpu).unwrap();
        let a = filled(&cfg, 4, 0.0);
        c.append(0, &a, &a).unwrap();
        assert_eq!(c.len(), 0);
        assert!(c.layer(1).is_none());
    }
}
