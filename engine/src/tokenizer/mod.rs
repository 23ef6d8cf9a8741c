//! Tokenizers: GPT-2 style byte-level BPE read from a GGUF's
//! `tokenizer.ggml.*` metadata or from a `tokenizer.json`, and the byte
//! tokenizer of the embedded model.
//!
//! Special tokens (control and user-defined tokens, such as `<|im_start|>`)
//! written literally in the text are recognised by [`Tokenizer::encode`].

mod bpe;
pub mod bytes;
mod json;
mod pretok;

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use crate::error::{EngineError, Result};
use bpe::Bpe;
use pretok::PreTokenizer;

/// Family name reported for GPT-2 style byte-level BPE vocabularies.
pub const GPT2_FAMILY: &str = "gpt2";

#[derive(Debug, Clone)]
enum Encoder {
    Bytes,
    Bpe(Box<Bpe>),
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
    encoder: Encoder,
    /// Bytes each token decodes to.
    pieces: Vec<Vec<u8>>,
    /// Special tokens matched literally in text, longest first.
    specials: Vec<(String, u32)>,
    is_special: Vec<bool>,
    bos: Option<u32>,
    eos: Vec<u32>,
    add_bos: bool,
}

impl Tokenizer {
    /// The byte tokenizer of the embedded model (see [`bytes`]).
    pub fn bytes() -> Self {
        let pieces = bytes::pieces();
        let specials = bytes::SPECIALS
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_string(), 256 + i as u32))
            .collect();
        Self::assemble(
            bytes::FAMILY.into(),
            Encoder::Bytes,
            pieces,
            specials,
            Some(bytes::BOS),
            vec![bytes::EOS],
            false,
        )
    }

    fn assemble(
        family: String,
        encoder: Encoder,
        pieces: Vec<Vec<u8>>,
        mut specials: Vec<(String, u32)>,
        bos: Option<u32>,
        eos: Vec<u32>,
        add_bos: bool,
    ) -> Self {
        let mut is_special = vec![false; pieces.len()];
        specials.retain(|(s, id)| !s.is_empty() && (*id as usize) < pieces.len());
        for (_, id) in &specials {
            is_special[*id as usize] = true;
        }
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let n = pieces.len() as u32;
        Self {
            family,
            encoder,
            pieces,
            specials,
            is_special,
            bos: bos.filter(|&b| b < n),
            eos: eos.into_iter().filter(|&e| e < n).collect(),
            add_bos,
        }
    }

    /// Read only the tokenizer of a GGUF file (its metadata, not its weights).
    pub fn from_gguf_file(path: &std::path::Path) -> Result<Self> {
        let mut f = std::io::BufReader::new(std::fs::File::open(path).map_err(|source| {
            EngineError::Io {
                path: path.to_path_buf(),
                source,
            }
        })?);
        let ct = candle_core::quantized::gguf_file::Content::read(&mut f).map_err(|e| {
            EngineError::InvalidModel {
                path: path.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        Self::from_gguf_metadata(&ct.metadata)
    }

    /// Read a tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    ///
    /// Supports `tokenizer.ggml.model = "gpt2"` with the `gpt2`/`default` and
    /// `smollm` pre-tokenizers; anything else is
    /// [`EngineError::UnsupportedTokenizer`].
    pub fn from_gguf_metadata(md: &HashMap<String, Value>) -> Result<Self> {
        let get_str = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
        let get_u32 = |k: &str| md.get(k).and_then(|v| v.to_u32().ok());
        let model = get_str("tokenizer.ggml.model").ok_or_else(|| {
            EngineError::InvalidTokenizer("the model has no tokenizer.ggml.model metadata".into())
        })?;
        if model == bytes::FAMILY {
            return Ok(Self::bytes());
        }
        if model != GPT2_FAMILY {
            return Err(EngineError::UnsupportedTokenizer { family: model });
        }
        let pre_name = get_str("tokenizer.ggml.pre");
        let pre = PreTokenizer::from_gguf_name(pre_name.as_deref()).ok_or_else(|| {
            EngineError::UnsupportedTokenizer {
                family: format!(
                    "gpt2 with pre-tokenizer {:?} (supported: default, gpt2, smollm, starcoder)",
                    pre_name.unwrap_or_default()
                ),
            }
        })?;
        let strings = |k: &str| -> Result<Vec<String>> {
            let v = md
                .get(k)
                .ok_or_else(|| EngineError::InvalidTokenizer(format!("missing {k}")))?;
            let v = v
                .to_vec()
                .map_err(|_| EngineError::InvalidTokenizer(format!("{k} is not an array")))?;
            v.iter()
                .map(|s| {
                    s.to_string().cloned().map_err(|_| {
                        EngineError::InvalidTokenizer(format!("{k} holds a non-string"))
                    })
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types: Vec<i32> = match md.get("tokenizer.ggml.token_type").map(|v| v.to_vec()) {
            Some(Ok(v)) => v.iter().map(|t| t.to_i32().unwrap_or(1)).collect(),
            _ => vec![1; tokens.len()],
        };
        let merges: Vec<(String, String)> = merges
            .iter()
            .filter_map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect();
        // Control (3) and user-defined (4) tokens are matched literally.
        let specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|(i, _)| matches!(types.get(*i), Some(3) | Some(4)))
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let mut eos = Vec::new();
        for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Some(id) = get_u32(k) {
                if !eos.contains(&id) {
                    eos.push(id);
                }
            }
        }
        let add_bos = md
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false);
        Self::gpt2(
            tokens,
            &merges,
            specials,
            pre,
            SpecialIds {
                bos: get_u32("tokenizer.ggml.bos_token_id"),
                eos,
                unk: get_u32("tokenizer.ggml.unknown_token_id"),
                add_bos,
            },
        )
    }

    /// Read a Hugging Face `tokenizer.json` (byte-level BPE only). `bos`,
    /// `eos` and `add_bos` come from elsewhere (the GGUF), as
    /// `tokenizer.json` does not carry them.
    pub fn from_tokenizer_json(text: &str, ids: SpecialIds) -> Result<Self> {
        let j = json::parse(text)?;
        let ids = SpecialIds {
            unk: ids.unk.or(j.unk),
            ..ids
        };
        Self::gpt2(j.tokens, &j.merges, j.specials, j.pre, ids)
    }

    fn gpt2(
        tokens: Vec<String>,
        merges: &[(String, String)],
        specials: Vec<(String, u32)>,
        pre: PreTokenizer,
        ids: SpecialIds,
    ) -> Result<Self> {
        let SpecialIds {
            bos,
            eos,
            unk,
            add_bos,
        } = ids;
        let vocab: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = Bpe::new(&vocab, merges, pre, unk)?;
        let b2u = bpe::bytes_to_unicode();
        let mut u2b: HashMap<char, u8> = HashMap::with_capacity(256);
        for (b, c) in b2u.iter().enumerate() {
            u2b.insert(*c, b as u8);
        }
        let special_ids: std::collections::HashSet<u32> = specials.iter().map(|s| s.1).collect();
        let pieces = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if special_ids.contains(&(i as u32)) {
                    return t.as_bytes().to_vec();
                }
                let mut out = Vec::with_capacity(t.len());
                for c in t.chars() {
                    match u2b.get(&c) {
                        Some(b) => out.push(*b),
                        None => {
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                    }
                }
                out
            })
            .collect();
        Ok(Self::assemble(
            GPT2_FAMILY.into(),
            Encoder::Bpe(Box::new(bpe)),
            pieces,
            specials,
            bos,
            eos,
            add_bos,
        ))
    }

    /// The family name ("gpt2", "hydra-bytes").
    pub fn family(&self) -> &str {
        &self.family
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

    /// Whether `id` is a special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.is_special.get(id as usize).copied().unwrap_or(false)
    }

    /// Encode `text`; special tokens written literally are recognised.
    /// With `add_bos`, the BOS token (if any) is put first.
    pub fn encode(&self, text: &str, add_bos: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            if let Some(b) = self.bos {
                out.push(b);
            }
        }
        let mut rest = text;
        while !rest.is_empty() {
            // Earliest special occurrence (longest first at the same position).
            let mut found: Option<(usize, &str, u32)> = None;
            for (s, id) in &self.specials {
                if let Some(p) = rest.find(s.as_str()) {
                    if found.is_none_or(|(fp, _, _)| p < fp) {
                        found = Some((p, s, *id));
                    }
                }
            }
            let (plain, next) = match found {
                Some((p, s, id)) => (&rest[..p], Some((id, p + s.len()))),
                None => (rest, None),
            };
            self.encode_plain(plain, &mut out);
            match next {
                Some((id, end)) => {
                    out.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        out
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        match &self.encoder {
            Encoder::Bytes => out.extend(text.bytes().map(u32::from)),
            Encoder::Bpe(bpe) => bpe.encode(text, out),
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

    /// Decode ids to text; specials render as their text, invalid UTF-8 as U+FFFD.
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
            pending: Vec::new(),
        }
    }
}

/// Streaming-safe detokenizer: holds back bytes of a UTF-8 character split
/// across tokens until it is complete.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    /// Add one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.pending
            .extend_from_slice(self.tokenizer.token_bytes(id)?);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return Ok(out);
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // Incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..good);
                            return Ok(out);
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// Flush what is held back (as U+FFFD if incomplete).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
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
