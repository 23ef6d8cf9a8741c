//! Checks `include/hydra_progress.h` against the Rust layout, the source of truth.
//!
//! 1. `tests/c/layout_dump.c` prints every struct field's offset and size, every constant
//!    and every enum value of the header; each must equal the Rust constant, and the set of
//!    names printed must be exactly the set this test knows (a field added on one side only
//!    fails here).
//! 2. `tests/c/read_segment.c`, a reader written against the header alone, reads segments
//!    made by [`SegmentWriter`]: published slot values, a torn slot, liveness (live, dead),
//!    and the validation errors of damaged copies, each cross-checked with
//!    [`SegmentReader`].
//!
//! The C compiler is `$CC` (split on whitespace) or `cc`. If none runs, the test FAILS:
//! CI installs one, and a silently skipped header check would let the header rot.

#[path = "../../probe-capi/tests/ffi_support/mod.rs"]
mod ffi_support;

use hydra_layout::header::{self as h, capabilities, Lifecycle};
use hydra_layout::slot::{
    self as s, ErrorCode, FinishReason, Phase, Prediction, Substep, WorkUnit,
};
use hydra_layout::{
    naming, EngineDescription, Error, SegmentConfig, SegmentReader, SegmentWriter, SlotState,
    MAX_SLOTS, SEGMENT_MODE,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory mode `fsutil::open_writer_dir` creates (not exported by the crate).
const DIR_MODE: u64 = 0o750;

/// Compiles `tests/c/<name>.c` against the workspace's `include/` (where every C header of
/// the project lives) into `out_dir` and returns the binary.
fn compile(name: &str, out_dir: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = manifest.join("tests").join("c").join(format!("{name}.c"));
    ffi_support::compile_c(&source, out_dir, &[])
}

/// Runs `binary args...` and parses its `name value` lines.
fn run(binary: &Path, args: &[&Path]) -> BTreeMap<String, String> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} {:?} exited with {}:\n{stdout}{}",
        binary.display(),
        args,
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut map = BTreeMap::new();
    for line in stdout.lines() {
        let (name, value) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("malformed line {line:?} from {}", binary.display()));
        assert!(
            map.insert(name.to_owned(), value.to_owned()).is_none(),
            "{name} printed twice"
        );
    }
    map
}

/// The header's fields as `layout_dump.c` names them: name, offset, size.
const HEADER_FIELDS: &[(&str, usize, usize)] = &[
    ("magic", h::MAGIC_OFFSET, 8),
    ("byte_order", h::BYTE_ORDER_OFFSET, 8),
    ("version_major", h::VERSION_MAJOR_OFFSET, 8),
    ("version_minor", h::VERSION_MINOR_OFFSET, 8),
    ("header_len", h::HEADER_LEN_OFFSET, 8),
    ("slot_offset", h::SLOT_OFFSET_OFFSET, 8),
    ("slot_stride", h::SLOT_STRIDE_OFFSET, 8),
    ("slot_count", h::SLOT_COUNT_OFFSET, 8),
    ("total_len", h::TOTAL_LEN_OFFSET, 8),
    ("state", h::STATE_OFFSET, 8),
    ("pid", h::PID_OFFSET, 8),
    ("process_start_ns", h::PROCESS_START_NS_OFFSET, 8),
    ("instance_id", h::INSTANCE_ID_OFFSET, 8),
    ("created_realtime_ns", h::CREATED_REALTIME_NS_OFFSET, 8),
    ("created_monotonic_ns", h::CREATED_MONOTONIC_NS_OFFSET, 8),
    ("heartbeat_ns", h::HEARTBEAT_NS_OFFSET, 8),
    ("loop_iterations", h::LOOP_ITERATIONS_OFFSET, 8),
    ("prompt_tokens_total", h::PROMPT_TOKENS_TOTAL_OFFSET, 8),
    (
        "generated_tokens_total",
        h::GENERATED_TOKENS_TOTAL_OFFSET,
        8,
    ),
    ("requests_running", h::REQUESTS_RUNNING_OFFSET, 8),
    ("requests_waiting", h::REQUESTS_WAITING_OFFSET, 8),
    ("kv_cells_used", h::KV_CELLS_USED_OFFSET, 8),
    ("kv_cells_total", h::KV_CELLS_TOTAL_OFFSET, 8),
    ("model_capabilities", h::MODEL_CAPABILITIES_OFFSET, 8),
    ("closed_ns", h::CLOSED_NS_OFFSET, 8),
    ("region_dir_offset", h::REGION_DIR_OFFSET, 8),
    ("region_count", h::REGION_COUNT_OFFSET, 8),
    (
        "reserved_words",
        h::WORDS_END,
        h::STRINGS_OFFSET - h::WORDS_END,
    ),
    ("engine_id", h::ENGINE_ID_OFFSET, h::ENGINE_ID_LEN),
    ("boot_id", h::BOOT_ID_OFFSET, h::BOOT_ID_LEN),
    ("model_name", h::MODEL_NAME_OFFSET, h::MODEL_NAME_LEN),
    ("model_quant", h::MODEL_QUANT_OFFSET, h::MODEL_QUANT_LEN),
    ("tokenizer", h::TOKENIZER_OFFSET, h::TOKENIZER_LEN),
    ("device", h::DEVICE_OFFSET, h::DEVICE_LEN),
    ("model_alias", h::MODEL_ALIAS_OFFSET, h::MODEL_ALIAS_LEN),
    ("model_path", h::MODEL_PATH_OFFSET, h::MODEL_PATH_LEN),
    (
        "reserved_strings",
        h::STRINGS_END,
        h::HEADER_LEN - h::STRINGS_END,
    ),
];

