//! The real thing: `llama-server` of both llama.cpp API generations (built by
//! `scripts/llama-cpp.sh build` and `legacy-build`, cached outside the repository): 0c1e570
//! (`llama_process` and the extended batch) and the one that `llama-cpp-python==0.3.16`
//! vendors (`llama_decode(ctx, llama_batch)` and `llama_memory_seq_rm`, the Hydra fork's
//! generation). Each runs the real SmolLM2-135M GGUF (30 layers), `-np 2`, with
//! `LD_PRELOAD=libhydra_preload.so`, watched by separate `hydra-probe` and
//! `hydra-exporter` processes.
//!
//! Fails when llama.cpp or the model is unavailable, unless HYDRA_ALLOW_SKIP=1.

mod common;

use common::llama::*;

use hydra_fault::{process, process::Server};
use hydra_layout::Phase;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// Tokens of the long generation: 1,000, or `HYDRA_PRELOAD_TEST_N_PREDICT` on a machine
/// too loaded to decode that many within the deadlines.
fn n_predict() -> u32 {
    std::env::var("HYDRA_PRELOAD_TEST_N_PREDICT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 8)
        .unwrap_or(1000)
}

on_both_builds! {
    publishes_progress:
        llama_server_publishes_progress_through_the_preload,
        legacy_llama_server_publishes_progress_through_the_preload;
    identical_text:
        completion_text_is_identical_with_and_without_the_preload,
        legacy_completion_text_is_identical_with_and_without_the_preload;
    layers_move:
        layer_positions_move_inside_a_long_prompt,
        legacy_layer_positions_move_inside_a_long_prompt;
    stalled_at_layer:
        a_compute_stopped_inside_a_layer_is_stalled_at_that_layer,
        legacy_a_compute_stopped_inside_a_layer_is_stalled_at_that_layer;
}

/// One probe sample of a slot: (task id, phase, work done, classification).
fn sample(dir: &Path, slot: usize) -> Option<(u64, String, u64, String, serde_json::Value)> {
    let (code, out) = common::run_probe(dir, &["meta", ENGINE, &slot.to_string()]);
    let m: serde_json::Value = serde_json::from_str(&out).ok()?;
    (code == 0 || m.get("phase").is_some()).then(|| {
        (
            m["task_id"].as_u64().unwrap_or(0),
            m["phase"].as_str().unwrap_or("").to_owned(),
            m["work_done"].as_u64().unwrap_or(0),
            m["classification"].as_str().unwrap_or("").to_owned(),
            m,
        )
    })
}

/// Watches `slot` with hydra-probe while `work` runs in a thread: work done of the task
/// in `phase` never goes down, rises at least `min_rises` times, and every sample of that
/// phase is classified progressing; the other slot stays idle. Returns `work`'s result and
/// the last work done seen in `phase`.
fn watch<T: Send + 'static>(
    dir: &Path,
    slot: usize,
    phase: &str,
    min_rises: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> (T, u64) {
    let handle = std::thread::spawn(work);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut last: Option<(u64, u64)> = None;
    let mut rises = 0;
    let mut samples = 0;
    while !handle.is_finished() {
        assert!(
            Instant::now() < deadline,
            "request did not finish in 1800 s"
        );
        if let Some((task, ph, done, class, m)) = sample(dir, slot) {
            if ph == phase {
                samples += 1;
                assert!(
                    class == "progressing" || slow_by_its_prediction(&m),
                    "slot {slot} in {phase}: {m}"
                );
                assert_eq!(m["work_total"], 0, "totals are unknown: {m}");
                assert_eq!(m["tokens_total"], 0, "{m}");
                if ph == "decode" {
                    assert!(
                        m["substep_done"].is_null() && m["substep_total"].is_null(),
                        "decode steps are never armed: no layer position: {m}"
                    );
                } else if !m["substep_total"].is_null() {
                    assert_eq!(m["substep_total"], N_LAYER, "{m}");
                }
                if let Some((t, d)) = last {
                    if t == task {
                        assert!(done >= d, "work done went down {d} -> {done}: {m}");
                        if done > d {
                            rises += 1;
                        }
                    }
                }
                last = Some((task, done));
            }
            // The other slot does no work of ours: idle, or saved by the host itself
            // (0c1e570's llama-server copies an idle slot's prompt into its RAM prompt
            // cache, through llama_state_seq_get_data, when another slot takes a task).
            let other = sample(dir, 1 - slot).expect("other slot");
            assert!(
                other.1 == "idle" || other.1 == "save",
                "the other slot is not touched: {}",
                other.4
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = handle.join().expect("request thread");
    assert!(
        rises >= min_rises,
        "slot {slot}: {rises} rises in {samples} samples of {phase} (want >= {min_rises})"
    );
    (out, last.map_or(0, |l| l.1))
}

/// Whether a sample classified *slow* is so by the preload's own step prediction: the step
/// in flight has run past 4 times its prediction and past 500 ms (the probe's rule,
/// `docs/DESIGN.md` §10.4). On a machine loaded by other work a decode step of a few tens
/// of ms is now and then descheduled for longer than that: a true verdict, not a false one.
fn slow_by_its_prediction(m: &serde_json::Value) -> bool {
    let (Some(age), Some(expected)) = (m["step_age_ms"].as_u64(), m["step_expected_ms"].as_u64())
    else {
        return false;
    };
    m["classification"] == "slow" && age >= 500 && age >= 4 * expected
}

/// Waits until `slot` is idle (the server stopped decoding it).
fn wait_idle(dir: &Path, slot: usize) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((_, ph, _, class, m)) = sample(dir, slot) {
            if ph == "idle" && class == "idle" {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "slot {slot} not idle after the request: {m}"
            );
        }
        assert!(Instant::now() < deadline, "no meta for slot {slot}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The exporter's `/slots/{slot}/state/meta`, parsed as Hydra's meta (hydra-probe's
/// `HydraMeta`).
fn exporter_meta(exporter: &Server, slot: usize) -> hydra_probe::HydraMeta {
    agent()
        .get(&exporter.url(&format!("/slots/{slot}/state/meta")))
        .call()
        .expect("exporter meta")
        .into_json()
        .expect("Hydra meta JSON")
}

/// While `gen` decodes on `slot` (after at least 20 tokens), a separate reader sees a
/// decode step in flight with the preload's step prediction (format v1.2), and no task end.
fn decode_steps_are_predicted<T>(dir: &Path, slot: usize, gen: &std::thread::JoinHandle<T>) {
    let r = hydra_layout::SegmentReader::open_engine(dir, ENGINE).expect("segment");
    assert!(r.identity().publishes_predictions(), "STEP_PREDICTION");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (state, expected) = loop {
        let snap = r.slot(slot).expect("slot");
        if let (Phase::Decode, Some(e)) = (snap.state.phase, snap.step_expected_ns()) {
            let p = snap.prediction.expect("prediction words");
            assert_eq!(p.task_expected_end_ns, 0, "the task end stays unknown");
            break (snap.state, e);
        }
        assert!(
            Instant::now() < deadline && !gen.is_finished(),
            "no predicted decode step seen on slot {slot}: {snap:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    // A decode step of SmolLM2-135M on 2 threads takes milliseconds, not seconds.
    assert!(
        (10_000..5_000_000_000).contains(&expected),
        "{expected} ns predicted for a decode step: {state:?}"
    );
}

/// The segment: one slot per sequence (`-np 2`), the server's pid, the model's own
/// strings.
fn segment_names_the_model(dir: &Path, server: &LlamaServer) {
    let header = {
        let r = hydra_layout::SegmentReader::open_engine(dir, ENGINE)
            .unwrap_or_else(|e| panic!("no segment ({e}):\n{}", server.log_tail()));
        assert_eq!(r.slot_count(), 2, "-np 2");
        assert_eq!(r.identity().pid, u64::from(server.pid()));
        r.identity().description.clone()
    };
    assert!(
        header.model_name.to_lowercase().contains("smollm2"),
        "{header:?}"
    );
    assert_eq!(header.tokenizer, "gpt2", "{header:?}");
}

/// A 1,000-token generation (`n_predict()`) on slot 1 (= sequence 1), watched decoding;
/// afterwards the slot is idle, completed, and the exporter's meta (parsed as hydra-probe's
/// `HydraMeta`) says so with the model's name. Returns the tokens generated.
fn long_generation(dir: &Path, server: &LlamaServer, exporter: &Server) -> u32 {
    let base = server.base.clone();
    let n = n_predict();
    let (res, _) = watch(dir, 1, "decode", (n as usize / 4).min(20), move || {
        complete(&base, request("Once upon a time", n, 1))
    });
    let res = res.expect("long completion");
    assert_eq!(res["tokens_predicted"], n, "{res}");
    let m = wait_idle(dir, 1);
    assert!(m["n_past"].as_u64().unwrap() >= u64::from(n), "{m}");
    assert_eq!(m["finish_reason"], "completed", "{m}");

    // The exporter's meta, in Hydra's shape (parsed as hydra-probe's HydraMeta).
    let meta = exporter_meta(exporter, 1);
    assert_eq!((meta.slot_id, meta.engine_id.as_str()), (1, ENGINE));
    assert_eq!(
        (meta.operation.as_str(), meta.is_processing),
        ("idle", false)
    );
    assert!(
        meta.n_past >= u64::from(n) && meta.model_name.to_lowercase().contains("smollm2"),
        "{meta:?}"
    );
    n
}

/// A ~3,000-token prompt on slot 0: prefill in 512-token chunks, watched progressing.
/// Returns the prompt's tokens.
fn chunked_prefill(dir: &Path, server: &LlamaServer) -> u64 {
    let base = server.base.clone();
    let (res, seen) = watch(dir, 0, "prefill", 2, move || {
        complete(&base, request(&long_prompt(), 1, 0))
    });
    let res = res.expect("3,000-token prompt");
    let n_prompt = res["tokens_evaluated"].as_u64().expect("tokens_evaluated");
    assert!(
        (2500..4000).contains(&n_prompt),
        "prompt of {n_prompt} tokens"
    );
    assert!(seen >= 512, "prefill progress seen up to {seen}");
    let m = wait_idle(dir, 0);
    assert!(m["n_past"].as_u64().unwrap() >= n_prompt, "{m}");
    n_prompt
}

fn publishes_progress(test: &str, gen: Gen) {
    let Some((_serial, prefix, model, so)) = prerequisites(test, gen) else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("segments");
    let mut server = LlamaServer::start(&prefix, &model, scratch.path(), &Launch::preloaded(&so));

    segment_names_the_model(&dir, &server);
    wait_idle(&dir, 0);
    wait_idle(&dir, 1);
    let exporter = process::start_exporter(&dir, &[]);

    let n = long_generation(&dir, &server, &exporter);
    let n_prompt = chunked_prefill(&dir, &server);
    assert_statistics(&dir, n, n_prompt);

    // During a decode: the exporter and the probe agree the total is unknown.
    let base = server.base.clone();
    let gen = std::thread::spawn(move || complete(&base, request("Once upon a time", 1000, 1)));
    // (1,000 tokens: far more than the kill below lets it decode.)
    let deadline = Instant::now() + Duration::from_secs(300);
    let during = loop {
        if let Some((_, ph, done, _, m)) = sample(&dir, 1) {
            if ph == "decode" && done >= 20 {
                break m;
            }
        }
        assert!(
            Instant::now() < deadline && !gen.is_finished(),
            "no decode seen on slot 1"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    decode_steps_are_predicted(&dir, 1, &gen);
    let live = exporter_meta(&exporter, 1);
    assert_eq!(
        (
            live.operation.as_str(),
            live.is_processing,
            live.tokens_total
        ),
        ("decode", true, 0),
        "{live:?}"
    );
    assert!(live.tokens_processed >= 20, "{live:?}");
    let (_, show) = common::run_probe(&dir, &["show", ENGINE, "--slot", "1", "--json"]);
    assert!(
        show.contains("\"progress\":null"),
        "unknown progress is null in show --json: {show}"
    );

    let before = during["work_done"].as_u64().unwrap();
    kill_mid_decode(&mut server, &dir, gen, before);
    drop(exporter);
}

/// kill -9 while slot 1 decodes (`before` tokens done when last seen): the engine reads
/// dead, the slot orphaned in decode with its last progress kept, and `check` is critical.
fn kill_mid_decode<T>(
    server: &mut LlamaServer,
    dir: &Path,
    gen: std::thread::JoinHandle<T>,
    before: u64,
) {
    server.kill9();
    let _ = gen.join().expect("request thread");
    let (_, _, done, class, m) = sample(dir, 1).expect("meta after the kill");
    assert_eq!(m["engine_liveness"], "dead", "{m}");
    assert_eq!(class, "orphaned", "{m}");
    assert_eq!(m["phase"], "decode", "{m}");
    assert!(done >= before, "last progress kept: {done} < {before}");
    let (code, out) = common::run_probe(dir, &["check", ENGINE]);
    assert_eq!(code, 2, "check is critical after the kill: {out}");
}

/// The statistics the preload keeps (format v1.3, FORMAT §17.8) after a generation of `n`
/// tokens on slot 1 and a prompt of `n_prompt` tokens on slot 0: step and inter-token
/// histograms filled, time to first token and end-to-end time from the prompt's start,
/// queue wait and finish causes absent; slot 0's flight recorder holds the prompt's last
/// ubatches.
fn assert_statistics(dir: &Path, n: u32, n_prompt: u64) {
    use hydra_layout::stats::{Counter, HistogramKind};
    let r = hydra_layout::SegmentReader::open_engine(dir, ENGINE).expect("segment");
    let s = hydra_probe::StatsSum::capture(&r, None).expect("statistics");
    assert!(s.published && s.left_out.is_empty(), "{s:?}");
    let count = |kind| s.histogram(kind).map(|h| h.count);
    // The generation's decode steps, one token each (its first token came from its
    // prompt's logits).
    assert!(count(HistogramKind::Itl) >= Some(u64::from(n) - 1), "{s:?}");
    assert!(
        count(HistogramKind::StepDecode) >= Some(u64::from(n) - 1),
        "{s:?}"
    );
    assert!(count(HistogramKind::StepPrefill) >= Some(2), "{s:?}");
    assert!(
        count(HistogramKind::RatioDecode) >= Some(u64::from(n) / 2),
        "{s:?}"
    );
    // From the prompt's start: the generation had its first token and ended.
    assert!(count(HistogramKind::Ttft) >= Some(1), "{s:?}");
    assert!(count(HistogramKind::E2e) >= Some(1), "{s:?}");
    assert!(
        s.counter(Counter::PromptTokensComputed) >= Some(n_prompt),
        "{s:?}"
    );
    // Never seen by llama.cpp: absent, not zero.
    assert_eq!(count(HistogramKind::QueueWait), None, "{s:?}");
    assert_eq!((s.tasks_by_cause, s.errors_by_code), (None, None), "{s:?}");
    // Slot 0's ring: the prompt's ubatches, the last of them last.
    let ring = r.history(0).expect("ring").expect("a flight recorder");
    let last = ring.entries.last().expect("an entry");
    assert_eq!(last.kind, Phase::Prefill, "{last:?}");
    let prefill = ring.entries.iter().filter(|e| e.kind == Phase::Prefill);
    let tokens: u64 = prefill.map(|e| e.size).sum();
    assert!(
        tokens >= n_prompt.min(64 * 512) / 2,
        "{tokens} prompt tokens in the ring: {ring:?}"
    );
}

/// The same greedy completions with and without the preload; a prompt of several
/// 512-token calls among them, so armed ubatches (the layer callback) are compared too.
fn identical_text(test: &str, gen: Gen) {
    let Some((_serial, prefix, model, so)) = prerequisites(test, gen) else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut texts = vec![];
    for preload in [None, Some(so.as_path())] {
        let launch = Launch {
            preload,
            ..Launch::preloaded(&so)
        };
        let server = LlamaServer::start(&prefix, &model, scratch.path(), &launch);
        let mut r = vec![];
        let medium = prose(40);
        for (prompt, slot) in [
            ("Once upon a time", 0),
            ("The capital of France is", 1),
            (medium.as_str(), 0),
        ] {
            let res = complete(&server.base, request(prompt, 32, slot)).expect("completion");
            r.push(res["content"].as_str().expect("content").to_owned());
        }
        texts.push(r);
        let published = scratch
            .path()
            .join("segments")
            .join(format!("{ENGINE}.hps"))
            .exists();
        assert_eq!(
            published,
            preload.is_some(),
            "a segment exactly when preloaded"
        );
    }
    assert!(!texts[0][0].is_empty());
    assert_eq!(
        texts[0], texts[1],
        "llama-server's text changed under the preload"
    );
}

/// One probe sample of slot 0's position: (task, phase, tokens done, layer position, meta).
type Position = (u64, String, u64, Option<(u64, u64)>, serde_json::Value);

fn position(dir: &Path) -> Option<Position> {
    let (_, _, _, _, m) = sample(dir, 0)?;
    let layer = match (m["substep_done"].as_u64(), m["substep_total"].as_u64()) {
        (Some(d), Some(t)) => Some((d, t)),
        _ => None,
    };
    Some((
        m["task_id"].as_u64().unwrap_or(0),
        m["phase"].as_str().unwrap_or("").to_owned(),
        m["work_done"].as_u64().unwrap_or(0),
        layer,
        m,
    ))
}

/// With the server's default batch sizes (2,048-token calls of 512-token ubatches), a
/// separate hydra-probe sampling a ~4,000-token prompt every 50 ms sees, within 3 s, at
/// least 5 distinct (tokens, layer) positions, and over the prompt at least 10 distinct
/// layers of 30; the position never goes back. A generation afterwards shows no layer
/// position in any decode step.
/// What the samples of slot 0's position during a prefill saw.
#[derive(Default)]
struct Positions {
    /// Samples of the prefill.
    samples: usize,
    /// The distinct (tokens done, layers done) in its first 3 s.
    in_window: BTreeSet<(u64, u64)>,
    /// The distinct layer positions.
    layers: BTreeSet<u64>,
    /// The step sizes of the samples with a layer position.
    step_sizes: BTreeSet<u64>,
}

/// Samples slot 0's position every 50 ms while `work` runs (at most 1,800 s): within the
/// first prefill task seen, (tokens done, layers done) never goes back, and every layer
/// position is of the model's `N_LAYER`.
fn watch_positions<T>(dir: &Path, work: &std::thread::JoinHandle<T>) -> Positions {
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut p = Positions::default();
    let mut task = None;
    let mut last: Option<(u64, u64)> = None;
    let mut window: Option<Instant> = None;
    while !work.is_finished() {
        assert!(Instant::now() < deadline, "prompt not done in 1800 s");
        if let Some((t, ph, done, layer, m)) = position(dir) {
            if ph == "prefill" && task.is_none_or(|x| x == t) {
                task = Some(t);
                p.samples += 1;
                let here = (done, layer.map_or(0, |l| l.0));
                if let Some(before) = last {
                    assert!(here >= before, "went back {before:?} -> {here:?}: {m}");
                }
                last = Some(here);
                if let Some((d, total)) = layer {
                    assert_eq!(total, N_LAYER, "{m}");
                    assert!(d <= total, "{m}");
                    p.layers.insert(d);
                    p.step_sizes.insert(m["step_size"].as_u64().unwrap_or(0));
                }
                let start = *window.get_or_insert_with(Instant::now);
                if start.elapsed() <= Duration::from_secs(3) {
                    p.in_window.insert(here);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

fn layers_move(test: &str, gen: Gen) {
    let Some((_serial, prefix, model, so)) = prerequisites(test, gen) else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("segments");
    let launch = Launch {
        small_batches: false,
        ..Launch::preloaded(&so)
    };
    let server = LlamaServer::start(&prefix, &model, scratch.path(), &launch);
    {
        let r = hydra_layout::SegmentReader::open_engine(&dir, ENGINE)
            .unwrap_or_else(|e| panic!("no segment ({e}):\n{}", server.log_tail()));
        assert!(
            r.identity().publishes_substeps(),
            "LAYER_PROGRESS: the scheduler's symbols resolved"
        );
    }
    wait_idle(&dir, 0);

    let base = server.base.clone();
    let prompt = prose(220);
    let work = std::thread::spawn(move || complete(&base, request(&prompt, 1, 0)));
    let Positions {
        samples,
        in_window,
        layers,
        step_sizes,
    } = watch_positions(&dir, &work);
    let res = work
        .join()
        .expect("request thread")
        .expect("4,000-token prompt");
    let n_prompt = res["tokens_evaluated"].as_u64().expect("tokens_evaluated");
    assert!(
        (3500..4500).contains(&n_prompt),
        "prompt of {n_prompt} tokens"
    );
    assert!(
        step_sizes.contains(&2048) && step_sizes.iter().all(|&n| n <= 2048),
        "each call's tokens are its step's extent (2,048 at most, -b 2048): {step_sizes:?}"
    );
    assert!(
        in_window.len() >= 5,
        "{} distinct positions in the first 3 s ({samples} samples): {in_window:?}",
        in_window.len()
    );
    assert!(
        layers.len() >= 10,
        "{} distinct layer positions: {layers:?}",
        layers.len()
    );
    wait_idle(&dir, 0);

    // Decode steps are never armed: no sample of one shows a layer position.
    let base = server.base.clone();
    let (res, _) = watch(&dir, 1, "decode", 4, move || {
        complete(&base, request("Once upon a time", 48, 1))
    });
    assert_eq!(res.expect("generation")["tokens_predicted"], 48);
}

/// The test-hooks library (its log of every graph of a tracked call, and its stall fault
/// after layer 7): a short prompt and 24 decode steps arm nothing (counted in the log);
/// then a ~700-token prompt is armed and stops inside layer 8, and `hydra-probe check`
/// (another process) says slot 0 is stalled at layer 7/30 and exits 2.
/// A generation of 24 tokens: every decode step's graph is logged (in `log`), and no
/// step of a short prompt or of a generation is armed.
fn short_work_is_never_armed(server: &LlamaServer, log: &Path) {
    let res = complete(&server.base, request("Once upon a time", 24, 1)).expect("generation");
    assert_eq!(res["tokens_predicted"], 24);
    let lines = std::fs::read_to_string(log).unwrap_or_default();
    let plans: Vec<(&str, u64)> = lines
        .lines()
        .filter_map(|l| {
            let (plan, n) = l.split_once(' ')?;
            Some((plan, n.parse().ok()?))
        })
        .collect();
    let decodes = plans.iter().filter(|(_, n)| *n == 1).count();
    assert!(
        decodes >= 23,
        "every decode step's graph is logged: {lines}"
    );
    assert!(
        plans.iter().all(|(plan, _)| *plan != "Arm"),
        "no step of a short prompt or a generation is armed: {lines}"
    );
}

/// `hydra-probe check` (stall floor 1 s) until it finds slot 0 stalled at a layer, at most
/// 600 s: its exit code and its JSON report.
fn wait_stalled_at_layer(dir: &Path, server: &LlamaServer) -> (i32, serde_json::Value) {
    let thresholds = ["--stall-floor", "1s", "--json"];
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut args = vec!["check", ENGINE];
        args.extend(thresholds);
        let (code, out) = common::run_probe(dir, &args);
        let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let stalled = report["findings"].as_array().is_some_and(|f| {
            f.iter().any(|f| {
                f["kind"] == "stalled"
                    && f["slot"] == 0
                    && f["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("stalled at layer"))
            })
        });
        if stalled {
            break (code, report);
        }
        assert!(
            Instant::now() < deadline,
            "never stalled at a layer: {out}\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stalled_at_layer(test: &str, gen: Gen) {
    let Some((_serial, prefix, model, _)) = prerequisites(test, gen) else {
        return;
    };
    let so = common::preload_so_with_test_hooks();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("segments");
    let log = scratch.path().join("hooks.log");
    let launch = Launch {
        env: vec![
            ("HYDRA_PRELOAD_TEST_LOG", log.to_string_lossy().into_owned()),
            ("HYDRA_PRELOAD_TEST_STALL_AT_LAYER", "7".into()),
            ("HYDRA_PRELOAD_TEST_STALL_S", "300".into()),
        ],
        ..Launch::preloaded(&so)
    };
    let server = LlamaServer::start(&prefix, &model, scratch.path(), &launch);

    short_work_is_never_armed(&server, &log);

    let base = server.base.clone();
    let _stuck = std::thread::spawn(move || complete(&base, request(&prose(40), 1, 0)));
    let (code, report) = wait_stalled_at_layer(&dir, &server);
    assert_eq!(code, 2, "check is critical: {report}");
    let message = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "stalled")
        .and_then(|f| f["message"].as_str())
        .unwrap()
        .to_owned();
    assert!(
        message.contains(&format!("stalled at layer 7/{N_LAYER}")),
        "check names the layer: {message}"
    );
    let lines = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(lines.contains("stalled 7"), "{lines}");
    assert!(
        lines
            .lines()
            .filter(|l| l.starts_with("Arm "))
            .all(|l| l["Arm ".len()..].parse::<u64>().is_ok_and(|n| n >= 64)),
        "only calls of at least 64 tokens are armed: {lines}"
    );
    drop(server);
}
