//! Cancels fired at random moments into four busy slots: generations of short and long
//! prompts (several chunks each, so that cancels land inside prompt chunks, between them
//! and between tokens), some of whose clients go away after a random number of tokens,
//! and the same requests as a slot erase, prefill and decode, while another task cancels a
//! random slot every few milliseconds through the cancel board. Nothing may panic or fail,
//! no slot may stay busy, every request that finished must have generated what it
//! generates alone, a cancelled one a prefix of it, every cancel's answer must be what
//! happened to its task (stopping: it ended cancelled; finishing: it completed), and the
//! segment's counters must add up. The seed is printed (`HYDRA_CANCEL_SEED` replays it).

use crate::compute::{generate_spec, post_decode, post_prefill, reply};
use crate::support::{Rig, LIMIT};
use hydra_engine_core::sampling::StopReason;
use hydra_engine_server::cancel::Cancelled;
use hydra_engine_server::task::generate::{GenEvent, GenSummary};
use hydra_engine_server::task::TaskKind;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Cancels through the board that must land on a running task.
const CANCELS: usize = 50;
const SLOTS: usize = 4;
/// Passes over the request list at most (the storm ends sooner, when the cancels landed).
const PASSES: usize = 40;

/// One generation of the workload; `drop_after`: its client goes away after that many
/// tokens; `split`: it runs as a slot erase, a prefill and a decode instead.
#[derive(Debug, Clone)]
struct Request {
    prompt: Vec<u32>,
    n_predict: usize,
    drop_after: Option<usize>,
    split: bool,
}

/// How one request of the storm ended.
enum Outcome {
    /// It ran to its end: its tasks (a generation, or a prefill and a decode), whether it
    /// ended cancelled, and the tokens it generated.
    Done {
        task_ids: Vec<u64>,
        cancelled: bool,
        tokens: Vec<u32>,
    },
    /// Its client went away after `seen` tokens.
    Dropped { seen: usize },
}

impl From<GenSummary> for Outcome {
    fn from(s: GenSummary) -> Self {
        Outcome::Done {
            task_ids: vec![s.task_id],
            cancelled: s.finish == StopReason::Cancelled,
            tokens: s.tokens,
        }
    }
}

/// Runs `r` as a slot erase, a prefill and a decode on `slot`. A prefill that answers
/// cancelled ends it (its task id is not in the error; the decode is not posted).
async fn run_split(rig: &Rig, slot: usize, r: &Request) -> Outcome {
    let id = rig.state.slot(slot).expect("a slot");
    let (tx, rx) = tokio::sync::oneshot::channel();
    rig.post(id, TaskKind::Erase { reply: tx });
    reply(rx).await.expect("the erase");
    let prefill = match reply(post_prefill(rig, slot, r.prompt.clone())).await {
        Ok(p) => p,
        Err(e) if e.is_cancelled() => {
            return Outcome::Done {
                task_ids: Vec::new(),
                cancelled: true,
                tokens: Vec::new(),
            }
        }
        Err(e) => panic!("slot {slot}: the prefill of {r:?} failed: {e}"),
    };
    let d = reply(post_decode(rig, slot, r.n_predict))
        .await
        .unwrap_or_else(|e| panic!("slot {slot}: the decode of {r:?} failed: {e}"));
    Outcome::Done {
        task_ids: vec![prefill.task_id, d.task_id],
        cancelled: d.stop == StopReason::Cancelled,
        tokens: d.tokens,
    }
}

/// Runs `r` on `slot` until it ends, or until its client goes away.
async fn run(rig: &Rig, slot: usize, r: &Request) -> Outcome {
    if r.split {
        return run_split(rig, slot, r).await;
    }
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
            GenEvent::Done(s) => return s.into(),
            GenEvent::Failed(e) => panic!("slot {slot}: {r:?} failed: {e}"),
            _ => {}
        }
    }
}