/// The slot's fields as `layout_dump.c` names them: name, offset, size.
const SLOT_FIELDS: &[(&str, usize, usize)] = &[
    ("seq", s::SEQ_OFFSET, 8),
    ("task_id", s::TASK_ID_OFFSET, 8),
    ("phase", s::PHASE_OFFSET, 8),
    ("finish_reason", s::FINISH_REASON_OFFSET, 8),
    ("error_code", s::ERROR_CODE_OFFSET, 8),
    ("work_unit", s::WORK_UNIT_OFFSET, 8),
    ("work_done", s::WORK_DONE_OFFSET, 8),
    ("work_total", s::WORK_TOTAL_OFFSET, 8),
    ("tokens_cached", s::TOKENS_CACHED_OFFSET, 8),
    ("n_past", s::N_PAST_OFFSET, 8),
    ("n_ctx", s::N_CTX_OFFSET, 8),
    ("state_size", s::STATE_SIZE_OFFSET, 8),
    ("task_start_ns", s::TASK_START_NS_OFFSET, 8),
    ("phase_start_ns", s::PHASE_START_NS_OFFSET, 8),
    ("last_progress_ns", s::LAST_PROGRESS_NS_OFFSET, 8),
    ("step_start_ns", s::STEP_START_NS_OFFSET, 8),
    ("step_size", s::STEP_SIZE_OFFSET, 8),
    ("last_step_ns", s::LAST_STEP_NS_OFFSET, 8),
    ("steps_done", s::STEPS_DONE_OFFSET, 8),
    ("substep_done", s::SUBSTEP_DONE_OFFSET, 8),
    ("substep_total", s::SUBSTEP_TOTAL_OFFSET, 8),
    ("substep_ns", s::SUBSTEP_NS_OFFSET, 8),
    ("substep_step", s::SUBSTEP_STEP_OFFSET, 8),
    ("step_expected_ns", s::STEP_EXPECTED_NS_OFFSET, 8),
    ("pending", s::PENDING_OFFSET, 8),
    ("expected_step", s::EXPECTED_STEP_OFFSET, 8),
    ("task_expected_end_ns", s::TASK_EXPECTED_END_NS_OFFSET, 8),
    ("expected_phase", s::EXPECTED_PHASE_OFFSET, 8),
    ("expected_error_ppm", s::EXPECTED_ERROR_PPM_OFFSET, 8),
    (
        "reserved_tail",
        s::PREDICTION_END,
        s::SLOT_LEN - s::PREDICTION_END,
    ),
];

