//! Health-check findings: one line per thing that is not healthy, with its severity.

use crate::classify::{EngineHealth, Severity, SlotClass};
use crate::human;
use crate::thresholds::Thresholds;
use crate::view::{EngineView, SlotView};
use serde::Serialize;

/// One thing a health check reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// The engine (or the file's engine id).
    pub engine_id: String,
    /// The slot, for slot findings.
    pub slot: Option<usize>,
    /// What it is: a slot class, an engine health, or "unreadable".
    pub kind: String,
    /// One line saying what is wrong, with the figures that show it.
    pub message: String,
}

/// The findings of one engine view: its health if dead or hung, and every slot that is slow,
/// stalled, orphaned or torn. A healthy engine gives none.
pub fn findings(view: &EngineView, t: &Thresholds) -> Vec<Finding> {
    let id = &view.engine_id;
    let mut out = Vec::new();
    let pid = view.identity.pid;
    match view.health {
        EngineHealth::Dead => out.push(Finding {
            severity: Severity::Critical,
            engine_id: id.clone(),
            slot: None,
            kind: "dead".into(),
            message: format!(
                "engine {id} (pid {pid}) is dead: its lock is free but it never closed; last heartbeat {} ago{}",
                human::duration_ns(view.heartbeat_age_ns),
                last_waits(view)
            ),
        }),
        EngineHealth::Hung => out.push(Finding {
            severity: Severity::Critical,
            engine_id: id.clone(),
            slot: None,
            kind: "hung".into(),
            message: format!(
                "engine {id} (pid {pid}) is hung: heartbeat {} old (timeout {}); hung = {}",
                human::duration_ns(view.heartbeat_age_ns),
                human::duration_ns(crate::thresholds::duration_ns(t.heartbeat_timeout)),
                crate::classify::HUNG_RULE
            ),
        }),
        EngineHealth::Live | EngineHealth::Closed => {}
    }
    for s in &view.slots {
        if s.class.severity() == Severity::Ok {
            continue;
        }
        out.push(Finding {
            severity: s.class.severity(),
            engine_id: id.clone(),
            slot: Some(s.slot),
            kind: s.class.as_str().into(),
            message: slot_message(view, s, t),
        });
    }
    out
}

fn work(s: &SlotView) -> String {
    let st = &s.state;
    format!(
        "{} task {} at {} {}",
        st.phase.as_str(),
        st.task_id,
        human::progress(st.work_done, st.work_total, s.derived.progress),
        s.unit()
    )
}

/// ", waiting on RPC1 127.0.0.1:50053 for 4.2s" while the slot's step waits on a device.
fn waiting(s: &SlotView) -> String {
    s.wait_text().map(|w| format!(", {w}")).unwrap_or_default()
}

/// " on RPC0[127.0.0.1:50052]": the device of the layer being computed, when the engine's
/// layer map gives it.
fn on_device(s: &SlotView) -> String {
    s.layer_device
        .as_ref()
        .map(|d| format!(" on {}", d.name))
        .unwrap_or_default()
}

/// ", at layer 17/30" inside a step whose layer position is known.
fn at_layer(s: &SlotView) -> String {
    s.layer_text()
        .map(|l| format!(", at {l}"))
        .unwrap_or_default()
}

/// "rpc slot 0 stalled waiting on RPC1 127.0.0.1:50053 for 1.2s (its prefill waits there
/// took at most 3.4ms; threshold 1.0s): prefill task 4 at ..., step of 512 in flight for
/// 1.3s, at layer 17/30": the wait rule's verdict (FORMAT §19.6).
fn stalled_on_wait(id: &str, s: &SlotView) -> String {
    let Some(w) = s.wait.as_ref() else {
        return String::new();
    };
    let layer = at_layer(s);
    format!(
        "{id} slot {} stalled waiting on {} for {} (its {} waits there took at most {}; \
         threshold {}): {}, step of {} in flight for {}{layer}",
        s.slot,
        w.name,
        human::duration_ns(w.age_ns),
        s.state.phase.as_str(),
        human::duration_ns(s.derived.wait_learnt_max_ns.unwrap_or(0)),
        human::duration_ns(s.derived.wait_stall_threshold_ns.unwrap_or(0)),
        work(s),
        s.state.step_size,
        human::age(s.derived.step_age_ns),
    )
}

