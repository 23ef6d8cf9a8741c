//! The one error type of this crate.

use crate::slot::SlotState;
use std::path::PathBuf;

/// Everything that can go wrong creating, opening, validating or reading a segment.
///
/// Every variant names the file involved (where there is one) and what was expected, so a
/// message alone tells an operator what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("open", "fstat", "flock", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The engine id cannot name a segment.
    #[error("invalid engine id {id:?}: {reason}")]
    InvalidEngineId {
        /// The id given.
        id: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The segment directory is not safe to create segments in.
    #[error("unsafe segment directory {path}: {reason}")]
    UnsafeDirectory {
        /// The directory.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// A live engine already publishes under this id.
    #[error("engine id {id:?} is in use by a live engine{} ({path})", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    EngineIdInUse {
        /// The id.
        id: String,
        /// The segment file.
        path: PathBuf,
        /// The live writer's pid, when its header could be read.
        pid: Option<u64>,
    },
    /// A slot count of zero or above [`crate::MAX_SLOTS`].
    #[error("slot count {count} out of range 1..={max}")]
    SlotCountOutOfRange {
        /// The count asked for.
        count: usize,
        /// The maximum.
        max: usize,
    },
    /// The segment file is a symbolic link.
    #[error("refusing symbolic link {path}")]
    SymlinkFile {
        /// The link.
        path: PathBuf,
    },
    /// The segment directory is a symbolic link.
    #[error("refusing symbolically linked directory {path}")]
    SymlinkDirectory {
        /// The link.
        path: PathBuf,
    },
    /// The path is not a regular file (a FIFO, socket, device or directory).
    #[error("{path} is not a regular file (it is a {kind})")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file's owner is not the one expected.
    #[error("{path} is owned by uid {owner}, expected uid {expected}")]
    WrongOwner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The expected owner.
        expected: u32,
    },
    /// The file is shorter than what must be read next.
    #[error("{path} is truncated: {len} bytes, need at least {needed} for the {what}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// Bytes needed.
        needed: u64,
        /// What was to be read.
        what: &'static str,
    },
    /// The magic bytes do not match: not a hydra-progress segment.
    #[error("{path} is not a hydra-progress segment (magic {found:02x?}, expected \"HYDRPROG\")")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first 8 bytes.
        found: [u8; 8],
    },
    /// The segment was written on a machine of the other byte order.
    #[error("{path} was written with the other byte order")]
    ForeignByteOrder {
        /// The file.
        path: PathBuf,
    },
    /// The byte-order marker is neither ours nor swapped.
    #[error("{path} has a corrupt byte-order marker {found:#018x}")]
    BadByteOrderMark {
        /// The file.
        path: PathBuf,
        /// The marker found.
        found: u64,
    },
    /// A major version this reader does not understand.
    #[error("{path} has format major version {found}, this reader supports {supported}")]
    UnsupportedMajor {
        /// The file.
        path: PathBuf,
        /// The major found.
        found: u64,
        /// The major supported.
        supported: u64,
    },
    /// Header fields describing sizes and offsets are inconsistent.
    #[error("{path} has an invalid layout: {reason}")]
    BadGeometry {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The slot table ends past the end of the file.
    #[error("{path}: slot table ends at byte {end}, past the end of the {len}-byte file")]
    SlotTableOutOfBounds {
        /// The file.
        path: PathBuf,
        /// Where the table would end.
        end: u128,
        /// The file length.
        len: u64,
    },
    /// The header's total length disagrees with the file's size.
    #[error("{path}: header says {declared} bytes but the file has {actual}")]
    SizeMismatch {
        /// The file.
        path: PathBuf,
        /// `TOTAL_LEN`.
        declared: u64,
        /// `st_size`.
        actual: u64,
    },
    /// The file changed size after it was opened (segments never do).
    #[error("{path} changed size from {was} to {now} bytes while mapped")]
    SizeChanged {
        /// The file.
        path: PathBuf,
        /// Size at open.
        was: u64,
        /// Size now.
        now: u64,
    },
    /// The writer has not finished creating the segment.
    #[error("{path} is still being initialised by its writer")]
    NotReady {
        /// The file.
        path: PathBuf,
    },
    /// The lifecycle word holds an unknown value.
    #[error("{path} has an unknown lifecycle state {raw}")]
    BadState {
        /// The file.
        path: PathBuf,
        /// The raw value.
        raw: u64,
    },
    /// A slot index past the slot count.
    #[error("slot {slot} out of range: the segment has {count} slots")]
    SlotOutOfRange {
        /// The index asked for.
        slot: usize,
        /// The slot count.
        count: usize,
    },
    /// The slot's sequence stayed odd: its writer stopped (or died) in the middle of an update.
    #[error("slot {slot} is torn: its writer stopped in the middle of an update (seq {seq})")]
    Torn {
        /// The slot.
        slot: usize,
        /// The odd sequence value.
        seq: u64,
        /// A best-effort, possibly inconsistent copy of the record.
        last: Box<SlotState>,
    },
    /// The header's engine id is not the id in the file's name (FORMAT §2.2).
    #[error("engine id mismatch in {path}: the file is named for {file_id:?}, its header says {header_id:?}")]
    EngineIdMismatch {
        /// The segment file.
        path: PathBuf,
        /// The id in the file name.
        file_id: String,
        /// The id in the header (lossily decoded).
        header_id: String,
    },
    /// The slot kept changing under the reader for the whole retry budget.
    #[error("slot {slot} changed on every one of {attempts} read attempts")]
    Contended {
        /// The slot.
        slot: usize,
        /// Attempts made.
        attempts: u32,
    },
    /// An item of a region (v1.3: a slot's statistics, the device table) stayed odd: its
    /// writer stopped (or died) in the middle of an update of it.
    #[error(
        "{} is torn: its writer stopped in the middle of an update (seq {seq})",
        region_item(*.slot, .region)
    )]
    RegionTorn {
        /// The slot of a per-slot region; none for the engine's one item (devices).
        slot: Option<usize>,
        /// The region ("statistics", "device table").
        region: &'static str,
        /// The odd sequence value.
        seq: u64,
    },
    /// An item of a region kept changing under the reader for the whole retry budget.
    #[error(
        "{} changed on every one of {attempts} read attempts",
        region_item(*.slot, .region)
    )]
    RegionContended {
        /// The slot of a per-slot region; none for the engine's one item (devices).
        slot: Option<usize>,
        /// The region ("statistics", "device table").
        region: &'static str,
        /// Attempts made.
        attempts: u32,
    },
    /// A slot's statistics fail the format's checks (FORMAT §17.7): a faulty or hostile
    /// writer.
    #[error("slot {slot}'s statistics are invalid: {defect}")]
    BadStats {
        /// The slot.
        slot: usize,
        /// What is wrong.
        defect: crate::stats::StatsDefect,
    },
    /// A device table a writer was asked to publish breaks the format's rules (FORMAT
    /// §19), or the segment was created without the `devices` capability.
    #[error("cannot publish the device table: {reason}")]
    BadDevices {
        /// Why.
        reason: String,
    },
    /// A slot's flight recorder has fixed words no ring can have (FORMAT §18.1).
    #[error("slot {slot}'s flight recorder is unusable: {reason}")]
    BadRing {
        /// The slot.
        slot: usize,
        /// Why.
        reason: String,
    },
}

