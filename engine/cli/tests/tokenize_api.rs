//! `POST /tokenize` and `POST /detokenize` (llama.cpp's shapes), answered outside the
//! compute queue; and the one line `serve --model` prints about the file, or about
//! the key and value it does not support.

use crate::common;
use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use hydra_layout::{Phase, SegmentReader};
use support::*;

const EOS: u32 = 257; // the byte tokenizer's <|eos|>

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hydra-tokenize-test")
        .tempdir()
        .expect("tempdir")
}

#[test]
fn tokenize_and_detokenize_roundtrip_with_llama_cpp_shapes() {
    let e = Engine::in_scratch("tok", &["--slots", "1"]);
    let (status, body) = post(&e, "/tokenize", r#"{"content":"hé<|eos|>x"}"#);
    assert_eq!(status, 200, "{body}");
    let ids: Vec<u32> = serde_json::from_value(body["tokens"].clone()).unwrap();
    assert_eq!(ids, vec![b'h' as u32, 0xc3, 0xa9, EOS, b'x' as u32]);

    // parse_special=false: the control token's text is plain text.
    let (status, body) = post(
        &e,
        "/tokenize",
        r#"{"content":"<|eos|>","parse_special":false}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tokens"].as_array().unwrap().len(), "<|eos|>".len());

    // with_pieces: each token with its text, or its bytes where they are part of a
    // character (llama.cpp's shape).
    let (status, body) = post(&e, "/tokenize", r#"{"content":"hé","with_pieces":true}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["tokens"],
        serde_json::json!([
            {"id": 104, "piece": "h"},
            {"id": 0xc3, "piece": [0xc3]},
            {"id": 0xa9, "piece": [0xa9]},
        ])
    );

    let (status, body) = post(&e, "/detokenize", &format!(r#"{{"tokens":{ids:?}}}"#));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"], "hé<|eos|>x");
    let (status, body) = post(&e, "/detokenize", r#"{"tokens":[]}"#);
    assert_eq!((status, body["content"].as_str()), (200, Some("")));
}

#[test]
fn bad_tokenize_requests_get_4xx_with_the_error_json() {
    let e = Engine::in_scratch("tokbad", &["--slots", "1"]);
    for (path, body) in [
        ("/tokenize", "not json"),
        ("/tokenize", r#"{"text":"wrong field"}"#),
        ("/tokenize", r#"{"content":42}"#),
        ("/detokenize", r#"{"tokens":[1,-2]}"#),
        ("/detokenize", r#"{"tokens":"abc"}"#),
        ("/detokenize", r#"{"tokens":[100000]}"#),
    ] {
        let (status, json) = post(&e, path, body);
        assert!(
            (400..500).contains(&status),
            "{path} {body}: {status} {json}"
        );
        assert!(
            json["error"]["message"].is_string(),
            "{path} {body}: {json}"
        );
        assert!(json["error"]["code"].is_string(), "{path} {body}: {json}");
    }
    // The engine still answers.
    let (status, _) = post(&e, "/tokenize", r#"{"content":"ok"}"#);
    assert_eq!(status, 200);
}

#[test]
fn tokenize_does_not_wait_for_the_compute_queue() {
    const N_PREDICT: u64 = 3500;
    let mut e = Engine::in_scratch("tokbusy", &["--slots", "1", "--ctx", "4096"]);
    let (status, body) = post(&e, "/slots/0/prefill", r#"{"prompt":"Once upon a time"}"#);
    assert_eq!(status, 200, "{body}");
    let url = e.url("/slots/0/decode");
    // The decode holds the one compute thread; its own answer does not matter here
    // (the engine is stopped under it), so transport errors are not failures.
    let decode = std::thread::spawn(move || {
        hydra_fault::http::try_call(
            agent().post(&url),
            Some(&format!(r#"{{"n_predict":{N_PREDICT},"ignore_eos":true}}"#)),
        )
    });
    let reader = SegmentReader::open(e.segment()).expect("open segment");
    let decoding = || {
        let s = reader.slot(0).ok()?;
        (s.state.phase == Phase::Decode && s.state.work_done > 0).then_some(s.state.work_done)
    };
    let before = wait_for(Duration::from_secs(60), "the decode to start", decoding);
    let (status, body) = post(&e, "/tokenize", r#"{"content":"while busy"}"#);
    assert_eq!(status, 200, "{body}");
    let (status, _) = post(&e, "/detokenize", r#"{"tokens":[104,105]}"#);
    assert_eq!(status, 200);
    // Both were answered while the decode was still running: not from the queue.
    let after = decoding().expect("the decode ended before /tokenize was answered");
    assert!(
        before <= after && after < N_PREDICT,
        "decode progress {before} -> {after} of {N_PREDICT}"
    );
    e.terminate();
    let _ = decode.join().expect("decode thread");
}

/// Write a GGUF with only metadata (no tensors).
fn write_metadata_only(path: &Path, md: &[(&str, Value)]) {
    let refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (*k, v)).collect();
    let none: Vec<(&str, &QTensor)> = Vec::new();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &refs, &none).unwrap();
}

/// The first line `serve --model` writes to stderr, and its exit code: for a file it
/// serves, `None` (the line comes before the model loads; the server is then stopped);
/// for a file it refuses, the code it exits with by itself.
fn serve_stderr_first_line(model: &Path, refused: bool) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--threads", "1"]);
    cmd.args(["--no-publish", "--model"]).arg(model);
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hydra-engine");
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !refused {
        let _ = child.kill();
        let _ = child.wait();
        return (None, line);
    }
    // Bounded: a refused file makes the engine exit at once; wait_for fails the test
    // after the limit.
    let status = wait_for(
        Duration::from_secs(60),
        "hydra-engine to exit on a file it refuses",
        || child.try_wait().unwrap(),
    );
    (status.code(), line)
}

#[test]
fn serve_names_the_model_kind_or_the_unsupported_key() {
    let tmp = scratch();
    let good = tmp.path().join("good.gguf");
    common::write_test_gguf(&good, GgmlDType::Q4_0, 7);
    let (_, line) = serve_stderr_first_line(&good, false);
    assert!(
        line.contains("architecture llama, tokenizer gpt2, pre-tokenizer gpt2"),
        "{line}"
    );

    let (tok_md, _) = common::tiny_gpt2_metadata();
    let s = |v: &str| Value::String(v.into());
    let cases = [
        (
            "general.architecture",
            "gemma3",
            "tokenizer.ggml.pre",
            "gpt2",
        ),
        (
            "general.architecture",
            "llama",
            "tokenizer.ggml.pre",
            "tekken",
        ),
        (
            "general.architecture",
            "llama",
            "tokenizer.ggml.model",
            "bert",
        ),
    ];
    for (i, (k1, v1, k2, v2)) in cases.into_iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.gguf"));
        let mut md: Vec<(&str, Value)> = tok_md
            .iter()
            .filter(|(k, _)| k != k2)
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        md.push((k1, s(v1)));
        md.push((k2, s(v2)));
        write_metadata_only(&path, &md);
        let (code, line) = serve_stderr_first_line(&path, true);
        assert_eq!(code, Some(1), "{line}");
        assert!(line.starts_with("hydra-engine: "), "{line}");
        let (key, value) = if v1 == "llama" { (k2, v2) } else { (k1, v1) };
        assert!(
            line.contains(&format!("{key} = \"{value}\"")),
            "expected {key} = {value:?} in: {line}"
        );
    }
}
