//! The compute thread: owns the model and every slot, takes tasks from the FIFO queue, and
//! publishes progress on every step. It never waits on a reader: the segment is written
//! with a seqlock, and replies go through oneshot channels.
//!
//! The loop is `schedule`'s: it steps the running generation tasks (`job`: a prefill,
//! decode or generation in its prompt or generation stage), every decoding slot by one
//! token per forward, prefill chunks in between. `--schedule batched` runs a job on every
//! slot at once; `--schedule serial` is the same stepping with at most one job, each task
//! run to its end before the next starts. The task bodies and their publishing are here.

/// The step observer that publishes `$kind` steps of compute `$c` (a macro, not a method,
/// so that it borrows only the publisher and the shutdown flag, leaving the slots free).
macro_rules! step_publisher {
    ($c:expr, $kind:expr) => {
        $crate::progress::StepPublisher {
            progress: &mut $c.progress,
            kind: $kind,
            shutdown: &$c.shutdown,
            stop: None,
        }
    };
    ($c:expr, $kind:expr, $stop:expr) => {
        $crate::progress::StepPublisher {
            progress: &mut $c.progress,
            kind: $kind,
            shutdown: &$c.shutdown,
            stop: Some($stop),
        }
    };
}

mod generation;
mod job;
mod schedule;

use crate::config::{ModelSource, Schedule, ServerConfig};
use crate::progress::segment::{Segment, Shared};
use crate::progress::Progress;
use crate::task::{DecodeResult, DecodeSpec, PrefillResult, Reply, SaveStream, SlotId, Task};
use crate::task_error::{ClientError, TaskError};
use anyhow::Context as _;
use bytes::Bytes;
use hydra_engine_core::model::Model;
use hydra_engine_core::sampling::{GenerateParams, Generation, Sampler, StopReason};
use hydra_engine_core::slots::Logits;
use hydra_engine_core::slots::Slots;
use hydra_layout::{ErrorCode, FinishCause, Phase, WorkUnit};
use hydra_probe::Thresholds;
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

/// The compute thread's state.
pub struct Compute {
    slots: Slots,
    progress: Progress,
    shared: Arc<Shared>,
    ubatch: usize,
    schedule: Schedule,
    next_task_id: u64,
    /// When the request of the task being started arrived (taken by its task's begin).
    arrival_ns: Option<u64>,
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

