//! Per-slot KV caches over one shared model: chunked prefill, single-token
//! decode, erase, and KV state save/restore.
//!
//! One compute thread owns a [`Slots`] value; every method takes `&mut self`
//! or `&self` and runs to completion on the calling thread, reporting
//! progress through a [`StepObserver`] or a byte-progress callback.

use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{EngineError, Result};
use crate::kv_state;
use candle_core::Device;

use crate::model::kv_cache::KvCache;
use crate::model::transformer::{Rope, Sequence};
use crate::model::{LayerHook, Model};
use crate::threads::{PoolChooser, PoolUse};

/// Next-token scores over the vocabulary (f32, unnormalised).
///
/// The buffer is shared: the slot keeps the scores of its last step (they are part of its
/// saved state) and hands the same buffer to the caller, so a decode step copies the
/// vocabulary-sized vector once (out of the tensor), not twice. Cloning is a refcount.
#[derive(Debug, Clone, PartialEq)]
pub struct Logits(std::sync::Arc<[f32]>);

impl From<Vec<f32>> for Logits {
    fn from(v: Vec<f32>) -> Self {
        Self(v.into())
    }
}

impl Logits {
    /// The scores, indexed by token id.
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    /// The scores as a vector (a copy).
    pub fn to_vec(&self) -> Vec<f32> {
        self.0.to_vec()
    }

    /// The highest-scoring token (lowest id among ties; NaN never wins).
    pub fn argmax(&self) -> u32 {
        let mut best = (0u32, f32::NEG_INFINITY);
        for (i, &v) in self.0.iter().enumerate() {
            if v > best.1 {
                best = (i as u32, v);
            }
        }
        best.0
    }
}

/// Sent to [`StepObserver::before_step`] just before a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepStart {
    /// The slot.
    pub slot: usize,
    /// Tokens this step will process.
    pub n_tokens: usize,
    /// Tokens of this call done before this step.
    pub done: usize,
    /// Tokens this call will process in all (for generation: `n_predict`).
    pub total: usize,
    /// The slot's n_past before this step.
    pub n_past: usize,
}

impl StepStart {
    /// What this step reports once committed: its tokens done, the slot holding `n_past`,
    /// and for generation the token it accepted.
    pub fn finished(&self, n_past: usize, token: Option<u32>) -> StepDone {
        StepDone {
            slot: self.slot,
            n_tokens: self.n_tokens,
            done: self.done + self.n_tokens,
            total: self.total,
            n_past,
            token,
        }
    }
}

/// Sent to [`StepObserver::after_step`] once a step is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepDone {
    /// The slot.
    pub slot: usize,
    /// Tokens this step processed.
    pub n_tokens: usize,
    /// Tokens of this call done so far, this step included.
    pub done: usize,
    /// Tokens this call will process in all (for generation: `n_predict`).
    pub total: usize,
    /// The slot's n_past after this step.
    pub n_past: usize,
    /// For generation: the token this step accepted.
    pub token: Option<u32>,
}

/// Watches a multi-step operation; either method can return
/// `ControlFlow::Break(())` to stop it (see [`Slots::prefill`] for what is kept).
pub trait StepObserver {
    /// Called before each step's forward pass.
    fn before_step(&mut self, _step: &StepStart) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// Called after each step is committed to the slot.
    fn after_step(&mut self, _step: &StepDone) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
    /// Called inside a step's forward after each transformer layer of `slot` is issued
    /// on `device` (see [`LayerHook`] for what that means on an asynchronous device).
    /// `Break` stops the forward at this layer boundary when every slot of the forward
    /// asks it (a batched decode step runs on for the others): the step then ends as a
    /// break of `before_step` would, with the slot as it was before the step.
    fn layer_done(
        &mut self,
        _slot: usize,
        _device: &Device,
        _layers_done: usize,
        _n_layers: usize,
    ) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Hands a forward's per-layer calls to a step observer, once for every slot the forward
/// runs (a batched decode step is a step of each of its slots).
struct SlotLayers<'a, O: ?Sized> {
    slots: &'a [usize],
    observer: &'a mut O,
}

