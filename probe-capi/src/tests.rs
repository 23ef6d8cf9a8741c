//! The C ABI called from Rust: argument checks, buffers, a real segment.

use super::*;
use hydra_layout::{Phase, SegmentConfig, SegmentWriter, SlotState, WorkUnit};
use std::ffi::{CStr, CString};
use std::ptr;

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: `buf` is writable for its length; `needed` may be NULL.
    let rc = unsafe { hydra_probe_last_error(buf.as_mut_ptr(), buf.len(), ptr::null_mut()) };
    assert_eq!(rc, HYDRA_PROBE_OK);
    // SAFETY: copy_out always NUL-terminates within the buffer.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn writer(dir: &std::path::Path) -> SegmentWriter {
    writer_with(dir, "e1", 2, Default::default())
}

/// The writer of engine `id` in `dir`, with `slot_count` slots and `description`.
fn writer_with(
    dir: &std::path::Path,
    id: &str,
    slot_count: usize,
    description: hydra_layout::EngineDescription,
) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count,
        description,
    })
    .unwrap()
}

/// Task 3 decoding, 10 of 40 tokens in 2 s, the last one 1 s before `now`.
fn decoding(now: u64) -> SlotState {
    SlotState {
        task_id: 3,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: 10,
        work_total: 40,
        phase_start_ns: now - 2_000_000_000,
        last_progress_ns: now - 1_000_000_000,
        ..Default::default()
    }
}

