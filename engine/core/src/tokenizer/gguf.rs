//! Building a Hugging Face tokenizer from a GGUF's `tokenizer.ggml.*` metadata.
//!
//! Two vocabulary models, as llama.cpp reads them:
//!
//! - `llama`: SentencePiece BPE. Pieces merge highest score first; text is
//!   one word with spaces written as `▁` and, when the vocabulary adds a
//!   space prefix, a `▁` in front of every stretch of text (at the start and
//!   after each special token); characters the vocabulary lacks fall back to
//!   their `<0xXX>` byte tokens. Built as a BPE model whose merges are every
//!   pair of pieces that concatenate to a piece, ranked by that piece's score.
//! - `gpt2`: byte-level BPE with ranked merges, after the pre-tokenizer named
//!   by `tokenizer.ggml.pre` (see [`super::pretok`]).
//!
//! Control and unknown tokens are special tokens (matched in text only when
//! asked to); user-defined tokens are always matched in text.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    Tokenizer as HfTokenizer,
};

use super::bytelevel::byte_level_decode;
use super::pretok::{PreTokenizerSpec, KNOWN};
use crate::error::{EngineError, Result};
use crate::gguf::Metadata;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub(crate) mod token_type {
    /// An ordinary piece.
    pub(crate) const NORMAL: i32 = 1;
    /// The unknown token.
    pub(crate) const UNKNOWN: i32 = 2;
    /// A control token (BOS, EOS, chat markers).
    pub(crate) const CONTROL: i32 = 3;
    /// A token added by the model's authors, always matched in text.
    pub(crate) const USER_DEFINED: i32 = 4;
    /// A `<0xXX>` byte token.
    pub(crate) const BYTE: i32 = 6;
}

/// The SentencePiece word-boundary mark.
pub(crate) const SPM_SPACE: char = '\u{2581}';

/// The tokenizer metadata of a GGUF file: `tokenizer.ggml.tokens` (each token's text,
/// by id), `scores` (SentencePiece merge priority, 0 where absent), `token_type` (see
/// [`token_type`], normal where absent), `merges` (`"left right"`, highest priority
/// first) and the scalar keys.
#[derive(Debug, Clone)]
pub(crate) struct GgufVocab {
    pub(crate) tokens: Vec<String>,
    pub(crate) scores: Vec<f32>,
    pub(crate) types: Vec<i32>,
    pub(crate) merges: Vec<String>,
    pub(crate) keys: SpecialKeys,
}

/// `tokenizer.ggml.pre`, `tokenizer.ggml.{bos,eos,eot,unknown}_token_id` (each only if
/// in the vocabulary; eot: end of turn) and `tokenizer.ggml.add_{bos,eos}_token`,
/// `add_space_prefix` (SentencePiece; default true), as the file gives them.
#[derive(Debug, Clone)]
pub(crate) struct SpecialKeys {
    pub(crate) pre: Option<String>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) eot: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) add_bos: Option<bool>,
    pub(crate) add_eos: Option<bool>,
    pub(crate) add_space_prefix: Option<bool>,
}

fn strings(md: &HashMap<String, Value>, k: &str, required: bool) -> Result<Vec<String>> {
    let Some(v) = md.get(k) else {
        return if required {
            Err(EngineError::InvalidTokenizer(format!("missing {k}")))
        } else {
            Ok(Vec::new())
        };
    };
    let v = v
        .to_vec()
        .map_err(|_| EngineError::InvalidTokenizer(format!("{k} is not an array")))?;
    v.iter()
        .map(|s| {
            s.to_string()
                .cloned()
                .map_err(|_| EngineError::InvalidTokenizer(format!("{k} holds a non-string")))
        })
        .collect()
}

