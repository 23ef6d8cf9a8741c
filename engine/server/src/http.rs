//! Routes and handlers. Handlers are small: parse, post a task, await the reply. The
//! progress endpoints (`/slots`, `/slots/{id}/state/meta`) read the segment through the
//! probe library and never touch the queue; `/health` touches neither.
//!
//! What a handler needs is in [`crate::state`] (the slot, the body, posting a
//! task) and [`crate::request`] (the bodies and their validation); the compute
//! thread's errors become the client's [`ApiError`] in [`crate::api_error`].

use crate::api_error::ApiError;
use crate::request::{DecodeRequest, PrefillRequest, PromptFields};
use crate::serving::Serving;
use crate::state::{rejection, AppState};
use crate::task::TaskKind;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;

/// The engine's routes; the generation routes (`/completion`, `/v1/...`) over `serving`.
pub fn router(state: AppState, serving: Arc<Serving>) -> Router {
    // A restore carries a whole state: allow the largest one a slot can produce.
    let state_limit = usize::try_from(state.shared().max_state_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    let json_limit = state.max_json_body();
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
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
        .merge(
            crate::openai::handlers::router(serving.clone())
                .merge(
                    Router::new()
                        .route("/completion", post(crate::completion::completion))
                        .with_state(serving),
                )
                .layer(DefaultBodyLimit::max(json_limit)),
        )
}

async fn health(State(s): State<AppState>) -> Json<serde_json::Value> {
    let shared = s.shared();
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
    Path(id): Path<String>,
    Query(q): Query<MetaQuery>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    match q.via.as_deref() {
        None | Some("segment") => {
            let meta = s
                .shared()
                .meta_from_segment(slot)
                .map_err(ApiError::report)?;
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
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let req: PrefillRequest = s.json(body)?;
    let spec = PromptFields::from(req).into_spec(s.shared())?;
    let r = s
        .call(slot, |reply| TaskKind::Prefill { spec, reply })
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
    let spec = req.sampling.spec(s.shared())?;
    let r = s
        .call(slot, |reply| TaskKind::Decode { spec, reply })
        .await?;
    Ok(Json(r).into_response())
}

async fn save_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
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
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    let data = body.map_err(|r| rejection(r, s.shared().max_state_bytes as usize))?;
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
}

async fn slot_action(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<ActionQuery>,
) -> Result<Response, ApiError> {
    let slot = s.slot(&id)?;
    match q.action.as_deref() {
        Some("erase") => {
            s.call(slot, |reply| TaskKind::Erase { reply }).await?;
            Ok(Json(serde_json::json!({ "slot": slot.get(), "erased": true })).into_response())
        }
        // Read by the compute thread at the running task's next step; not queued.
        Some("cancel") => {
            let body = match s.shared().cancel.cancel(slot.get()) {
                Some(task_id) => {
                    serde_json::json!({ "slot": slot.get(), "cancelled": true, "task_id": task_id })
                }
                None => serde_json::json!({ "slot": slot.get(), "cancelled": false }),
            };
            Ok(Json(body).into_response())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "unknown action {other:?} (supported: erase, cancel)"
        ))),
        None => Err(ApiError::bad_request(
            "missing ?action= (supported: erase, cancel)",
        )),
    }
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_owned())
}