#[test]
fn null_pointers_are_errors() {
    let dir = c"";
    let mut h: *mut HydraProbe = ptr::null_mut();
    let mut n = 0usize;
    // SAFETY: every non-NULL pointer passed is valid; NULLs are what is tested.
    unsafe {
        assert_eq!(
            hydra_probe_open(ptr::null(), c"e".as_ptr(), &mut h),
            HYDRA_PROBE_E_NULL
        );
        assert!(last_error().contains("`dir`"), "{}", last_error());
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), ptr::null(), &mut h),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e".as_ptr(), ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(hydra_probe_close(ptr::null_mut()), HYDRA_PROBE_E_NULL);
        assert_eq!(
            hydra_probe_slot_count(ptr::null(), ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_read_slot(ptr::null(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_meta_json(ptr::null(), 0, ptr::null_mut(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 1, &mut n),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_thresholds_default(ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_set_thresholds(ptr::null_mut(), ptr::null()),
            HYDRA_PROBE_E_NULL
        );
    }
    // SAFETY: the name is a static C string.
    let name = unsafe { CStr::from_ptr(hydra_probe_error_name(HYDRA_PROBE_E_NULL)) };
    assert_eq!(name.to_str().unwrap(), "HYDRA_PROBE_E_NULL");
}

/// The meta JSON of slot 1 of the open probe `h`: a buffer too small is left empty and
/// told the size needed; one of that size gets the decoding slot's JSON.
fn meta_json_sizes_its_buffer(h: *mut HydraProbe) {
    // SAFETY: `h` is open; every buffer passed is writable for the length given.
    unsafe {
        let mut need = 0usize;
        let mut small = [0 as c_char; 8];
        assert_eq!(
            hydra_probe_meta_json(h, 1, small.as_mut_ptr(), small.len(), &mut need),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(small[0], 0);
        assert!(need > 100);
        let mut big = vec![0 as c_char; need + 1024];
        assert_eq!(
            hydra_probe_meta_json(h, 1, big.as_mut_ptr(), big.len(), &mut need),
            HYDRA_PROBE_OK
        );
        let json: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(big.as_ptr()).to_str().unwrap()).unwrap();
        assert_eq!(json["operation"], "decode");
        assert_eq!(json["classification"], "progressing");
    }
}

/// The default thresholds, a NaN refused, and tighter ones that make slot 1 of the open
/// probe `h` stalled.
fn thresholds_apply(h: *mut HydraProbe) {
    let mut t = std::mem::MaybeUninit::<HydraProbeThresholds>::uninit();
    let mut slot = std::mem::MaybeUninit::<HydraProbeSlot>::uninit();
    // SAFETY: `h` is open; `t` and `slot` are writable for one value each, read only
    // after a call filled them.
    unsafe {
        assert_eq!(
            hydra_probe_thresholds_default(t.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        let mut t = t.assume_init();
        assert_eq!(
            (t.stall_floor_s, t.stall_factor, t.budget_s),
            (30.0, 10.0, -1.0)
        );
        t.stall_factor = f64::NAN;
        assert_eq!(
            hydra_probe_set_thresholds(h, &t),
            HYDRA_PROBE_E_INVALID_ARGUMENT
        );
        t.stall_factor = 10.0;
        t.stall_floor_s = 0.5;
        assert_eq!(hydra_probe_set_thresholds(h, &t), HYDRA_PROBE_OK);
        assert_eq!(
            hydra_probe_read_slot(h, 1, slot.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        assert_eq!(
            slot.assume_init().slot_class,
            HYDRA_PROBE_SLOT_CLASS_STALLED
        );
    }
}

/// The last error, after a slot out of range on the open probe `h`, truncated to a small
/// buffer (NUL-terminated, the size needed told).
fn last_error_truncates(h: *mut HydraProbe) {
    let mut slot = std::mem::MaybeUninit::<HydraProbeSlot>::uninit();
    let mut need = 0usize;
    // SAFETY: `h` is open; every buffer passed is writable for the length given.
    unsafe {
        assert_eq!(
            hydra_probe_read_slot(h, 9, slot.as_mut_ptr()),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        let mut tiny = [0 as c_char; 5];
        assert_eq!(
            hydra_probe_last_error(tiny.as_mut_ptr(), tiny.len(), &mut need),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(CStr::from_ptr(tiny.as_ptr()).to_str().unwrap(), "slot");
        assert!(need > 5);
    }
}

#[test]
fn reads_a_segment_and_sizes_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = writer(tmp.path());
    w.publish(1, &decoding(clock::monotonic_ns())).unwrap();
    let dir = CString::new(tmp.path().to_str().unwrap()).unwrap();
    let mut ids = [HydraProbeEngineId { id: [0; 64] }; 1];
    let (mut n, mut h, mut count) = (0usize, ptr::null_mut(), 0u32);
    let mut slot = std::mem::MaybeUninit::<HydraProbeSlot>::uninit();
    // SAFETY: every pointer passed is valid for what the call writes.
    unsafe {
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 0, &mut n),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(n, 1);
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ids.as_mut_ptr(), 1, &mut n),
            HYDRA_PROBE_OK
        );
        assert_eq!(CStr::from_ptr(ids[0].id.as_ptr()).to_str().unwrap(), "e1");
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"nope".as_ptr(), &mut h),
            HYDRA_PROBE_E_NOT_FOUND
        );
        assert!(h.is_null());
        assert!(last_error().contains("found: e1"), "{}", last_error());
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e1".as_ptr(), &mut h),
            HYDRA_PROBE_OK
        );
        assert_eq!(last_error(), "");
        assert_eq!(hydra_probe_slot_count(h, &mut count), HYDRA_PROBE_OK);
        assert_eq!(count, 2);
        assert_eq!(
            hydra_probe_read_slot(h, 2, slot.as_mut_ptr()),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_probe_read_slot(h, 1, slot.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        let s = slot.assume_init();
        assert_eq!(
            (s.slot, s.task_id, s.phase),
            (1, 3, HYDRA_PROBE_PHASE_DECODE)
        );
        assert_eq!(s.slot_class, HYDRA_PROBE_SLOT_CLASS_PROGRESSING);
        assert_eq!(s.engine_health, HYDRA_PROBE_ENGINE_HEALTH_LIVE);
        assert_eq!((s.progress, s.rate_per_s, s.eta_s), (0.25, 10.0, 3.0));
        assert_eq!(s.step_age_ns, -1);

        meta_json_sizes_its_buffer(h);
        thresholds_apply(h);
        last_error_truncates(h);
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}

/// How readers name device `id` of an engine without a device table.
fn device_name(id: u64) -> String {
    format!("device #{id}")
}

/// A layer field of the meta from the numbers: absent when the writer publishes no layer
/// positions, null outside a step.
fn layer_field(l: &HydraProbeLayer, value: u64) -> Option<Option<u64>> {
    (l.published == 1).then_some((l.in_step == 1).then_some(value))
}

/// `hydra_probe_value_name(kind, raw)` as an owned string.
fn value_name(kind: u32, raw: u64) -> String {
    // SAFETY: a known kind gives a static NUL-terminated string.
    unsafe { CStr::from_ptr(hydra_probe_value_name(kind, raw)) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// The value `hydra_probe_value_name(kind, raw)` names, as the meta's enum.
fn named<T: serde::de::DeserializeOwned>(kind: u32, raw: u64) -> T {
    serde_json::from_value(value_name(kind, raw).into()).unwrap()
}

/// A handle's string, checked NUL-terminated.
fn owned_text(s: &HydraProbeStr) -> String {
    // SAFETY: the handle owns `len` bytes at `ptr` (and is open).
    let b = unsafe { std::slice::from_raw_parts(s.ptr.cast::<u8>(), s.len + 1) };
    assert_eq!(b[s.len], 0, "NUL-terminated");
    String::from_utf8(b[..s.len].to_vec()).unwrap()
}

/// The meta JSON's peer fields from the numbers: absent when the engine does not watch
/// its peers, null without an unread peer.
type PeerFields = (
    Option<Option<String>>,
    Option<Option<u64>>,
    Option<Option<u64>>,
);
fn peer_fields(p: &HydraProbePeer) -> PeerFields {
    let ms = |ns: i64| u64::try_from(ns).ok().map(|ns| ns / 1_000_000);
    if p.published != 1 {
        return (None, None, None);
    }
    let name = (p.unread == 1).then(|| device_name(p.device));
    (Some(name), Some(ms(p.unread_ns)), Some(ms(p.threshold_ns)))
}

/// Checks that the meta numbers `n` with description `d` give meta `m`, field for field
/// and as JSON (for an engine without a device table: tests/devices.rs has the others).
fn assert_same_meta(n: &HydraProbeMeta, d: &HydraProbeDescription, m: &HydraMeta) {
    let (name, text) = (value_name, owned_text);
    let opt = |v: i64| u64::try_from(v).ok();
    let fig = |v: f64| (v >= 0.0).then_some(v);
    let s = &n.slot;
    assert_eq!(n.size as usize, std::mem::size_of::<HydraProbeMeta>());
    let (unread_peer, unread_peer_ms, unread_peer_threshold_ms) = peer_fields(&n.peer);
    let got = HydraMeta {
        slot_id: s.slot.into(),
        n_past: s.n_past,
        state_size: s.state_size,
        is_processing: n.is_processing == 1,
        model_alias: text(&d.model_alias),
        tokenizer: text(&d.tokenizer),
        model_name: text(&d.model_name),
        model_quant: text(&d.model_quant),
        model_capabilities: d.capabilities,
        model_path: text(&d.model_path),
        operation: name(HYDRA_PROBE_VALUE_PHASE, n.operation),
        progress: n.progress,
        tokens_processed: n.tokens_processed,
        tokens_total: n.tokens_total,
        elapsed_ms: n.elapsed_ms,
        engine_id: text(&d.engine_id),
        engine_liveness: named(HYDRA_PROBE_VALUE_ENGINE_HEALTH, s.engine_health as u64),
        classification: named(HYDRA_PROBE_VALUE_SLOT_CLASS, s.slot_class as u64),
        queued: n.queued == 1,
        pending: s.pending,
        phase: name(HYDRA_PROBE_VALUE_PHASE, s.phase),
        task_id: s.task_id,
        work_unit: name(HYDRA_PROBE_VALUE_WORK_UNIT, s.work_unit),
        work_done: s.work_done,
        work_total: s.work_total,
        last_progress_age_ms: opt(n.last_progress_age_ms),
        rate_per_s: fig(n.rate_per_s),
        eta_s: fig(n.eta_s),
        eta_source: match n.prediction.eta_source {
            HYDRA_PROBE_ETA_MODEL => Some(hydra_probe::EtaSource::Model),
            HYDRA_PROBE_ETA_RATE => Some(hydra_probe::EtaSource::Rate),
            _ => None,
        },
        step_expected_ms: (n.prediction.published == 1)
            .then(|| opt(n.prediction.step_expected_ns).map(|ns| ns / 1_000_000)),
        prediction_error: (n.prediction.published == 1).then(|| fig(n.prediction.prediction_error)),
        phase_start_ns: s.phase_start_ns,
        phase_start_unix_ms: opt(n.phase_start_unix_ms),
        step_age_ms: opt(n.step_age_ms),
        step_size: n.step_size,
        stall_threshold_ms: n.stall_threshold_ms,
        finish_reason: name(HYDRA_PROBE_VALUE_FINISH_REASON, s.finish_reason),
        error_code: name(HYDRA_PROBE_VALUE_ERROR_CODE, s.error_code),
        n_ctx: s.n_ctx,
        tokens_cached: s.tokens_cached,
        device: text(&d.device),
        heartbeat_age_ms: n.heartbeat_age_ms,
        read_error: m.read_error.clone(),
        substep_done: layer_field(&n.layer, n.layer.layers_done),
        substep_total: layer_field(&n.layer, n.layer.n_layers),
        substep_age_ms: (n.layer.published == 1)
            .then(|| opt(n.layer.layer_age_ns).map(|ns| ns / 1_000_000)),
        stalled_at_layer: opt(n.layer.stalled_at_layer),
        wait_device: (n.wait.published == 1)
            .then(|| (n.wait.waiting == 1).then(|| device_name(n.wait.device))),
        wait_ms: (n.wait.published == 1).then(|| opt(n.wait.wait_age_ns).map(|ns| ns / 1_000_000)),
        layer_device: (n.wait.layer_device != 0).then(|| device_name(n.wait.layer_device)),
        wait_learnt_max_ms: (n.wait.published == 1)
            .then(|| opt(n.wait_learnt_max_ns).map(|ns| ns / 1_000_000)),
        wait_threshold_ms: (n.wait.published == 1)
            .then(|| opt(n.wait_threshold_ns).map(|ns| ns / 1_000_000)),
        unread_peer,
        unread_peer_ms,
        unread_peer_threshold_ms,
    };
    assert_eq!(&got, m);
    assert_eq!(got.to_json(), m.to_json());
}

/// Engine `e2` in `dir`: four slots, each of another operation and phase kind (decode,
/// queued, restore, and unknown enum words), with a step in flight and a running task's
/// cache; a description with every string set.
fn four_kinds_of_slot(dir: &std::path::Path) -> hydra_layout::SegmentWriter {
    let description = hydra_layout::EngineDescription {
        model_name: "tiny \u{e9}".into(),
        model_quant: "q8_0".into(),
        model_path: "/m/tiny.gguf".into(),
        tokenizer: "gpt2".into(),
        model_alias: "t".into(),
        device: "cpu".into(),
        capabilities: 5,
    };
    let mut w = writer_with(dir, "e2", 4, description);
    // A step in flight, and the cache of a running task.
    let now = clock::monotonic_ns();
    let base = SlotState {
        n_past: 50,
        step_start_ns: now - 500_000_000,
        step_size: 1,
        ..decoding(now)
    };
    // Every operation and phase kind, known and unknown enum words.
    let kinds = [
        (Phase::Decode, WorkUnit::Tokens),
        (Phase::Queued, WorkUnit::None),
        (Phase::Restore, WorkUnit::Bytes),
        (Phase::from_raw(42), WorkUnit::from_raw(9)),
    ];
    for (i, (phase, work_unit)) in kinds.into_iter().enumerate() {
        let state = SlotState {
            phase,
            work_unit,
            finish_reason: hydra_layout::FinishReason::from_raw(i as u64),
            error_code: hydra_layout::ErrorCode::from_raw(i as u64 * 40),
            ..base
        };
        w.publish(i, &state).unwrap();
    }
    w
}

/// The meta as numbers, checked against the meta JSON's value taken from the same view:
/// every field of `HydraMeta` is in `HydraProbeMeta`, the description or a value name.
#[test]
fn meta_numbers_and_description_give_the_meta_json() {
    let tmp = tempfile::tempdir().unwrap();
    let _w = four_kinds_of_slot(tmp.path());
    let dir = CString::new(tmp.path().to_str().unwrap()).unwrap();
    let mut h = ptr::null_mut();
    // SAFETY: every pointer passed is valid for what the call reads and writes.
    unsafe {
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e2".as_ptr(), &mut h),
            HYDRA_PROBE_OK
        );
        let mut d: HydraProbeDescription = std::mem::zeroed();
        assert_eq!(
            hydra_probe_describe(h, &mut d),
            HYDRA_PROBE_E_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("sizeof(HydraProbeDescription)"),
            "{}",
            last_error()
        );
        d.size = std::mem::size_of::<HydraProbeDescription>() as u32;
        assert_eq!(hydra_probe_describe(h, &mut d), HYDRA_PROBE_OK);
        let mut n: HydraProbeMeta = std::mem::zeroed();
        assert_eq!(
            hydra_probe_read_meta(h, 0, &mut n),
            HYDRA_PROBE_E_INVALID_ARGUMENT
        );
        n.size = std::mem::size_of::<HydraProbeMeta>() as u32;
        assert_eq!(
            hydra_probe_read_meta(h, 4, &mut n),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(hydra_probe_read_meta(h, 0, &mut n), HYDRA_PROBE_OK);
        assert_eq!((n.slot.task_id, n.operation), (3, HYDRA_PROBE_PHASE_DECODE));
        // A caller built against version 1 (368 bytes) gets those and nothing more.
        let mut v1: HydraProbeMeta = std::mem::zeroed();
        v1.size = 368;
        v1.layer.published = 7;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut v1), HYDRA_PROBE_OK);
        assert_eq!((v1.size, v1.slot.task_id, v1.layer.published), (368, 3, 7));
        v1.size = 367;
        assert_eq!(
            hydra_probe_read_meta(h, 0, &mut v1),
            HYDRA_PROBE_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_probe_describe(ptr::null(), &mut d),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_read_meta(h, 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );

        // Field by field against the meta JSON's value, from one view of every slot.
        let probe = &*h;
        let view = probe.capture().unwrap();
        for (i, v) in view.slots.iter().enumerate() {
            let n = HydraProbeMeta::from_view(&view, v);
            let m = HydraMeta::from_view(&view, i).unwrap();
            assert_same_meta(&n, &d, &m);
        }
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}

#[test]
fn value_names_are_the_json_words() {
    let name = |kind: u32, raw: u64| {
        let p = hydra_probe_value_name(kind, raw);
        // SAFETY: non-NULL names are static NUL-terminated strings.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_str().unwrap())
    };
    assert_eq!(
        name(HYDRA_PROBE_VALUE_PHASE, HYDRA_PROBE_PHASE_PREFILL),
        Some("prefill")
    );
    assert_eq!(name(HYDRA_PROBE_VALUE_PHASE, 99), Some("unknown"));
    assert_eq!(name(HYDRA_PROBE_VALUE_WORK_UNIT, 2), Some("bytes"));
    assert_eq!(name(HYDRA_PROBE_VALUE_FINISH_REASON, 2), Some("cancelled"));
    assert_eq!(
        name(HYDRA_PROBE_VALUE_ERROR_CODE, u64::MAX),
        Some("unknown")
    );
    assert_eq!(name(HYDRA_PROBE_VALUE_SLOT_CLASS, 4), Some("stalled"));
    assert_eq!(name(HYDRA_PROBE_VALUE_SLOT_CLASS, 7), Some("unknown"));
    assert_eq!(name(HYDRA_PROBE_VALUE_ENGINE_HEALTH, 3), Some("dead"));
    assert_eq!(name(HYDRA_PROBE_VALUE_DEVICE_KIND, 3), Some("rpc"));
    assert_eq!(name(HYDRA_PROBE_VALUE_FINISH_CAUSE, 1), Some("eos"));
    assert_eq!(name(HYDRA_PROBE_VALUE_STEP_RESULT, 1), Some("advanced"));
    assert_eq!(name(HYDRA_PROBE_VALUE_HISTOGRAM, 5), Some("e2e_latency"));
    assert_eq!(name(HYDRA_PROBE_VALUE_HISTOGRAM, 12), Some("unknown"));
    // The first kind no minor defines (minor 6 defines 0-9).
    assert_eq!(name(10, 0), None);
    // The same name twice is the same static string.
    assert_eq!(
        hydra_probe_value_name(HYDRA_PROBE_VALUE_PHASE, 3),
        hydra_probe_value_name(HYDRA_PROBE_VALUE_PHASE, 3)
    );
    assert_eq!(hydra_probe_abi_minor(), HYDRA_PROBE_ABI_MINOR);
}

#[test]
fn list_fails_on_a_missing_directory_and_counts_an_empty_one() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("gone");
    let c = |p: &std::path::Path| CString::new(p.to_str().unwrap()).unwrap();
    let mut n = 7usize;
    // SAFETY: the strings are NUL-terminated and `n` is writable.
    unsafe {
        assert_eq!(
            hydra_probe_list(c(tmp.path()).as_ptr(), ptr::null_mut(), 0, &mut n),
            HYDRA_PROBE_OK
        );
        assert_eq!(n, 0);
        assert_eq!(
            hydra_probe_list(c(&missing).as_ptr(), ptr::null_mut(), 0, &mut n),
            HYDRA_PROBE_E_NOT_FOUND
        );
    }
    assert!(
        last_error().contains(missing.to_str().unwrap()),
        "{}",
        last_error()
    );
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    // SAFETY: as above.
    let rc = unsafe { hydra_probe_list(c(&file).as_ptr(), ptr::null_mut(), 0, &mut n) };
    assert_eq!(rc, HYDRA_PROBE_E_IO);
    assert!(
        last_error().contains(file.to_str().unwrap()),
        "{}",
        last_error()
    );
}

#[test]
fn read_layer_gives_the_position_inside_the_step_and_the_stalled_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let description = hydra_layout::EngineDescription {
        capabilities: hydra_layout::header::capabilities::LAYER_PROGRESS,
        ..Default::default()
    };
    let mut w = writer_with(tmp.path(), "e1", 2, description);
    let now = hydra_layout::clock::monotonic_ns();
    let mut s = decoding(now);
    // 10 tokens in 100 s (a 100 s stall threshold: 10 x 10 s per token), the last 300 s
    // ago, and the step after it in flight since.
    s.phase_start_ns = now - 400_000_000_000;
    s.last_progress_ns = now - 300_000_000_000;
    s.start_step(1, now - 300_000_000_000);
    w.publish(0, &s).unwrap();
    let dir = CString::new(tmp.path().to_str().unwrap()).unwrap();
    let mut h: *mut HydraProbe = ptr::null_mut();
    let mut layer = HydraProbeLayer {
        published: 9,
        in_step: 9,
        layers_done: 9,
        n_layers: 9,
        layer_age_ns: 9,
        stalled_at_layer: 9,
    };
    // SAFETY: every pointer passed is valid for the call; the handle is closed at the end.
    unsafe {
        assert!(hydra_probe_abi_minor() >= 2);
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e1".as_ptr(), &mut h),
            HYDRA_PROBE_OK
        );
        assert_eq!(hydra_probe_read_layer(h, 0, &mut layer), HYDRA_PROBE_OK);
        assert_eq!(
            (layer.published, layer.in_step, layer.layer_age_ns),
            (1, 0, -1)
        );
        assert_eq!(layer.stalled_at_layer, -1);
        // Layer 7 of 30, finished 150 s ago: the counter is frozen, stalled at layer 7.
        w.publish_substep(
            0,
            &hydra_layout::Substep {
                done: 7,
                total: 30,
                at_ns: now - 150_000_000_000,
                step_start_ns: s.step_start_ns,
            },
        )
        .unwrap();
        assert_eq!(hydra_probe_read_layer(h, 0, &mut layer), HYDRA_PROBE_OK);
        assert_eq!(
            (layer.in_step, layer.layers_done, layer.n_layers),
            (1, 7, 30)
        );
        assert!(layer.layer_age_ns >= 150_000_000_000);
        assert_eq!(layer.stalled_at_layer, 7);
        assert_eq!(
            hydra_probe_read_layer(h, 5, &mut layer),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_probe_read_layer(h, 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}
