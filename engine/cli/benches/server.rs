//! Engine-level benchmark, everything measured side by side in one run:
//!
//! 1. meta latency during a 512-token decode: through the task queue (`?via=queue`, the
//!    old way) versus from the segment (`/slots/{id}/state/meta`, and the `hydra-probe`
//!    library in-process);
//! 2. decode throughput with publishing on versus off (`--no-publish`);
//! 3. decode throughput with 0 versus 8 reader processes polling the segment at 1 kHz.
//!
//! `cargo bench -p hydra-engine --bench server -- [--rounds N] [--tokens N] [--threads N] [--pin]`
//!
//! Runs alternate (on/off, 0/8 readers) in pairs, in ABBA order, so that drift of a shared
//! machine hits both sides alike; the tables report medians, the median of the per-pair
//! ratios with its interquartile range, and the engine's CPU time per token beside the
//! wall-clock rate (CPU time leaves out time the engine spent preempted, so it isolates
//! the cost inside the engine from scheduling noise). `--pin` runs the engine on CPU 0 and
//! the readers on CPU 1 (`taskset`), the deployment the design assumes: readers never
//! share the compute thread's core.

use hydra_fault::process::{pinned, start_engine as start_engine_process, EngineOpts, Server};
use hydra_fault::workload::{self, decode_rate, DecodeRate as Rate};
use hydra_fault::{http, stats};
use hydra_layout::{clock, SegmentReader};
use hydra_probe::{EngineView, Thresholds};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

struct Opts {
    rounds: usize,
    tokens: usize,
    threads: usize,
    pin: bool,
}

