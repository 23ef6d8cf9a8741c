//! One llama context's publisher: a mirror of each sequence's slot record, moved with
//! hydra-layout's shared transitions ([`SlotState::begin_task`], `start_step`,
//! `finish_step`, `finish`) and published whole, plus the loop heartbeat and the
//! engine-wide counters. It knows nothing of symbols or FFI: the wrappers hand it what a
//! call carried.
//!
//! What a wrapped llama.cpp server shows (llama-server maps slot `i` to sequence `i`):
//! - a batch with several tokens of a sequence is a **prefill** step, a single token a
//!   **decode** step; an idle sequence (or a decoding one that gets a prompt chunk) starts
//!   a new task; totals are unknown (`WORK_TOTAL = 0`);
//! - the step is in flight (with its start time and size) during the real `llama_decode`,
//!   and its tokens are credited when it returns 0 or, for a decode batch, when the host
//!   has synchronized its outputs (an asynchronous backend is still computing when
//!   `llama_decode` returns; see [`Tracker::decode_returned`]);
//! - removing a whole sequence (or clearing the memory) makes the slot idle, and so does a
//!   sequence that has had no step for the idle delay (llama.cpp has no "request done"
//!   call: a server just stops decoding a finished sequence);
//! - a state save or restore of a sequence is a **save**/**restore** phase in bytes;
//! - each step start is published with the cost model's prediction of the step's duration
//!   (format v1.2), in the same seqlock update: see [Predictions](#predictions).
//!
//! # Predictions
//! One [`CostModel`] per llama context learns how long a forward takes from the forwards
//! that finished. The step in flight is a **ubatch** when the ubatch hook credits the call
//! ubatch by ubatch ([`Tracker::set_ubatch_steps`]; llama.cpp cuts a call into ubatches of
//! `n_ubatch` tokens in batch order), else the **whole call**. Its shape follows from the
//! batch ([`Tracker::shape_between`]): tokens whose sequences each carry one token in it
//! are a decode batch (`StepShape::decode(rows, Σ cached tokens)`), anything else a prefill
//! chunk (`StepShape::prefill(tokens, context)`, the context chosen so that the attended
//! pairs are those of every sequence's share). Every slot of the call gets the same
//! prediction. The model learns once per forward, from each ubatch that finished and from
//! the call's last ubatch (or the whole call) when it returned 0; a call that failed is
//! not learnt, and a stalled forward is left out by the model's own outlier rule. The end
//! of a phase is never predicted (`TASK_EXPECTED_END_NS` stays 0): llama-server does not
//! say how many tokens a request will take.

use crate::batch::{BatchScan, OddBatch};
use crate::ffi::LlamaBatch;
use hydra_layout::{
    CostModel, ErrorCode, FinishCause, FinishReason, Observed, Phase, Prediction, SegmentWriter,
    SlotState, StepShape, WorkUnit, WriterCounters,
};

/// The publisher of one llama context's segment.
pub struct Tracker {
    writer: SegmentWriter,
    slots: Vec<SlotState>,
    /// When each slot last finished a step or started a task (CLOCK_MONOTONIC ns).
    last_activity_ns: Vec<u64>,
    scan: BatchScan,
    counters: WriterCounters,
    next_task_id: u64,
    /// Each slot's work done when the call in flight started (its ubatches are credited
    /// on top of it).
    call_base: Vec<u64>,
    /// Tokens per ubatch and layers of the model (0 = unknown).
    n_ubatch: u64,
    n_layer: u64,
    /// Whether the ubatch hook credits calls ubatch by ubatch (the step in flight is then
    /// a ubatch).
    ubatch_steps: bool,
    /// The cost model of this context's forwards.
    model: CostModel,
    /// Tokens of the call in flight, and those of its ubatches already finished (the step
    /// in flight starts there).
    call_tokens: u32,
    step_from: u32,
    /// When the step in flight (the call, or its ubatch in flight) started; 0 = none.
    step_start_ns: u64,
    /// The call that returned but whose outputs the host has not synchronized yet: its
    /// step is still in flight (see [`Tracker::decode_returned`]).
    awaiting: Option<Awaiting>,
    /// The RPC devices of the published table, whose reads the background thread watches.
    peers: Vec<crate::peers::Watch>,
    /// The step in flight's device words as last published: the wait (from the waits) and
    /// the layers sent (from an armed RPC compute), each kept while the other changes.
    step_devices: hydra_layout::StepDevices,
}

/// A call that returned 0 while its outputs may still be computing on a device.
#[derive(Debug, Clone, Copy)]
struct Awaiting {
    /// When the call returned.
    returned_ns: u64,
    /// Whether the host is synchronizing them now.
    syncing: bool,
}

/// What a state transfer was about to do, kept between its two halves.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    slot: usize,
    before: SlotState,
}

impl Tracker {
    /// A publisher over `writer` whose slots hold `n_ctx_seq` tokens each, `kv_total`
    /// cells in all. Publishes every slot idle.
    pub fn new(writer: SegmentWriter, n_ctx_seq: u64, kv_total: u64) -> Self {
        let n = writer.slot_count();
        let mut t = Self {
            writer,
            slots: vec![
                SlotState {
                    n_ctx: n_ctx_seq,
                    ..Default::default()
                };
                n
            ],
            last_activity_ns: vec![0; n],
            scan: BatchScan::new(n),
            counters: WriterCounters {
                kv_cells_total: kv_total,
                ..Default::default()
            },
            next_task_id: 1,
            call_base: vec![0; n],
            n_ubatch: 0,
            n_layer: 0,
            ubatch_steps: false,
            model: CostModel::default(),
            call_tokens: 0,
            step_from: 0,
            step_start_ns: 0,
            awaiting: None,
            peers: Vec::new(),
            step_devices: hydra_layout::StepDevices::default(),
        };
        for s in 0..n {
            t.publish(s);
        }
        t.publish_counters();
        t
    }

    /// Sets the context's ubatch size and layer count (0 = unknown), which the layer
    /// position and the per-ubatch credit use.
    pub fn set_shape(&mut self, n_ubatch: u64, n_layer: u64) {
        self.n_ubatch = n_ubatch;
        self.n_layer = n_layer;
    }

    /// Whether the ubatch hook will credit each call ubatch by ubatch (its symbols
    /// resolved): the step in flight, and the step a prediction is for, is then each
    /// ubatch of `n_ubatch` tokens rather than the whole call.
    pub fn set_ubatch_steps(&mut self, on: bool) {
        self.ubatch_steps = on;
    }

    /// The cost model of this context's forwards.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// The tokens of the call in flight's first step from `from`: a ubatch of `n_ubatch`
    /// tokens when the ubatch hook credits ubatches, else the rest of the call. Returns
    /// the end of that step in batch order.
    fn step_end(&self, from: u32) -> u32 {
        let ubatch = u32::try_from(self.n_ubatch).unwrap_or(u32::MAX);
        if self.ubatch_steps && ubatch > 0 {
            from.saturating_add(ubatch).min(self.call_tokens)
        } else {
            self.call_tokens
        }
    }

