//! The per-slot seqlock: one writer (the compute thread), any number of readers in any
//! process, no reader ever blocks the writer.
//!
//! Write (one writer at a time; `s` is the even sequence last stored):
//! 1. `SEQ = s + 1` (Relaxed) — the record is now marked "being updated";
//! 2. `fence(Release)` — orders step 1 before the data stores below, for any reader that
//!    observes one of them (pairs with the reader's second `fence(Acquire)`);
//! 3. data words (Relaxed);
//! 4. `SEQ = s + 2` (Release) — publishes the data (pairs with the reader's first fence).
//!
//! Read:
//! 1. `s1 = SEQ` (Relaxed) then `fence(Acquire)` — together an Acquire load (pairs with
//!    the writer's step 4); retry if `s1` is odd;
//! 2. data words (Relaxed);
//! 3. `fence(Acquire)` (pairs with the writer's step 2), then `s2 = SEQ` (Relaxed);
//! 4. the copy is consistent iff `s1 == s2`; otherwise retry.
//!
//! Readers use Relaxed loads plus explicit Acquire fences rather than Acquire loads
//! because they map the segment read-only, where only Relaxed atomic loads are allowed.
//!
//! Retries are bounded ([`ReadPolicy`]): a writer killed between steps 1 and 4 leaves `SEQ`
//! odd forever, and the reader reports that as [`ReadFailure::Torn`] instead of spinning.
//!
//! Two threads of the writer process may update one record (format v1.1): the compute
//! thread publishes the whole record, and the thread that sees a layer finish (a CUDA
//! host callback) publishes only the substep words. Both go through the slot's
//! [`WriterGuard`], a lock in the writer's own memory that holds the last stored sequence,
//! so exactly one update runs at a time and readers see the unchanged protocol.

use crate::primitive::{fence, Mutex, Ordering};
use crate::slot::{DATA_WORDS, SEQ_OFFSET, TASK_ID_OFFSET};

/// Where the seqlock's words live: a mapped record, or heap atomics in the loom model.
/// Offsets are bytes from the start of the record.
pub(crate) trait WordSource {
    /// Relaxed load.
    fn load_relaxed(&self, offset: usize) -> u64;
    /// Store with the given ordering.
    fn store(&self, offset: usize, value: u64, order: Ordering);
}

/// How hard a reader tries before giving up on a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPolicy {
    /// Attempts separated by a CPU spin hint (a writer's update takes tens of ns).
    pub spins: u32,
    /// Further attempts separated by a thread yield (lets a preempted writer finish).
    pub yields: u32,
}

impl Default for ReadPolicy {
    /// 64 spins then 2000 yields: well under 10 ms even on a loaded 2-core machine, which
    /// is long enough for a preempted writer to be rescheduled and finish its update, and
    /// short enough that a dead writer is reported at once from a human's point of view.
    fn default() -> Self {
        Self {
            spins: 64,
            yields: 2000,
        }
    }
}

/// Why a bounded read gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFailure<const N: usize = DATA_WORDS> {
    /// `SEQ` stayed at the same odd value for the whole retry budget: the writer is stuck
    /// or died in the middle of an update.
    Torn {
        /// The odd sequence value seen.
        seq: u64,
        /// A best-effort (possibly inconsistent) copy of the data words.
        words: [u64; N],
    },
    /// The record kept changing under the reader for the whole retry budget.
    Contended {
        /// Attempts made.
        attempts: u32,
    },
}

/// A consistent copy of a record's data words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadOk<const N: usize = DATA_WORDS> {
    /// Data words, `TASK_ID` onwards.
    pub words: [u64; N],
    /// The (even) sequence value the copy was taken at.
    pub seq: u64,
    /// Failed attempts before this one.
    pub retries: u32,
}

