//! Cancelling the seed's long tasks on the real model (SmolLM2-135M): a 4,000-token
//! prefill and a 3,000-token decode, each stopped 1 s in by `?action=cancel` or by its
//! client closing the connection. The slot reads idle to a separate reader within a step
//! of the cancel (a prefill within half a prompt chunk: it stops at the next layer
//! boundary of the chunk in flight; a decode within one or two tokens), the request
//! answers at once, and the segment records finish reason cancelled.

use crate::support::{agent, call};
use hydra_fault::process::Server;
use hydra_layout::{FinishReason, Phase, SegmentReader};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UBATCH: usize = 128;
const LIMIT: Duration = Duration::from_secs(120);

fn start(model: &Path, dir: &Path) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.arg("serve")
        .arg("--model")
        .arg(model)
        .args(["--slots", "1", "--ctx", "8192", "--listen", "127.0.0.1:0"])
        .args(["--ubatch", &UBATCH.to_string()])
        .args(["--engine-id", "cancel", "--progress-dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    Server::spawn(cmd)
}

/// `n` token ids of SmolLM2's vocabulary.
fn tokens(n: usize) -> String {
    let ids: Vec<String> = (0..n).map(|i| (100 + i % 900).to_string()).collect();
    format!("{{\"tokens\":[{}]}}", ids.join(","))
}

/// Waits (bounded) until slot 0 runs `phase` with some work done and has run it for 1 s;
/// returns the longest step it saw (a prompt chunk, or a token).
fn one_second_into(r: &SegmentReader, phase: Phase) -> Duration {
    let deadline = Instant::now() + LIMIT;
    let mut since = None;
    let mut step = 0;
    loop {
        let s = r.slot(0).expect("slot 0").state;
        if s.phase == phase && s.work_done > 0 {
            let at = *since.get_or_insert_with(Instant::now);
            step = step.max(s.last_step_ns);
            if at.elapsed() >= Duration::from_secs(1) {
                return Duration::from_nanos(step);
            }
        }
        assert!(Instant::now() < deadline, "no {phase:?} ran: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Polls (bounded) until slot 0 is idle; returns how long that took and the record.
fn idle_after(r: &SegmentReader, from: Instant) -> (Duration, hydra_layout::SlotState) {
    loop {
        let s = r.slot(0).expect("slot 0").state;
        if s.phase == Phase::Idle {
            return (from.elapsed(), s);
        }
        assert!(from.elapsed() < LIMIT, "never idle: {s:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `POST /slots/0?action=cancel`, which must name the `task` it stopped, then waits until
/// slot 0 is idle; returns when the cancel was sent, how long the slot took to be idle,
/// and its record then.
fn cancel_until_idle(
    engine: &Server,
    r: &SegmentReader,
    task: &str,
) -> (Instant, Duration, hydra_layout::SlotState) {
    let at = Instant::now();
    let (status, answer) = call(
        agent().post(&engine.url("/slots/0?action=cancel")),
        Some(""),
    );
    assert_eq!(
        (status, &answer["task"]),
        (200, &serde_json::json!(task)),
        "{answer}"
    );
    let (took, s) = idle_after(r, at);
    (at, took, s)
}

/// Sends `body` to `path` on a raw connection and returns it (the client closes it by
/// dropping it).
fn raw_request(base: &str, path: &str, body: &str) -> std::net::TcpStream {
    let addr = base.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    c
}

#[test]
fn smollm2_prefill_and_decode_stop_within_a_step_of_cancel() {
    let test = "smollm2_prefill_and_decode_stop_within_a_step_of_cancel";
    let Some(model) = hydra_fault::require::smollm2_gguf(test) else {
        return;
    };
    let tmp = hydra_fault::scratch("hydra-cancel");
    let engine = start(&model, tmp.path());
    let r = SegmentReader::open_engine(tmp.path(), "cancel").expect("segment");
    let base = engine.base.clone();
    let post = |path: &str, body: String| {
        let url = format!("{base}{path}");
        std::thread::spawn(move || call(agent().post(&url), Some(&body)))
    };

    // 1. A 4,000-token prefill, ?action=cancel 1 s in.
    let prefill = post("/slots/0/prefill", tokens(4000));
    let chunk = one_second_into(&r, Phase::Prefill);
    let (at, took, s) = cancel_until_idle(&engine, &r, "prefill");
    let (status, body) = prefill.join().expect("prefill thread");
    let answered = at.elapsed();
    eprintln!("{test}: prefill idle {took:?} after cancel (chunk of {UBATCH}: {chunk:?}), answered in {answered:?}");
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &serde_json::json!("cancelled")),
        "{body}"
    );
    assert_eq!(s.finish_reason, FinishReason::Cancelled, "{s:?}");
    assert!(s.n_past < 4000, "stopped early: {s:?}");
    assert!(
        took <= chunk / 2 + Duration::from_millis(100),
        "idle {took:?}: not at a layer boundary of a chunk of {chunk:?}"
    );

    // 2. A 3,000-token decode, ?action=cancel 1 s in: the answer holds its tokens.
    let decode = post(
        "/slots/0/decode",
        r#"{"n_predict":3000,"ignore_eos":true,"temperature":0}"#.to_string(),
    );
    let token = one_second_into(&r, Phase::Decode);
    let (_, took, s) = cancel_until_idle(&engine, &r, "decode");
    let (status, body) = decode.join().expect("decode thread");
    eprintln!("{test}: decode idle {took:?} after cancel (token: {token:?})");
    assert_eq!(
        (status, &body["stop_type"]),
        (200, &serde_json::json!("cancelled")),
        "{body}"
    );
    let generated = body["tokens"].as_array().map_or(0, Vec::len);
    assert!(generated > 0 && generated < 3000, "{generated} tokens");
    assert_eq!(s.finish_reason, FinishReason::Cancelled, "{s:?}");
    assert!(
        took <= token * 3 + Duration::from_millis(500),
        "idle {took:?}, token {token:?}"
    );

    // 3. The same two with the client closing its connection instead.
    for (path, body, phase, bound) in [
        ("/slots/0/prefill", tokens(4000), Phase::Prefill, chunk / 2),
        (
            "/slots/0/decode",
            r#"{"n_predict":3000,"ignore_eos":true,"temperature":0}"#.to_string(),
            Phase::Decode,
            token * 3,
        ),
    ] {
        let client = raw_request(&engine.base, path, &body);
        one_second_into(&r, phase);
        let at = Instant::now();
        drop(client);
        let (took, s) = idle_after(&r, at);
        eprintln!("{test}: {phase:?} idle {took:?} after its client closed");
        assert_eq!(s.finish_reason, FinishReason::Cancelled, "{phase:?}: {s:?}");
        assert!(
            took <= bound + Duration::from_millis(100),
            "{phase:?}: idle {took:?}"
        );
    }
}

/// A state restore cancelled half way, on the embedded model: the test build pauses
/// 150 ms after each block of a save or restore (`HYDRA_ENGINE_BLOCK_DELAY_MS`), so the
/// cancel lands between two blocks. The restore answers cancelled, the slot is left empty,
/// never half-restored, and the segment records the cancel.
#[test]
fn a_restore_cancelled_half_way_leaves_the_slot_empty() {
    use hydra_fault::process::{start_engine, EngineOpts};
    let tmp = hydra_fault::scratch("hydra-restore-cancel");
    let mut opts = EngineOpts::new(tmp.path(), "restore-cancel");
    opts.bin = Some(env!("CARGO_BIN_EXE_hydra-engine").into());
    opts.env = vec![("HYDRA_ENGINE_BLOCK_DELAY_MS".into(), "150".into())];
    let engine = start_engine(&opts);
    let prompt = format!("{{\"prompt\":\"{}\"}}", "a story, ".repeat(40));
    let (status, body) = call(agent().post(&engine.url("/slots/0/prefill")), Some(&prompt));
    assert_eq!(status, 200, "{body}");
    let resp = agent()
        .get(&engine.url("/slots/0/state"))
        .call()
        .expect("save");
    let mut state = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut state).expect("the state");
    let r = SegmentReader::open(opts.segment()).expect("segment");
    // The save ends as completed, though its client had every byte and closed the stream
    // while the save paused after its last block (it read as failed before).
    let deadline = Instant::now() + LIMIT;
    let saved = loop {
        let s = r.slot(0).expect("slot 0").state;
        if s.phase == Phase::Idle && s.task_id > 1 {
            break s;
        }
        assert!(Instant::now() < deadline, "the save never ended: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(saved.finish_reason, FinishReason::Completed, "{saved:?}");

    let url = engine.url("/slots/1/state");
    let restore = std::thread::spawn(move || {
        let resp = match agent().put(&url).send_bytes(&state) {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("PUT {url}: {e}"),
        };
        let status = resp.status();
        (
            status,
            resp.into_json::<serde_json::Value>().unwrap_or_default(),
        )
    });
    let (done, total) = loop {
        let s = r.slot(1).expect("slot 1").state;
        if s.phase == Phase::Restore && s.work_done > 0 {
            break (s.work_done, s.work_total);
        }
        assert!(Instant::now() < deadline, "no restore ran: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    };
    let (status, answer) = call(
        agent().post(&engine.url("/slots/1?action=cancel")),
        Some(""),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (&answer["task"], &answer["state"]),
        (&serde_json::json!("restore"), &serde_json::json!("running")),
        "{answer}"
    );
    let (status, body) = restore.join().expect("the restore's client");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "cancelled", "{body}");
    let s = r.slot(1).expect("slot 1").state;
    assert!(done < total, "the cancel came half way: {done} of {total}");
    assert_eq!(s.phase, Phase::Idle, "{s:?}");
    assert_eq!(s.finish_reason, FinishReason::Cancelled, "{s:?}");
    assert_eq!(s.n_past, 0, "never half-restored: {s:?}");
    let (status, body) = call(
        agent().post(&engine.url("/slots/1/decode")),
        Some(r#"{"n_predict":1}"#),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &serde_json::json!("empty_slot")),
        "{body}"
    );
}
