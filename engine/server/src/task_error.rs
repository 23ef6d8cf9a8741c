//! The compute thread's error: why a task failed, in the terms the segment records.
//!
//! The compute thread knows nothing of HTTP. Every task reply carries a [`TaskError`]:
//! either a [`ClientError`], the part a client is told, or an internal failure whose text
//! stays in the engine's log. [`TaskError::segment_code`] is the `ERROR_CODE` published for
//! the failed task; the HTTP front end answers the client's part as it is
//! (`api_error.rs`). Engine errors are classified here, once, by an exhaustive match: a
//! new [`EngineError`] variant does not compile until it is given a class.

use hydra_engine_core::error::EngineError;
use hydra_layout::ErrorCode;

/// The part of a task's failure a client is told: why the request was refused or did not
/// run to its end. The HTTP front end answers these as they are
/// (classified by [`crate::api_error::ApiError`]), and refuses bad requests of its own
/// with them too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The slot id is not one of the engine's slots.
    #[error("slot {slot} does not exist (the engine has {n_slots} slots)")]
    UnknownSlot {
        /// Requested.
        slot: usize,
        /// Available.
        n_slots: usize,
    },
    /// The request is invalid (an empty prompt, a token id outside the vocabulary, a
    /// sampling option out of range, a malformed field).
    #[error("{0}")]
    InvalidInput(String),
    /// Decode on a slot with nothing prefilled (or whose last logits are unknown).
    #[error("{0}")]
    EmptySlot(String),
    /// The prompt (plus what the slot holds) does not fit the slot's context.
    #[error("{0}")]
    ContextOverflow(String),
    /// A state to restore was refused.
    #[error("state refused: {0}")]
    StateRejected(String),
    /// The task was cancelled: `?action=cancel` on its slot, or its client went away (a
    /// shutdown is [`ClientError::ShuttingDown`]).
    #[error("the task was cancelled (`?action=cancel` on its slot, or its client went away)")]
    Cancelled,
    /// The engine no longer takes tasks.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// Publishing is off, so there is no segment to read.
    #[error("progress publishing is disabled on this engine (--no-publish)")]
    PublishingDisabled,
}

/// Why a task was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Refused or stopped for a reason the client is told.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Streaming a state failed (e.g. the client went away).
    #[error("state I/O: {0}")]
    Io(String),
    /// The model's forward pass failed.
    #[error("compute: {0}")]
    Compute(String),
    /// Anything else.
    #[error("internal: {0}")]
    Internal(String),
}

impl TaskError {
    /// The `ERROR_CODE` a task that failed with this error leaves in its slot.
    /// Cancellation and shutdown are not errors of the task (its finish reason says so).
    pub fn segment_code(&self) -> ErrorCode {
        match self {
            Self::Client(c) => match c {
                ClientError::ContextOverflow(_) => ErrorCode::ContextOverflow,
                ClientError::StateRejected(_) => ErrorCode::StateRejected,
                ClientError::UnknownSlot { .. }
                | ClientError::InvalidInput(_)
                | ClientError::EmptySlot(_) => ErrorCode::InvalidInput,
                ClientError::Cancelled
                | ClientError::ShuttingDown
                | ClientError::PublishingDisabled => ErrorCode::None,
            },
            Self::Io(_) => ErrorCode::Io,
            Self::Compute(_) => ErrorCode::Compute,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// Whether the error is the engine's fault rather than the request's: its text is for
    /// the engine's log, never for a client.
    pub fn is_internal(&self) -> bool {
        !matches!(self, Self::Client(_))
    }

    /// Whether the task was stopped before its end, cancelled or by the engine's shutdown
    /// (its finish reason, not an error of the task).
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self,
            Self::Client(ClientError::Cancelled | ClientError::ShuttingDown)
        )
    }

    /// Logs the failure once, where it was met: an internal one as an error with its text,
    /// a refused request at debug level.
    pub fn log(&self) {
        if self.is_internal() {
            tracing::error!("task failed: {self}");
        } else {
            tracing::debug!("task refused: {self}");
        }
    }
}

impl From<EngineError> for TaskError {
    fn from(e: EngineError) -> Self {
        let text = e.to_string();
        let client = match e {
            EngineError::NoSuchSlot { slot, n_slots } => ClientError::UnknownSlot { slot, n_slots },
            EngineError::ContextOverflow { .. } => ClientError::ContextOverflow(text),
            EngineError::EmptySlot { .. } => ClientError::EmptySlot(text),
            EngineError::EmptyPrompt
            | EngineError::TokenOutOfRange { .. }
            | EngineError::InvalidOption { .. } => ClientError::InvalidInput(text),
            EngineError::State(_) => ClientError::StateRejected(text),
            EngineError::Cancelled { .. } | EngineError::Interrupted { .. } => {
                ClientError::Cancelled
            }
            EngineError::StateIo(_) => return Self::Io(text),
            EngineError::Candle(_) | EngineError::OutOfMemory(_) => return Self::Compute(text),
            EngineError::Io { .. }
            | EngineError::InvalidModel { .. }
            | EngineError::UnsupportedArchitecture { .. }
            | EngineError::UnsupportedTokenizer { .. }
            | EngineError::InvalidTokenizer(_)
            | EngineError::InvalidDevice { .. }
            | EngineError::DeviceUnavailable { .. } => return Self::Internal(text),
        };
        Self::Client(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_and_io_failures_reach_the_segment() {
        let candle = EngineError::Candle(candle_core::Error::Msg("shape mismatch".into()));
        let e = TaskError::from(candle);
        assert_eq!(e.segment_code(), ErrorCode::Compute);
        assert!(e.is_internal());
        // A request that runs the GPU out of memory fails alone; the engine goes on.
        let oom = EngineError::OutOfMemory(candle_core::Error::Msg("out of memory".into()));
        let e = TaskError::from(oom);
        assert_eq!(e.segment_code(), ErrorCode::Compute);
        assert!(e.to_string().contains("out of device memory"), "{e}");
        let io = EngineError::StateIo(std::io::Error::other("broken pipe"));
        assert_eq!(TaskError::from(io).segment_code(), ErrorCode::Io);
    }

    #[test]
    fn request_errors_are_classified_as_input() {
        let cases = [
            (EngineError::EmptyPrompt, ErrorCode::InvalidInput),
            (
                EngineError::TokenOutOfRange {
                    token: 9,
                    vocab_size: 3,
                },
                ErrorCode::InvalidInput,
            ),
            (EngineError::EmptySlot { slot: 1 }, ErrorCode::InvalidInput),
            (
                EngineError::ContextOverflow {
                    slot: 0,
                    n_past: 1,
                    n_new: 2,
                    n_ctx: 2,
                },
                ErrorCode::ContextOverflow,
            ),
            (
                EngineError::State(hydra_engine_core::StateError::BadMagic),
                ErrorCode::StateRejected,
            ),
            (
                EngineError::Cancelled {
                    slot: 0,
                    done: 1,
                    n_past: 1,
                },
                ErrorCode::None,
            ),
        ];
        for (e, code) in cases {
            let t = TaskError::from(e);
            assert_eq!(t.segment_code(), code, "{t:?}");
            assert!(!t.is_internal(), "{t:?}");
        }
    }
}
