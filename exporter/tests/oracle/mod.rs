//! The oracle of the exporter's hand-written exposition: `/metrics` encoded entirely with
//! prometheus-client, as the exporter did before (its `Collector` over a `Collection`,
//! `ConstGauge`/`ConstCounter` per series, the exporter's own counters registered in the
//! same registry).
//!
//! Shared by `tests/exposition.rs` (which checks that both encodings give the same
//! families, metadata and samples) and `benches/scrape.rs` (which times both in one run).
//! Keep it as it was: it is the reference, not code to improve.

mod stats;

use hydra_exporter::collect::Collection;
use hydra_exporter::metrics::{Format, LIVENESS, PHASES, WORK_METRICS};
use hydra_exporter::stats::ExporterStats;
use hydra_layout::WorkUnit;
use hydra_probe::{EngineView, SlotClass, SlotView};
use prometheus_client::collector::Collector as PromCollector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, LabelSetEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;

/// Encodes one scrape in `format` the way the exporter did before its hand-written
/// exposition: everything through a prometheus-client registry.
pub fn render_prometheus_client(
    collection: Arc<Collection>,
    stats: &ExporterStats,
    format: Format,
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(EngineMetrics(collection)));
    // The exporter's own metrics were always registered from its `ExporterStats`.
    hydra_exporter::metrics::register_stats(&mut registry, stats);
    let mut out = String::with_capacity(64 * 1024);
    // Writing into a String cannot fail; an encoder error would be a bug in a label set.
    let res = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    if let Err(e) = res {
        tracing::error!("encoding metrics failed: {e}");
    }
    out
}

/// Label set: engine, optional slot, then extra pairs.
struct L<'a> {
    engine: &'a str,
    slot: Option<usize>,
    extra: &'a [(&'static str, &'a str)],
}

