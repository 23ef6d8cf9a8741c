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
use std::path::{Path, PathBuf};
use std::process::Command;

const FAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_layers");
const LIBRARIES: &str = "the stand-in libllama and libggml-base";

/// Compiles the stand-in libggml-base, libllama and the host into `dir`; `None` without a
/// C compiler.
fn compile(dir: &Path) -> Option<PathBuf> {
    common::compile_host(
        dir,
        FAKE,
        &[
            ("ggml-base", "ggml.c", &[]),
            ("llama", "llama.c", &["ggml-base"]),
        ],
    )
}

/// Runs the host (optionally preloaded with `env`), calling `at_checkpoint` with each
/// checkpoint's name; returns every line it printed.
fn run_host(
    host: &Path,
    preload: Option<(&Path, &[(&str, &str)])>,
    at_checkpoint: impl FnMut(&str),
) -> Vec<String> {
    let mut cmd = Command::new(host);
    if let Some((so, env)) = preload {
        cmd.env("LD_PRELOAD", so).envs(env.iter().copied());
    }
    let (lines, err) = common::run_host(cmd, at_checkpoint);
    assert!(err.is_empty(), "nothing to complain about: {err}");
    lines
}

/// Builds the host for `test` and runs it plain, then preloaded with `env` and its segment
/// directory, calling `at_checkpoint` with that directory and each checkpoint's name;
/// returns the two outputs (plain first). `None` when the test skips.
fn plain_and_preloaded(
    test: &str,
    env: &[(&str, &str)],
    mut at_checkpoint: impl FnMut(&Path, &str),
) -> Option<(Vec<String>, Vec<String>)> {
    let fake = common::fake_host(test, compile, LIBRARIES)?;
    let mut env = env.to_vec();
    env.push(("HYDRA_PROGRESS_DIR", fake.seg.to_str().unwrap()));
    let plain = run_host(&fake.host, None, |_| {});
    let preloaded = run_host(&fake.host, Some((&fake.so, &env)), |name| {
        at_checkpoint(&fake.seg, name)
    });
    Some((plain, preloaded))
}

#[test]
fn armed_ubatches_publish_layers_and_the_hosts_callback_sees_what_it_saw() {
    let env = [
        ("HYDRA_ENGINE_ID", "layers"),
        ("HYDRA_PRELOAD_IDLE_MS", "600000"),
        // The 10-token prompt is armed, the 1-token decode is not.
        ("HYDRA_PRELOAD_LAYER_MIN_TOKENS", "8"),
    ];
    let mut seen = vec![];
    let Some((plain, preloaded)) = plain_and_preloaded(
        "armed_ubatches_publish_layers_and_the_hosts_callback_sees_what_it_saw",
        &env,
        |seg, name| {
            seen.push(name.to_owned());
            let r = SegmentReader::open_engine(seg, "layers").expect("segment");
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
        },
    ) else {
        return;
    };
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
    let env = [
        ("HYDRA_ENGINE_ID", "off"),
        ("HYDRA_PRELOAD_LAYERS", "off"),
        ("HYDRA_PRELOAD_LAYER_MIN_TOKENS", "1"),
    ];
    let Some((plain, preloaded)) = plain_and_preloaded(
        "layers_off_publishes_no_position_and_changes_nothing",
        &env,
        |seg, name| {
            let r = SegmentReader::open_engine(seg, "off").expect("segment");
            assert!(!r.identity().publishes_substeps(), "no LAYER_PROGRESS");
            if name == "prompt" {
                let s = r.slot(0).unwrap().state;
                assert_eq!(s.work_done, 4, "ubatches are still credited");
            }
        },
    ) else {
        return;
    };
    assert_eq!(preloaded, plain);
}
