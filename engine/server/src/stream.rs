//! A generation streamed to its client as server-sent events while it runs: each surface
//! says how it writes the events ([`StreamFormat`]); [`stream`] pumps the compute thread's
//! events through it, with `prompt_progress` read from the segment while the prompt is
//! evaluated (after every chunk, and between chunks as the layer position moves).
//!
//! - [`sse`]: the events on the wire;
//! - [`prompt_progress`]: llama.cpp's `prompt_progress`, read from the segment.

pub mod prompt_progress;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use axum::response::Response;
use tokio::sync::mpsc;

use crate::progress::segment::Shared;
use crate::serving::Running;
use crate::task::generate::{GenEvent, GenSummary, TokenOut};
use crate::task_error::{ClientError, TaskError};
use prompt_progress::{PromptFacts, PromptProgress};

/// How often a streamed prefill's layer position is read from the segment between the
/// events the chunks send.
const PROGRESS_POLL: Duration = Duration::from_millis(25);

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
        prompt_progress::read(reader, slot.get(), facts.as_ref()?)
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
