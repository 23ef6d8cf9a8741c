//! Engine behaviour on the embedded model and on GGUF files written here.

use crate::common;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use candle_core::quantized::GgmlDType;
use hydra_engine_core::threads::PoolUse;
use hydra_engine_core::SlotId;
use hydra_engine_core::{
    generate, Conversion, EngineError, FnObserver, LoadOptions, Logits, Model, Sampler,
    SamplerConfig, Slots, StateError, StepDone, StepStart, StopReason,
};

fn builtin() -> Arc<Model> {
    Arc::new(Model::builtin().expect("builtin model"))
}

/// `common::write_test_gguf`'s model of type `dtype` (seed 7), written as `name` in a fresh
/// folder: the folder (removed on drop) and the file.
fn test_gguf(name: &str, dtype: GgmlDType) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    common::write_test_gguf(&path, dtype, 7);
    (dir, path)
}

fn greedy(slots: &mut Slots, slot: usize, prompt: &[u32], n: usize) -> Vec<u32> {
    let logits = slots
        .prefill(slots.id(slot).unwrap(), prompt, 64, &mut ())
        .unwrap();
    common::generate_greedy(slots, slot, logits, common::params(n, true), &mut ()).tokens
}

#[test]
fn builtin_model_generates_deterministically() {
    let model = builtin();
    let info = model.info();
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.tokenizer_family, "hydra-bytes");
    assert_eq!(info.vocab_size, 260);
    assert_eq!(info.quantization, "Q4_0");
    assert_eq!(
        info.fingerprint,
        Model::builtin().unwrap().info().fingerprint
    );
    let mut slots = Slots::new(model.clone(), 2, 1024).unwrap();
    let prompt = model.tokenizer().encode("Once upon a time", true);
    let a = greedy(&mut slots, 0, &prompt, 64);
    let b = greedy(&mut slots, 1, &prompt, 64);
    assert_eq!(a.len(), 64, "the embedded model does not stop early");
    assert_eq!(a, b);
    assert_eq!(slots.n_past(slots.id(0).unwrap()), prompt.len() + 64);
    assert_eq!(slots.kv_cells_used(), 2 * (prompt.len() + 64));
    slots.erase(slots.id(0).unwrap());
    assert!(slots.is_empty(slots.id(0).unwrap()));
    assert_eq!(slots.kv_cells_used(), prompt.len() + 64);
    // Seeded sampling is reproducible.
    let cfg = SamplerConfig {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        seed: 42,
    };
    let mut runs = Vec::new();
    let slot0 = slots.id(0).unwrap();
    for _ in 0..2 {
        slots.erase(slots.id(0).unwrap());
        let l = slots
            .prefill(slots.id(0).unwrap(), &prompt, 64, &mut ())
            .unwrap();
        let mut s = Sampler::new(cfg).unwrap();
        let params = common::params(32, false);
        runs.push(
            generate(&mut slots, slot0, l, &mut s, &params, &mut ())
                .unwrap()
                .tokens,
        );
    }
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn written_gguf_loads_generates_and_matches_reference() {
    let (_dir, path) = test_gguf("tiny.gguf", GgmlDType::Q8_0);
    let model = Arc::new(Model::load_gguf(&path, &LoadOptions::default()).unwrap());
    let info = model.info();
    assert_eq!(info.name, "hydra-test");
    assert_eq!(info.quantization, "Q8_0");
    assert_eq!(info.tokenizer_family, "gpt2");
    let tok = model.tokenizer();
    // The merges apply, specials are parsed.
    let ids = tok.encode("<|im_start|>hello the", false);
    assert_eq!(ids[0], tok.vocab_size() as u32 - 1);
    assert_eq!(tok.decode(&ids).unwrap(), "<|im_start|>hello the");
    assert!(
        ids.len() < "hello the".len() + 1,
        "merges were applied: {ids:?}"
    );

    let prompt = tok.encode("hello the world, hello the model", false);
    let mut slots = Slots::new(model.clone(), 1, 512).unwrap();
    let ours = greedy(&mut slots, 0, &prompt, 40);
    assert_eq!(ours.len(), 40);
    let reference = common::reference_greedy(&path, &prompt, 40);
    assert_eq!(ours, reference, "greedy tokens differ from quantized_llama");
}

