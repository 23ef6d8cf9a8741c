//! A scratch segment directory for tests: a private temporary directory holding `segs/`
//! (mode 0750, empty at first), test writers with one fixed description, and a listing of
//! what is on disk (each segment's header decoded) for failure messages.
//!
//! The tests of the probe CLI, the exporter and the reader C ABI all build on it, so a
//! test segment looks the same to every reader surface.

use hydra_layout::header::capabilities as caps;
use hydra_layout::{
    clock, Device, DeviceKind, Devices, EngineDescription, ErrorCode, FinishCause, FinishReason,
    LayerRange, Phase, Prediction, SegmentConfig, SegmentReader, SegmentWriter, SlotState,
    StepDevices, Substep, WorkUnit,
};

/// A millisecond in nanoseconds.
const MILLIS: u64 = 1_000_000;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A temporary directory; segments live in `dir` (`<tmp>/segs`, 0750). Both are removed on
/// drop.
pub struct Scratch {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    pub fn new() -> Self {
        let tmp = crate::scratch("hydra-segments.");
        let dir = tmp.path().join("segs");
        std::fs::create_dir(&dir).expect("mkdir segs");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).expect("chmod segs");
        Self { tmp, dir }
    }

    /// Creates engine `id` with `slots` slots and [`description`], held by this process
    /// (it reads as live until the writer is dropped or closed).
    pub fn writer(&self, id: &str, slots: usize) -> SegmentWriter {
        SegmentWriter::create(&SegmentConfig {
            dir: self.dir.clone(),
            engine_id: id.into(),
            slot_count: slots,
            description: description(),
        })
        .unwrap_or_else(|e| panic!("create segment {id}: {e}\n{}", self.describe()))
    }

    /// [`writer`](Self::writer) for a writer with a cost model (format v1.2): the
    /// description's capabilities plus `step_prediction`.
    pub fn predicting_writer(&self, id: &str, slots: usize) -> SegmentWriter {
        let mut d = description();
        d.capabilities |= hydra_layout::header::capabilities::STEP_PREDICTION;
        SegmentWriter::create(&SegmentConfig {
            dir: self.dir.clone(),
            engine_id: id.into(),
            slot_count: slots,
            description: d,
        })
        .unwrap_or_else(|e| panic!("create segment {id}: {e}\n{}", self.describe()))
    }

    /// [`served`] in this directory.
    pub fn served(&self, id: &str, slots: usize) -> SegmentWriter {
        served(&self.dir, id, slots)
    }

    /// [`rpc_split`] in this directory.
    pub fn rpc_split(&self, id: &str) -> (SegmentWriter, u64) {
        rpc_split(&self.dir, id)
    }

    /// [`rpc_split_decoding`] in this directory.
    pub fn rpc_split_decoding(&self, id: &str) -> (SegmentWriter, u64) {
        rpc_split_decoding(&self.dir, id)
    }

    /// [`rpc_split_unread`] in this directory.
    pub fn rpc_split_unread(&self, id: &str) -> (SegmentWriter, u64) {
        rpc_split_unread(&self.dir, id)
    }

    /// Leaves a CLOSED segment for `id` in the directory: a clean close unlinks the file,
    /// so a hard link taken before the close is renamed back to the segment's name.
    pub fn closed_engine(&self, id: &str) {
        let w = self.writer(id, 2);
        let path = w.path().to_path_buf();
        let keep = self.dir.join(format!(".keep-{id}"));
        std::fs::hard_link(&path, &keep).expect("hard link");
        w.close().expect("close");
        std::fs::rename(&keep, &path).expect("rename back");
    }

    /// What is on disk in `dir`, for failure messages.
    pub fn describe(&self) -> String {
        describe_dir(&self.dir)
    }
}

/// The description every test writer carries.
pub fn description() -> EngineDescription {
    EngineDescription {
        model_name: "tiny-llama".into(),
        model_quant: "Q8_0".into(),
        model_path: "/models/tiny.gguf".into(),
        tokenizer: "gpt2".into(),
        model_alias: "tiny".into(),
        device: "cpu".into(),
        capabilities: 3,
    }
}

/// Every entry of `dir` with its file type, and for each one that opens as a segment its
/// identity, lifecycle, liveness and decoded header.
pub fn describe_dir(dir: &Path) -> String {
    let mut s = format!("directory {}:\n", dir.display());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return s + "  (missing or unreadable)\n";
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        let kind = std::fs::symlink_metadata(&p).map(|m| m.file_type());
        s += &format!("  {} {kind:?}\n", p.display());
        match SegmentReader::open(&p) {
            Ok(r) => {
                s += &format!(
                    "    engine {:?} pid {} slots {} lifecycle {:?} liveness {:?} header {:?}\n",
                    r.identity().engine_id,
                    r.identity().pid,
                    r.slot_count(),
                    r.lifecycle().map(|l| l.as_str()),
                    r.liveness().map(|l| l.as_str()),
                    r.header()
                );
            }
            Err(e) => s += &format!("    unreadable: {e}\n"),
        }
    }
    s
}

