//! Cancels fired at random moments into four busy slots: generations of short and long
//! prompts (several chunks each, so that cancels land inside prompt chunks, between them
//! and between tokens), some of whose clients go away after a random number of tokens,
//! while another task cancels a random slot every few milliseconds through the cancel
//! board. Nothing may panic or fail, no slot may stay busy, every request that finished
//! must have generated what it generates alone, a cancelled one a prefix of it, and the
//! segment's counters must add up. The seed is printed (`HYDRA_CANCEL_SEED` replays it).

use crate::compute::generate_spec;
use crate::support::{Rig, LIMIT};
use hydra_engine_core::sampling::StopReason;
use hydra_engine_server::cancel::Cancelled;
use hydra_engine_server::task::generate::{GenEvent, GenSummary};
use hydra_engine_server::task::TaskKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Cancels through the board that must land on a running task.
const CANCELS: usize = 50;
const SLOTS: usize = 4;
/// Passes over the request list at most (the storm ends sooner, when the cancels landed).
const PASSES: usize = 40;

/// One generation of the workload; `drop_after`: its client goes away after that many
/// tokens.
#[derive(Debug, Clone)]
struct Request {
    prompt: Vec<u32>,
    n_predict: usize,
    drop_after: Option<usize>,
}

/// How one request of the storm ended.
enum Outcome {
    Done(GenSummary),
    /// Its client went away after `seen` tokens.
    Dropped {
        seen: usize,
    },
}

/// Runs `r` on `slot` until it ends, or until its client goes away.
async fn run(rig: &Rig, slot: usize, r: &Request) -> Outcome {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let events = tx;
    let kind = TaskKind::Generate {
        spec: generate_spec(r.prompt.clone(), r.n_predict),
        events,
    };
    rig.post(rig.state.slot(slot).expect("a slot"), kind);
    let mut seen = 0;
    loop {
        let event = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .expect("an event in time")
            .expect("events go on until Done or Failed");
        match event {
            GenEvent::Token(t) if t.id.is_some() => {
                seen += 1;
                if r.drop_after == Some(seen) {
                    return Outcome::Dropped { seen };
                }
            }
            GenEvent::Done(s) => return Outcome::Done(s),
            GenEvent::Failed(e) => panic!("slot {slot}: {r:?} failed: {e}"),
            _ => {}
        }
    }
}

/// Twelve requests from `rng`: prompts of 4-90 tokens (chunks of 16), 1-24 tokens each, a
/// quarter of them with a client that goes away after 1-8 tokens.
fn workload(rig: &Rig, rng: &mut fastrand::Rng) -> Vec<Request> {
    let tok = &rig.state.shared.tokenizer;
    let words = tok.encode("the quick brown fox jumps over the lazy dog again", false);
    (0..12)
        .map(|_| {
            let len = rng.usize(4..=90);
            let start = rng.usize(0..words.len());
            Request {
                prompt: words
                    .iter()
                    .copied()
                    .cycle()
                    .skip(start)
                    .take(len)
                    .collect(),
                n_predict: rng.usize(1..=24),
                drop_after: (rng.usize(0..4) == 0).then(|| rng.usize(1..=8)),
            }
        })
        .collect()
}

/// What the storm saw, per request index: tokens of each finished run and of each cancelled
/// one, how many clients went away, and the tokens generated that the test knows of.
#[derive(Default)]
struct Tally {
    finished: Vec<(usize, Vec<u32>)>,
    cancelled: Vec<(usize, Vec<u32>)>,
    dropped: usize,
    known_tokens: u64,
    prompt_tokens: u64,
}

/// Slot `slot`'s worker: the requests in turn (from a slot-dependent start), pass after
/// pass, until the canceller has landed every cancel.
async fn worker(rig: &Rig, slot: usize, reqs: &[Request], landed: &AtomicUsize) -> Tally {
    let mut t = Tally::default();
    for pass in 0..PASSES {
        for k in 0..reqs.len() {
            if landed.load(Ordering::Relaxed) >= CANCELS {
                return t;
            }
            let i = (k + slot * 3 + pass) % reqs.len();
            t.prompt_tokens += reqs[i].prompt.len() as u64;
            match run(rig, slot, &reqs[i]).await {
                Outcome::Done(s) => {
                    t.known_tokens += s.tokens.len() as u64;
                    match s.finish {
                        StopReason::Cancelled => t.cancelled.push((i, s.tokens)),
                        _ => t.finished.push((i, s.tokens)),
                    }
                }
                Outcome::Dropped { seen } => {
                    t.known_tokens += seen as u64;
                    t.dropped += 1;
                }
            }
        }
    }
    t
}

