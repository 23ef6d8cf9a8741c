//! Typed extractors of the llama surface's handlers, whose rejections are our own
//! [`ApiError`] (rendered in the llama surface's shape): the slot a path's `{id}` names,
//! checked once ([`PathSlot`]), and a JSON body of the expected type ([`JsonBody`]).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::api_error::ApiError;
use crate::serving::AppState;
use crate::task::SlotId;

/// The slot a path's `{id}` names, one of the engine's slots.
#[derive(Debug, Clone, Copy)]
pub struct PathSlot(pub SlotId);

impl FromRequestParts<AppState> for PathSlot {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &AppState) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, s)
            .await
            .map_err(|r| ApiError::bad_request(r.body_text()))?;
        let slot = id.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "slot id {id:?} is not a number (slots are 0..{})",
                s.shared.n_slots
            ))
        })?;
        Ok(Self(s.slot(slot)?))
    }
}

/// A request body as JSON of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, s)
            .await
            .map_err(|r| rejection(r, s.max_json_body))?;
        serde_json::from_slice(&bytes).map(Self).map_err(|e| {
            ApiError::new(
                crate::api_error::ErrorKind::InvalidJson,
                format!("invalid JSON body: {e}"),
            )
        })
    }
}

/// A body that could not be read: too large for `limit`, or broken.
pub fn rejection(r: BytesRejection, limit: usize) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::payload_too_large(limit)
    } else {
        ApiError::bad_request(r.body_text())
    }
}
