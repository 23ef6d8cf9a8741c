//! The reader side: open a segment read-only, validate it, probe its writer's liveness and
//! take snapshots of the header and of slot records.
//!
//! # Mapping and SIGBUS policy
//! The file is mapped read-only (`MmapRaw`), so no write through the mapping is possible
//! (the pages are `PROT_READ`; a store would fault). Every length and offset read from the
//! file is validated against the file's real size before any word beyond the fixed v1
//! prefix is touched. Access beyond the end of a *shrunken* file would raise SIGBUS, so
//! every snapshot first re-checks the size with `fstat` and fails with
//! [`Error::SizeChanged`] if it moved. The remaining window (a truncation between that
//! check and the loads) needs write access to the file, which only its owner has (mode
//! 0640) and which the writer never uses to resize; segments are fixed-size by design.

use crate::device_waits::{self, DeviceWaits, WaitHistory};
use crate::devices::{self, DeviceTable, PublishedDevices};
use crate::error::{Error, Result};
use crate::flight::{self, History};
use crate::fsutil::{self, LockProbe};
use crate::header::{self as h, EngineDescription, Lifecycle, MAX_SLOTS};
use crate::peer_reads;
use crate::region::Regions;
use crate::seqlock::{self, MappedRecord, ReadFailure, ReadPolicy};
use crate::slot::{self, Phase, Prediction, SlotState, StepDevices, Substep};
use crate::stats::{self, SlotStats};
use crate::words::MappedWords;
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

/// Whose files a reader trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnerPolicy {
    /// The file must have the same owner as the directory that holds it (default).
    #[default]
    SameAsDirectory,
    /// The file must be owned by this uid.
    Uid(u32),
    /// Any owner.
    Any,
}

/// How to open a segment.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Whose files to trust.
    pub owner: OwnerPolicy,
    /// Retry budget of slot reads.
    pub read_policy: ReadPolicy,
}

/// Liveness of a segment's writer, from `flock(LOCK_SH|LOCK_NB)` on the reader's fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The writer holds its `LOCK_EX`: the engine process is alive.
    Live,
    /// The writer exited cleanly (lock free, state CLOSED).
    Closed,
    /// The lock is free but the segment was never closed: the writer died.
    Dead,
}

impl Liveness {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Closed => "closed",
            Self::Dead => "dead",
        }
    }
}

/// Immutable identity and description of the engine, read once at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Engine id.
    pub engine_id: String,
    /// Writer's pid.
    pub pid: u64,
    /// Writer's start time, ns since boot (0 if unknown).
    pub process_start_ns: u64,
    /// Boot id the writer ran under.
    pub boot_id: String,
    /// Random per-creation id.
    pub instance_id: u64,
    /// CLOCK_REALTIME at creation, ns.
    pub created_realtime_ns: u64,
    /// CLOCK_MONOTONIC at creation (same instant), ns.
    pub created_monotonic_ns: u64,
    /// Format major version.
    pub version_major: u64,
    /// Format minor version.
    pub version_minor: u64,
    /// Model and device strings and capability bits.
    pub description: EngineDescription,
}

impl Identity {
    /// Whether the writer publishes the layer position inside a step: format v1.1 or later
    /// and the `LAYER_PROGRESS` capability.
    pub fn publishes_substeps(&self) -> bool {
        self.version_minor >= slot::SUBSTEP_MINOR
            && self.description.capabilities & h::capabilities::LAYER_PROGRESS != 0
    }

    /// Whether the writer publishes its cost model's predictions: format v1.2 or later and
    /// the `STEP_PREDICTION` capability.
    pub fn publishes_predictions(&self) -> bool {
        self.version_minor >= slot::PREDICTION_MINOR
            && self.description.capabilities & h::capabilities::STEP_PREDICTION != 0
    }

    /// Whether the writer publishes the device a step waits on (`WAIT_DEVICE`,
    /// `WAIT_SINCE_NS`): format v1.3 or later and the `DEVICE_WAIT` capability.
    pub fn publishes_device_waits(&self) -> bool {
        self.has_v1_3(h::capabilities::DEVICE_WAIT)
    }

    /// Whether the writer publishes `LAYERS_SENT`: format v1.3 or later and the
    /// `LAYERS_SENT` capability.
    pub fn publishes_layers_sent(&self) -> bool {
        self.has_v1_3(h::capabilities::LAYERS_SENT)
    }

    /// Whether the writer publishes its device table and layer map: format v1.3 or later
    /// and the `DEVICES` capability.
    pub fn publishes_devices(&self) -> bool {
        self.has_v1_3(h::capabilities::DEVICES)
    }

    /// Whether the writer watches its RPC peers' reads (`DEV_UNREAD_SINCE_NS`): format v1.3
    /// or later with the `DEVICES` and `PEER_READS` capabilities.
    pub fn publishes_peer_reads(&self) -> bool {
        self.publishes_devices() && self.has_v1_3(h::capabilities::PEER_READS)
    }