#[test]
fn q5_0_is_converted_by_default_and_can_be_kept() {
    let (_dir, path) = test_gguf("q50.gguf", GgmlDType::Q5_0);
    let load = |conversion| {
        let options = LoadOptions {
            conversion,
            ..Default::default()
        };
        Model::load_gguf(&path, &options).unwrap()
    };
    let conv = load(Conversion::default());
    assert_eq!(conv.info().quantization, "Q5_0->Q8_0");
    let kept = load(Conversion::Never);
    assert_eq!(kept.info().quantization, "Q5_0");
    assert_ne!(conv.info().fingerprint, kept.info().fingerprint);
    let q40 = load("auto:q4_0".parse().unwrap());
    assert_eq!(q40.info().quantization, "Q5_0->Q4_0");
    generates_from_hello(Arc::new(conv));
}

#[test]
fn q4_1_runs_as_stored_on_a_cpu_with_avx2() {
    let (_dir, path) = test_gguf("q41.gguf", GgmlDType::Q4_1);
    let model = Arc::new(Model::load_gguf(&path, &LoadOptions::default()).unwrap());
    // The engine's own Q4_1 kernel needs AVX2; elsewhere Q4_1 is converted as before.
    let expected = if hydra_engine_core::kernels::packed::PackedMatrix::is_fast_here() {
        "Q4_1"
    } else {
        "Q4_1->Q8_0"
    };
    assert_eq!(model.info().quantization, expected);
    generates_from_hello(model);
}

/// `model` generates 8 tokens greedily after the prompt "hello".
fn generates_from_hello(model: Arc<Model>) {
    let mut slots = Slots::new(model.clone(), 1, 256).unwrap();
    let prompt = model.tokenizer().encode("hello", false);
    assert_eq!(greedy(&mut slots, 0, &prompt, 8).len(), 8);
}

/// Max |a - b| between the logits of one-shot and chunked prefill, and
/// whether the chunk callbacks saw the right sizes.
fn chunked_vs_one_shot(model: Arc<Model>, prompt: &[u32], ubatch: usize) -> (f32, Logits, Logits) {
    let mut slots = Slots::new(model, 1, 512).unwrap();
    let one = slots
        .prefill(slots.id(0).unwrap(), prompt, prompt.len(), &mut ())
        .unwrap();
    slots.erase(slots.id(0).unwrap());
    let mut chunks = Vec::new();
    let mut obs = FnObserver {
        before: |s: &StepStart| {
            chunks.push(s.n_tokens);
            ControlFlow::Continue(())
        },
        after: |_: &StepDone| ControlFlow::Continue(()),
    };
    let got = slots
        .prefill(slots.id(0).unwrap(), prompt, ubatch, &mut obs)
        .unwrap();
    assert_eq!(chunks.len(), prompt.len().div_ceil(ubatch));
    assert!(chunks.iter().all(|&c| c <= ubatch));
    assert_eq!(slots.n_past(slots.id(0).unwrap()), prompt.len());
    let max_diff = one
        .as_slice()
        .iter()
        .zip(got.as_slice())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    (max_diff, one, got)
}