/// "rpc slot 0 stalled waiting on RPC1 127.0.0.1:50053, which has read nothing for 9.5s
/// (threshold 9.2s, 2 times the step's length): prefill task 4 at ..., step of 512 in
/// flight for 12.1s, waiting on RPC0 127.0.0.1:50052 for 0.4s": the peer rule's verdict
/// (FORMAT §19.7), with whatever the host itself waits on.
fn stalled_on_peer(id: &str, s: &SlotView) -> String {
    let Some(p) = s.unread_peer.as_ref() else {
        return String::new();
    };
    let layer = at_layer(s);
    format!(
        "{id} slot {} stalled waiting on {}, which has read nothing for {} (threshold {}, \
         {} times the step's length): {}, step of {} in flight for {}{layer}{}",
        s.slot,
        p.name,
        human::duration_ns(p.age_ns),
        human::duration_ns(p.threshold_ns.unwrap_or(0)),
        s.derived
            .peer_stall_steps
            .unwrap_or(crate::classify::PEER_STALL_STEPS),
        work(s),
        s.state.step_size,
        human::age(s.derived.step_age_ns),
        waiting(s),
    )
}

/// "; slot 0 was waiting on RPC1 127.0.0.1:50053 (since 4.2s ago)" for each slot whose
/// step was waiting on a device when its engine stopped.
fn last_waits(view: &EngineView) -> String {
    view.slots
        .iter()
        .filter_map(|s| {
            let w = s.wait.as_ref()?;
            Some(format!(
                "; slot {} was waiting on {} (since {} ago)",
                s.slot,
                w.name,
                human::duration_ns(w.age_ns)
            ))
        })
        .collect()
}

