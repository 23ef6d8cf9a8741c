//! The compute thread's loop: continuous batching, and the serial schedule as its special
//! case of at most one job.
//!
//! The loop keeps the [`Job`] each slot is running (a prefill, decode or generation in
//! its prompt or generation stage). Every iteration:
//! - it takes what the queue holds (blocking, with the heartbeat's timeout, only when no
//!   job runs); tasks wait in arrival order in their line: one line per slot with
//!   `--schedule batched`, one line for every slot with `--schedule serial`;
//! - it starts the first waiting task of every line that is free (batched: the slot runs
//!   no job; serial: no slot does): a prefill, decode or generation becomes the slot's
//!   job; a save, restore, erase or meta query through the queue runs at once, between
//!   iterations (so `?via=queue` still waits for the job ahead of it);
//! - every slot that is generating advances by one token, all of them in ONE forward
//!   ([`hydra_engine_core::Slots::decode_batch`]: the weight matmuls run once over the stacked rows,
//!   attention per slot against its own cache);
//! - one slot that is prefilling (in turn) runs one chunk of at most `--ubatch` tokens.
//!
//! A generation task (`TaskKind::Generate`) is checked for cancellation (its client gone,
//! or `POST /slots/{id}?action=cancel`) before each prefill chunk and before each sample,
//! and sends each token as soon as it is sampled.
//!
//! A task counts as pending in the segment until it starts. Every slot's steps are
//! published from this thread (`begin_task`, `step_started`, `step_finished`, `finish`),
//! the heartbeat is written on each iteration, and a shutdown cancels every running job
//! at its next step.

use super::job::{GenerationJob, Job, PromptJob, PromptReply};
use super::{Compute, IDLE_HEARTBEAT};
use crate::config::Schedule;
use crate::progress::TokenKind;
use crate::task::{Task, TaskKind};
use crate::task_error::{ClientError, TaskError};
use hydra_engine_core::sampling::StopReason;
use hydra_engine_core::slots::{Logits, SlotId, StepObserver};
use hydra_engine_core::EngineError;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};

struct Stepping<'c> {
    c: &'c mut Compute,
    /// The running job of each slot.
    jobs: Vec<Option<Job>>,
    /// Tasks waiting to start, in arrival order, by line.
    waiting: Vec<VecDeque<Task>>,
    /// The serial schedule: one line, at most one job.
    serial: bool,
    /// The slot whose prefill goes next (round robin).
    next_prefill: usize,
}

/// Runs the loop until the queue has closed and every task has ended.
pub(super) fn run(c: &mut Compute, rx: Receiver<Task>) {
    let n = c.shared.n_slots;
    let serial = c.schedule == Schedule::Serial;
    let lines = if serial { 1 } else { n };
    let mut s = Stepping {
        c,
        jobs: (0..n).map(|_| None).collect(),
        waiting: (0..lines).map(|_| VecDeque::new()).collect(),
        serial,
        next_prefill: 0,
    };
    let mut open = true;
    loop {
        s.c.progress.heartbeat();
        if open {
            open = s.receive(&rx);
        }
        s.start_waiting();
        if s.idle() {
            if open {
                continue;
            }
            break;
        }
        s.decode_step();
        s.prefill_step();
    }
}