/// Publishes `words` as the record's data. `seq` is the writer's last stored (even)
/// sequence value; returns the new one. Only the record's single writer may call this.
#[cfg(test)]
pub(crate) fn write<S: WordSource, const N: usize>(src: &S, seq: u64, words: &[u64; N]) -> u64 {
    write_at(src, seq, TASK_ID_OFFSET, words)
}

/// Publishes `words` as the data words starting at byte `first` of the record (the other
/// data words keep their values). `seq` is the last stored (even) sequence value; returns
/// the new one. One writer at a time: callers hold the slot's [`WriterGuard`].
#[inline]
pub(crate) fn write_at<S: WordSource, const N: usize>(
    src: &S,
    seq: u64,
    first: usize,
    words: &[u64; N],
) -> u64 {
    write_parts(src, seq, &[(first, words.as_slice())])
}

/// Publishes several runs of data words as **one** update: each `(first, words)` part is
/// stored from byte `first` of the record (format v1.2 writes the record, the guarded word
/// before `PENDING` and the words after it, skipping `PENDING` itself, which other threads
/// change with atomic read-modify-writes). A reader sees all parts or none. `seq` is the
/// last stored (even) sequence value; returns the new one. One writer at a time.
#[inline]
pub(crate) fn write_parts<S: WordSource>(src: &S, seq: u64, parts: &[(usize, &[u64])]) -> u64 {
    write_with(src, seq, |src| {
        for &(first, words) in parts {
            for (i, &w) in words.iter().enumerate() {
                src.store(first + i * 8, w, Ordering::Relaxed);
            }
        }
    })
}

/// Publishes single words scattered over the record, each `(offset, value)` stored in
/// order (a later store of the same offset wins), as **one** update: the statistics block
/// (format v1.3) stores only the few words an event changes. `seq` is the last stored
/// (even) sequence value; returns the new one. One writer at a time.
#[inline]
pub(crate) fn write_scattered<S: WordSource>(src: &S, seq: u64, words: &[(usize, u64)]) -> u64 {
    write_with(src, seq, |src| {
        for &(offset, w) in words {
            src.store(offset, w, Ordering::Relaxed);
        }
    })
}

/// The write protocol around `data`, which stores the data words (Relaxed): the one home
/// of the writer's orderings.
#[inline]
fn write_with<S: WordSource>(src: &S, seq: u64, data: impl FnOnce(&S)) -> u64 {
    debug_assert!(
        seq % 2 == 0,
        "writer's own sequence must be even between updates"
    );
    src.store(SEQ_OFFSET, seq.wrapping_add(1), Ordering::Relaxed);
    // Pairs with the reader's fence(Acquire) before its second SEQ load: a reader that sees
    // any data store below also sees SEQ = seq + 1 (or later) and retries.
    fence(Ordering::Release);
    data(src);
    let next = seq.wrapping_add(2);
    // Pairs with the reader's Relaxed load + fence(Acquire) of SEQ: a reader that sees
    // `next` sees every data store above.
    src.store(SEQ_OFFSET, next, Ordering::Release);
    next
}

/// The writer side of one record's seqlock, in the writer process's own memory: the last
/// stored sequence value behind a lock that every thread updating the record takes, so
/// updates from several threads never overlap. Held for one update (tens of ns); readers
/// never see it.
#[derive(Debug, Default)]
pub(crate) struct WriterGuard(Mutex<u64>);

impl WriterGuard {
    /// Publishes `words` at byte `first` of the record `src` as one seqlock update.
    #[inline]
    pub(crate) fn update<S: WordSource, const N: usize>(
        &self,
        src: &S,
        first: usize,
        words: &[u64; N],
    ) {
        // A panic cannot happen while the lock is held (stores only), so a poisoned lock
        // still holds a valid sequence.
        let mut seq = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *seq = write_at(src, *seq, first, words);
    }

    /// Publishes several runs of words of the record `src` as one seqlock update
    /// ([`write_parts`]).
    #[inline]
    pub(crate) fn update_parts<S: WordSource>(&self, src: &S, parts: &[(usize, &[u64])]) {
        let mut seq = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *seq = write_parts(src, *seq, parts);
    }

