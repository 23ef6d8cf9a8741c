//! The demo's workload: every slot gets work at once, so the single compute thread always
//! has a task running and others queued, as in production.

use anyhow::Context as _;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to run.
pub struct Plan {
    /// Engine URL.
    pub base: String,
    /// Slots.
    pub slots: usize,
    /// The long prompt, as token ids of the served model.
    pub long_prompt: Vec<u32>,
    /// Decode length.
    pub decode_tokens: usize,
    /// Times each slot's work is repeated (the first round also saves slot 1 and restores
    /// it into the last slot).
    pub rounds: usize,
}

/// One finished prefill or decode, timed by the engine and by the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// What it was ("decode slot 1").
    pub what: String,
    /// Tokens the measured phase processed (prompt tokens of a prefill, generated tokens
    /// of a decode).
    pub tokens: usize,
    /// Seconds the engine computed the measured phase (its own timing).
    pub compute_s: f64,
    /// Seconds the engine computed other phases of the same task (a completion's prompt).
    pub other_compute_s: f64,
    /// Seconds from sending the request to its answer, as the client saw them.
    pub wall_s: f64,
}

impl Request {
    /// Seconds the request waited rather than computed: behind other tasks in the single
    /// compute queue, plus HTTP.
    pub fn wait_s(&self) -> f64 {
        (self.wall_s - self.compute_s - self.other_compute_s).max(0.0)
    }

    /// Compute throughput of the measured phase, tokens/s (queue wait excluded).
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.compute_s.max(1e-9)
    }

    /// The summary line.
    pub fn line(&self) -> String {
        format!(
            "  {:<28} {:>5} tok: waited {:>6.2} s in the queue, computed in {:>6.2} s = {:>8.1} tokens/s",
            self.what,
            self.tokens,
            self.wait_s(),
            self.compute_s,
            self.tokens_per_s()
        )
    }
}

/// Figures the workload collected.
#[derive(Default)]
pub struct Outcome {
    /// Each finished prefill/decode.
    pub requests: Vec<Request>,
    /// Latencies of `/state/meta` answered from the segment while busy, seconds.
    pub meta_segment: Vec<f64>,
    /// Latency of one `?via=queue` meta while busy (None: timed out after 5 s, as
    /// Hydra Core's client would).
    pub meta_queue: Option<Result<f64, String>>,
    /// Save/restore figures: (bytes, save s, restore s).
    pub state: Option<(usize, f64, f64)>,
}

/// The workload in flight.
pub struct Running {
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
    outcome: Arc<Mutex<Outcome>>,
}

impl Running {
    /// Whether every request has been answered.
    pub fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Waits for the workload and returns what it measured.
    pub fn join(self) -> anyhow::Result<Outcome> {
        for t in self.threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a workload thread panicked"))??;
        }
        let outcome = std::mem::take(&mut *self.outcome.lock().expect("outcome lock"));
        Ok(outcome)
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build()
}

fn post(
    agent: &ureq::Agent,
    url: &str,
    body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    match agent.post(url).send_json(body) {
        Ok(r) => Ok(r.into_json()?),
        Err(ureq::Error::Status(code, r)) => {
            anyhow::bail!(
                "{url}: HTTP {code}: {}",
                r.into_string().unwrap_or_default()
            )
        }
        Err(e) => Err(e).with_context(|| url.to_string()),
    }
}

/// A prompt of exactly `n` tokens of `tokenizer` (at least one): a sentence repeated.
pub fn long_prompt(tokenizer: &hydra_engine_core::Tokenizer, n: usize) -> Vec<u32> {
    let base = "The compute loop publishes a progress record for every slot on every step. ";
    let mut text = String::from(base);
    loop {
        let ids = tokenizer.encode(&text, tokenizer.add_bos_by_default());
        // Each repetition adds tokens; stop once there are enough.
        if ids.len() >= n.max(1) || ids.is_empty() {
            return ids.into_iter().take(n.max(1)).collect();
        }
        text.push_str(base);
    }
}

/// Counts a workload thread as finished when dropped (also on an early error return).
struct FinishedOnDrop(Arc<AtomicUsize>);

