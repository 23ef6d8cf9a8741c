//! Shared harness of the exporter's integration tests: a scratch directory of segments,
//! test writers in known states, the exporter binary under a kill-on-drop guard, a tiny
//! HTTP client, and failure messages that show the command, its output and the directory.

#![allow(dead_code)]

use hydra_layout::{clock, Phase, SegmentWriter, SlotState, WorkUnit, WriterCounters};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One second in ns.
pub const S: u64 = 1_000_000_000;

pub use hydra_fault::segments::{decode, Scratch};

/// A state save in flight: `done` of `total` bytes.
pub fn save(now: u64, done: u64, total: u64) -> SlotState {
    SlotState {
        task_id: 43,
        phase: Phase::Save,
        work_unit: WorkUnit::Bytes,
        work_done: done,
        work_total: total,
        n_past: 50,
        n_ctx: 4096,
        state_size: total,
        phase_start_ns: now - 2 * S,
        last_progress_ns: now - S / 10,
        steps_done: 4,
        last_step_ns: 1_000_000,
        ..Default::default()
    }
}

/// A CPU running layers 0-15 and an RPC peer running 16-29 and the output head.
pub fn rpc_split() -> hydra_layout::Devices {
    use hydra_layout::{Device, DeviceKind, LayerRange};
    hydra_layout::Devices {
        devices: vec![
            Device {
                kind: DeviceKind::Cpu,
                name: "CPU".into(),
                endpoint: String::new(),
            },
            Device {
                kind: DeviceKind::Rpc,
                name: "RPC0[127.0.0.1:50052]".into(),
                endpoint: "127.0.0.1:50052".into(),
            },
        ],
        layer_count: 30,
        ranges: vec![
            LayerRange {
                first: 0,
                last: 15,
                device: 1,
            },
            LayerRange {
                first: 16,
                last: 29,
                device: 2,
            },
        ],
        output_device: 2,
    }
}

/// Two decode steps of slot 0, ending before `step_start_ns`, each waited about a
/// millisecond on the RPC peer (device 2): the peer's decode waits are learnt (FORMAT
/// §19.6), so its wait threshold is the 1 s floor.
fn learn_decode_waits(live: &mut SegmentWriter, step_start_ns: u64, now: u64) {
    for k in [2, 1] {
        let earlier = SlotState {
            step_start_ns: step_start_ns - k * S / 1000,
            step_size: 1,
            ..decode(now, 123, 456, 10 * S, 0)
        };
        live.publish(0, &earlier).unwrap();
        let since = hydra_layout::clock::monotonic_ns() - S / 1000;
        let wait = hydra_layout::StepDevices {
            layers_sent: 0,
            wait_device: 2,
            wait_since_ns: since,
        };
        live.publish_step_devices(0, &wait).unwrap();
        live.publish_step_devices(0, &Default::default()).unwrap();
    }
}

/// Engines in every state, kept alive by the returned writers:
/// - `live` (publishes layer positions): slot 0 decoding 123/456 (progressing), inside a
///   step at layer 7 of 30 waiting on an RPC peer (its layers split as [`rpc_split`])
///   that has read nothing since the step began;
///   slot 1 idle, slot 2 saving (bytes), slot 3 idle with a task pending (queued);
/// - `stalled`: slot 0 decoding with its last progress 120 s ago (default floor 30 s);
/// - `dead`: crashed with slot 0 decoding (orphaned) and slot 1 torn;
/// - `closed`: exited cleanly (file kept).
pub fn every_state(s: &Scratch) -> Vec<SegmentWriter> {
    let now = clock::monotonic_ns();
    let live = live_engine(s, now);

    let mut stalled = s.writer("stalled", 2);
    stalled.heartbeat(now);
    stalled
        .publish(0, &decode(now, 10, 100, 200 * S, 120 * S))
        .unwrap();

    let mut dead = s.writer("dead", 2);
    dead.publish(0, &decode(now, 5, 50, 5 * S, 0)).unwrap();
    dead.publish(1, &decode(now, 6, 50, 5 * S, 0)).unwrap();
    dead.abandon_update(1).unwrap();
    dead.simulate_crash();

    s.closed_engine("closed");
    vec![live, stalled]
}

/// [`every_state`]'s `live` engine at `now`.
fn live_engine(s: &Scratch, now: u64) -> SegmentWriter {
    let mut description = hydra_fault::segments::description();
    description.capabilities |= hydra_layout::header::capabilities::LAYER_PROGRESS
        | hydra_layout::header::capabilities::STEP_PREDICTION
        | hydra_layout::header::capabilities::DEVICES
        | hydra_layout::header::capabilities::DEVICE_WAIT
        | hydra_layout::header::capabilities::LAYERS_SENT
        | hydra_layout::header::capabilities::PEER_READS;
    let mut live = SegmentWriter::create(&hydra_layout::SegmentConfig {
        dir: s.dir.clone(),
        engine_id: "live".into(),
        slot_count: 4,
        description,
    })
    .expect("create the live segment");
    live.heartbeat(now);
    live.set_counters(&WriterCounters {
        prompt_tokens_total: 1000,
        generated_tokens_total: 123,
        requests_running: 2,
        kv_cells_used: 512,
        kv_cells_total: 2048,
    });
    let step_start_ns = now.saturating_sub(S / 100).max(1);
    let in_step = SlotState {
        step_start_ns,
        step_size: 1,
        ..decode(now, 123, 456, 10 * S, 0)
    };
    // The writer's cost model (format v1.2) predicts the step and the phase's end.
    let prediction = hydra_layout::Prediction {
        step_expected_ns: S / 20,
        step_start_ns,
        task_expected_end_ns: now + 100 * S,
        phase_start_ns: in_step.phase_start_ns,
        error_ppm: 100_000,
    };
    // Its layers split over the host's CPU and an RPC peer (format v1.3), the peer's
    // decode waits learnt.
    live.publish_devices(&rpc_split()).unwrap();
    learn_decode_waits(&mut live, step_start_ns, now);
    live.publish_with_prediction(0, &in_step, &prediction)
        .unwrap();
    live.publish_substep(
        0,
        &hydra_layout::Substep {
            done: 7,
            total: 30,
            at_ns: now,
            step_start_ns,
        },
    )
    .unwrap();
    // Slot 0's step waiting on the peer since it began, 20 layers sent.
    live.publish_step_devices(
        0,
        &hydra_layout::StepDevices {
            layers_sent: 20,
            wait_device: 2,
            wait_since_ns: step_start_ns,
        },
    )
    .unwrap();
    // The peer has read nothing since the step began (format v1.3 §19.7).
    live.publish_peer_unread(2, step_start_ns).unwrap();
    live.publish(2, &save(now, 1 << 20, 4 << 20)).unwrap();
    live.pending_counter().queued(3);
    live
}

