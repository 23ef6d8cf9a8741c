//! Everything the compute thread publishes: a mirror of each slot's record that is
//! mutated and then published whole (seqlock), the loop heartbeat and the engine-wide
//! counters. The clock is read once per event, not per field.
//!
//! After every transformer layer of a forward the slot's layer position (format v1.1) is
//! published too, through a [`DeviceLayerSignal`]: at once on the CPU, from a host
//! callback on the compute stream on CUDA.
//!
//! Each step start is published with the cost model's prediction for it (format v1.2,
//! `hydra_layout::forecast`): the step's duration and the end of the phase's work, learnt
//! from the steps that finished; steps cut short by a task's end are not learnt.
//!
//! With publishing off (`--no-publish`, for the overhead benchmark only) every method
//! returns at once.
//!
//! [`segment`] creates the segment (the engine's description and capabilities) and reads
//! it back for the front end ([`segment::Shared`]).

pub mod learnt;
pub mod segment;

use crate::layer_signal::{DeviceLayerSignal, LayerMark};
use candle_core::Device;
use hydra_engine_core::kv_state;
use hydra_engine_core::model::config::LlamaConfig;
use hydra_engine_core::slots::{StepDone, StepObserver, StepStart};
use hydra_layout::{
    clock, ErrorCode, FinishCause, Forecaster, Phase, PhaseEnd, SegmentWriter, SlotState, WorkUnit,
    WriterCounters,
};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

/// Which engine-wide token counter a step adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Prompt tokens (prefill).
    Prompt,
    /// Generated tokens (decode).
    Generated,
}

/// The compute thread's publisher.
pub struct Progress {
    writer: Option<SegmentWriter>,
    slots: Vec<SlotState>,
    counters: WriterCounters,
    config: LlamaConfig,
    /// Publishes layer positions (None with publishing off).
    layers: Option<DeviceLayerSignal>,
    /// The cost model of this engine's steps and the shapes of the steps in flight.
    forecast: Forecaster,
    /// Where the cost model is kept between runs, and when it was last saved.
    learnt: Option<(learnt::LearntStore, Option<std::time::Instant>)>,
    /// Test builds only: the layer at which to stop the compute thread once.
    #[cfg(feature = "fault-injection")]
    stall: fault::StallAtLayer,
    /// Test builds only: a pause after each block of a save or restore.
    #[cfg(feature = "fault-injection")]
    block_delay: fault::BlockDelay,
}

impl Progress {
    /// A publisher over `writer` (None: publishing off) for slots of `n_ctx` tokens.
    pub fn new(
        writer: Option<SegmentWriter>,
        n_slots: usize,
        n_ctx: usize,
        config: LlamaConfig,
    ) -> Self {
        let empty = kv_state::state_size(&config, 0);
        let slots = vec![
            SlotState {
                n_ctx: n_ctx as u64,
                state_size: empty,
                ..Default::default()
            };
            n_slots
        ];
        let layers = writer
            .as_ref()
            .map(|w| DeviceLayerSignal::new(w.substep_publisher()));
        let mut p = Self {
            layers,
            forecast: Forecaster::new(n_slots, PhaseEnd::Predict),
            learnt: None,
            #[cfg(feature = "fault-injection")]
            stall: fault::StallAtLayer::from_env(),
            #[cfg(feature = "fault-injection")]
            block_delay: fault::BlockDelay::from_env(),
            writer,
            slots,
            counters: WriterCounters {
                kv_cells_total: (n_slots * n_ctx) as u64,
                ..Default::default()
            },
            config,
        };
        if p.writer.is_some() {
            for slot in 0..n_slots {
                p.publish(slot);
            }
            p.publish_counters();
        }
        p
    }

    /// Keeps the cost model in `store` between runs: starts it from what the last run
    /// learnt when the file is this engine's (see [`learnt`]), and saves it at task ends
    /// (at most every [`learnt::SAVE_EVERY`]) and when the engine closes. Only with
    /// publishing on: the model serves the segment's predictions.
    pub fn keep_learnt(&mut self, store: learnt::LearntStore) {
        if !self.enabled() {
            return;
        }
        if let Some(model) = store.load(*self.forecast.model().config()) {
            self.forecast = Forecaster::with_model(self.slots.len(), PhaseEnd::Predict, model);
        }
        self.learnt = Some((store, None));
    }

