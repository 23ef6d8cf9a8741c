//! A reader's consistent copy of one slot's statistics, and the checks of FORMAT.md §17.7.

use super::{
    buckets, Counter, Family, HistogramKind, BUSY_NS_OFFSET, CAUSE_WORDS, ERRORS_BY_CODE_OFFSET,
    HIST_BUCKETS_OFFSET, HIST_COUNT_OFFSET, HIST_SUM_OFFSET, PHASE_WORDS, STATS_LEN,
    STEPS_ABANDONED_OFFSET, STEPS_OFFSET, TASKS_BY_CAUSE_OFFSET,
};
use crate::header::WORD_LEN;

/// One slot's statistics as a reader copied them (one consistent seqlock copy). Families
/// the writer does not fill are `None` from the accessors, never zero.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotStats {
    words: Box<[u64]>,
    capabilities: u64,
}

impl std::fmt::Debug for SlotStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotStats")
            .field("seq", &self.seq())
            .field("tasks_begun", &self.word(Counter::TasksBegun.offset()))
            .field("tasks_ended", &self.word(Counter::TasksEnded.offset()))
            .finish_non_exhaustive()
    }
}

/// One histogram of a copy: counts per bucket (not cumulative), their total and sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    /// Which histogram.
    pub kind: HistogramKind,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values (ns, or Q20 for a ratio).
    pub sum: u64,
    /// Observations per bucket (`kind.buckets()` entries).
    pub buckets: Vec<u64>,
}

impl Histogram {
    /// The inclusive upper bound of bucket `k` in the histogram's display unit (seconds
    /// for times, the plain ratio for ratios); `None` for `+Inf`.
    pub fn bound(&self, k: usize) -> Option<f64> {
        if self.kind.is_ratio() {
            buckets::ratio_bound_q20(k).map(|r| r as f64 / buckets::Q20_ONE as f64)
        } else {
            buckets::time_bound_us(k).map(|us| us as f64 / 1e6)
        }
    }

    /// The mean in the display unit (seconds, or the ratio); `None` without observations.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| {
            let unit = if self.kind.is_ratio() {
                buckets::Q20_ONE as f64
            } else {
                1e9
            };
            self.sum as f64 / self.count as f64 / unit
        })
    }

    /// The `q` quantile (0..=1) in the display unit, estimated as Prometheus'
    /// `histogram_quantile` does: linear inside the bucket that holds it, the lower bound
    /// of the first bucket being 0, and the highest finite bound for the `+Inf` bucket.
    /// `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * self.count as f64;
        let mut below = 0u64;
        for (k, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let lower = if k == 0 { 0.0 } else { self.bound(k - 1)? };
                let Some(upper) = self.bound(k) else {
                    return Some(lower);
                };
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return Some(lower + (upper - lower) * within);
            }
            below += n;
        }
        None
    }
}

/// Why a copy of a slot's statistics cannot be trusted (FORMAT §17.7): a faulty or hostile
/// writer. The reader shows such a slot flagged; an exporter leaves its series out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsDefect {
    /// A histogram's buckets do not add up to its count.
    #[error("{kind}: its buckets add up to {buckets}, its count is {count}")]
    BucketsNotCount {
        /// The histogram.
        kind: &'static str,
        /// Σ buckets.
        buckets: u128,
        /// `COUNT`.
        count: u64,
    },
    /// `TASKS_ENDED <= TASKS_BEGUN <= TASKS_ENDED + 1` does not hold.
    #[error("{begun} tasks begun and {ended} ended")]
    TaskCounts {
        /// `TASKS_BEGUN`.
        begun: u64,
        /// `TASKS_ENDED`.
        ended: u64,
    },
    /// `Σ TASKS_BY_CAUSE != TASKS_ENDED` with finish causes published.
    #[error("tasks by cause add up to {by_cause}, {ended} tasks ended")]
    CausesNotEnded {
        /// Σ `TASKS_BY_CAUSE`.
        by_cause: u128,
        /// `TASKS_ENDED`.
        ended: u64,
    },
    /// A counter of a later copy is smaller than in an earlier copy of the same engine.
    #[error("{what} went backwards from {before} to {after}")]
    WentBackwards {
        /// The word, by name and offset.
        what: String,
        /// The earlier value.
        before: u64,
        /// The later value.
        after: u64,
    },
}

impl SlotStats {
    /// Wraps a copy of the whole block (`STATS_SEQ` first) taken from a writer with
    /// capability bits `capabilities`.
    pub(crate) fn from_block(words: Box<[u64]>, capabilities: u64) -> Self {
        debug_assert_eq!(words.len(), STATS_LEN / WORD_LEN);
        Self {
            words,
            capabilities,
        }
    }

    /// The block's sequence at the copy (even; grows by 2 per update).
    pub fn seq(&self) -> u64 {
        self.words[0]
    }

    /// The raw word at byte `offset` of the block, whatever its family (0 past the end).
    pub fn word(&self, offset: usize) -> u64 {
        self.words.get(offset / WORD_LEN).copied().unwrap_or(0)
    }