impl Drop for FinishedOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts the workload threads: a long chunked prefill on slot 0, completions on the
/// other slots (slot 1's first one handed over to the last slot by a save and restore),
/// and the meta prober.
pub fn start(plan: Plan) -> Running {
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    // Workload threads that have finished; the meta prober stops when all have, so its
    // figures are taken while slots are busy.
    let finished = Arc::new(AtomicUsize::new(0));
    let workers = plan.slots;
    let plan = Arc::new(plan);
    let mut threads = Vec::new();
    threads.push(spawn_prefills(&plan, &outcome, &finished));
    // Slot 1 says when its first completion is done and then waits, before it erases for
    // its next round, until the last slot has saved its state.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (saved_tx, saved_rx) = std::sync::mpsc::channel::<()>();
    let (mut done_tx, mut saved_rx) = (Some(done_tx), Some(saved_rx));
    let mut hand_over = Some(HandOver {
        done: done_rx,
        saved: saved_tx,
    });
    let last = plan.slots - 1;
    for slot in 1..plan.slots {
        let roles = Roles {
            saver: (slot == 1 && last != 1).then(|| Saver {
                done: done_tx.take(),
                saved: saved_rx.take(),
            }),
            restorer: (slot == last && last != 1)
                .then(|| hand_over.take())
                .flatten(),
        };
        threads.push(spawn_completions(slot, roles, &plan, &outcome, &finished));
    }
    threads.push(spawn_meta_prober(&plan, &outcome, &finished, workers));
    Running { threads, outcome }
}

/// A workload thread.
type Worker = std::thread::JoinHandle<anyhow::Result<()>>;

/// Slot 0: a long prompt, prefilled chunk by chunk, each round.
fn spawn_prefills(
    plan: &Arc<Plan>,
    outcome: &Arc<Mutex<Outcome>>,
    finished: &Arc<AtomicUsize>,
) -> Worker {
    let (plan, outcome) = (plan.clone(), outcome.clone());
    spawn_worker(finished, move |agent| {
        for _ in 0..plan.rounds {
            erase(agent, &plan, 0)?;
            let t = Instant::now();
            let r = post(
                agent,
                &format!("{}/slots/0/prefill", plan.base),
                json!({ "tokens": plan.long_prompt }),
            )?;
            let request = Request {
                what: "prefill slot 0".into(),
                tokens: r["n_prompt_tokens"].as_u64().unwrap_or(0) as usize,
                compute_s: r["prompt_ms"].as_f64().unwrap_or(0.0) / 1e3,
                other_compute_s: 0.0,
                wall_s: t.elapsed().as_secs_f64(),
            };
            outcome.lock().expect("outcome lock").requests.push(request);
        }
        Ok(())
    })
}

/// What a completion slot does beside its completions: slot 1 saves its first one for
/// the last slot, which restores it instead of its own first round.
struct Roles {
    saver: Option<Saver>,
    restorer: Option<HandOver>,
}

/// Slot 1's side of the hand-over: it says when its first completion is done, then waits
/// until the last slot has saved it.
struct Saver {
    done: Option<std::sync::mpsc::Sender<()>>,
    saved: Option<std::sync::mpsc::Receiver<()>>,
}

/// A workload thread running `body` with an agent of its own, counted as finished when it
/// ends (also on an early error).
fn spawn_worker(
    finished: &Arc<AtomicUsize>,
    body: impl FnOnce(&ureq::Agent) -> anyhow::Result<()> + Send + 'static,
) -> Worker {
    let finished = FinishedOnDrop(finished.clone());
    std::thread::spawn(move || {
        let _finished = finished;
        body(&agent())
    })
}

/// Slots 1..: completions with long decodes, each round.
fn spawn_completions(
    slot: usize,
    roles: Roles,
    plan: &Arc<Plan>,
    outcome: &Arc<Mutex<Outcome>>,
    finished: &Arc<AtomicUsize>,
) -> Worker {
    let (plan, outcome) = (plan.clone(), outcome.clone());
    let last = plan.slots - 1;
    spawn_worker(finished, move |agent| {
        for round in 0..plan.rounds {
            if round == 0 {
                if let Some(hand_over) = &roles.restorer {
                    // Wait for slot 1's first completion to be done, then restore it here.
                    restore_into(agent, &plan, last, &outcome, hand_over)?;
                    continue;
                }
            }
            if round == 1 {
                if let Some(Saver { done, saved }) = &roles.saver {
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    if let Some(saved) = saved {
                        // Bounded: the last slot saves within seconds (or has failed).
                        let _ = saved.recv_timeout(Duration::from_secs(120));
                    }
                }
            }
            erase(agent, &plan, slot)?;
            let request = completion(agent, &plan, slot, round)?;
            outcome.lock().expect("outcome lock").requests.push(request);
        }
        Ok(())
    })
}

