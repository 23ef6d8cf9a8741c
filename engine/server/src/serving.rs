//! The one request path of both surfaces: [`Serving`] is the state every handler shares
//! (the queue's sender, the [`Shared`] facts and segment reader, the slot pool, the chat
//! template, the model's id, the body limit), and the steps a request takes through it: a
//! task posted and its reply awaited ([`Serving::call`]), or a generation started on a
//! leased slot ([`Serving::start`]) and collected into one answer ([`collect`]) or streamed
//! (`stream.rs`).
//!
//! The request's [`Running`] holds the slot's lease and the events' receiver. Dropping it
//! (the client went away: hyper dropped the handler, or the stream's body) frees the slot
//! and tells the compute thread, which stops the generation at its next step.

use std::sync::Arc;

use hydra_engine_core::logprobs::TokenLogprob;
use hydra_probe::EngineView;
use tokio::sync::{mpsc, oneshot};

use crate::api_error::ApiError;
use crate::chat_template::ChatTemplate;
use crate::config::ServerConfig;
use crate::progress::segment::Shared;
use crate::slot_pool::{Lease, SlotPool};
use crate::task::generate::{GenEvent, GenSummary, GenerateSpec, TokenOut};
use crate::task::{Posted, Reply, SlotId, Task, TaskKind, TaskSender};
use crate::task_error::{ClientError, TaskError};

/// What every handler of both surfaces shares.
pub type AppState = Arc<Serving>;

/// Everything the handlers share.
pub struct Serving {
    /// What the compute thread shares.
    pub shared: Arc<Shared>,
    /// The task queue.
    pub tasks: TaskSender,
    /// Slot leases and the wait queue.
    pub pool: Arc<SlotPool>,
    /// The chat template (None: chat requests are refused, saying why).
    pub template: Option<ChatTemplate>,
    /// The model's id (`--alias`, else the file name without `.gguf`).
    pub model_id: String,
    /// Unix seconds the engine started.
    pub created: u64,
    /// Largest JSON request body, bytes.
    pub max_json_body: usize,
}

impl Serving {
    /// The handlers' state for an engine configured with `config`: the chat template
    /// (`--chat-template FILE`, else the model's; a broken one is an error here), the
    /// model's id and the slot pool.
    pub fn new(
        config: &ServerConfig,
        shared: Arc<Shared>,
        tasks: TaskSender,
    ) -> anyhow::Result<Self> {
        let tok = &shared.tokenizer;
        let text = |id: Option<u32>| {
            id.and_then(|id| tok.token_bytes(id).ok())
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        let info = &shared.model_info;
        let template = ChatTemplate::select(
            config.chat_template.as_deref(),
            info.chat_template.as_deref(),
            &text(tok.bos_token()),
            &text(tok.eos_tokens().first().copied()),
        )?;
        match &template {
            Some(t) => tracing::info!(template = %t.origin(), "chat template"),
            None => tracing::info!("no chat template: /v1/chat/completions answers 400"),
        }
        let model_id = config.model_id(info);
        let pool = Arc::new(SlotPool::new(
            shared.n_slots,
            config.max_waiting,
            shared.pending.clone(),
        ));
        Ok(Self {
            shared,
            tasks,
            pool,
            template,
            model_id,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            max_json_body: config.max_json_body,
        })
    }
}

/// A generation in flight for one request.
pub struct Running {
    lease: Lease,
    /// Dropped with the request: a task not yet taken leaves the queue.
    _posted: Posted,
    prompt: Vec<u32>,
    /// The compute thread's events.
    pub events: mpsc::UnboundedReceiver<GenEvent>,
}

impl Running {
    /// The slot it runs on.
    pub fn slot(&self) -> SlotId {
        self.lease.slot()
    }

    /// Prompt tokens.
    pub fn n_prompt(&self) -> usize {
        self.prompt.len()
    }