/// The header's numeric constants of the format's geometry, naming and modes.
fn geometry_constants() -> Vec<(&'static str, u64)> {
    vec![
        ("HYDRA_MAGIC_LEN", h::MAGIC.len() as u64),
        ("HYDRA_BYTE_ORDER_MARK", h::BYTE_ORDER_MARK),
        ("HYDRA_BYTE_ORDER_MARK_SWAPPED", h::BYTE_ORDER_MARK_SWAPPED),
        ("HYDRA_VERSION_MAJOR", h::VERSION_MAJOR),
        ("HYDRA_VERSION_MINOR", h::VERSION_MINOR),
        ("HYDRA_SUBSTEP_MINOR", s::SUBSTEP_MINOR),
        ("HYDRA_PREDICTION_MINOR", s::PREDICTION_MINOR),
        ("HYDRA_REGIONS_MINOR", h::REGIONS_MINOR),
        ("HYDRA_HEADER_LEN", h::HEADER_LEN as u64),
        ("HYDRA_SLOT_LEN", s::SLOT_LEN as u64),
        ("HYDRA_SLOT_STRIDE", s::SLOT_STRIDE as u64),
        ("HYDRA_SLOT_ALIGN", s::SLOT_ALIGN as u64),
        ("HYDRA_MAX_SLOTS", MAX_SLOTS as u64),
        ("HYDRA_ENGINE_ID_LEN", h::ENGINE_ID_LEN as u64),
        ("HYDRA_BOOT_ID_LEN", h::BOOT_ID_LEN as u64),
        ("HYDRA_MODEL_NAME_LEN", h::MODEL_NAME_LEN as u64),
        ("HYDRA_MODEL_QUANT_LEN", h::MODEL_QUANT_LEN as u64),
        ("HYDRA_TOKENIZER_LEN", h::TOKENIZER_LEN as u64),
        ("HYDRA_DEVICE_LEN", h::DEVICE_LEN as u64),
        ("HYDRA_MODEL_ALIAS_LEN", h::MODEL_ALIAS_LEN as u64),
        ("HYDRA_MODEL_PATH_LEN", h::MODEL_PATH_LEN as u64),
        ("HYDRA_MAX_ENGINE_ID_LEN", naming::MAX_ENGINE_ID_LEN as u64),
        ("HYDRA_DIR_MODE", DIR_MODE),
        ("HYDRA_SEGMENT_MODE", u64::from(SEGMENT_MODE)),
    ]
}

