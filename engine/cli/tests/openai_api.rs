//! The OpenAI-compatible surface and llama.cpp's streaming `/completion`, on the embedded
//! model (the real model and the `openai` client: `openai_clients.rs`): the model list,
//! the chat template rule, raw server-sent events read with `curl -N` (tokens one by one,
//! `prompt_progress` from the segment, `data: [DONE]`), the bounded wait for a slot (503
//! with `Retry-After`, the waiting request pending in the segment), and both ways of
//! cancelling a generation (the client going away, `POST /slots/{id}?action=cancel`).

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use hydra_layout::{Phase, SegmentReader};
use support::{agent, call, curl_stream, get, post, serve_refused, sse_data, wait_for, Engine};

const LIMIT: Duration = Duration::from_secs(120);

fn scratch() -> tempfile::TempDir {
    hydra_fault::scratch("hydra-openai")
}

/// A chat template for the embedded model, which has none.
fn template_file(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("chat.jinja");
    std::fs::write(
        &p,
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
    )
    .unwrap();
    p
}

#[test]
fn models_list_names_the_alias_or_the_model() {
    let e = Engine::in_scratch("models-a", &["--slots", "1", "--alias", "my-model"]);
    let (status, body) = get(&e, "/v1/models");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], "my-model");
    assert_eq!(body["data"][0]["object"], "model");
    assert_eq!(body["data"].as_array().map(Vec::len), Some(1));
    let e = Engine::start(&e.dir, "models-b", &["--slots", "1"]);
    let (_, health) = get(&e, "/health");
    let (_, body) = get(&e, "/v1/models");
    assert_eq!(body["data"][0]["id"], health["model"], "{body}");
    // Unknown /v1 routes answer in OpenAI's shape too.
    let (status, body) = get(&e, "/v1/nothing");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "not_found_error", "{body}");
}

#[test]
fn chat_needs_a_template_and_takes_one_from_a_file() {
    let e = Engine::in_scratch("no-template", &["--slots", "1"]);
    let chat = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#;
    let (status, body) = post(&e, "/v1/chat/completions", chat);
    assert_eq!(status, 400, "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("chat template") && msg.contains("--chat-template"),
        "{msg}"
    );
    assert_eq!(body["error"]["type"], "invalid_request_error");
    // Completions need no template.
    let (status, body) = post(&e, "/v1/completions", r#"{"prompt":"hi","max_tokens":3}"#);
    assert_eq!(status, 200, "{body}");

    let file = template_file(&e.dir);
    let e = Engine::start(
        &e.dir,
        "template",
        &["--slots", "1", "--chat-template", file.to_str().unwrap()],
    );
    let (status, body) = post(&e, "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    // "<user>hi\n<assistant>" is 20 bytes, one token each for the byte tokenizer.
    assert_eq!(body["usage"]["prompt_tokens"], 20, "{body}");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() <= 4);

    // A broken template file stops the engine at start, naming the file.
    std::fs::write(&file, "{% for m in messages %}").unwrap();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--chat-template",
        file.to_str().unwrap(),
    ];
    let (_, err) = serve_refused(&e.dir, &args);
    assert!(
        err.contains("chat.jinja") && err.contains("does not compile"),
        "{err}"
    );
}