    /// Whether the writer fills `family`.
    pub fn has(&self, family: Family) -> bool {
        family.present_in(self.capabilities)
    }

    /// A scalar, or `None` when its family is absent.
    pub fn counter(&self, c: Counter) -> Option<u64> {
        self.has(c.family()).then(|| self.word(c.offset()))
    }

    /// A histogram, or `None` when its family is absent.
    pub fn histogram(&self, kind: HistogramKind) -> Option<Histogram> {
        self.has(kind.family()).then(|| self.histogram_raw(kind))
    }

    fn histogram_raw(&self, kind: HistogramKind) -> Histogram {
        let at = kind.offset();
        Histogram {
            kind,
            count: self.word(at + HIST_COUNT_OFFSET),
            sum: self.word(at + HIST_SUM_OFFSET),
            buckets: (0..kind.buckets())
                .map(|k| self.word(at + HIST_BUCKETS_OFFSET + k * WORD_LEN))
                .collect(),
        }
    }

    fn array<const N: usize>(&self, offset: usize) -> [u64; N] {
        std::array::from_fn(|i| self.word(offset + i * WORD_LEN))
    }

    /// Tasks ended per finish cause (index = `FinishCause` raw value, 15 = any larger), or
    /// `None` without finish causes.
    pub fn tasks_by_cause(&self) -> Option<[u64; CAUSE_WORDS]> {
        self.has(Family::Causes)
            .then(|| self.array(TASKS_BY_CAUSE_OFFSET))
    }

    /// Tasks that failed per error code (index = `ErrorCode` raw value), or `None`.
    pub fn errors_by_code(&self) -> Option<[u64; CAUSE_WORDS]> {
        self.has(Family::Causes)
            .then(|| self.array(ERRORS_BY_CODE_OFFSET))
    }

    /// Busy nanoseconds per phase (index = `Phase` raw value).
    pub fn busy_ns(&self) -> [u64; PHASE_WORDS] {
        self.array(BUSY_NS_OFFSET)
    }

    /// Finished steps per phase.
    pub fn steps(&self) -> [u64; PHASE_WORDS] {
        self.array(STEPS_OFFSET)
    }

    /// Abandoned steps per phase.
    pub fn steps_abandoned(&self) -> [u64; PHASE_WORDS] {
        self.array(STEPS_ABANDONED_OFFSET)
    }

    /// The element-wise sum of `copies` (of one writer, so the same families): every
    /// counter, count, sum and bucket added up, saturating; the words that are values, not
    /// counts (the sequence, the last arrival time, the last finish cause), 0. `None`
    /// without a copy. What an engine's statistics are: the sum of its slots'.
    pub fn sum(copies: &[SlotStats]) -> Option<SlotStats> {
        let first = copies.first()?;
        let mut words = vec![0u64; first.words.len()].into_boxed_slice();
        for copy in copies {
            for (w, c) in words.iter_mut().zip(copy.words.iter()) {
                *w = w.saturating_add(*c);
            }
        }
        for value in [
            0,
            Counter::TaskArrivalNs.offset(),
            Counter::LastFinishCause.offset(),
        ] {
            words[value / WORD_LEN] = 0;
        }
        Some(Self {
            words,
            capabilities: first.capabilities,
        })
    }

    /// The checks every consistent copy of a conforming writer passes (FORMAT §17.7).
    pub fn check(&self) -> Result<(), StatsDefect> {
        for kind in HistogramKind::ALL {
            let at = kind.offset();
            let count = self.word(at + HIST_COUNT_OFFSET);
            let total: u128 = (0..kind.buckets())
                .map(|k| u128::from(self.word(at + HIST_BUCKETS_OFFSET + k * WORD_LEN)))
                .sum();
            if total != u128::from(count) {
                return Err(StatsDefect::BucketsNotCount {
                    kind: kind.as_str(),
                    buckets: total,
                    count,
                });
            }
        }
        let begun = self.word(Counter::TasksBegun.offset());
        let ended = self.word(Counter::TasksEnded.offset());
        if ended > begun || begun - ended > 1 {
            return Err(StatsDefect::TaskCounts { begun, ended });
        }
        if let Some(by_cause) = self.tasks_by_cause() {
            let total: u128 = by_cause.iter().map(|&n| u128::from(n)).sum();
            if total != u128::from(ended) {
                return Err(StatsDefect::CausesNotEnded {
                    by_cause: total,
                    ended,
                });
            }
        }
        Ok(())
    }

    /// Checks that no counter, count, sum or bucket (nor the sequence) is smaller than in
    /// `earlier`, a copy of the same slot of the same segment instance (FORMAT §17.7).
    pub fn check_since(&self, earlier: &SlotStats) -> Result<(), StatsDefect> {
        let exempt = [
            Counter::TaskArrivalNs.offset() / WORD_LEN,
            Counter::LastFinishCause.offset() / WORD_LEN,
        ];
        for (i, (&before, &after)) in earlier.words.iter().zip(self.words.iter()).enumerate() {
            if after < before && !exempt.contains(&i) {
                return Err(StatsDefect::WentBackwards {
                    what: word_name(i * WORD_LEN),
                    before,
                    after,
                });
            }
        }
        Ok(())
    }
}

