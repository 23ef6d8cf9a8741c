//! The `/metrics` exposition: which metrics, with which labels and values.
//!
//! Every scrape encodes one [`Collection`] from scratch (engines come and go, so there is
//! nothing to keep). The engine and slot families are written straight from the
//! snapshots into one pre-sized `String` by the crate's hand-written exposition writer
//! (module `exposition`: the syntax of both formats, label escaping, number formatting),
//! engine by engine and slot by slot, each label set escaped once per engine or slot. A
//! scrape of 16 engines x 64 busy slots is ~28k series, which prometheus-client's
//! encoder took ~4.7 ms to write (see `exporter/BENCH_RESULTS.md`). The exporter's own
//! counters ([`ExporterStats`]) are prometheus-client `Family<KindLabel, Counter>` /
//! `Counter` values kept across scrapes; they are registered into a small [`Registry`] per
//! scrape and encoded by prometheus-client after the engine families. The test suite keeps
//! the former all-prometheus-client encoding as an oracle (`tests/oracle/`) and checks
//! that both give the same families, metadata and samples.
//!
//! # Formats
//! [`Format::Text`] is the Prometheus text format 0.0.4 (the default);
//! [`Format::OpenMetrics`] is OpenMetrics 1.0.0 text, chosen when the `Accept` header asks
//! for `application/openmetrics-text` (as Prometheus itself does). In OpenMetrics a
//! counter family is named without its `_total` in `# HELP`/`# TYPE` (the samples keep
//! it), and the exposition ends with `# EOF`.
//!
//! # Metrics
//! Labels are `engine` (the id), `slot` (the index), plus `phase`, `class` or `liveness`
//! on the state sets and `model`/`quant`/`device`/`pid` on `hydra_engine_info`. Task ids
//! never appear (unbounded cardinality). Work is split by unit in the metric name
//! (`_tokens` or `_bytes`): a slot exports the pair that matches the unit of its current
//! phase (tokens for prefill and decode, bytes for save and restore). Work, progress,
//! rate, ETA, last-progress age and stall threshold are exported for *active* slots only
//! (prefill, decode, save, restore, or a phase this reader does not know); an idle slot has
//! none, so a dashboard shows a gap rather than stale numbers. Timestamps are Unix seconds,
//! converted from CLOCK_MONOTONIC with the segment's clock anchors. See [`METRIC_NAMES`]
//! for the complete list.

use crate::collect::{Collection, Collector};
use crate::exposition::{
    Exposition, ExtraLabel, Kind, LabelSets, Labels, Seconds, StateSet, Value,
};
use crate::stats::ExporterStats;
use hydra_layout::{Phase, WorkUnit};
use hydra_probe::{EngineHealth, EngineView, EtaSource, SlotClass, SlotView};
use prometheus_client::registry::Registry;
use std::sync::Arc;

pub use crate::exposition::Format;

