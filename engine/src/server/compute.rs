//! The compute thread: owns the model and every slot, takes tasks from the FIFO queue, and
//! publishes progress on every step. It never waits on a reader: the segment is written
//! with a seqlock, and replies go through oneshot channels.
//!
//! How the tasks are ordered is the schedule's ([`Schedule`]): [`serial`] runs one task at a
//! time to completion; [`batched`] advances every decoding slot by one token per forward
//! and interleaves prefill chunks. Both run the task bodies and publish through the pieces
//! here.

/// The step observer that publishes `$kind` steps of compute `$c` (a macro, not a method,
/// so that it borrows only the publisher and the shutdown flag, leaving the slots free).
macro_rules! step_publisher {
    ($c:expr, $kind:expr) => {
        $crate::server::progress::StepPublisher {
            progress: &mut $c.progress,
            kind: $kind,
            shutdown: &$c.shutdown,
        }
    };
}

mod batched;
mod generation;
mod serial;

use crate::model::{Model, ModelInfo};
use crate::sampling::{generate, FinishReason as GenFinish, GenerateParams, Generation, Sampler};
use crate::server::config::{ModelSource, Schedule, ServerConfig};
use crate::server::progress::{Progress, TokenKind};
use crate::server::task::{
    DecodeResult, DecodeSpec, PrefillResult, PrefillSpec, Reply, SaveStream, Task,
};
use crate::server::task_error::TaskError;
use crate::slots::Logits;
use crate::slots::Slots;
use crate::tokenizer::Tokenizer;
use anyhow::Context as _;
use axum::body::Bytes;
use hydra_layout::{
    header::capabilities, EngineDescription, ErrorCode, FinishReason, PendingCounter, Phase,
    SegmentConfig, SegmentReader, SegmentWriter, WorkUnit,
};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The idle loop wakes at least this often to write its heartbeat (the design's rule is
/// at least every 250 ms, docs/DESIGN.md; 100 ms leaves margin for a loaded machine).
const IDLE_HEARTBEAT: Duration = Duration::from_millis(100);

/// Chunk size of a streamed state save.
const SAVE_CHUNK: usize = 256 << 10;

/// What the front end shares with the compute thread: read-only facts and the segment's
/// reader side. Never the model's slots.
pub struct Shared {
    /// The segment file (None with publishing off).
    pub segment_path: Option<PathBuf>,
    /// Pending-task counter in the segment.
    pub pending: Option<PendingCounter>,
    /// A read-only view of our own segment, for the segment-backed endpoints.
    pub reader: Option<SegmentReader>,
    /// The model's description.
    pub model_info: ModelInfo,
    /// Tokenizer (a copy; the front end tokenizes prompts).
    pub tokenizer: Tokenizer,
    /// Slots.
    pub n_slots: usize,
    /// Context per slot, tokens.
    pub n_ctx: usize,
    /// Largest state a restore may carry, bytes.
    pub max_state_bytes: u64,
    /// Engine id.
    pub engine_id: String,
    /// Classification thresholds for meta answers.
    pub thresholds: Thresholds,
    /// The task each slot runs, and which the front end asked to stop.
    pub cancel: crate::server::cancel::CancelBoard,
}

impl Shared {
    /// The Hydra meta of `slot`, read from the segment through the probe library.
    pub fn meta_from_segment(&self, slot: usize) -> Result<HydraMeta, TaskError> {
        HydraMeta::from_view(&self.view()?, slot).ok_or(TaskError::UnknownSlot {
            slot,
            n_slots: self.n_slots,
        })
    }

    /// Every slot, read from the segment through the probe library.
    pub fn view(&self) -> Result<EngineView, TaskError> {
        let reader = self.reader.as_ref().ok_or(TaskError::PublishingDisabled)?;
        EngineView::capture(
            reader,
            hydra_layout::clock::monotonic_ns(),
            &self.thresholds,
        )
        .map_err(|e| {
            let e = TaskError::Internal(format!("reading the progress segment: {e}"));
            tracing::error!("{e}");
            e
        })
    }
}

/// The compute thread's state.
pub struct Compute {
    slots: Slots,
    progress: Progress,
    shared: Arc<Shared>,
    ubatch: usize,
    schedule: Schedule,
    next_task_id: u64,
    shutdown: Arc<AtomicBool>,
}

impl Compute {
    /// Loads the model, builds the slots and creates the segment.
    pub fn new(
        config: &ServerConfig,
        shutdown: Arc<AtomicBool>,
    ) -> anyhow::Result<(Self, Arc<Shared>)> {
        anyhow::ensure!(config.slots >= 1, "--slots must be at least 1");
        anyhow::ensure!(config.ubatch >= 1, "--ubatch must be at least 1");
        let model = match &config.model {
            ModelSource::Builtin => Model::builtin_on(config.load.device),
            ModelSource::Gguf(path) => Model::load_gguf(path, &config.load),
        }
        .context("cannot load the model")?;
        let info = model.info().clone();
        tracing::info!(
            model = %info.name,
            quant = %info.quantization,
            params = info.n_params,
            seconds = format_args!("{:.2}", info.load_seconds),
            "model loaded"
        );
        let model = Arc::new(model);
        let mut slots = Slots::new(model.clone(), config.slots, config.ctx)
            .context("cannot create the slots")?;
        slots.set_pool_use(config.pool_use);
        let n_ctx = slots.n_ctx();
        let llama = model.config().clone();

        let (writer, reader, pending, segment_path) = if config.publish {
            let writer = SegmentWriter::create(&SegmentConfig {
                dir: config.progress_dir.clone(),
                engine_id: config.engine_id.clone(),
                slot_count: config.slots,
                description: EngineDescription {
                    model_name: info.name.clone(),
                    model_quant: info.quantization.clone(),
                    model_path: info
                        .path
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| "builtin".into()),
                    tokenizer: info.tokenizer_family.clone(),
                    model_alias: config
                        .model_alias
                        .clone()
                        .unwrap_or_else(|| info.name.clone()),
                    device: info.device.to_string(),
                    capabilities: capabilities::COMPLETION
                        | capabilities::STATE_SAVE_RESTORE
                        | capabilities::CHUNKED_PREFILL
                        | capabilities::LAYER_PROGRESS,
                },
            })
            .context("cannot create the progress segment")?;
            let path = writer.path().to_path_buf();
            let reader =
                SegmentReader::open(&path).context("cannot read back the progress segment")?;
            let pending = writer.pending_counter();
            (Some(writer), Some(reader), Some(pending), Some(path))
        } else {
            tracing::warn!("progress publishing is OFF (--no-publish): for benchmarks only");
            (None, None, None, None)
        };
        let progress = Progress::new(writer, config.slots, n_ctx, llama.clone());
        let shared = Arc::new(Shared {
            segment_path,
            pending,
            reader,
            tokenizer: model.tokenizer().clone(),
            model_info: info,
            n_slots: config.slots,
            n_ctx,
            max_state_bytes: crate::kv_state::state_size(&llama, n_ctx),
            engine_id: config.engine_id.clone(),
            thresholds: Thresholds::default(),
            cancel: crate::server::cancel::CancelBoard::new(config.slots),
        });
        Ok((
            Self {
                slots,
                progress,
                shared: shared.clone(),
                ubatch: config.ubatch,
                schedule: config.schedule,
                next_task_id: 0,
                shutdown,
            },
            shared,
        ))
    }

    /// Runs the schedule's loop until the queue closes and every task has ended, then
    /// closes the segment.
    pub fn run(mut self, rx: Receiver<Task>) {
        tracing::info!(
            schedule = %self.schedule,
            ubatch = self.ubatch,
            pool_use = %self.slots.pool_use(),
            "compute thread started"
        );
        match self.schedule {
            Schedule::Serial => serial::run(&mut self, rx),
            Schedule::Batched => batched::run(&mut self, rx),
        }
        self.progress.close();
        tracing::info!("compute thread stopped; progress segment closed");
    }

    /// A task taken off the queue: no longer pending in the segment.
    fn dequeued(&self, task: &Task) {
        if let Some(p) = &self.shared.pending {
            p.dequeued(task.slot());
        }
    }

    fn is_shutting_down(&self) -> bool {
        // Acquire: pairs with the Release store in Server::stop.
        self.shutdown.load(std::sync::atomic::Ordering::Acquire)
    }

    fn handle(&mut self, task: Task) {
        match task {
            Task::Prefill { slot, spec, reply } => {
                let r = self.run_task(
                    slot,
                    Phase::Prefill,
                    WorkUnit::Tokens,
                    spec.tokens.len() as u64,
                    |c, id| c.prefill(slot, id, &spec),
                );
                send(reply, r);
            }
            Task::Decode { slot, spec, reply } => {
                let r = self.run_task(
                    slot,
                    Phase::Decode,
                    WorkUnit::Tokens,
                    spec.n_predict as u64,
                    |c, id| c.decode(slot, id, &spec),
                );
                send(reply, r);
            }
            Task::Completion {
                slot,
                prefill,
                decode,
                reply,
            } => {
                let total = prefill.tokens.len() as u64;
                let r = self.run_task(slot, Phase::Prefill, WorkUnit::Tokens, total, |c, id| {
                    let p = c.prefill(slot, id, &prefill)?;
                    c.progress.begin_phase(
                        slot,
                        Phase::Decode,
                        WorkUnit::Tokens,
                        decode.n_predict as u64,
                    );
                    let d = c.decode(slot, id, &decode)?;
                    Ok((p, d))
                });
                send(reply, r);
            }
            Task::Save { slot, reply } => self.save(slot, reply),
            Task::Restore { slot, data, reply } => {
                let total = data.len() as u64;
                let r = self.run_task(slot, Phase::Restore, WorkUnit::Bytes, total, |c, _| {
                    c.restore(slot, data)
                });
                send(reply, r);
            }
            Task::Erase { slot, reply } => {
                let r = self.erase(slot);
                send(reply, r);
            }
            // The serial schedule runs it with the batched schedule's steps, alone.
            Task::Generate { slot, spec, events } => {
                batched::run_single(self, Task::Generate { slot, spec, events })
            }
            Task::MetaViaQueue { slot, reply } => {
                send(reply, self.shared.meta_from_segment(slot));
            }
        }
    }

    /// Runs `body` as task `task_id` on `slot`: publishes the start, then the finish reason
    /// and error code from its result.
    fn run_task<T>(
        &mut self,
        slot: usize,
        phase: Phase,
        unit: WorkUnit,
        total: u64,
        body: impl FnOnce(&mut Self, u64) -> Result<T, TaskError>,
    ) -> Result<T, TaskError> {
        let task_id = self.begin_task(slot, phase, unit, total)?;
        let result = body(self, task_id);
        self.end_task(slot, &result);
        result
    }

    /// Publishes the start of a new task on `slot` and returns its id.
    fn begin_task(
        &mut self,
        slot: usize,
        phase: Phase,
        unit: WorkUnit,
        total: u64,
    ) -> Result<u64, TaskError> {
        self.check_slot(slot)?;
        self.next_task_id += 1;
        let task_id = self.next_task_id;
        self.progress.begin_task(slot, task_id, phase, unit, total);
        self.shared.cancel.started(slot, task_id);
        Ok(task_id)
    }

    /// Publishes the end of the task on `slot`: the finish reason and error code of its
    /// result, and the cache as it is now.
    fn end_task<T>(&mut self, slot: usize, result: &Result<T, TaskError>) {
        let (reason, code) = match result {
            Ok(_) => (FinishReason::Completed, ErrorCode::None),
            Err(TaskError::Cancelled) => (FinishReason::Cancelled, ErrorCode::None),
            Err(e) => (FinishReason::Error, e.segment_code()),
        };
        let n_past = self.slots.n_past(slot).ok();
        self.progress.finish(slot, reason, code, n_past);
        self.shared.cancel.ended(slot);
    }

    fn check_slot(&self, slot: usize) -> Result<(), TaskError> {
        if slot >= self.shared.n_slots {
            return Err(TaskError::UnknownSlot {
                slot,
                n_slots: self.shared.n_slots,
            });
        }
        Ok(())
    }

    fn prefill(
        &mut self,
        slot: usize,
        task_id: u64,
        spec: &PrefillSpec,
    ) -> Result<PrefillResult, TaskError> {
        let start = Instant::now();
        let mut observer = step_publisher!(self, TokenKind::Prompt);
        self.slots
            .prefill(slot, &spec.tokens, self.ubatch, &mut observer)?;
        self.prefill_result(slot, task_id, spec.tokens.len(), start)
    }

    /// The reply of a prefill of `n` tokens into `slot` begun at `start`.
    fn prefill_result(
        &self,
        slot: usize,
        task_id: u64,
        n: usize,
        start: Instant,
    ) -> Result<PrefillResult, TaskError> {
        let secs = start.elapsed().as_secs_f64();
        tracing::info!(
            slot,
            tokens = n,
            tokens_per_s = format_args!("{:.1}", n as f64 / secs.max(1e-9)),
            "prefill done"
        );
        Ok(PrefillResult {
            slot,
            task_id,
            n_prompt_tokens: n,
            n_past: self.slots.n_past(slot)?,
            prompt_ms: secs * 1e3,
            prompt_per_second: n as f64 / secs.max(1e-9),
        })
    }

    fn decode(
        &mut self,
        slot: usize,
        task_id: u64,
        spec: &DecodeSpec,
    ) -> Result<DecodeResult, TaskError> {
        let (first, mut sampler, params) = self.decode_start(slot, spec)?;
        let start = Instant::now();
        let cpu_start = process_cpu_ns();
        let mut observer = step_publisher!(self, TokenKind::Generated);
        let generation = generate(
            &mut self.slots,
            slot,
            first,
            &mut sampler,
            &params,
            &mut observer,
        )?;
        self.decode_result(slot, task_id, generation, start, cpu_start)
    }

    /// What a decode on `slot` starts from: the slot's last logits, the sampler and the
    /// generation settings; refused when the slot is empty or the sampler invalid.
    fn decode_start(
        &self,
        slot: usize,
        spec: &DecodeSpec,
    ) -> Result<(Logits, Sampler, GenerateParams), TaskError> {
        let empty = || {
            TaskError::EmptySlot(format!(
                "slot {slot} is empty: prefill a prompt before decoding"
            ))
        };
        if self.slots.is_empty(slot)? {
            return Err(empty());
        }
        let first = self.slots.last_logits(slot)?.cloned().ok_or_else(empty)?;
        let sampler = Sampler::new(spec.sampler)?;
        let params = GenerateParams {
            n_predict: spec.n_predict,
            stop_at_eos: spec.stop_at_eos,
        };
        Ok((first, sampler, params))
    }

    /// The reply of a generation on `slot` begun at `start` (process CPU clock `cpu_start`).
    fn decode_result(
        &self,
        slot: usize,
        task_id: u64,
        generation: Generation,
        start: Instant,
        cpu_start: u64,
    ) -> Result<DecodeResult, TaskError> {
        let secs = start.elapsed().as_secs_f64();
        let cpu_ms = process_cpu_ns().saturating_sub(cpu_start) as f64 / 1e6;
        let n = generation.tokens.len();
        let stop_type = match generation.finish {
            GenFinish::Eos => "eos",
            GenFinish::Length => "limit",
            GenFinish::ContextFull => "context_full",
            GenFinish::Cancelled => "cancelled",
        };
        tracing::info!(
            slot,
            tokens = n,
            tokens_per_s = format_args!("{:.1}", n as f64 / secs.max(1e-9)),
            stop_type,
            "decode done"
        );
        let content = self
            .shared
            .tokenizer
            .decode(&generation.tokens)
            .map_err(TaskError::from)?;
        if generation.finish == GenFinish::Cancelled {
            return Err(TaskError::Cancelled);
        }
        Ok(DecodeResult {
            slot,
            task_id,
            content,
            tokens: generation.tokens,
            stop_type,
            n_past: self.slots.n_past(slot)?,
            predicted_ms: secs * 1e3,
            predicted_per_second: n as f64 / secs.max(1e-9),
            predicted_cpu_ms: cpu_ms,
        })
    }

    fn save(&mut self, slot: usize, reply: Reply<SaveStream>) {
        let len = match self
            .check_slot(slot)
            .and_then(|_| Ok(self.slots.state_size(slot)?))
        {
            Ok(len) => len,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        if reply.send(Ok(SaveStream { len, chunks: rx })).is_err() {
            return; // the client went away before we started
        }
        // The reply (the stream) is already sent: a failure ends the stream with an error.
        let r = self.run_task(slot, Phase::Save, WorkUnit::Bytes, len, |c, _| {
            let mut out = ChunkSender {
                tx,
                buf: Vec::with_capacity(SAVE_CHUNK),
            };
            let progress = &mut c.progress;
            let written = c.slots.save_state(slot, &mut out, &mut |done, total| {
                progress.bytes(slot, done, total)
            });
            let written = match written {
                Ok(n) => n,
                Err(e) => {
                    let _ = out.tx.send(Err(std::io::Error::other(e.to_string())));
                    return Err(TaskError::from(e));
                }
            };
            std::io::Write::flush(&mut out).map_err(|e| TaskError::Io(e.to_string()))?;
            debug_assert_eq!(written, len);
            Ok(())
        });
        log_failure(&r);
    }

    fn restore(&mut self, slot: usize, data: Bytes) -> Result<usize, TaskError> {
        let total = data.len() as u64;
        let progress = &mut self.progress;
        self.slots
            .restore_state(slot, &mut &data[..], total, &mut |done, total| {
                progress.bytes(slot, done, total)
            })?;
        let n_past = self.slots.n_past(slot)?;
        self.progress.set_n_past(slot, n_past);
        Ok(n_past)
    }

    fn erase(&mut self, slot: usize) -> Result<(), TaskError> {
        self.check_slot(slot)?;
        self.slots.erase(slot)?;
        self.progress.set_n_past(slot, 0);
        Ok(())
    }
}

/// Answers a task. An internal failure is logged here, where it is produced, with its
/// text; the client only learns that it was internal.
fn send<T>(reply: Reply<T>, result: Result<T, TaskError>) {
    log_failure(&result);
    // The client may have gone away; its task still ran to completion.
    let _ = reply.send(result);
}

/// Logs a failed task: internal failures as errors, refused requests at debug level.
fn log_failure<T>(result: &Result<T, TaskError>) {
    if let Err(e) = result {
        if e.is_internal() {
            tracing::error!("task failed: {e}");
        } else {
            tracing::debug!("task refused: {e}");
        }
    }
}

/// An `io::Write` that sends what it is given to the HTTP response in chunks. Sending never
/// blocks (unbounded channel: at most one state in memory); a closed channel (client gone)
/// is a `BrokenPipe` error that stops the save.
struct ChunkSender {
    tx: mpsc::UnboundedSender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

impl std::io::Write for ChunkSender {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= SAVE_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(SAVE_CHUNK),
        ));
        self.tx.send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

/// CPU time of this process (all threads), ns.
fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}