    fn has_v1_3(&self, capability: u64) -> bool {
        self.version_minor >= slot::DEVICES_MINOR && self.description.capabilities & capability != 0
    }

    /// Converts a CLOCK_MONOTONIC timestamp of this boot to Unix-epoch ns using the anchors.
    pub fn to_realtime_ns(&self, monotonic_ns: u64) -> u64 {
        let offset = self.created_realtime_ns as i128 - self.created_monotonic_ns as i128;
        (monotonic_ns as i128 + offset).clamp(0, u64::MAX as i128) as u64
    }
}

/// Engine-wide counters as read from the header (each word individually atomic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Prompt tokens evaluated since start.
    pub prompt_tokens_total: u64,
    /// Tokens generated since start.
    pub generated_tokens_total: u64,
    /// Requests being processed.
    pub requests_running: u64,
    /// Requests queued.
    pub requests_waiting: u64,
    /// KV cells in use.
    pub kv_cells_used: u64,
    /// KV cells available.
    pub kv_cells_total: u64,
}

/// The mutable part of the header at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSnapshot {
    /// Lifecycle state.
    pub lifecycle: Lifecycle,
    /// Compute loop heartbeat, CLOCK_MONOTONIC ns.
    pub heartbeat_ns: u64,
    /// Compute loop passes.
    pub loop_iterations: u64,
    /// CLOCK_MONOTONIC ns of the clean close, 0 while open.
    pub closed_ns: u64,
    /// Engine-wide counters.
    pub counters: EngineCounters,
}

/// A consistent copy of one slot record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// The seqlock-guarded fields.
    pub state: SlotState,
    /// Tasks queued for the slot (outside the seqlock; read Relaxed).
    pub pending: u64,
    /// The layer position inside the step (format v1.1), read in the same consistent copy
    /// as `state`; None when the writer does not publish it (a v1.0 writer, or no
    /// `LAYER_PROGRESS` capability: unknown). Use
    /// [`SlotSnapshot::layer`] for the position of the step in flight.
    pub substep: Option<Substep>,
    /// The cost model's predictions (format v1.2), read in the same consistent copy as
    /// `state`; None when the writer does not publish them (an older minor, or no
    /// `STEP_PREDICTION` capability). Use [`SlotSnapshot::step_expected_ns`] and
    /// [`SlotSnapshot::phase_end_ns`] for the current step's and phase's.
    pub prediction: Option<Prediction>,
    /// The step in flight's device words (format v1.3), read in the same consistent copy
    /// as `state`; None when the writer publishes neither the wait nor the layers sent (an
    /// older minor, or neither `DEVICE_WAIT` nor `LAYERS_SENT`): both unknown. A word whose
    /// capability is missing reads 0 here. Use [`SlotSnapshot::wait`] and
    /// [`SlotSnapshot::layers_sent`] for the step in flight's.
    pub devices: Option<StepDevices>,
    /// Whether the writer publishes device waits: without it, no wait means unknown, not
    /// none.
    pub waits_published: bool,
    /// Sequence value of the copy (even).
    pub seq: u64,
    /// Failed attempts before the consistent one.
    pub retries: u32,
}

impl SlotSnapshot {
    /// The layer position inside the step in flight: none for a v1.0 writer, between
    /// steps, or while the published position belongs to an earlier step.
    pub fn layer(&self) -> Option<Substep> {
        self.substep.and_then(|s| s.in_step(&self.state))
    }

    /// The writer's predicted duration of the step in flight (v1.2), ns.
    pub fn step_expected_ns(&self) -> Option<u64> {
        self.prediction.and_then(|p| p.step_in_flight(&self.state))
    }

    /// When the writer predicts the current phase's work done (v1.2), CLOCK_MONOTONIC ns.
    pub fn phase_end_ns(&self) -> Option<u64> {
        self.prediction.and_then(|p| p.phase_end(&self.state))
    }

    /// The device the step in flight waits on now and since when, `(device id, since
    /// ns)` (v1.3): none between steps, without a wait, or when waits are not published.
    pub fn wait(&self) -> Option<(u64, u64)> {
        self.devices.and_then(|d| d.wait_in_step(&self.state))
    }

    /// Layers of the step in flight handed to their devices (v1.3); none when unknown or
    /// none were sent.
    pub fn layers_sent(&self) -> Option<u64> {
        self.devices.and_then(|d| d.sent_in_step(&self.state))
    }
}

/// The whole segment at one moment: header plus every slot (each slot may fail on its own,
/// e.g. torn by a writer that died mid-update).
#[derive(Debug)]
pub struct Snapshot {
    /// Header.
    pub header: HeaderSnapshot,
    /// One entry per slot.
    pub slots: Vec<Result<SlotSnapshot>>,
}

/// Validated geometry of an opened segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    len: u64,
    slot_offset: usize,
    slot_stride: usize,
    slot_count: usize,
}