/// Every family `/metrics` can contain, in output order: the sample name of a gauge or
/// counter (`_total` included), the family name of a histogram (its samples add
/// `_bucket`, `_sum` and `_count`: [`is_sample_name`]). Tests check dashboards and alert
/// rules against this list.
pub const METRIC_NAMES: &[&str] = &[
    "hydra_engine_info",
    "hydra_engine_device_info",
    "hydra_engine_liveness",
    "hydra_engine_heartbeat_timestamp_seconds",
    "hydra_engine_heartbeat_age_seconds",
    "hydra_engine_loop_iterations_total",
    "hydra_engine_prompt_tokens_total",
    "hydra_engine_generated_tokens_total",
    "hydra_engine_requests_running",
    "hydra_engine_requests_waiting",
    "hydra_engine_kv_usage_ratio",
    "hydra_engine_slots",
    "hydra_engine_busy_slots",
    "hydra_slot_phase",
    "hydra_slot_class",
    "hydra_slot_work_done_tokens",
    "hydra_slot_work_target_tokens",
    "hydra_slot_work_done_bytes",
    "hydra_slot_work_target_bytes",
    "hydra_slot_progress_ratio",
    "hydra_slot_rate_tokens_per_second",
    "hydra_slot_rate_bytes_per_second",
    "hydra_slot_eta_seconds",
    "hydra_slot_step_expected_seconds",
    "hydra_slot_prediction_error_ratio",
    "hydra_slot_last_progress_timestamp_seconds",
    "hydra_slot_last_progress_age_seconds",
    "hydra_slot_stall_threshold_seconds",
    "hydra_slot_layers_done",
    "hydra_slot_step_layers",
    "hydra_slot_layer_age_seconds",
    "hydra_slot_layers_sent",
    "hydra_slot_device_wait_seconds",
    "hydra_slot_device_wait_threshold_seconds",
    "hydra_slot_peer_unread_seconds",
    "hydra_slot_peer_unread_threshold_seconds",
    "hydra_slot_phase_start_timestamp_seconds",
    "hydra_slot_state_size_bytes",
    "hydra_slot_n_past_tokens",
    "hydra_slot_context_size_tokens",
    "hydra_slot_pending_tasks",
    "hydra_time_to_first_token_seconds",
    "hydra_inter_token_latency_seconds",
    "hydra_request_queue_time_seconds",
    "hydra_request_prefill_time_seconds",
    "hydra_request_decode_time_seconds",
    "hydra_e2e_request_latency_seconds",
    "hydra_step_duration_seconds",
    "hydra_step_duration_over_predicted_ratio",
    "hydra_tasks_begun_total",
    "hydra_tasks_ended_total",
    "hydra_tasks_without_arrival_total",
    "hydra_prompt_tokens_computed_total",
    "hydra_prompt_tokens_reused_total",
    "hydra_tokens_generated_total",
    "hydra_tasks_finished_total",
    "hydra_task_errors_total",
    "hydra_busy_seconds_total",
    "hydra_steps_total",
    "hydra_steps_abandoned_total",
    "hydra_exporter_engines",
    "hydra_exporter_scrape_duration_seconds",
    "hydra_dir_up",
    "hydra_exporter_read_errors_total",
    "hydra_exporter_torn_reads_total",
    "hydra_exporter_seqlock_retries_total",
    "hydra_exporter_scrapes_total",
];

/// Whether `/metrics` can contain a sample named `name`: a gauge or counter of
/// [`METRIC_NAMES`], or a histogram's `_bucket`, `_sum` or `_count`.
pub fn is_sample_name(name: &str) -> bool {
    METRIC_NAMES.contains(&name) || crate::engine_stats::is_histogram_sample(name)
}

/// Values of `hydra_slot_phase{phase}` (every phase the format knows, plus "unknown").
pub const PHASES: [&str; 7] = [
    "idle", "queued", "prefill", "decode", "save", "restore", "unknown",
];

/// The work series of each unit: `(unit, work done, work target)` metric names.
pub const WORK_METRICS: [(WorkUnit, &str, &str); 2] = [
    (
        WorkUnit::Tokens,
        "hydra_slot_work_done_tokens",
        "hydra_slot_work_target_tokens",
    ),
    (
        WorkUnit::Bytes,
        "hydra_slot_work_done_bytes",
        "hydra_slot_work_target_bytes",
    ),
];

/// Values of `hydra_engine_liveness{liveness}`.
pub const LIVENESS: [EngineHealth; 4] = [
    EngineHealth::Live,
    EngineHealth::Hung,
    EngineHealth::Closed,
    EngineHealth::Dead,
];

impl Collector {
    /// One whole scrape: [`collect`](Collector::collect) then [`render`].
    pub fn scrape(&self, format: Format) -> String {
        render(Arc::new(self.collect()), self.stats(), format)
    }
}

