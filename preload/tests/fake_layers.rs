//! The layer hook in a small C host that sets its own eval callback, over a stand-in
//! libllama and libggml-base (compiled here with `cc`) whose scheduler drives the callback
//! exactly as ggml's does: real dynamic linking, the scheduler's functions interposed
//! across the library boundary. Checks the per-ubatch credit, the layer position inside
//! an armed ubatch, that decode-sized calls and pipeline-parallel schedulers are not
//! armed, that K-shift graphs are left alone, and that the host's own callback sees
//! exactly what it sees without the preload (and is set back after every compute).
//! Needs a C compiler: fails without one unless HYDRA_ALLOW_SKIP=1.

mod common;

use hydra_layout::{Phase, SegmentReader, Substep};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_layers");

/// Compiles the stand-in libggml-base, libllama and the host into `dir`; `None` without a
/// C compiler.
fn compile(dir: &Path) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let d = dir.to_str().expect("utf-8 temp dir");
    let rpath = format!("-Wl,-rpath,{d}");
    let lib = format!("-L{d}");
    let steps: [Vec<String>; 3] = [
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-O1".into(),
            "-o".into(),
            format!("{d}/libggml-base.so"),
            format!("{FAKE}/ggml.c"),
        ],
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-O1".into(),
            "-o".into(),
            format!("{d}/libllama.so"),
            format!("{FAKE}/llama.c"),
            lib.clone(),
            "-lggml-base".into(),
            rpath.clone(),
        ],
        vec![
            "-O1".into(),
            "-o".into(),
            format!("{d}/host"),
            format!("{FAKE}/host.c"),
            lib,
            "-lllama".into(),
            "-lggml-base".into(),
            rpath,
        ],
    ];
    for args in steps {
        let out = Command::new(&cc).args(&args).output().ok()?;
        assert!(
            out.status.success(),
            "{cc} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(dir.join("host"))
}

/// Runs the host (optionally preloaded with `env`), calling `at_checkpoint` with each
/// checkpoint's name; returns every line it printed.
fn run_host(
    host: &Path,
    preload: Option<(&Path, &[(&str, &str)])>,
    mut at_checkpoint: impl FnMut(&str),
) -> Vec<String> {
    let mut cmd = Command::new(host);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((so, env)) = preload {
        cmd.env("LD_PRELOAD", so).envs(env.iter().copied());
    }
    let mut child = cmd.spawn().expect("spawn host");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut lines = vec![];
    for line in stdout.lines() {
        let line = line.expect("host stdout");
        if let Some(name) = line.strip_prefix("checkpoint ") {
            at_checkpoint(name);
            stdin.write_all(b"go\n").expect("resume host");
        }
        lines.push(line);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait host") {
            break s;
        }
        assert!(Instant::now() < deadline, "host did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).unwrap();
    assert!(status.success(), "host failed: {status}\n{err}");
    assert!(err.is_empty(), "nothing to complain about: {err}");
    lines
}

#[test]
fn armed_ubatches_publish_layers_and_the_hosts_callback_sees_what_it_saw() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(host) = hydra_fault::require::or_skip(
        "armed_ubatches_publish_layers_and_the_hosts_callback_sees_what_it_saw",
        compile(tmp.path()),
        "no C compiler (cc, or $CC) to build the stand-in libllama and libggml-base",
        "apt-get install gcc",
    ) else {
        return;
    };
    let so = common::preload_so();
    let seg = tmp.path().join("segments");
    let seg_s = seg.to_str().unwrap();
    let env = [
        ("HYDRA_PROGRESS_DIR", seg_s),
        ("HYDRA_ENGINE_ID", "layers"),
        ("HYDRA_PRELOAD_IDLE_MS", "600000"),
        // The 10-token prompt is armed, the 1-token decode is not.
        ("HYDRA_PRELOAD_LAYER_MIN_TOKENS", "8"),
    ];
    let plain = run_host(&host, None, |_| {});

    let mut seen = vec![];
    let preloaded = run_host(&host, Some((&so, &env)), |name| {
        seen.push(name.to_owned());
        let r = SegmentReader::open_engine(&seg, "layers").expect("segment");
        assert!(
            r.identity().publishes_substeps(),
            "the scheduler's symbols resolved: LAYER_PROGRESS"
        );
        let snap = r.slot(0).unwrap();
        let s = snap.state;
        match name {
            "prompt" => {
                // Inside the second ubatch (4 tokens each), in layer 2 of 3: the host's
                // callback is shown attn-1, after l_out-0 finished.
                assert_eq!(
                    (s.phase, s.work_done, s.step_size),
                    (Phase::Prefill, 4, 10),
                    "the first ubatch is credited; the call's 10 tokens are the step's extent"
                );
                assert_ne!(s.step_start_ns, 0, "the call is in flight");
                assert_eq!(
                    snap.layer(),
                    Some(Substep {
                        done: 1,
                        total: 3,
                        at_ns: snap.layer().unwrap().at_ns,
                        step_start_ns: s.step_start_ns
                    }),
                    "layer 1 of 3 finished in this ubatch"
                );
            }
            "decode" => {
                assert_eq!((s.phase, s.step_size), (Phase::Decode, 1));
                assert_eq!(snap.layer(), None, "a 1-token call is never armed");
            }
            "copies" => {
                assert_eq!(
                    (s.phase, s.work_done, s.step_size),
                    (Phase::Prefill, 4, 10),
                    "ubatches are credited on any scheduler"
                );
                assert_eq!(
                    snap.layer(),
                    None,
                    "a scheduler with pipeline copies is never armed"
                );
            }
            other => panic!("unexpected checkpoint {other}"),
        }
    });
    assert_eq!(seen, ["prompt", "decode", "copies"]);
    assert_eq!(
        preloaded, plain,
        "the host's callback is asked and shown the same nodes, the outputs are the same, \
         and its callback is back on the scheduler after every compute"
    );
    assert!(
        plain.iter().all(|l| !l.contains("did not ask")),
        "{plain:?}"
    );
    assert!(
        plain.iter().any(|l| l.ends_with("own-callback-back 1")),
        "{plain:?}"
    );
}

#[test]
fn layers_off_publishes_no_position_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(host) = hydra_fault::require::or_skip(
        "layers_off_publishes_no_position_and_changes_nothing",
        compile(tmp.path()),
        "no C compiler (cc, or $CC) to build the stand-in libllama and libggml-base",
        "apt-get install gcc",
    ) else {
        return;
    };
    let so = common::preload_so();
    let seg = tmp.path().join("segments");
    let env = [
        ("HYDRA_PROGRESS_DIR", seg.to_str().unwrap()),
        ("HYDRA_ENGINE_ID", "off"),
        ("HYDRA_PRELOAD_LAYERS", "off"),
        ("HYDRA_PRELOAD_LAYER_MIN_TOKENS", "1"),
    ];
    let plain = run_host(&host, None, |_| {});
    let preloaded = run_host(&host, Some((&so, &env)), |name| {
        let r = SegmentReader::open_engine(&seg, "off").expect("segment");
        assert!(!r.identity().publishes_substeps(), "no LAYER_PROGRESS");
        if name == "prompt" {
            let s = r.slot(0).unwrap().state;
            assert_eq!(s.work_done, 4, "ubatches are still credited");
        }
    });
    assert_eq!(preloaded, plain);
}