/// One completion of `round` on `slot`, as the demo's summary counts it.
fn completion(
    agent: &ureq::Agent,
    plan: &Plan,
    slot: usize,
    round: usize,
) -> anyhow::Result<Request> {
    let t = Instant::now();
    let r = post(
        agent,
        &format!("{}/completion", plan.base),
        json!({
            "id_slot": slot,
            "prompt": format!("Slot {slot} says: "),
            "n_predict": plan.decode_tokens,
            "ignore_eos": true,
            "temperature": 0.8, "top_k": 40, "top_p": 0.95,
            "seed": slot + round * plan.slots,
        }),
    )?;
    let timings = &r["timings"];
    Ok(Request {
        what: format!("decode slot {slot}"),
        tokens: r["tokens_predicted"].as_u64().unwrap_or(0) as usize,
        compute_s: timings["predicted_ms"].as_f64().unwrap_or(0.0) / 1e3,
        other_compute_s: timings["prompt_ms"].as_f64().unwrap_or(0.0) / 1e3,
        wall_s: t.elapsed().as_secs_f64(),
    })
}

/// The meta prober: while the slots are busy, ask the engine for slot metadata from the
/// segment many times, and once through the queue (with Hydra Core's 5 s timeout).
fn spawn_meta_prober(
    plan: &Arc<Plan>,
    outcome: &Arc<Mutex<Outcome>>,
    finished: &Arc<AtomicUsize>,
    workers: usize,
) -> Worker {
    let (plan, outcome, finished) = (plan.clone(), outcome.clone(), finished.clone());
    std::thread::spawn(move || -> anyhow::Result<()> {
        let fast = agent();
        std::thread::sleep(Duration::from_millis(300));
        // The old way, in its own thread: it waits behind whatever task is running.
        let queue_probe = {
            let (url, outcome) = (
                format!("{}/slots/1/state/meta?via=queue", plan.base),
                outcome.clone(),
            );
            std::thread::spawn(move || {
                let slow = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(5))
                    .build();
                let t = Instant::now();
                let queued = match slow.get(&url).call() {
                    Ok(_) => Ok(t.elapsed().as_secs_f64()),
                    Err(e) => Err(format!("{e}")),
                };
                outcome.lock().expect("outcome lock").meta_queue = Some(queued);
            })
        };
        // Bounded: at most this many calls (about a minute of 10 ms pauses).
        for _ in 0..5000 {
            if finished.load(Ordering::Relaxed) >= workers {
                break;
            }
            let t = Instant::now();
            fast.get(&format!("{}/slots/1/state/meta", plan.base))
                .call()?;
            outcome
                .lock()
                .expect("outcome lock")
                .meta_segment
                .push(t.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(10));
        }
        queue_probe
            .join()
            .map_err(|_| anyhow::anyhow!("the queue probe panicked"))?;
        Ok(())
    })
}

/// Empties `slot` (its cache and record), so that each round starts from nothing.
fn erase(agent: &ureq::Agent, plan: &Plan, slot: usize) -> anyhow::Result<()> {
    post(
        agent,
        &format!("{}/slots/{slot}?action=erase", plan.base),
        json!({}),
    )
    .map(drop)
}

/// The channels between slot 1 and the slot its state is restored into.
struct HandOver {
    /// Slot 1's first completion is done.
    done: std::sync::mpsc::Receiver<()>,
    /// Its state is saved: slot 1 may go on.
    saved: std::sync::mpsc::Sender<()>,
}

fn restore_into(
    agent: &ureq::Agent,
    plan: &Plan,
    slot: usize,
    outcome: &Mutex<Outcome>,
    hand_over: &HandOver,
) -> anyhow::Result<()> {
    // Slot 1 holds its first completion's cache from when that is done until it is saved
    // (slot 1 sends nothing if it has one round only: its cache then stays as it is).
    let _ = hand_over.done.recv_timeout(Duration::from_secs(600));
    let t = Instant::now();
    let resp = agent
        .get(&format!("{}/slots/1/state", plan.base))
        .call()
        .context("save slot 1")?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes)?;
    let _ = hand_over.saved.send(());
    let save_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    agent
        .put(&format!("{}/slots/{slot}/state", plan.base))
        .send_bytes(&bytes)
        .context("restore into the last slot")?;
    let restore_s = t.elapsed().as_secs_f64();
    outcome.lock().expect("outcome lock").state = Some((bytes.len(), save_s, restore_s));
    let t = Instant::now();
    let r = post(
        agent,
        &format!("{}/slots/{slot}/decode", plan.base),
        json!({ "n_predict": (plan.decode_tokens / 2).max(1), "ignore_eos": true }),
    )?;
    let request = Request {
        what: format!("decode slot {slot} (restored)"),
        tokens: r["tokens"].as_array().map(|a| a.len()).unwrap_or(0),
        compute_s: r["predicted_ms"].as_f64().unwrap_or(0.0) / 1e3,
        other_compute_s: 0.0,
        wall_s: t.elapsed().as_secs_f64(),
    };
    outcome.lock().expect("outcome lock").requests.push(request);
    Ok(())
}

