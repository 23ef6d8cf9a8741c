//! The bodies of `POST /v1/chat/completions` and `POST /v1/completions`, parsed and
//! checked before anything reaches the compute thread. Every refusal is a 400 in OpenAI's
//! shape naming the field at fault: malformed JSON, a field of the wrong type (the path
//! comes from `serde_path_to_error`), empty `messages`, an unknown role, `n` other than
//! 1, `max_tokens` below 1, a temperature or `top_p` out of range, `top_logprobs` without
//! `logprobs`. Fields OpenAI defines that change nothing here (`user`, `metadata`...)
//! are accepted and ignored, as llama-server does; penalties other than 0 are refused,
//! since the engine does not apply them.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;

use super::error::OpenAiError;
use crate::api_error::{ApiError, ErrorKind};
use crate::chat_template::{Message, Role};
use crate::serving::AppState;
use hydra_engine_core::sampling::SamplerConfig;

/// Most stop strings a request may give.
pub const MAX_STOP: usize = 16;
/// Most alternatives `top_logprobs` may ask for (OpenAI's bound).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most alternatives the legacy completions' integer `logprobs` may ask for (OpenAI's bound).
pub const MAX_COMPLETION_LOGPROBS: usize = 5;
/// `max_tokens` of a completion that gives none (OpenAI's legacy default).
pub const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;

/// Generation settings common to both endpoints, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// Most tokens to generate (None: until the context is full).
    pub max_tokens: Option<usize>,
    /// Sampling: temperature (default 1, OpenAI's), `top_p`, `top_k`, seed.
    pub sampler: SamplerConfig,
    /// Stop strings, matched across tokens and never returned.
    pub stop: Vec<String>,
    /// Stream as server-sent events.
    pub stream: bool,
    /// With `stream`: a last chunk with the usage (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Log-probabilities of the sampled tokens, with this many alternatives each.
    pub logprobs: Option<usize>,
    /// The slot to run on (llama.cpp's `id_slot`; None: the engine chooses).
    pub id_slot: Option<usize>,
    /// With `stream`: prompt progress events while the prompt is evaluated
    /// (llama.cpp's `return_progress`).
    pub return_progress: bool,
    /// Reuse the slot's cached prefix of the prompt (llama.cpp's `cache_prompt`, default on).
    pub cache_prompt: bool,
    /// Generate past the end-of-text token (llama.cpp's `ignore_eos`).
    pub ignore_eos: bool,
}

/// A checked chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model the client named (any name is served by the one model).
    pub model: Option<String>,
    /// The conversation, content as text.
    pub messages: Vec<Message>,
    /// Generation settings.
    pub params: GenerationParams,
}

/// A completion's prompt: text, or token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text, tokenized by the engine.
    Text(String),
    /// Token ids, used as given.
    Tokens(Vec<u32>),
}

/// A checked completion request.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The model the client named.
    pub model: Option<String>,
    /// The prompt.
    pub prompt: PromptInput,
    /// Put the prompt in front of the generated text.
    pub echo: bool,
    /// Generation settings.
    pub params: GenerationParams,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The fields both endpoints share, as sent.
#[derive(Deserialize)]
struct RawParams {
    model: Option<String>,
    max_tokens: Option<i64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    seed: Option<i64>,
    stop: Option<Value>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<i64>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    id_slot: Option<i64>,
    return_progress: Option<bool>,
    cache_prompt: Option<bool>,
    ignore_eos: Option<bool>,
}

#[derive(Deserialize)]
struct RawChat {
    messages: Vec<RawMessage>,
    max_completion_tokens: Option<i64>,
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
}

#[derive(Deserialize)]
struct RawMessage {
    role: Role,
    #[serde(default)]
    content: Value,
}

#[derive(Deserialize)]
struct RawCompletion {
    prompt: Value,
    echo: Option<bool>,
    logprobs: Option<i64>,
}

