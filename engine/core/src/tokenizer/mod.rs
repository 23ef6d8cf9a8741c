//! Tokenizers: SentencePiece (`llama`) and byte-level BPE (`gpt2`)
//! vocabularies read from a GGUF's `tokenizer.ggml.*` metadata or from a
//! Hugging Face `tokenizer.json`, run by the Hugging Face `tokenizers` crate;
//! and the byte tokenizer of the embedded model.
//!
//! Encoding follows llama.cpp's `llama_tokenize`: [`Tokenizer::tokenize`]
//! takes its `add_special` and `parse_special` flags. Special tokens (control
//! tokens such as `<|im_start|>`) written in the text are recognised when
//! `parse_special` is set; user-defined tokens always are. Decoding is a
//! lookup of the bytes each token stands for, so that streamed output can hold
//! back a character split across tokens.

mod bytelevel;
pub mod bytes;
mod gguf;
mod json;
mod pretok;
mod utf8;

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::quantized::gguf_file::Value;
use tokenizers::Tokenizer as HfTokenizer;

use crate::error::{EngineError, Result};
use crate::gguf::Metadata;
pub use bytelevel::bytes_to_unicode;
use gguf::{hf_err, GgufVocab};
pub use utf8::Utf8Holder;

/// Family name reported for GPT-2 style byte-level BPE vocabularies.
pub const GPT2_FAMILY: &str = "gpt2";
/// Family name reported for SentencePiece vocabularies (Llama 2, Mistral, Phi-3).
pub const SPM_FAMILY: &str = "llama";

/// The tokenizer models `tokenizer.ggml.model` may name.
const SUPPORTED_MODELS: &str = "llama (SentencePiece), gpt2 (byte-level BPE), hydra-bytes";

#[derive(Clone)]
enum Encoder {
    Bytes,
    /// Shared: clones of a [`Tokenizer`] (the model's, the server's) cost nothing.
    Hf {
        /// Matches special tokens written in the text.
        parse_special: Arc<HfTokenizer>,
        /// Encodes special tokens' text as ordinary text.
        plain: Arc<HfTokenizer>,
    },
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes => f.write_str("Bytes"),
            Self::Hf { .. } => f.write_str("HuggingFace"),
        }
    }
}

impl Encoder {
    fn hf(tokenizer: HfTokenizer) -> Self {
        let mut plain = tokenizer.clone();
        plain.set_encode_special_tokens(true);
        Self::Hf {
            parse_special: Arc::new(tokenizer),
            plain: Arc::new(plain),
        }
    }
}

/// Ids of the special tokens a vocabulary file may not carry itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// Beginning of text.
    pub bos: Option<u32>,
    /// Tokens that end generation.
    pub eos: Vec<u32>,
    /// Stands in for bytes the vocabulary lacks.
    pub unk: Option<u32>,
    /// Whether prompts start with BOS by default.
    pub add_bos: bool,
}

/// Converts between text and token ids.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    family: String,
    pre: Option<String>,
    encoder: Encoder,
    /// Bytes each token decodes to.
    pieces: Vec<Vec<u8>>,
    /// Special tokens of the byte tokenizer, matched literally, longest first.
    byte_specials: Vec<(String, u32)>,
    is_special: Vec<bool>,
    bos: Option<u32>,
    eos: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
}

