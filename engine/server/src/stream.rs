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
use crate::task::SlotId;
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

/// What one event of the generation asks of the stream: events to send and go on, or the
/// last events.
enum Step {
    Send(Vec<Event>),
    End(Vec<Event>),
}

/// A streamed generation's state between its events: what is known of its prompt, whether
/// it is still evaluating it, and the last progress sent.
struct Pump<F> {
    shared: Arc<Shared>,
    format: F,
    return_progress: bool,
    n_prompt: u64,
    facts: Option<PromptFacts>,
    prefilling: bool,
    last_sent: Option<PromptProgress>,
}

impl<F: StreamFormat> Pump<F> {
    /// The prompt's progress read from the segment now.
    fn read(&self, slot: SlotId) -> Option<PromptProgress> {
        let reader = self.shared.reader.as_ref()?;
        prompt_progress::read(reader, slot.get(), self.facts.as_ref()?)
    }

    /// `p` sent as the last progress.
    fn progress(&mut self, p: PromptProgress) -> Vec<Event> {
        self.last_sent = Some(p);
        self.format.progress(&p)
    }

    /// Between chunks: progress only when something moved (the layer, inside a chunk).
    fn tick(&mut self, slot: SlotId) -> Vec<Event> {
        match self.read(slot) {
            Some(p) if self.last_sent != Some(p) => self.progress(p),
            _ => Vec::new(),
        }
    }

    /// What the compute thread's `event` (None: it stopped) sends.
    fn on_event(&mut self, running: &Running, event: Option<GenEvent>) -> Step {
        let slot = running.slot();
        match event {
            Some(GenEvent::Started { task_id, n_cached }) => {
                let n_cached = n_cached as u64;
                self.facts = Some(PromptFacts {
                    task_id,
                    n_prompt: self.n_prompt,
                    n_cached,
                });
                self.prefilling = true;
                let mut out = self.format.started(task_id, n_cached as usize);
                if self.return_progress {
                    // The 0% event, as llama.cpp sends it when the prompt starts.
                    out.extend(self.progress(PromptProgress {
                        total: self.n_prompt,
                        cache: n_cached,
                        processed: n_cached,
                        time_ms: 0,
                        layer: None,
                    }));
                }
                Step::Send(out)
            }
            // Once per chunk, whether or not the tick saw it already.
            Some(GenEvent::PromptChunk) if self.return_progress => Step::Send(
                self.read(slot)
                    .map(|p| self.progress(p))
                    .unwrap_or_default(),
            ),
            Some(GenEvent::PromptChunk) => Step::Send(Vec::new()),
            Some(GenEvent::Token(t)) => {
                self.prefilling = false;
                Step::Send(self.format.token(&t))
            }
            Some(GenEvent::Done(s)) => {
                running.record(&s);
                Step::End(self.format.done(&s))
            }
            Some(GenEvent::Failed(e)) => {
                running.forget();
                Step::End(self.format.failed(&e))
            }
            None => {
                running.forget();
                let e = TaskError::from(ClientError::ShuttingDown);
                Step::End(self.format.failed(&e))
            }
        }
    }
}

async fn pump(
    shared: Arc<Shared>,
    mut running: Running,
    return_progress: bool,
    format: impl StreamFormat,
    tx: mpsc::Sender<Event>,
) {
    let slot = running.slot();
    let mut pump = Pump {
        shared,
        format,
        return_progress,
        n_prompt: running.n_prompt() as u64,
        facts: None,
        prefilling: false,
        last_sent: None,
    };
    let mut poll = tokio::time::interval(PROGRESS_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let step = tokio::select! {
            _ = tx.closed() => return,
            _ = poll.tick(), if pump.return_progress && pump.prefilling => Step::Send(pump.tick(slot)),
            event = running.events.recv() => pump.on_event(&running, event),
        };
        match step {
            Step::Send(events) => {
                if !send_all(&tx, events).await {
                    return;
                }
            }
            Step::End(events) => {
                send_all(&tx, events).await;
                return;
            }
        }
    }
}
