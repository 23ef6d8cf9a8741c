//! A fake engine: creates a segment and publishes decode progress on every slot as fast as
//! a short pause allows (thousands of records per second), until its stdin closes or a
//! deadline passes. Every record satisfies `n_past == tokens_cached + work_done` and
//! `steps_done == work_done`, so a reader can check it got a consistent copy.
//! Shared by the integration tests (re-executed test binary) and `examples/fake_writer.rs`.

#![allow(dead_code)]

use hydra_layout::{
    clock, EngineDescription, Phase, SegmentConfig, SegmentWriter, SlotState, WorkUnit,
    WriterCounters,
};
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tokens reused from the cache in every fake record.
pub const CACHED: u64 = 100;
/// Work total of every fake decode.
pub const TOTAL: u64 = 1000;

/// What the fake engine prints, followed by its segment path, once the segment exists.
pub const READY: &str = "fake-writer-ready ";

/// Runs the fake engine. Prints [`READY`] and the path once the segment exists.
pub fn run(dir: &Path, engine_id: &str, slots: usize, max_run: Duration, pause: Duration) {
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: engine_id.to_owned(),
        slot_count: slots,
        description: EngineDescription {
            model_name: "fake-llama".into(),
            model_quant: "F32".into(),
            model_path: "/models/fake.gguf".into(),
            tokenizer: "gpt2".into(),
            model_alias: "fake".into(),
            device: "cpu".into(),
            capabilities: 7,
        },
    })
    .expect("create segment");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{READY}{}", w.path().display());
        let _ = out.flush();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    std::thread::spawn(move || {
        // EOF (or any error) on stdin means the parent is gone.
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        stop2.store(true, Ordering::Relaxed);
    });
    let start = clock::monotonic_ns();
    let deadline = Instant::now() + max_run;
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let now = clock::monotonic_ns();
        let done = i % TOTAL;
        for slot in 0..slots {
            let st = SlotState {
                task_id: 1 + slot as u64,
                phase: Phase::Decode,
                work_unit: WorkUnit::Tokens,
                work_done: done,
                work_total: TOTAL,
                tokens_cached: CACHED,
                n_past: CACHED + done,
                n_ctx: 4096,
                state_size: (CACHED + done) * 1024,
                task_start_ns: start,
                phase_start_ns: start,
                last_progress_ns: now,
                step_start_ns: now,
                step_size: 1,
                last_step_ns: 50_000,
                steps_done: done,
                ..Default::default()
            };
            w.publish(slot, &st).expect("publish");
        }
        w.heartbeat(now);
        w.set_counters(&WriterCounters {
            generated_tokens_total: i,
            requests_running: slots as u64,
            ..Default::default()
        });
        i += 1;
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    let _ = w.close();
}
