//! API abuse: thousands of malformed, oversized and concurrent requests against the
//! engine's HTTP API, from several threads on loopback, with valid requests answered
//! throughout; the engine never crashes and its resident memory does not grow.
//!
//! `HYDRA_ABUSE_REQUESTS` sets the number of abusive requests per thread after warm-up
//! (default 600, with 6 threads: 3,600 in all, plus the warm-up batch).

use hydra_fault::process::{start_engine, EngineOpts};
use hydra_fault::{http, scratch};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 6;

/// Sends raw bytes on a fresh connection and returns whatever comes back (bounded by a
/// read timeout); the status code if an HTTP response arrived.
fn raw(addr: &str, bytes: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may close early on garbage: a write error is an answer too.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
}

/// One abusive request, chosen by `i`; returns a short name of the case and whether the
/// answer was acceptable (a 4xx, or for raw garbage a 4xx or a closed connection).
fn abuse(base: &str, addr: &str, i: usize) -> (&'static str, bool) {
    match i % 16 {
        4 | 12..=15 => abuse_http(base, addr, i),
        _ => abuse_api(base, i),
    }
}

/// A request the API's handlers refuse: malformed or ill-typed JSON, slots and routes that
/// do not exist, a prompt too long, a corrupt state.
fn abuse_api(base: &str, i: usize) -> (&'static str, bool) {
    let a = http::agent();
    let url = |p: &str| format!("{base}{p}");
    let is_4xx = |(code, body): (u16, serde_json::Value)| {
        (400..500).contains(&code) && body["error"]["message"].is_string()
    };
    // `body` POSTed to `path` is refused with a 4xx and an error message.
    let post_refused = |path: &str, body: &str| is_4xx(http::call(a.post(&url(path)), Some(body)));
    match i % 16 {
        0 => (
            "malformed json",
            post_refused("/slots/0/prefill", "{\"prompt\":"),
        ),
        1 => (
            "unknown slot",
            post_refused("/slots/4294967296/prefill", r#"{"prompt":"a"}"#),
        ),
        2 => (
            "slot not a number",
            post_refused("/slots/-1/decode", r#"{"n_predict":1}"#),
        ),
        3 => {
            let long = serde_json::json!({"prompt": "x".repeat(5000)}).to_string();
            (
                "prompt longer than the context",
                post_refused("/slots/1/prefill", &long),
            )
        }
        5 => (
            "decode on an empty slot",
            post_refused("/slots/1/decode", r#"{"n_predict":3}"#),
        ),
        6 => (
            "wrong types",
            post_refused(
                "/completion",
                r#"{"prompt":7,"n_predict":"many","temperature":"hot"}"#,
            ),
        ),
        7 => (
            "negative and absurd numbers",
            post_refused(
                "/slots/1/decode",
                r#"{"n_predict":-5,"top_k":-1,"top_p":7.5}"#,
            ),
        ),
        8 => {
            let junk: Vec<u8> = (0..4096u32)
                .map(|x| (x.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let resp = a.put(&url("/slots/1/state")).send_bytes(&junk);
            let ok = match resp {
                Err(ureq::Error::Status(code, _)) => (400..500).contains(&code),
                _ => false,
            };
            ("corrupt state restore", ok)
        }
        9 => (
            "token ids out of range",
            post_refused("/slots/1/prefill", r#"{"tokens":[0,4294967295,-3]}"#),
        ),
        10 => (
            "unknown route",
            is_4xx(http::call(
                a.get(&url("/slots/0/state/../../../etc/passwd")),
                None,
            )),
        ),
        11 => (
            "unknown action",
            is_4xx(http::call(a.post(&url("/slots/1?action=%00%ff")), None)),
        ),
        other => unreachable!("case {other} is abuse_http's"),
    }
}

/// A request the HTTP layer refuses: bodies oversized, cut short or not UTF-8, a garbage
/// request line, a 1 MB header.
fn abuse_http(base: &str, addr: &str, i: usize) -> (&'static str, bool) {
    // Raw bytes are answered with a 4xx or the connection closed.
    let raw_refused = |req: &[u8]| raw(addr, req).is_none_or(|c| (400..500).contains(&c));
    match i % 16 {
        4 if i % 32 == 4 => {
            // A 3 MB body really sent: the server answers 413 as soon as the limit is
            // passed and closes, so the client may see the 413 or a broken pipe.
            let huge = format!(r#"{{"prompt":"{}"}}"#, "y".repeat(3 << 20));
            let ok = match http::try_call(
                http::agent().post(&format!("{base}/slots/1/prefill")),
                Some(&huge),
            ) {
                Ok((code, _)) => code == 413,
                Err(_) => true,
            };
            ("oversized body sent", ok)
        }
        // A body declared oversized, then the connection half-closed: a 4xx (the body never
        // arrives) or a closed connection.
        4 => (
            "oversized body declared",
            raw_refused(b"POST /slots/1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3145728\r\n\r\n"),
        ),
        12 => (
            "garbage request line",
            raw_refused(b"\x00\x01GARBAGE /\xff HTTP/9.9\r\n\r\n"),
        ),
        13 => {
            let mut req = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Junk: ".to_vec();
            req.extend(std::iter::repeat_n(b'a', 1 << 20));
            req.extend(b"\r\n\r\n");
            // Past hyper's header buffer: a 431 or the connection closed.
            ("1 MB header", raw_refused(&req))
        }
        14 => (
            "body shorter than Content-Length",
            raw_refused(b"POST /slots/1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":\"cut"),
        ),
        15 => {
            let code = raw(addr, b"POST /slots/1/prefill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"prompt\":\"\xff\xfe\"}");
            (
                "invalid UTF-8 in JSON",
                code.is_some_and(|c| (400..500).contains(&c)),
            )
        }
        other => unreachable!("case {other} is abuse_api's"),
    }
}

/// `n` abusive requests from each of `THREADS` threads; the names of the cases whose
/// answers were unacceptable.
fn run_batch(base: &str, addr: &str, n: usize) -> Vec<String> {
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let failures = &failures;
            s.spawn(move || {
                for k in 0..n {
                    let (name, ok) = abuse(base, addr, t * 7 + k);
                    if !ok {
                        failures.lock().unwrap().push(name.to_string());
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// A thread that sends valid work until `stop` (or 10 minutes): health, meta from the
/// segment, and real prefill + decode on slot 0 (the abusers only touch slot 1 and bad
/// routes), counting each answered in `valid_ok`. It returns what failed.
fn start_canary(
    base: &str,
    stop: Arc<AtomicBool>,
    valid_ok: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Vec<String>> {
    let base = base.to_owned();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut problems = Vec::new();
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            for (what, r) in [
                ("health", http::get(&format!("{base}/health"))),
                ("meta", http::get(&format!("{base}/slots/0/state/meta"))),
                (
                    "erase",
                    http::post(&format!("{base}/slots/0?action=erase"), ""),
                ),
                (
                    "prefill",
                    http::post(&format!("{base}/slots/0/prefill"), r#"{"prompt":"canary"}"#),
                ),
                (
                    "decode",
                    http::post(
                        &format!("{base}/slots/0/decode"),
                        r#"{"n_predict":4,"ignore_eos":true}"#,
                    ),
                ),
            ] {
                if r.0 == 200 {
                    valid_ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    problems.push(format!("{what}: {} {}", r.0, r.1));
                }
            }
        }
        problems
    })
}

#[test]
fn thousands_of_bad_requests_never_crash_the_engine_nor_leak() {
    let per_thread: usize = std::env::var("HYDRA_ABUSE_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let tmp = scratch("hydra-abuse.");
    let mut opts = EngineOpts::new(tmp.path(), "abused");
    opts.ctx = 1024;
    opts.extra = vec!["--max-body".into(), "1048576".into()];
    let mut engine = start_engine(&opts);
    let base = engine.base.clone();
    let addr = base.trim_start_matches("http://").to_string();

    // Warm-up: every case once per thread and more, so buffers and pools reach their size.
    let failures = run_batch(&base, &addr, 64);
    assert!(
        failures.is_empty(),
        "warm-up: unacceptable answers: {failures:?}"
    );
    let rss_before = engine.rss_kib();

    // Valid work answered throughout the abuse: health, meta from the segment, and real
    // prefill + decode on slot 0 (the abusers only touch slot 1 and bad routes).
    let stop = Arc::new(AtomicBool::new(false));
    let valid_ok = Arc::new(AtomicU64::new(0));
    let canary = start_canary(&base, stop.clone(), valid_ok.clone());
    let started = Instant::now();
    let failures = run_batch(&base, &addr, per_thread);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let problems = canary.join().expect("canary");
    assert!(failures.is_empty(), "unacceptable answers: {failures:?}");
    assert!(
        problems.is_empty(),
        "valid requests failed during the abuse: {problems:?}"
    );
    assert!(engine.is_running(), "the engine died");
    let valid = valid_ok.load(Ordering::Relaxed);
    assert!(valid >= 5, "only {valid} valid requests answered");

    // A second round of the same size: memory must not keep growing with the request count.
    let rss_mid = engine.rss_kib();
    let failures = run_batch(&base, &addr, per_thread);
    assert!(failures.is_empty(), "second round: {failures:?}");
    let rss_after = engine.rss_kib();
    let (code, body) = http::get(&format!("{base}/health"));
    assert_eq!(code, 200, "{body}");
    eprintln!(
        "api abuse: {} abusive requests in {:.1} s from {THREADS} threads, {valid} valid \
         requests answered meanwhile; RSS {rss_before} KiB after warm-up, {rss_mid} KiB after \
         the first round, {rss_after} KiB after the second",
        2 * per_thread * THREADS,
        elapsed.as_secs_f64()
    );
    // Allocator pools may settle a little; a leak grows with every round.
    assert!(
        rss_after <= rss_mid + 4096 && rss_mid <= rss_before + 16 * 1024,
        "RSS grew: {rss_before} -> {rss_mid} -> {rss_after} KiB"
    );
    let status = engine.terminate();
    assert!(status.success(), "clean exit: {status}");
}
