//! Models: loading (GGUF or the embedded default) and the shared weights.

pub mod builtin;
pub mod config;
pub(crate) mod gguf_load;
pub(crate) mod kv_cache;
pub mod layer_hook;
pub(crate) mod llama;
pub mod quant;
pub(crate) mod qwen2;
pub(crate) mod qwen3;
mod support;
pub(crate) mod transformer;
pub(crate) mod weight;

pub use layer_hook::LayerHook;
pub use support::{describe_gguf, Support};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::quantized::{QStorage, QTensor};

use crate::device::DeviceSpec;
use crate::error::Result;
use crate::hash::Hasher64;
use crate::tokenizer::Tokenizer;
use builtin::{BuiltinSpec, BUILTIN_DTYPE, BUILTIN_NAME};
use config::LlamaConfig;
use quant::Conversion;
use transformer::DecoderWeights;

/// How to load a model file.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Where the weights and KV caches live.
    pub device: DeviceSpec,
    /// Load-time conversion of quantized weights (default: types without a
    /// fast kernel become Q8_0).
    pub conversion: Conversion,
    /// A Hugging Face `tokenizer.json` to use instead of the GGUF's own vocabulary.
    pub tokenizer_json: Option<PathBuf>,
}

/// What a loaded model is, for logs, APIs and state fingerprints.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// `general.name`, else the file stem, or the embedded model's name.
    pub name: String,
    /// `general.architecture` ("llama").
    pub architecture: String,
    /// Weight type as llama.cpp names it, with any conversion: "Q4_1", "Q5_0->Q8_0".
    pub quantization: String,
    /// The file loaded; `None` for the embedded model.
    pub path: Option<PathBuf>,
    /// Tokenizer family ("gpt2", "llama", "hydra-bytes").
    pub tokenizer_family: String,
    /// Pre-tokenizer of a byte-level BPE vocabulary (`tokenizer.ggml.pre`).
    pub tokenizer_pre: Option<String>,
    /// Context length the model was trained with.
    pub n_ctx_train: usize,
    /// Vocabulary size (rows of the embedding matrix); valid ids are below it.
    pub vocab_size: usize,
    /// Beginning-of-text token.
    pub bos_token: Option<u32>,
    /// Tokens that end generation.
    pub eos_tokens: Vec<u32>,
    /// Hash of the architecture, shapes and weight bytes as loaded (after
    /// conversion); KV states carry it.
    pub fingerprint: u64,
    /// Number of weights.
    pub n_params: u64,
    /// Device the weights are on.
    pub device: DeviceSpec,
    /// `tokenizer.chat_template`, when the file has one.
    pub chat_template: Option<String>,
    /// Seconds spent loading (reading, converting, building).
    pub load_seconds: f64,
}

/// A loaded model: weights (shared by every slot), configuration and tokenizer.
#[derive(Debug)]
pub struct Model {
    info: ModelInfo,
    config: LlamaConfig,
    tokenizer: Tokenizer,
    pub(crate) weights: DecoderWeights,
}

/// The parts a loader hands to [`Model::assemble`].
pub(crate) struct Parts {
    pub(crate) name: String,
    pub(crate) architecture: String,
    pub(crate) quantization: String,
    pub(crate) path: Option<PathBuf>,
    pub(crate) config: LlamaConfig,
    pub(crate) tensors: HashMap<String, QTensor>,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) device: DeviceSpec,
    pub(crate) chat_template: Option<String>,
}

impl Model {
    /// Load a GGUF file of a supported family (llama, mistral, qwen2, qwen3;
    /// grouped-query attention, tied embeddings and RoPE scaling included).
    pub fn load_gguf(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        gguf_load::load(path.as_ref(), opts)
    }

    /// The embedded default model on the CPU (see [`builtin`]).
    pub fn builtin() -> Result<Self> {
        Self::builtin_on(DeviceSpec::Cpu)
    }

