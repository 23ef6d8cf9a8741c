//! Engine-level benchmark, everything measured side by side in one run:
//!
//! 1. meta latency during a 512-token decode: through the task queue (`?via=queue`, the
//!    old way) versus from the segment (`/slots/{id}/state/meta`, and the `hydra-probe`
//!    library in-process);
//! 2. decode throughput with publishing on versus off (`--no-publish`);
//! 3. decode throughput with 0 versus 8 reader processes polling the segment at 1 kHz.
//!
//! `cargo bench -p hydra-engine --bench server -- [--rounds N] [--tokens N] [--threads N]`
//!
//! Runs alternate (on/off, 0/8 readers) round by round so that drift of a shared machine
//! hits both sides alike; the table reports medians and the ratio of medians.

use hydra_layout::{clock, SegmentReader};
use hydra_probe::{EngineView, Thresholds};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Opts {
    rounds: usize,
    tokens: usize,
    threads: usize,
}

fn parse() -> Option<Opts> {
    let mut o = Opts {
        rounds: 5,
        tokens: 512,
        threads: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reader" => {
                let path = args.next().expect("--reader SEGMENT");
                run_reader(Path::new(&path));
                return None;
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--tokens" => {
                o.tokens = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--tokens N")
            }
            "--threads" => {
                o.threads = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--threads N")
            }
            _ => {} // cargo bench passes --bench
        }
    }
    Some(o)
}