    /// Tokens cached for `slot` before the call in flight: the lowest position the batch
    /// gives it, else what the record says.
    fn cached_before(&self, slot: usize, min_pos: Option<i32>) -> u64 {
        min_pos.map_or(self.slots[slot].n_past, |p| p.max(0) as u64)
    }

    /// The forward that computes tokens `[from, to)` of the call in flight (batch order,
    /// the way llama.cpp cuts a call into ubatches): each slot's share of it, named by
    /// [`StepShape::of_shares`]. `None` when no token of a slot is in it.
    pub fn shape_between(&self, from: u32, to: u32) -> Option<StepShape> {
        // Each share's place in batch order, up to the first that starts past the range;
        // no allocation on this path (once per step).
        let mut at = 0u32;
        let shares = self
            .scan
            .shares()
            .map(move |(slot, share)| {
                let start = at;
                at = at.saturating_add(share.count);
                (slot, share.min_pos, start, at)
            })
            .take_while(|&(_, _, start, _)| start < to)
            .filter_map(|(slot, min_pos, start, end)| {
                let (lo, hi) = (start.max(from), end.min(to));
                (lo < hi).then(|| {
                    let ctx = self.cached_before(slot, min_pos) + u64::from(lo - start);
                    (u64::from(hi - lo), ctx)
                })
            });
        StepShape::of_shares(shares)
    }

    /// The prediction for the step `[from, to)` of the call in flight starting at `now`
    /// (its phase start is each slot's own, filled in by [`publish_step`]).
    ///
    /// [`publish_step`]: Self::publish_step
    fn predict_step(&self, from: u32, to: u32, now: u64) -> Option<Prediction> {
        let shape = self.shape_between(from, to)?;
        Some(self.model.prediction(&shape, now, 0, None))
    }

    /// Publishes `slot` at a step start, with the step's prediction (one seqlock update).
    fn publish_step(&mut self, slot: usize, prediction: Option<&Prediction>) {
        let s = &self.slots[slot];
        // Every caller passes an index below the slot count, so this cannot fail.
        let _ = match prediction {
            Some(p) => self.writer.publish_with_prediction(
                slot,
                s,
                &Prediction {
                    phase_start_ns: s.phase_start_ns,
                    ..*p
                },
            ),
            None => self.writer.publish(slot, s),
        };
    }

    /// The step `[from, to)` of the call in flight finished at `now` after starting at
    /// `start`: the model learns it (once for the forward, whatever its slots).
    fn learn(&mut self, from: u32, to: u32, start: u64, now: u64) -> Option<Observed> {
        let shape = self.shape_between(from, to)?;
        (start != 0).then(|| self.model.observe(&shape, now.saturating_sub(start)))
    }

    /// What the layer hook needs of the call just started (see
    /// [`decode_started_with`](Self::decode_started_with)): its size, the context's
    /// shape, the step's start, and a publisher when `arm(n_tokens)` says to arm it.
    pub fn call_start(&self, arm: impl FnOnce(u32) -> bool) -> crate::layers::CallStart {
        let n_tokens = self.call_tokens;
        let step_start_ns = self.step_start_ns;
        crate::layers::CallStart {
            n_tokens,
            n_ubatch: u32::try_from(self.n_ubatch).unwrap_or(u32::MAX),
            n_layer: self.n_layer,
            step_start_ns,
            publisher: arm(n_tokens).then(|| self.writer.substep_publisher()),
            sent_sink: None,
        }
    }

