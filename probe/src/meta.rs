//! The Hydra meta JSON: the drop-in answer to Hydra Core's STATE_META query, read from the
//! segment instead of through the engine's task queue.
//!
//! The first fifteen fields are exactly what Hydra Core's `SlotMeta` parses today, with the
//! same names and JSON types; the rest are new and optional for old clients.

use crate::classify::{is_active, EngineHealth, EtaSource, SlotClass};
use crate::view::{EngineView, SlotView};
use hydra_layout::{Phase, WorkUnit};
use serde::{Deserialize, Serialize};

const NS_PER_MS: u64 = 1_000_000;

/// One slot's meta, as Hydra Core's `SlotMeta` expects it, plus the new progress fields.
///
/// Floats are always finite (unknown values are `null`, never NaN or infinity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HydraMeta {
    // ---- Hydra Core `SlotMeta` (names and JSON types fixed) ----
    /// Slot index (int).
    pub slot_id: u64,
    /// Tokens in the slot's KV cache (int).
    pub n_past: u64,
    /// Bytes a state save of the slot produces now (int).
    pub state_size: u64,
    /// Whether the slot is doing work: prefill, decode, save or restore (bool).
    pub is_processing: bool,
    /// The alias clients use for the model (string).
    pub model_alias: String,
    /// Tokenizer family (string).
    pub tokenizer: String,
    /// Model name (string).
    pub model_name: String,
    /// Quantization (string).
    pub model_quant: String,
    /// Capability bits (unsigned int).
    pub model_capabilities: u64,
    /// Model file path (string).
    pub model_path: String,
    /// "prefill", "decode", "save", "restore" or "idle" (a queued slot is "idle", with
    /// [`queued`](Self::queued) set; a phase this reader does not know is "idle" too, with its
    /// raw name in [`phase`](Self::phase)).
    pub operation: String,
    /// Progress of the current phase, 0..=1 (float; 0 when unknown or idle).
    pub progress: f64,
    /// Tokens processed in the current phase (int; 0 for byte-measured phases).
    pub tokens_processed: u64,
    /// Tokens the current phase will process (int; 0 when unknown or byte-measured).
    pub tokens_total: u64,
    /// Milliseconds since the current phase started (int; 0 when idle or queued).
    pub elapsed_ms: u64,

    // ---- new fields ----
    /// Engine id.
    pub engine_id: String,
    /// Engine health: "live", "hung", "closed" or "dead".
    pub engine_liveness: EngineHealth,
    /// Slot classification: "idle", "queued", "progressing", "slow", "stalled", "orphaned"
    /// or "torn".
    pub classification: SlotClass,
    /// Whether a task waits in the queue for this slot.
    pub queued: bool,
    /// Tasks queued for this slot.
    pub pending: u64,
    /// The slot's phase as the segment says it ("queued" and "unknown" included).
    pub phase: String,
    /// Task id (changes when the slot takes a new task; 0 = never used).
    pub task_id: u64,
    /// Unit of the work counters: "tokens", "bytes" or "none".
    pub work_unit: String,
    /// Work done in the current phase, in `work_unit`.
    pub work_done: u64,
    /// Work total of the current phase, in `work_unit` (0 = unknown).
    pub work_total: u64,
    /// Milliseconds since the slot last progressed (or its phase started); null if never.
    pub last_progress_age_ms: Option<u64>,
    /// Observed rate in `work_unit` per second; null when unknown.
    pub rate_per_s: Option<f64>,
    /// Seconds to finish the phase; null when unknown. From the writer's prediction when
    /// it publishes one (format v1.2), else at the observed rate: see `eta_source`.
    pub eta_s: Option<f64>,
    /// Where `eta_s` comes from: "model" (the writer's cost model) or "rate" (the observed
    /// rate); null when there is no ETA.
    #[serde(default)]
    pub eta_source: Option<EtaSource>,
    /// The writer's predicted duration in ms of the step in flight: absent when the writer
    /// publishes no predictions (before v1.2), null when it has none for this step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub step_expected_ms: Option<Option<u64>>,
    /// The error bound the writer states for that prediction (0.2 = ±20%): absent before
    /// v1.2, null when none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub prediction_error: Option<Option<f64>>,
    /// Phase start, CLOCK_MONOTONIC ns (0 = none).
    pub phase_start_ns: u64,
    /// Phase start, Unix epoch milliseconds (via the segment's clock anchors); null if none.
    pub phase_start_unix_ms: Option<u64>,
    /// Age in ms of the step in flight; null when no step runs.
    pub step_age_ms: Option<u64>,
    /// Tokens (or bytes) the step in flight carries; 0 when no step runs.
    pub step_size: u64,
    /// Silence in ms beyond which the slot counts as stalled.
    pub stall_threshold_ms: u64,
    /// How the last task ended: "none", "completed", "cancelled" or "error".
    pub finish_reason: String,
    /// Why it failed ("none" unless `finish_reason` is "error").
    pub error_code: String,
    /// Slot context size in tokens.
    pub n_ctx: u64,
    /// Prompt tokens reused from the KV cache.
    pub tokens_cached: u64,
    /// Compute device ("cpu", "cuda:0", ...).
    pub device: String,
    /// Milliseconds since the engine loop's last heartbeat.
    pub heartbeat_age_ms: u64,
    /// Why the record could not be read consistently (torn slots only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_error: Option<String>,
    /// Layers of the step in flight's forward finished: absent for a v1.0 writer (unknown),
    /// null between steps.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub substep_done: Option<Option<u64>>,
    /// Layers in that forward: absent for a v1.0 writer, null between steps.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub substep_total: Option<Option<u64>>,
    /// Milliseconds since the last layer finished: absent for a v1.0 writer, null between
    /// steps.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub substep_age_ms: Option<Option<u64>>,
    /// The layer counter a stalled slot stopped at (only when stalled with a known layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_at_layer: Option<u64>,
    /// The device the step in flight waits on now, named as the probe names it
    /// (`RPC1 127.0.0.1:50053`): absent when the writer publishes no device waits (before
    /// v1.3), null when the step waits on none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub wait_device: Option<Option<String>>,
    /// Milliseconds the step has waited on that device: absent before v1.3, null when
    /// there is no wait.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub wait_ms: Option<Option<u64>>,
    /// The device of the layer the step in flight computes, from the engine's layer map
    /// (only when both are known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_device: Option<String>,
    /// While a decode step waits on a device whose decode waits are learnt (format v1.3
    /// §19.6): the longest of them recently, in ms. Absent before v1.3, null otherwise.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub wait_learnt_max_ms: Option<Option<u64>>,
    /// The wait rule's threshold for that wait, in ms: waiting longer is a stall on the
    /// device. Absent before v1.3, null when the wait is not judged by a history.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub wait_threshold_ms: Option<Option<u64>>,
    /// While the step is in flight, the RPC peer that has read nothing the longest of what
    /// the engine sent it (format v1.3 §19.7), named as `wait_device` is: absent when the
    /// writer does not watch its peers, null while every peer keeps up.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub unread_peer: Option<Option<String>>,
    /// Milliseconds that peer has read nothing: absent as `unread_peer`, null with it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub unread_peer_ms: Option<Option<u64>>,
    /// The peer rule's threshold in ms: a peer unread for longer stalls the slot. Absent
    /// as `unread_peer`; null without that peer or without an expected step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::ser::present"
    )]
    pub unread_peer_threshold_ms: Option<Option<u64>>,
}

