//! The engine's cost model seen from another process (format v1.2). The compute thread is
//! stopped inside a forward after the model has learnt from earlier ones (the test-build
//! fault hooks `HYDRA_ENGINE_STALL_AT_LAYER` and `HYDRA_ENGINE_STALL_IN_FORWARD`). While it
//! stands still, a separate `hydra-probe`, with its default thresholds only, reads the
//! writer's prediction for the step in flight, an ETA that comes from the model, and a
//! stall threshold derived from that prediction (docs/DESIGN.md §10.4); then it calls the
//! slot stalled at that layer.

use crate::support;

use hydra_fault::process::Server;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

/// Layers of the embedded model.
const LAYERS: u64 = 4;
/// Prefill chunk size of these engines.
const UBATCH: u64 = 64;

/// The engine on the embedded model, one slot, 64-token chunks, stopping at `layer` of its
/// `forward`-th forward.
fn stopping_engine(dir: &Path, id: &str, layer: u64, forward: u64) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.args(["serve", "--builtin", "--engine-id", id, "--slots", "1"])
        .args(["--ubatch", &UBATCH.to_string(), "--ctx", "4096"])
        .args(["--threads", "1", "--listen", "127.0.0.1:0"])
        .arg("--progress-dir")
        .arg(dir)
        .env("HYDRA_ENGINE_STALL_AT_LAYER", layer.to_string())
        .env("HYDRA_ENGINE_STALL_IN_FORWARD", forward.to_string())
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    Server::spawn(cmd)
}

/// Sends `body` to `path` without waiting: the answer never comes while the compute
/// thread stands still, and the engine's death ends the request.
fn fire(engine: &Server, path: &str, body: String) {
    let url = engine.url(path);
    std::thread::spawn(move || {
        let _ = hydra_fault::http::try_call(agent().post(&url), Some(&body));
    });
}

/// `hydra-probe meta ID 0` (default thresholds), parsed.
fn meta(dir: &Path, id: &str) -> Value {
    probe_json(dir, &["meta", id, "0"])
}

/// The probe's view once the compute thread stands at `layer`: that layer published and
/// nothing moving for a while.
fn stopped_at(dir: &Path, id: &str, layer: u64) -> Value {
    wait_for(
        Duration::from_secs(60),
        "the compute thread to stop",
        || {
            let m = meta(dir, id);
            let at = m["substep_done"].as_u64() == Some(layer);
            let still = m["substep_age_ms"].as_u64().is_some_and(|a| a >= 300);
            (at && still).then_some(m)
        },
    )
}

/// The writer published, in the segment, a prediction for the step in flight, the end of
/// the phase and a confidence; the probe's ETA follows the model while that end lies ahead
/// and the rate once it has passed (docs/DESIGN.md §10.4; a stopped step soon outlives it);
/// and the probe's stall threshold is the floor that confidence selects (the expected
/// layer time of these few-millisecond forwards is far below it).
fn assert_judged_by_the_prediction(dir: &Path, id: &str, m: &Value) {
    let segment = hydra_layout::SegmentReader::open_engine(dir, id).expect("open the segment");
    let slot = segment.slot(0).expect("read slot 0");
    let now = hydra_layout::clock::monotonic_ns();
    let step = slot
        .step_expected_ns()
        .unwrap_or_else(|| panic!("a prediction for the step in flight: {slot:?}"));
    let end = slot
        .phase_end_ns()
        .unwrap_or_else(|| panic!("a predicted end of the phase: {slot:?}"));
    assert!(end > slot.state.step_start_ns, "{slot:?}");
    assert_eq!(
        m["step_expected_ms"].as_u64(),
        Some(step / 1_000_000),
        "{m}"
    );
    let bound = m["prediction_error"]
        .as_f64()
        .unwrap_or_else(|| panic!("an error bound after several learnt steps: {m}"));
    assert!(bound >= 0.0, "{m}");
    let source = if now < end { "model" } else { "rate" };
    // The meta was read a moment before `now`: only a model ETA can still be in flux.
    if source == "rate" {
        assert_eq!(m["eta_source"], "rate", "the predicted end has passed: {m}");
    }
    let confident = bound <= 0.5;
    let floor = if confident { 1_000 } else { 30_000 };
    assert!(
        10 * step / LAYERS < floor * 1_000_000 / 2,
        "the embedded model's forwards are short: {m}"
    );
    assert_eq!(
        m["stall_threshold_ms"].as_u64(),
        Some(floor),
        "confident = {confident}: {m}"
    );
}

/// Waits (up to the 30 s floor of an unconfident model, and more) for the probe to call
/// the slot stalled, and checks it names the layer.
fn assert_stalls_at(dir: &Path, id: &str, layer: u64) {
    let m = wait_for(Duration::from_secs(60), "the slot to be stalled", || {
        let m = meta(dir, id);
        (m["classification"] == "stalled").then_some(m)
    });
    assert_eq!(m["stalled_at_layer"].as_u64(), Some(layer), "{m}");
}

