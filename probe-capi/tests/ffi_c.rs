//! The reader C ABI driven from C (and from Python through ctypes):
//!
//! - a C reader prints the same Hydra meta JSON as `hydra-probe meta` for a segment
//!   written by [`SegmentWriter`], and the same figures as [`EngineView::capture`];
//! - NULL pointers, short buffers, unknown engines and hostile files (garbage, truncated,
//!   empty, a FIFO, a directory, a symbolic link, a foreign major version) give error
//!   codes, never a crash;
//! - `docs/c-abi/examples/is_stuck.py` answers "is slot N stuck?" against the cdylib.
//!
//! The libraries are the ones cargo built for this test run (see `ffi_support::library`);
//! C needs `$CC` or `cc` and Python `python3`: without them these tests FAIL, saying so.

mod ffi_support;

use clap::Parser;
use ffi_support::{compile_c, probe_lib, show, workspace};
use hydra_layout::{
    clock, header as h, Phase, SegmentConfig, SegmentReader, SegmentWriter, SlotState, WorkUnit,
};
use hydra_probe::{EngineView, Thresholds};
use hydra_probe_cli::{self as cli, Cli};
use hydra_probe_ffi as ffi;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const S: u64 = 1_000_000_000;

/// Fields of the meta JSON that depend on the instant of the read (two processes reading
/// the same segment a few ms apart legitimately differ there); everything else must match
/// exactly. The segment's stamps are chosen so that no classification is near a threshold.
const READ_TIME_FIELDS: &[&str] = &[
    "elapsed_ms",
    "last_progress_age_ms",
    "heartbeat_age_ms",
    "step_age_ms",
];

struct Scratch {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    bin: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("segs");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&bin).unwrap();
        Self {
            _tmp: tmp,
            dir,
            bin,
        }
    }

    fn writer(&self, id: &str, slots: usize) -> SegmentWriter {
        SegmentWriter::create(&SegmentConfig {
            dir: self.dir.clone(),
            engine_id: id.into(),
            slot_count: slots,
            description: hydra_fault::segments::description(),
        })
        .expect("create segment")
    }

    fn compile(&self, name: &str) -> PathBuf {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
        compile_c(&source, &self.bin, &[probe_lib(false)])
    }
}

/// Publishes a decoding slot 0 (25/100 tokens, 25 tok/s, a step in flight) and a queued
/// slot 1, with stamps far from any default threshold.
fn publish_decoding(w: &mut SegmentWriter) {
    let now = clock::monotonic_ns();
    w.heartbeat(now);
    w.publish(
        0,
        &SlotState {
            task_id: 4,
            phase: Phase::Decode,
            work_unit: WorkUnit::Tokens,
            work_done: 25,
            work_total: 100,
            n_past: 125,
            n_ctx: 4096,
            tokens_cached: 100,
            state_size: 1 << 20,
            task_start_ns: now - 2 * S,
            phase_start_ns: now - 2 * S,
            last_progress_ns: now - S,
            step_start_ns: now - S / 2,
            step_size: 1,
            last_step_ns: S / 25,
            steps_done: 25,
            ..Default::default()
        },
    )
    .unwrap();
    w.publish(
        1,
        &SlotState {
            task_id: 5,
            phase: Phase::Queued,
            ..Default::default()
        },
    )
    .unwrap();
    w.pending_counter().queued(1);
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}:\n{}", show(&out));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// What `hydra-probe <args>` prints: the CLI's own code (`hydra_probe_cli::run`, all that
/// the binary's `main` calls), run in-process since the binary belongs to another crate.
fn cli_output(args: &[&str]) -> String {
    let parsed = Cli::try_parse_from(std::iter::once("hydra-probe").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("hydra-probe {args:?}: {e}"));
    let mut out = Vec::new();
    let code =
        cli::run(&parsed, &mut out).unwrap_or_else(|e| panic!("hydra-probe {args:?}: {e:#}"));
    assert_eq!(code, cli::EXIT_OK, "hydra-probe {args:?}");
    String::from_utf8(out).expect("UTF-8 output")
}

fn without_read_time(mut v: Value) -> Value {
    let obj = v.as_object_mut().expect("meta is an object");
    for f in READ_TIME_FIELDS {
        assert!(obj.remove(*f).is_some(), "meta has no {f}: {obj:?}");
    }
    v
}