fn ms(ns: u64) -> u64 {
    ns / NS_PER_MS
}

/// [`ms`] of a figure that a segment's words bound, not the clock (a wait history's
/// longest wait, the threshold made from it): saturated at `i64::MAX` ns first, as the C
/// ABI hands it over, so that the JSON and `HydraProbeMeta` say the same of a hostile one.
fn ms_bounded(ns: u64) -> u64 {
    ms(ns.min(i64::MAX as u64))
}

/// The figures of one slot's meta that its own rules derive from the slot's view (what
/// Hydra Core's `operation`, `progress` and `elapsed_ms` mean, the ages in ms), with no
/// string. [`HydraMeta`] is these plus the record's fields and the engine's fixed
/// description; the C ABI copies them out as they are, so the rules live here only.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetaFigures {
    /// Whether the slot is doing work: prefill, decode, save or restore.
    pub is_processing: bool,
    /// The phase `operation` names: prefill, decode, save or restore; idle for anything else.
    pub operation: Phase,
    /// Whether a task waits in the queue for this slot.
    pub queued: bool,
    /// Progress of the current phase, 0..=1; 0 when unknown or not processing.
    pub progress: f64,
    /// Work done in the current phase when it counts tokens, else 0.
    pub tokens_processed: u64,
    /// Work total of the current phase when it counts tokens, else 0 (0 = unknown).
    pub tokens_total: u64,
    /// Milliseconds since the current phase started; 0 when not processing.
    pub elapsed_ms: u64,
    /// Milliseconds since the slot last progressed (or its phase started).
    pub last_progress_age_ms: Option<u64>,
    /// Observed rate in work units per second (finite).
    pub rate_per_s: Option<f64>,
    /// Seconds to finish the phase (finite).
    pub eta_s: Option<f64>,
    /// Where `eta_s` comes from.
    pub eta_source: Option<EtaSource>,
    /// Whether the writer publishes predictions (format v1.2); else they are unknown.
    pub predictions_published: bool,
    /// The writer's predicted duration in ms of the step in flight.
    pub step_expected_ms: Option<u64>,
    /// The error bound the writer states for it (finite).
    pub prediction_error: Option<f64>,
    /// Phase start, Unix epoch milliseconds; `None` when no phase started.
    pub phase_start_unix_ms: Option<u64>,
    /// Age in ms of the step in flight.
    pub step_age_ms: Option<u64>,
    /// Tokens (or bytes) the step in flight carries; 0 when no step runs.
    pub step_size: u64,
    /// Silence in ms beyond which the slot counts as stalled.
    pub stall_threshold_ms: u64,
    /// Milliseconds since the engine loop's last heartbeat.
    pub heartbeat_age_ms: u64,
    /// Whether the writer publishes layer positions (format v1.1); else they are unknown.
    pub substeps_published: bool,
    /// Layers of the step in flight's forward finished; `None` between steps.
    pub substep_done: Option<u64>,
    /// Layers in that forward.
    pub substep_total: Option<u64>,
    /// Milliseconds since the last layer finished.
    pub substep_age_ms: Option<u64>,
    /// Whether the writer publishes the device a step waits on (format v1.3); else the
    /// wait is unknown.
    pub waits_published: bool,
    /// The id of the device the step in flight waits on (1-based in the device table).
    pub wait_device: Option<u64>,
    /// Milliseconds the step has waited on it.
    pub wait_ms: Option<u64>,
    /// The id of the device of the layer the step in flight computes.
    pub layer_device: Option<u64>,
    /// The longest recent decode wait on the device waited on, ms (a judged wait only).
    pub wait_learnt_max_ms: Option<u64>,
    /// The wait rule's threshold for that wait, ms.
    pub wait_threshold_ms: Option<u64>,
    /// Whether the writer watches its RPC peers' reads (format v1.3); else the peer is
    /// unknown.
    pub peers_published: bool,
    /// The id of the RPC peer that has read nothing the longest, while the step is in flight.
    pub unread_peer: Option<u64>,
    /// Milliseconds it has read nothing.
    pub unread_peer_ms: Option<u64>,
    /// The peer rule's threshold, ms.
    pub unread_peer_threshold_ms: Option<u64>,
}

