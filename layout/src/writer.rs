//! The writer side: create a segment safely, publish slot records, heartbeat, close.
//!
//! A segment has exactly one writer, the engine's compute thread: every method that
//! writes a seqlock-guarded or single-writer word takes `&mut self`. Other threads may
//! change only the per-slot pending counts and the waiting-requests gauge, through a
//! [`PendingCounter`] (atomic read-modify-write, any thread), and the substep words (the
//! layer position inside a step, v1.1), through a [`SubstepPublisher`]: a CUDA host
//! callback runs on a driver thread. Each slot's seqlock updates are serialised by a lock
//! in the writer's own memory (`seqlock::WriterGuard`), so the two never overlap.

use crate::clock;
use crate::device_waits::WaitLearner;
use crate::devices::Devices;
use crate::directory::{self, SegmentDir};
use crate::error::{Error, Result};
use crate::flight;
use crate::header::{self as h, EngineDescription, MAX_SLOTS};
use crate::naming;
use crate::primitive::Ordering;
use crate::region::Layout;
use crate::seqlock::{MappedRecord, WriterGuard};
use crate::slot::{self, FinishCause, Prediction, SlotState, StepDevices, Substep};
use crate::stats::recorder::{EndedWait, Place, SlotRecorder};
use crate::words::MappedWords;
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{AtFlags, FallocateFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// File mode of a segment: owner read-write, group read (e.g. the exporter), others nothing.
pub const SEGMENT_MODE: u32 = 0o640;

/// What to create.
#[derive(Debug, Clone)]
pub struct SegmentConfig {
    /// Directory to publish in (see [`naming::resolve_dir`]).
    pub dir: PathBuf,
    /// Engine id; names the file.
    pub engine_id: String,
    /// Number of slot records.
    pub slot_count: usize,
    /// Immutable description strings.
    pub description: EngineDescription,
}

/// Engine-wide counters the compute thread publishes with [`SegmentWriter::set_counters`].
/// Each word is stored individually (Relaxed); they are not a consistent group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterCounters {
    /// Prompt tokens evaluated since start.
    pub prompt_tokens_total: u64,
    /// Tokens generated since start.
    pub generated_tokens_total: u64,
    /// Requests being processed now.
    pub requests_running: u64,
    /// KV cells in use across slots.
    pub kv_cells_used: u64,
    /// KV cells available across slots.
    pub kv_cells_total: u64,
}

struct Mapping {
    // Field order matters for drop: the map is unmapped before the fd (and its lock) closes.
    // Never read directly: `words` points into it, so it must live as long as `words`.
    _map: MmapRaw,
    words: MappedWords,
    file: File,
    slot_count: usize,
    /// Where the regions are (v1.3).
    layout: Layout,
    /// One per slot: serialises the slot's seqlock updates across the writer's threads.
    guards: Box<[WriterGuard]>,
    /// The capability bits written in the header (immutable).
    capabilities: u64,
    /// The devices item's seqlock (v1.3).
    devices_guard: WriterGuard,
}

impl Mapping {
    /// The slot's statistics and flight recorder items.
    fn place(&self, slot: usize) -> Place {
        Place {
            stats: self.layout.stats.item(slot),
            ring: self.layout.flight.item(slot),
        }
    }

    /// The slot's substep words as last published, read under its writer lock (a layer
    /// callback on another thread publishes them).
    fn substep(&self, slot: usize) -> Substep {
        let record = self.record(slot);
        let read = || {
            let mut w = [0u64; slot::SUBSTEP_WORDS];
            for (i, word) in w.iter_mut().enumerate() {
                *word = self
                    .words
                    .load(record.base + slot::SUBSTEP_DONE_OFFSET + i * 8);
            }
            Substep::from_words(&w)
        };
        match self.guards.get(slot) {
            Some(guard) => guard.hold(read),
            None => Substep::default(),
        }
    }

