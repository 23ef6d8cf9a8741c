//! Reading the segment directory: scan, open (with a reader cache), capture, and count
//! what could not be read.
//!
//! One [`Collector`] lives for the exporter's whole life. Each call to
//! [`Collector::collect`] scans the directory *at that moment*, so engines that appear or
//! vanish between scrapes are picked up or dropped; a dead engine's segment stays in the
//! directory and is reported as dead with its last known progress.
//!
//! # Reader cache
//! Opening a segment costs an `open`, two `fstat`s, an `mmap` and the validation of its
//! header. Open readers are therefore kept across scrapes, keyed by path and validated
//! by the file's device and inode number (one `lstat` per engine per scrape): a segment
//! replaced under the same name (a new engine with the same id renames its file into
//! place) has a new inode and is reopened. Readers of files that left the directory are
//! dropped at the next scan (which also unmaps the file).
//!
//! A segment that *vanished* since the previous scan and reads as CLOSED through the
//! cached reader is reported one last time with health `closed`, so a clean exit shows up
//! in the metrics as such instead of as a silent disappearance.

use crate::stats::{DirState, ErrorKind, ExporterStats};
use hydra_layout::{clock, Lifecycle, SegmentReader};
use hydra_probe::{scan, EngineView, ProbeError, StatsSum, Thresholds};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a segment (or the directory) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadError {
    /// Stable machine-readable kind (the `kind` label of `hydra_exporter_read_errors_total`).
    pub kind: ErrorKind,
    /// One line for people, naming the file and what is wrong.
    pub message: String,
}

