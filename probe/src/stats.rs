//! An engine's statistics (format v1.3, FORMAT.md §17) as an operator reads them: each
//! slot's block copied once and checked (§17.7), the trusted ones summed (every counter and
//! histogram of the block only grows and is kept per slot, so the engine's is their sum),
//! and each histogram summarised by its count, mean and p50/p90/p99, estimated as
//! Prometheus' `histogram_quantile` does. A slot whose copy fails the checks is left out
//! of the sum and named with the reason; a writer without statistics reads as absent,
//! never as zeros.

use crate::error::ProbeError;
use hydra_layout::stats::{Counter, Histogram, HistogramKind, SlotStats, CAUSE_WORDS, PHASE_WORDS};
use hydra_layout::{ErrorCode, FinishCause, Phase, SegmentReader};
use serde::Serialize;

/// The statistics of one engine, or of one of its slots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsReport {
    /// The engine's id.
    pub engine_id: String,
    /// The slots summed.
    pub slots: Vec<usize>,
    /// Slots left out, with why (a copy that fails FORMAT §17.7's checks, or unreadable).
    pub left_out: Vec<LeftOut>,
    /// Whether the writer keeps statistics at all (format v1.3 `slot_stats`); when not,
    /// everything below is empty.
    pub published: bool,
    /// The counters the writer fills (`tasks_begun`, `prompt_tokens_computed`, ...).
    pub counters: Vec<Named>,
    /// Tasks ended per finish cause (nonzero ones), when the writer gives causes.
    pub tasks_by_cause: Option<Vec<Named>>,
    /// Failed tasks per error code (nonzero ones), when the writer gives causes.
    pub errors_by_code: Option<Vec<Named>>,
    /// Seconds busy per phase (nonzero ones).
    pub busy_seconds: Vec<NamedFigure>,
    /// Finished steps per phase (nonzero ones).
    pub steps: Vec<Named>,
    /// Abandoned steps per phase (nonzero ones).
    pub steps_abandoned: Vec<Named>,
    /// Each histogram the writer fills, summarised.
    pub histograms: Vec<HistogramSummary>,
}

/// A slot the report leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// The slot.
    pub slot: usize,
    /// Why.
    pub reason: String,
}

/// A count with its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Named {
    /// What is counted.
    pub name: String,
    /// How many.
    pub value: u64,
}

/// A figure with its name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedFigure {
    /// What it is.
    pub name: String,
    /// Its value.
    pub value: f64,
}

/// One histogram in a few figures: seconds for times, the plain ratio for the cost
/// model's actual/predicted ratios. The figures are `None` without observations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistogramSummary {
    /// Its name (`time_to_first_token`, `inter_token_latency`, ...).
    pub name: &'static str,
    /// `seconds` or `ratio`.
    pub unit: &'static str,
    /// Observations.
    pub count: u64,
    /// Their mean.
    pub mean: Option<f64>,
    /// The median, and the 90th and 99th percentiles.
    pub p50: Option<f64>,
    /// See `p50`.
    pub p90: Option<f64>,
    /// See `p50`.
    pub p99: Option<f64>,
}

/// The raw sum of an engine's slots' statistics (or of one slot's): what [`StatsReport`]
/// summarises, and what an exporter writes as Prometheus counters and histograms. Every
/// sum saturates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSum {
    /// The slots summed.
    pub slots: Vec<usize>,
    /// Slots left out, with why (a copy that fails FORMAT §17.7's checks, or unreadable).
    pub left_out: Vec<LeftOut>,
    /// Whether the writer keeps statistics at all (format v1.3 `slot_stats`); when not,
    /// everything below is empty or zero.
    pub published: bool,
    /// The monotonic counters the writer fills, in block order.
    pub counters: Vec<(Counter, u64)>,
    /// Tasks ended per finish cause (indexed by [`FinishCause`]'s raw value), when the
    /// writer gives causes.
    pub tasks_by_cause: Option<[u64; CAUSE_WORDS]>,
    /// Failed tasks per error code (indexed by [`ErrorCode`]'s raw value), likewise.
    pub errors_by_code: Option<[u64; CAUSE_WORDS]>,
    /// Nanoseconds busy per phase (indexed by [`Phase`]'s raw value).
    pub busy_ns: [u64; PHASE_WORDS],
    /// Finished steps per phase.
    pub steps: [u64; PHASE_WORDS],
    /// Abandoned steps per phase.
    pub steps_abandoned: [u64; PHASE_WORDS],
    /// Each histogram the writer fills, in block order, its buckets not cumulative.
    pub histograms: Vec<Histogram>,
}