    fn record(&self, slot: usize) -> MappedRecord {
        MappedRecord {
            words: self.words,
            base: h::HEADER_LEN + slot * slot::SLOT_STRIDE,
        }
    }

    /// The slot's record and guard, or the out-of-range error.
    #[inline]
    fn slot(&self, slot: usize) -> Result<(MappedRecord, &WriterGuard)> {
        match self.guards.get(slot) {
            Some(guard) => Ok((self.record(slot), guard)),
            None => Err(Error::SlotOutOfRange {
                slot,
                count: self.slot_count,
            }),
        }
    }

    #[inline]
    fn publish_substep(&self, slot: usize, substep: &Substep) -> Result<()> {
        let (record, guard) = self.slot(slot)?;
        guard.update(&record, slot::SUBSTEP_DONE_OFFSET, &substep.to_words());
        Ok(())
    }

    /// One update of the prediction words, with the record's v1.0 words when `state` is
    /// given: `STEP_EXPECTED_NS` (before `PENDING`) and the words after `PENDING`, never
    /// `PENDING` itself nor the substep words; the step's device words cleared too when
    /// `state` crosses a step boundary (`cleared`, FORMAT §5.6).
    #[inline]
    fn publish_parts(
        &self,
        slot: usize,
        state: Option<(&SlotState, bool)>,
        prediction: &Prediction,
    ) -> Result<()> {
        let (record, guard) = self.slot(slot)?;
        let expected = [prediction.step_expected_ns];
        let tail = prediction.tail_words();
        let prediction_parts = [
            (slot::STEP_EXPECTED_NS_OFFSET, &expected[..]),
            (slot::EXPECTED_STEP_OFFSET, &tail[..]),
        ];
        match state {
            Some((state, cleared)) => {
                let w = state.to_words();
                let parts = [
                    (slot::TASK_ID_OFFSET, &w[..]),
                    prediction_parts[0],
                    prediction_parts[1],
                    (slot::LAYERS_SENT_OFFSET, &NO_STEP_DEVICES[..]),
                ];
                guard.update_parts(&record, &parts[..if cleared { 4 } else { 3 }]);
            }
            None => guard.update_parts(&record, &prediction_parts),
        }
        Ok(())
    }

    /// One update of the record's v1.0 words, with the step's device words cleared when
    /// `cleared` (a step boundary, FORMAT §5.6).
    #[inline]
    fn publish_state(&self, slot: usize, state: &SlotState, cleared: bool) -> Result<()> {
        let (record, guard) = self.slot(slot)?;
        let w = state.to_words();
        if cleared {
            guard.update_parts(
                &record,
                &[
                    (slot::TASK_ID_OFFSET, &w[..]),
                    (slot::LAYERS_SENT_OFFSET, &NO_STEP_DEVICES[..]),
                ],
            );
        } else {
            guard.update(&record, slot::TASK_ID_OFFSET, &w);
        }
        Ok(())
    }
}

/// The step device words of a record between steps: nothing sent, no wait.
const NO_STEP_DEVICES: [u64; slot::DEVICE_WORDS] = [0; slot::DEVICE_WORDS];

/// Publishes the layer position inside a slot's step in flight (the substep words, format
/// v1.1) from any thread of the writer process: the thread that sees a layer finish, such
/// as a CUDA host callback. See [`SegmentWriter::substep_publisher`]. Each call is one
/// seqlock update of the substep words only, serialised with the compute thread's updates
/// of the same slot; the rest of the record is left as it is.
#[derive(Clone)]
pub struct SubstepPublisher {
    mapping: Arc<Mapping>,
}

impl SubstepPublisher {
    /// Publishes `substep` for `slot` (never blocks on readers; waits only for another
    /// update of the same slot in this process, which takes tens of ns).
    #[inline]
    pub fn publish(&self, slot: usize, substep: &Substep) -> Result<()> {
        self.mapping.publish_substep(slot, substep)
    }
}

impl std::fmt::Debug for SubstepPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubstepPublisher")
            .field("slot_count", &self.mapping.slot_count)
            .finish()
    }
}

