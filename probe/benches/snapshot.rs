//! Library snapshot + classify cost: `EngineView::capture` of a 64-slot engine (every slot
//! decoding), reported per slot through criterion's element throughput. Also the Hydra meta
//! JSON of one slot from a captured view.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hydra_layout::{
    clock, EngineDescription, Phase, SegmentConfig, SegmentReader, SegmentWriter, SlotState,
    WorkUnit,
};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use std::hint::black_box;

const SLOTS: usize = 64;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: tmp.path().to_path_buf(),
        engine_id: "bench".into(),
        slot_count: SLOTS,
        description: EngineDescription {
            model_name: "bench-model".into(),
            device: "cpu".into(),
            ..Default::default()
        },
    })
    .expect("create");
    let now = clock::monotonic_ns();
    for slot in 0..SLOTS {
        w.publish(
            slot,
            &SlotState {
                task_id: slot as u64 + 1,
                phase: Phase::Decode,
                work_unit: WorkUnit::Tokens,
                work_done: 100 + slot as u64,
                work_total: 1000,
                phase_start_ns: now.saturating_sub(5_000_000_000),
                last_progress_ns: now,
                step_start_ns: now,
                step_size: 1,
                last_step_ns: 30_000_000,
                steps_done: 100,
                ..Default::default()
            },
        )
        .expect("publish");
    }
    w.heartbeat(now);
    let reader = SegmentReader::open(w.path()).expect("open");
    let t = Thresholds::default();

    let mut g = c.benchmark_group("snapshot");
    g.throughput(Throughput::Elements(SLOTS as u64));
    g.bench_function("capture_64_slots", |b| {
        b.iter(|| {
            EngineView::capture(black_box(&reader), black_box(now), black_box(&t)).expect("capture")
        })
    });
    g.finish();

    let view = EngineView::capture(&reader, now, &t).expect("capture");
    c.bench_function("meta_json_one_slot", |b| {
        b.iter(|| {
            HydraMeta::from_view(black_box(&view), 7)
                .expect("slot")
                .to_json()
        })
    });
    drop(w);
}

criterion_group!(benches, bench);
criterion_main!(benches);
