//! `hydra-probe show`.

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use hydra_layout::clock;
use hydra_probe::{human, EngineView, SlotView};
use std::io::Write;

pub(super) fn run(
    ctx: &Context,
    engine: Option<&str>,
    slot: Option<usize>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let reader = hydra_probe::open(&ctx.dir, engine)?;
    let mut view = EngineView::capture(&reader, clock::monotonic_ns(), &ctx.thresholds)?;
    if let Some(n) = slot {
        let one = view.slot(n)?.clone();
        view.slots = vec![one];
    }
    if ctx.json {
        json_line(out, &view)?;
    } else {
        write_engine(out, &view)?;
    }
    Ok(EXIT_OK)
}

/// The engine summary line.
pub(super) fn summary(v: &EngineView) -> String {
    let d = &v.identity.description;
    let mut model = if d.model_name.is_empty() {
        "-".to_owned()
    } else {
        d.model_name.clone()
    };
    if !d.model_quant.is_empty() {
        model.push_str(&format!(" ({})", d.model_quant));
    }
    if !d.device.is_empty() {
        model.push_str(&format!(" on {}", d.device));
    }
    format!(
        "engine {}  pid {}  {}  model {}  heartbeat {} ago  busy {}/{}",
        v.engine_id,
        v.identity.pid,
        v.health.as_str(),
        model,
        human::duration_ns(v.heartbeat_age_ns),
        v.busy_slots(),
        v.slots.len()
    )
}

/// Table cells of one slot.
pub(super) fn slot_cells(s: &SlotView) -> Vec<String> {
    let st = &s.state;
    vec![
        s.slot.to_string(),
        s.class.as_str().to_owned(),
        st.phase.as_str().to_owned(),
        human::progress(st.work_done, st.work_total, s.derived.progress),
        human::rate(s.derived.rate_per_s, s.unit()),
        s.eta_text(),
        human::age(s.derived.last_progress_age_ns),
        s.step_text(),
        if st.task_id == 0 {
            "-".into()
        } else {
            st.task_id.to_string()
        },
        s.pending.to_string(),
    ]
}

pub(super) const HEADINGS: [&str; 10] = [
    "SLOT",
    "CLASS",
    "PHASE",
    "PROGRESS",
    "RATE",
    "ETA",
    "LAST-PROGRESS",
    "STEP",
    "TASK",
    "PENDING",
];

pub(super) fn write_engine(out: &mut dyn Write, v: &EngineView) -> std::io::Result<()> {
    writeln!(out, "{}", summary(v))?;
    let mut rows = vec![HEADINGS.map(String::from).to_vec()];
    rows.extend(v.slots.iter().map(slot_cells));
    table(out, &rows)?;
    for s in v.slots.iter().filter(|s| s.read_error.is_some()) {
        writeln!(
            out,
            "slot {}: {}",
            s.slot,
            s.read_error.as_deref().unwrap_or_default()
        )?;
    }
    for s in &v.slots {
        if let Some(line) = wait_line(s) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// "slot 0: waiting on RPC1 127.0.0.1:50053 for 4.2s (stalled on it past 1.0s)" for a
/// slot whose step in flight waits on a device (format v1.3), with the wait rule's
/// threshold once the device's waits are learnt.
fn wait_line(s: &SlotView) -> Option<String> {
    let text = s.wait_text()?;
    let threshold = s
        .derived
        .wait_stall_threshold_ns
        .map(|t| format!(" (stalled on it past {})", human::duration_ns(t)))
        .unwrap_or_default();
    Some(format!("slot {}: {text}{threshold}", s.slot))
}