/// Encodes one scrape in `format`: the engines of `collection` and the exporter's `stats`.
///
/// The engine, slot and scrape families are written by hand (the crate's `exposition`
/// module), in the order of [`METRIC_NAMES`]; the exporter's own counters follow, encoded by
/// prometheus-client from [`ExporterStats`]; OpenMetrics ends with `# EOF`.
pub fn render(collection: Arc<Collection>, stats: &ExporterStats, format: Format) -> String {
    let slots = collection.views().map(|e| e.slots.len() + 1).sum();
    let mut label_sets = LabelSets::with_capacity(slots);
    let rows = Rows::of(&collection, &mut label_sets);
    let mut x = Exposition::with_capacity(format, rows.size_hint());
    engine_families(&mut x, &rows);
    slot_families(&mut x, &rows);
    crate::engine_stats::stats_families(&mut x, &collection);
    scrape_families(&mut x, &collection);
    // Writing into a String cannot fail; an encoder error would be a bug in a label set.
    let res = match format {
        Format::Text => {
            prometheus_client::encoding::prometheus_text::encode(x.out(), &stats_registry(stats))
        }
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(x.out(), &stats_registry(stats))
        }
    };
    if let Err(e) = res {
        tracing::error!("encoding metrics failed: {e}");
    }
    x.finish()
}

/// The exporter's own metrics, in a registry of their own (cheap: `Arc` clones).
fn stats_registry(stats: &ExporterStats) -> Registry {
    let mut registry = Registry::default();
    register_stats(&mut registry, stats);
    registry
}

/// Registers the exporter's own metrics (`hydra_dir_up` and the `hydra_exporter_*`
/// counters) in `registry`.
pub fn register_stats(registry: &mut Registry, stats: &ExporterStats) {
    registry.register(
        "hydra_dir_up",
        "1 while the segment directory can be listed (even empty), 0 with the reason when it cannot",
        stats.dir_up.clone(),
    );
    registry.register(
        "hydra_exporter_read_errors",
        "Segments (or the directory) that could not be read, by kind of error",
        stats.read_errors.clone(),
    );
    for (name, help, counter) in [
        (
            "hydra_exporter_torn_reads",
            "Slot records read as torn (writer stopped mid-update) or always changing",
            &stats.torn_reads,
        ),
        (
            "hydra_exporter_seqlock_retries",
            "Failed seqlock read attempts before a consistent slot copy",
            &stats.seqlock_retries,
        ),
        (
            "hydra_exporter_scrapes",
            "Collections of the segment directory",
            &stats.scrapes,
        ),
    ] {
        registry.register(name, help, counter.clone());
    }
}

/// The readable engines and their slots, in output order (engine by engine, slot by
/// slot), each with its label set rendered once: `{engine="…"} ` for an engine,
/// `{engine="…",slot="…"} ` for a slot.
struct Rows<'c> {
    engines: Vec<(&'c EngineView, Labels<'c>)>,
    slots: Vec<(&'c EngineView, &'c SlotView, Labels<'c>)>,
}

impl<'c> Rows<'c> {
    /// The rows of `c`, their label sets rendered into `sets`.
    fn of(c: &'c Collection, sets: &'c mut LabelSets) -> Self {
        let mut engines = Vec::new();
        let mut slots = Vec::new();
        let mut slot = itoa::Buffer::new();
        for e in c.views() {
            engines.push((e, sets.add(&[("engine", &e.engine_id)])));
            for s in &e.slots {
                let id = sets.add(&[("engine", &e.engine_id), ("slot", slot.format(s.slot))]);
                slots.push((e, s, id));
            }
        }
        let sets: &'c LabelSets = sets;
        Rows {
            engines: engines
                .into_iter()
                .map(|(e, id)| (e, sets.get(id)))
                .collect(),
            slots: slots
                .into_iter()
                .map(|(e, s, id)| (e, s, sets.get(id)))
                .collect(),
        }
    }