/// The header's numeric constants of the lifecycle, the enums and the capability bits.
fn enum_constants() -> Vec<(&'static str, u64)> {
    vec![
        ("HYDRA_LIFECYCLE_INIT", Lifecycle::Init.to_raw()),
        ("HYDRA_LIFECYCLE_READY", Lifecycle::Ready.to_raw()),
        ("HYDRA_LIFECYCLE_CLOSED", Lifecycle::Closed.to_raw()),
        ("HYDRA_PHASE_IDLE", Phase::Idle.to_raw()),
        ("HYDRA_PHASE_QUEUED", Phase::Queued.to_raw()),
        ("HYDRA_PHASE_PREFILL", Phase::Prefill.to_raw()),
        ("HYDRA_PHASE_DECODE", Phase::Decode.to_raw()),
        ("HYDRA_PHASE_SAVE", Phase::Save.to_raw()),
        ("HYDRA_PHASE_RESTORE", Phase::Restore.to_raw()),
        ("HYDRA_FINISH_NONE", FinishReason::None.to_raw()),
        ("HYDRA_FINISH_COMPLETED", FinishReason::Completed.to_raw()),
        ("HYDRA_FINISH_CANCELLED", FinishReason::Cancelled.to_raw()),
        ("HYDRA_FINISH_ERROR", FinishReason::Error.to_raw()),
        ("HYDRA_WORK_UNIT_NONE", WorkUnit::None.to_raw()),
        ("HYDRA_WORK_UNIT_TOKENS", WorkUnit::Tokens.to_raw()),
        ("HYDRA_WORK_UNIT_BYTES", WorkUnit::Bytes.to_raw()),
        ("HYDRA_ERROR_NONE", ErrorCode::None.to_raw()),
        (
            "HYDRA_ERROR_CONTEXT_OVERFLOW",
            ErrorCode::ContextOverflow.to_raw(),
        ),
        (
            "HYDRA_ERROR_INVALID_INPUT",
            ErrorCode::InvalidInput.to_raw(),
        ),
        (
            "HYDRA_ERROR_STATE_REJECTED",
            ErrorCode::StateRejected.to_raw(),
        ),
        ("HYDRA_ERROR_IO", ErrorCode::Io.to_raw()),
        ("HYDRA_ERROR_COMPUTE", ErrorCode::Compute.to_raw()),
        ("HYDRA_ERROR_INTERNAL", ErrorCode::Internal.to_raw()),
        ("HYDRA_CAP_COMPLETION", capabilities::COMPLETION),
        (
            "HYDRA_CAP_STATE_SAVE_RESTORE",
            capabilities::STATE_SAVE_RESTORE,
        ),
        ("HYDRA_CAP_CHUNKED_PREFILL", capabilities::CHUNKED_PREFILL),
        ("HYDRA_CAP_LAYER_PROGRESS", capabilities::LAYER_PROGRESS),
        ("HYDRA_CAP_STEP_PREDICTION", capabilities::STEP_PREDICTION),
        ("HYDRA_CAP_SLOT_STATS", capabilities::SLOT_STATS),
        ("HYDRA_CAP_ARRIVAL_TIMES", capabilities::ARRIVAL_TIMES),
        ("HYDRA_CAP_FINISH_CAUSES", capabilities::FINISH_CAUSES),
        ("HYDRA_CAP_FLIGHT_RECORDER", capabilities::FLIGHT_RECORDER),
        ("HYDRA_CAP_DEVICES", capabilities::DEVICES),
        ("HYDRA_CAP_DEVICE_WAIT", capabilities::DEVICE_WAIT),
        ("HYDRA_CAP_LAYERS_SENT", capabilities::LAYERS_SENT),
        ("HYDRA_CAP_PROMPT_ARRIVALS", capabilities::PROMPT_ARRIVALS),
        ("HYDRA_CAP_PEER_READS", capabilities::PEER_READS),
    ]
}

/// Everything `layout_dump.c` must print, with the value the Rust crate says it has.
fn expected_layout() -> BTreeMap<String, String> {
    let mut e = BTreeMap::new();
    let mut put = |name: &str, value: String| {
        assert!(
            e.insert(name.to_owned(), value).is_none(),
            "{name} listed twice"
        );
    };

    put("sizeof.hydra_header_v1", h::HEADER_LEN.to_string());
    put("sizeof.hydra_slot_v1", s::SLOT_LEN.to_string());
    put("alignof.hydra_header_v1", "8".into());
    put("alignof.hydra_slot_v1", "8".into());
    for (prefix, fields) in [("header", HEADER_FIELDS), ("slot", SLOT_FIELDS)] {
        for &(name, offset, size) in fields {
            put(&format!("{prefix}.{name}"), offset.to_string());
            put(&format!("{prefix}.{name}.size"), size.to_string());
        }
    }
    for (name, value) in geometry_constants().into_iter().chain(enum_constants()) {
        put(name, value.to_string());
    }
    put(
        "HYDRA_MAGIC",
        String::from_utf8(h::MAGIC.to_vec()).expect("ASCII magic"),
    );
    put("HYDRA_DEFAULT_DIR", naming::DEFAULT_DIR.into());
    put("HYDRA_DIR_ENV", naming::DIR_ENV.into());
    put("HYDRA_FILE_EXTENSION", naming::EXTENSION.into());
    e
}

