//! The `/v1` routes: `GET /v1/models`, `POST /v1/chat/completions`,
//! `POST /v1/completions`; whole answers, or server-sent events ending with
//! `data: [DONE]`. Every error is in OpenAI's shape.

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::error::OpenAiError;
use super::request::{Body, ChatRequest, CompletionRequest, GenerationParams, PromptInput};
use super::response::{
    new_id, system_fingerprint, Answer, AssistantMessage, ChatChoice, ChatLogprobs,
    ChatTokenLogprob, ChunkChoice, CompletionChoice, CompletionLogprobs, Delta, FinishReason,
    ModelCard, ModelList, TopLogprob, Usage,
};
use crate::api_error::ApiError;
use crate::prompt::{self, Purpose};
use crate::serving::{collect, AppState, Collected};
use crate::stream::prompt_progress::PromptProgress;
use crate::stream::{sse, stream, StreamFormat};
use crate::task::generate::{GenSummary, GenerateSpec, TokenOut};
use crate::task::DecodeSpec;
use crate::task_error::TaskError;
use hydra_engine_core::logprobs::TokenLogprob;
use hydra_engine_core::tokenizer::Tokenizer;

/// The `/v1` routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/{*rest}", get(not_found).post(not_found))
}

async fn not_found(uri: axum::http::Uri) -> OpenAiError {
    ApiError::not_found(uri.path()).into()
}

async fn models(State(s): State<AppState>) -> Json<ModelList> {
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

/// The generation of `tokens` with `params`: refused when the prompt leaves no room in a
/// slot's context ([`prompt::check`]); `max_tokens` beyond the room left ends as `length`
/// when it is full.
pub fn generation_spec(
    s: &AppState,
    tokens: Vec<u32>,
    params: &GenerationParams,
    prompt_field: &str,
) -> Result<GenerateSpec, OpenAiError> {
    prompt::check(&s.shared, &tokens, Purpose::Generate).map_err(|e| e.at(prompt_field))?;
    let room = s.shared.n_ctx - tokens.len();
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
        OpenAiError::from(ApiError::internal())
    })?;
    if let (Some(bos), [a, b, ..]) = (tok.bos_token(), tokens.as_slice()) {
        if *a == bos && *b == bos {
            tokens.remove(0);
        }
    }
    Ok(tokens)
}

async fn chat(
    State(s): State<AppState>,
    Body(req): Body<ChatRequest>,
) -> Result<Response, OpenAiError> {
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
    let (head, c) = match generate(&s, tokens, &req.params, "chatcmpl", ChatChunks).await? {
        Generated::Whole(head, c) => (head, c),
        Generated::Streamed(response) => return Ok(response),
    };
    let tok = &s.shared.tokenizer;
    let logprobs = req.params.logprobs.map(|_| ChatLogprobs {
        content: c
            .logprobs
            .iter()
            .map(|(lp, _)| chat_logprob(tok, lp))
            .collect(),
    });
    let choice = ChatChoice {
        index: 0,
        message: AssistantMessage {
            role: "assistant",
            content: c.text,
        },
        logprobs,
        finish_reason: c.summary.finish.into(),
    };
    Ok(head.whole("chat.completion", choice, &c.summary))
}

/// What [`generate`] gives: the streamed response, or the whole generation with the
/// answer's head.
enum Generated {
    Streamed(Response),
    Whole(AnswerHead, Collected),
}

/// Starts generating `tokens` as `params` asks, for an answer whose id begins with
/// `id_prefix`; streamed as events of `kind`, or collected whole.
async fn generate<K: StreamKind>(
    s: &AppState,
    tokens: Vec<u32>,
    params: &GenerationParams,
    id_prefix: &str,
    kind: K,
) -> Result<Generated, OpenAiError> {
    let spec = generation_spec(s, tokens, params, K::PROMPT_FIELD)?;
    let running = s.start(spec, params.id_slot).await?;
    let head = AnswerHead {
        serving: s.clone(),
        id: new_id(id_prefix),
        created: super::response::unix_now(),
        include_usage: params.include_usage,
        n_prompt: running.n_prompt(),
    };
    if params.stream {
        let shared = s.shared.clone();
        let format = EventStream { head, kind };
        let response = stream(shared, running, params.return_progress, format);
        return Ok(Generated::Streamed(response));
    }
    let c = collect(running).await?;
    Ok(Generated::Whole(head, c))
}

