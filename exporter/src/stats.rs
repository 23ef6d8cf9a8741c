//! The exporter's own counters, kept across scrapes (unlike the engine metrics, which are
//! rebuilt from the segments on every scrape).

use hydra_probe::ProbeError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::{Arc, Mutex};

/// Kinds of read error, the `kind` label of `hydra_exporter_read_errors_total`: the
/// directory could not be listed, a segment failed with one of the reader's
/// [`hydra_layout::ErrorKind`]s (named as that type names them), or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The segment directory could not be listed.
    Directory,
    /// A segment could not be opened, validated or read.
    Segment(hydra_layout::ErrorKind),
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Every kind, in label order (each is exported from the start, at 0): the reader's
    /// kinds that [`Self::of_layout`] keeps apart, between `directory` and `other`.
    pub const ALL: [ErrorKind; 17] = {
        use hydra_layout::ErrorKind as L;
        [
            Self::Directory,
            Self::Segment(L::Io),
            Self::Segment(L::NotRegularFile),
            Self::Segment(L::Symlink),
            Self::Segment(L::WrongOwner),
            Self::Segment(L::Truncated),
            Self::Segment(L::BadMagic),
            Self::Segment(L::ByteOrder),
            Self::Segment(L::UnsupportedVersion),
            Self::Segment(L::BadGeometry),
            Self::Segment(L::SizeChanged),
            Self::Segment(L::NotReady),
            Self::Segment(L::BadState),
            Self::Segment(L::Torn),
            Self::Segment(L::EngineIdMismatch),
            Self::Segment(L::BadRegion),
            Self::Other,
        ]
    };

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Directory => "directory",
            Self::Segment(kind) => kind.as_str(),
            Self::Other => "other",
        }
    }

    /// The kind of a probe error: its [`hydra_layout::ErrorKind`] as a label.
    pub fn of_probe(e: &ProbeError) -> Self {
        Self::of_layout(e.kind())
    }

    /// The label of a layout error kind. Kinds only a writer meets (an id in use, an unsafe
    /// directory to create in, an invalid argument) and an index past the slots are `other`;
    /// a missing file is `io`, as every other failed system call on a segment.
    pub fn of_layout(kind: hydra_layout::ErrorKind) -> Self {
        use hydra_layout::ErrorKind as L;
        match kind {
            L::NotFound | L::Io => Self::Segment(L::Io),
            L::NotRegularFile
            | L::Symlink
            | L::WrongOwner
            | L::Truncated
            | L::BadMagic
            | L::ByteOrder
            | L::UnsupportedVersion
            | L::BadGeometry
            | L::SizeChanged
            | L::NotReady
            | L::BadState
            | L::Torn
            | L::EngineIdMismatch
            | L::BadRegion => Self::Segment(kind),
            L::InvalidArgument | L::EngineIdInUse | L::UnsafeDirectory | L::SlotOutOfRange => {
                Self::Other
            }
        }
    }
}

impl serde::Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
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

/// Label set of `hydra_dir_up`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why the directory cannot be read ([`DirState::reason`]); "" while it can.
    pub reason: &'static str,
}

/// Whether the segment directory could be listed at the last scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirState {
    /// It could: `hydra_dir_up 1`, even when it holds no engine.
    Up,
    /// It could not (missing, not a directory, permission denied...): `hydra_dir_up 0`.
    Down(&'static str),
}

impl DirState {
    /// The state after listing the directory failed with `e`.
    pub fn of_error(e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        Self::Down(match e.kind() {
            K::NotFound => "not_found",
            K::PermissionDenied => "permission_denied",
            K::NotADirectory => "not_a_directory",
            _ => "io",
        })
    }

    /// The `reason` label: "" when up.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Up => "",
            Self::Down(reason) => reason,
        }
    }
}

/// Counters of the exporter itself. prometheus-client metrics are `Arc`s inside, so the
/// same counters are registered (cloned) into every scrape's fresh registry.
#[derive(Debug, Clone)]
pub struct ExporterStats {
    /// `hydra_dir_up{reason}`: 1 while the segment directory can be listed, else 0 with the
    /// reason; one series at a time.
    pub dir_up: Family<ReasonLabel, Gauge>,
    /// The state `dir_up` shows; `None` before the first scrape.
    dir_state: Arc<Mutex<Option<DirState>>>,
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
            dir_up: Family::default(),
            dir_state: Arc::new(Mutex::new(None)),
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

    /// Records the directory's state at this scrape and returns the previous one when it
    /// changed (the caller logs each change once); the first scrape counts as a change
    /// from "up" (so a directory missing from the start is reported, a readable one not).
    pub fn dir_observed(&self, now: DirState) -> Option<DirState> {
        let mut state = self.dir_state.lock().unwrap_or_else(|p| p.into_inner());
        let before = state.replace(now);
        if before != Some(now) {
            self.dir_up.clear();
            let up = i64::from(now == DirState::Up);
            self.dir_up
                .get_or_create(&ReasonLabel {
                    reason: now.reason(),
                })
                .set(up);
        }
        match before {
            Some(b) if b != now => Some(b),
            None if now != DirState::Up => Some(DirState::Up),
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reader_kind_has_a_label_exported_from_the_start() {
        for kind in hydra_layout::ErrorKind::ALL {
            let label = ErrorKind::of_layout(kind);
            assert!(
                ErrorKind::ALL.contains(&label),
                "{kind:?} maps to {label:?}, which is not exported at 0"
            );
        }
        let names: std::collections::BTreeSet<_> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len(), "{names:?}");
    }

    fn up_series(stats: &ExporterStats, reason: &'static str) -> i64 {
        stats.dir_up.get_or_create(&ReasonLabel { reason }).get()
    }

    #[test]
    fn dir_state_changes_are_reported_once() {
        let stats = ExporterStats::new();
        assert_eq!(stats.dir_observed(DirState::Up), None);
        assert_eq!(up_series(&stats, ""), 1);
        assert_eq!(stats.dir_observed(DirState::Up), None);
        let gone = DirState::Down("not_found");
        assert_eq!(stats.dir_observed(gone), Some(DirState::Up));
        assert_eq!(stats.dir_observed(gone), None);
        assert_eq!(stats.dir_observed(gone), None);
        assert_eq!(up_series(&stats, "not_found"), 0);
        assert_eq!(stats.dir_observed(DirState::Up), Some(gone));
        assert_eq!(up_series(&stats, ""), 1);

        let missing_from_start = ExporterStats::new();
        assert_eq!(missing_from_start.dir_observed(gone), Some(DirState::Up));
        assert_eq!(missing_from_start.dir_observed(gone), None);
    }

    #[test]
    fn io_errors_name_their_reason() {
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(DirState::of_error(&e).reason(), "not_found");
        let e = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(DirState::of_error(&e), DirState::Down("permission_denied"));
    }
}