/// A writer thread that republishes slot 0 of its engine every `period` (fresh last
/// progress, same counts) and beats, until dropped (or `max_run` passes).
pub struct BusyWriter {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl BusyWriter {
    pub fn start(
        mut w: SegmentWriter,
        state: impl Fn(u64) -> Vec<SlotState> + Send + 'static,
        period: Duration,
        max_run: Duration,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::spawn(move || {
            let deadline = Instant::now() + max_run;
            while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
                let now = clock::monotonic_ns();
                for (i, st) in state(now).iter().enumerate() {
                    w.publish(i, st).expect("publish");
                }
                w.heartbeat(now);
                std::thread::sleep(period);
            }
            let _ = w.close();
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for BusyWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The exporter binary, killed and reaped on drop.
pub struct Exporter {
    child: Child,
    pub base: String,
    pub command: String,
    stderr_path: PathBuf,
}

/// An HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build()
}

/// GET `url`, any status.
pub fn http_get(url: &str, accept: Option<&str>) -> Resp {
    let mut req = agent().get(url);
    if let Some(a) = accept {
        req = req.set("Accept", a);
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let status = resp.status();
    let content_type = resp.header("content-type").unwrap_or_default().to_owned();
    let mut body = String::new();
    resp.into_reader()
        .take(64 << 20)
        .read_to_string(&mut body)
        .unwrap_or_else(|e| panic!("read body of {url}: {e}"));
    Resp {
        status,
        content_type,
        body,
    }
}

impl Exporter {
    /// Starts `hydra-exporter --listen 127.0.0.1:0 --dir DIR EXTRA...` and waits (30 s at
    /// most) for the address it prints.
    pub fn start(dir: &Path, extra: &[&str]) -> Self {
        let exe = env!("CARGO_BIN_EXE_hydra-exporter");
        let stderr_path = dir
            .parent()
            .unwrap_or(dir)
            .join(format!("exporter-{}.stderr", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut cmd = Command::new(exe);
        cmd.args(["--listen", "127.0.0.1:0", "--dir"])
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let command = format!("{cmd:?}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut me = Self {
            child,
            base: String::new(),
            command,
            stderr_path,
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.starts_with("listening on ") => {
                me.base = line["listening on ".len()..].trim().to_owned();
            }
            other => panic!(
                "exporter did not report its address ({other:?})\n{}",
                me.diagnostics()
            ),
        }
        me
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> Resp {
        http_get(&self.url(path), None)
    }

    pub fn get_accept(&self, path: &str, accept: &str) -> Resp {
        http_get(&self.url(path), Some(accept))
    }

    /// The exporter's log (stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The command line and the exporter's log so far.
    pub fn diagnostics(&self) -> String {
        let log = self.log();
        let tail: String = log
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        format!("command: {}\nexporter stderr (tail):\n{tail}", self.command)
    }

    /// Sends SIGTERM and waits (10 s at most) for a clean exit; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "exporter ignored SIGTERM\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample `name{labels}` in a text exposition (labels in order, exactly
/// as written), if present.
pub fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Sample names (without labels) of every sample line.
pub fn sample_names(body: &str) -> Vec<String> {
    let mut names: Vec<String> = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Path of a tool that must exist (the tests that need it fail, never skip, without it).
pub fn require_tool(name: &str) -> PathBuf {
    hydra_fault::require::find_on_path(name).unwrap_or_else(|| {
        panic!(
            "`{name}` not found on PATH: this test needs it. Install the Prometheus server and \
             tools (Debian/Ubuntu: `apt-get install prometheus`, which provides prometheus and \
             promtool; scripts/setup.sh does)"
        )
    })
}

/// Runs `promtool ARGS` with `stdin`; panics with its output unless it succeeds.
pub fn promtool(args: &[&str], stdin: &str) -> String {
    let tool = require_tool("promtool");
    let mut child = Command::new(&tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn promtool: {e}"));
    {
        let mut si = child.stdin.take().expect("stdin");
        si.write_all(stdin.as_bytes()).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{text}\n--- input (first 4000 bytes) ---\n{}",
        out.status,
        &stdin[..stdin.len().min(4000)]
    );
    text
}

/// The `hydra-probe` binary of this workspace (built by the fault suite's builder).
pub fn probe_binary() -> PathBuf {
    hydra_fault::bins::probe()
}

/// Polls `f` every `every` until it returns `Some` or `timeout` passes.
pub fn poll<T>(timeout: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}
