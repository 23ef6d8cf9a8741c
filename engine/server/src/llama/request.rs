//! Request bodies of the generation endpoints, and their validation into the task specs:
//! bad input is refused here, before it reaches the queue.

use crate::api_error::ApiError;
use crate::progress::segment::Shared;
use crate::prompt::{self, PromptValue, Purpose};
use crate::task::{DecodeSpec, PrefillSpec};
use hydra_engine_core::sampling::SamplerConfig;
use serde::Deserialize;

/// A prompt as text, token ids or both mixed (`prompt`), or as token ids (`tokens`).
#[derive(Deserialize, Default)]
pub struct PromptFields {
    /// The prompt in any shape llama-server takes.
    pub prompt: Option<PromptValue>,
    /// Token ids.
    pub tokens: Option<Vec<u32>>,
    /// Put the BOS token first (default: the model's choice).
    pub add_bos: Option<bool>,
}

/// Body of `POST /slots/{id}/prefill`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillRequest {
    /// The prompt in any shape llama-server takes.
    pub prompt: Option<PromptValue>,
    /// Token ids.
    pub tokens: Option<Vec<u32>>,
    /// Put the BOS token first.
    pub add_bos: Option<bool>,
}

impl From<PrefillRequest> for PromptFields {
    fn from(r: PrefillRequest) -> Self {
        Self {
            prompt: r.prompt,
            tokens: r.tokens,
            add_bos: r.add_bos,
        }
    }
}

/// Sampling fields shared by decode and completion.
#[derive(Deserialize)]
pub struct SamplingFields {
    /// Most tokens to generate.
    #[serde(default = "default_n_predict")]
    pub n_predict: usize,
    /// Temperature (0: greedy).
    #[serde(default)]
    pub temperature: f32,
    /// Top-k (0: off).
    #[serde(default)]
    pub top_k: usize,
    /// Top-p.
    #[serde(default = "one")]
    pub top_p: f32,
    /// Sampling seed.
    #[serde(default)]
    pub seed: u64,
    /// llama.cpp's name for "keep going past EOS" is `ignore_eos`.
    #[serde(default)]
    pub ignore_eos: bool,
}

fn default_n_predict() -> usize {
    128
}

fn one() -> f32 {
    1.0
}

/// Body of `POST /slots/{id}/decode`.
#[derive(Deserialize)]
pub struct DecodeRequest {
    /// Sampling.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// Body of `POST /completion` (llama.cpp's; the fields this engine reads).
#[derive(Deserialize)]
pub struct CompletionRequest {
    /// Prompt.
    #[serde(flatten)]
    pub prompt: PromptFields,
    /// Sampling.
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// llama.cpp's slot selector; absent or -1: the best idle slot.
    pub id_slot: Option<i64>,
    /// Send each token as a server-sent event as it is sampled.
    #[serde(default)]
    pub stream: bool,
    /// While streaming, send `prompt_progress` events as the prompt is evaluated.
    #[serde(default)]
    pub return_progress: bool,
    /// Reuse the prefix of the prompt the slot already holds.
    #[serde(default = "yes")]
    pub cache_prompt: bool,
    /// Stop strings.
    #[serde(default)]
    pub stop: Vec<String>,
}

fn yes() -> bool {
    true
}

impl PromptFields {
    /// The prompt's tokens, checked for `purpose` ([`prompt::check`]).
    pub fn into_spec(self, shared: &Shared, purpose: Purpose) -> Result<PrefillSpec, ApiError> {
        let tok = &shared.tokenizer;
        let tokens = match (self.prompt, self.tokens) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "give either \"prompt\" or \"tokens\", not both",
                ))
            }
            (None, None) => {
                return Err(ApiError::bad_request(
                    "missing \"prompt\" (text) or \"tokens\" (ids)",
                ))
            }
            (Some(p), None) => p.tokens(
                tok,
                self.add_bos.unwrap_or_else(|| tok.add_bos_by_default()),
            )?,
            (None, Some(ids)) => ids,
        };
        prompt::check(shared, &tokens, purpose)?;
        Ok(PrefillSpec { tokens })
    }
}

impl SamplingFields {
    /// The generation settings, with the sampler validated so a bad request never reaches
    /// the queue.
    pub fn spec(&self, shared: &Shared) -> Result<DecodeSpec, ApiError> {
        if self.n_predict == 0 {
            return Err(ApiError::bad_request("n_predict must be at least 1"));
        }
        let sampler = SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        };
        hydra_engine_core::sampling::Sampler::new(sampler).map_err(ApiError::report)?;
        Ok(DecodeSpec {
            n_predict: self.n_predict.min(shared.n_ctx),
            sampler,
            stop_at_eos: !self.ignore_eos,
        })
    }
}
