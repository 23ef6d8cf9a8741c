//! The hydra-progress segment format (v1): a fixed-layout, named shared-memory file per
//! engine in which the engine's single compute thread publishes one progress record per
//! slot, and from which any number of processes read with zero IPC to the engine.
//!
//! - [`header`] and [`slot`] hold the byte layout (offsets as named constants, each derived
//!   from the previous one) and the wire enums; `FORMAT.md` beside this crate is the
//!   language-neutral specification and `include/hydra_progress.h` the C view.
//! - [`SegmentWriter`] creates a segment safely and publishes [`SlotState`] values through
//!   a per-slot seqlock; [`PendingCounter`] lets other threads count queued tasks, and
//!   [`SubstepPublisher`] publish the layer position inside a step ([`Substep`], v1.1).
//! - [`costmodel`] is the writer's online cost model (how long a step should take, learnt
//!   from the writer's own steps) and [`forecast`] its use by writers whose slots step on
//!   their own; their [`Prediction`]s are published with the record (v1.2).
//! - [`region`] places what follows the slot table (v1.3): per slot, [`stats`] (histograms
//!   and counters) and the [`flight`] recorder (a ring of the last finished steps), which
//!   the writer derives from the records it publishes, and the engine's [`devices`] (the
//!   device table and layer map; with the slot's [`StepDevices`], the device a step waits
//!   on).
//! - [`SegmentReader`] maps a segment read-only, validates it against the file's real size,
//!   probes the writer's liveness with `flock`, and takes consistent snapshots with bounded
//!   retries (a writer that died mid-update is reported as [`Error::Torn`], never spun on).
//!
//! This crate has no heavy dependencies (no candle, no HTTP): readers link only this.
//!
//! ```no_run
//! use hydra_layout::{SegmentConfig, SegmentReader, SegmentWriter, SlotState, Phase, clock};
//! # fn main() -> Result<(), hydra_layout::Error> {
//! let dir = std::path::PathBuf::from("/tmp/hydra-example");
//! let mut writer = SegmentWriter::create(&SegmentConfig {
//!     dir: dir.clone(),
//!     engine_id: "engine-0".into(),
//!     slot_count: 4,
//!     description: Default::default(),
//! })?;
//! let now = clock::monotonic_ns();
//! writer.publish(0, &SlotState { task_id: 1, phase: Phase::Decode, work_done: 10,
//!     work_total: 100, last_progress_ns: now, ..Default::default() })?;
//!
//! let reader = SegmentReader::open_engine(&dir, "engine-0")?;
//! let slot = reader.slot(0)?;
//! assert_eq!(slot.state.work_done, 10);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod clock;
pub mod costmodel;
pub mod device_waits;
pub mod devices;
pub mod directory;
mod error;
pub mod flight;
pub mod forecast;
mod fsutil;
pub mod header;
pub mod naming;
pub mod peer_reads;
mod primitive;
mod reader;
pub mod region;
mod seqlock;
pub mod slot;
pub mod stats;
mod words;
mod writer;

pub use costmodel::{
    CostModel, Estimate, Learnt, LearntFit, ModelConfig, Observed, StepKind, StepShape,
};
pub use device_waits::{DeviceWaits, WaitHistory};
pub use devices::{Device, DeviceTable, Devices, LayerRange, PublishedDevices};
pub use error::{Error, ErrorKind, Result};
pub use flight::{FlightEntry, History};
pub use forecast::{Forecaster, PhaseEnd};
pub use header::{EngineDescription, Lifecycle, MAX_SLOTS};
pub use reader::{
    EngineCounters, HeaderSnapshot, Identity, Liveness, OpenOptions, OwnerPolicy, SegmentReader,
    SlotSnapshot, Snapshot,
};
pub use region::Regions;
pub use seqlock::ReadPolicy;
pub use slot::{
    DeviceKind, ErrorCode, FinishCause, FinishReason, Phase, Prediction, SlotState, StepDevices,
    StepResult, Substep, WorkUnit,
};
pub use stats::{Histogram, HistogramKind, SlotStats, StatsDefect};
pub use writer::{
    segment_len, PendingCounter, SegmentConfig, SegmentWriter, SubstepPublisher, WriterCounters,
    SEGMENT_MODE,
};
