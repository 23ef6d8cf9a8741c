//! llama.cpp's tokenizer test vectors: for every `models/ggml-vocab-<name>.gguf`
//! of llama.cpp 0c1e570 (vendored by the PyPI sdist llama-cpp-python==0.3.36,
//! fetched by `scripts/llama-cpp.sh vocab` into a cache outside the repository),
//! every text of `<name>.gguf.inp` must tokenize to the ids on the same line
//! of `<name>.gguf.out`, exactly as llama.cpp's `tests/test-tokenizer-0.cpp`
//! checks them: texts separated by `\n__ggml_vocab_test__\n`, tokenized with
//! `add_special = false` and `parse_special = false`.
//!
//! The families the engine serves must load and match every line; the others
//! must match too, or be refused with an error naming the key and value.
//! Missing vectors fail the test unless `HYDRA_ALLOW_SKIP=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use hydra_engine_core::{EngineError, Tokenizer};

/// Vocabularies that must load and match every line.
const REQUIRED: &[&str] = &[
    "llama-spm",
    "llama-bpe",
    "phi-3",
    "qwen2",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "gpt-2",
    "starcoder",
    "refact",
    "command-r",
    "mpt",
];

fn vocab_dir() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/llama-cpp.sh"))
        .arg("vocab")
        .output();
    let allow_skip = std::env::var("HYDRA_ALLOW_SKIP").is_ok_and(|v| v == "1");
    match out {
        Ok(o) if o.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            if dir.join("ggml-vocab-gpt-2.gguf").is_file() {
                return Some(dir);
            }
            assert!(allow_skip, "no vocab files in {}", dir.display());
        }
        Ok(o) => assert!(
            allow_skip,
            "scripts/llama-cpp.sh vocab failed (set HYDRA_ALLOW_SKIP=1 to skip): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => assert!(allow_skip, "cannot run scripts/llama-cpp.sh: {e}"),
    }
    println!("SKIPPED: llama.cpp vocab test vectors are not available");
    None
}

/// The texts of a `.inp` file, split as llama.cpp's test does.
fn split_inputs(raw: &str) -> Vec<&str> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < raw.len() {
        match raw[pos..].find(SEP) {
            Some(i) => {
                out.push(&raw[pos..pos + i]);
                pos += i + SEP.len();
            }
            None => {
                out.push(&raw[pos..]);
                break;
            }
        }
    }
    out
}

fn parse_ids(line: &str) -> Vec<u32> {
    line.split_whitespace()
        .map(|t| t.parse().unwrap_or_else(|e| panic!("bad id {t:?}: {e}")))
        .collect()
}

struct Outcome {
    name: String,
    passed: usize,
    total: usize,
    refused: Option<String>,
}

fn check_vocab(dir: &Path, name: &str) -> Outcome {
    let gguf = dir.join(format!("ggml-vocab-{name}.gguf"));
    let inp = dir.join(format!("ggml-vocab-{name}.gguf.inp"));
    let out = dir.join(format!("ggml-vocab-{name}.gguf.out"));
    let tok = match Tokenizer::from_gguf_file(&gguf) {
        Ok(t) => t,
        Err(e) => {
            assert!(
                matches!(e, EngineError::UnsupportedTokenizer { .. }),
                "{name}: refused with an unclear error: {e}"
            );
            let msg = e.to_string();
            assert!(msg.contains("tokenizer.ggml."), "{name}: {msg}");
            return Outcome {
                name: name.into(),
                passed: 0,
                total: 0,
                refused: Some(msg),
            };
        }
    };
    let (Ok(raw), Ok(expected)) = (std::fs::read_to_string(&inp), std::fs::read_to_string(&out))
    else {
        return Outcome {
            name: name.into(),
            passed: 0,
            total: 0,
            refused: None,
        };
    };
    let texts = split_inputs(&raw);
    let lines: Vec<&str> = expected.lines().collect();
    assert_eq!(texts.len(), lines.len(), "{name}: .inp and .out disagree");
    let mut passed = 0;
    for (text, line) in texts.iter().zip(&lines) {
        let want = parse_ids(line);
        let got = tok.tokenize(text, false, false).expect("tokenize");
        if got == want {
            passed += 1;
        } else {
            println!("{name}: MISMATCH for {text:?}\n  want {want:?}\n  got  {got:?}");
        }
    }
    Outcome {
        name: name.into(),
        passed,
        total: texts.len(),
        refused: None,
    }
}