#[test]
fn completion_streams_each_token_and_prompt_progress_from_the_segment() {
    let test = "completion_streams_each_token_and_prompt_progress_from_the_segment";
    let e = Engine::in_scratch("stream", &["--slots", "1", "--ubatch", "16"]);
    let prompt = "The compute loop publishes a record for every slot on every step. ".repeat(3);
    let n_prompt = prompt.len() as u64;
    let body = serde_json::json!({
        "prompt": prompt, "n_predict": 12, "ignore_eos": true, "stream": true,
        "return_progress": true, "id_slot": 0, "cache_prompt": false,
    });
    let Some(raw) = curl_stream(test, &e.url("/completion"), &body.to_string()) else {
        return;
    };
    let events: Vec<serde_json::Value> = sse_data(&raw)
        .iter()
        .map(|d| serde_json::from_str(d).expect("JSON event"))
        .collect();
    assert!(
        !raw.contains("[DONE]"),
        "llama.cpp's /completion stream has no [DONE]"
    );
    let progress: Vec<&serde_json::Value> = events
        .iter()
        .filter_map(|e| e.get("prompt_progress"))
        .collect();
    let chunks = n_prompt.div_ceil(16);
    assert!(
        progress.len() as u64 >= chunks,
        "{} progress events for {chunks} chunks: {raw}",
        progress.len()
    );
    let mut last = 0;
    for p in &progress {
        assert_eq!(p["total"].as_u64(), Some(n_prompt), "{p}");
        assert_eq!(p["cache"].as_u64(), Some(0), "{p}");
        let processed = p["processed"].as_u64().unwrap();
        assert!(processed >= last && processed <= n_prompt, "{p}");
        assert!(p["time_ms"].is_u64(), "{p}");
        last = processed;
    }
    assert_eq!(
        last, n_prompt,
        "the last progress event has the whole prompt in"
    );
    let texts: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.get("prompt_progress").is_none() && e["stop"] == false)
        .collect();
    // One event per token as it is sampled; then, only if the last bytes were an
    // incomplete character, one event with them and no token.
    let with_token = texts
        .iter()
        .filter(|t| t["tokens"].as_array().map(Vec::len) == Some(1));
    assert_eq!(with_token.count(), 12, "one event per token: {raw}");
    assert!(texts.len() <= 13, "{raw}");
    assert!(texts.iter().all(|t| t["id_slot"] == 0));
    let last = events.last().unwrap();
    assert_eq!(last["stop"], true, "{last}");
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["tokens_predicted"], 12);
    let streamed: String = texts
        .iter()
        .map(|t| t["content"].as_str().unwrap())
        .collect();
    // The same request without streaming gives the same text (greedy).
    let mut plain = body.clone();
    plain["stream"] = false.into();
    let (status, whole) = post(&e, "/completion", &plain.to_string());
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["content"].as_str(), Some(streamed.as_str()));
    assert_eq!(last["content"], "", "the final event repeats no text");
}

#[test]
fn openai_streams_chunks_and_end_with_done() {
    let test = "openai_streams_chunks_and_end_with_done";
    let tmp = scratch();
    let file = template_file(tmp.path());
    let e = Engine::start(
        tmp.path(),
        "v1-stream",
        &[
            "--slots",
            "1",
            "--chat-template",
            file.to_str().unwrap(),
            "--alias",
            "tiny",
        ],
    );
    let body = r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":6,
        "temperature":0,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}"#;
    let Some(raw) = curl_stream(test, &e.url("/v1/chat/completions"), body) else {
        return;
    };
    let data = sse_data(&raw);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{raw}");
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "tiny"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 6, "{raw}");
    assert_eq!(chunks.last().unwrap()["choices"], serde_json::json!([]));
    let finish: Vec<&serde_json::Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|c| &c["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec!["length"], "{raw}");

    let body =
        r#"{"prompt":"Once","max_tokens":5,"temperature":0,"stream":true,"ignore_eos":true}"#;
    let raw = curl_stream(test, &e.url("/v1/completions"), body).unwrap();
    let data = sse_data(&raw);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let texts: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        texts.iter().all(|c| c["object"] == "text_completion"),
        "{raw}"
    );
    // A bad request is refused before any stream starts.
    let (status, body) = post(
        &e,
        "/v1/completions",
        r#"{"prompt":"x","stream":true,"n":3}"#,
    );
    assert_eq!(
        (status, &body["error"]["param"]),
        (400, &serde_json::json!("n"))
    );
}

/// The record of `slot` once `ready` holds, read from the segment.
fn slot_when(
    segment: &Path,
    slot: usize,
    what: &str,
    ready: impl Fn(&hydra_layout::SlotSnapshot) -> bool,
) -> hydra_layout::SlotSnapshot {
    let reader = SegmentReader::open(segment).expect("segment");
    wait_for(LIMIT, what, || reader.slot(slot).ok().filter(|s| ready(s)))
}

/// A long generation on slot 0 (the embedded model never stops by itself with
/// `ignore_eos`), posted from a thread.
fn long_generation(e: &Engine, stream: bool) -> std::thread::JoinHandle<(u16, serde_json::Value)> {
    let url = e.url("/v1/completions");
    let body = serde_json::json!({
        "prompt": "Slot zero says: ", "max_tokens": 3500, "ignore_eos": true,
        "temperature": 0, "id_slot": 0, "stream": stream,
    })
    .to_string();
    std::thread::spawn(move || call(agent().post(&url), Some(&body)))
}

