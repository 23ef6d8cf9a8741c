//! The batched schedule (`--schedule batched`, the default): continuous batching.
//!
//! The compute thread keeps the task each slot is running. Every iteration of its loop:
//! - it takes what the queue holds (blocking, with the heartbeat's timeout, only when no
//!   slot is busy); tasks for a slot run in the order they came, one at a time per slot;
//! - it starts the next task of every free slot: a prefill, decode or completion becomes
//!   the slot's running task; a save, restore, erase or meta query through the queue runs
//!   at once, between iterations (so `?via=queue` still waits for the slot's running task);
//! - every slot that is generating advances by one token, all of them in ONE forward
//!   ([`crate::Slots::decode_batch`]: the weight matmuls run once over the stacked rows,
//!   attention per slot against its own cache);
//! - one slot that is prefilling (in turn) runs one chunk of at most `--ubatch` tokens.
//!
//! Every slot's steps are published from this thread exactly as in the serial schedule
//! (`begin_task`, `step_started`, `step_finished`, `finish`), the heartbeat is written on
//! each iteration, and a shutdown cancels every running task at its next step.

use super::generation::{gen_finish, GenJob};
use super::{process_cpu_ns, send, Compute, IDLE_HEARTBEAT};
use crate::sampling::{FinishReason as GenFinish, Generator, Sampler};
use crate::server::generate::{GenEvent, GenFinish as OutFinish, GenOutput, GenerateSpec};
use crate::server::progress::TokenKind;
use crate::server::task::{DecodeResult, DecodeSpec, PrefillResult, Reply, Task};
use crate::server::task_error::TaskError;
use crate::slots::StepObserver;
use hydra_layout::{Phase, WorkUnit};
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Instant;

/// Where a running task's reply goes.
enum Answer {
    Prefill(Reply<PrefillResult>),
    Decode(Reply<DecodeResult>),
    /// A completion; `prefill` holds its prefill's result once that part is done.
    Completion {
        reply: Reply<(PrefillResult, DecodeResult)>,
        prefill: Option<PrefillResult>,
    },
    /// A generation that streams its tokens ([`Task::Generate`]).
    Generate(Box<GenJob>),
}

impl Answer {
    /// Answers with `error`.
    fn fail(self, error: TaskError) {
        match self {
            Answer::Prefill(reply) => send(reply, Err(error)),
            Answer::Decode(reply) => send(reply, Err(error)),
            Answer::Completion { reply, .. } => send(reply, Err(error)),
            Answer::Generate(g) => g.out.fail(error),
        }
    }
}

/// A generation in progress.
struct Decoding {
    gen: Generator,
    sampler: Sampler,
    start: Instant,
    cpu_start: u64,
}

enum Stage {
    /// `done` of `tokens` are in the slot; `then` is the decode of a completion.
    Prefill {
        tokens: Vec<u32>,
        done: usize,
        start: Instant,
        then: Option<DecodeSpec>,
    },
    Decode(Box<Decoding>),
}

/// The task a slot is running.
struct Job {
    task_id: u64,
    stage: Stage,
    answer: Answer,
}

struct Batched<'c> {
    c: &'c mut Compute,
    /// The running task of each slot.
    jobs: Vec<Option<Job>>,
    /// Tasks waiting for their slot, in arrival order.
    waiting: Vec<VecDeque<Task>>,
    /// The slot whose prefill goes next (round robin).
    next_prefill: usize,
}

/// The loop's state over `c`, every slot free.
fn batched(c: &mut Compute) -> Batched<'_> {
    let n = c.shared.n_slots;
    Batched {
        c,
        jobs: (0..n).map(|_| None).collect(),
        waiting: (0..n).map(|_| VecDeque::new()).collect(),
        next_prefill: 0,
    }
}

/// Runs one task to its end with this schedule's steps (the serial schedule's generation
/// tasks).
pub(super) fn run_single(c: &mut Compute, task: Task) {
    let mut b = batched(c);
    b.start(task);
    while b.jobs.iter().any(Option::is_some) {
        b.c.progress.heartbeat();
        b.decode_step();
        b.prefill_step();
    }
}

