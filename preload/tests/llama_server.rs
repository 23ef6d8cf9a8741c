//! The real thing: llama.cpp 0c1e570's `llama-server` (built by `scripts/llama-cpp.sh
//! build`, cached outside the repository) on the real SmolLM2-135M GGUF, `-np 2`, with
//! `LD_PRELOAD=libhydra_preload.so`, watched by separate `hydra-probe` and
//! `hydra-exporter` processes.
//!
//! Fails when llama.cpp or the model is unavailable, unless HYDRA_ALLOW_SKIP=1.

mod common;

use hydra_fault::{process, process::Server, require};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One llama-server at a time: each uses both cores.
static SERIAL: Mutex<()> = Mutex::new(());

const ENGINE: &str = "llama-preload-test";

/// Tokens of the long generation: 1,000, or `HYDRA_PRELOAD_TEST_N_PREDICT` on a machine
/// too loaded to decode that many within the deadlines.
fn n_predict() -> u32 {
    std::env::var("HYDRA_PRELOAD_TEST_N_PREDICT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 8)
        .unwrap_or(1000)
}

/// The llama.cpp install prefix from `scripts/llama-cpp.sh build` (returns at once when
/// cached); `None` if it cannot be had.
fn llama_prefix() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/llama-cpp.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("build")
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let prefix = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && prefix.join("bin/llama-server").is_file()).then_some(prefix)
}

/// What a test needs: the turn to run a llama-server (one at a time), the llama.cpp
/// prefix, the model and the preload library; or a skip (only with HYDRA_ALLOW_SKIP=1).
fn prerequisites(test: &str) -> Option<(MutexGuard<'static, ()>, PathBuf, PathBuf, PathBuf)> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = require::or_skip(
        test,
        llama_prefix(),
        "llama.cpp is missing (scripts/llama-cpp.sh build failed)",
        "run scripts/llama-cpp.sh build",
    )?;
    let model = require::smollm2_gguf(test)?;
    Some((serial, prefix, model, common::preload_so()))
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// A llama-server child, killed and reaped on drop; its log goes to a file.
struct LlamaServer {
    child: Child,
    base: String,
    log: PathBuf,
}

