//! The engines' statistics (format v1.3, FORMAT.md §17) as Prometheus histograms and
//! counters: what each engine's writer keeps in its segment, cumulative from the segment's
//! creation, so a scrape sees every request and every step, not the one that happened to
//! be in flight, and the series stay readable while the engine is wedged and after it died.
//!
//! Summed per engine (label `engine`) by default; per slot (`engine`, `slot`) when the
//! collector keeps them so ([`Collector::with_per_slot_stats`](crate::Collector)). A family
//! the writer does not fill (its capability bit is clear, or the segment is older than
//! v1.3) has no series: absent, never zeros. Label values that the format knows are
//! exported from the first scrape, at 0, so that `rate()` sees the first increase; values
//! from a newer writer add up under `unknown`.

use crate::collect::Collection;
use crate::exposition::{
    Exposition, ExtraLabel, Kind, LabelSets, Labels, Les, Observations, Seconds, Value,
};
use hydra_layout::stats::{buckets, Counter, HistogramKind};
use hydra_layout::{ErrorCode, FinishCause, Phase};
use hydra_probe::StatsSum;

/// A histogram family: its name (the samples add `_bucket`, `_sum`, `_count`), its help,
/// and the histograms of a slot it holds, each with its `kind` label (none for one alone).
pub struct HistogramFamily {
    /// The family name.
    pub name: &'static str,
    /// Its `# HELP`.
    pub help: &'static str,
    /// The histograms, with their `kind` label value when the family holds several.
    pub members: &'static [(HistogramKind, Option<&'static str>)],
}

/// Every histogram family, in output order.
pub const HISTOGRAM_FAMILIES: [HistogramFamily; 8] = [
    HistogramFamily {
        name: "hydra_time_to_first_token_seconds",
        help: "Time from a task's arrival to its first generated token",
        members: &[(HistogramKind::Ttft, None)],
    },
    HistogramFamily {
        name: "hydra_inter_token_latency_seconds",
        help: "Time per generated token: each decode step's duration, once per token it produced for the slot",
        members: &[(HistogramKind::Itl, None)],
    },
    HistogramFamily {
        name: "hydra_request_queue_time_seconds",
        help: "Time from a task's arrival to its first compute",
        members: &[(HistogramKind::QueueWait, None)],
    },
    HistogramFamily {
        name: "hydra_request_prefill_time_seconds",
        help: "Time a task spent in its prefill phase",
        members: &[(HistogramKind::PrefillTime, None)],
    },
    HistogramFamily {
        name: "hydra_request_decode_time_seconds",
        help: "Time a task spent in its decode phase",
        members: &[(HistogramKind::DecodeTime, None)],
    },
    HistogramFamily {
        name: "hydra_e2e_request_latency_seconds",
        help: "Time from a task's arrival to its end",
        members: &[(HistogramKind::E2e, None)],
    },
    HistogramFamily {
        name: "hydra_step_duration_seconds",
        help: "Duration of each finished step, by kind of step (prefill chunk, decode step, save or restore block)",
        members: &[
            (HistogramKind::StepPrefill, Some("prefill")),
            (HistogramKind::StepDecode, Some("decode")),
            (HistogramKind::StepSave, Some("save")),
            (HistogramKind::StepRestore, Some("restore")),
        ],
    },
    HistogramFamily {
        name: "hydra_step_duration_over_predicted_ratio",
        help: "Each predicted step's actual duration over the writer's prediction of it (the cost model's error), by kind of step",
        members: &[
            (HistogramKind::RatioPrefill, Some("prefill")),
            (HistogramKind::RatioDecode, Some("decode")),
        ],
    },
];

/// The counter families of one statistics word each: sample name and help.
pub const COUNTER_FAMILIES: [(&str, &str, Counter); 6] = [
    (
        "hydra_tasks_begun_total",
        "Tasks the slots began",
        Counter::TasksBegun,
    ),
    (
        "hydra_tasks_ended_total",
        "Tasks the slots ended, whatever the cause",
        Counter::TasksEnded,
    ),
    (
        "hydra_tasks_without_arrival_total",
        "Tasks begun without an arrival time (absent from the arrival histograms)",
        Counter::TasksNoArrival,
    ),
    (
        "hydra_prompt_tokens_computed_total",
        "Prompt tokens evaluated",
        Counter::PromptTokensComputed,
    ),
    (
        "hydra_prompt_tokens_reused_total",
        "Prompt tokens reused from the cache instead of evaluated",
        Counter::PromptTokensReused,
    ),
    (
        "hydra_tokens_generated_total",
        "Tokens generated",
        Counter::TokensGenerated,
    ),
];