#[test]
fn chunked_prefill_matches_one_shot() {
    // F32 weights: the only differences are float summation order.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f32.gguf");
    common::write_test_gguf(&path, GgmlDType::F32, 11);
    let model = Arc::new(Model::load_gguf(&path, &LoadOptions::default()).unwrap());
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(3);
    let prompt = model.tokenizer().encode(&text, false);
    assert!(prompt.len() > 64 + 7);
    for ubatch in [1, 7, 64] {
        let (d, one, got) = chunked_vs_one_shot(model.clone(), &prompt, ubatch);
        assert!(d < 1e-4, "F32 ubatch {ubatch}: max |diff| {d}");
        assert_eq!(got.argmax(), one.argmax());
    }
    // The quantized embedded model on the CPU: the packed weight kernels compute every row
    // on its own (the same bits whatever rows share the product), and so does the attention
    // kernel (each new token over its cache prefix, however the prompt was chunked), so the
    // chunking changes nothing at all.
    let model = builtin();
    let prompt = model.tokenizer().encode(&text[..100], true);
    for ubatch in [1, 7, 64] {
        let (d, one, got) = chunked_vs_one_shot(model.clone(), &prompt, ubatch);
        assert_eq!(d, 0.0, "Q4_0 ubatch {ubatch}: max |diff| {d}");
        assert_eq!(got.argmax(), one.argmax());
    }
}

