//! Snapshots of an engine and its slots, with the derived figures and classes.

use crate::classify::{
    self, classify_derived, derive, engine_health, Derived, EngineHealth, EtaSource, SlotClass,
    SlotExtras, WaitFacts,
};
use crate::error::ProbeError;
use crate::ser::{serialize_struct, StateJson};
use crate::thresholds::Thresholds;
use hydra_layout::{
    DeviceWaits, Devices, HeaderSnapshot, Identity, Liveness, SegmentReader, SlotSnapshot,
    SlotState, WorkUnit,
};
use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;
use std::path::PathBuf;

/// Extra attempts [`EngineView::capture`] makes on a slot that changed on every read of the
/// layout's own retry budget, before reporting it unreadable.
const CONTENDED_REREADS: usize = 3;

/// The device a slot's step in flight waits on (format v1.3, FORMAT §5.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceWait {
    /// The device id (1-based position in the engine's device table).
    pub device: u64,
    /// How to name it: its name and endpoint from the table (`RPC0[127.0.0.1:50052]`,
    /// `RPC1 127.0.0.1:50053`), or `device #k` without a table.
    pub name: String,
    /// `now - WAIT_SINCE_NS`: how long the step's thread has been blocked on it.
    pub age_ns: u64,
    /// The longest recent wait on that device by decode steps, while the slot decodes and its
    /// history is trusted (FORMAT §19.6); none before.
    pub learnt_max_ns: Option<u64>,
}

/// An RPC peer that has read nothing of what the engine sent it for a while (format v1.3,
/// FORMAT §19.7), while the slot's step is in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerUnread {
    /// The device id (1-based position in the engine's device table).
    pub device: u64,
    /// How to name it, as [`DeviceWait::name`].
    pub name: String,
    /// `now - DEV_UNREAD_SINCE_NS`: how long it has read nothing.
    pub age_ns: u64,
    /// The peer rule's threshold for the step in flight; none without a prediction.
    pub threshold_ns: Option<u64>,
}

/// What the engine's writer says of its devices beside the table (format v1.3), entry `j`
/// for device `j + 1`: the wait histories (FORMAT §19.6) and since when each RPC peer has
/// read nothing (§19.7; 0 = keeping up). Empty vectors: not published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// [`SegmentReader::device_waits`].
    pub waits: Vec<DeviceWaits>,
    /// [`SegmentReader::peers_unread_since`].
    pub unread_since_ns: Vec<u64>,
}

impl DeviceFacts {
    /// Reads both from `reader`; what cannot be read is left empty (not published). A
    /// peer's word is kept only for an `rpc` device of the engine's table (`devices`,
    /// when known): any other reads 0, as FORMAT §19.7 says.
    pub fn read(reader: &SegmentReader, devices: Option<&Devices>) -> Self {
        let is_peer = |j: usize| {
            devices
                .and_then(|d| d.devices.get(j))
                .is_some_and(|d| d.kind == hydra_layout::DeviceKind::Rpc)
        };
        let mut unread_since_ns = reader.peers_unread_since().unwrap_or_default();
        for (j, since) in unread_since_ns.iter_mut().enumerate() {
            if !is_peer(j) {
                *since = 0;
            }
        }
        Self {
            waits: reader.device_waits().unwrap_or_default(),
            unread_since_ns,
        }
    }

    /// The peer unread the longest, as (device id, since), when any is.
    pub fn longest_unread(&self) -> Option<(u64, u64)> {
        self.unread_since_ns
            .iter()
            .enumerate()
            .filter(|(_, &since)| since != 0)
            .min_by_key(|(_, &since)| since)
            .map(|(j, &since)| (j as u64 + 1, since))
    }
}

/// A device of the engine's table, by id and by the name a reader gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceRef {
    /// The device id (1-based position in the engine's device table).
    pub device: u64,
    /// How to name it, as [`DeviceWait::name`].
    pub name: String,
}