/// A decode record at `now`: `done` of `total` tokens after 10 cached ones, the phase
/// started `phase_age` ago, the last progress `progress_age` ago, 10 ms per step. Stamps
/// are never 0 (0 means "never" in the format).
pub fn decode(now: u64, done: u64, total: u64, phase_age: u64, progress_age: u64) -> SlotState {
    SlotState {
        task_id: 42,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: done,
        work_total: total,
        tokens_cached: 10,
        n_past: 10 + done,
        n_ctx: 4096,
        state_size: (10 + done) * 1024,
        task_start_ns: now.saturating_sub(phase_age).max(1),
        phase_start_ns: now.saturating_sub(phase_age).max(1),
        last_progress_ns: now.saturating_sub(progress_age).max(1),
        last_step_ns: 10_000_000,
        steps_done: done,
        ..Default::default()
    }
}

/// The device table of a model whose 30 layers run on two ggml RPC peers (16/14), named
/// as llama.cpp 0c1e570 names them, with the output head on the second.
pub fn rpc_split_devices() -> Devices {
    let rpc = |name: &str, endpoint: &str| Device {
        kind: DeviceKind::Rpc,
        name: name.into(),
        endpoint: endpoint.into(),
    };
    let range = |first, last, device| LayerRange {
        first,
        last,
        device,
    };
    Devices {
        devices: vec![
            rpc("RPC0[127.0.0.1:50052]", "127.0.0.1:50052"),
            rpc("RPC1", "127.0.0.1:50053"),
        ],
        layer_count: 30,
        ranges: vec![range(0, 15, 1), range(16, 29, 2)],
        output_device: 2,
    }
}

/// Engine `id` in `dir` on [`rpc_split_devices`], with 2 slots: slot 0 in a 4,000-token
/// prefill whose 512-token step finished 16 of 30 layers 5.5 s ago and has waited on the
/// second peer (device 2, `RPC1 127.0.0.1:50053`) for 5 s; slot 1 idle. Returns the
/// writer (the engine reads as live while it is held) and the `now` those ages hold at.
pub fn rpc_split(dir: &Path, id: &str) -> (SegmentWriter, u64) {
    let mut w = rpc_split_writer(dir, id);
    let now = clock::monotonic_ns();
    let start = now - 6 * S;
    let mut s = SlotState::default();
    s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 4000, start - S);
    w.publish(0, &s).expect("publish");
    s.start_step(512, start);
    w.publish(0, &s).expect("publish");
    let layer = Substep {
        done: 16,
        total: 30,
        at_ns: start + S / 2,
        step_start_ns: start,
    };
    w.publish_substep(0, &layer).expect("publish layer");
    wait_on(&mut w, 2, now - 5 * S);
    (w, now)
}

/// [`rpc_split`]'s engine with slot 0 decoding instead: its 8 earlier decode steps each
/// waited about 2 ms on the second peer (that peer's decode history, FORMAT §19.6), and
/// the step in flight, of one token, has waited on it for 5 s: past the wait rule's
/// threshold (its 1 s floor), so readers call the slot stalled on that peer.
pub fn rpc_split_decoding(dir: &Path, id: &str) -> (SegmentWriter, u64) {
    const MS: u64 = 1_000_000;
    let mut w = rpc_split_writer(dir, id);
    let now = clock::monotonic_ns();
    let start = now - 6 * S;
    let mut s = SlotState::default();
    s.begin_task(1, Phase::Decode, WorkUnit::Tokens, 400, start - S);
    w.publish(0, &s).expect("publish");
    for i in 0..8 {
        let at = start - S / 2 + i * 10 * MS;
        s.start_step(1, at);
        w.publish(0, &s).expect("publish");
        // The writer times a wait from its start to when it is seen to end: now.
        wait_on(&mut w, 2, clock::monotonic_ns() - 2 * MS);
        wait_on(&mut w, 0, 0);
        s.finish_step(s.work_done + 1, at + 4 * MS);
        w.publish(0, &s).expect("publish");
    }
    s.start_step(1, start);
    w.publish(0, &s).expect("publish");
    wait_on(&mut w, 2, now - 5 * S);
    (w, now)
}

