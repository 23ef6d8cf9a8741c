//! The requests the suite and the engine benchmarks put load with: a fresh prefill on a
//! slot and a timed decode, as the engine itself measured it.

use crate::http;
use crate::process::Server;

/// One decode as the engine measured it.
#[derive(Debug, Clone, Copy)]
pub struct DecodeRate {
    /// Tokens per second over the generation loop (wall time).
    pub per_s: f64,
    /// CPU time of the engine process per token, ms.
    pub cpu_ms_per_token: f64,
}

/// Erases `slot` and prefills `prompt` into it; panics on any non-200 answer.
pub fn fresh_prefill(e: &Server, slot: usize, prompt: &str) {
    let (code, body) = http::post(&e.url(&format!("/slots/{slot}?action=erase")), "");
    assert_eq!(code, 200, "erase: {body}");
    let req = serde_json::json!({ "prompt": prompt }).to_string();
    let (code, body) = http::post(&e.url(&format!("/slots/{slot}/prefill")), &req);
    assert_eq!(code, 200, "prefill: {body}");
}

/// Decodes `n` tokens on `slot` (which must hold a prompt), past any EOS.
pub fn decode(e: &Server, slot: usize, n: usize) -> DecodeRate {
    let req = format!(r#"{{"n_predict":{n},"ignore_eos":true}}"#);
    let (code, body) = http::post(&e.url(&format!("/slots/{slot}/decode")), &req);
    assert_eq!(code, 200, "decode: {body}");
    DecodeRate {
        per_s: body["predicted_per_second"].as_f64().expect("rate"),
        cpu_ms_per_token: body["predicted_cpu_ms"].as_f64().expect("cpu ms") / n as f64,
    }
}

/// A fresh short prefill on slot 0, then a decode of `n` tokens.
pub fn decode_rate(e: &Server, n: usize) -> DecodeRate {
    fresh_prefill(e, 0, "Benchmark: ");
    decode(e, 0, n)
}
