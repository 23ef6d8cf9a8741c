//! Tokenizer loading paths: GGUF metadata, tokenizer.json, unsupported families.

mod common;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use hydra_engine::{EngineError, SpecialIds, Tokenizer};

fn tiny() -> (HashMap<String, Value>, Vec<String>) {
    let (md, _) = common::tiny_gpt2_metadata();
    let md: HashMap<String, Value> = md.into_iter().collect();
    let tokens = md["tokenizer.ggml.tokens"]
        .to_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_string().unwrap().clone())
        .collect();
    (md, tokens)
}

#[test]
fn gguf_and_tokenizer_json_agree() {
    let (md, tokens) = tiny();
    let from_md = Tokenizer::from_gguf_metadata(&md).unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.starts_with("<|"))
        .map(|(i, t)| (t.clone(), serde_json::Value::from(i)))
        .collect();
    let n = tokens.len();
    let json = serde_json::json!({
        "added_tokens": [
            {"id": n - 2, "content": "<|endoftext|>", "special": true},
            {"id": n - 1, "content": "<|im_start|>", "special": true}
        ],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
        "model": {
            "type": "BPE",
            "vocab": vocab,
            "merges": ["Ġ t", "h e", "Ġt he", "l l", "ll o"]
        }
    });
    let from_json = Tokenizer::from_tokenizer_json(
        &json.to_string(),
        SpecialIds {
            eos: vec![n as u32 - 2],
            ..Default::default()
        },
    )
    .unwrap();
    let text = "<|im_start|>hello the world\n\n  x 12 'll<|endoftext|>";
    let a = from_md.encode(text, false);
    assert_eq!(a, from_json.encode(text, false));
    assert_eq!(from_md.decode(&a).unwrap(), text);
    assert_eq!(from_json.eos_tokens(), &[n as u32 - 2]);
    // "hello" -> "he" "llo": two tokens.
    assert_eq!(from_md.encode("hello", false).len(), 2);
}

#[test]
fn unsupported_tokenizers_are_clear_errors() {
    let (mut md, _) = tiny();
    md.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
    let e = Tokenizer::from_gguf_metadata(&md).unwrap_err();
    assert!(matches!(e, EngineError::UnsupportedTokenizer { .. }), "{e}");
    assert!(e.to_string().contains("\"llama\""), "{e}");

    let (mut md, _) = tiny();
    md.insert(
        "tokenizer.ggml.pre".into(),
        Value::String("llama-bpe".into()),
    );
    let e = Tokenizer::from_gguf_metadata(&md).unwrap_err();
    assert!(e.to_string().contains("llama-bpe"), "{e}");

    let e = Tokenizer::from_gguf_metadata(&HashMap::new()).unwrap_err();
    assert!(matches!(e, EngineError::InvalidTokenizer(_)), "{e}");

    let e = Tokenizer::from_tokenizer_json(
        r#"{"model": {"type": "Unigram", "vocab": []}}"#,
        SpecialIds::default(),
    )
    .unwrap_err();
    assert!(matches!(e, EngineError::UnsupportedTokenizer { .. }), "{e}");
}