#[test]
fn c_reader_prints_the_same_meta_as_the_cli() {
    let s = Scratch::new();
    let mut w = s.writer("e1", 2);
    publish_decoding(&mut w);
    let reader = s.compile("meta_reader");
    let dir = s.dir.to_str().unwrap();
    for slot in ["0", "1"] {
        let c = run(Command::new(&reader).args(["json", dir, "e1", slot]));
        let cli = cli_output(&["--dir", dir, "meta", "e1", slot]);
        let c: Value = serde_json::from_str(c.trim()).expect("C prints JSON");
        let cli: Value = serde_json::from_str(cli.trim()).expect("CLI prints JSON");
        assert_eq!(
            without_read_time(c),
            without_read_time(cli),
            "slot {slot}: the C ABI's meta differs from `hydra-probe meta` (ignoring {READ_TIME_FIELDS:?})"
        );
    }
    // By path as well as by id.
    let by_path = run(Command::new(&reader).args(["json", dir, w.path().to_str().unwrap(), "0"]));
    assert!(by_path.contains("\"operation\":\"decode\""), "{by_path}");

    // The plain struct agrees with the Rust library's view.
    let view = EngineView::capture(
        &SegmentReader::open(w.path()).unwrap(),
        clock::monotonic_ns(),
        &Thresholds::default(),
    )
    .unwrap();
    let fields = |slot: &str| -> BTreeMap<String, String> {
        run(Command::new(&reader).args(["slot", dir, "e1", slot]))
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    let f = fields("0");
    let v = &view.slots[0];
    assert_eq!(
        f["sizeof"],
        std::mem::size_of::<ffi::HydraProbeSlot>().to_string()
    );
    assert_eq!(
        f["slot_class"],
        ffi::HYDRA_PROBE_SLOT_CLASS_PROGRESSING.to_string()
    );
    assert_eq!(
        f["engine_health"],
        ffi::HYDRA_PROBE_ENGINE_HEALTH_LIVE.to_string()
    );
    assert_eq!(f["phase"], ffi::HYDRA_PROBE_PHASE_DECODE.to_string());
    assert_eq!(f["work_done"], v.state.work_done.to_string());
    assert_eq!(f["n_ctx"], "4096");
    assert_eq!(f["progress"], format!("{:.6}", v.derived.progress.unwrap()));
    assert_eq!(
        f["rate_per_s"],
        format!("{:.6}", v.derived.rate_per_s.unwrap())
    );
    assert_eq!(f["eta_s"], format!("{:.6}", v.derived.eta_s.unwrap()));
    assert_eq!(f["stall_threshold_ns"], v.stall_threshold_ns().to_string());
    assert_eq!(
        f["expected_step_ns"],
        v.derived.expected_step_ns.unwrap().to_string()
    );
    let f = fields("1");
    assert_eq!(
        f["slot_class"],
        ffi::HYDRA_PROBE_SLOT_CLASS_QUEUED.to_string()
    );
    assert_eq!(f["pending"], "1");
    assert_eq!(
        (f["progress"].as_str(), f["eta_s"].as_str()),
        ("-1.000000", "-1.000000")
    );
    assert_eq!(f["step_age_ns"], "-1");
}

/// What the `hostile` program's misuse checks must return, by label (0: a property of the
/// outcome that holds).
const MISUSE_CHECKS: &[(&str, i32)] = {
    use ffi::*;
    &[
        ("open_null_out", HYDRA_PROBE_E_NULL),
        ("open_null_dir", HYDRA_PROBE_E_NULL),
        ("open_null_engine", HYDRA_PROBE_E_NULL),
        ("open_null_left_handle_null", 0),
        ("list_null_dir", HYDRA_PROBE_E_NULL),
        ("list_null_count", HYDRA_PROBE_E_NULL),
        ("list_null_ids", HYDRA_PROBE_E_NULL),
        ("close_null", HYDRA_PROBE_E_NULL),
        ("slot_count_null_probe", HYDRA_PROBE_E_NULL),
        ("read_slot_null_probe", HYDRA_PROBE_E_NULL),
        ("meta_null_probe", HYDRA_PROBE_E_NULL),
        ("read_meta_null_probe", HYDRA_PROBE_E_NULL),
        ("describe_null_probe", HYDRA_PROBE_E_NULL),
        ("value_name_unknown_kind", 0),
        ("value_name_unknown_value", 0),
        ("thresholds_default_null", HYDRA_PROBE_E_NULL),
        ("set_thresholds_null_probe", HYDRA_PROBE_E_NULL),
        ("last_error_null_buf", HYDRA_PROBE_E_NULL),
        ("error_name_unknown", 0),
        ("list_count_only", HYDRA_PROBE_E_BUFFER_TOO_SMALL),
        ("list_count_is_2", 0),
        ("list_too_small", HYDRA_PROBE_E_BUFFER_TOO_SMALL),
        ("list_too_small_filled_first", 0),
        ("open_unknown", HYDRA_PROBE_E_NOT_FOUND),
        ("unknown_message_lists_engines", 0),
        ("open_empty_engine", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("open_missing_path", HYDRA_PROBE_E_NOT_FOUND),
        ("list_missing_dir", HYDRA_PROBE_E_NOT_FOUND),
        ("list_missing_dir_named", 0),
        ("open_e1", HYDRA_PROBE_OK),
        ("slot_count_null_out", HYDRA_PROBE_E_NULL),
        ("read_slot_null_out", HYDRA_PROBE_E_NULL),
        ("read_slot_out_of_range", HYDRA_PROBE_E_SLOT_OUT_OF_RANGE),
        ("meta_out_of_range", HYDRA_PROBE_E_SLOT_OUT_OF_RANGE),
        ("meta_null_buf", HYDRA_PROBE_E_NULL),
        ("read_meta_null_out", HYDRA_PROBE_E_NULL),
        ("read_meta_size_too_small", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("read_meta_out_of_range", HYDRA_PROBE_E_SLOT_OUT_OF_RANGE),
        ("read_meta_ok", HYDRA_PROBE_OK),
        ("read_meta_size_filled", 0),
        ("describe_null_out", HYDRA_PROBE_E_NULL),
        ("describe_size_too_small", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("describe_ok", HYDRA_PROBE_OK),
        ("describe_engine_id", 0),
        ("meta_size_query", HYDRA_PROBE_E_BUFFER_TOO_SMALL),
        ("meta_size_query_needed", 0),
        ("meta_too_small", HYDRA_PROBE_E_BUFFER_TOO_SMALL),
        ("meta_too_small_left_empty", 0),
        ("last_error_too_small", HYDRA_PROBE_E_BUFFER_TOO_SMALL),
        ("last_error_truncated", 0),
        ("set_thresholds_nan", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("set_thresholds_negative", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("set_thresholds_infinite", HYDRA_PROBE_E_INVALID_ARGUMENT),
        ("set_thresholds_ok", HYDRA_PROBE_OK),
        ("close_e1", HYDRA_PROBE_OK),
    ]
};

/// The hostile files, written to `hostile`: label, path, and the code opening it must
/// return. `valid` is a live segment's bytes, `live` its path.
fn hostile_files(hostile: &Path, valid: &[u8], live: &Path) -> Vec<(&'static str, PathBuf, i32)> {
    let file = |name: &str, bytes: &[u8]| {
        let p = hostile.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut bad_major = valid.to_vec();
    bad_major[h::VERSION_MAJOR_OFFSET..h::VERSION_MAJOR_OFFSET + 8]
        .copy_from_slice(&99u64.to_ne_bytes());
    let mut huge_count = valid.to_vec();
    huge_count[h::SLOT_COUNT_OFFSET..h::SLOT_COUNT_OFFSET + 8]
        .copy_from_slice(&u64::MAX.to_ne_bytes());
    let fifo = hostile.join("fifo.hps");
    let status = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    let subdir = hostile.join("dir.hps");
    std::fs::create_dir(&subdir).unwrap();
    let link = hostile.join("link.hps");
    std::os::unix::fs::symlink(live, &link).unwrap();
    vec![
        (
            "garbage",
            file("garbage.hps", &garbage),
            ffi::HYDRA_PROBE_E_NOT_A_SEGMENT,
        ),
        (
            "empty",
            file("empty.hps", b""),
            ffi::HYDRA_PROBE_E_NOT_A_SEGMENT,
        ),
        (
            "truncated_header",
            file("short.hps", &valid[..100]),
            ffi::HYDRA_PROBE_E_NOT_A_SEGMENT,
        ),
        (
            "truncated_slots",
            file("cut.hps", &valid[..valid.len() - 8]),
            ffi::HYDRA_PROBE_E_NOT_A_SEGMENT,
        ),
        (
            "huge_slot_count",
            file("huge.hps", &huge_count),
            ffi::HYDRA_PROBE_E_NOT_A_SEGMENT,
        ),
        (
            "bad_major",
            file("major.hps", &bad_major),
            ffi::HYDRA_PROBE_E_UNSUPPORTED_VERSION,
        ),
        ("fifo", fifo, ffi::HYDRA_PROBE_E_REFUSED),
        ("directory", subdir, ffi::HYDRA_PROBE_E_REFUSED),
        ("symlink", link, ffi::HYDRA_PROBE_E_REFUSED),
        // A byte-for-byte copy of a live segment under a name that is not an engine's:
        // valid, its writer (lock) absent: dead.
        ("copy", file("copy.seg", valid), ffi::HYDRA_PROBE_OK),
        // The same copy planted under another engine's name (FORMAT §2.2).
        (
            "planted",
            file("planted.hps", valid),
            ffi::HYDRA_PROBE_E_REFUSED,
        ),
    ]
}

#[test]
fn misuse_and_hostile_files_give_error_codes() {
    let s = Scratch::new();
    let w1 = s.writer("e1", 1);
    let _w2 = s.writer("e2", 1);
    let hostile = s.bin.parent().unwrap().join("hostile");
    std::fs::create_dir(&hostile).unwrap();
    let valid = std::fs::read(w1.path()).unwrap();
    let cases = hostile_files(&hostile, &valid, w1.path());
    let program = s.compile("hostile");
    let mut cmd = Command::new(&program);
    cmd.arg(&s.dir);
    for (label, path, _) in &cases {
        cmd.arg(format!("{label}={}", path.display()));
    }
    let out = cmd.output().expect("run hostile");
    // A crash (signal) or an abort would show here as a failed status.
    assert!(out.status.success(), "{cmd:?}:\n{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got: BTreeMap<String, i32> = stdout
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let (kind, label, code) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            (format!("{kind} {label}"), code.parse().unwrap())
        })
        .collect();
    let mut want: BTreeMap<String, i32> = MISUSE_CHECKS
        .iter()
        .map(|&(k, v)| (format!("check {k}"), v))
        .collect();
    for (label, _, code) in &cases {
        want.insert(format!("open {label}"), *code);
        if *code == ffi::HYDRA_PROBE_OK {
            want.insert(format!("read {label}"), ffi::HYDRA_PROBE_OK);
            want.insert(format!("read_meta {label}"), ffi::HYDRA_PROBE_OK);
        }
    }
    assert_eq!(
        got,
        want,
        "outcomes differ (codes: 0 ok, -1 null, -2 invalid argument, -3 buffer too small, \
         -4 not found, -5 slot out of range, -6 not a segment, -7 unsupported version, \
         -8 refused, -9 io, -10 internal):\n{}",
        show(&out)
    );
}

#[test]
fn python_example_answers_is_stuck() {
    let s = Scratch::new();
    let mut w = s.writer("e1", 2);
    let now = clock::monotonic_ns();
    w.heartbeat(now);
    let decoding = |last_progress_age: u64| SlotState {
        task_id: 1,
        phase: Phase::Decode,
        work_unit: WorkUnit::Tokens,
        work_done: 10,
        work_total: 100,
        phase_start_ns: now.saturating_sub(last_progress_age + S),
        last_progress_ns: now.saturating_sub(last_progress_age),
        ..Default::default()
    };
    w.publish(0, &decoding(0)).unwrap();
    w.publish(1, &decoding(20 * S)).unwrap();
    let lib = probe_lib(true);
    let script = workspace().join("docs/c-abi/examples/is_stuck.py");
    let python = |args: &[&str]| {
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .arg("--lib")
            .arg(&lib)
            .arg("--dir")
            .arg(&s.dir)
            .args(["--stall-floor", "5"])
            .args(args);
        let out = cmd.output().unwrap_or_else(|e| {
            panic!(
                "python3 is needed to run {} ({e}); install it",
                script.display()
            )
        });
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            show(&out),
        )
    };
    let (code, stdout, all) = python(&["e1", "0"]);
    assert_eq!(code, Some(0), "slot 0 is progressing:\n{all}");
    assert!(
        stdout.contains("not stuck") && stdout.contains("progressing"),
        "{all}"
    );
    let (code, stdout, all) = python(&["e1", "1"]);
    assert_eq!(code, Some(1), "slot 1 is stalled:\n{all}");
    assert!(
        stdout.contains("STUCK") && stdout.contains("stalled"),
        "{all}"
    );
    let (code, _, all) = python(&["nope", "0"]);
    assert_eq!(code, Some(2), "unknown engine:\n{all}");
    assert!(all.contains("HYDRA_PROBE_E_NOT_FOUND"), "{all}");
}
