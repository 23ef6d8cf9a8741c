//! What the engine serves and how.

use hydra_engine_core::model::{LoadOptions, ModelInfo};
use hydra_engine_core::threads::PoolUse;
use std::net::SocketAddr;
use std::path::PathBuf;

/// How the compute thread orders its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Schedule {
    /// Continuous batching (default): every slot with decode work advances one token in
    /// one forward per iteration, prefill chunks interleave with those steps, and the other
    /// tasks run between iterations as soon as their slot is free.
    #[default]
    Batched,
    /// One task at a time from the FIFO queue, each run to completion (the shape of
    /// llama.cpp's server queue, whose meta queries wait behind a long decode).
    Serial,
}

hydra_engine_core::error::named_values!(Schedule, "schedule", {
    "batched" => Batched,
    "serial" => Serial,
});

/// Default prefill chunk size, tokens (progress moves per layer inside a chunk, so a large
/// chunk keeps it fine-grained while the weight matmuls run on many rows at once).
pub const DEFAULT_UBATCH: usize = 512;

/// Where the weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// The embedded, deterministically seeded model (no file, no download).
    Builtin,
    /// A GGUF file of the llama family.
    Gguf(PathBuf),
}

/// Everything `hydra-engine serve` is configured with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model to load.
    pub model: ModelSource,
    /// Load options (device, conversion, tokenizer override).
    pub load: LoadOptions,
    /// Alias clients know the model by (Hydra's `model_alias`, the id in `/v1/models`);
    /// defaults to the model file's name ([`ServerConfig::model_id`]).
    pub model_alias: Option<String>,
    /// Number of slots.
    pub slots: usize,
    /// Context size per slot, tokens (0: the model's training context).
    pub ctx: usize,
    /// Prefill chunk size, tokens: progress is published after every chunk.
    pub ubatch: usize,
    /// How the compute thread orders its work.
    pub schedule: Schedule,
    /// Whether decode steps' kernels use the thread pool, or adapt to CPU contention.
    pub pool_use: PoolUse,
    /// Engine id: names the progress segment.
    pub engine_id: String,
    /// Directory of progress segments.
    pub progress_dir: PathBuf,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Publish progress (off only for the overhead benchmark).
    pub publish: bool,
    /// Largest JSON request body, bytes.
    pub max_json_body: usize,
    /// A chat template file used instead of the model's `tokenizer.chat_template`.
    pub chat_template: Option<PathBuf>,
    /// Most generation requests that may wait for a busy slot; past it a request gets a
    /// 503 with `Retry-After`.
    pub max_waiting: usize,
}

/// Default bound of the wait queue for a slot.
pub const DEFAULT_MAX_WAITING: usize = 16;

impl ServerConfig {
    /// A configuration for the embedded model with the given slots, directory and id,
    /// listening on an ephemeral loopback port.
    pub fn builtin(engine_id: &str, progress_dir: PathBuf, slots: usize) -> Self {
        Self {
            model: ModelSource::Builtin,
            load: LoadOptions::default(),
            model_alias: None,
            slots,
            ctx: 0,
            ubatch: DEFAULT_UBATCH,
            schedule: Schedule::default(),
            pool_use: PoolUse::default(),
            engine_id: engine_id.to_owned(),
            progress_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            publish: true,
            max_json_body: 4 << 20,
            chat_template: None,
            max_waiting: DEFAULT_MAX_WAITING,
        }
    }
}

impl ServerConfig {
    /// The model's id, the one name clients and readers know it by (`/v1/models` and the
    /// segment's `model_alias`): `--alias`, else the model file's name without `.gguf`,
    /// else the model's own name (the embedded model).
    pub fn model_id(&self, info: &ModelInfo) -> String {
        self.model_alias
            .clone()
            .or_else(|| {
                let path = info.path.as_ref()?;
                let name = path.file_name()?.to_string_lossy();
                Some(name.strip_suffix(".gguf").unwrap_or(&name).to_owned())
            })
            .unwrap_or_else(|| info.name.clone())
    }
}
