//! Replays a trace of an engine's finished steps (`scripts/bench-eta.py batch --record`)
//! through a fresh [`Forecaster`], exactly as the engine's compute thread called it, and
//! measures the ETA it would have published: model variants are then compared on the same
//! steps instead of on runs of a noisy machine.
//!
//! A trace is JSON lines: a header `{"trace": "hydra-eta-steps", "version": 1, "cases":
//! [{"case", "slot", "task_id"}]}`, then one line per forward, oldest first: `[start_ns,
//! [[slot, task_id, kind, result, size, advanced, context, duration_ns], ...]]`, the steps
//! of the slots that forward computed (one row: a step of its own).

use hydra_layout::{Forecaster, Phase, PhaseEnd, SlotState, StepResult, WorkUnit, MAX_SLOTS};
use serde::Deserialize;
use std::collections::HashMap;

/// The fractions of a phase at which the ETA is measured, as `bench-eta.py` does.
pub const FRACTIONS: [f64; 4] = [0.10, 0.25, 0.50, 0.75];

#[derive(Debug, Deserialize)]
struct Header {
    trace: String,
    version: u32,
    cases: Vec<Case>,
}

/// A phase whose ETA is measured: a task on a slot.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    /// Its name in the bench's output (`smollm2.batch.leave`).
    pub case: String,
    /// The slot.
    pub slot: usize,
    /// The task.
    pub task_id: u64,
}

/// One slot's step in a forward.
#[derive(Debug, Clone, Deserialize)]
struct Row(usize, u64, String, String, u64, u64, u64, u64);

impl Row {
    fn slot(&self) -> usize {
        self.0
    }
    fn task(&self) -> u64 {
        self.1
    }
    /// Its kind, by the names the probe writes ([`Phase::as_str`]); None for a step that
    /// is not a forward (save, restore).
    fn phase(&self) -> Option<Phase> {
        [Phase::Prefill, Phase::Decode]
            .into_iter()
            .find(|p| p.as_str() == self.2)
    }
    fn advanced_step(&self) -> bool {
        self.3 == StepResult::Advanced.as_str()
    }
    fn size(&self) -> u64 {
        self.4
    }
    fn advanced(&self) -> u64 {
        self.5
    }
    fn context(&self) -> u64 {
        self.6
    }
    fn duration_ns(&self) -> u64 {
        self.7
    }
    fn end_ns(&self, start_ns: u64) -> u64 {
        start_ns.saturating_add(self.duration_ns())
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Forward(u64, Vec<Row>);

/// A recorded trace.
#[derive(Debug)]
pub struct Trace {
    /// The phases to measure.
    pub cases: Vec<Case>,
    forwards: Vec<Forward>,
}

impl Trace {
    /// Parses the JSON lines of a trace.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Header = serde_json::from_str(lines.next().ok_or("an empty trace")?)
            .map_err(|e| format!("the header: {e}"))?;
        if header.trace != "hydra-eta-steps" || header.version != 1 {
            return Err(format!("not a version 1 step trace: {header:?}"));
        }
        let forwards = lines
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("forward {i}: {e}")))
            .collect::<Result<Vec<Forward>, _>>()?;
        if let Some(r) = forwards
            .iter()
            .flat_map(|f| &f.1)
            .find(|r| r.slot() >= MAX_SLOTS)
        {
            return Err(format!(
                "slot {} out of range (at most {MAX_SLOTS})",
                r.slot()
            ));
        }
        Ok(Self {
            cases: header.cases,
            forwards,
        })
    }
}

/// The ETA error of a case (a decode phase) at each of [`FRACTIONS`]: (ETA - time really
/// left) / time really left, at the first step that starts with at least that fraction
/// done; None where that step had no prediction.
#[derive(Debug, Clone)]
pub struct CaseErrors {
    /// Which case.
    pub case: String,
    /// One per fraction.
    pub errors: Vec<Option<f64>>,
    /// The median of |predicted / real - 1| over the steps from 25% on (None without any
    /// predicted step there).
    pub step_error: Option<f64>,
}

/// What a slot's task in the trace has: its phase's total (the sum of its steps'
/// advances: every traced task ran to its end).
fn totals(trace: &Trace) -> HashMap<(u64, Phase), u64> {
    let mut totals = HashMap::new();
    for row in trace.forwards.iter().flat_map(|f| &f.1) {
        if let Some(phase) = row.phase() {
            *totals.entry((row.task(), phase)).or_default() += row.advanced();
        }
    }
    totals
}

/// A step of a slot's task: work done before it, its start, the phase end published with
/// it (None when the model predicted none).
struct Published {
    done: u64,
    start_ns: u64,
    end_ns: Option<u64>,
    /// The step's predicted and real duration.
    step_ns: Option<u64>,
    took_ns: u64,
}