impl Stepping<'_> {
    fn idle(&self) -> bool {
        self.jobs.iter().all(Option::is_none)
    }

    /// Takes every task the queue holds, waiting up to the heartbeat interval for one when
    /// no job runs. Returns false once the queue is closed and empty.
    fn receive(&mut self, rx: &Receiver<Task>) -> bool {
        let first = if self.idle() {
            match rx.recv_timeout(IDLE_HEARTBEAT) {
                Ok(task) => Some(task),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        } else {
            match rx.try_recv() {
                Ok(task) => Some(task),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => return false,
            }
        };
        let Some(first) = first else {
            return true;
        };
        self.accept(first);
        loop {
            match rx.try_recv() {
                Ok(task) => self.accept(task),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn accept(&mut self, task: Task) {
        if self.c.is_shutting_down() {
            // A task withdrawn before the shutdown was cancelled by then.
            let error = if self.c.take(&task) {
                ClientError::ShuttingDown
            } else {
                ClientError::Cancelled
            };
            task.reject(error.into());
            return;
        }
        let line = if self.serial { 0 } else { task.slot.get() };
        self.waiting[line].push_back(task);
    }

    /// Whether `line`'s next task may start.
    fn line_free(&self, line: usize) -> bool {
        if self.serial {
            self.idle()
        } else {
            self.jobs[line].is_none()
        }
    }

    /// Answers and drops the waiting tasks that were withdrawn (their client went away, or
    /// `?action=cancel&waiting=true`): the `cancelled` error, never started.
    fn drop_withdrawn(&mut self) {
        for line in &mut self.waiting {
            if line.iter().any(|t| t.ticket.is_withdrawn()) {
                let (gone, kept): (VecDeque<Task>, _) = std::mem::take(line)
                    .into_iter()
                    .partition(|t| t.ticket.is_withdrawn());
                *line = kept;
                gone.into_iter()
                    .for_each(|t| t.reject(ClientError::Cancelled.into()));
            }
        }
    }

    /// Starts the waiting tasks of every free line; tasks that are not generation run to
    /// completion here.
    fn start_waiting(&mut self) {
        self.drop_withdrawn();
        for line in 0..self.waiting.len() {
            while self.line_free(line) {
                let Some(task) = self.waiting[line].pop_front() else {
                    break;
                };
                if !self.c.take(&task) {
                    task.reject(ClientError::Cancelled.into());
                    continue;
                }
                if self.c.is_shutting_down() {
                    task.reject(ClientError::ShuttingDown.into());
                } else {
                    self.start(task);
                }
            }
        }
    }

    fn start(&mut self, task: Task) {
        let Task {
            slot,
            kind,
            arrival_ns,
            ..
        } = task;
        let c = &mut *self.c;
        // Taken by the task's begin; cleared after a task that begins none (an erase).
        c.arrival_ns = Some(arrival_ns);
        // Some(job) for the tasks that run as a job of the slot's (None when refused).
        let job = match kind {
            TaskKind::Prefill { spec, reply } => Some(PromptJob::begin(
                c,
                slot,
                spec.tokens,
                PromptReply::Prefill(reply),
            )),
            TaskKind::Decode { spec, reply } => {
                Some(GenerationJob::begin_decode(c, slot, &spec, reply))
            }
            TaskKind::Generate { spec, events } => {
                Some(PromptJob::begin_generate(c, slot, spec, events))
            }
            TaskKind::Save { reply } => {
                c.save(slot, reply);
                None
            }
            TaskKind::Restore { data, reply } => {
                c.restore(slot, data, reply);
                None
            }
            TaskKind::Erase { reply } => {
                c.erase(slot, reply);
                None
            }
            TaskKind::MetaViaQueue { reply } => {
                c.meta_via_queue(slot, reply);
                None
            }
        };
        c.arrival_ns = None;
        if let Some(job) = job {
            self.jobs[slot.get()] = job;
        }
    }

    /// One token for every generating slot, in one forward: sample each slot's token
    /// ([`Stepping::sample_all`]), run the forward over those that go on, then accept
    /// each token ([`Stepping::accept_all`]).
    fn decode_step(&mut self) {
        let steps = self.sample_all();
        if steps.is_empty() {
            return;
        }
        let c = &mut *self.c;
        let mut publisher = step_publisher!(c, TokenKind::Generated);
        match c.slots.decode_batch(&steps, &mut publisher) {
            Ok(logits) => self.accept_all(&steps, logits),
            Err(e) => {
                let e = TaskError::from(e);
                for &(slot, _) in &steps {
                    if let Some(job) = self.jobs[slot.get()].take() {
                        job.fail(self.c, e.clone());
                    }
                }
            }
        }
    }

    /// Samples the next token of every generating slot and returns the `(slot, token)`
    /// steps of the forward. A slot that does not go on ends here, in one of two ways:
    /// - `ended`: its generation ended as the sampler or the step observer says (the
    ///   length, EOS, a full context, or a shutdown), through [`Stepping::finish_generation`];
    /// - `cut`: the request ends it before the token's forward (a stop string in the text
    ///   sent, its client gone, or `?action=cancel`), through `GenerationJob::stop`.
    fn sample_all(&mut self) -> Vec<(SlotId, u32)> {
        let c = &mut *self.c;
        let model = c.slots.model().clone();
        let n_ctx = c.slots.n_ctx();
        let mut steps = Vec::new();
        let mut starts = Vec::new();
        let mut ended = Vec::new();
        let mut cut = Vec::new();
        for job in self.jobs.iter_mut() {
            let Some(Job::Generation(g)) = job else {
                continue;
            };
            let slot = g.slot;
            if g.is_cancelled(c) {
                cut.push((slot, StopReason::Cancelled));
                continue;
            }
            let n_past = c.slots.n_past(slot);
            let token = match g.gen.next_token(&mut g.sampler, &model, n_past, n_ctx) {
                Err(finish) => {
                    ended.push((slot, finish));
                    continue;
                }
                Ok(token) => token,
            };
            // Sent as soon as it is sampled, before its own forward.
            if let ControlFlow::Break(f) = g.sampled(&c.shared.tokenizer, token) {
                cut.push((slot, f));
                continue;
            }
            starts.push(g.gen.step_start(slot.get(), n_past));
            steps.push((slot, token));
        }
        // The batch is known: its steps start together, as one forward.
        if !starts.is_empty()
            && step_publisher!(c, TokenKind::Generated)
                .batch_started(&starts)
                .is_break()
        {
            ended.extend(
                steps
                    .drain(..)
                    .map(|(slot, _)| (slot, StopReason::Cancelled)),
            );
        }
        for (slot, finish) in ended {
            self.finish_generation(slot, finish);
        }
        for (slot, finish) in cut {
            if let Some(Job::Generation(g)) = self.jobs[slot.get()].take() {
                g.stop(self.c, finish);
            }
        }
        steps
    }

    /// Each slot's token is in its cache: the generation takes it and the next logits; a
    /// slot whose step observer breaks (a shutdown) ends as cancelled.
    fn accept_all(&mut self, steps: &[(SlotId, u32)], logits: Vec<Logits>) {
        let c = &mut *self.c;
        let mut publisher = step_publisher!(c, TokenKind::Generated);
        let mut cancelled = Vec::new();
        for (&(slot, token), logits) in steps.iter().zip(logits) {
            let Some(Job::Generation(g)) = &mut self.jobs[slot.get()] else {
                continue;
            };
            let n_past = c.slots.n_past(slot);
            let done = g.gen.accept(slot.get(), token, logits, n_past);
            if publisher.after_step(&done).is_break() {
                cancelled.push(slot);
            }
        }
        for slot in cancelled {
            self.finish_generation(slot, StopReason::Cancelled);
        }
    }

    /// The generation on `slot` ended for `finish`: publish, then reply.
    fn finish_generation(&mut self, slot: SlotId, finish: StopReason) {
        let slot = slot.get();
        match self.jobs[slot].take() {
            Some(Job::Generation(g)) => g.finish(self.c, finish),
            other => self.jobs[slot] = other,
        }
    }

    /// One chunk of the next prefilling slot's prompt.
    fn prefill_step(&mut self) {
        let n = self.jobs.len();
        let Some(slot) = (0..n)
            .map(|i| (self.next_prefill + i) % n)
            .find(|&s| matches!(self.jobs[s], Some(Job::Prompt(_))))
        else {
            return;
        };
        self.next_prefill = (slot + 1) % n;
        let mut p = match self.jobs[slot].take() {
            Some(Job::Prompt(p)) => p,
            other => return self.jobs[slot] = other,
        };
        let c = &mut *self.c;
        if p.is_cancelled(c) {
            return p.cancel(c);
        }
        let end = (p.done + c.ubatch).min(p.tokens.len());
        let board = &c.shared.cancel;
        let stop = || p.stops_on(board);
        let mut publisher = step_publisher!(c, TokenKind::Prompt, &stop);
        let r = c.slots.prefill_chunk(
            p.slot,
            &p.tokens[p.done..end],
            p.done,
            p.tokens.len(),
            &mut publisher,
        );
        if r.is_ok() {
            p.chunk_done();
        }
        self.jobs[slot] = match r {
            Ok(_) if end < p.tokens.len() => {
                p.done = end;
                Some(Job::Prompt(p))
            }
            Ok(_) => p.finish(c),
            // Stopped at a layer boundary of the chunk: the chunk is abandoned.
            Err(EngineError::Cancelled { .. }) if p.is_cancelled(c) => {
                p.cancel(c);
                None
            }
            Err(e) => {
                Job::Prompt(p).fail(c, e.into());
                None
            }
        };
    }
}