/// How an error names a region's item: "slot 3's statistics", "the device table".
fn region_item(slot: Option<usize>, region: &str) -> String {
    match slot {
        Some(slot) => format!("slot {slot}'s {region}"),
        None => format!("the {region}"),
    }
}

/// What kind of failure an [`Error`] is: the one classification every surface (the C ABIs'
/// return codes, the exporter's error labels, the probe's exit paths) maps from.
///
/// Deliberately exhaustive: a new kind fails to compile in every `match` that maps kinds
/// until it is classified there, and [`Error::kind`] matches every [`Error`] variant, so a
/// new variant fails to compile until it is given a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// ENOENT: the file or directory is not there.
    NotFound,
    /// Any other failed system call.
    Io,
    /// An argument that cannot be used (engine id, slot count).
    InvalidArgument,
    /// Creation found a live writer under the engine id.
    EngineIdInUse,
    /// A directory unfit to create segments in (owner, mode).
    UnsafeDirectory,
    /// A symbolic link where a segment or its directory belongs.
    Symlink,
    /// Something other than a regular file under a segment's name.
    NotRegularFile,
    /// An owner other than the expected user.
    WrongOwner,
    /// Too short for the next thing to read.
    Truncated,
    /// Magic bytes other than "HYDRPROG".
    BadMagic,
    /// The byte-order marker is swapped or corrupt.
    ByteOrder,
    /// A format major version other than this crate's.
    UnsupportedVersion,
    /// Header sizes and offsets that contradict each other or the file.
    BadGeometry,
    /// A mapped file whose size changed.
    SizeChanged,
    /// The lifecycle word still says INIT.
    NotReady,
    /// The lifecycle word holds a value this version does not know.
    BadState,
    /// A slot index at or past the slot count.
    SlotOutOfRange,
    /// No consistent copy of a slot (torn by a dead writer, or contended).
    Torn,
    /// A segment whose header names another engine than its file name.
    EngineIdMismatch,
    /// A region item (v1.3: statistics, flight recorder) that fails the format's checks.
    BadRegion,
}

