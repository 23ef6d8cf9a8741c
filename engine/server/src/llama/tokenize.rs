//! `POST /tokenize` and `POST /detokenize`, in llama.cpp's request and response
//! shapes. The tokenizer is immutable and shared: these are answered on the
//! HTTP threads, never through the compute queue, so they stay fast while
//! every slot is busy.
//!
//! - `/tokenize`: `{"content": "...", "add_special": false, "parse_special": true,
//!   "with_pieces": false}` -> `{"tokens": [...]}`. `add_special` puts the BOS/EOS
//!   tokens the model asks for; `parse_special` recognises control tokens written in
//!   the text; `with_pieces` answers `{"id": ..., "piece": ...}` per token, the piece
//!   as text, or as its bytes where they are not valid UTF-8 on their own.
//! - `/detokenize`: `{"tokens": [...]}` -> `{"content": "..."}`.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::api_error::ApiError;
use crate::extract::JsonBody;
use crate::serving::AppState;

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
    /// Answer each token with its piece (default false).
    #[serde(default)]
    pub with_pieces: bool,
}

fn yes() -> bool {
    true
}

/// Answer of `POST /tokenize`.
#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    /// The tokens.
    pub tokens: Tokens,
}

/// The tokens of a `/tokenize` answer: ids, or ids with their pieces.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Tokens {
    /// Plain ids.
    Ids(Vec<u32>),
    /// `with_pieces`.
    Pieces(Vec<TokenPiece>),
}

/// One token with its piece.
#[derive(Debug, Serialize)]
pub struct TokenPiece {
    /// The id.
    pub id: u32,
    /// The piece.
    pub piece: Piece,
}

/// A token's piece: text when its bytes are valid UTF-8, else the bytes.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Piece {
    /// Valid UTF-8.
    Text(String),
    /// Part of a character.
    Bytes(Vec<u8>),
}

/// Body of `POST /detokenize`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetokenizeRequest {
    /// The token ids.
    pub tokens: Vec<u32>,
}

/// Answer of `POST /detokenize`.
#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    /// The text.
    pub content: String,
}

/// `POST /tokenize`.
pub(crate) async fn tokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let shared = state.shared.clone();
    // Long texts take milliseconds: off the async workers, which also serve /slots.
    let tokens = tokio::task::spawn_blocking(move || {
        let tok = &shared.tokenizer;
        let ids = tok.tokenize(&req.content, req.add_special, req.parse_special)?;
        if !req.with_pieces {
            return Ok(Tokens::Ids(ids));
        }
        ids.into_iter()
            .map(|id| {
                let bytes = tok.token_bytes(id)?;
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => Piece::Text(s.to_owned()),
                    Err(_) => Piece::Bytes(bytes.to_vec()),
                };
                Ok(TokenPiece { id, piece })
            })
            .collect::<hydra_engine_core::Result<_>>()
            .map(Tokens::Pieces)
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "tokenize task failed");
        ApiError::internal()
    })?
    .map_err(ApiError::report)?;
    Ok(Json(TokenizeResponse { tokens }))
}

/// `POST /detokenize`.
pub(crate) async fn detokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let content = state
        .shared
        .tokenizer
        .decode(&req.tokens)
        .map_err(ApiError::report)?;
    Ok(Json(DetokenizeResponse { content }))
}