impl StatsSum {
    /// The sum of `slot`'s statistics, or of every slot's, of the engine `reader` maps.
    /// Each slot's block is copied once and checked; a failing one is left out and named.
    pub fn capture(reader: &SegmentReader, slot: Option<usize>) -> Result<Self, ProbeError> {
        let engine_id = &reader.identity().engine_id;
        let slots = ProbeError::slots_asked(engine_id, reader.slot_count(), slot)?;
        let mut left_out = Vec::new();
        let mut copies = Vec::new();
        // The reader checks each copy (FORMAT §17.7): a failing one is an error. Every slot
        // is read after one size check.
        let read: Vec<(usize, hydra_layout::Result<SlotStats>)> = match slot {
            Some(s) => reader
                .stats(s)
                .transpose()
                .map(|r| (s, r))
                .into_iter()
                .collect(),
            None => reader
                .stats_all()
                .map_err(ProbeError::from)?
                .into_iter()
                .flatten()
                .enumerate()
                .collect(),
        };
        for (s, copy) in read.into_iter().filter(|(s, _)| slots.contains(s)) {
            match copy {
                Ok(copy) => copies.push((s, copy)),
                Err(e) => left_out.push(LeftOut {
                    slot: s,
                    reason: e.to_string(),
                }),
            }
        }
        let published = !copies.is_empty() || !left_out.is_empty();
        let slots = copies.iter().map(|(s, _)| *s).collect();
        let copies: Vec<SlotStats> = copies.into_iter().map(|(_, c)| c).collect();
        Ok(Self {
            slots,
            left_out,
            published,
            ..Self::of(&copies)
        })
    }

    /// The sum of `copies` (all of one writer, so the same families).
    pub fn of(copies: &[SlotStats]) -> Self {
        let mut sum = Self {
            slots: Vec::new(),
            left_out: Vec::new(),
            published: !copies.is_empty(),
            counters: Vec::new(),
            tasks_by_cause: None,
            errors_by_code: None,
            busy_ns: [0; PHASE_WORDS],
            steps: [0; PHASE_WORDS],
            steps_abandoned: [0; PHASE_WORDS],
            histograms: Vec::new(),
        };
        // One block holding every slot's words added up, read once.
        let Some(all) = SlotStats::sum(copies) else {
            return sum;
        };
        sum.counters = Counter::ALL
            .into_iter()
            .filter(|c| c.is_monotonic())
            .filter_map(|c| Some((c, all.counter(c)?)))
            .collect();
        sum.tasks_by_cause = all.tasks_by_cause();
        sum.errors_by_code = all.errors_by_code();
        sum.busy_ns = all.busy_ns();
        sum.steps = all.steps();
        sum.steps_abandoned = all.steps_abandoned();
        sum.histograms = HistogramKind::ALL
            .into_iter()
            .filter_map(|kind| all.histogram(kind))
            .collect();
        sum
    }

    /// The histogram of `kind`, when the writer fills it.
    pub fn histogram(&self, kind: HistogramKind) -> Option<&Histogram> {
        self.histograms.iter().find(|h| h.kind == kind)
    }

    /// The counter `c`, when the writer fills it.
    pub fn counter(&self, c: Counter) -> Option<u64> {
        self.counters.iter().find(|(k, _)| *k == c).map(|(_, v)| *v)
    }
}