#[test]
fn c_header_layout_matches_rust_constants() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = compile("layout_dump", tmp.path());
    let got = run(&dump, &[]);
    let expected = expected_layout();

    let mut problems = Vec::new();
    for (name, want) in &expected {
        match got.get(name) {
            Some(value) if value == want => {}
            Some(value) => problems.push(format!("{name}: C says {value}, Rust says {want}")),
            None => problems.push(format!("{name}: not printed by layout_dump.c")),
        }
    }
    for name in got.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!(
            "{name}: printed by layout_dump.c but unknown to this test"
        ));
    }
    assert!(
        problems.is_empty(),
        "hydra_progress.h disagrees with hydra-layout:\n  {}",
        problems.join("\n  ")
    );
}

fn config(dir: &Path, id: &str) -> SegmentConfig {
    SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count: 3,
        description: EngineDescription {
            model_name: "SmolLM2-135M ✓".into(),
            device: "cpu".into(),
            capabilities: capabilities::COMPLETION
                | capabilities::CHUNKED_PREFILL
                | capabilities::LAYER_PROGRESS
                | capabilities::STEP_PREDICTION,
            ..Default::default()
        },
    }
}

fn get<'a>(out: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    out.get(name)
        .unwrap_or_else(|| panic!("{name} missing from the C reader's output: {out:#?}"))
}

#[test]
fn c_reader_reads_a_rust_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let reader = compile("read_segment", tmp.path());
    let dir = tmp.path().join("segs");
    let mut w = SegmentWriter::create(&config(&dir, "c-reader")).unwrap();
    let (published, layer) = publish_for_the_c_reader(&mut w);

    let out = run(&reader, &[w.path()]);
    assert_eq!(get(&out, "validate"), "0", "{out:#?}");
    assert_eq!(get(&out, "engine_id"), "c-reader");
    assert_eq!(get(&out, "model_name"), "SmolLM2-135M ✓");
    assert_eq!(get(&out, "version_minor"), h::VERSION_MINOR.to_string());
    assert_eq!(get(&out, "slot_count"), "3");
    assert_eq!(get(&out, "pid"), std::process::id().to_string());
    // What the host asked for, and the families every writer derives by itself.
    let caps = 29 | capabilities::WRITER_DERIVED;
    assert_eq!(get(&out, "capabilities"), caps.to_string());
    assert_eq!(get(&out, "liveness"), "live");

    // Slot 0: only a substep published (one update), its v1.0 words all zero.
    assert_eq!(get(&out, "slot0.rc"), "0");
    assert_eq!(get(&out, "slot0.seq"), "2");
    assert_eq!(get(&out, "slot0.task_id"), "0");
    assert_eq!(get(&out, "slot0.phase"), Phase::Idle.to_raw().to_string());
    assert_eq!(get(&out, "slot0.layer"), "none");
    assert_eq!(get(&out, "slot0.prediction"), "step 0 end 0 error 0");

    check_published_slot(&out, w.path(), &published, layer);

    // Slot 2: left mid-update, as by a writer killed between its two SEQ stores.
    assert_eq!(
        get(&out, "slot2.rc"),
        "-1",
        "expected HYDRA_READ_TORN: {out:#?}"
    );
    assert_eq!(get(&out, "slot2.seq"), "1");
    assert!(matches!(
        SegmentReader::open(w.path()).unwrap().slot(2),
        Err(Error::Torn { seq: 1, .. })
    ));

    // A writer that dies leaves its lock free and its state READY.
    let path = w.path().to_path_buf();
    w.simulate_crash();
    let out = run(&reader, &[&path]);
    assert_eq!(get(&out, "liveness"), "dead");
    assert_eq!(get(&out, "slot1.work_done"), "12345");
}

