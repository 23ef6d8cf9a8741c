//! The one error type HTTP clients see: `{"error":{"code":..., "message":...}}` with the
//! right status. Messages are for the client; internals go to the log (once, where the
//! error is produced), never into a response: [`ApiError::Internal`] carries no text.
//! The compute thread's errors become `ApiError`s in one place, `http.rs`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered to an HTTP client.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The slot id is not one of the engine's slots.
    #[error("slot {slot} does not exist (the engine has {n_slots} slots)")]
    UnknownSlot {
        /// Requested.
        slot: usize,
        /// Available.
        n_slots: usize,
    },
    /// The request is malformed or inconsistent.
    #[error("{0}")]
    BadRequest(String),
    /// The body is not valid JSON of the expected shape.
    #[error("invalid JSON body: {0}")]
    InvalidJson(String),
    /// The body is larger than allowed.
    #[error("request body too large (limit {limit} bytes)")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The prompt (plus what the slot holds) does not fit the slot's context.
    #[error("{0}")]
    ContextOverflow(String),
    /// Decode on a slot with nothing prefilled (or whose last logits are unknown).
    #[error("{0}")]
    EmptySlot(String),
    /// A state to restore was refused.
    #[error("state refused: {0}")]
    StateRejected(String),
    /// The task was cancelled (shutdown).
    #[error("the task was cancelled because the engine is shutting down")]
    Cancelled,
    /// The engine no longer takes tasks.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// Publishing is off, so the segment-backed endpoints have nothing to read.
    #[error("progress publishing is disabled on this engine (--no-publish)")]
    PublishingDisabled,
    /// Unknown route.
    #[error("no route for {0}")]
    NotFound(String),
    /// Anything else; details are in the engine's log.
    #[error("internal error (details are in the engine's log)")]
    Internal,
}

impl ApiError {
    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::UnknownSlot { .. } | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) | Self::InvalidJson(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ContextOverflow(_) | Self::StateRejected(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::EmptySlot(_) => StatusCode::CONFLICT,
            Self::Cancelled | Self::ShuttingDown | Self::PublishingDisabled => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownSlot { .. } => "unknown_slot",
            Self::BadRequest(_) => "bad_request",
            Self::InvalidJson(_) => "invalid_json",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::ContextOverflow(_) => "context_overflow",
            Self::EmptySlot(_) => "empty_slot",
            Self::StateRejected(_) => "state_rejected",
            Self::Cancelled => "cancelled",
            Self::ShuttingDown => "shutting_down",
            Self::PublishingDisabled => "publishing_disabled",
            Self::NotFound(_) => "not_found",
            Self::Internal => "internal",
        }
    }
}

#[derive(serde::Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(serde::Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code(),
                message: self.to_string(),
            },
        };
        (self.status(), Json(body)).into_response()
    }
}
