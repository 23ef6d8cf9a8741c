//! A segment directory that cannot be read is never an empty success: `hydra_dir_up` says
//! 0 with the reason, the log says so once per change of state (not once per scrape), and
//! `/healthz` fails; the same directory, once there and empty, is a host without engines.

mod common;

use common::{sample, Exporter, Scratch};

const DOWN: &str = "cannot read the segment directory";
const UP_AGAIN: &str = "can be read again";

fn count(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// Scrapes twice: the directory is up (no reason label), holds no engine, and `/healthz`
/// answers 200.
fn assert_up_and_empty(exporter: &Exporter) {
    for _ in 0..2 {
        let m = exporter.get("/metrics");
        assert_eq!(
            sample(&m.body, r#"hydra_dir_up{reason=""}"#),
            Some(1.0),
            "{}",
            m.body
        );
        assert_eq!(sample(&m.body, r#"hydra_dir_up{reason="not_found"}"#), None);
        assert_eq!(sample(&m.body, "hydra_exporter_engines"), Some(0.0));
    }
    assert_eq!(exporter.get("/healthz").status, 200);
}

#[test]
fn a_missing_directory_is_an_error_metric_logged_once_per_change() {
    let s = Scratch::new();
    let missing = s.tmp.path().join("nope");
    let exporter = Exporter::start(&missing, &[]);
    for _ in 0..3 {
        let m = exporter.get("/metrics");
        assert_eq!(m.status, 200, "{}", exporter.diagnostics());
        assert_eq!(
            sample(&m.body, r#"hydra_dir_up{reason="not_found"}"#),
            Some(0.0),
            "{}",
            m.body
        );
        assert_eq!(sample(&m.body, r#"hydra_dir_up{reason=""}"#), None);
        assert_eq!(sample(&m.body, "hydra_exporter_engines"), Some(0.0));
        assert!(
            sample(
                &m.body,
                r#"hydra_exporter_read_errors_total{kind="directory"}"#
            ) >= Some(1.0)
        );
    }
    let health = exporter.get("/healthz");
    assert_eq!(health.status, 503, "{}", health.body);

    // The directory appears (empty): up, no engines, healthy.
    std::fs::create_dir(&missing).unwrap();
    assert_up_and_empty(&exporter);

    // Gone again: down once more.
    std::fs::remove_dir(&missing).unwrap();
    let m = exporter.get("/metrics");
    assert_eq!(
        sample(&m.body, r#"hydra_dir_up{reason="not_found"}"#),
        Some(0.0)
    );

    let log = exporter.log();
    assert_eq!(count(&log, DOWN), 2, "two changes to down:\n{log}");
    assert_eq!(count(&log, UP_AGAIN), 1, "one change to up:\n{log}");
    let down = log.lines().find(|l| l.contains(DOWN)).unwrap();
    assert!(down.contains(&*missing.to_string_lossy()), "{down}");
}

#[test]
fn a_readable_empty_directory_is_up_and_quiet() {
    let s = Scratch::new();
    let exporter = Exporter::start(&s.dir, &[]);
    assert_up_and_empty(&exporter);
    let m = exporter.get("/metrics");
    assert_eq!(
        sample(
            &m.body,
            r#"hydra_exporter_read_errors_total{kind="directory"}"#
        ),
        Some(0.0)
    );
    let log = exporter.log();
    assert_eq!(count(&log, DOWN) + count(&log, UP_AGAIN), 0, "{log}");
}
