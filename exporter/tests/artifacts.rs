//! The Grafana dashboard and the Prometheus alert rules shipped with the exporter: promtool
//! validates (and unit-tests) the rules, and every metric either file uses is one the
//! exporter emits.

mod common;

use common::*;
use hydra_exporter::{is_sample_name, METRIC_NAMES};
use std::path::{Path, PathBuf};

fn asset(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Every `hydra_...` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("hydra_") {
        let start = i + pos;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if boundary {
            out.push(expr[start..end].to_owned());
        }
        i = end;
    }
    out
}

fn assert_known(names: &[String], what: &str) {
    for n in names {
        assert!(
            is_sample_name(n),
            "{what} uses {n}, which the exporter does not emit (known: {METRIC_NAMES:?})"
        );
    }
}

#[test]
fn alert_rules_pass_promtool_and_use_emitted_metrics() {
    let rules = asset("alerts/hydra-progress.rules.yml");
    let rules_s = rules.to_str().unwrap();
    let out = promtool(&["check", "rules", rules_s], "");
    assert!(out.contains("SUCCESS"), "{out}");
    // The rules' own unit tests (firing times, labels, annotations).
    let tests = asset("alerts/hydra-progress.rules.test.yml");
    promtool(&["test", "rules", tests.to_str().unwrap()], "");

    let text = std::fs::read_to_string(&rules).unwrap();
    let exprs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .collect();
    assert_eq!(exprs.len(), 6, "{text}");
    for e in &exprs {
        let names = metric_names(e);
        assert!(!names.is_empty(), "{e}");
        assert_known(&names, "alert rule");
    }
    for alert in [
        "HydraSlotStalled",
        "HydraEngineDead",
        "HydraEngineHung",
        "HydraExporterReadErrors",
        "HydraProgressDirectoryDown",
        "HydraTimeToFirstTokenSLO",
    ] {
        assert!(text.contains(&format!("alert: {alert}")), "{alert} missing");
    }
}

fn collect_queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "query" | "definition", serde_json::Value::String(s)) => {
                        out.push(s.clone())
                    }
                    _ => collect_queries(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_queries(x, out)),
        _ => {}
    }
}

#[test]
fn dashboard_uses_only_emitted_metrics() {
    let path = asset("dashboards/hydra-progress.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 6, "{} panels", panels.len());
    let mut queries = Vec::new();
    collect_queries(&dash, &mut queries);
    let used: Vec<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    assert!(used.len() >= 10, "{used:?}");
    assert_known(&used, "dashboard");
    // The panels the issue asks for.
    for needed in [
        "hydra_slot_progress_ratio",
        "hydra_slot_rate_tokens_per_second",
        "hydra_slot_class",
        "hydra_engine_liveness",
        "hydra_engine_heartbeat_age_seconds",
        "hydra_time_to_first_token_seconds_bucket",
        "hydra_inter_token_latency_seconds_bucket",
        "hydra_step_duration_seconds_bucket",
        "hydra_tasks_finished_total",
    ] {
        assert!(used.iter().any(|u| u == needed), "dashboard lacks {needed}");
    }
    // Every panel has a query.
    for p in panels {
        let t = p["targets"].as_array().expect("targets");
        assert!(
            t.iter()
                .all(|t| t["expr"].as_str().is_some_and(|e| !e.is_empty())),
            "panel {} has an empty query",
            p["title"]
        );
    }
}

#[test]
fn metric_name_scanner() {
    assert_eq!(
        metric_names(
            r#"sum by (kind) (rate(hydra_exporter_read_errors_total[5m])) > 0 and x_hydra_no"#
        ),
        ["hydra_exporter_read_errors_total"]
    );
}