/// `body` as a JSON object.
fn parse(body: &[u8]) -> Result<Value, OpenAiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| OpenAiError::invalid(None, format!("the body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(OpenAiError::invalid(None, "the body must be a JSON object"));
    }
    Ok(value)
}

/// The fields of `value` that `T` reads; a failure names the field at fault.
fn fields<T: DeserializeOwned>(value: &Value) -> Result<T, OpenAiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let param = (path != ".").then_some(path);
        let message = match &param {
            Some(p) => format!("{p}: {}", e.inner()),
            None => e.inner().to_string(),
        };
        OpenAiError::invalid(param.as_deref(), message)
    })
}

/// A `/v1` request body, read and parsed by the surface's own parser ([`ParseBody`]):
/// the extractor whose rejection is OpenAI's error.
#[derive(Debug)]
pub struct Body<T>(pub T);

/// A request the `/v1` surface parses from its body's bytes.
pub trait ParseBody: Sized {
    /// The request, or a 400 naming the field at fault.
    fn parse(body: &[u8]) -> Result<Self, OpenAiError>;
}

impl<T: ParseBody> FromRequest<AppState> for Body<T> {
    type Rejection = OpenAiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, OpenAiError> {
        let bytes = Bytes::from_request(req, s).await.map_err(|r| {
            // axum's words for a body it could not read, as OpenAI's servers give theirs.
            let kind = if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ErrorKind::PayloadTooLarge
            } else {
                ErrorKind::InvalidRequest
            };
            OpenAiError::from(ApiError::new(kind, r.body_text()))
        })?;
        T::parse(&bytes).map(Self)
    }
}

impl ParseBody for ChatRequest {
    /// Parses and checks a chat request body.
    fn parse(body: &[u8]) -> Result<Self, OpenAiError> {
        let value = parse(body)?;
        let raw: RawChat = fields(&value)?;
        let params: RawParams = fields(&value)?;
        if raw.messages.is_empty() {
            return Err(OpenAiError::invalid(
                Some("messages"),
                "messages must hold at least one message",
            ));
        }
        let messages = raw
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                Ok(Message {
                    role: m.role,
                    content: content_text(&m.content, i)?,
                })
            })
            .collect::<Result<Vec<_>, OpenAiError>>()?;
        let max_tokens = match (raw.max_completion_tokens, params.max_tokens) {
            (Some(n), _) => Some(("max_completion_tokens", n)),
            (None, Some(n)) => Some(("max_tokens", n)),
            (None, None) => None,
        };
        let top = match (raw.logprobs.unwrap_or(false), raw.top_logprobs) {
            (_, Some(n)) if n < 0 || n as usize > MAX_TOP_LOGPROBS => {
                return Err(OpenAiError::invalid(
                    Some("top_logprobs"),
                    format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, not {n}"),
                ))
            }
            (false, Some(_)) => {
                return Err(OpenAiError::invalid(
                    Some("top_logprobs"),
                    "top_logprobs needs \"logprobs\": true",
                ))
            }
            (true, n) => Some(n.unwrap_or(0) as usize),
            (false, None) => None,
        };
        Ok(Self {
            model: params.model.clone(),
            messages,
            params: params.check(max_tokens, None, top)?,
        })
    }
}

impl ParseBody for CompletionRequest {
    /// Parses and checks a completion request body.
    fn parse(body: &[u8]) -> Result<Self, OpenAiError> {
        let value = parse(body)?;
        let raw: RawCompletion = fields(&value)?;
        let params: RawParams = fields(&value)?;
        let prompt = prompt_input(&raw.prompt)?;
        let top = match raw.logprobs {
            None => None,
            Some(n) if (0..=MAX_COMPLETION_LOGPROBS as i64).contains(&n) => Some(n as usize),
            Some(n) => {
                return Err(OpenAiError::invalid(
                    Some("logprobs"),
                    format!("logprobs must be between 0 and {MAX_COMPLETION_LOGPROBS}, not {n}"),
                ))
            }
        };
        let max_tokens = params.max_tokens.map(|n| ("max_tokens", n));
        Ok(Self {
            model: params.model.clone(),
            prompt,
            echo: raw.echo.unwrap_or(false),
            params: params.check(max_tokens, Some(COMPLETION_DEFAULT_MAX_TOKENS), top)?,
        })
    }
}

