//! Writes the committed seed corpus of the `segment_open` fuzz target.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --bin make_seeds [OUT_DIR]
//! ```
//! (default `OUT_DIR`: `fuzz/seeds/segment_open`). Valid segments are produced by
//! `hydra_layout::SegmentWriter` itself in a scratch directory, then the words that differ at
//! every creation (pid, process start, instance id, clock anchors, boot id, close time) are
//! replaced by fixed values, so that running the generator again writes byte-identical
//! files. Truncated, corrupted and unusual-geometry seeds are derived from those by
//! patching words. Each seed is `[3 control bytes][file bytes]` (see `src/lib.rs`).
//!
//! Files named `repro-*` in `OUT_DIR` (minimised crash reproducers) are kept; every other
//! file is removed first.

use hydra_fuzz::{control, Action, CliCmd};
use hydra_layout::header as h;
use hydra_layout::slot as sl;
use hydra_layout::{
    EngineDescription, ErrorCode, FinishReason, Phase, Prediction, SegmentConfig, SegmentWriter,
    SlotState, Substep, WorkUnit, WriterCounters,
};
use std::fs;
use std::path::{Path, PathBuf};

const S: u64 = 1_000_000_000;
/// The fixed "now" of every generated segment (CLOCK_MONOTONIC ns, ~11.6 days of uptime).
const BASE: u64 = 1_000_000 * S;

fn put(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

fn put_str(b: &mut [u8], off: usize, len: usize, s: &[u8]) {
    b[off..off + len].fill(0);
    b[off..off + s.len()].copy_from_slice(s);
}

/// Replaces the per-creation words with fixed values.
fn normalise(b: &mut [u8]) {
    put(b, h::PID_OFFSET, 4242);
    put(b, h::PROCESS_START_NS_OFFSET, BASE - 120 * S);
    put(b, h::INSTANCE_ID_OFFSET, 0xe25d_cab5_c016_fc8a);
    put(b, h::CREATED_REALTIME_NS_OFFSET, 1_767_225_600 * S);
    put(b, h::CREATED_MONOTONIC_NS_OFFSET, BASE - 100 * S);
    put_str(
        b,
        h::BOOT_ID_OFFSET,
        h::BOOT_ID_LEN,
        b"6f1d0c2e-8a1b-4c3d-9e5f-0a1b2c3d4e5f",
    );
    if get(b, h::CLOSED_NS_OFFSET) != 0 {
        put(b, h::CLOSED_NS_OFFSET, BASE - S);
    }
}

enum End {
    /// Writer still alive when the bytes are read (readers will find its lock free: dead).
    Open,
    /// Clean close: STATE = CLOSED, CLOSED_NS set.
    Closed,
    /// Simulated crash.
    Crashed,
}

/// Creates a segment with `slots` slots, lets `f` publish, and returns the file's bytes.
fn segment(scratch: &Path, slots: usize, end: End, f: impl FnOnce(&mut SegmentWriter)) -> Vec<u8> {
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: scratch.to_path_buf(),
        engine_id: "engine-0".into(),
        slot_count: slots,
        description: EngineDescription {
            model_name: "SmolLM2-135M-Instruct".into(),
            model_quant: "Q8_0".into(),
            model_path: "/models/SmolLM2-135M-Instruct-Q8_0.gguf".into(),
            tokenizer: "gpt2".into(),
            model_alias: "smollm2".into(),
            device: "cpu".into(),
            capabilities: h::capabilities::COMPLETION
                | h::capabilities::STATE_SAVE_RESTORE
                | h::capabilities::CHUNKED_PREFILL
                | h::capabilities::LAYER_PROGRESS
                | h::capabilities::STEP_PREDICTION
                // v1.3: a writer that publishes its devices and waits, and whose host
                // gives arrivals and finish causes: every region family filled.
                | h::capabilities::DEVICES
                | h::capabilities::DEVICE_WAIT
                | h::capabilities::ARRIVAL_TIMES
                | h::capabilities::FINISH_CAUSES,
        },
    })
    .expect("create a segment");
    w.heartbeat(BASE - 2 * S);
    f(&mut w);
    let path = w.path().to_path_buf();
    let mut bytes = match end {
        End::Open => {
            let b = fs::read(&path).unwrap();
            drop(w);
            b
        }
        End::Crashed => {
            w.simulate_crash();
            let b = fs::read(&path).unwrap();
            fs::remove_file(&path).unwrap();
            b
        }
        End::Closed => {
            // close() unlinks the name: read through a descriptor opened before.
            use std::io::Read;
            let mut file = fs::File::open(&path).unwrap();
            w.close().unwrap();
            let mut b = Vec::new();
            file.read_to_end(&mut b).unwrap();
            b
        }
    };
    normalise(&mut bytes);
    bytes
}

