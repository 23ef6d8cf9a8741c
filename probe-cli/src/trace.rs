//! `hydra-probe trace`: an engine's recent steps as Chrome Trace Event JSON, the format
//! that Perfetto (ui.perfetto.dev) and chrome://tracing open: one track per slot, one
//! complete event per step of its flight recorder, and with `--seconds` what the probe
//! samples meanwhile (every 100 ms): each slot's verdict when it changes, with the reason
//! in words, and its layer position as a counter track. Timestamps are CLOCK_MONOTONIC
//! microseconds, the clock of the segment.

use super::output::json_line;
use super::{Context, EXIT_OK};
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{findings, EngineView, HistoryReport};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often `--seconds` samples the engine.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub(super) fn run(
    ctx: &Context,
    engine: Option<&str>,
    output: &Path,
    seconds: Option<u64>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let reader = hydra_probe::open(&ctx.dir, engine)?;
    let mut events = Vec::new();
    if let Some(s) = seconds {
        sample(ctx, &reader, Duration::from_secs(s), &mut events)?;
    }
    let history = HistoryReport::capture(&reader, None, clock::monotonic_ns())?;
    let steps = step_events(&history, &mut events);
    let doc = json!({ "traceEvents": events, "displayTimeUnit": "ms" });
    std::fs::write(output, serde_json::to_vec(&doc)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))?;
    let summary = json!({
        "engine_id": history.engine_id,
        "file": output,
        "steps": steps,
        "events": doc["traceEvents"].as_array().map_or(0, Vec::len),
    });
    if ctx.json {
        json_line(out, &summary)?;
    } else {
        writeln!(
            out,
            "wrote {steps} steps of engine {} to {} (open it in ui.perfetto.dev)",
            history.engine_id,
            output.display()
        )?;
    }
    Ok(EXIT_OK)
}

/// The process and thread names, then one complete event per step; returns the steps.
fn step_events(h: &HistoryReport, events: &mut Vec<Value>) -> usize {
    events.push(json!({"name": "process_name", "ph": "M", "pid": 1,
        "args": {"name": format!("engine {}", h.engine_id)}}));
    let mut steps = 0;
    for s in &h.slots {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": s.slot,
            "args": {"name": format!("slot {}", s.slot)}}),
        );
        for r in &s.steps {
            steps += 1;
            events.push(json!({
                "name": r.kind, "cat": "step", "ph": "X", "pid": 1, "tid": s.slot,
                "ts": r.start_ns / 1_000, "dur": (r.duration_s * 1e6).round() as u64,
                "args": {
                    "task_id": r.task_id, "result": r.result, "size": r.size,
                    "advanced": r.advanced, "context": r.context,
                    "predicted_ms": r.predicted_s.map(|p| p * 1e3),
                    "layers": r.layers.map(|(d, t)| format!("{d}/{t}")),
                    "wait_device": r.wait_device, "wait_ms": r.wait_s * 1e3,
                },
            }));
        }
    }
    steps
}

/// Samples `reader` every [`SAMPLE_EVERY`] for `span`: an instant event per slot whose
/// verdict changed (the first sample included), and the layer counters.
fn sample(
    ctx: &Context,
    reader: &SegmentReader,
    span: Duration,
    events: &mut Vec<Value>,
) -> anyhow::Result<()> {
    let until = Instant::now() + span;
    let mut last: Vec<Option<String>> = Vec::new();
    loop {
        let now = clock::monotonic_ns();
        let view = EngineView::capture(reader, now, &ctx.thresholds)?;
        let found = findings(&view, &ctx.thresholds);
        last.resize(view.slots.len(), None);
        for (slot, v) in view.slots.iter().enumerate() {
            let class = v.class.as_str().to_owned();
            if last[slot].as_deref() != Some(class.as_str()) {
                let reason = found
                    .iter()
                    .find(|f| f.slot == Some(slot))
                    .map(|f| &f.message);
                events.push(json!({"name": class, "cat": "verdict", "ph": "i", "s": "t",
                    "pid": 1, "tid": slot, "ts": now / 1_000, "args": {"reason": reason}}));
                last[slot] = Some(class);
            }
            if let Some(done) = v.substep_done() {
                events.push(json!({"name": format!("slot {slot} layer"), "ph": "C",
                    "pid": 1, "ts": now / 1_000, "args": {"layers done": done}}));
            }
        }
        if Instant::now() >= until {
            return Ok(());
        }
        std::thread::sleep(SAMPLE_EVERY.min(until.saturating_duration_since(Instant::now())));
    }
}
