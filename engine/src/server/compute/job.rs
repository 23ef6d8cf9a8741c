//! The generation tasks a slot runs across many steps, each in its stage with the reply
//! that stage may give.
//!
//! A job is in one of two stages: its prompt is going into the slot a chunk per step
//! ([`PromptJob`]), or it is generating a token per step ([`GenerationJob`]). What each
//! task kind answers is part of its stage's type: a prefill's prompt stage ends with the
//! prefill's reply, a completion's with the hand-over to its generation stage
//! ([`PromptJob::finish`]), which carries the prefill's result to the completion's reply.
//! So no stage can meet a reply of another kind.

use super::{process_cpu_ns, send, Compute};
use crate::sampling::{FinishReason as GenFinish, Generator, Sampler};
use crate::server::task::{DecodeResult, DecodeSpec, PrefillResult, Reply, SlotId};
use crate::server::task_error::TaskError;
use hydra_layout::{Phase, WorkUnit};
use std::time::Instant;

/// The task a slot is running.
pub(super) enum Job {
    /// Its prompt is going into the slot.
    Prompt(PromptJob),
    /// It is generating.
    Generation(Box<GenerationJob>),
}

impl Job {
    /// The slot the job runs on.
    pub(super) fn slot(&self) -> SlotId {
        match self {
            Job::Prompt(j) => j.slot,
            Job::Generation(j) => j.slot,
        }
    }

    /// Ends the job with `error`: publish, then reply.
    pub(super) fn fail(self, c: &mut Compute, error: TaskError) {
        let error = ended(c, self.slot(), error);
        match self {
            Job::Prompt(j) => j.reply.fail(error),
            Job::Generation(j) => j.reply.fail(error),
        }
    }
}

/// Publishes the end of the task on `slot`, failed with `error`; gives the error back for
/// its reply.
fn ended(c: &mut Compute, slot: SlotId, error: TaskError) -> TaskError {
    c.end_task(slot, &Err::<(), _>(error.clone()));
    error
}

/// A prompt going into a slot: `done` of `tokens` are in.
pub(super) struct PromptJob {
    pub(super) slot: SlotId,
    task_id: u64,
    pub(super) tokens: Vec<u32>,
    pub(super) done: usize,
    start: Instant,
    reply: PromptReply,
}

/// What a prompt's end answers.
pub(super) enum PromptReply {
    /// A prefill: its result.
    Prefill(Reply<PrefillResult>),
    /// A completion: it goes on to generate with `decode`.
    Completion {
        decode: DecodeSpec,
        reply: Reply<(PrefillResult, DecodeResult)>,
    },
}

impl PromptReply {
    fn fail(self, error: TaskError) {
        match self {
            PromptReply::Prefill(reply) => send(reply, Err(error)),
            PromptReply::Completion { reply, .. } => send(reply, Err(error)),
        }
    }
}

impl PromptJob {
    /// Begins task `task_id`'s prompt on `slot`, or ends the task when the prompt is
    /// refused.
    pub(super) fn begin(
        c: &mut Compute,
        slot: SlotId,
        tokens: Vec<u32>,
        reply: PromptReply,
    ) -> Option<Job> {
        let total = tokens.len() as u64;
        let task_id = c.begin_task(slot, Phase::Prefill, WorkUnit::Tokens, total);
        if let Err(e) = c.slots.check_prefill(slot.get(), &tokens, c.ubatch) {
            reply.fail(ended(c, slot, e.into()));
            return None;
        }
        Some(Job::Prompt(PromptJob {
            slot,
            task_id,
            tokens,
            done: 0,
            start: Instant::now(),
            reply,
        }))
    }

    /// The whole prompt is in `slot`: a prefill replies; a completion hands over to its
    /// generation (the one place a prompt becomes a generation), which it returns.
    pub(super) fn finish(self, c: &mut Compute) -> Option<Job> {
        let slot = self.slot;
        let result = c.prefill_result(slot, self.task_id, self.tokens.len(), self.start);
        match self.reply {
            PromptReply::Prefill(reply) => {
                c.end_task(slot, &result);
                send(reply, result);
                None
            }
            PromptReply::Completion { decode, reply } => match result {
                Err(e) => {
                    send(reply, Err(ended(c, slot, e)));
                    None
                }
                Ok(prefill) => {
                    let total = decode.n_predict as u64;
                    c.progress
                        .begin_phase(slot.get(), Phase::Decode, WorkUnit::Tokens, total);
                    let reply = GenerationReply::Completion { prefill, reply };
                    GenerationJob::begin(c, slot, self.task_id, &decode, reply)
                }
            },
        }
    }
}

/// A generation on a slot.
pub(super) struct GenerationJob {
    pub(super) slot: SlotId,
    task_id: u64,
    pub(super) gen: Generator,
    pub(super) sampler: Sampler,
    start: Instant,
    cpu_start: u64,
    reply: GenerationReply,
}

/// What a generation's end answers.
pub(super) enum GenerationReply {
    /// A decode: its result.
    Decode(Reply<DecodeResult>),
    /// A completion: its prefill's result and the generation's.
    Completion {
        prefill: PrefillResult,
        reply: Reply<(PrefillResult, DecodeResult)>,
    },
}

impl GenerationReply {
    fn fail(self, error: TaskError) {
        match self {
            GenerationReply::Decode(reply) => send(reply, Err(error)),
            GenerationReply::Completion { reply, .. } => send(reply, Err(error)),
        }
    }
}

impl GenerationJob {
    /// Begins a decode task on `slot`, or ends it when refused.
    pub(super) fn begin_decode(
        c: &mut Compute,
        slot: SlotId,
        spec: &DecodeSpec,
        reply: Reply<DecodeResult>,
    ) -> Option<Job> {
        let total = spec.n_predict as u64;
        let task_id = c.begin_task(slot, Phase::Decode, WorkUnit::Tokens, total);
        Self::begin(c, slot, task_id, spec, GenerationReply::Decode(reply))
    }

    /// Turns the slot's started task `task_id` into a generation, or ends it when refused.
    fn begin(
        c: &mut Compute,
        slot: SlotId,
        task_id: u64,
        spec: &DecodeSpec,
        reply: GenerationReply,
    ) -> Option<Job> {
        match c.decode_start(slot, spec) {
            Ok((first, sampler, params)) => Some(Job::Generation(Box::new(GenerationJob {
                slot,
                task_id,
                gen: Generator::new(first, params),
                sampler,
                start: Instant::now(),
                cpu_start: process_cpu_ns(),
                reply,
            }))),
            Err(e) => {
                reply.fail(ended(c, slot, e));
                None
            }
        }
    }

    /// The generation ended for `finish`: publish, then reply.
    pub(super) fn finish(self, c: &mut Compute, finish: GenFinish) {
        let slot = self.slot;
        let result = c.decode_result(
            slot,
            self.task_id,
            self.gen.finish(finish),
            self.start,
            self.cpu_start,
        );
        match self.reply {
            GenerationReply::Decode(reply) => {
                c.end_task(slot, &result);
                send(reply, result);
            }
            GenerationReply::Completion { prefill, reply } => {
                let result = result.map(|d| (prefill, d));
                c.end_task(slot, &result);
                send(reply, result);
            }
        }
    }
}