impl Tokenizer {
    /// The byte tokenizer of the embedded model (see [`bytes`]).
    pub fn bytes() -> Self {
        let pieces = bytes::pieces();
        let mut byte_specials: Vec<(String, u32)> = bytes::SPECIALS
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_string(), 256 + i as u32))
            .collect();
        byte_specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut is_special = vec![false; pieces.len()];
        for (_, id) in &byte_specials {
            is_special[*id as usize] = true;
        }
        Self {
            family: bytes::FAMILY.into(),
            pre: None,
            encoder: Encoder::Bytes,
            pieces,
            byte_specials,
            is_special,
            bos: Some(bytes::BOS),
            eos: vec![bytes::EOS],
            add_bos: false,
            add_eos: false,
        }
    }

    /// Read only the tokenizer of a GGUF file (its metadata, not its weights).
    pub fn from_gguf_file(path: &std::path::Path) -> Result<Self> {
        let (ct, _) = crate::gguf::read_header(path)?;
        Self::from_gguf_metadata(&ct.metadata)
    }

    /// Read a tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    ///
    /// `tokenizer.ggml.model` may be `llama` (SentencePiece) or `gpt2`
    /// (byte-level BPE, with one of the pre-tokenizers llama.cpp names in
    /// `tokenizer.ggml.pre`); anything else is
    /// [`EngineError::UnsupportedTokenizer`] naming the key and its value.
    pub fn from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Self> {
        let (model, _) = Self::gguf_kind(Metadata::new(md))?;
        if model == bytes::FAMILY {
            return Ok(Self::bytes());
        }
        let v = GgufVocab::read(md)?;
        let spm = model == SPM_FAMILY;
        let (hf, pieces, pre) = if spm {
            let (hf, pieces) = v.build_spm()?;
            (hf, pieces, None)
        } else {
            let pre = v.pre_tokenizer()?;
            let (hf, pieces) = v.build_bpe(&pre)?;
            (hf, pieces, Some(pre))
        };
        let n = v.tokens.len();
        // llama.cpp's defaults where the file names no BOS/EOS.
        let (bos_default, eos_default) = if spm { (1, 2) } else { (11, 11) };
        let in_vocab = |id: u32| ((id as usize) < n).then_some(id);
        let bos = v.keys.bos.or_else(|| in_vocab(bos_default));
        let mut eos = Vec::new();
        for id in [v.keys.eos.or_else(|| in_vocab(eos_default)), v.keys.eot]
            .into_iter()
            .flatten()
        {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
        let add_bos_default = spm || pre.as_ref().is_some_and(|p| p.ignore_merges);
        Ok(Self {
            family: model.clone(),
            pre: pre.map(|p| p.name),
            encoder: Encoder::hf(hf),
            is_special: (0..n).map(|i| v.is_special(i)).collect(),
            pieces,
            byte_specials: Vec::new(),
            bos,
            eos,
            add_bos: v.keys.add_bos.unwrap_or(add_bos_default),
            add_eos: v.keys.add_eos.unwrap_or(false),
        })
    }

    /// The tokenizer family (`tokenizer.ggml.model`) and pre-tokenizer
    /// (`tokenizer.ggml.pre`, byte-level BPE only) GGUF metadata names,
    /// checked without building the tokenizer: an unsupported value is
    /// [`EngineError::UnsupportedTokenizer`] naming the key and the value.
    pub fn gguf_kind(md: Metadata<'_>) -> Result<(String, Option<String>)> {
        let model = md.string("tokenizer.ggml.model").ok_or_else(|| {
            EngineError::InvalidTokenizer("the model has no tokenizer.ggml.model metadata".into())
        })?;
        match model.as_str() {
            bytes::FAMILY | SPM_FAMILY => Ok((model, None)),
            GPT2_FAMILY => {
                let pre = md.string("tokenizer.ggml.pre");
                let spec =
                    pretok::PreTokenizerSpec::from_gguf_name(pre.as_deref()).ok_or_else(|| {
                        EngineError::UnsupportedTokenizer {
                            key: "tokenizer.ggml.pre".into(),
                            value: pre.unwrap_or_default(),
                            supported: pretok::KNOWN.join(", "),
                        }
                    })?;
                Ok((model, Some(spec.name)))
            }
            _ => Err(EngineError::UnsupportedTokenizer {
                key: "tokenizer.ggml.model".into(),
                value: model,
                supported: SUPPORTED_MODELS.into(),
            }),
        }
    }

    /// Read a Hugging Face `tokenizer.json` (BPE models). `bos`, `eos` and
    /// `add_bos` come from elsewhere (the GGUF), as `tokenizer.json` does not
    /// carry them.
    pub fn from_tokenizer_json(text: &str, ids: SpecialIds) -> Result<Self> {
        let j = json::parse(text)?;
        let n = j.pieces.len() as u32;
        Ok(Self {
            family: GPT2_FAMILY.into(),
            pre: Some("tokenizer.json".into()),
            encoder: Encoder::hf(j.hf),
            pieces: j.pieces,
            byte_specials: Vec::new(),
            is_special: j.special,
            bos: ids.bos.filter(|&b| b < n),
            eos: ids.eos.into_iter().filter(|&e| e < n).collect(),
            add_bos: ids.add_bos,
            add_eos: false,
        })
    }

    /// The family name ("gpt2", "llama", "hydra-bytes").
    pub fn family(&self) -> &str {
        &self.family
    }

    /// The pre-tokenizer of a byte-level BPE vocabulary (`tokenizer.ggml.pre`,
    /// "default" when the file names none); `None` for other families.
    pub fn pre_tokenizer(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// Beginning-of-text token, if the vocabulary has one.
    pub fn bos_token(&self) -> Option<u32> {
        self.bos
    }

    /// Tokens that end generation.
    pub fn eos_tokens(&self) -> &[u32] {
        &self.eos
    }

    /// Whether the model expects a BOS token in front of a prompt by default.
    pub fn add_bos_by_default(&self) -> bool {
        self.add_bos
    }

    /// Whether `id` is a special (control or user-defined) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.is_special.get(id as usize).copied().unwrap_or(false)
    }

    /// Encode `text`, recognising special tokens written in it; with `add_bos`,
    /// the BOS token (if any) is put first. Use [`Self::try_encode`] to see
    /// the (rare) errors of the underlying tokenizer, which this logs and
    /// answers with no tokens.
    pub fn encode(&self, text: &str, add_bos: bool) -> Vec<u32> {
        self.try_encode(text, add_bos).unwrap_or_else(|e| {
            tracing::error!(error = %e, "tokenizer failed; no tokens");
            Vec::new()
        })
    }

    /// [`Self::encode`], with the tokenizer's errors.
    pub fn try_encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            out.extend(self.bos);
        }
        self.encode_text(text, true, &mut out)?;
        Ok(out)
    }

    /// llama.cpp's `llama_tokenize`: with `add_special`, BOS and EOS as the
    /// vocabulary asks (`tokenizer.ggml.add_bos_token`, `add_eos_token`);
    /// with `parse_special`, control tokens written in the text are
    /// recognised (user-defined tokens always are).
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        self.encode_text(text, parse_special, &mut out)?;
        if add_special && self.add_eos {
            out.extend(self.eos.first());
        }
        Ok(out)
    }

    fn encode_text(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) -> Result<()> {
        match &self.encoder {
            Encoder::Bytes => {
                self.encode_bytes(text, parse_special, out);
                Ok(())
            }
            Encoder::Hf {
                parse_special: with,
                plain,
            } => {
                let hf = if parse_special { with } else { plain };
                let enc = hf.encode_fast(text, false).map_err(hf_err)?;
                out.extend_from_slice(enc.get_ids());
                Ok(())
            }
        }
    }

    /// The byte tokenizer: one token per byte, specials matched literally.
    fn encode_bytes(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) {
        let mut rest = text;
        while !rest.is_empty() {
            // Earliest special occurrence (longest first at the same position).
            let mut found: Option<(usize, &str, u32)> = None;
            if parse_special {
                for (s, id) in &self.byte_specials {
                    if let Some(p) = rest.find(s.as_str()) {
                        if found.is_none_or(|(fp, _, _)| p < fp) {
                            found = Some((p, s, *id));
                        }
                    }
                }
            }
            let (plain, next) = match found {
                Some((p, s, id)) => (&rest[..p], Some((id, p + s.len()))),
                None => (rest, None),
            };
            out.extend(plain.bytes().map(u32::from));
            match next {
                Some((id, end)) => {
                    out.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
    }

    /// The bytes token `id` stands for (specials: their text).
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.pieces
            .get(id as usize)
            .map(Vec::as_slice)
            .ok_or(EngineError::TokenOutOfRange {
                token: id,
                vocab_size: self.pieces.len(),
            })
    }

    /// Check that every id is in the vocabulary.
    pub fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&t| t as usize >= self.pieces.len()) {
            Some(&token) => Err(EngineError::TokenOutOfRange {
                token,
                vocab_size: self.pieces.len(),
            }),
            None => Ok(()),
        }
    }

    /// Decode ids to text: the pieces one after the other (specials as their
    /// text, SentencePiece's `▁` as a space, as llama.cpp's `/detokenize`),
    /// invalid UTF-8 as U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A decoder for streaming output one token at a time.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder {
            tokenizer: self,
            pending: Utf8Holder::new(),
        }
    }
}

