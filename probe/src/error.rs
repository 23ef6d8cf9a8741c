//! The library's error type.

use std::path::PathBuf;

/// Everything the probe library can fail with. Messages are one line and name the
/// directory, engine or file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Opening, validating or reading a segment failed.
    #[error(transparent)]
    Layout(#[from] hydra_layout::Error),
    /// The directory holds no segment.
    #[error("no engines found in {dir}")]
    NoEngines {
        /// The directory searched.
        dir: PathBuf,
    },
    /// No engine was named and the directory holds several.
    #[error("several engines in {dir}, name one of: {}", ids.join(", "))]
    AmbiguousEngine {
        /// The directory searched.
        dir: PathBuf,
        /// The engine ids found.
        ids: Vec<String>,
    },
    /// The engine named is neither an engine id in the directory nor a segment file.
    #[error("no engine {engine:?} in {dir}{}", found_list(found))]
    UnknownEngine {
        /// The name given.
        engine: String,
        /// The directory searched.
        dir: PathBuf,
        /// The engine ids that do exist.
        found: Vec<String>,
    },
    /// A slot index past the engine's slot count.
    #[error("slot {slot} out of range: engine {engine:?} has {count} slots (0..={})", count.saturating_sub(1))]
    SlotOutOfRange {
        /// The engine.
        engine: String,
        /// The index asked for.
        slot: usize,
        /// The slot count.
        count: usize,
    },
}

fn found_list(found: &[String]) -> String {
    if found.is_empty() {
        " (no engines there)".to_owned()
    } else {
        format!(" (found: {})", found.join(", "))
    }
}

impl ProbeError {
    /// The slots `slot` asks for among the `count` of engine `engine`: that one, or every
    /// slot when `None`; [`ProbeError::SlotOutOfRange`] past the count.
    pub(crate) fn slots_asked(
        engine: &str,
        count: usize,
        slot: Option<usize>,
    ) -> Result<std::ops::Range<usize>, ProbeError> {
        match slot {
            Some(s) if s >= count => Err(Self::SlotOutOfRange {
                engine: engine.to_owned(),
                slot: s,
                count,
            }),
            Some(s) => Ok(s..s + 1),
            None => Ok(0..count),
        }
    }

    /// The kind of this error, in the classification every surface maps from
    /// ([`hydra_layout::ErrorKind`]): a layout error keeps its own kind; a directory or
    /// engine that is not there is [`ErrorKind::NotFound`](hydra_layout::ErrorKind::NotFound).
    pub fn kind(&self) -> hydra_layout::ErrorKind {
        use hydra_layout::ErrorKind;
        match self {
            Self::Layout(e) => e.kind(),
            Self::NoEngines { .. } | Self::UnknownEngine { .. } => ErrorKind::NotFound,
            Self::AmbiguousEngine { .. } => ErrorKind::InvalidArgument,
            Self::SlotOutOfRange { .. } => ErrorKind::SlotOutOfRange,
        }
    }
}
