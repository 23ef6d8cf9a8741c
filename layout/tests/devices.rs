//! The devices of format v1.3 (FORMAT §5.6, §19) through the real writer and reader: the
//! device table and layer map, the step's device words (layers sent, the wait), their
//! clearing at each step boundary, the flight recorder's wait columns, what a reader is
//! told without the capabilities, and a table left mid-update.

mod common;

use common::{config, Scratch};
use hydra_layout::header::capabilities as caps;
use hydra_layout::{
    Device, DeviceKind, DeviceTable, Devices, Error, ErrorKind, FinishCause, FinishReason,
    LayerRange, Phase, SegmentReader, SegmentWriter, SlotState, StepDevices, WorkUnit,
};

const DEVICE_CAPS: u64 = caps::DEVICES | caps::DEVICE_WAIT | caps::LAYERS_SENT;

fn writer(scratch: &Scratch, capabilities: u64) -> SegmentWriter {
    let mut c = config(scratch.path(), "engine-0", 2);
    c.description.capabilities = capabilities;
    SegmentWriter::create(&c).expect("create")
}

fn reader(scratch: &Scratch) -> SegmentReader {
    SegmentReader::open_engine(scratch.path(), "engine-0").expect("open")
}

/// A host with its CPU and two RPC peers, 30 layers split 16/14, output on the second
/// peer: what llama-server with `--rpc a,b -ts 1,1` runs.
fn rpc_split() -> Devices {
    let rpc = |name: &str, endpoint: &str| Device {
        kind: DeviceKind::Rpc,
        name: name.into(),
        endpoint: endpoint.into(),
    };
    Devices {
        devices: vec![
            Device {
                kind: DeviceKind::Cpu,
                name: "CPU".into(),
                endpoint: String::new(),
            },
            rpc("RPC0", "127.0.0.1:50052"),
            rpc("RPC1", "127.0.0.1:50053"),
        ],
        layer_count: 30,
        ranges: vec![
            LayerRange {
                first: 0,
                last: 15,
                device: 2,
            },
            LayerRange {
                first: 16,
                last: 29,
                device: 3,
            },
        ],
        output_device: 3,
    }
}

#[test]
fn the_table_is_not_yet_known_then_known_and_republished() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    let r = reader(&scratch);
    assert_eq!(r.devices().unwrap(), DeviceTable::NotYetKnown);
    let devices = rpc_split();
    w.publish_devices(&devices).unwrap();
    let DeviceTable::Known(first) = r.devices().unwrap() else {
        panic!("published")
    };
    assert_eq!(first.devices, devices);
    assert_eq!(first.seq, 2);
    assert_eq!(first.devices.describe(3), "RPC1 127.0.0.1:50053");
    // The placement changes (a reload): one more update, a new sequence.
    let single = Devices::single(
        Device {
            kind: DeviceKind::Cpu,
            name: "cpu".into(),
            endpoint: String::new(),
        },
        30,
    );
    w.publish_devices(&single).unwrap();
    let DeviceTable::Known(second) = r.devices().unwrap() else {
        panic!("republished")
    };
    assert_eq!(second.devices, single);
    assert_eq!(second.seq, 4);
}

#[test]
fn a_bad_table_or_a_missing_capability_is_refused_and_nothing_is_written() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    let mut bad = rpc_split();
    bad.ranges[1].first = 10;
    let e = w.publish_devices(&bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("overlaps"), "{e}");
    assert_eq!(
        reader(&scratch).devices().unwrap(),
        DeviceTable::NotYetKnown
    );

    let other = Scratch::new();
    let mut w = writer(&other, 0);
    let e = w.publish_devices(&rpc_split()).unwrap_err();
    assert!(matches!(e, Error::BadDevices { .. }), "{e}");
    let r = reader(&other);
    assert_eq!(r.devices().unwrap(), DeviceTable::Absent);
}

/// Starts a 512-token prefill step on slot 0 at `start`.
fn prefill_step(w: &mut SegmentWriter, s: &mut SlotState, start: u64) {
    s.begin_task(7, Phase::Prefill, WorkUnit::Tokens, 512, start - 1_000);
    w.publish(0, s).unwrap();
    s.start_step(512, start);
    w.publish(0, s).unwrap();
}