impl MetaFigures {
    /// The figures of slot view `v` of `engine`.
    pub fn of(engine: &EngineView, v: &SlotView) -> MetaFigures {
        let s = &v.state;
        let active = is_active(s.phase);
        let tokens = s.work_unit == WorkUnit::Tokens;
        MetaFigures {
            is_processing: active,
            operation: match s.phase {
                Phase::Prefill | Phase::Decode | Phase::Save | Phase::Restore => s.phase,
                _ => Phase::Idle,
            },
            queued: v.class == SlotClass::Queued
                || s.phase == Phase::Queued
                || (s.phase == Phase::Idle && v.pending > 0),
            progress: if active {
                v.derived.progress.unwrap_or(0.0)
            } else {
                0.0
            },
            tokens_processed: if tokens { s.work_done } else { 0 },
            tokens_total: if tokens { s.work_total } else { 0 },
            elapsed_ms: if active {
                v.derived.phase_age_ns.map(ms).unwrap_or(0)
            } else {
                0
            },
            last_progress_age_ms: v.derived.last_progress_age_ns.map(ms),
            rate_per_s: v.derived.rate_per_s.filter(|r| r.is_finite()),
            eta_s: v.derived.eta_s.filter(|e| e.is_finite()),
            eta_source: v
                .derived
                .eta_s
                .filter(|e| e.is_finite())
                .and(v.derived.eta_source),
            predictions_published: v.predictions_published,
            step_expected_ms: v.derived.predicted_step_ns.map(ms),
            prediction_error: v.derived.prediction_error.filter(|e| e.is_finite()),
            phase_start_unix_ms: (s.phase_start_ns != 0)
                .then(|| ms(engine.identity.to_realtime_ns(s.phase_start_ns))),
            step_age_ms: v.derived.step_age_ns.map(ms),
            step_size: if s.step_start_ns != 0 { s.step_size } else { 0 },
            stall_threshold_ms: ms(v.stall_threshold_ns()),
            heartbeat_age_ms: ms(engine.heartbeat_age_ns),
            substeps_published: v.substeps_published,
            substep_done: v.substep_done(),
            substep_total: v.substep_total(),
            substep_age_ms: v.substep_age_ns().map(ms),
            waits_published: v.waits_published,
            wait_device: v.wait.as_ref().map(|w| w.device),
            wait_ms: v.wait.as_ref().map(|w| ms(w.age_ns)),
            layer_device: v.layer_device.as_ref().map(|d| d.device),
            wait_learnt_max_ms: v.derived.wait_learnt_max_ns.map(ms_bounded),
            wait_threshold_ms: v.derived.wait_stall_threshold_ns.map(ms_bounded),
            peers_published: v.peers_published,
            unread_peer: v.unread_peer.as_ref().map(|p| p.device),
            unread_peer_ms: v.unread_peer.as_ref().map(|p| ms(p.age_ns)),
            unread_peer_threshold_ms: v
                .unread_peer
                .as_ref()
                .and_then(|p| p.threshold_ns)
                .map(ms_bounded),
        }
    }
}