    /// Saves the cost model, when kept and `force` or [`learnt::SAVE_EVERY`] has passed.
    fn save_learnt(&mut self, force: bool) {
        let Some((store, saved_at)) = self.learnt.as_mut() else {
            return;
        };
        if !force && saved_at.is_some_and(|t| t.elapsed() < learnt::SAVE_EVERY) {
            return;
        }
        if let Err(e) = store.save(self.forecast.model()) {
            tracing::warn!(file = %store.path().display(), "cannot save the cost model: {e}");
        }
        *saved_at = Some(std::time::Instant::now());
    }

    /// Whether publishing is on.
    pub fn enabled(&self) -> bool {
        self.writer.is_some()
    }

    fn publish(&mut self, slot: usize) {
        if let Some(w) = self.writer.as_mut() {
            // The slot index was validated by the caller; an error here is a bug, not input.
            if let Err(e) = w.publish(slot, &self.slots[slot]) {
                tracing::error!("publishing slot {slot}: {e}");
            }
        }
    }

    fn publish_counters(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            w.set_counters(&self.counters);
        }
    }

    /// One pass of the compute loop (also called on every step of a long task).
    pub fn heartbeat(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            w.heartbeat(clock::monotonic_ns());
        }
    }

    /// A task starts on `slot`, in `phase`, with `total` units of `unit` to do; its
    /// request arrived at `arrival_ns` (CLOCK_MONOTONIC; none for a task without a
    /// request), where its queue wait, time to first token and end-to-end time start.
    pub fn begin_task(
        &mut self,
        slot: usize,
        task_id: u64,
        phase: Phase,
        unit: WorkUnit,
        total: u64,
        arrival_ns: Option<u64>,
    ) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        if let Some(arrival_ns) = arrival_ns {
            // The slot index was validated by the caller; an error here is a bug, not input.
            if let Err(e) = w.note_arrival(slot, arrival_ns) {
                tracing::error!("noting slot {slot}'s arrival: {e}");
            }
        }
        self.forecast.step_abandoned(slot);
        let s = &mut self.slots[slot];
        s.begin_task(task_id, phase, unit, total, clock::monotonic_ns());
        // What the slot's cache already held when the task (its first phase) started.
        s.tokens_cached = s.n_past;
        self.counters.requests_running += 1;
        self.publish(slot);
        self.publish_counters();
    }

    /// The running task on `slot` moves to another phase (prefill -> decode). What the
    /// cache holds now is the new phase's `tokens_cached`, so that `n_past ==
    /// tokens_cached + work_done` holds in every prefill and decode phase (layout/FORMAT.md).
    pub fn begin_phase(&mut self, slot: usize, phase: Phase, unit: WorkUnit, total: u64) {
        if !self.enabled() {
            return;
        }
        self.forecast.step_abandoned(slot);
        let s = &mut self.slots[slot];
        s.enter_phase(phase, unit, total, clock::monotonic_ns());
        s.tokens_cached = s.n_past;
        self.publish(slot);
    }

    /// A forward pass of `size` tokens is about to start on `slot`.
    #[inline]
    pub fn step_started(&mut self, slot: usize, size: usize) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let now = clock::monotonic_ns();
        let s = &mut self.slots[slot];
        s.start_step(size as u64, now);
        w.heartbeat(now);
        let published = match self.forecast.step_started(slot, s) {
            Some(prediction) => w.publish_with_prediction(slot, s, &prediction),
            None => w.publish(slot, s),
        };
        if let Err(e) = published {
            tracing::error!("publishing slot {slot}: {e}");
        }
    }

    /// Decode steps of one token each start on the slots of `starts`, computed by one
    /// forward: each slot is published with the forward's prediction, and with an end of
    /// its phase that counts the batch shrinking as the other rows finish
    /// ([`Forecaster::batch_started`]). A batch of one is a step of its own.
    pub fn batch_started(&mut self, starts: &[StepStart]) {
        if let [one] = starts {
            // A forward of its own: the same prediction, without the batch's vectors.
            return self.step_started(one.slot, one.n_tokens);
        }
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let now = clock::monotonic_ns();
        w.heartbeat(now);
        for start in starts {
            self.slots[start.slot].start_step(start.n_tokens as u64, now);
        }
        let rows: Vec<usize> = starts.iter().map(|s| s.slot).collect();
        let predictions = self.forecast.batch_started(&rows, &self.slots);
        for (&slot, prediction) in rows.iter().zip(predictions) {
            let s = &self.slots[slot];
            let published = match prediction {
                Some(p) => w.publish_with_prediction(slot, s, &p),
                None => w.publish(slot, s),
            };
            if let Err(e) = published {
                tracing::error!("publishing slot {slot}: {e}");
            }
        }
    }

    /// A step finished on `slot`: `done` units of the phase are done, the cache holds
    /// `n_past` tokens; `tokens` were evaluated, counted as `kind`.
    #[inline]
    pub fn step_finished(
        &mut self,
        slot: usize,
        done: usize,
        n_past: usize,
        tokens: usize,
        kind: TokenKind,
    ) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let now = clock::monotonic_ns();
        w.heartbeat(now);
        self.slots[slot].finish_step(done as u64, now);
        self.forecast.step_finished(slot, &self.slots[slot]);
        self.record_cache(slot, n_past);
        match kind {
            TokenKind::Prompt => self.counters.prompt_tokens_total += tokens as u64,
            TokenKind::Generated => self.counters.generated_tokens_total += tokens as u64,
        }
        self.publish(slot);
        self.publish_counters();
    }

    /// Layer `done` of the `total` in the forward of `slot`'s step in flight has been
    /// issued on `device`: its position is published when the device has done it.
    #[inline]
    pub fn layer_done(&mut self, slot: usize, device: &Device, done: usize, total: usize) {
        let Some(layers) = self.layers.as_mut() else {
            return;
        };
        let mark = LayerMark {
            slot,
            done: done as u64,
            total: total as u64,
            step_start_ns: self.slots[slot].step_start_ns,
        };
        layers.layer_done(device, mark);
        #[cfg(feature = "fault-injection")]
        self.stall.reached(mark.done);
    }

    /// Byte progress of a state save or restore on `slot`.
    pub fn bytes(&mut self, slot: usize, done: u64, total: u64) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let now = clock::monotonic_ns();
        w.heartbeat(now);
        let s = &mut self.slots[slot];
        s.advance(done, now);
        s.work_total = total;
        self.publish(slot);
        #[cfg(feature = "fault-injection")]
        self.block_delay.pause();
    }

    /// The slot's cache now holds `n_past` tokens (after an erase or a restore).
    pub fn set_n_past(&mut self, slot: usize, n_past: usize) {
        if !self.enabled() {
            return;
        }
        self.record_cache(slot, n_past);
        self.publish(slot);
        self.publish_counters();
    }

    /// The slot's cache holds `n_past` tokens: its record, its state size and the engine's
    /// KV usage follow (published by the caller).
    fn record_cache(&mut self, slot: usize, n_past: usize) {
        let s = &mut self.slots[slot];
        let old = s.n_past;
        s.n_past = n_past as u64;
        s.state_size = kv_state::state_size(&self.config, n_past);
        self.counters.kv_cells_used =
            (self.counters.kv_cells_used + n_past as u64).saturating_sub(old);
    }

    /// The task on `slot` ended for `cause`: back to idle with its finish reason and error
    /// code, and the cache as it is now (`n_past` tokens), in one update.
    pub fn finish(&mut self, slot: usize, cause: FinishCause, code: ErrorCode, n_past: usize) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        if let Err(e) = w.note_finish(slot, cause, clock::monotonic_ns()) {
            tracing::error!("noting slot {slot}'s finish: {e}");
        }
        let reason = cause.reason();
        if self.slots[slot].n_past != n_past as u64 {
            self.record_cache(slot, n_past);
        }
        self.forecast.step_abandoned(slot);
        self.slots[slot].finish(reason, code);
        self.counters.requests_running = self.counters.requests_running.saturating_sub(1);
        self.publish(slot);
        self.publish_counters();
        self.save_learnt(false);
    }

    /// Saves the cost model (when kept), marks the segment CLOSED and removes it.
    pub fn close(&mut self) {
        self.save_learnt(true);
        if let Some(w) = self.writer.take() {
            if let Err(e) = w.close() {
                tracing::warn!("closing the progress segment: {e}");
            }
        }
    }
}