#[test]
fn a_wait_and_the_layers_sent_belong_to_the_step_in_flight_only() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    w.publish_devices(&rpc_split()).unwrap();
    let r = reader(&scratch);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns();
    prefill_step(&mut w, &mut s, start);
    let snap = r.slot(0).unwrap();
    assert!(snap.waits_published);
    assert_eq!((snap.wait(), snap.layers_sent()), (None, None));

    // The host sent all 30 layers and blocks on the second peer.
    let since = start + 2_000;
    let waiting = StepDevices {
        layers_sent: 30,
        wait_device: 3,
        wait_since_ns: since,
    };
    w.publish_step_devices(0, &waiting).unwrap();
    let snap = r.slot(0).unwrap();
    assert_eq!(snap.wait(), Some((3, since)));
    assert_eq!(snap.layers_sent(), Some(30));
    assert_eq!(snap.state, s, "the record is untouched");

    // The step ends with the wait still published: the end clears it in the same update.
    s.finish_step(512, start + 50_000_000);
    w.publish(0, &s).unwrap();
    let snap = r.slot(0).unwrap();
    assert_eq!(snap.devices, Some(StepDevices::default()));
    // The next step starts with nothing sent and no wait.
    s.start_step(1, start + 60_000_000);
    w.publish(0, &s).unwrap();
    let snap = r.slot(0).unwrap();
    assert_eq!((snap.wait(), snap.layers_sent()), (None, None));
    // The other slot never moved.
    assert_eq!(r.slot(1).unwrap().devices, Some(StepDevices::default()));
}

#[test]
fn the_flight_recorder_keeps_each_steps_last_device_and_time_waited() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    let r = reader(&scratch);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns();
    prefill_step(&mut w, &mut s, start);
    // Two waits: 1 ms on device 2 that ends, then one on device 3 still open at the end.
    let wait = |device, since| StepDevices {
        layers_sent: 16,
        wait_device: device,
        wait_since_ns: since,
    };
    w.publish_step_devices(0, &wait(2, start + 1_000)).unwrap();
    // Republishing the same wait (more layers sent) does not end it.
    w.publish_step_devices(
        0,
        &StepDevices {
            layers_sent: 30,
            ..wait(2, start + 1_000)
        },
    )
    .unwrap();
    let ended_at = hydra_layout::clock::monotonic_ns();
    w.publish_step_devices(0, &StepDevices::default()).unwrap();
    let after_first = hydra_layout::clock::monotonic_ns();
    let third = after_first + 1_000;
    w.publish_step_devices(0, &wait(3, third)).unwrap();
    let end = third + 5_000_000;
    s.finish_step(512, end);
    w.publish(0, &s).unwrap();
    // A step without waits after it.
    s.start_step(1, end + 1_000);
    w.publish(0, &s).unwrap();
    w.note_finish(0, FinishCause::Done, end + 2_000).unwrap();
    s.finish_step(513, end + 2_000);
    w.publish(0, &s).unwrap();
    s.finish(FinishReason::Completed, hydra_layout::ErrorCode::None);
    w.publish(0, &s).unwrap();

    let history = r.history(0).unwrap().expect("a flight recorder");
    let entries = &history.entries;
    assert_eq!(entries.len(), 2, "{entries:?}");
    let first = entries[0];
    assert_eq!(first.wait_device, 3, "the last device it waited on");
    let first_wait_min = ended_at - (start + 1_000);
    let first_wait_max = after_first - (start + 1_000);
    let open_wait = end - third;
    assert!(
        (first_wait_min + open_wait..=first_wait_max + open_wait).contains(&first.wait_ns),
        "{} not in {}..={}",
        first.wait_ns,
        first_wait_min + open_wait,
        first_wait_max + open_wait
    );
    assert_eq!((entries[1].wait_device, entries[1].wait_ns), (0, 0));
}

#[test]
fn without_the_capabilities_the_device_words_are_unknown_not_none() {
    let scratch = Scratch::new();
    // Waits only: layers sent stay unknown even when a writer stores them.
    let mut w = writer(&scratch, caps::DEVICE_WAIT);
    let r = reader(&scratch);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns();
    prefill_step(&mut w, &mut s, start);
    w.publish_step_devices(
        0,
        &StepDevices {
            layers_sent: 12,
            wait_device: 1,
            wait_since_ns: start + 5,
        },
    )
    .unwrap();
    let snap = r.slot(0).unwrap();
    assert_eq!(snap.layers_sent(), None);
    assert_eq!(snap.wait(), Some((1, start + 5)));
    assert_eq!(r.devices().unwrap(), DeviceTable::Absent);

    let other = Scratch::new();
    let mut w = writer(&other, 0);
    prefill_step(&mut w, &mut s, start);
    let snap = reader(&other).slot(0).unwrap();
    assert!(!snap.waits_published);
    assert_eq!(snap.devices, None, "unknown, not none");
}

