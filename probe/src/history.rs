//! A slot's recent steps from its flight recorder (format v1.3, FORMAT.md §18), as people
//! and programs read them: what each of the last steps was, when it started (wall clock and
//! age), how long it took against its prediction, how much it moved, how deep in its
//! forward it got, and what it waited on. The ring is read as the reader library gives it:
//! torn entries are counted, never shown. Works on a dead engine's kept segment too: the
//! steps before a stall or a kill are what this is for.

use crate::error::ProbeError;
use hydra_layout::{FlightEntry, SegmentReader};
use serde::Serialize;

/// The flight recorders of one engine's slots (or of one slot).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryReport {
    /// The engine's id.
    pub engine_id: String,
    /// Whether the writer keeps a flight recorder (format v1.3); when not, `slots` is empty.
    pub published: bool,
    /// Each slot asked for, in order.
    pub slots: Vec<SlotHistory>,
}

/// One slot's ring, oldest step first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotHistory {
    /// The slot.
    pub slot: usize,
    /// Entries found torn (a writer that died writing one), left out.
    pub torn: usize,
    /// The steps.
    pub steps: Vec<StepRecord>,
    /// Why the ring could not be read, when it could not (the other slots still are).
    pub error: Option<String>,
}

/// One finished (or abandoned) step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    /// Its ordinal among the slot's steps since the segment's creation (gaps: steps the
    /// ring no longer holds, or torn).
    pub ordinal: u64,
    /// Its task.
    pub task_id: u64,
    /// `prefill`, `decode`, `save`, `restore`.
    pub kind: &'static str,
    /// `advanced`, `no_progress`, `cancelled`, `failed`, `interrupted`.
    pub result: &'static str,
    /// Start, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// Start, Unix epoch ms.
    pub start_unix_ms: u64,
    /// Seconds from its start to the capture.
    pub age_s: f64,
    /// Its duration, seconds.
    pub duration_s: f64,
    /// The cost model's prediction, seconds (none when not predicted).
    pub predicted_s: Option<f64>,
    /// Units it carried (tokens; bytes for save and restore).
    pub size: u64,
    /// How far the work advanced at its end.
    pub advanced: u64,
    /// Tokens in the slot's cache when it started.
    pub context: u64,
    /// Layers done when it ended, of how many (none when layers are not published).
    pub layers: Option<(u64, u64)>,
    /// The last device it waited on, named as the probe names devices.
    pub wait_device: Option<String>,
    /// Seconds it spent waiting on devices.
    pub wait_s: f64,
}

impl HistoryReport {
    /// The rings of `slot`, or of every slot, of the engine `reader` maps, at `now_ns`.
    pub fn capture(
        reader: &SegmentReader,
        slot: Option<usize>,
        now_ns: u64,
    ) -> Result<Self, ProbeError> {
        let identity = reader.identity();
        let slots = ProbeError::slots_asked(&identity.engine_id, reader.slot_count(), slot)?;
        let devices = reader.devices().ok();
        let name = |id: u64| match devices.as_ref().and_then(|d| d.known()) {
            Some(d) => d.describe(id),
            None => format!("device #{id}"),
        };
        let mut published = false;
        let mut out = Vec::new();
        for s in slots {
            let mut h = SlotHistory {
                slot: s,
                torn: 0,
                steps: Vec::new(),
                error: None,
            };
            match reader.history(s) {
                Ok(None) => continue,
                Ok(Some(ring)) => {
                    h.torn = ring.torn;
                    h.steps = ring
                        .entries
                        .iter()
                        .map(|e| record(e, identity.to_realtime_ns(e.start_ns), now_ns, &name))
                        .collect();
                }
                Err(e) => h.error = Some(e.to_string()),
            }
            published = true;
            out.push(h);
        }
        Ok(Self {
            engine_id: identity.engine_id.clone(),
            published,
            slots: out,
        })
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn record(
    e: &FlightEntry,
    start_real_ns: u64,
    now_ns: u64,
    name: &dyn Fn(u64) -> String,
) -> StepRecord {
    StepRecord {
        ordinal: e.ordinal,
        task_id: e.task_id,
        kind: e.kind.as_str(),
        result: e.result.as_str(),
        start_ns: e.start_ns,
        start_unix_ms: start_real_ns / 1_000_000,
        age_s: secs(now_ns.saturating_sub(e.start_ns)),
        duration_s: secs(e.duration_ns),
        predicted_s: (e.predicted_ns > 0).then(|| secs(e.predicted_ns)),
        size: e.size,
        advanced: e.advanced,
        context: e.context,
        layers: (e.layers_total > 0).then_some((e.layers_done, e.layers_total)),
        wait_device: (e.wait_device > 0).then(|| name(e.wait_device)),
        wait_s: secs(e.wait_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{clock, Phase, SlotState, StepDevices, Substep, WorkUnit};

    const MS: u64 = 1_000_000;

    #[test]
    fn the_ring_reads_oldest_first_with_waits_layers_and_predictions() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut w, _) = crate::test_support::split_engine(tmp.path());
        // Slot 0's prefill step (in flight, waiting on the second peer) is interrupted by
        // a new task, whose two decode steps of 10 ms follow.
        let now = clock::monotonic_ns();
        let mut s = SlotState::default();
        s.begin_task(2, Phase::Decode, WorkUnit::Tokens, 0, now - 40 * MS);
        w.publish(0, &s).unwrap();
        for i in 0..2 {
            let at = now - 40 * MS + i * 15 * MS;
            s.start_step(1, at);
            w.publish(0, &s).unwrap();
            w.publish_substep(
                0,
                &Substep {
                    done: 30,
                    total: 30,
                    at_ns: at + 9 * MS,
                    step_start_ns: at,
                },
            )
            .unwrap();
            s.finish_step(s.work_done + 1, at + 10 * MS);
            w.publish(0, &s).unwrap();
        }
        w.publish_step_devices(0, &StepDevices::default()).unwrap();
        let r = SegmentReader::open_engine(tmp.path(), "rpc").unwrap();
        let report = HistoryReport::capture(&r, Some(0), now).unwrap();
        assert!(report.published);
        let steps = &report.slots[0].steps;
        assert_eq!(steps.len(), 3, "{steps:?}");
        let (first, last) = (&steps[0], &steps[2]);
        assert_eq!((first.kind, first.result), ("prefill", "interrupted"));
        assert_eq!(first.wait_device.as_deref(), Some("RPC1 127.0.0.1:50053"));
        assert_eq!((last.kind, last.size, last.advanced), ("decode", 1, 1));
        assert_eq!(last.layers, Some((30, 30)));
        assert!((last.duration_s - 0.010).abs() < 1e-9, "{last:?}");
        assert!(steps.windows(2).all(|p| p[0].ordinal < p[1].ordinal));
        assert!((0.015..0.03).contains(&last.age_s), "{last:?}");
        let e = HistoryReport::capture(&r, Some(1), now).unwrap_err();
        assert!(matches!(e, ProbeError::SlotOutOfRange { .. }), "{e}");
    }
}
