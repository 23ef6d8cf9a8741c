//! The OpenAI-compatible serving surface: `POST /v1/chat/completions`,
//! `POST /v1/completions`, `GET /v1/models`, with server-sent-event streaming.
//!
//! - [`request`]: request bodies, parsed and checked (400s in OpenAI's shape);
//! - [`response`]: answers, chunks, usage, log-probabilities;
//! - [`handlers`]: the `/v1` routes;
//! - [`error`]: OpenAI's error shape.

pub mod error;
pub mod handlers;
pub mod request;
pub mod response;
