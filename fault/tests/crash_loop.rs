//! Crash loop: start an engine, start a long decode, SIGKILL it at a random moment, check
//! the probe's verdict (engine dead, slot orphaned, last progress kept), restart with the
//! same id and check it serves. `HYDRA_CRASH_ROUNDS` rounds (default 10, as CI runs it;
//! `scripts/crash-loop.sh` runs the documented 100), `HYDRA_CRASH_SEED` fixes the random
//! kill moments.

use hydra_fault::process::{start_engine, EngineOpts, Server};
use hydra_fault::{bins, env_num, http, scratch, wait_for};
use hydra_layout::{clock, Phase, SegmentReader};
use hydra_probe::{EngineHealth, EngineView, SlotClass, Thresholds};
use std::process::Command;
use std::time::{Duration, Instant};

/// xorshift64*: the kill moments, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

fn view(reader: &SegmentReader) -> EngineView {
    EngineView::capture(reader, clock::monotonic_ns(), &Thresholds::default()).expect("capture")
}

/// Starts a decode of `n` tokens on slot 0 in a thread (its answer is lost with the engine).
fn start_decode(e: &Server, n: usize) -> std::thread::JoinHandle<()> {
    let (code, body) = http::post(&e.url("/slots/0/prefill"), r#"{"prompt":"Crash test: "}"#);
    assert_eq!(code, 200, "prefill: {body}");
    let url = e.url("/slots/0/decode");
    let body = format!(r#"{{"n_predict":{n},"ignore_eos":true}}"#);
    std::thread::spawn(move || {
        // The engine is killed mid-decode: a transport error is the expected outcome.
        let _ = http::try_call(http::agent().post(&url), Some(&body));
    })
}

/// The verdict on the killed engine of `opts`, whose slot 0 read `before` just before the
/// kill: dead, the slot orphaned with its phase, task and progress kept, from the library
/// (`reader`) and from the CLI (`probe`). Returns the tokens kept.
fn assert_dead_verdict(
    reader: &SegmentReader,
    opts: &EngineOpts,
    probe: &std::path::Path,
    before: &hydra_layout::SlotState,
    round: u64,
) -> u64 {
    // From the library ...
    let v = view(reader);
    assert_eq!(
        v.health,
        EngineHealth::Dead,
        "round {round}: {:?}",
        v.health
    );
    let slot = &v.slots[0];
    assert_eq!(slot.class, SlotClass::Orphaned, "round {round}: {slot:?}");
    assert_eq!(slot.state.phase, Phase::Decode, "round {round}: phase kept");
    assert_eq!(
        slot.state.task_id, before.task_id,
        "round {round}: task kept"
    );
    assert!(
        slot.state.work_done >= before.work_done && slot.state.work_done > 0,
        "round {round}: progress lost: {} < {}",
        slot.state.work_done,
        before.work_done
    );
    // ... and from the CLI, as an operator's check would see it.
    let out = Command::new(probe)
        .arg("--dir")
        .arg(&opts.dir)
        .args(["check", &opts.id])
        .output()
        .expect("hydra-probe check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "round {round}: check said {text}"
    );
    assert!(text.contains("dead"), "round {round}: {text}");
    let out = Command::new(probe)
        .arg("--dir")
        .arg(&opts.dir)
        .args(["meta", &opts.id, "0"])
        .output()
        .expect("hydra-probe meta");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("meta JSON");
    assert_eq!(
        meta["tokens_processed"].as_u64(),
        Some(slot.state.work_done),
        "round {round}: {meta}"
    );
    slot.state.work_done
}

/// Starts the engine of `opts` again after the kill: it replaces the dead segment, is live
/// with a fresh slot, and serves a completion.
fn restart(opts: &EngineOpts, round: u64) -> Server {
    let engine = start_engine(opts);
    let (code, body) = http::get(&engine.url("/health"));
    assert_eq!(code, 200, "round {round}: health {body}");
    let reader = SegmentReader::open(opts.segment()).expect("reopen");
    let v = view(&reader);
    assert_eq!(v.health, EngineHealth::Live, "round {round}");
    assert_eq!(
        v.slots[0].class,
        SlotClass::Idle,
        "round {round}: fresh slot"
    );
    let (code, body) = http::post(
        &engine.url("/completion"),
        r#"{"prompt":"After the crash","n_predict":4,"ignore_eos":true}"#,
    );
    assert_eq!(code, 200, "round {round}: completion {body}");
    assert_eq!(body["tokens_predicted"].as_u64(), Some(4), "{body}");
    engine
}

#[test]
fn killed_mid_decode_then_restarted_round_after_round() {
    let rounds = env_num::<u64>("HYDRA_CRASH_ROUNDS", 10);
    let seed = env_num("HYDRA_CRASH_SEED", clock::monotonic_ns() | 1);
    eprintln!("crash loop: {rounds} rounds, HYDRA_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let tmp = scratch("hydra-crash.");
    let opts = EngineOpts::new(tmp.path(), "crashy");
    let probe = bins::probe();
    let started = Instant::now();
    let mut kept_tokens = Vec::new();
    let mut engine = start_engine(&opts);
    for round in 0..rounds {
        // A decode far longer than the kill delay.
        let decode = start_decode(&engine, 3000);
        let reader = SegmentReader::open(opts.segment()).expect("open segment");
        wait_for(Duration::from_secs(30), "decode running", || {
            let s = reader.slot(0).ok()?;
            (s.state.phase == Phase::Decode && s.state.work_done > 0).then_some(())
        });
        // Kill at a random moment 0-400 ms into the decode.
        std::thread::sleep(Duration::from_millis(rng.below(400)));
        let before = reader.slot(0).expect("slot").state;
        engine.kill();
        decode.join().expect("decode thread");

        let kept = assert_dead_verdict(&reader, &opts, &probe, &before, round);
        kept_tokens.push(kept);

        // The same id restarts, replaces the dead segment and serves.
        drop(reader);
        engine = restart(&opts, round);
    }
    assert!(engine.is_running());
    let status = engine.terminate();
    assert!(status.success(), "clean exit after the loop: {status}");
    assert!(!opts.segment().exists(), "segment removed at clean exit");
    eprintln!(
        "crash loop: {rounds} rounds in {:.1} s, all verdicts dead/orphaned with progress kept \
         (tokens at the kill: min {}, max {})",
        started.elapsed().as_secs_f64(),
        kept_tokens.iter().min().unwrap_or(&0),
        kept_tokens.iter().max().unwrap_or(&0)
    );
}
