//! The compute thread in-process: tasks posted on its channel, the order of a
//! generation's events, cancellation, and the error class of each refusal.

use hydra_engine_core::sampling::{SamplerConfig, StopReason};
use hydra_engine_server::task::generate::{GenEvent, GenerateSpec};
use hydra_engine_server::task::{DecodeSpec, PrefillSpec, SlotId, TaskKind};
use hydra_engine_server::task_error::{ClientError, TaskError};
use tokio::sync::{mpsc, oneshot};

use crate::support::{Rig, LIMIT};

fn decode(n_predict: usize) -> DecodeSpec {
    DecodeSpec {
        n_predict,
        sampler: SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 1,
        },
        stop_at_eos: false,
    }
}

/// A greedy generation of `n_predict` tokens after `prompt` (no prompt cache, no stop).
pub(crate) fn generate_spec(prompt: Vec<u32>, n_predict: usize) -> GenerateSpec {
    GenerateSpec {
        tokens: prompt,
        cache_prompt: false,
        decode: decode(n_predict),
        stop: Vec::new(),
        logprobs: None,
    }
}

fn generation(
    rig: &Rig,
    slot: usize,
    prompt: Vec<u32>,
    n_predict: usize,
) -> mpsc::UnboundedReceiver<GenEvent> {
    let (tx, rx) = mpsc::unbounded_channel();
    rig.post(
        rig.state.slot(slot).expect("a slot"),
        TaskKind::Generate {
            spec: generate_spec(prompt, n_predict),
            events: tx,
        },
    );
    rx
}

async fn next(rx: &mut mpsc::UnboundedReceiver<GenEvent>) -> GenEvent {
    tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("an event in time")
        .expect("the generation's events go on until Done or Failed")
}

/// A prompt of `n` tokens of the embedded model's vocabulary.
fn prompt(rig: &Rig, n: usize) -> Vec<u32> {
    let tok = &rig.state.shared.tokenizer;
    let mut ids = tok.encode("the quick brown fox jumps over the lazy dog", false);
    ids.truncate(4);
    ids.iter().copied().cycle().take(n).collect()
}

#[tokio::test]
async fn a_generation_starts_evaluates_its_prompt_in_chunks_then_streams_its_tokens() {
    let rig = Rig::with(1, |c| {
        c.ctx = 256;
        c.ubatch = 16;
    });
    let p = prompt(&rig, 40);
    let mut rx = generation(&rig, 0, p, 5);
    let GenEvent::Started { task_id, n_cached } = next(&mut rx).await else {
        panic!("Started comes first");
    };
    assert!(task_id > 0);
    assert_eq!(n_cached, 0);
    let mut chunks = 0;
    let mut tokens = 0;
    let summary = loop {
        match next(&mut rx).await {
            GenEvent::PromptChunk => {
                assert_eq!(tokens, 0, "every chunk comes before the first token");
                chunks += 1;
            }
            GenEvent::Token(t) => tokens += usize::from(t.id.is_some()),
            GenEvent::Done(s) => break s,
            e => panic!("unexpected {e:?}"),
        }
    };
    assert_eq!(chunks, 3, "40 tokens in chunks of 16");
    assert_eq!(tokens, 5);
    assert_eq!(summary.finish, StopReason::Length);
    assert_eq!(summary.task_id, task_id);
    assert_eq!(summary.n_past, 45);
    assert!(rx.recv().await.is_none(), "nothing after Done");
}

#[tokio::test]
async fn a_cancelled_generation_ends_as_cancelled_with_what_it_generated() {
    let rig = Rig::new(1, 512);
    let p = prompt(&rig, 8);
    let mut rx = generation(&rig, 0, p, 400);
    let mut before = 0;
    let summary = loop {
        match next(&mut rx).await {
            GenEvent::Token(_) => {
                before += 1;
                if before == 3 {
                    assert!(
                        matches!(
                            rig.state.shared.cancel.cancel(0),
                            hydra_engine_server::cancel::Cancelled::Stopping { .. }
                        ),
                        "a task runs"
                    );
                }
            }
            GenEvent::Done(s) => break s,
            GenEvent::Failed(e) => panic!("a cancellation is a finish, not a failure: {e}"),
            _ => {}
        }
    };
    assert_eq!(summary.finish, StopReason::Cancelled);
    assert!(
        summary.tokens.len() < 400,
        "stopped early: {}",
        summary.tokens.len()
    );
}

