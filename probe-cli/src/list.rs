//! `hydra-probe list`.

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{human, scan, EngineView, ProbeError};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

/// One line of `list`.
#[derive(Debug, Serialize)]
struct Row {
    engine_id: String,
    path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    busy_slots: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slot_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_age_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn row(ctx: &Context, engine_id: String, path: PathBuf) -> Row {
    let mut r = row_stub(engine_id, path);
    let view = SegmentReader::open(&r.path)
        .map_err(ProbeError::from)
        .and_then(|reader| EngineView::capture(&reader, clock::monotonic_ns(), &ctx.thresholds));
    match view {
        Ok(v) => {
            r.pid = Some(v.identity.pid);
            r.health = Some(v.health.as_str());
            r.model = Some(v.identity.description.model_name.clone());
            r.device = Some(v.identity.description.device.clone());
            r.busy_slots = Some(v.busy_slots());
            r.slot_count = Some(v.slots.len());
            r.heartbeat_age_ms = Some(v.heartbeat_age_ns / 1_000_000);
        }
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}

pub(super) fn run(ctx: &Context, out: &mut dyn Write) -> anyhow::Result<u8> {
    let found = scan(&ctx.dir)
        .map_err(|e| ProbeError::from(hydra_layout::Error::io("read directory", &ctx.dir, e)))?;
    let mut rows: Vec<Row> = found
        .segments
        .into_iter()
        .map(|d| row(ctx, d.engine_id, d.path))
        .collect();
    for s in found.strays {
        rows.push(Row {
            error: Some(format!(
                "{} is not a regular file (it is a {})",
                s.path.display(),
                s.kind
            )),
            ..row_stub(s.engine_id, s.path)
        });
    }
    rows.sort_by(|a, b| a.engine_id.cmp(&b.engine_id));
    if ctx.json {
        json_line(out, &rows)?;
        return Ok(EXIT_OK);
    }
    if rows.is_empty() {
        writeln!(out, "no engines found in {}", ctx.dir.display())?;
        return Ok(EXIT_OK);
    }
    let mut cells = vec![[
        "ENGINE",
        "PID",
        "HEALTH",
        "MODEL",
        "DEVICE",
        "BUSY",
        "HEARTBEAT",
    ]
    .map(String::from)
    .to_vec()];
    let mut errors = Vec::new();
    for r in &rows {
        match &r.error {
            Some(e) => errors.push(format!("{}: error: {e}", r.engine_id)),
            None => cells.push(vec![
                r.engine_id.clone(),
                r.pid.unwrap_or_default().to_string(),
                r.health.unwrap_or("-").to_owned(),
                non_empty(r.model.as_deref()),
                non_empty(r.device.as_deref()),
                format!(
                    "{}/{}",
                    r.busy_slots.unwrap_or(0),
                    r.slot_count.unwrap_or(0)
                ),
                format!(
                    "{} ago",
                    human::duration_ns(r.heartbeat_age_ms.unwrap_or(0) * 1_000_000)
                ),
            ]),
        }
    }
    if cells.len() > 1 {
        table(out, &cells)?;
    }
    for e in errors {
        writeln!(out, "{e}")?;
    }
    Ok(EXIT_OK)
}

fn non_empty(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "-".into(),
    }
}

fn row_stub(engine_id: String, path: PathBuf) -> Row {
    Row {
        engine_id,
        path,
        pid: None,
        health: None,
        model: None,
        device: None,
        busy_slots: None,
        slot_count: None,
        heartbeat_age_ms: None,
        error: None,
    }
}