impl LlamaServer {
    fn start(prefix: &Path, model: &Path, scratch: &Path, preload: Option<&Path>) -> Self {
        let port = free_port();
        let log = scratch.join(format!("llama-server-{port}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(prefix.join("bin/llama-server"));
        cmd.arg("-m")
            .arg(model)
            .args([
                "-np", "2", "-c", "8192", "-b", "512", "-ub", "512", "-t", "2",
            ])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log fd"))
            .stderr(file);
        if let Some(so) = preload {
            cmd.env("LD_PRELOAD", so)
                .env("HYDRA_PROGRESS_DIR", scratch.join("segments"))
                .env("HYDRA_ENGINE_ID", ENGINE)
                .env("HYDRA_PRELOAD_IDLE_MS", "500");
        }
        let child = cmd.spawn().expect("spawn llama-server");
        let mut s = LlamaServer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Ok(r) = agent().get(&format!("{}/health", s.base)).call() {
                if r.status() == 200 {
                    break;
                }
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                panic!(
                    "llama-server exited ({status}) while starting:\n{}",
                    s.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy in 180 s:\n{}",
                s.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill9(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 llama-server");
        let _ = self.child.wait();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(900))
        .build()
}

/// POST /completion; returns the JSON answer.
fn complete(base: &str, body: serde_json::Value) -> Result<serde_json::Value, String> {
    let r = agent()
        .post(&format!("{base}/completion"))
        .send_json(body)
        .map_err(|e| e.to_string())?;
    r.into_json().map_err(|e| e.to_string())
}

/// A request body: greedy, fixed seed, on `slot`.
fn request(prompt: &str, n_predict: u32, slot: u32) -> serde_json::Value {
    serde_json::json!({
        "prompt": prompt,
        "n_predict": n_predict,
        "ignore_eos": true,
        "temperature": 0.0,
        "top_k": 1,
        "seed": 42,
        "id_slot": slot,
        "cache_prompt": false,
    })
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
                assert_eq!(class, "progressing", "slot {slot} in {phase}: {m}");
                assert_eq!(m["work_total"], 0, "totals are unknown: {m}");
                assert_eq!(m["tokens_total"], 0, "{m}");
                assert!(
                    m.get("substep_done").is_none() && m.get("substep_total").is_none(),
                    "the layer position is unknown (no layer hook): {m}"
                );
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
            let other = sample(dir, 1 - slot).expect("other slot");
            assert_eq!(
                other.1, "idle",
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

/// About 3,000 tokens of prose.
fn long_prompt() -> String {
    let s =
        "The quick brown fox jumps over the lazy dog while the farmer counts sheep in the valley. ";
    s.repeat(165)
}

#[test]
fn llama_server_publishes_progress_through_the_preload() {
    let Some((_serial, prefix, model, so)) =
        prerequisites("llama_server_publishes_progress_through_the_preload")
    else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("segments");
    let mut server = LlamaServer::start(&prefix, &model, scratch.path(), Some(&so));

    // The segment: one slot per sequence, the model's own strings.
    let header = {
        let r = hydra_layout::SegmentReader::open_engine(&dir, ENGINE)
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
    wait_idle(&dir, 0);
    wait_idle(&dir, 1);
    let exporter = process::start_exporter(&dir, &[]);

    // A 1,000-token generation on slot 1 (= sequence 1).
    let base = server.base.clone();
    let n = n_predict();
    let (res, _) = watch(&dir, 1, "decode", (n as usize / 4).min(20), move || {
        complete(&base, request("Once upon a time", n, 1))
    });
    let res = res.expect("long completion");
    assert_eq!(res["tokens_predicted"], n, "{res}");
    let m = wait_idle(&dir, 1);
    assert!(m["n_past"].as_u64().unwrap() >= u64::from(n), "{m}");
    assert_eq!(m["finish_reason"], "completed", "{m}");

    // The exporter's meta, in Hydra's shape (parsed as hydra-probe's HydraMeta).
    let meta = exporter_meta(&exporter, 1);
    assert_eq!((meta.slot_id, meta.engine_id.as_str()), (1, ENGINE));
    assert_eq!(
        (meta.operation.as_str(), meta.is_processing),
        ("idle", false)
    );
    assert!(
        meta.n_past >= u64::from(n) && meta.model_name.to_lowercase().contains("smollm2"),
        "{meta:?}"
    );

    // A ~3,000-token prompt on slot 0: prefill in 512-token chunks, progressing.
    let base = server.base.clone();
    let (res, seen) = watch(&dir, 0, "prefill", 2, move || {
        complete(&base, request(&long_prompt(), 1, 0))
    });
    let res = res.expect("3,000-token prompt");
    let n_prompt = res["tokens_evaluated"].as_u64().expect("tokens_evaluated");
    assert!(
        (2500..4000).contains(&n_prompt),
        "prompt of {n_prompt} tokens"
    );
    assert!(seen >= 512, "prefill progress seen up to {seen}");
    let m = wait_idle(&dir, 0);
    assert!(m["n_past"].as_u64().unwrap() >= n_prompt, "{m}");

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

    // kill -9 mid-decode: dead, orphaned, last progress kept.
    let before = during["work_done"].as_u64().unwrap();
    server.kill9();
    let _ = gen.join().expect("request thread");
    let (_, _, done, class, m) = sample(&dir, 1).expect("meta after the kill");
    assert_eq!(m["engine_liveness"], "dead", "{m}");
    assert_eq!(class, "orphaned", "{m}");
    assert_eq!(m["phase"], "decode", "{m}");
    assert!(done >= before, "last progress kept: {done} < {before}");
    let (code, out) = common::run_probe(&dir, &["check", ENGINE]);
    assert_eq!(code, 2, "check is critical after the kill: {out}");
    drop(exporter);
}

#[test]
fn completion_text_is_identical_with_and_without_the_preload() {
    let Some((_serial, prefix, model, so)) =
        prerequisites("completion_text_is_identical_with_and_without_the_preload")
    else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let mut texts = vec![];
    for preload in [None, Some(so.as_path())] {
        let server = LlamaServer::start(&prefix, &model, scratch.path(), preload);
        let mut r = vec![];
        for (prompt, slot) in [("Once upon a time", 0), ("The capital of France is", 1)] {
            let res = complete(&server.base, request(prompt, 64, slot)).expect("completion");
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