/// A read-only view of one segment.
#[derive(Debug)]
pub struct SegmentReader {
    map: MmapRaw,
    words: MappedWords,
    file: File,
    path: PathBuf,
    geometry: Geometry,
    identity: Identity,
    policy: ReadPolicy,
    /// The regions found at open (v1.3).
    regions: Regions,
    /// Per slot, its ring's validated `(capacity, entry_len)`, read once at open (a
    /// hostile owner could change them later); `Err` says why the ring is unusable.
    rings: Rings,
}

impl SegmentReader {
    /// Opens and validates the segment at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Opens engine `id`'s segment in `dir`.
    pub fn open_engine(dir: &Path, id: &str) -> Result<Self> {
        crate::naming::validate_engine_id(id)?;
        Self::open(crate::naming::segment_path(dir, id))
    }

    /// Opens and validates the segment at `path`.
    ///
    /// Checks, in order: the directory is not a symlink; the file is not a symlink and is
    /// a regular file (opened `O_NONBLOCK` so a FIFO cannot hang us); its owner; then, on
    /// the mapping, magic, byte order, major version, header/slot lengths and alignment,
    /// that the slot table fits, that `TOTAL_LEN` equals the file size, and the lifecycle.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir_fd = fsutil::open_dir_nofollow(&dir)?;
        let Some(name) = path.file_name() else {
            return Err(Error::NotRegularFile {
                path,
                kind: "directory",
            });
        };
        let fd = open_entry(&dir_fd, name, &path)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("fstat", &path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::NotRegularFile {
                kind: fsutil::kind_name(&st),
                path,
            });
        }
        check_owner(st.st_uid, options.owner, &dir_fd, &dir, &path)?;
        let len = st.st_size.max(0) as u64;
        reaches(&path, len, h::MAGIC_OFFSET, "magic")?;
        let file = File::from(fd);
        let map_len = usize::try_from(len).map_err(|_| Error::BadGeometry {
            path: path.clone(),
            reason: format!("file of {len} bytes does not fit the address space"),
        })?;
        let map = MmapOptions::new()
            .len(map_len)
            .map_raw_read_only(&file)
            .map_err(|e| Error::io("mmap", &path, e))?;
        // Truncation by another process is guarded by the size checks of the SIGBUS policy
        // (module docs). SAFETY: `map` is a fresh page-aligned read-only mapping of
        // `map_len` bytes, stored in the returned reader next to every copy of `words`.
        let words = unsafe { MappedWords::new(map.as_ptr() as *mut u8, map_len, false) };
        check_prelude(&words, &path, len)?;
        let geometry = validate_geometry(&words, &path, len)?;
        // Acquire (Relaxed load + fence): pairs with the writer's Release store of READY,
        // after which identity and strings never change.
        let state = words.load(h::STATE_OFFSET);
        fence(Ordering::Acquire);
        match Lifecycle::from_raw(state) {
            Lifecycle::Ready | Lifecycle::Closed => {}
            Lifecycle::Init => return Err(Error::NotReady { path }),
            Lifecycle::Unknown(raw) => return Err(Error::BadState { path, raw }),
        }
        let identity = read_identity(&words);
        check_engine_id(name, &identity, &path)?;
        let (regions, rings) = find_regions(&words, &geometry, identity.version_minor, len);
        Ok(Self {
            identity,
            map,
            words,
            file,
            path,
            geometry,
            policy: options.read_policy,
            regions,
            rings,
        })
    }

    /// The regions after the slot table that the open found and validated (v1.3; none in
    /// an older segment), and why one was refused, if one was.
    pub fn regions(&self) -> &Regions {
        &self.regions
    }

    /// A consistent copy of slot `slot`'s statistics (v1.3, FORMAT §17.7), checked; `None`
    /// when the segment has none (an older segment, or a writer without `slot_stats`).
    /// A block left mid-update is [`Error::RegionTorn`]; one that fails the format's checks
    /// is [`Error::BadStats`].
    pub fn stats(&self, slot: usize) -> Result<Option<SlotStats>> {
        self.check_slot(slot)?;
        if !self.has_stats() {
            return Ok(None);
        }
        self.check_size()?;
        self.stats_unchecked(slot).map(Some)
    }

    /// [`stats`](Self::stats) of every slot, after one size check (an engine's statistics
    /// are read slot by slot; one `fstat` per slot was most of an exporter's scrape):
    /// entry `i` is slot `i`'s. `Ok(None)` when the segment has none.
    pub fn stats_all(&self) -> Result<Option<Vec<Result<SlotStats>>>> {
        if !self.has_stats() {
            return Ok(None);
        }
        self.check_size()?;
        Ok(Some(
            (0..self.geometry.slot_count)
                .map(|s| self.stats_unchecked(s))
                .collect(),
        ))
    }

    fn has_stats(&self) -> bool {
        self.regions.stats.is_some()
            && self.identity.description.capabilities & h::capabilities::SLOT_STATS != 0
    }

    /// Slot `slot`'s statistics (in range, in a segment that has them, its size checked).
    fn stats_unchecked(&self, slot: usize) -> Result<SlotStats> {
        let region = self.regions.stats.expect("checked by the caller");
        let caps = self.identity.description.capabilities;
        let block = MappedRecord {
            words: self.words,
            base: region.item(slot),
        };
        const REGION: &str = "statistics";
        match seqlock::read::<_, { stats::STATS_DATA_WORDS }>(&block, self.policy) {
            Ok(ok) => {
                let mut words = Vec::with_capacity(stats::STATS_DATA_WORDS + 1);
                words.push(ok.seq);
                words.extend_from_slice(&ok.words);
                let copy = SlotStats::from_block(words.into_boxed_slice(), caps);
                copy.check()
                    .map_err(|defect| Error::BadStats { slot, defect })?;
                Ok(copy)
            }
            Err(failure) => Err(region_failure(Some(slot), REGION, failure)),
        }
    }

    /// Slot `slot`'s flight recorder (v1.3, FORMAT §18.4): its last finished steps, oldest
    /// first, each one vouched for by its own sequence; `None` when the segment has none.
    /// Readable at any time, a dead writer's segment included.
    pub fn history(&self, slot: usize) -> Result<Option<History>> {
        self.check_slot(slot)?;
        let Some(region) = self.regions.flight else {
            return Ok(None);
        };
        if self.identity.description.capabilities & h::capabilities::FLIGHT_RECORDER == 0 {
            return Ok(None);
        }
        let (capacity, entry_len) = match &self.rings[slot] {
            Ok(geometry) => *geometry,
            Err(reason) => {
                return Err(Error::BadRing {
                    slot,
                    reason: reason.clone(),
                })
            }
        };
        self.check_size()?;
        Ok(Some(flight::read_ring(
            &self.words,
            region.item(slot),
            capacity,
            entry_len,
        )))
    }

    /// Path the segment was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.geometry.slot_count
    }

    /// File length in bytes.
    pub fn len(&self) -> u64 {
        self.geometry.len
    }

    /// Always false: a valid segment has at least a header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Identity and description, read once at open (immutable after READY).
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Lifecycle word (size-checked first): Relaxed load then `fence(Acquire)`; pairs with
    /// the writer's Release stores of READY and CLOSED.
    pub fn lifecycle(&self) -> Result<Lifecycle> {
        self.check_size()?;
        Ok(self.lifecycle_unchecked())
    }

    fn lifecycle_unchecked(&self) -> Lifecycle {
        let raw = self.words.load(h::STATE_OFFSET);
        fence(Ordering::Acquire);
        Lifecycle::from_raw(raw)
    }

    /// Whether the writer is alive: `flock(LOCK_SH|LOCK_NB)` fails with EWOULDBLOCK while the
    /// writer holds `LOCK_EX`. When we get the lock we release it at once.
    pub fn liveness(&self) -> Result<Liveness> {
        match fsutil::try_flock(
            &self.file,
            FlockOperation::NonBlockingLockShared,
            &self.path,
        )? {
            LockProbe::Held => Ok(Liveness::Live),
            LockProbe::Acquired => {
                let _ = rustix::fs::flock(&self.file, FlockOperation::Unlock);
                Ok(match self.lifecycle()? {
                    Lifecycle::Closed => Liveness::Closed,
                    _ => Liveness::Dead,
                })
            }
        }
    }

    /// Fails with [`Error::SizeChanged`] if the file no longer has the size it had at open
    /// (see the SIGBUS policy in the module docs).
    pub fn check_size(&self) -> Result<()> {
        let st = rustix::fs::fstat(&self.file).map_err(|e| Error::io("fstat", &self.path, e))?;
        let now = st.st_size.max(0) as u64;
        if now != self.geometry.len {
            return Err(Error::SizeChanged {
                path: self.path.clone(),
                was: self.geometry.len,
                now,
            });
        }
        Ok(())
    }

    /// Reads the header's mutable words (size-checked first). Lifecycle is an Acquire read;
    /// the other words are independent Relaxed loads.
    pub fn header(&self) -> Result<HeaderSnapshot> {
        self.check_size()?;
        Ok(self.header_unchecked())
    }

    fn header_unchecked(&self) -> HeaderSnapshot {
        let w = &self.words;
        let lifecycle = self.lifecycle_unchecked();
        HeaderSnapshot {
            lifecycle,
            heartbeat_ns: w.load(h::HEARTBEAT_NS_OFFSET),
            loop_iterations: w.load(h::LOOP_ITERATIONS_OFFSET),
            closed_ns: w.load(h::CLOSED_NS_OFFSET),
            counters: EngineCounters {
                prompt_tokens_total: w.load(h::PROMPT_TOKENS_TOTAL_OFFSET),
                generated_tokens_total: w.load(h::GENERATED_TOKENS_TOTAL_OFFSET),
                requests_running: w.load(h::REQUESTS_RUNNING_OFFSET),
                requests_waiting: w.load(h::REQUESTS_WAITING_OFFSET),
                kv_cells_used: w.load(h::KV_CELLS_USED_OFFSET),
                kv_cells_total: w.load(h::KV_CELLS_TOTAL_OFFSET),
            },
        }
    }

    /// A consistent copy of slot `slot` (seqlock read with bounded retries; size-checked).
    pub fn slot(&self, slot: usize) -> Result<SlotSnapshot> {
        self.check_slot(slot)?;
        self.check_size()?;
        self.slot_unchecked(slot)
    }

    fn check_slot(&self, slot: usize) -> Result<()> {
        if slot >= self.geometry.slot_count {
            return Err(Error::SlotOutOfRange {
                slot,
                count: self.geometry.slot_count,
            });
        }
        Ok(())
    }

    fn slot_unchecked(&self, slot: usize) -> Result<SlotSnapshot> {
        let record = MappedRecord {
            words: self.words,
            base: self.geometry.slot_offset + slot * self.geometry.slot_stride,
        };
        let pending = || self.words.load(record.base + slot::PENDING_OFFSET);
        let substeps = self.identity.publishes_substeps();
        let waits = self.identity.publishes_device_waits();
        let snapshot = |words: &[u64], seq: u64, retries: u32, prediction, devices| {
            let v10: &[u64; slot::DATA_WORDS] = words[..slot::DATA_WORDS]
                .try_into()
                .expect("every copy holds the v1.0 words");
            let substep = (substeps && words.len() >= slot::DATA_WORDS_V1_1).then(|| {
                Substep::from_words(
                    words[slot::DATA_WORDS..slot::DATA_WORDS_V1_1]
                        .try_into()
                        .expect("the substep words follow"),
                )
            });
            SlotSnapshot {
                state: SlotState::from_words(v10),
                pending: pending(),
                substep,
                prediction,
                devices,
                waits_published: waits,
                seq,
                retries,
            }
        };
        if waits || self.identity.publishes_layers_sent() {
            // v1.3: one copy from TASK_ID to the end of the record.
            return match seqlock::read::<_, { slot::DATA_WORDS_V1_3 }>(&record, self.policy) {
                Ok(ok) => {
                    let (prediction, devices) = self.split_v1_3(&ok.words);
                    Ok(snapshot(
                        &ok.words,
                        ok.seq,
                        ok.retries,
                        prediction,
                        Some(devices),
                    ))
                }
                Err(e) => Err(read_failure(slot, e)),
            };
        }
        if self.identity.publishes_predictions() {
            // v1.2: one copy from TASK_ID to the end of the prediction words (the copy of
            // PENDING inside it is ignored: PENDING is not guarded).
            return match seqlock::read::<_, { slot::DATA_WORDS_V1_2 }>(&record, self.policy) {
                Ok(ok) => {
                    let prediction = split_prediction(&ok.words);
                    Ok(snapshot(
                        &ok.words,
                        ok.seq,
                        ok.retries,
                        Some(prediction),
                        None,
                    ))
                }
                Err(e) => Err(read_failure(slot, e)),
            };
        }
        if !substeps {
            // A v1.0 writer, or one that does not publish layer positions: the words mean
            // nothing and the position is unknown.
            return match seqlock::read::<_, { slot::DATA_WORDS }>(&record, self.policy) {
                Ok(ok) => Ok(snapshot(&ok.words, ok.seq, ok.retries, None, None)),
                Err(e) => Err(read_failure(slot, e)),
            };
        }
        match seqlock::read::<_, { slot::DATA_WORDS_V1_1 }>(&record, self.policy) {
            Ok(ok) => Ok(snapshot(&ok.words, ok.seq, ok.retries, None, None)),
            Err(e) => Err(read_failure(slot, e)),
        }
    }

    /// The prediction (when published) and the device words of one v1.3 copy, a word
    /// whose capability the writer lacks read as 0.
    fn split_v1_3(
        &self,
        words: &[u64; slot::DATA_WORDS_V1_3],
    ) -> (Option<Prediction>, StepDevices) {
        let v1_2: &[u64; slot::DATA_WORDS_V1_2] = words[..slot::DATA_WORDS_V1_2]
            .try_into()
            .expect("a v1.3 copy holds the v1.2 words");
        let prediction = self
            .identity
            .publishes_predictions()
            .then(|| split_prediction(v1_2));
        let mut d = StepDevices::from_words(
            words[slot::DATA_WORDS_V1_2..]
                .try_into()
                .expect("the device words end the copy"),
        );
        if !self.identity.publishes_layers_sent() {
            d.layers_sent = 0;
        }
        if !self.identity.publishes_device_waits() {
            d.wait_device = 0;
            d.wait_since_ns = 0;
        }
        (prediction, d)
    }

    /// The engine's devices and layer map (v1.3, FORMAT §19.4): one consistent copy of the
    /// devices item. [`DeviceTable::Absent`] when the segment has none,
    /// [`DeviceTable::NotYetKnown`] before the writer's first publication. An item left
    /// mid-update is [`Error::RegionTorn`].
    pub fn devices(&self) -> Result<DeviceTable> {
        let Some(region) = self.regions.devices else {
            return Ok(DeviceTable::Absent);
        };
        if !self.identity.publishes_devices() {
            return Ok(DeviceTable::Absent);
        }
        self.check_size()?;
        let item = MappedRecord {
            words: self.words,
            base: region.item(0),
        };
        const REGION: &str = "device table";
        match seqlock::read::<_, { devices::DATA_WORDS }>(&item, self.policy) {
            Ok(ok) if ok.seq == 0 => Ok(DeviceTable::NotYetKnown),
            Ok(ok) => Ok(DeviceTable::Known(PublishedDevices::from_words(
                &ok.words, ok.seq,
            ))),
            Err(failure) => Err(region_failure(None, REGION, failure)),
        }
    }

    /// The wait histories of the engine's devices (v1.3, FORMAT §19.6), entry `j` for
    /// device id `j + 1`, all 16 entries (those past `DEVICE_COUNT` are zero); empty when
    /// the segment publishes no devices. Each word is one Relaxed load: no seqlock, as
    /// each is a value of its own.
    pub fn device_waits(&self) -> Result<Vec<DeviceWaits>> {
        let Some(base) = self.device_words(self.identity.publishes_devices())? else {
            return Ok(Vec::new());
        };
        let history = |id: u64, phase: Phase| {
            let at = device_waits::word_offsets(id, phase).expect("id 1..=16");
            WaitHistory {
                steps: self.words.load(base + at.steps),
                recent_max_ns: self.words.load(base + at.max_ns),
            }
        };
        Ok((1..=devices::MAX_DEVICES as u64)
            .map(|id| DeviceWaits {
                prefill: history(id, Phase::Prefill),
                decode: history(id, Phase::Decode),
            })
            .collect())
    }

    /// Per device, since when that RPC peer has read nothing of what the engine queued to
    /// it (v1.3, FORMAT §19.7): entry `j` for device id `j + 1`, all 16 entries, each
    /// `CLOCK_MONOTONIC` ns or 0 (keeping up, no peer, or nothing known yet). Empty when
    /// the writer does not watch its peers. Each word is one Relaxed load, outside the
    /// seqlock, like the wait histories.
    pub fn peers_unread_since(&self) -> Result<Vec<u64>> {
        let Some(base) = self.device_words(self.identity.publishes_peer_reads())? else {
            return Ok(Vec::new());
        };
        Ok((1..=devices::MAX_DEVICES as u64)
            .map(|id| {
                let at = peer_reads::word_offset(id).expect("id 1..=16");
                self.words.load(base + at)
            })
            .collect())
    }

    /// Where the devices item's words start, for the words read outside its seqlock (the
    /// wait histories, the peers' reads), after a size check; none when the segment has no
    /// devices region or the writer does not publish what is asked (`published`).
    fn device_words(&self, published: bool) -> Result<Option<usize>> {
        let Some(region) = self.regions.devices.filter(|_| published) else {
            return Ok(None);
        };
        self.check_size()?;
        Ok(Some(region.item(0)))
    }

    /// Header plus every slot, after one size check.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.check_size()?;
        Ok(Snapshot {
            header: self.header_unchecked(),
            slots: (0..self.geometry.slot_count)
                .map(|i| self.slot_unchecked(i))
                .collect(),
        })
    }

    /// The mapping's base address, for tests that prove the mapping is read-only.
    #[doc(hidden)]
    pub fn mapping_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }
}