impl HydraMeta {
    /// The meta of slot `slot` of `engine`; `None` when the slot does not exist.
    pub fn from_view(engine: &EngineView, slot: usize) -> Option<HydraMeta> {
        let v = engine.slots.get(slot)?;
        let s = &v.state;
        let d = &engine.identity.description;
        let f = MetaFigures::of(engine, v);
        Some(HydraMeta {
            slot_id: slot as u64,
            n_past: s.n_past,
            state_size: s.state_size,
            is_processing: f.is_processing,
            model_alias: d.model_alias.clone(),
            tokenizer: d.tokenizer.clone(),
            model_name: d.model_name.clone(),
            model_quant: d.model_quant.clone(),
            model_capabilities: d.capabilities,
            model_path: d.model_path.clone(),
            operation: f.operation.as_str().to_owned(),
            progress: f.progress,
            tokens_processed: f.tokens_processed,
            tokens_total: f.tokens_total,
            elapsed_ms: f.elapsed_ms,
            engine_id: engine.engine_id.clone(),
            engine_liveness: engine.health,
            classification: v.class,
            queued: f.queued,
            pending: v.pending,
            phase: s.phase.as_str().to_owned(),
            task_id: s.task_id,
            work_unit: s.work_unit.as_str().to_owned(),
            work_done: s.work_done,
            work_total: s.work_total,
            last_progress_age_ms: f.last_progress_age_ms,
            rate_per_s: f.rate_per_s,
            eta_s: f.eta_s,
            eta_source: f.eta_source,
            step_expected_ms: f.predictions_published.then_some(f.step_expected_ms),
            prediction_error: f.predictions_published.then_some(f.prediction_error),
            phase_start_ns: s.phase_start_ns,
            phase_start_unix_ms: f.phase_start_unix_ms,
            step_age_ms: f.step_age_ms,
            step_size: f.step_size,
            stall_threshold_ms: f.stall_threshold_ms,
            finish_reason: s.finish_reason.as_str().to_owned(),
            error_code: s.error_code.as_str().to_owned(),
            n_ctx: s.n_ctx,
            tokens_cached: s.tokens_cached,
            device: d.device.clone(),
            heartbeat_age_ms: f.heartbeat_age_ms,
            read_error: v.read_error.clone(),
            substep_done: f.substeps_published.then_some(f.substep_done),
            substep_total: f.substeps_published.then_some(f.substep_total),
            substep_age_ms: f.substeps_published.then_some(f.substep_age_ms),
            stalled_at_layer: v.stalled_at_layer(),
            wait_device: f
                .waits_published
                .then(|| v.wait.as_ref().map(|w| w.name.clone())),
            wait_ms: f.waits_published.then_some(f.wait_ms),
            layer_device: v.layer_device.as_ref().map(|d| d.name.clone()),
            wait_learnt_max_ms: f.waits_published.then_some(f.wait_learnt_max_ms),
            wait_threshold_ms: f.waits_published.then_some(f.wait_threshold_ms),
            unread_peer: f
                .peers_published
                .then(|| v.unread_peer.as_ref().map(|p| p.name.clone())),
            unread_peer_ms: f.peers_published.then_some(f.unread_peer_ms),
            unread_peer_threshold_ms: f.peers_published.then_some(f.unread_peer_threshold_ms),
        })
    }