/// Streaming-safe detokenizer: holds back bytes of a UTF-8 character split
/// across tokens until it is complete ([`Utf8Holder`]).
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Utf8Holder,
}

impl StreamDecoder<'_> {
    /// Add one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        Ok(self.pending.push(self.tokenizer.token_bytes(id)?))
    }

    /// Flush what is held back (as U+FFFD if incomplete).
    pub fn finish(&mut self) -> String {
        self.pending.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_roundtrip_with_specials() {
        let t = Tokenizer::bytes();
        let ids = t.encode("hé<|eos|>x", true);
        assert_eq!(
            ids,
            vec![bytes::BOS, b'h' as u32, 0xc3, 0xa9, bytes::EOS, b'x' as u32]
        );
        assert_eq!(t.decode(&ids).unwrap(), "<|bos|>hé<|eos|>x");
        assert!(t.decode(&[9999]).is_err());
    }

    #[test]
    fn stream_decoder_holds_split_characters() {
        let t = Tokenizer::bytes();
        let mut d = t.stream_decoder();
        assert_eq!(d.push(b'a' as u32).unwrap(), "a");
        assert_eq!(d.push(0xc3).unwrap(), "");
        assert_eq!(d.push(0xa9).unwrap(), "é");
        assert_eq!(d.push(0xff).unwrap(), "\u{FFFD}");
        assert_eq!(d.push(0xe2).unwrap(), "");
        assert_eq!(d.finish(), "\u{FFFD}");
    }
}