fn decode(task: u64, done: u64, total: u64) -> SlotState {
    SlotState {
        task_id: task,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: done,
        work_total: total,
        tokens_cached: 12,
        n_past: 300 + done,
        n_ctx: 4096,
        state_size: 1 << 20,
        task_start_ns: BASE - 20 * S,
        phase_start_ns: BASE - 10 * S,
        last_progress_ns: BASE - S / 10,
        step_start_ns: BASE - S / 50,
        step_size: 1,
        last_step_ns: 25_000_000,
        steps_done: done,
        ..Default::default()
    }
}

fn prefill(task: u64) -> SlotState {
    SlotState {
        task_id: task,
        phase: Phase::Prefill,
        work_unit: WorkUnit::Tokens,
        work_done: 512,
        work_total: 2048,
        n_past: 512,
        n_ctx: 4096,
        task_start_ns: BASE - 40 * S,
        phase_start_ns: BASE - 40 * S,
        last_progress_ns: BASE - 35 * S,
        step_start_ns: BASE - 35 * S,
        step_size: 512,
        last_step_ns: 5 * S,
        steps_done: 1,
        ..Default::default()
    }
}

fn save(task: u64) -> SlotState {
    SlotState {
        task_id: task,
        phase: Phase::Save,
        work_unit: WorkUnit::Bytes,
        work_done: 3 << 20,
        work_total: 8 << 20,
        state_size: 8 << 20,
        task_start_ns: BASE - 3 * S,
        phase_start_ns: BASE - 2 * S,
        last_progress_ns: BASE - S,
        ..Default::default()
    }
}

fn finished(task: u64, reason: FinishReason, error: ErrorCode) -> SlotState {
    SlotState {
        task_id: task,
        phase: Phase::Idle,
        finish_reason: reason,
        error_code: error,
        n_past: 100,
        n_ctx: 4096,
        task_start_ns: BASE - 60 * S,
        phase_start_ns: BASE - 30 * S,
        last_progress_ns: BASE - 30 * S,
        ..Default::default()
    }
}

/// Four slots: decoding, prefilling with a long step in flight, idle with two queued tasks,
/// saving state. Counters set.
fn mixed4(scratch: &Path) -> Vec<u8> {
    segment(scratch, 4, End::Open, |w| {
        w.publish(0, &decode(7, 45, 100)).unwrap();
        w.publish(1, &prefill(8)).unwrap();
        w.publish(2, &finished(6, FinishReason::Completed, ErrorCode::None))
            .unwrap();
        let pc = w.pending_counter();
        pc.queued(2);
        pc.queued(2);
        w.publish(3, &save(9)).unwrap();
        w.set_counters(&WriterCounters {
            prompt_tokens_total: 4096,
            generated_tokens_total: 845,
            requests_running: 3,
            kv_cells_used: 1200,
            kv_cells_total: 16384,
        });
    })
}

/// Moves the header and slots of a v1.0 segment into a "newer minor" layout: a longer
/// header and a wider slot stride, both of which readers must accept and skip.
fn widen(v1: &[u8], header_len: usize, slot_offset: usize, stride: usize) -> Vec<u8> {
    let count = get(v1, h::SLOT_COUNT_OFFSET) as usize;
    let total = slot_offset + count * stride;
    let mut b = vec![0xA5u8; total];
    b[..h::HEADER_LEN].copy_from_slice(&v1[..h::HEADER_LEN]);
    for i in 0..count {
        let from = h::HEADER_LEN + i * sl::SLOT_LEN;
        let to = slot_offset + i * stride;
        b[to..to + sl::SLOT_LEN].copy_from_slice(&v1[from..from + sl::SLOT_LEN]);
    }
    put(&mut b, h::VERSION_MINOR_OFFSET, 7);
    put(&mut b, h::HEADER_LEN_OFFSET, header_len as u64);
    put(&mut b, h::SLOT_OFFSET_OFFSET, slot_offset as u64);
    put(&mut b, h::SLOT_STRIDE_OFFSET, stride as u64);
    put(&mut b, h::TOTAL_LEN_OFFSET, total as u64);
    b
}