impl EncodeLabelSet for L<'_> {
    fn encode(&self, enc: &mut LabelSetEncoder) -> fmt::Result {
        use prometheus_client::encoding::EncodeLabel;
        ("engine", self.engine).encode(enc.encode_label())?;
        if let Some(slot) = self.slot {
            ("slot", slot).encode(enc.encode_label())?;
        }
        for pair in self.extra {
            pair.encode(enc.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct EngineMetrics(Arc<Collection>);

/// One metric family: writes its descriptor lazily, at the first series, so a family with
/// no series (no engine, or no active slot) is left out entirely.
struct FamilyWriter<'e, 'a> {
    enc: &'e mut DescriptorEncoder<'a>,
}

impl FamilyWriter<'_, '_> {
    fn family<'l, V, I>(&mut self, name: &str, help: &str, ty: MetricType, series: I) -> fmt::Result
    where
        I: IntoIterator<Item = (L<'l>, V)>,
        V: Value,
    {
        let mut series = series.into_iter().peekable();
        if series.peek().is_none() {
            return Ok(());
        }
        // prometheus-client adds `_total` to counter names itself.
        let base = match ty {
            MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let mut m = self.enc.encode_descriptor(base, help, None, ty)?;
        for (labels, v) in series {
            v.encode_as(ty, m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// A sample value, encoded as a gauge or a counter.
trait Value {
    fn encode_as(
        self,
        ty: MetricType,
        m: prometheus_client::encoding::MetricEncoder,
    ) -> fmt::Result;
}

impl Value for f64 {
    fn encode_as(
        self,
        _ty: MetricType,
        m: prometheus_client::encoding::MetricEncoder,
    ) -> fmt::Result {
        gauge(self, m)
    }
}

impl Value for i64 {
    fn encode_as(
        self,
        ty: MetricType,
        m: prometheus_client::encoding::MetricEncoder,
    ) -> fmt::Result {
        match ty {
            MetricType::Counter => ConstCounter::new(self.max(0) as u64).encode(m),
            _ => gauge(self, m),
        }
    }
}

fn gauge<N: EncodeGaugeValue>(v: N, m: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
    ConstGauge::new(v).encode(m)
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn unix_secs(e: &EngineView, mono_ns: u64) -> f64 {
    secs(e.identity.to_realtime_ns(mono_ns))
}

/// Value-1 series of an info family: one per engine and its labels.
fn ones<'a, const N: usize>(
    rows: impl Iterator<Item = (&'a EngineView, &'a [(&'static str, &'a str); N])> + 'a,
) -> impl Iterator<Item = (L<'a>, i64)> + 'a {
    rows.map(|(e, extra)| {
        (
            L {
                engine: &e.engine_id,
                slot: None,
                extra,
            },
            1i64,
        )
    })
}

fn el(e: &EngineView) -> L<'_> {
    L {
        engine: &e.engine_id,
        slot: None,
        extra: &[],
    }
}

fn sl<'a>(e: &'a EngineView, s: &SlotView) -> L<'a> {
    L {
        engine: &e.engine_id,
        slot: Some(s.slot),
        extra: &[],
    }
}

impl EngineMetrics {
    fn engines(&self) -> impl Iterator<Item = &EngineView> + Clone {
        self.0.views()
    }

    fn slots(&self) -> impl Iterator<Item = (&EngineView, &SlotView)> + Clone {
        self.engines()
            .flat_map(|e| e.slots.iter().map(move |s| (e, s)))
    }

    fn active(&self) -> impl Iterator<Item = (&EngineView, &SlotView)> + Clone {
        self.slots().filter(|(_, s)| s.is_active())
    }

    /// `hydra_engine_info`: one series per engine with its description as labels.
    fn encode_engine_info(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        let infos: Vec<(String, &EngineView)> = self
            .engines()
            .map(|e| (e.identity.pid.to_string(), e))
            .collect();
        let info_labels: Vec<[(&'static str, &str); 4]> = infos
            .iter()
            .map(|(pid, e)| {
                let d = &e.identity.description;
                [
                    ("model", d.model_name.as_str()),
                    ("quant", d.model_quant.as_str()),
                    ("device", d.device.as_str()),
                    ("pid", pid.as_str()),
                ]
            })
            .collect();
        f.family(
            "hydra_engine_info",
            "Engine description (value 1): model, quantization, device, writer pid",
            Gauge,
            ones(infos.iter().map(|(_, e)| *e).zip(&info_labels)),
        )
    }

    /// `hydra_engine_device_info` (format v1.3): one series per device of each engine
    /// that publishes them.
    fn encode_device_info(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        let devices: Vec<(&EngineView, [String; 5])> = self
            .engines()
            .flat_map(|e| {
                let table = e.devices.iter().flat_map(|d| {
                    d.devices.iter().enumerate().map(move |(j, dev)| {
                        let id = j as u64 + 1;
                        let layers: Vec<String> = d
                            .ranges
                            .iter()
                            .filter(|r| r.device == id)
                            .map(|r| format!("{}-{}", r.first, r.last))
                            .collect();
                        [
                            id.to_string(),
                            dev.name.clone(),
                            dev.kind.as_str().to_owned(),
                            dev.endpoint.clone(),
                            layers.join(","),
                        ]
                    })
                });
                table.map(move |labels| (e, labels))
            })
            .collect();
        let device_labels: Vec<[(&'static str, &str); 5]> = devices
            .iter()
            .map(|(_, v)| {
                [
                    ("device", v[0].as_str()),
                    ("name", v[1].as_str()),
                    ("kind", v[2].as_str()),
                    ("endpoint", v[3].as_str()),
                    ("layers", v[4].as_str()),
                ]
            })
            .collect();
        f.family(
            "hydra_engine_device_info",
            "A device the engine computes on (value 1): its id in the engine's device table, name, kind (cpu, gpu, rpc, accel), an RPC peer's host:port, and the layers it runs (first-last, comma-separated)",
            Gauge,
            ones(devices.iter().map(|(e, _)| *e).zip(&device_labels)),
        )
    }

    fn encode_engines(&self, f: &mut FamilyWriter) -> fmt::Result {
        self.encode_engine_info(f)?;
        self.encode_device_info(f)?;
        self.encode_engine_health(f)?;
        self.encode_engine_counters(f)
    }

    /// The engine's liveness state set and its heartbeat.
    fn encode_engine_health(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        let health: Vec<[(&'static str, &str); 1]> = LIVENESS
            .iter()
            .map(|h| [("liveness", h.as_str())])
            .collect();
        let health = &health;
        f.family(
            "hydra_engine_liveness",
            "Engine health state set: live, hung (live but heartbeat and every active slot stalled), closed (clean exit), dead (lock free, never closed)",
            Gauge,
            self.engines().flat_map(|e| {
                LIVENESS.iter().zip(health.iter()).map(move |(h, extra)| {
                    (
                        L {
                            engine: &e.engine_id,
                            slot: None,
                            extra,
                        },
                        i64::from(e.health == *h),
                    )
                })
            }),
        )?;
        f.family(
            "hydra_engine_heartbeat_timestamp_seconds",
            "Last compute loop heartbeat, Unix time",
            Gauge,
            self.engines()
                .map(|e| (el(e), unix_secs(e, e.header.heartbeat_ns))),
        )?;
        f.family(
            "hydra_engine_heartbeat_age_seconds",
            "Time since the last compute loop heartbeat, measured on CLOCK_MONOTONIC at scrape",
            Gauge,
            self.engines().map(|e| (el(e), secs(e.heartbeat_age_ns))),
        )
    }

    /// The engine's loop, token and request counters, its KV use and its slots.
    fn encode_engine_counters(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::{Counter, Gauge};
        f.family(
            "hydra_engine_loop_iterations_total",
            "Compute loop passes since the engine started",
            Counter,
            self.engines().map(|e| (el(e), i(e.header.loop_iterations))),
        )?;
        f.family(
            "hydra_engine_prompt_tokens_total",
            "Prompt tokens evaluated since the engine started",
            Counter,
            self.engines()
                .map(|e| (el(e), i(e.header.counters.prompt_tokens_total))),
        )?;
        f.family(
            "hydra_engine_generated_tokens_total",
            "Tokens generated since the engine started",
            Counter,
            self.engines()
                .map(|e| (el(e), i(e.header.counters.generated_tokens_total))),
        )?;
        f.family(
            "hydra_engine_requests_running",
            "Requests being processed",
            Gauge,
            self.engines()
                .map(|e| (el(e), i(e.header.counters.requests_running))),
        )?;
        f.family(
            "hydra_engine_requests_waiting",
            "Requests queued",
            Gauge,
            self.engines()
                .map(|e| (el(e), i(e.header.counters.requests_waiting))),
        )?;
        f.family(
            "hydra_engine_kv_usage_ratio",
            "KV cache cells in use over cells available, 0-1 (absent when the engine reports no capacity)",
            Gauge,
            self.engines().filter_map(|e| {
                let c = &e.header.counters;
                (c.kv_cells_total > 0).then(|| {
                    (
                        el(e),
                        (c.kv_cells_used as f64 / c.kv_cells_total as f64).clamp(0.0, 1.0),
                    )
                })
            }),
        )?;
        f.family(
            "hydra_engine_slots",
            "Slots of the engine",
            Gauge,
            self.engines().map(|e| (el(e), e.slots.len() as i64)),
        )?;
        f.family(
            "hydra_engine_busy_slots",
            "Slots doing work (prefill, decode, save or restore)",
            Gauge,
            self.engines().map(|e| (el(e), e.busy_slots() as i64)),
        )
    }

    fn encode_slots(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        let phases: Vec<[(&'static str, &str); 1]> =
            PHASES.iter().map(|p| [("phase", *p)]).collect();
        let phases = &phases;
        f.family(
            "hydra_slot_phase",
            "Slot phase state set: idle, queued, prefill, decode, save, restore (unknown: a phase newer than this exporter)",
            Gauge,
            self.slots().flat_map(|(e, s)| {
                let current = s.state.phase.as_str();
                phases.iter().map(move |extra| {
                    (
                        L {
                            engine: &e.engine_id,
                            slot: Some(s.slot),
                            extra,
                        },
                        i64::from(extra[0].1 == current),
                    )
                })
            }),
        )?;
        let classes: Vec<[(&'static str, &str); 1]> = SlotClass::ALL
            .iter()
            .map(|c| [("class", c.as_str())])
            .collect();
        let classes = &classes;
        f.family(
            "hydra_slot_class",
            "Slot classification state set: idle, queued, progressing, slow, stalled, orphaned, torn",
            Gauge,
            self.slots().flat_map(|(e, s)| {
                SlotClass::ALL.iter().zip(classes.iter()).map(move |(c, extra)| {
                    (
                        L {
                            engine: &e.engine_id,
                            slot: Some(s.slot),
                            extra,
                        },
                        i64::from(s.class == *c),
                    )
                })
            }),
        )?;
        self.encode_slot_work(f)
    }

    /// The slot families of work, progress, rate and ETA.
    fn encode_slot_work(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        for (unit, done, target) in WORK_METRICS {
            let of_unit = self
                .active()
                .filter(move |(_, s)| s.state.work_unit == unit);
            f.family(
                done,
                "Work done in the current phase of an active slot",
                Gauge,
                of_unit
                    .clone()
                    .map(|(e, s)| (sl(e, s), i(s.state.work_done))),
            )?;
            f.family(
                target,
                "Work the current phase of an active slot will do (0 = unknown)",
                Gauge,
                of_unit.map(|(e, s)| (sl(e, s), i(s.state.work_total))),
            )?;
        }
        f.family(
            "hydra_slot_progress_ratio",
            "Work done over work target in the current phase, 0-1 (absent when the target is unknown)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.derived.progress.map(|p| (sl(e, s), p))),
        )?;
        for (unit, name) in [
            (WorkUnit::Tokens, "hydra_slot_rate_tokens_per_second"),
            (WorkUnit::Bytes, "hydra_slot_rate_bytes_per_second"),
        ] {
            f.family(
                name,
                "Observed rate of the current phase (work done over the time it took)",
                Gauge,
                self.active()
                    .filter(|(_, s)| s.state.work_unit == unit)
                    .filter_map(|(e, s)| s.derived.rate_per_s.map(|r| (sl(e, s), r))),
            )?;
        }
        f.family(
            "hydra_slot_eta_seconds",
            "Time to finish the current phase; source=\"model\": the writer's cost model predicts it (format v1.2), source=\"rate\": at the observed rate",
            Gauge,
            self.active().filter_map(|(e, s)| {
                let source = s.derived.eta_source?.as_str();
                let extra: &[(&'static str, &str)] = match source {
                    "model" => &[("source", "model")],
                    _ => &[("source", "rate")],
                };
                s.derived.eta_s.map(|t| {
                    (
                        L {
                            extra,
                            ..sl(e, s)
                        },
                        t,
                    )
                })
            }),
        )?;
        self.encode_slot_timing(f)
    }

    /// The slot families from the prediction to the layer age.
    fn encode_slot_timing(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        f.family(
            "hydra_slot_step_expected_seconds",
            "The writer's predicted duration of the step in flight (format v1.2; absent without a prediction)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.derived.predicted_step_ns.map(|p| (sl(e, s), secs(p)))),
        )?;
        f.family(
            "hydra_slot_prediction_error_ratio",
            "The error bound the writer states for its predictions, 0.2 = 20% (format v1.2; absent without one)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.derived.prediction_error.map(|p| (sl(e, s), p))),
        )?;
        f.family(
            "hydra_slot_last_progress_timestamp_seconds",
            "When the slot's work last advanced, Unix time",
            Gauge,
            self.slots()
                .filter(|(_, s)| s.state.last_progress_ns != 0)
                .map(|(e, s)| (sl(e, s), unix_secs(e, s.state.last_progress_ns))),
        )?;
        f.family(
            "hydra_slot_last_progress_age_seconds",
            "Silence of an active slot: time since its work last advanced or its phase started (CLOCK_MONOTONIC, at scrape)",
            Gauge,
            self.active().filter_map(|(e, s)| {
                s.derived.last_progress_age_ns.map(|a| (sl(e, s), secs(a)))
            }),
        )?;
        f.family(
            "hydra_slot_stall_threshold_seconds",
            "Silence beyond which an active slot is classified stalled: max(floor, factor x expected step, or layer while the layer is known)",
            Gauge,
            self.active()
                .map(|(e, s)| (sl(e, s), secs(s.stall_threshold_ns()))),
        )?;
        f.family(
            "hydra_slot_layers_done",
            "Transformer layers of the step in flight's forward finished: the layer the compute is at (absent between steps and for v1.0 writers)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.substep_done().map(|d| (sl(e, s), i(d)))),
        )?;
        f.family(
            "hydra_slot_step_layers",
            "Transformer layers in the step in flight's forward (absent between steps and for v1.0 writers)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.substep_total().map(|t| (sl(e, s), i(t)))),
        )?;
        f.family(
            "hydra_slot_layer_age_seconds",
            "Time since the step in flight's last layer finished (CLOCK_MONOTONIC, at scrape; absent between steps and for v1.0 writers)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.substep_age_ns().map(|a| (sl(e, s), secs(a)))),
        )?;
        f.family(
            "hydra_slot_layers_sent",
            "Transformer layers of the step in flight's forward handed to their devices: on a ggml RPC split whose host only sends them (llama.cpp 0c1e570), how far it has sent (format v1.3; absent between steps and for writers that do not publish it)",
            Gauge,
            self.active()
                .filter_map(|(e, s)| s.layers_sent.map(|n| (sl(e, s), i(n)))),
        )?;
        self.encode_slot_waits(f)
    }

    /// The slot families from the RPC peer that has read nothing the longest.
    fn encode_slot_peers(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        type Peer<'v> = (&'v EngineView, &'v SlotView, [(&'static str, &'v str); 1]);
        let peers: Vec<Peer> = self
            .active()
            .filter_map(|(e, s)| Some((e, s, [("device", s.unread_peer.as_ref()?.name.as_str())])))
            .collect();
        f.family(
            "hydra_slot_peer_unread_seconds",
            "How long the labelled RPC peer has read nothing of what the engine sent it, while the slot's step is in flight (format v1.3; absent while every peer keeps up, and for writers that do not watch their peers)",
            Gauge,
            peers.iter().map(|(e, s, extra)| {
                (
                    L {
                        extra,
                        ..sl(e, s)
                    },
                    secs(s.unread_peer.as_ref().map_or(0, |p| p.age_ns)),
                )
            }),
        )?;
        f.family(
            "hydra_slot_peer_unread_threshold_seconds",
            "Time without a read beyond which the labelled RPC peer stalls the slot's step: max(confident floor, 2 x the step's length) (format v1.3; absent with the peer, or without an expected step)",
            Gauge,
            peers.iter().filter_map(|(e, s, extra)| {
                let t = s.unread_peer.as_ref()?.threshold_ns?;
                Some((
                    L {
                        extra,
                        ..sl(e, s)
                    },
                    secs(t),
                ))
            }),
        )
    }

    /// The slot families from the device wait on.
    fn encode_slot_waits(&self, f: &mut FamilyWriter) -> fmt::Result {
        use MetricType::Gauge;
        type Wait<'v> = (&'v EngineView, &'v SlotView, [(&'static str, &'v str); 1]);
        let waits: Vec<Wait> = self
            .active()
            .filter_map(|(e, s)| Some((e, s, [("device", s.wait.as_ref()?.name.as_str())])))
            .collect();
        f.family(
            "hydra_slot_device_wait_seconds",
            "How long the step in flight has been blocked on a device, labelled with it (its name and, for an RPC peer, host:port; absent without a wait, and for writers that do not publish waits)",
            Gauge,
            waits.iter().map(|(e, s, extra)| {
                (
                    L {
                        extra,
                        ..sl(e, s)
                    },
                    secs(s.wait.as_ref().map_or(0, |w| w.age_ns)),
                )
            }),
        )?;
        f.family(
            "hydra_slot_device_wait_threshold_seconds",
            "Wait beyond which the decode step in flight, blocked on the labelled device, is classified stalled on it: max(confident floor, factor x the longest recent decode wait on that device) (format v1.3; absent without a wait or before the device's waits are learnt)",
            Gauge,
            waits.iter().filter_map(|(e, s, extra)| {
                let t = s.derived.wait_stall_threshold_ns?;
                Some((
                    L {
                        extra,
                        ..sl(e, s)
                    },
                    secs(t),
                ))
            }),
        )?;
        self.encode_slot_peers(f)?;
        f.family(
            "hydra_slot_phase_start_timestamp_seconds",
            "When the slot's current phase started, Unix time",
            Gauge,
            self.slots()
                .filter(|(_, s)| s.state.phase_start_ns != 0)
                .map(|(e, s)| (sl(e, s), unix_secs(e, s.state.phase_start_ns))),
        )?;
        f.family(
            "hydra_slot_state_size_bytes",
            "Bytes a state save of the slot would produce now",
            Gauge,
            self.slots().map(|(e, s)| (sl(e, s), i(s.state.state_size))),
        )?;
        f.family(
            "hydra_slot_n_past_tokens",
            "Tokens in the slot's KV cache (n_past)",
            Gauge,
            self.slots().map(|(e, s)| (sl(e, s), i(s.state.n_past))),
        )?;
        f.family(
            "hydra_slot_context_size_tokens",
            "Slot context size (n_ctx)",
            Gauge,
            self.slots().map(|(e, s)| (sl(e, s), i(s.state.n_ctx))),
        )?;
        f.family(
            "hydra_slot_pending_tasks",
            "Tasks queued for the slot",
            Gauge,
            self.slots().map(|(e, s)| (sl(e, s), i(s.pending))),
        )
    }
}

impl PromCollector for EngineMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let mut f = FamilyWriter { enc: &mut encoder };
        self.encode_engines(&mut f)?;
        self.encode_slots(&mut f)?;
        stats::encode(&self.0, f.enc)?;
        let c = &self.0;
        let mut m = f.enc.encode_descriptor(
            "hydra_exporter_engines",
            "Entries named like a segment in the directory at this scrape, readable or not",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(c.engines.iter().filter(|e| !e.vanished).count() as i64)
            .encode(m.encode_family(&NoLabels)?)?;
        let mut m = f.enc.encode_descriptor(
            "hydra_exporter_scrape_duration_seconds",
            "Time this scrape spent reading the segments (scan, open, capture), before encoding",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(c.duration.as_secs_f64()).encode(m.encode_family(&NoLabels)?)?;
        Ok(())
    }
}

struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _enc: &mut LabelSetEncoder) -> fmt::Result {
        Ok(())
    }
}