/// Publishes every step of a prefill or generation on one slot, and stops it when the
/// engine shuts down, or, at a layer boundary on the CPU, when `stop` says so.
pub struct StepPublisher<'a> {
    /// The publisher.
    pub progress: &'a mut Progress,
    /// Counter the steps add to.
    pub kind: TokenKind,
    /// Set when the engine shuts down.
    pub shutdown: &'a AtomicBool,
    /// Asked after each layer of a forward computed on the CPU: true stops the forward
    /// there (its task was cancelled). On an asynchronous device a layer is only enqueued
    /// when it is heard, so the task stops at the step's end instead.
    pub stop: Option<&'a dyn Fn() -> bool>,
}

impl StepPublisher<'_> {
    /// The decode steps of `starts` are about to run in one forward (see
    /// [`Progress::batch_started`]); a break: the engine shuts down, none of them runs.
    pub fn batch_started(&mut self, starts: &[StepStart]) -> ControlFlow<()> {
        // Acquire: pairs with the Release store in Server::stop.
        if self.shutdown.load(Ordering::Acquire) {
            return ControlFlow::Break(());
        }
        self.progress.batch_started(starts);
        ControlFlow::Continue(())
    }
}

impl StepObserver for StepPublisher<'_> {
    fn before_step(&mut self, step: &StepStart) -> ControlFlow<()> {
        // Acquire: pairs with the Release store in Server::stop.
        if self.shutdown.load(Ordering::Acquire) {
            return ControlFlow::Break(());
        }
        self.progress.step_started(step.slot, step.n_tokens);
        ControlFlow::Continue(())
    }

    #[inline]
    fn layer_done(
        &mut self,
        slot: usize,
        device: &Device,
        layers_done: usize,
        n_layers: usize,
    ) -> ControlFlow<()> {
        self.progress
            .layer_done(slot, device, layers_done, n_layers);
        if device.is_cpu() && layers_done < n_layers && self.stop.is_some_and(|stop| stop()) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn after_step(&mut self, step: &StepDone) -> ControlFlow<()> {
        self.progress
            .step_finished(step.slot, step.done, step.n_past, step.n_tokens, self.kind);
        if self.shutdown.load(Ordering::Acquire) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// Test-build fault hooks of the compute thread.
#[cfg(feature = "fault-injection")]
mod fault {
    use std::time::{Duration, Instant};

    /// Environment variable naming the layer (a count of finished layers, 1-based) at
    /// which the compute thread stops, once, inside the forward: it publishes that layer
    /// and then sleeps instead of computing the next, as a hung kernel or a peer that
    /// never answers would leave it. Test builds only (the `fault-injection` feature).
    pub const STALL_AT_LAYER_ENV: &str = "HYDRA_ENGINE_STALL_AT_LAYER";
    /// Which forward reaching that layer stops (1-based, counting every forward of the
    /// engine: prefill chunks and decode steps alike); default 1, the first. A later one
    /// lets the cost model learn first, so that a stall is judged by a confident
    /// prediction.
    pub const STALL_IN_FORWARD_ENV: &str = "HYDRA_ENGINE_STALL_IN_FORWARD";
    /// How long the stop lasts at most (the tests kill the engine long before).
    const STALL_LIMIT: Duration = Duration::from_secs(600);
    /// Environment variable: milliseconds the compute thread sleeps after each block of a
    /// state save or restore it publishes (at most 10 s), so that a test can act while
    /// one is half done. Test builds only.
    pub const BLOCK_DELAY_ENV: &str = "HYDRA_ENGINE_BLOCK_DELAY_MS";

    /// [`BLOCK_DELAY_ENV`]'s pause.
    #[derive(Debug, Default)]
    pub struct BlockDelay(Option<Duration>);

    impl BlockDelay {
        pub fn from_env() -> Self {
            let ms = std::env::var(BLOCK_DELAY_ENV)
                .ok()
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(ms) = ms {
                tracing::warn!("fault injection: {ms} ms after each block of a save or restore");
            }
            Self(ms.map(|ms| Duration::from_millis(ms.min(10_000))))
        }

        pub fn pause(&self) {
            if let Some(d) = self.0 {
                std::thread::sleep(d);
            }
        }
    }

    #[derive(Debug, Default)]
    pub struct StallAtLayer {
        layer: Option<u64>,
        /// Forwards still to let pass that reach `layer`.
        skip: u64,
    }

    impl StallAtLayer {
        pub fn from_env() -> Self {
            let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
            let layer = var(STALL_AT_LAYER_ENV);
            let forward = var(STALL_IN_FORWARD_ENV).unwrap_or(1).max(1);
            if let Some(k) = layer {
                tracing::warn!(
                    "fault injection: the compute thread will stop at layer {k} of forward {forward}"
                );
            }
            Self {
                layer,
                skip: forward - 1,
            }
        }

        /// Stops here (once) if `done` is the layer to stop at, in the forward to stop in.
        pub fn reached(&mut self, done: u64) {
            if self.layer != Some(done) {
                return;
            }
            if self.skip > 0 {
                self.skip -= 1;
                return;
            }
            self.layer = None;
            tracing::warn!("fault injection: compute thread stopped at layer {done}");
            let until = Instant::now() + STALL_LIMIT;
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
