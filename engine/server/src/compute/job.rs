//! The generation tasks a slot runs across many steps, each in its stage with the reply
//! that stage may give.
//!
//! A job is in one of two stages: its prompt is going into the slot a chunk per step
//! ([`PromptJob`]), or it is generating a token per step ([`GenerationJob`]). What each
//! task kind answers is part of its stage's type: a prefill's prompt stage ends with the
//! prefill's reply, a completion's with the hand-over to its generation stage
//! ([`PromptJob::finish`]), which carries the prefill's result to the completion's reply.
//! So no stage can meet a reply of another kind. A generation task
//! (`TaskKind::Generate`) streams its tokens as they are sampled ([`GenJob`]): its stages
//! carry its output, which is also how it learns that it was cancelled.

use super::generation::GenJob;
use super::{process_cpu_ns, send, Compute};
use crate::task::generate::GenerateSpec;
use crate::task::generate::{GenEvent, GenEvents, GenOutput};
use crate::task::{DecodeResult, DecodeSpec, PrefillResult, Reply, SlotId};
use crate::task_error::{ClientError, TaskError};
use hydra_engine_core::sampling::{Generator, Sampler, StopReason};
use hydra_engine_core::tokenizer::Tokenizer;
use hydra_layout::{Phase, WorkUnit};
use std::ops::ControlFlow;
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
    let error = c.stopped_by(error);
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
    /// A generation task: it goes on to generate with `decode`, streaming to `job`.
    Generate {
        decode: DecodeSpec,
        job: Box<GenJob>,
    },
}

