//! The engine's one error type.

use std::path::PathBuf;

/// Shorthand for results carrying an [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
///
/// Messages are written for the person running the engine; none of them
/// contain prompt text or token values beyond a single offending id.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file in question.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The GGUF file is malformed or lacks something the loader needs.
    #[error("invalid GGUF model {path}: {message}")]
    InvalidModel {
        /// The model file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The model's architecture is not one the engine implements.
    #[error(
        "unsupported model architecture in {path}: general.architecture = {architecture:?} (supported: {supported})"
    )]
    UnsupportedArchitecture {
        /// The model file.
        path: PathBuf,
        /// `general.architecture` as found in the file.
        architecture: String,
        /// The values this build runs.
        supported: String,
    },
    /// The tokenizer family named by the model is not implemented.
    #[error("unsupported tokenizer: {key} = {value:?} (supported: {supported})")]
    UnsupportedTokenizer {
        /// The metadata key (`tokenizer.ggml.model`, `tokenizer.ggml.pre`, ...).
        key: String,
        /// Its value in the file.
        value: String,
        /// The values this build reads.
        supported: String,
    },
    /// The tokenizer data is inconsistent.
    #[error("invalid tokenizer: {0}")]
    InvalidTokenizer(String),
    /// A token id is not in the vocabulary.
    #[error("token id {token} is out of range (vocabulary size {vocab_size})")]
    TokenOutOfRange {
        /// The offending id.
        token: u32,
        /// Number of tokens in the vocabulary.
        vocab_size: usize,
    },
    /// A slot index is out of range.
    #[error("slot {slot} does not exist (the engine has {n_slots} slots)")]
    NoSuchSlot {
        /// The requested slot.
        slot: usize,
        /// Number of slots.
        n_slots: usize,
    },
    /// A prefill was asked for with no tokens.
    #[error("empty prompt: prefill needs at least one token")]
    EmptyPrompt,
    /// Decoding was asked for on a slot that holds nothing.
    #[error("slot {slot} is empty: prefill a prompt before decoding")]
    EmptySlot {
        /// The slot.
        slot: usize,
    },
    /// The request does not fit in the slot's context window.
    #[error(
        "context overflow in slot {slot}: {n_past} cached + {n_new} new tokens exceed the context size {n_ctx}"
    )]
    ContextOverflow {
        /// The slot.
        slot: usize,
        /// Tokens already in the slot.
        n_past: usize,
        /// Tokens the request would add.
        n_new: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// The observer asked to stop; the slot keeps what was done before.
    #[error("cancelled in slot {slot} after {done} tokens (n_past is now {n_past})")]
    Cancelled {
        /// The slot.
        slot: usize,
        /// Tokens processed by this call before it stopped.
        done: usize,
        /// The slot's n_past after the cancellation.
        n_past: usize,
    },
    /// A layer hook stopped a forward at a layer boundary; no cache took its tokens.
    #[error("forward stopped after layer {layers_done} of {n_layers}")]
    Interrupted {
        /// Layers issued before it stopped.
        layers_done: usize,
        /// Layers in the forward.
        n_layers: usize,
    },
    /// An option had a value the engine cannot use.
    #[error("invalid option {name}: {message}")]
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A device specification could not be parsed or used.
    #[error("invalid device {spec:?}: {message}")]
    InvalidDevice {
        /// The text given.
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// The device exists in this build but cannot be used: no NVIDIA driver, no GPU with
    /// that ordinal, a driver too old for the CUDA libraries.
    #[error("cannot open device {spec}: {message}")]
    DeviceUnavailable {
        /// The device asked for (`cuda:0`).
        spec: String,
        /// The driver's reason.
        message: String,
    },
    /// The device ran out of memory (loading the weights, or a request's activations and
    /// KV cache). Only a GPU reports this; the CPU aborts on an allocation failure.
    #[error("out of device memory: {0}")]
    OutOfMemory(#[source] candle_core::Error),
    /// A saved KV state was refused.
    #[error("KV state refused: {0}")]
    State(#[from] StateError),
    /// Writing or reading a KV state stream failed.
    #[error("KV state I/O failed: {0}")]
    StateIo(#[source] std::io::Error),
    /// An error inside candle (tensor shapes, kernels, devices). Every `?` on a candle
    /// error lands here or in [`EngineError::OutOfMemory`] (the conversion is in
    /// `device.rs`, which tells the device's out-of-memory errors apart).
    #[error("tensor backend: {0}")]
    Candle(#[source] candle_core::Error),
}

/// Why a saved KV state was refused by [`crate::Slots::restore_state`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The stream does not start with the state magic.
    #[error("not a hydra KV state (bad magic)")]
    BadMagic,
    /// The format version is not one this build reads.
    #[error("unsupported state format version {found} (this build reads version {expected})")]
    Version {
        /// Version in the stream.
        found: u16,
        /// Version this build writes and reads.
        expected: u16,
    },
    /// The state was saved from a different model.
    #[error("state belongs to a different model (fingerprint {found:016x}, loaded model is {expected:016x})")]
    ForeignModel {
        /// Fingerprint of the loaded model.
        expected: u64,
        /// Fingerprint in the stream.
        found: u64,
    },
    /// The tensor layout in the header does not match the model.
    #[error("state layout mismatch: {0}")]
    Layout(String),
    /// The state holds more tokens than the slot's context.
    #[error("state holds {n_past} tokens but the context size is {n_ctx}")]
    TooLong {
        /// Tokens in the state.
        n_past: u64,
        /// The context size.
        n_ctx: usize,
    },
    /// The stream is shorter than its header says.
    #[error("state is truncated: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes available.
        got: u64,
    },
    /// The stream is longer than its header says.
    #[error("state has trailing data: expected {expected} bytes, got {got}")]
    TrailingData {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes available.
        got: u64,
    },
    /// The checksum does not match the contents.
    #[error("state is corrupt: checksum {found:016x} does not match contents {computed:016x}")]
    Corrupt {
        /// Checksum stored in the stream.
        found: u64,
        /// Checksum of what was read.
        computed: u64,
    },
}

/// `FromStr` and `Display` for an option whose values are fixed names (the variants of a
/// fieldless enum): parsing trims the text and ignores case, an unknown name is an
/// [`EngineError::InvalidOption`] of option `$option` that lists the names, and a value
/// displays as its name. The engine server's options use it too.
#[macro_export]
#[doc(hidden)]
macro_rules! named_values {
    ($ty:ty, $option:literal, { $($name:literal => $variant:ident),+ $(,)? }) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::error::EngineError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($name => Ok(Self::$variant),)+
                    _ => Err($crate::error::EngineError::InvalidOption {
                        name: $option,
                        message: format!(
                            "{s:?}: expected {}",
                            $crate::error::one_of(&[$($name),+])
                        ),
                    }),
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $(Self::$variant => $name,)+
                })
            }
        }
    };
}
pub use named_values;

/// `names` as a sentence's alternatives: "a", "a or b", "a, b or c".
#[doc(hidden)]
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => (*only).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::one_of;

    #[test]
    fn one_of_lists_the_alternatives() {
        assert_eq!(one_of(&["cpu"]), "cpu");
        assert_eq!(one_of(&["batched", "serial"]), "batched or serial");
        assert_eq!(
            one_of(&["adaptive", "always", "never"]),
            "adaptive, always or never"
        );
    }
}