/// Twelve requests from `rng`: prompts of 4-90 tokens (chunks of 16), 1-24 tokens each; a
/// quarter of them with a client that goes away after 1-8 tokens, a third of the others
/// run as a prefill and a decode.
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
                split: rng.usize(0..3) == 0,
            }
        })
        .map(|mut r| {
            r.split &= r.drop_after.is_none();
            r
        })
        .collect()
}

/// What the storm saw, per request index: tokens of each finished run and of each cancelled
/// one, how many clients went away, and the tokens generated that the test knows of.
#[derive(Default)]
struct Tally {
    finished: Vec<(usize, Vec<u32>)>,
    cancelled: Vec<(usize, Vec<u32>)>,
    /// Tasks that completed, and tasks that ended cancelled.
    completed_ids: Vec<u64>,
    cancelled_ids: Vec<u64>,
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
                Outcome::Done {
                    mut task_ids,
                    cancelled,
                    tokens,
                } => {
                    t.known_tokens += tokens.len() as u64;
                    if cancelled {
                        // The last task ended cancelled; any before it (a prefill) completed.
                        t.cancelled_ids.extend(task_ids.pop());
                        t.cancelled.push((i, tokens));
                    } else {
                        t.finished.push((i, tokens));
                    }
                    t.completed_ids.extend(task_ids);
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

/// What the cancels answered: the tasks each first stopped, and those it found finishing.
#[derive(Default)]
struct Answers {
    stopped: Vec<u64>,
    finishing: Vec<u64>,
}

/// Cancels a random slot every 5-40 ms until `CANCELS` landed on running tasks.
async fn canceller(rig: &Rig, rng: &mut fastrand::Rng, landed: &AtomicUsize) -> Answers {
    let deadline = tokio::time::Instant::now() + LIMIT * 4;
    let mut answers = Answers::default();
    while landed.load(Ordering::Relaxed) < CANCELS {
        tokio::time::sleep(Duration::from_millis(rng.u64(5..=40))).await;
        match rig.state.shared.cancel.cancel(rng.usize(0..SLOTS)) {
            Cancelled::Stopping { task_id, again, .. } => {
                landed.fetch_add(1, Ordering::Relaxed);
                if !again {
                    answers.stopped.push(task_id);
                }
            }
            Cancelled::Finishing { task_id, .. } => answers.finishing.push(task_id),
            Cancelled::Idle => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} cancels landed",
            landed.load(Ordering::Relaxed)
        );
    }
    answers
}

/// Every cancel's answer is what happened: a task it stopped never completed, and a task
/// it found finishing never ended cancelled.
fn check_answers(tallies: &[Tally], answers: &Answers) {
    let completed: HashSet<u64> = tallies
        .iter()
        .flat_map(|t| t.completed_ids.clone())
        .collect();
    let cancelled: HashSet<u64> = tallies
        .iter()
        .flat_map(|t| t.cancelled_ids.clone())
        .collect();
    for id in &answers.stopped {
        assert!(
            !completed.contains(id),
            "task {id}: cancelled, yet it completed"
        );
    }
    for id in &answers.finishing {
        assert!(
            !cancelled.contains(id),
            "task {id}: said finishing, yet it ended cancelled"
        );
    }
    eprintln!(
        "cancel storm: {} cancels stopped a task, {} found one finishing",
        answers.stopped.len(),
        answers.finishing.len()
    );
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
            split: false,
            ..r.clone()
        };
        match run(&rig, 0, &solo).await {
            Outcome::Done { tokens, .. } => out.push(tokens),
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
    let (a, b, c, d, answers) = tokio::join!(
        worker(&rig, 0, &reqs, &landed),
        worker(&rig, 1, &reqs, &landed),
        worker(&rig, 2, &reqs, &landed),
        worker(&rig, 3, &reqs, &landed),
        canceller(&rig, &mut rng, &landed),
    );
    let tallies = [a, b, c, d];
    check_texts(&tallies, &want);
    check_answers(&tallies, &answers);
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