/// [`rpc_split`]'s engine watching its peers' reads (format v1.3 §19.7), slot 0 in a
/// prefill whose first 512-token step took 2 s and whose second has run for 6 s with
/// nothing to say where it is; the second peer (device 2) has read nothing for 5 s: past
/// the peer rule's threshold (two steps, 4 s), so readers call the slot stalled on that
/// peer, while the step rule (the 30 s floor) still allows the step.
pub fn rpc_split_unread(dir: &Path, id: &str) -> (SegmentWriter, u64) {
    let mut w = rpc_split_writer_with(dir, id, caps::PEER_READS);
    let now = clock::monotonic_ns();
    let start = now - 6 * S;
    let mut s = SlotState::default();
    s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 4000, start - 3 * S);
    s.start_step(512, start - 3 * S);
    w.publish(0, &s).expect("publish");
    s.finish_step(512, start - S);
    w.publish(0, &s).expect("publish");
    s.start_step(512, start);
    w.publish(0, &s).expect("publish");
    w.publish_peer_unread(2, now - 5 * S)
        .expect("publish the unread peer");
    (w, now)
}

const S: u64 = 1_000_000_000;

/// A 2-slot segment for engine `id` with the device capabilities and
/// [`rpc_split_devices`] published.
fn rpc_split_writer(dir: &Path, id: &str) -> SegmentWriter {
    rpc_split_writer_with(dir, id, 0)
}

/// [`rpc_split_writer`] with the capability bits `more` too.
fn rpc_split_writer_with(dir: &Path, id: &str, more: u64) -> SegmentWriter {
    let mut d = description();
    d.capabilities |= caps::LAYER_PROGRESS | caps::DEVICES | caps::DEVICE_WAIT | more;
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count: 2,
        description: d,
    })
    .unwrap_or_else(|e| panic!("create segment {id}: {e}\n{}", describe_dir(dir)));
    w.publish_devices(&rpc_split_devices())
        .expect("publish devices");
    w
}

/// Slot 0's step in flight waits on `device` since `since` (device 0: no wait).
fn wait_on(w: &mut SegmentWriter, device: u64, since: u64) {
    let wait = StepDevices {
        layers_sent: 0,
        wait_device: device,
        wait_since_ns: since,
    };
    w.publish_step_devices(0, &wait).expect("publish wait");
}

/// An engine of `slots` slots (held by the caller: dropping the writer closes it) that gives arrivals, finish causes and predictions. Slot
/// `s` serves one request: it arrives at `t0`, waits 5 ms, prefills 100 tokens in one
/// 40 ms step predicted at 20 ms, then decodes `s + 2` tokens in 10 ms steps predicted
/// at 10 ms, and ends by length. Slot 1 then fails a second request in its prefill
/// (a 30 ms step, no prediction) with a compute error.
pub fn served(dir: &Path, id: &str, slots: usize) -> SegmentWriter {
    let mut description = description();
    description.capabilities |= caps::ARRIVAL_TIMES | caps::FINISH_CAUSES | caps::STEP_PREDICTION;
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count: slots,
        description,
    })
    .expect("writer");
    for slot in 0..slots {
        let t0 = 1_000 * MILLIS * (slot as u64 + 1);
        let mut s = SlotState::default();
        w.note_arrival(slot, t0).unwrap();
        s.begin_task(
            slot as u64 + 1,
            Phase::Prefill,
            WorkUnit::Tokens,
            100,
            t0 + 5 * MILLIS,
        );
        served_step(
            &mut w,
            slot,
            &mut s,
            100,
            (t0 + 5 * MILLIS, 40 * MILLIS),
            Some(20 * MILLIS),
        );
        let mut at = t0 + 45 * MILLIS;
        s.enter_phase(Phase::Decode, WorkUnit::Tokens, slot as u64 + 2, at);
        for _ in 0..slot + 2 {
            served_step(
                &mut w,
                slot,
                &mut s,
                1,
                (at, 10 * MILLIS),
                Some(10 * MILLIS),
            );
            at += 10 * MILLIS;
        }
        w.note_finish(slot, FinishCause::Length, at).unwrap();
        s.finish(FinishReason::Completed, ErrorCode::None);
        w.publish(slot, &s).unwrap();
        if slot == 1 {
            w.note_arrival(slot, at).unwrap();
            s.begin_task(100, Phase::Prefill, WorkUnit::Tokens, 50, at);
            served_step(&mut w, slot, &mut s, 50, (at, 30 * MILLIS), None);
            w.note_finish(slot, FinishCause::Error, at + 30 * MILLIS)
                .unwrap();
            s.finish(FinishReason::Error, ErrorCode::Compute);
            w.publish(slot, &s).unwrap();
        }
    }
    w
}

/// One step of `size` units from `start` lasting `took`, published with its prediction.
fn served_step(
    w: &mut SegmentWriter,
    slot: usize,
    s: &mut SlotState,
    size: u64,
    (start, took): (u64, u64),
    predicted: Option<u64>,
) {
    s.start_step(size, start);
    match predicted {
        Some(ns) => {
            let p = Prediction {
                step_expected_ns: ns,
                step_start_ns: start,
                ..Default::default()
            };
            w.publish_with_prediction(slot, s, &p).unwrap();
        }
        None => w.publish(slot, s).unwrap(),
    }
    s.finish_step(s.work_done + size, start + took);
    w.publish(slot, s).unwrap();
}
