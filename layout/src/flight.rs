//! The flight recorder (format v1.3, FORMAT.md §18): per slot, a ring of the last
//! [`CAPACITY`] finished steps — kind, start, duration, size, layers, prediction, result —
//! so a reader can see what a slot did just before now, or just before its engine died.
//!
//! Each entry has its own sequence word whose value also names the step: `2n - 1` while
//! the `n`-th step's entry is written, `2n` once it is (the seqlock of §8 with one
//! sequence per entry). A reader copies entries one by one, accepts a copy only if its
//! ordinal belongs at the position it was read from, and treats the ring's head word as a
//! hint used only modulo the capacity, so a hostile ring index can neither send it outside
//! the ring nor make it show an entry its own sequence does not vouch for.

use crate::header::WORD_LEN;
use crate::primitive::Ordering;
use crate::seqlock::{self, MappedRecord, ReadPolicy};
use crate::slot::{Phase, StepResult};
use crate::words::MappedWords;

/// Offset in a ring of the ordinal of the last entry written (a hint).
pub const FR_HEAD_OFFSET: usize = 0;
/// Offset in a ring of its capacity (immutable).
pub const FR_CAPACITY_OFFSET: usize = 8;
/// Offset in a ring of its entry length (immutable).
pub const FR_ENTRY_LEN_OFFSET: usize = 16;
/// Offset in a ring of entry 0.
pub const ENTRIES_OFFSET: usize = 128;
/// Entries the reference writer keeps per slot.
pub const CAPACITY: usize = 64;
/// The fewest entries a conforming ring has.
pub const MIN_CAPACITY: usize = 64;
/// Bytes of one v1.3 entry (two cache lines).
pub const ENTRY_LEN: usize = 128;
/// Most entries a reader accepts in a ring (a hostile capacity cannot make it loop long).
pub const MAX_CAPACITY: u64 = 65_536;
/// Bytes of the reference writer's ring.
pub const RING_LEN: usize = ENTRIES_OFFSET + CAPACITY * ENTRY_LEN;
/// The smallest region stride a reader accepts for rings (a header and one entry).
pub const MIN_RING_LEN: usize = ENTRIES_OFFSET + ENTRY_LEN;
/// Words of an entry after its sequence that v1.3 defines (the two reserved ones
/// included: a reader copies them in the same window).
pub const ENTRY_DATA_WORDS: usize = ENTRY_LEN / WORD_LEN - 1;

/// Offsets inside an entry.
pub mod entry {
    /// The entry's sequence.
    pub const FR_SEQ: usize = 0;
    /// The task the step belonged to.
    pub const FR_TASK_ID: usize = 8;
    /// The phase the step ran in.
    pub const FR_KIND: usize = 16;
    /// How it ended.
    pub const FR_RESULT: usize = 24;
    /// CLOCK_MONOTONIC start.
    pub const FR_START_NS: usize = 32;
    /// Duration, ns.
    pub const FR_DURATION_NS: usize = 40;
    /// Units it carried.
    pub const FR_SIZE: usize = 48;
    /// How far `WORK_DONE` advanced at its end.
    pub const FR_ADVANCED: usize = 56;
    /// `N_PAST` when it started.
    pub const FR_CONTEXT: usize = 64;
    /// Layers done when it ended (0 = none published).
    pub const FR_LAYERS_DONE: usize = 72;
    /// Layers of that position.
    pub const FR_LAYERS_TOTAL: usize = 80;
    /// Predicted duration, ns (0 = none).
    pub const FR_PREDICTED_NS: usize = 88;
    /// Last device it waited on (0 = none).
    pub const FR_WAIT_DEVICE: usize = 96;
    /// Time it spent waiting on devices, ns.
    pub const FR_WAIT_NS: usize = 104;
}

/// One finished step, as the flight recorder keeps it. Counts, sizes and times only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlightEntry {
    /// The step's ordinal among the slot's finished steps since the segment's creation
    /// (1, 2, ...); the reader takes it from the entry's sequence.
    pub ordinal: u64,
    /// The task the step belonged to.
    pub task_id: u64,
    /// The phase it ran in.
    pub kind: Phase,
    /// How it ended.
    pub result: StepResult,
    /// CLOCK_MONOTONIC start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub duration_ns: u64,
    /// Units it carried (tokens; bytes for a save or restore block).
    pub size: u64,
    /// How far `WORK_DONE` advanced at its end (0 for no progress and abandoned steps).
    pub advanced: u64,
    /// `N_PAST` when it started.
    pub context: u64,
    /// Layers done when it ended (0 = none published).
    pub layers_done: u64,
    /// Layers in that forward (0 = none).
    pub layers_total: u64,
    /// Predicted duration, ns (0 = none).
    pub predicted_ns: u64,
    /// The last device it waited on (0 = none).
    pub wait_device: u64,
    /// Time it spent waiting on devices, ns.
    pub wait_ns: u64,
}

impl FlightEntry {
    fn to_words(self) -> [u64; 13] {
        [
            self.task_id,
            self.kind.to_raw(),
            self.result.to_raw(),
            self.start_ns,
            self.duration_ns,
            self.size,
            self.advanced,
            self.context,
            self.layers_done,
            self.layers_total,
            self.predicted_ns,
            self.wait_device,
            self.wait_ns,
        ]
    }

    fn from_words(ordinal: u64, w: &[u64; ENTRY_DATA_WORDS]) -> Self {
        Self {
            ordinal,
            task_id: w[0],
            kind: Phase::from_raw(w[1]),
            result: StepResult::from_raw(w[2]),
            start_ns: w[3],
            duration_ns: w[4],
            size: w[5],
            advanced: w[6],
            context: w[7],
            layers_done: w[8],
            layers_total: w[9],
            predicted_ns: w[10],
            wait_device: w[11],
            wait_ns: w[12],
        }
    }
}