    /// The slots of the call in flight, in batch order.
    pub fn call_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.scan.shares().map(|(slot, _)| slot)
    }

    /// The first `covered` tokens of the call in flight are computed (its ubatches so
    /// far; llama.cpp's ubatches take the batch's tokens in order). Each sequence is
    /// credited with its tokens among them, and its step restarts at `now` (the next
    /// ubatch): the restart retires the finished ubatch's layer position in the same
    /// update that credits its tokens, so a reader never sees the tokens rise and the
    /// layer fall back. Returns the new step start.
    pub fn ubatch_done(&mut self, covered: u32, now: u64) -> u64 {
        // The finished ubatch is learnt; the next one is predicted.
        let covered = covered.min(self.call_tokens);
        self.learn(self.step_from, covered, self.step_start_ns, now);
        self.step_from = covered;
        self.step_start_ns = now;
        // The step boundary clears the device words; a wait in progress is kept.
        self.step_devices.layers_sent = 0;
        let prediction = self.predict_step(covered, self.step_end(covered), now);
        let mut before = 0u32;
        let scan = std::mem::take(&mut self.scan);
        for (slot, share) in scan.shares() {
            let credited = covered.saturating_sub(before).min(share.count);
            before = before.saturating_add(share.count);
            let s = &mut self.slots[slot];
            let done = self.call_base[slot] + u64::from(credited);
            if done > s.work_done {
                s.work_done = done;
                s.last_progress_ns = now;
            }
            s.step_start_ns = now;
            self.last_activity_ns[slot] = now;
            self.publish_step(slot, prediction.as_ref());
        }
        self.scan = scan;
        self.writer.heartbeat(now);
        now
    }

    /// Publishes the device words of `slots`' step in flight (a wait begins or ends,
    /// FORMAT §5.6). A slot index out of range, or without a step in flight (a call whose
    /// awaited outputs the idle sweep already ended), is skipped: the step boundary that
    /// ended its step cleared its words.
    pub fn step_devices(&mut self, slots: &[usize], d: &hydra_layout::StepDevices) {
        self.step_devices.wait_device = d.wait_device;
        self.step_devices.wait_since_ns = d.wait_since_ns;
        self.publish_step_devices(slots);
    }

    /// The step in flight of the call on `slots` has handed layers `0..layers_sent` to
    /// their devices (an armed RPC split of 0c1e570): published with the wait, as
    /// [`step_devices`](Self::step_devices) publishes the wait with the layers sent.
    pub fn layers_sent(&mut self, slots: &[usize], layers_sent: u64) {
        self.step_devices.layers_sent = layers_sent;
        self.publish_step_devices(slots);
    }

    fn publish_step_devices(&mut self, slots: &[usize]) {
        let d = self.step_devices;
        for &slot in slots {
            if self.slots.get(slot).is_some_and(|s| s.step_start_ns != 0) {
                let _ = self.writer.publish_step_devices(slot, &d);
            }
        }
    }

    /// Publishes the context's devices and layer map (FORMAT §19); a table the format
    /// refuses is logged once and left out.
    pub fn publish_devices(&mut self, devices: &hydra_layout::Devices) {
        if let Err(e) = self.writer.publish_devices(devices) {
            crate::log::warn_once!("the device table was not published: {e}");
            return;
        }
        self.peers = devices
            .devices
            .iter()
            .zip(1u64..)
            .filter(|(d, _)| d.kind == hydra_layout::DeviceKind::Rpc && !d.endpoint.is_empty())
            .map(|(d, id)| crate::peers::Watch::new(id, &d.endpoint))
            .collect();
    }

    /// Samples each RPC peer's socket (FORMAT §19.7) and publishes since when it has read
    /// nothing where that changed; from the background thread. A segment without the
    /// `peer_reads` capability publishes nothing.
    pub fn watch_peers(&mut self, now: u64) {
        for w in &mut self.peers {
            if let Some(since) = w.poll(now) {
                let _ = self.writer.publish_peer_unread(w.device, since);
            }
        }
    }

    /// The segment's writer (path, slot count).
    pub fn writer(&self) -> &SegmentWriter {
        &self.writer
    }

    /// The record of `slot` as last published.
    pub fn slot(&self, slot: usize) -> Option<&SlotState> {
        self.slots.get(slot)
    }

    fn publish(&mut self, slot: usize) {
        // Every caller passes an index below the slot count, so this cannot fail.
        let _ = self.writer.publish(slot, &self.slots[slot]);
    }

    fn publish_counters(&mut self) {
        self.counters.requests_running =
            self.slots.iter().filter(|s| s.phase.is_active()).count() as u64;
        self.writer.set_counters(&self.counters);
    }

    fn new_task_id(&mut self) -> u64 {
        let id = self.next_task_id;
        self.next_task_id += 1;
        id
    }

    /// The slot's cache holds `n_past` tokens: its record and the KV gauge follow.
    fn set_n_past(&mut self, slot: usize, n_past: u64) {
        let s = &mut self.slots[slot];
        self.counters.kv_cells_used =
            (self.counters.kv_cells_used + n_past).saturating_sub(s.n_past);
        s.n_past = n_past;
    }

    /// A `llama_decode` of `batch` is about to run at `now`: each sequence in it gets its
    /// step in flight. An odd batch is refused (and nothing is marked).
    ///
    /// # Safety
    /// `batch` is what the host passes to `llama_decode` (see [`BatchScan::read`]).
    pub unsafe fn decode_started(&mut self, batch: &LlamaBatch, now: u64) -> Result<(), OddBatch> {
        // SAFETY: forwarded from this function's contract.
        self.decode_started_with(|scan| unsafe { scan.read(batch) }, now)
    }

    /// As [`decode_started`](Self::decode_started), for a batch that `fill` counts into
    /// the (cleared) scan: an extended batch, whose content only its builder calls tell.
    pub fn decode_started_with(
        &mut self,
        fill: impl FnOnce(&mut BatchScan) -> Result<(), OddBatch>,
        now: u64,
    ) -> Result<(), OddBatch> {
        self.settle();
        self.scan.clear();
        if let Err(e) = fill(&mut self.scan) {
            self.scan.clear();
            return Err(e);
        }
        self.call_tokens = self
            .scan
            .shares()
            .fold(0u32, |n, (_, x)| n.saturating_add(x.count));
        self.step_from = 0;
        self.step_start_ns = now;
        self.step_devices.layers_sent = 0;
        let prediction = self.predict_step(0, self.step_end(0), now);
        // Taken out for the loop (three pointer moves) so the slots can be updated in it.
        let scan = std::mem::take(&mut self.scan);
        let mut any = false;
        for (slot, share) in scan.shares() {
            any = true;
            let phase = if share.count > 1 {
                Phase::Prefill
            } else {
                Phase::Decode
            };
            let s = self.slots[slot];
            if !s.phase.is_active() || (s.phase == Phase::Decode && phase == Phase::Prefill) {
                if s.phase.is_active() {
                    // A new prompt on a decoding sequence: its request ended with its
                    // last step.
                    self.end_task(slot);
                    self.publish(slot);
                }
                self.note_arrival(slot, now);
                let id = self.new_task_id();
                let cached = share.min_pos.map_or(s.n_past, |p| p.max(0) as u64);
                let s = &mut self.slots[slot];
                s.begin_task(id, phase, WorkUnit::Tokens, 0, now);
                s.tokens_cached = cached;
            } else if s.phase != phase {
                self.slots[slot].enter_phase(phase, WorkUnit::Tokens, 0, now);
            }
            self.slots[slot].start_step(u64::from(share.count), now);
            self.call_base[slot] = self.slots[slot].work_done;
            self.last_activity_ns[slot] = now;
            self.publish_step(slot, prediction.as_ref());
        }
        self.scan = scan;
        self.writer.heartbeat(now);
        if any {
            self.publish_counters();
        }
        Ok(())
    }

    /// The `llama_decode` begun by [`decode_started`](Self::decode_started) returned `ret`
    /// at `now`: 0 credits every sequence with its tokens; 1 (no room in the KV cache, the
    /// host retries) and 2 (aborted) end the step without progress; a negative value is an
    /// error that ends the task. The call's last step (its last ubatch, or the whole call)
    /// is learnt only when it returned 0.
    pub fn decode_finished(&mut self, ret: i32, now: u64) {
        self.writer.heartbeat(now);
        self.end_call(ret, now);
    }

    /// The `llama_decode` begun by [`decode_started`](Self::decode_started) returned
    /// `ret` at `now`. A decode batch (one token per sequence) that returned 0 and asked
    /// for outputs, when `deferrable` (computed through a scheduler whose synchronize is
    /// interposed), keeps its step in flight until the host synchronizes them: with an
    /// asynchronous backend (an RPC peer, a GPU), `llama_decode` returns once the work is
    /// queued, and the host then waits for it in `llama_get_logits*`. Returns whether it
    /// does; any other call ends as [`decode_finished`](Self::decode_finished) says.
    ///
    /// Prompt chunks end at the return, as the ubatches inside a call do: most ask for no
    /// output, so timing the last one to its outputs (on a pipeline, the drain of every
    /// ubatch still queued) would teach the cost model another kind of duration for the
    /// same shape. Decode steps all ask for their token's logits, so each is timed the
    /// same way.
    pub fn decode_returned(&mut self, ret: i32, now: u64, deferrable: bool) -> bool {
        let decode = {
            let mut shares = self.scan.shares().peekable();
            shares.peek().is_some() && shares.all(|(_, x)| x.count == 1)
        };
        if ret == 0 && deferrable && decode && self.scan.outputs {
            self.awaiting = Some(Awaiting {
                returned_ns: now,
                syncing: false,
            });
            self.writer.heartbeat(now);
            return true;
        }
        self.decode_finished(ret, now);
        false
    }

    /// The host starts synchronizing the outputs of the call awaiting them; false when
    /// none awaits (it ended otherwise meanwhile).
    pub fn sync_begun(&mut self) -> bool {
        self.awaiting.as_mut().map(|a| a.syncing = true).is_some()
    }

    /// The outputs of the call awaiting them are synchronized at `now`: its step ends,
    /// learnt with its true duration.
    pub fn outputs_synchronized(&mut self, now: u64) {
        if self.awaiting.take().is_some() {
            self.decode_finished(0, now);
        }
    }

    /// Ends the call awaiting its outputs, if any, as of its return: the host moved on
    /// (another call, a removal, a transfer) without synchronizing them here.
    fn settle(&mut self) {
        if let Some(a) = self.awaiting.take() {
            self.end_call(0, a.returned_ns);
        }
    }

    /// Ends the call in flight, which returned `ret`, at `now` (see
    /// [`decode_finished`](Self::decode_finished)).
    fn end_call(&mut self, ret: i32, now: u64) {
        if ret == 0 {
            self.learn(self.step_from, self.call_tokens, self.step_start_ns, now);
        }
        self.step_start_ns = 0;
        self.step_devices.layers_sent = 0;
        self.step_from = 0;
        self.call_tokens = 0;
        let mut scan = std::mem::take(&mut self.scan);
        let mut any = false;
        for (slot, share) in scan.shares() {
            any = true;
            let count = u64::from(share.count);
            let s = &mut self.slots[slot];
            if ret == 0 {
                let phase = s.phase;
                s.finish_step(self.call_base[slot] + count, now);
                let n_past = share
                    .max_pos
                    .map_or(s.n_past + count, |p| p.max(-1) as u64 + 1);
                self.set_n_past(slot, n_past);
                if phase == Phase::Prefill {
                    self.counters.prompt_tokens_total += count;
                } else {
                    self.counters.generated_tokens_total += count;
                }
            } else {
                s.finish_step(s.work_done, now);
                if ret < 0 {
                    s.finish(FinishReason::Error, ErrorCode::Compute);
                }
            }
            self.last_activity_ns[slot] = now;
            self.publish(slot);
        }
        scan.clear();
        self.scan = scan;
        if any {
            self.publish_counters();
        }
    }

    /// Sequence `seq` (every sequence when negative) lost positions `[p0, p1)` (llama.h's
    /// conventions: `p0 < 0` from 0, `p1 < 0` to the end). A whole sequence removed makes
    /// its slot idle; a removed tail shortens its cache.
    pub fn seq_removed(&mut self, seq: i32, p0: i32, p1: i32) {
        self.settle();
        let whole = p0 <= 0 && p1 < 0;
        let range = match usize::try_from(seq) {
            Ok(s) if s < self.slots.len() => s..s + 1,
            Ok(_) => return,
            Err(_) => 0..self.slots.len(),
        };
        for slot in range {
            if whole {
                self.set_n_past(slot, 0);
                self.end_task(slot);
            } else if p1 < 0 {
                let n = self.slots[slot].n_past.min(p0 as u64);
                self.set_n_past(slot, n);
            } else {
                continue;
            }
            self.publish(slot);
        }
        self.publish_counters();
    }

    /// The context's memory was cleared: every slot is idle with an empty cache.
    pub fn cleared(&mut self) {
        self.seq_removed(-1, -1, -1);
    }

    /// An active slot's task ends (the server stopped feeding it). llama.cpp does not say
    /// how a request ended; the preload reports it completed.
    fn end_task(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if s.phase.is_active() {
            s.finish(FinishReason::Completed, ErrorCode::None);
            // It ended with its last step, not when the preload noticed (end-to-end time).
            // Every caller passes an index below the slot count, so this cannot fail.
            let _ = self.writer.note_finish(
                slot,
                FinishCause::Unspecified,
                self.last_activity_ns[slot],
            );
        }
    }

    /// The task about to begin on `slot` arrives at `now`: its prompt's start (the preload
    /// never sees a request wait; the `prompt_arrivals` capability).
    fn note_arrival(&mut self, slot: usize, now: u64) {
        // Every caller passes an index below the slot count, so this cannot fail.
        let _ = self.writer.note_arrival(slot, now);
    }

    /// Ends the task of every prefilling or decoding slot with no step in flight and no
    /// step for `idle_after_ns` before `now`. A call awaiting its outputs that the host
    /// has not begun to synchronize within `idle_after_ns` ends first, as of its return
    /// (a host that never reads what it asked for leaves no step in flight). Returns how
    /// many slots went idle.
    pub fn sweep_idle(&mut self, now: u64, idle_after_ns: u64) -> usize {
        if self
            .awaiting
            .is_some_and(|a| !a.syncing && now.saturating_sub(a.returned_ns) >= idle_after_ns)
        {
            self.settle();
        }
        let mut n = 0;
        for slot in 0..self.slots.len() {
            let s = &self.slots[slot];
            if matches!(s.phase, Phase::Prefill | Phase::Decode)
                && s.step_start_ns == 0
                && now.saturating_sub(self.last_activity_ns[slot]) >= idle_after_ns
            {
                self.end_task(slot);
                self.publish(slot);
                n += 1;
            }
        }
        if n > 0 {
            self.publish_counters();
        }
        n
    }

    /// A state save (`phase` = save) or restore of sequence `seq` of `total` bytes (0 when
    /// unknown) starts at `now`. `None` when the sequence has no slot.
    pub fn transfer_started(
        &mut self,
        seq: i32,
        phase: Phase,
        total: u64,
        now: u64,
    ) -> Option<Transfer> {
        self.settle();
        let slot = usize::try_from(seq)
            .ok()
            .filter(|&s| s < self.slots.len())?;
        let before = self.slots[slot];
        if before.phase.is_active() {
            self.slots[slot].enter_phase(phase, WorkUnit::Bytes, total, now);
        } else {
            self.note_arrival(slot, now);
            let id = self.new_task_id();
            self.slots[slot].begin_task(id, phase, WorkUnit::Bytes, total, now);
        }
        self.slots[slot].start_step(total, now);
        self.writer.heartbeat(now);
        self.publish(slot);
        self.publish_counters();
        Some(Transfer { slot, before })
    }

    /// The transfer begun with [`transfer_started`](Self::transfer_started) moved `bytes`
    /// (0 = it failed) at `now`; a restore that reports its token count sets the cache size.
    /// A slot that was busy before returns to what it was doing; an idle one ends the task.
    pub fn transfer_finished(&mut self, t: Transfer, bytes: u64, n_past: Option<u64>, now: u64) {
        let slot = t.slot;
        self.writer.heartbeat(now);
        let s = &mut self.slots[slot];
        let phase = s.phase;
        s.finish_step(bytes, now);
        let ok = bytes > 0;
        if ok && phase == Phase::Save {
            s.state_size = bytes;
        }
        if t.before.phase.is_active() {
            let state_size = s.state_size;
            *s = t.before;
            s.state_size = state_size;
        } else if ok {
            s.finish(FinishReason::Completed, ErrorCode::None);
        } else {
            let code = if phase == Phase::Save {
                ErrorCode::Io
            } else {
                ErrorCode::StateRejected
            };
            s.finish(FinishReason::Error, code);
        }
        if let (true, Some(n)) = (ok, n_past) {
            self.set_n_past(slot, n);
        }
        self.last_activity_ns[slot] = now;
        self.publish(slot);
        self.publish_counters();
    }

    /// Marks the segment closed and removes it (a clean `llama_free` or process exit).
    pub fn close(self) {
        let _ = self.writer.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::OwnedBatch;
    use hydra_layout::header::capabilities::STEP_PREDICTION;
    use hydra_layout::{EngineDescription, SegmentConfig, SegmentReader, StepKind};

    fn tracker(dir: &std::path::Path, slots: usize) -> Tracker {
        // As the preload's own description says (describe.rs): readers then take the
        // prediction words.
        tracker_with(dir, slots, STEP_PREDICTION)
    }

    fn tracker_with(dir: &std::path::Path, slots: usize, capabilities: u64) -> Tracker {
        let w = SegmentWriter::create(&SegmentConfig {
            dir: dir.into(),
            engine_id: "t".into(),
            slot_count: slots,
            description: EngineDescription {
                capabilities,
                ..Default::default()
            },
        })
        .unwrap();
        Tracker::new(w, 8192, 16384)
    }

    fn step(t: &mut Tracker, tokens: &[(i32, i32)], ret: i32, now: u64) {
        let mut b = OwnedBatch::single(tokens);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), now) }.unwrap();
        t.decode_finished(ret, now + 10);
    }

    #[test]
    fn prompt_chunks_are_prefill_single_tokens_decode_totals_unknown() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 2);
        let mut b = OwnedBatch::single(&[(0, 1), (1, 1), (2, 1)]);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), 100) }.unwrap();
        let s = *t.slot(1).unwrap();
        assert_eq!(
            (s.phase, s.step_start_ns, s.step_size, s.work_total),
            (Phase::Prefill, 100, 3, 0)
        );
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        assert_eq!(
            r.slot(1).unwrap().state.step_start_ns,
            100,
            "in flight is published"
        );
        t.decode_finished(0, 150);
        let s = *t.slot(1).unwrap();
        assert_eq!(
            (s.work_done, s.n_past, s.step_start_ns, s.last_step_ns),
            (3, 3, 0, 50)
        );
        step(&mut t, &[(3, 1)], 0, 200);
        step(&mut t, &[(4, 1)], 0, 300);
        let s = *t.slot(1).unwrap();
        assert_eq!(
            (s.phase, s.work_done, s.n_past, s.task_id),
            (Phase::Decode, 2, 5, 1)
        );
        assert_eq!(t.slot(0).unwrap().phase, Phase::Idle);
        let snap = r.slot(1).unwrap();
        assert_eq!(snap.state, s);
        let h = r.header().unwrap();
        assert_eq!(
            (
                h.counters.prompt_tokens_total,
                h.counters.generated_tokens_total,
                h.counters.requests_running,
                h.counters.kv_cells_used
            ),
            (3, 2, 1, 5)
        );
        assert_eq!(h.heartbeat_ns, 310);
    }

    /// The preload's arrivals are prompt starts (`prompt_arrivals`): time to first token
    /// and end-to-end time count from there, to the prompt's end and to the last step;
    /// queue wait and finish causes stay absent.
    #[test]
    fn a_request_s_times_count_from_its_prompt_s_start_and_end_with_its_last_step() {
        use hydra_layout::header::capabilities::PROMPT_ARRIVALS;
        use hydra_layout::stats::HistogramKind;
        const MS: u64 = 1_000_000;
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker_with(tmp.path(), 1, STEP_PREDICTION | PROMPT_ARRIVALS);
        // A prompt of 2 tokens at 100 ms (done at 100 ms + 10 ns), two decode steps, and a
        // new prompt on the same sequence at 400 ms.
        step(&mut t, &[(0, 0), (1, 0)], 0, 100 * MS);
        step(&mut t, &[(2, 0)], 0, 200 * MS);
        step(&mut t, &[(3, 0)], 0, 300 * MS);
        step(&mut t, &[(3, 0), (4, 0), (5, 0)], 0, 400 * MS);
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        let stats = r.stats(0).unwrap().expect("statistics");
        let ttft = stats
            .histogram(HistogramKind::Ttft)
            .expect("time to first token");
        // The first token: the first decode step's start, 100 ms after the prompt's.
        assert_eq!((ttft.count, ttft.sum), (1, 100 * MS));
        let e2e = stats
            .histogram(HistogramKind::E2e)
            .expect("end-to-end time");
        assert_eq!(
            (e2e.count, e2e.sum),
            (1, 200 * MS + 10),
            "to the last step's end"
        );
        assert_eq!(
            stats.histogram(HistogramKind::QueueWait),
            None,
            "never seen: absent"
        );
        assert_eq!(stats.tasks_by_cause(), None, "absent");
    }

    #[test]
    fn a_prompt_after_decoding_is_a_new_task_with_its_cached_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 1);
        step(&mut t, &[(0, 0), (1, 0)], 0, 100);
        step(&mut t, &[(2, 0)], 0, 200);
        step(&mut t, &[(2, 0), (3, 0), (4, 0)], 0, 300);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.task_id, s.phase, s.tokens_cached, s.work_done, s.n_past),
            (2, Phase::Prefill, 2, 3, 5)
        );
    }

    #[test]
    fn failures_end_steps_without_progress_and_errors_end_the_task() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 1);
        step(&mut t, &[(0, 0), (1, 0)], 1, 100);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.work_done, s.step_start_ns, s.n_past),
            (Phase::Prefill, 0, 0, 0)
        );
        step(&mut t, &[(0, 0), (1, 0)], -3, 200);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.finish_reason, s.error_code),
            (Phase::Idle, FinishReason::Error, ErrorCode::Compute)
        );
    }

    #[test]
    fn whole_sequence_removal_and_idle_delay_make_slots_idle() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 2);
        step(&mut t, &[(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)], 0, 100);
        t.seq_removed(0, 1, -1);
        assert_eq!(
            (t.slot(0).unwrap().n_past, t.slot(0).unwrap().phase),
            (1, Phase::Prefill)
        );
        t.seq_removed(0, 0, 5);
        assert_eq!(
            t.slot(0).unwrap().phase,
            Phase::Prefill,
            "a middle range keeps the task"
        );
        t.seq_removed(0, -1, -1);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.finish_reason, s.n_past),
            (Phase::Idle, FinishReason::Completed, 0)
        );
        t.seq_removed(9, -1, -1);
        assert_eq!(t.sweep_idle(1_000, 1_000), 0, "not quiet long enough");
        assert_eq!(t.sweep_idle(1_110, 1_000), 1);
        assert_eq!(t.slot(1).unwrap().phase, Phase::Idle);
        let mut b = OwnedBatch::single(&[(3, 1)]);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), 5_000) }.unwrap();
        assert_eq!(
            t.sweep_idle(99_000, 1_000),
            0,
            "a step in flight is never idle"
        );
        t.decode_finished(0, 99_001);
        step(&mut t, &[(0, 0)], 0, 100_000);
        t.cleared();
        assert!((0..2).all(|s| t.slot(s).unwrap().phase == Phase::Idle));
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        assert_eq!(r.header().unwrap().counters.kv_cells_used, 0);
    }

    #[test]
    fn ubatches_are_credited_in_batch_order_inside_the_call() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 2);
        t.set_shape(4, 30);
        // A 6-token prompt of sequence 1, then 4 of sequence 0, in one call.
        let mut toks: Vec<(i32, i32)> = (0..6).map(|p| (p, 1)).collect();
        toks.extend((0..4).map(|p| (p, 0)));
        let mut b = OwnedBatch::single(&toks);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), 100) }.unwrap();
        let start = t.call_start(|n| n >= 8);
        assert_eq!((start.n_tokens, start.n_ubatch, start.n_layer), (10, 4, 30));
        assert_eq!(start.step_start_ns, 100);
        assert!(start.publisher.is_some(), "a 10-token call is armed at 8");
        assert!(t.call_start(|n| n >= 11).publisher.is_none());
        assert_eq!(t.call_slots().collect::<Vec<_>>(), vec![1, 0]);
        assert_eq!(t.ubatch_done(4, 200), 200);
        let (s1, s0) = (*t.slot(1).unwrap(), *t.slot(0).unwrap());
        assert_eq!(
            (
                s1.work_done,
                s1.step_size,
                s1.step_start_ns,
                s1.last_progress_ns
            ),
            (4, 6, 200, 200),
            "the first ubatch is 4 of sequence 1's 6 tokens; the step restarts"
        );
        assert_eq!((s0.work_done, s0.step_start_ns), (0, 200));
        t.ubatch_done(8, 300);
        assert_eq!(
            (t.slot(1).unwrap().work_done, t.slot(0).unwrap().work_done),
            (6, 2)
        );
        t.decode_finished(0, 400);
        let (s1, s0) = (*t.slot(1).unwrap(), *t.slot(0).unwrap());
        assert_eq!(
            (s1.work_done, s0.work_done),
            (6, 4),
            "the return credits the rest"
        );
        assert_eq!((s1.step_start_ns, s1.steps_done, s1.n_past), (0, 1, 6));
        // The next call of sequence 1 is credited on top of what it had.
        step(&mut t, &[(6, 1), (7, 1)], 0, 500);
        assert_eq!(t.slot(1).unwrap().work_done, 8);
    }

    /// Starts a decode step of sequence 0 at position `pos` at `now`, asking for its
    /// output unless `logits` says otherwise (empty: no flags).
    fn start_decode(t: &mut Tracker, pos: i32, logits: Vec<i8>, now: u64) {
        let mut b = OwnedBatch::single(&[(pos, 0)]);
        b.logits = logits;
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), now) }.unwrap();
    }

    #[test]
    fn a_step_whose_outputs_are_awaited_ends_when_the_host_has_them() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 1);
        start_decode(&mut t, 0, vec![], 100);
        assert!(t.decode_returned(0, 110, true), "deferred");
        let s = *t.slot(0).unwrap();
        assert_eq!((s.step_start_ns, s.work_done), (100, 0), "still in flight");
        assert!(t.sync_begun());
        t.outputs_synchronized(600);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.step_start_ns, s.work_done, s.last_step_ns, s.n_past),
            (0, 1, 500, 1),
            "credited when synchronized, with the step's true duration"
        );
        assert!(!t.sync_begun(), "nothing awaits any more");

        // A prompt chunk asking for its last token's logits ends at its return.
        let mut b = OwnedBatch::single(&[(1, 0), (2, 0)]);
        b.logits = vec![0, 1];
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), 700) }.unwrap();
        assert!(!t.decode_returned(0, 720, true), "a prompt chunk");
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.step_start_ns, s.work_done),
            (Phase::Prefill, 0, 2)
        );

        // No output asked, not deferrable, or a failed call: it ends when it returns.
        for (pos, logits, ret, deferrable) in [
            (3, vec![0], 0, true),
            (4, vec![1], 0, false),
            (5, vec![1], 1, true),
        ] {
            start_decode(&mut t, pos, logits, 1_000);
            assert!(!t.decode_returned(ret, 1_040, deferrable));
            let s = *t.slot(0).unwrap();
            let n_past = if ret == 0 { pos as u64 + 1 } else { pos as u64 };
            assert_eq!((s.step_start_ns, s.n_past), (0, n_past), "ret {ret}");
        }
    }

    #[test]
    fn an_awaited_step_the_host_leaves_ends_as_of_its_return() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 1);
        // The next call starts without a synchronize: the first ends at its return.
        start_decode(&mut t, 0, vec![], 100);
        assert!(t.decode_returned(0, 130, true));
        start_decode(&mut t, 1, vec![], 200);
        let s = *t.slot(0).unwrap();
        assert_eq!((s.work_done, s.last_step_ns, s.step_start_ns), (1, 30, 200));

        // Never synchronized and nothing after: the sweep ends it after the idle delay,
        // as of its return, and then the task.
        assert!(t.decode_returned(0, 250, true));
        assert_eq!(t.sweep_idle(1_000, 1_000), 0, "not yet");
        assert_eq!(t.slot(0).unwrap().step_start_ns, 200);
        assert_eq!(t.sweep_idle(1_250, 1_000), 1);
        let s = *t.slot(0).unwrap();
        assert_eq!((s.phase, s.work_done, s.last_step_ns), (Phase::Idle, 2, 50));

        // While the host synchronizes (blocked on a device), no sweep ends it.
        start_decode(&mut t, 2, vec![], 2_000);
        assert!(t.decode_returned(0, 2_010, true));
        assert!(t.sync_begun());
        assert_eq!(t.sweep_idle(60_000, 1_000), 0);
        assert_eq!(t.slot(0).unwrap().step_start_ns, 2_000, "still waiting");
        t.outputs_synchronized(70_000);
        assert_eq!(t.slot(0).unwrap().last_step_ns, 68_000);

        // A removal settles it too.
        start_decode(&mut t, 3, vec![], 80_000);
        assert!(t.decode_returned(0, 80_020, true));
        t.seq_removed(0, -1, -1);
        let s = *t.slot(0).unwrap();
        assert_eq!((s.phase, s.step_start_ns, s.work_done), (Phase::Idle, 0, 2));
    }

    #[test]
    fn a_wait_is_published_only_for_a_step_in_flight() {
        use hydra_layout::header::capabilities as caps;
        let tmp = tempfile::tempdir().unwrap();
        let w = SegmentWriter::create(&SegmentConfig {
            dir: tmp.path().into(),
            engine_id: "t".into(),
            slot_count: 1,
            description: EngineDescription {
                capabilities: STEP_PREDICTION | caps::DEVICES | caps::DEVICE_WAIT,
                ..Default::default()
            },
        })
        .unwrap();
        let mut t = Tracker::new(w, 8192, 8192);
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        let wait = hydra_layout::StepDevices {
            layers_sent: 0,
            wait_device: 1,
            wait_since_ns: 150,
        };
        start_decode(&mut t, 0, vec![], 100);
        t.step_devices(&[0], &wait);
        assert_eq!(r.slot(0).unwrap().devices.map(|d| d.wait_device), Some(1));
        t.step_devices(&[0], &hydra_layout::StepDevices::default());
        assert!(t.decode_returned(0, 200, true));
        assert_eq!(t.sweep_idle(10_000, 1_000), 1, "never synchronized");
        // A wait on this thread after that (the call still looks awaited here) writes
        // nothing on the slot, whose step is over.
        t.step_devices(&[0], &wait);
        let snap = r.slot(0).unwrap();
        assert_eq!(snap.devices.map(|d| d.wait_device), Some(0), "{snap:?}");
    }

    #[test]
    fn layers_sent_and_the_wait_are_published_together_and_the_next_step_clears_both() {
        use hydra_layout::header::capabilities as caps;
        let tmp = tempfile::tempdir().unwrap();
        let c = STEP_PREDICTION | caps::DEVICES | caps::DEVICE_WAIT | caps::LAYERS_SENT;
        let mut t = tracker_with(tmp.path(), 1, c);
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        start_decode(&mut t, 0, vec![], 100);
        let words = |r: &SegmentReader| {
            let d = r.slot(0).unwrap().devices.unwrap();
            (d.layers_sent, d.wait_device)
        };
        t.layers_sent(&[0], 16);
        assert_eq!(words(&r), (16, 0));
        let wait = hydra_layout::StepDevices {
            layers_sent: 0,
            wait_device: 1,
            wait_since_ns: 150,
        };
        t.step_devices(&[0], &wait);
        assert_eq!(words(&r), (16, 1), "the wait keeps the layers sent");
        t.layers_sent(&[0], 30);
        assert_eq!(words(&r), (30, 1), "the layers sent keep the wait");
        t.step_devices(&[0], &hydra_layout::StepDevices::default());
        assert_eq!(words(&r), (30, 0));
        // The next call's step starts with nothing sent.
        assert!(!t.decode_returned(0, 200, false));
        start_decode(&mut t, 0, vec![], 300);
        t.step_devices(&[0], &wait);
        assert_eq!(words(&r), (0, 1));
    }

    #[test]
    fn saves_and_restores_are_byte_phases() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 2);
        assert!(t.transfer_started(2, Phase::Save, 10, 1).is_none());
        let x = t.transfer_started(0, Phase::Save, 4096, 100).unwrap();
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.work_unit, s.work_total, s.step_size),
            (Phase::Save, WorkUnit::Bytes, 4096, 4096)
        );
        t.transfer_finished(x, 4096, None, 200);
        let s = *t.slot(0).unwrap();
        assert_eq!(
            (s.phase, s.finish_reason, s.work_done, s.state_size),
            (Phase::Idle, FinishReason::Completed, 4096, 4096)
        );
        let x = t.transfer_started(1, Phase::Restore, 0, 300).unwrap();
        t.transfer_finished(x, 0, Some(7), 400);
        let s = *t.slot(1).unwrap();
        assert_eq!(
            (s.finish_reason, s.error_code, s.n_past),
            (FinishReason::Error, ErrorCode::StateRejected, 0)
        );
        let x = t.transfer_started(1, Phase::Restore, 0, 500).unwrap();
        t.transfer_finished(x, 900, Some(7), 600);
        assert_eq!(t.slot(1).unwrap().n_past, 7);
        step(&mut t, &[(7, 1)], 0, 700);
        let x = t.transfer_started(1, Phase::Save, 50, 800).unwrap();
        t.transfer_finished(x, 50, None, 900);
        let s = *t.slot(1).unwrap();
        assert_eq!(
            (s.phase, s.state_size),
            (Phase::Decode, 50),
            "a busy slot returns to its phase"
        );
    }

    const MS: u64 = 1_000_000;

    /// A synthetic engine: 1 ms per forward, 20 us per token, 50 ns per attended pair.
    fn truth(shape: &StepShape) -> u64 {
        MS + 20_000 * shape.tokens + (50.0 * shape.attended()) as u64
    }

    fn rel(a: u64, b: u64) -> f64 {
        (a as f64 - b as f64).abs() / b as f64
    }

    /// A tracker of `slots` slots in a temporary directory, and a reader of its segment.
    fn watched(slots: usize) -> (tempfile::TempDir, Tracker, SegmentReader) {
        let tmp = tempfile::tempdir().unwrap();
        let t = tracker(tmp.path(), slots);
        let r = SegmentReader::open_engine(tmp.path(), "t").unwrap();
        (tmp, t, r)
    }

    /// One call of `tokens` from `*now` that takes what [`truth`] says of its shape and
    /// returns `ret`; 1 ms of host work after it. Returns (the step prediction a reader saw
    /// for each of the call's slots while it ran, the call's real duration).
    fn timed(
        t: &mut Tracker,
        r: &SegmentReader,
        tokens: &[(i32, i32)],
        ret: i32,
        now: &mut u64,
    ) -> (Vec<Option<u64>>, u64) {
        let mut b = OwnedBatch::single(tokens);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), *now) }.unwrap();
        let real = truth(&t.shape_between(0, u32::MAX).unwrap());
        let seen = t
            .call_slots()
            .map(|s| {
                let snap = r.slot(s).unwrap();
                let p = snap
                    .prediction
                    .expect("the capability is set: words are read");
                assert_eq!(p.task_expected_end_ns, 0, "the task end stays unknown");
                assert_eq!(snap.phase_end_ns(), None);
                snap.step_expected_ns()
            })
            .collect();
        *now += real;
        t.decode_finished(ret, *now);
        *now += MS;
        (seen, real)
    }

    /// `n` tokens of `seq` from position `p0`.
    fn run(seq: i32, p0: i32, n: i32) -> Vec<(i32, i32)> {
        (p0..p0 + n).map(|p| (p, seq)).collect()
    }

    #[test]
    fn shapes_follow_the_batch_and_its_ubatches() {
        let tmp = tempfile::tempdir().unwrap();
        let mut t = tracker(tmp.path(), 4);
        // A 6-token chunk of sequence 1 after 100 cached, then one decode token of
        // sequences 0 (at 40) and 2 (at 7).
        let mut toks = run(1, 100, 6);
        toks.extend([(40, 0), (7, 2)]);
        let mut b = OwnedBatch::single(&toks);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), 10) }.unwrap();
        // The chunk alone: exact.
        assert_eq!(t.shape_between(0, 6), Some(StepShape::prefill(6, 100)));
        // Its last 2 tokens: 4 more cached.
        assert_eq!(t.shape_between(4, 6), Some(StepShape::prefill(2, 104)));
        // Its last token and the two decode rows: one token each, a decode batch.
        assert_eq!(
            t.shape_between(5, 8),
            Some(StepShape::decode(3, 105 + 40 + 7))
        );
        assert_eq!(t.shape_between(6, 8), Some(StepShape::decode(2, 47)));
        // The whole call: a prefill of 8 whose attended pairs are the shares' own.
        let whole = t.shape_between(0, 8).unwrap();
        assert_eq!((whole.kind, whole.tokens), (StepKind::Prefill, 8));
        let pairs = StepShape::prefill(6, 100).attended() + 41.0 + 8.0;
        assert!(
            (whole.attended() - pairs).abs() <= 8.0,
            "{} vs {pairs}",
            whole.attended()
        );
        assert_eq!(t.shape_between(8, 12), None, "no token there");
        t.decode_finished(0, 20);
        // Without positions, the record's cache size is the context.
        let mut b = OwnedBatch::single(&[(0, 1)]);
        let mut raw = b.raw();
        raw.pos = std::ptr::null_mut();
        // SAFETY: `b` owns every array the batch points to (`pos` is null).
        unsafe { t.decode_started(&raw, 30) }.unwrap();
        assert_eq!(t.shape_between(0, 1), Some(StepShape::decode(1, 106)));
    }

    #[test]
    fn predictions_appear_after_the_first_steps_and_match_the_real_durations() {
        let (_tmp, mut t, r) = watched(1);
        let mut now = 1_000;
        // A 4,096-token prompt in 256-token calls: nothing predicted before the first one,
        // then every chunk within 5% of its real duration (later ones are slower).
        let (first, _) = timed(&mut t, &r, &run(0, 0, 256), 0, &mut now);
        assert_eq!(first, [None], "nothing learnt yet");
        let mut durations = vec![];
        for c in 1..16 {
            let (seen, real) = timed(&mut t, &r, &run(0, 256 * c, 256), 0, &mut now);
            durations.push(real);
            let seen = seen[0].expect("predicted after the first chunk");
            if c >= 3 {
                assert!(rel(seen, real) < 0.05, "chunk {c}: {seen} vs {real}");
            }
        }
        assert!(durations[14] > durations[0] * 3 / 2, "{durations:?}");
        assert_eq!(t.model().samples(StepKind::Prefill), 16);
        // Decode steps after it: the first is a kind of its own, the next ones predicted.
        let (first, _) = timed(&mut t, &r, &[(4096, 0)], 0, &mut now);
        assert_eq!(first, [None], "no decode step learnt yet");
        for k in 1..40 {
            let (seen, real) = timed(&mut t, &r, &[(4096 + k, 0)], 0, &mut now);
            let seen = seen[0].expect("decode predicted");
            assert!(rel(seen, real) < 0.05, "step {k}: {seen} vs {real}");
        }
        let snap = r.slot(0).unwrap();
        assert_eq!(
            snap.step_expected_ns(),
            None,
            "between steps: none in flight"
        );
        assert_ne!(
            snap.prediction.unwrap().error_ppm,
            0,
            "a bound once confident"
        );
    }

    #[test]
    fn failed_calls_are_not_learnt_and_a_stall_is_left_out() {
        let (_tmp, mut t, r) = watched(1);
        let mut now = 1_000;
        for (p, ret) in [(0, 1), (0, 2), (0, -3)] {
            timed(&mut t, &r, &run(0, p, 8), ret, &mut now);
        }
        assert_eq!(
            t.model().samples(StepKind::Prefill),
            0,
            "no KV room, aborted, error"
        );
        for k in 0..20 {
            timed(&mut t, &r, &[(k, 0)], 0, &mut now);
        }
        assert_eq!(t.model().samples(StepKind::Decode), 20);
        // A decode step 50 times its prediction: a stall, not learnt.
        let shape = StepShape::decode(1, 20);
        let before = t.model().predict(&shape).unwrap().ns;
        let mut b = OwnedBatch::single(&[(20, 0)]);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), now) }.unwrap();
        now += 50 * truth(&shape);
        t.decode_finished(0, now);
        assert_eq!(t.model().samples(StepKind::Decode), 20, "left out");
        assert_eq!(t.model().predict(&shape).unwrap().ns, before);
    }

    #[test]
    fn a_forward_of_four_slots_is_learnt_once_and_each_slot_gets_its_prediction() {
        let (_tmp, mut t, r) = watched(4);
        let mut now = 1_000;
        for k in 0..12 {
            let batch: Vec<_> = (0..4).map(|s| (100 * s + k, s)).collect();
            let (seen, real) = timed(&mut t, &r, &batch, 0, &mut now);
            assert_eq!(t.model().samples(StepKind::Decode), k as u64 + 1);
            assert!(
                seen.iter().all(|s| *s == seen[0]),
                "one prediction: {seen:?}"
            );
            if k >= 2 {
                let p = seen[0].unwrap();
                assert!(rel(p, real) < 0.05, "step {k}: {p} vs {real}");
            }
        }
        // Each slot's prediction names its own step and phase.
        let mut b = OwnedBatch::single(&[(12, 0), (112, 1), (212, 2), (312, 3)]);
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), now) }.unwrap();
        for s in 0..4 {
            let snap = r.slot(s).unwrap();
            let p = snap.prediction.unwrap();
            assert_eq!(
                (p.step_start_ns, p.phase_start_ns),
                (snap.state.step_start_ns, snap.state.phase_start_ns)
            );
        }
    }

    #[test]
    fn each_ubatch_is_a_step_learnt_and_predicted_on_its_own() {
        let (_tmp, mut t, r) = watched(1);
        t.set_shape(4, 30);
        t.set_ubatch_steps(true);
        let mut now = 1_000;
        // 10-token calls in ubatches of 4, 4 and 2, each timed as its own forward.
        for c in 0..6 {
            let p0 = 10 * c;
            let mut b = OwnedBatch::single(&run(0, p0, 10));
            // SAFETY: `b` owns every array of the batch.
            unsafe { t.decode_started(&b.raw(), now) }.unwrap();
            let mut from = 0;
            for to in [4u32, 8, 10] {
                let shape = t.shape_between(from, to).unwrap();
                assert_eq!(
                    shape,
                    StepShape::prefill(u64::from(to - from), (p0 as u32 + from).into())
                );
                let snap = r.slot(0).unwrap();
                assert_eq!(snap.state.step_start_ns, now, "the ubatch's own start");
                if c >= 3 {
                    let p = snap.step_expected_ns().expect("the ubatch is predicted");
                    assert!(rel(p, truth(&shape)) < 0.05, "{p} vs {}", truth(&shape));
                }
                now += truth(&shape);
                if to < 10 {
                    assert_eq!(t.ubatch_done(to, now), now);
                } else {
                    t.decode_finished(0, now);
                }
                from = to;
            }
            now += MS;
        }
        assert_eq!(
            t.model().samples(StepKind::Prefill),
            18,
            "three forwards a call"
        );
        // Without the ubatch hook, the whole call is the step.
        t.set_ubatch_steps(false);
        let mut b = OwnedBatch::single(&run(0, 60, 10));
        // SAFETY: `b` owns every array of the batch.
        unsafe { t.decode_started(&b.raw(), now) }.unwrap();
        let whole = t.model().predict(&StepShape::prefill(10, 60)).unwrap().ns;
        assert_eq!(r.slot(0).unwrap().step_expected_ns(), Some(whole));
        t.decode_finished(0, now + truth(&StepShape::prefill(10, 60)));
        assert_eq!(t.model().samples(StepKind::Prefill), 19);
    }
}
