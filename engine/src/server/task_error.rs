//! The compute thread's error: why a task failed, in the terms the segment records.
//!
//! The compute thread knows nothing of HTTP. Every task reply carries a [`TaskError`];
//! [`TaskError::segment_code`] is the `ERROR_CODE` published for the failed task, and the
//! HTTP front end turns it into the client's answer in one place (`http.rs`). Engine
//! errors are classified here, once, by an exhaustive match: a new
//! [`EngineError`] variant does not compile until it is given a class.

use crate::error::EngineError;
use hydra_layout::ErrorCode;

/// Why a task was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The slot id is not one of the engine's slots.
    #[error("slot {slot} does not exist (the engine has {n_slots} slots)")]
    UnknownSlot {
        /// Requested.
        slot: usize,
        /// Available.
        n_slots: usize,
    },
    /// The request is invalid (an empty prompt, a token id outside the vocabulary, a
    /// sampling option out of range).
    #[error("{0}")]
    InvalidInput(String),
    /// Decode on a slot with nothing prefilled (or whose last logits are unknown).
    #[error("{0}")]
    EmptySlot(String),
    /// The prompt (plus what the slot holds) does not fit the slot's context.
    #[error("{0}")]
    ContextOverflow(String),
    /// A state to restore was refused.
    #[error("{0}")]
    StateRejected(String),
    /// The task was cancelled (shutdown).
    #[error("the task was cancelled because the engine is shutting down")]
    Cancelled,
    /// The engine no longer takes tasks.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// Publishing is off, so there is no segment to read.
    #[error("progress publishing is disabled on this engine (--no-publish)")]
    PublishingDisabled,
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
            Self::ContextOverflow(_) => ErrorCode::ContextOverflow,
            Self::StateRejected(_) => ErrorCode::StateRejected,
            Self::UnknownSlot { .. } | Self::InvalidInput(_) | Self::EmptySlot(_) => {
                ErrorCode::InvalidInput
            }
            Self::Io(_) => ErrorCode::Io,
            Self::Compute(_) => ErrorCode::Compute,
            Self::Internal(_) => ErrorCode::Internal,
            Self::Cancelled | Self::ShuttingDown | Self::PublishingDisabled => ErrorCode::None,
        }
    }

    /// Whether the error is the engine's fault rather than the request's: its text is for
    /// the engine's log, never for a client.
    pub fn is_internal(&self) -> bool {
        matches!(self, Self::Io(_) | Self::Compute(_) | Self::Internal(_))
    }
}

impl From<EngineError> for TaskError {
    fn from(e: EngineError) -> Self {
        let text = e.to_string();
        match e {
            EngineError::NoSuchSlot { slot, n_slots } => Self::UnknownSlot { slot, n_slots },
            EngineError::ContextOverflow { .. } => Self::ContextOverflow(text),
            EngineError::EmptySlot { .. } => Self::EmptySlot(text),
            EngineError::EmptyPrompt
            | EngineError::TokenOutOfRange { .. }
            | EngineError::InvalidOption { .. } => Self::InvalidInput(text),
            EngineError::State(_) => Self::StateRejected(text),
            EngineError::Cancelled { .. } => Self::Cancelled,
            EngineError::StateIo(_) => Self::Io(text),
            EngineError::Candle(_) | EngineError::OutOfMemory(_) => Self::Compute(text),
            EngineError::Io { .. }
            | EngineError::InvalidModel { .. }
            | EngineError::UnsupportedArchitecture { .. }
            | EngineError::UnsupportedTokenizer { .. }
            | EngineError::InvalidTokenizer(_)
            | EngineError::InvalidDevice { .. }
            | EngineError::DeviceUnavailable { .. } => Self::Internal(text),
        }
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
                EngineError::State(crate::StateError::BadMagic),
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
