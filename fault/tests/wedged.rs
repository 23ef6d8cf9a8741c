//! The statistics of an engine whose compute thread is wedged inside a step: the engine
//! serves three requests, then stops for good at layer 2 of a forward of the fourth (the
//! test build's fault hook, as a hung kernel would leave it). Its task queue answers
//! nothing now, but the exporter, which reads only the segment, still answers `/metrics`
//! with every histogram, holding exactly the three requests served, each scrape in under
//! 100 ms.

use hydra_exporter::engine_stats::HISTOGRAM_FAMILIES;
use hydra_fault::process::{start_engine, start_exporter, EngineOpts};
use hydra_fault::{http, scratch, wait_for};
use hydra_layout::SegmentReader;
use std::time::{Duration, Instant};

/// Tokens each of the three served requests generates.
const N_PREDICT: u64 = 8;

/// The sample `series` (exact name and labels) of a text exposition.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_wedged_engine_still_has_every_histogram_on_metrics() {
    let tmp = scratch("hydra-wedged");
    let dir = tmp.path();
    let id = "wedged";
    let mut opts = EngineOpts::new(dir, id);
    opts.slots = 1;
    // Three requests take some 3 x 9 forwards; the 40th is inside the fourth.
    opts.env = vec![
        ("HYDRA_ENGINE_STALL_AT_LAYER".into(), "2".into()),
        ("HYDRA_ENGINE_STALL_IN_FORWARD".into(), "40".into()),
    ];
    let mut engine = start_engine(&opts);
    let mut exporter = start_exporter(dir, &[]);
    let body =
        |n: u64| format!(r#"{{"prompt":"Once upon a time","n_predict":{n},"ignore_eos":true}}"#);
    for _ in 0..3 {
        let (code, answer) = http::post(&engine.url("/completion"), &body(N_PREDICT));
        assert_eq!(code, 200, "{answer}");
    }
    let url = engine.url("/completion");
    let long = body(200);
    std::thread::spawn(move || {
        // Never answered: the compute thread stays stopped until the engine is killed.
        let _ = http::try_call(http::agent().post(&url), Some(&long));
    });
    let reader = SegmentReader::open(opts.segment()).expect("segment");
    wait_for(
        Duration::from_secs(60),
        "the compute thread to stop",
        || {
            let s = reader.slot(0).ok()?;
            let at_layer = s.layer().is_some_and(|l| l.done == 2);
            let still = s.layer().is_some_and(|l| {
                hydra_layout::clock::monotonic_ns().saturating_sub(l.at_ns) > 300_000_000
            });
            (at_layer && still).then_some(())
        },
    );

    let e = format!(r#"{{engine="{id}"}}"#);
    let mut took = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let (code, body) = http::get(&exporter.url("/metrics"));
        took.push(started.elapsed());
        assert_eq!(code, 200);
        let text = body.as_str().expect("the exposition as text");
        for family in &HISTOGRAM_FAMILIES {
            assert!(
                text.contains(&format!("# TYPE {} histogram", family.name)),
                "{} missing while the engine is wedged",
                family.name
            );
        }
        let count = sample(text, &format!("hydra_e2e_request_latency_seconds_count{e}"));
        assert_eq!(count, Some(3.0), "three requests served");
        let ended = sample(text, &format!("hydra_tasks_ended_total{e}"));
        assert_eq!(ended, Some(3.0));
        let ttft = sample(text, &format!("hydra_time_to_first_token_seconds_count{e}"));
        assert_eq!(
            ttft,
            Some(4.0),
            "the wedged request had its first token too"
        );
        let generated = sample(text, &format!("hydra_tokens_generated_total{e}"));
        assert!(
            generated.is_some_and(|g| g >= 3.0 * N_PREDICT as f64),
            "{generated:?}"
        );
    }
    let slowest = took.iter().max().copied().unwrap_or_default();
    eprintln!("scrapes of the wedged engine took {took:?}");
    assert!(slowest < Duration::from_millis(100), "{took:?}");
    engine.kill();
    exporter.kill();
}
