//! The `/v1` routes: `GET /v1/models`, `POST /v1/chat/completions`,
//! `POST /v1/completions`; whole answers, or server-sent events ending with
//! `data: [DONE]`. Every error is in OpenAI's shape.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::error::OpenAiError;
use super::request::{ChatRequest, CompletionRequest, GenerationParams, PromptInput};
use super::response::{
    new_id, system_fingerprint, Answer, AssistantMessage, ChatChoice, ChatCompletion, ChatLogprobs,
    ChunkChoice, Completion, CompletionChoice, CompletionLogprobs, Delta, ModelCard, ModelList,
    PromptProgress, Usage,
};
use super::sse;
use crate::server::api_error::ApiError;
use crate::server::serving::{chat_logprob, collect, stream, Running, Serving, StreamFormat};
use crate::server::task::generate::{GenSummary, GenerateSpec, TokenOut};
use crate::server::task::DecodeSpec;
use crate::server::task_error::TaskError;
use crate::tokenizer::Tokenizer;

/// The `/v1` routes over `serving`.
pub fn router(serving: Arc<Serving>) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/{*rest}", get(not_found).post(not_found))
        .with_state(serving)
}

async fn not_found(uri: axum::http::Uri) -> OpenAiError {
    OpenAiError::not_found(format!("no route for {}", uri.path()))
}

async fn models(State(s): State<Arc<Serving>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: s.model_id.clone(),
            object: "model",
            created: s.created,
            owned_by: "hydra-progress",
        }],
    })
}

/// The body, or why it could not be read.
fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, OpenAiError> {
    body.map_err(|r| {
        let mut e = OpenAiError::invalid(None, r.body_text());
        e.status = r.status();
        e
    })
}

/// A task's failure as an OpenAI error (through the engine's one client classification).
pub fn task_error(e: TaskError) -> OpenAiError {
    let api = ApiError::from(e);
    let message = api.to_string();
    match api.status() {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY | StatusCode::CONFLICT => {
            OpenAiError::invalid(None, message)
        }
        StatusCode::NOT_FOUND => OpenAiError::invalid(Some("id_slot"), message),
        StatusCode::SERVICE_UNAVAILABLE => OpenAiError::unavailable(message, api.code()),
        _ => OpenAiError::internal(),
    }
}

/// The generation of `tokens` with `params`: refused when the prompt leaves no room in a
/// slot's context; `max_tokens` beyond the room left ends as `length` when it is full.
pub fn generation_spec(
    s: &Serving,
    tokens: Vec<u32>,
    params: &GenerationParams,
) -> Result<GenerateSpec, OpenAiError> {
    let n_ctx = s.shared.n_ctx;
    if tokens.is_empty() {
        return Err(OpenAiError::invalid(
            Some("prompt"),
            "the prompt has no tokens",
        ));
    }
    if tokens.len() >= n_ctx {
        return Err(OpenAiError::context_length(tokens.len(), n_ctx));
    }
    s.shared
        .tokenizer
        .check_ids(&tokens)
        .map_err(|e| OpenAiError::invalid(Some("prompt"), e.to_string()))?;
    let room = n_ctx - tokens.len();
    Ok(GenerateSpec {
        tokens,
        cache_prompt: params.cache_prompt,
        decode: DecodeSpec {
            n_predict: params.max_tokens.unwrap_or(room).min(room),
            sampler: params.sampler,
            stop_at_eos: !params.ignore_eos,
        },
        stop: params.stop.clone(),
        logprobs: params.logprobs,
    })
}

/// A rendered chat prompt as tokens: special tokens written by the template are
/// recognised, BOS added as the vocabulary asks, but never twice.
fn chat_tokens(tok: &Tokenizer, text: &str) -> Result<Vec<u32>, OpenAiError> {
    let mut tokens = tok.tokenize(text, true, true).map_err(|e| {
        tracing::error!("tokenizing a chat prompt: {e}");
        OpenAiError::internal()
    })?;
    if let (Some(bos), [a, b, ..]) = (tok.bos_token(), tokens.as_slice()) {
        if *a == bos && *b == bos {
            tokens.remove(0);
        }
    }
    Ok(tokens)
}

