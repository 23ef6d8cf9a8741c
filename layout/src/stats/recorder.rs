//! The writer side of the statistics and the flight recorder (FORMAT.md §17.5, §18.3): the
//! one home of the rules that turn a slot's step events into histogram observations,
//! counters and ring entries.
//!
//! It needs no calls of its own from a writer. [`SlotRecorder::observe`] is given each
//! record the writer publishes for the slot, and compares it with the one before: a new
//! `TASK_ID` or `TASK_START_NS` is a **task begins**, a new `PHASE_START_NS` a **phase
//! changes**, the phase going idle a **task ends**, a new `STEP_START_NS` a **step
//! starts**, `STEPS_DONE` growing a **step ends** (or a **work advances** block when no
//! step was in flight). Every `SlotState` transition leaves exactly these marks, so the
//! engine, the preload library and the C writer ABI get the statistics from the records
//! they already publish. Only two facts are not in the record, and only the host knows
//! them: when a task arrived, and why it ended ([`SlotRecorder::note_arrival`],
//! [`SlotRecorder::note_finish`]).
//!
//! Each event's changed words are collected and stored as one seqlock update of the
//! block with the writer's own copy of the values (it is their only writer: no
//! read-modify-write on shared memory).

use super::{
    buckets, HistogramKind, BUSY_NS_OFFSET, CAUSE_WORDS, ERRORS_BY_CODE_OFFSET,
    HIST_BUCKETS_OFFSET, HIST_COUNT_OFFSET, HIST_SUM_OFFSET, LAST_FINISH_CAUSE_OFFSET, PHASE_WORDS,
    PROMPT_TOKENS_COMPUTED_OFFSET, PROMPT_TOKENS_REUSED_OFFSET, STATS_LEN, STEPS_ABANDONED_OFFSET,
    STEPS_OFFSET, TASKS_BEGUN_OFFSET, TASKS_BY_CAUSE_OFFSET, TASKS_ENDED_OFFSET,
    TASKS_NO_ARRIVAL_OFFSET, TASK_ARRIVAL_NS_OFFSET, TOKENS_GENERATED_OFFSET,
};
use crate::flight::{self, FlightEntry};
use crate::header::WORD_LEN;
use crate::seqlock::{self, MappedRecord};
use crate::slot::{
    FinishCause, FinishReason, Phase, Prediction, SlotState, StepDevices, StepResult, Substep,
};
use crate::words::MappedWords;

/// The step in flight's size and context, as the writer remembers them from its **step
/// starts** (the record keeps the size only while the step runs).
#[derive(Debug, Clone, Copy, Default)]
struct StepMemo {
    size: u64,
    n_past: u64,
}

/// The device waits of one step (FORMAT §5.6, §18.2), from the writer's
/// `publish_step_devices` calls: what its flight recorder entry says it waited on.
#[derive(Debug, Clone, Copy, Default)]
struct WaitMemo {
    /// `STEP_START_NS` of the step the waits belong to.
    step_start_ns: u64,
    /// The last device it waited on (0 = none).
    last_device: u64,
    /// Time of its finished waits, ns.
    waited_ns: u64,
    /// Start of the wait in progress.
    open_since: Option<u64>,
    /// Where the time already counted ends: a wait published again after a nested one
    /// (its start unchanged) counts only from there, so that nested waits are not counted
    /// twice.
    counted_until: u64,
}

impl WaitMemo {
    /// `(last device, ns waited)` of the step that started at `start_ns` and ended at
    /// `end_ns`, a wait still open counted up to the end; none for another step.
    fn of_step(&self, start_ns: u64, end_ns: u64) -> (u64, u64) {
        if start_ns == 0 || self.step_start_ns != start_ns {
            return (0, 0);
        }
        let open = self.open_since.map_or(0, |since| {
            end_ns.saturating_sub(since.max(self.counted_until))
        });
        (self.last_device, self.waited_ns.saturating_add(open))
    }
}

/// A wait on a device that ended, as [`SlotRecorder::note_devices`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndedWait {
    /// The phase of the step that waited.
    pub phase: Phase,
    /// The device waited on.
    pub device: u64,
    /// `STEP_START_NS` of the step that waited.
    pub step_start: u64,
    /// How long it lasted, ns.
    pub ns: u64,
}

/// A step that ended (finished or abandoned), before it becomes statistics and an entry.
#[derive(Debug, Clone, Copy)]
struct Ended {
    task_id: u64,
    kind: Phase,
    result: StepResult,
    start_ns: u64,
    duration_ns: u64,
    size: u64,
    advanced: u64,
    context: u64,
}