#[test]
fn observer_reports_progress_and_cancel_keeps_done_chunks() {
    let model = builtin();
    let mut slots = Slots::new(model.clone(), 1, 512).unwrap();
    let prompt: Vec<u32> = (0..50).map(|i| 32 + i).collect();
    let events = std::cell::RefCell::new(Vec::new());
    let mut obs = FnObserver {
        before: |s: &StepStart| {
            events
                .borrow_mut()
                .push(("before", s.n_tokens, s.done, s.n_past));
            ControlFlow::Continue(())
        },
        after: |s: &StepDone| {
            events
                .borrow_mut()
                .push(("after", s.n_tokens, s.done, s.n_past));
            if s.done >= 32 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    };
    let err = slots
        .prefill(slots.id(0).unwrap(), &prompt, 16, &mut obs)
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Cancelled {
                done: 32,
                n_past: 32,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        events.into_inner(),
        vec![
            ("before", 16, 0, 0),
            ("after", 16, 16, 16),
            ("before", 16, 16, 16),
            ("after", 16, 32, 32),
        ]
    );
    assert_eq!(
        slots.n_past(slots.id(0).unwrap()),
        32,
        "done chunks are kept"
    );
    // The rest can be fed afterwards and equals an uninterrupted prefill.
    let rest = slots
        .prefill(slots.id(0).unwrap(), &prompt[32..], 16, &mut ())
        .unwrap();
    slots.erase(slots.id(0).unwrap());
    let full = slots
        .prefill(slots.id(0).unwrap(), &prompt, 16, &mut ())
        .unwrap();
    assert_eq!(rest.argmax(), full.argmax());
    // Generation observer sees each token and can stop it.
    let mut seen = Vec::new();
    let mut obs = FnObserver {
        before: |_: &StepStart| ControlFlow::Continue(()),
        after: |s: &StepDone| {
            seen.push(s.token.unwrap());
            if s.done == 5 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        },
    };
    let g = common::generate_greedy(&mut slots, 0, full, common::params(20, false), &mut obs);
    assert_eq!(g.finish, StopReason::Cancelled);
    assert_eq!(g.tokens, seen);
    assert_eq!(g.tokens.len(), 5);
}

#[test]
fn bad_input_is_a_typed_error_not_a_panic() {
    let model = builtin();
    let mut slots = Slots::new(model.clone(), 2, 64).unwrap();
    let e = slots.decode_step(slots.id(0).unwrap(), 65).unwrap_err();
    assert!(matches!(e, EngineError::EmptySlot { slot: 0 }), "{e}");
    let e = slots
        .prefill(slots.id(0).unwrap(), &[], 8, &mut ())
        .unwrap_err();
    assert!(matches!(e, EngineError::EmptyPrompt), "{e}");
    let e = slots
        .prefill(slots.id(0).unwrap(), &[1, 2, 999], 8, &mut ())
        .unwrap_err();
    assert!(
        matches!(e, EngineError::TokenOutOfRange { token: 999, .. }),
        "{e}"
    );
    // A slot out of range cannot be named: the one check is where a slot is named.
    let e = slots.id(5).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::NoSuchSlot {
                slot: 5,
                n_slots: 2
            }
        ),
        "{e}"
    );
    let e = slots
        .prefill(slots.id(0).unwrap(), &[1], 0, &mut ())
        .unwrap_err();
    assert!(matches!(e, EngineError::InvalidOption { .. }), "{e}");
    let long = vec![65u32; 65];
    let e = slots
        .prefill(slots.id(0).unwrap(), &long, 8, &mut ())
        .unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::ContextOverflow {
                n_past: 0,
                n_new: 65,
                n_ctx: 64,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        slots.n_past(slots.id(0).unwrap()),
        0,
        "overflow is refused before any work"
    );
    let l = slots
        .prefill(slots.id(0).unwrap(), &long[..63], 8, &mut ())
        .unwrap();
    let e = slots.decode_step(slots.id(0).unwrap(), 300).unwrap_err();
    assert!(matches!(e, EngineError::TokenOutOfRange { .. }), "{e}");
    slots.decode_step(slots.id(0).unwrap(), 65).unwrap();
    let e = slots.decode_step(slots.id(0).unwrap(), 65).unwrap_err();
    assert!(
        matches!(e, EngineError::ContextOverflow { n_past: 64, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("exceed the context size 64"), "{e}");
    // generate stops cleanly at the context limit.
    slots.erase(slots.id(1).unwrap());
    let l1 = slots
        .prefill(slots.id(1).unwrap(), &long[..60], 8, &mut ())
        .unwrap();
    let g = common::generate_greedy(&mut slots, 1, l1, common::params(10, false), &mut ());
    assert_eq!(g.finish, StopReason::ContextFull);
    assert_eq!(g.tokens.len(), 4);
    drop(l);
    assert!(Slots::new(model, 0, 64).is_err());
}

#[test]
fn state_save_restore_continues_identically() {
    let model = builtin();
    let mut slots = Slots::new(model.clone(), 2, 512).unwrap();
    let (s0, s1) = (slots.id(0).unwrap(), slots.id(1).unwrap());
    let prompt = model.tokenizer().encode("Save me, restore me.", true);
    let logits = slots.prefill(s0, &prompt, 8, &mut ()).unwrap();
    let size = slots.state_size(s0);
    let mut buf = Vec::new();
    let mut marks = Vec::new();
    let written = slots
        .save_state(s0, &mut buf, &mut |d, t| marks.push((d, t)))
        .unwrap();
    assert_eq!(written, size);
    assert_eq!(buf.len() as u64, size);
    assert_eq!(marks.last(), Some(&(size, size)));
    assert!(marks.windows(2).all(|w| w[0].0 <= w[1].0));

    let mut rmarks = Vec::new();
    slots
        .restore_state(s1, &mut buf.as_slice(), size, &mut |d, t| {
            rmarks.push((d, t))
        })
        .unwrap();
    assert_eq!(rmarks.last(), Some(&(size, size)));
    assert_eq!(slots.n_past(s1), prompt.len());
    assert_eq!(slots.state_size(s1), size);

    let a = common::generate_greedy(
        &mut slots,
        0,
        logits.clone(),
        common::params(24, false),
        &mut (),
    );
    let b = common::generate_greedy(&mut slots, 1, logits, common::params(24, false), &mut ());
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.next_logits, b.next_logits);

    // An empty slot round-trips too.
    let mut empty = Vec::new();
    slots.erase(s1);
    slots.save_state(s1, &mut empty, &mut |_, _| {}).unwrap();
    slots
        .restore_state(
            s0,
            &mut empty.as_slice(),
            empty.len() as u64,
            &mut |_, _| {},
        )
        .unwrap();
    assert!(slots.is_empty(s0));
}