async fn chat(State(s): State<Arc<Serving>>, b: Result<Bytes, BytesRejection>) -> Response {
    chat_answer(s, b)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat_answer(
    s: Arc<Serving>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let b = body(b)?;
    let req = ChatRequest::parse(&b)?;
    let template = s.template.as_ref().ok_or_else(|| {
        OpenAiError::invalid(
            Some("messages"),
            "this model has no chat template: its GGUF has no tokenizer.chat_template, and \
             none was given with --chat-template FILE (use /v1/completions with a prompt, \
             or start the engine with --chat-template)",
        )
    })?;
    let text = template
        .render(&req.messages, true)
        .map_err(|e| OpenAiError::invalid(Some("messages"), e.to_string()))?;
    let tokens = chat_tokens(&s.shared.tokenizer, &text)?;
    let spec = generation_spec(&s, tokens, &req.params)?;
    let running = s.start(spec, req.params.id_slot).await?;
    let id = new_id("chatcmpl");
    let created = super::response::unix_now();
    if req.params.stream {
        let head = StreamHead::new(&s, id, created, &req.params, &running);
        return Ok(head.stream(running, &req.params, |head| ChatStream { head }));
    }
    let n_prompt = running.n_prompt();
    let c = collect(running).await.map_err(task_error)?;
    let tok = &s.shared.tokenizer;
    let logprobs = req.params.logprobs.map(|_| ChatLogprobs {
        content: c
            .logprobs
            .iter()
            .map(|(lp, _)| chat_logprob(tok, lp))
            .collect(),
    });
    Ok(Json(ChatCompletion {
        id,
        object: "chat.completion",
        created,
        model: s.model_id.clone(),
        system_fingerprint: system_fingerprint(),
        choices: vec![ChatChoice {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: c.text,
            },
            logprobs,
            finish_reason: c.summary.finish.openai(),
        }],
        usage: usage(n_prompt, &c.summary),
    })
    .into_response())
}

fn usage(n_prompt: usize, s: &GenSummary) -> Usage {
    Usage::new(n_prompt, s.n_cached, s.tokens.len())
}

/// What every event of a streamed answer carries (its id, creation time and model), and
/// how the stream ends.
struct StreamHead {
    serving: Arc<Serving>,
    id: String,
    created: u64,
    include_usage: bool,
    n_prompt: usize,
}

impl StreamHead {
    fn new(
        serving: &Arc<Serving>,
        id: String,
        created: u64,
        params: &GenerationParams,
        running: &Running,
    ) -> StreamHead {
        StreamHead {
            serving: serving.clone(),
            id,
            created,
            include_usage: params.include_usage,
            n_prompt: running.n_prompt(),
        }
    }

    /// The response streaming `running` in the format `format` builds on this head.
    fn stream<F: StreamFormat>(
        self,
        running: Running,
        params: &GenerationParams,
        format: impl FnOnce(StreamHead) -> F,
    ) -> Response {
        let shared = self.serving.shared.clone();
        stream(shared, running, params.return_progress, format(self))
    }

    /// One event of object type `object` with `choices`; its `usage` is there only with
    /// `include_usage`, and then null but in the usage chunk.
    fn event<C: Serialize>(
        &self,
        object: &'static str,
        choices: Vec<C>,
        usage: Option<Usage>,
        progress: Option<PromptProgress>,
    ) -> Event {
        sse::json(&Answer {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.serving.model_id.clone(),
            system_fingerprint: system_fingerprint(),
            choices,
            usage: self.include_usage.then_some(usage),
            prompt_progress: progress,
        })
    }

    /// The stream's end: `last` (the finish reason), the usage chunk that `usage_event`
    /// makes when it was asked for, `data: [DONE]`.
    fn end(
        &self,
        last: Event,
        s: &GenSummary,
        usage_event: impl FnOnce(Usage) -> Event,
    ) -> Vec<Event> {
        let mut out = vec![last];
        if self.include_usage {
            out.push(usage_event(usage(self.n_prompt, s)));
        }
        out.push(sse::done());
        out
    }

    /// A failure after the stream began: the error, then `data: [DONE]`.
    fn failed(e: &TaskError) -> Vec<Event> {
        vec![sse::json(&task_error(e.clone()).body()), sse::done()]
    }
}

/// `chat.completion.chunk` events.
struct ChatStream {
    head: StreamHead,
}

impl ChatStream {
    fn chunk(
        &self,
        choices: Vec<ChunkChoice>,
        usage: Option<Usage>,
        progress: Option<PromptProgress>,
    ) -> Event {
        self.head
            .event("chat.completion.chunk", choices, usage, progress)
    }

