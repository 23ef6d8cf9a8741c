//! `hydra-probe watch`: a live view. Progress bars (indicatif) when stdout is a terminal,
//! plain lines otherwise, one JSON line per refresh with `--json`. Ctrl-C stops it cleanly.

use super::output::json_line;
use super::show::summary;
use super::{Context, EXIT_OK};
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{human, EngineHealth, EngineView, SlotView};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::time::Duration;

pub(super) fn run(
    ctx: &Context,
    engine: Option<&str>,
    interval: Duration,
    count: Option<u64>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let path = hydra_probe::resolve(&ctx.dir, engine)?;
    let mut reader = SegmentReader::open(&path)?;
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // If a handler cannot be installed, Ctrl-C keeps its default effect (exit by signal).
    let _ = ctrlc::set_handler(move || {
        let _ = stop_tx.send(());
    });
    let mut display = if !ctx.json && std::io::stdout().is_terminal() {
        Display::Bars(Bars::new())
    } else {
        Display::Lines
    };
    let mut refreshes = 0u64;
    loop {
        let view = EngineView::capture(&reader, clock::monotonic_ns(), &ctx.thresholds)?;
        match &mut display {
            Display::Bars(b) => b.update(&view),
            Display::Lines if ctx.json => json_line(out, &view)?,
            Display::Lines => {
                write_lines(out, &view)?;
                out.flush()?;
            }
        }
        if ctx.json {
            out.flush()?;
        }
        refreshes += 1;
        if count.is_some_and(|c| refreshes >= c) {
            break;
        }
        match stop_rx.recv_timeout(interval) {
            Ok(()) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // No handler installed: just pace the refreshes.
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(interval),
        }
        // An engine that exited may have been replaced by a new one under the same name.
        if matches!(view.health, EngineHealth::Closed | EngineHealth::Dead) {
            if let Ok(fresh) = SegmentReader::open(&path) {
                if fresh.identity().instance_id != reader.identity().instance_id {
                    reader = fresh;
                }
            }
        }
    }
    if let Display::Bars(b) = display {
        b.finish();
    }
    Ok(EXIT_OK)
}

enum Display {
    Lines,
    Bars(Bars),
}

fn slot_line(v: &EngineView, s: &SlotView) -> String {
    let st = &s.state;
    let layer = s.layer_text().map(|l| format!(" {l}")).unwrap_or_default();
    format!(
        "{} slot {} {} {}{layer} {} eta {} last-progress {} {}",
        v.engine_id,
        s.slot,
        st.phase.as_str(),
        human::progress(st.work_done, st.work_total, s.derived.progress),
        human::rate(s.derived.rate_per_s, s.unit()),
        s.eta_text(),
        human::age(s.derived.last_progress_age_ns),
        s.class.as_str(),
    )
}

fn write_lines(out: &mut dyn Write, v: &EngineView) -> std::io::Result<()> {
    let shown: Vec<_> = v
        .slots
        .iter()
        .filter(|s| s.class != hydra_probe::SlotClass::Idle)
        .collect();
    if shown.is_empty() {
        writeln!(
            out,
            "{} {}: all {} slots idle, heartbeat {} ago",
            v.engine_id,
            v.health.as_str(),
            v.slots.len(),
            human::duration_ns(v.heartbeat_age_ns)
        )
    } else {
        for s in shown {
            writeln!(out, "{}", slot_line(v, s))?;
        }
        Ok(())
    }
}

struct Bars {
    multi: MultiProgress,
    header: ProgressBar,
    slots: BTreeMap<usize, ProgressBar>,
    style: ProgressStyle,
}

impl Bars {
    fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let header = multi.add(ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar()),
        ));
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        Self {
            multi,
            header,
            slots: BTreeMap::new(),
            style,
        }
    }

    fn update(&mut self, v: &EngineView) {
        self.header.set_message(summary(v));
        for s in &v.slots {
            let shown = s.is_active() || s.class != hydra_probe::SlotClass::Idle;
            if !shown {
                if let Some(bar) = self.slots.remove(&s.slot) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                continue;
            }
            let bar = self.slots.entry(s.slot).or_insert_with(|| {
                let bar = self
                    .multi
                    .add(ProgressBar::new(0).with_style(self.style.clone()));
                bar.set_prefix(format!("slot {}", s.slot));
                bar
            });
            bar.set_length(s.state.work_total.max(s.state.work_done));
            bar.set_position(s.state.work_done);
            let layer = s.layer_text().map(|l| format!(" {l}")).unwrap_or_default();
            bar.set_message(format!(
                "{}{layer} {} eta {} last {} {}",
                s.state.phase.as_str(),
                human::rate(s.derived.rate_per_s, s.unit()),
                s.eta_text(),
                human::age(s.derived.last_progress_age_ns),
                s.class.as_str()
            ));
        }
    }

    fn finish(self) {
        for bar in self.slots.values() {
            bar.finish_and_clear();
        }
        self.header.finish_and_clear();
        let _ = self.multi.clear();
    }
}
