//! The engines' statistics (format v1.3) on `/metrics`: histograms and counters with
//! exactly the counts, buckets and sums the writers' steps imply, summed per engine or per
//! slot, the same as prometheus-client's encoding of them, accepted by promtool, and
//! absent (not zero) for a writer that keeps none. (`tests/exposition.rs` checks the same
//! engines against prometheus-client's encoding.)

mod common;

use common::*;
use hydra_exporter::{render, Collector, Format};
use hydra_probe::Thresholds;
use std::sync::Arc;

fn scrape(collector: &Collector, format: Format) -> String {
    render(Arc::new(collector.collect()), collector.stats(), format)
}

fn value(body: &str, series: &str) -> f64 {
    sample(body, series).unwrap_or_else(|| panic!("no {series} in\n{body}"))
}

/// The text scrape of an engine of 3 slots that served requests
/// ([`hydra_fault::segments::served`]), with its writer (alive while the body is read).
fn served_scrape() -> (
    hydra_fault::segments::Scratch,
    hydra_layout::SegmentWriter,
    String,
) {
    let s = hydra_fault::segments::Scratch::new();
    let w = s.served("served", 3);
    let body = scrape(&Collector::new(&s.dir, Thresholds::default()), Format::Text);
    (s, w, body)
}

/// The value of `name` for engine `served`, with the `extra` label pairs after its own
/// (`,cause="length"`; empty for none).
fn of(body: &str, name: &str, extra: &str) -> f64 {
    value(body, &format!(r#"{name}{{engine="served"{extra}}}"#))
}

#[test]
fn an_engine_sums_its_slots_into_exact_counters() {
    let (_s, _w, body) = served_scrape();
    // Three requests served, one failed: 2 + 3 + 4 tokens generated.
    assert_eq!(of(&body, "hydra_tasks_begun_total", ""), 4.0);
    assert_eq!(of(&body, "hydra_tasks_ended_total", ""), 4.0);
    assert_eq!(of(&body, "hydra_tokens_generated_total", ""), 9.0);
    // 3 x 100 prompt tokens, and the failed request's 50 (its step finished before it failed).
    assert_eq!(of(&body, "hydra_prompt_tokens_computed_total", ""), 350.0);
    let cause = |c: &str| {
        of(
            &body,
            "hydra_tasks_finished_total",
            &format!(r#",cause="{c}""#),
        )
    };
    assert_eq!(
        (cause("length"), cause("error"), cause("eos")),
        (3.0, 1.0, 0.0)
    );
    let code = |c: &str| of(&body, "hydra_task_errors_total", &format!(r#",code="{c}""#));
    assert_eq!((code("compute"), code("io")), (1.0, 0.0));
    assert!(!body.contains(r#"code="none""#), "none is no error code");
    // Steps: 4 prefill (3 + the failed one), 9 decode; busy 40 x 3 + 30 + 9 x 10 ms.
    let steps = |k: &str| of(&body, "hydra_steps_total", &format!(r#",kind="{k}""#));
    assert_eq!(
        (steps("prefill"), steps("decode"), steps("save")),
        (4.0, 9.0, 0.0)
    );
    let busy = |p: &str| {
        of(
            &body,
            "hydra_busy_seconds_total",
            &format!(r#",phase="{p}""#),
        )
    };
    assert!((busy("prefill") - 0.150).abs() < 1e-9 && (busy("decode") - 0.090).abs() < 1e-9);
    promtool(&["check", "metrics"], &body);
}

#[test]
fn an_engine_sums_its_slots_into_exact_histograms() {
    let (_s, _w, body) = served_scrape();
    // Inter-token latency: 9 observations of 10 ms, cumulative buckets; 10 ms lies in
    // (8.192, 12.288] ms.
    let itl = "hydra_inter_token_latency_seconds";
    assert_eq!(of(&body, &format!("{itl}_count"), ""), 9.0);
    assert!((of(&body, &format!("{itl}_sum"), "") - 0.090).abs() < 1e-12);
    let bucket = |le: &str| of(&body, &format!("{itl}_bucket"), &format!(r#",le="{le}""#));
    assert_eq!(
        (bucket("0.008192"), bucket("0.012288"), bucket("+Inf")),
        (0.0, 9.0, 9.0)
    );
    // Queue wait 5 ms for the three requests that waited; time to first token is the
    // arrival to the change from prefill to decode (the first token is sampled from the
    // prompt's last logits): 45 ms.
    let ttft = "hydra_time_to_first_token_seconds";
    assert_eq!(of(&body, &format!("{ttft}_count"), ""), 3.0);
    assert!((of(&body, &format!("{ttft}_sum"), "") - 3.0 * 0.045).abs() < 1e-9);
    let queue = of(&body, "hydra_request_queue_time_seconds_sum", "");
    assert!((queue - 3.0 * 0.005).abs() < 1e-9, "{queue}");
    // The cost model: the predicted prefill steps took twice their prediction.
    let ratio = |k: &str, le: &str| {
        let name = "hydra_step_duration_over_predicted_ratio_bucket";
        of(&body, name, &format!(r#",kind="{k}",le="{le}""#))
    };
    assert_eq!(
        (ratio("prefill", "1.75"), ratio("prefill", "2")),
        (0.0, 3.0)
    );
    assert_eq!(ratio("decode", "1"), 9.0);
    // Save and restore steps never happened: their series exist, at zero.
    let save = of(
        &body,
        "hydra_step_duration_seconds_count",
        r#",kind="save""#,
    );
    assert_eq!(save, 0.0);
    promtool(&["check", "metrics"], &body);
}

#[test]
fn per_slot_statistics_carry_the_slot_and_add_up_to_the_engine() {
    let s = hydra_fault::segments::Scratch::new();
    let _w = s.served("served", 3);
    let summed = Collector::new(&s.dir, Thresholds::default());
    let per_slot = Collector::new(&s.dir, Thresholds::default()).with_per_slot_stats(true);
    let total = scrape(&summed, Format::Text);
    let body = scrape(&per_slot, Format::Text);
    let mut sum = 0.0;
    for slot in 0..3 {
        let series = format!(r#"hydra_tokens_generated_total{{engine="served",slot="{slot}"}}"#);
        assert_eq!(value(&body, &series), slot as f64 + 2.0);
        sum += value(&body, &series);
    }
    assert_eq!(
        value(&total, r#"hydra_tokens_generated_total{engine="served"}"#),
        sum
    );
    let count = r#"hydra_inter_token_latency_seconds_count{engine="served",slot="2"}"#;
    assert_eq!(value(&body, count), 4.0);
    assert!(!body.contains(r#"hydra_inter_token_latency_seconds_count{engine="served"} "#));
    promtool(&["check", "metrics"], &body);
}

#[test]
fn a_writer_without_statistics_has_no_statistics_series() {
    let s = hydra_fault::segments::Scratch::new();
    // A v1.2 writer's segment (a v1.3 one relabelled, beside the directory first): it
    // keeps no statistics.
    let elsewhere = hydra_fault::segments::Scratch::new();
    let w = elsewhere.served("old", 2);
    let mut bytes = std::fs::read(w.path()).unwrap();
    let minor = hydra_layout::header::VERSION_MINOR_OFFSET;
    bytes[minor..minor + 8].copy_from_slice(&2u64.to_ne_bytes());
    std::fs::write(hydra_layout::naming::segment_path(&s.dir, "old"), &bytes).unwrap();
    let collector = Collector::new(&s.dir, Thresholds::default());
    let body = scrape(&collector, Format::Text);
    assert!(
        body.contains(r#"hydra_engine_slots{engine="old"} 2"#),
        "{body}"
    );
    for family in hydra_exporter::engine_stats::HISTOGRAM_FAMILIES {
        assert!(
            !body.contains(family.name),
            "{}: absent, not zero",
            family.name
        );
    }
    assert!(!body.contains("hydra_tasks_begun_total"), "{body}");
}

/// A slot whose statistics fail the format's checks (the corpus' served engine with one
/// histogram's buckets adding up to more than its count) is not summed: the engine's
/// statistics are left out of that scrape (a gap, never a sum that goes backwards), while
/// its slots are exported and a sound engine beside it keeps its statistics.
#[test]
fn a_slot_with_faulty_statistics_leaves_its_engine_s_statistics_out() {
    let s = hydra_fault::segments::Scratch::new();
    let outside = hydra_fault::segments::Scratch::new();
    hydra_fault::corpus::build(&s.dir, &outside.dir);
    let body = scrape(&Collector::new(&s.dir, Thresholds::default()), Format::Text);
    let faulty = r#"engine="stats-buckets-backwards""#;
    assert!(
        body.contains(&format!("hydra_engine_slots{{{faulty}}} 3")),
        "its slots are exported"
    );
    assert!(
        !body.contains(&format!("hydra_tasks_begun_total{{{faulty}}}")),
        "no statistics for it"
    );
    assert_eq!(
        value(&body, r#"hydra_tasks_begun_total{engine="stats-served"}"#),
        4.0
    );
}