/// One slot at one moment: the record (or the last values of a torn one), its class and
/// the figures derived from it. Serialises with the record nested under `state` and the
/// derived figures beside the view's own fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotView {
    /// Slot index.
    pub slot: usize,
    /// Classification (see [`crate::classify`]).
    pub class: SlotClass,
    /// The record; for a torn slot, the best-effort last values.
    pub state: SlotState,
    /// Tasks queued for the slot (outside the seqlock).
    pub pending: u64,
    /// Why no consistent copy could be read (set exactly when `class` is torn).
    pub read_error: Option<String>,
    /// Failed seqlock attempts before the consistent copy.
    pub read_retries: u32,
    /// The figures derived from the record at the view's `now`: progress, rate, ETA, ages,
    /// the writer's prediction, the stall thresholds and the layer position.
    pub derived: Derived,
    /// Whether the writer publishes its cost model's predictions (format v1.2).
    pub predictions_published: bool,
    /// Whether the writer publishes the layer position inside a step (format v1.1); when
    /// false the layer figures are unknown, not absent.
    pub substeps_published: bool,
    /// Whether the writer publishes the device a step waits on (format v1.3); when false
    /// `wait` is unknown, not none.
    pub waits_published: bool,
    /// The device the step in flight waits on now, and for how long.
    pub wait: Option<DeviceWait>,
    /// The device of the layer being computed (the next one after the layers done), from
    /// the engine's layer map (format v1.3).
    pub layer_device: Option<DeviceRef>,
    /// Layers of the step in flight's forward handed to their devices (format v1.3
    /// `LAYERS_SENT`: an RPC split whose host only sends them); none when unknown.
    pub layers_sent: Option<u64>,
    /// Whether the writer watches its RPC peers' reads (format v1.3 §19.7); when false
    /// `unread_peer` is unknown, not none.
    pub peers_published: bool,
    /// The RPC peer that has read nothing the longest, while the step is in flight.
    pub unread_peer: Option<PeerUnread>,
}

impl SlotView {
    /// Builds the view of a consistently read record of a v1.0 writer (pure: no I/O).
    pub fn from_state(
        slot: usize,
        state: SlotState,
        pending: u64,
        liveness: Liveness,
        now_ns: u64,
        t: &Thresholds,
    ) -> Self {
        Self::from_record(slot, state, SlotExtras::NONE, pending, liveness, now_ns, t)
    }

    /// Builds the view of a consistently read record with what was read beside it: its
    /// substep words (none for a v1.0 writer), its prediction words (none before v1.2) and
    /// its wait with the device's history (none before v1.3) (pure: no I/O).
    pub fn from_record(
        slot: usize,
        state: SlotState,
        extras: SlotExtras,
        pending: u64,
        liveness: Liveness,
        now_ns: u64,
        t: &Thresholds,
    ) -> Self {
        let SlotExtras {
            substep,
            prediction,
            ..
        } = extras;
        let derived = derive(&state, extras, now_ns, t);
        Self {
            class: classify_derived(&state, pending, liveness, &derived, t),
            slot,
            state,
            pending,
            read_error: None,
            read_retries: 0,
            derived,
            predictions_published: prediction.is_some(),
            substeps_published: substep.is_some(),
            waits_published: false,
            wait: None,
            layer_device: None,
            layers_sent: None,
            peers_published: false,
            unread_peer: None,
        }
    }

    /// Adds what the record's device words and the engine's device table (`devices`, when
    /// known) say (format v1.3): the device the step in flight waits on, and the device
    /// of the layer it computes.
    pub fn with_devices(
        mut self,
        snap: &SlotSnapshot,
        devices: Option<&Devices>,
        facts: &DeviceFacts,
        now_ns: u64,
    ) -> Self {
        let name = |id: u64| match devices {
            Some(d) => d.describe(id),
            None => format!("device #{id}"),
        };
        self.waits_published = snap.waits_published;
        self.layers_sent = snap.layers_sent();
        self.wait = snap.wait().map(|(device, since)| DeviceWait {
            device,
            name: name(device),
            age_ns: now_ns.saturating_sub(since),
            learnt_max_ns: self.derived.wait_learnt_max_ns,
        });
        self.peers_published = !facts.unread_since_ns.is_empty();
        self.unread_peer = match (self.derived.peer_unread_age_ns, facts.longest_unread()) {
            (Some(age_ns), Some((device, _))) => Some(PeerUnread {
                device,
                name: name(device),
                age_ns,
                threshold_ns: self.derived.peer_stall_threshold_ns,
            }),
            _ => None,
        };
        self.layer_device = match (self.derived.layer, devices) {
            (Some(l), Some(d)) if l.done < l.total => {
                d.device_of_layer(l.done).map(|device| DeviceRef {
                    device,
                    name: name(device),
                })
            }
            _ => None,
        };
        self
    }

