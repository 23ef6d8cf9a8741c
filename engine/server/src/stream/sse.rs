//! Server-sent events, through axum's SSE encoder: each event a `data: <json>` line and a
//! blank line, the OpenAI streams ended by `data: [DONE]`, a keep-alive comment while a
//! long prompt is evaluated without progress events.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio_stream::{Stream, StreamExt as _};

/// The event carrying `value` as JSON.
pub fn json<T: Serialize>(value: &T) -> Event {
    match serde_json::to_string(value) {
        Ok(s) => Event::default().data(s),
        Err(e) => {
            // Our response types always serialize; say so if one ever does not.
            tracing::error!("cannot encode a stream event: {e}");
            Event::default().data(r#"{"error":{"message":"internal error","type":"server_error"}}"#)
        }
    }
}

/// The last event of an OpenAI stream.
pub fn done() -> Event {
    Event::default().data("[DONE]")
}

/// The streaming response sending `events` as they come.
pub fn response<S>(events: S) -> Response
where
    S: Stream<Item = Event> + Send + 'static,
{
    Sse::new(events.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_on_the_wire() {
        let events = tokio_stream::iter(vec![json(&serde_json::json!({"a": "x\ny"})), done()]);
        let r = response(events);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "data: {\"a\":\"x\\ny\"}\n\ndata: [DONE]\n\n"
        );
    }
}