impl PromptReply {
    fn fail(self, error: TaskError) {
        match self {
            PromptReply::Prefill(reply) => send(reply, Err(error)),
            PromptReply::Generate { job, .. } => job.out.fail(error),
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
        if let Err(e) = c.slots.check_prefill(slot, &tokens, c.ubatch) {
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

    /// Begins generation task `spec` on `slot`: its prompt is what the slot does not
    /// already hold of it. None when refused (its client has been told why).
    pub(super) fn begin_generate(
        c: &mut Compute,
        slot: SlotId,
        spec: GenerateSpec,
        events: GenEvents,
    ) -> Option<Job> {
        let out = GenOutput::new(&spec, events);
        let begun = c.begin_generation(slot, &spec, out)?;
        Some(Job::Prompt(PromptJob {
            slot,
            task_id: begun.job.task_id,
            tokens: begun.rest,
            done: 0,
            start: Instant::now(),
            reply: PromptReply::Generate {
                decode: spec.decode,
                job: begun.job,
            },
        }))
    }

    /// Whether the job must stop before its next chunk: its client has gone (a prefill's
    /// reply can no longer be received, a generation's output is abandoned), or the front
    /// end cancelled it (`POST /slots/{id}?action=cancel`).
    pub(super) fn is_cancelled(&self, c: &Compute) -> bool {
        self.stops_on(&c.shared.cancel)
    }

    /// [`is_cancelled`](Self::is_cancelled) against `board` alone, for the layer
    /// boundaries of a chunk in flight (when the compute state is lent to the forward).
    pub(super) fn stops_on(&self, board: &crate::cancel::CancelBoard) -> bool {
        let client_gone = match &self.reply {
            PromptReply::Generate { job, .. } => job.out.is_abandoned(),
            PromptReply::Prefill(reply) => reply.is_closed(),
        };
        board.task_stops(self.slot.get(), self.task_id, client_gone)
    }

    /// Ends the job as cancelled: publish, then reply.
    pub(super) fn cancel(self, c: &mut Compute) {
        match self.reply {
            PromptReply::Generate { job, .. } => {
                c.end_generation(self.slot, *job, StopReason::Cancelled, Vec::new())
            }
            _ => Job::Prompt(self).fail(c, ClientError::Cancelled.into()),
        }
    }

    /// A chunk of the prompt is in: a generation task tells its client (the details are
    /// in the segment).
    pub(super) fn chunk_done(&self) {
        if let PromptReply::Generate { job, .. } = &self.reply {
            job.out.send(GenEvent::PromptChunk);
        }
    }

    /// The whole prompt is in `slot`: a prefill replies; a generation task hands over to
    /// its generation (the one place a prompt becomes a generation), which it returns.
    /// A prefill whose cancel landed after its last chunk began ends as cancelled (its
    /// chunks stay in the slot), so that the cancel's answer holds.
    pub(super) fn finish(self, c: &mut Compute) -> Option<Job> {
        let slot = self.slot;
        if matches!(self.reply, PromptReply::Prefill(_))
            && !c.shared.cancel.finishing(slot.get(), self.task_id)
        {
            self.cancel(c);
            return None;
        }
        let result = c.prefill_result(slot, self.task_id, self.tokens.len(), self.start);
        match self.reply {
            PromptReply::Prefill(reply) => {
                c.end_task(slot, &result);
                send(reply, result);
                None
            }
            PromptReply::Generate { decode, mut job } => match result {
                Err(e) => {
                    job.out.fail(ended(c, slot, e));
                    None
                }
                Ok(_) => {
                    c.generation_prompt_done(slot, &mut job, decode.n_predict);
                    let reply = GenerationReply::Generate(job);
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
    /// A generation task: its summary goes to its output.
    Generate(Box<GenJob>),
}

impl GenerationReply {
    fn fail(self, error: TaskError) {
        match self {
            GenerationReply::Decode(reply) => send(reply, Err(error)),
            GenerationReply::Generate(job) => job.out.fail(error),
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

    /// Whether the job must stop before its next token: its client has gone, or the front
    /// end cancelled it. A decode then answers the tokens generated so far.
    pub(super) fn is_cancelled(&self, c: &Compute) -> bool {
        let client_gone = match &self.reply {
            GenerationReply::Generate(job) => job.out.is_abandoned(),
            GenerationReply::Decode(reply) => reply.is_closed(),
        };
        c.task_cancelled(self.slot, self.task_id, client_gone)
    }

    /// `token` was just sampled: a generation task sends it to its client at once; breaks
    /// with why the task ends here (a stop string, or its client gone).
    pub(super) fn sampled(&mut self, tokenizer: &Tokenizer, token: u32) -> ControlFlow<StopReason> {
        match &mut self.reply {
            GenerationReply::Generate(job) => job.out.token(tokenizer, token, self.gen.logits()),
            _ => ControlFlow::Continue(()),
        }
    }

    /// The job ends early for `finish` (a stop string, or cancelled): publish, then reply.
    /// Only a generation task has stop strings; any other task ends as cancelled.
    pub(super) fn stop(self, c: &mut Compute, finish: StopReason) {
        if !matches!(self.reply, GenerationReply::Generate(_)) {
            return self.finish(c, StopReason::Cancelled);
        }
        let finish = self.settled(c, finish);
        let tokens = self.gen.tokens().to_vec();
        if let GenerationReply::Generate(job) = self.reply {
            c.end_generation(self.slot, *job, finish, tokens);
        }
    }

    /// How a generation that would end for `finish` ends: cancelled when a cancel landed
    /// before it reached its end ([`CancelBoard::finishing`]), so that the cancel's answer
    /// holds.
    ///
    /// [`CancelBoard::finishing`]: crate::cancel::CancelBoard::finishing
    fn settled(&self, c: &Compute, finish: StopReason) -> StopReason {
        let board = &c.shared.cancel;
        if finish == StopReason::Cancelled || board.finishing(self.slot.get(), self.task_id) {
            finish
        } else {
            StopReason::Cancelled
        }
    }

    /// The generation ended for `finish`: publish, then reply.
    pub(super) fn finish(self, c: &mut Compute, finish: StopReason) {
        let slot = self.slot;
        let finish = self.settled(c, finish);
        let generation = self.gen.finish(finish);
        let decoded = |c: &mut Compute, generation| {
            c.decode_result(slot, self.task_id, generation, self.start, self.cpu_start)
        };
        match self.reply {
            GenerationReply::Decode(reply) => {
                let result = decoded(c, generation);
                c.end_task_for(slot, &result, super::generation::finish_cause(finish));
                send(reply, result);
            }
            GenerationReply::Generate(job) => {
                c.end_generation(slot, *job, finish, generation.tokens);
            }
        }
    }
}