fn patched(base: &[u8], words: &[(usize, u64)]) -> Vec<u8> {
    let mut b = base.to_vec();
    for &(off, v) in words {
        put(&mut b, off, v);
    }
    b
}

/// Format v1.3: a dead engine whose 30 layers ran on a CPU and two RPC peers, whose slot 0
/// finished two tasks (statistics and flight recorder entries) and died in a third, its
/// step waiting on the second peer.
fn rpc_split(scratch: &Path) -> Vec<u8> {
    use hydra_layout::{Device, DeviceKind, Devices, FinishCause, LayerRange, StepDevices};
    segment(scratch, 2, End::Crashed, |w| {
        let rpc = |n: u32| Device {
            kind: DeviceKind::Rpc,
            name: format!("RPC{n}[10.0.0.{n}:50052]"),
            endpoint: format!("10.0.0.{n}:50052"),
        };
        let cpu = Device {
            kind: DeviceKind::Cpu,
            name: "CPU".into(),
            endpoint: String::new(),
        };
        let range = |first, last, device| LayerRange {
            first,
            last,
            device,
        };
        w.publish_devices(&Devices {
            devices: vec![cpu, rpc(1), rpc(2)],
            layer_count: 30,
            ranges: vec![range(0, 15, 2), range(16, 29, 3)],
            output_device: 3,
        })
        .unwrap();
        let mut t = BASE - 20 * S;
        for task in 1..=3u64 {
            w.note_arrival(0, t - S).unwrap();
            let mut s = SlotState::default();
            s.begin_task(task, Phase::Prefill, WorkUnit::Tokens, 512, t);
            w.publish(0, &s).unwrap();
            s.start_step(512, t + 1000);
            w.publish(0, &s).unwrap();
            let wait = StepDevices {
                layers_sent: 30,
                wait_device: 3,
                wait_since_ns: t + 2000,
            };
            w.publish_step_devices(0, &wait).unwrap();
            if task == 3 {
                break;
            }
            w.publish_step_devices(0, &StepDevices::default()).unwrap();
            s.finish_step(512, t + S);
            w.publish(0, &s).unwrap();
            w.note_finish(0, FinishCause::Done, t + S).unwrap();
            s.finish(FinishReason::Completed, ErrorCode::None);
            w.publish(0, &s).unwrap();
            t += 2 * S;
        }
    })
}

/// The seeds in the order they were added: name, control bytes, file bytes.
#[derive(Default)]
struct Seeds(Vec<(String, [u8; 3], Vec<u8>)>);

impl Seeds {
    fn add(&mut self, name: impl Into<String>, ctl: [u8; 3], file: Vec<u8>) {
        self.0.push((name.into(), ctl, file));
    }
}

/// The control bytes of a seed read as it is, classified at the heartbeat.
fn plain() -> [u8; 3] {
    cli(CliCmd::None, false, 0)
}

/// The control bytes that render `cmd` (`--json` if `json`) with the classification's
/// `now` chosen by `now`.
fn cli(cmd: CliCmd, json: bool, now: u8) -> [u8; 3] {
    control(Action::None, 0, now, false, cmd, json, 0, false)
}

/// The control bytes that apply `action` with parameter `param` to the file after the
/// reader mapped it, then render `cmd`.
fn after_open(action: Action, param: u8, cmd: CliCmd) -> [u8; 3] {
    control(action, param, 0, false, cmd, false, 0, false)
}