impl RawParams {
    /// The checked settings: each field in its range ([`RawParams::sampler`],
    /// [`checked_max_tokens`]), the unsupported ones refused.
    fn check(
        self,
        max_tokens: Option<(&str, i64)>,
        default_max_tokens: Option<usize>,
        logprobs: Option<usize>,
    ) -> Result<GenerationParams, OpenAiError> {
        if let Some(n) = self.n.filter(|&n| n != 1) {
            return Err(OpenAiError::invalid(
                Some("n"),
                format!("n must be 1 (one choice per request), not {n}"),
            ));
        }
        let max_tokens = checked_max_tokens(max_tokens, default_max_tokens)?;
        let sampler = self.sampler()?;
        for (field, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if let Some(v) = v.filter(|&v| v != 0.0) {
                return Err(OpenAiError::invalid(
                    Some(field),
                    format!("{field} is not supported by this engine (only 0), not {v}"),
                ));
            }
        }
        let id_slot = crate::serving::requested_slot(self.id_slot)?;
        let stream = self.stream.unwrap_or(false);
        Ok(GenerationParams {
            max_tokens,
            sampler,
            stop: stop_strings(self.stop.as_ref())?,
            stream,
            include_usage: stream
                && self
                    .stream_options
                    .and_then(|o| o.include_usage)
                    .unwrap_or(false),
            logprobs,
            id_slot,
            return_progress: stream && self.return_progress.unwrap_or(false),
            cache_prompt: self.cache_prompt.unwrap_or(true),
            ignore_eos: self.ignore_eos.unwrap_or(false),
        })
    }

    /// The sampler's settings, each in its range.
    fn sampler(&self) -> Result<SamplerConfig, OpenAiError> {
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(OpenAiError::invalid(
                Some("temperature"),
                format!("temperature must be between 0 and 2, not {temperature}"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(OpenAiError::invalid(
                Some("top_p"),
                format!("top_p must be in (0, 1], not {top_p}"),
            ));
        }
        let top_k = match self.top_k {
            None => 0,
            Some(k) if k >= 0 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => {
                return Err(OpenAiError::invalid(
                    Some("top_k"),
                    format!("top_k must be 0 (off) or more, not {k}"),
                ))
            }
        };
        Ok(SamplerConfig {
            temperature,
            top_k,
            top_p,
            // Any integer is a seed; the same seed gives the same tokens.
            seed: self.seed.map_or_else(fresh_seed, |s| s as u64),
        })
    }
}

/// The most tokens to generate: `max_tokens` (the field's name, its value) when given,
/// at least 1, else the endpoint's default.
fn checked_max_tokens(
    max_tokens: Option<(&str, i64)>,
    default: Option<usize>,
) -> Result<Option<usize>, OpenAiError> {
    match max_tokens {
        Some((field, n)) if n < 1 => Err(OpenAiError::invalid(
            Some(field),
            format!("{field} must be at least 1, not {n}"),
        )),
        Some((_, n)) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        None => Ok(default),
    }
}

/// A seed for a request that gives none: differs from request to request.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A message's content as text: a string, or an array of `{"type":"text","text":...}`
/// parts (joined); `null` is empty (an assistant turn that only called tools).
fn content_text(content: &Value, i: usize) -> Result<String, OpenAiError> {
    let param = format!("messages[{i}].content");
    let bad = |what: &str| OpenAiError::invalid(Some(&param), format!("{param}: {what}"));
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    (Some("text"), _) => return Err(bad("a text part needs a string \"text\"")),
                    (Some(other), _) => {
                        return Err(bad(&format!(
                            "content parts of type {other:?} are not supported (only \"text\")"
                        )))
                    }
                    (None, _) => return Err(bad("each content part needs a \"type\"")),
                }
            }
            Ok(text)
        }
        other => Err(bad(&format!(
            "expected a string or an array of text parts, not {}",
            kind(other)
        ))),
    }
}