/// What the writer keeps per slot to derive statistics from consecutive records.
#[derive(Debug)]
pub(crate) struct SlotRecorder {
    /// The record as last published.
    prev: SlotState,
    /// The prediction as last published.
    prediction: Prediction,
    /// The step in flight's start, size and context.
    step: StepMemo,
    /// Arrival time of the current task (none: not given).
    arrival: Option<u64>,
    /// Arrival time the host gave for the next task to begin.
    next_arrival: Option<u64>,
    /// Finish cause and time the host gave for the running task's end.
    next_finish: Option<(FinishCause, u64)>,
    /// The current task has computed (its queue wait is observed).
    computed: bool,
    /// Whether arrivals are requests' (queue wait is observed), not prompt starts.
    queue_wait: bool,
    /// The current task has had its first token (its TTFT is observed).
    first_token: bool,
    /// The current task began in decode (its TTFT is its first advancing decode step).
    began_in_decode: bool,
    /// The step in flight's device waits.
    wait: WaitMemo,
    /// Flight recorder entries written so far.
    ordinal: u64,
    /// The block's last stored (even) `STATS_SEQ`.
    seq: u64,
    /// The writer's copy of the block (index = offset / 8).
    words: Box<[u64]>,
    /// Words changed by the event being observed: `(offset, value)`.
    dirty: Vec<(usize, u64)>,
    /// Entries of the event being observed (at most three: a task ended, the next begun
    /// with a step that ended in the same record).
    entries: Vec<FlightEntry>,
}

impl Default for SlotRecorder {
    fn default() -> Self {
        Self {
            prev: SlotState::default(),
            prediction: Prediction::default(),
            step: StepMemo::default(),
            arrival: None,
            next_arrival: None,
            next_finish: None,
            computed: false,
            queue_wait: true,
            first_token: false,
            began_in_decode: false,
            wait: WaitMemo::default(),
            ordinal: 0,
            seq: 0,
            words: vec![0; STATS_LEN / WORD_LEN].into_boxed_slice(),
            dirty: Vec::with_capacity(64),
            entries: Vec::with_capacity(4),
        }
    }
}

/// Where a slot's block and ring are in the mapping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    /// Byte offset of the slot's statistics item.
    pub(crate) stats: usize,
    /// Byte offset of the slot's flight recorder item.
    pub(crate) ring: usize,
}

impl SlotRecorder {
    /// A slot's recorder; `queue_wait`: the arrivals it is given are requests' (the
    /// `arrival_times` capability), so a task's first compute observes its queue wait.
    pub(crate) fn new(queue_wait: bool) -> Self {
        Self {
            queue_wait,
            ..Self::default()
        }
    }

    /// The host's arrival time (CLOCK_MONOTONIC ns) for the next task to begin on the slot.
    pub(crate) fn note_arrival(&mut self, arrival_ns: u64) {
        self.next_arrival = Some(arrival_ns);
    }

    /// The host's cause for the running task's end, and when it ended.
    pub(crate) fn note_finish(&mut self, cause: FinishCause, now_ns: u64) {
        self.next_finish = Some((cause, now_ns));
    }

    /// The prediction the writer published with (or after) the record.
    pub(crate) fn note_prediction(&mut self, prediction: &Prediction) {
        self.prediction = *prediction;
    }

    /// Whether publishing `new` crosses a step boundary (a step starts or ends, the phase
    /// or the task changes): the record's step device words are then cleared in the same
    /// update (FORMAT §5.6).
    pub(crate) fn crosses_step(&self, new: &SlotState) -> bool {
        let p = &self.prev;
        new.step_start_ns != p.step_start_ns
            || new.steps_done != p.steps_done
            || new.phase != p.phase
            || new.phase_start_ns != p.phase_start_ns
            || new.task_id != p.task_id
            || new.task_start_ns != p.task_start_ns
    }

    /// The step in flight's device words as the writer published them; `clock` gives the
    /// end of a wait that ended with them. Returns that wait, if one ended: the phase of
    /// its step, its device, its start and its duration.
    pub(crate) fn note_devices(
        &mut self,
        d: &StepDevices,
        clock: impl FnOnce() -> u64,
    ) -> Option<EndedWait> {
        let step = self.prev.step_start_ns;
        if step == 0 {
            return None;
        }
        if self.wait.step_start_ns != step {
            self.wait = WaitMemo {
                step_start_ns: step,
                ..WaitMemo::default()
            };
        }
        let same_wait = d.wait_device != 0 && Some(d.wait_since_ns) == self.wait.open_since;
        let mut ended = None;
        if let Some(since) = self.wait.open_since.filter(|_| !same_wait) {
            let end = clock();
            let ns = end.saturating_sub(since);
            let new = end.saturating_sub(since.max(self.wait.counted_until));
            self.wait.waited_ns = self.wait.waited_ns.saturating_add(new);
            self.wait.counted_until = self.wait.counted_until.max(end);
            self.wait.open_since = None;
            ended = Some(EndedWait {
                phase: self.prev.phase,
                device: self.wait.last_device,
                step_start: step,
                ns,
            });
        }
        if d.wait_device != 0 {
            self.wait.last_device = d.wait_device;
            self.wait.open_since = Some(d.wait_since_ns);
        }
        ended
    }

