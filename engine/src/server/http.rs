//! Routes and handlers. Handlers are small: parse, post a task, await the reply. The
//! progress endpoints (`/slots`, `/slots/{id}/state/meta`) read the segment through the
//! probe library and never touch the queue; `/health` touches neither.
//!
//! The compute thread answers with [`TaskError`]s; they become the client's [`ApiError`]
//! here and nowhere else (`From<TaskError> for ApiError`).

use crate::sampling::SamplerConfig;
use crate::server::api_error::ApiError;
use crate::server::compute::Shared;
use crate::server::config::ServerConfig;
use crate::server::task::{DecodeSpec, PrefillSpec, Task, TaskSender};
use crate::server::task_error::TaskError;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::oneshot;

impl From<TaskError> for ApiError {
    /// The client's answer to a task error. Internal failures (I/O, compute, anything
    /// else) were logged with their text where they happened; the client gets none of it.
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::UnknownSlot { slot, n_slots } => Self::UnknownSlot { slot, n_slots },
            TaskError::InvalidInput(m) => Self::BadRequest(m),
            TaskError::EmptySlot(m) => Self::EmptySlot(m),
            TaskError::ContextOverflow(m) => Self::ContextOverflow(m),
            TaskError::StateRejected(m) => Self::StateRejected(m),
            TaskError::Cancelled => Self::Cancelled,
            TaskError::ShuttingDown => Self::ShuttingDown,
            TaskError::PublishingDisabled => Self::PublishingDisabled,
            TaskError::Io(_) | TaskError::Compute(_) | TaskError::Internal(_) => Self::Internal,
        }
    }
}

/// An engine error met while validating a request in the front end, classified the one
/// way the compute thread classifies it; an internal one is logged here, its text never
/// reaching the client.
pub(crate) fn engine_error(e: crate::EngineError) -> ApiError {
    let e = TaskError::from(e);
    if e.is_internal() {
        tracing::error!(error = %e, "request failed");
    }
    ApiError::from(e)
}

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
}

/// The engine's routes; the generation routes (`/completion`, `/v1/...`) over `serving`.
pub fn router(state: AppState, serving: Arc<crate::server::serving::Serving>) -> Router {
    // A restore carries a whole state: allow the largest one a slot can produce.
    let state_limit = usize::try_from(state.shared.max_state_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    let json_limit = state.max_json_body;
    Router::new()
        .route("/health", get(health))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/slots/{id}/prefill", post(prefill))
        .route("/slots/{id}/decode", post(decode))
        .route(
            "/slots/{id}/state",
            get(save_state)
                .put(restore_state)
                .layer(DefaultBodyLimit::max(state_limit)),
        )
        .route("/slots/{id}/state/meta", get(meta))
        .route("/tokenize", post(crate::server::tokenize::tokenize))
        .route("/detokenize", post(crate::server::tokenize::detokenize))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
        .merge(
            crate::server::openai::handlers::router(serving.clone())
                .merge(
                    Router::new()
                        .route("/completion", post(crate::server::completion::completion))
                        .with_state(serving),
                )
                .layer(DefaultBodyLimit::max(json_limit)),
        )
}

async fn health(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "status": "ok",
        "engine_id": s.shared.engine_id,
        "slots": s.shared.n_slots,
        "n_ctx": s.shared.n_ctx,
        "model": s.shared.model_info.name,
        "device": s.shared.model_info.device.to_string(),
        "publishing": s.shared.reader.is_some(),
    }))
}

async fn slots(State(s): State<AppState>) -> Result<Response, ApiError> {
    let view = s.shared.view()?;
    Ok(Json(view).into_response())
}

#[derive(Deserialize)]
struct MetaQuery {
    via: Option<String>,
}

async fn meta(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<MetaQuery>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    match q.via.as_deref() {
        None | Some("segment") => Ok(Json(s.shared.meta_from_segment(slot)?).into_response()),
        Some("queue") => {
            let meta = s.call(|reply| Task::MetaViaQueue { slot, reply }).await?;
            Ok(Json(meta).into_response())
        }
        Some(other) => Err(ApiError::BadRequest(format!(
            "unknown via={other:?} (expected \"segment\" or \"queue\")"
        ))),
    }
}

/// A prompt as text or token ids.
#[derive(Deserialize, Default)]
struct PromptFields {
    prompt: Option<String>,
    tokens: Option<Vec<u32>>,
    add_bos: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillRequest {
    prompt: Option<String>,
    tokens: Option<Vec<u32>>,
    add_bos: Option<bool>,
}

/// Sampling fields shared by decode and completion.
#[derive(Deserialize)]
struct SamplingFields {
    #[serde(default = "default_n_predict")]
    n_predict: usize,
    #[serde(default)]
    temperature: f32,
    #[serde(default)]
    top_k: usize,
    #[serde(default = "one")]
    top_p: f32,
    #[serde(default)]
    seed: u64,
    /// llama.cpp's name for "keep going past EOS" is `ignore_eos`.
    #[serde(default)]
    ignore_eos: bool,
}

fn default_n_predict() -> usize {
    128
}

fn one() -> f32 {
    1.0
}

#[derive(Deserialize)]
struct DecodeRequest {
    #[serde(flatten)]
    sampling: SamplingFields,
}

async fn prefill(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let req: PrefillRequest = s.json(body)?;
    let tokens = s.tokens(PromptFields {
        prompt: req.prompt,
        tokens: req.tokens,
        add_bos: req.add_bos,
    })?;
    let r = s
        .call(|reply| Task::Prefill {
            slot,
            spec: PrefillSpec { tokens },
            reply,
        })
        .await?;
    Ok(Json(r).into_response())
}

async fn decode(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let req: DecodeRequest = s.json(body)?;
    let spec = s.decode_spec(&req.sampling)?;
    let r = s.call(|reply| Task::Decode { slot, spec, reply }).await?;
    Ok(Json(r).into_response())
}

async fn save_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let stream = s.call(|reply| Task::Save { slot, reply }).await?;
    let body = Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(
        stream.chunks,
    ));
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, stream.len.to_string()),
        ],
        body,
    )
        .into_response())
}

