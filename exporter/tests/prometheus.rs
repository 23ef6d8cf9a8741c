//! End to end with a real Prometheus server: it scrapes the exporter every second (so it
//! negotiates OpenMetrics, as Prometheus does), and its query API returns the token counts
//! a test writer published and the stalled classification of a slot made silent.

mod common;

use common::*;
use hydra_layout::{clock, WriterCounters};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Prometheus server on loopback with its own storage, killed and reaped on drop.
struct Prometheus {
    child: Child,
    base: String,
    log: std::path::PathBuf,
}

impl Prometheus {
    fn start(work: &std::path::Path, target: &str) -> Self {
        let bin = require_tool("prometheus");
        let port = {
            // Ask the kernel for a free port, then hand it to Prometheus (it cannot print
            // the port it bound).
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().unwrap().port()
        };
        let config = work.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: hydra\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let data = work.join("tsdb");
        let log = work.join("prometheus.log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=info")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(work.join("prometheus.stderr")).unwrap())
            .spawn()
            .expect("spawn prometheus");
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log: work.join("prometheus.stderr"),
        }
    }

    /// The first sample value of an instant query, if the query returns any.
    fn query(&self, q: &str) -> Result<Option<f64>, String> {
        let resp = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(5))
            .build()
            .get(&format!("{}/api/v1/query", self.base))
            .query("query", q)
            .call()
            .map_err(|e| e.to_string())?;
        let v: serde_json::Value = resp.into_json().map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(v.to_string());
        }
        Ok(v["data"]["result"]
            .as_array()
            .and_then(|r| r.first())
            .and_then(|s| s["value"][1].as_str())
            .and_then(|x| x.parse().ok()))
    }

    fn diagnostics(&self) -> String {
        let targets = ureq::get(&format!("{}/api/v1/targets", self.base))
            .call()
            .ok()
            .and_then(|r| r.into_string().ok())
            .unwrap_or_else(|| "(targets API unreachable)".into());
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        format!(
            "prometheus at {}\ntargets: {targets}\nprometheus stderr (newest first):\n{}",
            self.base,
            tail.join("\n")
        )
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The series Prometheus must return once it has scraped the test's engines, with their
/// values.
const CHECKS: [(&str, f64); 7] = [
    (
        r#"hydra_slot_work_done_tokens{engine="live",slot="0"}"#,
        123.0,
    ),
    (
        r#"hydra_slot_work_target_tokens{engine="live",slot="0"}"#,
        456.0,
    ),
    (r#"hydra_engine_prompt_tokens_total{engine="live"}"#, 777.0),
    (
        r#"hydra_slot_class{engine="live",slot="0",class="progressing"}"#,
        1.0,
    ),
    (
        r#"hydra_slot_class{engine="stuck",slot="0",class="stalled"}"#,
        1.0,
    ),
    (
        r#"hydra_tasks_finished_total{engine="served",cause="length"}"#,
        3.0,
    ),
    (
        r#"hydra_step_duration_seconds_bucket{engine="served",kind="decode",le="0.012288"}"#,
        9.0,
    ),
];

#[test]
fn prometheus_scrapes_published_counts_and_stalled_slot() {
    let s = Scratch::new();
    let now = clock::monotonic_ns();
    // A live engine whose slot 0 keeps progressing (republished every 100 ms) at 123/456.
    let mut live = s.writer("live", 2);
    live.set_counters(&WriterCounters {
        prompt_tokens_total: 777,
        generated_tokens_total: 123,
        requests_running: 1,
        kv_cells_used: 10,
        kv_cells_total: 100,
    });
    let _busy = BusyWriter::start(
        live,
        |now| vec![decode(now, 123, 456, 5 * S, 0)],
        Duration::from_millis(100),
        Duration::from_secs(120),
    );
    // An engine whose slot 0 last progressed 10 s ago: stalled with --stall-floor 1s.
    let mut stuck = s.writer("stuck", 1);
    stuck.heartbeat(now);
    stuck
        .publish(0, &decode(now, 7, 100, 20 * S, 10 * S))
        .unwrap();

    // An engine that served 3 requests (format v1.3 statistics: 9 decode steps of 10 ms).
    let _served = s.served("served", 3);

    let exporter = Exporter::start(&s.dir, &["--stall-floor", "1s"]);
    let target = exporter.base.trim_start_matches("http://").to_owned();
    let prom = Prometheus::start(s.tmp.path(), &target);

    let mut last = Vec::new();
    let ok = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        last = CHECKS
            .iter()
            .map(|(q, want)| (q, want, prom.query(q)))
            .collect();
        last.iter()
            .all(|(_, want, got)| matches!(got, Ok(Some(v)) if v == *want))
            .then_some(())
    });
    assert!(
        ok.is_some(),
        "Prometheus did not return the published values within 60 s: {last:#?}\n{}\n{}\n{}",
        prom.diagnostics(),
        exporter.diagnostics(),
        s.describe()
    );
    // The dashboards' quantiles: the median inter-token latency lies in the bucket of the
    // 10 ms steps, (8.192, 12.288] ms.
    let q = r#"histogram_quantile(0.5, sum by (le) (hydra_inter_token_latency_seconds_bucket{engine="served"}))"#;
    let p50 = prom.query(q).expect("query").expect("a median");
    assert!((0.008192..=0.012288).contains(&p50), "{p50}");
    // The scrape itself is healthy (Prometheus's own `up` for the target).
    assert_eq!(prom.query(r#"up{job="hydra"}"#), Ok(Some(1.0)));
}
