//! The preload loaded with `LD_PRELOAD` into a small C host over a stand-in libllama (both
//! compiled here with `cc`): real dynamic linking and `dlsym(RTLD_NEXT)`, two contexts,
//! embeddings, odd and foreign batches, removal, save/restore, free and exit, and the host's
//! own output unchanged. Needs a C compiler: fails without one unless HYDRA_ALLOW_SKIP=1.

mod common;

use hydra_layout::{FinishReason, Phase, SegmentReader, WorkUnit};
use std::path::{Path, PathBuf};
use std::process::Command;

const FAKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake");

/// Compiles the stand-in libllama and the host into `dir`; `None` without a C compiler.
fn compile(dir: &Path) -> Option<PathBuf> {
    common::compile_host(dir, FAKE, &[("llama", "libllama.c", &[])])
}

/// Runs the host (optionally preloaded), calling `at_checkpoint` with each checkpoint's
/// name; returns every line it printed.
fn run_host(
    host: &Path,
    preload: Option<(&Path, &Path)>,
    at_checkpoint: impl FnMut(&str),
) -> Vec<String> {
    let mut cmd = Command::new(host);
    if let Some((so, dir)) = preload {
        cmd.env("LD_PRELOAD", so)
            .env("HYDRA_PROGRESS_DIR", dir)
            .env("HYDRA_ENGINE_ID", "fake")
            .env("HYDRA_PRELOAD_IDLE_MS", "600000");
    }
    let (lines, err) = common::run_host(cmd, at_checkpoint);
    if preload.is_some() {
        assert!(
            err.lines().all(|l| l.starts_with("hydra-preload: ")) && err.lines().count() <= 2,
            "the preload logs once per kind of trouble:\n{err}"
        );
        assert!(
            err.contains("n_seq_id = 100000"),
            "the odd batch is logged: {err}"
        );
    }
    lines
}

/// Checkpoint "one": the first context's two slots (a decode after a 5-token prompt; a
/// batch refused for lack of room), its counters, and the second context's own segment.
fn at_one(a: &SegmentReader, seg: &Path) {
    assert_eq!(a.slot_count(), 2);
    // No layer hook in a host: the layer position (format v1.1) stays unknown.
    assert!(!a.identity().publishes_substeps());
    assert_eq!(a.slot(1).unwrap().substep, None);
    let s1 = a.slot(1).unwrap().state;
    assert_eq!(
        (
            s1.task_id,
            s1.phase,
            s1.work_unit,
            s1.work_done,
            s1.work_total
        ),
        (1, Phase::Decode, WorkUnit::Tokens, 2, 0),
        "5-token prompt, then 2 single tokens; total unknown"
    );
    assert_eq!(
        (s1.n_past, s1.n_ctx, s1.step_start_ns, s1.steps_done),
        (7, 1024, 0, 2)
    );
    let s0 = a.slot(0).unwrap().state;
    assert_eq!(
        (s0.task_id, s0.phase, s0.work_done, s0.steps_done),
        (2, Phase::Prefill, 0, 1),
        "a batch refused for lack of room ends its step without progress"
    );
    let h = a.header().unwrap();
    let c = h.counters;
    assert_eq!(
        (
            c.prompt_tokens_total,
            c.generated_tokens_total,
            c.requests_running,
            c.kv_cells_used,
            c.kv_cells_total
        ),
        (5, 2, 2, 7, 2048)
    );
    assert!(
        a.identity().description.model_name.is_empty(),
        "no llama_get_model: no model strings"
    );
    let b = SegmentReader::open_engine(seg, "fake-ctx1").expect("second context's own segment");
    let s = b.slot(0).unwrap().state;
    assert_eq!(
        (s.phase, s.work_done, s.n_past),
        (Phase::Prefill, 3, 3),
        "embeddings count as positions"
    );
}

/// Checkpoint "two": a slot removed then restored, a save of a busy slot, and the second
/// context freed.
fn at_two(a: &SegmentReader, seg: &Path) {
    let s1 = a.slot(1).unwrap().state;
    assert_eq!(
        (
            s1.phase,
            s1.finish_reason,
            s1.work_unit,
            s1.work_done,
            s1.work_total
        ),
        (
            Phase::Idle,
            FinishReason::Completed,
            WorkUnit::Bytes,
            2048,
            4096
        ),
        "removed, then restored (2048 of 4096 bytes)"
    );
    let s0 = a.slot(0).unwrap().state;
    assert_eq!(
        (s0.phase, s0.state_size),
        (Phase::Prefill, 4096),
        "a save of a busy slot returns to its phase"
    );
    assert!(
        SegmentReader::open_engine(seg, "fake-ctx1").is_err(),
        "llama_free removes the segment"
    );
}

#[test]
fn preloaded_host_publishes_each_context_and_behaves_the_same() {
    let Some(fake) = common::fake_host(
        "preloaded_host_publishes_each_context_and_behaves_the_same",
        compile,
        "the stand-in libllama",
    ) else {
        return;
    };
    let (host, so, seg) = (&fake.host, &fake.so, &fake.seg);
    let plain = run_host(host, None, |_| {});

    let mut seen = vec![];
    let preloaded = run_host(host, Some((so, seg)), |name| {
        seen.push(name.to_owned());
        let a = SegmentReader::open_engine(seg, "fake").expect("first context's segment");
        match name {
            "one" => at_one(&a, seg),
            "two" => at_two(&a, seg),
            other => panic!("unexpected checkpoint {other}"),
        }
    });
    assert_eq!(seen, ["one", "two"]);
    assert_eq!(
        preloaded, plain,
        "the host's output is the same with the preload"
    );
    assert!(plain.contains(&"decoded 13 3".to_owned()), "{plain:?}");
    let left: Vec<_> = std::fs::read_dir(seg)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "llama_free and exit leave no segment: {left:?}"
    );
}
