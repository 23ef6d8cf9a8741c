//! `POST /tokenize` and `POST /detokenize`, in llama.cpp's request and response
//! shapes. The tokenizer is immutable and shared: these are answered on the
//! HTTP threads, never through the compute queue, so they stay fast while
//! every slot is busy.
//!
//! - `/tokenize`: `{"content": "...", "add_special": false, "parse_special": true}`
//!   -> `{"tokens": [...]}`. `add_special` puts the BOS/EOS tokens the model
//!   asks for; `parse_special` recognises control tokens written in the text.
//! - `/detokenize`: `{"tokens": [...]}` -> `{"content": "..."}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::server::api_error::ApiError;
use crate::server::compute::Shared;

/// The two routes, with the shared state they read (merged into the main router).
pub fn routes<S: Clone + Send + Sync + 'static>(shared: Arc<Shared>) -> Router<S> {
    Router::new()
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .with_state(shared)
}

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

fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| ApiError::BadRequest(r.body_text()))?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))
}

async fn tokenize(
    State(shared): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let req: TokenizeRequest = parse(body)?;
    // Long texts take milliseconds: off the async workers, which also serve /slots.
    let tokens = tokio::task::spawn_blocking(move || {
        shared
            .tokenizer
            .tokenize(&req.content, req.add_special, req.parse_special)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .map_err(ApiError::from)?;
    Ok(Json(TokenizeResponse { tokens }))
}

async fn detokenize(
    State(shared): State<Arc<Shared>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let req: DetokenizeRequest = parse(body)?;
    let content = shared
        .tokenizer
        .decode(&req.tokens)
        .map_err(ApiError::from)?;
    Ok(Json(DetokenizeResponse { content }))
}