/// Writes the fixed words of a ring (before READY).
pub(crate) fn init_ring(w: &MappedWords, ring: usize) {
    w.store(
        ring + FR_CAPACITY_OFFSET,
        CAPACITY as u64,
        Ordering::Relaxed,
    );
    w.store(
        ring + FR_ENTRY_LEN_OFFSET,
        ENTRY_LEN as u64,
        Ordering::Relaxed,
    );
}

/// Writes `e` as the `ordinal`-th entry (1, 2, ...) of the reference ring at byte `ring`
/// (FORMAT §18.3). Only the slot's step-events thread calls this.
#[inline]
pub(crate) fn append(w: &MappedWords, ring: usize, ordinal: u64, e: &FlightEntry) {
    debug_assert!(ordinal >= 1);
    let p = ((ordinal - 1) % CAPACITY as u64) as usize;
    let record = MappedRecord {
        words: *w,
        base: ring + ENTRIES_OFFSET + p * ENTRY_LEN,
    };
    let words = e.to_words();
    // The entry's sequence: 2n - 1 while written, 2n once written.
    seqlock::write_parts(&record, 2 * ordinal - 2, &[(entry::FR_TASK_ID, &words[..])]);
    w.store(ring + FR_HEAD_OFFSET, ordinal, Ordering::Release);
}

/// How hard a reader tries on one entry: an entry is written in tens of nanoseconds and
/// then left alone, so a few dozen attempts are plenty; one stuck odd is a writer that
/// died writing it, and is skipped.
const ENTRY_POLICY: ReadPolicy = ReadPolicy {
    spins: 32,
    yields: 16,
};

/// What a reader found in one ring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The accepted entries, oldest first (ordered by ordinal; gaps are missing steps).
    pub entries: Vec<FlightEntry>,
    /// Positions whose entry was torn (a writer that died writing it) or kept changing.
    pub torn: usize,
    /// The ring's head word as found (a hint, never trusted).
    pub head: u64,
}

/// Checks a ring's fixed words (FORMAT §18.1): `(capacity, entry_len)` when usable in a
/// region of stride `stride`.
pub(crate) fn ring_geometry(w: &MappedWords, ring: usize, stride: usize) -> Option<(usize, usize)> {
    let capacity = w.load(ring + FR_CAPACITY_OFFSET);
    let entry_len = w.load(ring + FR_ENTRY_LEN_OFFSET);
    let fits =
        u128::from(capacity) * u128::from(entry_len) + ENTRIES_OFFSET as u128 <= stride as u128;
    ((1..=MAX_CAPACITY).contains(&capacity)
        && entry_len >= ENTRY_LEN as u64
        && entry_len % 64 == 0
        && fits)
        .then_some((capacity as usize, entry_len as usize))
}

/// Reads the ring at byte `ring` with validated `capacity` and `entry_len` (FORMAT §18.4).
pub(crate) fn read_ring(
    w: &MappedWords,
    ring: usize,
    capacity: usize,
    entry_len: usize,
) -> History {
    let head = w.load(ring + FR_HEAD_OFFSET);
    let cap = capacity as u64;
    let read_at = |p: usize| -> Result<Option<FlightEntry>, ()> {
        let record = MappedRecord {
            words: *w,
            base: ring + ENTRIES_OFFSET + p * entry_len,
        };
        match seqlock::read::<_, ENTRY_DATA_WORDS>(&record, ENTRY_POLICY) {
            Ok(ok) if ok.seq == 0 => Ok(None),
            Ok(ok) => {
                let n = ok.seq / 2;
                // An entry cannot belong anywhere else than at (n - 1) % capacity.
                Ok(((n - 1) % cap == p as u64).then(|| FlightEntry::from_words(n, &ok.words)))
            }
            Err(_) => Err(()),
        }
    };
    let mut history = History {
        head,
        ..History::default()
    };
    // Fast path: trust the hint only as far as each entry's own sequence vouches.
    let mut fast = Vec::new();
    let mut hint_holds = head >= 1;
    if hint_holds {
        let oldest = head.saturating_sub(cap - 1).max(1);
        let mut n = head;
        while n >= oldest {
            let p = ((n - 1) % cap) as usize;
            match read_at(p) {
                Ok(Some(e)) if e.ordinal == n => fast.push(e),
                _ => {
                    hint_holds = false;
                    break;
                }
            }
            n -= 1;
        }
        // The head may lag the newest entry by one; an entry past it means the hint is off.
        if hint_holds {
            let p = (head % cap) as usize;
            if let Ok(Some(e)) = read_at(p) {
                if e.ordinal > head {
                    hint_holds = false;
                }
            }
        }
    }
    if hint_holds {
        fast.reverse();
        history.entries = fast;
        return history;
    }
    // The hint is missing, stale or hostile: read every position and keep the entries
    // within capacity - 1 of the highest ordinal found.
    let mut all = Vec::with_capacity(capacity);
    for p in 0..capacity {
        match read_at(p) {
            Ok(Some(e)) => all.push(e),
            Ok(None) => {}
            Err(()) => history.torn += 1,
        }
    }
    if let Some(top) = all.iter().map(|e| e.ordinal).max() {
        all.retain(|e| e.ordinal + cap > top);
    }
    all.sort_by_key(|e| e.ordinal);
    history.entries = all;
    history
}