    /// Bytes of the exposition, a little more than it takes when every slot is busy:
    /// ~30 series per slot and ~20 per engine of some 64 bytes plus their labels, the
    /// `# HELP`/`# TYPE` lines and the exporter's own counters.
    fn size_hint(&self) -> usize {
        let slot_labels = self.slots.iter().map(|(_, _, l)| l.len()).sum::<usize>();
        let engine_labels = self.engines.iter().map(|(_, l)| l.len()).sum::<usize>();
        30 * (64 * self.slots.len() + slot_labels)
            + 20 * (64 * self.engines.len() + engine_labels)
            + 16 * 1024
    }
}

/// The index of `phase` in [`PHASES`].
fn phase_index(phase: Phase) -> usize {
    match phase {
        Phase::Idle => 0,
        Phase::Queued => 1,
        Phase::Prefill => 2,
        Phase::Decode => 3,
        Phase::Save => 4,
        Phase::Restore => 5,
        Phase::Unknown(_) => 6,
    }
}

/// An unsigned count as exported: capped at `i64::MAX`, as it always was (the
/// prometheus-client encoding this replaced held them in `i64`s).
fn int(v: u64) -> u64 {
    v.min(i64::MAX as u64)
}

/// `ns` in seconds (the `f64` `ns as f64 / 1e9`, written exactly; see the exposition
/// module's `Seconds`).
fn secs(ns: u64) -> Seconds {
    Seconds(ns)
}

/// A CLOCK_MONOTONIC time of `e`'s boot as Unix seconds.
fn unix_secs(e: &EngineView, mono_ns: u64) -> Seconds {
    secs(e.identity.to_realtime_ns(mono_ns))
}

/// One series per label set in `samples` whose value is `Some`.
#[inline(always)]
fn series<'l, V: Value>(
    x: &mut Exposition,
    name: &str,
    help: &str,
    kind: Kind,
    samples: impl Iterator<Item = (Labels<'l>, Option<V>)>,
) {
    x.family(name, help, kind, |f| {
        for (labels, v) in samples {
            if let Some(v) = v {
                f.sample(labels, v);
            }
        }
    });
}

/// One series per engine with `value`'s `Some`s.
#[inline(always)]
fn per_engine<V: Value>(
    x: &mut Exposition,
    rows: &Rows,
    name: &str,
    help: &str,
    kind: Kind,
    value: impl Fn(&EngineView) -> Option<V>,
) {
    let samples = rows.engines.iter().map(|(e, labels)| (*labels, value(e)));
    series(x, name, help, kind, samples);
}

/// One gauge series per slot with `value`'s `Some`s.
#[inline(always)]
fn per_slot<V: Value>(
    x: &mut Exposition,
    rows: &Rows,
    name: &str,
    help: &str,
    value: impl Fn(&EngineView, &SlotView) -> Option<V>,
) {
    let samples = rows
        .slots
        .iter()
        .map(|(e, s, labels)| (*labels, value(e, s)));
    series(x, name, help, Kind::Gauge, samples);
}

/// `value` for the active slots only (none for the others), for [`per_slot`].
#[inline(always)]
fn if_active<V>(
    value: impl Fn(&EngineView, &SlotView) -> Option<V>,
) -> impl Fn(&EngineView, &SlotView) -> Option<V> {
    move |e, s| s.is_active().then(|| value(e, s)).flatten()
}

/// `hydra_engine_device_info`: one series per device of each engine that publishes its
/// device table (format v1.3).
fn device_info(x: &mut Exposition, rows: &Rows) {
    x.family(
        "hydra_engine_device_info",
        "A device the engine computes on (value 1): its id in the engine's device table, name, kind (cpu, gpu, rpc, accel), an RPC peer's host:port, and the layers it runs (first-last, comma-separated)",
        Kind::Gauge,
        |f| {
            let mut sets = LabelSets::default();
            let mut id = itoa::Buffer::new();
            for (e, _) in &rows.engines {
                let Some(d) = &e.devices else { continue };
                for (j, dev) in d.devices.iter().enumerate() {
                    let device = j as u64 + 1;
                    let layers = layers_of(d, device);
                    sets.clear();
                    let k = sets.add(&[
                        ("engine", &e.engine_id),
                        ("device", id.format(device)),
                        ("name", &dev.name),
                        ("kind", dev.kind.as_str()),
                        ("endpoint", &dev.endpoint),
                        ("layers", &layers),
                    ]);
                    f.sample(sets.get(k), 1u64);
                }
            }
        },
    );
}

