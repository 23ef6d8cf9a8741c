//! The messages the HTTP front end posts to the compute thread, and their replies.
//!
//! Every task carries a `tokio::sync::oneshot` sender for its reply; the front end awaits
//! it. The queue is a plain FIFO (`std::sync::mpsc`); the schedule decides which waiting
//! task starts when (`compute/schedule.rs`).

pub mod generate;
pub mod stop;
pub mod text_out;

use crate::task_error::{ClientError, TaskError};
use crate::ticket::{Ticket, WaitingTasks};
use bytes::Bytes;
use hydra_engine_core::sampling::{SamplerConfig, StopReason};
use hydra_layout::PendingCounter;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

/// Reply channel of a task.
pub type Reply<T> = oneshot::Sender<Result<T, TaskError>>;

/// Prompt tokens, already tokenized by the front end.
#[derive(Debug, Clone)]
pub struct PrefillSpec {
    /// Tokens to evaluate.
    pub tokens: Vec<u32>,
}

/// Generation settings of a decode.
#[derive(Debug, Clone, Copy)]
pub struct DecodeSpec {
    /// Most tokens to generate.
    pub n_predict: usize,
    /// Sampling.
    pub sampler: SamplerConfig,
    /// Stop at the model's EOS token.
    pub stop_at_eos: bool,
}

/// Outcome of a prefill.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillResult {
    /// The slot.
    pub slot: usize,
    /// The task id published in the segment.
    pub task_id: u64,
    /// Tokens evaluated.
    pub n_prompt_tokens: usize,
    /// Tokens in the slot's cache afterwards.
    pub n_past: usize,
    /// Wall time, ms.
    pub prompt_ms: f64,
    /// Throughput, tokens/s.
    pub prompt_per_second: f64,
}

/// Outcome of a decode (the llama surface answers it in its words).
#[derive(Debug, Clone)]
pub struct DecodeResult {
    /// The slot.
    pub slot: usize,
    /// The task id published in the segment.
    pub task_id: u64,
    /// Generated text.
    pub content: String,
    /// Generated token ids.
    pub tokens: Vec<u32>,
    /// Why generation stopped.
    pub stop: StopReason,
    /// Tokens in the slot's cache afterwards.
    pub n_past: usize,
    /// Wall time, ms.
    pub predicted_ms: f64,
    /// Throughput, tokens/s.
    pub predicted_per_second: f64,
    /// CPU time the engine process spent during the generation loop, ms (all its threads:
    /// with `--threads 1` this is the compute thread's work; it excludes time spent
    /// preempted, so the overhead benchmarks report it beside the wall time).
    pub predicted_cpu_ms: f64,
}

/// A streamed state save: its exact length, then the bytes.
pub struct SaveStream {
    /// Bytes the stream will carry (the Content-Length).
    pub len: u64,
    /// The bytes, in chunks, as the compute thread writes them.
    pub chunks: mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>,
}

/// A slot index checked once, where a request names it.
pub use hydra_engine_core::slots::SlotId;

/// Work for the compute thread: what to do, on which slot.
pub struct Task {
    /// The slot.
    pub slot: SlotId,
    /// What to do, and where the reply goes.
    pub kind: TaskKind,
    /// CLOCK_MONOTONIC ns when its request reached the request path, before it waited for
    /// a slot and in the queue: the task's queue wait, time to first token and end-to-end
    /// time in the segment's statistics start here.
    pub arrival_ns: u64,
    /// Its place in the queue: taken by the compute thread, or withdrawn first.
    pub ticket: Ticket,
}