pub(crate) async fn reply<T>(rx: oneshot::Receiver<Result<T, TaskError>>) -> Result<T, TaskError> {
    tokio::time::timeout(LIMIT, rx)
        .await
        .expect("a reply in time")
        .expect("the compute thread replies")
}

#[tokio::test]
async fn each_refusal_has_its_error_class() {
    let rig = Rig::new(2, 32);
    let slot = |i| rig.state.slot(i).expect("a slot");
    // Decode on an empty slot.
    let (tx, rx) = oneshot::channel();
    rig.post(
        slot(1),
        TaskKind::Decode {
            spec: decode(2),
            reply: tx,
        },
    );
    assert!(matches!(
        reply(rx).await,
        Err(TaskError::Client(ClientError::EmptySlot(_)))
    ));
    // A prefill past the context, after one that fills most of it.
    for (n, fits) in [(30, true), (5, false)] {
        let (tx, rx) = oneshot::channel();
        rig.post(
            slot(0),
            TaskKind::Prefill {
                spec: PrefillSpec {
                    tokens: prompt(&rig, n),
                },
                reply: tx,
            },
        );
        match reply(rx).await {
            Ok(r) => assert!(fits, "{n} tokens fit: {r:?}"),
            Err(e) => {
                assert!(!fits, "{n}: {e}");
                assert!(
                    matches!(e, TaskError::Client(ClientError::ContextOverflow(_))),
                    "{e:?}"
                );
            }
        }
    }
    // A state that is not one.
    let (tx, rx) = oneshot::channel();
    rig.post(
        slot(0),
        TaskKind::Restore {
            data: axum::body::Bytes::from_static(b"not a state"),
            reply: tx,
        },
    );
    assert!(matches!(
        reply(rx).await,
        Err(TaskError::Client(ClientError::StateRejected(_)))
    ));
    // The slot bound is checked once, where the slot is named.
    assert!(SlotId::new(2, 2).is_err());
}

#[tokio::test]
async fn the_segment_names_the_engines_one_device_running_every_layer() {
    let rig = Rig::new(2, 0);
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    assert!(reader.identity().publishes_device_waits());
    let table = reader.devices().expect("device table");
    let devices = table.known().expect("published at start");
    assert_eq!(devices.devices.len(), 1, "{devices:?}");
    let cpu = &devices.devices[0];
    assert_eq!(
        (cpu.kind, cpu.name.as_str()),
        (hydra_layout::DeviceKind::Cpu, "cpu")
    );
    assert!(devices.layer_count > 0);
    assert_eq!(
        devices.ranges,
        vec![hydra_layout::LayerRange {
            first: 0,
            last: devices.layer_count - 1,
            device: 1
        }]
    );
    assert_eq!(devices.output_device, 1);
    // The compute thread never waits on the CPU it computes on: a wait is "none", known.
    let snap = reader.slot(0).expect("slot 0");
    assert!(snap.waits_published && snap.wait().is_none());
}

/// Posts a prefill of `tokens` on `slot`; returns its reply's receiver.
pub(crate) fn post_prefill(
    rig: &Rig,
    slot: usize,
    tokens: Vec<u32>,
) -> oneshot::Receiver<Result<hydra_engine_server::task::PrefillResult, TaskError>> {
    let (tx, rx) = oneshot::channel();
    let slot = rig.state.slot(slot).expect("a slot");
    rig.post(
        slot,
        TaskKind::Prefill {
            spec: PrefillSpec { tokens },
            reply: tx,
        },
    );
    rx
}

/// Posts a greedy decode of `n` tokens on `slot`; returns its reply's receiver.
pub(crate) fn post_decode(
    rig: &Rig,
    slot: usize,
    n: usize,
) -> oneshot::Receiver<Result<hydra_engine_server::task::DecodeResult, TaskError>> {
    let (tx, rx) = oneshot::channel();
    let slot = rig.state.slot(slot).expect("a slot");
    rig.post(
        slot,
        TaskKind::Decode {
            spec: decode(n),
            reply: tx,
        },
    );
    rx
}

/// A 1-slot rig (4,096-token context) whose slot 0 holds a prompt of `n` tokens.
async fn rig_holding(n: usize) -> Rig {
    let rig = Rig::new(1, 4096);
    reply(post_prefill(&rig, 0, prompt(&rig, n)))
        .await
        .expect("the prompt goes in");
    rig
}

