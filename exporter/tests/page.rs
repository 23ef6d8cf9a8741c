//! The live page's routes: the document and its two embedded files with their types, the
//! state it polls built from the segments (every engine of the directory, each slot's meta
//! with its verdict and reason), and `--no-page`, which leaves only the other endpoints.
//! The page itself, in a browser: `fault/tests/page.rs`.

mod common;

use common::*;

#[test]
fn the_page_is_served_with_its_files_and_the_state_it_polls() {
    let s = Scratch::new();
    let _writers = every_state(&s);
    let exporter = Exporter::start(&s.dir, &[]);
    let page = exporter.get("/");
    assert_eq!(page.status, 200);
    assert_eq!(page.content_type, "text/html; charset=utf-8");
    for file in [r#"src="page.js""#, r#"href="page.css""#] {
        assert!(page.body.contains(file), "the page does not load {file}");
    }
    let js = exporter.get("/page.js");
    assert_eq!(
        (js.status, js.content_type.as_str()),
        (200, "text/javascript; charset=utf-8")
    );
    assert!(js.body.contains("page/state"));
    assert!(
        !js.body.contains("innerHTML"),
        "figures are set as text only"
    );
    let css = exporter.get("/page.css");
    assert_eq!(
        (css.status, css.content_type.as_str()),
        (200, "text/css; charset=utf-8")
    );

    let state = exporter.get("/page/state");
    assert_eq!(state.status, 200, "{}", state.body);
    let state = state.json();
    assert_eq!(state["dir"], s.dir.display().to_string());
    assert!(state["error"].is_null());
    let engines = state["engines"].as_array().expect("engines");
    let ids: Vec<&str> = engines
        .iter()
        .map(|e| e["engine_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["closed", "dead", "live", "stalled"]);
    let engine = |id: &str| engines.iter().find(|e| e["engine_id"] == id).unwrap();

    let live = engine("live");
    assert_eq!(live["liveness"], "live");
    assert_eq!(live["slots"], 4, "the summary's slot count");
    assert!(live["flight_recorder"].is_boolean(), "{live:#}");
    let slots = live["slot_states"].as_array().expect("slot states");
    assert_eq!(slots.len(), 4);
    for (i, slot) in slots.iter().enumerate() {
        assert_eq!(slot["slot_id"], i, "{slot}");
        assert!(slot["classification"].is_string(), "{slot}");
        assert!(slot["steps"].is_array(), "{slot}");
    }
    assert_eq!(
        live["devices"].as_array().map(Vec::len),
        Some(2),
        "{live:#}"
    );

    let stalled = engine("stalled");
    let slot0 = &stalled["slot_states"][0];
    assert_eq!(slot0["classification"], "stalled");
    let reason = slot0["reason"]
        .as_str()
        .expect("a stalled slot has its reason");
    assert!(reason.contains("stalled"), "{reason}");
    assert!(
        stalled["slot_states"][1]["reason"].is_null(),
        "an idle slot has none"
    );

    let dead = engine("dead");
    assert_eq!(dead["liveness"], "dead");
    let finding = dead["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["slot"].is_null()))
        .expect("the engine's own finding");
    assert_eq!(finding["kind"], "dead");
}

#[test]
fn no_page_leaves_the_other_endpoints() {
    let s = Scratch::new();
    let _writers = every_state(&s);
    let exporter = Exporter::start(&s.dir, &["--no-page"]);
    for path in ["/", "/page.js", "/page.css", "/page/state"] {
        let r = exporter.get(path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], "not_found", "{path}");
    }
    assert_eq!(exporter.get("/metrics").status, 200);
    assert_eq!(exporter.get("/engines").status, 200);
}