/// A prompt of 16 chunks; the compute thread stops at layer 2 of the 8th: the model has
/// learnt 7 chunks, and predicts the 8th and the 9 left.
#[test]
fn a_prefill_stopped_after_learning_is_judged_by_the_prediction() {
    let tmp = hydra_fault::scratch("hydra-cost-model");
    let dir = tmp.path();
    let id = "stop-prefill";
    let engine = stopping_engine(dir, id, 2, 8);
    probe_bin();
    let prompt = "x".repeat(16 * UBATCH as usize);
    fire(
        &engine,
        "/slots/0/prefill",
        serde_json::json!({ "prompt": prompt }).to_string(),
    );
    let m = stopped_at(dir, id, 2);
    assert_eq!(m["phase"], "prefill", "{m}");
    assert_eq!(m["tokens_processed"].as_u64(), Some(7 * UBATCH), "{m}");
    assert_eq!(m["tokens_total"].as_u64(), Some(16 * UBATCH), "{m}");
    assert_eq!(m["step_size"].as_u64(), Some(UBATCH), "{m}");
    assert_judged_by_the_prediction(dir, id, &m);
    assert_stalls_at(dir, id, 2);
}

/// A 64-token prompt (one chunk) and 100 tokens to decode; the compute thread stops at
/// layer 3 of the 41st forward, the 40th decode step.
#[test]
fn a_decode_step_stopped_after_learning_is_judged_by_the_prediction() {
    let tmp = hydra_fault::scratch("hydra-cost-model");
    let dir = tmp.path();
    let id = "stop-decode";
    let mut engine = stopping_engine(dir, id, 3, 41);
    probe_bin();
    let prompt = "y".repeat(UBATCH as usize);
    let (status, _) = call(
        agent().post(&engine.url("/slots/0/prefill")),
        Some(&serde_json::json!({ "prompt": prompt }).to_string()),
    );
    assert_eq!(status, 200);
    fire(
        &engine,
        "/slots/0/decode",
        r#"{"n_predict":100,"ignore_eos":true}"#.to_string(),
    );
    let m = stopped_at(dir, id, 3);
    assert_eq!(m["phase"], "decode", "{m}");
    assert_eq!(m["tokens_total"].as_u64(), Some(100), "{m}");
    let done = m["tokens_processed"].as_u64().unwrap();
    assert!((38..=40).contains(&done), "39 decode steps done: {m}");
    assert_judged_by_the_prediction(dir, id, &m);
    assert_stalls_at(dir, id, 3);
    engine.kill();
}

/// What the cost model learnt survives a restart: an engine serves a prompt of 8 chunks and
/// a short generation, then shuts down (it saves its model beside its segment); the same
/// engine started again stops inside its very first forward, and that step already has a
/// prediction and the phase a predicted end, where a fresh model has nothing to say yet.
#[test]
fn the_first_step_after_a_restart_is_predicted_from_the_last_run() {
    let tmp = hydra_fault::scratch("hydra-cost-model");
    let dir = tmp.path();
    let id = "restart";
    let prompt = "z".repeat(8 * UBATCH as usize);
    // Never stops: the fault hook's forward is past anything this run does.
    let mut first = stopping_engine(dir, id, 2, 1_000_000);
    let (status, _) = call(
        agent().post(&first.url("/slots/0/prefill")),
        Some(&serde_json::json!({ "prompt": prompt }).to_string()),
    );
    assert_eq!(status, 200);
    let (status, _) = call(
        agent().post(&first.url("/slots/0/decode")),
        Some(r#"{"n_predict":16,"ignore_eos":true}"#),
    );
    assert_eq!(status, 200);
    assert!(first.terminate().success(), "a clean shutdown");
    let saved: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".cost-model-"))
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");

    let engine = stopping_engine(dir, id, 2, 1);
    probe_bin();
    fire(
        &engine,
        "/slots/0/prefill",
        serde_json::json!({ "prompt": prompt }).to_string(),
    );
    let m = stopped_at(dir, id, 2);
    assert_eq!(
        m["tokens_processed"].as_u64(),
        Some(0),
        "the first chunk: {m}"
    );
    assert!(
        m["step_expected_ms"].as_u64().is_some(),
        "the first step is predicted: {m}"
    );
    // The phase's end too (the probe's ETA follows it while it lies ahead; the stopped
    // step has outlived it here).
    let segment = hydra_layout::SegmentReader::open_engine(dir, id).expect("open the segment");
    let slot = segment.slot(0).expect("read slot 0");
    assert!(slot.phase_end_ns().is_some(), "a predicted end: {slot:?}");
}
