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
            spec: GenerateSpec {
                tokens: prompt,
                cache_prompt: false,
                decode: decode(n_predict),
                stop: Vec::new(),
                logprobs: None,
            },
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
                    assert!(rig.state.shared.cancel.cancel(0).is_some(), "a task runs");
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

async fn reply<T>(rx: oneshot::Receiver<Result<T, TaskError>>) -> Result<T, TaskError> {
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