    /// Derives the statistics of the transition from the last published record to `new`,
    /// and publishes them at `place` in `w`. `substep` reads the slot's layer position as
    /// published (under the slot's writer lock; only called when a step ended); `clock`
    /// gives the time of a task's end the host did not note.
    pub(crate) fn observe(
        &mut self,
        new: &SlotState,
        substep: impl FnOnce() -> Substep,
        clock: impl FnOnce() -> u64,
        w: &MappedWords,
        place: Place,
    ) {
        self.derive(new, clock);
        self.prev = *new;
        self.publish(substep, w, place);
    }

    fn derive(&mut self, new: &SlotState, clock: impl FnOnce() -> u64) {
        let prev = self.prev;
        let new_task = new.phase.is_active()
            && (new.task_id != prev.task_id
                || new.task_start_ns != prev.task_start_ns
                || !prev.phase.is_active());
        if new_task {
            if prev.phase.is_active() {
                // The previous task never ended: it ends now, its step interrupted.
                let now = new.task_start_ns;
                self.abandon(&prev, StepResult::Interrupted, now);
                self.end_phase(prev.phase, &prev);
                self.end_task(FinishCause::Unspecified, FinishReason::None, 0, now);
            }
            self.begin_task(new);
            self.steps(&fresh_phase(new), new, StepResult::Interrupted, 0);
        } else if prev.phase.is_active() && !new.phase.is_active() {
            // The task ends: first what its last record shows of its step, then the end.
            let (cause, now) = match self.next_finish.take() {
                Some((cause, now)) => (cause, now),
                None => (FinishCause::from_reason(new.finish_reason), clock()),
            };
            let abandoned = StepResult::abandoned_by(new.finish_reason);
            self.steps(&prev, new, abandoned, now);
            self.end_phase(prev.phase, new);
            self.end_task(cause, new.finish_reason, new.error_code.to_raw(), now);
        } else if new.phase.is_active()
            && (new.phase_start_ns != prev.phase_start_ns || new.phase != prev.phase)
        {
            // The phase changes within the task.
            let now = new.phase_start_ns;
            self.abandon(&prev, StepResult::Interrupted, now);
            self.end_phase(prev.phase, &prev);
            if prev.phase == Phase::Prefill && new.phase == Phase::Decode && !self.first_token {
                self.first_token = true;
                self.observe_since_arrival(HistogramKind::Ttft, now);
            }
            if new.phase == Phase::Prefill {
                self.add(PROMPT_TOKENS_REUSED_OFFSET, new.tokens_cached);
            }
            self.steps(&fresh_phase(new), new, StepResult::Interrupted, now);
        } else if new.phase.is_active() {
            self.steps(&prev, new, StepResult::Interrupted, 0);
        }
    }

    /// A **task begins** with `new` (its first phase's record).
    fn begin_task(&mut self, new: &SlotState) {
        self.add(TASKS_BEGUN_OFFSET, 1);
        self.arrival = self.next_arrival.take();
        self.next_finish = None;
        match self.arrival {
            Some(arrival) => self.set(TASK_ARRIVAL_NS_OFFSET, arrival),
            None => {
                self.set(TASK_ARRIVAL_NS_OFFSET, 0);
                self.add(TASKS_NO_ARRIVAL_OFFSET, 1);
            }
        }
        self.computed = false;
        self.first_token = false;
        self.began_in_decode = new.phase == Phase::Decode;
        self.step = StepMemo::default();
        if new.phase == Phase::Prefill {
            self.add(PROMPT_TOKENS_REUSED_OFFSET, new.tokens_cached);
        }
    }