/// A readable name for the word at `offset` of the block.
fn word_name(offset: usize) -> String {
    if offset == 0 {
        return "stats_seq".to_owned();
    }
    if let Some(c) = Counter::ALL.iter().find(|c| c.offset() == offset) {
        return c.as_str().to_owned();
    }
    if let Some(h) = HistogramKind::ALL
        .iter()
        .find(|h| (h.offset()..h.offset() + super::HISTOGRAM_LEN).contains(&offset))
    {
        let inner = offset - h.offset();
        return match inner {
            HIST_COUNT_OFFSET => format!("{}.count", h.as_str()),
            HIST_SUM_OFFSET => format!("{}.sum", h.as_str()),
            _ => format!(
                "{}.bucket[{}]",
                h.as_str(),
                (inner - HIST_BUCKETS_OFFSET) / WORD_LEN
            ),
        };
    }
    let arrays = [
        (TASKS_BY_CAUSE_OFFSET, CAUSE_WORDS, "tasks_by_cause"),
        (ERRORS_BY_CODE_OFFSET, CAUSE_WORDS, "errors_by_code"),
        (BUSY_NS_OFFSET, PHASE_WORDS, "busy_ns"),
        (STEPS_OFFSET, PHASE_WORDS, "steps"),
        (STEPS_ABANDONED_OFFSET, PHASE_WORDS, "steps_abandoned"),
    ];
    for (at, n, name) in arrays {
        if (at..at + n * WORD_LEN).contains(&offset) {
            return format!("{name}[{}]", (offset - at) / WORD_LEN);
        }
    }
    format!("word at {offset}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::capabilities as caps;

    fn stats(set: &[(usize, u64)], capabilities: u64) -> SlotStats {
        let mut w = vec![0u64; STATS_LEN / WORD_LEN];
        for &(off, v) in set {
            w[off / WORD_LEN] = v;
        }
        SlotStats::from_block(w.into_boxed_slice(), capabilities)
    }

    #[test]
    fn absent_families_are_none_not_zero() {
        let s = stats(&[], caps::SLOT_STATS);
        assert!(s.histogram(HistogramKind::Itl).is_some());
        assert!(s.histogram(HistogramKind::Ttft).is_none());
        assert!(s.histogram(HistogramKind::RatioDecode).is_none());
        assert!(s.tasks_by_cause().is_none());
        assert!(s.counter(Counter::TasksNoArrival).is_none());
        assert_eq!(s.counter(Counter::TasksBegun), Some(0));
        let none = stats(&[], 0);
        assert!(none.histogram(HistogramKind::Itl).is_none());
    }

    #[test]
    fn checks_catch_buckets_that_do_not_add_up_and_counts_that_go_backwards() {
        let itl = HistogramKind::Itl.offset();
        let good = stats(
            &[(itl, 2), (itl + HIST_BUCKETS_OFFSET + 13 * 8, 2)],
            caps::SLOT_STATS,
        );
        assert_eq!(good.check(), Ok(()));
        let bad = stats(
            &[(itl, 3), (itl + HIST_BUCKETS_OFFSET + 13 * 8, 2)],
            caps::SLOT_STATS,
        );
        assert!(matches!(
            bad.check(),
            Err(StatsDefect::BucketsNotCount { .. })
        ));
        let tasks = stats(
            &[
                (Counter::TasksBegun.offset(), 1),
                (Counter::TasksEnded.offset(), 2),
            ],
            0,
        );
        assert!(matches!(tasks.check(), Err(StatsDefect::TaskCounts { .. })));
        let earlier = stats(&[(itl + HIST_BUCKETS_OFFSET + 13 * 8, 5)], caps::SLOT_STATS);
        let err = good.check_since(&earlier).unwrap_err();
        assert_eq!(
            err.to_string(),
            "inter_token_latency.bucket[13] went backwards from 5 to 2"
        );
        // Values, not counters, may change freely.
        let a = stats(&[(Counter::TaskArrivalNs.offset(), 9)], caps::SLOT_STATS);
        let b = stats(&[(Counter::TaskArrivalNs.offset(), 3)], caps::SLOT_STATS);
        assert_eq!(b.check_since(&a), Ok(()));
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_like_prometheus() {
        let mut buckets = vec![0u64; 54];
        buckets[13] = 2; // (8.192, 12.288] ms
        buckets[14] = 2; // (12.288, 16.384] ms
        let h = Histogram {
            kind: HistogramKind::Itl,
            count: 4,
            sum: 48_000_000,
            buckets,
        };
        assert!((h.quantile(0.5).unwrap() - 0.012288).abs() < 1e-12);
        assert!((h.quantile(0.25).unwrap() - 0.01024).abs() < 1e-12);
        assert!((h.mean().unwrap() - 0.012).abs() < 1e-12);
        let empty = Histogram {
            count: 0,
            sum: 0,
            buckets: vec![0; 54],
            ..h
        };
        assert_eq!(empty.quantile(0.5), None);
    }
}
