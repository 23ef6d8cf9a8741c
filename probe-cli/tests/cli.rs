//! End-to-end tests of the `hydra-probe` binary: every subcommand, exit codes and messages.

mod common;

use common::{add_dir_and_fifo, decode, ProbeRun, Scratch, S};
use hydra_layout::{clock, Phase, SegmentWriter, SlotState};
use std::time::{Duration, SystemTime};

#[test]
fn help_version_and_usage_errors() {
    let s = Scratch::new();
    s.probe(&["--help"]).code_is(0).stdout_has("Usage");
    s.probe(&["check", "--help"])
        .code_is(0)
        .stdout_has("--budget");
    s.probe(&["--version"]).code_is(0).stdout_has("hydra-probe");
    s.probe_error(&["frobnicate"], "frobnicate");
    s.probe_error(&["meta", "e1"], "<SLOT>");
    s.probe_error(&["meta", "e1", "minus-one"], "minus-one");
    s.probe_error(&["watch", "--interval", "soon"], "invalid duration");
    s.probe_error(&[], "missing command");
}

#[test]
fn list_shows_engines_and_every_unreadable_file() {
    let s = Scratch::new();
    let mut live = s.writer("alpha", 4);
    live.publish(1, &decode(10, 100, 2 * S, 0)).unwrap();
    s.writer("dead", 2).simulate_crash();
    std::fs::write(s.dir.join("garbage.hps"), b"definitely not a segment").unwrap();
    add_dir_and_fifo(&s.dir);
    let run = s.probe(&["list"]);
    run.code_is(0)
        .stdout_has("alpha")
        .stdout_has("live")
        .stdout_has("1/4")
        .stdout_has("tiny-llama")
        .stdout_has("dead")
        .stdout_has("garbage: error:")
        .stdout_has("not a hydra-progress segment")
        .stdout_has("fifo: error:")
        .stdout_has("it is a FIFO")
        .stdout_has("adir: error:")
        .stdout_has("it is a directory");
    let json = s.probe(&["--json", "list"]).code_is(0).json();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let ids: Vec<_> = rows
        .iter()
        .map(|r| r["engine_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["adir", "alpha", "dead", "fifo", "garbage"]);
    assert_eq!(rows[1]["health"], "live");
    assert_eq!(rows[1]["busy_slots"], 1);
    assert_eq!(rows[2]["health"], "dead");
    assert!(rows[4]["error"].is_string());
}

#[test]
fn list_of_wrong_owner_file() {
    if rustix::process::geteuid().as_raw() != 0 {
        return; // only root can give a file away
    }
    let s = Scratch::new();
    let w = s.writer("theirs", 1);
    std::os::unix::fs::chown(w.path(), Some(12345), None).unwrap();
    s.probe(&["list"])
        .code_is(0)
        .stdout_has("owned by uid 12345");
    s.probe_error(&["show", "theirs"], "owned by uid 12345");
}

#[test]
fn no_engines() {
    let s = Scratch::new();
    s.probe(&["list"]).code_is(0).stdout_has("no engines found");
    assert_eq!(s.probe(&["--json", "list"]).json(), serde_json::json!([]));
    s.probe_error(&["show"], "no engines found in");
    s.probe_error(&["watch", "--count", "1"], "no engines found in");
    s.probe_error(&["check"], "no engines found in");
    s.probe(&["gc"]).code_is(0);
}

/// Every subcommand that scans a directory, with and without an engine named.
const SCANNING: &[&[&str]] = &[
    &["list"],
    &["--json", "list"],
    &["show"],
    &["show", "e1"],
    &["meta", "e1", "0"],
    &["watch", "--count", "1"],
    &["check"],
    &["check", "e1"],
    &["gc"],
    &["gc", "--dry-run"],
];

#[test]
fn a_wrong_directory_is_an_error_never_an_empty_success() {
    let s = Scratch::new();
    let missing = s.tmp.path().join("nope");
    let not_a_dir = s.tmp.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    for dir in [&missing, &not_a_dir] {
        let dir = dir.to_str().unwrap();
        for args in SCANNING {
            let mut all = vec!["--dir", dir];
            all.extend_from_slice(args);
            s.probe_bare(&all, None).code_is(3).error_is(dir);
        }
    }
    // An unreadable directory too (root reads every directory: nothing to check then).
    if rustix::process::geteuid().as_raw() != 0 {
        let locked = s.tmp.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        let dir = locked.to_str().unwrap();
        for args in SCANNING {
            let mut all = vec!["--dir", dir];
            all.extend_from_slice(args);
            s.probe_bare(&all, None).code_is(3).error_is(dir);
        }
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
    }
    // The same directory, once it exists and is empty, is a host without engines.
    std::fs::create_dir(&missing).unwrap();
    s.probe_bare(&["--dir", missing.to_str().unwrap(), "list"], None)
        .code_is(0)
        .stdout_has("no engines found");
    s.probe_bare(&["--dir", missing.to_str().unwrap(), "gc"], None)
        .code_is(0)
        .stdout_has("nothing to do");
}

#[test]
fn dir_comes_from_the_environment() {
    let s = Scratch::new();
    let _w = s.writer("envy", 1);
    s.probe_bare(&["list"], Some(&s.dir))
        .code_is(0)
        .stdout_has("envy");
    // --dir beats the environment.
    let other = s.tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    s.probe_bare(&["--dir", other.to_str().unwrap(), "list"], Some(&s.dir))
        .code_is(0)
        .stdout_has("no engines found");
}

/// A scratch directory with the engine `e1` of `slots` slots, its heartbeat fresh.
fn live_engine(slots: usize) -> (Scratch, SegmentWriter) {
    let s = Scratch::new();
    let mut w = s.writer("e1", slots);
    w.heartbeat(clock::monotonic_ns());
    (s, w)
}

#[test]
fn show_table_json_and_slot_filter() {
    let (s, mut w) = live_engine(3);
    w.publish(1, &decode(25, 100, 10 * S, S / 10)).unwrap();
    w.pending_counter().queued(2);
    let run = s.probe(&["show"]);
    run.code_is(0)
        .stdout_has("engine e1")
        .stdout_has("live")
        .stdout_has("SLOT")
        .stdout_has("progressing")
        .stdout_has("25/100 (25.0%)")
        .stdout_has("tok/s")
        .stdout_has("queued")
        .stdout_has("idle");
    let one = s.probe(&["show", "e1", "--slot", "1"]);
    one.code_is(0).stdout_has("progressing");
    assert!(!one.stdout().contains("queued"), "{}", one.stdout());
    let json = s.probe(&["--json", "show", "e1"]).code_is(0).json();
    assert_eq!(json["engine_id"], "e1");
    assert_eq!(json["health"], "live");
    assert_eq!(json["slots"].as_array().unwrap().len(), 3);
    assert_eq!(json["slots"][1]["class"], "progressing");
    assert_eq!(json["slots"][1]["state"]["work_done"], 25);
    assert!(json["slots"][1]["rate_per_s"].is_f64());
    assert!(json["slots"][0]["eta_s"].is_null());
    s.probe_error(
        &["show", "e1", "--slot", "3"],
        "slot 3 out of range: engine \"e1\" has 3 slots",
    );
    // By path.
    let path = w.path().to_str().unwrap().to_owned();
    s.probe(&["show", &path]).code_is(0).stdout_has("engine e1");
}

/// Task `task_id` of three 20 ms decode steps, 100 ms apart, on `slot`, begun 10 s ago:
/// its record after them, and its start.
fn three_decode_steps(w: &mut SegmentWriter, slot: usize, task_id: u64) -> (SlotState, u64) {
    let t0 = clock::monotonic_ns() - 10 * S;
    let mut st = SlotState::default();
    st.begin_task(
        task_id,
        Phase::Decode,
        hydra_layout::WorkUnit::Tokens,
        3,
        t0,
    );
    for i in 0..3 {
        st.start_step(1, t0 + i * S / 10);
        w.publish(slot, &st).unwrap();
        st.finish_step(i + 1, t0 + i * S / 10 + S / 50);
        w.publish(slot, &st).unwrap();
    }
    (st, t0)
}

#[test]
fn stats_sums_the_slots_histograms_and_counters() {
    let (s, mut w) = live_engine(2);
    let (mut st, _) = three_decode_steps(&mut w, 0, 1);
    st.finish(
        hydra_layout::FinishReason::Completed,
        hydra_layout::ErrorCode::None,
    );
    w.publish(0, &st).unwrap();
    s.probe(&["stats", "e1"])
        .code_is(0)
        .stdout_has("engine e1 (2 slots summed)")
        .stdout_has("tasks: 1 begun, 1 ended")
        .stdout_has("3 generated")
        .stdout_has("HISTOGRAM")
        .stdout_has("inter_token_latency  3");
    let json = s.probe(&["--json", "stats", "e1"]).code_is(0).json();
    assert_eq!(json["published"], true);
    let itl = json["histograms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "inter_token_latency")
        .expect("inter-token latency")
        .clone();
    assert_eq!(itl["count"], 3);
    let mean = itl["mean"].as_f64().unwrap();
    assert!((mean - 0.02).abs() < 1e-9, "{itl}");
    s.probe(&["stats", "e1", "--slot", "1"])
        .code_is(0)
        .stdout_has("engine e1 slot 1")
        .stdout_has("0 generated");
    s.probe_error(
        &["stats", "e1", "--slot", "2"],
        "slot 2 out of range: engine \"e1\" has 2 slots",
    );
}

#[test]
fn history_lists_the_last_steps_oldest_first_by_id_or_path() {
    let (s, mut w) = live_engine(2);
    three_decode_steps(&mut w, 1, 7);
    s.probe(&["history", "e1", "--slot", "1"])
        .code_is(0)
        .stdout_has("engine e1 slot 1: 3 steps, oldest first")
        .stdout_has("RESULT")
        .stdout_has("decode")
        .stdout_has("advanced")
        .stdout_has("20ms");
    let json = s.probe(&["--json", "history", "e1"]).code_is(0).json();
    let slots = json["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0]["steps"].as_array().unwrap().len(), 0);
    let steps = slots[1]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2]["task_id"], 7);
    assert!(steps[0]["ordinal"].as_u64() < steps[2]["ordinal"].as_u64());
    // By path.
    let path = w.path().to_str().unwrap().to_owned();
    s.probe(&["history", &path, "--slot", "1"])
        .code_is(0)
        .stdout_has("3 steps");
    s.probe_error(
        &["history", "e1", "--slot", "9"],
        "slot 9 out of range: engine \"e1\" has 2 slots",
    );
}

#[test]
fn trace_writes_the_steps_as_chrome_trace_events_and_samples_verdicts() {
    let (s, mut w) = live_engine(2);
    let (_, t0) = three_decode_steps(&mut w, 1, 7);
    let file = s.tmp.path().join("trace.json");
    let out = file.to_str().unwrap();
    s.probe(&["trace", "e1", "-o", out, "--seconds", "1"])
        .code_is(0)
        .stdout_has("wrote 3 steps of engine e1");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let steps: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(steps.len(), 3);
    assert_eq!(
        (&steps[0]["tid"], &steps[0]["name"]),
        (&1.into(), &"decode".into())
    );
    assert_eq!(steps[0]["dur"], 20_000, "20 ms in microseconds");
    assert_eq!(steps[0]["ts"], (t0 / 1_000));
    assert_eq!(steps[2]["args"]["task_id"], 7);
    let verdicts: Vec<_> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert!(
        verdicts.iter().any(|e| e["tid"] == 1),
        "slot 1's verdict was sampled: {verdicts:?}"
    );
    s.probe_error(&["trace", "e1"], "--output");
    s.probe_error(&["trace", "e1", "-o", out, "--seconds", "0"], "0");
    s.probe_error(
        &["trace", "e1", "-o", "/nonexistent-dir/t.json"],
        "cannot write /nonexistent-dir/t.json",
    );
}

#[test]
fn show_names_the_device_a_slot_waits_on() {
    let s = Scratch::new();
    let (_w, _) = s.rpc_split("split");
    s.probe(&["show", "split"])
        .code_is(0)
        .stdout_has("slot 0: waiting on RPC1 127.0.0.1:50053 for 5.");
}

#[test]
fn engine_resolution_errors() {
    let s = Scratch::new();
    let _a = s.writer("a", 1);
    let _b = s.writer("b", 1);
    s.probe_error(&["show"], "several engines in");
    s.probe(&["show"]).error_is("name one of: a, b");
    s.probe_error(&["show", "zz"], "no engine \"zz\"");
    s.probe(&["show", "zz"]).error_is("found: a, b");
    s.probe_error(&["meta", "zz", "0"], "no engine \"zz\"");
    s.probe_error(&["meta", "a", "1"], "slot 1 out of range");
    s.probe_error(&["check", "zz"], "no engine \"zz\"");
    s.probe_error(&["show", "/nonexistent/x.hps"], "/nonexistent");
}

#[test]
fn unreadable_files_are_clear_errors() {
    let s = Scratch::new();
    std::fs::write(s.dir.join("garbage.hps"), vec![0xAB; 4096]).unwrap();
    std::fs::write(s.dir.join("short.hps"), b"HYDR").unwrap();
    add_dir_and_fifo(&s.dir);
    s.probe_error(&["show", "garbage"], "is not a hydra-progress segment");
    s.probe_error(&["meta", "garbage", "0"], "is not a hydra-progress segment");
    s.probe_error(&["show", "short"], "truncated");
    s.probe_error(&["show", "adir"], "it is a directory");
    s.probe_error(&["show", "fifo"], "it is a FIFO");
    // Only garbage here: `check` cannot tell, exit 3 with one line per file.
    let run = s.probe(&["check"]);
    run.code_is(3)
        .stdout_has("UNKNOWN: garbage: cannot read")
        .stdout_has("it is a FIFO");
}

/// The JSON type of a meta field.
#[derive(Debug, Clone, Copy)]
enum Json {
    Unsigned,
    Bool,
    Str,
    Float,
    UnsignedOrNull,
    FloatOrNull,
}

impl Json {
    fn holds(self, v: &serde_json::Value) -> bool {
        match self {
            Json::Unsigned => v.is_u64(),
            Json::Bool => v.is_boolean(),
            Json::Str => v.is_string(),
            Json::Float => v.is_f64(),
            Json::UnsignedOrNull => v.is_u64() || v.is_null(),
            Json::FloatOrNull => v.is_f64() || v.is_null(),
        }
    }
}

/// Every field Hydra Core's `SlotMeta` parses, with its JSON type.
const SLOTMETA_FIELDS: &[(&str, Json)] = &[
    ("slot_id", Json::Unsigned),
    ("n_past", Json::Unsigned),
    ("state_size", Json::Unsigned),
    ("is_processing", Json::Bool),
    ("model_alias", Json::Str),
    ("tokenizer", Json::Str),
    ("model_name", Json::Str),
    ("model_quant", Json::Str),
    ("model_capabilities", Json::Unsigned),
    ("model_path", Json::Str),
    ("operation", Json::Str),
    ("progress", Json::Float),
    ("tokens_processed", Json::Unsigned),
    ("tokens_total", Json::Unsigned),
    ("elapsed_ms", Json::Unsigned),
    // New fields.
    ("classification", Json::Str),
    ("engine_liveness", Json::Str),
    ("engine_id", Json::Str),
    ("task_id", Json::Unsigned),
    ("queued", Json::Bool),
    ("phase_start_ns", Json::Unsigned),
    ("step_size", Json::Unsigned),
    ("last_progress_age_ms", Json::UnsignedOrNull),
    ("rate_per_s", Json::FloatOrNull),
    ("eta_s", Json::FloatOrNull),
    ("step_age_ms", Json::UnsignedOrNull),
];

#[test]
fn meta_has_every_slotmeta_field_with_its_json_type() {
    let s = Scratch::new();
    let mut w = s.writer("e1", 2);
    w.publish(0, &decode(30, 120, 3 * S, S / 2)).unwrap();
    for slot in [0usize, 1] {
        let m = s
            .probe(&["meta", "e1", &slot.to_string()])
            .code_is(0)
            .json();
        let obj = m.as_object().expect("meta is an object");
        for &(name, json) in SLOTMETA_FIELDS {
            let v = obj
                .get(name)
                .unwrap_or_else(|| panic!("meta lacks {name}: {m}"));
            assert!(json.holds(v), "{name} is not {json:?}: {v}");
        }
        let op = obj["operation"].as_str().unwrap();
        assert!(
            ["prefill", "decode", "save", "restore", "idle"].contains(&op),
            "{op}"
        );
        let p = obj["progress"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
    }
    let m = s.probe(&["meta", "e1", "0"]).json();
    assert_eq!(m["slot_id"], 0);
    assert_eq!(m["operation"], "decode");
    assert_eq!(m["is_processing"], true);
    assert_eq!(m["tokens_processed"], 30);
    assert_eq!(m["tokens_total"], 120);
    assert_eq!(m["progress"], 0.25);
    assert_eq!(m["n_past"], 40);
    assert_eq!(m["model_alias"], "tiny");
    // The writer's two bits, and the families every writer derives by itself (v1.3).
    assert_eq!(
        m["model_capabilities"],
        3 | hydra_layout::header::capabilities::WRITER_DERIVED
    );
    assert_eq!(m["classification"], "progressing");
    assert_eq!(m["engine_liveness"], "live");
    assert!(m["elapsed_ms"].as_u64().unwrap() >= 3000);
    let idle = s.probe(&["meta", "e1", "1"]).json();
    assert_eq!(idle["operation"], "idle");
    assert_eq!(idle["elapsed_ms"], 0);
    assert_eq!(idle["eta_s"], serde_json::Value::Null);
    // `--json` changes nothing: meta is always JSON.
    assert_eq!(
        s.probe(&["--json", "meta", "e1", "1"]).json()["operation"],
        "idle"
    );
}

#[test]
fn meta_of_a_queued_slot_is_idle_and_queued() {
    let s = Scratch::new();
    let mut w = s.writer("e1", 1);
    w.publish(
        0,
        &SlotState {
            phase: Phase::Queued,
            ..Default::default()
        },
    )
    .unwrap();
    let m = s.probe(&["meta", "e1", "0"]).code_is(0).json();
    assert_eq!(m["operation"], "idle");
    assert_eq!(m["queued"], true);
    assert_eq!(m["classification"], "queued");
}

#[test]
fn watch_plain_and_json() {
    let s = Scratch::new();
    let mut w = s.writer("e1", 2);
    w.publish(0, &decode(5, 50, S, 0)).unwrap();
    let run = s.probe(&["watch", "--interval", "10ms", "--count", "3"]);
    run.code_is(0);
    let lines: Vec<_> = run.stdout().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.starts_with("e1 slot 0 decode 5/50")),
        "{lines:?}"
    );
    let run = s.probe(&[
        "--json",
        "watch",
        "e1",
        "--interval",
        "10ms",
        "--count",
        "2",
    ]);
    run.code_is(0);
    let views: Vec<serde_json::Value> = run
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(views.len(), 2);
    assert_eq!(views[1]["slots"][0]["class"], "progressing");
    w.publish(0, &SlotState::default()).unwrap();
    s.probe(&["watch", "--interval", "10ms", "--count", "1"])
        .code_is(0)
        .stdout_has("all 2 slots idle");
}

#[test]
fn check_healthy_slow_stalled() {
    let (s, mut w) = live_engine(2);
    // 10 tok/s with 900 tokens left: ETA 90 s.
    w.publish(0, &decode(100, 1000, 10 * S, 0)).unwrap();
    s.probe(&["check"])
        .code_is(0)
        .stdout_has("OK: 1 engine healthy, 1 slot busy");
    s.probe(&["check", "e1", "--budget", "100"]).code_is(0);
    s.probe(&["check", "e1", "--budget", "60"])
        .code_is(1)
        .stdout_has("WARNING: e1 slot 0 slow")
        .stdout_has("ETA 1m30s exceeds budget 1m00s");
    let json = s
        .probe(&["--json", "check", "--budget", "60"])
        .code_is(1)
        .json();
    assert_eq!(json["status"], "WARNING");
    assert_eq!(json["findings"][0]["kind"], "slow");
    assert_eq!(json["findings"][0]["slot"], 0);
    // Slot 1 silent for 20 s: stalled with a 5 s floor, fine with the 30 s default.
    w.publish(1, &decode(3, 100, 30 * S, 20 * S)).unwrap();
    s.probe(&["check"]).code_is(0);
    s.probe(&["check", "--stall-floor", "5s"])
        .code_is(2)
        .stdout_has("CRITICAL: e1 slot 1 stalled")
        .stdout_has("no progress for 20.0s");
    // Critical outranks warning, and comes first.
    let run = s.probe(&["check", "--stall-floor", "5s", "--budget", "60"]);
    run.code_is(2);
    assert!(run.stdout().starts_with("CRITICAL"), "{}", run.stdout());
    assert!(run.stdout().contains("WARNING"));
}

#[test]
fn check_hung_dead_orphaned_torn() {
    let s = Scratch::new();
    let mut w = s.writer("hung", 1);
    w.heartbeat(clock::monotonic_ns().saturating_sub(60 * S).max(1));
    w.publish(0, &decode(3, 100, 60 * S, 60 * S)).unwrap();
    s.probe(&[
        "check",
        "hung",
        "--stall-floor",
        "5s",
        "--heartbeat-timeout",
        "5s",
    ])
    .code_is(2)
    .stdout_has("engine hung (pid")
    .stdout_has("is hung")
    .stdout_has(hydra_probe::classify::HUNG_RULE);
    // The help states the same rule, in the same words (wrapped to the terminal).
    let help = s.probe(&["check", "--help"]);
    help.code_is(0);
    let words = help
        .stdout()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(words.contains(hydra_probe::classify::HUNG_RULE), "{words}");
    s.probe(&[
        "show",
        "hung",
        "--stall-floor",
        "5s",
        "--heartbeat-timeout",
        "5s",
    ])
    .code_is(0)
    .stdout_has("hung")
    .stdout_has("stalled");

    let mut d = s.writer("gone", 2);
    d.publish(1, &decode(3, 100, S, 0)).unwrap();
    d.simulate_crash();
    let run = s.probe(&["check", "gone"]);
    run.code_is(2)
        .stdout_has("engine gone")
        .stdout_has("is dead")
        .stdout_has("gone slot 1 orphaned");
    let m = s.probe(&["meta", "gone", "1"]).code_is(0).json();
    assert_eq!(m["classification"], "orphaned");
    assert_eq!(m["engine_liveness"], "dead");

    let mut t = s.writer("torn", 2);
    t.publish(0, &decode(7, 100, S, 0)).unwrap();
    t.abandon_update(0).unwrap();
    s.probe(&["check", "torn"])
        .code_is(2)
        .stdout_has("torn slot 0 torn");
    let m = s.probe(&["meta", "torn", "0"]).code_is(0).json();
    assert_eq!(m["classification"], "torn");
    assert_eq!(m["tokens_processed"], 7, "last values kept");
    s.probe(&["show", "torn"]).code_is(0).stdout_has("torn");
}

#[test]
fn gc_removes_only_what_is_dead() {
    let s = Scratch::new();
    let _live = s.writer("live", 1);
    s.writer("dead", 1).simulate_crash();
    std::fs::write(s.dir.join("junk.hps"), b"junk").unwrap();
    let stale = s.dir.join(".dead.999.abcd.tmp");
    let f = std::fs::File::create(&stale).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(f);
    let fresh = s.dir.join(".new.1000.abcd.tmp");
    std::fs::write(&fresh, b"").unwrap();
    s.probe(&["gc", "--dry-run"])
        .code_is(0)
        .stdout_has("would remove: ")
        .stdout_has("dead.hps: dead engine");
    assert!(s.dir.join("dead.hps").exists() && stale.exists());
    let run = s.probe(&["gc"]);
    run.code_is(0)
        .stdout_has("removed: ")
        .stdout_has("kept: ")
        .stdout_has("live engine")
        .stdout_has("not a valid segment");
    assert!(!s.dir.join("dead.hps").exists());
    assert!(!stale.exists());
    assert!(s.dir.join("live.hps").exists() && s.dir.join("junk.hps").exists() && fresh.exists());
    let json = s.probe(&["--json", "gc", "--dry-run"]).code_is(0).json();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .all(|e| e["action"] == "kept"),
        "{json}"
    );
}