    /// The embedded default model on a device.
    pub fn builtin_on(device: DeviceSpec) -> Result<Self> {
        let start = Instant::now();
        let spec = BuiltinSpec::default();
        let tensors = spec.tensors(BUILTIN_DTYPE)?;
        let dev = device.open()?;
        let tensors = tensors
            .into_iter()
            .map(|(n, t)| {
                // The same blocks on every device (not re-quantized there), so that the
                // fingerprint, and with it a saved KV state, is the same on CPU and GPU.
                let t = if dev.is_cpu() {
                    t
                } else {
                    let storage = QStorage::from_data(t.data()?, &dev, t.dtype())?;
                    QTensor::new(storage, t.shape().clone())?
                };
                Ok((n, t))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        let model = Self::assemble(
            Parts {
                name: BUILTIN_NAME.into(),
                architecture: "llama".into(),
                quantization: quant::dtype_name(BUILTIN_DTYPE).into(),
                path: None,
                config: spec.config,
                tensors,
                tokenizer: Tokenizer::bytes(),
                device,
                chat_template: None,
            },
            start,
        )?;
        tracing::info!(
            model = %model.info.name,
            fingerprint = %format_args!("{:016x}", model.info.fingerprint),
            load_ms = model.info.load_seconds * 1e3,
            "built embedded model"
        );
        Ok(model)
    }

    /// The model from its parts, whose configuration the loader has validated.
    pub(crate) fn assemble(p: Parts, start: Instant) -> Result<Self> {
        let mut h = Hasher64::new();
        h.update_str(&p.architecture);
        h.update_str(&format!("{:?}", p.config));
        let mut names: Vec<&String> = p.tensors.keys().collect();
        names.sort();
        let mut n_params = 0u64;
        for n in names {
            let t = &p.tensors[n];
            h.update_str(n);
            h.update_str(quant::dtype_name(t.dtype()));
            for d in t.shape().dims() {
                h.update_u64(*d as u64);
            }
            h.update(&t.data()?);
            n_params += t.shape().elem_count() as u64;
        }
        let fingerprint = h.finish();
        let source = p.path.clone().unwrap_or_else(|| PathBuf::from("<builtin>"));
        let dev = p.device.open()?;
        let weights = DecoderWeights::from_tensors(&p.config, p.tensors, &dev, &source)?;
        let info = ModelInfo {
            name: p.name,
            architecture: p.architecture,
            quantization: p.quantization,
            path: p.path,
            tokenizer_family: p.tokenizer.family().to_string(),
            tokenizer_pre: p.tokenizer.pre_tokenizer().map(str::to_string),
            n_ctx_train: p.config.n_ctx_train,
            vocab_size: p.config.vocab_size,
            bos_token: p.tokenizer.bos_token(),
            eos_tokens: p.tokenizer.eos_tokens().to_vec(),
            fingerprint,
            n_params,
            device: p.device,
            chat_template: p.chat_template,
            load_seconds: start.elapsed().as_secs_f64(),
        };
        Ok(Self {
            info,
            config: p.config,
            tokenizer: p.tokenizer,
            weights,
        })
    }

    /// What this model is.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Shapes and constants.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Whether `token` ends generation.
    pub fn is_eos(&self, token: u32) -> bool {
        self.info.eos_tokens.contains(&token)
    }

    /// Check that every id is below the vocabulary size.
    pub fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        match tokens
            .iter()
            .find(|&&t| t as usize >= self.config.vocab_size)
        {
            Some(&token) => Err(crate::EngineError::TokenOutOfRange {
                token,
                vocab_size: self.config.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Wrap a chat message in ChatML (`<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n`),
    /// the template SmolLM2 and many small instruct models use.
    pub fn chatml_prompt(user_message: &str) -> String {
        format!("<|im_start|>user\n{user_message}<|im_end|>\n<|im_start|>assistant\n")
    }
}

/// The largest absolute difference between two tensors of one shape (for tests).
#[cfg(test)]
pub(crate) fn max_abs_diff(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>())
        .expect("tensors of one shape")
}
