//! Every error mapping of both surfaces through the router, in-process: one
//! classification, each surface's shape and status.

use crate::support::{OpenAiShape, Rig};

#[tokio::test]
async fn the_llama_surface_answers_each_error_kind_in_its_shape() {
    let rig = Rig::new(2, 64);
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, u16, &str)] = &[
        ("POST", "/slots/9/prefill", r#"{"prompt":"hi"}"#, 404, "unknown_slot"),
        ("POST", "/slots/x/prefill", r#"{"prompt":"hi"}"#, 400, "bad_request"),
        ("POST", "/slots/0/prefill", "{not json", 400, "invalid_json"),
        ("POST", "/slots/0/prefill", r#"{"prompt":"hi","tokens":[1]}"#, 400, "bad_request"),
        ("POST", "/slots/0/prefill", r#"{"tokens":[]}"#, 400, "bad_request"),
        ("POST", "/slots/0/prefill", r#"{"tokens":[999999]}"#, 400, "bad_request"),
        ("POST", "/slots/0/prefill", &format!(r#"{{"tokens":{:?}}}"#, vec![1u32; 65]), 422, "context_overflow"),
        ("POST", "/slots/1/decode", r#"{"n_predict":2}"#, 409, "empty_slot"),
        ("PUT", "/slots/0/state", "not a state", 422, "state_rejected"),
        ("POST", "/slots/0?action=dance", "", 400, "bad_request"),
        ("GET", "/no/such/route", "", 404, "not_found"),
        ("POST", "/completion", r#"{"prompt":"hi","id_slot":-2}"#, 400, "bad_request"),
        ("POST", "/completion", r#"{"prompt":"hi","id_slot":7}"#, 404, "unknown_slot"),
        ("POST", "/completion", &format!(r#"{{"prompt":{:?}}}"#, vec![1u32; 64]), 422, "context_overflow"),
        ("POST", "/tokenize", r#"{"text":"field misnamed"}"#, 400, "invalid_json"),
    ];
    for &(method, path, body, status, code) in cases {
        let a = rig.call(method, path, body).await;
        assert_eq!(
            a.llama_error(),
            (status, code),
            "{method} {path} {body}: {}",
            a.text
        );
    }
}

#[tokio::test]
async fn the_openai_surface_answers_each_error_kind_in_its_shape() {
    let rig = Rig::new(2, 64);
    let long = format!(r#"{{"prompt":{:?}}}"#, vec![1u32; 64]);
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, OpenAiShape)] = &[
        ("POST", "/v1/completions", "{not json", (400, "invalid_request_error", None, None)),
        ("POST", "/v1/completions", r#"{"prompt":"hi","n":2}"#, (400, "invalid_request_error", None, Some("n"))),
        ("POST", "/v1/completions", r#"{"prompt":"hi","id_slot":-2}"#, (400, "invalid_request_error", None, Some("id_slot"))),
        ("POST", "/v1/completions", r#"{"prompt":"hi","id_slot":7}"#, (400, "invalid_request_error", None, Some("id_slot"))),
        ("POST", "/v1/completions", r#"{"prompt":[999999]}"#, (400, "invalid_request_error", None, Some("prompt"))),
        ("POST", "/v1/completions", &long, (400, "invalid_request_error", Some("context_length_exceeded"), Some("prompt"))),
        ("GET", "/v1/nothing", "", (404, "not_found_error", None, None)),
    ];
    for (method, path, body, want) in cases {
        let a = rig.call(method, path, body).await;
        assert_eq!(
            a.openai_error(),
            *want,
            "{method} {path} {body}: {}",
            a.text
        );
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_by_each_surface_in_its_shape() {
    let rig = Rig::with(1, |c| c.max_json_body = 64);
    let big = format!(r#"{{"prompt":"{}"}}"#, "a".repeat(200));
    let a = rig.call("POST", "/completion", &big).await;
    assert_eq!(a.llama_error(), (413, "payload_too_large"), "{}", a.text);
    let a = rig.call("POST", "/v1/completions", &big).await;
    assert_eq!(
        a.openai_error(),
        (413, "invalid_request_error", None, None),
        "{}",
        a.text
    );
}

#[tokio::test]
async fn a_full_wait_queue_is_a_busy_server_with_retry_after_on_both_surfaces() {
    // One slot, no waiting allowed: while a lease holds the slot, a generation request is
    // refused at once.
    let rig = Rig::with(1, |c| {
        c.ctx = 64;
        c.max_waiting = 0;
    });
    let lease = rig
        .state
        .pool
        .acquire(None, &[])
        .await
        .expect("the one slot");
    let a = rig.call("POST", "/completion", r#"{"prompt":"hi"}"#).await;
    assert_eq!(a.llama_error(), (503, "server_busy"), "{}", a.text);
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    let a = rig
        .call("POST", "/v1/completions", r#"{"prompt":"hi"}"#)
        .await;
    assert_eq!(
        a.openai_error(),
        (503, "service_unavailable", Some("server_busy"), None),
        "{}",
        a.text
    );
    assert_eq!(a.retry_after.as_deref(), Some("1"));
    drop(lease);
    let a = rig
        .call("POST", "/completion", r#"{"prompt":"hi","n_predict":2}"#)
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
}

#[tokio::test]
async fn a_completion_takes_every_prompt_shape_llama_server_takes() {
    let rig = Rig::new(1, 128);
    let tokens = |body: &str| {
        let rig = &rig;
        let body = body.to_owned();
        async move {
            let a = rig.call("POST", "/completion", &body).await;
            assert_eq!(a.status, 200, "{body}: {}", a.text);
            a.json["tokens_evaluated"]
                .as_u64()
                .expect("tokens_evaluated")
        }
    };
    let ids = rig
        .call("POST", "/tokenize", r#"{"content":"hello world"}"#)
        .await;
    let ids: Vec<u64> = serde_json::from_value(ids.json["tokens"].clone()).unwrap();
    let n = ids.len() as u64;
    let list = format!(r#"{{"prompt":{ids:?},"n_predict":1,"cache_prompt":false}}"#);
    assert_eq!(
        tokens(&list).await,
        n,
        "a list of token ids is used as given"
    );
    let mixed = format!(
        r#"{{"prompt":[{}, "hello world"],"n_predict":1,"cache_prompt":false}}"#,
        ids[0]
    );
    assert_eq!(tokens(&mixed).await, n + 1, "an id, then the text's tokens");
    let text = r#"{"prompt":"hello world","n_predict":1,"cache_prompt":false}"#;
    assert!(tokens(text).await >= n);
    let a = rig.call("POST", "/completion", r#"{"prompt":[1.5]}"#).await;
    assert_eq!(a.llama_error(), (400, "invalid_json"), "{}", a.text);
}

#[tokio::test]
async fn the_model_has_one_id_in_v1_models_and_in_the_segment() {
    let rig = Rig::new(1, 64);
    let models = rig.call("GET", "/v1/models", "").await;
    let id = models.json["data"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let meta = rig.call("GET", "/slots/0/state/meta", "").await;
    assert_eq!(meta.status, 200, "{}", meta.text);
    assert_eq!(meta.json["model_alias"], id, "{}", meta.text);
}
