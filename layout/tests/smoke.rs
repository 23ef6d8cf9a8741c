use hydra_layout::*;

#[test]
fn create_publish_read_close() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segs");
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: dir.clone(),
        engine_id: "e1".into(),
        slot_count: 3,
        description: EngineDescription {
            model_name: "m".into(),
            device: "cpu".into(),
            ..Default::default()
        },
    })
    .unwrap();
    let st = SlotState {
        task_id: 5,
        phase: Phase::Prefill,
        work_done: 3,
        ..Default::default()
    };
    w.publish(2, &st).unwrap();
    w.pending_counter().queued(1);
    let r = SegmentReader::open_engine(&dir, "e1").unwrap();
    assert_eq!(r.slot(2).unwrap().state, st);
    assert_eq!(r.slot(1).unwrap().pending, 1);
    assert_eq!(r.header().unwrap().counters.requests_waiting, 1);
    assert_eq!(r.identity().description.model_name, "m");
    assert_eq!(r.liveness().unwrap(), Liveness::Live);
    assert!(matches!(
        SegmentWriter::create(&SegmentConfig {
            dir: dir.clone(),
            engine_id: "e1".into(),
            slot_count: 1,
            description: Default::default()
        }),
        Err(Error::EngineIdInUse { .. })
    ));
    w.close().unwrap();
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);
    assert!(!dir.join("e1.hps").exists());
}
