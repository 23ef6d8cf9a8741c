//! Health-check findings: one line per thing that is not healthy, with its severity.

use crate::classify::{EngineHealth, Severity, SlotClass};
use crate::human;
use crate::thresholds::Thresholds;
use crate::view::{EngineView, SlotView};
use serde::Serialize;

/// One thing a health check reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// The engine (or the file's engine id).
    pub engine_id: String,
    /// The slot, for slot findings.
    pub slot: Option<usize>,
    /// What it is: a slot class, an engine health, or "unreadable".
    pub kind: String,
    /// One line saying what is wrong, with the figures that show it.
    pub message: String,
}

/// The findings of one engine view: its health if dead or hung, and every slot that is slow,
/// stalled, orphaned or torn. A healthy engine gives none.
pub fn findings(view: &EngineView, t: &Thresholds) -> Vec<Finding> {
    let id = &view.engine_id;
    let mut out = Vec::new();
    let pid = view.identity.pid;
    match view.health {
        EngineHealth::Dead => out.push(Finding {
            severity: Severity::Critical,
            engine_id: id.clone(),
            slot: None,
            kind: "dead".into(),
            message: format!(
                "engine {id} (pid {pid}) is dead: its lock is free but it never closed; last heartbeat {} ago",
                human::duration_ns(view.heartbeat_age_ns)
            ),
        }),
        EngineHealth::Hung => out.push(Finding {
            severity: Severity::Critical,
            engine_id: id.clone(),
            slot: None,
            kind: "hung".into(),
            message: format!(
                "engine {id} (pid {pid}) is hung: heartbeat {} old (timeout {}) and no active slot progresses",
                human::duration_ns(view.heartbeat_age_ns),
                human::duration_ns(crate::thresholds::duration_ns(t.heartbeat_timeout))
            ),
        }),
        EngineHealth::Live | EngineHealth::Closed => {}
    }
    for s in &view.slots {
        if s.class.severity() == Severity::Ok {
            continue;
        }
        out.push(Finding {
            severity: s.class.severity(),
            engine_id: id.clone(),
            slot: Some(s.slot),
            kind: s.class.as_str().into(),
            message: slot_message(view, s, t),
        });
    }
    out
}

fn work(s: &SlotView) -> String {
    let st = &s.state;
    format!(
        "{} task {} at {} {}",
        st.phase.as_str(),
        st.task_id,
        human::progress(st.work_done, st.work_total, s.derived.progress),
        s.unit()
    )
}

fn slot_message(view: &EngineView, s: &SlotView, t: &Thresholds) -> String {
    let id = &view.engine_id;
    let n = s.slot;
    match s.class {
        SlotClass::Slow if s.derived.last_progress_age_ns.unwrap_or(0) > s.stall_threshold_ns() => format!(
            "{id} slot {n} slow: {}, step of {} in flight for {}, past its stall threshold {}, \
             but its layers move ({}, the last {} ago)",
            work(s),
            s.state.step_size,
            human::age(s.derived.step_age_ns),
            human::duration_ns(s.stall_threshold_ns()),
            s.layer_text().unwrap_or_default(),
            human::age(s.substep_age_ns()),
        ),
        SlotClass::Stalled if s.stalled_at_layer().is_some() => format!(
            "{id} slot {n} stalled at {}: {}, layer counter frozen for {} (threshold {}), step of {} in flight for {}",
            s.layer_text().unwrap_or_default(),
            work(s),
            human::age(s.substep_age_ns()),
            human::duration_ns(s.stall_threshold_ns()),
            s.state.step_size,
            human::age(s.derived.step_age_ns),
        ),
        SlotClass::Slow => format!(
            "{id} slot {n} slow: {}, ETA {} exceeds budget {} at {}",
            work(s),
            human::seconds(s.derived.eta_s.unwrap_or(0.0)),
            human::seconds(t.budget.map(|b| b.as_secs_f64()).unwrap_or(0.0)),
            human::rate(s.derived.rate_per_s, s.unit()),
        ),
        SlotClass::Stalled => {
            let step = match s.derived.step_age_ns {
                Some(a) => format!(
                    ", step of {} in flight for {}",
                    s.state.step_size,
                    human::duration_ns(a)
                ),
                None => String::new(),
            };
            format!(
                "{id} slot {n} stalled: {}, no progress for {} (threshold {}){step}",
                work(s),
                human::age(s.derived.last_progress_age_ns),
                human::duration_ns(s.stall_threshold_ns()),
            )
        }
        SlotClass::Orphaned => format!(
            "{id} slot {n} orphaned: {}, but engine {id} is {}",
            work(s),
            view.health.as_str()
        ),
        SlotClass::Torn => format!(
            "{id} slot {n} torn: {}",
            s.read_error
                .as_deref()
                .unwrap_or("no consistent copy could be read")
        ),
        c => format!("{id} slot {n} {}", c.as_str()),
    }
}
