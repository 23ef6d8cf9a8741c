//! The step prediction (format v1.2) of the preload, seen from outside: a C host prefills
//! and decodes over a stand-in libllama whose calls take as long as a forward would (slept
//! for real, longer with the context), both compiled here with `cc`, and stops inside a
//! later decode step and inside a batch of two sequences while a separate reader (the
//! segment reader, and hydra-probe's meta) looks. Needs a C compiler: fails without one
//! unless HYDRA_ALLOW_SKIP=1.

use hydra_layout::{clock, header::capabilities, SegmentReader};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_prediction");
/// The stand-in llama.h (shared with the plain fake host).
const INCLUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake");

/// What the stand-in takes for a call of `tokens` tokens at positions `first..`, ns.
fn nominal(tokens: u64, first: u64) -> u64 {
    let pairs: u64 = (first..first + tokens).map(|p| p + 1).sum();
    1_000_000 + 20_000 * tokens + 1_000 * pairs
}

/// Builds the timed stand-in and its host in `dir`; `None` without a C compiler.
fn build(dir: &Path) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let d = dir.display();
    let steps = [
        // The plain stand-in, its llama_decode renamed for the timed one to call.
        format!("-c -fPIC -Dllama_decode=fake_plain_decode -o {d}/plain.o {INCLUDE}/libllama.c"),
        format!("-shared -fPIC -o {d}/libllama.so {SRC}/libllama.c {d}/plain.o"),
        format!("-o {d}/host {SRC}/host.c -L{d} -lllama -Wl,-rpath,{d}"),
    ];
    for step in steps {
        let out = Command::new(&cc)
            .args(["-O1", &format!("-I{INCLUDE}")])
            .args(step.split(' '))
            .output()
            .ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cc} {step}:\n{err}");
    }
    Some(dir.join("host"))
}

/// The reader's view of `slot` at a checkpoint, inside a call: the tokens its cache held
/// before the call, the prediction for the step in flight, and hydra-probe's meta of it.
fn look(dir: &Path, slot: usize) -> (u64, Option<u64>, HydraMeta) {
    let r = SegmentReader::open_engine(dir, "pred").expect("segment");
    assert!(
        r.identity().description.capabilities & capabilities::STEP_PREDICTION != 0
            && r.identity().publishes_predictions(),
        "the preload says it publishes predictions"
    );
    let snap = r.slot(slot).expect("slot");
    let p = snap.prediction.expect("prediction words");
    assert_eq!(p.task_expected_end_ns, 0, "the task end stays unknown");
    assert_eq!(snap.phase_end_ns(), None);
    assert_ne!(snap.state.step_start_ns, 0, "a call is in flight");
    let view =
        EngineView::capture(&r, clock::monotonic_ns(), &Thresholds::default()).expect("capture");
    let meta = HydraMeta::from_view(&view, slot).expect("meta");
    (snap.state.n_past, snap.step_expected_ns(), meta)
}

/// The prediction `got` is for a call the stand-in makes take `want` ns: the model learnt
/// from calls slept for real (never shorter than asked, longer on a loaded machine).
fn plausible(got: Option<u64>, want: u64) -> u64 {
    let got = got.expect("a step prediction in flight");
    assert!(
        got >= want / 2 && got <= want * 20,
        "predicted {got} ns for a {want} ns call"
    );
    got
}

const TEST: &str = "a_reader_sees_the_step_prediction_during_later_decode_calls";

#[test]
fn a_reader_sees_the_step_prediction_during_later_decode_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let why = "no C compiler (cc, or $CC) to build the timed stand-in libllama";
    let Some(host) =
        hydra_fault::require::or_skip(TEST, build(tmp.path()), why, "apt-get install gcc")
    else {
        return;
    };
    let dir = tmp.path().join("segments");
    let env = [
        (
            "LD_PRELOAD",
            hydra_fault::bins::preload_library().into_os_string(),
        ),
        ("HYDRA_PROGRESS_DIR", dir.clone().into_os_string()),
        ("HYDRA_ENGINE_ID", "pred".into()),
        ("HYDRA_PRELOAD_IDLE_MS", "600000".into()),
    ];
    let mut cmd = Command::new(&host);
    cmd.envs(env).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn host");
    let mut to_host = child.stdin.take().expect("stdin");
    let mut checkpoints = vec![];
    let mut printed = vec![];
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let line = line.expect("host stdout");
        match line.strip_prefix("checkpoint ") {
            Some("decode") => {
                // Inside the 25th decode step of sequence 0 (after a 64-token prompt).
                let (n_past, predicted, meta) = look(&dir, 0);
                assert_eq!((meta.phase.as_str(), n_past), ("decode", 64 + 24));
                let ms = plausible(predicted, nominal(1, n_past)) / 1_000_000;
                assert_eq!(meta.step_expected_ms, Some(Some(ms)), "{meta:?}");
                assert!(
                    matches!(meta.prediction_error, Some(Some(e)) if e > 0.0),
                    "24 decode steps learnt: a bound is stated: {meta:?}"
                );
                assert_eq!(meta.eta_s, None, "no total, no ETA: {meta:?}");
                assert_eq!(meta.eta_source, None);
                checkpoints.push("decode");
            }
            Some("batch") => {
                // Inside the 10th decode batch of both sequences: one forward, one
                // prediction for both slots.
                let (p0, s0, m0) = look(&dir, 0);
                let (p1, s1, m1) = look(&dir, 1);
                assert_eq!((m0.phase.as_str(), m1.phase.as_str()), ("decode", "decode"));
                let want = nominal(1, p0) + nominal(1, p1) - 1_000_000;
                assert_eq!(s0, s1, "the same prediction on every slot of the batch");
                plausible(s0, want);
                checkpoints.push("batch");
            }
            Some(other) => panic!("unexpected checkpoint {other}"),
            None => {
                printed.push(line);
                continue;
            }
        }
        to_host.write_all(b"go\n").expect("resume host");
    }
    // Its stdout closed: the host is exiting.
    drop(to_host);
    let out = child.wait_with_output().expect("host exit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.is_empty(),
        "host: {}\n{err}",
        out.status
    );
    assert_eq!(checkpoints, ["decode", "batch"]);
    assert_eq!(
        printed,
        ["prompt 0", "decode 0", "prompt 0", "batch 0", "decoded 150"]
    );
}