/// The v1.3 seed and its hostile regions: a ring head that points anywhere, bucket counts
/// that do not add up, a statistics block left mid-update, a device table with an
/// impossible count and a range on no device, and a region directory inside the slots.
fn add_hostile_regions(seeds: &mut Seeds, rpc: &[u8]) {
    use hydra_layout::region::Layout;
    use hydra_layout::{devices, flight, stats};
    let l = Layout::for_slots(2);
    let ring = l.flight.item(0);
    let block = l.stats.item(0);
    let table = l.devices.item(0);
    let first_bucket = block + stats::HISTOGRAMS_OFFSET + stats::HIST_BUCKETS_OFFSET;
    seeds.add("valid-2slots-v1.3-rpc-split", plain(), rpc.to_vec());
    let cases: [(&str, Vec<(usize, u64)>); 6] = [
        (
            "ring-head-max",
            vec![(ring + flight::FR_HEAD_OFFSET, u64::MAX)],
        ),
        (
            "ring-capacity-huge",
            vec![(ring + flight::FR_CAPACITY_OFFSET, 1 << 40)],
        ),
        ("stats-bucket-backwards", vec![(first_bucket, u64::MAX)]),
        ("stats-torn", vec![(block + stats::STATS_SEQ_OFFSET, 7)]),
        (
            "devices-hostile",
            vec![
                (table + devices::DEVICE_COUNT_OFFSET, 99),
                (table + devices::RANGE_COUNT_OFFSET, u64::MAX),
                (
                    table + devices::MAP_OFFSET + devices::range::RANGE_DEVICE,
                    0,
                ),
            ],
        ),
        (
            "region-dir-in-slots",
            vec![(h::REGION_DIR_OFFSET, h::HEADER_LEN as u64)],
        ),
    ];
    for (name, words) in cases {
        seeds.add(
            format!("hostile-v1.3-{name}"),
            plain(),
            patched(rpc, &words),
        );
    }
}

/// 24 slots, every phase four times over, and three tasks pending.
fn many24(scratch: &Path) -> Vec<u8> {
    segment(scratch, 24, End::Open, |w| {
        for i in 0..24 {
            let task = 100 + i as u64;
            let s = match i % 6 {
                0 => decode(task, i as u64 * 10, 500),
                1 => prefill(task),
                2 => save(task),
                3 => SlotState {
                    phase: Phase::Restore,
                    ..save(task)
                },
                4 => finished(task, FinishReason::Error, ErrorCode::ContextOverflow),
                _ => SlotState {
                    phase: Phase::Queued,
                    task_id: task,
                    ..Default::default()
                },
            };
            w.publish(i, &s).unwrap();
        }
        for _ in 0..3 {
            w.pending_counter().queued(5);
        }
    })
}

/// Two finished slots (cancelled; failed on I/O) of a cleanly closed engine.
fn closed2(scratch: &Path) -> Vec<u8> {
    segment(scratch, 2, End::Closed, |w| {
        w.publish(0, &finished(3, FinishReason::Cancelled, ErrorCode::None))
            .unwrap();
        w.publish(1, &finished(4, FinishReason::Error, ErrorCode::Io))
            .unwrap();
    })
}

/// A dead engine whose slot 1 was left mid-update (torn).
fn torn3(scratch: &Path) -> Vec<u8> {
    segment(scratch, 3, End::Crashed, |w| {
        w.publish(0, &decode(1, 10, 100)).unwrap();
        w.publish(1, &decode(2, 20, 100)).unwrap();
        w.abandon_update(1).unwrap();
        w.publish(2, &prefill(3)).unwrap();
    })
}

/// A dead engine whose decoding slot made no progress for ten minutes before it died.
fn stalled2(scratch: &Path) -> Vec<u8> {
    segment(scratch, 2, End::Crashed, |w| {
        let mut d = decode(5, 50, 100);
        d.last_progress_ns = BASE - 600 * S;
        d.phase_start_ns = BASE - 900 * S;
        w.publish(0, &d).unwrap();
        w.publish(1, &prefill(6)).unwrap();
        w.heartbeat(BASE - 600 * S);
    })
}

