//! The engine as a separate process: progress readable from other processes while the
//! single compute thread is busy, crash and restart, bad input, clean shutdown.

use crate::support;

use hydra_layout::{clock, Phase, SegmentReader};
use hydra_probe::{EngineView, SlotClass, Thresholds};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hydra-engine-test")
        .tempdir()
        .expect("tempdir")
}

fn probe_meta(dir: &std::path::Path, id: &str, slot: usize) -> serde_json::Value {
    let out =
        hydra_fault::process::stdout_of(Command::new(probe_bin()).arg("--dir").arg(dir).args([
            "meta",
            id,
            &slot.to_string(),
        ]));
    serde_json::from_slice(&out).expect("meta JSON")
}

/// The answer to a decode run in a background thread, and the instant it arrived.
type DecodeAnswer = std::thread::JoinHandle<(u16, serde_json::Value, Instant)>;

/// Starts a decode of 3,500 tokens on `slot` in a background thread (after a short
/// prefill) and waits until the segment shows it decoding; returns the thread and the
/// reader that saw it.
fn long_decode(e: &Engine, slot: usize) -> (DecodeAnswer, SegmentReader) {
    let (status, body) = post(
        e,
        &format!("/slots/{slot}/prefill"),
        r#"{"prompt":"Once upon a time"}"#,
    );
    assert_eq!(status, 200, "prefill: {body}");
    let url = e.url(&format!("/slots/{slot}/decode"));
    let body = r#"{"n_predict":3500,"ignore_eos":true}"#;
    let decode = std::thread::spawn(move || {
        let (status, json) = call(agent().post(&url), Some(body));
        (status, json, Instant::now())
    });
    let reader = SegmentReader::open(e.segment()).expect("open segment");
    wait_for(
        Duration::from_secs(30),
        "the slot to enter its phase",
        || {
            let s = reader.slot(slot).ok()?;
            (s.state.phase == Phase::Decode && s.state.work_done > 0).then_some(())
        },
    );
    (decode, reader)
}

#[test]
fn progress_is_readable_from_other_processes_while_decoding() {
    let e = Engine::in_scratch("busy", &["--slots", "2", "--ctx", "4096"]);
    probe_bin(); // build before the clock starts
    let (decode, _) = long_decode(&e, 0);

    // The old way waits behind the decode; started now, it must not answer before the
    // decode has finished.
    let queued = {
        let url = e.url("/slots/0/state/meta?via=queue");
        std::thread::spawn(move || {
            let (status, body) = call(agent().get(&url), None);
            (status, body, Instant::now())
        })
    };

    let mut seen = Vec::new();
    let mut http_answers = 0;
    for i in 0..60 {
        let meta = probe_meta(&e.dir, "busy", 0);
        let done = meta["tokens_processed"].as_u64().expect("tokens_processed");
        if meta["operation"] == "decode" {
            seen.push(done);
        }
        if i % 10 == 0 {
            let (status, body) = get(&e, "/slots/0/state/meta");
            assert_eq!(status, 200, "{body}");
            assert!(body["tokens_processed"].is_u64());
            http_answers += 1;
        }
    }
    let (status, result, decode_done) = decode.join().expect("decode thread");
    assert_eq!(status, 200, "decode: {result}");
    assert_eq!(result["tokens"].as_array().map(Vec::len), Some(3500));
    assert!(
        seen.len() >= 50,
        "only {} of 60 meta answers were taken during the decode",
        seen.len()
    );
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "tokens_processed went backwards: {seen:?}"
    );
    assert!(
        seen.last() > seen.first(),
        "no progress seen across the run: {seen:?}"
    );
    assert_eq!(http_answers, 6);

    let (status, body, answered) = queued.join().expect("queued meta thread");
    assert_eq!(status, 200, "{body}");
    assert!(
        answered + Duration::from_millis(50) >= decode_done,
        "the queue answered before the decode it waited behind was over"
    );
    // After the decode, the queue's answer is the idle slot.
    assert_eq!(body["operation"], "idle");
}

