//! The invariants layout/FORMAT.md §5.3 lets a reader check, asserted on every sample of a
//! live engine's segment (read through the probe library, as any reader would) while the
//! engine runs a chunked prefill, decodes, a state save and restore, a completion (prefill
//! then decode in one task), a prefill appended to a filled cache, and an erase.

use crate::support;

use hydra_layout::{clock, Phase, SlotState};
use hydra_probe::{EngineView, SlotClass, Thresholds};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

/// Longest the whole workload may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(300);

/// What the sampler saw.
#[derive(Default)]
struct Seen {
    samples: usize,
    violations: Vec<String>,
    /// (slot, phase) pairs observed.
    phases: BTreeSet<(usize, u64)>,
    /// Decode samples of a phase that did not start its task (a completion's second phase).
    later_phase_decodes: usize,
}

/// One slot's memory between samples: the phase it was in (task id, phase start) and the
/// work done then.
#[derive(Clone, Copy)]
struct Last {
    task_id: u64,
    phase_start_ns: u64,
    work_done: u64,
}

/// Checks one consistent record against the invariants; `last` is the slot's previous
/// sample.
fn check(slot: usize, s: &SlotState, last: &mut Option<Last>, out: &mut Vec<String>) {
    let mut fail = |what: &str| out.push(format!("slot {slot}: {what}: {s:?}"));
    // 1. Within one phase of one task, WORK_DONE never decreases.
    if let Some(l) = *last {
        if l.task_id == s.task_id
            && l.phase_start_ns == s.phase_start_ns
            && s.work_done < l.work_done
        {
            fail(&format!("work_done went back from {}", l.work_done));
        }
    }
    *last = Some(Last {
        task_id: s.task_id,
        phase_start_ns: s.phase_start_ns,
        work_done: s.work_done,
    });
    // 2. When the total is known, done <= total.
    if s.work_total != 0 && s.work_done > s.work_total {
        fail("work_done > work_total");
    }
    // 3. During prefill and decode, the cache is what it held at the phase start plus the
    //    phase's work.
    if matches!(s.phase, Phase::Prefill | Phase::Decode)
        && s.n_past != s.tokens_cached + s.work_done
    {
        fail("n_past != tokens_cached + work_done");
    }
    // 4. Timestamps of a task are ordered.
    if s.task_id != 0
        && (s.task_start_ns > s.phase_start_ns || s.phase_start_ns > s.last_progress_ns)
    {
        fail("task_start <= phase_start <= last_progress does not hold");
    }
    // 5. A step in flight has a start and a size; an idle slot has none.
    if (s.step_start_ns == 0) != (s.step_size == 0) {
        fail("step_start_ns and step_size disagree");
    }
    if s.phase == Phase::Idle && s.step_start_ns != 0 {
        fail("an idle slot has a step in flight");
    }
    // 6. The cache never holds more than the context.
    if s.n_past > s.n_ctx {
        fail("n_past > n_ctx");
    }
    // 7. Work is measured in the phase's unit.
    let unit = match s.phase {
        Phase::Prefill | Phase::Decode => Some(hydra_layout::WorkUnit::Tokens),
        Phase::Save | Phase::Restore => Some(hydra_layout::WorkUnit::Bytes),
        _ => None,
    };
    if unit.is_some_and(|u| u != s.work_unit) {
        fail("work_unit does not match the phase");
    }
}

