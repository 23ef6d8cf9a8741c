//! The demo's live per-slot view, read from the segment through the probe library (the
//! same path any other process would use), never from the engine's memory.

use super::workload::Running;
use hydra_layout::{clock, FinishReason, Phase, SegmentReader, SlotState, WorkUnit};
use hydra_probe::{EngineView, SlotView, Thresholds};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the view measured about itself.
#[derive(Debug, Default)]
pub struct ViewStats {
    /// Snapshots taken.
    pub snapshots: usize,
    /// Median time of one snapshot + classification, µs.
    pub median_capture_us: f64,
}

/// Shows the view until the workload finishes.
pub fn run(segment: &Path, interval: Duration, running: &Running) -> anyhow::Result<ViewStats> {
    let reader = SegmentReader::open(segment)?;
    let thresholds = Thresholds::default();
    let tty = std::io::stdout().is_terminal();
    let multi = MultiProgress::with_draw_target(if tty {
        ProgressDrawTarget::stdout()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:.bold} {bar:30.cyan/blue} {msg}")
        .expect("valid template")
        .progress_chars("=> ");
    let bars: Vec<ProgressBar> = (0..reader.slot_count())
        .map(|i| {
            let bar = multi.add(ProgressBar::new(1000));
            bar.set_style(style.clone());
            bar.set_prefix(format!("slot {i}"));
            bar
        })
        .collect();
    let mut captures = Vec::new();
    let mut phases = LastPhases::default();
    let mut last_plain = Instant::now() - Duration::from_secs(10);
    loop {
        let finished = running.finished();
        let t = Instant::now();
        let view = EngineView::capture(&reader, clock::monotonic_ns(), &thresholds)?;
        captures.push(t.elapsed().as_secs_f64() * 1e6);
        phases.observe(&view.slots);
        for (bar, slot) in bars.iter().zip(&view.slots) {
            bar.set_position((slot.derived.progress.unwrap_or(0.0) * 1000.0).round() as u64);
            bar.set_message(describe(slot, phases.of(slot)));
        }
        if !tty && (last_plain.elapsed() >= Duration::from_secs(1) || finished) {
            last_plain = Instant::now();
            print_plain(&view, &phases);
        }
        if finished {
            break;
        }
        std::thread::sleep(interval);
    }
    for bar in &bars {
        bar.finish();
    }
    captures.sort_by(f64::total_cmp);
    Ok(ViewStats {
        snapshots: captures.len(),
        median_capture_us: captures.get(captures.len() / 2).copied().unwrap_or(0.0),
    })
}

/// The phase each slot's task was last seen in, by task id: an idle record keeps its last
/// task's figures but not its phase (it reads `idle`), so the view remembers it.
#[derive(Debug, Default)]
struct LastPhases(Vec<Option<(u64, Phase)>>);

impl LastPhases {
    fn observe(&mut self, slots: &[SlotView]) {
        self.0.resize(slots.len(), None);
        for (seen, s) in self.0.iter_mut().zip(slots) {
            if s.state.phase.is_active() {
                *seen = Some((s.state.task_id, s.state.phase));
            }
        }
    }

    fn of(&self, s: &SlotView) -> Option<Phase> {
        match self.0.get(s.slot).copied().flatten() {
            Some((task, phase)) if task == s.state.task_id => Some(phase),
            _ => None,
        }
    }
}

/// One slot's line. A working slot shows its live progress, rate and ETA; an idle slot
/// shows what its last task did (`last: decode 384 tok, 2.9 s`), never a rate that looks
/// live.
fn describe(s: &SlotView, last_phase: Option<Phase>) -> String {
    let st = &s.state;
    let class = s.class.as_str();
    if st.phase == Phase::Idle {
        let last = if st.task_id == 0 {
            "no task yet".to_owned()
        } else {
            last_task(st, last_phase)
        };
        return format!(
            "{:<8} {last:<40} n_past {:>5} pending {}  [{class}]",
            st.phase.as_str(),
            st.n_past,
            s.pending,
        );
    }
    let unit = if st.work_unit == WorkUnit::Bytes {
        "B"
    } else {
        "tok"
    };
    let rate = s
        .derived
        .rate_per_s
        .map(|r| format!("{r:.0} {unit}/s"))
        .unwrap_or_else(|| "-".into());
    let eta = s
        .derived
        .eta_s
        .map(|e| format!("eta {e:.1}s"))
        .unwrap_or_default();
    format!(
        "{:<8} {:>7}/{:<7} {:>12} {:>10} n_past {:>5} pending {}  [{class}]",
        st.phase.as_str(),
        st.work_done,
        st.work_total,
        rate,
        eta,
        st.n_past,
        s.pending,
    )
}

/// `last: decode 384 tok, 2.9 s` (with the finish reason when it did not complete): the
/// last phase's work and how long it took, from the figures an idle record keeps.
fn last_task(st: &SlotState, phase: Option<Phase>) -> String {
    let what = phase.map(Phase::as_str).unwrap_or("task");
    let work = match st.work_unit {
        WorkUnit::Bytes => format!("{:.1} MiB", st.work_done as f64 / (1u64 << 20) as f64),
        _ => format!("{} tok", st.work_done),
    };
    let secs = st.last_progress_ns.saturating_sub(st.phase_start_ns) as f64 / 1e9;
    let ended = match st.finish_reason {
        FinishReason::Completed | FinishReason::None => String::new(),
        FinishReason::Error => format!(" ({})", st.error_code.as_str()),
        other => format!(" ({})", other.as_str()),
    };
    format!("last: {what} {work}, {secs:.1} s{ended}")
}

fn print_plain(view: &EngineView, phases: &LastPhases) {
    for s in &view.slots {
        println!("slot {} {}", s.slot, describe(s, phases.of(s)));
    }
    println!("--");
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{ErrorCode, Liveness};
    use hydra_probe::Thresholds;

    const S: u64 = 1_000_000_000;

    fn view(state: SlotState, now: u64) -> SlotView {
        SlotView::from_state(1, state, 0, Liveness::Live, now, &Thresholds::default())
    }

    fn finished_decode() -> SlotState {
        let mut st = SlotState::default();
        st.begin_task(7, Phase::Decode, WorkUnit::Tokens, 384, 10 * S);
        st.start_step(1, 10 * S);
        st.finish_step(384, 10 * S + 2_900_000_000);
        st.finish(FinishReason::Completed, ErrorCode::None);
        st
    }

    #[test]
    fn idle_slot_shows_its_last_task_not_a_rate() {
        let st = finished_decode();
        let line = describe(&view(st, 20 * S), Some(Phase::Decode));
        assert!(line.contains("last: decode 384 tok, 2.9 s"), "{line}");
        assert!(!line.contains("/s") && !line.contains("eta"), "{line}");
        // Phase not seen by the view (the task was shorter than a refresh): no guess.
        let line = describe(&view(st, 20 * S), None);
        assert!(line.contains("last: task 384 tok, 2.9 s"), "{line}");
    }

    #[test]
    fn idle_slot_names_how_its_last_task_failed() {
        let mut st = SlotState::default();
        st.begin_task(3, Phase::Restore, WorkUnit::Bytes, 4 << 20, S);
        st.advance(2 << 20, S + 500_000_000);
        st.finish(FinishReason::Error, ErrorCode::StateRejected);
        let line = describe(&view(st, 3 * S), Some(Phase::Restore));
        assert!(
            line.contains("last: restore 2.0 MiB, 0.5 s (state_rejected)"),
            "{line}"
        );
        let fresh = describe(&view(SlotState::default(), S), None);
        assert!(fresh.contains("no task yet"), "{fresh}");
    }

    #[test]
    fn working_slot_shows_progress_rate_and_eta() {
        let mut st = SlotState::default();
        st.begin_task(9, Phase::Decode, WorkUnit::Tokens, 100, S);
        for i in 1..=10u64 {
            st.start_step(1, S + (i - 1) * 10_000_000);
            st.finish_step(i, S + i * 10_000_000);
        }
        let line = describe(&view(st, S + 100_000_000), Some(Phase::Decode));
        assert!(line.contains("10/100"), "{line}");
        assert!(line.contains("tok/s") && line.contains("eta"), "{line}");
    }

    #[test]
    fn last_phases_follow_the_task_id() {
        let mut phases = LastPhases::default();
        let mut st = SlotState::default();
        st.begin_task(5, Phase::Prefill, WorkUnit::Tokens, 10, S);
        phases.observe(&[view(SlotState::default(), S), view(st, S)]);
        st.finish(FinishReason::Completed, ErrorCode::None);
        assert_eq!(phases.of(&view(st, S)), Some(Phase::Prefill));
        st.begin_task(6, Phase::Save, WorkUnit::Bytes, 10, S);
        st.finish(FinishReason::Completed, ErrorCode::None);
        assert_eq!(
            phases.of(&view(st, S)),
            None,
            "another task's phase is not reused"
        );
    }
}