impl ErrorKind {
    /// The kind of an I/O failure: [`ErrorKind::NotFound`] or [`ErrorKind::Io`].
    pub fn of_io(e: &std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound {
            Self::NotFound
        } else {
            Self::Io
        }
    }

    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 20] = [
        Self::NotFound,
        Self::Io,
        Self::InvalidArgument,
        Self::EngineIdInUse,
        Self::UnsafeDirectory,
        Self::Symlink,
        Self::NotRegularFile,
        Self::WrongOwner,
        Self::Truncated,
        Self::BadMagic,
        Self::ByteOrder,
        Self::UnsupportedVersion,
        Self::BadGeometry,
        Self::SizeChanged,
        Self::NotReady,
        Self::BadState,
        Self::SlotOutOfRange,
        Self::Torn,
        Self::EngineIdMismatch,
        Self::BadRegion,
    ];

    /// The kind's name in snake case ("not_found", "bad_magic", ...): the one spelling
    /// of kinds in labels, JSON and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::Io => "io",
            Self::InvalidArgument => "invalid_argument",
            Self::EngineIdInUse => "engine_id_in_use",
            Self::UnsafeDirectory => "unsafe_directory",
            Self::Symlink => "symlink",
            Self::NotRegularFile => "not_regular_file",
            Self::WrongOwner => "wrong_owner",
            Self::Truncated => "truncated",
            Self::BadMagic => "bad_magic",
            Self::ByteOrder => "byte_order",
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadGeometry => "bad_geometry",
            Self::SizeChanged => "size_changed",
            Self::NotReady => "not_ready",
            Self::BadState => "bad_state",
            Self::SlotOutOfRange => "slot_out_of_range",
            Self::Torn => "torn",
            Self::EngineIdMismatch => "engine_id_mismatch",
            Self::BadRegion => "bad_region",
        }
    }

    /// Whether the kind says the file is not a readable hydra-progress segment (as opposed
    /// to a refused, missing or unreadable one).
    pub fn is_not_a_segment(self) -> bool {
        match self {
            Self::Truncated
            | Self::BadMagic
            | Self::ByteOrder
            | Self::BadGeometry
            | Self::NotReady
            | Self::BadState
            | Self::Torn => true,
            Self::NotFound
            | Self::Io
            | Self::InvalidArgument
            | Self::EngineIdInUse
            | Self::UnsafeDirectory
            | Self::Symlink
            | Self::NotRegularFile
            | Self::WrongOwner
            | Self::UnsupportedVersion
            | Self::SizeChanged
            | Self::SlotOutOfRange
            | Self::EngineIdMismatch
            | Self::BadRegion => false,
        }
    }
}

impl Error {
    /// The kind of this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Io { source, .. } => ErrorKind::of_io(source),
            Self::InvalidEngineId { .. }
            | Self::SlotCountOutOfRange { .. }
            | Self::BadDevices { .. } => ErrorKind::InvalidArgument,
            Self::UnsafeDirectory { .. } => ErrorKind::UnsafeDirectory,
            Self::EngineIdInUse { .. } => ErrorKind::EngineIdInUse,
            Self::SymlinkFile { .. } | Self::SymlinkDirectory { .. } => ErrorKind::Symlink,
            Self::NotRegularFile { .. } => ErrorKind::NotRegularFile,
            Self::WrongOwner { .. } => ErrorKind::WrongOwner,
            Self::Truncated { .. } => ErrorKind::Truncated,
            Self::BadMagic { .. } => ErrorKind::BadMagic,
            Self::ForeignByteOrder { .. } | Self::BadByteOrderMark { .. } => ErrorKind::ByteOrder,
            Self::UnsupportedMajor { .. } => ErrorKind::UnsupportedVersion,
            Self::BadGeometry { .. }
            | Self::SlotTableOutOfBounds { .. }
            | Self::SizeMismatch { .. } => ErrorKind::BadGeometry,
            Self::SizeChanged { .. } => ErrorKind::SizeChanged,
            Self::NotReady { .. } => ErrorKind::NotReady,
            Self::BadState { .. } => ErrorKind::BadState,
            Self::SlotOutOfRange { .. } => ErrorKind::SlotOutOfRange,
            Self::Torn { .. }
            | Self::Contended { .. }
            | Self::RegionTorn { .. }
            | Self::RegionContended { .. } => ErrorKind::Torn,
            Self::EngineIdMismatch { .. } => ErrorKind::EngineIdMismatch,
            Self::BadStats { .. } | Self::BadRing { .. } => ErrorKind::BadRegion,
        }
    }

    /// An [`Error::Io`]: `op` ("open", "read directory", ...) failed on `path`.
    pub fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<std::io::Error>,
    ) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source: source.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn every_kind_is_listed_once_with_its_own_name() {
        let names: std::collections::BTreeSet<_> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        // Distinct names mean no kind is listed twice. (A new kind must also be added to
        // `ALL` by hand: `as_str`'s exhaustive match is what reminds.)
        assert_eq!(names.len(), ErrorKind::ALL.len(), "{names:?}");
    }
}