    /// "waiting on RPC1 127.0.0.1:50053 for 4.2s" while the step in flight waits on a
    /// device; `None` otherwise.
    pub fn wait_text(&self) -> Option<String> {
        self.wait.as_ref().map(|w| {
            format!(
                "waiting on {} for {}",
                w.name,
                crate::human::duration_ns(w.age_ns)
            )
        })
    }

    /// Silence beyond which this slot counts as stalled (the layer's threshold while the
    /// layer position is known).
    pub fn stall_threshold_ns(&self) -> u64 {
        self.derived.effective_stall_threshold_ns()
    }

    /// Layers of the step in flight's forward finished (none between steps).
    pub fn substep_done(&self) -> Option<u64> {
        self.derived.layer.map(|l| l.done)
    }

    /// Layers in that forward.
    pub fn substep_total(&self) -> Option<u64> {
        self.derived.layer.map(|l| l.total)
    }

    /// Time since the last layer finished.
    pub fn substep_age_ns(&self) -> Option<u64> {
        self.derived.layer_age_ns
    }

    /// For a stalled slot whose layer position is known: the layer counter it stopped at.
    pub fn stalled_at_layer(&self) -> Option<u64> {
        self.substep_done()
            .filter(|_| self.class == SlotClass::Stalled)
    }

    /// Builds the view of a slot that could not be read consistently, keeping `last` (the
    /// best-effort copy) for display. Its class is torn whatever the values say.
    pub fn torn(
        slot: usize,
        last: SlotState,
        reason: String,
        liveness: Liveness,
        now_ns: u64,
        t: &Thresholds,
    ) -> Self {
        Self {
            class: SlotClass::Torn,
            read_error: Some(reason),
            ..Self::from_state(slot, last, 0, liveness, now_ns, t)
        }
    }

    /// Whether the slot is doing work (prefill, decode, save, restore or an unknown phase).
    pub fn is_active(&self) -> bool {
        classify::is_active(self.state.phase)
    }

    /// "layer 17/30" (17 of the forward's 30 layers finished) inside a step whose layer
    /// position is known; `None` otherwise.
    pub fn layer_text(&self) -> Option<String> {
        match (self.substep_done(), self.substep_total()) {
            (Some(done), Some(total)) => Some(format!("layer {done}/{total}")),
            _ => None,
        }
    }

    /// The ETA for people: `12.3s`, with its source when the writer's model gives it
    /// (`12.3s model ±8%`, or `12.3s model` without a bound); `-` when unknown.
    pub fn eta_text(&self) -> String {
        let Some(eta) = self.derived.eta_s else {
            return "-".into();
        };
        let secs = crate::human::seconds(eta);
        match (self.derived.eta_source, self.derived.prediction_error) {
            (Some(EtaSource::Model), Some(e)) => format!("{secs} model ±{:.0}%", e * 100.0),
            (Some(EtaSource::Model), None) => format!("{secs} model"),
            _ => secs,
        }
    }

    /// The step in flight for people: its age, the writer's prediction when there is one,
    /// its size, the layer position and the layers sent (`1.2s/3.4s x512 layer 3/30`,
    /// `1.2s/3.4s x512 sent 20`); `-` between steps.
    pub fn step_text(&self) -> String {
        let Some(age) = self.derived.step_age_ns else {
            return "-".into();
        };
        let mut text = crate::human::duration_ns(age);
        if let Some(p) = self.derived.predicted_step_ns {
            text.push('/');
            text.push_str(&crate::human::duration_ns(p));
        }
        text.push_str(&format!(" x{}", self.state.step_size));
        if let Some(layer) = self.layer_text() {
            text.push(' ');
            text.push_str(&layer);
        }
        if let Some(sent) = self.layers_sent {
            text.push_str(&format!(" sent {sent}"));
        }
        text
    }

