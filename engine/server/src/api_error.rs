//! The one classification of every error a client is answered with: an [`ApiError`] is a
//! kind, the request field at fault (when one is) and a message for a person. It knows
//! nothing of a wire shape: each surface renders it in its own words, the llama surface as
//! `{"error": {"code", "message"}}` (`llama/error.rs`) and the `/v1` surface in OpenAI's
//! shape (`openai/error.rs`), each by an exhaustive match on [`ErrorKind`], so a new kind
//! does not compile until both surfaces say how they answer it.
//!
//! Messages are for the client; internals go to the log (once, where the error is
//! produced), never into a response: [`ErrorKind::Internal`] carries a fixed text. The
//! compute thread's errors are classified here, in one place: the client's part of a
//! [`TaskError`] (a [`ClientError`]) keeps its kind, the rest is internal.

use crate::slot_pool::PoolError;
use crate::task_error::{ClientError, TaskError};

/// What went wrong, as the surfaces tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The slot id is not one of the engine's slots.
    UnknownSlot,
    /// A malformed or inconsistent request.
    InvalidRequest,
    /// The body is not JSON of the expected shape (the llama surface's own kind; the `/v1`
    /// surface's parser names the field at fault as an invalid request).
    InvalidJson,
    /// The body is larger than allowed.
    PayloadTooLarge,
    /// The prompt (with what the slot holds) does not fit the slot's context.
    ContextOverflow,
    /// Decode on a slot with nothing prefilled.
    EmptySlot,
    /// A state to restore was refused.
    StateRejected,
    /// The request's task was cancelled (`?action=cancel`, or its client went away).
    Cancelled,
    /// Every slot is busy and the wait queue is full: retry later.
    Busy,
    /// The engine no longer takes tasks.
    ShuttingDown,
    /// Publishing is off, so there is no segment to read.
    PublishingDisabled,
    /// No such route.
    NotFound,
    /// The engine failed; details are in its log.
    Internal,
}

impl ErrorKind {
    /// The stable machine-readable code of the kind.
    pub fn code(self) -> &'static str {
        match self {
            Self::UnknownSlot => "unknown_slot",
            Self::InvalidRequest => "bad_request",
            Self::InvalidJson => "invalid_json",
            Self::PayloadTooLarge => "payload_too_large",
            Self::ContextOverflow => "context_overflow",
            Self::EmptySlot => "empty_slot",
            Self::StateRejected => "state_rejected",
            Self::Cancelled => "cancelled",
            Self::Busy => "server_busy",
            Self::ShuttingDown => "shutting_down",
            Self::PublishingDisabled => "publishing_disabled",
            Self::NotFound => "not_found",
            Self::Internal => "internal",
        }
    }
}

/// Seconds a client told the queue is full should wait before trying again (a
/// `Retry-After` header on both surfaces).
pub const RETRY_AFTER_S: u32 = 1;

/// The text of every internal error: the details are in the engine's log.
const INTERNAL: &str = "internal error (details are in the engine's log)";

/// An error answered to an HTTP client, in no surface's shape yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The request field at fault, when one is (OpenAI's `error.param`).
    pub param: Option<String>,
    /// What was wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error of `kind` about the request as a whole.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            param: None,
            message: message.into(),
        }
    }

    /// The same error, about the request field `param`.
    pub fn at(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    /// A malformed or inconsistent request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    /// A malformed or inconsistent request field `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::bad_request(message).at(param)
    }

    /// The engine failed; the details were logged where the failure happened.
    pub fn internal() -> Self {
        Self::new(ErrorKind::Internal, INTERNAL)
    }

    /// No route for `path`.
    pub fn not_found(path: &str) -> Self {
        Self::new(ErrorKind::NotFound, format!("no route for {path}"))
    }

    /// A body larger than `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            ErrorKind::PayloadTooLarge,
            format!("request body too large (limit {limit} bytes)"),
        )
    }

    /// An error the front end met itself (not a compute thread's reply, which the compute
    /// thread logged): logged here, once, then answered with the client's part of it.
    pub fn report(error: impl Into<TaskError>) -> Self {
        let error = error.into();
        error.log();
        Self::from(error)
    }
}

impl From<ClientError> for ApiError {
    fn from(c: ClientError) -> Self {
        let kind = match &c {
            ClientError::UnknownSlot { .. } => ErrorKind::UnknownSlot,
            ClientError::InvalidInput(_) => ErrorKind::InvalidRequest,
            ClientError::EmptySlot(_) => ErrorKind::EmptySlot,
            ClientError::ContextOverflow(_) => ErrorKind::ContextOverflow,
            ClientError::StateRejected(_) => ErrorKind::StateRejected,
            ClientError::Cancelled => ErrorKind::Cancelled,
            ClientError::ShuttingDown => ErrorKind::ShuttingDown,
            ClientError::PublishingDisabled => ErrorKind::PublishingDisabled,
        };
        let e = Self::new(kind, c.to_string());
        match kind {
            ErrorKind::UnknownSlot => e.at("id_slot"),
            _ => e,
        }
    }
}

impl From<TaskError> for ApiError {
    /// The client's answer to a task error: its client part as it is; an internal failure
    /// (I/O, compute, anything else) only as "internal", its text being in the log.
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Client(c) => Self::from(c),
            TaskError::Io(_) | TaskError::Compute(_) | TaskError::Internal(_) => Self::internal(),
        }
    }
}

impl From<PoolError> for ApiError {
    fn from(e: PoolError) -> Self {
        let kind = match e {
            PoolError::Full { .. } => ErrorKind::Busy,
            PoolError::Cancelled { .. } => ErrorKind::Cancelled,
        };
        Self::new(kind, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_errors_keep_their_client_kind_and_hide_internals() {
        let cases = [
            (
                ClientError::ContextOverflow("x".into()),
                ErrorKind::ContextOverflow,
            ),
            (ClientError::EmptySlot("x".into()), ErrorKind::EmptySlot),
            (ClientError::Cancelled, ErrorKind::Cancelled),
            (ClientError::ShuttingDown, ErrorKind::ShuttingDown),
        ];
        for (c, kind) in cases {
            assert_eq!(ApiError::from(TaskError::from(c)).kind, kind);
        }
        let e = ApiError::from(TaskError::Compute("shape mismatch in layer 3".into()));
        assert_eq!(e.kind, ErrorKind::Internal);
        assert!(!e.message.contains("shape"), "{e}");
        let slot = ApiError::from(ClientError::UnknownSlot {
            slot: 9,
            n_slots: 2,
        });
        assert_eq!(
            (slot.kind, slot.param.as_deref()),
            (ErrorKind::UnknownSlot, Some("id_slot"))
        );
    }

    #[test]
    fn a_cancellation_is_not_a_shutdown() {
        let e = ApiError::from(ClientError::Cancelled);
        assert!(!e.message.contains("shutting down"), "{e}");
        assert_eq!(e.kind.code(), "cancelled");
    }
}