/// The labelled counter families, in output order after [`COUNTER_FAMILIES`].
pub const LABELLED_COUNTERS: [&str; 5] = [
    "hydra_tasks_finished_total",
    "hydra_task_errors_total",
    "hydra_busy_seconds_total",
    "hydra_steps_total",
    "hydra_steps_abandoned_total",
];

/// The phases a slot is busy in, the `phase` / `kind` label values of the per-phase
/// counters.
const BUSY_PHASES: [Phase; 4] = [Phase::Prefill, Phase::Decode, Phase::Save, Phase::Restore];

/// Whether `name` is a sample name of a histogram family (`…_bucket`, `…_sum`,
/// `…_count`).
pub fn is_histogram_sample(name: &str) -> bool {
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        name.strip_suffix(suffix)
            .is_some_and(|base| HISTOGRAM_FAMILIES.iter().any(|f| f.name == base))
    })
}

/// One series' statistics with its label set.
type Row<'c> = (Labels<'c>, &'c StatsSum);

/// Writes the statistics families of every engine in `c`, in the order of
/// [`HISTOGRAM_FAMILIES`], [`COUNTER_FAMILIES`] and [`LABELLED_COUNTERS`].
pub(crate) fn stats_families(x: &mut Exposition, c: &Collection) {
    let mut sets = LabelSets::default();
    let mut ids = Vec::new();
    let mut slot = itoa::Buffer::new();
    for (e, sums) in c.views_with_stats() {
        for (s, sum) in sums {
            let id = match s {
                None => sets.add(&[("engine", &e.engine_id)]),
                Some(s) => sets.add(&[("engine", &e.engine_id), ("slot", slot.format(*s))]),
            };
            ids.push((id, sum));
        }
    }
    if ids.is_empty() {
        return;
    }
    let rows: Vec<Row> = ids.into_iter().map(|(id, s)| (sets.get(id), s)).collect();
    histograms(x, &rows);
    counters(x, &rows);
    finish_causes(x, &rows);
    per_phase(x, &rows);
}

fn histograms(x: &mut Exposition, rows: &[Row]) {
    let times = Les::new((0..buckets::TIME_BUCKETS).map(buckets::time_le));
    let ratios = Les::new((0..buckets::RATIO_BUCKETS).map(buckets::ratio_le));
    for family in &HISTOGRAM_FAMILIES {
        let kinds: Vec<(HistogramKind, Option<ExtraLabel>)> = family
            .members
            .iter()
            .map(|(k, label)| (*k, label.map(|l| ExtraLabel::new("kind", l))))
            .collect();
        x.family(family.name, family.help, Kind::Histogram, |f| {
            for (labels, sum) in rows {
                for (kind, extra) in &kinds {
                    let Some(h) = sum.histogram(*kind) else {
                        continue;
                    };
                    let (count, buckets) = (h.count, h.buckets.as_slice());
                    if kind.is_ratio() {
                        let ratio = h.sum as f64 / buckets::Q20_ONE as f64;
                        let obs = Observations {
                            sum: ratio,
                            count,
                            buckets,
                        };
                        f.histogram(*labels, extra.as_ref(), &ratios, obs);
                    } else {
                        let obs = Observations {
                            sum: Seconds(h.sum),
                            count,
                            buckets,
                        };
                        f.histogram(*labels, extra.as_ref(), &times, obs);
                    }
                }
            }
        });
    }
}

fn counters(x: &mut Exposition, rows: &[Row]) {
    for (name, help, counter) in COUNTER_FAMILIES {
        x.family(name, help, Kind::Counter, |f| {
            for (labels, sum) in rows {
                if let Some(v) = sum.counter(counter) {
                    f.sample(*labels, v);
                }
            }
        });
    }
}

/// A labelled count: each label value the format knows (from the first scrape), then
/// `unknown` for the values it does not, when nonzero. `values` gives each count with the
/// index of its label in `known`, `None` for a value this exporter does not know.
fn labelled<V: Value>(
    f: &mut crate::exposition::Family<'_>,
    labels: Labels<'_>,
    (known, unknown): (&[ExtraLabel], &ExtraLabel),
    values: impl Iterator<Item = (Option<usize>, u64)>,
    value: impl Fn(u64) -> V,
) {
    let mut of_known = vec![0u64; known.len()];
    let mut of_unknown = 0u64;
    for (index, v) in values {
        let into = match index {
            Some(i) => &mut of_known[i],
            None => &mut of_unknown,
        };
        *into = into.saturating_add(v);
    }
    for (label, v) in known.iter().zip(of_known) {
        f.sample_with(labels, label, value(v));
    }
    if of_unknown > 0 {
        f.sample_with(labels, unknown, value(of_unknown));
    }
}

