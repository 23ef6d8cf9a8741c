//! GGUF files, at the bottom of the engine: a file's header (metadata and tensor index)
//! and metadata getters whose errors name the key. The model loader and the tokenizer both
//! read through here; this module knows neither.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};

use crate::error::{EngineError, Result};

/// Opens a GGUF file and reads its header (metadata and tensor index); the reader is left
/// for the tensors.
pub fn read_header(path: &Path) -> Result<(Content, BufReader<File>)> {
    let mut reader = BufReader::new(File::open(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?);
    let ct = Content::read(&mut reader).map_err(|e| EngineError::InvalidModel {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok((ct, reader))
}

/// A GGUF file's metadata, read by key.
///
/// The lenient getters ([`Metadata::string`], [`Metadata::u32`], [`Metadata::bool`]) take
/// a key of another type as absent; the strict ones (`*_of`, [`Metadata::required_u32`])
/// say which key is wrong: `missing metadata KEY`, `KEY: what is wrong`.
#[derive(Debug, Clone, Copy)]
pub struct Metadata<'a>(&'a HashMap<String, Value>);

impl<'a> Metadata<'a> {
    /// The metadata of a file's header.
    pub fn new(md: &'a HashMap<String, Value>) -> Self {
        Self(md)
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key)
    }

    /// `key` as a string, if it is one.
    pub fn string(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(|v| v.to_string().ok()).cloned()
    }

    /// `key` as a u32, if it is one.
    pub fn u32(&self, key: &str) -> Option<u32> {
        self.0.get(key).and_then(|v| v.to_u32().ok())
    }

    /// `key` as a bool, if it is one.
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(|v| v.to_bool().ok())
    }

    /// `key` as a string when present; another type is an error naming the key.
    pub fn string_of(&self, key: &str) -> std::result::Result<Option<String>, String> {
        self.strict(key, |v| v.to_string().cloned())
    }

    /// `key` as a u32 (a size) when present; another type is an error naming the key.
    pub fn u32_of(&self, key: &str) -> std::result::Result<Option<usize>, String> {
        self.strict(key, |v| v.to_u32().map(|v| v as usize))
    }

    /// `key` as an f32 when present; another type is an error naming the key.
    pub fn f32_of(&self, key: &str) -> std::result::Result<Option<f32>, String> {
        self.strict(key, Value::to_f32)
    }

    /// `key` as a u32 (a size), which must be present.
    pub fn required_u32(&self, key: &str) -> std::result::Result<usize, String> {
        self.u32_of(key)?
            .ok_or_else(|| format!("missing metadata {key}"))
    }

    fn strict<T>(
        &self,
        key: &str,
        read: impl FnOnce(&'a Value) -> candle_core::Result<T>,
    ) -> std::result::Result<Option<T>, String> {
        self.0
            .get(key)
            .map(read)
            .transpose()
            .map_err(|e| format!("{key}: {e}"))
    }
}
