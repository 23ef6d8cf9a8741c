//! The prompt rules of every surface, each in one place: a prompt in any shape
//! llama-server takes ([`PromptValue`]: a string, a list of token ids, or a mixed list)
//! as tokens, and the one check of a prompt's tokens before it reaches the queue
//! ([`check`]: not empty, in the vocabulary, and within a slot's context, with room for
//! one generated token when the request generates).

use serde::Deserialize;

use crate::api_error::{ApiError, ErrorKind};
use crate::progress::segment::Shared;
use hydra_engine_core::tokenizer::Tokenizer;

/// A prompt as llama-server takes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PromptValue {
    /// Text, tokenized by the model's tokenizer.
    Text(String),
    /// Token ids and texts, in order: each text tokenized on its own (the first with the
    /// BOS token when it opens the prompt), each id used as given.
    Pieces(Vec<PromptPiece>),
}

/// One element of a mixed prompt list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PromptPiece {
    /// A token id.
    Id(u32),
    /// Text.
    Text(String),
}

impl PromptValue {
    /// The prompt's tokens; `add_bos` applies to a text that opens it, as llama-server's
    /// mixed prompts do. The ids are checked later ([`check`]).
    pub fn tokens(&self, tok: &Tokenizer, add_bos: bool) -> Result<Vec<u32>, ApiError> {
        match self {
            Self::Text(text) => tok.try_encode(text, add_bos).map_err(ApiError::report),
            Self::Pieces(pieces) => {
                let mut tokens = Vec::new();
                for (i, piece) in pieces.iter().enumerate() {
                    match piece {
                        PromptPiece::Id(id) => tokens.push(*id),
                        PromptPiece::Text(text) => tokens.extend(
                            tok.try_encode(text, add_bos && i == 0)
                                .map_err(ApiError::report)?,
                        ),
                    }
                }
                Ok(tokens)
            }
        }
    }
}

/// What a request does with its prompt, which decides how much of a slot it may fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Evaluate it only (`/slots/{id}/prefill`): it may fill the slot.
    Prefill,
    /// Generate after it: it must leave room for one generated token.
    Generate,
}

/// The one check of a prompt's tokens: at least one, each in the vocabulary, and within
/// a slot's context for `purpose`. The error names the field `prompt`.
pub fn check(shared: &Shared, tokens: &[u32], purpose: Purpose) -> Result<(), ApiError> {
    if tokens.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt has no tokens"));
    }
    shared
        .tokenizer
        .check_ids(tokens)
        .map_err(|e| ApiError::report(e).at("prompt"))?;
    let (n, n_ctx) = (tokens.len(), shared.n_ctx);
    let message = match purpose {
        Purpose::Prefill if n > n_ctx => {
            format!("the prompt has {n} tokens but a slot holds at most {n_ctx}")
        }
        Purpose::Generate if n >= n_ctx => format!(
            "the prompt has {n} tokens but this model's context holds {n_ctx} (prompt and \
             completion together); shorten the prompt"
        ),
        _ => return Ok(()),
    };
    Err(ApiError::new(ErrorKind::ContextOverflow, message).at("prompt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_a_string_a_list_of_ids_or_a_mixed_list() {
        let parse = |s: &str| serde_json::from_str::<PromptValue>(s).unwrap();
        assert_eq!(parse(r#""hi""#), PromptValue::Text("hi".into()));
        assert_eq!(
            parse("[1, 2]"),
            PromptValue::Pieces(vec![PromptPiece::Id(1), PromptPiece::Id(2)])
        );
        assert_eq!(
            parse(r#"[7, "a b", 9]"#),
            PromptValue::Pieces(vec![
                PromptPiece::Id(7),
                PromptPiece::Text("a b".into()),
                PromptPiece::Id(9)
            ])
        );
        assert!(serde_json::from_str::<PromptValue>("[-1]").is_err());
        assert!(serde_json::from_str::<PromptValue>("{}").is_err());
    }

    #[test]
    fn a_mixed_prompt_adds_bos_only_before_an_opening_text() {
        let tok = hydra_engine_core::Model::builtin()
            .unwrap()
            .tokenizer()
            .clone();
        let text = tok.encode("hello", false);
        let with_bos = tok.encode("hello", true);
        let ids = |v: &PromptValue| v.tokens(&tok, true).unwrap();
        let opening =
            PromptValue::Pieces(vec![PromptPiece::Text("hello".into()), PromptPiece::Id(5)]);
        let mut want = with_bos.clone();
        want.push(5);
        assert_eq!(ids(&opening), want);
        let inner =
            PromptValue::Pieces(vec![PromptPiece::Id(5), PromptPiece::Text("hello".into())]);
        let mut want = vec![5];
        want.extend(&text);
        assert_eq!(ids(&inner), want);
    }
}