#[test]
fn prefill_progress_moves_chunk_by_chunk() {
    let e = Engine::in_scratch(
        "chunks",
        &["--slots", "1", "--ctx", "4096", "--ubatch", "16"],
    );
    let reader = SegmentReader::open(e.segment()).expect("open segment");
    let prompt = "x".repeat(3000);
    let url = e.url("/slots/0/prefill");
    let body = serde_json::json!({ "prompt": prompt }).to_string();
    let req = std::thread::spawn(move || call(agent().post(&url), Some(&body)));
    let mut values = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !req.is_finished() && Instant::now() < deadline {
        if let Ok(s) = reader.slot(0) {
            if s.state.phase == Phase::Prefill {
                values.insert(s.state.work_done);
                assert!(s.state.work_total >= 3000);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (status, body) = req.join().expect("prefill thread");
    assert_eq!(status, 200, "{body}");
    assert!(
        values.len() >= 5,
        "only {} distinct prefill progress values: {values:?}",
        values.len()
    );
    assert!(
        values.iter().all(|v| v % 16 == 0 || *v > 2990),
        "work_done moves in ubatch steps: {values:?}"
    );
}

#[test]
fn killed_engine_is_dead_with_the_slot_orphaned_and_its_id_can_be_reused() {
    let mut e = Engine::in_scratch("crashy", &["--slots", "2", "--ctx", "4096"]);
    let (decode, reader) = long_decode(&e, 1);
    let before = reader.slot(1).expect("slot").state.work_done;
    e.kill();
    let _ = decode.join();

    let view = EngineView::capture(&reader, clock::monotonic_ns(), &Thresholds::default())
        .expect("capture");
    assert_eq!(view.health.as_str(), "dead");
    assert_eq!(view.slots[1].class, SlotClass::Orphaned);
    assert_eq!(view.slots[1].state.phase, Phase::Decode, "last phase kept");
    assert!(
        view.slots[1].state.work_done >= before,
        "last progress kept"
    );
    let meta = probe_meta(&e.dir, "crashy", 1);
    assert_eq!(meta["engine_liveness"], "dead");
    assert_eq!(meta["classification"], "orphaned");
    assert!(meta["tokens_processed"].as_u64().unwrap() >= before);

    let e2 = Engine::start(&e.dir, "crashy", &["--slots", "2"]);
    let (status, _) = get(&e2, "/health");
    assert_eq!(status, 200);
    let fresh = SegmentReader::open(e2.segment()).expect("new segment");
    assert_ne!(fresh.identity().instance_id, reader.identity().instance_id);
    assert_eq!(fresh.identity().pid, u64::from(e2.pid()));
    assert_eq!(fresh.liveness().unwrap().as_str(), "live");
    let (status, body) = post(&e2, "/completion", r#"{"prompt":"hi","n_predict":4}"#);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn pool_use_is_an_option_with_a_clear_error() {
    let tmp = scratch();
    let (code, err) = serve_refused(tmp.path(), &["--pool-use", "sometimes"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("expected adaptive, always or never"), "{err}");
    // Each policy serves; `never` keeps decode on the compute thread.
    for policy in ["never", "always"] {
        let e = Engine::start(tmp.path(), policy, &["--slots", "1", "--pool-use", policy]);
        let (status, body) = post(&e, "/completion", r#"{"prompt":"hi","n_predict":4}"#);
        assert_eq!(status, 200, "{policy}: {body}");
    }
}

#[test]
fn a_second_engine_with_a_live_id_is_refused() {
    let e = Engine::in_scratch("twin", &["--slots", "1"]);
    let args = ["--engine-id", "twin", "--listen", "127.0.0.1:0"];
    let (_, err) = serve_refused(&e.dir, &args);
    assert!(err.contains("in use by a live engine"), "{err}");
}

#[test]
fn bad_input_gets_4xx_and_the_engine_keeps_serving() {
    let e = Engine::in_scratch(
        "strict",
        &["--slots", "2", "--ctx", "256", "--max-body", "65536"],
    );
    let text = |b: &str| Some(b.to_string());
    let prompt_of =
        |c: &str, n: usize| text(&serde_json::json!({"prompt": c.repeat(n)}).to_string());
    // One refused request a row: "METHOD path", body, status, error code.
    #[rustfmt::skip]
    let cases: [(&str, Option<String>, u16, &str); 14] = [
        ("POST /slots/9/prefill",                       text(r#"{"prompt":"a"}"#),           404, "unknown_slot"),
        ("POST /slots/abc/prefill",                     text(r#"{"prompt":"a"}"#),           400, "bad_request"),
        ("POST /slots/0/prefill",                       text("{not json"),                   400, "invalid_json"),
        ("POST /slots/0/prefill",                       text(r#"{"prompt":"a","bogus":1}"#), 400, "invalid_json"),
        ("POST /slots/0/prefill",                       text(r#"{}"#),                       400, "bad_request"),
        ("POST /slots/0/prefill",                       text(r#"{"tokens":[1,99999]}"#),     400, "bad_request"),
        ("POST /slots/0/prefill",                       prompt_of("y", 300),                 422, "context_overflow"),
        ("POST /slots/0/prefill",                       prompt_of("z", 100_000),             413, "payload_too_large"),
        ("POST /slots/1/decode",                        text(r#"{"n_predict":4}"#),          409, "empty_slot"),
        ("POST /slots/0/decode",                        text(r#"{"n_predict":4,"temperature":-1}"#), 400, "bad_request"),
        ("PUT /slots/0/state",                          text("garbage state bytes"),         422, "state_rejected"),
        ("POST /slots/0?action=explode",                None,                                400, "bad_request"),
        ("GET /slots/0/state/meta?via=carrier-pigeon",  None,                                400, "bad_request"),
        ("GET /no/such/route",                          None,                                404, "not_found"),
    ];
    for (route, body, want_status, want_code) in cases {
        let (method, path) = route.split_once(' ').expect("METHOD path");
        let req = agent().request(method, &e.url(path));
        match hydra_fault::http::try_call(req, body.as_deref()) {
            Ok((status, json)) => {
                assert_eq!(status, want_status, "{method} {path}: {json}");
                assert_eq!(json["error"]["code"], want_code, "{method} {path}: {json}");
                assert!(json["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()));
            }
            // A body really sent past the limit: the server answers 413 as soon as the
            // limit is passed and closes, so the client, still writing, may see a broken
            // pipe instead of the answer (as the fault suite's api_abuse allows).
            Err(t) if want_code == "payload_too_large" => {
                println!("{method} {path}: the connection closed before the 413 was read: {t}");
            }
            Err(t) => panic!("{method} {path}: transport error: {t}"),
        }
        // The next valid request succeeds.
        let (status, json) = post(&e, "/slots/0/prefill", r#"{"prompt":"ok"}"#);
        assert_eq!(status, 200, "after {method} {path}: {json}");
        let (status, _) = post(&e, "/slots/0?action=erase", "");
        assert_eq!(status, 200);
    }
    // A state from another model (a different builtin context does not change the model,
    // so forge one by flipping the fingerprint bytes of a real state).
    let (status, _) = post(&e, "/slots/0/prefill", r#"{"prompt":"state"}"#);
    assert_eq!(status, 200);
    let mut state = Vec::new();
    let resp = agent().get(&e.url("/slots/0/state")).call().expect("save");
    let declared: usize = resp.header("Content-Length").unwrap().parse().unwrap();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut state).unwrap();
    assert_eq!(state.len(), declared);
    state[16] ^= 0xff; // model fingerprint (kv_state header offset 16)
    let resp = agent().put(&e.url("/slots/1/state")).send_bytes(&state);
    let Err(ureq::Error::Status(422, r)) = resp else {
        panic!("foreign state accepted")
    };
    let json: serde_json::Value = r.into_json().unwrap();
    assert_eq!(json["error"]["code"], "state_rejected");
    let (status, _) = get(&e, "/health");
    assert_eq!(status, 200);
}

#[test]
fn state_saved_from_one_slot_restores_into_another_and_continues_identically() {
    let e = Engine::in_scratch("saver", &["--slots", "2", "--ctx", "1024"]);
    let (status, _) = post(
        &e,
        "/slots/0/prefill",
        r#"{"prompt":"The same story, twice: "}"#,
    );
    assert_eq!(status, 200);
    let resp = agent().get(&e.url("/slots/0/state")).call().expect("save");
    let mut state = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut state).unwrap();
    let (status, body) = call(agent().put(&e.url("/slots/1/state")), None);
    assert_eq!(status, 400, "an empty restore body is refused: {body}");
    agent()
        .put(&e.url("/slots/1/state"))
        .send_bytes(&state)
        .expect("restore");
    let a = post(&e, "/slots/0/decode", r#"{"n_predict":24}"#);
    let b = post(&e, "/slots/1/decode", r#"{"n_predict":24}"#);
    assert_eq!(a.0, 200, "{}", a.1);
    assert_eq!(b.0, 200, "{}", b.1);
    assert_eq!(a.1["tokens"], b.1["tokens"]);
    let reader = SegmentReader::open(e.segment()).unwrap();
    assert_eq!(
        reader.slot(1).unwrap().state.finish_reason.as_str(),
        "completed"
    );
}

#[test]
fn sigterm_cancels_the_running_task_and_removes_the_segment() {
    let mut e = Engine::in_scratch("polite", &["--slots", "1", "--ctx", "4096"]);
    let (decode, reader) = long_decode(&e, 0);
    let status = e.terminate();
    assert!(status.success(), "exit status {status:?}");
    let (code, body, _) = decode.join().expect("decode thread");
    // Stopped by the shutdown, which a client can retry elsewhere: not a cancellation.
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "shutting_down");
    assert!(!e.segment().exists(), "segment removed on clean exit");
    assert_eq!(reader.liveness().unwrap().as_str(), "closed");
    let last = reader.slot(0).unwrap().state;
    assert_eq!(last.finish_reason.as_str(), "cancelled");
}

#[test]
fn slots_endpoint_and_health_answer_from_the_segment() {
    let e = Engine::in_scratch("lister", &["--slots", "3"]);
    let (status, body) = get(&e, "/slots");
    assert_eq!(status, 200);
    assert_eq!(body["slots"].as_array().map(Vec::len), Some(3), "{body}");
    let (status, body) = get(&e, "/health");
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    let (status, body) = post(
        &e,
        "/completion",
        r#"{"prompt":"hello","n_predict":8,"id_slot":2}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id_slot"], 2);
    assert_eq!(body["tokens_predicted"], 8);
    let meta = probe_meta(&e.dir, "lister", 2);
    assert_eq!(meta["n_past"].as_u64(), body["n_past"].as_u64());
    assert_eq!(meta["is_processing"], false);
}

/// Completions on `slots` slots posted at once; their `tokens`, by slot.
fn concurrent_completions(e: &Engine, prompts: &[&str], n: usize) -> Vec<serde_json::Value> {
    let threads: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(slot, prompt)| {
            let url = e.url("/completion");
            let body = serde_json::json!({
                "prompt": prompt, "n_predict": n, "ignore_eos": true, "id_slot": slot,
            })
            .to_string();
            std::thread::spawn(move || call(agent().post(&url), Some(&body)))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            let (status, body) = t.join().expect("completion thread");
            assert_eq!(status, 200, "{body}");
            body["tokens"].clone()
        })
        .collect()
}

#[test]
fn batched_slots_decode_together_and_give_the_serial_tokens() {
    let tmp = scratch();
    let prompts = ["Once upon a time", "The quick brown fox", "1, 2, 3, "];
    let n = 300;
    let serial = Engine::start(
        tmp.path(),
        "serial",
        &["--slots", "3", "--ctx", "2048", "--schedule", "serial"],
    );
    let want = concurrent_completions(&serial, &prompts, n);
    drop(serial);

    let e = Engine::start(tmp.path(), "batched", &["--slots", "3", "--ctx", "2048"]);
    let reader = SegmentReader::open(e.segment()).expect("open segment");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Watches the segment for two or more slots decoding at the same moment.
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                let decoding = (0..3)
                    .filter_map(|s| reader.slot(s).ok())
                    .filter(|s| s.state.phase == Phase::Decode && s.state.work_done > 0)
                    .count();
                most = most.max(decoding);
                std::thread::sleep(Duration::from_millis(1));
            }
            most
        })
    };
    let got = concurrent_completions(&e, &prompts, n);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.join().expect("watcher");
    for (slot, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.as_array().map(Vec::len), Some(n), "slot {slot}");
        assert_eq!(g, w, "slot {slot}: batched tokens differ from serial");
    }
    assert!(
        most >= 2,
        "the batched schedule never had two slots decoding at once"
    );
    let (status, slots) = get(&e, "/slots");
    assert_eq!(status, 200, "{slots}");
}
