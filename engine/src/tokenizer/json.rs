//! Reading the parts of a Hugging Face `tokenizer.json` that byte-level BPE needs.

use serde_json::Value;

use super::pretok::PreTokenizer;
use crate::error::{EngineError, Result};

pub(crate) struct JsonTokenizer {
    pub(crate) tokens: Vec<String>,
    pub(crate) merges: Vec<(String, String)>,
    pub(crate) specials: Vec<(String, u32)>,
    pub(crate) pre: PreTokenizer,
    pub(crate) unk: Option<u32>,
}

fn bad(m: impl Into<String>) -> EngineError {
    EngineError::InvalidTokenizer(format!("tokenizer.json: {}", m.into()))
}

/// Collect the `type` names of a pre-tokenizer tree, and whether a `Digits`
/// splits individual digits.
fn walk_pre(v: &Value, types: &mut Vec<String>, digits: &mut bool) {
    if let Some(t) = v.get("type").and_then(Value::as_str) {
        types.push(t.to_string());
        if t == "Digits" && v.get("individual_digits").and_then(Value::as_bool) == Some(true) {
            *digits = true;
        }
    }
    if let Some(list) = v.get("pretokenizers").and_then(Value::as_array) {
        for p in list {
            walk_pre(p, types, digits);
        }
    }
}

pub(crate) fn parse(text: &str) -> Result<JsonTokenizer> {
    let j: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let model = j.get("model").ok_or_else(|| bad("no model"))?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    let mut types = Vec::new();
    let mut digits = false;
    if let Some(p) = j.get("pre_tokenizer") {
        walk_pre(p, &mut types, &mut digits);
    }
    let byte_level = types.iter().any(|t| t == "ByteLevel");
    let custom = types
        .iter()
        .any(|t| t != "ByteLevel" && t != "Digits" && t != "Sequence");
    if kind != "BPE" || !byte_level || custom {
        return Err(EngineError::UnsupportedTokenizer {
            family: format!("tokenizer.json model {kind} with pre-tokenizers {types:?}"),
        });
    }
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("model.vocab is not an object"))?;
    let mut added: Vec<(String, u32, bool)> = Vec::new();
    if let Some(list) = j.get("added_tokens").and_then(Value::as_array) {
        for a in list {
            let id = a.get("id").and_then(Value::as_u64);
            let content = a.get("content").and_then(Value::as_str);
            if let (Some(id), Some(content)) = (id, content) {
                added.push((content.to_string(), id as u32, true));
            }
        }
    }
    let n = vocab
        .values()
        .filter_map(Value::as_u64)
        .chain(added.iter().map(|a| u64::from(a.1)))
        .max()
        .map_or(0, |m| m as usize + 1);
    let mut tokens = vec![String::new(); n];
    for (s, id) in vocab {
        let id = id.as_u64().ok_or_else(|| bad("vocab id is not a number"))? as usize;
        tokens[id] = s.clone();
    }
    for (s, id, _) in &added {
        tokens[*id as usize] = s.clone();
    }
    let merges = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("model.merges is not an array"))?
        .iter()
        .filter_map(|m| match m {
            Value::String(s) => s
                .split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string())),
            Value::Array(p) if p.len() == 2 => {
                Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string()))
            }
            _ => None,
        })
        .collect();
    let unk = model
        .get("unk_token")
        .and_then(Value::as_str)
        .and_then(|u| tokens.iter().position(|t| t == u))
        .map(|i| i as u32);
    Ok(JsonTokenizer {
        unk,
        tokens,
        merges,
        specials: added.into_iter().map(|(s, id, _)| (s, id)).collect(),
        pre: if digits {
            PreTokenizer::Gpt2DigitsSplit
        } else {
            PreTokenizer::Gpt2
        },
    })
}
