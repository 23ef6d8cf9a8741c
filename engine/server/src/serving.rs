//! The front end's side of a generation request (`/completion`, `/v1/completions`,
//! `/v1/chat/completions`): take a slot from the [`SlotPool`], post the generation, and
//! either collect its events into one answer or pump them to the client as server-sent
//! events as they come, with `prompt_progress` read from the segment while the prompt is
//! evaluated (after every chunk, and between chunks as the layer position moves).
//!
//! The request's [`Running`] holds the slot's lease and the events' receiver. Dropping it
//! (the client went away: hyper dropped the handler, or the stream's body) frees the slot
//! and tells the compute thread, which stops the generation at its next step.

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use axum::response::Response;
use tokio::sync::mpsc;

use crate::openai::chat_template::ChatTemplate;
use crate::openai::error::OpenAiError;
use crate::openai::prompt_progress::{self, PromptFacts};
use crate::openai::response::{ChatTokenLogprob, PromptProgress, TopLogprob};
use crate::openai::sse;
use crate::progress::segment::Shared;
use crate::slot_pool::{Lease, PoolError, SlotPool};
use crate::task::generate::{GenEvent, GenSummary, GenerateSpec, TokenOut};
use crate::task::{Task, TaskKind, TaskSender};
use crate::task_error::{ClientError, TaskError};
use hydra_engine_core::logprobs::TokenLogprob;
use hydra_engine_core::tokenizer::Tokenizer;

/// How often a streamed prefill's layer position is read from the segment between the
/// events the chunks send.
const PROGRESS_POLL: Duration = Duration::from_millis(25);

/// Seconds a client told the queue is full should wait before trying again.
const RETRY_AFTER_S: u32 = 1;

/// Everything the generation endpoints share.
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
}

impl Serving {
    /// The generation endpoints' state for an engine configured with `config`: the chat
    /// template (`--chat-template FILE`, else the model's; a broken one is an error here),
    /// the model's id and the slot pool.
    pub fn new(
        config: &crate::config::ServerConfig,
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
        let model_id = config
            .model_alias
            .clone()
            .or_else(|| {
                let path = info.path.as_ref()?;
                let name = path.file_name()?.to_string_lossy();
                Some(name.strip_suffix(".gguf").unwrap_or(&name).to_owned())
            })
            .unwrap_or_else(|| info.name.clone());
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
            created: crate::openai::response::unix_now(),
        })
    }
}

/// A generation in flight for one request.
pub struct Running {
    lease: Lease,
    prompt: Vec<u32>,
    /// The compute thread's events.
    pub events: mpsc::UnboundedReceiver<GenEvent>,
}

impl Running {
    /// The slot it runs on.
    pub fn slot(&self) -> usize {
        self.lease.slot()
    }

    /// Prompt tokens.
    pub fn n_prompt(&self) -> usize {
        self.prompt.len()
    }

    /// The generation ended: remember what the slot holds, for later slot choices.
    fn record(&self, summary: &GenSummary) {
        let mut held = self.prompt.clone();
        held.extend_from_slice(&summary.tokens);
        self.lease.record(held);
    }

    /// The generation failed: what the slot holds is not known.
    fn forget(&self) {
        self.lease.record(Vec::new());
    }
}

