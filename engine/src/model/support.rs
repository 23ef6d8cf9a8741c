//! Whether the engine can serve a GGUF file, said in one line.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;

use super::config::Architecture;
use crate::error::{EngineError, Result};
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
    /// Check the metadata keys that decide whether the engine can run the file
    /// (`general.architecture`, `tokenizer.ggml.model`, `tokenizer.ggml.pre`);
    /// an unsupported value is an error naming the key and the value.
    pub fn check(md: &HashMap<String, Value>, path: &Path) -> Result<Self> {
        let architecture = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if Architecture::from_gguf(&architecture).is_none() {
            return Err(EngineError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                architecture,
            });
        }
        let (tokenizer, pre_tokenizer) = Tokenizer::gguf_kind(md)?;
        Ok(Self {
            architecture,
            tokenizer,
            pre_tokenizer,
        })
    }
}

/// One line saying what the GGUF file at `path` is ("model X: architecture
/// qwen2, tokenizer gpt2, pre-tokenizer qwen2"), reading only its metadata;
/// a file the engine cannot serve is the error naming the key and value.
pub fn describe_gguf(path: &Path) -> Result<String> {
    let (ct, _) = super::gguf_load::read_header(path)?;
    let s = Support::check(&ct.metadata, path)?;
    Ok(format!("model {}: {s}", path.display()))
}