#[test]
fn llama_cpp_vocab_vectors() {
    let Some(dir) = vocab_dir() else { return };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read vocab dir")
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            Some(
                n.strip_prefix("ggml-vocab-")?
                    .strip_suffix(".gguf")?
                    .to_string(),
            )
        })
        .collect();
    names.sort();
    for r in REQUIRED {
        assert!(
            names.iter().any(|n| n == r),
            "vocab {r} is missing in {}",
            dir.display()
        );
    }
    let mut failures = Vec::new();
    for name in &names {
        let started = std::time::Instant::now();
        let o = check_vocab(&dir, name);
        let took = started.elapsed().as_secs_f64();
        match &o.refused {
            Some(msg) => println!("vocab {:<16} refused: {msg}", o.name),
            None if o.total == 0 => {
                println!("vocab {:<16} loads (no test vectors), {took:.1} s", o.name)
            }
            None => println!(
                "vocab {:<16} {}/{} match, {took:.1} s",
                o.name, o.passed, o.total
            ),
        }
        let required = REQUIRED.contains(&name.as_str());
        if required && o.refused.is_some() {
            failures.push(format!("{name}: refused"));
        }
        if o.passed != o.total {
            failures.push(format!("{name}: {}/{} match", o.passed, o.total));
        }
    }
    assert!(failures.is_empty(), "vocab vectors failed: {failures:?}");
}

#[test]
fn input_split_matches_llama_cpp() {
    assert_eq!(
        split_inputs("a\n__ggml_vocab_test__\n\n__ggml_vocab_test__\n b\n"),
        vec!["a", "", " b\n"]
    );
}

/// Control tokens written in the text, with `parse_special` (llama.cpp's
/// `tokenizer_st_partition`): each is its own id, and the text around them is
/// tokenized as if alone; for SentencePiece that includes the space prefix after
/// every control token (llama.cpp's `is_prev_special`). BOS comes first with
/// `add_special` where the vocabulary asks for it.
#[test]
fn control_tokens_in_text_split_it_as_llama_cpp_does() {
    let Some(dir) = vocab_dir() else { return };
    for (name, open, close) in [
        ("llama-spm", "<s>", "</s>"),
        ("llama-bpe", "<|start_header_id|>", "<|eot_id|>"),
        ("qwen2", "<|im_start|>", "<|im_end|>"),
    ] {
        let tok = Tokenizer::from_gguf_file(&dir.join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let id = |s: &str| {
            let ids = tok.tokenize(s, false, true).unwrap();
            assert_eq!(ids.len(), 1, "{name}: {s} is one control token: {ids:?}");
            assert!(tok.is_special(ids[0]), "{name}: {s}");
            ids[0]
        };
        let plain = |s: &str| tok.tokenize(s, false, false).unwrap();
        let text = format!("{open}Hello{close} world");
        let mut want = Vec::new();
        want.extend(tok.add_bos_by_default().then(|| tok.bos_token()).flatten());
        want.push(id(open));
        want.extend(plain("Hello"));
        want.push(id(close));
        want.extend(plain(" world"));
        assert_eq!(tok.tokenize(&text, true, true).unwrap(), want, "{name}");
        // Without parse_special the markers are ordinary text.
        let literal = tok.tokenize(&text, false, false).unwrap();
        assert!(!literal.contains(&id(open)), "{name}: {literal:?}");
    }
}