/// The prediction words out of one v1.2 copy (`TASK_ID` .. `PREDICTION_END`).
fn split_prediction(words: &[u64; slot::DATA_WORDS_V1_2]) -> Prediction {
    let step_expected = words[slot::data_index(slot::STEP_EXPECTED_NS_OFFSET)];
    let tail: &[u64; slot::PREDICTION_TAIL_WORDS] = words
        [slot::data_index(slot::EXPECTED_STEP_OFFSET)..]
        .try_into()
        .expect("the prediction tail ends the copy");
    Prediction::from_words(step_expected, tail)
}

/// The regions after the slot table (v1.3) of a segment whose geometry passed, and each
/// slot's ring geometry, validated once at open (a hostile owner could change the fixed
/// words later); `Err` says why a ring is unusable.
type Rings = Vec<std::result::Result<(usize, usize), String>>;

fn find_regions(words: &MappedWords, g: &Geometry, minor: u64, len: u64) -> (Regions, Rings) {
    let slot_end = g.slot_offset as u64 + g.slot_count as u64 * g.slot_stride as u64;
    let regions = Regions::find(words, minor, slot_end, g.slot_count as u64, len);
    let rings = match regions.flight {
        Some(region) => (0..g.slot_count)
            .map(|i| {
                flight::ring_geometry(words, region.item(i), region.stride).ok_or_else(|| {
                    format!(
                        "bad ring: capacity {}, entry length {} in a {}-byte item",
                        words.load(region.item(i) + flight::FR_CAPACITY_OFFSET),
                        words.load(region.item(i) + flight::FR_ENTRY_LEN_OFFSET),
                        region.stride
                    )
                })
            })
            .collect(),
        None => Vec::new(),
    };
    (regions, rings)
}