/// Waits (at most [`LIMIT`]) until the segment shows slot 0 in `phase`.
async fn until_phase(rig: &Rig, phase: hydra_layout::Phase) {
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let deadline = tokio::time::Instant::now() + LIMIT;
    while reader.slot(0).expect("slot 0").state.phase != phase {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slot 0 never in {phase:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// Cancels whatever task runs on slot 0 as soon as one does (at most [`LIMIT`]); returns
/// its task id.
async fn cancel_when_running(rig: &Rig) -> u64 {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let hydra_engine_server::cancel::Cancelled::Stopping { task_id, .. } =
            rig.state.shared.cancel.cancel(0)
        {
            return task_id;
        }
        assert!(tokio::time::Instant::now() < deadline, "no task ran");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// The segment's record of slot 0: idle, its last task `task_id` ended cancelled.
fn assert_idle_cancelled(rig: &Rig, task_id: u64) {
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let s = reader.slot(0).expect("slot 0").state;
    assert_eq!(s.task_id, task_id, "{s:?}");
    assert_eq!(s.phase, hydra_layout::Phase::Idle, "{s:?}");
    assert_eq!(
        s.finish_reason,
        hydra_layout::FinishReason::Cancelled,
        "{s:?}"
    );
}

#[tokio::test]
async fn a_cancelled_prefill_stops_at_its_next_chunk_and_answers_cancelled() {
    let rig = Rig::with(1, |c| {
        c.ctx = 4096;
        c.ubatch = 8;
    });
    let n = 4000;
    let rx = post_prefill(&rig, 0, prompt(&rig, n));
    let task_id = cancel_when_running(&rig).await;
    match reply(rx).await {
        Err(TaskError::Client(ClientError::Cancelled)) => {}
        other => panic!("a cancelled prefill answers cancelled: {other:?}"),
    }
    assert_idle_cancelled(&rig, task_id);
    // It stopped before its end: a decode of one token now finds fewer tokens in the slot.
    let after = reply(post_decode(&rig, 0, 1)).await;
    if let Ok(d) = after {
        assert!(d.n_past < n + 1, "the whole prompt went in: {}", d.n_past);
    }
}

/// Waits (at most [`LIMIT`]) until slot 0's step in flight has finished a layer; returns
/// the layers of its forward.
async fn until_a_layer_is_done(rig: &Rig) -> u64 {
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let snap = reader.slot(0).expect("slot 0");
        if let Some(l) = snap.layer().filter(|l| l.done >= 1) {
            return l.total;
        }
        assert!(tokio::time::Instant::now() < deadline, "no layer finished");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn a_cancel_stops_a_prompt_chunk_at_its_next_layer_on_the_cpu() {
    // One chunk of 3,000 tokens: cancelled once its first layer is done, it stops at a
    // later layer boundary and is abandoned, so the slot holds none of it.
    let rig = Rig::with(1, |c| {
        c.ctx = 4096;
        c.ubatch = 4096;
    });
    let rx = post_prefill(&rig, 0, prompt(&rig, 3000));
    let n_layers = until_a_layer_is_done(&rig).await;
    let asked = std::time::Instant::now();
    let task_id = cancel_when_running(&rig).await;
    match reply(rx).await {
        Err(TaskError::Client(ClientError::Cancelled)) => {}
        other => panic!("a prefill cancelled mid-chunk answers cancelled: {other:?}"),
    }
    eprintln!(
        "cancelled inside a chunk of {n_layers} layers; answered {:?} after the cancel",
        asked.elapsed()
    );
    assert_idle_cancelled(&rig, task_id);
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let s = reader.slot(0).expect("slot 0").state;
    assert_eq!(s.n_past, 0, "the chunk in flight was abandoned: {s:?}");
}

#[tokio::test]
async fn a_cancelled_decode_answers_the_tokens_it_generated() {
    let rig = rig_holding(8).await;
    let n = 4000;
    let rx = post_decode(&rig, 0, n);
    let task_id = cancel_when_running(&rig).await;
    let d = reply(rx)
        .await
        .expect("a cancelled decode answers its tokens");
    assert_eq!(d.stop, StopReason::Cancelled, "{:?}", d.stop);
    assert!(d.tokens.len() < n, "stopped early: {}", d.tokens.len());
    assert_eq!(
        d.n_past,
        8 + d.tokens.len(),
        "the slot holds what it generated"
    );
    assert_eq!(d.task_id, task_id);
    assert_idle_cancelled(&rig, task_id);
}

#[tokio::test]
async fn a_decode_whose_client_went_away_stops() {
    let rig = rig_holding(8).await;
    let n = 4000;
    let rx = post_decode(&rig, 0, n);
    // The client goes away once the decode runs (the board shows a task; nothing cancels).
    until_phase(&rig, hydra_layout::Phase::Decode).await;
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    drop(rx);
    // The next task on the slot finds what the abandoned decode left: fewer tokens than
    // it was asked for.
    let d = reply(post_decode(&rig, 0, 1))
        .await
        .expect("the slot takes the next task");
    assert!(
        d.n_past < 8 + n + 1,
        "the abandoned decode ran to its end: n_past {}",
        d.n_past
    );
    let s = reader.slot(0).expect("slot 0").state;
    assert_eq!(s.phase, hydra_layout::Phase::Idle, "{s:?}");
}

#[tokio::test]
async fn action_cancel_says_which_task_it_stopped_or_why_none() {
    let rig = rig_holding(8).await;
    let idle = rig.call("POST", "/slots/0?action=cancel", "").await;
    assert_eq!(idle.status, 200);
    assert_eq!(idle.json["cancelled"], false, "{}", idle.text);
    assert_eq!(
        idle.json["detail"], "no task runs on this slot",
        "{}",
        idle.text
    );

    let rx = post_decode(&rig, 0, 4000);
    until_phase(&rig, hydra_layout::Phase::Decode).await;
    let answer = rig.call("POST", "/slots/0?action=cancel", "").await;
    assert_eq!(answer.status, 200);
    let a = &answer.json;
    assert_eq!(
        (&a["cancelled"], &a["task"], &a["state"]),
        (
            &serde_json::json!(true),
            &serde_json::json!("decode"),
            &serde_json::json!("running")
        ),
        "{}",
        answer.text
    );
    let d = reply(rx).await.expect("the decode answers its tokens");
    assert_eq!(d.stop, StopReason::Cancelled);
    assert_eq!(a["task_id"], d.task_id, "{}", answer.text);
}

#[tokio::test]
async fn action_cancel_removes_the_requests_waiting_for_the_slot() {
    let rig = Rig::new(1, 4096);
    let spec = |n| GenerateSpec {
        tokens: prompt(&rig, 8),
        cache_prompt: false,
        decode: decode(n),
        stop: Vec::new(),
        logprobs: None,
    };
    // A long generation holds slot 0; a second request waits for it.
    let running = rig.state.start(spec(4000), Some(0)).await.expect("starts");
    let state = rig.state.clone();
    let second = spec(4);
    let waiter = tokio::spawn(async move { state.start(second, Some(0)).await.map(|_| ()) });
    let deadline = tokio::time::Instant::now() + LIMIT;
    while rig.state.pool.waiting() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second request never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let answer = rig
        .call("POST", "/slots/0?action=cancel&waiting=true", "")
        .await;
    assert_eq!(answer.json["waiting_cancelled"], 1, "{}", answer.text);
    assert_eq!(answer.json["cancelled"], true, "{}", answer.text);
    let left = tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("the waiter answers")
        .expect("no panic");
    let e = left.expect_err("the waiting request is cancelled");
    assert_eq!(e.kind.code(), "cancelled", "{}", e.message);
    assert_eq!(rig.state.pool.waiting(), 0, "the queue is empty");
    drop(running);
}

/// Slot 0's whole saved state.
async fn saved_state(rig: &Rig) -> Vec<u8> {
    let (tx, rx) = oneshot::channel();
    rig.post(
        rig.state.slot(0).expect("a slot"),
        TaskKind::Save { reply: tx },
    );
    let mut stream = reply(rx).await.expect("a save stream");
    let mut bytes = Vec::new();
    while let Some(chunk) = tokio::time::timeout(LIMIT, stream.chunks.recv())
        .await
        .expect("a chunk in time")
    {
        bytes.extend_from_slice(&chunk.expect("a chunk"));
    }
    assert_eq!(bytes.len() as u64, stream.len);
    bytes
}

#[tokio::test]
async fn a_restore_whose_client_went_away_leaves_the_slot_empty() {
    let rig = rig_holding(200).await;
    let state = saved_state(&rig).await;
    // A long decode runs; the restore queued behind it loses its client before it starts.
    let decoding = post_decode(&rig, 0, 4000);
    let (tx, rx) = oneshot::channel();
    rig.post(
        rig.state.slot(0).expect("a slot"),
        TaskKind::Restore {
            data: axum::body::Bytes::from(state),
            reply: tx,
        },
    );
    drop(rx);
    let task_id = cancel_when_running(&rig).await;
    let d = reply(decoding).await.expect("the decode answers");
    assert_eq!((d.stop, d.task_id), (StopReason::Cancelled, task_id));
    // The restore starts, sees its client gone at its first block, and empties the slot.
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let deadline = tokio::time::Instant::now() + LIMIT;
    let s = loop {
        let s = reader.slot(0).expect("slot 0").state;
        if s.task_id > task_id && s.phase == hydra_layout::Phase::Idle {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restore never ended: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    };
    assert_eq!(
        s.finish_reason,
        hydra_layout::FinishReason::Cancelled,
        "{s:?}"
    );
    assert_eq!(s.n_past, 0, "never half-restored: {s:?}");
    // The slot is empty: a decode finds nothing to continue.
    assert!(matches!(
        reply(post_decode(&rig, 0, 1)).await,
        Err(TaskError::Client(ClientError::EmptySlot(_)))
    ));
}

/// Slot 0's pending count and the engine's waiting requests, from the segment.
fn waiting_counts(rig: &Rig) -> (u64, u64) {
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let pending = reader.slot(0).expect("slot 0").pending;
    let header = reader.header().expect("header");
    (pending, header.counters.requests_waiting)
}

/// Waits (at most [`LIMIT`]) until slot 0's pending count is `n`.
async fn until_pending(rig: &Rig, n: u64) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while waiting_counts(rig).0 != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slot 0 never had {n} pending: {:?}",
            waiting_counts(rig)
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn a_slot_task_whose_client_goes_away_while_queued_leaves_the_queue_at_once() {
    let rig = rig_holding(8).await;
    let decode_rx = post_decode(&rig, 0, 4000);
    until_phase(&rig, hydra_layout::Phase::Decode).await;
    let running = rig.state.shared.reader.as_ref().expect("reader").slot(0);
    let decode_id = running.expect("slot 0").state.task_id;
    // A prefill for the busy slot waits in the queue; its client gives up.
    let client = rig.call("POST", "/slots/0/prefill", r#"{"prompt":"queued"}"#);
    let gave_up = tokio::time::timeout(std::time::Duration::from_millis(300), client).await;
    assert!(
        gave_up.is_err(),
        "the prefill cannot run while the decode does"
    );
    assert_eq!(
        waiting_counts(&rig),
        (0, 0),
        "withdrawn while the decode still runs"
    );
    let s = rig.state.shared.reader.as_ref().expect("reader").slot(0);
    assert_eq!(
        s.expect("slot 0").state.task_id,
        decode_id,
        "still decoding"
    );
    rig.state.shared.cancel.cancel(0);
    let d = reply(decode_rx).await.expect("the decode answers");
    // The withdrawn prefill never began a task: the next task id is the next one begun.
    let after = reply(post_prefill(&rig, 0, prompt(&rig, 2)))
        .await
        .expect("a later prefill runs");
    assert_eq!(
        after.task_id,
        d.task_id + 1,
        "the withdrawn prefill never ran"
    );
    assert_eq!(after.n_past, 8 + d.tokens.len() + 2, "{after:?}");
}

#[tokio::test]
async fn action_cancel_waiting_withdraws_the_tasks_queued_for_the_slot() {
    let rig = rig_holding(8).await;
    let decode_rx = post_decode(&rig, 0, 4000);
    until_phase(&rig, hydra_layout::Phase::Decode).await;
    let queued = {
        let rig_state = rig.state.clone();
        let router = hydra_engine_server::http::router(rig_state);
        tokio::spawn(async move {
            let req = axum::http::Request::post("/slots/0/decode")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(r#"{"n_predict":4}"#))
                .expect("a request");
            tower::ServiceExt::oneshot(router, req)
                .await
                .expect("an answer")
                .status()
        })
    };
    until_pending(&rig, 1).await;
    let answer = rig
        .call("POST", "/slots/0?action=cancel&waiting=true", "")
        .await;
    assert_eq!(answer.json["waiting_cancelled"], 1, "{}", answer.text);
    assert_eq!(answer.json["cancelled"], true, "{}", answer.text);
    assert_eq!(waiting_counts(&rig), (0, 0), "off the count at once");
    let status = tokio::time::timeout(LIMIT, queued)
        .await
        .expect("the queued decode answers")
        .expect("no panic");
    assert_eq!(status, 400, "the cancelled class");
    let d = reply(decode_rx).await.expect("the running decode answers");
    assert_eq!(d.stop, StopReason::Cancelled);
    let again = rig
        .call("POST", "/slots/0?action=cancel&waiting=true", "")
        .await;
    assert_eq!(again.json["waiting_cancelled"], 0, "{}", again.text);
}
