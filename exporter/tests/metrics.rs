//! `/metrics` with engines in every state: promtool accepts the text format, OpenMetrics is
//! negotiated and ends with `# EOF`, the values are the published ones, every metric the
//! exporter documents appears, and no task id leaks into a label.

mod common;

use common::*;
use hydra_exporter::{is_sample_name, METRIC_NAMES};

const OPENMETRICS: &str =
    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";

/// Samples the scrape of [`every_state`]'s engines must hold, with their values.
const EXPECTED_SAMPLES: &str = r#"
# Live engine, progressing decode with the published counts.
hydra_engine_liveness{engine="live",liveness="live"} 1
hydra_engine_liveness{engine="live",liveness="dead"} 0
hydra_slot_phase{engine="live",slot="0",phase="decode"} 1
hydra_slot_phase{engine="live",slot="0",phase="idle"} 0
hydra_slot_class{engine="live",slot="0",class="progressing"} 1
hydra_slot_work_done_tokens{engine="live",slot="0"} 123
hydra_slot_work_target_tokens{engine="live",slot="0"} 456
hydra_slot_work_done_bytes{engine="live",slot="2"} 1048576
hydra_slot_class{engine="live",slot="3",class="queued"} 1
hydra_slot_pending_tasks{engine="live",slot="3"} 1
hydra_engine_prompt_tokens_total{engine="live"} 1000
hydra_engine_generated_tokens_total{engine="live"} 123
hydra_engine_kv_usage_ratio{engine="live"} 0.25
hydra_engine_busy_slots{engine="live"} 2
# The layer position inside slot 0's step.
hydra_slot_layers_done{engine="live",slot="0"} 7
hydra_slot_step_layers{engine="live",slot="0"} 30
# Its devices (format v1.3).
hydra_engine_device_info{engine="live",device="1",name="CPU",kind="cpu",endpoint="",layers="0-15"} 1
hydra_engine_device_info{engine="live",device="2",name="RPC0[127.0.0.1:50052]",kind="rpc",endpoint="127.0.0.1:50052",layers="16-29"} 1
# Stalled, dead (orphaned, torn) and closed engines.
hydra_slot_class{engine="stalled",slot="0",class="stalled"} 1
hydra_engine_liveness{engine="stalled",liveness="live"} 1
hydra_engine_liveness{engine="dead",liveness="dead"} 1
hydra_slot_class{engine="dead",slot="0",class="orphaned"} 1
hydra_slot_class{engine="dead",slot="1",class="torn"} 1
hydra_engine_liveness{engine="closed",liveness="closed"} 1
"#;

/// Every documented family appears among the sample `names`, and nothing undocumented does.
fn assert_documented(names: &[String], ctx: &dyn Fn() -> String) {
    for n in names {
        assert!(is_sample_name(n), "undocumented metric {n}");
    }
    for n in METRIC_NAMES {
        let of_family = |x: &String| x == n || x.strip_suffix("_count") == Some(n);
        assert!(names.iter().any(of_family), "metric {n} missing\n{}", ctx());
    }
}

/// The live engine's progress as a 0-1 ratio (123/456), and timestamps in Unix seconds
/// (close to now), not monotonic ones.
fn assert_figures_and_unix_times(body: &str) {
    let p = sample(body, r#"hydra_slot_progress_ratio{engine="live",slot="0"}"#).unwrap();
    assert!((p - 123.0 / 456.0).abs() < 1e-9, "{p}");
    // Timestamps are Unix seconds (close to now), not monotonic ones.
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let beat = sample(
        body,
        r#"hydra_engine_heartbeat_timestamp_seconds{engine="live"}"#,
    )
    .unwrap();
    assert!(
        (beat - now_unix).abs() < 60.0,
        "heartbeat {beat} vs now {now_unix}"
    );
    let lp = sample(
        body,
        r#"hydra_slot_last_progress_timestamp_seconds{engine="stalled",slot="0"}"#,
    )
    .unwrap();
    assert!(
        (now_unix - lp - 120.0).abs() < 60.0,
        "last progress {lp} vs now {now_unix}"
    );
}

/// Only the documented label names appear.
fn assert_documented_labels(body: &str) {
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some(labels) = line.split_once('{').and_then(|(_, r)| r.split_once('}')) else {
            continue;
        };
        for pair in labels.0.split("\",") {
            let name = pair.split('=').next().unwrap();
            assert!(
                [
                    "engine", "slot", "phase", "class", "liveness", "model", "quant", "device",
                    "pid", "kind", "reason", "source", "name", "endpoint", "layers", "le", "cause",
                    "code"
                ]
                .contains(&name),
                "unexpected label {name} in {line}"
            );
        }
    }
}