/// A failed bounded read of a region's item (of `slot`, or the engine's one) as the
/// reader's error.
fn region_failure<const N: usize>(
    slot: Option<usize>,
    region: &'static str,
    failure: ReadFailure<N>,
) -> Error {
    match failure {
        ReadFailure::Torn { seq, .. } => Error::RegionTorn { slot, region, seq },
        ReadFailure::Contended { attempts } => Error::RegionContended {
            slot,
            region,
            attempts,
        },
    }
}

/// A failed bounded read as the reader's error; a torn copy keeps its best-effort v1.0
/// words (the last known progress of a writer that died mid-update).
fn read_failure<const N: usize>(slot: usize, failure: ReadFailure<N>) -> Error {
    match failure {
        ReadFailure::Torn { seq, words } => {
            let mut v10 = [0u64; slot::DATA_WORDS];
            v10.copy_from_slice(&words[..slot::DATA_WORDS]);
            Error::Torn {
                slot,
                seq,
                last: Box::new(SlotState::from_words(&v10)),
            }
        }
        ReadFailure::Contended { attempts } => Error::Contended { slot, attempts },
    }
}

/// Opens the entry `name` of the directory `dir_fd` for reading, without following a link
/// and without blocking on a FIFO.
fn open_entry(dir_fd: &OwnedFd, name: &std::ffi::OsStr, path: &Path) -> Result<OwnedFd> {
    match rustix::fs::openat(
        dir_fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(Error::SymlinkFile {
            path: path.to_path_buf(),
        }),
        // Some special files cannot be opened at all (a Unix socket gives ENXIO, a device
        // without a driver ENODEV): name what the entry is rather than the errno, when it
        // can be told without following a link.
        Err(e) => Err(
            match rustix::fs::statat(dir_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                    Error::NotRegularFile {
                        kind: fsutil::kind_name(&st),
                        path: path.to_path_buf(),
                    }
                }
                _ => Error::io("open", path, e),
            },
        ),
    }
}

