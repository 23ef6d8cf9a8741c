//! Publishing's setup and read-back: the segment is created with the engine's description
//! and capabilities, and read back by the front end ([`Shared`]) through the probe
//! library, exactly as an outside process reads it.

use crate::config::ServerConfig;
use crate::task::SlotId;
use crate::task_error::{ClientError, TaskError};
use anyhow::Context as _;
use hydra_engine_core::device::DeviceSpec;
use hydra_engine_core::model::ModelInfo;
use hydra_engine_core::tokenizer::Tokenizer;
use hydra_layout::{
    header::capabilities, Device, DeviceKind, Devices, EngineDescription, PendingCounter,
    SegmentConfig, SegmentReader, SegmentWriter,
};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use std::path::PathBuf;

/// What this engine can do, as the segment's header announces it.
const CAPABILITIES: u64 = capabilities::COMPLETION
    | capabilities::STATE_SAVE_RESTORE
    | capabilities::CHUNKED_PREFILL
    | capabilities::LAYER_PROGRESS
    | capabilities::STEP_PREDICTION
    // v1.3: the front end stamps each request's arrival, and the compute thread knows why
    // each task ends (the statistics' arrival-based histograms and tasks by cause).
    | capabilities::ARRIVAL_TIMES
    | capabilities::FINISH_CAUSES
    // v1.3: its one device and layer map.
    | capabilities::DEVICES;

/// The engine's segment, open for writing and reading back (all `None` with publishing
/// off).
pub struct Segment {
    /// The writer, for the compute thread's [`super::Progress`].
    pub writer: Option<SegmentWriter>,
    /// A read-only view of the same file, for the front end.
    pub reader: Option<SegmentReader>,
    /// The per-slot pending counter.
    pub pending: Option<PendingCounter>,
    /// The file.
    pub path: Option<PathBuf>,
}

impl Segment {
    /// Creates the segment of an engine serving `info` (`n_layer` transformer layers) as
    /// `config` says (or nothing, with publishing off), publishes its one device, and opens
    /// it for reading back.
    pub fn open(config: &ServerConfig, info: &ModelInfo, n_layer: usize) -> anyhow::Result<Self> {
        if !config.publish {
            tracing::warn!("progress publishing is OFF (--no-publish): for benchmarks only");
            return Ok(Self {
                writer: None,
                reader: None,
                pending: None,
                path: None,
            });
        }
        let mut writer = SegmentWriter::create(&SegmentConfig {
            dir: config.progress_dir.clone(),
            engine_id: config.engine_id.clone(),
            slot_count: config.slots,
            description: description(config, info),
        })
        .context("cannot create the progress segment")?;
        writer
            .publish_devices(&devices(info, n_layer))
            .context("cannot publish the engine's device")?;
        let path = writer.path().to_path_buf();
        let reader = SegmentReader::open(&path).context("cannot read back the progress segment")?;
        let pending = writer.pending_counter();
        Ok(Self {
            writer: Some(writer),
            reader: Some(reader),
            pending: Some(pending),
            path: Some(path),
        })
    }
}

/// The engine's one device, running every layer and the output head (FORMAT §19.4), so
/// that readers name it as they name a llama.cpp server's devices.
fn devices(info: &ModelInfo, n_layer: usize) -> Devices {
    let kind = match info.device {
        DeviceSpec::Cpu => DeviceKind::Cpu,
        DeviceSpec::Cuda(_) => DeviceKind::Gpu,
    };
    let device = Device {
        kind,
        name: info.device.to_string(),
        endpoint: String::new(),
    };
    Devices::single(device, n_layer as u64)
}

/// `device_wait` where the engine's "no wait" is true: the compute thread never waits on
/// the CPU it computes on. On CUDA it synchronises the stream without publishing that
/// wait (yet), so there a wait stays unknown rather than a false "none".
fn device_wait(device: DeviceSpec) -> u64 {
    match device {
        DeviceSpec::Cpu => capabilities::DEVICE_WAIT,
        DeviceSpec::Cuda(_) => 0,
    }
}

/// The engine as the segment's header describes it.
fn description(config: &ServerConfig, info: &ModelInfo) -> EngineDescription {
    EngineDescription {
        model_name: info.name.clone(),
        model_quant: info.quantization.clone(),
        model_path: info
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "builtin".into()),
        tokenizer: info.tokenizer_family.clone(),
        model_alias: config.model_id(info),
        device: info.device.to_string(),
        capabilities: CAPABILITIES | device_wait(info.device),
    }
}

/// What the front end shares with the compute thread: read-only facts and the segment's
/// reader side. Never the model's slots.
pub struct Shared {
    /// The segment file (None with publishing off).
    pub segment_path: Option<PathBuf>,
    /// Pending-task counter in the segment.
    pub pending: Option<PendingCounter>,
    /// A read-only view of our own segment, for the segment-backed endpoints.
    pub reader: Option<SegmentReader>,
    /// The model's description.
    pub model_info: ModelInfo,
    /// Tokenizer (a copy; the front end tokenizes prompts).
    pub tokenizer: Tokenizer,
    /// Slots.
    pub n_slots: usize,
    /// Context per slot, tokens.
    pub n_ctx: usize,
    /// Largest state a restore may carry, bytes.
    pub max_state_bytes: u64,
    /// Engine id.
    pub engine_id: String,
    /// Classification thresholds for meta answers.
    pub thresholds: Thresholds,
    /// The task each slot runs, and which the front end asked to stop.
    pub cancel: crate::cancel::CancelBoard,
}

impl Shared {
    /// The Hydra meta of `slot`, read from the segment through the probe library.
    pub fn meta_from_segment(&self, slot: SlotId) -> Result<HydraMeta, TaskError> {
        let slot = slot.get();
        HydraMeta::from_view(&self.view()?, slot).ok_or(TaskError::Client(
            ClientError::UnknownSlot {
                slot,
                n_slots: self.n_slots,
            },
        ))
    }

    /// Every slot, read from the segment through the probe library. A failure is the
    /// caller's to log (it is internal).
    pub fn view(&self) -> Result<EngineView, TaskError> {
        let reader = self
            .reader
            .as_ref()
            .ok_or(ClientError::PublishingDisabled)?;
        EngineView::capture(
            reader,
            hydra_layout::clock::monotonic_ns(),
            &self.thresholds,
        )
        .map_err(|e| TaskError::Internal(format!("reading the progress segment: {e}")))
    }

    /// `slot`, when it is one of the engine's slots.
    pub fn slot(&self, slot: usize) -> hydra_engine_core::Result<SlotId> {
        SlotId::new(slot, self.n_slots)
    }
}
