//! `hydra-probe history`: the last steps of each slot, from its flight recorder.

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use hydra_layout::clock;
use hydra_probe::{human, HistoryReport, SlotHistory, StepRecord};
use std::io::Write;

pub(super) fn run(
    ctx: &Context,
    engine: Option<&str>,
    slot: Option<usize>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let reader = hydra_probe::open(&ctx.dir, engine)?;
    let report = HistoryReport::capture(&reader, slot, clock::monotonic_ns())?;
    if ctx.json {
        json_line(out, &report)?;
    } else if !report.published {
        writeln!(
            out,
            "engine {}: no flight recorder (its writer predates format v1.3)",
            report.engine_id
        )?;
    } else {
        for h in &report.slots {
            write_slot(out, &report.engine_id, h)?;
        }
    }
    Ok(EXIT_OK)
}

fn write_slot(out: &mut dyn Write, engine: &str, h: &SlotHistory) -> std::io::Result<()> {
    let torn = if h.torn > 0 {
        format!(", {} torn left out", h.torn)
    } else {
        String::new()
    };
    if let Some(e) = &h.error {
        return writeln!(out, "engine {engine} slot {}: unreadable: {e}", h.slot);
    }
    writeln!(
        out,
        "engine {engine} slot {}: {} steps, oldest first{torn}",
        h.slot,
        h.steps.len()
    )?;
    if h.steps.is_empty() {
        return Ok(());
    }
    let head = [
        "#",
        "TASK",
        "KIND",
        "RESULT",
        "STARTED",
        "TOOK",
        "PREDICTED",
        "SIZE",
        "ADVANCED",
        "LAYERS",
        "WAITED",
    ];
    let mut rows = vec![head.map(String::from).to_vec()];
    rows.extend(h.steps.iter().map(row));
    table(out, &rows)
}

fn row(s: &StepRecord) -> Vec<String> {
    let waited = match &s.wait_device {
        Some(d) => format!("{} on {d}", human::seconds(s.wait_s)),
        None => "-".to_owned(),
    };
    vec![
        s.ordinal.to_string(),
        s.task_id.to_string(),
        s.kind.to_owned(),
        s.result.to_owned(),
        format!("{} ago", human::seconds(s.age_s)),
        human::seconds(s.duration_s),
        s.predicted_s.map_or("-".to_owned(), human::seconds),
        s.size.to_string(),
        s.advanced.to_string(),
        s.layers.map_or("-".to_owned(), |(d, t)| format!("{d}/{t}")),
        waited,
    ]
}