/// The requests of each kind ("decode slot 1") summed into one, in the order each kind
/// first finished; a kind that ran more than once is named with its count ("(x8)").
pub fn by_kind(requests: &[Request]) -> Vec<Request> {
    let mut kinds: Vec<(Request, usize)> = Vec::new();
    for r in requests {
        match kinds.iter_mut().find(|(k, _)| k.what == r.what) {
            Some((k, n)) => {
                k.tokens += r.tokens;
                k.compute_s += r.compute_s;
                k.other_compute_s += r.other_compute_s;
                k.wall_s += r.wall_s;
                *n += 1;
            }
            None => kinds.push((r.clone(), 1)),
        }
    }
    kinds
        .into_iter()
        .map(|(mut k, n)| {
            if n > 1 {
                k.what = format!("{} (x{n})", k.what);
            }
            k
        })
        .collect()
}

/// Prints the closing summary.
pub fn print_summary(o: &Outcome, view: &super::live_view::ViewStats) {
    println!("summary (one compute thread: a request waits while the others compute; tokens/s counts compute time only)");
    for r in by_kind(&o.requests) {
        println!("{}", r.line());
    }
    if let Some((bytes, save, restore)) = o.state {
        println!(
            "  state save/restore           {:.1} MiB saved in {save:.2} s, restored in {restore:.2} s (wall, queue wait included)",
            bytes as f64 / (1 << 20) as f64
        );
    }
    let mut seg = o.meta_segment.clone();
    seg.sort_by(f64::total_cmp);
    if !seg.is_empty() {
        let pct = |p: f64| seg[((seg.len() - 1) as f64 * p).round() as usize] * 1e3;
        println!(
            "  meta from the segment (HTTP, {} calls while busy): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            seg.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
    } else {
        println!("  meta from the segment (HTTP): no call while busy (the workload ended before the first)");
    }
    match &o.meta_queue {
        Some(Ok(s)) => println!("  meta through the task queue (the old way): {:.0} ms (waited behind the running task)", s * 1e3),
        Some(Err(e)) => println!("  meta through the task queue (the old way): gave up after 5 s, as Hydra Core would ({e})"),
        None => {}
    }
    println!(
        "  live view: {} snapshots read straight from shared memory, median {:.1} µs each",
        view.snapshots, view.median_capture_us
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_wait_and_compute_are_reported_apart() {
        let r = Request {
            what: "decode slot 2".into(),
            tokens: 384,
            compute_s: 3.0,
            other_compute_s: 0.5,
            wall_s: 10.0,
        };
        assert!((r.wait_s() - 6.5).abs() < 1e-9);
        assert!((r.tokens_per_s() - 128.0).abs() < 1e-9);
        let line = r.line();
        assert!(line.contains("waited   6.50 s in the queue"), "{line}");
        assert!(
            line.contains("computed in   3.00 s =    128.0 tokens/s"),
            "{line}"
        );
    }

    #[test]
    fn rounds_of_one_kind_are_summed_into_one_line() {
        let r = |what: &str, tokens, compute_s| Request {
            what: what.into(),
            tokens,
            compute_s,
            other_compute_s: 0.25,
            wall_s: 2.0,
        };
        let kinds = by_kind(&[
            r("decode slot 1", 100, 1.0),
            r("prefill slot 0", 50, 0.5),
            r("decode slot 1", 300, 3.0),
        ]);
        assert_eq!(kinds.len(), 2);
        assert_eq!(kinds[0].what, "decode slot 1 (x2)");
        assert_eq!((kinds[0].tokens, kinds[0].compute_s), (400, 4.0));
        assert_eq!((kinds[0].other_compute_s, kinds[0].wall_s), (0.5, 4.0));
        assert_eq!(kinds[1], r("prefill slot 0", 50, 0.5));
    }

    #[test]
    fn wait_is_never_negative() {
        // The client's clock and the engine's differ by a few µs; a request that never
        // waited must not show a negative wait.
        let r = Request {
            what: "prefill slot 0".into(),
            tokens: 10,
            compute_s: 1.0,
            other_compute_s: 0.0,
            wall_s: 0.999,
        };
        assert_eq!(r.wait_s(), 0.0);
    }
}
