//! llama.cpp's `POST /completion`: a prompt (text or token ids) on a slot (`id_slot`, or
//! the best idle one), whole or, with `"stream": true`, as server-sent events in
//! llama.cpp's chunk shape: one `{"content", "tokens", "stop": false, ...}` per token as
//! it is sampled, `{"prompt_progress": {total, cache, processed, time_ms}}` while the
//! prompt is evaluated with `"return_progress": true`, and a last `"stop": true` event
//! with the timings (no `[DONE]`, as llama.cpp).

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::request::CompletionRequest;
use crate::api_error::ApiError;
use crate::extract::JsonBody;
use crate::prompt::Purpose;
use crate::serving::{collect, requested_slot, AppState};
use crate::stream::prompt_progress::PromptProgress;
use crate::stream::{sse, stream, StreamFormat};
use crate::task::generate::{GenSummary, GenerateSpec, TokenOut};
use crate::task::SlotId;
use crate::task_error::TaskError;

/// `POST /completion`.
pub async fn completion(
    State(s): State<AppState>,
    JsonBody(req): JsonBody<CompletionRequest>,
) -> Result<Response, ApiError> {
    let tokens = req.prompt.into_spec(&s.shared, Purpose::Generate)?.tokens;
    let decode = req.sampling.spec(&s.shared)?;
    let want = requested_slot(req.id_slot)?;
    let spec = GenerateSpec {
        tokens,
        cache_prompt: req.cache_prompt,
        decode,
        stop: req.stop,
        logprobs: None,
    };
    let running = s.start(spec, want).await?;
    let slot = running.slot();
    let n_prompt = running.n_prompt();
    if req.stream {
        let format = LlamaStream {
            slot,
            n_prompt,
            n_predicted: 0,
            task_id: 0,
        };
        return Ok(stream(
            s.shared.clone(),
            running,
            req.return_progress,
            format,
        ));
    }
    let c = collect(running).await?;
    let mut body = final_event(slot, n_prompt, c.summary.task_id, &c.summary);
    body["content"] = c.text.into();
    Ok(Json(body).into_response())
}

/// The answer's fields (the stream's last event; there, the text was already sent).
fn final_event(slot: SlotId, n_prompt: usize, task_id: u64, s: &GenSummary) -> Value {
    let n = s.tokens.len();
    let per_s = |n: usize, ms: f64| n as f64 / (ms / 1e3).max(1e-9);
    let n_evaluated = n_prompt - s.n_cached;
    json!({
        "index": 0,
        "content": "",
        "id_slot": slot.get(),
        "task_id": task_id,
        "tokens": s.tokens,
        "tokens_evaluated": n_prompt,
        "tokens_cached": s.n_cached,
        "tokens_predicted": n,
        "stop": true,
        "stop_type": super::StopType::from(s.finish),
        "n_past": s.n_past,
        "timings": {
            "cache_n": s.n_cached,
            "prompt_n": n_evaluated,
            "prompt_ms": s.prompt_ms,
            "prompt_per_second": per_s(n_evaluated, s.prompt_ms),
            "predicted_n": n,
            "predicted_ms": s.predicted_ms,
            "predicted_per_second": per_s(n, s.predicted_ms),
            "predicted_cpu_ms": s.predicted_cpu_ms,
        }
    })
}

/// llama.cpp's `/completion` stream events.
struct LlamaStream {
    slot: SlotId,
    n_prompt: usize,
    n_predicted: usize,
    task_id: u64,
}

impl LlamaStream {
    fn partial(&self, content: &str, tokens: &[u32]) -> Value {
        json!({
            "index": 0,
            "content": content,
            "tokens": tokens,
            "stop": false,
            "id_slot": self.slot.get(),
            "tokens_predicted": self.n_predicted,
            "tokens_evaluated": self.n_prompt,
        })
    }
}

impl StreamFormat for LlamaStream {
    fn started(&mut self, task_id: u64, _n_cached: usize) -> Vec<Event> {
        self.task_id = task_id;
        Vec::new()
    }

    fn progress(&mut self, p: &PromptProgress) -> Vec<Event> {
        let mut e = self.partial("", &[]);
        e["prompt_progress"] = serde_json::to_value(p).unwrap_or_default();
        vec![sse::json(&e)]
    }

    fn token(&mut self, t: &TokenOut) -> Vec<Event> {
        let ids: Vec<u32> = t.id.into_iter().collect();
        self.n_predicted += ids.len();
        vec![sse::json(&self.partial(&t.text, &ids))]
    }

    fn done(&mut self, s: &GenSummary) -> Vec<Event> {
        vec![sse::json(&final_event(
            self.slot,
            self.n_prompt,
            self.task_id,
            s,
        ))]
    }

    fn failed(&mut self, e: &TaskError) -> Vec<Event> {
        vec![sse::json(&super::error::body(&ApiError::from(e.clone())))]
    }
}
