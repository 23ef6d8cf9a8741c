//! `POST /tokenize` and `POST /detokenize`, in llama.cpp's request and response
//! shapes. The tokenizer is immutable and shared: these are answered on the
//! HTTP threads, never through the compute queue, so they stay fast while
//! every slot is busy.
//!
//! - `/tokenize`: `{"content": "...", "add_special": false, "parse_special": true}`
//!   -> `{"tokens": [...]}`. `add_special` puts the BOS/EOS tokens the model
//!   asks for; `parse_special` recognises control tokens written in the text.
//! - `/detokenize`: `{"tokens": [...]}` -> `{"content": "..."}`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::server::api_error::ApiError;
use crate::server::http::{engine_error, AppState};
/// Body of `POST /tokenize`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeRequest {
    /// The text.
    pub content: String,
    /// Add the BOS/EOS tokens the model asks for (default false).
    #[serde(default)]
    pub add_special: bool,
    /// Recognise control tokens written in the text (default true).
    #[serde(default = "yes")]
    pub parse_special: bool,
}

fn yes() -> bool {
    true
}

/// Answer of `POST /tokenize`.
#[derive(Debug, Serialize, Deserialize)]
pub struct TokenizeResponse {
    /// The token ids.
    pub tokens: Vec<u32>,
}

/// Body of `POST /detokenize`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetokenizeRequest {
    /// The token ids.
    pub tokens: Vec<u32>,
}

/// Answer of `POST /detokenize`.
#[derive(Debug, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    /// The text.
    pub content: String,
}

/// `POST /tokenize`.
pub(crate) async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let req: TokenizeRequest = state.json(body)?;
    let shared = state.shared().clone();
    // Long texts take milliseconds: off the async workers, which also serve /slots.
    let tokens = tokio::task::spawn_blocking(move || {
        shared
            .tokenizer
            .tokenize(&req.content, req.add_special, req.parse_special)
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "tokenize task failed");
        ApiError::Internal
    })?
    .map_err(engine_error)?;
    Ok(Json(TokenizeResponse { tokens }))
}

/// `POST /detokenize`.
pub(crate) async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let req: DetokenizeRequest = state.json(body)?;
    let content = state
        .shared()
        .tokenizer
        .decode(&req.tokens)
        .map_err(engine_error)?;
    Ok(Json(DetokenizeResponse { content }))
}