    /// The meta as one line of JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain fields (finite floats, strings, integers) cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thresholds::Thresholds;
    use hydra_layout::{
        clock, EngineDescription, SegmentConfig, SegmentReader, SegmentWriter, SlotState,
    };

    const S: u64 = 1_000_000_000;

    /// Three slots: prefilling 48 of 192 tokens, queued, saving 1 of 4 MiB; a writer
    /// with capabilities 3 (no layer progress).
    fn prefilling_queued_and_saving(dir: &std::path::Path, now: u64) -> SegmentWriter {
        let mut w = SegmentWriter::create(&SegmentConfig {
            dir: dir.into(),
            engine_id: "e1".into(),
            slot_count: 3,
            description: EngineDescription {
                model_name: "tiny".into(),
                model_alias: "t".into(),
                capabilities: 3,
                ..Default::default()
            },
        })
        .unwrap();
        w.publish(
            0,
            &SlotState {
                task_id: 7,
                phase: Phase::Prefill,
                work_unit: WorkUnit::Tokens,
                work_done: 48,
                work_total: 192,
                n_past: 48,
                phase_start_ns: now - 3 * S,
                last_progress_ns: now - S,
                step_start_ns: now - S / 2,
                step_size: 16,
                ..Default::default()
            },
        )
        .unwrap();
        w.publish(
            1,
            &SlotState {
                phase: Phase::Queued,
                ..Default::default()
            },
        )
        .unwrap();
        w.publish(
            2,
            &SlotState {
                phase: Phase::Save,
                work_unit: WorkUnit::Bytes,
                work_done: 1 << 20,
                work_total: 4 << 20,
                phase_start_ns: now - S,
                last_progress_ns: now,
                ..Default::default()
            },
        )
        .unwrap();
        w
    }

    /// The prefilling slot's meta: its figures, no layer fields, and the capabilities.
    fn check_prefilling_meta(v: &EngineView) -> HydraMeta {
        let m = HydraMeta::from_view(v, 0).unwrap();
        assert_eq!(m.operation, "prefill");
        assert!(m.is_processing);
        assert_eq!(
            (m.tokens_processed, m.tokens_total, m.n_past),
            (48, 192, 48)
        );
        assert_eq!(m.progress, 0.25);
        assert_eq!(m.elapsed_ms, 3000);
        assert_eq!(m.rate_per_s, Some(24.0));
        assert_eq!(m.eta_s, Some(6.0));
        assert_eq!(m.last_progress_age_ms, Some(1000));
        assert_eq!(m.step_age_ms, Some(500));
        assert_eq!(m.step_size, 16);
        // A writer without the LAYER_PROGRESS capability: the layer fields are absent.
        assert_eq!(
            (m.substep_done, m.substep_total, m.substep_age_ms),
            (None, None, None)
        );
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert!(json.get("substep_done").is_none() && json.get("stalled_at_layer").is_none());
        // The meta is its figures: the numbers the C ABI copies out.
        let f = MetaFigures::of(v, &v.slots[0]);
        assert_eq!(
            (f.operation, f.progress, f.elapsed_ms),
            (Phase::Prefill, 0.25, 3000)
        );
        assert_eq!(m.classification, SlotClass::Progressing);
        // The writer's bits, and the families every writer derives by itself (v1.3).
        assert_eq!(
            m.model_capabilities,
            3 | hydra_layout::header::capabilities::WRITER_DERIVED
        );
        m
    }