fn slot_message(view: &EngineView, s: &SlotView, t: &Thresholds) -> String {
    let id = &view.engine_id;
    let n = s.slot;
    match s.class {
        SlotClass::Slow if s.derived.last_progress_age_ns.unwrap_or(0) > s.stall_threshold_ns() => format!(
            "{id} slot {n} slow: {}, step of {} in flight for {}, past its stall threshold {}, \
             but its layers move ({}, the last {} ago)",
            work(s),
            s.state.step_size,
            human::age(s.derived.step_age_ns),
            human::duration_ns(s.stall_threshold_ns()),
            s.layer_text().unwrap_or_default(),
            human::age(s.substep_age_ns()),
        ),
        SlotClass::Stalled if s.derived.stalled_on_wait() && s.wait.is_some() => {
            stalled_on_wait(id, s)
        }
        SlotClass::Stalled if s.derived.stalled_on_peer() && s.unread_peer.is_some() => {
            stalled_on_peer(id, s)
        }
        SlotClass::Stalled if s.stalled_at_layer().is_some() => format!(
            "{id} slot {n} stalled at {}{}: {}, layer counter frozen for {} (threshold {}), step of {} in flight for {}{}",
            s.layer_text().unwrap_or_default(),
            on_device(s),
            work(s),
            human::age(s.substep_age_ns()),
            human::duration_ns(s.stall_threshold_ns()),
            s.state.step_size,
            human::age(s.derived.step_age_ns),
            waiting(s),
        ),
        SlotClass::Slow => format!(
            "{id} slot {n} slow: {}, ETA {} exceeds budget {} at {}",
            work(s),
            human::seconds(s.derived.eta_s.unwrap_or(0.0)),
            human::seconds(t.budget.map(|b| b.as_secs_f64()).unwrap_or(0.0)),
            human::rate(s.derived.rate_per_s, s.unit()),
        ),
        SlotClass::Stalled => {
            let step = match s.derived.step_age_ns {
                Some(a) => format!(
                    ", step of {} in flight for {}",
                    s.state.step_size,
                    human::duration_ns(a)
                ),
                None => String::new(),
            };
            format!(
                "{id} slot {n} stalled: {}, no progress for {} (threshold {}){step}{}",
                work(s),
                human::age(s.derived.last_progress_age_ns),
                human::duration_ns(s.stall_threshold_ns()),
                waiting(s),
            )
        }
        SlotClass::Orphaned => format!(
            "{id} slot {n} orphaned: {}, but engine {id} is {}",
            work(s),
            view.health.as_str()
        ),
        SlotClass::Torn => format!(
            "{id} slot {n} torn: {}",
            s.read_error
                .as_deref()
                .unwrap_or("no consistent copy could be read")
        ),
        c => format!("{id} slot {n} {}", c.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{split_engine, split_engine_learnt};
    use hydra_layout::{SegmentReader, StepDevices};
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn view_at(dir: &std::path::Path, now: u64, t: &Thresholds) -> EngineView {
        let r = SegmentReader::open_engine(dir, "rpc").expect("open");
        EngineView::capture(&r, now, t).expect("view")
    }

    #[test]
    fn a_step_stalled_on_a_device_names_the_device_and_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (_w, now) = split_engine(dir.path());
        let t = Thresholds {
            stall_floor: Duration::from_secs(1),
            ..Thresholds::default()
        };
        let view = view_at(dir.path(), now, &t);
        let s = &view.slots[0];
        assert_eq!(s.class, SlotClass::Stalled);
        let on = s.layer_device.as_ref().expect("the layer's device");
        assert_eq!((on.device, on.name.as_str()), (2, "RPC1 127.0.0.1:50053"));
        let wait = s.wait.as_ref().expect("a wait");
        assert_eq!((wait.device, wait.age_ns), (2, 5 * S));
        let f = findings(&view, &t);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].message
                .starts_with("rpc slot 0 stalled at layer 16/30 on RPC1 127.0.0.1:50053:"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message
                .ends_with(", waiting on RPC1 127.0.0.1:50053 for 5.0s"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_peer_that_reads_nothing_for_two_steps_is_named_whatever_the_host_waits_on() {
        // The step (2 s predicted) allows the second peer 4 s without a read; it has read
        // nothing for 5 s while the host waits on the first peer.
        let dir = tempfile::tempdir().unwrap();
        let (_w, now) = crate::test_support::peer_engine(dir.path(), 5 * S);
        let t = Thresholds::default();
        let view = view_at(dir.path(), now, &t);
        let s = &view.slots[0];
        assert_eq!(s.class, SlotClass::Stalled);
        let p = s.unread_peer.as_ref().expect("the unread peer");
        assert_eq!((p.device, p.name.as_str()), (2, "RPC1 127.0.0.1:50053"));
        assert_eq!((p.age_ns, p.threshold_ns), (5 * S, Some(4 * S)));
        let f = findings(&view, &t);
        let m = &f[0].message;
        assert!(
            m.starts_with(
                "rpc slot 0 stalled waiting on RPC1 127.0.0.1:50053, which has read nothing \
                 for 5.0s (threshold 4.0s, 2 times the step's length): prefill task 1"
            ),
            "{m}"
        );
        assert!(
            m.ends_with(
                ", step of 512 in flight for 6.0s, waiting on RPC0[127.0.0.1:50052] for 1.0s"
            ),
            "{m}"
        );
        assert_eq!(f[0].severity.exit_code(), 2);

        // Unread for 3 s, or keeping up: the step (6 s of 2 s, under the slow factor's 8 s
        // and ten predictions) progresses.
        for unread in [3 * S, 0] {
            let other = tempfile::tempdir().unwrap();
            let (_w, now) = crate::test_support::peer_engine(other.path(), unread);
            let view = view_at(other.path(), now, &t);
            assert_eq!(view.slots[0].class, SlotClass::Progressing, "{unread}");
            assert_eq!(view.slots[0].unread_peer.is_some(), unread != 0);
        }
    }

    #[test]
    fn a_decode_wait_far_longer_than_the_peers_waits_is_a_stall_on_that_peer() {
        use hydra_layout::{device_waits::MIN_STEPS, Phase};
        // Peer B's decode waits took 3 ms: the 5 s wait is a stall on it under the default
        // thresholds, whose 30 s floor holds the step and layer rules back.
        let dir = tempfile::tempdir().unwrap();
        let (_w, now) = split_engine_learnt(dir.path(), Phase::Decode, MIN_STEPS, 3_000_000);
        let t = Thresholds::default();
        let view = view_at(dir.path(), now, &t);
        let s = &view.slots[0];
        assert_eq!(s.class, SlotClass::Stalled);
        let learnt = s
            .wait
            .as_ref()
            .and_then(|w| w.learnt_max_ns)
            .expect("learnt");
        assert!((3_000_000..100_000_000).contains(&learnt), "{learnt}");
        let f = findings(&view, &t);
        assert!(
            f[0].message.starts_with(
                "rpc slot 0 stalled waiting on RPC1 127.0.0.1:50053 for 5.0s (its decode waits \
                 there took at most "
            ),
            "{}",
            f[0].message
        );
        let m = &f[0].message;
        assert!(m.contains("; threshold 1.0s): decode task 1"), "{m}");
        assert!(
            m.ends_with(", step of 1 in flight for 6.0s, at layer 16/30"),
            "{m}"
        );

        // One step's waits on the peer: no history to judge by, the step rule decides.
        let other = tempfile::tempdir().unwrap();
        let (_w, now) = split_engine_learnt(other.path(), Phase::Decode, MIN_STEPS - 1, 3_000_000);
        let view = view_at(other.path(), now, &t);
        assert_eq!(view.slots[0].wait.as_ref().unwrap().learnt_max_ns, None);
        assert_ne!(view.slots[0].class, SlotClass::Stalled);
        assert!(!view.slots[0].derived.stalled_on_wait());
    }

    #[test]
    fn a_prefill_wait_is_judged_by_the_step_and_layer_rules_only() {
        use hydra_layout::{device_waits::MIN_STEPS, Phase};
        // With pipeline parallelism a prefill's waits depend on where its ubatch sits in
        // the pipeline: a trusted prefill history judges nothing.
        let dir = tempfile::tempdir().unwrap();
        let (_w, now) = split_engine_learnt(dir.path(), Phase::Prefill, MIN_STEPS, 3_000_000);
        let view = view_at(dir.path(), now, &Thresholds::default());
        let v = &view.slots[0];
        assert_eq!(v.class, SlotClass::Progressing, "{v:?}");
        assert_eq!(v.wait.as_ref().unwrap().learnt_max_ns, None);
        let r = hydra_layout::SegmentReader::open_engine(dir.path(), "rpc").unwrap();
        let h = r.device_waits().unwrap()[1].prefill;
        assert!(h.learnt_max_ns().is_some(), "published all the same: {h:?}");
    }

    #[test]
    fn a_dead_engine_names_the_device_its_slot_last_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let (w, now) = split_engine(dir.path());
        w.simulate_crash();
        let view = view_at(dir.path(), now, &Thresholds::default());
        assert_eq!(view.health, EngineHealth::Dead);
        let f = findings(&view, &Thresholds::default());
        let dead = f.iter().find(|f| f.kind == "dead").expect("dead");
        assert!(
            dead.message
                .ends_with("; slot 0 was waiting on RPC1 127.0.0.1:50053 (since 5.0s ago)"),
            "{}",
            dead.message
        );
    }

    #[test]
    fn without_a_wait_the_messages_are_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, now) = split_engine(dir.path());
        w.publish_step_devices(0, &StepDevices::default()).unwrap();
        let t = Thresholds {
            stall_floor: Duration::from_secs(1),
            ..Thresholds::default()
        };
        let view = view_at(dir.path(), now, &t);
        assert_eq!(view.slots[0].wait, None);
        assert!(view.slots[0].waits_published);
        let f = findings(&view, &t);
        assert!(!f[0].message.contains("waiting on"), "{}", f[0].message);
    }
}
