//! The live page for the people on call: `GET /` serves one HTML document whose style and
//! script are embedded in the binary (no CDN, no font service, nothing fetched at run time),
//! and the script polls `GET /page/state` about four times a second. That answer is built
//! from the segments only, like everything else the exporter serves, so an open page costs
//! the engines nothing: every engine of the directory with its health and findings, each
//! slot's Hydra meta (the same figures as `hydra-probe meta`), its verdict and the reason in
//! words, its last steps from the flight recorder, and the engine's latency histograms
//! summarised. No prompt text and no token ids: the segment holds none.

use crate::api::{summary_of, EngineSummary};
use crate::collect::{Collector, EngineEntry};
use hydra_probe::{
    findings, EngineView, Finding, HistogramSummary, HistoryReport, HydraMeta, StatsReport,
    StatsSum, StepRecord,
};
use serde::Serialize;

/// The page's document.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// Its style sheet (`/page.css`).
pub const PAGE_CSS: &str = include_str!("page/page.css");
/// Its script (`/page.js`).
pub const PAGE_JS: &str = include_str!("page/page.js");

/// How many of a slot's last steps the page draws (the flight recorder keeps up to 64).
pub const TIMELINE_STEPS: usize = 32;

/// The histograms the page summarises, by their probe names.
pub const LATENCIES: [&str; 3] = ["time_to_first_token", "inter_token_latency", "queue_wait"];

/// `GET /page/state`: everything the page draws, at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct PageState {
    /// When it was taken, Unix epoch ms.
    pub taken_unix_ms: u64,
    /// The segment directory read.
    pub dir: String,
    /// Why the directory could not be read, when it could not (then `engines` is empty).
    pub error: Option<String>,
    /// Every engine found, sorted by id.
    pub engines: Vec<PageEngine>,
}

/// One engine on the page.
#[derive(Debug, Clone, Serialize)]
pub struct PageEngine {
    /// What `/engines` says of it.
    #[serde(flatten)]
    pub summary: EngineSummary,
    /// Its devices, as the probe names them (from its device table; empty without one).
    pub devices: Vec<String>,
    /// What a health check reports of it (none while all is well).
    pub findings: Vec<Finding>,
    /// Its slots (`slots` is their count, from the summary).
    pub slot_states: Vec<PageSlot>,
    /// Whether the writer keeps a flight recorder (format v1.3): when not, the slots'
    /// `steps` are empty and the page draws the steps it sees progress through instead.
    pub flight_recorder: bool,
    /// Time to first token, inter-token latency and queue wait, summed over its slots
    /// (those the writer fills; empty without statistics).
    pub latency: Vec<HistogramSummary>,
}

/// One slot on the page.
#[derive(Debug, Clone, Serialize)]
pub struct PageSlot {
    /// The same figures as `hydra-probe meta`.
    #[serde(flatten)]
    pub meta: HydraMeta,
    /// The finding that names this slot (slow, stalled, ...), in words; none while it is
    /// well.
    pub reason: Option<String>,
    /// Its last steps, oldest first (empty without a flight recorder).
    pub steps: Vec<TimelineStep>,
}

/// One finished step on a slot's timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineStep {
    /// `prefill`, `decode`, `save`, `restore`.
    pub kind: &'static str,
    /// `advanced`, `no_progress`, `cancelled`, `failed`, `interrupted`.
    pub result: &'static str,
    /// Its duration, seconds.
    pub duration_s: f64,
    /// The cost model's prediction, seconds.
    pub predicted_s: Option<f64>,
    /// Seconds from its start to the capture.
    pub age_s: f64,
    /// Layers done when it ended, of how many.
    pub layers: Option<(u64, u64)>,
    /// The device it last waited on.
    pub wait_device: Option<String>,
    /// Marked on the timeline: it took longer than the stall factor times its prediction,
    /// or it did not advance.
    pub marked: bool,
}

impl TimelineStep {
    fn of(r: &StepRecord, stall_factor: f64) -> Self {
        let overran = r
            .predicted_s
            .is_some_and(|p| p > 0.0 && r.duration_s > stall_factor * p);
        Self {
            kind: r.kind,
            result: r.result,
            duration_s: r.duration_s,
            predicted_s: r.predicted_s,
            age_s: r.age_s,
            layers: r.layers,
            wait_device: r.wait_device.clone(),
            marked: overran || r.result != "advanced",
        }
    }
}

/// Reads the directory once and builds the page's state.
pub fn state(collector: &Collector) -> PageState {
    let c = collector.collect();
    let engines = c
        .engines
        .iter()
        .map(|entry| engine(collector, entry))
        .collect();
    PageState {
        taken_unix_ms: unix_ms(),
        dir: collector.dir().display().to_string(),
        error: c.dir_error.map(|e| e.message),
        engines,
    }
}

fn engine(collector: &Collector, entry: &EngineEntry) -> PageEngine {
    let summary = summary_of(entry);
    let Ok(view) = &entry.view else {
        return PageEngine {
            summary,
            devices: Vec::new(),
            findings: Vec::new(),
            slot_states: Vec::new(),
            flight_recorder: false,
            latency: Vec::new(),
        };
    };
    let found = findings(view, collector.thresholds());
    // The collection already summed the engine's statistics, unless it keeps them per
    // slot: only then are they read again, summed.
    let summed = entry.stats.iter().find(|(slot, _)| slot.is_none());
    let (history, stats) = collector
        .with_reader(&entry.path, |r| {
            let history = HistoryReport::capture(r, None, view.now_ns).ok();
            let stats = match summed {
                Some((_, sum)) => Some(sum.clone()),
                None => StatsSum::capture(r, None).ok(),
            };
            (history, stats)
        })
        .unwrap_or_default();
    let slots = (0..view.slots.len())
        .filter_map(|i| slot(view, i, &found, history.as_ref(), collector))
        .collect();
    PageEngine {
        summary,
        devices: devices(view),
        findings: found,
        slot_states: slots,
        flight_recorder: history.as_ref().is_some_and(|h| h.published),
        latency: stats.map(|s| latency(entry, &s)).unwrap_or_default(),
    }
}

fn slot(
    view: &EngineView,
    i: usize,
    found: &[Finding],
    history: Option<&HistoryReport>,
    collector: &Collector,
) -> Option<PageSlot> {
    let meta = HydraMeta::from_view(view, i)?;
    let reason = found
        .iter()
        .find(|f| f.slot == Some(i))
        .map(|f| f.message.clone());
    let factor = collector.thresholds().stall_factor;
    let steps = history
        .and_then(|h| h.slots.iter().find(|s| s.slot == i))
        .map(|s| {
            let skip = s.steps.len().saturating_sub(TIMELINE_STEPS);
            s.steps[skip..]
                .iter()
                .map(|r| TimelineStep::of(r, factor))
                .collect()
        })
        .unwrap_or_default();
    Some(PageSlot {
        meta,
        reason,
        steps,
    })
}

fn devices(view: &EngineView) -> Vec<String> {
    view.devices
        .as_ref()
        .map(|d| {
            (1..=d.devices.len() as u64)
                .map(|id| d.describe(id))
                .collect()
        })
        .unwrap_or_default()
}

/// The engine's latency histograms, summarised from `sum` (all its slots).
fn latency(entry: &EngineEntry, sum: &StatsSum) -> Vec<HistogramSummary> {
    StatsReport::of(entry.engine_id.clone(), sum)
        .histograms
        .into_iter()
        .filter(|h| LATENCIES.contains(&h.name))
        .collect()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