#[test]
fn a_wait_that_began_before_its_step_is_not_shown() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns();
    prefill_step(&mut w, &mut s, start);
    w.publish_step_devices(
        0,
        &StepDevices {
            layers_sent: 0,
            wait_device: 2,
            wait_since_ns: start - 1,
        },
    )
    .unwrap();
    assert_eq!(reader(&scratch).slot(0).unwrap().wait(), None);
}

#[test]
fn a_table_left_mid_update_is_torn_and_the_records_still_read() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    w.publish_devices(&rpc_split()).unwrap();
    let path = w.path().to_path_buf();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = hydra_layout::region::Layout::for_slots(2).devices.offset;
    bytes[at..at + 8].copy_from_slice(&5u64.to_ne_bytes());
    let dir = scratch.subdir("torn");
    let r =
        SegmentReader::open(common::write_segment(&dir, "engine-0.hps", &bytes)).expect("opens");
    let e = r.devices().unwrap_err();
    assert!(
        matches!(
            e,
            Error::RegionTorn {
                slot: None,
                seq: 5,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Torn);
    assert!(e.to_string().starts_with("the device table is torn"), "{e}");
    assert!(r.slot(0).is_ok());
}

/// One wait on `device` by slot 0's step in flight, begun `ago_ns` before now and ended
/// now (the next device update shows no wait).
fn ended_wait(w: &mut SegmentWriter, device: u64, ago_ns: u64) {
    let since = hydra_layout::clock::monotonic_ns() - ago_ns;
    let wait = StepDevices {
        layers_sent: 0,
        wait_device: device,
        wait_since_ns: since,
    };
    w.publish_step_devices(0, &wait).unwrap();
    w.publish_step_devices(0, &StepDevices::default()).unwrap();
}

/// Ends slot 0's step in flight and starts the next, of `size` tokens.
fn next_step(w: &mut SegmentWriter, s: &mut SlotState, size: u64) {
    let now = hydra_layout::clock::monotonic_ns();
    s.finish_step(s.work_done + s.step_size, now);
    w.publish(0, s).unwrap();
    s.start_step(size, now + 1);
    w.publish(0, s).unwrap();
}

#[test]
fn each_device_keeps_how_many_steps_waited_and_the_longest_recent_wait_per_kind_of_step() {
    use hydra_layout::device_waits::{MIN_STEPS, WINDOW};
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    w.publish_devices(&rpc_split()).unwrap();
    let r = reader(&scratch);
    let table_seq = |r: &SegmentReader| match r.devices().unwrap() {
        DeviceTable::Known(p) => p.seq,
        other => panic!("{other:?}"),
    };
    let seq = table_seq(&r);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns();
    prefill_step(&mut w, &mut s, start);
    // Peer B (device 3): a first step with one wait of 9 ms and fifty of 2 us; peer A none.
    ended_wait(&mut w, 3, 9_000_000);
    for _ in 0..50 {
        ended_wait(&mut w, 3, 2_000);
    }
    let b = r.device_waits().unwrap()[2].prefill;
    assert_eq!(b.steps, 1);
    assert_eq!(b.learnt_max_ns(), None, "one step is not enough");
    next_step(&mut w, &mut s, 256);
    ended_wait(&mut w, 3, 2_000);
    let waits = r.device_waits().unwrap();
    assert_eq!(waits.len(), 16);
    let b = waits[2].prefill;
    assert_eq!(b.steps, MIN_STEPS);
    assert!((9_000_000..20_000_000).contains(&b.recent_max_ns), "{b:?}");
    assert_eq!(b.learnt_max_ns(), Some(b.recent_max_ns));
    assert_eq!(waits[2].decode.steps, 0, "no decode step waited");
    assert_eq!(waits[1].prefill.steps, 0, "peer A was never waited on");
    assert_eq!(table_seq(&r), seq, "the table's seqlock is not touched");

    // Two windows of steps with short waits later, the 9 ms one is forgotten.
    for _ in 0..2 * WINDOW {
        next_step(&mut w, &mut s, 256);
        ended_wait(&mut w, 3, 2_000_000);
    }
    let b = r.device_waits().unwrap()[2].prefill;
    assert!((2_000_000..9_000_000).contains(&b.recent_max_ns), "{b:?}");

    // A decode step's waits go to the decode history.
    s.finish_step(s.work_done + 256, hydra_layout::clock::monotonic_ns());
    w.publish(0, &s).unwrap();
    let now = hydra_layout::clock::monotonic_ns();
    s.enter_phase(Phase::Decode, WorkUnit::Tokens, 4, now);
    s.start_step(1, now + 1);
    w.publish(0, &s).unwrap();
    ended_wait(&mut w, 3, 1_000);
    let b = r.device_waits().unwrap()[2];
    assert_eq!(b.decode.steps, 1);
    assert!(b.prefill.steps > MIN_STEPS);

    // Publishing the placement again starts the histories afresh.
    w.publish_devices(&rpc_split()).unwrap();
    let zero = hydra_layout::DeviceWaits::default();
    assert!(r.device_waits().unwrap().iter().all(|d| *d == zero));
}

#[test]
fn without_a_device_table_there_are_no_wait_histories() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, caps::DEVICE_WAIT);
    let r = reader(&scratch);
    let mut s = SlotState::default();
    prefill_step(&mut w, &mut s, hydra_layout::clock::monotonic_ns());
    ended_wait(&mut w, 3, 1_000);
    assert_eq!(r.device_waits().unwrap(), vec![]);
}

