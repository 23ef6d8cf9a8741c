//! The one error type HTTP clients see: `{"error":{"code":..., "message":...}}` with the
//! right status. Messages are for the client; internals go to the log (once, where the
//! error is produced), never into a response: [`ApiError::Internal`] carries no text.
//! The compute thread's errors become `ApiError`s here, in one place: the client's part
//! of a [`TaskError`] (a [`ClientError`]) is wrapped as it is, the rest is `Internal`.

use crate::task_error::{ClientError, TaskError};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered to an HTTP client.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// Refused, by the front end or the compute thread, for a reason the client is told.
    #[error(transparent)]
    Refused(#[from] ClientError),
    /// The body is not valid JSON of the expected shape.
    #[error("invalid JSON body: {0}")]
    InvalidJson(String),
    /// The body is larger than allowed.
    #[error("request body too large (limit {limit} bytes)")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// Unknown route.
    #[error("no route for {0}")]
    NotFound(String),
    /// Anything else; details are in the engine's log.
    #[error("internal error (details are in the engine's log)")]
    Internal,
}

impl ApiError {
    /// A malformed or inconsistent request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::Refused(ClientError::InvalidInput(message.into()))
    }

    /// An error the front end met itself (not a compute thread's reply, which the compute
    /// thread logged): logged here, once, then answered with the client's part of it.
    pub fn report(error: impl Into<TaskError>) -> Self {
        let error = error.into();
        error.log();
        Self::from(error)
    }

    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Refused(c) => match c {
                ClientError::UnknownSlot { .. } => StatusCode::NOT_FOUND,
                ClientError::InvalidInput(_) => StatusCode::BAD_REQUEST,
                ClientError::ContextOverflow(_) | ClientError::StateRejected(_) => {
                    StatusCode::UNPROCESSABLE_ENTITY
                }
                ClientError::EmptySlot(_) => StatusCode::CONFLICT,
                ClientError::Cancelled
                | ClientError::ShuttingDown
                | ClientError::PublishingDisabled => StatusCode::SERVICE_UNAVAILABLE,
            },
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::InvalidJson(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Refused(c) => match c {
                ClientError::UnknownSlot { .. } => "unknown_slot",
                ClientError::InvalidInput(_) => "bad_request",
                ClientError::ContextOverflow(_) => "context_overflow",
                ClientError::EmptySlot(_) => "empty_slot",
                ClientError::StateRejected(_) => "state_rejected",
                ClientError::Cancelled => "cancelled",
                ClientError::ShuttingDown => "shutting_down",
                ClientError::PublishingDisabled => "publishing_disabled",
            },
            Self::InvalidJson(_) => "invalid_json",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::NotFound(_) => "not_found",
            Self::Internal => "internal",
        }
    }
}

impl From<TaskError> for ApiError {
    /// The client's answer to a task error: its client part as it is; an internal failure
    /// (I/O, compute, anything else) only as "internal", its text being in the log.
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Client(c) => Self::Refused(c),
            TaskError::Io(_) | TaskError::Compute(_) | TaskError::Internal(_) => Self::Internal,
        }
    }
}

/// `{"error": {"code": ..., "message": ...}}`.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "code": self.code(), "message": self.to_string() },
        });
        (self.status(), Json(body)).into_response()
    }
}
