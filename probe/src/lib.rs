//! Reader library for hydra-progress segments: discover the engines publishing on this
//! host, snapshot one, and tell a stuck slot from a slow one, and a dead engine from a
//! live one, with zero IPC to the engine.
//!
//! - [`discover`] / [`scan`] list the segments in a directory (default
//!   [`hydra_layout::naming::DEFAULT_DIR`], overridden by `HYDRA_PROGRESS_DIR`; see
//!   [`hydra_layout::naming::resolve_dir`]); [`resolve`] and [`open`] turn an engine id or a
//!   path into a [`hydra_layout::SegmentReader`].
//! - [`EngineView::capture`] takes a snapshot: identity, health, heartbeat age, counters, and
//!   a [`SlotView`] per slot with progress, rate, ETA, ages and its [`SlotClass`].
//! - [`classify`] holds the one classification (pure functions of a record, the engine's
//!   liveness, `now` and [`Thresholds`]) that the CLI, the exporter and the C ABI share.
//! - [`HydraMeta`] is the JSON Hydra Core's `SlotMeta` parses, plus the new fields.
//! - The C ABI over all of this is the separate crate `hydra-probe-capi`
//!   (`libhydra_probe_ffi`, `include/hydra_probe.h`).
//! - [`findings`] turns a view into Nagios-style findings; [`gc()`] removes what dead
//!   engines left behind, following the directory protocol of [`hydra_layout::directory`].
//! - With the `clap` feature: `ThresholdArgs`, the classification flags as clap
//!   arguments that the `hydra-probe` CLI (crate `hydra-probe-cli`) and the exporter share.
//!   Without it this library links no command-line crate.
//!
//! ```no_run
//! use hydra_probe::{EngineView, HydraMeta, Thresholds};
//! use hydra_layout::{clock, naming};
//! # fn main() -> Result<(), hydra_probe::ProbeError> {
//! let dir = naming::resolve_dir(None);
//! for found in hydra_probe::discover(&dir)
//!     .map_err(|e| hydra_layout::Error::io("read directory", &dir, e))?
//! {
//!     let reader = hydra_layout::SegmentReader::open(&found.path)?;
//!     let view = EngineView::capture(&reader, clock::monotonic_ns(), &Thresholds::default())?;
//!     println!("{}: {}", view.engine_id, view.health.as_str());
//!     for slot in &view.slots {
//!         println!("  slot {}: {} {:?}", slot.slot, slot.class.as_str(), slot.derived.eta_s);
//!     }
//!     let meta = HydraMeta::from_view(&view, 0).expect("every segment has slot 0");
//!     println!("{}", meta.to_json());
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

#[cfg(feature = "clap")]
mod args;
pub mod classify;
mod discover;
mod error;
mod findings;
mod gc;
mod history;
pub mod human;
mod meta;
mod ser;
mod stats;
#[cfg(test)]
mod test_support;
mod thresholds;
mod view;

#[cfg(feature = "clap")]
pub use args::ThresholdArgs;
pub use classify::{EngineHealth, EtaSource, Severity, SlotClass};
pub use discover::{discover, open, resolve, scan, Discovered, Scan, Stray};
pub use error::ProbeError;
pub use findings::{findings, Finding};
pub use gc::{gc, temporary_engine_id, GcAction, GcEntry, GcOptions};
pub use history::{HistoryReport, SlotHistory, StepRecord};
pub use meta::{HydraMeta, MetaFigures};
pub use stats::{HistogramSummary, LeftOut, Named, NamedFigure, StatsReport, StatsSum};
pub use thresholds::{parse_duration, Thresholds};
pub use view::{DeviceFacts, DeviceRef, DeviceWait, EngineView, PeerUnread, SlotView};
