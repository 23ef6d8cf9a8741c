//! `hydra-probe check`: Nagios / Kubernetes exec probe.

use super::output::json_line;
use super::Context;
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{findings, scan, EngineView, Finding, ProbeError, Severity};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

#[derive(Serialize)]
struct Report<'a> {
    status: &'static str,
    exit_code: u8,
    engines: usize,
    busy_slots: usize,
    findings: &'a [Finding],
}

fn unreadable(engine_id: &str, message: String) -> Finding {
    Finding {
        severity: Severity::Unknown,
        engine_id: engine_id.to_owned(),
        slot: None,
        kind: "unreadable".into(),
        message,
    }
}

pub(super) fn run(ctx: &Context, engine: Option<&str>, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut all = Vec::new();
    let mut engines = 0;
    let mut busy = 0;
    let mut check_one = |id: &str, path: &Path, all: &mut Vec<Finding>| {
        engines += 1;
        let now = clock::monotonic_ns();
        match SegmentReader::open(path)
            .map_err(ProbeError::from)
            .and_then(|r| EngineView::capture(&r, now, &ctx.thresholds))
        {
            Ok(v) => {
                busy += v.busy_slots();
                all.extend(findings(&v, &ctx.thresholds));
            }
            Err(e) => all.push(unreadable(id, format!("{id}: cannot read: {e}"))),
        }
    };
    match engine {
        Some(name) => {
            let path = hydra_probe::resolve(&ctx.dir, Some(name))?;
            check_one(name, &path, &mut all);
        }
        None => {
            let found = scan(&ctx.dir).map_err(|e| {
                ProbeError::from(hydra_layout::Error::io("read directory", &ctx.dir, e))
            })?;
            if found.segments.is_empty() && found.strays.is_empty() {
                return Err(ProbeError::NoEngines {
                    dir: ctx.dir.clone(),
                }
                .into());
            }
            for d in &found.segments {
                check_one(&d.engine_id, &d.path, &mut all);
            }
            for s in &found.strays {
                all.push(unreadable(
                    &s.engine_id,
                    format!(
                        "{}: {} is not a regular file (it is a {})",
                        s.engine_id,
                        s.path.display(),
                        s.kind
                    ),
                ));
            }
        }
    }
    let worst = all.iter().fold(Severity::Ok, |w, f| w.worst(f.severity));
    if ctx.json {
        json_line(
            out,
            &Report {
                status: worst.label(),
                exit_code: worst.exit_code(),
                engines,
                busy_slots: busy,
                findings: &all,
            },
        )?;
    } else if all.is_empty() {
        writeln!(
            out,
            "OK: {engines} engine{} healthy, {busy} slot{} busy",
            if engines == 1 { "" } else { "s" },
            if busy == 1 { "" } else { "s" }
        )?;
    } else {
        // Worst first, so the first line (what Nagios shows) is the most important.
        all.sort_by_key(|f| std::cmp::Reverse(f.severity.rank()));
        for f in &all {
            writeln!(out, "{}: {}", f.severity.label(), f.message)?;
        }
    }
    Ok(worst.exit_code())
}
