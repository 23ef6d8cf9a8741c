//! Load: 100 concurrent reader processes (half `hydra-probe watch` CLI loops, half
//! probe-library loops) plus exporter scrapes at 10 Hz while the engine decodes.
//!
//! Asserts: no reader ever sees a torn record, an error or progress going backwards; every
//! scrape answers 200; the engine decodes throughout. Prints the decode throughput with the
//! readers running versus stopped (SIGSTOP, so the same processes stay mapped), measured in
//! alternating rounds, and the scrape latency distribution. The throughput ratio is a
//! measurement, not an assertion: `scripts/load-test.sh` runs the documented
//! configuration (release, longer, optionally pinned) and BENCHMARKS.md records it.
//!
//! Environment: `HYDRA_LOAD_READERS` (100), `HYDRA_LOAD_HZ` (library loop rate, 100),
//! `HYDRA_LOAD_CLI_INTERVAL_MS` (100), `HYDRA_LOAD_ROUNDS` (alternating pairs, 2),
//! `HYDRA_LOAD_TOKENS` (per decode, 256), `HYDRA_LOAD_PIN` (1: engine on CPU 0, readers
//! and exporter on CPU 1).

use hydra_fault::process::{pinned, start_engine, start_exporter, EngineOpts, Server};
use hydra_fault::workload::decode_rate;
use hydra_fault::{bins, env_num, http, scratch, stats};
use rustix::process::{kill_process, Pid, Signal};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn signal_all(children: &[Child], sig: Signal) {
    for c in children {
        let pid = Pid::from_raw(c.id() as i32).expect("pid");
        kill_process(pid, sig).expect("signal reader");
    }
}

/// The run's shape, from the environment (the module's documentation lists the names).
struct Config {
    readers: usize,
    hz: u32,
    cli_ms: u64,
    rounds: usize,
    tokens: usize,
    pin: bool,
}

impl Config {
    fn from_env() -> Self {
        Self {
            readers: env_num("HYDRA_LOAD_READERS", 100),
            hz: env_num("HYDRA_LOAD_HZ", 100),
            cli_ms: env_num("HYDRA_LOAD_CLI_INTERVAL_MS", 100),
            rounds: env_num("HYDRA_LOAD_ROUNDS", 2),
            tokens: env_num("HYDRA_LOAD_TOKENS", 256),
            pin: env_num::<u8>("HYDRA_LOAD_PIN", 0) == 1,
        }
    }

    /// The CPUs of the engine and of the readers: 0 and 1 when pinned.
    fn cpus(&self) -> (Option<&'static str>, Option<&'static str>) {
        if self.pin {
            (Some("0"), Some("1"))
        } else {
            (None, None)
        }
    }
}

