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

use hydra_fault::process::{pinned, start_engine, start_exporter, EngineOpts};
use hydra_fault::workload::decode_rate;
use hydra_fault::{bins, env_num, http, scratch, stats};
use rustix::process::{kill_process, Pid, Signal};
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

#[test]
fn a_hundred_readers_and_scrapes_never_see_torn_data_nor_stop_the_engine() {
    let readers: usize = env_num("HYDRA_LOAD_READERS", 100);
    let hz: u32 = env_num("HYDRA_LOAD_HZ", 100);
    let cli_ms: u64 = env_num("HYDRA_LOAD_CLI_INTERVAL_MS", 100);
    let rounds: usize = env_num("HYDRA_LOAD_ROUNDS", 2);
    let tokens: usize = env_num("HYDRA_LOAD_TOKENS", 256);
    let pin = env_num::<u8>("HYDRA_LOAD_PIN", 0) == 1;
    let (engine_cpu, reader_cpu) = if pin {
        (Some("0"), Some("1"))
    } else {
        (None, None)
    };

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

    // The readers: CLI watch loops and library loops, alternating.
    let probe = bins::probe();
    let lib_reader = std::path::PathBuf::from(env!("CARGO_BIN_EXE_hydra-fault-reader"));
    let mut cli = Vec::new();
    let mut lib = Vec::new();
    for i in 0..readers {
        if i % 2 == 0 {
            let out = std::fs::File::create(out_dir.join(format!("cli-{i}.jsonl"))).unwrap();
            let child = pinned(reader_cpu, &probe)
                .arg("--dir")
                .arg(&dir)
                .args(["--json", "watch", &opts.id])
                .arg(format!("--interval={cli_ms}ms"))
                .stdout(out)
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn hydra-probe watch");
            cli.push(child);
        } else {
            let child = pinned(reader_cpu, &lib_reader)
                .arg(opts.segment())
                .args(["--hz", &hz.to_string(), "--seconds", "1800"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn hydra-fault-reader");
            lib.push(child);
        }
    }
    let all: Vec<&Child> = cli.iter().chain(lib.iter()).collect();
    let pids: Vec<Pid> = all
        .iter()
        .map(|c| Pid::from_raw(c.id() as i32).expect("pid"))
        .collect();
    let set_readers = |run: bool| {
        for &pid in &pids {
            kill_process(pid, if run { Signal::CONT } else { Signal::STOP }).expect("signal");
        }
    };

    // Exporter scrapes at 10 Hz while `scraping` is set.
    let scraping = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let scraper = {
        let (scraping, done) = (scraping.clone(), done.clone());
        let (latencies, failures) = (latencies.clone(), failures.clone());
        let url = exporter.url("/metrics");
        std::thread::spawn(move || {
            let agent = http::agent();
            let deadline = Instant::now() + Duration::from_secs(1800);
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                let tick = Instant::now();
                if scraping.load(Ordering::Relaxed) {
                    match agent.get(&url).call() {
                        Ok(r) if r.status() == 200 => {
                            let body = r.into_string().unwrap_or_default();
                            latencies.lock().unwrap().push(tick.elapsed().as_secs_f64());
                            if !body.contains("engine=\"loaded\"") {
                                failures
                                    .lock()
                                    .unwrap()
                                    .push("scrape without the engine".into());
                            }
                        }
                        other => failures.lock().unwrap().push(format!("{other:?}")),
                    }
                }
                std::thread::sleep(Duration::from_millis(100).saturating_sub(tick.elapsed()));
            }
        })
    };

    // Let every reader open the segment, then measure in alternating rounds (ABBA order).
    std::thread::sleep(Duration::from_millis(500));
    let (mut quiet, mut loaded, mut pair_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_quiet, mut cpu_loaded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0f64; 2];
        for with_readers in order {
            set_readers(with_readers);
            scraping.store(with_readers, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100));
            let r = decode_rate(&engine, tokens);
            let (rate, cpu) = (r.per_s, r.cpu_ms_per_token);
            pair[usize::from(with_readers)] = rate;
            if with_readers {
                loaded.push(rate);
                cpu_loaded.push(cpu);
            } else {
                quiet.push(rate);
                cpu_quiet.push(cpu);
            }
        }
        pair_ratios.push(pair[1] / pair[0]);
    }
    set_readers(true);
    scraping.store(false, Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    scraper.join().expect("scraper");

    // Stop every reader cleanly (SIGTERM: they print their summary and exit 0).
    let children: Vec<Child> = cli.into_iter().chain(lib).collect();
    signal_all(&children, Signal::TERM);
    let (mut cli_lines, mut lib_captures) = (0usize, 0u64);
    let mut lib_latency_p99 = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("reader exit");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "reader {i} failed: {:?} {stderr}",
            out.status
        );
        if i < readers.div_ceil(2) {
            continue;
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("library reader summary");
        assert_eq!(summary["torn"], 0, "torn records seen: {summary}");
        assert_eq!(summary["errors"], 0, "read errors: {summary}");
        assert_eq!(summary["regressions"], 0, "progress went back: {summary}");
        let captures = summary["captures"].as_u64().unwrap_or(0);
        assert!(captures > 0, "{summary}");
        lib_captures += captures;
        lib_latency_p99.push(summary["p99_us"].as_f64().unwrap_or(0.0));
    }
    // The CLI loops' output: one engine view per line, never torn, tokens monotone per task.
    for entry in std::fs::read_dir(&out_dir).unwrap() {
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
            cli_lines += 1;
        }
    }
    assert!(cli_lines > 0, "no output from the CLI readers");
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "scrape failures: {failures:?}");
    let mut lat = latencies.lock().unwrap().clone();
    assert!(!lat.is_empty(), "no scrapes happened");

    let q = stats::median(&mut quiet).unwrap();
    let l = stats::median(&mut loaded).unwrap();
    let r = stats::median(&mut pair_ratios).unwrap();
    eprintln!("load: {readers} readers ({} CLI watch at {cli_ms} ms, {} library loops at {hz} Hz), exporter at 10 Hz, pinned: {pin}", readers.div_ceil(2), readers / 2);
    eprintln!("load: decode {tokens} tokens x {rounds} alternating pairs: readers stopped {q:.1} tok/s, running {l:.1} tok/s; ratio of medians {:.4}, median pair ratio {r:.4}", l / q);
    let (cq, cl) = (
        stats::median(&mut cpu_quiet).unwrap(),
        stats::median(&mut cpu_loaded).unwrap(),
    );
    eprintln!("load: engine CPU per token: readers stopped {cq:.4} ms, running {cl:.4} ms; CPU-time throughput ratio {:.4}", cq / cl);
    eprintln!("load: per-pair ratios {pair_ratios:.4?}; quiet {quiet:.1?}; loaded {loaded:.1?}");
    eprintln!("load: {lib_captures} library captures and {cli_lines} CLI views, 0 torn, 0 errors");
    eprintln!("load: scrape latency {}", stats::latency_row(&mut lat));
    eprintln!(
        "load: library capture p99 per reader, median {:.1} us",
        stats::median(&mut lib_latency_p99).unwrap_or(0.0)
    );
    drop(exporter);
    drop(engine);
}
