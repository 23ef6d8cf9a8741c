//! The llama surface: llama-server's routes and this engine's own, in llama-server's
//! shapes. Handlers are small: typed extractors ([`crate::extract`]), a task posted and
//! its reply awaited through [`Serving`](crate::serving::Serving). The progress endpoints
//! (`/slots`, `/slots/{id}/state/meta`) read the segment through the probe library and
//! never touch the queue; `/health` touches neither.
//!
//! - [`completion`]: `POST /completion`, whole or streamed;
//! - [`request`]: the request bodies and their validation into task specs;
//! - [`tokenize`]: `/tokenize` and `/detokenize`;
//! - [`error`]: the surface's error shape.

pub mod completion;
pub mod error;
pub mod request;
pub mod tokenize;

use crate::api_error::ApiError;
use crate::cancel::Cancelled;
use crate::extract::{rejection, JsonBody, PathSlot};
use crate::prompt::Purpose;
use crate::serving::AppState;
use crate::task::DecodeResult;
use crate::task::TaskKind;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hydra_engine_core::sampling::StopReason;
use request::{DecodeRequest, PrefillRequest, PromptFields};
use serde::{Deserialize, Serialize};

/// Why a generation stopped, in llama-server's words (its `stop_type`, and this engine's
/// own `context_full` and `cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopType {
    /// The model's end-of-generation token.
    Eos,
    /// A stop string.
    Word,
    /// `n_predict` reached.
    Limit,
    /// The slot's context is full.
    ContextFull,
    /// Cancelled, or the client went away.
    Cancelled,
}

impl From<StopReason> for StopType {
    fn from(r: StopReason) -> Self {
        match r {
            StopReason::Eos => Self::Eos,
            StopReason::StopWord => Self::Word,
            StopReason::Length => Self::Limit,
            StopReason::ContextFull => Self::ContextFull,
            StopReason::Cancelled => Self::Cancelled,
        }
    }
}

/// The answer of `POST /slots/{id}/decode`.
#[derive(Serialize)]
struct DecodeAnswer {
    slot: usize,
    task_id: u64,
    content: String,
    tokens: Vec<u32>,
    stop_type: StopType,
    n_past: usize,
    predicted_ms: f64,
    predicted_per_second: f64,
    predicted_cpu_ms: f64,
}

impl From<DecodeResult> for DecodeAnswer {
    fn from(r: DecodeResult) -> Self {
        Self {
            slot: r.slot,
            task_id: r.task_id,
            content: r.content,
            tokens: r.tokens,
            stop_type: r.stop.into(),
            n_past: r.n_past,
            predicted_ms: r.predicted_ms,
            predicted_per_second: r.predicted_per_second,
            predicted_cpu_ms: r.predicted_cpu_ms,
        }
    }
}

/// The llama surface's routes. Unknown routes are answered by [`not_found`], which the
/// whole router falls back to.
pub fn router(state_limit: usize) -> Router<AppState> {
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
                // A restore carries a whole state: the largest one a slot can produce.
                .layer(DefaultBodyLimit::max(state_limit)),
        )
        .route("/slots/{id}/state/meta", get(meta))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/completion", post(completion::completion))
}

async fn health(State(s): State<AppState>) -> Json<serde_json::Value> {
    let shared = &s.shared;
    Json(serde_json::json!({
        "status": "ok",
        "engine_id": shared.engine_id,
        "slots": shared.n_slots,
        "n_ctx": shared.n_ctx,
        "model": shared.model_info.name,
        "device": shared.model_info.device.to_string(),
        "publishing": shared.reader.is_some(),
    }))
}

async fn slots(State(s): State<AppState>) -> Result<Response, ApiError> {
    let view = s.view()?;
    Ok(Json(view).into_response())
}

#[derive(Deserialize)]
struct MetaQuery {
    via: Option<String>,
}

async fn meta(
    State(s): State<AppState>,
    PathSlot(slot): PathSlot,
    Query(q): Query<MetaQuery>,
) -> Result<Response, ApiError> {
    match q.via.as_deref() {
        None | Some("segment") => {
            let meta = s.shared.meta_from_segment(slot).map_err(ApiError::report)?;
            Ok(Json(meta).into_response())
        }
        Some("queue") => {
            let meta = s
                .call(slot, |reply| TaskKind::MetaViaQueue { reply })
                .await?;
            Ok(Json(meta).into_response())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown via={other:?} (expected \"segment\" or \"queue\")"
        ))),
    }
}