/// Adds and removes pending (queued) tasks per slot from any thread; see
/// [`SegmentWriter::pending_counter`]. Keeps the header's waiting-requests gauge in step.
#[derive(Clone)]
pub struct PendingCounter {
    mapping: Arc<Mapping>,
}

impl PendingCounter {
    /// A task for `slot` was queued. Out-of-range slots are ignored (returns false).
    pub fn queued(&self, slot: usize) -> bool {
        self.adjust(slot, MappedWords::fetch_add)
    }

    /// A task for `slot` left the queue (taken by the compute thread, or dropped).
    /// Never goes below zero. Out-of-range slots are ignored (returns false).
    pub fn dequeued(&self, slot: usize) -> bool {
        self.adjust(slot, MappedWords::saturating_sub)
    }

    /// Applies `op` (add or saturating subtract) by one to `slot`'s pending count and to
    /// the waiting-requests gauge; false for an out-of-range slot.
    fn adjust(&self, slot: usize, op: fn(&MappedWords, usize, u64, Ordering) -> u64) -> bool {
        if slot >= self.mapping.slot_count {
            return false;
        }
        let base = h::HEADER_LEN + slot * slot::SLOT_STRIDE;
        let words = &self.mapping.words;
        // Relaxed: these are counters for display; nothing is published through them.
        op(words, base + slot::PENDING_OFFSET, 1, Ordering::Relaxed);
        op(words, h::REQUESTS_WAITING_OFFSET, 1, Ordering::Relaxed);
        true
    }
}

impl std::fmt::Debug for PendingCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCounter")
            .field("slot_count", &self.mapping.slot_count)
            .finish()
    }
}

/// The single writer of one segment. Holds `flock(LOCK_EX)` on it for its whole life;
/// marks it CLOSED and unlinks it on [`close`](Self::close) or drop.
pub struct SegmentWriter {
    mapping: Arc<Mapping>,
    /// One per slot: what the statistics and the flight recorder derive from (v1.3).
    recorders: Box<[SlotRecorder]>,
    /// How long the slots' waits on each device last (v1.3, FORMAT §19.6).
    wait_learner: Box<WaitLearner>,
    dir: SegmentDir,
    file_name: String,
    path: PathBuf,
    loop_iterations: u64,
    instance_id: u64,
    closed: bool,
}

impl std::fmt::Debug for SegmentWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentWriter")
            .field("path", &self.path)
            .field("slot_count", &self.mapping.slot_count)
            .field("instance_id", &self.instance_id)
            .finish()
    }
}

/// Total file length of the segment this crate writes with `slot_count` slots: header,
/// slot table, region directory and regions (v1.3, FORMAT §16.3).
pub fn segment_len(slot_count: usize) -> usize {
    Layout::for_slots(slot_count).total_len
}

impl SegmentWriter {
    /// Creates the segment `<dir>/<engine_id>.hps` and returns its writer.
    ///
    /// Steps: check the id and slot count; open the directory (created 0750 if missing)
    /// refusing a symlink, another owner or world-write; lock the directory against
    /// concurrent creators; refuse if a live engine holds the id (its `LOCK_EX` is held),
    /// otherwise the dead or closed file will be replaced; create a temporary with
    /// `O_CREAT|O_EXCL|O_NOFOLLOW`, `fchmod` 0640 (whatever the umask), lock it
    /// `LOCK_EX`, allocate it once (`fallocate`, so a full tmpfs is an error, not a later
    /// SIGBUS), touch every page, write the header and strings, store READY last with
    /// Release, and rename it into place (so the final name never shows a half-built or
    /// INIT segment).
    pub fn create(config: &SegmentConfig) -> Result<Self> {
        naming::validate_engine_id(&config.engine_id)?;
        if config.slot_count == 0 || config.slot_count > MAX_SLOTS {
            return Err(Error::SlotCountOutOfRange {
                count: config.slot_count,
                max: MAX_SLOTS,
            });
        }
        let dir = SegmentDir::open_for_writer(&config.dir)?;
        // Serialise creators in this directory so two engines starting with the same id
        // cannot both decide the old segment is dead and both rename over it (the
        // directory protocol, `crate::directory`). Released when `dir` closes on failure,
        // or explicitly once the writer exists.
        dir.lock()?;
        let writer = Self::create_locked(config, dir)?;
        writer.dir.unlock();
        Ok(writer)
    }

