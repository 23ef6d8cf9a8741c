//! A small blocking HTTP client for the JSON APIs (ureq), returning status and body
//! whatever the status.

use std::time::Duration;

/// An agent with a generous timeout (a decode may hold a queued request for a while).
pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build()
}

/// `(status, body)` of a request; the body is parsed as JSON, or kept as a JSON string.
/// Panics on transport errors (connection refused or reset): the suite treats those as
/// the server having died.
pub fn call(req: ureq::Request, body: Option<&str>) -> (u16, serde_json::Value) {
    try_call(req, body).unwrap_or_else(|e| panic!("transport error: {e}"))
}

/// Like [`call`], but transport errors are returned.
pub fn try_call(
    req: ureq::Request,
    body: Option<&str>,
) -> Result<(u16, serde_json::Value), Box<ureq::Transport>> {
    let resp = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(Box::new(t)),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Ok((status, json))
}

/// `GET url`.
pub fn get(url: &str) -> (u16, serde_json::Value) {
    call(agent().get(url), None)
}

/// `POST url` with a JSON body.
pub fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
    call(agent().post(url), Some(body))
}
