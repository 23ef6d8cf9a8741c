//! `hydra-engine demo` (part of the binary, not the library) runs end to end on a small
//! workload and reports queue wait and compute apart, and idle slots by their last task.

use std::process::{Child, Command};
use std::time::Duration;

/// Starts `hydra-engine demo` with the arguments `args` adds, as engine `engine_id` with its
/// segment in a fresh temporary folder (returned), its standard output piped.
fn spawn_demo(engine_id: &str, args: impl FnOnce(&mut Command)) -> (tempfile::TempDir, KillOnDrop) {
    let tmp = tempfile::Builder::new()
        .prefix("hydra-demo")
        .tempdir()
        .expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.arg("demo");
    args(&mut cmd);
    let child = KillOnDrop(
        cmd.args(["--engine-id", engine_id, "--progress-dir"])
            .arg(tmp.path())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the demo"),
    );
    (tmp, child)
}

/// The demo process, killed and reaped if the test ends early.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `hydra-engine demo` with the arguments `args` adds, as engine `engine_id` with its
/// segment in a fresh temporary folder, to its end (at most five minutes); asserts that it
/// succeeded and returns its standard output, and whether it left its segment behind.
fn run_demo(engine_id: &str, args: impl FnOnce(&mut Command)) -> (String, bool) {
    let (tmp, mut child) = spawn_demo(engine_id, args);
    let stdout = child.0.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout));
    let status = hydra_fault::wait_for(Duration::from_secs(300), "the demo to finish", || {
        child.0.try_wait().expect("wait for the demo")
    });
    let out = reader.join().expect("reader thread").expect("demo output");
    assert!(status.success(), "demo failed: {status}\n{out}");
    let segment_left = tmp.path().join(format!("{engine_id}.hps")).exists();
    (out, segment_left)
}

#[test]
fn demo_runs_and_reports_queue_wait_and_compute_apart() {
    let (out, segment_left) = run_demo("demo-test", |cmd| {
        cmd.args(["--slots", "3", "--prompt-tokens", "96"]);
        cmd.args(["--decode-tokens", "24", "--ubatch", "16"]);
        cmd.args(["--interval-ms", "20", "--rounds", "2"]);
    });
    let summary = out
        .split_once("summary")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no summary:\n{out}"));
    let requests: Vec<&str> = summary
        .lines()
        .filter(|l| l.contains(" in the queue, computed in "))
        .collect();
    // Two rounds of: a prefill on slot 0, a completion on slot 1, and on slot 2 a decode
    // restored from slot 1 (first round), then a completion; each kind on one line.
    assert_eq!(requests.len(), 4, "{summary}");
    for kind in [
        "prefill slot 0 (x2)",
        "decode slot 1 (x2)",
        "decode slot 2 (restored) ",
        "decode slot 2 ",
    ] {
        assert!(
            requests.iter().any(|l| l.trim_start().starts_with(kind)),
            "{kind}: {summary}"
        );
    }
    assert!(
        requests
            .iter()
            .any(|l| l.contains("prefill slot 0 (x2)") && l.contains(" 192 tok")),
        "two prefills of 96 tokens: {summary}"
    );
    for line in &requests {
        assert!(
            line.contains(" tok: waited ") && line.ends_with("tokens/s"),
            "{line}"
        );
    }
    assert!(summary.contains("meta from the segment"), "{summary}");
    // The last plain view shows every slot idle, each with its last task, no live rate.
    let last_view: Vec<&str> = out
        .rsplit("--\n")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("slot "))
        .collect();
    assert_eq!(last_view.len(), 3, "{out}");
    for line in last_view {
        assert!(line.contains("idle") && line.contains("last: "), "{line}");
        assert!(!line.contains("/s") && !line.contains("eta"), "{line}");
    }
    assert!(!segment_left, "the demo left its segment behind");
}

#[test]
fn demo_runs_on_a_gguf_model() {
    let Some(model) = hydra_fault::require::smollm2_gguf("demo_runs_on_a_gguf_model") else {
        return;
    };
    let (out, _) = run_demo("demo-gguf", |cmd| {
        cmd.arg("--model").arg(&model);
        cmd.args(["--slots", "3", "--prompt-tokens", "40"]);
        cmd.args(["--decode-tokens", "6", "--ubatch", "16"]);
        cmd.args(["--interval-ms", "20", "--rounds", "1"]);
    });
    assert!(
        out.contains(&model.display().to_string()),
        "names the model:\n{out}"
    );
    let summary = out
        .split_once("summary")
        .map(|(_, s)| s)
        .unwrap_or_default();
    // The long prompt is exactly the tokens asked for, in the model's own vocabulary.
    assert!(
        summary
            .lines()
            .any(|l| l.contains("prefill slot 0") && l.contains(" 40 tok")),
        "{summary}"
    );
}

/// `demo --page` serves the exporter's live page of the demo's segments while it runs: its
/// address is printed before the work starts, and the page's state names the demo's engine.
#[test]
fn demo_page_serves_the_live_page_while_it_runs() {
    use std::io::BufRead;
    let (_tmp, mut child) = spawn_demo("demo-page", |cmd| {
        cmd.args(["--page", "--rounds", "50"]);
        cmd.args(["--prompt-tokens", "96", "--decode-tokens", "64"]);
    });
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let url = hydra_fault::wait_for(Duration::from_secs(60), "the page's address", || {
        let line = rx.recv_timeout(Duration::from_millis(100)).ok()?;
        let at = line.find("page  http://")? + "page  ".len();
        let url = line[at..].split_whitespace().next()?.to_owned();
        Some(url)
    });
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let state: serde_json::Value = ureq::get(&format!("{url}page/state"))
        .call()
        .expect("the page's state")
        .into_json()
        .expect("JSON");
    assert_eq!(state["engines"][0]["engine_id"], "demo-page", "{state}");
    let page = ureq::get(&url).call().expect("the page");
    assert_eq!(page.content_type(), "text/html");
    let _ = child.0.kill();
}