impl ReadError {
    pub(crate) fn from_probe(e: &ProbeError) -> Self {
        Self {
            kind: ErrorKind::of_probe(e),
            message: e.to_string(),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One log line per change of the directory's state (never one per scrape).
fn log_dir_change(dir: &Path, before: DirState, now: DirState, error: Option<&std::io::Error>) {
    match (now, error) {
        (DirState::Down(reason), Some(e)) => tracing::error!(
            dir = %dir.display(),
            reason,
            "cannot read the segment directory {}: {e}; no engine on this host is visible until it can be read",
            dir.display()
        ),
        _ => tracing::info!(
            dir = %dir.display(),
            was = before.reason(),
            "the segment directory {} can be read again",
            dir.display()
        ),
    }
}

/// One entry of the directory at one scrape: a readable engine, or the reason it is not.
#[derive(Debug)]
pub struct EngineEntry {
    /// The engine id the file name carries (the header's id is in the view).
    pub engine_id: String,
    /// The segment file.
    pub path: PathBuf,
    /// The snapshot, or why none could be taken.
    pub view: Result<EngineView, ReadError>,
    /// The file left the directory since the last scan; this is its last (closed) report.
    pub vanished: bool,
    /// The engine's statistics (format v1.3): one sum of all its slots, or one per slot
    /// (`Some(slot)`) when the collector keeps them per slot; empty when the view failed
    /// or the writer keeps none.
    pub stats: Vec<(Option<usize>, StatsSum)>,
}

/// Everything read in one scrape.
#[derive(Debug, Default)]
pub struct Collection {
    /// Every segment-named entry found (and vanished closed engines), sorted by engine id.
    pub engines: Vec<EngineEntry>,
    /// Set when the directory itself could not be listed (then `engines` is empty).
    pub dir_error: Option<ReadError>,
    /// Wall time spent reading (scan, open, capture).
    pub duration: Duration,
}

impl Collection {
    /// The readable engines' views.
    pub fn views(&self) -> impl Iterator<Item = &EngineView> + Clone {
        self.engines.iter().filter_map(|e| e.view.as_ref().ok())
    }

    /// The readable engines' views with their statistics.
    pub fn views_with_stats(
        &self,
    ) -> impl Iterator<Item = (&EngineView, &[(Option<usize>, StatsSum)])> + Clone {
        self.engines
            .iter()
            .filter_map(|e| Some((e.view.as_ref().ok()?, e.stats.as_slice())))
    }
}

#[derive(Debug)]
struct CachedReader {
    dev: u64,
    ino: u64,
    reader: Arc<SegmentReader>,
}

/// Reads every engine in one directory; keeps open readers and the exporter's own counters
/// across scrapes. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct Collector {
    dir: PathBuf,
    thresholds: Thresholds,
    per_slot_stats: bool,
    cache: Mutex<HashMap<PathBuf, CachedReader>>,
    stats: ExporterStats,
}

impl Collector {
    /// A collector of the segments in `dir`, classifying with `thresholds`.
    pub fn new(dir: impl Into<PathBuf>, thresholds: Thresholds) -> Self {
        Self {
            dir: dir.into(),
            thresholds,
            per_slot_stats: false,
            cache: Mutex::new(HashMap::new()),
            stats: ExporterStats::new(),
        }
    }

    /// Keeps each engine's statistics per slot (a `slot` label on every histogram and
    /// counter of them) instead of one sum per engine.
    pub fn with_per_slot_stats(mut self, per_slot: bool) -> Self {
        self.per_slot_stats = per_slot;
        self
    }

    /// The segment directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The classification thresholds.
    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// The exporter's own counters (read errors, torn reads, seqlock retries, scrapes).
    pub fn stats(&self) -> &ExporterStats {
        &self.stats
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, CachedReader>> {
        // A panic while holding the lock leaves nothing half-updated that matters: the
        // cache is only an optimisation, so a poisoned lock is simply taken over.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Scans the directory and captures every engine in it. Errors are counted in
    /// [`ExporterStats`] and returned per entry; this never fails as a whole.
    pub fn collect(&self) -> Collection {
        let started = Instant::now();
        let mut out = Collection::default();
        let scanned = scan(&self.dir);
        let state = match &scanned {
            Ok(_) => DirState::Up,
            Err(e) => DirState::of_error(e),
        };
        if let Some(before) = self.stats.dir_observed(state) {
            log_dir_change(&self.dir, before, state, scanned.as_ref().err());
        }
        let found = match scanned {
            Ok(found) => found,
            Err(e) => {
                let err = ReadError {
                    kind: ErrorKind::Directory,
                    message: format!("read directory {}: {e}", self.dir.display()),
                };
                self.stats.read_error(err.kind);
                out.dir_error = Some(err);
                // Nothing is known any more: drop every cached reader.
                self.lock_cache().clear();
                out.duration = started.elapsed();
                return out;
            }
        };
        let mut cache = self.lock_cache();
        let seen = self.read_segments(&mut cache, found.segments, &mut out);
        for stray in found.strays {
            out.engines.push(self.stray_entry(stray));
        }
        self.report_vanished(&mut cache, &seen, &mut out);
        drop(cache);
        out.engines.sort_by(|a, b| a.engine_id.cmp(&b.engine_id));
        self.stats.scrape();
        out.duration = started.elapsed();
        out
    }

    /// Reads every segment `found` (each engine's view and statistics) into `out`; returns
    /// the paths read.
    fn read_segments(
        &self,
        cache: &mut HashMap<PathBuf, CachedReader>,
        found: Vec<hydra_probe::Discovered>,
        out: &mut Collection,
    ) -> Vec<PathBuf> {
        let mut seen = Vec::with_capacity(found.len());
        for seg in found {
            let (view, stats) = match self.reader_locked(cache, &seg.path) {
                Ok(Some(reader)) => {
                    let view = self.capture(cache, &seg.path, &reader);
                    let stats = self.stats_of(&reader, view.is_ok());
                    (view, stats)
                }
                // Gone between the scan and the lstat: it closed; not an error.
                Ok(None) => continue,
                Err(e) => (Err(e), Vec::new()),
            };
            if let Err(e) = &view {
                self.stats.read_error(e.kind);
            }
            seen.push(seg.path.clone());
            out.engines.push(EngineEntry {
                engine_id: seg.engine_id,
                path: seg.path,
                view,
                vanished: false,
                stats,
            });
        }
        seen
    }

    /// The entry of a segment-named thing that is not a regular file, counted as an error.
    fn stray_entry(&self, stray: hydra_probe::Stray) -> EngineEntry {
        let err = ReadError {
            kind: ErrorKind::Segment(hydra_layout::ErrorKind::NotRegularFile),
            message: format!(
                "{} is not a regular file (it is a {})",
                stray.path.display(),
                stray.kind
            ),
        };
        self.stats.read_error(err.kind);
        EngineEntry {
            engine_id: stray.engine_id,
            path: stray.path,
            view: Err(err),
            vanished: false,
            stats: Vec::new(),
        }
    }

    /// Readers whose file left the directory (not in `seen`): a clean close is reported
    /// once into `out`, then each is forgotten.
    fn report_vanished(
        &self,
        cache: &mut HashMap<PathBuf, CachedReader>,
        seen: &[PathBuf],
        out: &mut Collection,
    ) {
        let gone: Vec<PathBuf> = cache
            .keys()
            .filter(|p| !seen.contains(p))
            .cloned()
            .collect();
        for path in gone {
            let Some(cached) = cache.remove(&path) else {
                continue;
            };
            if !matches!(cached.reader.lifecycle(), Ok(Lifecycle::Closed)) {
                continue;
            }
            let engine_id = cached.reader.identity().engine_id.clone();
            let now = clock::monotonic_ns();
            if let Ok(view) = EngineView::capture(&cached.reader, now, &self.thresholds) {
                self.count_slot_reads(&view);
                out.engines.push(EngineEntry {
                    engine_id,
                    path,
                    view: Ok(view),
                    vanished: true,
                    stats: self.stats_of(&cached.reader, true),
                });
            }
        }
    }

    /// Captures the engine whose segment is at `path` (through the reader cache), counting
    /// errors. `Ok(None)` when no file is there.
    pub fn capture_path(&self, path: &Path) -> Result<Option<EngineView>, ReadError> {
        let mut cache = self.lock_cache();
        let result = match self.reader_locked(&mut cache, path) {
            Ok(Some(reader)) => self.capture(&mut cache, path, &reader).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            self.stats.read_error(e.kind);
        }
        result
    }

    /// The cached reader for `path`, reopened if the file was replaced. `Ok(None)` when the
    /// path does not exist.
    fn reader_locked(
        &self,
        cache: &mut HashMap<PathBuf, CachedReader>,
        path: &Path,
    ) -> Result<Option<Arc<SegmentReader>>, ReadError> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                cache.remove(path);
                return Ok(None);
            }
            Err(e) => {
                cache.remove(path);
                return Err(ReadError {
                    kind: ErrorKind::Segment(hydra_layout::ErrorKind::Io),
                    message: format!("lstat {}: {e}", path.display()),
                });
            }
        };
        if let Some(c) = cache.get(path) {
            if c.dev == meta.dev() && c.ino == meta.ino() {
                return Ok(Some(c.reader.clone()));
            }
        }
        cache.remove(path);
        // Opening re-checks everything (type, owner, header) on the file it opens.
        let reader =
            SegmentReader::open(path).map_err(|e| ReadError::from_probe(&ProbeError::from(e)))?;
        let reader = Arc::new(reader);
        cache.insert(
            path.to_path_buf(),
            CachedReader {
                dev: meta.dev(),
                ino: meta.ino(),
                reader: reader.clone(),
            },
        );
        Ok(Some(reader))
    }

    /// `f` of the reader of the segment at `path` (through the reader cache); none when no
    /// file is there or it cannot be opened (a scrape counts those errors, not this).
    pub fn with_reader<T>(&self, path: &Path, f: impl FnOnce(&SegmentReader) -> T) -> Option<T> {
        let reader = self.reader_locked(&mut self.lock_cache(), path).ok()??;
        Some(f(&reader))
    }

    fn capture(
        &self,
        cache: &mut HashMap<PathBuf, CachedReader>,
        path: &Path,
        reader: &SegmentReader,
    ) -> Result<EngineView, ReadError> {
        match EngineView::capture(reader, clock::monotonic_ns(), &self.thresholds) {
            Ok(view) => {
                self.count_slot_reads(&view);
                Ok(view)
            }
            Err(e) => {
                // The file changed under us (size, lock): reopen it next time.
                cache.remove(path);
                Err(ReadError::from_probe(&e))
            }
        }
    }

    /// The statistics of the engine `reader` maps, summed or per slot; none unless `read`
    /// (its view was captured) and the writer keeps them. When a slot's copy fails (torn,
    /// or refused by the format's checks), its statistics are not exported at this scrape,
    /// and neither is a sum that would lack it: a gap, never a sum that goes backwards,
    /// which Prometheus would take for a counter reset.
    fn stats_of(&self, reader: &SegmentReader, read: bool) -> Vec<(Option<usize>, StatsSum)> {
        if !read {
            return Vec::new();
        }
        let asked: Vec<Option<usize>> = if self.per_slot_stats {
            (0..reader.slot_count()).map(Some).collect()
        } else {
            vec![None]
        };
        asked
            .into_iter()
            .filter_map(|slot| {
                let sum = StatsSum::capture(reader, slot).ok()?;
                (sum.published && sum.left_out.is_empty() && !sum.slots.is_empty())
                    .then_some((slot, sum))
            })
            .collect()
    }

    fn count_slot_reads(&self, view: &EngineView) {
        let mut torn = 0;
        let mut retries = 0;
        for s in &view.slots {
            if s.class == hydra_probe::SlotClass::Torn {
                torn += 1;
            }
            retries += u64::from(s.read_retries);
        }
        self.stats.slot_reads(torn, retries);
    }

    /// Number of readers currently cached (for tests and diagnostics).
    pub fn cached_readers(&self) -> usize {
        self.lock_cache().len()
    }
}
