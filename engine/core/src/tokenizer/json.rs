//! A Hugging Face `tokenizer.json` (BPE models), read by the `tokenizers` crate.

use std::str::FromStr;

use serde_json::Value;
use tokenizers::Tokenizer as HfTokenizer;

use super::bytelevel::byte_level_decode;
use super::gguf::{byte_token_value, SPM_SPACE};
use crate::error::{EngineError, Result};

/// What [`parse`] gives: the tokenizer, the bytes of each token and which tokens are special.
pub(crate) struct JsonTokenizer {
    pub(crate) hf: HfTokenizer,
    pub(crate) pieces: Vec<Vec<u8>>,
    pub(crate) special: Vec<bool>,
}

/// Whether a `type` named `name` occurs anywhere under `v`.
fn has_type(v: &Value, name: &str) -> bool {
    match v {
        Value::Object(m) => {
            m.get("type").and_then(Value::as_str) == Some(name)
                || m.values().any(|x| has_type(x, name))
        }
        Value::Array(a) => a.iter().any(|x| has_type(x, name)),
        _ => false,
    }
}

pub(crate) fn parse(text: &str) -> Result<JsonTokenizer> {
    let bad = |m: String| EngineError::InvalidTokenizer(format!("tokenizer.json: {m}"));
    let j: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let kind = j
        .get("model")
        .and_then(|m| m.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("BPE");
    if kind != "BPE" {
        return Err(EngineError::UnsupportedTokenizer {
            key: "tokenizer.json model.type".into(),
            value: kind.into(),
            supported: "BPE".into(),
        });
    }
    let hf = HfTokenizer::from_str(text).map_err(|e| bad(e.to_string()))?;
    let byte_level = ["pre_tokenizer", "decoder"]
        .iter()
        .any(|k| j.get(*k).is_some_and(|v| has_type(v, "ByteLevel")));
    let n = hf.get_vocab_size(true);
    let mut special = vec![false; n];
    if let Some(list) = j.get("added_tokens").and_then(Value::as_array) {
        for a in list {
            if let Some(id) = a.get("id").and_then(Value::as_u64) {
                if let Some(s) = special.get_mut(id as usize) {
                    *s = true;
                }
            }
        }
    }
    let pieces = (0..n)
        .map(|id| {
            let Some(t) = hf.id_to_token(id as u32) else {
                return Vec::new();
            };
            if special[id] {
                t.into_bytes()
            } else if byte_level {
                byte_level_decode(&t)
            } else if let Some(b) = byte_token_value(&t) {
                vec![b]
            } else {
                t.replace(SPM_SPACE, " ").into_bytes()
            }
        })
        .collect();
    Ok(JsonTokenizer {
        hf,
        pieces,
        special,
    })
}
