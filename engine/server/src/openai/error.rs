//! The `/v1` surface's words for an [`ApiError`], OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}` with the matching HTTP status, and a
//! `Retry-After` header on a 503 when the wait queue is full.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use crate::api_error::{ApiError, ErrorKind, RETRY_AFTER_S};
use crate::task_error::TaskError;

/// OpenAI's error classes (`error.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The request is malformed or asks for something the endpoint does not do.
    InvalidRequestError,
    /// No such route or model.
    NotFoundError,
    /// The server is busy or stopping; try again later.
    ServiceUnavailable,
    /// The engine failed; details are in its log.
    ServerError,
}

/// An error answered to an OpenAI client: the classification, rendered in OpenAI's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<TaskError> for OpenAiError {
    fn from(e: TaskError) -> Self {
        Self(e.into())
    }
}

impl OpenAiError {
    /// A 400 `invalid_request_error` about `param` (None: the request as a whole).
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        let e = ApiError::bad_request(message);
        Self(match param {
            Some(p) => e.at(p),
            None => e,
        })
    }

    /// A prompt that does not fit a slot's context (`context_length_exceeded`).
    pub fn context_length(n_prompt: usize, n_ctx: usize) -> Self {
        Self(
            ApiError::new(
                ErrorKind::ContextOverflow,
                format!(
                    "the prompt has {n_prompt} tokens but this model's context holds {n_ctx} \
                     (prompt and completion together); shorten the prompt"
                ),
            )
            .at("messages"),
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self.0.kind {
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Busy | ErrorKind::ShuttingDown | ErrorKind::PublishingDisabled => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::UnknownSlot
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidJson
            | ErrorKind::ContextOverflow
            | ErrorKind::EmptySlot
            | ErrorKind::StateRejected
            | ErrorKind::Cancelled => StatusCode::BAD_REQUEST,
        }
    }

    /// `error.type`.
    pub fn kind(&self) -> ErrorType {
        match self.0.kind {
            ErrorKind::NotFound => ErrorType::NotFoundError,
            ErrorKind::Busy | ErrorKind::ShuttingDown | ErrorKind::PublishingDisabled => {
                ErrorType::ServiceUnavailable
            }
            ErrorKind::Internal => ErrorType::ServerError,
            ErrorKind::UnknownSlot
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidJson
            | ErrorKind::PayloadTooLarge
            | ErrorKind::ContextOverflow
            | ErrorKind::EmptySlot
            | ErrorKind::StateRejected
            | ErrorKind::Cancelled => ErrorType::InvalidRequestError,
        }
    }

    /// `error.code`: OpenAI's own where it has one, this engine's for what a client must
    /// tell apart (busy, stopping, cancelled), else none.
    pub fn code(&self) -> Option<&'static str> {
        match self.0.kind {
            ErrorKind::ContextOverflow => Some("context_length_exceeded"),
            ErrorKind::Busy
            | ErrorKind::ShuttingDown
            | ErrorKind::PublishingDisabled
            | ErrorKind::Cancelled => Some(self.0.kind.code()),
            ErrorKind::UnknownSlot
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidJson
            | ErrorKind::PayloadTooLarge
            | ErrorKind::EmptySlot
            | ErrorKind::StateRejected
            | ErrorKind::NotFound
            | ErrorKind::Internal => None,
        }
    }

    /// The request field at fault, when one is.
    pub fn param(&self) -> Option<&str> {
        self.0.param.as_deref()
    }

    /// The body as JSON (also sent as an SSE event when a stream fails part way).
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.0.message,
                "type": self.kind(),
                "param": self.0.param,
                "code": self.code(),
            }
        })
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        if self.0.kind == ErrorKind::Busy {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_error::ClientError;

    #[test]
    fn body_has_openai_shape() {
        let e = OpenAiError::invalid(Some("n"), "n must be 1");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "n must be 1",
                "type": "invalid_request_error", "param": "n", "code": null}})
        );
        let c = OpenAiError::context_length(9000, 2048);
        assert_eq!(c.body()["error"]["code"], "context_length_exceeded");
        assert!(c.0.message.contains("9000") && c.0.message.contains("2048"));
    }

    #[test]
    fn a_context_overflow_from_the_compute_thread_keeps_its_code() {
        let e = OpenAiError::from(ApiError::from(TaskError::from(
            ClientError::ContextOverflow("too long".into()),
        )));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["code"], "context_length_exceeded");
    }

    #[test]
    fn busy_carries_retry_after() {
        let busy = ApiError::new(ErrorKind::Busy, "all slots busy");
        let r = OpenAiError::from(busy).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let r = OpenAiError::from(ApiError::internal()).into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