async fn prefill(
    State(s): State<AppState>,
    PathSlot(slot): PathSlot,
    JsonBody(req): JsonBody<PrefillRequest>,
) -> Result<Response, ApiError> {
    let spec = PromptFields::from(req).into_spec(&s.shared, Purpose::Prefill)?;
    let r = s
        .call(slot, |reply| TaskKind::Prefill { spec, reply })
        .await?;
    Ok(Json(r).into_response())
}

async fn decode(
    State(s): State<AppState>,
    PathSlot(slot): PathSlot,
    JsonBody(req): JsonBody<DecodeRequest>,
) -> Result<Response, ApiError> {
    let spec = req.sampling.spec(&s.shared)?;
    let r = s
        .call(slot, |reply| TaskKind::Decode { spec, reply })
        .await?;
    Ok(Json(DecodeAnswer::from(r)).into_response())
}

async fn save_state(
    State(s): State<AppState>,
    PathSlot(slot): PathSlot,
) -> Result<Response, ApiError> {
    let stream = s.call(slot, |reply| TaskKind::Save { reply }).await?;
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
    PathSlot(slot): PathSlot,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let data = body.map_err(|r| rejection(r, s.shared.max_state_bytes as usize))?;
    if data.is_empty() {
        return Err(ApiError::bad_request(
            "empty body: expected a saved KV state",
        ));
    }
    let n_past = s
        .call(slot, |reply| TaskKind::Restore { data, reply })
        .await?;
    Ok(Json(serde_json::json!({ "slot": slot.get(), "n_past": n_past })).into_response())
}

#[derive(Deserialize)]
struct ActionQuery {
    action: Option<String>,
    /// With `cancel`: also remove the requests waiting for the slot (default false: they
    /// run after the cancelled task, as an orchestrator that stops a stuck task expects).
    waiting: Option<bool>,
}

async fn slot_action(
    State(s): State<AppState>,
    PathSlot(slot): PathSlot,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    match q.action.as_deref() {
        Some("erase") => {
            s.call(slot, |reply| TaskKind::Erase { reply }).await?;
            Ok(Json(serde_json::json!({ "slot": slot.get(), "erased": true })).into_response())
        }
        // Read by the compute thread at the running task's next step; not queued.
        Some("cancel") => {
            let done = s.shared.cancel.cancel(slot.get());
            let now = s.shared.reader.as_ref().and_then(|r| {
                let st = r.slot(slot.get()).ok()?.state;
                Some((st.task_id, st.phase))
            });
            let mut answer = cancel_answer(slot.get(), done, now);
            // `&waiting=true`: the requests waiting for a slot, counted on this one, and the
            // tasks posted for it that wait in the compute thread's queue, leave too.
            let removed = match q.waiting {
                Some(true) => {
                    s.pool.cancel_waiting(slot.get()) + s.tasks.withdraw_waiting(slot.get())
                }
                _ => 0,
            };
            answer["waiting_cancelled"] = removed.into();
            Ok(Json(answer).into_response())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown action {other:?} (supported: erase, cancel)"
        ))),
        None => Err(ApiError::bad_request(
            "missing ?action= (supported: erase, cancel)",
        )),
    }
}

/// What `?action=cancel` answers: which task it stopped and what it was doing (its phase
/// in the segment, `now`, when that record is the task's; else the phase it began in), a
/// task that had already run its last step and completes, or that no task runs.
fn cancel_answer(
    slot: usize,
    done: Cancelled,
    now: Option<(u64, hydra_layout::Phase)>,
) -> serde_json::Value {
    let doing = |task_id, kind| match now {
        Some((id, phase)) if id == task_id => phase,
        _ => kind,
    };
    match done {
        Cancelled::Stopping {
            task_id,
            kind,
            again,
        } => serde_json::json!({
            "slot": slot, "cancelled": true, "task_id": task_id,
            "task": doing(task_id, kind).as_str(),
            "state": if again { "stopping" } else { "running" },
            "detail": if again {
                "already cancelled; it stops before its next chunk, token or block"
            } else {
                "stops before its next chunk, token or block, or ends as cancelled"
            },
        }),
        Cancelled::Finishing { task_id, kind } => serde_json::json!({
            "slot": slot, "cancelled": false, "task_id": task_id,
            "task": doing(task_id, kind).as_str(), "state": "finishing",
            "detail": "the task had already run its last step and completes",
        }),
        Cancelled::Idle => serde_json::json!({
            "slot": slot, "cancelled": false,
            "detail": "no task runs on this slot",
        }),
    }
}

/// Any route neither surface has.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(uri.path())
}