    /// Unit name of `work_done`, `work_total` and the rate ("tokens", "bytes", "none").
    pub fn unit(&self) -> &'static str {
        match self.state.work_unit {
            WorkUnit::Unknown(_) => "units",
            u => u.as_str(),
        }
    }
}

/// The record nested under `state`, the derived figures beside the view's own fields.
impl Serialize for SlotView {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let d = &self.derived;
        serialize_struct!(ser, "SlotView" {
            "slot": &self.slot,
            "class": &self.class,
            "state": &StateJson(&self.state),
            "pending": &self.pending,
            "read_error": &self.read_error,
            "read_retries": &self.read_retries,
            "progress": &d.progress,
            "rate_per_s": &d.rate_per_s,
            "eta_s": &d.eta_s,
            "eta_source": &d.eta_source,
            "last_progress_age_ns": &d.last_progress_age_ns,
            "phase_age_ns": &d.phase_age_ns,
            "step_age_ns": &d.step_age_ns,
            "expected_step_ns": &d.expected_step_ns,
            "predictions_published": &self.predictions_published,
            "predicted_step_ns": &d.predicted_step_ns,
            "prediction_error": &d.prediction_error,
            "confident": &d.confident,
            "stall_threshold_ns": &self.stall_threshold_ns(),
            "substeps_published": &self.substeps_published,
            "substep_done": &self.substep_done(),
            "substep_total": &self.substep_total(),
            "substep_age_ns": &self.substep_age_ns(),
            "stalled_at_layer": &self.stalled_at_layer(),
            "waits_published": &self.waits_published,
            "wait": &self.wait,
            "layer_device": &self.layer_device,
            "layers_sent": &self.layers_sent,
            "peers_published": &self.peers_published,
            "unread_peer": &self.unread_peer,
        })
    }
}

/// One engine at one moment: identity, health, header, and a [`SlotView`] per slot.
#[derive(Debug, Clone, Serialize)]
pub struct EngineView {
    /// Engine id (from the header).
    pub engine_id: String,
    /// Segment file.
    pub path: PathBuf,
    /// The `now` (CLOCK_MONOTONIC ns) every age is measured from.
    pub now_ns: u64,
    /// Health: live, hung, closed or dead.
    pub health: EngineHealth,
    /// Identity and description strings, immutable for the segment's life.
    #[serde(serialize_with = "crate::ser::identity")]
    pub identity: Identity,
    /// Heartbeat, counters, lifecycle.
    #[serde(serialize_with = "crate::ser::header")]
    pub header: HeaderSnapshot,
    /// `now - heartbeat`.
    pub heartbeat_age_ns: u64,
    /// One view per slot, in slot order.
    pub slots: Vec<SlotView>,
    /// The engine's devices and layer map (format v1.3), when its writer published them.
    #[serde(skip)]
    pub devices: Option<Devices>,
}

impl EngineView {
    /// Reads `reader`'s header, every slot and its liveness, and classifies at `now_ns`
    /// (CLOCK_MONOTONIC, normally [`hydra_layout::clock::monotonic_ns`] taken just before).
    ///
    /// A torn slot becomes a [`SlotClass::Torn`] view with its last values; a slot that
    /// changed on every read attempt, or that reads torn while its writer is alive (the
    /// writer may merely be preempted mid-update), is re-read a few times first. Failures of the segment as a whole (it changed size, `flock` failed) are errors.
    pub fn capture(
        reader: &SegmentReader,
        now_ns: u64,
        thresholds: &Thresholds,
    ) -> Result<EngineView, ProbeError> {
        let snapshot = reader.snapshot()?;
        let liveness = reader.liveness()?;
        let slots = snapshot
            .slots
            .into_iter()
            .enumerate()
            .map(|(i, r)| match r {
                // A live writer can be preempted between its two sequence stores for longer
                // than one read's retry budget on a loaded machine: re-read before calling a
                // live engine's slot torn. A dead writer's odd sequence never changes.
                Err(hydra_layout::Error::Contended { .. })
                | Err(hydra_layout::Error::Torn { .. })
                    if liveness == Liveness::Live
                        || matches!(r, Err(hydra_layout::Error::Contended { .. })) =>
                {
                    let mut last = r;
                    for _ in 0..CONTENDED_REREADS {
                        last = reader.slot(i);
                        if !matches!(
                            last,
                            Err(hydra_layout::Error::Contended { .. })
                                | Err(hydra_layout::Error::Torn { .. })
                        ) {
                            break;
                        }
                    }
                    last
                }
                other => other,
            })
            .collect();
        // A device table that cannot be read (left mid-update) leaves the devices unnamed;
        // the slots still read.
        let devices = reader.devices().ok();
        let known = devices.as_ref().and_then(|d| d.known());
        let facts = DeviceFacts::read(reader, known);
        Self::from_parts(
            reader.identity().clone(),
            reader.path().to_path_buf(),
            snapshot.header,
            liveness,
            slots,
            known,
            &facts,
            now_ns,
            thresholds,
        )
    }

