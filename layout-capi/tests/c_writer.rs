//! A C program (`docs/c-abi/examples/writer_demo.c`) writes a segment through the writer
//! C ABI while the Rust probe reads and classifies it: progressing while the program
//! publishes, stalled once it stops (then, with a short heartbeat timeout, the engine
//! hung), closed after it closes. The program obeys one command per stdin line and answers
//! each, so the test decides when it publishes; every wait has a deadline.
//!
//! Needs `$CC` or `cc`: without one this test FAILS, saying so.

#[path = "../../probe-capi/tests/ffi_support/mod.rs"]
mod ffi_support;

use hydra_layout::{clock, Phase, SegmentReader};
use hydra_probe::{EngineHealth, EngineView, SlotClass, Thresholds};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// Silence after which a slot of the demo counts as stalled. Short, so the test is quick;
/// a step of the demo takes microseconds, so the floor is what decides.
const STALL_FLOOR: Duration = Duration::from_millis(800);
/// Longest wait for one answer of the demo (a loaded CI machine is slow, never this slow).
const ANSWER_WAIT: Duration = Duration::from_secs(20);

struct Demo {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Demo {
    fn spawn(binary: &std::path::Path, dir: &std::path::Path) -> Self {
        let mut child = Command::new(binary)
            .arg(dir)
            .arg("c-engine")
            .arg("2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn writer_demo");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(ANSWER_WAIT)
            .unwrap_or_else(|e| panic!("writer_demo did not answer within {ANSWER_WAIT:?}: {e}"))
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("write to writer_demo");
        self.stdin.flush().unwrap();
        let answer = self.line();
        assert_eq!(answer, "ok", "writer_demo answered {answer:?} to {cmd:?}");
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn capture(reader: &SegmentReader, t: &Thresholds) -> EngineView {
    EngineView::capture(reader, clock::monotonic_ns(), t).expect("capture")
}

/// Twenty decode steps on slot 0 of task 77 (1000 tokens), slot 1 queued: each read
/// back progressing with its figures, and no step in flight between commands.
fn twenty_steps_progress(demo: &mut Demo, reader: &SegmentReader, t: &Thresholds) {
    for i in 1..=20u64 {
        demo.send("step 0");
        let v = capture(reader, t);
        let s = &v.slots[0];
        assert_eq!(
            s.class,
            SlotClass::Progressing,
            "while publishing, step {i}: {s:?}"
        );
        assert_eq!((s.state.task_id, s.state.phase), (77, Phase::Decode));
        assert_eq!((s.state.work_done, s.state.work_total), (i, 1000));
        assert_eq!(
            (s.state.n_past, s.state.n_ctx, s.state.steps_done),
            (i, 4096, i)
        );
        assert_eq!(
            s.state.step_start_ns, 0,
            "no step in flight between commands"
        );
        assert_eq!(v.slots[1].class, SlotClass::Queued);
        assert_eq!(v.header.counters.generated_tokens_total, i);
        assert_eq!(v.header.counters.requests_waiting, 1);
        assert_eq!(v.health, EngineHealth::Live);
    }
}

/// The demo now publishes nothing: slot 0 must turn stalled once the floor has passed.
fn slot_0_turns_stalled(reader: &SegmentReader, t: &Thresholds) {
    let deadline = Instant::now() + STALL_FLOOR + ANSWER_WAIT;
    loop {
        let v = capture(reader, t);
        match v.slots[0].class {
            SlotClass::Stalled => {
                let age = v.slots[0].derived.last_progress_age_ns.unwrap();
                assert!(
                    age > STALL_FLOOR.as_nanos() as u64,
                    "stalled at age {age} ns"
                );
                break;
            }
            SlotClass::Progressing => {}
            other => panic!(
                "slot 0 went {other:?} after the demo stopped: {:?}",
                v.slots[0]
            ),
        }
        assert!(Instant::now() < deadline, "slot 0 never turned stalled");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn c_writer_is_read_and_classified_by_the_rust_probe() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("segs");
    let source = ffi_support::workspace().join("docs/c-abi/examples/writer_demo.c");
    let binary = ffi_support::compile_c(&source, tmp.path(), &[ffi_support::writer_lib(false)]);

    let mut demo = Demo::spawn(&binary, &dir);
    let ready = demo.line();
    let path = ready
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("expected `ready <path>`, got {ready:?}"));
    assert_eq!(std::path::Path::new(path), dir.join("c-engine.hps"));
    let reader = SegmentReader::open(path).expect("open the C writer's segment");
    let t = Thresholds {
        stall_floor: STALL_FLOOR,
        ..Thresholds::default()
    };

    let v = capture(&reader, &t);
    assert_eq!(v.health, EngineHealth::Live);
    assert_eq!(v.identity.description.model_name, "demo-llama");
    // The C host's one bit, and the families every writer derives by itself (v1.3).
    assert_eq!(
        v.identity.description.capabilities,
        1 | hydra_layout::header::capabilities::WRITER_DERIVED
    );
    assert_eq!(v.slots.len(), 2);
    assert!(v.slots.iter().all(|s| s.class == SlotClass::Idle));

    demo.send("begin 0 77 1000");
    demo.send("queue 1");
    twenty_steps_progress(&mut demo, &reader, &t);
    slot_0_turns_stalled(&reader, &t);
    // Heartbeat silent too: with a short heartbeat timeout the engine reads hung.
    let hung = Thresholds {
        heartbeat_timeout: STALL_FLOOR,
        ..t
    };
    assert_eq!(capture(&reader, &hung).health, EngineHealth::Hung);

    // Publishing again brings it back.
    demo.send("step 0");
    assert_eq!(capture(&reader, &t).slots[0].class, SlotClass::Progressing);
    demo.send("finish 0");
    let v = capture(&reader, &t);
    assert_eq!(v.slots[0].class, SlotClass::Idle);
    assert_eq!(
        v.slots[0].state.finish_reason,
        hydra_layout::FinishReason::Completed
    );

    demo.send("close");
    let status = demo.child.wait().expect("wait writer_demo");
    assert!(status.success(), "writer_demo exited with {status}");
    assert_eq!(capture(&reader, &t).health, EngineHealth::Closed);
    assert!(
        !std::path::Path::new(path).exists(),
        "closed segment not removed"
    );
}