fn parse() -> Option<Opts> {
    let mut o = Opts {
        rounds: 5,
        tokens: 512,
        threads: 1,
        pin: false,
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
            "--pin" => o.pin = true,
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

/// `hydra-engine serve --builtin` with 2 slots of 4096 tokens, this bench's own binary, on
/// the serial schedule (whose queue the `?via=queue` figure measures).
fn start_engine(dir: &Path, id: &str, threads: usize, publish: bool, cpus: Option<&str>) -> Server {
    let mut o = EngineOpts::new(dir, id);
    o.threads = threads;
    o.cpus = cpus.map(str::to_string);
    o.bin = Some(env!("CARGO_BIN_EXE_hydra-engine").into());
    o.extra.extend(["--schedule".into(), "serial".into()]);
    if !publish {
        o.extra.push("--no-publish".into());
    }
    start_engine_process(&o)
}

fn median(v: &mut [f64]) -> f64 {
    stats::median(v).expect("samples")
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    stats::percentile(v, p).expect("samples")
}

fn main() {
    let Some(o) = parse() else { return };
    let tmp = tempfile::Builder::new()
        .prefix("hydra-bench")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().to_path_buf();
    println!("# hydra-engine server benchmark: embedded model, {} decode tokens, {} compute thread(s), {} rounds", o.tokens, o.threads, o.rounds);
    meta_latency(&o, &dir);
    publishing_and_readers(&o, &dir);
}

/// The meta's latency while slot 0 decodes, in seconds, by the path it took.
#[derive(Default)]
struct MetaLatency {
    /// Through the task queue (`?via=queue`): one per decode.
    queue: Vec<f64>,
    /// From the segment over HTTP, as often as the decode lasts.
    http_segment: Vec<f64>,
    /// From the segment through the probe library, in this process.
    lib: Vec<f64>,
}

/// 1. The meta's latency during a decode, through the queue and from the segment.
fn meta_latency(o: &Opts, dir: &Path) {
    let e = start_engine(dir, "meta", o.threads, true, None);
    let reader = SegmentReader::open(dir.join("meta.hps")).expect("open");
    let mut m = MetaLatency::default();
    for _ in 0..o.rounds {
        workload::fresh_prefill(&e, 0, "Benchmark: ");
        meta_round(o, &e, &reader, &mut m);
    }
    println!();
    println!("## meta latency while slot 0 decodes {} tokens", o.tokens);
    println!("| path | samples | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    for (name, v) in [
        ("task queue (`?via=queue`, the old way)", &mut m.queue),
        (
            "segment over HTTP (`/slots/0/state/meta`)",
            &mut m.http_segment,
        ),
        ("segment in-process (probe library)", &mut m.lib),
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
        pct(&mut m.queue, 0.5) / pct(&mut m.http_segment, 0.5)
    );
}

/// One decode of `o.tokens` on slot 0: once it runs, one meta through the queue and, until
/// it ends, metas from the segment over HTTP and in-process every 2 ms.
fn meta_round(o: &Opts, e: &Server, reader: &SegmentReader, m: &mut MetaLatency) {
    std::thread::scope(|scope| {
        let decode = scope.spawn(|| workload::decode(e, 0, o.tokens));
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
        let q = scope.spawn(|| {
            let t = Instant::now();
            let (code, body) = http::get(&e.url("/slots/0/state/meta?via=queue"));
            assert_eq!(code, 200, "queue meta: {body}");
            t.elapsed().as_secs_f64()
        });
        let meta_url = e.url("/slots/0/state/meta");
        let agent = http::agent();
        while !decode.is_finished() {
            let t = Instant::now();
            let (code, body) = http::call(agent.get(&meta_url), None);
            assert_eq!(code, 200, "segment meta: {body}");
            m.http_segment.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let v = EngineView::capture(reader, clock::monotonic_ns(), &Thresholds::default())
                .expect("capture");
            std::hint::black_box(hydra_probe::HydraMeta::from_view(&v, 0));
            m.lib.push(t.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(2));
        }
        decode.join().expect("decode thread");
        m.queue.push(q.join().expect("queue thread"));
    });
}

/// 2. Publishing on vs off, and 3. 0 vs 8 readers, in alternating ABBA pairs.
fn publishing_and_readers(o: &Opts, dir: &Path) {
    let (engine_cpu, reader_cpu) = if o.pin {
        (Some("0"), Some("1"))
    } else {
        (None, None)
    };
    let on = start_engine(dir, "on", o.threads, true, engine_cpu);
    let off = start_engine(dir, "off", o.threads, false, engine_cpu);
    let seg_on = dir.join("on.hps");
    // Warm both.
    decode_rate(&on, 64);
    decode_rate(&off, 64);
    let mut publish = Pairs::default();
    let mut readers = Pairs::default();
    for round in 0..o.rounds {
        let flip = round % 2 == 1;
        // Publishing off (a) vs on (b).
        let (a, b) = ab(
            flip,
            || decode_rate(&off, o.tokens),
            || decode_rate(&on, o.tokens),
        );
        publish.push(a, b);
        // 0 readers (a) vs 8 readers at 1 kHz (b); the readers live for side b only.
        let (a, b) = ab(
            flip,
            || decode_rate(&on, o.tokens),
            || with_readers(reader_cpu, &seg_on, || decode_rate(&on, o.tokens)),
        );
        readers.push(a, b);
    }
    println!();
    println!(
        "## decode throughput ({} tokens per decode, {} ABBA pairs, pinned: {})",
        o.tokens, o.rounds, o.pin
    );
    println!("| comparison | baseline tok/s | with tok/s | ratio of medians | median pair ratio [IQR] | CPU ms/token base -> with | CPU ratio |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    publish.row("publishing on vs off (`--no-publish`)");
    readers.row("8 reader processes at 1 kHz vs none");
    println!();
    publish.raw("publishing off / on");
    readers.raw("0 readers / 8 readers");
}

/// Runs `f` while 8 reader processes (this binary, `--reader`, on `cpu` if given) capture
/// the segment at `segment` at 1 kHz; they are killed afterwards.
fn with_readers(cpu: Option<&str>, segment: &Path, f: impl FnOnce() -> Rate) -> Rate {
    let me = std::env::current_exe().expect("current_exe");
    let mut procs: Vec<Child> = (0..8)
        .map(|_| {
            pinned(cpu, &me)
                .arg("--reader")
                .arg(segment)
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn reader")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = f();
    for p in &mut procs {
        let _ = p.kill();
        let _ = p.wait();
    }
    r
}

/// Runs `a` then `b`, or `b` then `a` when `flip`; returns `(a, b)`.
fn ab(flip: bool, a: impl FnOnce() -> Rate, b: impl FnOnce() -> Rate) -> (Rate, Rate) {
    if flip {
        let rb = b();
        (a(), rb)
    } else {
        let ra = a();
        (ra, b())
    }
}

/// Paired measurements: baseline (a) and variant (b).
#[derive(Default)]
struct Pairs {
    a: Vec<Rate>,
    b: Vec<Rate>,
}

impl Pairs {
    fn push(&mut self, a: Rate, b: Rate) {
        self.a.push(a);
        self.b.push(b);
    }

    fn row(&self, name: &str) {
        let mut ra: Vec<f64> = self.a.iter().map(|r| r.per_s).collect();
        let mut rb: Vec<f64> = self.b.iter().map(|r| r.per_s).collect();
        let mut ratios: Vec<f64> = self
            .a
            .iter()
            .zip(&self.b)
            .map(|(a, b)| b.per_s / a.per_s)
            .collect();
        let mut ca: Vec<f64> = self.a.iter().map(|r| r.cpu_ms_per_token).collect();
        let mut cb: Vec<f64> = self.b.iter().map(|r| r.cpu_ms_per_token).collect();
        let (ma, mb) = (median(&mut ra), median(&mut rb));
        let (mca, mcb) = (median(&mut ca), median(&mut cb));
        println!(
            "| {name} | {ma:.1} | {mb:.1} | {:.4} | {:.4} [{:.4}, {:.4}] | {mca:.3} -> {mcb:.3} | {:.4} |",
            mb / ma,
            pct(&mut ratios, 0.5),
            pct(&mut ratios, 0.25),
            pct(&mut ratios, 0.75),
            // Throughput ratio from CPU time per token: base / with.
            mca / mcb,
        );
    }

    fn raw(&self, name: &str) {
        let a: Vec<String> = self.a.iter().map(|r| format!("{:.1}", r.per_s)).collect();
        let b: Vec<String> = self.b.iter().map(|r| format!("{:.1}", r.per_s)).collect();
        println!(
            "raw tokens/s, {name}: [{}] / [{}]",
            a.join(", "),
            b.join(", ")
        );
    }
}