/// Cancels a random slot every 5-40 ms until `CANCELS` landed on running tasks.
async fn canceller(rig: &Rig, rng: &mut fastrand::Rng, landed: &AtomicUsize) {
    let deadline = tokio::time::Instant::now() + LIMIT * 4;
    while landed.load(Ordering::Relaxed) < CANCELS {
        tokio::time::sleep(Duration::from_millis(rng.u64(5..=40))).await;
        if let Cancelled::Stopping { .. } = rig.state.shared.cancel.cancel(rng.usize(0..SLOTS)) {
            landed.fetch_add(1, Ordering::Relaxed);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} cancels landed",
            landed.load(Ordering::Relaxed)
        );
    }
}

/// What each request generates alone, on a rig of one slot.
async fn alone(reqs: &[Request]) -> Vec<Vec<u32>> {
    let rig = Rig::with(1, |c| {
        c.ctx = 256;
        c.ubatch = 16;
    });
    let mut out = Vec::new();
    for r in reqs {
        let solo = Request {
            drop_after: None,
            ..r.clone()
        };
        match run(&rig, 0, &solo).await {
            Outcome::Done(s) => out.push(s.tokens),
            Outcome::Dropped { .. } => unreachable!("nobody drops a solo run"),
        }
    }
    out
}

#[tokio::test]
async fn fifty_random_cancels_into_four_busy_slots_keep_every_text_and_count() {
    let seed = std::env::var("HYDRA_CANCEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("cancel storm: HYDRA_CANCEL_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let rig = Rig::with(SLOTS, |c| {
        c.ctx = 256;
        c.ubatch = 16;
    });
    let reqs = workload(&rig, &mut rng);
    let want = alone(&reqs).await;
    let landed = AtomicUsize::new(0);
    let (a, b, c, d, ()) = tokio::join!(
        worker(&rig, 0, &reqs, &landed),
        worker(&rig, 1, &reqs, &landed),
        worker(&rig, 2, &reqs, &landed),
        worker(&rig, 3, &reqs, &landed),
        canceller(&rig, &mut rng, &landed),
    );
    let tallies = [a, b, c, d];
    check_texts(&tallies, &want);
    check_idle_and_counted(&rig, &tallies).await;
}

/// Every finished request generated what it generates alone; a cancelled one a prefix.
fn check_texts(tallies: &[Tally], want: &[Vec<u32>]) {
    let (mut finished, mut cancelled, mut dropped) = (0, 0, 0);
    for t in tallies {
        for (i, tokens) in &t.finished {
            assert_eq!(tokens, &want[*i], "request {i} differs from its run alone");
        }
        for (i, tokens) in &t.cancelled {
            assert!(
                want[*i].starts_with(tokens),
                "cancelled request {i}: {tokens:?} is not a prefix of {:?}",
                want[*i]
            );
        }
        finished += t.finished.len();
        cancelled += t.cancelled.len();
        dropped += t.dropped;
    }
    eprintln!(
        "cancel storm: {finished} finished, {cancelled} ended cancelled, {dropped} clients gone"
    );
    assert!(cancelled > 0, "some cancel ended a request");
}

/// No slot stays busy, nothing is counted running, and the counters hold every token the
/// test saw (a request whose client went away may have generated one more before the
/// compute thread saw it gone), and no more prompt tokens than were sent.
async fn check_idle_and_counted(rig: &Rig, tallies: &[Tally]) {
    let reader = rig.state.shared.reader.as_ref().expect("publishing is on");
    let deadline = tokio::time::Instant::now() + LIMIT;
    while (0..SLOTS).any(|s| reader.slot(s).expect("slot").state.phase.is_active()) {
        assert!(tokio::time::Instant::now() < deadline, "a slot stays busy");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let counters = reader.header().expect("header").counters;
    let known: u64 = tallies.iter().map(|t| t.known_tokens).sum();
    let dropped: u64 = tallies.iter().map(|t| t.dropped as u64).sum();
    let prompt: u64 = tallies.iter().map(|t| t.prompt_tokens).sum();
    assert_eq!(counters.requests_running, 0, "{counters:?}");
    let generated = counters.generated_tokens_total;
    assert!(
        (known..=known + dropped).contains(&generated),
        "generated {generated}, the test saw {known} with {dropped} clients gone"
    );
    assert!(
        counters.prompt_tokens_total <= prompt,
        "{counters:?}: {prompt} sent"
    );
}
