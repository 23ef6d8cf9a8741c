//! Shared test helpers: the real model (under the suite's missing-requirement rule) and
//! writing GGUF files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use hydra_engine_core::model::builtin::BuiltinSpec;

/// The real SmolLM2-135M-Instruct GGUF for `test`: without it the test fails, unless
/// `HYDRA_ALLOW_SKIP=1` (the one rule, `hydra_fault::require`).
pub fn real_model(test: &str) -> Option<PathBuf> {
    hydra_fault::require::smollm2_gguf(test)
}

/// Greedy generation of up to `n_predict` tokens in `slot` from `first`, with
/// `observer` seeing every step.
pub fn generate_greedy<O: hydra_engine_core::StepObserver>(
    slots: &mut hydra_engine_core::Slots,
    slot: usize,
    first: hydra_engine_core::Logits,
    params: hydra_engine_core::GenerateParams,
    observer: &mut O,
) -> hydra_engine_core::Generation {
    let mut sampler = hydra_engine_core::Sampler::greedy();
    let slot = slots.id(slot).unwrap();
    hydra_engine_core::generate(slots, slot, first, &mut sampler, &params, observer).unwrap()
}

/// Generation parameters: `n_predict` tokens, stopping at EOS or not.
pub fn params(n_predict: usize, stop_at_eos: bool) -> hydra_engine_core::GenerateParams {
    hydra_engine_core::GenerateParams {
        n_predict,
        stop_at_eos,
    }
}

/// GPT-2 byte-level vocabulary of 256 byte tokens, a few merges, and two
/// specials (`<|endoftext|>` EOS, `<|im_start|>`), as GGUF metadata.
pub fn tiny_gpt2_metadata() -> (Vec<(String, Value)>, usize) {
    let byte_chars: Vec<String> = hydra_engine_core::tokenizer::bytes_to_unicode()
        .iter()
        .map(char::to_string)
        .collect();
    let merges = [
        ("Ġ", "t"),
        ("h", "e"),
        ("Ġt", "he"),
        ("l", "l"),
        ("ll", "o"),
    ];
    let mut tokens = byte_chars.clone();
    for (a, b) in merges {
        tokens.push(format!("{a}{b}"));
    }
    let eos = tokens.len() as u32;
    tokens.push("<|endoftext|>".into());
    tokens.push("<|im_start|>".into());
    let mut types = vec![1i32; tokens.len()];
    let l = types.len();
    types[l - 2] = 3;
    types[l - 1] = 3;
    let vocab = tokens.len();
    let md = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(
                merges
                    .iter()
                    .map(|(a, b)| Value::String(format!("{a} {b}")))
                    .collect(),
            ),
        ),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
    ];
    (md, vocab)
}

/// Write a seeded llama model with the tiny GPT-2 vocabulary to `path`
/// with candle's GGUF writer. Returns the spec used.
pub fn write_test_gguf(path: &Path, dtype: GgmlDType, seed: u64) -> BuiltinSpec {
    let (tok_md, vocab) = tiny_gpt2_metadata();
    let mut spec = BuiltinSpec::default();
    spec.config.vocab_size = vocab;
    spec.seed = seed;
    let tensors = spec.tensors(dtype).expect("tensors");
    let mut md = spec.gguf_metadata("hydra-test");
    md.extend(tok_md);
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).expect("create gguf");
    gguf_file::write(&mut f, &md_refs, &t_refs).expect("write gguf");
    spec
}

/// Greedy tokens from candle-transformers' reference `quantized_llama` on `path`.
pub fn reference_greedy(path: &Path, prompt: &[u32], n: usize) -> Vec<u32> {
    use candle_core::{Device, Tensor};
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dev = Device::Cpu;
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let mut m = ModelWeights::from_gguf(ct, &mut f, &dev).unwrap();
    let argmax = |l: &Tensor| -> u32 {
        let v: Vec<f32> = l.squeeze(0).unwrap().to_vec1().unwrap();
        hydra_engine_core::Logits::from(v).argmax()
    };
    let input = Tensor::new(prompt, &dev).unwrap().unsqueeze(0).unwrap();
    let mut next = argmax(&m.forward(&input, 0).unwrap());
    let mut out = vec![next];
    for i in 1..n {
        let input = Tensor::new(&[next], &dev).unwrap().unsqueeze(0).unwrap();
        next = argmax(&m.forward(&input, prompt.len() + i - 1).unwrap());
        out.push(next);
    }
    out
}

/// The logits of candle-transformers' reference `quantized_llama` on `path` for a greedy
/// continuation `tokens` of `prompt`, fed to it one at a time (teacher forcing): after the
/// prompt, then after each token of `tokens` but the last.
pub fn reference_logits(path: &Path, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    use candle_core::{Device, Tensor};
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dev = Device::Cpu;
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let mut m = ModelWeights::from_gguf(ct, &mut f, &dev).unwrap();
    let logits = |l: Tensor| -> Vec<f32> { l.squeeze(0).unwrap().to_vec1().unwrap() };
    let input = Tensor::new(prompt, &dev).unwrap().unsqueeze(0).unwrap();
    let mut out = vec![logits(m.forward(&input, 0).unwrap())];
    for (i, &t) in tokens
        .iter()
        .enumerate()
        .take(tokens.len().saturating_sub(1))
    {
        let input = Tensor::new(&[t], &dev).unwrap().unsqueeze(0).unwrap();
        out.push(logits(m.forward(&input, prompt.len() + i).unwrap()));
    }
    out
}

/// Checks greedy `tokens` against the reference's logits for them ([`reference_logits`]):
/// at every step the token is the reference's best, or scores within `tol` (relative to
/// the step's largest logit) of it, a near-tie that rounding differences may break either
/// way. Returns the largest such gap seen (0 when every token is the reference's best).
pub fn assert_greedy_matches(tokens: &[u32], reference: &[Vec<f32>], tol: f32, what: &str) -> f32 {
    assert_eq!(
        tokens.len(),
        reference.len(),
        "{what}: one logit row per token"
    );
    let mut worst = 0f32;
    for (step, (&t, l)) in tokens.iter().zip(reference).enumerate() {
        let best = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let scale = l.iter().fold(1f32, |m, v| m.max(v.abs()));
        let gap = (best - l[t as usize]) / scale;
        assert!(
            gap <= tol,
            "{what}: step {step} chose {t}, which the reference scores {gap:e} below its best"
        );
        worst = worst.max(gap);
    }
    worst
}