    /// Runs `f` holding the lock, so that no other thread of the writer updates the record
    /// meanwhile: a consistent view of words only this guard's holders write (the
    /// substep words, which a layer callback publishes).
    #[inline]
    pub(crate) fn hold<R>(&self, f: impl FnOnce() -> R) -> R {
        let _seq = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }

    /// Leaves the record mid-update; see [`abandon_mid_update`].
    #[cfg(feature = "fault-injection")]
    pub(crate) fn abandon<S: WordSource>(&self, src: &S) {
        let mut seq = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *seq = abandon_mid_update(src, *seq);
    }
}

/// Leaves the record mid-update (`SEQ` odd) without finishing: what a writer killed
/// between steps 1 and 4 leaves behind. Test hook only.
#[cfg(feature = "fault-injection")]
pub(crate) fn abandon_mid_update<S: WordSource>(src: &S, seq: u64) -> u64 {
    let odd = seq.wrapping_add(1);
    src.store(SEQ_OFFSET, odd, Ordering::Relaxed);
    fence(Ordering::Release);
    src.store(TASK_ID_OFFSET, u64::MAX, Ordering::Relaxed);
    odd
}

/// Takes a consistent copy of the record's data words, retrying within `policy`.
#[inline]
pub(crate) fn read<S: WordSource, const N: usize>(
    src: &S,
    policy: ReadPolicy,
) -> Result<ReadOk<N>, ReadFailure<N>> {
    let budget = policy.spins.saturating_add(policy.yields).max(1);
    let mut first_odd: Option<u64> = None;
    let mut same_odd = true;
    let mut words = [0u64; N];
    for attempt in 0..budget {
        let s1 = src.load_relaxed(SEQ_OFFSET);
        // With the Relaxed load above, an Acquire load of SEQ: pairs with the writer's
        // Release store of the even sequence, making that update's data visible.
        fence(Ordering::Acquire);
        if s1 % 2 == 1 {
            match first_odd {
                None => first_odd = Some(s1),
                Some(prev) if prev != s1 => same_odd = false,
                Some(_) => {}
            }
            // Keep a best-effort copy for a torn report.
            for (i, w) in words.iter_mut().enumerate() {
                *w = src.load_relaxed(TASK_ID_OFFSET + i * 8);
            }
        } else {
            if first_odd.is_some() {
                same_odd = false;
            }
            for (i, w) in words.iter_mut().enumerate() {
                *w = src.load_relaxed(TASK_ID_OFFSET + i * 8);
            }
            // Pairs with the writer's fence(Release) after its odd SEQ store: if any load
            // above saw data from a newer update, the load below sees that update's SEQ.
            fence(Ordering::Acquire);
            let s2 = src.load_relaxed(SEQ_OFFSET);
            if s1 == s2 {
                return Ok(ReadOk {
                    words,
                    seq: s1,
                    retries: attempt,
                });
            }
        }
        backoff(attempt, policy.spins);
    }
    match first_odd {
        Some(seq) if same_odd => Err(ReadFailure::Torn { seq, words }),
        _ => Err(ReadFailure::Contended { attempts: budget }),
    }
}