fn usage(n_prompt: usize, s: &GenSummary) -> Usage {
    Usage::new(n_prompt, s.n_cached, s.tokens.len())
}

/// What an answer and every event of a streamed one carry (its id, creation time and
/// model), and how a stream ends.
struct AnswerHead {
    serving: AppState,
    id: String,
    created: u64,
    include_usage: bool,
    n_prompt: usize,
}

impl AnswerHead {
    /// The answer of object type `object` with `choices`, `usage` and `progress`.
    fn answer<C>(
        &self,
        object: &'static str,
        choices: Vec<C>,
        usage: Option<Option<Usage>>,
        progress: Option<PromptProgress>,
    ) -> Answer<C> {
        Answer {
            id: self.id.clone(),
            object,
            created: self.created,
            model: self.serving.model_id.clone(),
            system_fingerprint: system_fingerprint(),
            choices,
            usage,
            prompt_progress: progress,
        }
    }

    /// The whole (not streamed) answer of object type `object`: its one choice and the
    /// usage of the generation `s` summarises.
    fn whole<C: Serialize>(&self, object: &'static str, choice: C, s: &GenSummary) -> Response {
        let usage = Some(Some(usage(self.n_prompt, s)));
        Json(self.answer(object, vec![choice], usage, None)).into_response()
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
        sse::json(&self.answer(
            object,
            choices,
            self.include_usage.then_some(usage),
            progress,
        ))
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
        vec![sse::json(&OpenAiError::from(e.clone()).body()), sse::done()]
    }
}

/// A streamed answer's events, in the format of the endpoint's kind `K`.
struct EventStream<K> {
    head: AnswerHead,
    kind: K,
}

/// What one endpoint's streamed events are: their object type and kind of choice, the
/// choice that starts a stream, if any, and those that carry text.
trait StreamKind: Send + 'static {
    /// The events' object type.
    const OBJECT: &'static str;
    /// The request field the prompt came from (a refused prompt's `error.param`).
    const PROMPT_FIELD: &'static str;
    /// The endpoint's kind of choice.
    type Choice: Serialize;
    /// The choice of the first event, when there is one.
    fn first(&mut self) -> Option<Self::Choice>;
    /// The choice of new text, with its token's log-probability; the last one (empty) has
    /// the finish reason.
    fn choice(
        text: String,
        logprob: Option<ChatTokenLogprob>,
        finish: Option<FinishReason>,
    ) -> Self::Choice;
}

impl<K: StreamKind> EventStream<K> {
    fn event(
        &self,
        choices: Vec<K::Choice>,
        usage: Option<Usage>,
        progress: Option<PromptProgress>,
    ) -> Event {
        self.head.event(K::OBJECT, choices, usage, progress)
    }
}

impl<K: StreamKind> StreamFormat for EventStream<K> {
    fn started(&mut self, _task_id: u64, _n_cached: usize) -> Vec<Event> {
        let first = self.kind.first();
        first
            .map(|c| self.event(vec![c], None, None))
            .into_iter()
            .collect()
    }

    fn progress(&mut self, p: &PromptProgress) -> Vec<Event> {
        vec![self.event(Vec::new(), None, Some(*p))]
    }

    fn token(&mut self, t: &TokenOut) -> Vec<Event> {
        if t.text.is_empty() && t.logprob.is_none() {
            return Vec::new();
        }
        let tok = &self.head.serving.shared.tokenizer;
        let logprob = t.logprob.as_ref().map(|lp| chat_logprob(tok, lp));
        vec![self.event(vec![K::choice(t.text.clone(), logprob, None)], None, None)]
    }

    fn done(&mut self, s: &GenSummary) -> Vec<Event> {
        let last = K::choice(String::new(), None, Some(s.finish.into()));
        let last = self.event(vec![last], None, None);
        self.head
            .end(last, s, |u| self.event(Vec::new(), Some(u), None))
    }

