//! Engines appearing and vanishing between scrapes, and files that cannot be read (garbage,
//! a FIFO, a directory, a file owned by another uid): every scrape succeeds and the errors
//! are counted by kind.

mod common;

use common::*;
use std::process::Command;

fn errors(body: &str, kind: &str) -> f64 {
    sample(
        body,
        &format!("hydra_exporter_read_errors_total{{kind=\"{kind}\"}}"),
    )
    .unwrap_or_else(|| panic!("no read error counter for {kind}\n{body}"))
}

fn liveness(body: &str, engine: &str, state: &str) -> Option<f64> {
    sample(
        body,
        &format!("hydra_engine_liveness{{engine=\"{engine}\",liveness=\"{state}\"}}"),
    )
}

/// Entries named like segments that cannot be read: garbage, a FIFO, a directory, a file
/// of another uid.
fn plant_unreadable_entries(dir: &std::path::Path) {
    std::fs::write(dir.join("garbage.hps"), vec![0xA5u8; 4096]).unwrap();
    let fifo = dir.join("x.hps");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success(), "mkfifo {}", fifo.display());
    std::fs::create_dir(dir.join("y.hps")).unwrap();
    let foreign = dir.join("z.hps");
    std::fs::write(&foreign, vec![0u8; 2048]).unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap_or_else(|e| {
        panic!(
            "chown {} to uid 65534 failed ({e}): this test runs as root",
            foreign.display()
        )
    });
}

/// Every scrape (`scrape`) counts each unreadable entry by kind, and makes no engine of it.
fn unreadable_entries_are_counted(scrape: &dyn Fn() -> String) {
    let b1 = scrape();
    assert_eq!(liveness(&b1, "a", "live"), Some(1.0), "{b1}");
    assert_eq!(sample(&b1, "hydra_exporter_engines"), Some(5.0), "{b1}");
    assert!(errors(&b1, "bad_magic") >= 1.0, "{b1}");
    assert!(errors(&b1, "not_regular_file") >= 2.0, "{b1}");
    assert!(errors(&b1, "wrong_owner") >= 1.0, "{b1}");
    // Unreadable entries are not engines: no engine series for them.
    assert!(!b1.contains("engine=\"garbage\""), "{b1}");
    // Counted again on every scrape that meets them.
    let b2 = scrape();
    assert_eq!(errors(&b2, "bad_magic"), errors(&b1, "bad_magic") + 1.0);
    assert_eq!(
        errors(&b2, "not_regular_file"),
        errors(&b1, "not_regular_file") + 2.0
    );
    assert_eq!(errors(&b2, "wrong_owner"), errors(&b1, "wrong_owner") + 1.0);
}

/// `/engines` lists every entry, with the reason for the unreadable ones.
fn engines_are_listed_with_reasons(exporter: &Exporter) {
    let list = exporter.get("/engines");
    assert_eq!(list.status, 200, "{}", list.body);
    let list = list.json();
    let entries = list.as_array().expect("array");
    let ids: Vec<&str> = entries
        .iter()
        .map(|e| e["engine_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "garbage", "x", "y", "z"], "{list}");
    assert_eq!(entries[0]["liveness"], "live");
    assert_eq!(entries[0]["model"], "tiny-llama");
    assert_eq!(entries[0]["slots"], 2);
    assert_eq!(entries[0]["busy_slots"], 0);
    assert!(entries[0]["heartbeat_age_ms"].is_u64());
    assert_eq!(entries[1]["error"]["kind"], "bad_magic", "{list}");
    assert_eq!(entries[2]["error"]["kind"], "not_regular_file", "{list}");
    assert!(entries[2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("FIFO"));
    assert_eq!(entries[3]["error"]["kind"], "not_regular_file", "{list}");
    assert_eq!(entries[4]["error"]["kind"], "wrong_owner", "{list}");
}

#[test]
fn engines_come_and_go_and_unreadable_files_are_counted() {
    let s = Scratch::new();
    // The directory does not exist yet: an empty, successful scrape.
    let exporter = Exporter::start(&s.dir, &[]);
    let scrape = || {
        let r = exporter.get("/metrics");
        assert_eq!(
            r.status,
            200,
            "{}\n{}\n{}",
            r.body,
            s.describe(),
            exporter.diagnostics()
        );
        r.body
    };
    let b = scrape();
    assert_eq!(sample(&b, "hydra_exporter_engines"), Some(0.0), "{b}");
    assert_eq!(errors(&b, "directory"), 0.0);

    // An engine appears.
    let a = s.writer("a", 2);
    let b = scrape();
    assert_eq!(liveness(&b, "a", "live"), Some(1.0), "{b}");

    plant_unreadable_entries(&s.dir);
    unreadable_entries_are_counted(&scrape);

    engines_are_listed_with_reasons(&exporter);

    // A second engine appears, the first exits cleanly (its file is unlinked): it is
    // reported closed once, then gone.
    let mut b_writer = s.writer("b", 1);
    let now = hydra_layout::clock::monotonic_ns();
    b_writer.publish(0, &decode(now, 1, 10, S, 0)).unwrap();
    a.close().unwrap();
    let b3 = scrape();
    assert_eq!(liveness(&b3, "a", "closed"), Some(1.0), "{b3}");
    assert_eq!(liveness(&b3, "b", "live"), Some(1.0), "{b3}");
    let b4 = scrape();
    assert_eq!(liveness(&b4, "a", "closed"), None, "{b4}");
    assert!(!b4.contains("engine=\"a\""), "{b4}");

    // The second engine crashes: reported dead, its decode orphaned (not dropped).
    b_writer.simulate_crash();
    for _ in 0..2 {
        let b5 = scrape();
        assert_eq!(liveness(&b5, "b", "dead"), Some(1.0), "{b5}");
        assert_eq!(
            sample(
                &b5,
                r#"hydra_slot_class{engine="b",slot="0",class="orphaned"}"#
            ),
            Some(1.0),
            "{b5}"
        );
        assert_eq!(
            sample(&b5, r#"hydra_slot_work_done_tokens{engine="b",slot="0"}"#),
            Some(1.0)
        );
    }

    // A new engine takes the dead one's id: the cached reader is replaced (new inode).
    let c = s.writer("b", 3);
    let b6 = scrape();
    assert_eq!(liveness(&b6, "b", "live"), Some(1.0), "{b6}");
    assert_eq!(
        sample(&b6, r#"hydra_engine_slots{engine="b"}"#),
        Some(3.0),
        "{b6}"
    );
    drop(c);
    // The directory vanishes entirely: still a successful scrape, which says the
    // directory is down (never an empty success); health fails until it is back.
    std::fs::remove_dir_all(&s.dir).unwrap();
    let b7 = scrape();
    assert_eq!(sample(&b7, "hydra_exporter_engines"), Some(0.0), "{b7}");
    assert_eq!(
        sample(&b7, r#"hydra_dir_up{reason="not_found"}"#),
        Some(0.0),
        "{b7}"
    );
    assert!(exporter.get("/healthz").status == 503);
}
