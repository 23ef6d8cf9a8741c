//! The engine's one router: the llama surface ([`crate::llama`]) and the `/v1` surface
//! ([`crate::openai`]) over one [`AppState`], with the JSON body limit on both and the
//! llama surface's 404 for any route neither has.

use axum::extract::DefaultBodyLimit;
use axum::Router;

use crate::serving::AppState;

/// Every route of the engine over `state`.
pub fn router(state: AppState) -> Router {
    // A restore carries a whole state: allow the largest one a slot can produce.
    let state_limit = usize::try_from(state.shared.max_state_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20);
    let json_limit = state.max_json_body;
    Router::new()
        .merge(crate::llama::router(state_limit))
        .merge(crate::openai::handlers::router())
        .fallback(crate::llama::not_found)
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
}