#[test]
fn broken_pipe_is_success() {
    let s = Scratch::new();
    let _w = s.writer("e1", 64);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for args in [
        &["show"][..],
        &["list"],
        &["meta", "e1", "0"],
        &["watch", "--count", "2", "--interval", "10ms"],
    ] {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_hydra-probe"))
            .arg("--dir")
            .arg(&s.dir)
            .args(args)
            .stdout(writer.try_clone().unwrap())
            .stderr(std::process::Stdio::piped())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}");
    }
}

/// Format v1.2: with the writer's prediction the ETA is the model's (`eta_source` "model"),
/// `show` says so with its bound, the step shows its prediction, and a confident prediction
/// brings the stall floor down to 1 s; a writer without predictions gets the rate's ETA and
/// no prediction fields.
#[test]
fn meta_and_show_use_the_writers_prediction() {
    let s = Scratch::new();
    let mut w = s.predicting_writer("e1", 2);
    let now = hydra_layout::clock::monotonic_ns();
    let mut d = decode(30, 120, 3 * S, 0);
    d.step_start_ns = now;
    d.step_size = 1;
    let prediction = hydra_layout::Prediction {
        step_expected_ns: 30_000_000,
        step_start_ns: d.step_start_ns,
        task_expected_end_ns: now + 600 * S,
        phase_start_ns: d.phase_start_ns,
        error_ppm: 100_000,
    };
    w.publish_with_prediction(0, &d, &prediction).unwrap();
    w.publish(1, &decode(30, 120, 3 * S, 0)).unwrap();
    let m = s.probe(&["meta", "e1", "0"]).code_is(0).json();
    assert_eq!(m["eta_source"], "model", "{m}");
    let eta = m["eta_s"].as_f64().unwrap();
    assert!((590.0..=600.0).contains(&eta), "{m}");
    assert_eq!(m["step_expected_ms"], 30, "{m}");
    assert_eq!(m["prediction_error"], 0.1, "{m}");
    assert_eq!(m["stall_threshold_ms"], 1000, "{m}");
    // Slot 1 of the same engine has no prediction for its (absent) step: the rate.
    let m = s.probe(&["meta", "e1", "1"]).code_is(0).json();
    assert_eq!(m["eta_source"], "rate", "{m}");
    assert!(m["step_expected_ms"].is_null(), "{m}");
    assert_eq!(m["stall_threshold_ms"], 30_000, "{m}");
    s.probe(&["show", "e1"])
        .code_is(0)
        .stdout_has("model ±10%")
        .stdout_has("/30ms x1");
    drop(w);

    // A writer without a cost model: no prediction fields at all.
    let mut w = s.writer("e2", 1);
    w.publish(0, &d).unwrap();
    let m = s.probe(&["meta", "e2", "0"]).code_is(0).json();
    assert_eq!(m["eta_source"], "rate", "{m}");
    let obj = m.as_object().unwrap();
    assert!(
        !obj.contains_key("step_expected_ms") && !obj.contains_key("prediction_error"),
        "{m}"
    );
}