/// `stop`: absent, null, a string, or an array of at most [`MAX_STOP`] strings.
fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, OpenAiError> {
    let bad = |m: String| OpenAiError::invalid(Some("stop"), m);
    match stop {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => {
            if items.len() > MAX_STOP {
                return Err(bad(format!(
                    "stop may hold at most {MAX_STOP} strings, not {}",
                    items.len()
                )));
            }
            items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(bad(format!("stop: expected strings, not {}", kind(other)))),
                })
                .collect()
        }
        Some(other) => Err(bad(format!(
            "stop: expected a string or an array of strings, not {}",
            kind(other)
        ))),
    }
}

/// A completion's `prompt`: a string, an array of one string, or an array of token ids.
fn prompt_input(prompt: &Value) -> Result<PromptInput, OpenAiError> {
    let bad = |m: String| OpenAiError::invalid(Some("prompt"), m);
    match prompt {
        Value::String(s) => Ok(PromptInput::Text(s.clone())),
        Value::Array(items) => match items.as_slice() {
            [] => Err(bad("prompt is empty".into())),
            [Value::String(s)] => Ok(PromptInput::Text(s.clone())),
            [Value::String(_), ..] => Err(bad(
                "several prompts in one request are not supported (send one per request)".into(),
            )),
            ids => ids
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            bad(format!("prompt: expected token ids, found {}", kind(v)))
                        })
                })
                .collect::<Result<Vec<u32>, _>>()
                .map(PromptInput::Tokens),
        },
        Value::Null => Err(bad("prompt is required".into())),
        other => Err(bad(format!(
            "prompt: expected a string or an array of token ids, not {}",
            kind(other)
        ))),
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<ChatRequest, OpenAiError> {
        ChatRequest::parse(body.as_bytes())
    }

    fn refused(body: &str) -> OpenAiError {
        let e = chat(body).expect_err(body);
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{body}");
        e
    }

    #[test]
    fn a_full_chat_request() {
        let r = chat(
            r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},
                {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}],
                "max_tokens":8,"temperature":0,"top_p":0.5,"seed":-3,"stop":["\n","END"],
                "stream":true,"stream_options":{"include_usage":true},"logprobs":true,
                "top_logprobs":2,"n":1,"user":"x","id_slot":1,"return_progress":true}"#,
        )
        .unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        assert_eq!(r.messages[1].content, "Hi there");
        assert_eq!(r.messages[1].role, Role::User);
        let p = &r.params;
        assert_eq!(p.max_tokens, Some(8));
        assert_eq!(p.sampler.temperature, 0.0);
        assert_eq!(p.sampler.top_p, 0.5);
        assert_eq!(p.sampler.seed, (-3i64) as u64);
        assert_eq!(p.stop, vec!["\n".to_string(), "END".to_string()]);
        assert!(p.stream && p.include_usage && p.return_progress && p.cache_prompt);
        assert_eq!(p.logprobs, Some(2));
        assert_eq!(p.id_slot, Some(1));
    }

    #[test]
    fn defaults() {
        let r = chat(r#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        let p = r.params;
        assert_eq!(p.max_tokens, None);
        assert_eq!(p.sampler.temperature, 1.0);
        assert!(p.stop.is_empty() && !p.stream && !p.include_usage && p.logprobs.is_none());
        // include_usage and return_progress only mean something when streaming.
        let r = chat(
            r#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true},"return_progress":true}"#,
        )
        .unwrap();
        assert!(!r.params.include_usage && !r.params.return_progress);
        let r = chat(r#"{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,"max_tokens":9}"#).unwrap();
        assert_eq!(r.params.max_tokens, Some(3), "max_completion_tokens wins");
    }

    #[test]
    fn bad_chat_requests_are_400_naming_the_field() {
        // Each a valid one-message request with one field added or changed.
        let with_field: &[(&str, &str, &str)] = &[
            (r#""n":2"#, "n", "n must be 1"),
            (r#""max_tokens":-1"#, "max_tokens", "at least 1"),
            (r#""max_tokens":"ten""#, "max_tokens", "invalid type"),
            (r#""temperature":3"#, "temperature", "between 0 and 2"),
            (r#""top_p":0"#, "top_p", "(0, 1]"),
            (r#""top_logprobs":2"#, "top_logprobs", "logprobs"),
            (r#""logprobs":true,"top_logprobs":21"#, "top_logprobs", "20"),
            (r#""stop":[1]"#, "stop", "strings"),
            (r#""stream":"yes""#, "stream", "invalid type"),
            (
                r#""presence_penalty":1"#,
                "presence_penalty",
                "not supported",
            ),
        ];
        let with_field = with_field.iter().map(|&(field, param, needle)| {
            let body = format!(r#"{{"messages":[{{"role":"user","content":"x"}}],{field}}}"#);
            (body, Some(param), needle)
        });
        let cases: &[(&str, Option<&str>, &str)] = &[
            (r#"{"messages":[]}"#, Some("messages"), "at least one"),
            (
                r#"{"messages":[{"role":"wizard","content":"x"}]}"#,
                Some("messages[0].role"),
                "wizard",
            ),
            (r#"{"messages":"hi"}"#, Some("messages"), "invalid type"),
            (
                r#"{"messages":[{"role":"user","content":5}]}"#,
                Some("messages[0].content"),
                "a number",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                Some("messages[0].content"),
                "image_url",
            ),
            (r#"{"model":"m"}"#, None, "messages"),
            (r#"[1,2]"#, None, "object"),
            (r#"{"messages":"#, None, "not valid JSON"),
        ];
        let cases = cases
            .iter()
            .map(|&(body, param, needle)| (body.to_string(), param, needle))
            .chain(with_field);
        for (body, param, needle) in cases {
            let e = refused(&body);
            assert_eq!(e.param(), param, "{body}: {e}");
            assert!(e.0.message.contains(needle), "{body}: {e}");
            assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        }
    }

    #[test]
    fn completion_prompts_and_logprobs() {
        let r = CompletionRequest::parse(br#"{"prompt":"Once","logprobs":2,"echo":true}"#).unwrap();
        assert_eq!(r.prompt, PromptInput::Text("Once".into()));
        assert_eq!(r.params.logprobs, Some(2));
        assert_eq!(r.params.max_tokens, Some(COMPLETION_DEFAULT_MAX_TOKENS));
        assert!(r.echo);
        let r = CompletionRequest::parse(br#"{"prompt":[1,2,3],"max_tokens":4}"#).unwrap();
        assert_eq!(r.prompt, PromptInput::Tokens(vec![1, 2, 3]));
        let r = CompletionRequest::parse(br#"{"prompt":["one"]}"#).unwrap();
        assert_eq!(r.prompt, PromptInput::Text("one".into()));
        for body in [
            r#"{"prompt":["a","b"]}"#,
            r#"{"prompt":[]}"#,
            r#"{"prompt":[1,-2]}"#,
            r#"{"prompt":7}"#,
            r#"{"prompt":"x","logprobs":6}"#,
            r#"{"prompt":"x","max_tokens":0}"#,
            r#"{"max_tokens":3}"#,
        ] {
            let e = CompletionRequest::parse(body.as_bytes()).expect_err(body);
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{body}");
        }
    }
}
