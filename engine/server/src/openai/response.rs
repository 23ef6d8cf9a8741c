//! What the OpenAI-compatible endpoints answer, as serde types in OpenAI's shapes:
//! `chat.completion`, `chat.completion.chunk`, `text_completion` (whole and streamed),
//! the model list, usage, log-probabilities, and llama.cpp's `prompt_progress`.

use crate::stream::prompt_progress::PromptProgress;
use hydra_engine_core::sampling::StopReason;
use serde::Serialize;
use std::collections::BTreeMap;

/// Token counts of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
    /// Of the prompt, how much the slot's cache already held.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// Part of [`Usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the slot's cache.
    pub cached_tokens: usize,
}

impl Usage {
    /// Usage of a request with `prompt` prompt tokens (`cached` of them reused) and
    /// `completion` generated.
    pub fn new(prompt: usize, cached: usize, completion: usize) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: cached,
            },
        }
    }
}

/// Why a generation stopped, in OpenAI's words (`finish_reason`; and this engine's own
/// `cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The end-of-generation token, or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// Cancelled, or the client went away.
    Cancelled,
}

impl From<StopReason> for FinishReason {
    fn from(r: StopReason) -> Self {
        match r {
            StopReason::Eos | StopReason::StopWord => Self::Stop,
            StopReason::Length | StopReason::ContextFull => Self::Length,
            StopReason::Cancelled => Self::Cancelled,
        }
    }
}

/// One alternative token and its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its bytes (a token may be part of a character).
    pub bytes: Vec<u8>,
}

/// A chat token's log-probability, with the alternatives at its position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The most likely tokens at this position.
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[].logprobs` of a chat answer or chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<ChatTokenLogprob>,
}

/// `choices[].logprobs` of a legacy completion: parallel lists.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct CompletionLogprobs {
    /// Each token's text.
    pub tokens: Vec<String>,
    /// Each token's log-probability.
    pub token_logprobs: Vec<f32>,
    /// Each position's best alternatives, text to log-probability.
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    /// Where each token starts in the choice's text, in bytes.
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// Adds one token starting at `offset` in the text.
    pub fn push(&mut self, t: &ChatTokenLogprob, offset: usize) {
        self.tokens.push(t.token.clone());
        self.token_logprobs.push(t.logprob);
        self.top_logprobs.push(
            t.top_logprobs
                .iter()
                .map(|a| (a.token.clone(), a.logprob))
                .collect(),
        );
        self.text_offset.push(offset);
    }
}

/// The assistant's message in a chat answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The answer.
    pub content: String,
}

/// One choice of a chat answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatChoice {
    /// Always 0 (`n` is 1).
    pub index: u32,
    /// The answer.
    pub message: AssistantMessage,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `cancelled`.
    pub finish_reason: FinishReason,
}

/// `POST /v1/chat/completions` without streaming.
pub type ChatCompletion = Answer<ChatChoice>;

/// The change a chat chunk carries.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Delta {
    /// `assistant` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a chat chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: u32,
    /// What changed.
    pub delta: Delta,
    /// Log-probabilities of this chunk's tokens, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Set in the last chunk with a choice.
    pub finish_reason: Option<FinishReason>,
}

/// One event of a streamed chat answer.
pub type ChatChunk = Answer<ChunkChoice>;

/// One choice of a legacy completion (whole or chunk).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompletionChoice {
    /// The text (of this chunk, when streamed).
    pub text: String,
    /// Always 0.
    pub index: u32,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// Set at the end.
    pub finish_reason: Option<FinishReason>,
}

/// `POST /v1/completions`, whole or one streamed event.
pub type Completion = Answer<CompletionChoice>;

/// A legacy completion (whole or one streamed event), a whole chat answer or a chat chunk:
/// the same envelope around the endpoint's kind of choice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer<C> {
    /// `cmpl-...` or `chatcmpl-...`; the same id in every chunk of an answer.
    pub id: String,
    /// `text_completion`, `chat.completion` or `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model's id.
    pub model: String,
    /// The engine build.
    pub system_fingerprint: String,
    /// Zero choices (the usage chunk) or one.
    pub choices: Vec<C>,
    /// Token counts (whole answers; streamed: with `include_usage`, null in every chunk
    /// but the last, which has no choices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    /// With `return_progress`, while the prompt is evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_progress: Option<PromptProgress>,
}

/// One model of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelCard {
    /// The id clients name it by.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds the engine started serving it.
    pub created: u64,
    /// Who serves it.
    pub owned_by: &'static str,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The one model.
    pub data: Vec<ModelCard>,
}

/// Unix time now, seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh answer id: `prefix` and a number no other answer of this process has.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    format!(
        "{prefix}-{start:x}{:04x}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The engine build every answer names (`system_fingerprint`).
pub fn system_fingerprint() -> String {
    format!("hydra-engine-{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunk_shapes() {
        let c = ChatChunk {
            id: "chatcmpl-1".into(),
            object: "chat.completion.chunk",
            created: 7,
            model: "m".into(),
            system_fingerprint: "f".into(),
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta {
                    role: Some("assistant"),
                    content: Some("Hi".into()),
                },
                logprobs: None,
                finish_reason: None,
            }],
            usage: Some(None),
            prompt_progress: None,
        };
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m",
                   "system_fingerprint":"f","usage":null,
                   "choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},
                               "logprobs":null,"finish_reason":null}]})
        );
        let u = Usage::new(5, 1, 3);
        assert_eq!(
            serde_json::to_value(u).unwrap(),
            json!({"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,
                   "prompt_tokens_details":{"cached_tokens":1}})
        );
    }

    #[test]
    fn completion_logprobs_are_parallel_lists() {
        let mut l = CompletionLogprobs::default();
        let t = ChatTokenLogprob {
            token: " Paris".into(),
            logprob: -0.5,
            bytes: b" Paris".to_vec(),
            top_logprobs: vec![TopLogprob {
                token: " Paris".into(),
                logprob: -0.5,
                bytes: b" Paris".to_vec(),
            }],
        };
        l.push(&t, 0);
        l.push(&t, 6);
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            json!({"tokens":[" Paris"," Paris"],"token_logprobs":[-0.5,-0.5],
                   "top_logprobs":[{" Paris":-0.5},{" Paris":-0.5}],"text_offset":[0,6]})
        );
    }
}
