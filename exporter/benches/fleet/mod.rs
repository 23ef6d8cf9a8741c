//! The busy fleet both scrape benchmarks read: [`ENGINES`] engines of [`SLOTS`] slots,
//! every slot decoding one token per 20 ms step.

use hydra_layout::{Phase, SegmentConfig, SegmentWriter, SlotState, WorkUnit};
use std::path::Path;

pub const ENGINES: usize = 16;
pub const SLOTS: usize = 64;

/// Creates engine number `e` (`engine-<e>`) in `dir`.
pub fn engine(dir: &Path, e: usize) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: format!("engine-{e:02}"),
        slot_count: SLOTS,
        description: Default::default(),
    })
    .expect("create")
}

/// A decoding slot at `now`: `done` of 1000 tokens since `phase_start`, a step in flight.
pub fn decoding(now: u64, phase_start: u64, done: u64) -> SlotState {
    SlotState {
        task_id: 1,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: done,
        work_total: 1000,
        n_past: 100 + done,
        n_ctx: 4096,
        phase_start_ns: phase_start,
        last_progress_ns: now,
        step_start_ns: now,
        step_size: 1,
        last_step_ns: 20_000_000,
        steps_done: done,
        ..Default::default()
    }
}
