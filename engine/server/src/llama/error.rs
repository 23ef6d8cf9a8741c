//! The llama surface's words for an [`ApiError`]: `{"error": {"code", "message"}}` with
//! the matching HTTP status (and `Retry-After` when every slot is busy). The status of a
//! cancelled request is llama-server's for one: 400, an invalid request.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api_error::{ApiError, ErrorKind, RETRY_AFTER_S};

/// The HTTP status of `kind` on the llama surface.
pub fn status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::UnknownSlot | ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidRequest | ErrorKind::InvalidJson | ErrorKind::Cancelled => {
            StatusCode::BAD_REQUEST
        }
        ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::ContextOverflow | ErrorKind::StateRejected => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::EmptySlot => StatusCode::CONFLICT,
        ErrorKind::Busy | ErrorKind::ShuttingDown | ErrorKind::PublishingDisabled => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The body (also a stream's last event when a generation fails part way).
pub fn body(e: &ApiError) -> serde_json::Value {
    serde_json::json!({ "error": { "code": e.kind.code(), "message": e.message } })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (status(self.kind), Json(body(&self))).into_response();
        if self.kind == ErrorKind::Busy {
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

    #[test]
    fn a_cancellation_is_llama_servers_400_and_a_shutdown_a_503() {
        let cancelled = ApiError::new(ErrorKind::Cancelled, "cancelled");
        let r = cancelled.clone().into_response();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body(&cancelled)["error"]["code"], "cancelled");
        let r2 = ApiError::new(ErrorKind::ShuttingDown, "stopping").into_response();
        assert_eq!(r2.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
        let busy = ApiError::new(ErrorKind::Busy, "full").into_response();
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    }
}