/// A reader process: captures the engine view at 1 kHz until its parent kills it.
fn run_reader(segment: &Path) {
    let reader = SegmentReader::open(segment).expect("reader open");
    let t = Thresholds::default();
    let mut next = Instant::now();
    loop {
        let v = EngineView::capture(&reader, clock::monotonic_ns(), &t).expect("capture");
        std::hint::black_box(v);
        next += Duration::from_millis(1);
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

struct Engine {
    child: Child,
    base: String,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_engine(dir: &Path, id: &str, threads: usize, publish: bool) -> Engine {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.args([
        "serve",
        "--builtin",
        "--slots",
        "2",
        "--ctx",
        "4096",
        "--listen",
        "127.0.0.1:0",
    ])
    .args(["--engine-id", id, "--threads", &threads.to_string()])
    .arg("--progress-dir")
    .arg(dir)
    .env("HYDRA_LOG", "warn")
    .stdout(Stdio::piped());
    if !publish {
        cmd.arg("--no-publish");
    }
    let mut child = cmd.spawn().expect("spawn engine");
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut base = None;
    for line in out.lines().map_while(Result::ok) {
        if let Some(a) = line.strip_prefix("listening on ") {
            base = Some(a.to_string());
            break;
        }
    }
    Engine {
        child,
        base: base.expect("engine address"),
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build()
}

/// Prefills a short prompt and decodes `n` tokens; returns decode tokens/s as the engine
/// measured it (wall time of the generation loop only).
fn decode_rate(e: &Engine, n: usize) -> f64 {
    let a = agent();
    a.post(&format!("{}/slots/0?action=erase", e.base))
        .call()
        .expect("erase");
    a.post(&format!("{}/slots/0/prefill", e.base))
        .send_json(serde_json::json!({"prompt": "Benchmark: "}))
        .expect("prefill");
    let r: serde_json::Value = a
        .post(&format!("{}/slots/0/decode", e.base))
        .send_json(serde_json::json!({"n_predict": n, "ignore_eos": true}))
        .expect("decode")
        .into_json()
        .expect("json");
    r["predicted_per_second"].as_f64().expect("rate")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let Some(o) = parse() else { return };
    let tmp = tempfile::Builder::new()
        .prefix("hydra-bench")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().to_path_buf();
    println!("# hydra-engine server benchmark: embedded model, {} decode tokens, {} compute thread(s), {} rounds", o.tokens, o.threads, o.rounds);

    // 1. Meta latency during a decode.
    {
        let e = start_engine(&dir, "meta", o.threads, true);
        let seg = dir.join("meta.hps");
        let reader = SegmentReader::open(&seg).expect("open");
        let mut http_segment = Vec::new();
        let mut lib = Vec::new();
        let mut queue = Vec::new();
        for _ in 0..o.rounds {
            let a = agent();
            a.post(&format!("{}/slots/0?action=erase", e.base))
                .call()
                .expect("erase");
            a.post(&format!("{}/slots/0/prefill", e.base))
                .send_json(serde_json::json!({"prompt": "Benchmark: "}))
                .expect("prefill");
            let url = format!("{}/slots/0/decode", e.base);
            let n = o.tokens;
            let decode = std::thread::spawn(move || {
                agent()
                    .post(&url)
                    .send_json(serde_json::json!({"n_predict": n, "ignore_eos": true}))
                    .map(drop)
                    .map_err(|e| e.to_string())
            });
            // Wait until the decode runs, then ask through the queue and from the segment.
            let t0 = Instant::now();
            while reader
                .slot(0)
                .map(|s| s.state.phase.as_str() != "decode")
                .unwrap_or(true)
            {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "decode did not start"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            let qurl = format!("{}/slots/0/state/meta?via=queue", e.base);
            let q = std::thread::spawn(move || {
                let t = Instant::now();
                agent().get(&qurl).call().expect("queue meta");
                t.elapsed().as_secs_f64()
            });
            while !decode.is_finished() {
                let t = Instant::now();
                a.get(&format!("{}/slots/0/state/meta", e.base))
                    .call()
                    .expect("segment meta");
                http_segment.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let v = EngineView::capture(&reader, clock::monotonic_ns(), &Thresholds::default())
                    .expect("capture");
                std::hint::black_box(hydra_probe::HydraMeta::from_view(&v, 0));
                lib.push(t.elapsed().as_secs_f64());
                std::thread::sleep(Duration::from_millis(2));
            }
            decode.join().expect("decode thread").expect("decode");
            queue.push(q.join().expect("queue thread"));
        }
        println!();
        println!("## meta latency while slot 0 decodes {} tokens", o.tokens);
        println!("| path | samples | p50 | p99 | max |");
        println!("|---|---:|---:|---:|---:|");
        for (name, v) in [
            ("task queue (`?via=queue`, the old way)", &mut queue),
            (
                "segment over HTTP (`/slots/0/state/meta`)",
                &mut http_segment,
            ),
            ("segment in-process (probe library)", &mut lib),
        ] {
            let n = v.len();
            println!(
                "| {name} | {n} | {:.3} ms | {:.3} ms | {:.3} ms |",
                pct(v, 0.5) * 1e3,
                pct(v, 0.99) * 1e3,
                pct(v, 1.0) * 1e3
            );
        }
        println!(
            "ratio queue/segment-HTTP at p50: {:.0}x",
            pct(&mut queue, 0.5) / pct(&mut http_segment, 0.5)
        );
    }

    // 2. Publishing on vs off, and 3. 0 vs 8 readers, alternating per round.
    let on = start_engine(&dir, "on", o.threads, true);
    let off = start_engine(&dir, "off", o.threads, false);
    let seg_on = dir.join("on.hps");
    // Warm both.
    decode_rate(&on, 64);
    decode_rate(&off, 64);
    let (mut r_on, mut r_off, mut r_quiet, mut r_read) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let me = std::env::current_exe().expect("current_exe");
    for _ in 0..o.rounds {
        r_on.push(decode_rate(&on, o.tokens));
        r_off.push(decode_rate(&off, o.tokens));
        r_quiet.push(decode_rate(&on, o.tokens));
        let mut readers: Vec<Child> = (0..8)
            .map(|_| {
                Command::new(&me)
                    .arg("--reader")
                    .arg(&seg_on)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn reader")
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        r_read.push(decode_rate(&on, o.tokens));
        for r in &mut readers {
            let _ = r.kill();
            let _ = r.wait();
        }
    }
    let (m_on, m_off, m_quiet, m_read) = (
        median(&mut r_on),
        median(&mut r_off),
        median(&mut r_quiet),
        median(&mut r_read),
    );
    println!();
    println!(
        "## decode throughput ({} tokens, median of {} alternating rounds)",
        o.tokens, o.rounds
    );
    println!("| configuration | tokens/s | ratio |");
    println!("|---|---:|---:|");
    println!("| publishing off (`--no-publish`) | {m_off:.1} | 1.000 |");
    println!("| publishing on | {m_on:.1} | {:.4} |", m_on / m_off);
    println!("| publishing on, 0 readers | {m_quiet:.1} | 1.000 |");
    println!(
        "| publishing on, 8 reader processes at 1 kHz | {m_read:.1} | {:.4} |",
        m_read / m_quiet
    );
    println!();
    println!("raw tokens/s per round: off {r_off:.1?}, on {r_on:.1?}, 0 readers {r_quiet:.1?}, 8 readers {r_read:.1?}");
}