/// Refuses a file owned by `uid` when `policy` expects another owner.
fn check_owner(
    uid: u32,
    policy: OwnerPolicy,
    dir_fd: &OwnedFd,
    dir: &Path,
    path: &Path,
) -> Result<()> {
    let expected = match policy {
        OwnerPolicy::Any => return Ok(()),
        OwnerPolicy::Uid(uid) => uid,
        OwnerPolicy::SameAsDirectory => {
            rustix::fs::fstat(dir_fd)
                .map_err(|e| Error::io("fstat directory", dir, e))?
                .st_uid
        }
    };
    if uid != expected {
        return Err(Error::WrongOwner {
            path: path.to_path_buf(),
            owner: uid,
            expected,
        });
    }
    Ok(())
}

/// A file of `len` bytes must reach the end of the header word at `offset` before that
/// word is read.
fn reaches(path: &Path, len: u64, offset: usize, what: &'static str) -> Result<()> {
    let needed = (offset + h::WORD_LEN) as u64;
    if len < needed {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            len,
            needed,
            what,
        });
    }
    Ok(())
}

/// The words every reader checks first, each only once the file reaches it: magic, byte
/// order, major version, and a whole v1 header.
fn check_prelude(words: &MappedWords, path: &Path, len: u64) -> Result<()> {
    let path_buf = || path.to_path_buf();
    let magic = words.load(h::MAGIC_OFFSET).to_ne_bytes();
    if magic != h::MAGIC {
        return Err(Error::BadMagic {
            path: path_buf(),
            found: magic,
        });
    }
    reaches(path, len, h::BYTE_ORDER_OFFSET, "byte-order marker")?;
    match words.load(h::BYTE_ORDER_OFFSET) {
        h::BYTE_ORDER_MARK => {}
        h::BYTE_ORDER_MARK_SWAPPED => return Err(Error::ForeignByteOrder { path: path_buf() }),
        found => {
            return Err(Error::BadByteOrderMark {
                path: path_buf(),
                found,
            })
        }
    }
    reaches(path, len, h::VERSION_MAJOR_OFFSET, "major version")?;
    let major = words.load(h::VERSION_MAJOR_OFFSET);
    if major != h::VERSION_MAJOR {
        return Err(Error::UnsupportedMajor {
            path: path_buf(),
            found: major,
            supported: h::VERSION_MAJOR,
        });
    }
    let needed = h::HEADER_LEN as u64;
    if len < needed {
        return Err(Error::Truncated {
            path: path_buf(),
            len,
            needed,
            what: "v1 header",
        });
    }
    Ok(())
}

