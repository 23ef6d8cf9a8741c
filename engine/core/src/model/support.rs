//! Whether the engine can serve a GGUF file, decided from its metadata alone, and said in
//! one line.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;

use super::config::Architecture;
use crate::error::{EngineError, Result};
use crate::gguf::Metadata;
use crate::tokenizer::Tokenizer;

/// What a servable GGUF file is: its architecture and tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// `general.architecture`.
    pub architecture: String,
    /// `tokenizer.ggml.model`.
    pub tokenizer: String,
    /// `tokenizer.ggml.pre` as resolved (byte-level BPE only).
    pub pre_tokenizer: Option<String>,
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "architecture {}, tokenizer {}, pre-tokenizer {}",
            self.architecture,
            self.tokenizer,
            self.pre_tokenizer.as_deref().unwrap_or("none")
        )
    }
}

impl Support {
    /// Check the metadata keys that decide whether the engine can run the file with its
    /// own vocabulary (`general.architecture`, `tokenizer.ggml.model`,
    /// `tokenizer.ggml.pre`); an unsupported value is an error naming the key and the value.
    pub fn check(md: &HashMap<String, Value>, path: &Path) -> Result<Self> {
        let md = Metadata::new(md);
        let (architecture, _) = architecture(md, path)?;
        let (tokenizer, pre_tokenizer) = Tokenizer::gguf_kind(md)?;
        Ok(Self {
            architecture,
            tokenizer,
            pre_tokenizer,
        })
    }
}

/// The loader's support decision: the file's architecture (always checked), and its
/// tokenizer keys unless a `tokenizer.json` replaces its vocabulary.
pub(crate) fn decide(
    md: Metadata<'_>,
    path: &Path,
    tokenizer_json: bool,
) -> Result<(String, Architecture)> {
    let arch = architecture(md, path)?;
    if !tokenizer_json {
        Tokenizer::gguf_kind(md)?;
    }
    Ok(arch)
}

/// The architecture gate: `general.architecture` and the family the engine runs it as,
/// or the error listing what it runs ([`Architecture::supported`]).
fn architecture(md: Metadata<'_>, path: &Path) -> Result<(String, Architecture)> {
    let architecture = md.string("general.architecture").unwrap_or_default();
    match Architecture::from_gguf(&architecture) {
        Some(family) => Ok((architecture, family)),
        None => Err(EngineError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            architecture,
            supported: Architecture::supported().join(", "),
        }),
    }
}

/// One line saying what the GGUF file at `path` is ("model X: architecture
/// qwen2, tokenizer gpt2, pre-tokenizer qwen2"), reading only its metadata;
/// a file the engine cannot serve is the error naming the key and value.
pub fn describe_gguf(path: &Path) -> Result<String> {
    let (ct, _) = crate::gguf::read_header(path)?;
    let s = Support::check(&ct.metadata, path)?;
    Ok(format!("model {}: {s}", path.display()))
}
