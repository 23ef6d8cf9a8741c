//! The statistics are exact against a real client: 40 streamed completions of mixed prompt
//! and decode lengths through the `openai` PyPI client (`tests/clients/stats_client.py`),
//! in waves of 4 on an engine of 2 slots, then one scrape of the exporter:
//! - its counts equal the number of requests, and of generated and prompt tokens, exactly;
//! - every request's server-side time to first token and end-to-end time are at most what
//!   the client measured: for every bucket bound, at least as many server values as client
//!   values lie below it;
//! - the histograms' sums are within 5% of the client's, less its measured HTTP overhead;
//! - queue wait is near zero (under 33 ms) for the request each wave starts first, and the
//!   two that wait for a slot in each wave show it (over 49 ms).
//!
//! `HYDRA_EXACT_SEED` replays a draw of lengths (the seed is printed).

use hydra_fault::process::{start_engine, start_exporter, EngineOpts};
use hydra_fault::{env_num, http, scratch};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const WAVES: usize = 10;

/// The value of the sample `series` (exact name and labels) of a text exposition.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape"))
}

/// A histogram of the scrape: its cumulative buckets `(le, count)` in order, and its sum.
fn histogram(body: &str, name: &str, engine: &str) -> (Vec<(f64, f64)>, f64) {
    let prefix = format!("{name}_bucket{{engine=\"{engine}\",le=\"");
    let buckets = body
        .lines()
        .filter_map(|l| {
            let (le, count) = l.strip_prefix(&prefix)?.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.parse().ok()?))
        })
        .collect();
    let sum = sample(body, &format!("{name}_sum{{engine=\"{engine}\"}}"));
    (buckets, sum)
}

/// Every server value is at most its client value: at each bound, the server's cumulative
/// count is at least the number of client values at or below it.
fn assert_server_not_later(what: &str, buckets: &[(f64, f64)], client: &[f64]) {
    for (le, count) in buckets {
        let below = client.iter().filter(|c| **c <= *le).count() as f64;
        assert!(
            *count >= below,
            "{what}: {count} server values <= {le} s but {below} client ones"
        );
    }
}

/// The client's sum less `n` HTTP round trips, against the server's sum: within 5%.
fn assert_sums_agree(what: &str, client: &[f64], overhead: f64, server: f64) {
    let client = client.iter().sum::<f64>() - client.len() as f64 * overhead;
    let rel = (client - server) / server;
    eprintln!(
        "{what}: client {client:.4} s (less HTTP), server {server:.4} s: {:+.2}%",
        rel * 100.0
    );
    assert!(rel.abs() <= 0.05, "{what}: {:+.2}% apart", rel * 100.0);
}

fn run_client(base: &str, model: &str, seed: u64) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/stats_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([base, model, &WAVES.to_string(), &seed.to_string()])
        .output()
        .expect("run the openai client script");
    assert!(
        out.status.success(),
        "the client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client's JSON")
}

#[test]
fn the_exporter_counts_what_a_real_client_saw() {
    let test = "the_exporter_counts_what_a_real_client_saw";
    if hydra_fault::require::python_module(test, "openai").is_none() {
        return;
    }
    let seed = env_num("HYDRA_EXACT_SEED", 11u64);
    eprintln!("{test}: HYDRA_EXACT_SEED={seed}");
    let tmp = scratch("hydra-exactness");
    let id = "exact";
    let mut opts = EngineOpts::new(tmp.path(), id);
    opts.slots = 2;
    let mut engine = start_engine(&opts);
    let mut exporter = start_exporter(tmp.path(), &[]);
    let (_, models) = http::get(&engine.url("/v1/models"));
    let model = models["data"][0]["id"]
        .as_str()
        .expect("a model id")
        .to_owned();
    let client = run_client(engine.base.as_str(), &model, seed);
    let requests = client["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 4 * WAVES);
    let figure = |key: &str| -> Vec<f64> {
        requests
            .iter()
            .map(|r| r[key].as_f64().unwrap_or_else(|| panic!("{key} of {r}")))
            .collect()
    };
    let (ttft, e2e) = (figure("ttft_s"), figure("e2e_s"));
    let generated: f64 = figure("completion_tokens").iter().sum();
    let prompt: f64 = figure("prompt_tokens").iter().sum();
    let overhead = client["http_overhead_s"].as_f64().expect("overhead");

    let (code, body) = http::get(&exporter.url("/metrics"));
    assert_eq!(code, 200);
    let body = body.as_str().expect("text");
    let e = format!("{{engine=\"{id}\"}}");
    let n = requests.len() as f64;
    assert_eq!(sample(body, &format!("hydra_tasks_ended_total{e}")), n);
    assert_eq!(
        sample(body, &format!("hydra_e2e_request_latency_seconds_count{e}")),
        n
    );
    assert_eq!(
        sample(body, &format!("hydra_time_to_first_token_seconds_count{e}")),
        n
    );
    assert_eq!(
        sample(body, &format!("hydra_tokens_generated_total{e}")),
        generated
    );
    let computed = sample(body, &format!("hydra_prompt_tokens_computed_total{e}"));
    let reused = sample(body, &format!("hydra_prompt_tokens_reused_total{e}"));
    assert_eq!(
        computed + reused,
        prompt,
        "prompt tokens, computed or reused"
    );

    let (ttft_buckets, ttft_sum) = histogram(body, "hydra_time_to_first_token_seconds", id);
    let (e2e_buckets, e2e_sum) = histogram(body, "hydra_e2e_request_latency_seconds", id);
    assert_server_not_later("time to first token", &ttft_buckets, &ttft);
    assert_server_not_later("end-to-end", &e2e_buckets, &e2e);
    assert_sums_agree("time to first token", &ttft, overhead, ttft_sum);
    assert_sums_agree("end-to-end", &e2e, overhead, e2e_sum);

    // Queue wait: the first request of each wave computes at once; the two that find both
    // slots taken wait for one to finish a generation of at least 96 tokens (some 100 ms
    // or more here). The bounds leave room for a loaded machine on both sides.
    let (queue, _) = histogram(body, "hydra_request_queue_time_seconds", id);
    let at = |bound: f64| queue.iter().find(|(le, _)| *le == bound).map(|(_, c)| *c);
    let near_zero = at(0.032768).expect("the 32.768 ms bucket");
    let waited = n - at(0.049152).expect("the 49.152 ms bucket");
    eprintln!("queue wait: {near_zero} requests under 32.8 ms, {waited} over 49.2 ms");
    assert!(near_zero >= WAVES as f64, "{near_zero} near zero");
    assert!(waited >= 2.0 * WAVES as f64, "{waited} waited for a slot");
    engine.kill();
    exporter.kill();
}