impl<O: StepObserver + ?Sized> LayerHook for SlotLayers<'_, O> {
    /// Every slot hears the layer; the forward stops only when all of them ask it.
    fn layer_done(
        &mut self,
        device: &Device,
        layers_done: usize,
        n_layers: usize,
    ) -> ControlFlow<()> {
        let mut all_stop = !self.slots.is_empty();
        for &slot in self.slots {
            let stop = self
                .observer
                .layer_done(slot, device, layers_done, n_layers)
                .is_break();
            all_stop &= stop;
        }
        if all_stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// The observer that watches nothing.
impl StepObserver for () {}

#[derive(Debug)]
struct Slot {
    /// The cache; its length is the slot's n_past.
    cache: KvCache,
    /// Next-token scores after the last token in the cache (None when empty, or cut by
    /// [`Slots::keep_first`]). Kept with the slot, and in its saved state, so a restored
    /// slot can decode at once.
    logits: Option<Logits>,
    /// The tokens the cache holds, in order; None when unknown (a restored state carries
    /// no token ids). What a new prompt can reuse is matched against it.
    tokens: Option<Vec<u32>>,
}

impl Slot {
    fn empty(n_layer: usize) -> Self {
        Self {
            cache: KvCache::new(n_layer),
            logits: None,
            tokens: Some(Vec::new()),
        }
    }

    fn n_past(&self) -> usize {
        self.cache.len()
    }
}

/// A slot index checked against the engine's slot count ([`SlotId::new`], the one home of
/// that bound): whoever holds one never checks the bound again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(usize);

impl SlotId {
    /// `slot`, when it is one of `n_slots` slots.
    pub fn new(slot: usize, n_slots: usize) -> Result<Self> {
        if slot < n_slots {
            Ok(Self(slot))
        } else {
            Err(EngineError::NoSuchSlot { slot, n_slots })
        }
    }

    /// Every one of `n_slots` slots, in order.
    pub fn all(n_slots: usize) -> impl Iterator<Item = Self> {
        (0..n_slots).map(Self)
    }

    /// The index.
    pub fn get(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for SlotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// N slots, each with its own KV cache and n_past, sharing one model.
#[derive(Debug)]
pub struct Slots {
    model: Arc<Model>,
    rope: Rope,
    n_ctx: usize,
    slots: Vec<Slot>,
    /// Whether each step's kernels use the thread pool ([`crate::threads::pool_use`]).
    pool: PoolChooser,
}

impl Slots {
    /// `n_slots` empty slots of `n_ctx` tokens each (`n_ctx = 0`: the
    /// model's training context). KV memory grows with use, in blocks (see
    /// `model/kv_cache.rs`): each cached token costs
    /// [`crate::LlamaConfig::kv_bytes_per_token`] bytes, and a slot's buffers hold at most
    /// twice what it has cached (at least 256 tokens' worth once used).
    pub fn new(model: Arc<Model>, n_slots: usize, n_ctx: usize) -> Result<Self> {
        let cfg = model.config();
        let n_ctx = if n_ctx == 0 { cfg.n_ctx_train } else { n_ctx };
        if n_slots == 0 {
            return Err(EngineError::InvalidOption {
                name: "n_slots",
                message: "need at least one slot".into(),
            });
        }
        if n_ctx > cfg.n_ctx_train {
            tracing::warn!(
                n_ctx,
                n_ctx_train = cfg.n_ctx_train,
                "context is longer than the model was trained for"
            );
        }
        let rope = Rope::new(cfg, n_ctx, model.weights.device())?;
        let slots = (0..n_slots).map(|_| Slot::empty(cfg.n_layer)).collect();
        Ok(Self {
            model,
            rope,
            n_ctx,
            slots,
            pool: PoolChooser::new(PoolUse::default()),
        })
    }

    /// How decode steps use the thread pool (default: [`PoolUse::Adaptive`]).
    pub fn set_pool_use(&mut self, policy: PoolUse) {
        self.pool = PoolChooser::new(policy);
    }

    /// How decode steps use the thread pool.
    pub fn pool_use(&self) -> PoolUse {
        self.pool.policy()
    }

    /// The shared model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Number of slots.
    pub fn n_slots(&self) -> usize {
        self.slots.len()
    }

    /// Context size of every slot, in tokens.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// `slot`, when it is one of these slots: the one check of the bound, made where a
    /// slot is named; every other call takes the [`SlotId`] and cannot fail on it.
    pub fn id(&self, slot: usize) -> Result<SlotId> {
        SlotId::new(slot, self.slots.len())
    }

    /// Every slot, in order.
    pub fn ids(&self) -> impl Iterator<Item = SlotId> {
        SlotId::all(self.slots.len())
    }

    fn slot(&self, slot: SlotId) -> &Slot {
        &self.slots[slot.get()]
    }

    /// Tokens cached in `slot`.
    pub fn n_past(&self, slot: SlotId) -> usize {
        self.slot(slot).n_past()
    }

    /// Whether `slot` holds nothing (decoding needs a prefill first).
    pub fn is_empty(&self, slot: SlotId) -> bool {
        self.slot(slot).n_past() == 0
    }

    /// Tokens cached across all slots.
    pub fn kv_cells_used(&self) -> usize {
        self.slots.iter().map(Slot::n_past).sum()
    }

    /// The tokens `slot` holds, in order; None when unknown (after a restore).
    pub fn cached_tokens(&self, slot: SlotId) -> Option<&[u32]> {
        self.slot(slot).tokens.as_deref()
    }

    /// How many of `prompt`'s first tokens `slot` already holds, in order (0 when what it
    /// holds is unknown).
    pub fn common_prefix(&self, slot: SlotId, prompt: &[u32]) -> usize {
        self.cached_tokens(slot).map_or(0, |held| {
            held.iter().zip(prompt).take_while(|(a, b)| a == b).count()
        })
    }

    /// Keep only the first `n` tokens of `slot` (all when it holds fewer), as a prompt
    /// that shares them goes on from there; the scores after the last kept token are not
    /// known, so the slot needs a prefill before it can decode. `n = 0` erases it.
    pub fn keep_first(&mut self, slot: SlotId, n: usize) {
        if n == 0 {
            return self.erase(slot);
        }
        let s = &mut self.slots[slot.get()];
        if n >= s.n_past() {
            return;
        }
        s.cache.truncate(n);
        s.logits = None;
        if let Some(t) = s.tokens.as_mut() {
            t.truncate(n);
        }
    }

    /// Drop everything `slot` holds.
    pub fn erase(&mut self, slot: SlotId) {
        self.slots[slot.get()] = Slot::empty(self.model.config().n_layer);
    }

    fn check_fits(&self, slot: SlotId, n_new: usize) -> Result<()> {
        let n_past = self.slot(slot).n_past();
        if n_past + n_new > self.n_ctx {
            return Err(EngineError::ContextOverflow {
                slot: slot.get(),
                n_past,
                n_new,
                n_ctx: self.n_ctx,
            });
        }
        Ok(())
    }

    /// Run `tokens` through the model in chunks of at most `ubatch` tokens,
    /// appending them to `slot` after whatever it already holds, and return
    /// the logits after the last token.
    ///
    /// Everything is checked before any work ([`Slots::check_prefill`]).
    ///
    /// The observer hears `before_step` before each chunk and `after_step`
    /// once the chunk is in the cache, and each layer of its forward. If it breaks, the
    /// call returns [`EngineError::Cancelled`] and **the chunks already done stay in the
    /// slot** (n_past counts them); erase the slot to start over. A break at a layer
    /// boundary abandons the chunk in flight, and a failing forward leaves the slot as it
    /// was before that chunk.
    pub fn prefill<O: StepObserver + ?Sized>(
        &mut self,
        slot: SlotId,
        tokens: &[u32],
        ubatch: usize,
        observer: &mut O,
    ) -> Result<Logits> {
        self.check_prefill(slot, tokens, ubatch)?;
        let start = Instant::now();
        let total = tokens.len();
        let mut done = 0;
        let mut last = None;
        for chunk in tokens.chunks(ubatch) {
            last = Some(self.prefill_chunk(slot, chunk, done, total, observer)?);
            done += chunk.len();
        }
        let secs = start.elapsed().as_secs_f64();
        tracing::debug!(
            slot = slot.get(),
            n_tokens = total,
            ubatch,
            tokens_per_s = total as f64 / secs.max(1e-9),
            "prefill done"
        );
        // `tokens` is not empty, so at least one chunk ran.
        last.ok_or(EngineError::EmptyPrompt)
    }

    /// What [`Slots::prefill`] checks before any work: `tokens` is not empty, every id is
    /// in the vocabulary, `ubatch >= 1`, and the tokens fit in the context.
    pub fn check_prefill(&self, slot: SlotId, tokens: &[u32], ubatch: usize) -> Result<()> {
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if ubatch == 0 {
            return Err(EngineError::InvalidOption {
                name: "ubatch",
                message: "must be at least 1".into(),
            });
        }
        self.model.check_tokens(tokens)?;
        self.check_fits(slot, tokens.len())
    }

    /// One chunk of a prefill that [`Slots::check_prefill`] accepted: `done` of its `total`
    /// tokens are already in the slot. The observer hears `before_step`, each layer, and
    /// `after_step`; a break is [`EngineError::Cancelled`] (what is done stays).
    pub fn prefill_chunk<O: StepObserver + ?Sized>(
        &mut self,
        slot: SlotId,
        chunk: &[u32],
        done: usize,
        total: usize,
        observer: &mut O,
    ) -> Result<Logits> {
        self.check_fits(slot, chunk.len())?;
        let n_past = self.slot(slot).n_past();
        let step = StepStart {
            slot: slot.get(),
            n_tokens: chunk.len(),
            done,
            total,
            n_past,
        };
        let cancelled = |done, n_past| EngineError::Cancelled {
            slot: slot.get(),
            done,
            n_past,
        };
        if observer.before_step(&step).is_break() {
            return Err(cancelled(done, n_past));
        }
        let logits = match self.forward(&[(slot.get(), chunk)], observer) {
            Err(EngineError::Interrupted { .. }) => return Err(cancelled(done, n_past)),
            r => r?.swap_remove(0),
        };
        let step = step.finished(self.slot(slot).n_past(), None);
        if observer.after_step(&step).is_break() {
            return Err(cancelled(step.done, step.n_past));
        }
        Ok(logits)
    }

    /// Append one token to `slot` (which must already hold something) and
    /// return the logits for the next one.
    pub fn decode_step(&mut self, slot: SlotId, token: u32) -> Result<Logits> {
        self.decode_step_observed(slot, token, &mut ())
    }

    /// [`Slots::decode_step`], with `observer` hearing each layer of the forward
    /// ([`StepObserver::layer_done`]; the step's own before/after calls are the caller's).
    pub fn decode_step_observed<O: StepObserver + ?Sized>(
        &mut self,
        slot: SlotId,
        token: u32,
        observer: &mut O,
    ) -> Result<Logits> {
        Ok(self
            .decode_batch(&[(slot, token)], observer)?
            .swap_remove(0))
    }

    /// One decode step for several slots in one forward: each `(slot, token)` appends
    /// `token` to `slot`, and the logits for each slot's next token come back in the same
    /// order. The weight matmuls run once over all the tokens; attention runs per slot
    /// against its own cache. `observer` hears every layer once for each slot (the step's
    /// own before/after calls are the caller's).
    ///
    /// Checked before any work: the slots are distinct and hold something, the tokens are
    /// in the vocabulary and fit. A failing forward leaves every slot as it was.
    pub fn decode_batch<O: StepObserver + ?Sized>(
        &mut self,
        steps: &[(SlotId, u32)],
        observer: &mut O,
    ) -> Result<Vec<Logits>> {
        for (i, &(slot, token)) in steps.iter().enumerate() {
            if self.is_empty(slot) {
                return Err(EngineError::EmptySlot { slot: slot.get() });
            }
            if steps[..i].iter().any(|&(s, _)| s == slot) {
                return Err(EngineError::InvalidOption {
                    name: "slot",
                    message: format!("slot {slot} appears twice in one decode step"),
                });
            }
            self.model.check_tokens(&[token])?;
            self.check_fits(slot, 1)?;
        }
        let seqs: Vec<(usize, &[u32])> = steps
            .iter()
            .map(|(slot, token)| (slot.get(), std::slice::from_ref(token)))
            .collect();
        self.forward(&seqs, observer)
    }

    /// One forward over checked, distinct slots and their tokens; the logits after each
    /// slot's last token, in order. A failing forward leaves every slot as it was.
    fn forward<O: StepObserver + ?Sized>(
        &mut self,
        seqs: &[(usize, &[u32])],
        observer: &mut O,
    ) -> Result<Vec<Logits>> {
        let ids: Vec<usize> = seqs.iter().map(|(slot, _)| *slot).collect();
        let mut by_slot: Vec<Option<&mut Slot>> = self.slots.iter_mut().map(Some).collect();
        let mut picked = Vec::with_capacity(seqs.len());
        for &(slot, tokens) in seqs {
            let s =
                by_slot
                    .get_mut(slot)
                    .and_then(Option::take)
                    .ok_or(EngineError::InvalidOption {
                        name: "slot",
                        message: format!("slot {slot} is missing or appears twice in one forward"),
                    })?;
            picked.push((s, tokens));
        }
        let mut batch: Vec<Sequence<'_>> = Vec::with_capacity(picked.len());
        let mut logits_of = Vec::with_capacity(picked.len());
        let mut records = Vec::with_capacity(picked.len());
        for (s, tokens) in picked {
            let Slot {
                cache,
                logits,
                tokens: record,
            } = s;
            batch.push(Sequence { tokens, cache });
            logits_of.push(logits);
            records.push((record, tokens));
        }
        let mut hook = SlotLayers {
            slots: &ids,
            observer,
        };
        let n_rows = seqs.iter().map(|(_, tokens)| tokens.len()).sum();
        let use_pool = self.pool.plan(n_rows);
        let started = Instant::now();
        let (weights, rope) = (&self.model.weights, &self.rope);
        let rows = crate::threads::with_pool(use_pool, || -> Result<Vec<Vec<f32>>> {
            Ok(weights
                .forward(&mut batch, rope, &mut hook)?
                .to_vec2::<f32>()?)
        })?;
        self.pool.record(started.elapsed());
        for (record, tokens) in records {
            if let Some(r) = record.as_mut() {
                r.extend_from_slice(tokens);
            }
        }
        Ok(rows
            .into_iter()
            .zip(logits_of)
            .map(|(row, slot_logits)| {
                let l = Logits::from(row);
                *slot_logits = Some(l.clone());
                l
            })
            .collect())
    }

    /// Append `chunk` to `slot` in one forward, as [`Slots::prefill_chunk`] does without an
    /// observer, and return the next-token logits after each of its tokens from `from` on
    /// (`chunk.len() - from` of them; `from < chunk.len()`), what a perplexity scores.
    pub fn prefill_scored(
        &mut self,
        slot: SlotId,
        chunk: &[u32],
        from: usize,
    ) -> Result<Vec<Logits>> {
        self.check_prefill(slot, chunk, chunk.len())?;
        let use_pool = self.pool.plan(chunk.len());
        let started = Instant::now();
        let (weights, rope) = (&self.model.weights, &self.rope);
        let Slot {
            cache,
            logits,
            tokens,
        } = &mut self.slots[slot.get()];
        let mut seq = Sequence {
            tokens: chunk,
            cache,
        };
        let rows = crate::threads::with_pool(use_pool, || -> Result<Vec<Vec<f32>>> {
            Ok(weights
                .forward_from(&mut seq, rope, &mut (), from)?
                .to_vec2::<f32>()?)
        })?;
        self.pool.record(started.elapsed());
        let rows: Vec<Logits> = rows.into_iter().map(Logits::from).collect();
        *logits = rows.last().cloned();
        if let Some(t) = tokens.as_mut() {
            t.extend_from_slice(chunk);
        }
        Ok(rows)
    }

    /// The next-token scores after the last token `slot` holds (None when it is empty).
    /// A restored slot has them too: they are part of its saved state.
    pub fn last_logits(&self, slot: SlotId) -> Option<&Logits> {
        self.slot(slot).logits.as_ref()
    }

    /// Exact size in bytes of [`Slots::save_state`]'s output for `slot` now.
    pub fn state_size(&self, slot: SlotId) -> u64 {
        kv_state::state_size(self.model.config(), self.slot(slot).n_past())
    }

    /// Write `slot`'s KV state to `w` (format: [`crate::kv_state`]), calling
    /// `progress(bytes_done, bytes_total)` as it goes. Returns the bytes written.
    pub fn save_state<W: Write + ?Sized>(
        &self,
        slot: SlotId,
        w: &mut W,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u64> {
        let s = self.slot(slot);
        kv_state::save(
            self.model.config(),
            self.model.info().fingerprint,
            &s.cache,
            s.logits.as_ref().map(Logits::as_slice),
            w,
            progress,
        )
    }

    /// Replace `slot`'s contents with a state read from `r`, whose length is
    /// `total_len` bytes, calling `progress(bytes_done, bytes_total)` as it goes.
    ///
    /// A state from another model, of another version, longer than the
    /// context, truncated or corrupt is refused with
    /// [`EngineError::State`]; the slot is only changed once the whole
    /// state has been read and verified.
    pub fn restore_state<R: Read + ?Sized>(
        &mut self,
        slot: SlotId,
        r: &mut R,
        total_len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let (cache, logits) = kv_state::restore(
            self.model.config(),
            self.model.info().fingerprint,
            self.n_ctx,
            self.model.weights.device(),
            r,
            total_len,
            progress,
        )?;
        self.slots[slot.get()] = Slot {
            cache,
            logits: logits.map(Logits::from),
            tokens: None,
        };
        Ok(())
    }
}

/// An observer built from two closures.
pub struct FnObserver<B, A> {
    /// Called before each step.
    pub before: B,
    /// Called after each step.
    pub after: A,
}

impl<B, A> StepObserver for FnObserver<B, A>
where
    B: FnMut(&StepStart) -> ControlFlow<()>,
    A: FnMut(&StepDone) -> ControlFlow<()>,
{
    fn before_step(&mut self, step: &StepStart) -> ControlFlow<()> {
        (self.before)(step)
    }
    fn after_step(&mut self, step: &StepDone) -> ControlFlow<()> {
        (self.after)(step)
    }
}