fn finish_causes(x: &mut Exposition, rows: &[Row]) {
    let causes: Vec<FinishCause> = (0..16)
        .map(FinishCause::from_raw)
        .filter(|c| !matches!(c, FinishCause::Unknown(_)))
        .collect();
    // Index 0 (`none`) is not an error: a failed task always has a code.
    let codes: Vec<ErrorCode> = (1..16)
        .map(ErrorCode::from_raw)
        .filter(|c| !matches!(c, ErrorCode::Unknown(_)))
        .collect();
    let unknown = ExtraLabel::new("cause", "unknown");
    let cause_labels: Vec<ExtraLabel> = causes
        .iter()
        .map(|c| ExtraLabel::new("cause", c.as_str()))
        .collect();
    x.family(
        LABELLED_COUNTERS[0],
        "Tasks ended, by why they ended (eos, length, stop_string, context_full, done, cancelled, error; unspecified when the host did not say)",
        Kind::Counter,
        |f| {
            for (labels, sum) in rows {
                let Some(by) = sum.tasks_by_cause else { continue };
                let values = (0u64..).zip(by).map(|(raw, v)| {
                    (causes.iter().position(|c| c.to_raw() == raw), v)
                });
                labelled(f, *labels, (&cause_labels, &unknown), values, |v| v);
            }
        },
    );
    let unknown = ExtraLabel::new("code", "unknown");
    let code_labels: Vec<ExtraLabel> = codes
        .iter()
        .map(|c| ExtraLabel::new("code", c.as_str()))
        .collect();
    x.family(
        LABELLED_COUNTERS[1],
        "Tasks that failed, by error code",
        Kind::Counter,
        |f| {
            for (labels, sum) in rows {
                let Some(by) = sum.errors_by_code else {
                    continue;
                };
                let values = (0u64..)
                    .zip(by)
                    .skip(1)
                    .map(|(raw, v)| (codes.iter().position(|c| c.to_raw() == raw), v));
                labelled(f, *labels, (&code_labels, &unknown), values, |v| v);
            }
        },
    );
}

/// Each word of a per-phase array with the index of its phase in [`BUSY_PHASES`]: `None`
/// for a phase this exporter does not know; idle and queued, where no step runs, left out.
fn by_phase(words: [u64; 8]) -> impl Iterator<Item = (Option<usize>, u64)> {
    (0u64..).zip(words).filter_map(|(raw, v)| {
        match BUSY_PHASES.iter().position(|p| p.to_raw() == raw) {
            Some(i) => Some((Some(i), v)),
            None if matches!(Phase::from_raw(raw), Phase::Unknown(_)) => Some((None, v)),
            None => None,
        }
    })
}

fn per_phase(x: &mut Exposition, rows: &[Row]) {
    let labels_of = |name: &str| -> (Vec<ExtraLabel>, ExtraLabel) {
        let known = BUSY_PHASES
            .iter()
            .map(|p| ExtraLabel::new(name, p.as_str()))
            .collect();
        (known, ExtraLabel::new(name, "unknown"))
    };
    let (phases, unknown_phase) = labels_of("phase");
    x.family(
        LABELLED_COUNTERS[2],
        "Seconds the slots spent in steps, by phase",
        Kind::Counter,
        |f| {
            for (labels, sum) in rows {
                let values = by_phase(sum.busy_ns);
                labelled(f, *labels, (&phases, &unknown_phase), values, Seconds);
            }
        },
    );
    let (kinds, unknown_kind) = labels_of("kind");
    for (name, help, get) in [
        (
            LABELLED_COUNTERS[3],
            "Steps finished, by kind of step",
            (|s: &StatsSum| s.steps) as fn(&StatsSum) -> [u64; 8],
        ),
        (
            LABELLED_COUNTERS[4],
            "Steps abandoned (in flight when another event ended them), by kind of step",
            |s: &StatsSum| s.steps_abandoned,
        ),
    ] {
        x.family(name, help, Kind::Counter, |f| {
            for (labels, sum) in rows {
                let values = by_phase(get(sum));
                labelled(f, *labels, (&kinds, &unknown_kind), values, |v| v);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_are_listed_in_metric_names_in_output_order() {
        let ours: Vec<&str> = HISTOGRAM_FAMILIES
            .iter()
            .map(|f| f.name)
            .chain(COUNTER_FAMILIES.iter().map(|(n, _, _)| *n))
            .chain(LABELLED_COUNTERS)
            .collect();
        let listed: Vec<&str> = crate::METRIC_NAMES
            .iter()
            .copied()
            .filter(|n| ours.contains(n))
            .collect();
        assert_eq!(listed, ours);
        assert!(is_histogram_sample("hydra_step_duration_seconds_bucket"));
        assert!(!is_histogram_sample("hydra_step_duration_seconds"));
        assert!(!is_histogram_sample("hydra_tasks_begun_total_count"));
    }
}