/// What a task does, each kind with its own reply.
pub enum TaskKind {
    /// Evaluate prompt tokens into a slot (appending to what it holds).
    Prefill {
        /// Tokens.
        spec: PrefillSpec,
        /// Reply.
        reply: Reply<PrefillResult>,
    },
    /// Generate from a prefilled slot.
    Decode {
        /// Settings.
        spec: DecodeSpec,
        /// Reply.
        reply: Reply<DecodeResult>,
    },
    /// Save a slot's KV state as a byte stream.
    Save {
        /// Reply: the stream, sent before the bytes are produced.
        reply: Reply<SaveStream>,
    },
    /// Restore a slot's KV state from bytes.
    Restore {
        /// The state.
        data: Bytes,
        /// Reply: n_past after the restore.
        reply: Reply<usize>,
    },
    /// Empty a slot.
    Erase {
        /// Reply.
        reply: Reply<()>,
    },
    /// Generate from a prompt, reusing the prefix the slot holds, sending every token as
    /// it is sampled (`/completion`, `/v1/completions`, `/v1/chat/completions`).
    Generate {
        /// Prompt and settings.
        spec: generate::GenerateSpec,
        /// Where the events go; also the reply.
        events: generate::GenEvents,
    },
    /// Answer a meta query through the queue (the old way; for the benchmark only).
    MetaViaQueue {
        /// Reply: the Hydra meta JSON.
        reply: Reply<hydra_probe::HydraMeta>,
    },
}

impl Task {
    /// A task whose request arrives now.
    pub fn new(slot: SlotId, kind: TaskKind) -> Self {
        Self {
            slot,
            kind,
            arrival_ns: hydra_layout::clock::monotonic_ns(),
            ticket: Ticket::default(),
        }
    }

    /// Answers the task with `error` without running it.
    pub fn reject(self, error: TaskError) {
        match self.kind {
            TaskKind::Prefill { reply, .. } => drop(reply.send(Err(error))),
            TaskKind::Decode { reply, .. } => drop(reply.send(Err(error))),
            TaskKind::Save { reply } => drop(reply.send(Err(error))),
            TaskKind::Restore { reply, .. } => drop(reply.send(Err(error))),
            TaskKind::Erase { reply } => drop(reply.send(Err(error))),
            TaskKind::Generate { events, .. } => {
                drop(events.send(generate::GenEvent::Failed(error)))
            }
            TaskKind::MetaViaQueue { reply } => drop(reply.send(Err(error))),
        }
    }
}

/// The front end's end of the queue: counts the task as pending for its slot in the
/// segment, then enqueues it.
#[derive(Clone)]
pub struct TaskSender {
    tx: std::sync::mpsc::Sender<Task>,
    waiting: WaitingTasks,
}

/// A posted task that is withdrawn from the queue when this is dropped before the compute
/// thread took it: a request future holds it, so a client that goes away withdraws its
/// waiting task.
#[must_use = "dropping it withdraws the task"]
pub struct Posted {
    waiting: WaitingTasks,
    slot: usize,
    ticket: Ticket,
}

impl Drop for Posted {
    fn drop(&mut self) {
        self.waiting.withdraw(self.slot, &self.ticket);
    }
}

impl TaskSender {
    /// Wraps the queue's sender for `n_slots` slots; `pending` is the segment's count.
    pub fn new(
        tx: std::sync::mpsc::Sender<Task>,
        n_slots: usize,
        pending: Option<PendingCounter>,
    ) -> Self {
        Self {
            tx,
            waiting: WaitingTasks::new(n_slots, pending),
        }
    }

    /// Posts `task`; fails when the compute thread has stopped. The task is withdrawn from
    /// the queue when the result is dropped before the compute thread took it (a request
    /// future holds it, so a client that goes away withdraws its waiting task), or by
    /// [`withdraw_waiting`](Self::withdraw_waiting).
    pub fn post(&self, task: Task) -> Result<Posted, TaskError> {
        let posted = Posted {
            waiting: self.waiting.clone(),
            slot: task.slot.get(),
            ticket: task.ticket.clone(),
        };
        self.waiting.queued(posted.slot, &task.ticket);
        self.tx
            .send(task)
            .map_err(|_| TaskError::from(ClientError::ShuttingDown))?;
        Ok(posted)
    }

    /// Withdraws every task still waiting in the queue for `slot`; returns how many.
    pub fn withdraw_waiting(&self, slot: usize) -> usize {
        self.waiting.withdraw_all(slot)
    }
}