/// Samples every slot until `stop`, checking each consistent record.
fn sample(segment: std::path::PathBuf, stop: Arc<AtomicBool>) -> Seen {
    let reader = hydra_layout::SegmentReader::open(&segment).expect("open segment");
    let thresholds = Thresholds::default();
    let mut seen = Seen::default();
    let mut last: Vec<Option<Last>> = vec![None; reader.slot_count()];
    let deadline = Instant::now() + DEADLINE;
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        let view =
            EngineView::capture(&reader, clock::monotonic_ns(), &thresholds).expect("capture");
        seen.samples += 1;
        for v in &view.slots {
            if v.class == SlotClass::Torn {
                continue; // no consistent copy this time: nothing to check
            }
            let s = &v.state;
            seen.phases.insert((v.slot, s.phase.to_raw()));
            if s.phase == Phase::Decode && s.phase_start_ns > s.task_start_ns {
                seen.later_phase_decodes += 1;
            }
            check(v.slot, s, &mut last[v.slot], &mut seen.violations);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    seen
}

fn ok(what: &str, (status, body): (u16, serde_json::Value)) -> serde_json::Value {
    assert_eq!(status, 200, "{what}: {body}");
    body
}

/// The workload: a chunked prefill and a decode from it; a state save, its restore into
/// another slot and a decode there; a completion (prefill then decode in one task) on a
/// slot that already holds tokens; a prefill appended to a filled cache; an erase.
fn run_workload(e: &Engine) {
    // A chunked prefill, then a decode from it.
    let prompt = "The compute loop publishes progress on every step. ".repeat(40);
    ok(
        "prefill",
        post(
            e,
            "/slots/0/prefill",
            &serde_json::json!({ "prompt": prompt }).to_string(),
        ),
    );
    ok(
        "decode",
        post(
            e,
            "/slots/0/decode",
            r#"{"n_predict":300,"ignore_eos":true}"#,
        ),
    );
    // Save slot 0, restore into slot 1, continue there.
    let resp = agent().get(&e.url("/slots/0/state")).call().expect("save");
    let mut state = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut state).expect("read state");
    agent()
        .put(&e.url("/slots/1/state"))
        .send_bytes(&state)
        .expect("restore");
    ok(
        "decode after restore",
        post(
            e,
            "/slots/1/decode",
            r#"{"n_predict":100,"ignore_eos":true}"#,
        ),
    );
    // A completion: prefill then decode in one task, on a slot that already holds tokens.
    ok(
        "first prompt of slot 2",
        post(e, "/slots/2/prefill", r#"{"prompt":"A first prompt. "}"#),
    );
    let completion = serde_json::json!({
        "id_slot": 2,
        "prompt": "Then a longer one, prefilled in chunks. ".repeat(10),
        "n_predict": 200,
        "ignore_eos": true,
    });
    ok(
        "completion",
        post(e, "/completion", &completion.to_string()),
    );
    // A prefill appended to a filled cache, then an erase.
    ok(
        "appended prefill",
        post(e, "/slots/0/prefill", r#"{"prompt":" And more on top."}"#),
    );
    ok("erase", post(e, "/slots/2?action=erase", ""));
}

/// The test only means something if it watched the phases it claims to check.
fn assert_watched_every_phase(seen: &Seen) {
    assert!(seen.samples >= 100, "only {} samples", seen.samples);
    for (slot, phase) in [(0, Phase::Prefill), (0, Phase::Decode), (1, Phase::Decode)] {
        assert!(
            seen.phases.contains(&(slot, phase.to_raw())),
            "never saw slot {slot} in {phase}: {:?}",
            seen.phases
        );
    }
    assert!(
        seen.later_phase_decodes > 0,
        "never saw the decode phase of the completion"
    );
}

/// What the finished tasks left: idle slots, completed, the cache figures of the last
/// phase, no step in flight.
fn finished_tasks_left_idle_slots(e: &Engine) {
    let reader = hydra_layout::SegmentReader::open(e.segment()).expect("open segment");
    for slot in 0..3 {
        let s = reader.slot(slot).expect("slot").state;
        assert_eq!(s.phase, Phase::Idle, "slot {slot}: {s:?}");
        assert_eq!(s.finish_reason.as_str(), "completed", "slot {slot}: {s:?}");
        assert_eq!((s.step_start_ns, s.step_size), (0, 0), "slot {slot}");
    }
    let s0 = reader.slot(0).expect("slot 0").state;
    assert_eq!(s0.n_past, s0.tokens_cached + s0.work_done, "{s0:?}");
    assert_eq!(reader.slot(2).expect("slot 2").state.n_past, 0, "erased");
}

#[test]
fn every_sample_of_a_live_engine_satisfies_the_format_invariants() {
    let tmp = tempfile::Builder::new()
        .prefix("hydra-invariants")
        .tempdir()
        .expect("tempdir");
    let e = Engine::start(
        tmp.path(),
        "invariants",
        &["--slots", "3", "--ctx", "4096", "--ubatch", "16"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (segment, stop) = (e.segment(), stop.clone());
        std::thread::spawn(move || sample(segment, stop))
    };

    run_workload(&e);
    stop.store(true, Ordering::Release);
    let seen = sampler.join().expect("sampler thread");
    assert!(
        seen.violations.is_empty(),
        "{} of the records sampled broke an invariant; the first ones:\n{}",
        seen.violations.len(),
        seen.violations[..seen.violations.len().min(20)].join("\n")
    );
    assert_watched_every_phase(&seen);
    finished_tasks_left_idle_slots(&e);
}
