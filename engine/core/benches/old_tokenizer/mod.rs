//! The engine's previous hand-written GPT-2 tokenizer (commit 1cba9c9), kept
//! only inside the benchmark to compare speeds side by side.
#![allow(dead_code)]

mod bpe;
mod pretok;

use std::collections::HashMap;

pub use bpe::Bpe;
pub use pretok::PreTokenizer;

/// Build the old tokenizer from GGUF-style vocabulary strings and `"a b"` merges.
pub fn build(tokens: &[String], merges: &[String], pre: Option<&str>) -> Result<Bpe, String> {
    let vocab: HashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let merges: Vec<(String, String)> = merges
        .iter()
        .filter_map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    let pre = PreTokenizer::from_gguf_name(pre).ok_or("unsupported pre-tokenizer")?;
    Bpe::new(&vocab, &merges, pre, None)
}
