//! Tokenizer speed: the `tokenizers`-based tokenizer against the previous hand-written
//! byte-level BPE (kept in `old_tokenizer/`), side by side in one run, on SmolLM2's
//! vocabulary (`smollm` pre-tokenizer, the one the old code implemented) and a large
//! text: llama.cpp's `src/llama-vocab.cpp`, `README.md` and every vocab test input
//! (from `scripts/llama-cpp.sh src`), repeated to at least 1 MB.
//!
//!     cargo bench -p hydra-engine-core --bench tokenizer
//!
//! Prints tokens/s of both (median of interleaved rounds), their ratio, and whether
//! both give the same ids.

#[path = "../tests/common/mod.rs"]
mod common;
mod old_tokenizer;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use candle_core::quantized::gguf_file::Content;
use hydra_engine_core::Tokenizer;

const ROUNDS: usize = 7;

fn corpus() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/llama-cpp.sh"))
        .arg("src")
        .output()
        .expect("run scripts/llama-cpp.sh src");
    assert!(out.status.success(), "scripts/llama-cpp.sh src failed");
    let src = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let mut text = String::new();
    for f in ["src/llama-vocab.cpp", "README.md"] {
        text.push_str(&std::fs::read_to_string(src.join(f)).expect("read llama.cpp source"));
    }
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(src.join("models"))
        .expect("models dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "inp"))
        .collect();
    inputs.sort();
    for p in inputs {
        text.push_str(&std::fs::read_to_string(p).expect("read .inp"));
    }
    let one = text.clone();
    while text.len() < 1 << 20 {
        text.push_str(&one);
    }
    text
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let Some(path) = common::real_model("tokenizer bench") else {
        return;
    };
    let mut f = std::fs::File::open(&path).unwrap();
    let ct = Content::read(&mut f).unwrap();
    let strings = |k: &str| -> Vec<String> {
        ct.metadata[k]
            .to_vec()
            .unwrap()
            .iter()
            .map(|v| v.to_string().unwrap().clone())
            .collect()
    };
    let pre = ct.metadata["tokenizer.ggml.pre"]
        .to_string()
        .unwrap()
        .clone();
    let new = Tokenizer::from_gguf_metadata(&ct.metadata).unwrap();
    let old = old_tokenizer::build(
        &strings("tokenizer.ggml.tokens"),
        &strings("tokenizer.ggml.merges"),
        Some(&pre),
    )
    .unwrap();
    let text = corpus();

    let (mut t_new, mut t_old) = (Vec::new(), Vec::new());
    let (mut ids_new, mut ids_old) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        ids_new = new.tokenize(&text, false, false).unwrap();
        t_new.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        ids_old.clear();
        old.encode(&text, &mut ids_old);
        t_old.push(t.elapsed().as_secs_f64());
    }
    let (m_new, m_old) = (median(t_new), median(t_old));
    let same = ids_new == ids_old;
    let first_diff = ids_new.iter().zip(&ids_old).position(|(a, b)| a != b);
    println!(
        "tokenizer bench: SmolLM2 vocabulary (pre {pre}), {} bytes of text, {ROUNDS} interleaved rounds",
        text.len()
    );
    println!(
        "  new (tokenizers crate): {:>9} tokens, median {:.1} ms, {:.0} tokens/s",
        ids_new.len(),
        m_new * 1e3,
        ids_new.len() as f64 / m_new
    );
    println!(
        "  old (hand-written):     {:>9} tokens, median {:.1} ms, {:.0} tokens/s",
        ids_old.len(),
        m_old * 1e3,
        ids_old.len() as f64 / m_old
    );
    println!(
        "  speed ratio new/old (tokens/s): {:.2}; same ids: {same}{}",
        (ids_new.len() as f64 / m_new) / (ids_old.len() as f64 / m_old),
        match (same, first_diff) {
            (true, _) => String::new(),
            (false, Some(i)) => format!(" (first difference at token {i})"),
            (false, None) => " (lengths differ)".into(),
        }
    );
}