    fn create_locked(config: &SegmentConfig, dir: SegmentDir) -> Result<Self> {
        let file_name = naming::file_name(&config.engine_id);
        let path = dir.path().join(&file_name);
        dir.refuse_if_live(&config.engine_id)?;

        let pid = std::process::id();
        let instance_id = clock::random_u64();
        let tmp_name = directory::temporary_name(&config.engine_id, pid, instance_id);
        let tmp_path = dir.path().join(&tmp_name);
        let fd = rustix::fs::openat(
            dir.fd(),
            tmp_name.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(SEGMENT_MODE),
        )
        .map_err(|e| Error::io("create", &tmp_path, e))?;
        let built = Self::build(config, &tmp_path, fd, pid, instance_id);
        let mapping = match built {
            Ok(m) => m,
            Err(e) => {
                let _ = rustix::fs::unlinkat(dir.fd(), tmp_name.as_str(), AtFlags::empty());
                return Err(e);
            }
        };
        // READY is the last header store. It is made before the rename, so a reader never
        // finds the final name in the INIT state, and a writer that dies right after the
        // rename leaves a READY segment whose free lock reads as dead (never a segment
        // stuck in INIT). Everything above (geometry, identity, strings) becomes visible to
        // a reader that sees READY: pairs with the reader's Relaxed load + fence(Acquire).
        mapping
            .words
            .store(h::STATE_OFFSET, h::Lifecycle::READY, Ordering::Release);
        if let Err(e) =
            rustix::fs::renameat(dir.fd(), tmp_name.as_str(), dir.fd(), file_name.as_str())
        {
            let _ = rustix::fs::unlinkat(dir.fd(), tmp_name.as_str(), AtFlags::empty());
            return Err(Error::io("rename into place", &path, e));
        }
        // A writer whose arrivals are prompt starts never saw a request wait.
        let queue_wait = config.description.capabilities & h::capabilities::ARRIVAL_TIMES != 0;
        let recorders = (0..mapping.slot_count)
            .map(|_| SlotRecorder::new(queue_wait))
            .collect();
        Ok(Self {
            mapping: Arc::new(mapping),
            recorders,
            wait_learner: Box::default(),
            dir,
            file_name,
            path,
            loop_iterations: 0,
            instance_id,
            closed: false,
        })
    }