/// `hydra_slot_device_wait_seconds{device}`: the wait of each active slot's step on a
/// device (format v1.3).
fn device_wait(x: &mut Exposition, rows: &Rows) {
    per_device(x, rows, "hydra_slot_device_wait_seconds", WAIT_HELP, |s| {
        s.wait.as_ref().map(|w| (w.name.as_str(), w.age_ns))
    });
    let name = "hydra_slot_device_wait_threshold_seconds";
    per_device(x, rows, name, WAIT_THRESHOLD_HELP, |s| {
        let t = s.derived.wait_stall_threshold_ns?;
        s.wait.as_ref().map(|w| (w.name.as_str(), t))
    });
}

/// `hydra_slot_peer_unread_seconds{device}`: how long the RPC peer unread the longest has
/// read nothing of what the engine sent it, for each slot whose step is in flight (format
/// v1.3 §19.7), with the peer rule's threshold.
fn peer_unread(x: &mut Exposition, rows: &Rows) {
    per_device(x, rows, "hydra_slot_peer_unread_seconds", PEER_HELP, |s| {
        s.unread_peer.as_ref().map(|p| (p.name.as_str(), p.age_ns))
    });
    let name = "hydra_slot_peer_unread_threshold_seconds";
    per_device(x, rows, name, PEER_THRESHOLD_HELP, |s| {
        let p = s.unread_peer.as_ref()?;
        Some((p.name.as_str(), p.threshold_ns?))
    });
}

/// A gauge in seconds per active slot, labelled with the device `value` names beside its
/// ns (none: no sample for that slot).
fn per_device(
    x: &mut Exposition,
    rows: &Rows,
    name: &str,
    help: &str,
    value: impl Fn(&SlotView) -> Option<(&str, u64)>,
) {
    x.family(name, help, Kind::Gauge, |f| {
        for (_, s, labels) in &rows.slots {
            if let Some((device, ns)) = value(s).filter(|_| s.is_active()) {
                f.sample_with(*labels, &ExtraLabel::new("device", device), secs(ns));
            }
        }
    });
}

/// The help of `hydra_slot_device_wait_seconds`.
const WAIT_HELP: &str = "How long the step in flight has been blocked on a device, labelled with it (its name and, for an RPC peer, host:port; absent without a wait, and for writers that do not publish waits)";

/// The help of `hydra_slot_peer_unread_seconds`.
const PEER_HELP: &str = "How long the labelled RPC peer has read nothing of what the engine sent it, while the slot's step is in flight (format v1.3; absent while every peer keeps up, and for writers that do not watch their peers)";

/// The help of `hydra_slot_layers_sent`.
const LAYERS_SENT_HELP: &str = "Transformer layers of the step in flight's forward handed to their devices: on a ggml RPC split whose host only sends them (llama.cpp 0c1e570), how far it has sent (format v1.3; absent between steps and for writers that do not publish it)";

/// The help of `hydra_slot_peer_unread_threshold_seconds`.
const PEER_THRESHOLD_HELP: &str = "Time without a read beyond which the labelled RPC peer stalls the slot's step: max(confident floor, 2 x the step's length) (format v1.3; absent with the peer, or without an expected step)";

/// The help of `hydra_slot_device_wait_threshold_seconds`.
const WAIT_THRESHOLD_HELP: &str = "Wait beyond which the decode step in flight, blocked on the labelled device, is classified stalled on it: max(confident floor, factor x the longest recent decode wait on that device) (format v1.3; absent without a wait or before the device's waits are learnt)";

/// The layers device `device` runs, as `0-15` (ranges comma-separated; empty for none).
fn layers_of(d: &hydra_layout::Devices, device: u64) -> String {
    let ranges: Vec<String> = d
        .ranges
        .iter()
        .filter(|r| r.device == device)
        .map(|r| format!("{}-{}", r.first, r.last))
        .collect();
    ranges.join(",")
}

