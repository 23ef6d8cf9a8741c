//! Publish and snapshot costs of the seqlock on a real tmpfs-backed segment.
//!
//! `cargo bench -p hydra-layout --bench seqlock`
//!
//! - `publish`: one slot record publish by the single writer;
//! - `publish_substep`: one layer position publish (format v1.1: the substep words only);
//! - `snapshot/uncontended`: one consistent slot read, writer idle;
//! - `snapshot/contended`: the same while a writer thread on another core republishes the
//!   same slot in a tight loop (the worst case a reader can meet);
//! - `snapshot_all/64`: header plus 64 slots after one size check.

use criterion::{criterion_group, criterion_main, Criterion};
use hydra_layout::{Phase, SegmentConfig, SegmentReader, SegmentWriter, SlotState, Substep};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn config(dir: &std::path::Path, slots: usize) -> SegmentConfig {
    SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: "bench".into(),
        slot_count: slots,
        description: Default::default(),
    }
}

fn state(i: u64) -> SlotState {
    SlotState {
        task_id: 1,
        phase: Phase::Decode,
        work_done: i,
        work_total: u64::MAX,
        n_past: i,
        last_progress_ns: i,
        ..Default::default()
    }
}

fn benches(c: &mut Criterion) {
    let tmp = tempfile::Builder::new()
        .prefix("hydra-bench")
        .tempdir_in(shm_or_tmp())
        .unwrap();
    let mut writer = SegmentWriter::create(&config(tmp.path(), 64)).unwrap();
    let mut i = 0u64;
    c.bench_function("publish", |b| {
        b.iter(|| {
            i += 1;
            writer.publish(0, black_box(&state(i))).unwrap();
        })
    });
    let mut k = 0u64;
    c.bench_function("publish_substep", |b| {
        b.iter(|| {
            k += 1;
            let layer = Substep {
                done: k % 30,
                total: 30,
                at_ns: k,
                step_start_ns: 1,
            };
            writer.publish_substep(1, black_box(&layer)).unwrap();
        })
    });
    let reader = SegmentReader::open(writer.path()).unwrap();
    c.bench_function("snapshot/uncontended", |b| {
        b.iter(|| black_box(reader.slot(black_box(0)).unwrap()))
    });
    c.bench_function("snapshot_all/64", |b| {
        b.iter(|| black_box(reader.snapshot().unwrap()))
    });

    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                writer.publish(0, &state(i)).unwrap();
            }
            writer
        })
    };
    // Under a writer that never pauses, a read may exhaust its retry budget (Contended, or
    // Torn when the writer is preempted mid-update); the time of such reads is part of the
    // cost, so the result is measured, not unwrapped.
    c.bench_function("snapshot/contended", |b| {
        b.iter(|| black_box(reader.slot(black_box(0)).is_ok()))
    });
    stop.store(true, Ordering::Relaxed);
    drop(hammer.join().unwrap());
}

fn shm_or_tmp() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

criterion_group!(seqlock, benches);
criterion_main!(seqlock);