    /// The generation ended: remember what the slot holds, for later slot choices.
    pub(crate) fn record(&self, summary: &GenSummary) {
        let mut held = self.prompt.clone();
        held.extend_from_slice(&summary.tokens);
        self.lease.record(held);
    }

    /// The generation failed: what the slot holds is not known.
    pub(crate) fn forget(&self) {
        self.lease.record(Vec::new());
    }
}

/// A body's `id_slot` as llama-server reads it: absent or -1 lets the engine choose; any
/// other negative number is refused. The bound is [`Serving::slot`]'s.
pub fn requested_slot(id_slot: Option<i64>) -> Result<Option<usize>, ApiError> {
    match id_slot {
        None | Some(-1) => Ok(None),
        Some(i) => usize::try_from(i).map(Some).map_err(|_| {
            ApiError::invalid(
                "id_slot",
                format!("id_slot must be a slot number or -1 (any slot), not {i}"),
            )
        }),
    }
}

impl Serving {
    /// The slot a path's `{id}` or a body's `id_slot` names: the one check of the bound.
    pub fn slot(&self, slot: usize) -> Result<SlotId, ApiError> {
        self.shared.slot(slot).map_err(ApiError::report)
    }

    /// Every slot, read from the segment (a failure to read it is logged here).
    pub fn view(&self) -> Result<EngineView, ApiError> {
        self.shared.view().map_err(ApiError::report)
    }

    /// Posts a task on `slot` and awaits its reply.
    pub async fn call<T>(
        &self,
        slot: SlotId,
        make: impl FnOnce(Reply<T>) -> TaskKind,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        // Held across the wait: a client that goes away while the task still waits in the
        // queue withdraws it.
        let _posted = self.tasks.post(Task::new(slot, make(tx)))?;
        let reply = rx
            .await
            .map_err(|_| ApiError::from(ClientError::ShuttingDown))?;
        Ok(reply?)
    }

    /// Takes a slot (`want`, checked here, or the best idle one, waiting within the bound)
    /// and starts `spec` on it.
    pub async fn start(
        &self,
        spec: GenerateSpec,
        want: Option<usize>,
    ) -> Result<Running, ApiError> {
        // The request arrives before it waits for a slot: that wait is part of its queue
        // wait.
        let arrival_ns = hydra_layout::clock::monotonic_ns();
        let want = want.map(|slot| self.slot(slot)).transpose()?;
        let lease = self.pool.acquire(want, &spec.tokens).await?;
        let (tx, events) = mpsc::unbounded_channel();
        let prompt = spec.tokens.clone();
        let posted = self.tasks.post(Task {
            arrival_ns,
            ..Task::new(lease.slot(), TaskKind::Generate { spec, events: tx })
        })?;
        Ok(Running {
            lease,
            _posted: posted,
            prompt,
            events,
        })
    }
}

/// A whole generation, collected.
#[derive(Debug, Clone)]
pub struct Collected {
    /// The text.
    pub text: String,
    /// Each token's log-probability (when asked for), with where its text starts.
    pub logprobs: Vec<(TokenLogprob, usize)>,
    /// How it went.
    pub summary: GenSummary,
}

/// Waits for the whole generation. Dropping the future (the client went away) cancels it.
pub async fn collect(mut running: Running) -> Result<Collected, TaskError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = running.events.recv().await {
        match event {
            GenEvent::Started { .. } | GenEvent::PromptChunk => {}
            GenEvent::Token(TokenOut {
                text: t, logprob, ..
            }) => {
                if let Some(lp) = logprob {
                    logprobs.push((lp, text.len()));
                }
                text.push_str(&t);
            }
            GenEvent::Done(summary) => {
                running.record(&summary);
                return Ok(Collected {
                    text,
                    logprobs,
                    summary,
                });
            }
            GenEvent::Failed(e) => {
                running.forget();
                return Err(e);
            }
        }
    }
    running.forget();
    Err(TaskError::from(ClientError::ShuttingDown))
}