/// Layer positions (format v1.1): moving inside a long chunk (slow), frozen (stalled at
/// layer 5), and left over from an earlier step (no position).
fn layers3(scratch: &Path) -> Vec<u8> {
    segment(scratch, 3, End::Open, |w| {
        let moving = prefill(10);
        w.publish(0, &moving).unwrap();
        let at = |done, age, step| Substep {
            done,
            total: 30,
            at_ns: BASE - age,
            step_start_ns: step,
        };
        w.publish_substep(0, &at(17, 2 * S, moving.step_start_ns))
            .unwrap();
        let frozen = prefill(11);
        w.publish(1, &frozen).unwrap();
        w.publish_substep(1, &at(5, 34 * S, frozen.step_start_ns))
            .unwrap();
        let mut next = decode(12, 10, 100);
        next.step_start_ns = BASE - S;
        next.step_size = 1;
        w.publish(2, &next).unwrap();
        w.publish_substep(2, &at(30, 2 * S, BASE - 3 * S)).unwrap();
    })
}

/// Predictions (format v1.2): a decode step on time, one far past its prediction (slow),
/// and a prediction left over from an earlier step and phase (none).
fn predictions3(scratch: &Path) -> Vec<u8> {
    segment(scratch, 3, End::Open, |w| {
        let predicted = |step: &SlotState, step_ns, end_ns| Prediction {
            step_expected_ns: step_ns,
            step_start_ns: step.step_start_ns,
            task_expected_end_ns: end_ns,
            phase_start_ns: step.phase_start_ns,
            error_ppm: 150_000,
        };
        let step_started = |task, ago| SlotState {
            step_start_ns: BASE - ago,
            step_size: 1,
            ..decode(task, 10, 100)
        };
        let on_time = step_started(20, 10_000_000);
        w.publish_with_prediction(0, &on_time, &predicted(&on_time, 30_000_000, BASE + 3 * S))
            .unwrap();
        let late = step_started(21, 2 * S);
        w.publish_with_prediction(1, &late, &predicted(&late, 30_000_000, BASE + 3 * S))
            .unwrap();
        let stale = step_started(22, S);
        let old = Prediction {
            step_start_ns: BASE - 3 * S,
            phase_start_ns: 1,
            ..predicted(&stale, 30_000_000, BASE + 3 * S)
        };
        w.publish_with_prediction(2, &stale, &old).unwrap();
    })
}

/// The valid segments every other seed derives from, written by the writer itself.
struct Bases {
    idle1: Vec<u8>,
    mixed: Vec<u8>,
    many: Vec<u8>,
    closed: Vec<u8>,
    torn: Vec<u8>,
    stalled: Vec<u8>,
    layers: Vec<u8>,
    predictions: Vec<u8>,
    rpc: Vec<u8>,
}

impl Bases {
    /// Writes each segment in `scratch` (removed afterwards) and keeps its bytes.
    fn write(scratch: &Path) -> Self {
        let bases = Self {
            idle1: segment(scratch, 1, End::Open, |_| {}),
            mixed: mixed4(scratch),
            many: many24(scratch),
            closed: closed2(scratch),
            torn: torn3(scratch),
            stalled: stalled2(scratch),
            layers: layers3(scratch),
            predictions: predictions3(scratch),
            rpc: rpc_split(scratch),
        };
        let _ = fs::remove_dir_all(scratch);
        bases
    }
}

/// The valid segments as they are, and the v1.3 one's hostile regions.
fn valid_seeds(seeds: &mut Seeds, b: &Bases) {
    seeds.add("valid-1slot-idle", plain(), b.idle1.clone());
    seeds.add("valid-4slots-mixed", plain(), b.mixed.clone());
    seeds.add("valid-24slots", plain(), b.many.clone());
    seeds.add("valid-2slots-closed", plain(), b.closed.clone());
    seeds.add("valid-3slots-dead-torn", plain(), b.torn.clone());
    seeds.add("valid-2slots-dead-stalled", plain(), b.stalled.clone());
    add_hostile_regions(seeds, &b.rpc);
}

