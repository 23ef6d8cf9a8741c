//! The demo's live per-slot view, read from the segment through the probe library (the
//! same path any other process would use), never from the engine's memory.

use super::workload::Running;
use hydra_layout::{clock, SegmentReader};
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
    let mut last_plain = Instant::now() - Duration::from_secs(10);
    loop {
        let finished = running.finished();
        let t = Instant::now();
        let view = EngineView::capture(&reader, clock::monotonic_ns(), &thresholds)?;
        captures.push(t.elapsed().as_secs_f64() * 1e6);
        for (bar, slot) in bars.iter().zip(&view.slots) {
            bar.set_position((slot.progress.unwrap_or(0.0) * 1000.0).round() as u64);
            bar.set_message(describe(slot));
        }
        if !tty && (last_plain.elapsed() >= Duration::from_secs(1) || finished) {
            last_plain = Instant::now();
            print_plain(&view);
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

fn describe(s: &SlotView) -> String {
    let st = &s.state;
    let unit = if st.work_unit == hydra_layout::WorkUnit::Bytes {
        "B"
    } else {
        "tok"
    };
    let rate = s
        .rate_per_s
        .map(|r| format!("{r:.0} {unit}/s"))
        .unwrap_or_else(|| "-".into());
    let eta = s.eta_s.map(|e| format!("eta {e:.1}s")).unwrap_or_default();
    format!(
        "{:<8} {:>7}/{:<7} {:>12} {:>10} n_past {:>5} pending {}  [{}]",
        st.phase.as_str(),
        st.work_done,
        st.work_total,
        rate,
        eta,
        st.n_past,
        s.pending,
        s.class.as_str()
    )
}

fn print_plain(view: &EngineView) {
    for s in &view.slots {
        println!("slot {} {}", s.slot, describe(s));
    }
    println!("--");
}