/// Publishes slot 1 whole (state, prediction, layer, one task pending), on slot 0 a layer
/// position of a step that is not in flight, and leaves slot 2 mid-update. Returns slot
/// 1's state and layer.
fn publish_for_the_c_reader(w: &mut SegmentWriter) -> (SlotState, Substep) {
    let published = SlotState {
        task_id: 77,
        phase: Phase::Decode,
        finish_reason: FinishReason::None,
        work_unit: WorkUnit::Tokens,
        work_done: 12_345,
        work_total: 20_000,
        n_past: 12_400,
        n_ctx: 32_768,
        last_progress_ns: hydra_layout::clock::monotonic_ns(),
        phase_start_ns: 4_000,
        step_start_ns: 5_000,
        step_size: 1,
        steps_done: 12_345,
        ..Default::default()
    };
    let prediction = Prediction {
        step_expected_ns: 40_000_000,
        step_start_ns: 5_000,
        task_expected_end_ns: 9_000_000_000,
        phase_start_ns: 4_000,
        error_ppm: 120_000,
    };
    w.publish_with_prediction(1, &published, &prediction)
        .unwrap();
    let layer = Substep {
        done: 17,
        total: 30,
        at_ns: 6_000,
        step_start_ns: 5_000,
    };
    w.publish_substep(1, &layer).unwrap();
    // Slot 0's position names a step that is not in flight: none.
    w.publish_substep(0, &layer).unwrap();
    w.pending_counter().queued(1);
    w.abandon_update(2).unwrap();
    (published, layer)
}

/// Slot 1 as the C reader printed it (`out`) is exactly what Rust published, and what the
/// Rust reader sees in the segment at `path`.
fn check_published_slot(
    out: &BTreeMap<String, String>,
    path: &Path,
    published: &SlotState,
    layer: Substep,
) {
    let rust = SegmentReader::open(path).unwrap().slot(1).unwrap();
    assert_eq!(rust.state, *published);
    assert_eq!(rust.layer(), Some(layer));
    assert_eq!(get(out, "slot1.rc"), "0");
    assert_eq!(get(out, "slot1.layer"), "17/30 at 6000");
    // The prediction names the step in flight and the phase: C and Rust agree.
    assert_eq!(rust.step_expected_ns(), Some(40_000_000));
    assert_eq!(rust.phase_end_ns(), Some(9_000_000_000));
    assert_eq!(
        get(out, "slot1.prediction"),
        "step 40000000 end 9000000000 error 120000"
    );
    assert_eq!(get(out, "slot1.seq"), rust.seq.to_string());
    for (field, value) in [
        ("task_id", published.task_id),
        ("phase", published.phase.to_raw()),
        ("work_unit", published.work_unit.to_raw()),
        ("work_done", published.work_done),
        ("work_total", published.work_total),
        ("n_past", published.n_past),
        ("n_ctx", published.n_ctx),
        ("last_progress_ns", published.last_progress_ns),
        ("steps_done", published.steps_done),
        ("pending", 1),
    ] {
        assert_eq!(
            get(out, &format!("slot1.{field}")),
            value.to_string(),
            "slot1.{field}"
        );
    }
}

/// Damages the bytes of a segment copy.
type Edit = Box<dyn FnOnce(&mut Vec<u8>)>;
/// Whether the Rust reader's error is the one expected.
type Check = fn(&Error) -> bool;

/// A copy of `segment` with `edit` applied, written to `dir/<name>`.
fn damaged_copy(
    dir: &Path,
    segment: &Path,
    name: &str,
    edit: impl FnOnce(&mut Vec<u8>),
) -> PathBuf {
    let mut bytes = std::fs::read(segment).unwrap();
    edit(&mut bytes);
    let path = dir.join(name);
    std::fs::write(&path, &bytes).unwrap();
    path
}

/// The segment as a v1.7 writer with a 128-byte longer header would write it: a v1.0
/// reader must accept it.
fn as_from_v1_7(b: &mut Vec<u8>) {
    let slots = b.split_off(h::HEADER_LEN);
    b.extend_from_slice(&[0; 128]);
    b.extend_from_slice(&slots);
    let len = b.len() as u64;
    put_word(b, h::VERSION_MINOR_OFFSET, 7);
    put_word(b, h::HEADER_LEN_OFFSET, h::HEADER_LEN as u64 + 128);
    put_word(b, h::SLOT_OFFSET_OFFSET, h::HEADER_LEN as u64 + 128);
    put_word(b, h::TOTAL_LEN_OFFSET, len);
}