#[test]
fn truncated_and_corrupt_states_are_refused() {
    let model = builtin();
    let mut slots = Slots::new(model.clone(), 2, 512).unwrap();
    let prompt = model.tokenizer().encode("state", true);
    slots
        .prefill(slots.id(0).unwrap(), &prompt, 8, &mut ())
        .unwrap();
    let mut buf = Vec::new();
    slots
        .save_state(slots.id(0).unwrap(), &mut buf, &mut |_, _| {})
        .unwrap();
    let n = buf.len() as u64;
    let restore = |slots: &mut Slots, bytes: &[u8], len: u64| {
        let mut r = bytes;
        match slots.restore_state(slots.id(1).unwrap(), &mut r, len, &mut |_, _| {}) {
            Err(EngineError::State(e)) => e,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };

    // Truncated: both when the length says so and when the stream ends early.
    let e = restore(&mut slots, &buf[..buf.len() - 100], n - 100);
    assert!(matches!(e, StateError::Truncated { .. }), "{e}");
    let e = restore(&mut slots, &buf[..buf.len() - 100], n);
    assert!(matches!(e, StateError::Truncated { .. }), "{e}");
    let e = restore(&mut slots, &buf[..10], 10);
    assert!(matches!(e, StateError::Truncated { .. }), "{e}");
    // A flipped bit in the payload.
    let mut flipped = buf.clone();
    flipped[200] ^= 0x10;
    let e = restore(&mut slots, &flipped, n);
    assert!(matches!(e, StateError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("corrupt"));
    // Bad magic, future version.
    let mut bad = buf.clone();
    bad[0] = b'X';
    assert_eq!(restore(&mut slots, &bad, n), StateError::BadMagic);
    let mut v2 = buf.clone();
    v2[8] = 2;
    assert!(matches!(
        restore(&mut slots, &v2, n),
        StateError::Version {
            found: 2,
            expected: 1
        }
    ));
    // Too long for a smaller context.
    let mut small = Slots::new(model.clone(), 1, 2).unwrap();
    let e = match small.restore_state(small.id(0).unwrap(), &mut buf.as_slice(), n, &mut |_, _| {})
    {
        Err(EngineError::State(e)) => e,
        other => panic!("{other:?}"),
    };
    assert!(matches!(e, StateError::TooLong { n_ctx: 2, .. }), "{e}");
    assert_eq!(
        slots.n_past(slots.id(1).unwrap()),
        0,
        "refusals leave the slot alone"
    );
}

/// A state saved by another model (same shapes, other weights) is refused as foreign.
#[test]
fn a_state_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p1 = dir.path().join("a.gguf");
    let p2 = dir.path().join("b.gguf");
    common::write_test_gguf(&p1, GgmlDType::Q8_0, 1);
    common::write_test_gguf(&p2, GgmlDType::Q8_0, 2);
    let m1 = Arc::new(Model::load_gguf(&p1, &LoadOptions::default()).unwrap());
    let m2 = Arc::new(Model::load_gguf(&p2, &LoadOptions::default()).unwrap());
    assert_ne!(m1.info().fingerprint, m2.info().fingerprint);
    let mut s1 = Slots::new(m1, 1, 128).unwrap();
    let mut s2 = Slots::new(m2, 1, 128).unwrap();
    s1.prefill(s1.id(0).unwrap(), &[1, 2, 3], 8, &mut ())
        .unwrap();
    let mut foreign = Vec::new();
    s1.save_state(s1.id(0).unwrap(), &mut foreign, &mut |_, _| {})
        .unwrap();
    let e = s2
        .restore_state(
            s2.id(0).unwrap(),
            &mut foreign.as_slice(),
            foreign.len() as u64,
            &mut |_, _| {},
        )
        .unwrap_err();
    assert!(
        matches!(e, EngineError::State(StateError::ForeignModel { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("different model"), "{e}");
}

#[test]
fn unsupported_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = Model::load_gguf(dir.path().join("missing.gguf"), &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, EngineError::Io { .. }), "{e}");
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf at all").unwrap();
    let e = Model::load_gguf(&junk, &LoadOptions::default()).unwrap_err();
    assert!(matches!(e, EngineError::InvalidModel { .. }), "{e}");
    let on_cuda = LoadOptions {
        device: "cuda:0".parse().unwrap(),
        ..Default::default()
    };
    let e = Model::load_gguf(&junk, &on_cuda).unwrap_err();
    // The file is unreadable before the device matters; either error is clear.
    assert!(!e.to_string().is_empty());
}

/// Hears every step and every layer inside it.
#[derive(Default)]
struct LayerLog {
    /// (slot, layers_done, n_layers) in order.
    layers: Vec<(usize, usize, usize)>,
    steps: usize,
}

impl hydra_engine_core::StepObserver for LayerLog {
    fn after_step(&mut self, _step: &StepDone) -> ControlFlow<()> {
        self.steps += 1;
        ControlFlow::Continue(())
    }
    fn layer_done(
        &mut self,
        slot: usize,
        _device: &candle_core::Device,
        layers_done: usize,
        n_layers: usize,
    ) -> ControlFlow<()> {
        self.layers.push((slot, layers_done, n_layers));
        ControlFlow::Continue(())
    }
}

#[test]
fn every_layer_of_every_step_is_heard_in_order() {
    let model = builtin();
    let n_layer = model.config().n_layer;
    let mut slots = Slots::new(model.clone(), 2, 256).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 65 + i % 26).collect();
    let mut log = LayerLog::default();
    let logits = slots
        .prefill(slots.id(1).unwrap(), &prompt, 16, &mut log)
        .unwrap();
    let generated =
        common::generate_greedy(&mut slots, 1, logits, common::params(5, false), &mut log);
    assert_eq!(generated.tokens.len(), 5);
    // 3 prefill chunks and 5 decode steps, each with every layer once, 1..=n in order.
    assert_eq!(log.steps, 3 + 5);
    let expected: Vec<_> = (0..log.steps)
        .flat_map(|_| (1..=n_layer).map(|k| (1, k, n_layer)))
        .collect();
    assert_eq!(log.layers, expected);
}

#[test]
fn a_batched_decode_step_is_heard_for_every_slot_of_the_batch() {
    let model = builtin();
    let n_layer = model.config().n_layer;
    let mut slots = Slots::new(model.clone(), 3, 256).unwrap();
    let prompt: Vec<u32> = (0..10).map(|i| 65 + i).collect();
    for slot in [0, 2] {
        slots
            .prefill(slots.id(slot).unwrap(), &prompt, 64, &mut ())
            .unwrap();
    }
    let mut log = LayerLog::default();
    let id = |i| SlotId::new(i, 3).unwrap();
    let out = slots
        .decode_batch(&[(id(2), 70), (id(0), 71)], &mut log)
        .unwrap();
    assert_eq!(out.len(), 2);
    // Each layer is heard once per slot of the batch, in the batch's order, layer by layer.
    let expected: Vec<_> = (1..=n_layer)
        .flat_map(|k| [(2, k, n_layer), (0, k, n_layer)])
        .collect();
    assert_eq!(log.layers, expected);
    assert_eq!(slots.n_past(slots.id(0).unwrap()), 11);
    assert_eq!(slots.n_past(slots.id(1).unwrap()), 0);
    // A repeated or empty slot, or a token outside the vocabulary, is refused before any
    // work; a slot out of range cannot be named at all.
    assert!(slots.id(9).is_err());
    for bad in [
        vec![(id(0), 1), (id(0), 2)],
        vec![(id(0), 1), (id(1), 2)],
        vec![(id(0), 100_000)],
    ] {
        assert!(slots.decode_batch(&bad, &mut ()).is_err(), "{bad:?}");
        assert_eq!(
            slots.n_past(slots.id(0).unwrap()),
            11,
            "{bad:?} changed nothing"
        );
    }
}

/// Breaks at layer `at` of the forward of each slot in `stop` (a prefill chunk, or a
/// batched decode step); counts the layers it heard.
struct StopAtLayer {
    at: usize,
    stop: Vec<usize>,
    heard: usize,
}

impl hydra_engine_core::StepObserver for StopAtLayer {
    fn layer_done(
        &mut self,
        slot: usize,
        _device: &candle_core::Device,
        layers_done: usize,
        _n_layers: usize,
    ) -> ControlFlow<()> {
        self.heard += 1;
        if layers_done == self.at && self.stop.contains(&slot) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[test]
fn a_break_at_a_layer_abandons_the_chunk_and_leaves_the_slot_as_before_it() {
    let model = builtin();
    let n_layer = model.config().n_layer;
    assert!(n_layer > 2, "the break falls inside the forward");
    let prompt: Vec<u32> = (0..48).map(|i| 65 + i % 26).collect();
    let mut slots = Slots::new(model.clone(), 2, 256).unwrap();
    let id = slots.id(0).unwrap();
    slots.prefill(id, &prompt[..16], 16, &mut ()).unwrap();
    let mut stop = StopAtLayer {
        at: 2,
        stop: vec![0],
        heard: 0,
    };
    match slots.prefill_chunk(id, &prompt[16..], 16, 48, &mut stop) {
        Err(EngineError::Cancelled { slot, done, n_past }) => {
            assert_eq!(
                (slot, done, n_past),
                (0, 16, 16),
                "the chunk is not counted"
            )
        }
        other => panic!("a break at a layer cancels the chunk: {other:?}"),
    }
    assert_eq!(stop.heard, 2, "no layer runs after the break");
    assert_eq!(
        slots.n_past(id),
        16,
        "the chunk's tokens are not in the cache"
    );
    // The slot goes on as if the chunk had never started: the same logits as a slot that
    // took the same chunks without a break.
    let resumed = slots.prefill(id, &prompt[16..], 32, &mut ()).unwrap();
    let mut fresh = Slots::new(model, 1, 256).unwrap();
    let f = fresh.id(0).unwrap();
    fresh.prefill(f, &prompt[..16], 16, &mut ()).unwrap();
    let whole = fresh.prefill(f, &prompt[16..], 32, &mut ()).unwrap();
    assert_eq!(resumed, whole);
    assert_eq!(slots.n_past(id), 48);
}

#[test]
fn a_batched_decode_step_runs_on_unless_every_slot_breaks() {
    let model = builtin();
    let n_layer = model.config().n_layer;
    let mut slots = Slots::new(model, 2, 256).unwrap();
    let prompt: Vec<u32> = (0..10).map(|i| 65 + i).collect();
    for slot in [0, 1] {
        slots
            .prefill(slots.id(slot).unwrap(), &prompt, 64, &mut ())
            .unwrap();
    }
    let id = |i| SlotId::new(i, 2).unwrap();
    let mut one = StopAtLayer {
        at: 1,
        stop: vec![1],
        heard: 0,
    };
    let out = slots
        .decode_batch(&[(id(0), 70), (id(1), 71)], &mut one)
        .unwrap();
    assert_eq!(
        (out.len(), one.heard),
        (2, 2 * n_layer),
        "slot 0 still wants it"
    );
    let mut both = StopAtLayer {
        at: 1,
        stop: vec![0, 1],
        heard: 0,
    };
    let r = slots.decode_batch(&[(id(0), 72), (id(1), 73)], &mut both);
    assert!(
        matches!(r, Err(EngineError::Interrupted { layers_done: 1, .. })),
        "{r:?}"
    );
    assert_eq!((slots.n_past(id(0)), slots.n_past(id(1))), (11, 11));
}

/// Greedy generation in several slots at once, one batched forward per step, against the
/// same prompts generated one slot at a time.
fn batched_matches_serial(model: Arc<Model>, prompts: &[Vec<u32>], n: usize) {
    let mut serial = Slots::new(model.clone(), prompts.len(), 512).unwrap();
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .enumerate()
        .map(|(slot, p)| greedy(&mut serial, slot, p, n))
        .collect();
    let mut slots = Slots::new(model.clone(), prompts.len(), 512).unwrap();
    let mut next = prefill_each(&mut slots, prompts, 64);
    let mut got = vec![Vec::new(); prompts.len()];
    for _ in 0..n {
        let logits = batch_step(&mut slots, &next);
        for (slot, l) in logits.iter().enumerate() {
            got[slot].push(next[slot]);
            next[slot] = l.argmax();
        }
    }
    for (slot, (g, w)) in got.iter().zip(&want).enumerate() {
        let stop = w.len();
        assert_eq!(&g[..stop], &w[..], "slot {slot}");
    }
}

/// Four prompts of different lengths for the embedded model.
fn four_prompts(model: &Model) -> Vec<Vec<u32>> {
    ["Once upon a time", "The quick brown fox", "Hi", "1 2 3 4"]
        .iter()
        .map(|p| model.tokenizer().encode(p, true))
        .collect()
}

#[test]
fn batched_decode_gives_the_serial_greedy_tokens() {
    let model = builtin();
    let prompts = four_prompts(&model);
    batched_matches_serial(model.clone(), &prompts, 24);
    let (_dir, path) = test_gguf("tiny.gguf", GgmlDType::Q8_0);
    let gguf = Arc::new(Model::load_gguf(&path, &LoadOptions::default()).unwrap());
    let tok = gguf.tokenizer();
    let prompts: Vec<Vec<u32>> = ["hello the world", "the model", "hello"]
        .iter()
        .map(|p| tok.encode(p, false))
        .collect();
    batched_matches_serial(gguf, &prompts, 24);
}

/// The two ways a decode step's kernels run (spread over the pool, or on the compute thread
/// alone: `threads::pool_use`) give the same logits, bit for bit, on a 2-thread pool with
/// 4 slots (enough work per step that the pool's path does split it).
#[test]
fn kernels_on_the_pool_or_alone_give_the_same_logits() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let model = builtin();
    let prompts = four_prompts(&model);
    let run = |policy: PoolUse| -> Vec<Logits> {
        pool.install(|| {
            let mut slots = Slots::new(model.clone(), prompts.len(), 512).unwrap();
            slots.set_pool_use(policy);
            assert_eq!(slots.pool_use(), policy);
            let mut next = prefill_each(&mut slots, &prompts, 4);
            let mut all = Vec::new();
            for _ in 0..16 {
                let logits = batch_step(&mut slots, &next);
                next = logits.iter().map(Logits::argmax).collect();
                all.extend(logits);
            }
            all
        })
    };
    let (on_pool, alone) = (run(PoolUse::Always), run(PoolUse::Never));
    assert_eq!(on_pool.len(), 16 * prompts.len());
    assert!(on_pool == alone, "the logits differ between the two modes");
}

/// Prefills prompt `i` into slot `i` in chunks of `ubatch`; each slot's greedy next token.
fn prefill_each(slots: &mut Slots, prompts: &[Vec<u32>], ubatch: usize) -> Vec<u32> {
    let ids: Vec<SlotId> = slots.ids().collect();
    ids.iter()
        .zip(prompts)
        .map(|(&slot, p)| slots.prefill(slot, p, ubatch, &mut ()).unwrap().argmax())
        .collect()
}

/// One batched decode step: token `next[i]` into slot `i`, all in one forward.
fn batch_step(slots: &mut Slots, next: &[u32]) -> Vec<Logits> {
    let steps: Vec<(SlotId, u32)> = slots.ids().zip(next.iter().copied()).collect();
    slots.decode_batch(&steps, &mut ()).unwrap()
}
