//! Helpers of the unit tests.

use hydra_layout::header::capabilities as caps;
use hydra_layout::{
    clock, Device, DeviceKind, Devices, LayerRange, Phase, SegmentConfig, SegmentWriter, SlotState,
    StepDevices, Substep, WorkUnit,
};
use std::path::Path;

const S: u64 = 1_000_000_000;

/// A live engine `id` with `slots` idle slots in `dir` (created if missing).
pub(crate) fn writer(dir: &Path, id: &str, slots: usize) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count: slots,
        description: Default::default(),
    })
    .expect("create a segment")
}

/// An engine whose 30 layers run on two RPC peers (16/14), its slot 0 in a prefill
/// step stopped after layer 12 and waiting on the second peer for 5 s.
pub(crate) fn split_engine(dir: &std::path::Path) -> (SegmentWriter, u64) {
    split_engine_learnt(dir, Phase::Prefill, 0, 0)
}

/// [`split_engine`] in `phase` (prefill: steps of 512 tokens; decode: of one), where
/// `steps` earlier steps each waited about `ns` on the second peer: that peer's history
/// for the phase (FORMAT §19.6).
pub(crate) fn split_engine_learnt(
    dir: &Path,
    phase: Phase,
    steps: u64,
    ns: u64,
) -> (SegmentWriter, u64) {
    let size = if phase == Phase::Decode { 1 } else { 512 };
    let mut w = rpc_writer(
        dir,
        caps::LAYER_PROGRESS | caps::DEVICES | caps::DEVICE_WAIT,
    );
    let now = clock::monotonic_ns();
    let start = now - 6 * S;
    let mut s = SlotState::default();
    s.begin_task(1, phase, WorkUnit::Tokens, 4000, start - S);
    w.publish(0, &s).unwrap();
    for i in 0..steps {
        let at = start - S / 2 + i * 1_000;
        s.start_step(size, at);
        w.publish(0, &s).unwrap();
        learn_wait(&mut w, 2, ns);
        s.finish_step(s.work_done + size, at + 500);
        w.publish(0, &s).unwrap();
    }
    s.start_step(size, start);
    w.publish(0, &s).unwrap();
    let layer = Substep {
        done: 16,
        total: 30,
        at_ns: start + S / 2,
        step_start_ns: start,
    };
    w.publish_substep(0, &layer).unwrap();
    let wait = StepDevices {
        layers_sent: 0,
        wait_device: 2,
        wait_since_ns: now - 5 * S,
    };
    w.publish_step_devices(0, &wait).unwrap();
    (w, now)
}

/// An engine split over two RPC peers (see [`split_engine`]) that watches their reads: its
/// slot 0 in a 512-token prefill step started 6 s ago and predicted at 2 s within 10 %,
/// its thread waiting on the first peer for 1 s, and the second peer unread for
/// `unread_ns` (0: it keeps up).
pub(crate) fn peer_engine(dir: &Path, unread_ns: u64) -> (SegmentWriter, u64) {
    let capabilities = caps::DEVICES | caps::DEVICE_WAIT | caps::PEER_READS | caps::STEP_PREDICTION;
    let mut w = rpc_writer(dir, capabilities);
    let now = clock::monotonic_ns();
    let start = now - 6 * S;
    let mut s = SlotState::default();
    s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 4000, start - S);
    s.start_step(512, start);
    w.publish(0, &s).unwrap();
    let prediction = hydra_layout::Prediction {
        step_expected_ns: 2 * S,
        step_start_ns: start,
        task_expected_end_ns: 0,
        phase_start_ns: s.phase_start_ns,
        error_ppm: 100_000,
    };
    w.publish_prediction(0, &prediction).unwrap();
    let wait = StepDevices {
        layers_sent: 0,
        wait_device: 1,
        wait_since_ns: now - S,
    };
    w.publish_step_devices(0, &wait).unwrap();
    let since = if unread_ns == 0 { 0 } else { now - unread_ns };
    w.publish_peer_unread(2, since).unwrap();
    (w, now)
}

/// A one-slot engine `rpc` in `dir` with `capabilities`, its [`two_peers`] published.
fn rpc_writer(dir: &Path, capabilities: u64) -> SegmentWriter {
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: "rpc".into(),
        slot_count: 1,
        description: hydra_layout::EngineDescription {
            capabilities,
            ..Default::default()
        },
    })
    .expect("create");
    w.publish_devices(&two_peers()).expect("devices");
    w
}

/// Two RPC peers, the 30 layers split 16/14, the output on the second.
fn two_peers() -> Devices {
    let rpc = |name: &str, endpoint: &str| Device {
        kind: DeviceKind::Rpc,
        name: name.into(),
        endpoint: endpoint.into(),
    };
    Devices {
        devices: vec![
            rpc("RPC0[127.0.0.1:50052]", "127.0.0.1:50052"),
            rpc("RPC1", "127.0.0.1:50053"),
        ],
        layer_count: 30,
        ranges: vec![
            LayerRange {
                first: 0,
                last: 15,
                device: 1,
            },
            LayerRange {
                first: 16,
                last: 29,
                device: 2,
            },
        ],
        output_device: 2,
    }
}

/// A wait of about `ns` on `device` by slot 0's step in flight, ended now. Leaves no wait
/// published.
fn learn_wait(w: &mut SegmentWriter, device: u64, ns: u64) {
    let wait = StepDevices {
        layers_sent: 0,
        wait_device: device,
        wait_since_ns: clock::monotonic_ns() - ns,
    };
    w.publish_step_devices(0, &wait).unwrap();
    w.publish_step_devices(0, &StepDevices::default()).unwrap();
}