    #[test]
    fn meta_of_prefilling_queued_and_saving_slots() {
        let tmp = tempfile::tempdir().unwrap();
        let now = clock::monotonic_ns() + 100 * S;
        let w = prefilling_queued_and_saving(tmp.path(), now);
        let r = SegmentReader::open(w.path()).unwrap();
        let v = EngineView::capture(&r, now, &Thresholds::default()).unwrap();
        let m = check_prefilling_meta(&v);
        let q = HydraMeta::from_view(&v, 1).unwrap();
        assert_eq!(
            (q.operation.as_str(), q.queued, q.is_processing),
            ("idle", true, false)
        );
        assert_eq!((q.elapsed_ms, q.progress), (0, 0.0));
        let s = HydraMeta::from_view(&v, 2).unwrap();
        assert_eq!(
            (s.operation.as_str(), s.tokens_processed, s.work_done),
            ("save", 0, 1 << 20)
        );
        assert_eq!(s.progress, 0.25);
        assert!(HydraMeta::from_view(&v, 3).is_none());
        // A phase this reader does not know is processing, under the operation "idle".
        let unknown = SlotView::from_state(
            0,
            SlotState {
                phase: Phase::from_raw(42),
                ..Default::default()
            },
            0,
            hydra_layout::Liveness::Live,
            now,
            &Thresholds::default(),
        );
        let f = MetaFigures::of(&v, &unknown);
        assert_eq!((f.is_processing, f.operation), (true, Phase::Idle));
        // Round trip through JSON.
        let back: HydraMeta = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(back, m);
    }

    /// The bytes of the segment at `segment` as a v1.0 writer's file (a copy beside it): the
    /// layer fields are absent from its meta.
    fn check_as_v1_0(segment: &std::path::Path, now: u64) {
        let mut bytes = std::fs::read(segment).unwrap();
        bytes[hydra_layout::header::VERSION_MINOR_OFFSET..][..8]
            .copy_from_slice(&0u64.to_ne_bytes());
        let old = segment.with_extension("as-v1.0.seg");
        std::fs::write(&old, &bytes).unwrap();
        let r0 = SegmentReader::open(&old).unwrap();
        let m0 = HydraMeta::from_view(
            &EngineView::capture(&r0, now, &Thresholds::default()).unwrap(),
            0,
        )
        .unwrap();
        assert_eq!(
            m0.classification,
            SlotClass::Orphaned,
            "a copy has no live writer"
        );
        assert_eq!(m0.stalled_at_layer, None);
        let json: serde_json::Value = serde_json::from_str(&m0.to_json()).unwrap();
        for field in [
            "substep_done",
            "substep_total",
            "substep_age_ms",
            "stalled_at_layer",
        ] {
            assert!(
                json.get(field).is_none(),
                "{field} present for a v1.0 writer"
            );
        }
    }

    /// The layer fields: a position of the step in flight (v1.1), stalled at a layer, and
    /// absent for a v1.0 writer's segment.
    #[test]
    fn meta_layer_fields_for_v1_1_and_v1_0_writers() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::create(&SegmentConfig {
            dir: tmp.path().into(),
            engine_id: "layers".into(),
            slot_count: 1,
            description: EngineDescription {
                capabilities: hydra_layout::header::capabilities::LAYER_PROGRESS,
                ..Default::default()
            },
        })
        .unwrap();
        let now = clock::monotonic_ns() + 1000 * S;
        let state = SlotState {
            task_id: 7,
            phase: Phase::Prefill,
            work_unit: WorkUnit::Tokens,
            work_total: 512,
            phase_start_ns: now - 100 * S,
            last_progress_ns: now - 100 * S,
            step_start_ns: now - 100 * S,
            step_size: 512,
            ..Default::default()
        };
        w.publish(0, &state).unwrap();
        let layer = |done, age| hydra_layout::Substep {
            done,
            total: 30,
            at_ns: now - age,
            step_start_ns: state.step_start_ns,
        };
        let t = Thresholds::default();
        let r = SegmentReader::open(w.path()).unwrap();
        let meta = || HydraMeta::from_view(&EngineView::capture(&r, now, &t).unwrap(), 0).unwrap();

