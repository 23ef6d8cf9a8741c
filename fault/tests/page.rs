//! The exporter's live page in a real browser (headless Chromium): an engine decoding on
//! the embedded model, one wedged inside a layer by the test build's fault hook, and one
//! killed with SIGKILL. Each test reads the DOM the page's script built (`--dump-dom`
//! after a budget of virtual time, the page polling `/page/state` meanwhile) and saves a
//! screenshot under `target/tmp/page/`.

use hydra_fault::browser::{attr, chromium, tag_with, Browser};
use hydra_fault::process::{start_engine, start_exporter, EngineOpts, Server};
use hydra_fault::{http, scratch, wait_for};
use std::path::PathBuf;
use std::time::Duration;

/// A request that keeps slot 0 decoding for a long while (never answered in time: the
/// engine is killed first).
fn decode_forever(engine: &Server) {
    let url = engine.url("/completion");
    let body = r#"{"prompt":"Once upon a time","n_predict":4000,"ignore_eos":true}"#;
    std::thread::spawn(move || {
        let _ = http::try_call(http::agent().post(&url), Some(body));
    });
}

/// Slot 0's start tag in `dom`, with the engine's section before it.
fn slot0(dom: &str) -> &str {
    tag_with(dom, r#"data-slot="0""#).unwrap_or_else(|| panic!("no slot 0 on the page:\n{dom}"))
}

fn screenshot_path(test: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("page")
        .join(format!("{test}.png"))
}

/// What the exporter's page state says of slot 0 of the only engine.
fn state_of_slot0(exporter: &Server) -> Option<serde_json::Value> {
    let (code, state) = http::get(&exporter.url("/page/state"));
    (code == 200).then_some(())?;
    state["engines"][0]["slot_states"][0].as_object()?;
    Some(state["engines"][0].clone())
}

#[test]
fn the_page_shows_an_engine_decoding_with_its_progress_and_layer() {
    let test = "the_page_shows_an_engine_decoding_with_its_progress_and_layer";
    let Some(program) = chromium(test) else {
        return;
    };
    let tmp = scratch("hydra-page-decode");
    let opts = EngineOpts::new(tmp.path(), "page-decode");
    let mut engine = start_engine(&opts);
    let mut exporter = start_exporter(tmp.path(), &[]);
    decode_forever(&engine);
    let e = wait_for(Duration::from_secs(30), "slot 0 to decode", || {
        let e = state_of_slot0(&exporter)?;
        (e["slot_states"][0]["operation"] == "decode").then_some(e)
    });
    assert_eq!(e["flight_recorder"], true, "the engine keeps a ring");
    let browser = Browser::new(program);
    let url = exporter.url("/");
    let first = browser.dump_dom(&url);
    assert!(
        first.contains(r#"id="engine-page-decode""#) && first.contains(">page-decode<"),
        "the engine is not named:\n{first}"
    );
    let tag = slot0(&first);
    assert_eq!(attr(tag, "data-operation"), Some("decode"), "{tag}");
    assert_eq!(attr(tag, "data-verdict"), Some("progressing"), "{tag}");
    let done = |tag: &str| -> u64 {
        attr(tag, "data-done")
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("no tokens done in {tag}"))
    };
    let done_first = done(tag);
    // A layer position shows while a step is in flight, which is most of a decode: a few
    // loads find one.
    let mut layer = None;
    let mut done_last = done_first;
    for _ in 0..8 {
        let dom = browser.dump_dom(&url);
        let tag = slot0(&dom);
        done_last = done(tag);
        layer = attr(tag, "data-layer")
            .filter(|l| !l.is_empty())
            .map(str::to_owned);
        if layer.is_some() && done_last > done_first {
            break;
        }
    }
    assert!(
        done_last > done_first,
        "progress did not rise: {done_first} then {done_last}"
    );
    let layer = layer.expect("no layer position on the page in 8 loads");
    let dom = browser.dump_dom(&url);
    let timeline = dom
        .split("class=\"timeline\"")
        .nth(1)
        .and_then(|rest| rest.split("</div>").next())
        .unwrap_or_default();
    assert!(
        timeline.matches("class=\"decode\"").count() >= 2,
        "slot 0's timeline shows no finished decode steps:\n{timeline}"
    );
    let (k, n) = layer.split_once('/').expect("layer as k/N");
    let (k, n): (u64, u64) = (k.parse().unwrap(), n.parse().unwrap());
    assert!(n > 0 && k <= n, "{layer}");
    browser.screenshot(&url, &screenshot_path(test));
    engine.kill();
    exporter.kill();
}

#[test]
fn the_page_shows_a_wedged_slot_stalled_at_its_layer() {
    let test = "the_page_shows_a_wedged_slot_stalled_at_its_layer";
    let Some(program) = chromium(test) else {
        return;
    };
    let tmp = scratch("hydra-page-wedged");
    let mut opts = EngineOpts::new(tmp.path(), "page-wedged");
    opts.slots = 1;
    // Stops for good at layer 2 of the 12th forward: a few decode steps in, so that the
    // step has a prediction.
    opts.env = vec![
        ("HYDRA_ENGINE_STALL_AT_LAYER".into(), "2".into()),
        ("HYDRA_ENGINE_STALL_IN_FORWARD".into(), "12".into()),
    ];
    let mut engine = start_engine(&opts);
    // A 2 s floor, so that the verdict comes within seconds of the wedge.
    let mut exporter = start_exporter(tmp.path(), &["--stall-floor", "2s"]);
    decode_forever(&engine);
    // The exporter's verdict, as the state it serves says it, and when that state was taken.
    let verdict_taken = wait_for(Duration::from_secs(60), "the stalled verdict", || {
        let (code, state) = http::get(&exporter.url("/page/state"));
        let stalled = state["engines"][0]["slot_states"][0]["classification"] == "stalled";
        (code == 200 && stalled).then(|| state["taken_unix_ms"].as_u64())?
    });
    let mut browser = Browser::new(program);
    browser.budget_ms = 500;
    let url = exporter.url("/");
    let dom = browser.dump_dom(&url);
    let tag = slot0(&dom);
    assert_eq!(attr(tag, "data-verdict"), Some("stalled"), "{tag}");
    let layer = attr(tag, "data-layer").unwrap_or_default();
    assert!(layer.starts_with("2/"), "not at layer 2: {tag}");
    assert!(
        dom.contains("stalled at layer 2/"),
        "the reason is not in words:\n{dom}"
    );
    // A page already open polls four times a second; this one was opened after the
    // verdict, so the bound includes Chromium's start.
    let shown: u64 = attr(tag, "data-verdict-taken")
        .and_then(|t| t.parse().ok())
        .expect("when the page first showed the verdict");
    let after_ms = shown.saturating_sub(verdict_taken);
    eprintln!("{test}: the page showed the verdict {after_ms} ms after the exporter had it");
    assert!(after_ms < 2_000, "{after_ms} ms");
    browser.screenshot(&url, &screenshot_path(test));
    engine.kill();
    exporter.kill();
}

#[test]
fn the_page_shows_a_killed_engine_dead_with_its_last_progress() {
    let test = "the_page_shows_a_killed_engine_dead_with_its_last_progress";
    let Some(program) = chromium(test) else {
        return;
    };
    let tmp = scratch("hydra-page-killed");
    let mut opts = EngineOpts::new(tmp.path(), "page-killed");
    opts.slots = 1;
    let mut engine = start_engine(&opts);
    let mut exporter = start_exporter(tmp.path(), &[]);
    decode_forever(&engine);
    let done = wait_for(Duration::from_secs(30), "20 tokens decoded", || {
        let e = state_of_slot0(&exporter)?;
        let done = e["slot_states"][0]["work_done"].as_u64()?;
        (e["slot_states"][0]["operation"] == "decode" && done >= 20).then_some(done)
    });
    engine.kill();
    wait_for(Duration::from_secs(10), "the dead verdict", || {
        let e = state_of_slot0(&exporter)?;
        (e["liveness"] == "dead").then_some(())
    });
    let browser = Browser::new(program);
    let url = exporter.url("/");
    let dom = browser.dump_dom(&url);
    let section = tag_with(&dom, r#"id="engine-page-killed""#)
        .and_then(|_| dom.find(r#"data-liveness="dead""#))
        .map(|_| ());
    assert!(section.is_some(), "the engine does not read dead:\n{dom}");
    let tag = slot0(&dom);
    assert_eq!(attr(tag, "data-operation"), Some("decode"), "{tag}");
    let kept: u64 = attr(tag, "data-done")
        .and_then(|d| d.parse().ok())
        .expect("tokens done");
    assert!(kept >= done, "its last progress is lost: {kept} < {done}");
    browser.screenshot(&url, &screenshot_path(test));
    exporter.kill();
}

/// 8 engines of 64 slots each (the most the page is made for), one of them an RPC split
/// whose peer has read nothing for long, and one whose model name is markup: every slot is
/// drawn, the peer is named, and the markup is shown as text, never parsed.
#[test]
fn the_page_draws_eight_engines_of_sixty_four_slots_and_shows_markup_as_text() {
    let test = "the_page_draws_eight_engines_of_sixty_four_slots_and_shows_markup_as_text";
    let Some(program) = chromium(test) else {
        return;
    };
    let s = hydra_fault::segments::Scratch::new();
    let now = hydra_layout::clock::monotonic_ns();
    let s_ns = 1_000_000_000;
    let mut writers = Vec::new();
    for e in 0..7 {
        let mut description = hydra_fault::segments::description();
        if e == 3 {
            description.model_name = r#"<img src=x onerror="document.title='pwned'">"#.into();
        }
        let mut w = hydra_layout::SegmentWriter::create(&hydra_layout::SegmentConfig {
            dir: s.dir.clone(),
            engine_id: format!("engine-{e}"),
            slot_count: 64,
            description,
        })
        .expect("segment");
        w.heartbeat(now);
        for slot in 0..64 {
            let record = hydra_fault::segments::decode(now, slot as u64 + 1, 200, 10 * s_ns, 0);
            w.publish(slot, &record).expect("publish");
        }
        writers.push(w);
    }
    let (rpc, _) = s.rpc_split_unread("engine-rpc");
    let exporter = start_exporter(&s.dir, &[]);
    let started = std::time::Instant::now();
    let (code, state) = http::get(&exporter.url("/page/state"));
    eprintln!(
        "{test}: /page/state {code} in {:?}, {} bytes",
        started.elapsed(),
        state.to_string().len()
    );
    let mut browser = Browser::new(program);
    browser.budget_ms = 3_000;
    let url = exporter.url("/");
    let dom = browser.dump_dom(&url);
    assert_eq!(dom.matches("<section ").count(), 8, "eight engines");
    let slots = dom.matches(" data-slot=\"").count();
    assert!(slots >= 7 * 64, "{slots} slots drawn");
    assert!(
        dom.contains("&lt;img src=x onerror="),
        "the markup is not shown as text"
    );
    assert!(!dom.contains("<img"), "the markup was parsed");
    assert!(
        dom.contains("<title>hydra-progress</title>"),
        "a script ran"
    );
    assert!(
        dom.contains("has read nothing for"),
        "the unread peer is not named"
    );
    browser.screenshot(&url, &screenshot_path(test));
    browser.window = "390,844".into();
    browser.screenshot(&url, &screenshot_path(&format!("{test}-phone")));
    drop((writers, rpc));
}
