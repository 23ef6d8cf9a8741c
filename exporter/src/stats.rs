//! The exporter's own counters, kept across scrapes (unlike the engine metrics, which are
//! rebuilt from the segments on every scrape).

use hydra_probe::ProbeError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Kinds of read error, the `kind` label of `hydra_exporter_read_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The segment directory could not be listed.
    Directory,
    /// A system call on a segment failed (open, fstat, mmap, flock...).
    Io,
    /// An entry named like a segment is a FIFO, directory, socket...
    NotRegularFile,
    /// The segment (or its directory) is a symbolic link.
    Symlink,
    /// The file is not owned by the directory's owner.
    WrongOwner,
    /// The file is shorter than its header says or needs.
    Truncated,
    /// Not a hydra-progress segment (magic mismatch).
    BadMagic,
    /// Written with the other byte order, or a corrupt byte-order marker.
    ByteOrder,
    /// A format major version this exporter does not read.
    UnsupportedVersion,
    /// Inconsistent header geometry (lengths, offsets, slot table).
    BadGeometry,
    /// The file changed size while mapped.
    SizeChanged,
    /// The writer has not finished creating the segment.
    NotReady,
    /// Unknown lifecycle state.
    BadState,
    /// A read kept failing on a torn or contended record.
    Torn,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Every kind, in label order (each is exported from the start, at 0).
    pub const ALL: [ErrorKind; 15] = [
        Self::Directory,
        Self::Io,
        Self::NotRegularFile,
        Self::Symlink,
        Self::WrongOwner,
        Self::Truncated,
        Self::BadMagic,
        Self::ByteOrder,
        Self::UnsupportedVersion,
        Self::BadGeometry,
        Self::SizeChanged,
        Self::NotReady,
        Self::BadState,
        Self::Torn,
        Self::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Directory => "directory",
            Self::Io => "io",
            Self::NotRegularFile => "not_regular_file",
            Self::Symlink => "symlink",
            Self::WrongOwner => "wrong_owner",
            Self::Truncated => "truncated",
            Self::BadMagic => "bad_magic",
            Self::ByteOrder => "byte_order",
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadGeometry => "bad_geometry",
            Self::SizeChanged => "size_changed",
            Self::NotReady => "not_ready",
            Self::BadState => "bad_state",
            Self::Torn => "torn",
            Self::Other => "other",
        }
    }

    /// The kind of a probe error.
    pub fn of_probe(e: &ProbeError) -> Self {
        use hydra_layout::Error as L;
        match e {
            ProbeError::Layout(l) => match l {
                L::Io { .. } => Self::Io,
                L::NotRegularFile { .. } => Self::NotRegularFile,
                L::SymlinkFile { .. } | L::SymlinkDirectory { .. } => Self::Symlink,
                L::WrongOwner { .. } => Self::WrongOwner,
                L::Truncated { .. } => Self::Truncated,
                L::BadMagic { .. } => Self::BadMagic,
                L::ForeignByteOrder { .. } | L::BadByteOrderMark { .. } => Self::ByteOrder,
                L::UnsupportedMajor { .. } => Self::UnsupportedVersion,
                L::BadGeometry { .. } | L::SlotTableOutOfBounds { .. } | L::SizeMismatch { .. } => {
                    Self::BadGeometry
                }
                L::SizeChanged { .. } => Self::SizeChanged,
                L::NotReady { .. } => Self::NotReady,
                L::BadState { .. } => Self::BadState,
                L::Torn { .. } | L::Contended { .. } => Self::Torn,
                _ => Self::Other,
            },
            ProbeError::Io { .. } => Self::Io,
            _ => Self::Other,
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Label set of `hydra_exporter_read_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The [`ErrorKind`] name.
    pub kind: &'static str,
}

/// Counters of the exporter itself. prometheus-client metrics are `Arc`s inside, so the
/// same counters are registered (cloned) into every scrape's fresh registry.
#[derive(Debug, Clone)]
pub struct ExporterStats {
    /// `hydra_exporter_read_errors_total{kind}`.
    pub read_errors: Family<KindLabel, Counter>,
    /// `hydra_exporter_torn_reads_total`: slots read as torn.
    pub torn_reads: Counter,
    /// `hydra_exporter_seqlock_retries_total`: failed seqlock attempts before a consistent copy.
    pub seqlock_retries: Counter,
    /// `hydra_exporter_scrapes_total`: directory collections made.
    pub scrapes: Counter,
}

impl ExporterStats {
    /// Fresh counters, every read error kind present at 0.
    pub fn new() -> Self {
        let read_errors = Family::<KindLabel, Counter>::default();
        for kind in ErrorKind::ALL {
            let _created = read_errors.get_or_create(&KindLabel {
                kind: kind.as_str(),
            });
        }
        Self {
            read_errors,
            torn_reads: Counter::default(),
            seqlock_retries: Counter::default(),
            scrapes: Counter::default(),
        }
    }

    pub(crate) fn read_error(&self, kind: ErrorKind) {
        self.read_errors
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .inc();
    }

    pub(crate) fn slot_reads(&self, torn: u64, retries: u64) {
        if torn > 0 {
            self.torn_reads.inc_by(torn);
        }
        if retries > 0 {
            self.seqlock_retries.inc_by(retries);
        }
    }

    pub(crate) fn scrape(&self) {
        self.scrapes.inc();
    }

    /// Read errors of `kind` counted so far.
    pub fn read_errors_of(&self, kind: ErrorKind) -> u64 {
        self.read_errors
            .get_or_create(&KindLabel {
                kind: kind.as_str(),
            })
            .get()
    }
}

impl Default for ExporterStats {
    fn default() -> Self {
        Self::new()
    }
}
