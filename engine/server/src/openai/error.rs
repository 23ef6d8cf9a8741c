//! The error every OpenAI-compatible endpoint answers with, in OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}` with the matching HTTP status, and a
//! `Retry-After` header on a 503 when the wait queue is full.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

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

/// An error answered to an OpenAI client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpenAiError {
    /// HTTP status.
    pub status: StatusCode,
    /// `error.type`.
    pub kind: ErrorType,
    /// `error.message`: what was wrong, for a person.
    pub message: String,
    /// `error.param`: the request field at fault, when one is.
    pub param: Option<String>,
    /// `error.code`: a stable machine-readable code, when there is one.
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed (a `Retry-After` header).
    pub retry_after: Option<u32>,
}

impl OpenAiError {
    /// A 400 `invalid_request_error` about `param` (None: the request as a whole).
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: ErrorType::InvalidRequestError,
            message: message.into(),
            param: param.map(str::to_owned),
            code: None,
            retry_after: None,
        }
    }

    /// A 400 whose prompt does not fit a slot's context (`context_length_exceeded`).
    pub fn context_length(n_prompt: usize, n_ctx: usize) -> Self {
        Self {
            code: Some("context_length_exceeded"),
            ..Self::invalid(
                Some("messages"),
                format!(
                    "the prompt has {n_prompt} tokens but this model's context holds {n_ctx} \
                     (prompt and completion together); shorten the prompt"
                ),
            )
        }
    }

    /// A 404 for an unknown route.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: ErrorType::NotFoundError,
            message: what.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A 503: every slot is busy and the wait queue is full; retry after `seconds`.
    pub fn busy(message: impl Into<String>, seconds: u32) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: ErrorType::ServiceUnavailable,
            message: message.into(),
            param: None,
            code: Some("server_busy"),
            retry_after: Some(seconds),
        }
    }

    /// A 503 without a retry hint (the engine is stopping, or the request was cancelled).
    pub fn unavailable(message: impl Into<String>, code: &'static str) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: ErrorType::ServiceUnavailable,
            message: message.into(),
            param: None,
            code: Some(code),
            retry_after: None,
        }
    }

    /// A 500; the details were logged where the failure happened.
    pub fn internal() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: ErrorType::ServerError,
            message: "internal error (details are in the engine's log)".into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The body as JSON (also sent as an SSE event when a stream fails part way).
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_openai_shape() {
        let e = OpenAiError::invalid(Some("n"), "n must be 1");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "n must be 1",
                "type": "invalid_request_error", "param": "n", "code": null}})
        );
        let c = OpenAiError::context_length(9000, 2048);
        assert_eq!(c.body()["error"]["code"], "context_length_exceeded");
        assert!(c.message.contains("9000") && c.message.contains("2048"));
    }

    #[test]
    fn busy_carries_retry_after() {
        let r = OpenAiError::busy("all slots busy", 2).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = OpenAiError::internal().into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