    /// The step events between two records of one phase: a step that ended, was restarted
    /// or abandoned (with `abandoned`, at `now`), and a step that started.
    fn steps(&mut self, prev: &SlotState, new: &SlotState, abandoned: StepResult, now: u64) {
        let kind = prev.phase;
        let advanced = new.work_done.saturating_sub(prev.work_done);
        if new.steps_done > prev.steps_done {
            if prev.step_start_ns != 0 {
                // Step ends.
                self.finished(Ended {
                    task_id: prev.task_id,
                    kind,
                    result: progress_result(advanced),
                    start_ns: prev.step_start_ns,
                    duration_ns: new.last_step_ns,
                    size: self.step.size,
                    advanced,
                    context: self.step.n_past,
                });
            } else {
                // Work advances: the time since the last progress was one block.
                let start_ns = prev.last_progress_ns;
                self.first_compute(start_ns);
                self.finished(Ended {
                    task_id: prev.task_id,
                    kind,
                    result: progress_result(advanced),
                    start_ns,
                    duration_ns: new.last_step_ns,
                    size: advanced,
                    advanced,
                    context: prev.n_past,
                });
            }
        } else if prev.step_start_ns != 0 && new.step_start_ns != prev.step_start_ns {
            if new.step_start_ns != 0 {
                // Restarted: the finished part is a step of its own.
                self.finished(Ended {
                    task_id: prev.task_id,
                    kind,
                    result: progress_result(advanced),
                    start_ns: prev.step_start_ns,
                    duration_ns: new.step_start_ns.saturating_sub(prev.step_start_ns),
                    size: self.step.size,
                    advanced,
                    context: self.step.n_past,
                });
            } else {
                self.abandon(prev, abandoned, now);
            }
        }
        if new.step_start_ns != 0 && new.step_start_ns != prev.step_start_ns {
            // Step starts.
            self.first_compute(new.step_start_ns);
            self.step = StepMemo {
                size: new.step_size,
                n_past: new.n_past,
            };
        }
    }

    /// The task's first compute starts at `start`: its queue wait.
    fn first_compute(&mut self, start: u64) {
        if !self.computed {
            self.computed = true;
            if self.queue_wait {
                self.observe_since_arrival(HistogramKind::QueueWait, start);
            }
        }
    }

    /// A step in flight in `prev` ends unfinished at `now`.
    fn abandon(&mut self, prev: &SlotState, result: StepResult, now: u64) {
        if prev.step_start_ns == 0 {
            return;
        }
        let duration_ns = now.saturating_sub(prev.step_start_ns);
        let p = phase_index(prev.phase);
        self.add(STEPS_ABANDONED_OFFSET + p * WORD_LEN, 1);
        self.add(BUSY_NS_OFFSET + p * WORD_LEN, duration_ns);
        self.entry(Ended {
            task_id: prev.task_id,
            kind: prev.phase,
            result,
            start_ns: prev.step_start_ns,
            duration_ns,
            size: self.step.size,
            advanced: 0,
            context: self.step.n_past,
        });
    }

    /// A finished step (or block): its histograms, counters and entry.
    fn finished(&mut self, e: Ended) {
        let p = phase_index(e.kind);
        if let Some(h) = HistogramKind::step_of(e.kind) {
            self.observe_value(h, e.duration_ns);
        }
        self.add(BUSY_NS_OFFSET + p * WORD_LEN, e.duration_ns);
        self.add(STEPS_OFFSET + p * WORD_LEN, 1);
        match e.kind {
            Phase::Prefill => self.add(PROMPT_TOKENS_COMPUTED_OFFSET, e.advanced),
            Phase::Decode => {
                self.add(TOKENS_GENERATED_OFFSET, e.advanced);
                if e.advanced >= 1 {
                    self.observe_many(
                        HistogramKind::Itl,
                        e.duration_ns / e.advanced,
                        e.advanced,
                        e.duration_ns,
                    );
                    if self.began_in_decode && !self.first_token {
                        self.first_token = true;
                        let now = e.start_ns.saturating_add(e.duration_ns);
                        self.observe_since_arrival(HistogramKind::Ttft, now);
                    }
                }
            }
            _ => {}
        }
        if let (Some(h), Some(predicted)) = (HistogramKind::ratio_of(e.kind), self.predicted(&e)) {
            if let Some(r) = buckets::ratio_q20(e.duration_ns, predicted) {
                self.observe_many(h, r, 1, r.min(buckets::RATIO_SUM_CAP));
            }
        }
        self.entry(e);
    }

    /// The prediction published for the step that started at `e.start_ns`, if any.
    fn predicted(&self, e: &Ended) -> Option<u64> {
        (self.prediction.step_start_ns == e.start_ns && self.prediction.step_expected_ns != 0)
            .then_some(self.prediction.step_expected_ns)
    }