    /// Builds a view from already-read parts, with the engine's device table when known
    /// and what the writer says of its devices beside it (pure
    /// apart from the error conversion: no I/O). Slot errors other than torn and contended
    /// reads are returned as errors.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        identity: Identity,
        path: PathBuf,
        header: HeaderSnapshot,
        liveness: Liveness,
        slots: Vec<hydra_layout::Result<SlotSnapshot>>,
        devices: Option<&Devices>,
        facts: &DeviceFacts,
        now_ns: u64,
        t: &Thresholds,
    ) -> Result<EngineView, ProbeError> {
        let mut views = Vec::with_capacity(slots.len());
        for (i, r) in slots.into_iter().enumerate() {
            let view = match r {
                Ok(snap) => SlotView {
                    read_retries: snap.retries,
                    ..SlotView::from_record(
                        i,
                        snap.state,
                        extras_of(&snap, facts),
                        snap.pending,
                        liveness,
                        now_ns,
                        t,
                    )
                }
                .with_devices(&snap, devices, facts, now_ns),
                Err(e) => {
                    let reason = e.to_string();
                    match e {
                        hydra_layout::Error::Torn { last, .. } => {
                            SlotView::torn(i, *last, reason, liveness, now_ns, t)
                        }
                        hydra_layout::Error::Contended { .. } => {
                            SlotView::torn(i, SlotState::default(), reason, liveness, now_ns, t)
                        }
                        other => return Err(other.into()),
                    }
                }
            };
            views.push(view);
        }
        let classes: Vec<_> = views.iter().map(|v| (v.state.phase, v.class)).collect();
        Ok(EngineView {
            engine_id: identity.engine_id.clone(),
            path,
            now_ns,
            health: engine_health(liveness, &header, &classes, now_ns, t),
            heartbeat_age_ns: now_ns.saturating_sub(header.heartbeat_ns),
            identity,
            header,
            slots: views,
            devices: devices.cloned(),
        })
    }

    /// Slot `slot`'s view.
    pub fn slot(&self, slot: usize) -> Result<&SlotView, ProbeError> {
        self.slots
            .get(slot)
            .ok_or_else(|| ProbeError::SlotOutOfRange {
                engine: self.engine_id.clone(),
                slot,
                count: self.slots.len(),
            })
    }

    /// Number of slots doing work (prefill, decode, save, restore).
    pub fn busy_slots(&self) -> usize {
        self.slots.iter().filter(|s| s.is_active()).count()
    }

    /// The engine's lock-based liveness, as the health without the hung verdict.
    pub fn liveness(&self) -> Liveness {
        match self.health {
            EngineHealth::Live | EngineHealth::Hung => Liveness::Live,
            EngineHealth::Closed => Liveness::Closed,
            EngineHealth::Dead => Liveness::Dead,
        }
    }
}