/// The probe's classification at other instants and thresholds, and the hydra-probe CLI's
/// rendering of every command.
fn probe_seeds(seeds: &mut Seeds, b: &Bases) {
    for now in 1..8u8 {
        seeds.add(
            format!("mixed-now{now}"),
            cli(CliCmd::None, false, now),
            b.mixed.clone(),
        );
    }
    for t in 1..4u8 {
        let ctl = control(Action::None, 0, 3, false, CliCmd::None, false, t, true);
        seeds.add(format!("mixed-thresholds{t}"), ctl, b.mixed.clone());
    }
    let single = control(Action::None, 0, 0, true, CliCmd::None, false, 0, false);
    seeds.add("torn-single-attempt", single, b.torn.clone());
    let clis = [
        ("list", CliCmd::List),
        ("show", CliCmd::Show),
        ("show-slot", CliCmd::ShowSlot),
        ("check", CliCmd::Check),
        ("meta0", CliCmd::Meta0),
        ("meta3", CliCmd::Meta3),
        ("check-one", CliCmd::CheckOne),
    ];
    for (name, cmd) in clis {
        for json in [false, true] {
            let j = if json { "-json" } else { "" };
            seeds.add(format!("cli-{name}{j}"), cli(cmd, json, 0), b.mixed.clone());
        }
    }
    seeds.add("cli-show-torn", cli(CliCmd::Show, false, 0), b.torn.clone());
    let check_json = cli(CliCmd::Check, true, 0);
    seeds.add("cli-check-closed-json", check_json, b.closed.clone());
}

/// The file changes after the reader mapped it.
fn after_open_seeds(seeds: &mut Seeds, mixed: &[u8]) {
    for p in [0u8, 3, 4, 6, 10, 31] {
        let ctl = after_open(Action::Truncate, p, CliCmd::None);
        seeds.add(format!("after-open-truncate-p{p}"), ctl, mixed.to_vec());
    }
    for p in [0u8, 3, 9] {
        let ctl = after_open(Action::Extend, p, CliCmd::None);
        seeds.add(format!("after-open-extend-p{p}"), ctl, mixed.to_vec());
    }
    let ctl = after_open(Action::TruncateRestore, 3, CliCmd::None);
    seeds.add("after-open-truncate-restore", ctl, mixed.to_vec());
    for p in 0..4u8 {
        let ctl = after_open(Action::HostileRewrite, p, CliCmd::Show);
        seeds.add(
            format!("after-open-hostile-rewrite-p{p}"),
            ctl,
            mixed.to_vec(),
        );
    }
    let last = [
        ("zero", Action::Zero, CliCmd::None),
        ("unlink", Action::Unlink, CliCmd::List),
        ("replace", Action::Replace, CliCmd::Show),
    ];
    for (name, action, cmd) in last {
        let ctl = after_open(action, 0, cmd);
        seeds.add(format!("after-open-{name}"), ctl, mixed.to_vec());
    }
}

/// Corrupted headers: each a list of words patched into the four-slot segment.
const CORRUPT: &[(&str, &[(usize, u64)])] = &[
    (
        "bad-magic",
        &[(h::MAGIC_OFFSET, u64::from_ne_bytes(*b"HYDRPROH"))],
    ),
    (
        "byte-order-swapped",
        &[(h::BYTE_ORDER_OFFSET, h::BYTE_ORDER_MARK_SWAPPED)],
    ),
    ("byte-order-bad", &[(h::BYTE_ORDER_OFFSET, 0)]),
    ("major-2", &[(h::VERSION_MAJOR_OFFSET, 2)]),
    ("major-0", &[(h::VERSION_MAJOR_OFFSET, 0)]),
    ("minor-max", &[(h::VERSION_MINOR_OFFSET, u64::MAX)]),
    ("state-init", &[(h::STATE_OFFSET, 1)]),
    ("state-zero", &[(h::STATE_OFFSET, 0)]),
    ("state-unknown", &[(h::STATE_OFFSET, 99)]),
    ("total-len-lie", &[(h::TOTAL_LEN_OFFSET, 4096)]),
    ("header-len-short", &[(h::HEADER_LEN_OFFSET, 1016)]),
    ("header-len-unaligned", &[(h::HEADER_LEN_OFFSET, 1028)]),
    ("header-len-past-end", &[(h::HEADER_LEN_OFFSET, 1 << 40)]),
    ("stride-short", &[(h::SLOT_STRIDE_OFFSET, 128)]),
    ("stride-unaligned", &[(h::SLOT_STRIDE_OFFSET, 320)]),
    ("stride-zero", &[(h::SLOT_STRIDE_OFFSET, 0)]),
    ("offset-inside-header", &[(h::SLOT_OFFSET_OFFSET, 896)]),
    ("offset-unaligned", &[(h::SLOT_OFFSET_OFFSET, 1032)]),
    ("count-zero", &[(h::SLOT_COUNT_OFFSET, 0)]),
    ("count-4097", &[(h::SLOT_COUNT_OFFSET, 4097)]),
    ("count-5-past-end", &[(h::SLOT_COUNT_OFFSET, 5)]),
    (
        "table-overflow-u64",
        &[
            (h::SLOT_COUNT_OFFSET, 4096),
            (h::SLOT_STRIDE_OFFSET, 1 << 62),
        ],
    ),
    ("table-offset-huge", &[(h::SLOT_OFFSET_OFFSET, !127u64)]),
    // Valid: fewer slots than the file has room for (TOTAL_LEN still equals the size).
    ("count-3-of-4", &[(h::SLOT_COUNT_OFFSET, 3)]),
    // Valid: the slot table starts later, leaving a gap after the header.
    (
        "offset-gap",
        &[(h::SLOT_OFFSET_OFFSET, 1152), (h::SLOT_COUNT_OFFSET, 3)],
    ),
];

