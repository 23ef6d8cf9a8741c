//! What the engine serves and how.

use crate::model::LoadOptions;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    /// Alias clients know the model by (Hydra's `model_alias`); defaults to the model name.
    pub model_alias: Option<String>,
    /// Number of slots.
    pub slots: usize,
    /// Context size per slot, tokens (0: the model's training context).
    pub ctx: usize,
    /// Prefill chunk size, tokens: progress is published after every chunk.
    pub ubatch: usize,
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
}

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
            ubatch: 64,
            engine_id: engine_id.to_owned(),
            progress_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            publish: true,
            max_json_body: 4 << 20,
        }
    }
}