/// Runs the loop until the queue has closed and every task has ended.
pub(super) fn run(c: &mut Compute, rx: Receiver<Task>) {
    let mut b = batched(c);
    let mut open = true;
    loop {
        b.c.progress.heartbeat();
        if open {
            open = b.receive(&rx);
        }
        b.start_waiting();
        let busy = b.jobs.iter().any(Option::is_some);
        if !busy {
            if open {
                continue;
            }
            break;
        }
        b.decode_step();
        b.prefill_step();
    }
}

impl Batched<'_> {
    /// Takes every task the queue holds, waiting up to the heartbeat interval for one when
    /// no slot is busy. Returns false once the queue is closed and empty.
    fn receive(&mut self, rx: &Receiver<Task>) -> bool {
        let idle = self.jobs.iter().all(Option::is_none);
        let first = if idle {
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
        self.c.dequeued(&task);
        if self.c.is_shutting_down() {
            task.reject(TaskError::ShuttingDown);
            return;
        }
        let slot = task.slot();
        if slot < self.jobs.len() {
            self.waiting[slot].push_back(task);
        } else {
            // Refused at once (unknown slot), as the serial schedule refuses it.
            self.c.handle(task);
        }
    }

    /// Starts the next waiting task of every free slot; tasks that are not generation run
    /// to completion here.
    fn start_waiting(&mut self) {
        for slot in 0..self.jobs.len() {
            while self.jobs[slot].is_none() {
                let Some(task) = self.waiting[slot].pop_front() else {
                    break;
                };
                if self.c.is_shutting_down() {
                    task.reject(TaskError::ShuttingDown);
                } else {
                    self.start(task);
                }
            }
        }
    }

    fn start(&mut self, task: Task) {
        match task {
            Task::Prefill { slot, spec, reply } => {
                self.begin_prefill(slot, spec.tokens, None, Answer::Prefill(reply))
            }
            Task::Completion {
                slot,
                prefill,
                decode,
                reply,
            } => self.begin_prefill(
                slot,
                prefill.tokens,
                Some(decode),
                Answer::Completion {
                    reply,
                    prefill: None,
                },
            ),
            Task::Decode { slot, spec, reply } => {
                let answer = Answer::Decode(reply);
                let total = spec.n_predict as u64;
                match self
                    .c
                    .begin_task(slot, Phase::Decode, WorkUnit::Tokens, total)
                {
                    Ok(task_id) => self.begin_decode(slot, task_id, &spec, answer),
                    Err(e) => answer.fail(e),
                }
            }
            Task::Generate { slot, spec, events } => self.begin_generate(slot, spec, events),
            other => self.c.handle(other),
        }
    }

    /// Starts a generation task: its prompt (what the slot does not already hold of it),
    /// then its tokens.
    fn begin_generate(
        &mut self,
        slot: usize,
        spec: GenerateSpec,
        events: crate::server::generate::GenEvents,
    ) {
        let out = GenOutput::new(&spec, events);
        let Some(begun) = self.c.begin_generation(slot, &spec, out) else {
            return;
        };
        self.jobs[slot] = Some(Job {
            task_id: begun.job.task_id,
            stage: Stage::Prefill {
                tokens: begun.rest,
                done: 0,
                start: Instant::now(),
                then: Some(spec.decode),
            },
            answer: Answer::Generate(begun.job),
        });
    }

    /// The generation task on `slot` ends for `finish` (cancelled, or a stop string).
    fn finish_generate(&mut self, slot: usize, finish: OutFinish) {
        let Some(job) = self.jobs[slot].take() else {
            return;
        };
        match (job.stage, job.answer) {
            (stage, Answer::Generate(g)) => {
                let tokens = match stage {
                    Stage::Decode(d) => d.gen.tokens().to_vec(),
                    Stage::Prefill { .. } => Vec::new(),
                };
                self.c.end_generation(slot, *g, finish, tokens);
            }
            (stage, answer) => {
                self.jobs[slot] = Some(Job {
                    task_id: job.task_id,
                    stage,
                    answer,
                })
            }
        }
    }

    fn begin_prefill(
        &mut self,
        slot: usize,
        tokens: Vec<u32>,
        then: Option<DecodeSpec>,
        answer: Answer,
    ) {
        let total = tokens.len() as u64;
        let task_id = match self
            .c
            .begin_task(slot, Phase::Prefill, WorkUnit::Tokens, total)
        {
            Ok(id) => id,
            Err(e) => return answer.fail(e),
        };
        if let Err(e) = self.c.slots.check_prefill(slot, &tokens, self.c.ubatch) {
            return self.fail(slot, answer, e.into());
        }
        let stage = Stage::Prefill {
            tokens,
            done: 0,
            start: Instant::now(),
            then,
        };
        self.jobs[slot] = Some(Job {
            task_id,
            stage,
            answer,
        });
    }

    /// Turns the slot's started task into a generation, or ends it when refused.
    fn begin_decode(&mut self, slot: usize, task_id: u64, spec: &DecodeSpec, answer: Answer) {
        match self.c.decode_start(slot, spec) {
            Ok((first, sampler, params)) => {
                let decoding = Decoding {
                    gen: Generator::new(first, params),
                    sampler,
                    start: Instant::now(),
                    cpu_start: process_cpu_ns(),
                };
                self.jobs[slot] = Some(Job {
                    task_id,
                    stage: Stage::Decode(Box::new(decoding)),
                    answer,
                });
            }
            Err(e) => self.fail(slot, answer, e),
        }
    }

    /// One token for every generating slot, in one forward.
    fn decode_step(&mut self) {
        let c = &mut *self.c;
        let model = c.slots.model().clone();
        let n_ctx = c.slots.n_ctx();
        let mut steps = Vec::new();
        let mut ended = Vec::new();
        let mut stopped = Vec::new();
        for (slot, job) in self.jobs.iter_mut().enumerate() {
            let Some(Job {
                stage: Stage::Decode(d),
                answer,
                ..
            }) = job
            else {
                continue;
            };
            if let Answer::Generate(g) = answer {
                if c.generation_cancelled(slot, g) {
                    stopped.push((slot, OutFinish::Cancelled));
                    continue;
                }
            }
            let n_past = c.slots.n_past(slot).unwrap_or(n_ctx);
            match d.gen.next_token(&mut d.sampler, &model, n_past, n_ctx) {
                Err(finish) => ended.push((slot, finish)),
                Ok(token) => {
                    // Sent as soon as it is sampled, before its own forward.
                    if let Answer::Generate(g) = answer {
                        let tok = &c.shared.tokenizer;
                        if let ControlFlow::Break(f) = g.out.token(tok, token, d.gen.logits()) {
                            stopped.push((slot, f));
                            continue;
                        }
                    }
                    let mut publisher = step_publisher!(c, TokenKind::Generated);
                    if publisher
                        .before_step(&d.gen.step_start(slot, n_past))
                        .is_break()
                    {
                        ended.push((slot, GenFinish::Cancelled));
                    } else {
                        steps.push((slot, token));
                    }
                }
            }
        }
        for (slot, finish) in ended {
            self.finish_decode(slot, finish);
        }
        for (slot, finish) in stopped {
            self.finish_generate(slot, finish);
        }
        if steps.is_empty() {
            return;
        }
        let c = &mut *self.c;
        let mut publisher = step_publisher!(c, TokenKind::Generated);
        match c.slots.decode_batch(&steps, &mut publisher) {
            Ok(logits) => {
                let mut cancelled = Vec::new();
                for (&(slot, token), logits) in steps.iter().zip(logits) {
                    let Some(Job {
                        stage: Stage::Decode(d),
                        ..
                    }) = &mut self.jobs[slot]
                    else {
                        continue;
                    };
                    let n_past = c.slots.n_past(slot).unwrap_or(0);
                    let done = d.gen.accept(slot, token, logits, n_past);
                    if publisher.after_step(&done).is_break() {
                        cancelled.push(slot);
                    }
                }
                for slot in cancelled {
                    self.finish_decode(slot, GenFinish::Cancelled);
                }
            }
            Err(e) => {
                let e = TaskError::from(e);
                for &(slot, _) in &steps {
                    if let Some(job) = self.jobs[slot].take() {
                        self.fail(slot, job.answer, e.clone());
                    }
                }
            }
        }
    }

    /// The generation on `slot` ended for `finish`: publish, then reply.
    fn finish_decode(&mut self, slot: usize, finish: GenFinish) {
        if let Some(Job {
            answer: Answer::Generate(_),
            ..
        }) = &self.jobs[slot]
        {
            return self.finish_generate(slot, gen_finish(finish));
        }
        let Some(job) = self.jobs[slot].take() else {
            return;
        };
        let Stage::Decode(d) = job.stage else {
            self.jobs[slot] = Some(job);
            return;
        };
        let result = self.c.decode_result(
            slot,
            job.task_id,
            d.gen.finish(finish),
            d.start,
            d.cpu_start,
        );
        match job.answer {
            Answer::Decode(reply) => {
                self.c.end_task(slot, &result);
                send(reply, result);
            }
            Answer::Completion {
                reply,
                prefill: Some(prefill),
            } => {
                let result = result.map(|d| (prefill, d));
                self.c.end_task(slot, &result);
                send(reply, result);
            }
            answer => self.fail(slot, answer, mismatch()),
        }
    }

    /// One chunk of the next prefilling slot's prompt.
    fn prefill_step(&mut self) {
        let n = self.jobs.len();
        let Some(slot) = (0..n).map(|i| (self.next_prefill + i) % n).find(|&s| {
            matches!(
                self.jobs[s],
                Some(Job {
                    stage: Stage::Prefill { .. },
                    ..
                })
            )
        }) else {
            return;
        };
        self.next_prefill = (slot + 1) % n;
        if let Some(Job {
            answer: Answer::Generate(g),
            ..
        }) = &self.jobs[slot]
        {
            if self.c.generation_cancelled(slot, g) {
                return self.finish_generate(slot, OutFinish::Cancelled);
            }
        }
        let c = &mut *self.c;
        let Some(Job {
            stage: Stage::Prefill { tokens, done, .. },
            answer,
            ..
        }) = &mut self.jobs[slot]
        else {
            return;
        };
        let end = (*done + c.ubatch).min(tokens.len());
        let mut publisher = step_publisher!(c, TokenKind::Prompt);
        let r = c.slots.prefill_chunk(
            slot,
            &tokens[*done..end],
            *done,
            tokens.len(),
            &mut publisher,
        );
        if r.is_ok() {
            if let Answer::Generate(g) = answer {
                // The details are in the segment; this says a chunk is done.
                g.out.send(GenEvent::PromptChunk);
            }
        }
        match r {
            Err(e) => {
                if let Some(job) = self.jobs[slot].take() {
                    self.fail(slot, job.answer, e.into());
                }
            }
            Ok(_) if end < tokens.len() => *done = end,
            Ok(_) => {
                if let Some(job) = self.jobs[slot].take() {
                    self.prefill_done(slot, job);
                }
            }
        }
    }

    /// The prompt of `job` is all in `slot`: reply, or go on to the completion's decode.
    fn prefill_done(&mut self, slot: usize, job: Job) {
        let Job {
            task_id,
            stage:
                Stage::Prefill {
                    tokens,
                    start,
                    then,
                    ..
                },
            answer,
        } = job
        else {
            return self.fail(slot, job.answer, mismatch());
        };
        let result = self.c.prefill_result(slot, task_id, tokens.len(), start);
        match (then, answer) {
            (None, Answer::Prefill(reply)) => {
                self.c.end_task(slot, &result);
                send(reply, result);
            }
            (Some(spec), Answer::Completion { reply, .. }) => match result {
                Err(e) => {
                    let answer = Answer::Completion {
                        reply,
                        prefill: None,
                    };
                    self.fail(slot, answer, e);
                }
                Ok(prefill) => {
                    let total = spec.n_predict as u64;
                    self.c
                        .progress
                        .begin_phase(slot, Phase::Decode, WorkUnit::Tokens, total);
                    let answer = Answer::Completion {
                        reply,
                        prefill: Some(prefill),
                    };
                    self.begin_decode(slot, task_id, &spec, answer);
                }
            },
            (Some(spec), Answer::Generate(mut g)) => match result {
                Err(e) => self.fail(slot, Answer::Generate(g), e),
                Ok(_) => {
                    self.c.generation_prompt_done(slot, &mut g, spec.n_predict);
                    self.begin_decode(slot, task_id, &spec, Answer::Generate(g));
                }
            },
            (_, answer) => self.fail(slot, answer, mismatch()),
        }
    }

    /// Ends the task on `slot` with `error`: publish, then reply.
    fn fail(&mut self, slot: usize, answer: Answer, error: TaskError) {
        self.c.end_task(slot, &Err::<(), _>(error.clone()));
        answer.fail(error);
    }
}

/// A task whose stage and reply do not belong together (a bug, never input).
fn mismatch() -> TaskError {
    TaskError::Internal("a task's stage does not match its reply".into())
}
