//! The layer position inside a step (format v1.1), end to end: an engine process publishes
//! it after every transformer layer, and a separate `hydra-probe` process sees it move
//! inside one long prefill chunk; a compute thread stopped inside a forward (the
//! `fault-injection` hook `HYDRA_ENGINE_STALL_AT_LAYER`, test builds only) is reported as
//! stalled at that layer, and the engine as hung.

use crate::common;
use crate::support;

use hydra_fault::process::Server;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

fn scratch() -> tempfile::TempDir {
    hydra_fault::scratch("hydra-layers")
}

/// SmolLM2-135M (30 layers), one 1024-token chunk of a ~900-token prompt on one compute
/// thread: the chunk takes seconds, and a `hydra-probe watch --json` process polling every
/// 10 ms sees the layer counter move through it. Only the count of distinct positions seen
/// inside one chunk is asserted (at least 10 of the 30), not any timing.
#[test]
fn a_long_prefill_chunk_shows_its_layers_moving_to_a_separate_probe() {
    let Some(model) =
        common::real_model("a_long_prefill_chunk_shows_its_layers_moving_to_a_separate_probe")
    else {
        return;
    };
    let tmp = scratch();
    let dir = tmp.path();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.arg("serve")
        .arg("--model")
        .arg(&model)
        .args(["--engine-id", "layers", "--slots", "1", "--ctx", "2048"])
        .args([
            "--ubatch",
            "1024",
            "--threads",
            "1",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--progress-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    let engine = Server::spawn(cmd);

    let mut watch = Command::new(probe_bin())
        .args(["watch", "layers", "--json", "--interval", "10ms", "--dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start hydra-probe watch");
    let stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });

    let prompt = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(60);
    let body = serde_json::json!({ "prompt": prompt }).to_string();
    let (status, reply) = call(agent().post(&engine.url("/slots/0/prefill")), Some(&body));
    assert_eq!(status, 200, "{reply}");
    let n_prompt = reply["n_prompt_tokens"].as_u64().unwrap();
    assert!(
        (600..=1024).contains(&n_prompt),
        "one chunk of many tokens: {n_prompt}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let lines = lines.join().unwrap();

    // Positions seen per step (keyed by the step's start), with the forward's layer count.
    let mut per_step: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut totals = BTreeSet::new();
    for line in &lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let s = &v["slots"][0];
        let step = s["state"]["step_start_ns"].as_u64().unwrap_or(0);
        if let (Some(done), Some(total)) = (s["substep_done"].as_u64(), s["substep_total"].as_u64())
        {
            assert_ne!(step, 0, "a layer position outside a step: {s}");
            assert!(done >= 1 && done <= total, "{s}");
            per_step.entry(step).or_default().insert(done);
            totals.insert(total);
        }
    }
    let best = per_step.values().map(BTreeSet::len).max().unwrap_or(0);
    println!(
        "{} samples; distinct layer positions seen inside one {n_prompt}-token chunk: {best} of {:?}",
        lines.len(),
        totals
    );
    assert_eq!(totals, BTreeSet::from([30]), "SmolLM2-135M has 30 layers");
    assert!(
        best >= 10,
        "at least 10 distinct layer positions inside one chunk, saw {best}: {per_step:?}"
    );
}

/// The compute thread stops inside the forward after layer 2 of 4 (embedded model). With a
/// 1 s stall floor and a 2 s heartbeat timeout, `hydra-probe check` (another process) names
/// slot 0 stalled at layer 2 in its message and its JSON, `hydra-probe meta` gives
/// `stalled_at_layer` 2, and the engine is hung once its heartbeat is older than 2 s.
#[test]
fn a_compute_thread_stopped_inside_a_layer_is_stalled_at_that_layer_and_hung() {
    let tmp = scratch();
    let dir = tmp.path();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.args(["serve", "--builtin", "--engine-id", "stuck", "--slots", "2"])
        .args(["--threads", "1", "--listen", "127.0.0.1:0"])
        .arg("--progress-dir")
        .arg(dir)
        .env("HYDRA_ENGINE_STALL_AT_LAYER", "2")
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    let mut engine = Server::spawn(cmd);
    probe_bin(); // built before the engine is stopped
    let url = engine.url("/slots/0/prefill");
    // The request never gets its answer (the compute thread stops): fire it off and let the
    // engine's death end it.
    std::thread::spawn(move || {
        let _ = call(
            agent().post(&url),
            Some(r#"{"prompt":"stop inside a layer"}"#),
        );
    });
    let thresholds = ["--stall-floor", "1s", "--heartbeat-timeout", "2s"];
    let report = wait_for(
        Duration::from_secs(60),
        "stalled at layer 2 and hung",
        || {
            let mut args = vec!["check", "stuck", "--json"];
            args.extend(thresholds);
            let r = probe_json(dir, &args);
            let findings = r["findings"].as_array()?;
            let hung = findings.iter().any(|f| f["kind"] == "hung");
            let stalled = findings
                .iter()
                .any(|f| f["kind"] == "stalled" && f["slot"] == 0);
            (hung && stalled).then_some(r)
        },
    );
    let stalled = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "stalled")
        .unwrap();
    let message = stalled["message"].as_str().unwrap();
    assert!(
        message.contains("stalled at layer 2/4"),
        "check's message names the layer: {message}"
    );
    assert_eq!(report["status"], "CRITICAL");

    let mut args = vec!["meta", "stuck", "0"];
    args.extend(thresholds);
    let meta = probe_json(dir, &args);
    assert_eq!(meta["classification"], "stalled", "{meta}");
    assert_eq!(meta["stalled_at_layer"], 2, "{meta}");
    assert_eq!(
        (
            meta["substep_done"].as_u64(),
            meta["substep_total"].as_u64()
        ),
        (Some(2), Some(4))
    );
    assert_eq!(meta["engine_liveness"], "hung", "{meta}");
    assert!(meta["substep_age_ms"].as_u64().unwrap() > 1000, "{meta}");
    engine.kill();
}