    /// A `phase` whose last figures `state` holds ends: its prefill or decode time, if it
    /// did work.
    fn end_phase(&mut self, phase: Phase, state: &SlotState) {
        let h = match phase {
            Phase::Prefill => HistogramKind::PrefillTime,
            Phase::Decode => HistogramKind::DecodeTime,
            _ => return,
        };
        if state.work_done > 0 {
            let v = state.last_progress_ns.saturating_sub(state.phase_start_ns);
            self.observe_value(h, v);
        }
    }

    /// A **task ends** at `now` with `cause` (the record's `reason` and error `code`).
    fn end_task(&mut self, cause: FinishCause, reason: FinishReason, code: u64, now: u64) {
        self.observe_since_arrival(HistogramKind::E2e, now);
        self.add(TASKS_ENDED_OFFSET, 1);
        let c = cause.to_raw();
        self.add(TASKS_BY_CAUSE_OFFSET + capped(c) * WORD_LEN, 1);
        if reason == FinishReason::Error {
            self.add(ERRORS_BY_CODE_OFFSET + capped(code) * WORD_LEN, 1);
        }
        self.set(LAST_FINISH_CAUSE_OFFSET, c);
        self.arrival = None;
        self.step = StepMemo::default();
    }

    /// Observes `now - arrival` in `h`, when the task has an arrival time.
    fn observe_since_arrival(&mut self, h: HistogramKind, now: u64) {
        if let Some(arrival) = self.arrival {
            self.observe_value(h, now.saturating_sub(arrival));
        }
    }

    fn observe_value(&mut self, h: HistogramKind, value: u64) {
        self.observe_many(h, value, 1, value);
    }

    /// `n` observations of `value` in `h`, adding `sum` to its `SUM`.
    fn observe_many(&mut self, h: HistogramKind, value: u64, n: u64, sum: u64) {
        let base = h.offset();
        self.add(base + HIST_COUNT_OFFSET, n);
        self.add(base + HIST_SUM_OFFSET, sum);
        self.add(
            base + HIST_BUCKETS_OFFSET + h.bucket_of(value) * WORD_LEN,
            n,
        );
    }

    fn add(&mut self, offset: usize, delta: u64) {
        if delta != 0 {
            let v = self.words[offset / WORD_LEN].saturating_add(delta);
            self.set(offset, v);
        }
    }

    fn set(&mut self, offset: usize, value: u64) {
        self.words[offset / WORD_LEN] = value;
        self.dirty.push((offset, value));
    }

    fn entry(&mut self, e: Ended) {
        let (wait_device, wait_ns) = self
            .wait
            .of_step(e.start_ns, e.start_ns.saturating_add(e.duration_ns));
        self.entries.push(FlightEntry {
            ordinal: 0,
            task_id: e.task_id,
            kind: e.kind,
            result: e.result,
            start_ns: e.start_ns,
            duration_ns: e.duration_ns,
            size: e.size,
            advanced: e.advanced,
            context: e.context,
            layers_done: 0,
            layers_total: 0,
            predicted_ns: self.predicted(&e).unwrap_or(0),
            wait_device,
            wait_ns,
        });
    }

    /// Stores the event's changed words (one update of the block) and its ring entries.
    fn publish(&mut self, substep: impl FnOnce() -> Substep, w: &MappedWords, place: Place) {
        if !self.dirty.is_empty() {
            let block = MappedRecord {
                words: *w,
                base: place.stats,
            };
            self.seq = seqlock::write_scattered(&block, self.seq, &self.dirty);
            self.dirty.clear();
        }
        if self.entries.is_empty() {
            return;
        }
        let substep = substep();
        for mut e in self.entries.drain(..) {
            if substep.step_start_ns == e.start_ns && substep.total != 0 {
                e.layers_done = substep.done;
                e.layers_total = substep.total;
            }
            self.ordinal += 1;
            flight::append(w, place.ring, self.ordinal, &e);
        }
    }
}

/// `new`'s phase as it was when it began: nothing done, no step.
fn fresh_phase(new: &SlotState) -> SlotState {
    SlotState {
        work_done: 0,
        steps_done: 0,
        step_start_ns: 0,
        step_size: 0,
        last_step_ns: 0,
        last_progress_ns: new.phase_start_ns,
        ..*new
    }
}

fn progress_result(advanced: u64) -> StepResult {
    if advanced > 0 {
        StepResult::Advanced
    } else {
        StepResult::NoProgress
    }
}

/// Index of a phase in the per-phase arrays (unknown phases share the last word).
fn phase_index(phase: Phase) -> usize {
    (phase.to_raw() as usize).min(PHASE_WORDS - 1)
}

/// Index in a by-cause or by-code array: 15 holds every larger value.
fn capped(value: u64) -> usize {
    (value as usize).min(CAUSE_WORDS - 1)
}
