//! What every handler shares ([`AppState`]: the queue's sender, the [`Shared`] facts and
//! segment reader, the body limit) and the steps each request takes through it: the slot
//! in the path, the JSON body, a task posted and its reply awaited.

use crate::api_error::ApiError;
use crate::config::ServerConfig;
use crate::progress::segment::Shared;
use crate::task::{Reply, SlotId, Task, TaskKind, TaskSender};
use crate::task_error::ClientError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use hydra_probe::EngineView;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Shared state of every handler: one `Clone` struct of `Arc`s.
#[derive(Clone)]
pub struct AppState {
    tasks: TaskSender,
    shared: Arc<Shared>,
    max_json_body: usize,
}

impl AppState {
    /// State for the router.
    pub fn new(tasks: TaskSender, shared: Arc<Shared>, config: &ServerConfig) -> Self {
        Self {
            tasks,
            shared,
            max_json_body: config.max_json_body,
        }
    }

    /// What the handlers share with the compute thread.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Largest JSON request body, bytes.
    pub fn max_json_body(&self) -> usize {
        self.max_json_body
    }

    /// The slot a path's `{id}` names.
    pub fn slot(&self, id: &str) -> Result<SlotId, ApiError> {
        let slot = id.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "slot id {id:?} is not a number (slots are 0..{})",
                self.shared.n_slots
            ))
        })?;
        self.shared.slot(slot).map_err(ApiError::report)
    }

    /// The request body as JSON of type `T`.
    pub fn json<T: DeserializeOwned>(
        &self,
        body: Result<Bytes, BytesRejection>,
    ) -> Result<T, ApiError> {
        let bytes = body.map_err(|r| rejection(r, self.max_json_body))?;
        serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))
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
        self.tasks.post(Task {
            slot,
            kind: make(tx),
        })?;
        Ok(rx
            .await
            .map_err(|_| ApiError::Refused(ClientError::ShuttingDown))??)
    }
}

/// A body that could not be read: too large for `limit`, or broken.
pub fn rejection(r: BytesRejection, limit: usize) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge { limit }
    } else {
        ApiError::bad_request(r.body_text())
    }
}