impl Serving {
    /// Takes a slot (`want`, or the best idle one, waiting within the bound) and starts
    /// `spec` on it.
    pub async fn start(
        &self,
        spec: GenerateSpec,
        want: Option<usize>,
    ) -> Result<Running, OpenAiError> {
        let lease = self
            .pool
            .acquire(want, &spec.tokens)
            .await
            .map_err(|e| match e {
                PoolError::Full { .. } => OpenAiError::busy(e.to_string(), RETRY_AFTER_S),
                PoolError::UnknownSlot { .. } => {
                    OpenAiError::invalid(Some("id_slot"), e.to_string())
                }
            })?;
        let (tx, events) = mpsc::unbounded_channel();
        let prompt = spec.tokens.clone();
        // The pool leases only the engine's slots; the check is the task's own.
        let slot = self.shared.slot(lease.slot()).map_err(|e| {
            TaskError::from(e).log();
            OpenAiError::internal()
        })?;
        self.tasks
            .post(Task {
                slot,
                kind: TaskKind::Generate { spec, events: tx },
            })
            .map_err(|_| {
                OpenAiError::unavailable("the engine is shutting down", "shutting_down")
            })?;
        Ok(Running {
            lease,
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

/// How one endpoint writes a streamed generation's events.
pub trait StreamFormat: Send + 'static {
    /// Task `task_id` started (`n_cached` prompt tokens reused).
    fn started(&mut self, task_id: u64, n_cached: usize) -> Vec<Event>;
    /// Prompt progress (only with `return_progress`).
    fn progress(&mut self, p: &PromptProgress) -> Vec<Event>;
    /// A token.
    fn token(&mut self, t: &TokenOut) -> Vec<Event>;
    /// The end.
    fn done(&mut self, s: &GenSummary) -> Vec<Event>;
    /// A failure after the stream began.
    fn failed(&mut self, e: &TaskError) -> Vec<Event>;
}

/// Streams `running` to the client in `format`; with `return_progress`, prompt progress
/// read from the segment.
pub fn stream(
    shared: Arc<Shared>,
    running: Running,
    return_progress: bool,
    format: impl StreamFormat,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(64);
    tokio::spawn(pump(shared, running, return_progress, format, tx));
    sse::response(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Sends `events`; false when the client has gone.
async fn send_all(tx: &mpsc::Sender<Event>, events: Vec<Event>) -> bool {
    for e in events {
        if tx.send(e).await.is_err() {
            return false;
        }
    }
    true
}

async fn pump(
    shared: Arc<Shared>,
    mut running: Running,
    return_progress: bool,
    mut format: impl StreamFormat,
    tx: mpsc::Sender<Event>,
) {
    let slot = running.slot();
    let n_prompt = running.n_prompt() as u64;
    let mut facts: Option<PromptFacts> = None;
    let mut prefilling = false;
    let mut last_sent: Option<PromptProgress> = None;
    let mut poll = tokio::time::interval(PROGRESS_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let read = |facts: &Option<PromptFacts>| {
        let reader = shared.reader.as_ref()?;
        prompt_progress::read(reader, slot, facts.as_ref()?)
    };
    loop {
        let events = tokio::select! {
            _ = tx.closed() => return,
            _ = poll.tick(), if return_progress && prefilling => {
                match read(&facts) {
                    // Only when something moved (the layer, inside a chunk).
                    Some(p) if last_sent != Some(p) => {
                        last_sent = Some(p);
                        format.progress(&p)
                    }
                    _ => Vec::new(),
                }
            }
            event = running.events.recv() => match event {
                Some(GenEvent::Started { task_id, n_cached }) => {
                    facts = Some(PromptFacts { task_id, n_prompt, n_cached: n_cached as u64 });
                    prefilling = true;
                    let mut out = format.started(task_id, n_cached);
                    if return_progress {
                        // The 0% event, as llama.cpp sends it when the prompt starts.
                        let p = PromptProgress {
                            total: n_prompt,
                            cache: n_cached as u64,
                            processed: n_cached as u64,
                            time_ms: 0,
                            layer: None,
                        };
                        last_sent = Some(p);
                        out.extend(format.progress(&p));
                    }
                    out
                }
                Some(GenEvent::PromptChunk) if return_progress => match read(&facts) {
                    // Once per chunk, whether or not the tick saw it already.
                    Some(p) => {
                        last_sent = Some(p);
                        format.progress(&p)
                    }
                    None => Vec::new(),
                },
                Some(GenEvent::PromptChunk) => Vec::new(),
                Some(GenEvent::Token(t)) => {
                    prefilling = false;
                    format.token(&t)
                }
                Some(GenEvent::Done(s)) => {
                    running.record(&s);
                    send_all(&tx, format.done(&s)).await;
                    return;
                }
                Some(GenEvent::Failed(e)) => {
                    running.forget();
                    send_all(&tx, format.failed(&e)).await;
                    return;
                }
                None => {
                    running.forget();
                    send_all(&tx, format.failed(&TaskError::from(ClientError::ShuttingDown))).await;
                    return;
                }
            },
        };
        if !send_all(&tx, events).await {
            return;
        }
    }
}

/// A token's text as clients see it in log-probabilities.
fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id).unwrap_or_default().to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// A token's log-probability in OpenAI's chat shape.
pub fn chat_logprob(tok: &Tokenizer, lp: &TokenLogprob) -> ChatTokenLogprob {
    let (token, bytes) = token_text(tok, lp.token);
    ChatTokenLogprob {
        token,
        logprob: lp.logprob,
        bytes,
        top_logprobs: lp
            .top
            .iter()
            .map(|&(id, logprob)| {
                let (token, bytes) = token_text(tok, id);
                TopLogprob {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}