#[test]
fn a_wait_nested_inside_another_is_not_counted_twice() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    let r = reader(&scratch);
    let mut s = SlotState::default();
    let start = hydra_layout::clock::monotonic_ns() - 10_000_000;
    prefill_step(&mut w, &mut s, start);
    let wait = |device, since| StepDevices {
        layers_sent: 0,
        wait_device: device,
        wait_since_ns: since,
    };
    // A copy between the peers: the host waits on device 2 from `outer`, inside it on
    // device 3 (the set), then on device 2 again (the same wait, its start unchanged).
    let outer = start + 1_000;
    w.publish_step_devices(0, &wait(2, outer)).unwrap();
    let inner = hydra_layout::clock::monotonic_ns();
    w.publish_step_devices(0, &wait(3, inner)).unwrap();
    w.publish_step_devices(0, &wait(2, outer)).unwrap();
    let before_end = hydra_layout::clock::monotonic_ns();
    w.publish_step_devices(0, &StepDevices::default()).unwrap();
    let after_end = hydra_layout::clock::monotonic_ns();
    s.finish_step(512, after_end + 1_000);
    w.publish(0, &s).unwrap();
    let entries = r.history(0).unwrap().expect("a flight recorder").entries;
    let waited = entries[0].wait_ns;
    assert!(
        (before_end - outer..=after_end - outer).contains(&waited),
        "{waited} not in {}..={}: the time from the outer wait's start to its end, once",
        before_end - outer,
        after_end - outer
    );
}

#[test]
fn each_peer_s_unread_since_is_its_own_word_and_a_new_placement_clears_it() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS | caps::PEER_READS);
    let r = reader(&scratch);
    assert!(r.identity().publishes_peer_reads());
    w.publish_devices(&rpc_split()).unwrap();
    assert_eq!(r.peers_unread_since().unwrap(), vec![0; 16]);
    w.publish_peer_unread(3, 123_456_789).unwrap();
    let unread = r.peers_unread_since().unwrap();
    assert_eq!(unread[2], 123_456_789);
    assert_eq!(unread.iter().filter(|&&t| t != 0).count(), 1, "{unread:?}");
    // The table itself is untouched by it.
    let DeviceTable::Known(t) = r.devices().unwrap() else {
        panic!("published")
    };
    assert_eq!((t.devices, t.seq), (rpc_split(), 2));
    // The peer caught up; then it falls behind again and the placement is republished.
    w.publish_peer_unread(3, 0).unwrap();
    assert_eq!(r.peers_unread_since().unwrap(), vec![0; 16]);
    w.publish_peer_unread(2, 5).unwrap();
    w.publish_devices(&rpc_split()).unwrap();
    assert_eq!(r.peers_unread_since().unwrap(), vec![0; 16]);
    for id in [0, 17] {
        let e = w.publish_peer_unread(id, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
}

#[test]
fn without_the_peer_reads_capability_nothing_is_written_or_read() {
    let scratch = Scratch::new();
    let mut w = writer(&scratch, DEVICE_CAPS);
    w.publish_devices(&rpc_split()).unwrap();
    let e = w.publish_peer_unread(2, 7).unwrap_err();
    assert!(matches!(e, Error::BadDevices { .. }), "{e}");
    let r = reader(&scratch);
    assert!(!r.identity().publishes_peer_reads());
    assert_eq!(r.peers_unread_since().unwrap(), Vec::<u64>::new());
    // The bit alone, without a device table, is no peer watch either.
    let other = Scratch::new();
    let mut w = writer(&other, caps::PEER_READS);
    assert!(w.publish_peer_unread(2, 7).is_err());
    assert_eq!(reader(&other).peers_unread_since().unwrap(), vec![]);
}