/// Truncated files and corrupted headers.
fn damaged_seeds(seeds: &mut Seeds, mixed: &[u8]) {
    for len in [
        0usize, 1, 7, 8, 15, 16, 23, 24, 1016, 1023, 1024, 1025, 2047,
    ] {
        seeds.add(format!("truncated-{len}"), plain(), mixed[..len].to_vec());
    }
    for (name, words) in CORRUPT {
        seeds.add(format!("corrupt-{name}"), plain(), patched(mixed, words));
    }
}

/// Unusual but valid content: a newer minor's wider geometry, strings without a NUL,
/// every word at its extreme, and values that contradict each other.
fn unusual_seeds(seeds: &mut Seeds, mixed: &[u8]) {
    seeds.add("newer-minor-wide", plain(), widen(mixed, 1152, 1152, 384));
    let header_only = widen(mixed, 1040, 1152, 256);
    seeds.add("newer-minor-header-only", plain(), header_only);
    let mut strings = mixed.to_vec();
    strings[h::STRINGS_OFFSET..h::HEADER_LEN].fill(0xFF); // no NUL, invalid UTF-8
    seeds.add("strings-unterminated-invalid-utf8", plain(), strings);
    let mut extreme = mixed.to_vec();
    for i in 0..4 {
        let base = h::HEADER_LEN + i * sl::SLOT_LEN;
        for off in (sl::TASK_ID_OFFSET..sl::SUBSTEP_END).step_by(8) {
            put(&mut extreme, base + off, u64::MAX - i as u64);
        }
        put(&mut extreme, base + sl::SEQ_OFFSET, u64::MAX - 1);
        put(&mut extreme, base + sl::PENDING_OFFSET, u64::MAX);
    }
    for off in (h::HEARTBEAT_NS_OFFSET..h::WORDS_END).step_by(8) {
        put(&mut extreme, off, u64::MAX);
    }
    seeds.add("extreme-values", plain(), extreme.clone());
    let show_json = control(Action::None, 0, 5, false, CliCmd::Show, true, 3, false);
    seeds.add("extreme-values-cli-show-json", show_json, extreme);
    let s0 = h::HEADER_LEN;
    let inverted = [
        (s0 + sl::WORK_DONE_OFFSET, 500),                    // done > total
        (s0 + sl::LAST_PROGRESS_NS_OFFSET, BASE + 1000 * S), // future
        (s0 + sl::PHASE_OFFSET, 77),                         // unknown phase
        (s0 + sl::WORK_UNIT_OFFSET, 9),                      // unknown unit
    ];
    seeds.add("inverted-values", plain(), patched(mixed, &inverted));
}

/// The offset of the word at `off` in slot `slot` of a segment of the first layout.
fn slot_word(slot: usize, off: usize) -> usize {
    h::HEADER_LEN + slot * sl::SLOT_LEN + off
}