    fn delta(
        &self,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<&'static str>,
    ) -> Event {
        self.chunk(
            vec![ChunkChoice {
                index: 0,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            None,
            None,
        )
    }
}

impl StreamFormat for ChatStream {
    fn started(&mut self, _task_id: u64, _n_cached: usize) -> Vec<Event> {
        let role = Delta {
            role: Some("assistant"),
            content: Some(String::new()),
        };
        vec![self.delta(role, None, None)]
    }

    fn progress(&mut self, p: &PromptProgress) -> Vec<Event> {
        vec![self.chunk(Vec::new(), None, Some(*p))]
    }

    fn token(&mut self, t: &TokenOut) -> Vec<Event> {
        if t.text.is_empty() && t.logprob.is_none() {
            return Vec::new();
        }
        let logprobs = t.logprob.as_ref().map(|lp| ChatLogprobs {
            content: vec![chat_logprob(&self.head.serving.shared.tokenizer, lp)],
        });
        let delta = Delta {
            role: None,
            content: Some(t.text.clone()),
        };
        vec![self.delta(delta, logprobs, None)]
    }

    fn done(&mut self, s: &GenSummary) -> Vec<Event> {
        let last = self.delta(Delta::default(), None, Some(s.finish.openai()));
        self.head
            .end(last, s, |u| self.chunk(Vec::new(), Some(u), None))
    }

    fn failed(&mut self, e: &TaskError) -> Vec<Event> {
        StreamHead::failed(e)
    }
}

async fn completions(State(s): State<Arc<Serving>>, b: Result<Bytes, BytesRejection>) -> Response {
    completion_answer(s, b)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn completion_answer(
    s: Arc<Serving>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let b = body(b)?;
    let req = CompletionRequest::parse(&b)?;
    let tok = &s.shared.tokenizer;
    let (tokens, echo) = match &req.prompt {
        PromptInput::Text(text) => {
            let tokens = tok.tokenize(text, true, true).map_err(|e| {
                tracing::error!("tokenizing a prompt: {e}");
                OpenAiError::internal()
            })?;
            (tokens, text.clone())
        }
        PromptInput::Tokens(ids) => {
            tok.check_ids(ids)
                .map_err(|e| OpenAiError::invalid(Some("prompt"), e.to_string()))?;
            (ids.clone(), tok.decode(ids).unwrap_or_default())
        }
    };
    let echo = if req.echo { echo } else { String::new() };
    let spec = generation_spec(&s, tokens, &req.params)?;
    let running = s.start(spec, req.params.id_slot).await?;
    let id = new_id("cmpl");
    let created = super::response::unix_now();
    if req.params.stream {
        let head = StreamHead::new(&s, id, created, &req.params, &running);
        return Ok(head.stream(running, &req.params, |head| CompletionStream { head, echo }));
    }
    let n_prompt = running.n_prompt();
    let c = collect(running).await.map_err(task_error)?;
    let logprobs = req.params.logprobs.map(|_| {
        let mut l = CompletionLogprobs::default();
        for (lp, offset) in &c.logprobs {
            l.push(&chat_logprob(tok, lp), echo.len() + offset);
        }
        l
    });
    Ok(Json(Completion {
        id,
        object: "text_completion",
        created,
        model: s.model_id.clone(),
        system_fingerprint: system_fingerprint(),
        choices: vec![CompletionChoice {
            text: echo + &c.text,
            index: 0,
            logprobs,
            finish_reason: Some(c.summary.finish.openai()),
        }],
        usage: Some(Some(usage(n_prompt, &c.summary))),
        prompt_progress: None,
    })
    .into_response())
}

/// `text_completion` events.
struct CompletionStream {
    head: StreamHead,
    echo: String,
}

impl CompletionStream {
    fn event(
        &self,
        choices: Vec<CompletionChoice>,
        usage: Option<Usage>,
        progress: Option<PromptProgress>,
    ) -> Event {
        self.head.event("text_completion", choices, usage, progress)
    }

    fn text(
        &self,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
    ) -> Event {
        self.event(
            vec![CompletionChoice {
                text,
                index: 0,
                logprobs,
                finish_reason: finish,
            }],
            None,
            None,
        )
    }
}

impl StreamFormat for CompletionStream {
    fn started(&mut self, _task_id: u64, _n_cached: usize) -> Vec<Event> {
        if self.echo.is_empty() {
            return Vec::new();
        }
        let echo = std::mem::take(&mut self.echo);
        vec![self.text(echo, None, None)]
    }

    fn progress(&mut self, p: &PromptProgress) -> Vec<Event> {
        vec![self.event(Vec::new(), None, Some(*p))]
    }

    fn token(&mut self, t: &TokenOut) -> Vec<Event> {
        if t.text.is_empty() && t.logprob.is_none() {
            return Vec::new();
        }
        let logprobs = t.logprob.as_ref().map(|lp| {
            let mut l = CompletionLogprobs::default();
            l.push(&chat_logprob(&self.head.serving.shared.tokenizer, lp), 0);
            l
        });
        vec![self.text(t.text.clone(), logprobs, None)]
    }

    fn done(&mut self, s: &GenSummary) -> Vec<Event> {
        let last = self.text(String::new(), None, Some(s.finish.openai()));
        self.head
            .end(last, s, |u| self.event(Vec::new(), Some(u), None))
    }

    fn failed(&mut self, e: &TaskError) -> Vec<Event> {
        StreamHead::failed(e)
    }
}
