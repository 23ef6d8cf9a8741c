//! Clients nobody here wrote, against the real model: the `openai` PyPI package
//! (`tests/clients/openai_client.py`: models, chat, streaming, completions, stop, seed,
//! logprobs, four concurrent chats on two slots, bad input) and `curl -N` for the raw
//! stream, on SmolLM2-135M-Instruct through its own chat template.

use std::path::Path;
use std::process::{Command, Stdio};

use hydra_fault::process::Server;

use crate::support;

const N_CTX: usize = 1024;

fn start(model: &Path, dir: &Path) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hydra-engine"));
    cmd.arg("serve")
        .arg("--model")
        .arg(model)
        .args([
            "--slots",
            "2",
            "--ctx",
            &N_CTX.to_string(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--engine-id", "openai-clients", "--progress-dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    Server::spawn(cmd)
}

#[test]
fn the_openai_client_and_curl_against_smollm2() {
    let test = "the_openai_client_and_curl_against_smollm2";
    let Some(model) = hydra_fault::require::smollm2_gguf(test) else {
        return;
    };
    let (Some(()), Some(_curl)) = (
        hydra_fault::require::python_module(test, "openai"),
        hydra_fault::require::tool(test, "curl", "apt-get install curl"),
    ) else {
        return;
    };
    // The Instruct variant, with its chat template.
    let name = model.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.contains("Instruct"), "{name}");
    let tmp = hydra_fault::scratch("hydra-openai-clients");
    let engine = start(&model, tmp.path());
    let model_id = name.trim_end_matches(".gguf").to_string();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/openai_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&engine.base, &model_id, &N_CTX.to_string()])
        .output()
        .expect("run the openai client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the openai client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for check in [
        "ok: models",
        "ok: chat:",
        "ok: streaming",
        "ok: completions",
        "ok: stop",
        "ok: seed",
        "ok: logprobs",
        "ok: four concurrent chats",
        "ok: bad input",
        "all passed",
    ] {
        assert!(stdout.contains(check), "missing {check:?}:\n{stdout}");
    }

    // The raw stream, as curl -N sees it: one event per token, then [DONE].
    let body = r#"{"messages":[{"role":"user","content":"What is the capital of France?"}],
        "temperature":0,"max_tokens":32,"stream":true}"#;
    let url = format!("{}/v1/chat/completions", engine.base);
    let raw = support::curl_stream(test, &url, body).expect("curl is installed (checked above)");
    let events = support::sse_data(&raw);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{raw}");
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(e).unwrap())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(text.contains("Paris"), "{text:?}");
    assert!(events.len() > 4, "tokens arrive one by one: {raw}");
}