fn engine_families(x: &mut Exposition, rows: &Rows) {
    use Kind::{Counter, Gauge};
    x.family(
        "hydra_engine_info",
        "Engine description (value 1): model, quantization, device, writer pid",
        Gauge,
        |f| {
            let mut sets = LabelSets::default();
            let mut pid = itoa::Buffer::new();
            for (e, _) in &rows.engines {
                let d = &e.identity.description;
                sets.clear();
                let id = sets.add(&[
                    ("engine", &e.engine_id),
                    ("model", &d.model_name),
                    ("quant", &d.model_quant),
                    ("device", &d.device),
                    ("pid", pid.format(e.identity.pid)),
                ]);
                f.sample(sets.get(id), 1u64);
            }
        },
    );
    device_info(x, rows);
    let liveness = StateSet::new("liveness", LIVENESS.iter().map(|h| h.as_str()));
    x.family(
        "hydra_engine_liveness",
        "Engine health state set: live, hung (live but heartbeat and every active slot stalled), closed (clean exit), dead (lock free, never closed)",
        Gauge,
        |f| {
            for (e, labels) in &rows.engines {
                f.state_set(*labels, &liveness, |i| e.health == LIVENESS[i]);
            }
        },
    );
    per_engine(
        x,
        rows,
        "hydra_engine_heartbeat_timestamp_seconds",
        "Last compute loop heartbeat, Unix time",
        Gauge,
        |e| Some(unix_secs(e, e.header.heartbeat_ns)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_heartbeat_age_seconds",
        "Time since the last compute loop heartbeat, measured on CLOCK_MONOTONIC at scrape",
        Gauge,
        |e| Some(secs(e.heartbeat_age_ns)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_loop_iterations_total",
        "Compute loop passes since the engine started",
        Counter,
        |e| Some(int(e.header.loop_iterations)),
    );
    engine_counters(x, rows);
}

/// The engine's token, request, KV and slot figures, one series each.
fn engine_counters(x: &mut Exposition, rows: &Rows) {
    use Kind::{Counter, Gauge};
    per_engine(
        x,
        rows,
        "hydra_engine_prompt_tokens_total",
        "Prompt tokens evaluated since the engine started",
        Counter,
        |e| Some(int(e.header.counters.prompt_tokens_total)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_generated_tokens_total",
        "Tokens generated since the engine started",
        Counter,
        |e| Some(int(e.header.counters.generated_tokens_total)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_requests_running",
        "Requests being processed",
        Gauge,
        |e| Some(int(e.header.counters.requests_running)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_requests_waiting",
        "Requests queued",
        Gauge,
        |e| Some(int(e.header.counters.requests_waiting)),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_kv_usage_ratio",
        "KV cache cells in use over cells available, 0-1 (absent when the engine reports no capacity)",
        Gauge,
        |e| {
            let c = &e.header.counters;
            (c.kv_cells_total > 0)
                .then(|| (c.kv_cells_used as f64 / c.kv_cells_total as f64).clamp(0.0, 1.0))
        },
    );
    per_engine(
        x,
        rows,
        "hydra_engine_slots",
        "Slots of the engine",
        Gauge,
        |e| Some(e.slots.len() as u64),
    );
    per_engine(
        x,
        rows,
        "hydra_engine_busy_slots",
        "Slots doing work (prefill, decode, save or restore)",
        Gauge,
        |e| Some(e.busy_slots() as u64),
    );
}

fn slot_families(x: &mut Exposition, rows: &Rows) {
    let phases = StateSet::new("phase", PHASES);
    x.family(
        "hydra_slot_phase",
        "Slot phase state set: idle, queued, prefill, decode, save, restore (unknown: a phase newer than this exporter)",
        Kind::Gauge,
        |f| {
            for (_, s, labels) in &rows.slots {
                let current = phase_index(s.state.phase);
                f.state_set(*labels, &phases, |i| i == current);
            }
        },
    );
    let classes = StateSet::new("class", SlotClass::ALL.iter().map(|c| c.as_str()));
    x.family(
        "hydra_slot_class",
        "Slot classification state set: idle, queued, progressing, slow, stalled, orphaned, torn",
        Kind::Gauge,
        |f| {
            for (_, s, labels) in &rows.slots {
                f.state_set(*labels, &classes, |i| s.class == SlotClass::ALL[i]);
            }
        },
    );
    for (unit, done, target) in WORK_METRICS {
        per_slot(
            x,
            rows,
            done,
            "Work done in the current phase of an active slot",
            if_active(|_, s| (s.state.work_unit == unit).then(|| int(s.state.work_done))),
        );
        per_slot(
            x,
            rows,
            target,
            "Work the current phase of an active slot will do (0 = unknown)",
            if_active(|_, s| (s.state.work_unit == unit).then(|| int(s.state.work_total))),
        );
    }
    per_slot(
        x,
        rows,
        "hydra_slot_progress_ratio",
        "Work done over work target in the current phase, 0-1 (absent when the target is unknown)",
        if_active(|_, s| s.derived.progress),
    );
    for (unit, name) in [
        (WorkUnit::Tokens, "hydra_slot_rate_tokens_per_second"),
        (WorkUnit::Bytes, "hydra_slot_rate_bytes_per_second"),
    ] {
        per_slot(
            x,
            rows,
            name,
            "Observed rate of the current phase (work done over the time it took)",
            if_active(|_, s| s.derived.rate_per_s.filter(|_| s.state.work_unit == unit)),
        );
    }
    let sources =
        [EtaSource::Model, EtaSource::Rate].map(|e| (e, ExtraLabel::new("source", e.as_str())));
    x.family(
        "hydra_slot_eta_seconds",
        "Time to finish the current phase; source=\"model\": the writer's cost model predicts it (format v1.2), source=\"rate\": at the observed rate",
        Kind::Gauge,
        |f| {
            for (_, s, labels) in &rows.slots {
                let (Some(eta), Some(source)) = (s.derived.eta_s.filter(|_| s.is_active()), s.derived.eta_source)
                else {
                    continue;
                };
                if let Some((_, extra)) = sources.iter().find(|(e, _)| *e == source) {
                    f.sample_with(*labels, extra, eta);
                }
            }
        },
    );
    slot_timing_families(x, rows);
}

/// The slot's prediction, silence, layer, wait and context figures.
fn slot_timing_families(x: &mut Exposition, rows: &Rows) {
    per_slot(x, rows, "hydra_slot_step_expected_seconds", "The writer's predicted duration of the step in flight (format v1.2; absent without a prediction)", if_active(|_, s| s.derived.predicted_step_ns.map(secs)));
    per_slot(x, rows, "hydra_slot_prediction_error_ratio", "The error bound the writer states for its predictions, 0.2 = 20% (format v1.2; absent without one)", if_active(|_, s| s.derived.prediction_error));
    per_slot(
        x,
        rows,
        "hydra_slot_last_progress_timestamp_seconds",
        "When the slot's work last advanced, Unix time",
        |e, s| (s.state.last_progress_ns != 0).then(|| unix_secs(e, s.state.last_progress_ns)),
    );
    per_slot(x, rows, "hydra_slot_last_progress_age_seconds", "Silence of an active slot: time since its work last advanced or its phase started (CLOCK_MONOTONIC, at scrape)", if_active(|_, s| s.derived.last_progress_age_ns.map(secs)));
    per_slot(x, rows, "hydra_slot_stall_threshold_seconds", "Silence beyond which an active slot is classified stalled: max(floor, factor x expected step, or layer while the layer is known)", if_active(|_, s| Some(secs(s.stall_threshold_ns()))));
    per_slot(x, rows, "hydra_slot_layers_done", "Transformer layers of the step in flight's forward finished: the layer the compute is at (absent between steps and for v1.0 writers)", if_active(|_, s| s.substep_done().map(int)));
    per_slot(x, rows, "hydra_slot_step_layers", "Transformer layers in the step in flight's forward (absent between steps and for v1.0 writers)", if_active(|_, s| s.substep_total().map(int)));
    per_slot(x, rows, "hydra_slot_layer_age_seconds", "Time since the step in flight's last layer finished (CLOCK_MONOTONIC, at scrape; absent between steps and for v1.0 writers)", if_active(|_, s| s.substep_age_ns().map(secs)));
    per_slot(
        x,
        rows,
        "hydra_slot_layers_sent",
        LAYERS_SENT_HELP,
        if_active(|_, s| s.layers_sent.map(int)),
    );
    device_wait(x, rows);
    peer_unread(x, rows);
    per_slot(
        x,
        rows,
        "hydra_slot_phase_start_timestamp_seconds",
        "When the slot's current phase started, Unix time",
        |e, s| (s.state.phase_start_ns != 0).then(|| unix_secs(e, s.state.phase_start_ns)),
    );
    per_slot(
        x,
        rows,
        "hydra_slot_state_size_bytes",
        "Bytes a state save of the slot would produce now",
        |_, s| Some(int(s.state.state_size)),
    );
    per_slot(
        x,
        rows,
        "hydra_slot_n_past_tokens",
        "Tokens in the slot's KV cache (n_past)",
        |_, s| Some(int(s.state.n_past)),
    );
    per_slot(
        x,
        rows,
        "hydra_slot_context_size_tokens",
        "Slot context size (n_ctx)",
        |_, s| Some(int(s.state.n_ctx)),
    );
    per_slot(
        x,
        rows,
        "hydra_slot_pending_tasks",
        "Tasks queued for the slot",
        |_, s| Some(int(s.pending)),
    );
}

fn scrape_families(x: &mut Exposition, c: &Collection) {
    x.family(
        "hydra_exporter_engines",
        "Entries named like a segment in the directory at this scrape, readable or not",
        Kind::Gauge,
        |f| {
            f.sample(
                Labels::NONE,
                c.engines.iter().filter(|e| !e.vanished).count() as u64,
            )
        },
    );
    x.family(
        "hydra_exporter_scrape_duration_seconds",
        "Time this scrape spent reading the segments (scan, open, capture), before encoding",
        Kind::Gauge,
        |f| f.sample(Labels::NONE, c.duration.as_secs_f64()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_negotiation() {
        assert_eq!(Format::from_accept(None), Format::Text);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::from_accept(Some("Application/OpenMetrics-Text; q=0, text/plain")),
            Format::Text
        );
        assert_eq!(Format::from_accept(Some("*/*")), Format::Text);
    }

    #[test]
    fn empty_collection_still_exports_own_counters() {
        let stats = ExporterStats::new();
        let text = render(Arc::new(Collection::default()), &stats, Format::Text);
        assert!(
            text.contains("# TYPE hydra_exporter_read_errors_total counter"),
            "{text}"
        );
        assert!(text.contains("hydra_exporter_read_errors_total{kind=\"bad_magic\"} 0"));
        assert!(text.contains("hydra_exporter_engines 0"), "{text}");
        assert!(!text.contains("# EOF"));
        let om = render(Arc::new(Collection::default()), &stats, Format::OpenMetrics);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE hydra_exporter_read_errors counter"));
    }

    #[test]
    fn phase_index_matches_phases() {
        for raw in 0..10 {
            let phase = Phase::from_raw(raw);
            assert_eq!(PHASES[phase_index(phase)], phase.as_str(), "{phase:?}");
        }
    }

    #[test]
    fn metric_names_follow_conventions() {
        for name in METRIC_NAMES {
            assert!(name.starts_with("hydra_"), "{name}");
            assert!(!name.contains(':'), "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
        let mut sorted = METRIC_NAMES.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), METRIC_NAMES.len(), "duplicate names");
    }
}