fn put_word(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}

/// Each damage done to a copy of a good segment: its name, the edit, the error code the C
/// reader's validation returns, and the check of the Rust reader's error (`|_| false`
/// where both accept the copy).
fn damage_cases() -> Vec<(&'static str, Edit, &'static str, Check)> {
    vec![
        ("intact", Box::new(|_| {}), "0", |_| false),
        ("magic", Box::new(|b| b[0] = b'X'), "-11", |e| {
            matches!(e, Error::BadMagic { .. })
        }),
        (
            "truncated",
            Box::new(|b| b.truncate(h::HEADER_LEN / 2)),
            "-10",
            |e| matches!(e, Error::Truncated { .. }),
        ),
        (
            "foreign-byte-order",
            Box::new(|b| put_word(b, h::BYTE_ORDER_OFFSET, h::BYTE_ORDER_MARK_SWAPPED)),
            "-12",
            |e| matches!(e, Error::ForeignByteOrder { .. }),
        ),
        (
            "bad-byte-order-mark",
            Box::new(|b| put_word(b, h::BYTE_ORDER_OFFSET, 7)),
            "-13",
            |e| matches!(e, Error::BadByteOrderMark { .. }),
        ),
        (
            "major",
            Box::new(|b| put_word(b, h::VERSION_MAJOR_OFFSET, h::VERSION_MAJOR + 1)),
            "-14",
            |e| matches!(e, Error::UnsupportedMajor { .. }),
        ),
        (
            "stride",
            Box::new(|b| put_word(b, h::SLOT_STRIDE_OFFSET, 200)),
            "-15",
            |e| matches!(e, Error::BadGeometry { .. }),
        ),
        (
            "slot-table",
            Box::new(|b| put_word(b, h::SLOT_COUNT_OFFSET, MAX_SLOTS as u64)),
            "-16",
            |e| matches!(e, Error::SlotTableOutOfBounds { .. }),
        ),
        (
            "huge-stride",
            Box::new(|b| put_word(b, h::SLOT_STRIDE_OFFSET, u64::MAX - 127)),
            "-16",
            |e| matches!(e, Error::SlotTableOutOfBounds { .. }),
        ),
        (
            "grown",
            Box::new(|b| b.extend_from_slice(&[0; 4096])),
            "-17",
            |e| matches!(e, Error::SizeMismatch { .. }),
        ),
        (
            "init",
            Box::new(|b| put_word(b, h::STATE_OFFSET, Lifecycle::INIT)),
            "-18",
            |e| matches!(e, Error::NotReady { .. }),
        ),
        (
            "unknown-state",
            Box::new(|b| put_word(b, h::STATE_OFFSET, 99)),
            "-19",
            |e| matches!(e, Error::BadState { .. }),
        ),
        (
            "newer-minor-and-longer-header",
            Box::new(as_from_v1_7),
            "0",
            |_| false,
        ),
    ]
}

#[test]
fn c_validation_agrees_with_the_rust_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let reader = compile("read_segment", tmp.path());
    let segs = tmp.path().join("segs");
    let copies = tmp.path().join("copies");
    std::fs::create_dir(&copies).unwrap();
    let w = SegmentWriter::create(&config(&segs, "damaged")).unwrap();
    let good = w.path().to_path_buf();

    for (name, edit, want_c, rust_check) in damage_cases() {
        let path = damaged_copy(&copies, &good, &format!("{name}.seg"), edit);
        let out = run(&reader, &[&path]);
        assert_eq!(get(&out, "validate"), want_c, "case {name}: {out:#?}");
        match SegmentReader::open(&path) {
            Ok(_) => assert_eq!(want_c, "0", "case {name}: the Rust reader accepted it"),
            Err(e) => assert!(rust_check(&e), "case {name}: the Rust reader said {e:?}"),
        }
    }
    drop(w);
}
