//! `hydra-exporter`: a sidecar that serves every hydra-progress segment of a directory
//! over HTTP, as Prometheus / OpenMetrics metrics and as Hydra meta JSON.
//!
//! It only *reads* segments (through [`hydra_probe`]); it never posts anything to an
//! engine, so it answers while an engine's task queue is busy or wedged.
//!
//! - [`collect::Collector`] scans the directory on every request, keeps open readers across
//!   scrapes (re-validated by inode), captures each engine with
//!   [`hydra_probe::EngineView::capture`], and counts what it could not read
//!   ([`stats::ExporterStats`]).
//! - [`metrics::render`] encodes one collection in the Prometheus text format or
//!   OpenMetrics ([`metrics::Format`]), written by hand (module `exposition`) apart from
//!   the exporter's own counters (prometheus-client); [`metrics::METRIC_NAMES`] lists
//!   every metric.
//! - [`api`] builds the JSON answers (`/engines`, Hydra meta) and the error type;
//!   [`page`] the live page (`/`, embedded) and the state it polls (`/page/state`);
//!   [`http`] routes them with axum.
//!
//! ```no_run
//! use hydra_exporter::{collect::Collector, metrics::Format};
//! let collector = Collector::new("/dev/shm/hydra-progress", hydra_probe::Thresholds::default());
//! let body = collector.scrape(Format::Text);
//! assert!(body.contains("hydra_exporter_scrapes_total"));
//! ```

#![deny(missing_docs)]

pub mod api;
pub mod collect;
pub mod engine_stats;
mod exposition;
pub mod http;
pub mod metrics;
pub mod page;
pub mod stats;

pub use collect::Collector;

/// Where `hydra-exporter` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
pub use http::{router, serve, AppState};
pub use metrics::{is_sample_name, render, Format, METRIC_NAMES};