/// OpenMetrics when asked for: its content type, counters named by family, `# EOF`.
fn assert_openmetrics(exporter: &Exporter) {
    let om = exporter.get_accept("/metrics", OPENMETRICS);
    assert_eq!(om.status, 200);
    assert_eq!(
        om.content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.body.ends_with("# EOF\n"), "{}", om.body);
    assert!(om
        .body
        .contains("# TYPE hydra_engine_prompt_tokens counter"));
    assert!(om
        .body
        .contains(r#"hydra_engine_prompt_tokens_total{engine="live"} 1000"#));
}

#[test]
fn scrape_with_every_engine_state_passes_promtool() {
    let s = Scratch::new();
    let _writers = every_state(&s);
    // An engine that serves requests with arrival times, finish causes and predictions:
    // every statistics family (format v1.3) has series.
    let _served = s.served("served", 2);
    let exporter = Exporter::start(&s.dir, &[]);
    let r = exporter.get("/metrics");
    assert_eq!(r.status, 200, "{}\n{}", r.body, exporter.diagnostics());
    assert_eq!(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    let body = &r.body;
    let ctx = || {
        format!(
            "{}\n{}\n--- scrape ---\n{body}",
            s.describe(),
            exporter.diagnostics()
        )
    };

    // promtool parses and lints the text exposition from stdin.
    promtool(&["check", "metrics"], body);
    assert!(!body.contains("# EOF"), "text format must not carry # EOF");

    let expect = |series: &str, value: f64| {
        assert_eq!(sample(body, series), Some(value), "{series}\n{}", ctx());
    };
    // Each line: a series and its value, as the exposition writes them ("#" lines say
    // what follows).
    for line in EXPECTED_SAMPLES
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        expect(series, value.parse().expect("a number"));
    }
    assert!(
        body.lines().any(|l| l.starts_with(
            r#"hydra_engine_info{engine="live",model="tiny-llama",quant="Q8_0",device="cpu",pid=""#
        ) && l.ends_with(" 1")),
        "{}",
        ctx()
    );
    assert_figures_and_unix_times(body);

    assert_live_devices(body, &ctx);

    assert!(sample(body, "hydra_exporter_torn_reads_total").unwrap() >= 1.0);
    expect("hydra_exporter_engines", 5.0);
    assert_documented(&sample_names(body), &ctx);
    // Labels: never a task id.
    assert!(
        !body.contains("task_id") && !body.contains("task=\""),
        "a task id leaked into the exposition"
    );

    assert_documented_labels(body);

    assert_openmetrics(&exporter);

    // SIGTERM shuts down gracefully (exit 0).
    let status = exporter.terminate();
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

/// The `live` engine's slot 0 on its RPC peer: the wait, the wait rule's threshold, the
/// layers sent, and the peer that reads nothing with the peer rule's threshold.
fn assert_live_devices(body: &str, ctx: &dyn Fn() -> String) {
    // Slot 0's step has waited on the peer since it began (10 ms before the writer
    // published it).
    let wait = sample(
        body,
        r#"hydra_slot_device_wait_seconds{engine="live",slot="0",device="RPC0[127.0.0.1:50052]"}"#,
    );
    assert!(wait.is_some_and(|w| w >= 0.01), "{wait:?}\n{}", ctx());
    // Its decode waits on the peer took about 1 ms: the wait rule's threshold is the 1 s
    // confident floor.
    let threshold = sample(
        body,
        r#"hydra_slot_device_wait_threshold_seconds{engine="live",slot="0",device="RPC0[127.0.0.1:50052]"}"#,
    );
    assert_eq!(threshold, Some(1.0), "{}", ctx());
    let sent = sample(body, r#"hydra_slot_layers_sent{engine="live",slot="0"}"#);
    assert_eq!(sent, Some(20.0), "{}", ctx());
    // The peer has read nothing since then; the peer rule's threshold is the 1 s floor too
    // (two steps of 50 ms).
    let peer = r#"{engine="live",slot="0",device="RPC0[127.0.0.1:50052]"}"#;
    let unread = sample(body, &format!("hydra_slot_peer_unread_seconds{peer}"));
    assert!(unread.is_some_and(|u| u >= 0.01), "{unread:?}\n{}", ctx());
    let threshold = sample(
        body,
        &format!("hydra_slot_peer_unread_threshold_seconds{peer}"),
    );
    assert_eq!(threshold, Some(1.0), "{}", ctx());
}