        let segment = Segment::open(config, &info, llama.n_layer)?;
        let mut progress = Progress::new(segment.writer, config.slots, n_ctx, llama.clone());
        progress.keep_learnt(crate::progress::learnt::LearntStore::new(
            &config.progress_dir,
            info.fingerprint,
            &config.load.device.to_string(),
            hydra_engine_core::threads::cpu_threads(),
        ));
        let shared = Arc::new(Shared {
            segment_path: segment.path,
            pending: segment.pending,
            reader: segment.reader,
            tokenizer: model.tokenizer().clone(),
            model_info: info,
            n_slots: config.slots,
            n_ctx,
            max_state_bytes: hydra_engine_core::kv_state::state_size(&llama, n_ctx),
            engine_id: config.engine_id.clone(),
            thresholds: Thresholds::default(),
            cancel: crate::cancel::CancelBoard::new(config.slots),
        });
        Ok((
            Self {
                slots,
                progress,
                shared: shared.clone(),
                ubatch: config.ubatch,
                schedule: config.schedule,
                next_task_id: 0,
                arrival_ns: None,
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
        schedule::run(&mut self, rx);
        self.progress.close();
        tracing::info!("compute thread stopped; progress segment closed");
    }

    /// Takes a task off the queue, immediately before it begins (or is refused): no longer
    /// pending in the segment. False when it was withdrawn first (the front end took it
    /// off the count): it must not run.
    fn take(&self, task: &Task) -> bool {
        task.ticket
            .start(task.slot.get(), self.shared.pending.as_ref())
    }

    /// `error` as the client is told it: a task stopped while the engine shuts down was
    /// stopped by the shutdown, not cancelled.
    fn stopped_by(&self, error: TaskError) -> TaskError {
        match error {
            TaskError::Client(ClientError::Cancelled) if self.is_shutting_down() => {
                ClientError::ShuttingDown.into()
            }
            e => e,
        }
    }

    fn is_shutting_down(&self) -> bool {
        // Acquire: pairs with the Release store in Server::stop.
        self.shutdown.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs `body` as task `task_id` on `slot`: publishes the start, then the finish reason
    /// and error code from its result.
    fn run_task<T>(
        &mut self,
        slot: SlotId,
        phase: Phase,
        unit: WorkUnit,
        total: u64,
        body: impl FnOnce(&mut Self, u64) -> Result<T, TaskError>,
    ) -> Result<T, TaskError> {
        let task_id = self.begin_task(slot, phase, unit, total);
        let result = body(self, task_id);
        self.end_task(slot, &result);
        result
    }

    /// Publishes the start of a new task on `slot` and returns its id.
    fn begin_task(&mut self, slot: SlotId, phase: Phase, unit: WorkUnit, total: u64) -> u64 {
        self.next_task_id += 1;
        let task_id = self.next_task_id;
        let arrival_ns = self.arrival_ns.take();
        self.progress
            .begin_task(slot.get(), task_id, phase, unit, total, arrival_ns);
        self.shared.cancel.started(slot.get(), task_id, phase);
        task_id
    }

    /// Publishes the end of a task that generates nothing (a prefill, save or restore) on
    /// `slot`: `done` when it succeeded, else as its error says, and the cache as it is now.
    fn end_task<T>(&mut self, slot: SlotId, result: &Result<T, TaskError>) {
        self.end_task_for(slot, result, FinishCause::Done);
    }

    /// Publishes the end of the task on `slot`: `completed` for the cause it completed
    /// for, or cancelled or failed as its error says, and the cache as it is now.
    fn end_task_for<T>(
        &mut self,
        slot: SlotId,
        result: &Result<T, TaskError>,
        completed: FinishCause,
    ) {
        let (cause, code) = match result {
            Ok(_) => (completed, ErrorCode::None),
            Err(e) if e.is_cancelled() => (FinishCause::Cancelled, ErrorCode::None),
            Err(e) => (FinishCause::Error, e.segment_code()),
        };
        let n_past = self.slots.n_past(slot);
        self.progress.finish(slot.get(), cause, code, n_past);
        self.shared.cancel.ended(slot.get());
    }

    /// The reply of a prefill of `n` tokens into `slot` begun at `start`.
    fn prefill_result(
        &self,
        slot: SlotId,
        task_id: u64,
        n: usize,
        start: Instant,
    ) -> Result<PrefillResult, TaskError> {
        let (ms, per_second) = timing(start, n);
        tracing::info!(
            slot = slot.get(),
            tokens = n,
            tokens_per_s = format_args!("{per_second:.1}"),
            "prefill done"
        );
        Ok(PrefillResult {
            slot: slot.get(),
            task_id,
            n_prompt_tokens: n,
            n_past: self.slots.n_past(slot),
            prompt_ms: ms,
            prompt_per_second: per_second,
        })
    }

    /// What a decode on `slot` starts from: the slot's last logits, the sampler and the
    /// generation settings; refused when the slot is empty or the sampler invalid.
    fn decode_start(
        &self,
        slot: SlotId,
        spec: &DecodeSpec,
    ) -> Result<(Logits, Sampler, GenerateParams), TaskError> {
        let empty =
            || TaskError::from(hydra_engine_core::EngineError::EmptySlot { slot: slot.get() });
        if self.slots.is_empty(slot) {
            return Err(empty());
        }
        let first = self.slots.last_logits(slot).cloned().ok_or_else(empty)?;
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
        slot: SlotId,
        task_id: u64,
        generation: Generation,
        start: Instant,
        cpu_start: u64,
    ) -> Result<DecodeResult, TaskError> {
        let n = generation.tokens.len();
        let (ms, per_second) = timing(start, n);
        let cpu_ms = process_cpu_ns().saturating_sub(cpu_start) as f64 / 1e6;
        tracing::info!(
            slot = slot.get(),
            tokens = n,
            tokens_per_s = format_args!("{per_second:.1}"),
            stop = ?generation.finish,
            "decode done"
        );
        let content = self
            .shared
            .tokenizer
            .decode(&generation.tokens)
            .map_err(TaskError::from)?;
        // A decode cancelled by its client or `?action=cancel` answers what it generated
        // (`stop_type` cancelled); one stopped by the shutdown answers shutting_down.
        if generation.finish == StopReason::Cancelled && self.is_shutting_down() {
            return Err(ClientError::ShuttingDown.into());
        }
        Ok(DecodeResult {
            slot: slot.get(),
            task_id,
            content,
            tokens: generation.tokens,
            stop: generation.finish,
            n_past: self.slots.n_past(slot),
            predicted_ms: ms,
            predicted_per_second: per_second,
            predicted_cpu_ms: cpu_ms,
        })
    }

    /// Streams `slot`'s KV state: the stream goes to the client first, then its bytes.
    fn save(&mut self, slot: SlotId, reply: Reply<SaveStream>) {
        let len = self.slots.state_size(slot);
        let (tx, rx) = mpsc::unbounded_channel();
        if reply.send(Ok(SaveStream { len, chunks: rx })).is_err() {
            return; // the client went away before we started
        }
        // The reply (the stream) is already sent: a failure ends the stream with an error.
        // A cancel (`?action=cancel`) or the client going away stops it at its next block.
        let r = self.run_task(slot, Phase::Save, WorkUnit::Bytes, len, |c, task_id| {
            let board = &c.shared.cancel;
            let client = tx.clone();
            let stop = || board.is_cancelled(slot.get(), task_id) || client.is_closed();
            let mut out = ChunkSender {
                tx,
                buf: Vec::with_capacity(SAVE_CHUNK),
                stop: &stop,
            };
            let progress = &mut c.progress;
            let written = c.slots.save_state(slot, &mut out, &mut |done, total| {
                progress.bytes(slot.get(), done, total)
            });
            let written = match written {
                Ok(n) => n,
                Err(_) if stop() => {
                    let _ = out.tx.send(Err(std::io::Error::other("cancelled")));
                    return Err(ClientError::Cancelled.into());
                }
                Err(e) => {
                    let _ = out.tx.send(Err(std::io::Error::other(e.to_string())));
                    return Err(TaskError::from(e));
                }
            };
            debug_assert_eq!(written, len);
            // Its last block is written; a cancel that landed first ends it as cancelled
            // (before the last bytes go out), so that the cancel's answer holds.
            if !board.finishing(slot.get(), task_id) {
                let _ = out.tx.send(Err(std::io::Error::other("cancelled")));
                return Err(ClientError::Cancelled.into());
            }
            std::io::Write::flush(&mut out).map_err(|e| TaskError::Io(e.to_string()))?;
            Ok(())
        });
        if let Err(e) = r {
            e.log();
        }
    }

    /// Replaces `slot`'s KV state with `data`; replies with the slot's n_past. A cancel
    /// (`?action=cancel`, or the client going away) stops it at its next block and leaves
    /// the slot empty, never half-restored; a restore that fails otherwise leaves the
    /// slot as it was.
    fn restore(&mut self, slot: SlotId, data: Bytes, reply: Reply<usize>) {
        let total = data.len() as u64;
        let r = self.run_task(
            slot,
            Phase::Restore,
            WorkUnit::Bytes,
            total,
            |c, task_id| {
                let board = &c.shared.cancel;
                let stop = || board.is_cancelled(slot.get(), task_id) || reply.is_closed();
                let progress = &mut c.progress;
                let mut input = StopReader {
                    inner: &data[..],
                    stop: &stop,
                };
                let restored =
                    c.slots
                        .restore_state(slot, &mut input, total, &mut |done, total| {
                            progress.bytes(slot.get(), done, total)
                        });
                // A cancel that landed after its last block still empties the slot, so
                // that the cancel's answer holds.
                let cancelled = match restored {
                    Err(_) => stop(),
                    Ok(_) => !board.finishing(slot.get(), task_id),
                };
                if cancelled {
                    c.slots.erase(slot);
                    c.progress.set_n_past(slot.get(), 0);
                    return Err(ClientError::Cancelled.into());
                }
                restored?;
                let n_past = c.slots.n_past(slot);
                c.progress.set_n_past(slot.get(), n_past);
                Ok(n_past)
            },
        );
        send(reply, r);
    }

    /// Empties `slot`.
    fn erase(&mut self, slot: SlotId, reply: Reply<()>) {
        self.slots.erase(slot);
        self.progress.set_n_past(slot.get(), 0);
        send(reply, Ok(()));
    }

    /// Answers a meta query sent through the queue, from the segment.
    fn meta_via_queue(&self, slot: SlotId, reply: Reply<hydra_probe::HydraMeta>) {
        send(reply, self.shared.meta_from_segment(slot));
    }
}

/// Answers a task. An internal failure is logged here, where it is produced, with its
/// text; the client only learns that it was internal.
fn send<T>(reply: Reply<T>, result: Result<T, TaskError>) {
    if let Err(e) = &result {
        e.log();
    }
    // The client may have gone away; its task still ran to completion.
    let _ = reply.send(result);
}

/// An `io::Write` that sends what it is given to the HTTP response in chunks. Sending never
/// blocks (unbounded channel: at most one state in memory); a closed channel (client gone)
/// is a `BrokenPipe` error that stops the save.
struct ChunkSender<'a> {
    tx: mpsc::UnboundedSender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
    /// Whether the save was cancelled: checked before each block goes out.
    stop: &'a dyn Fn() -> bool,
}

/// The cancelled save's or restore's I/O error (the task's error is `Cancelled`). Not
/// `ErrorKind::Interrupted`, which `read_exact` and `write_all` retry forever.
fn cancelled_io() -> std::io::Error {
    std::io::Error::other("cancelled")
}

/// A restore's input that fails once the restore is cancelled (checked at every read,
/// which the state reader makes per block).
struct StopReader<'a, R> {
    inner: R,
    stop: &'a dyn Fn() -> bool,
}

impl<R: std::io::Read> std::io::Read for StopReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if (self.stop)() {
            return Err(cancelled_io());
        }
        self.inner.read(buf)
    }
}

impl std::io::Write for ChunkSender<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= SAVE_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // Nothing left to send: the save is whole, whatever happened since. (A client that
        // has read every byte may already have closed the stream, which is no cancel: it
        // read as one, and the finished save as failed.)
        if self.buf.is_empty() {
            return Ok(());
        }
        if (self.stop)() {
            return Err(cancelled_io());
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

/// The wall time since `start`, ms, and the rate of `n` items over it, per second.
fn timing(start: Instant, n: usize) -> (f64, f64) {
    let secs = start.elapsed().as_secs_f64();
    (secs * 1e3, n as f64 / secs.max(1e-9))
}

/// CPU time of this process (all threads), ns.
fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}
