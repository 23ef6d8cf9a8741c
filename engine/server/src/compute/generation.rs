//! The generation task (`TaskKind::Generate`) on the compute thread: its prompt reuses what
//! the slot already holds of it, every sampled token goes to the front end at once
//! ([`GenOutput`]), and it stops at its next step when its client has gone or the front
//! end cancelled it ([`crate::cancel::CancelBoard`]).

use std::time::Instant;

use super::{process_cpu_ns, Compute};
use crate::task::generate::{GenEvent, GenOutput, GenSummary, GenerateSpec};
use crate::task::SlotId;
use crate::task_error::{ClientError, TaskError};
use hydra_engine_core::sampling::StopReason;
use hydra_layout::{FinishCause, Phase, WorkUnit};

/// The generation task's part of a running job: where its events go and what its summary
/// needs.
#[derive(Debug)]
pub(super) struct GenJob {
    pub(super) out: GenOutput,
    pub(super) task_id: u64,
    n_prompt: usize,
    n_cached: usize,
    prompt_start: Instant,
    prompt_ms: f64,
    decode_start: Instant,
    cpu_start: u64,
}

/// A generation task begun on its slot: its job, and the prompt tokens still to evaluate.
pub(super) struct Begun {
    pub(super) job: Box<GenJob>,
    pub(super) rest: Vec<u32>,
}

impl Compute {
    /// Begins `spec` on `slot`: keeps the prefix of the prompt the slot holds (all but its
    /// last token at most, whose scores the generation needs), publishes the task, and
    /// tells the front end. None when refused (the front end has been told why).
    pub(super) fn begin_generation(
        &mut self,
        slot: SlotId,
        spec: &GenerateSpec,
        out: GenOutput,
    ) -> Option<Begun> {
        let refuse = |out: GenOutput, e: TaskError| {
            out.fail(e);
            None
        };
        let n = spec.tokens.len();
        let reuse = if spec.cache_prompt {
            self.slots.common_prefix(slot, &spec.tokens)
        } else {
            0
        }
        .min(n.saturating_sub(1));
        self.slots.keep_first(slot, reuse);
        self.progress.set_n_past(slot.get(), reuse);
        let total = (n - reuse) as u64;
        let task_id = self.begin_task(slot, Phase::Prefill, WorkUnit::Tokens, total);
        let rest = spec.tokens[reuse..].to_vec();
        if let Err(e) = self.slots.check_prefill(slot, &rest, self.ubatch) {
            let e = TaskError::from(e);
            self.end_task(slot, &Err::<(), _>(e.clone()));
            return refuse(out, e);
        }
        out.send(GenEvent::Started {
            task_id,
            n_cached: reuse,
        });
        let now = Instant::now();
        Some(Begun {
            job: Box::new(GenJob {
                out,
                task_id,
                n_prompt: n,
                n_cached: reuse,
                prompt_start: now,
                prompt_ms: 0.0,
                decode_start: now,
                cpu_start: 0,
            }),
            rest,
        })
    }

    /// Whether task `task_id` on `slot` must stop now ([`CancelBoard::task_stops`]).
    ///
    /// [`CancelBoard::task_stops`]: crate::cancel::CancelBoard::task_stops
    pub(super) fn task_cancelled(&self, slot: SlotId, task_id: u64, client_gone: bool) -> bool {
        self.shared
            .cancel
            .task_stops(slot.get(), task_id, client_gone)
    }

    /// The prompt of `job` on `slot` is in: on to generating `n_predict` tokens.
    pub(super) fn generation_prompt_done(
        &mut self,
        slot: SlotId,
        job: &mut GenJob,
        n_predict: usize,
    ) {
        job.prompt_ms = job.prompt_start.elapsed().as_secs_f64() * 1e3;
        job.decode_start = Instant::now();
        job.cpu_start = process_cpu_ns();
        self.progress.begin_phase(
            slot.get(),
            Phase::Decode,
            WorkUnit::Tokens,
            n_predict as u64,
        );
    }

    /// The generation `job` on `slot` ended for `finish` with `tokens` generated: publish
    /// (a cancelled one as `cancelled`), then tell the front end.
    pub(super) fn end_generation(
        &mut self,
        slot: SlotId,
        job: GenJob,
        finish: StopReason,
        tokens: Vec<u32>,
    ) {
        let result = if finish == StopReason::Cancelled {
            Err(TaskError::from(ClientError::Cancelled))
        } else {
            Ok(())
        };
        self.end_task_for(slot, &result, finish_cause(finish));
        let decoding = job.cpu_start != 0;
        let summary = GenSummary {
            task_id: job.task_id,
            finish,
            n_prompt: job.n_prompt,
            n_cached: job.n_cached,
            tokens,
            n_past: self.slots.n_past(slot),
            prompt_ms: if decoding {
                job.prompt_ms
            } else {
                job.prompt_start.elapsed().as_secs_f64() * 1e3
            },
            predicted_ms: if decoding {
                job.decode_start.elapsed().as_secs_f64() * 1e3
            } else {
                0.0
            },
            predicted_cpu_ms: if decoding {
                process_cpu_ns().saturating_sub(job.cpu_start) as f64 / 1e6
            } else {
                0.0
            },
        };
        tracing::debug!(slot = slot.get(), finish = ?finish, tokens = summary.tokens.len(), "generation done");
        job.out.finish(summary);
    }
}

/// The segment's finish cause of a generation that ended for `stop` (FORMAT §6.7).
pub(super) fn finish_cause(stop: StopReason) -> FinishCause {
    match stop {
        StopReason::Eos => FinishCause::Eos,
        StopReason::StopWord => FinishCause::StopString,
        StopReason::Length => FinishCause::Length,
        StopReason::ContextFull => FinishCause::ContextFull,
        StopReason::Cancelled => FinishCause::Cancelled,
    }
}
