//! The Hydra meta endpoints answer exactly what `hydra-probe meta` prints for the same
//! slot, and the error cases carry the right status and a JSON error body.
//!
//! Comparison rule: the two JSON documents must be equal as `serde_json::Value`s, except
//! the four fields measured against the reader's clock at read time (`elapsed_ms`,
//! `last_progress_age_ms`, `step_age_ms`, `heartbeat_age_ms`), which may differ by at most
//! the wall time between the two reads (+1 ms of rounding). Rate and ETA depend only on
//! the record (not on `now`), so they must match exactly; every slot is far from its
//! stall threshold, so the classification is stable.

mod common;

use common::*;
use hydra_layout::{clock, Phase, SlotState};
use serde_json::Value;
use std::process::Command;
use std::time::Instant;

const TIME_FIELDS: [&str; 4] = [
    "elapsed_ms",
    "last_progress_age_ms",
    "step_age_ms",
    "heartbeat_age_ms",
];

fn probe_meta(dir: &std::path::Path, engine: &str, slot: usize) -> Value {
    let mut cmd = Command::new(probe_binary());
    cmd.arg("--dir")
        .arg(dir)
        .args(["meta", engine, &slot.to_string()]);
    let out = hydra_fault::process::stdout_of(&mut cmd);
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{cmd:?} printed no JSON ({e})"))
}

fn assert_same_meta(exporter: Value, probe: Value, tolerance_ms: u64, what: &str) {
    let (Value::Object(mut a), Value::Object(mut b)) = (exporter, probe) else {
        panic!("{what}: not objects");
    };
    for f in TIME_FIELDS {
        let (x, y) = (a.remove(f), b.remove(f));
        match (
            x.as_ref().and_then(Value::as_u64),
            y.as_ref().and_then(Value::as_u64),
        ) {
            (Some(x), Some(y)) => assert!(
                x.abs_diff(y) <= tolerance_ms,
                "{what}: {f} differs by more than {tolerance_ms} ms: {x} vs {y}"
            ),
            _ => assert_eq!(x, y, "{what}: {f}"),
        }
    }
    assert_eq!(Value::Object(a), Value::Object(b), "{what}");
}

#[test]
fn meta_endpoints_match_hydra_probe_and_errors_are_json() {
    // Build the probe first (it may take a while on a cold target directory).
    let _ = probe_binary();
    let s = Scratch::new();
    let now = clock::monotonic_ns();
    let mut w = s.writer("e1", 4);
    w.heartbeat(now);
    let mut d = decode(now, 30, 100, 4 * S, S / 2);
    d.step_start_ns = now - S / 4;
    d.step_size = 1;
    w.publish(0, &d).unwrap();
    w.publish(1, &save(now, 1 << 20, 4 << 20)).unwrap();
    w.publish(
        2,
        &SlotState {
            phase: Phase::Queued,
            ..Default::default()
        },
    )
    .unwrap();
    let exporter = Exporter::start(&s.dir, &[]);

    for slot in 0..4 {
        for path in [
            format!("/engines/e1/slots/{slot}/state/meta"),
            format!("/slots/{slot}/state/meta"),
        ] {
            let t0 = Instant::now();
            let r = exporter.get(&path);
            let p = probe_meta(&s.dir, "e1", slot);
            let tolerance = t0.elapsed().as_millis() as u64 + 1;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            assert!(
                r.content_type.starts_with("application/json"),
                "{}",
                r.content_type
            );
            assert_same_meta(r.json(), p, tolerance, &path);
        }
    }
    // Spot-check the content too (the comparison alone would pass on two equal bugs).
    let m = exporter.get("/slots/0/state/meta").json();
    assert_eq!(m["operation"], "decode");
    assert_eq!(m["tokens_processed"], 30);
    assert_eq!(m["tokens_total"], 100);
    assert_eq!(m["classification"], "progressing");
    assert_eq!(m["engine_liveness"], "live");
    assert_eq!(m["model_name"], "tiny-llama");

    let error = |path: &str, status: u16, code: &str| {
        let r = exporter.get(path);
        assert_eq!(r.status, status, "{path}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["code"], code, "{path}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    };
    error("/engines/nope/slots/0/state/meta", 404, "unknown_engine");
    error(
        "/engines/..hidden/slots/0/state/meta",
        404,
        "unknown_engine",
    );
    error("/engines/e1/slots/4/state/meta", 404, "unknown_slot");
    error("/engines/e1/slots/x/state/meta", 404, "unknown_slot");
    error("/engines/e1/slots/-1/state/meta", 404, "unknown_slot");
    error("/slots/99/state/meta", 404, "unknown_slot");
    error("/no/such/route", 404, "not_found");

    // Several engines and none named: 409; the named form still works.
    let _w2 = s.writer("e2", 1);
    error("/slots/0/state/meta", 409, "ambiguous_engine");
    assert_eq!(exporter.get("/engines/e2/slots/0/state/meta").status, 200);

    let health = exporter.get("/healthz");
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");

    // No engine at all: 503.
    let empty = Scratch::new();
    let lonely = Exporter::start(&empty.dir, &[]);
    let r = lonely.get("/slots/0/state/meta");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "no_engine");
    drop(w);
}
