//! The OpenAI-compatible serving surface: `POST /v1/chat/completions`,
//! `POST /v1/completions`, `GET /v1/models`, with server-sent-event streaming.
//!
//! - [`chat_template`]: messages to a prompt through the model's Jinja chat template;
//! - [`request`]: request bodies, parsed and checked (400s in OpenAI's shape);
//! - [`response`]: answers, chunks, usage, log-probabilities, prompt progress;
//! - [`handlers`]: the `/v1` routes;
//! - [`error`]: OpenAI's error shape;
//! - [`prompt_progress`]: llama.cpp's `prompt_progress`, read from the segment;
//! - [`stop`]: stop strings matched across token boundaries;
//! - [`sse`]: server-sent events;
//! - [`text_out`]: the text a client sees of a generation (whole characters, no stop text).

pub mod chat_template;
pub mod error;
pub mod handlers;
pub mod prompt_progress;
pub mod request;
pub mod response;
pub mod sse;
pub mod stop;
pub mod text_out;