/// What was read beside a slot's record: its layer position, its prediction, and its wait
/// with the history of the device waited on for the slot's phase (FORMAT §19.6; which
/// waits it judges is [`crate::classify::derive`]'s rule).
fn extras_of(snap: &SlotSnapshot, facts: &DeviceFacts) -> SlotExtras {
    let unread = facts.longest_unread();
    let wait = snap.wait().map(|(device, since_ns)| WaitFacts {
        since_ns,
        on_unread_peer: unread.is_some_and(|(peer, _)| peer == device),
        learnt_max_ns: usize::try_from(device.wrapping_sub(1))
            .ok()
            .and_then(|j| facts.waits.get(j))
            .and_then(|w| w.for_phase(snap.state.phase))
            .and_then(|h| h.learnt_max_ns()),
    });
    SlotExtras {
        substep: snap.substep,
        prediction: snap.prediction,
        wait,
        peer_unread_since_ns: unread.map(|(_, since)| since),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{
        clock, EngineDescription, Phase, SegmentConfig, SegmentWriter, WriterCounters,
    };
    use std::path::Path;

    const S: u64 = 1_000_000_000;

    fn writer(dir: &Path, slots: usize) -> SegmentWriter {
        SegmentWriter::create(&SegmentConfig {
            dir: dir.to_path_buf(),
            engine_id: "e1".into(),
            slot_count: slots,
            description: EngineDescription {
                model_name: "tiny".into(),
                device: "cpu".into(),
                ..Default::default()
            },
        })
        .unwrap()
    }

    fn decode(now: u64, done: u64) -> SlotState {
        SlotState {
            task_id: 9,
            phase: Phase::Decode,
            work_unit: WorkUnit::Tokens,
            work_done: done,
            work_total: 100,
            phase_start_ns: now - 10 * S,
            task_start_ns: now - 10 * S,
            last_progress_ns: now - S,
            steps_done: done,
            ..Default::default()
        }
    }

    #[test]
    fn capture_live_engine() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = writer(tmp.path(), 3);
        let now = clock::monotonic_ns() + 1000 * S;
        w.heartbeat(now - S);
        w.set_counters(&WriterCounters {
            generated_tokens_total: 5,
            ..Default::default()
        });
        w.publish(1, &decode(now, 45)).unwrap();
        w.pending_counter().queued(2);
        let r = SegmentReader::open(w.path()).unwrap();
        let v = EngineView::capture(&r, now, &Thresholds::default()).unwrap();
        assert_eq!(v.engine_id, "e1");
        assert_eq!(v.health, EngineHealth::Live);
        assert_eq!(v.heartbeat_age_ns, S);
        assert_eq!(v.header.counters.generated_tokens_total, 5);
        let classes: Vec<_> = v.slots.iter().map(|s| s.class).collect();
        assert_eq!(
            classes,
            [SlotClass::Idle, SlotClass::Progressing, SlotClass::Queued]
        );
        assert_eq!(v.slots[1].derived.rate_per_s, Some(5.0));
        assert_eq!(v.busy_slots(), 1);
        assert!(matches!(
            v.slot(3),
            Err(ProbeError::SlotOutOfRange { count: 3, .. })
        ));
        // Far in the future everything active is stalled and the engine hung.
        let later = now + 100 * S;
        let v = EngineView::capture(&r, later, &Thresholds::default()).unwrap();
        assert_eq!(v.slots[1].class, SlotClass::Stalled);
        assert_eq!(v.health, EngineHealth::Hung);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["health"], "hung");
        assert_eq!(json["slots"][1]["state"]["phase"], "decode");
        assert_eq!(json["identity"]["model_name"], "tiny");
    }

    #[test]
    fn slot_view_json_keys_in_their_published_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = writer(tmp.path(), 1);
        let now = clock::monotonic_ns() + 1000 * S;
        w.publish(0, &decode(now, 45)).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        let v = EngineView::capture(&r, now, &Thresholds::default()).unwrap();
        let text = serde_json::to_string(&v.slots[0]).unwrap();
        // The order the view's fields had when it derived Serialize (before it held
        // `Derived`): readers that print the JSON as it comes see the same lines.
        let keys = [
            "slot",
            "class",
            "state",
            "pending",
            "read_error",
            "read_retries",
            "progress",
            "rate_per_s",
            "eta_s",
            "eta_source",
            "last_progress_age_ns",
            "phase_age_ns",
            "step_age_ns",
            "expected_step_ns",
            "predictions_published",
            "predicted_step_ns",
            "prediction_error",
            "confident",
            "stall_threshold_ns",
            "substeps_published",
            "substep_done",
            "substep_total",
            "substep_age_ns",
            "stalled_at_layer",
            "waits_published",
            "wait",
            "layer_device",
            "layers_sent",
            "peers_published",
            "unread_peer",
        ];
        let at: Vec<usize> = keys
            .iter()
            .map(|k| {
                text.find(&format!("\"{k}\":"))
                    .unwrap_or_else(|| panic!("{k}: {text}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value.as_object().unwrap().len(), keys.len(), "{text}");
        assert_eq!(value["rate_per_s"], 5.0);
        assert_eq!(value["stall_threshold_ns"], v.slots[0].stall_threshold_ns());
    }

    #[test]
    fn torn_slot_keeps_last_values_and_dead_engine_orphans() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = writer(tmp.path(), 2);
        let now = clock::monotonic_ns() + 1000 * S;
        w.publish(0, &decode(now, 10)).unwrap();
        w.publish(1, &decode(now, 20)).unwrap();
        w.abandon_update(1).unwrap();
        let r = SegmentReader::open(w.path()).unwrap();
        let t = Thresholds::default();
        let v = EngineView::capture(&r, now, &t).unwrap();
        assert_eq!(v.slots[1].class, SlotClass::Torn);
        assert_eq!(v.slots[1].state.work_done, 20);
        assert!(v.slots[1].read_error.as_deref().unwrap().contains("torn"));
        w.simulate_crash();
        let v = EngineView::capture(&r, now, &t).unwrap();
        assert_eq!(v.health, EngineHealth::Dead);
        assert_eq!(v.slots[0].class, SlotClass::Orphaned);
        assert_eq!(v.slots[1].class, SlotClass::Torn);
        assert_eq!(v.liveness(), Liveness::Dead);
    }

    #[test]
    fn closed_engine() {
        let tmp = tempfile::tempdir().unwrap();
        let w = writer(tmp.path(), 1);
        let r = SegmentReader::open(w.path()).unwrap();
        w.close().unwrap();
        let v = EngineView::capture(&r, clock::monotonic_ns(), &Thresholds::default()).unwrap();
        assert_eq!(v.health, EngineHealth::Closed);
        assert_eq!(v.slots[0].class, SlotClass::Idle);
    }

    /// FORMAT §19.7: a peer's word counts only for an `rpc` device of a known table.
    #[test]
    fn an_unread_word_counts_only_for_an_rpc_device_of_the_table() {
        use hydra_layout::header::capabilities as caps;
        use hydra_layout::{Device, DeviceKind, Devices, LayerRange};
        let tmp = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(&SegmentConfig {
            dir: tmp.path().into(),
            engine_id: "e".into(),
            slot_count: 1,
            description: EngineDescription {
                capabilities: caps::DEVICES | caps::PEER_READS,
                ..Default::default()
            },
        })
        .unwrap();
        let r = SegmentReader::open_engine(tmp.path(), "e").unwrap();
        w.publish_peer_unread(1, 5).unwrap();
        assert_eq!(
            DeviceFacts::read(&r, None).longest_unread(),
            None,
            "no table"
        );
        let device = |kind, name: &str, endpoint: &str| Device {
            kind,
            name: name.into(),
            endpoint: endpoint.into(),
        };
        let table = Devices {
            devices: vec![
                device(DeviceKind::Cpu, "CPU", ""),
                device(DeviceKind::Rpc, "RPC0", "127.0.0.1:50052"),
            ],
            layer_count: 2,
            ranges: vec![LayerRange {
                first: 0,
                last: 1,
                device: 2,
            }],
            output_device: 2,
        };
        w.publish_devices(&table).unwrap();
        w.publish_peer_unread(1, 5).unwrap();
        w.publish_peer_unread(3, 6).unwrap();
        assert_eq!(
            DeviceFacts::read(&r, Some(&table)).longest_unread(),
            None,
            "a CPU, and an id past the table"
        );
        w.publish_peer_unread(2, 7).unwrap();
        assert_eq!(
            DeviceFacts::read(&r, Some(&table)).longest_unread(),
            Some((2, 7))
        );
    }
}
