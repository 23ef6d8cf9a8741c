//! Writer liveness as readers see it: live while the writer lives, closed after a clean
//! close (and the file is gone), dead after a crash (the file stays, with its last values).

mod common;

use common::*;
use hydra_layout::header as h;
use hydra_layout::{Lifecycle, Liveness, SegmentReader, SegmentWriter, WriterCounters};

#[test]
fn live_then_closed_and_unlinked() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&config(scratch.path(), "e1", 2)).unwrap();
    let path = w.path().to_path_buf();
    w.publish(1, &sample_state(1)).unwrap();
    w.heartbeat(42);
    w.set_counters(&WriterCounters {
        prompt_tokens_total: 10,
        generated_tokens_total: 20,
        requests_running: 1,
        kv_cells_used: 30,
        kv_cells_total: 40,
    });
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!(r.liveness().unwrap(), Liveness::Live);
    // A liveness probe never disturbs the writer's lock: repeated probes stay Live.
    for _ in 0..100 {
        assert_eq!(r.liveness().unwrap(), Liveness::Live);
    }
    let hd = r.header().unwrap();
    assert_eq!(hd.lifecycle, Lifecycle::Ready);
    assert_eq!(
        (hd.heartbeat_ns, hd.loop_iterations, hd.closed_ns),
        (42, 1, 0)
    );
    assert_eq!(hd.counters.generated_tokens_total, 20);
    assert_eq!(hd.counters.kv_cells_total, 40);

    w.close().unwrap();
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);
    assert_eq!(r.lifecycle().unwrap(), Lifecycle::Closed);
    assert!(r.header().unwrap().closed_ns > 0, "CLOSED_NS not set");
    assert!(!path.exists(), "close did not unlink {}", path.display());
    // The mapping stays readable after the unlink, with the last values.
    assert_eq!(read_slot(&r, 1), sample_state(1));
}

#[test]
fn drop_closes_like_close() {
    let scratch = Scratch::new();
    let w = SegmentWriter::create(&config(scratch.path(), "e1", 1)).unwrap();
    let path = w.path().to_path_buf();
    let r = SegmentReader::open(&path).unwrap();
    drop(w);
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);
    assert!(!path.exists());
}

#[test]
fn closed_but_not_unlinked_reads_closed() {
    let scratch = Scratch::new();
    let w = SegmentWriter::create(&config(scratch.path(), "e1", 1)).unwrap();
    // A second name for the same file survives the writer's unlink of its own name.
    let kept = scratch.join("kept.seg");
    std::fs::hard_link(w.path(), &kept).unwrap();
    w.close().unwrap();
    let r = SegmentReader::open(&kept).expect("a closed segment opens");
    assert_eq!(r.lifecycle().unwrap(), Lifecycle::Closed);
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);

    // And a byte copy of a segment marked CLOSED (nobody holds its lock) reads Closed too.
    let bytes = patched(&valid_segment(1), &[(h::STATE_OFFSET, Lifecycle::CLOSED)]);
    let copy = write_segment(scratch.path(), "copy.seg", &bytes);
    let r = SegmentReader::open(&copy).unwrap();
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);
}

#[test]
fn crashed_writer_reads_dead_with_last_values() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&config(scratch.path(), "e1", 2)).unwrap();
    let path = w.path().to_path_buf();
    let instance = w.instance_id();
    w.publish(0, &sample_state(0)).unwrap();
    let r = SegmentReader::open(&path).unwrap();
    assert_eq!(r.liveness().unwrap(), Liveness::Live);
    w.simulate_crash();
    assert_eq!(r.liveness().unwrap(), Liveness::Dead);
    assert_eq!(r.lifecycle().unwrap(), Lifecycle::Ready);
    assert!(path.exists(), "a crashed writer's segment must stay");
    assert_eq!(read_slot(&r, 0), sample_state(0));
    // A reader arriving after the crash sees the same.
    let late = SegmentReader::open(&path).unwrap();
    assert_eq!(late.liveness().unwrap(), Liveness::Dead);
    assert_eq!(late.identity().instance_id, instance);
    assert_eq!(read_slot(&late, 0), sample_state(0));
    // A new writer replaces it; the old readers keep seeing the dead one.
    let w2 = SegmentWriter::create(&config(scratch.path(), "e1", 2)).unwrap();
    assert_ne!(w2.instance_id(), instance);
    assert_eq!(r.liveness().unwrap(), Liveness::Dead);
    let new = SegmentReader::open(&path).unwrap();
    assert_eq!(new.liveness().unwrap(), Liveness::Live);
    assert_eq!(new.identity().instance_id, w2.instance_id());
}

#[test]
fn identity_is_filled_in() {
    let scratch = Scratch::new();
    let w = SegmentWriter::create(&config(scratch.path(), "engine-7", 3)).unwrap();
    let before = hydra_layout::clock::monotonic_ns();
    let r = SegmentReader::open_engine(scratch.path(), "engine-7").unwrap();
    let id = r.identity();
    assert_eq!(id.engine_id, "engine-7");
    assert_eq!(id.pid, u64::from(std::process::id()));
    assert_eq!(id.instance_id, w.instance_id());
    assert_eq!(
        (id.version_major, id.version_minor),
        (h::VERSION_MAJOR, h::VERSION_MINOR)
    );
    assert_eq!(id.boot_id, hydra_layout::clock::boot_id());
    assert!(id.created_monotonic_ns > 0 && id.created_monotonic_ns <= before);
    assert!(id.created_realtime_ns > id.created_monotonic_ns);
    assert_eq!(
        id.to_realtime_ns(id.created_monotonic_ns),
        id.created_realtime_ns
    );
    assert_eq!(r.slot_count(), 3);
    assert_eq!(r.len(), hydra_layout::segment_len(3) as u64);
}
