//! `hydra-probe stats`: an engine's statistics (format v1.3), its slots summed or one.

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use hydra_probe::{human, HistogramSummary, Named, StatsReport};
use std::io::Write;

pub(super) fn run(
    ctx: &Context,
    engine: Option<&str>,
    slot: Option<usize>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let reader = hydra_probe::open(&ctx.dir, engine)?;
    let report = StatsReport::capture(&reader, slot)?;
    if ctx.json {
        json_line(out, &report)?;
    } else {
        write_report(out, &report, slot)?;
    }
    Ok(EXIT_OK)
}

fn write_report(out: &mut dyn Write, r: &StatsReport, slot: Option<usize>) -> std::io::Result<()> {
    let whose = match slot {
        Some(s) => format!("engine {} slot {s}", r.engine_id),
        None => format!("engine {} ({} slots summed)", r.engine_id, r.slots.len()),
    };
    if !r.published {
        return writeln!(
            out,
            "{whose}: no statistics (its writer predates format v1.3's slot_stats)"
        );
    }
    writeln!(out, "{whose}")?;
    for l in &r.left_out {
        writeln!(out, "  left out: slot {}: {}", l.slot, l.reason)?;
    }
    let count = |name: &str| {
        r.counters
            .iter()
            .find(|c| c.name == name)
            .map_or("-".to_owned(), |c| c.value.to_string())
    };
    let causes = r.tasks_by_cause.as_deref().map(list).unwrap_or_default();
    writeln!(
        out,
        "  tasks: {} begun, {} ended{}",
        count("tasks_begun"),
        count("tasks_ended"),
        if causes.is_empty() {
            String::new()
        } else {
            format!(" ({causes})")
        }
    )?;
    if let Some(errors) = r.errors_by_code.as_deref().filter(|e| !e.is_empty()) {
        writeln!(out, "  errors: {}", list(errors))?;
    }
    writeln!(
        out,
        "  tokens: {} prompt computed, {} reused, {} generated",
        count("prompt_tokens_computed"),
        count("prompt_tokens_reused"),
        count("tokens_generated")
    )?;
    let busy: Vec<String> = r
        .busy_seconds
        .iter()
        .map(|b| format!("{} {}", b.name, human::seconds(b.value)))
        .collect();
    writeln!(
        out,
        "  busy: {}",
        if busy.is_empty() {
            "-".into()
        } else {
            busy.join(", ")
        }
    )?;
    write!(out, "  steps: {}", or_dash(&list(&r.steps)))?;
    if !r.steps_abandoned.is_empty() {
        write!(out, " (abandoned: {})", list(&r.steps_abandoned))?;
    }
    writeln!(out)?;
    let mut rows = vec![["HISTOGRAM", "COUNT", "MEAN", "P50", "P90", "P99"]
        .map(String::from)
        .to_vec()];
    rows.extend(r.histograms.iter().map(histogram_row));
    table(out, &rows)
}

/// `name value, ...` of `items`.
fn list(items: &[Named]) -> String {
    items
        .iter()
        .map(|n| format!("{} {}", n.name, n.value))
        .collect::<Vec<_>>()
        .join(", ")
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_owned()
    }
}

/// One line of the histogram table: seconds as durations, ratios with two decimals.
fn histogram_row(h: &HistogramSummary) -> Vec<String> {
    let figure = |v: Option<f64>| match v {
        None => "-".to_owned(),
        Some(x) if h.unit == "ratio" => format!("{x:.2}"),
        Some(x) => human::seconds(x),
    };
    vec![
        h.name.to_owned(),
        h.count.to_string(),
        figure(h.mean),
        figure(h.p50),
        figure(h.p90),
        figure(h.p99),
    ]
}