impl StatsReport {
    /// The statistics of `slot`, or of every slot summed, of the engine `reader` maps.
    pub fn capture(reader: &SegmentReader, slot: Option<usize>) -> Result<Self, ProbeError> {
        let sum = StatsSum::capture(reader, slot)?;
        Ok(Self::of(reader.identity().engine_id.clone(), &sum))
    }

    /// The report of `sum`, an engine's statistics (see [`StatsSum`]).
    pub fn of(engine_id: String, sum: &StatsSum) -> Self {
        let seconds = |n: Named| NamedFigure {
            name: n.name,
            value: n.value as f64 / 1e9,
        };
        Self {
            engine_id,
            slots: sum.slots.clone(),
            left_out: sum.left_out.clone(),
            published: sum.published,
            counters: sum
                .counters
                .iter()
                .map(|(c, value)| Named {
                    name: c.as_str().to_owned(),
                    value: *value,
                })
                .collect(),
            tasks_by_cause: sum
                .tasks_by_cause
                .map(|c| nonzero(&c, |i| FinishCause::from_raw(i).as_str())),
            errors_by_code: sum
                .errors_by_code
                .map(|c| nonzero(&c, |i| ErrorCode::from_raw(i).as_str())),
            busy_seconds: nonzero(&sum.busy_ns, phase_name)
                .into_iter()
                .map(seconds)
                .collect(),
            steps: nonzero(&sum.steps, phase_name),
            steps_abandoned: nonzero(&sum.steps_abandoned, phase_name),
            histograms: sum.histograms.iter().map(summarise).collect(),
        }
    }
}

fn phase_name(i: u64) -> &'static str {
    Phase::from_raw(i).as_str()
}

/// The nonzero entries of `a`, named by their index.
fn nonzero(a: &[u64], name: impl Fn(u64) -> &'static str) -> Vec<Named> {
    (0u64..)
        .zip(a)
        .filter(|(_, &v)| v > 0)
        .map(|(i, &value)| Named {
            name: name(i).to_owned(),
            value,
        })
        .collect()
}