/// §2.2: a file named `<id>.hps` must carry `<id>` in its header; a segment renamed,
/// copied or planted under another engine's name is refused, not reported as that engine.
/// Other names (a path given by hand) are not engine names: nothing to check.
fn check_engine_id(name: &std::ffi::OsStr, identity: &Identity, path: &Path) -> Result<()> {
    if let Some(file_id) = name.to_str().and_then(crate::naming::engine_id_of) {
        if identity.engine_id != file_id {
            return Err(Error::EngineIdMismatch {
                file_id: file_id.to_owned(),
                header_id: identity.engine_id.clone(),
                path: path.to_path_buf(),
            });
        }
    }
    Ok(())
}

fn validate_geometry(w: &MappedWords, path: &Path, len: u64) -> Result<Geometry> {
    let bad = |reason: String| Error::BadGeometry {
        path: path.to_path_buf(),
        reason,
    };
    let header_len = w.load(h::HEADER_LEN_OFFSET);
    let slot_offset = w.load(h::SLOT_OFFSET_OFFSET);
    let slot_stride = w.load(h::SLOT_STRIDE_OFFSET);
    let slot_count = w.load(h::SLOT_COUNT_OFFSET);
    let total_len = w.load(h::TOTAL_LEN_OFFSET);
    if header_len < h::HEADER_LEN as u64 {
        return Err(bad(format!(
            "header length {header_len} is shorter than the {} bytes of v1",
            h::HEADER_LEN
        )));
    }
    if header_len % 8 != 0 {
        return Err(bad(format!(
            "header length {header_len} is not a multiple of 8"
        )));
    }
    if header_len > len {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            len,
            needed: header_len,
            what: "declared header",
        });
    }
    if slot_stride < slot::SLOT_LEN as u64 || slot_stride % slot::SLOT_ALIGN as u64 != 0 {
        return Err(bad(format!(
            "slot stride {slot_stride} is not a multiple of {} of at least {}",
            slot::SLOT_ALIGN,
            slot::SLOT_LEN
        )));
    }
    if slot_offset < header_len || slot_offset % slot::SLOT_ALIGN as u64 != 0 {
        return Err(bad(format!(
            "slot offset {slot_offset} is not {}-aligned at or after the header (length {header_len})",
            slot::SLOT_ALIGN
        )));
    }
    if slot_count == 0 || slot_count > MAX_SLOTS as u64 {
        return Err(bad(format!(
            "slot count {slot_count} is not in 1..={MAX_SLOTS}"
        )));
    }
    let end = u128::from(slot_offset) + u128::from(slot_count) * u128::from(slot_stride);
    if end > u128::from(len) {
        return Err(Error::SlotTableOutOfBounds {
            path: path.to_path_buf(),
            end,
            len,
        });
    }
    if total_len != len {
        return Err(Error::SizeMismatch {
            path: path.to_path_buf(),
            declared: total_len,
            actual: len,
        });
    }
    Ok(Geometry {
        len,
        // All three fit in usize: they are bounded by `len`, which was mapped.
        slot_offset: slot_offset as usize,
        slot_stride: slot_stride as usize,
        slot_count: slot_count as usize,
    })
}

