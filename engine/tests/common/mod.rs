//! Shared test helpers: the real model (under the suite's missing-requirement rule) and
//! writing GGUF files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use hydra_engine::model::builtin::BuiltinSpec;

/// The real SmolLM2-135M-Instruct GGUF for `test`: without it the test fails, unless
/// `HYDRA_ALLOW_SKIP=1` (the one rule, `hydra_fault::require`).
pub fn real_model(test: &str) -> Option<PathBuf> {
    hydra_fault::require::smollm2_gguf(test)
}

/// GPT-2 byte-level vocabulary of 256 byte tokens, a few merges, and two
/// specials (`<|endoftext|>` EOS, `<|im_start|>`), as GGUF metadata.
pub fn tiny_gpt2_metadata() -> (Vec<(String, Value)>, usize) {
    // GPT-2 bytes_to_unicode, in byte order.
    let mut byte_chars = Vec::new();
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        byte_chars.push(char::from_u32(c).unwrap().to_string());
    }
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
        hydra_engine::Logits::from(v).argmax()
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
