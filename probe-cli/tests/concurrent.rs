//! `meta` and `show` against a writer publishing thousands of times per second in another
//! process (this test binary, re-executed as a fake engine).

mod common;

use common::{fake, ChildWriter, ProbeRun, Scratch};
use std::time::{Duration, Instant};

/// Entry point of the re-executed child; a no-op in a normal test run.
#[test]
fn fake_writer_child() {
    ChildWriter::run_if_child();
}

fn loop_iterations(s: &Scratch) -> u64 {
    let v = s.probe(&["--json", "show", "busy"]).code_is(0).json();
    v["header"]["loop_iterations"].as_u64().unwrap()
}

#[test]
fn meta_and_show_read_consistent_records_while_a_writer_publishes() {
    let s = Scratch::new();
    let writer = ChildWriter::spawn("fake_writer_child", &s.dir, "busy", 4);
    assert!(writer.path.ends_with("busy.hps"));
    let first = loop_iterations(&s);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let mut metas = 0;
    let mut last = first;
    // At least 40 meta reads, and until the writer has published 2000 more passes (4 slots
    // each), bounded by the deadline.
    while metas < 40 || last - first < 2000 {
        assert!(
            Instant::now() < deadline,
            "writer too slow: {} passes",
            last - first
        );
        for slot in 0..4 {
            let m = s
                .probe(&["meta", "busy", &slot.to_string()])
                .code_is(0)
                .json();
            let done = m["tokens_processed"].as_u64().unwrap();
            // The writer's invariant: a torn copy would break it.
            assert_eq!(m["n_past"].as_u64().unwrap(), fake::CACHED + done, "{m}");
            assert_eq!(m["tokens_total"], fake::TOTAL);
            assert_eq!(m["work_done"], done);
            assert_eq!(m["operation"], "decode");
            assert_eq!(m["classification"], "progressing");
            assert_eq!(m["engine_liveness"], "live");
            let p = m["progress"].as_f64().unwrap();
            assert!((p - done as f64 / fake::TOTAL as f64).abs() < 1e-12);
            metas += 1;
        }
        let v = s.probe(&["--json", "show", "busy"]).code_is(0).json();
        for slot in v["slots"].as_array().unwrap() {
            let st = &slot["state"];
            assert_eq!(
                st["n_past"].as_u64().unwrap(),
                fake::CACHED + st["work_done"].as_u64().unwrap()
            );
            assert_eq!(st["steps_done"], st["work_done"]);
        }
        s.probe(&["show", "busy"])
            .code_is(0)
            .stdout_has("progressing");
        last = v["header"]["loop_iterations"].as_u64().unwrap();
    }
    let rate = (last - first) as f64 / start.elapsed().as_secs_f64();
    eprintln!(
        "{metas} meta reads while the writer made {} passes ({rate:.0}/s, x4 slots)",
        last - first
    );
    drop(writer);
}

#[test]
fn after_kill_9_stats_and_history_read_the_dead_engines_segment() {
    let s = Scratch::new();
    let mut writer = ChildWriter::spawn("fake_writer_child", &s.dir, "doomed", 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while loop_iterations_of(&s, "doomed") < 200 {
        assert!(Instant::now() < deadline, "the writer never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.kill9();
    let health = s.probe(&["--json", "show", "doomed"]).code_is(0).json();
    assert_eq!(health["health"], "dead", "{health}");
    let stats = s.probe(&["--json", "stats", "doomed"]).code_is(0).json();
    let decode_steps = stats["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "decode")
        .and_then(|n| n["value"].as_u64())
        .unwrap_or(0);
    assert!(decode_steps > 100, "{stats}");
    let history = s
        .probe(&["--json", "history", "doomed", "--slot", "0"])
        .code_is(0)
        .json();
    let steps = history["slots"][0]["steps"].as_array().unwrap();
    assert!(!steps.is_empty() && steps.len() <= 64, "{history}");
    let last = steps.last().unwrap();
    assert_eq!(last["kind"], "decode", "{last}");
    assert!(
        steps
            .windows(2)
            .all(|p| p[0]["ordinal"].as_u64() < p[1]["ordinal"].as_u64()),
        "oldest first"
    );
    // The ring's last entry is the last step the slot finished before the kill.
    let slot0 = s
        .probe(&["--json", "stats", "doomed", "--slot", "0"])
        .code_is(0)
        .json();
    let finished = slot0["steps"][0]["value"].as_u64();
    assert_eq!(last["ordinal"].as_u64(), finished, "{slot0}");
    s.probe(&["history", "doomed", "--slot", "1"])
        .code_is(0)
        .stdout_has("oldest first");
}

fn loop_iterations_of(s: &Scratch, id: &str) -> u64 {
    let v = s.probe(&["--json", "show", id]).code_is(0).json();
    v["header"]["loop_iterations"].as_u64().unwrap_or(0)
}
