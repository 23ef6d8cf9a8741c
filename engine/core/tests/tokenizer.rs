//! Tokenizer loading paths: GGUF metadata, tokenizer.json, unsupported families,
//! and the BOS/EOS/special-token flags llama.cpp reads from the metadata.

use crate::common;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use hydra_engine_core::{EngineError, SpecialIds, Tokenizer};

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
    // Every field a tokenizer.json written by `tokenizers` carries.
    let added = |id: usize, content: &str| {
        serde_json::json!({
            "id": id, "content": content, "special": true, "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false
        })
    };
    let json = serde_json::json!({
        "version": "1.0",
        "added_tokens": [added(n - 2, "<|endoftext|>"), added(n - 1, "<|im_start|>")],
        "pre_tokenizer": {
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
            "use_regex": true
        },
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
    md.insert("tokenizer.ggml.model".into(), Value::String("bert".into()));
    let e = Tokenizer::from_gguf_metadata(&md).unwrap_err();
    assert!(matches!(e, EngineError::UnsupportedTokenizer { .. }), "{e}");
    assert!(
        e.to_string().contains("tokenizer.ggml.model = \"bert\""),
        "{e}"
    );

    let (mut md, _) = tiny();
    md.insert("tokenizer.ggml.pre".into(), Value::String("tekken".into()));
    let e = Tokenizer::from_gguf_metadata(&md).unwrap_err();
    assert!(
        e.to_string().contains("tokenizer.ggml.pre = \"tekken\""),
        "{e}"
    );

    let e = Tokenizer::from_gguf_metadata(&HashMap::new()).unwrap_err();
    assert!(matches!(e, EngineError::InvalidTokenizer(_)), "{e}");

    let e = Tokenizer::from_tokenizer_json(
        r#"{"model": {"type": "Unigram", "vocab": []}}"#,
        SpecialIds::default(),
    )
    .unwrap_err();
    assert!(matches!(e, EngineError::UnsupportedTokenizer { .. }), "{e}");
}

#[test]
fn special_flags_come_from_the_metadata() {
    let (mut md, tokens) = tiny();
    let n = tokens.len() as u32;
    let (eos, im_start) = (n - 2, n - 1);
    let t = Tokenizer::from_gguf_metadata(&md).unwrap();
    assert_eq!(t.pre_tokenizer(), Some("gpt2"));
    assert!(!t.add_bos_by_default());
    // Control tokens are recognised only when asked to.
    let with = t.tokenize("<|im_start|>hello", false, true).unwrap();
    assert_eq!(with[0], im_start);
    let without = t.tokenize("<|im_start|>hello", false, false).unwrap();
    assert!(!without.contains(&im_start));
    assert_eq!(t.decode(&without).unwrap(), "<|im_start|>hello");

    md.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(im_start));
    md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(true));
    md.insert("tokenizer.ggml.add_eos_token".into(), Value::Bool(true));
    let t = Tokenizer::from_gguf_metadata(&md).unwrap();
    assert!(t.add_bos_by_default());
    let ids = t.tokenize("hello", true, false).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (im_start, eos));
    assert_eq!(
        t.tokenize("hello", false, false).unwrap().len(),
        ids.len() - 2
    );

    // A file without tokenizer.ggml.pre gets llama.cpp's "default" pre-tokenizer.
    md.remove("tokenizer.ggml.pre");
    let t = Tokenizer::from_gguf_metadata(&md).unwrap();
    assert_eq!(t.pre_tokenizer(), Some("default"));
}
