//! `hydra-fault-reader`: a library-loop reader process for the load test.
//!
//! Captures an engine's view through the probe library at a fixed rate until `--seconds`
//! pass or it gets SIGTERM/SIGINT, then prints one JSON line of what it saw: captures, errors, slots classified torn, the
//! largest `tokens_processed` seen per slot, and capture latency percentiles.

use clap::Parser;
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{EngineView, SlotClass, Thresholds};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Polls one segment through the probe library and reports what it saw as JSON.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The segment file to read.
    segment: PathBuf,
    /// Captures per second.
    #[arg(long, default_value_t = 100)]
    hz: u32,
    /// How long to run, seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.hz > 0, "--hz must be positive");
    anyhow::ensure!(
        args.seconds.is_finite() && args.seconds > 0.0,
        "--seconds must be positive"
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::Relaxed))?;
    }
    let reader = SegmentReader::open(&args.segment)?;
    let thresholds = Thresholds::default();
    let period = Duration::from_secs_f64(1.0 / f64::from(args.hz));
    let end = Instant::now() + Duration::from_secs_f64(args.seconds);
    let mut next = Instant::now();
    let (mut captures, mut errors, mut torn) = (0u64, 0u64, 0u64);
    let mut latencies = Vec::new();
    let mut max_tokens = vec![0u64; reader.slot_count()];
    let mut last = vec![(0u64, 0u64); reader.slot_count()];
    let mut regressions = 0u64;
    let mut first_error = None;
    while Instant::now() < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let t = Instant::now();
        match EngineView::capture(&reader, clock::monotonic_ns(), &thresholds) {
            Ok(view) => {
                latencies.push(t.elapsed().as_secs_f64());
                captures += 1;
                for (i, slot) in view.slots.iter().enumerate() {
                    if slot.class == SlotClass::Torn {
                        torn += 1;
                    }
                    if let Some(m) = hydra_probe::HydraMeta::from_view(&view, i) {
                        // Within one task, tokens processed never go back.
                        let (task, tokens) = last[i];
                        if slot.state.task_id == task && m.tokens_processed < tokens {
                            regressions += 1;
                        }
                        last[i] = (slot.state.task_id, m.tokens_processed);
                        max_tokens[i] = max_tokens[i].max(m.tokens_processed);
                    }
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let out = serde_json::json!({
        "captures": captures,
        "errors": errors,
        "first_error": first_error,
        "torn": torn,
        "regressions": regressions,
        "max_tokens": max_tokens,
        "p50_us": pct(0.5) * 1e6,
        "p99_us": pct(0.99) * 1e6,
        "max_us": pct(1.0) * 1e6,
    });
    println!("{out}");
    Ok(())
}
