//! The oracle of the statistics families (format v1.3): the same series encoded with
//! prometheus-client's own histogram and counter encoders, from the same sums. Names and
//! help come from the exporter's tables; what this checks is the encoding (cumulative
//! buckets, `le` bounds, sums in seconds, the labels and their order, absent families).

use super::{FamilyWriter, NoLabels, L};
use hydra_exporter::collect::Collection;
use hydra_exporter::engine_stats::{COUNTER_FAMILIES, HISTOGRAM_FAMILIES, LABELLED_COUNTERS};
use hydra_layout::stats::buckets::Q20_ONE;
use hydra_layout::{ErrorCode, FinishCause, Phase};
use hydra_probe::StatsSum;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::MetricType;
use std::collections::HashMap;
use std::fmt;

type Rows<'c> = Vec<(&'c str, Option<usize>, &'c StatsSum)>;

fn rows(c: &Collection) -> Rows<'_> {
    c.views_with_stats()
        .flat_map(|(e, sums)| {
            sums.iter()
                .map(move |(s, sum)| (e.engine_id.as_str(), *s, sum))
        })
        .collect()
}

fn labels<'a>(engine: &'a str, slot: Option<usize>, extra: &'a [(&'static str, &'a str)]) -> L<'a> {
    L {
        engine,
        slot,
        extra,
    }
}

/// Every statistics family, in the exporter's order.
pub fn encode(c: &Collection, enc: &mut DescriptorEncoder) -> fmt::Result {
    let rows = rows(c);
    if rows.is_empty() {
        return Ok(());
    }
    for family in &HISTOGRAM_FAMILIES {
        let present = rows.iter().any(|(_, _, s)| {
            family
                .members
                .iter()
                .any(|(k, _)| s.histogram(*k).is_some())
        });
        if !present {
            continue;
        }
        let mut m = enc.encode_descriptor(family.name, family.help, None, MetricType::Histogram)?;
        for (engine, slot, sum) in &rows {
            for (kind, label) in family.members {
                let Some(h) = sum.histogram(*kind) else {
                    continue;
                };
                let extra: Vec<(&'static str, &str)> = label.iter().map(|l| ("kind", *l)).collect();
                let buckets: Vec<(f64, u64)> = (0..h.buckets.len())
                    .map(|k| (h.bound(k).unwrap_or(f64::INFINITY), h.buckets[k]))
                    .collect();
                let total = if kind.is_ratio() {
                    h.sum as f64 / Q20_ONE as f64
                } else {
                    h.sum as f64 / 1e9
                };
                m.encode_family(&labels(engine, *slot, &extra))?
                    .encode_histogram::<NoLabels>(
                        total,
                        h.count,
                        &buckets,
                        None::<&HashMap<usize, Exemplar<NoLabels, f64>>>,
                    )?;
            }
        }
    }
    for (name, help, counter) in COUNTER_FAMILIES {
        let series: Vec<_> = rows
            .iter()
            .filter_map(|(e, s, sum)| Some((labels(e, *s, &[]), sum.counter(counter)?)))
            .collect();
        if series.is_empty() {
            continue;
        }
        let base = name.strip_suffix("_total").unwrap_or(name);
        let mut m = enc.encode_descriptor(base, help, None, MetricType::Counter)?;
        for (l, v) in &series {
            ConstCounter::new(*v).encode(m.encode_family(l)?)?;
        }
    }
    labelled(&mut FamilyWriter { enc }, &rows)
}

/// Known label values at their count, then `unknown` when the others sum to more than 0.
fn known_then_unknown(
    words: &[u64],
    name_of: impl Fn(u64) -> Option<&'static str>,
) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    let mut unknown = 0u64;
    for (raw, v) in (0u64..).zip(words) {
        match name_of(raw) {
            Some(n) => out.push((n, *v)),
            None => unknown = unknown.saturating_add(*v),
        }
    }
    if unknown > 0 {
        out.push(("unknown", unknown));
    }
    out
}

fn phase_name(raw: u64) -> Option<&'static str> {
    match Phase::from_raw(raw) {
        p @ (Phase::Prefill | Phase::Decode | Phase::Save | Phase::Restore) => Some(p.as_str()),
        _ => None,
    }
}

/// Per phase: idle and queued left out, a phase unknown to the exporter as `unknown`.
fn phases(words: &[u64; 8]) -> Vec<(&'static str, u64)> {
    let kept: Vec<u64> = (0u64..)
        .zip(words)
        .map(|(raw, v)| match Phase::from_raw(raw) {
            Phase::Idle | Phase::Queued => 0,
            _ => *v,
        })
        .collect();
    known_then_unknown(&kept, phase_name)
}

fn labelled(f: &mut FamilyWriter, rows: &Rows) -> fmt::Result {
    type Of = fn(&StatsSum) -> Option<Vec<(&'static str, u64)>>;
    let families: [(&str, &str, &'static str, Of); 5] = [
        (LABELLED_COUNTERS[0], "Tasks ended, by why they ended (eos, length, stop_string, context_full, done, cancelled, error; unspecified when the host did not say)", "cause", |s| {
            s.tasks_by_cause.map(|w| known_then_unknown(&w, |raw| match FinishCause::from_raw(raw) {
                FinishCause::Unknown(_) => None,
                c => Some(c.as_str()),
            }))
        }),
        (LABELLED_COUNTERS[1], "Tasks that failed, by error code", "code", |s| {
            s.errors_by_code.map(|w| known_then_unknown(&w[1..], |raw| match ErrorCode::from_raw(raw + 1) {
                ErrorCode::Unknown(_) => None,
                c => Some(c.as_str()),
            }))
        }),
        (LABELLED_COUNTERS[2], "Seconds the slots spent in steps, by phase", "phase", |s| Some(phases(&s.busy_ns))),
        (LABELLED_COUNTERS[3], "Steps finished, by kind of step", "kind", |s| Some(phases(&s.steps))),
        (LABELLED_COUNTERS[4], "Steps abandoned (in flight when another event ended them), by kind of step", "kind", |s| Some(phases(&s.steps_abandoned))),
    ];
    for (name, help, label, of) in families {
        let mut pairs = Vec::new();
        for (engine, slot, sum) in rows {
            for (value, n) in of(sum).unwrap_or_default() {
                pairs.push((*engine, *slot, [(label, value)], n));
            }
        }
        if pairs.is_empty() {
            continue;
        }
        let base = name.strip_suffix("_total").unwrap_or(name);
        let mut m = f
            .enc
            .encode_descriptor(base, help, None, MetricType::Counter)?;
        for (engine, slot, extra, n) in &pairs {
            let l = labels(engine, *slot, extra);
            if *label == *"phase" {
                ConstCounter::new(*n as f64 / 1e9).encode(m.encode_family(&l)?)?;
            } else {
                ConstCounter::new(*n).encode(m.encode_family(&l)?)?;
            }
        }
    }
    Ok(())
}