impl GgufVocab {
    /// Read the `tokenizer.ggml.*` keys (the tokenizer model is checked by the caller).
    pub(crate) fn read(md: &HashMap<String, Value>) -> Result<Self> {
        let m = Metadata::new(md);
        let tokens = strings(md, "tokenizer.ggml.tokens", true)?;
        let n = tokens.len();
        let scores: Vec<f32> = match md.get("tokenizer.ggml.scores").map(Value::to_vec) {
            Some(Ok(v)) => v.iter().map(|s| s.to_f32().unwrap_or(0.0)).collect(),
            _ => Vec::new(),
        };
        let types: Vec<i32> = match md.get("tokenizer.ggml.token_type").map(Value::to_vec) {
            Some(Ok(v)) => v
                .iter()
                .map(|t| t.to_i32().unwrap_or(token_type::NORMAL))
                .collect(),
            _ => Vec::new(),
        };
        let pad = |mut v: Vec<i32>| {
            v.resize(n, token_type::NORMAL);
            v
        };
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        Ok(Self {
            merges: strings(md, "tokenizer.ggml.merges", false)?,
            scores: {
                let mut s = scores;
                s.resize(n, 0.0);
                s
            },
            types: pad(types),
            keys: SpecialKeys {
                pre: m.string("tokenizer.ggml.pre"),
                bos: in_range(m.u32("tokenizer.ggml.bos_token_id")),
                eos: in_range(m.u32("tokenizer.ggml.eos_token_id")),
                eot: in_range(m.u32("tokenizer.ggml.eot_token_id")),
                unk: in_range(m.u32("tokenizer.ggml.unknown_token_id")),
                add_bos: m.bool("tokenizer.ggml.add_bos_token"),
                add_eos: m.bool("tokenizer.ggml.add_eos_token"),
                add_space_prefix: m.bool("tokenizer.ggml.add_space_prefix"),
            },
            tokens,
        })
    }

    /// Whether token `id` is matched in text as a whole (control, unknown, user-defined).
    pub(crate) fn is_special(&self, id: usize) -> bool {
        matches!(
            self.types[id],
            token_type::CONTROL | token_type::UNKNOWN | token_type::USER_DEFINED
        )
    }

    /// Token text -> id; on duplicates the last id wins, as in llama.cpp.
    fn vocab_map(&self) -> Vocab {
        self.tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect()
    }

    /// Register control/unknown tokens as special and user-defined ones as
    /// ordinary added tokens, all matched against the raw text.
    fn add_specials(&self, hf: &mut HfTokenizer) -> Result<()> {
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (i, t) in self.tokens.iter().enumerate() {
            if t.is_empty() {
                continue;
            }
            match self.types[i] {
                token_type::CONTROL | token_type::UNKNOWN => {
                    special.push(AddedToken::from(t.clone(), true).normalized(false))
                }
                token_type::USER_DEFINED => {
                    user.push(AddedToken::from(t.clone(), false).normalized(false))
                }
                _ => {}
            }
        }
        hf.add_special_tokens(special).map_err(hf_err)?;
        hf.add_tokens(user).map_err(hf_err)?;
        Ok(())
    }