async fn restore_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let data = body.map_err(|r| rejection(r, s.shared.max_state_bytes as usize))?;
    if data.is_empty() {
        return Err(ApiError::BadRequest(
            "empty body: expected a saved KV state".into(),
        ));
    }
    let n_past = s.call(|reply| Task::Restore { slot, data, reply }).await?;
    Ok(Json(serde_json::json!({ "slot": slot, "n_past": n_past })).into_response())
}

#[derive(Deserialize)]
struct ActionQuery {
    action: Option<String>,
}

async fn slot_action(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    match q.action.as_deref() {
        Some("erase") => {
            s.call(|reply| Task::Erase { slot, reply }).await?;
            Ok(Json(serde_json::json!({ "slot": slot, "erased": true })).into_response())
        }
        // Read by the compute thread at the running task's next step; not queued.
        Some("cancel") => {
            let body = match s.shared.cancel.cancel(slot) {
                Some(task_id) => {
                    serde_json::json!({ "slot": slot, "cancelled": true, "task_id": task_id })
                }
                None => serde_json::json!({ "slot": slot, "cancelled": false }),
            };
            Ok(Json(body).into_response())
        }
        Some(other) => Err(ApiError::BadRequest(format!(
            "unknown action {other:?} (supported: erase, cancel)"
        ))),
        None => Err(ApiError::BadRequest(
            "missing ?action= (supported: erase, cancel)".into(),
        )),
    }
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_owned())
}

fn rejection(r: BytesRejection, limit: usize) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge { limit }
    } else {
        ApiError::BadRequest(r.body_text())
    }
}

impl AppState {
    fn slot(&self, id: &str) -> Result<usize, ApiError> {
        let n_slots = self.shared.n_slots;
        match id.parse::<usize>() {
            Ok(slot) if slot < n_slots => Ok(slot),
            Ok(slot) => Err(ApiError::UnknownSlot { slot, n_slots }),
            Err(_) => Err(ApiError::BadRequest(format!(
                "slot id {id:?} is not a number (slots are 0..{n_slots})"
            ))),
        }
    }

    /// What the handlers share with the compute thread.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn json<T: DeserializeOwned>(
        &self,
        body: Result<Bytes, BytesRejection>,
    ) -> Result<T, ApiError> {
        let bytes = body.map_err(|r| rejection(r, self.max_json_body))?;
        serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))
    }

    fn tokens(&self, p: PromptFields) -> Result<Vec<u32>, ApiError> {
        let tok = &self.shared.tokenizer;
        let tokens = match (p.prompt, p.tokens) {
            (Some(_), Some(_)) => {
                return Err(ApiError::BadRequest(
                    "give either \"prompt\" or \"tokens\", not both".into(),
                ))
            }
            (None, None) => {
                return Err(ApiError::BadRequest(
                    "missing \"prompt\" (text) or \"tokens\" (ids)".into(),
                ))
            }
            (Some(text), None) => tok
                .try_encode(&text, p.add_bos.unwrap_or_else(|| tok.add_bos_by_default()))
                .map_err(engine_error)?,
            (None, Some(ids)) => ids,
        };
        if tokens.is_empty() {
            return Err(ApiError::BadRequest("the prompt has no tokens".into()));
        }
        tok.check_ids(&tokens).map_err(engine_error)?;
        if tokens.len() > self.shared.n_ctx {
            return Err(ApiError::ContextOverflow(format!(
                "the prompt has {} tokens but a slot holds at most {}",
                tokens.len(),
                self.shared.n_ctx
            )));
        }
        Ok(tokens)
    }

    fn decode_spec(&self, f: &SamplingFields) -> Result<DecodeSpec, ApiError> {
        if f.n_predict == 0 {
            return Err(ApiError::BadRequest("n_predict must be at least 1".into()));
        }
        let sampler = SamplerConfig {
            temperature: f.temperature,
            top_k: f.top_k,
            top_p: f.top_p,
            seed: f.seed,
        };
        // Validate here so a bad request never reaches the queue.
        crate::sampling::Sampler::new(sampler).map_err(engine_error)?;
        Ok(DecodeSpec {
            n_predict: f.n_predict.min(self.shared.n_ctx),
            sampler,
            stop_at_eos: !f.ignore_eos,
        })
    }

    /// Posts a task and awaits its reply.
    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, TaskError>>) -> Task,
    ) -> Result<T, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.tasks.post(make(tx))?;
        Ok(rx.await.map_err(|_| ApiError::ShuttingDown)??)
    }
}