/// The readers, alternating: `hydra-probe watch` loops (their views to `out_dir`) and
/// library loops, on `cpu` if given. Returns the CLI loops, then the library loops.
fn spawn_readers(
    cfg: &Config,
    opts: &EngineOpts,
    out_dir: &Path,
    cpu: Option<&str>,
) -> (Vec<Child>, Vec<Child>) {
    let probe = bins::probe();
    let lib_reader = PathBuf::from(env!("CARGO_BIN_EXE_hydra-fault-reader"));
    let (mut cli, mut lib) = (Vec::new(), Vec::new());
    for i in 0..cfg.readers {
        if i % 2 == 0 {
            let out = std::fs::File::create(out_dir.join(format!("cli-{i}.jsonl"))).unwrap();
            let child = pinned(cpu, &probe)
                .arg("--dir")
                .arg(&opts.dir)
                .args(["--json", "watch", &opts.id])
                .arg(format!("--interval={}ms", cfg.cli_ms))
                .stdout(out)
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn hydra-probe watch");
            cli.push(child);
        } else {
            let child = pinned(cpu, &lib_reader)
                .arg(opts.segment())
                .args(["--hz", &cfg.hz.to_string(), "--seconds", "1800"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn hydra-fault-reader");
            lib.push(child);
        }
    }
    (cli, lib)
}

/// A thread that scrapes the exporter at 10 Hz while `scraping` is set, keeping each
/// scrape's latency and what went wrong.
struct Scraper {
    scraping: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    latencies: Arc<Mutex<Vec<f64>>>,
    failures: Arc<Mutex<Vec<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Scraper {
    fn start(url: String) -> Self {
        let scraping = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (scraping, done) = (scraping.clone(), done.clone());
            let (latencies, failures) = (latencies.clone(), failures.clone());
            std::thread::spawn(move || {
                let agent = http::agent();
                let deadline = Instant::now() + Duration::from_secs(1800);
                while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let tick = Instant::now();
                    if scraping.load(Ordering::Relaxed) {
                        match scrape(&agent, &url) {
                            Ok(()) => latencies.lock().unwrap().push(tick.elapsed().as_secs_f64()),
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
                }
            })
        };
        Self {
            scraping,
            done,
            latencies,
            failures,
            thread,
        }
    }

    fn set(&self, scraping: bool) {
        self.scraping.store(scraping, Ordering::Relaxed);
    }

    /// Stops the thread; returns the latencies and the failures.
    fn stop(self) -> (Vec<f64>, Vec<String>) {
        self.set(false);
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().expect("scraper");
        let latencies = self.latencies.lock().unwrap().clone();
        let failures = self.failures.lock().unwrap().clone();
        (latencies, failures)
    }
}

/// One scrape: 200 with the engine in it, or what went wrong.
fn scrape(agent: &ureq::Agent, url: &str) -> Result<(), String> {
    match agent.get(url).call() {
        Ok(r) if r.status() == 200 => {
            let body = r.into_string().unwrap_or_default();
            if body.contains("engine=\"loaded\"") {
                Ok(())
            } else {
                Err("scrape without the engine".into())
            }
        }
        other => Err(format!("{other:?}")),
    }
}

/// Decode rates and CPU times per token with the readers stopped (quiet) and running
/// (loaded), and each pair's ratio loaded / quiet.
#[derive(Default)]
struct Rates {
    quiet: Vec<f64>,
    loaded: Vec<f64>,
    pair_ratios: Vec<f64>,
    cpu_quiet: Vec<f64>,
    cpu_loaded: Vec<f64>,
}

impl Rates {
    /// `cfg.rounds` pairs in ABBA order, the readers (`pids`) and the scrapes stopped for
    /// one side and running for the other.
    fn measure(cfg: &Config, engine: &Server, pids: &[Pid], scraper: &Scraper) -> Self {
        let mut r = Self::default();
        for round in 0..cfg.rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut pair = [0.0f64; 2];
            for with_readers in order {
                set_running(pids, with_readers);
                scraper.set(with_readers);
                std::thread::sleep(Duration::from_millis(100));
                let rate = decode_rate(engine, cfg.tokens);
                pair[usize::from(with_readers)] = rate.per_s;
                let (rates, cpu) = if with_readers {
                    (&mut r.loaded, &mut r.cpu_loaded)
                } else {
                    (&mut r.quiet, &mut r.cpu_quiet)
                };
                rates.push(rate.per_s);
                cpu.push(rate.cpu_ms_per_token);
            }
            r.pair_ratios.push(pair[1] / pair[0]);
        }
        set_running(pids, true);
        r
    }
}

/// SIGCONT (`run`) or SIGSTOP to every process of `pids`.
fn set_running(pids: &[Pid], run: bool) {
    for &pid in pids {
        kill_process(pid, if run { Signal::CONT } else { Signal::STOP }).expect("signal");
    }
}

/// Waits for every reader (the first `cli` of `children` the CLI loops), each of which must
/// exit 0; the library loops' summaries must show captures and no torn record, error or
/// regression. Returns their captures and their p99 latencies (us).
fn check_readers(children: Vec<Child>, cli: usize) -> (u64, Vec<f64>) {
    let (mut captures, mut p99s) = (0u64, Vec::new());
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("reader exit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "reader {i} failed: {:?} {stderr}",
            out.status
        );
        if i < cli {
            continue;
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("library reader summary");
        assert_eq!(summary["torn"], 0, "torn records seen: {summary}");
        assert_eq!(summary["errors"], 0, "read errors: {summary}");
        assert_eq!(summary["regressions"], 0, "progress went back: {summary}");
        let n = summary["captures"].as_u64().unwrap_or(0);
        assert!(n > 0, "{summary}");
        captures += n;
        p99s.push(summary["p99_us"].as_f64().unwrap_or(0.0));
    }
    (captures, p99s)
}

/// The CLI loops' output in `out_dir`: one engine view per line, never torn, tokens
/// monotone per task. Returns the number of views.
fn check_cli_views(out_dir: &Path) -> usize {
    let mut views = 0;
    for entry in std::fs::read_dir(out_dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut last = (0u64, 0u64);
        for line in text.lines() {
            let view: serde_json::Value = serde_json::from_str(line).expect("watch JSON line");
            let slot = &view["slots"][0];
            assert_ne!(slot["class"], "torn", "{line}");
            let task = slot["state"]["task_id"].as_u64().unwrap_or(0);
            let done = slot["state"]["work_done"].as_u64().unwrap_or(0);
            let phase = slot["state"]["phase"].as_str().unwrap_or("");
            if task == last.0 && phase == "decode" {
                assert!(done >= last.1, "work went back: {line}");
            }
            if phase == "decode" {
                last = (task, done);
            }
            views += 1;
        }
    }
    views
}

/// Prints the measurement (a measurement, not an assertion: see the module's text).
fn report(
    cfg: &Config,
    r: &mut Rates,
    views: usize,
    captures: u64,
    scrape_latency: &mut [f64],
    p99s: &mut [f64],
) {
    let Config {
        readers,
        hz,
        cli_ms,
        rounds,
        tokens,
        pin,
    } = *cfg;
    let q = stats::median(&mut r.quiet).unwrap();
    let l = stats::median(&mut r.loaded).unwrap();
    let pr = stats::median(&mut r.pair_ratios).unwrap();
    eprintln!("load: {readers} readers ({} CLI watch at {cli_ms} ms, {} library loops at {hz} Hz), exporter at 10 Hz, pinned: {pin}", readers.div_ceil(2), readers / 2);
    eprintln!("load: decode {tokens} tokens x {rounds} alternating pairs: readers stopped {q:.1} tok/s, running {l:.1} tok/s; ratio of medians {:.4}, median pair ratio {pr:.4}", l / q);
    let (cq, cl) = (
        stats::median(&mut r.cpu_quiet).unwrap(),
        stats::median(&mut r.cpu_loaded).unwrap(),
    );
    eprintln!("load: engine CPU per token: readers stopped {cq:.4} ms, running {cl:.4} ms; CPU-time throughput ratio {:.4}", cq / cl);
    eprintln!(
        "load: per-pair ratios {:.4?}; quiet {:.1?}; loaded {:.1?}",
        r.pair_ratios, r.quiet, r.loaded
    );
    eprintln!("load: {captures} library captures and {views} CLI views, 0 torn, 0 errors");
    eprintln!(
        "load: scrape latency {}",
        stats::latency_row(scrape_latency)
    );
    eprintln!(
        "load: library capture p99 per reader, median {:.1} us",
        stats::median(p99s).unwrap_or(0.0)
    );
}

#[test]
fn a_hundred_readers_and_scrapes_never_see_torn_data_nor_stop_the_engine() {
    let cfg = Config::from_env();
    let (engine_cpu, reader_cpu) = cfg.cpus();
    let tmp = scratch("hydra-load.");
    let dir = tmp.path().join("segments");
    std::fs::create_dir(&dir).unwrap();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut opts = EngineOpts::new(&dir, "loaded");
    opts.cpus = engine_cpu.map(str::to_string);
    let engine = start_engine(&opts);
    let exporter = start_exporter(&dir, &[]);
    decode_rate(&engine, 32); // warm up

    let (cli, lib) = spawn_readers(&cfg, &opts, &out_dir, reader_cpu);
    let pids: Vec<Pid> = cli
        .iter()
        .chain(lib.iter())
        .map(|c| Pid::from_raw(c.id() as i32).expect("pid"))
        .collect();
    let scraper = Scraper::start(exporter.url("/metrics"));
    // Let every reader open the segment, then measure in alternating rounds (ABBA order).
    std::thread::sleep(Duration::from_millis(500));
    let mut rates = Rates::measure(&cfg, &engine, &pids, &scraper);
    let (mut latencies, failures) = scraper.stop();

    // Stop every reader cleanly (SIGTERM: they print their summary and exit 0).
    let cli_count = cli.len();
    let children: Vec<Child> = cli.into_iter().chain(lib).collect();
    signal_all(&children, Signal::TERM);
    let (captures, mut p99s) = check_readers(children, cli_count);
    let views = check_cli_views(&out_dir);
    assert!(views > 0, "no output from the CLI readers");
    assert!(failures.is_empty(), "scrape failures: {failures:?}");
    assert!(!latencies.is_empty(), "no scrapes happened");
    report(&cfg, &mut rates, views, captures, &mut latencies, &mut p99s);
    drop(exporter);
    drop(engine);
}