fn summarise(h: &Histogram) -> HistogramSummary {
    HistogramSummary {
        name: h.kind.as_str(),
        unit: if h.kind.is_ratio() {
            "ratio"
        } else {
            "seconds"
        },
        count: h.count,
        mean: h.mean(),
        p50: h.quantile(0.5),
        p90: h.quantile(0.9),
        p99: h.quantile(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::header::capabilities as caps;
    use hydra_layout::{FinishReason, SegmentConfig, SegmentWriter, SlotState, WorkUnit};

    const MS: u64 = 1_000_000;

    /// An engine of two slots keeping statistics with finish causes: slot `s` runs one task
    /// of a 100-token prefill step of 40 ms and `s + 2` decode steps of 10 ms each.
    fn engine(dir: &std::path::Path) -> SegmentWriter {
        let mut w = SegmentWriter::create(&SegmentConfig {
            dir: dir.to_path_buf(),
            engine_id: "stats".into(),
            slot_count: 2,
            description: hydra_layout::EngineDescription {
                capabilities: caps::SLOT_STATS | caps::FINISH_CAUSES,
                ..Default::default()
            },
        })
        .unwrap();
        for slot in 0..2u64 {
            let mut s = SlotState::default();
            let t0 = 1_000 * MS * (slot + 1);
            s.begin_task(slot + 1, Phase::Prefill, WorkUnit::Tokens, 100, t0);
            s.start_step(100, t0);
            w.publish(slot as usize, &s).unwrap();
            s.finish_step(100, t0 + 40 * MS);
            w.publish(slot as usize, &s).unwrap();
            s.enter_phase(Phase::Decode, WorkUnit::Tokens, 0, t0 + 40 * MS);
            for i in 0..slot + 2 {
                let at = t0 + 40 * MS + i * 10 * MS;
                s.start_step(1, at);
                w.publish(slot as usize, &s).unwrap();
                s.finish_step(s.work_done + 1, at + 10 * MS);
                w.publish(slot as usize, &s).unwrap();
            }
            let end = t0 + 40 * MS + (slot + 2) * 10 * MS;
            w.note_finish(slot as usize, FinishCause::Length, end)
                .unwrap();
            s.finish(FinishReason::Completed, ErrorCode::None);
            w.publish(slot as usize, &s).unwrap();
        }
        w
    }

    fn named(list: &[Named], name: &str) -> Option<u64> {
        list.iter().find(|n| n.name == name).map(|n| n.value)
    }

    #[test]
    fn the_engine_sums_its_slots_and_one_slot_reads_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let w = engine(tmp.path());
        let r = SegmentReader::open(w.path()).unwrap();
        let all = StatsReport::capture(&r, None).unwrap();
        assert!(all.published && all.left_out.is_empty(), "{all:?}");
        assert_eq!(all.slots, [0, 1]);
        assert_eq!(named(&all.counters, "tasks_begun"), Some(2));
        assert_eq!(named(&all.counters, "tasks_ended"), Some(2));
        assert_eq!(named(&all.counters, "tokens_generated"), Some(5));
        assert_eq!(
            all.tasks_by_cause
                .as_deref()
                .and_then(|c| named(c, "length")),
            Some(2)
        );
        assert_eq!(named(&all.steps, "decode"), Some(5));
        assert_eq!(named(&all.steps, "prefill"), Some(2));
        let itl = all
            .histograms
            .iter()
            .find(|h| h.name == "inter_token_latency")
            .expect("inter-token latency");
        assert_eq!((itl.count, itl.unit), (5, "seconds"));
        let mean = itl.mean.unwrap();
        assert!((mean - 0.010).abs() < 1e-9, "10 ms steps: {mean}");
        let p50 = itl.p50.unwrap();
        assert!(
            (0.005..=0.020).contains(&p50),
            "in the bucket of 10 ms: {p50}"
        );
        assert!(
            all.histograms
                .iter()
                .all(|h| h.name != "time_to_first_token"),
            "no arrival times: that family is absent, not zero"
        );

        let one = StatsReport::capture(&r, Some(1)).unwrap();
        assert_eq!(one.slots, [1]);
        assert_eq!(named(&one.counters, "tokens_generated"), Some(3));
        let e = StatsReport::capture(&r, Some(2)).unwrap_err();
        assert!(
            matches!(e, ProbeError::SlotOutOfRange { count: 2, .. }),
            "{e}"
        );
    }

    #[test]
    fn a_writer_without_statistics_reads_absent_and_a_bad_copy_is_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        // A v1.2 writer's segment (a v1.3 file relabelled): no statistics.
        let plain = crate::test_support::writer(tmp.path(), "plain", 2);
        let mut old = std::fs::read(plain.path()).unwrap();
        old[hydra_layout::header::VERSION_MINOR_OFFSET..][..8].copy_from_slice(&2u64.to_ne_bytes());
        let old_path = tmp.path().join("as-v1.2.seg");
        std::fs::write(&old_path, &old).unwrap();
        let r = SegmentReader::open(&old_path).unwrap();
        let none = StatsReport::capture(&r, None).unwrap();
        assert!(!none.published && none.histograms.is_empty() && none.counters.is_empty());

        // Slot 1's inter-token latency count no longer matches its buckets.
        let w = engine(tmp.path());
        let mut bytes = std::fs::read(w.path()).unwrap();
        let block = hydra_layout::region::Layout::for_slots(2).stats.item(1);
        let at = block + HistogramKind::Itl.offset();
        bytes[at..at + 8].copy_from_slice(&99u64.to_ne_bytes());
        let copy = tmp.path().join("copy.seg");
        std::fs::write(&copy, &bytes).unwrap();
        let r = SegmentReader::open(&copy).unwrap();
        let report = StatsReport::capture(&r, None).unwrap();
        assert_eq!(report.slots, [0]);
        assert_eq!(report.left_out.len(), 1, "{report:?}");
        assert_eq!(report.left_out[0].slot, 1);
        assert!(
            report.left_out[0].reason.contains("inter_token_latency"),
            "{:?}",
            report.left_out[0]
        );
        assert_eq!(named(&report.counters, "tokens_generated"), Some(2));
    }
}