#[inline]
fn backoff(attempt: u32, spins: u32) {
    #[cfg(loom)]
    {
        let _ = (attempt, spins);
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if attempt < spins {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A record inside a mapping: the mapping's words, offset to the record's start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedRecord {
    pub(crate) words: crate::words::MappedWords,
    pub(crate) base: usize,
}

impl WordSource for MappedRecord {
    #[inline]
    fn load_relaxed(&self, offset: usize) -> u64 {
        self.words.load(self.base + offset)
    }

    #[inline]
    fn store(&self, offset: usize, value: u64, order: Ordering) {
        self.words.store(self.base + offset, value, order)
    }
}

/// A record of `SEQ` and `n` data words in ordinary memory (loom's atomics under the loom
/// model), for the unit tests and the loom model.
#[cfg(test)]
struct Heap(Vec<crate::primitive::AtomicU64>);

#[cfg(test)]
impl Heap {
    fn new(n: usize) -> Heap {
        Heap(
            (0..n + 1)
                .map(|_| crate::primitive::AtomicU64::new(0))
                .collect(),
        )
    }
}

#[cfg(test)]
impl WordSource for Heap {
    fn load_relaxed(&self, offset: usize) -> u64 {
        self.0[offset / 8].load(Ordering::Relaxed)
    }
    fn store(&self, offset: usize, value: u64, order: Ordering) {
        self.0[offset / 8].store(value, order)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn heap() -> Heap {
        Heap::new(DATA_WORDS)
    }

    #[test]
    fn write_then_read_round_trips() {
        let h = heap();
        let mut words = [0u64; DATA_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = i as u64 * 3;
        }
        let seq = write(&h, 0, &words);
        assert_eq!(seq, 2);
        let ok = read::<_, DATA_WORDS>(&h, ReadPolicy::default()).unwrap();
        assert_eq!(ok.words, words);
        assert_eq!(ok.seq, 2);
        assert_eq!(ok.retries, 0);
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn abandoned_update_reads_as_torn_within_budget() {
        let h = heap();
        let seq = write(&h, 0, &[7; DATA_WORDS]);
        abandon_mid_update(&h, seq);
        let policy = ReadPolicy {
            spins: 4,
            yields: 4,
        };
        match read::<_, DATA_WORDS>(&h, policy) {
            Err(ReadFailure::Torn { seq, words }) => {
                assert_eq!(seq, 3);
                assert_eq!(words[1], 7, "best-effort copy keeps the last values");
            }
            other => panic!("expected torn, got {other:?}"),
        }
    }
}

#[cfg(all(test, loom))]
mod loom_model {
    //! Run with: `RUSTFLAGS="--cfg loom" cargo test -p hydra-layout --release --lib loom_model`
    use super::*;
    use loom::sync::Arc;

    /// Words of update `k`: every data word derives from `k`, so a mix of two updates is
    /// detectable.
    const N: usize = 3;

    fn words_for(k: u64) -> [u64; N] {
        let mut w = [0u64; N];
        for (i, x) in w.iter_mut().enumerate() {
            *x = k * 1000 + i as u64;
        }
        w
    }

    fn check(h: &Heap, policy: ReadPolicy) {
        if let Ok(ok) = read::<_, N>(h, policy) {
            if ok.seq == 0 {
                // No update published yet: the record still holds its all-zero initial words.
                assert_eq!(ok.words, [0; N], "inconsistent initial snapshot");
                return;
            }
            let k = ok.words[0] / 1000;
            assert_eq!(
                ok.words,
                words_for(k),
                "inconsistent snapshot: {:?}",
                ok.words
            );
            assert_eq!(ok.seq, 2 * k, "sequence and data disagree");
        }
    }

    #[test]
    fn loom_model_reader_never_sees_a_mixed_record() {
        // Three words are enough to expose any reordering between SEQ and data; the
        // protocol is the same loop over more words. A preemption bound keeps the search
        // finite and fast; 3 covers every interleaving of one read against one update.
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let h = Arc::new(Heap::new(N));
            let writer = {
                let h = h.clone();
                loom::thread::spawn(move || {
                    let mut seq = 0;
                    for k in 1..=2 {
                        seq = write(&*h, seq, &words_for(k));
                    }
                })
            };
            check(
                &h,
                ReadPolicy {
                    spins: 0,
                    yields: 2,
                },
            );
            writer.join().unwrap();
            check(
                &h,
                ReadPolicy {
                    spins: 0,
                    yields: 1,
                },
            );
        });
    }

    /// Two writers of one record, as on CUDA (the compute thread publishes the whole record,
    /// a host callback only the substep words): writer A stores words 0..2, writer B words
    /// 2..4, each through the shared [`WriterGuard`]. Each update writes one value into
    /// both of its words, counting that writer's updates, so a consistent copy has equal
    /// pairs and a sequence of exactly 2 × (A's updates + B's updates).
    #[test]
    fn loom_model_two_guarded_writers_never_mix_or_lose_an_update() {
        const W: usize = 4;
        fn check_two(h: &Heap) {
            if let Ok(ok) = read::<_, W>(
                h,
                ReadPolicy {
                    spins: 0,
                    yields: 2,
                },
            ) {
                let w = ok.words;
                assert_eq!(w[0], w[1], "writer A's pair mixed: {w:?}");
                assert_eq!(w[2], w[3], "writer B's pair mixed: {w:?}");
                assert_eq!(
                    ok.seq,
                    2 * (w[0] + w[2]),
                    "sequence and data disagree: {w:?}"
                );
            }
        }
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let h = Arc::new(Heap::new(W));
            let guard = Arc::new(WriterGuard::default());
            let spawn = |first: usize| {
                let (h, guard) = (h.clone(), guard.clone());
                loom::thread::spawn(move || {
                    guard.update(&*h, TASK_ID_OFFSET + first * 8, &[1u64, 1]);
                })
            };
            let a = spawn(0);
            let b = spawn(2);
            check_two(&h);
            a.join().unwrap();
            b.join().unwrap();
            let end = read::<_, W>(
                &*h,
                ReadPolicy {
                    spins: 0,
                    yields: 1,
                },
            )
            .expect("no writer left: the record is stable");
            assert_eq!(
                (end.words, end.seq),
                ([1, 1, 1, 1], 4),
                "an update was lost"
            );
        });
    }

    /// Format v1.2: the compute thread publishes the record together with its prediction
    /// words, two runs with a word between them that the update must not touch (`PENDING`,
    /// changed by other threads' read-modify-writes); a second thread publishes other words
    /// (the substep position). Writer A stores `k` into words 0 and 2 (skipping word 1, the
    /// "pending" word, which a third thread increments), writer B into word 3. A consistent
    /// copy has words 0 and 2 equal, and the sequence counts both writers' updates.
    #[test]
    fn loom_model_an_update_in_parts_is_seen_whole_and_skips_the_gap() {
        const W: usize = 4;
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| {
            let h = Arc::new(Heap::new(W));
            let guard = Arc::new(WriterGuard::default());
            let a = {
                let (h, guard) = (h.clone(), guard.clone());
                loom::thread::spawn(move || {
                    let one = [1u64];
                    guard.update_parts(
                        &*h,
                        &[(TASK_ID_OFFSET, &one[..]), (TASK_ID_OFFSET + 16, &one[..])],
                    );
                })
            };
            let b = {
                let (h, guard) = (h.clone(), guard.clone());
                loom::thread::spawn(move || guard.update(&*h, TASK_ID_OFFSET + 24, &[1u64]))
            };
            // The "pending" word: an RMW from a third party, outside the seqlock.
            h.0[2].fetch_add(5, Ordering::Relaxed);
            if let Ok(ok) = read::<_, W>(
                &*h,
                ReadPolicy {
                    spins: 0,
                    yields: 2,
                },
            ) {
                let w = ok.words;
                assert_eq!(w[0], w[2], "the parts of one update mixed: {w:?}");
                assert_eq!(ok.seq, 2 * (w[0] + w[3]), "sequence and data disagree");
            }
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(h.0[2].load(Ordering::Relaxed), 5, "the gap was written");
            let end = read::<_, W>(
                &*h,
                ReadPolicy {
                    spins: 0,
                    yields: 1,
                },
            )
            .expect("stable");
            assert_eq!(
                (end.words[0], end.words[2], end.words[3], end.seq),
                (1, 1, 1, 4)
            );
        });
    }
}
