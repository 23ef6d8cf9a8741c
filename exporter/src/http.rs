//! The HTTP front: an axum [`Router`] over one shared [`Collector`].
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text 0.0.4, or OpenMetrics 1.0.0 when `Accept` asks for it |
//! | `GET /engines` | JSON list of every engine found (or why it is unreadable) |
//! | `GET /engines/{engine}/slots/{id}/state/meta` | Hydra meta JSON of one slot |
//! | `GET /slots/{id}/state/meta` | the same, when exactly one engine exists (409 if several, 503 if none) |
//! | `GET /healthz` | `{"status":"ok"}` while the directory can be listed, else 503 |
//! | `GET /` | the live page (HTML; its `/page.css` and `/page.js` embedded in the binary), unless turned off |
//! | `GET /page/state` | the JSON the page polls ([`crate::page::PageState`]), unless the page is off |
//!
//! Handlers only parse and call [`crate::api`] / [`crate::metrics`]; reading segments is
//! synchronous (non-blocking system calls on a tmpfs, well under a millisecond) and runs on
//! tokio's blocking pool so a slow filesystem can never stall the runtime.

use crate::api::{self, ApiError};
use crate::collect::Collector;
use crate::metrics::Format;
use crate::page;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::future::Future;
use std::sync::Arc;

/// Shared state of every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Reads the segments.
    pub collector: Arc<Collector>,
    /// Whether the live page is served (`/`, `/page.css`, `/page.js`, `/page/state`).
    pub page: bool,
}

/// The exporter's routes.
pub fn router(state: AppState) -> Router {
    let routes = Router::new();
    let routes = if state.page {
        routes
            .route(
                "/",
                get(|| asset("text/html; charset=utf-8", page::INDEX_HTML)),
            )
            .route(
                "/page.css",
                get(|| asset("text/css; charset=utf-8", page::PAGE_CSS)),
            )
            .route(
                "/page.js",
                get(|| asset("text/javascript; charset=utf-8", page::PAGE_JS)),
            )
            .route("/page/state", get(page_state))
    } else {
        routes
    };
    routes
        .route("/metrics", get(metrics))
        .route("/engines", get(engines))
        .route(
            "/engines/{engine}/slots/{id}/state/meta",
            get(engine_slot_meta),
        )
        .route("/slots/{id}/state/meta", get(slot_meta))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .with_state(state)
}

/// Serves `router(state)` on `listener` until `shutdown` completes, then finishes the
/// requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        tracing::error!("request task failed: {e}");
        Err(ApiError::Internal)
    })
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    let collector = s.collector.clone();
    let body = blocking(move || Ok(collector.scrape(format))).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response())
}

async fn engines(State(s): State<AppState>) -> Result<Response, ApiError> {
    let collector = s.collector.clone();
    let list = blocking(move || api::engines(&collector)).await?;
    Ok(Json(list).into_response())
}

async fn engine_slot_meta(
    State(s): State<AppState>,
    Path((engine, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let collector = s.collector.clone();
    let meta = blocking(move || api::slot_meta(&collector, &engine, &id)).await?;
    Ok(Json(meta).into_response())
}

async fn slot_meta(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let collector = s.collector.clone();
    let meta = blocking(move || api::only_engine_slot_meta(&collector, &id)).await?;
    Ok(Json(meta).into_response())
}

async fn healthz(State(s): State<AppState>) -> Result<Response, ApiError> {
    let collector = s.collector.clone();
    blocking(move || match hydra_probe::scan(collector.dir()) {
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::Unreadable(crate::collect::ReadError {
            kind: crate::stats::ErrorKind::Directory,
            message: format!("read directory {}: {e}", collector.dir().display()),
        })),
    })
    .await?;
    Ok(Json(serde_json::json!({ "status": "ok" })).into_response())
}

/// One of the page's embedded files. It changes only with the binary, but is revalidated on
/// every load so that an upgraded exporter's page is the one shown.
async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn page_state(State(s): State<AppState>) -> Result<Response, ApiError> {
    let collector = s.collector.clone();
    let state = blocking(move || Ok(page::state(&collector))).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(state)).into_response())
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_owned())
}