    fn build(
        config: &SegmentConfig,
        tmp_path: &Path,
        fd: OwnedFd,
        pid: u32,
        instance_id: u64,
    ) -> Result<Mapping> {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(SEGMENT_MODE))
            .map_err(|e| Error::io("fchmod", tmp_path, e))?;
        // Taken before the file is visible under its real name, so no reader ever sees the
        // segment without a live writer's lock.
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| Error::io("lock segment", tmp_path, e))?;
        let layout = Layout::for_slots(config.slot_count);
        let len = layout.total_len;
        match rustix::fs::fallocate(&fd, FallocateFlags::empty(), 0, len as u64) {
            Ok(()) => {}
            Err(Errno::OPNOTSUPP) | Err(Errno::NOSYS) => {
                rustix::fs::ftruncate(&fd, len as u64)
                    .map_err(|e| Error::io("ftruncate", tmp_path, e))?;
            }
            Err(e) => return Err(Error::io("allocate", tmp_path, e)),
        }
        let file = File::from(fd);
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| Error::io("mmap", tmp_path, e))?;
        // Nobody truncates the file: only this writer (and the owner) may, and we never do.
        // SAFETY: `map` is a fresh page-aligned read-write mapping of `len` bytes that lives
        // in the returned `Mapping` next to every copy of `words`.
        let words = unsafe { MappedWords::new(map.as_mut_ptr(), len, true) };
        // Touch every page so the mapping is populated before readers arrive.
        let page = rustix::param::page_size().max(8);
        for off in (0..len).step_by(page) {
            words.store(off, 0, Ordering::Relaxed);
        }
        write_header(&words, config, len, pid, instance_id);
        layout.write(&words);
        for i in 0..config.slot_count {
            flight::init_ring(&words, layout.flight.item(i));
        }
        Ok(Mapping {
            _map: map,
            words,
            file,
            slot_count: config.slot_count,
            layout,
            guards: (0..config.slot_count)
                .map(|_| WriterGuard::default())
                .collect(),
            capabilities: header_capabilities(&config.description),
            devices_guard: WriterGuard::default(),
        })
    }

    /// Path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slot_count(&self) -> usize {
        self.mapping.slot_count
    }

    /// The random instance id written in the header.
    pub fn instance_id(&self) -> u64 {
        self.instance_id
    }

    /// A handle other threads (the HTTP front end) use to count queued tasks per slot.
    pub fn pending_counter(&self) -> PendingCounter {
        PendingCounter {
            mapping: self.mapping.clone(),
        }
    }

    /// A handle other threads (a CUDA host callback) use to publish the layer position
    /// inside a slot's step.
    pub fn substep_publisher(&self) -> SubstepPublisher {
        SubstepPublisher {
            mapping: self.mapping.clone(),
        }
    }

    /// Publishes `state` as slot `slot`'s record (seqlock write; never blocks on readers),
    /// then the statistics and flight recorder entries the change from the slot's previous
    /// record makes (v1.3, FORMAT §17.5). The substep words are not touched: they have
    /// their own event, [`publish_substep`](Self::publish_substep).
    #[inline]
    pub fn publish(&mut self, slot: usize, state: &SlotState) -> Result<()> {
        let cleared = self.recorder(slot)?.crosses_step(state);
        self.mapping.publish_state(slot, state, cleared)?;
        self.derive(slot, state);
        Ok(())
    }

    /// The statistics of slot `slot`'s new record (the slot index is checked).
    #[inline]
    fn derive(&mut self, slot: usize, state: &SlotState) {
        let mapping = &self.mapping;
        self.recorders[slot].observe(
            state,
            || mapping.substep(slot),
            clock::monotonic_ns,
            &mapping.words,
            mapping.place(slot),
        );
    }

    /// The host's arrival time for the next task to begin on `slot` (CLOCK_MONOTONIC ns,
    /// when the task was queued, before it waited): its queue wait, time to first token
    /// and end-to-end time start there (v1.3). A writer that gives arrivals sets
    /// [`h::capabilities::ARRIVAL_TIMES`]; a task begun without one counts as such.
    pub fn note_arrival(&mut self, slot: usize, arrival_ns: u64) -> Result<()> {
        self.recorder(slot)?.note_arrival(arrival_ns);
        Ok(())
    }

    /// Why the running task on `slot` ends, and when (CLOCK_MONOTONIC ns): given before
    /// the record that ends it is published (v1.3). The record's finish reason should be
    /// `cause.reason()`. A writer that gives causes sets
    /// [`h::capabilities::FINISH_CAUSES`]; a task ended without one counts as
    /// `unspecified` (or `cancelled`, `error` from its finish reason).
    pub fn note_finish(&mut self, slot: usize, cause: FinishCause, now_ns: u64) -> Result<()> {
        self.recorder(slot)?.note_finish(cause, now_ns);
        Ok(())
    }

    fn recorder(&mut self, slot: usize) -> Result<&mut SlotRecorder> {
        let count = self.mapping.slot_count;
        self.recorders
            .get_mut(slot)
            .ok_or(Error::SlotOutOfRange { slot, count })
    }

    /// Publishes `state` and the cost model's `prediction` for it (format v1.2) as **one**
    /// seqlock update of slot `slot`, so that a reader never sees a step start without its
    /// prediction. The substep words and `PENDING` are not touched. A writer that publishes
    /// predictions sets [`h::capabilities::STEP_PREDICTION`].
    #[inline]
    pub fn publish_with_prediction(
        &mut self,
        slot: usize,
        state: &SlotState,
        prediction: &Prediction,
    ) -> Result<()> {
        let cleared = self.recorder(slot)?.crosses_step(state);
        self.mapping
            .publish_parts(slot, Some((state, cleared)), prediction)?;
        self.recorders[slot].note_prediction(prediction);
        self.derive(slot, state);
        Ok(())
    }

    /// Publishes only the prediction words of slot `slot` (format v1.2), leaving the rest
    /// of the record as it is.
    #[inline]
    pub fn publish_prediction(&mut self, slot: usize, prediction: &Prediction) -> Result<()> {
        self.mapping.publish_parts(slot, None, prediction)?;
        self.recorders[slot].note_prediction(prediction);
        Ok(())
    }

    /// Publishes the step in flight's device words of slot `slot` (v1.3, FORMAT §5.6):
    /// the layers handed to their devices, and the device the step's thread is about to
    /// block on (`wait_device`, since `wait_since_ns`) or 0 right after the wait returned.
    /// One seqlock update of those three words; from the thread that publishes the slot's
    /// step events. The flight recorder takes each step's last device and time waited
    /// from these calls. A writer that publishes them sets
    /// [`h::capabilities::DEVICE_WAIT`] and (for `layers_sent`)
    /// [`h::capabilities::LAYERS_SENT`]; every step boundary clears them.
    #[inline]
    pub fn publish_step_devices(&mut self, slot: usize, devices: &StepDevices) -> Result<()> {
        let (record, guard) = self.mapping.slot(slot)?;
        guard.update(&record, slot::LAYERS_SENT_OFFSET, &devices.to_words());
        if let Some(ended) = self.recorders[slot].note_devices(devices, clock::monotonic_ns) {
            self.learn_wait(&ended);
        }
        Ok(())
    }

    /// Stores the history of the device `ended` waited on (FORMAT §19.6): two Relaxed
    /// words in its entry of the devices item, outside the item's seqlock; nothing when
    /// the segment has no devices or the wait has no history (a save, a restore).
    fn learn_wait(&mut self, ended: &EndedWait) {
        if self.mapping.capabilities & h::capabilities::DEVICES == 0 {
            return;
        }
        let Some((at, history)) =
            self.wait_learner
                .note(ended.device, ended.phase, ended.step_start, ended.ns)
        else {
            return;
        };
        let base = self.mapping.layout.devices.item(0);
        let w = &self.mapping.words;
        w.store(base + at.steps, history.steps, Ordering::Relaxed);
        w.store(base + at.max_ns, history.recent_max_ns, Ordering::Relaxed);
    }

    /// Publishes since when the RPC peer that is device `device` (1-based id) has read
    /// nothing of what the engine queued to it (v1.3, FORMAT §19.7), `since_ns`
    /// `CLOCK_MONOTONIC`, or 0 when it keeps up: one Relaxed word outside the devices
    /// item's seqlock, from the one thread that watches the peers. Refused when the segment
    /// was created without [`h::capabilities::DEVICES`] and
    /// [`h::capabilities::PEER_READS`], or `device` is outside `1..=16`.
    pub fn publish_peer_unread(&mut self, device: u64, since_ns: u64) -> Result<()> {
        let needed = h::capabilities::DEVICES | h::capabilities::PEER_READS;
        if self.mapping.capabilities & needed != needed {
            return Err(Error::BadDevices {
                reason: "the segment was created without the devices and peer_reads \
                         capabilities"
                    .into(),
            });
        }
        let at = crate::peer_reads::word_offset(device).ok_or_else(|| Error::BadDevices {
            reason: format!("device id {device} is not in 1..=16"),
        })?;
        let base = self.mapping.layout.devices.item(0);
        self.mapping
            .words
            .store(base + at, since_ns, Ordering::Relaxed);
        Ok(())
    }

    /// Publishes the engine's devices and layer map (v1.3, FORMAT §19) as one seqlock
    /// update of the devices item; again when the placement changes. Refused (and nothing
    /// written) when the table breaks the format's rules or the segment was created
    /// without [`h::capabilities::DEVICES`].
    pub fn publish_devices(&mut self, devices: &Devices) -> Result<()> {
        if self.mapping.capabilities & h::capabilities::DEVICES == 0 {
            return Err(Error::BadDevices {
                reason: "the segment was created without the devices capability".into(),
            });
        }
        devices
            .check()
            .map_err(|reason| Error::BadDevices { reason })?;
        let item = MappedRecord {
            words: self.mapping.words,
            base: self.mapping.layout.devices.item(0),
        };
        let words = devices.to_words();
        // A new placement starts its wait histories afresh (the words are zero in `words`).
        self.wait_learner.reset();
        self.mapping
            .devices_guard
            .update_parts(&item, &[(crate::devices::DEVICE_COUNT_OFFSET, &words[..])]);
        Ok(())
    }

    /// Publishes the layer position inside slot `slot`'s step in flight (v1.1), from the
    /// compute thread; other threads use a [`SubstepPublisher`].
    #[inline]
    pub fn publish_substep(&mut self, slot: usize, substep: &Substep) -> Result<()> {
        self.mapping.publish_substep(slot, substep)
    }

    /// Records one pass of the compute loop at `now_ns` (CLOCK_MONOTONIC): stores the
    /// heartbeat and bumps the loop iteration counter (Relaxed; single writer).
    #[inline]
    pub fn heartbeat(&mut self, now_ns: u64) {
        self.loop_iterations += 1;
        let w = &self.mapping.words;
        w.store(h::HEARTBEAT_NS_OFFSET, now_ns, Ordering::Relaxed);
        w.store(
            h::LOOP_ITERATIONS_OFFSET,
            self.loop_iterations,
            Ordering::Relaxed,
        );
    }

    /// Stores the engine-wide counters (each word Relaxed). The waiting-requests gauge is
    /// kept by [`PendingCounter`] and not touched here.
    pub fn set_counters(&mut self, c: &WriterCounters) {
        let w = &self.mapping.words;
        w.store(
            h::PROMPT_TOKENS_TOTAL_OFFSET,
            c.prompt_tokens_total,
            Ordering::Relaxed,
        );
        w.store(
            h::GENERATED_TOKENS_TOTAL_OFFSET,
            c.generated_tokens_total,
            Ordering::Relaxed,
        );
        w.store(
            h::REQUESTS_RUNNING_OFFSET,
            c.requests_running,
            Ordering::Relaxed,
        );
        w.store(h::KV_CELLS_USED_OFFSET, c.kv_cells_used, Ordering::Relaxed);
        w.store(
            h::KV_CELLS_TOTAL_OFFSET,
            c.kv_cells_total,
            Ordering::Relaxed,
        );
    }

    /// Test hook: starts an update of `slot` and abandons it, leaving its sequence odd, as a
    /// writer killed mid-update would. Readers then report the slot torn.
    #[cfg(feature = "fault-injection")]
    pub fn abandon_update(&mut self, slot: usize) -> Result<()> {
        let (record, guard) = self.mapping.slot(slot)?;
        guard.abandon(&record);
        Ok(())
    }

    /// Test hook: forgets the segment without marking it CLOSED or unlinking it, and
    /// releases its lock, exactly as a killed writer would leave it.
    #[cfg(feature = "fault-injection")]
    pub fn simulate_crash(mut self) {
        self.closed = true;
        let _ = rustix::fs::flock(&self.mapping.file, FlockOperation::Unlock);
    }

    /// Marks the segment CLOSED, unlinks it (if the name still refers to it) and releases
    /// the lock. Readers that have it mapped see `closed`.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let w = &self.mapping.words;
        w.store(
            h::CLOSED_NS_OFFSET,
            clock::monotonic_ns(),
            Ordering::Relaxed,
        );
        // Pairs with the reader's Acquire read of STATE: CLOSED_NS is visible with CLOSED.
        w.store(h::STATE_OFFSET, h::Lifecycle::CLOSED, Ordering::Release);
        // Unlink under the directory lock, and only if the name is still ours.
        let result = self.dir.unlink_own(&self.file_name, &self.mapping.file);
        let _ = rustix::fs::flock(&self.mapping.file, FlockOperation::Unlock);
        result
    }
}