fn read_identity(w: &MappedWords) -> Identity {
    Identity {
        engine_id: w.read_str(h::ENGINE_ID_OFFSET, h::ENGINE_ID_LEN),
        pid: w.load(h::PID_OFFSET),
        process_start_ns: w.load(h::PROCESS_START_NS_OFFSET),
        boot_id: w.read_str(h::BOOT_ID_OFFSET, h::BOOT_ID_LEN),
        instance_id: w.load(h::INSTANCE_ID_OFFSET),
        created_realtime_ns: w.load(h::CREATED_REALTIME_NS_OFFSET),
        created_monotonic_ns: w.load(h::CREATED_MONOTONIC_NS_OFFSET),
        version_major: w.load(h::VERSION_MAJOR_OFFSET),
        version_minor: w.load(h::VERSION_MINOR_OFFSET),
        description: EngineDescription {
            model_name: w.read_str(h::MODEL_NAME_OFFSET, h::MODEL_NAME_LEN),
            model_quant: w.read_str(h::MODEL_QUANT_OFFSET, h::MODEL_QUANT_LEN),
            model_path: w.read_str(h::MODEL_PATH_OFFSET, h::MODEL_PATH_LEN),
            tokenizer: w.read_str(h::TOKENIZER_OFFSET, h::TOKENIZER_LEN),
            model_alias: w.read_str(h::MODEL_ALIAS_OFFSET, h::MODEL_ALIAS_LEN),
            device: w.read_str(h::DEVICE_OFFSET, h::DEVICE_LEN),
            capabilities: w.load(h::MODEL_CAPABILITIES_OFFSET),
        },
    }
}
