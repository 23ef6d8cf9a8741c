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

#[test]
fn an_engine_sums_its_slots_into_exact_histograms_and_counters() {
    let s = hydra_fault::segments::Scratch::new();
    let _w = s.served("served", 3);
    let collector = Collector::new(&s.dir, Thresholds::default());
    let body = scrape(&collector, Format::Text);
    let e = r#"engine="served""#;
    // Three requests served, one failed: 2 + 3 + 4 tokens generated.
    assert_eq!(
        value(&body, &format!("hydra_tasks_begun_total{{{e}}}")),
        4.0
    );
    assert_eq!(
        value(&body, &format!("hydra_tasks_ended_total{{{e}}}")),
        4.0
    );
    assert_eq!(
        value(&body, &format!("hydra_tokens_generated_total{{{e}}}")),
        9.0
    );
    // 3 x 100 prompt tokens, and the failed request's 50 (its step finished before it failed).
    assert_eq!(
        value(&body, &format!("hydra_prompt_tokens_computed_total{{{e}}}")),
        350.0
    );
    let cause = |c: &str| {
        value(
            &body,
            &format!(r#"hydra_tasks_finished_total{{{e},cause="{c}"}}"#),
        )
    };
    assert_eq!(
        (cause("length"), cause("error"), cause("eos")),
        (3.0, 1.0, 0.0)
    );
    let code = |c: &str| {
        value(
            &body,
            &format!(r#"hydra_task_errors_total{{{e},code="{c}"}}"#),
        )
    };
    assert_eq!((code("compute"), code("io")), (1.0, 0.0));
    assert!(!body.contains(r#"code="none""#), "none is no error code");
    // Steps: 4 prefill (3 + the failed one), 9 decode; busy 40 x 3 + 30 + 9 x 10 ms.
    let steps = |k: &str| value(&body, &format!(r#"hydra_steps_total{{{e},kind="{k}"}}"#));
    assert_eq!(
        (steps("prefill"), steps("decode"), steps("save")),
        (4.0, 9.0, 0.0)
    );
    let busy = |p: &str| {
        value(
            &body,
            &format!(r#"hydra_busy_seconds_total{{{e},phase="{p}"}}"#),
        )
    };
    assert!((busy("prefill") - 0.150).abs() < 1e-9 && (busy("decode") - 0.090).abs() < 1e-9);

    // Inter-token latency: 9 observations of 10 ms, cumulative buckets.
    let itl = |suffix: &str| {
        value(
            &body,
            &format!("hydra_inter_token_latency_seconds_{suffix}"),
        )
    };
    assert_eq!(itl(&format!("count{{{e}}}")), 9.0);
    assert!((itl(&format!("sum{{{e}}}")) - 0.090).abs() < 1e-12);
    // 10 ms lies in (8.192, 12.288] ms.
    assert_eq!(itl(&format!(r#"bucket{{{e},le="0.008192"}}"#)), 0.0);
    assert_eq!(itl(&format!(r#"bucket{{{e},le="0.012288"}}"#)), 9.0);
    assert_eq!(itl(&format!(r#"bucket{{{e},le="+Inf"}}"#)), 9.0);
    // Queue wait 5 ms for the three requests that waited; time to first token is the
    // arrival to the change from prefill to decode (the first token is sampled from the
    // prompt's last logits): 45 ms.
    let ttft = |suffix: &str| {
        value(
            &body,
            &format!("hydra_time_to_first_token_seconds_{suffix}"),
        )
    };
    assert_eq!(ttft(&format!("count{{{e}}}")), 3.0);
    assert!((ttft(&format!("sum{{{e}}}")) - 3.0 * 0.045).abs() < 1e-9);
    let queue = value(
        &body,
        &format!("hydra_request_queue_time_seconds_sum{{{e}}}"),
    );
    assert!((queue - 3.0 * 0.005).abs() < 1e-9, "{queue}");
    // The cost model: the predicted prefill steps took twice their prediction.
    let ratio = |k: &str, le: &str| {
        value(
            &body,
            &format!(
                r#"hydra_step_duration_over_predicted_ratio_bucket{{{e},kind="{k}",le="{le}"}}"#
            ),
        )
    };
    assert_eq!(
        (ratio("prefill", "1.75"), ratio("prefill", "2")),
        (0.0, 3.0)
    );
    assert_eq!(ratio("decode", "1"), 9.0);
    // Save and restore steps never happened: their series exist, at zero.
    assert_eq!(
        value(
            &body,
            &format!(r#"hydra_step_duration_seconds_count{{{e},kind="save"}}"#)
        ),
        0.0
    );
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