impl Drop for SegmentWriter {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

/// The capability word a writer of `d` publishes: the host's bits, and the families every
/// writer derives by itself (v1.3), which are always filled.
fn header_capabilities(d: &EngineDescription) -> u64 {
    d.capabilities | h::capabilities::WRITER_DERIVED
}

fn write_header(w: &MappedWords, c: &SegmentConfig, len: usize, pid: u32, instance_id: u64) {
    let r = Ordering::Relaxed;
    w.store(h::MAGIC_OFFSET, u64::from_ne_bytes(h::MAGIC), r);
    w.store(h::BYTE_ORDER_OFFSET, h::BYTE_ORDER_MARK, r);
    w.store(h::VERSION_MAJOR_OFFSET, h::VERSION_MAJOR, r);
    w.store(h::VERSION_MINOR_OFFSET, h::VERSION_MINOR, r);
    w.store(h::HEADER_LEN_OFFSET, h::HEADER_LEN as u64, r);
    w.store(h::SLOT_OFFSET_OFFSET, h::HEADER_LEN as u64, r);
    w.store(h::SLOT_STRIDE_OFFSET, slot::SLOT_STRIDE as u64, r);
    w.store(h::SLOT_COUNT_OFFSET, c.slot_count as u64, r);
    w.store(h::TOTAL_LEN_OFFSET, len as u64, r);
    w.store(h::STATE_OFFSET, h::Lifecycle::INIT, r);
    w.store(h::PID_OFFSET, u64::from(pid), r);
    w.store(
        h::PROCESS_START_NS_OFFSET,
        clock::process_start_ns(pid).unwrap_or(0),
        r,
    );
    w.store(h::INSTANCE_ID_OFFSET, instance_id, r);
    // The two anchors are taken back to back: realtime - monotonic converts timestamps.
    let mono = clock::monotonic_ns();
    let real = clock::realtime_ns();
    w.store(h::CREATED_REALTIME_NS_OFFSET, real, r);
    w.store(h::CREATED_MONOTONIC_NS_OFFSET, mono, r);
    w.store(h::HEARTBEAT_NS_OFFSET, mono, r);
    let capabilities = header_capabilities(&c.description);
    w.store(h::MODEL_CAPABILITIES_OFFSET, capabilities, r);
    let d = &c.description;
    w.write_str(h::ENGINE_ID_OFFSET, h::ENGINE_ID_LEN, &c.engine_id);
    w.write_str(h::BOOT_ID_OFFSET, h::BOOT_ID_LEN, &clock::boot_id());
    w.write_str(h::MODEL_NAME_OFFSET, h::MODEL_NAME_LEN, &d.model_name);
    w.write_str(h::MODEL_QUANT_OFFSET, h::MODEL_QUANT_LEN, &d.model_quant);
    w.write_str(h::TOKENIZER_OFFSET, h::TOKENIZER_LEN, &d.tokenizer);
    w.write_str(h::DEVICE_OFFSET, h::DEVICE_LEN, &d.device);
    w.write_str(h::MODEL_ALIAS_OFFSET, h::MODEL_ALIAS_LEN, &d.model_alias);
    w.write_str(h::MODEL_PATH_OFFSET, h::MODEL_PATH_LEN, &d.model_path);
}