        // No layer of this step published yet: present, null.
        let m = meta();
        assert_eq!(
            (m.substep_done, m.substep_total, m.substep_age_ms),
            (Some(None), Some(None), Some(None))
        );
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert!(json["substep_done"].is_null() && json.get("substep_done").is_some());
        assert_eq!(serde_json::from_value::<HydraMeta>(json).unwrap(), m);

        w.publish_substep(0, &layer(17, 2 * S)).unwrap();
        let m = meta();
        assert_eq!(m.classification, SlotClass::Slow, "layers move: slow");
        assert_eq!(
            (m.substep_done, m.substep_total, m.substep_age_ms),
            (Some(Some(17)), Some(Some(30)), Some(Some(2000)))
        );
        assert_eq!(m.stalled_at_layer, None);

        w.publish_substep(0, &layer(5, 40 * S)).unwrap();
        let m = meta();
        assert_eq!(m.classification, SlotClass::Stalled);
        assert_eq!(m.stalled_at_layer, Some(5));
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(json["stalled_at_layer"], 5);
        assert_eq!(json["substep_done"], 5);
        assert_eq!(serde_json::from_value::<HydraMeta>(json).unwrap(), m);

        // The same bytes as a v1.0 writer's file: the layer fields are absent.
        check_as_v1_0(w.path(), now);
    }

    /// The device fields (v1.3): the device a step waits on and its layer's device on an
    /// RPC split; null between waits; absent for an engine that publishes no waits.
    #[test]
    fn meta_device_fields_on_an_rpc_split_and_without_waits() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut w, now) = crate::test_support::split_engine(tmp.path());
        let t = Thresholds::default();
        let r = SegmentReader::open_engine(tmp.path(), "rpc").unwrap();
        let meta = || HydraMeta::from_view(&EngineView::capture(&r, now, &t).unwrap(), 0).unwrap();
        let m = meta();
        assert_eq!(m.wait_device, Some(Some("RPC1 127.0.0.1:50053".into())));
        assert_eq!(m.wait_ms, Some(Some(5000)));
        assert_eq!(m.layer_device.as_deref(), Some("RPC1 127.0.0.1:50053"));
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(json["wait_device"], "RPC1 127.0.0.1:50053");
        assert_eq!(json["wait_ms"], 5000);
        assert_eq!(serde_json::from_value::<HydraMeta>(json).unwrap(), m);
        let view = EngineView::capture(&r, now, &t).unwrap();
        let f = MetaFigures::of(&view, &view.slots[0]);
        assert_eq!((f.wait_device, f.layer_device), (Some(2), Some(2)));

        // The wait ends: present and null.
        w.publish_step_devices(0, &hydra_layout::StepDevices::default())
            .unwrap();
        let m = meta();
        assert_eq!((m.wait_device.clone(), m.wait_ms), (Some(None), Some(None)));
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert!(json.get("wait_device").is_some_and(|v| v.is_null()));

        // A writer without the device-wait capability: absent.
        let plain = crate::test_support::writer(tmp.path(), "plain", 1);
        let r = SegmentReader::open(plain.path()).unwrap();
        let m = HydraMeta::from_view(&EngineView::capture(&r, now, &t).unwrap(), 0).unwrap();
        assert_eq!(
            (&m.wait_device, m.wait_ms, &m.layer_device),
            (&None, None, &None)
        );
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        for field in [
            "wait_device",
            "wait_ms",
            "layer_device",
            "wait_learnt_max_ms",
            "wait_threshold_ms",
        ] {
            assert!(json.get(field).is_none(), "{field}: {json}");
        }
    }

    /// The wait rule's figures: a decode step waiting on a peer whose decode waits took
    /// 2 ms gets their maximum and the threshold (the 1 s floor); a prefill wait, not
    /// judged by a history, gets null for both.
    #[test]
    fn meta_wait_rule_figures_for_a_judged_decode_wait_and_null_otherwise() {
        let t = Thresholds {
            stall_floor: std::time::Duration::from_secs(1),
            ..Default::default()
        };
        let tmp = tempfile::tempdir().unwrap();
        let (_w, now) =
            crate::test_support::split_engine_learnt(tmp.path(), Phase::Decode, 8, 2_000_000);
        let r = SegmentReader::open_engine(tmp.path(), "rpc").unwrap();
        let view = EngineView::capture(&r, now, &t).unwrap();
        let m = HydraMeta::from_view(&view, 0).unwrap();
        let (max, threshold) = (m.wait_learnt_max_ms, m.wait_threshold_ms);
        assert!(
            matches!(max, Some(Some(2..=3))),
            "the longest decode wait, ~2 ms: {max:?}"
        );
        assert_eq!(threshold, Some(Some(1000)));
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(json["wait_threshold_ms"], 1000);
        assert_eq!(serde_json::from_value::<HydraMeta>(json).unwrap(), m);
        let f = MetaFigures::of(&view, &view.slots[0]);
        assert_eq!(f.wait_threshold_ms, Some(1000));

        let tmp = tempfile::tempdir().unwrap();
        let (_w, now) =
            crate::test_support::split_engine_learnt(tmp.path(), Phase::Prefill, 8, 2_000_000);
        let r = SegmentReader::open_engine(tmp.path(), "rpc").unwrap();
        let m = HydraMeta::from_view(&EngineView::capture(&r, now, &t).unwrap(), 0).unwrap();
        assert_eq!(m.wait_ms, Some(Some(5000)), "it waits");
        assert_eq!(
            (m.wait_learnt_max_ms, m.wait_threshold_ms),
            (Some(None), Some(None))
        );
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert!(json.get("wait_threshold_ms").is_some_and(|v| v.is_null()));
    }

    /// The peer rule's figures (format v1.3 §19.7): the peer unread the longest, for how
    /// long and the threshold; null while every peer keeps up; absent for a writer that
    /// does not watch its peers.
    #[test]
    fn meta_unread_peer_figures_null_while_peers_keep_up_and_absent_unwatched() {
        let t = Thresholds::default();
        let read = |dir: &std::path::Path, now| {
            let r = SegmentReader::open_engine(dir, "rpc").unwrap();
            let view = EngineView::capture(&r, now, &t).unwrap();
            (
                HydraMeta::from_view(&view, 0).unwrap(),
                MetaFigures::of(&view, &view.slots[0]),
            )
        };
        let tmp = tempfile::tempdir().unwrap();
        let (_w, now) = crate::test_support::peer_engine(tmp.path(), 5_000_000_000);
        let (m, f) = read(tmp.path(), now);
        assert_eq!(m.unread_peer, Some(Some("RPC1 127.0.0.1:50053".into())));
        assert_eq!(m.unread_peer_ms, Some(Some(5000)));
        assert_eq!(m.unread_peer_threshold_ms, Some(Some(4000)));
        assert_eq!((f.unread_peer, f.peers_published), (Some(2), true));
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(json["unread_peer"], "RPC1 127.0.0.1:50053");
        assert_eq!(serde_json::from_value::<HydraMeta>(json).unwrap(), m);

        let tmp = tempfile::tempdir().unwrap();
        let (_w, now) = crate::test_support::peer_engine(tmp.path(), 0);
        let (m, _) = read(tmp.path(), now);
        assert_eq!(
            (
                m.unread_peer.clone(),
                m.unread_peer_ms,
                m.unread_peer_threshold_ms
            ),
            (Some(None), Some(None), Some(None))
        );
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        assert!(json.get("unread_peer").is_some_and(|v| v.is_null()));

        let tmp = tempfile::tempdir().unwrap();
        let (_w, now) = crate::test_support::split_engine(tmp.path());
        let r = SegmentReader::open_engine(tmp.path(), "rpc").unwrap();
        let m = HydraMeta::from_view(&EngineView::capture(&r, now, &t).unwrap(), 0).unwrap();
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        for field in ["unread_peer", "unread_peer_ms", "unread_peer_threshold_ms"] {
            assert!(json.get(field).is_none(), "{field}: {json}");
        }
    }
}