/// Replays the trace through a fresh forecaster: the ETA errors of each case.
pub fn replay(trace: &Trace) -> Vec<CaseErrors> {
    let totals = totals(trace);
    let slots = trace
        .forwards
        .iter()
        .flat_map(|f| &f.1)
        .map(Row::slot)
        .max()
        .map_or(0, |m| m + 1);
    let mut f = Forecaster::new(slots, PhaseEnd::Predict);
    let mut states = vec![SlotState::default(); slots];
    let mut published: HashMap<(usize, u64), Vec<Published>> = HashMap::new();
    for Forward(start, rows) in &trace.forwards {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.phase().is_some()).collect();
        for r in &rows {
            let s = &mut states[r.slot()];
            let phase = r.phase().expect("filtered");
            if s.task_id != r.task() || s.phase != phase {
                let total = totals[&(r.task(), phase)];
                s.begin_task(r.task(), phase, WorkUnit::Tokens, total, *start);
            }
            s.n_past = r.context();
            s.start_step(r.size(), *start);
        }
        let slots: Vec<usize> = rows.iter().map(|r| r.slot()).collect();
        let predictions = match slots.as_slice() {
            [one] => vec![f.step_started(*one, &states[*one])],
            many => f.batch_started(many, &states),
        };
        for (r, p) in rows.iter().zip(predictions) {
            let s = &states[r.slot()];
            let end_ns = p.map(|p| p.task_expected_end_ns).filter(|&e| e != 0);
            let step_ns = p.map(|p| p.step_expected_ns).filter(|&e| e != 0);
            published
                .entry((r.slot(), r.task()))
                .or_default()
                .push(Published {
                    done: s.work_done,
                    start_ns: *start,
                    end_ns,
                    step_ns,
                    took_ns: r.duration_ns(),
                });
        }
        let mut finishing = rows.clone();
        finishing.sort_by_key(|r| r.end_ns(*start));
        for r in finishing {
            let s = &mut states[r.slot()];
            if r.advanced_step() {
                s.finish_step(s.work_done + r.advanced(), r.end_ns(*start));
                f.step_finished(r.slot(), s);
            } else {
                s.finish_step(s.work_done, r.end_ns(*start));
                f.step_abandoned(r.slot());
            }
        }
    }
    let ends = phase_ends(trace);
    trace
        .cases
        .iter()
        .map(|c| {
            let steps = published.get(&(c.slot, c.task_id));
            CaseErrors {
                case: c.case.clone(),
                errors: case_errors(c, &totals, &ends, steps),
                step_error: step_error(c, &totals, steps),
            }
        })
        .collect()
}

fn step_error(
    c: &Case,
    totals: &HashMap<(u64, Phase), u64>,
    published: Option<&Vec<Published>>,
) -> Option<f64> {
    let total = totals
        .get(&(c.task_id, Phase::Decode))
        .copied()
        .unwrap_or(0) as f64;
    let mut errors: Vec<f64> = published?
        .iter()
        .filter(|s| s.done as f64 >= 0.25 * total && s.took_ns > 0)
        .filter_map(|s| Some((s.step_ns? as f64 / s.took_ns as f64 - 1.0).abs()))
        .collect();
    errors.sort_by(f64::total_cmp);
    errors.get(errors.len() / 2).copied()
}

/// When each (slot, task)'s last step ended.
fn phase_ends(trace: &Trace) -> HashMap<(usize, u64), u64> {
    let mut ends = HashMap::new();
    for Forward(start, rows) in &trace.forwards {
        for r in rows {
            let e = ends.entry((r.slot(), r.task())).or_insert(0);
            *e = r.end_ns(*start).max(*e);
        }
    }
    ends
}

fn case_errors(
    c: &Case,
    totals: &HashMap<(u64, Phase), u64>,
    ends: &HashMap<(usize, u64), u64>,
    published: Option<&Vec<Published>>,
) -> Vec<Option<f64>> {
    let total = totals
        .get(&(c.task_id, Phase::Decode))
        .copied()
        .unwrap_or(0);
    let end = ends.get(&(c.slot, c.task_id)).copied().unwrap_or(0);
    FRACTIONS
        .iter()
        .map(|p| {
            let hit = published?
                .iter()
                .find(|s| s.done as f64 >= p * total as f64)?;
            let left = end.checked_sub(hit.start_ns)? as f64;
            let eta = hit.end_ns?.saturating_sub(hit.start_ns) as f64;
            (left > 0.0).then(|| (eta - left) / left)
        })
        .collect()
}

/// The points the target holds for: every fraction from 25% on, but a `join` case's 25%
/// (the moment the other rows join: nobody can know they will). A point without a
/// prediction counts as a miss of 100%.
pub fn measured_points(c: &CaseErrors) -> Vec<f64> {
    FRACTIONS
        .iter()
        .zip(&c.errors)
        .filter(|(p, _)| **p >= 0.25 && !(c.case.ends_with(".join") && **p == 0.25))
        .map(|(_, e)| e.unwrap_or(1.0))
        .collect()
}