/// Layer positions (format v1.1): as written, read by the CLI, as from a v1.0 writer (the
/// substep words are not read), and hostile: done past total, totals of 0 and u64::MAX, a
/// stamp in the future.
fn layer_seeds(seeds: &mut Seeds, layers: &[u8]) {
    seeds.add("valid-3slots-layers", plain(), layers.to_vec());
    let check_json = cli(CliCmd::Check, true, 3);
    seeds.add("layers-cli-check-json", check_json, layers.to_vec());
    let v1_0 = patched(layers, &[(h::VERSION_MINOR_OFFSET, 0)]);
    seeds.add("layers-as-v1_0", plain(), v1_0);
    let hostile = [
        (slot_word(0, sl::SUBSTEP_DONE_OFFSET), u64::MAX),
        (slot_word(0, sl::SUBSTEP_NS_OFFSET), u64::MAX),
        (slot_word(1, sl::SUBSTEP_TOTAL_OFFSET), 0),
        (slot_word(2, sl::SUBSTEP_TOTAL_OFFSET), u64::MAX),
        (slot_word(2, sl::SUBSTEP_STEP_OFFSET), BASE - S),
    ];
    seeds.add("layers-hostile", plain(), patched(layers, &hostile));
}

/// Predictions (format v1.2): as written, read by the CLI, as from a v1.1 writer (the
/// prediction words are not read: the rate), and hostile.
fn prediction_seeds(seeds: &mut Seeds, predictions: &[u8]) {
    seeds.add("valid-3slots-predictions", plain(), predictions.to_vec());
    let check_json = cli(CliCmd::Check, true, 3);
    seeds.add(
        "predictions-cli-check-json",
        check_json,
        predictions.to_vec(),
    );
    let v1_1 = patched(predictions, &[(h::VERSION_MINOR_OFFSET, 1)]);
    seeds.add("predictions-as-v1_1", plain(), v1_1);
    let hostile = [
        (slot_word(0, sl::STEP_EXPECTED_NS_OFFSET), u64::MAX),
        (slot_word(0, sl::TASK_EXPECTED_END_NS_OFFSET), u64::MAX),
        (slot_word(0, sl::EXPECTED_ERROR_PPM_OFFSET), u64::MAX),
        (slot_word(1, sl::STEP_EXPECTED_NS_OFFSET), 1),
        (slot_word(1, sl::TASK_EXPECTED_END_NS_OFFSET), 1),
        (slot_word(2, sl::EXPECTED_STEP_OFFSET), BASE - S),
    ];
    seeds.add(
        "predictions-hostile",
        plain(),
        patched(predictions, &hostile),
    );
}

/// Removes every file of `out` but the `repro-*` ones, then writes each seed there.
fn write_seeds(out: &Path, seeds: &Seeds) {
    fs::create_dir_all(out).expect("create the seed directory");
    for entry in fs::read_dir(out).unwrap() {
        let entry = entry.unwrap();
        if !entry.file_name().to_string_lossy().starts_with("repro-") {
            fs::remove_file(entry.path()).unwrap();
        }
    }
    let mut total = 0;
    for (name, ctl, file) in &seeds.0 {
        let mut bytes = ctl.to_vec();
        bytes.extend_from_slice(file);
        total += bytes.len();
        fs::write(out.join(name), &bytes).unwrap();
    }
    println!(
        "wrote {} seeds ({} bytes) to {}",
        seeds.0.len(),
        total,
        out.display()
    );
}

fn main() {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/segment_open"));
    let scratch = std::env::temp_dir().join(format!("hydra-fuzz-seeds-{}", std::process::id()));
    let b = Bases::write(&scratch);
    let mut seeds = Seeds::default();
    valid_seeds(&mut seeds, &b);
    probe_seeds(&mut seeds, &b);
    after_open_seeds(&mut seeds, &b.mixed);
    damaged_seeds(&mut seeds, &b.mixed);
    unusual_seeds(&mut seeds, &b.mixed);
    layer_seeds(&mut seeds, &b.layers);
    prediction_seeds(&mut seeds, &b.predictions);
    write_seeds(&out, &seeds);
}