    /// SentencePiece (`llama`): the tokenizer and the bytes each token stands for.
    pub(crate) fn build_spm(&self) -> Result<(HfTokenizer, Vec<Vec<u8>>)> {
        let vocab = self.vocab_map();
        // Every split of a piece into two pieces is a merge, ranked by the piece's
        // score (highest first), as SentencePiece merges the best-scoring pair first.
        let mut ranked: Vec<(f32, u32, String, String)> = Vec::new();
        for (id, t) in self.tokens.iter().enumerate() {
            if vocab.get(t) != Some(&(id as u32)) {
                continue;
            }
            for (cut, _) in t.char_indices().skip(1) {
                let (a, b) = t.split_at(cut);
                if vocab.contains_key(a) && vocab.contains_key(b) {
                    ranked.push((self.scores[id], id as u32, a.to_string(), b.to_string()));
                }
            }
        }
        ranked.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        let merges = ranked.into_iter().map(|(_, _, a, b)| (a, b)).collect();
        let unk = self
            .keys
            .unk
            .or(Some(0))
            .filter(|&u| (u as usize) < self.tokens.len());
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true);
        if let Some(u) = unk {
            builder = builder.unk_token(self.tokens[u as usize].clone());
        }
        let bpe = builder.build().map_err(hf_err)?;
        let mut hf = HfTokenizer::new(bpe);
        let space = SPM_SPACE.to_string();
        let replace = Replace::new(" ", space.as_str()).map_err(hf_err)?;
        let normalizer: NormalizerWrapper = if self.keys.add_space_prefix.unwrap_or(true) {
            NormSequence::new(vec![Prepend::new(space.clone()).into(), replace.into()]).into()
        } else {
            replace.into()
        };
        hf.with_normalizer(Some(normalizer)).map_err(hf_err)?;
        self.add_specials(&mut hf)?;
        let pieces = self
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| match self.types[i] {
                token_type::BYTE => byte_token_value(t)
                    .map(|b| vec![b])
                    .unwrap_or_else(|| t.as_bytes().to_vec()),
                token_type::CONTROL | token_type::UNKNOWN | token_type::USER_DEFINED => {
                    t.as_bytes().to_vec()
                }
                _ => t.replace(SPM_SPACE, " ").into_bytes(),
            })
            .collect();
        Ok((hf, pieces))
    }

    /// Byte-level BPE (`gpt2`) with the pre-tokenizer `pre`.
    pub(crate) fn build_bpe(&self, pre: &PreTokenizerSpec) -> Result<(HfTokenizer, Vec<Vec<u8>>)> {
        let vocab = self.vocab_map();
        let merges: Vec<(String, String)> = self
            .merges
            .iter()
            .filter_map(|m| {
                // llama.cpp splits at the first space after the first character.
                let cut = m.char_indices().skip(1).find(|(_, c)| *c == ' ')?.0;
                let (a, b) = (&m[..cut], &m[cut + 1..]);
                let known = vocab.contains_key(a)
                    && vocab.contains_key(b)
                    && vocab.contains_key(&format!("{a}{b}"));
                known.then(|| (a.to_string(), b.to_string()))
            })
            .collect();
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges);
        if let Some(u) = self.keys.unk {
            builder = builder.unk_token(self.tokens[u as usize].clone());
        }
        let bpe = builder.build().map_err(hf_err)?;
        let mut hf = HfTokenizer::new(bpe);
        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(pre.regexes.len() + 1);
        for r in &pre.regexes {
            let split = Split::new(
                SplitPattern::Regex((*r).to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(hf_err)?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());
        hf.with_pre_tokenizer(Some(PreSequence::new(steps)));
        self.add_specials(&mut hf)?;
        let pieces = self
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if self.is_special(i) {
                    t.as_bytes().to_vec()
                } else {
                    byte_level_decode(t)
                }
            })
            .collect();
        Ok((hf, pieces))
    }

    /// The pre-tokenizer of a `gpt2` vocabulary, or the error naming the key.
    pub(crate) fn pre_tokenizer(&self) -> Result<PreTokenizerSpec> {
        PreTokenizerSpec::from_gguf_name(self.keys.pre.as_deref()).ok_or_else(|| {
            EngineError::UnsupportedTokenizer {
                key: "tokenizer.ggml.pre".into(),
                value: self.keys.pre.clone().unwrap_or_default(),
                supported: KNOWN.join(", "),
            }
        })
    }
}

/// The byte of a `<0xXX>` token.
pub(crate) fn byte_token_value(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A Hugging Face `tokenizers` error as an engine error.
pub(crate) fn hf_err(e: tokenizers::Error) -> EngineError {
    EngineError::InvalidTokenizer(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens() {
        assert_eq!(byte_token_value("<0x0A>"), Some(10));
        assert_eq!(byte_token_value("<0xff>"), Some(255));
        assert_eq!(byte_token_value("<0x100>"), None);
        assert_eq!(byte_token_value("0x0A"), None);
    }
}