    fn failed(&mut self, e: &TaskError) -> Vec<Event> {
        AnswerHead::failed(e)
    }
}

/// `chat.completion.chunk` events: the first gives the role, each token's the new text.
struct ChatChunks;

impl StreamKind for ChatChunks {
    const OBJECT: &'static str = "chat.completion.chunk";
    const PROMPT_FIELD: &'static str = "messages";
    type Choice = ChunkChoice;

    fn first(&mut self) -> Option<ChunkChoice> {
        let mut first = Self::choice(String::new(), None, None);
        first.delta.role = Some("assistant");
        Some(first)
    }

    fn choice(
        text: String,
        logprob: Option<ChatTokenLogprob>,
        finish: Option<FinishReason>,
    ) -> ChunkChoice {
        let delta = Delta {
            role: None,
            // The last chunk changes nothing but the finish reason.
            content: finish.is_none().then_some(text),
        };
        ChunkChoice {
            index: 0,
            delta,
            logprobs: logprob.map(|lp| ChatLogprobs { content: vec![lp] }),
            finish_reason: finish,
        }
    }
}

async fn completions(
    State(s): State<AppState>,
    Body(req): Body<CompletionRequest>,
) -> Result<Response, OpenAiError> {
    let tok = &s.shared.tokenizer;
    let (tokens, echo) = match &req.prompt {
        PromptInput::Text(text) => {
            let tokens = tok.tokenize(text, true, true).map_err(|e| {
                tracing::error!("tokenizing a prompt: {e}");
                OpenAiError::from(ApiError::internal())
            })?;
            (tokens, text.clone())
        }
        // Checked with every prompt ([`prompt::check`]); an id outside the vocabulary
        // fails there, before the echo is used.
        PromptInput::Tokens(ids) => (ids.clone(), tok.decode(ids).unwrap_or_default()),
    };
    let echo = if req.echo { echo } else { String::new() };
    // A stream's first event is the echo; a whole answer's text starts with it.
    let kind = CompletionChunks { echo: echo.clone() };
    let (head, c) = match generate(&s, tokens, &req.params, "cmpl", kind).await? {
        Generated::Whole(head, c) => (head, c),
        Generated::Streamed(response) => return Ok(response),
    };
    let logprobs = req.params.logprobs.map(|_| {
        let mut l = CompletionLogprobs::default();
        for (lp, offset) in &c.logprobs {
            l.push(&chat_logprob(tok, lp), echo.len() + offset);
        }
        l
    });
    let choice = CompletionChoice {
        text: echo + &c.text,
        index: 0,
        logprobs,
        finish_reason: Some(c.summary.finish.into()),
    };
    Ok(head.whole("text_completion", choice, &c.summary))
}

/// `text_completion` events: the first is the echo of the prompt, when asked for.
struct CompletionChunks {
    echo: String,
}

impl StreamKind for CompletionChunks {
    const OBJECT: &'static str = "text_completion";
    const PROMPT_FIELD: &'static str = "prompt";
    type Choice = CompletionChoice;

    fn first(&mut self) -> Option<CompletionChoice> {
        if self.echo.is_empty() {
            return None;
        }
        Some(Self::choice(std::mem::take(&mut self.echo), None, None))
    }

    fn choice(
        text: String,
        logprob: Option<ChatTokenLogprob>,
        finish: Option<FinishReason>,
    ) -> CompletionChoice {
        let logprobs = logprob.map(|lp| {
            let mut l = CompletionLogprobs::default();
            l.push(&lp, 0);
            l
        });
        CompletionChoice {
            text,
            index: 0,
            logprobs,
            finish_reason: finish,
        }
    }
}

/// A token's text as clients see it in log-probabilities.
fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id).unwrap_or_default().to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// A token's log-probability in OpenAI's chat shape.
fn chat_logprob(tok: &Tokenizer, lp: &TokenLogprob) -> ChatTokenLogprob {
    let (token, bytes) = token_text(tok, lp.token);
    ChatTokenLogprob {
        token,
        logprob: lp.logprob,
        bytes,
        top_logprobs: lp
            .top
            .iter()
            .map(|&(id, logprob)| {
                let (token, bytes) = token_text(tok, id);
                TopLogprob {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}