#[test]
fn a_full_queue_answers_503_and_cancel_frees_the_slot() {
    let e = Engine::in_scratch(
        "queue",
        &["--slots", "1", "--ctx", "4096", "--max-waiting", "1"],
    );
    let (status, body) = post(&e, "/slots/0?action=cancel", "");
    assert_eq!(
        (status, &body["cancelled"]),
        (200, &serde_json::json!(false)),
        "{body}"
    );
    let long = long_generation(&e, false);
    let running = slot_when(&e.segment(), 0, "the long generation to decode", |s| {
        s.state.phase == Phase::Decode && s.state.work_done > 0
    });
    // A second request waits for the slot, counted as pending in the segment.
    let url = e.url("/v1/completions");
    let second = std::thread::spawn(move || {
        call(
            agent().post(&url),
            Some(r#"{"prompt":"next","max_tokens":3,"temperature":0}"#),
        )
    });
    slot_when(
        &e.segment(),
        0,
        "the waiting request to show as pending",
        |s| s.pending >= 1,
    );
    // A third finds the queue full.
    let r = agent()
        .post(&e.url("/v1/completions"))
        .set("Content-Type", "application/json")
        .send_string(r#"{"prompt":"third","max_tokens":3}"#);
    match r {
        Err(ureq::Error::Status(503, resp)) => {
            let retry = resp.header("Retry-After").map(str::to_owned);
            let body: serde_json::Value = resp.into_json().unwrap();
            assert!(retry.is_some_and(|r| r.parse::<u32>().is_ok_and(|s| s >= 1)));
            assert_eq!(body["error"]["code"], "server_busy", "{body}");
        }
        other => panic!("expected a 503, got {other:?}"),
    }
    // Cancel the long one: it ends at its next step with what it generated.
    let (status, body) = post(&e, "/slots/0?action=cancel", "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], true);
    assert_eq!(body["task_id"], running.state.task_id);
    let (status, answer) = long.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "cancelled");
    let generated = answer["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(generated > 0 && generated < 3500, "{generated}");
    let (status, next) = second.join().unwrap();
    assert_eq!(status, 200, "{next}");
    let reader = SegmentReader::open(e.segment()).unwrap();
    let history = wait_for(LIMIT, "the slot to be idle", || {
        reader
            .slot(0)
            .ok()
            .filter(|s| s.state.phase == Phase::Idle && s.pending == 0)
    });
    assert_eq!(
        history.state.finish_reason.as_str(),
        "completed",
        "the second ran after"
    );
}

/// Posts `body` to `path` on a raw connection and returns it (for a client that leaves).
fn raw_post(e: &Engine, path: &str, body: &str) -> TcpStream {
    let addr = e.base.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s
}

#[test]
fn a_client_that_goes_away_cancels_its_generation() {
    let e = Engine::in_scratch("leave", &["--slots", "1", "--ctx", "4096"]);
    for stream in [true, false] {
        let body = serde_json::json!({
            "prompt": "Slot zero says: ", "max_tokens": 3500, "ignore_eos": true,
            "temperature": 0, "id_slot": 0, "stream": stream,
        })
        .to_string();
        let mut conn = raw_post(&e, "/v1/completions", &body);
        if stream {
            // Read until a few tokens have arrived.
            conn.set_read_timeout(Some(LIMIT)).unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while seen.windows(6).filter(|w| w == b"data: ").count() < 3 {
                let n = conn.read(&mut buf).expect("stream");
                assert!(n > 0, "the stream ended early");
                seen.extend_from_slice(&buf[..n]);
            }
        } else {
            slot_when(&e.segment(), 0, "the request to decode", |s| {
                s.state.phase == Phase::Decode && s.state.work_done > 0
            });
        }
        drop(conn);
        let done = slot_when(&e.segment(), 0, "the generation to stop", |s| {
            s.state.phase == Phase::Idle
        });
        assert_eq!(
            done.state.finish_reason.as_str(),
            "cancelled",
            "stream {stream}: {done:?}"
        );
        assert!(done.state.work_done < 3500, "stopped early: {done:?}");
    }
    // The slot is free again.
    let (status, body) = post(
        &e,
        "/v1/completions",
        r#"{"prompt":"again","max_tokens":2}"#,
    );
    assert_eq!(status, 200, "{body}");
}
