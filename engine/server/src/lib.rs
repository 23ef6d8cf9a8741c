//! `hydra-engine-server`: the engine server. One compute thread owns the model and every
//! slot and runs tasks from a FIFO queue, stepping every slot's generation in one forward
//! (or, with `--schedule serial`, one task at a time, the shape of llama.cpp's server
//! queue: a DECODE holds the thread until it finishes), publishing progress into the
//! shared-memory segment on every step; an HTTP front end (tokio + axum) posts tasks and
//! awaits replies, and answers progress questions straight from the segment without
//! touching the queue.
//!
//! The compute side, which knows nothing of HTTP:
//! - [`config`]: what to serve and how;
//! - [`task`]: the messages the front end sends to the compute thread (a [`task::Task`]: a
//!   checked [`task::SlotId`] and a [`task::TaskKind`] with its reply), and
//!   [`task::generate`], the generation task's spec, text and events;
//! - [`compute`]: the compute thread, its loop (the schedule) and task bodies;
//!   [`task_error`]: its error, in the segment's terms (`ERROR_CODE`), whose client part is
//!   [`task_error::ClientError`];
//! - [`progress`]: everything published to the segment, the step observer that publishes
//!   each step; [`progress::segment`]: creating the segment and reading it back
//!   ([`progress::segment::Shared`]); [`layer_signal`]: the layer position inside a step,
//!   published when the device reaches it.
//!
//! The front end, shared by both surfaces:
//! - [`serving`]: [`serving::AppState`], what every handler shares, and a request's steps
//!   through it ([`slot_pool`]: slot leases and the bounded wait; [`cancel`]: the cancel
//!   board; [`chat_template`]: messages to a prompt);
//! - [`api_error`]: [`api_error::ApiError`], the one classification of what clients are
//!   answered with, which each surface renders in its own words;
//! - [`prompt`]: a prompt in any shape as tokens, and the one check of its tokens;
//! - [`extract`]: the typed extractors (a path's slot, a JSON body);
//! - [`stream`]: a generation streamed as server-sent events;
//! - [`http`]: the one router over both surfaces.
//!
//! The two surfaces, leaves that nothing above imports:
//! - [`llama`]: llama-server's routes and this engine's own (`/completion`, `/slots/...`,
//!   `/tokenize`, `/health`);
//! - [`openai`]: the OpenAI-compatible `/v1/...` routes.
//!
//! [`Server`]: start, address, shutdown.

#![deny(missing_docs)]
// No unsafe code, except the one CUDA host-callback launch (`layer_signal`, behind the `cuda`
// feature), which has no safe API in cudarc; `deny` lets that place allow it.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod api_error;
pub mod cancel;
pub mod chat_template;
pub mod compute;
pub mod config;
pub mod extract;
pub mod http;
pub mod layer_signal;
pub mod llama;
pub mod openai;
pub mod progress;
pub mod prompt;
pub mod serving;
pub mod slot_pool;
pub mod stream;
pub mod task;
pub mod task_error;
pub mod ticket;

use crate::config::ServerConfig;
use crate::task::TaskSender;
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running engine: compute thread plus HTTP front end on a tokio runtime.
pub struct Server {
    addr: SocketAddr,
    segment_path: Option<PathBuf>,
    shutdown: Arc<AtomicBool>,
    http_stop: Option<tokio::sync::oneshot::Sender<()>>,
    http_thread: Option<JoinHandle<anyhow::Result<()>>>,
    compute_thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Loads the model, creates the segment, starts the compute thread and binds the HTTP
    /// listener. Returns once the engine accepts requests.
    pub fn start(config: ServerConfig) -> anyhow::Result<Self> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let (compute, shared) = compute::Compute::new(&config, shutdown.clone())
            .context("cannot start the compute thread")?;
        let segment_path = shared.segment_path.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let compute_thread = std::thread::Builder::new()
            .name("compute".into())
            .spawn(move || hydra_engine_core::threads::run_in_pool(move || compute.run(rx)))
            .context("cannot spawn the compute thread")?;

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("http")
            .enable_all()
            .build()
            .context("cannot build the tokio runtime")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(config.listen))
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr().context("listener address")?;
        let tasks = TaskSender::new(tx, config.slots, shared.pending.clone());
        let state = Arc::new(serving::Serving::new(&config, shared, tasks)?);
        let router = http::router(state);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let http_thread = std::thread::Builder::new()
            .name("http-main".into())
            .spawn(move || {
                runtime.block_on(async move {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(async move {
                            let _ = stop_rx.await;
                        })
                        .await
                        .context("HTTP server failed")
                })
            })
            .context("cannot spawn the HTTP thread")?;
        tracing::info!(%addr, segment = ?segment_path, "engine listening");
        Ok(Self {
            addr,
            segment_path,
            shutdown,
            http_stop: Some(stop_tx),
            http_thread: Some(http_thread),
            compute_thread: Some(compute_thread),
        })
    }

    /// The bound HTTP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The segment file, when publishing is on.
    pub fn segment_path(&self) -> Option<&PathBuf> {
        self.segment_path.as_ref()
    }

    /// Stops the engine: the task in flight is cancelled (finish reason `cancelled`),
    /// queued tasks are answered with an error, the HTTP server stops accepting, and the
    /// segment is marked CLOSED and removed.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        // Seen by the compute thread's step observer: the task in flight stops at its next step.
        self.shutdown.store(true, Ordering::Release);
        if let Some(stop) = self.http_stop.take() {
            let _ = stop.send(());
        }
        let mut result = Ok(());
        if let Some(t) = self.http_thread.take() {
            match t.join() {
                Ok(r) => result = r,
                Err(_) => result = Err(anyhow::anyhow!("the HTTP thread panicked")),
            }
        }
        // The HTTP side held the only task senders: dropping the router closed the queue,
        // so the compute thread drains it and exits.
        if let Some(t) = self.compute_thread.take() {
            if t.join().is_err() {
                result = Err(anyhow::anyhow!("the compute thread panicked"));
            }
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::error!("engine shutdown: {e:#}");
        }
    }
}
