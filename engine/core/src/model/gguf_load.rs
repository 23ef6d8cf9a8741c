//! Loading a GGUF file of a supported family into a [`Model`], in named steps:
//!
//! 1. the GGUF metadata: the header ([`crate::gguf`]) and the model's shapes and
//!    constants from it ([`read_config`]: complete, RoPE factors included, and validated
//!    here, once);
//! 2. the support decision ([`super::support::decide`]): the one architecture gate, and
//!    the tokenizer keys unless a `tokenizer.json` replaces the file's vocabulary;
//! 3. the tokenizer ([`read_tokenizer`]);
//! 4. the tensors, on the device, converted where there is no fast kernel
//!    ([`read_tensors`]);
//! 5. the assembled model ([`Model::assemble`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use super::config::{Architecture, LlamaConfig, RopeScaling};
use super::quant::{self, Conversion};
use super::support;
use super::{LoadOptions, Model, Parts};
use crate::error::{EngineError, Result};
use crate::gguf::{self, Metadata};
use crate::tokenizer::{SpecialIds, Tokenizer};

/// The tensor of Llama 3.1's RoPE scaling as llama.cpp's converter stores it: one divisor
/// per rotated pair. Read into the configuration, not kept as a weight.
const ROPE_FREQS: &str = "rope_freqs.weight";

pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<Model> {
    let start = Instant::now();
    let invalid = |message: String| EngineError::InvalidModel {
        path: path.to_path_buf(),
        message,
    };
    // 1-2. What the file is, and whether the engine runs it.
    let (ct, mut reader) = gguf::read_header(path)?;
    let md = Metadata::new(&ct.metadata);
    let (architecture, family) = support::decide(md, path, opts.tokenizer_json.is_some())?;
    let config = read_config(md, &architecture, family, &ct, &mut reader).map_err(invalid)?;
    // 3. The tokenizer.
    let tokenizer = read_tokenizer(&ct, opts.tokenizer_json.as_deref())?;
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(invalid(format!(
            "tokenizer has {} tokens but the embedding matrix only {}",
            tokenizer.vocab_size(),
            config.vocab_size
        )));
    }
    // 4. The tensors.
    let device = opts.device.open()?;
    let (tensors, quantization) = read_tensors(&ct, &mut reader, opts.conversion, &device)
        .map_err(|e| match e {
            TensorError::Invalid(m) => invalid(m),
            TensorError::Engine(e) => e,
        })?;
    // 5. The model.
    let name = md.string("general.name").unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let model = Model::assemble(
        Parts {
            name,
            architecture,
            quantization,
            path: Some(path.to_path_buf()),
            config,
            tensors,
            tokenizer,
            device: opts.device,
            chat_template: md.string("tokenizer.chat_template"),
        },
        start,
    )?;
    let info = model.info();
    tracing::info!(
        path = %path.display(),
        model = %info.name,
        quantization = %info.quantization,
        architecture = %info.architecture,
        tokenizer = %info.tokenizer_family,
        n_params = info.n_params,
        fingerprint = %format_args!("{:016x}", info.fingerprint),
        load_ms = info.load_seconds * 1e3,
        "loaded GGUF model"
    );
    Ok(model)
}

/// The file's own vocabulary, or the `tokenizer.json` given instead (whose BOS, EOS and
/// add-BOS setting still come from the file: `tokenizer.json` does not carry them).
fn read_tokenizer(ct: &Content, tokenizer_json: Option<&Path>) -> Result<Tokenizer> {
    let md = &ct.metadata;
    let Some(tj) = tokenizer_json else {
        return Tokenizer::from_gguf_metadata(md);
    };
    let text = std::fs::read_to_string(tj).map_err(|source| EngineError::Io {
        path: tj.to_path_buf(),
        source,
    })?;
    let from_md = Tokenizer::from_gguf_metadata(md).ok();
    let ids = SpecialIds {
        bos: from_md.as_ref().and_then(Tokenizer::bos_token),
        eos: from_md
            .as_ref()
            .map(|t| t.eos_tokens().to_vec())
            .unwrap_or_default(),
        unk: None,
        add_bos: from_md.as_ref().is_some_and(Tokenizer::add_bos_by_default),
    };
    Tokenizer::from_tokenizer_json(&text, ids)
}

/// Why the tensors could not be read: the file is wrong (its message), or the engine
/// failed (the device ran out of memory, a conversion failed).
enum TensorError {
    Invalid(String),
    Engine(EngineError),
}

impl From<EngineError> for TensorError {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

/// Every tensor but [`ROPE_FREQS`], on `device`, converted as `conversion` says; and the
/// weight type as llama.cpp names it ("Q4_1", "Q5_0->Q8_0").
fn read_tensors(
    ct: &Content,
    reader: &mut BufReader<File>,
    conversion: Conversion,
    device: &Device,
) -> std::result::Result<(HashMap<String, QTensor>, String), TensorError> {
    let mut tensors = HashMap::with_capacity(ct.tensor_infos.len());
    let (mut before, mut after): (Vec<GgmlDType>, Vec<GgmlDType>) = (Vec::new(), Vec::new());
    let mut n_converted = 0usize;
    let conv_start = Instant::now();
    let mut names: Vec<&String> = ct
        .tensor_infos
        .keys()
        .filter(|n| *n != ROPE_FREQS)
        .collect();
    names.sort();
    for name in names {
        let t = ct
            .tensor(reader, name, device)
            .map_err(|e| match EngineError::from(e) {
                EngineError::Candle(e) => TensorError::Invalid(format!("tensor {name}: {e}")),
                out_of_memory => TensorError::Engine(out_of_memory),
            })?;
        let is_matrix = t.shape().rank() == 2;
        if is_matrix {
            before.push(t.dtype());
        }
        let t = match quant::conversion_for(&t, conversion, device) {
            Some(target) => {
                n_converted += 1;
                quant::convert(&t, target)?
            }
            None => t,
        };
        if is_matrix {
            after.push(t.dtype());
        }
        tensors.insert(name.clone(), t);
    }
    let quantization = quant::describe(&before, &after);
    if n_converted > 0 {
        tracing::info!(
            tensors = n_converted,
            quantization = %quantization,
            convert_ms = conv_start.elapsed().as_secs_f64() * 1e3,
            "converted weights without a fast kernel (disable with conversion=none)"
        );
    }
    Ok((tensors, quantization))
}

/// The model's shapes and constants: `{arch}.*` metadata, the embedding's row count, and
/// the RoPE scaling (metadata, or the [`ROPE_FREQS`] tensor); validated.
fn read_config(
    md: Metadata<'_>,
    arch: &str,
    kind: Architecture,
    ct: &Content,
    reader: &mut BufReader<File>,
) -> std::result::Result<LlamaConfig, String> {
    let key = |k: &str| format!("{arch}.{k}");
    let req_u32 = |k: &str| md.required_u32(&key(k));
    let opt_u32 = |k: &str| md.u32_of(&key(k));
    let opt_f32 = |k: &str| md.f32_of(&key(k));
    let n_embd = req_u32("embedding_length")?;
    let n_head = req_u32("attention.head_count")?;
    let n_kv_head = opt_u32("attention.head_count_kv")?.unwrap_or(n_head);
    let head_dim = match opt_u32("attention.key_length")? {
        Some(k) => k,
        None if n_head > 0 && n_embd % n_head == 0 => n_embd / n_head,
        None => {
            return Err(format!(
                "embedding size {n_embd} is not a multiple of the head count {n_head} \
                 and {arch}.attention.key_length is missing"
            ))
        }
    };
    if let Some(v) = opt_u32("attention.value_length")? {
        if v != head_dim {
            return Err(format!(
                "{arch}.attention.value_length = {v} differs from the key length {head_dim} (not supported)"
            ));
        }
    }
    let emb = ct
        .tensor_infos
        .get("token_embd.weight")
        .ok_or("missing tensor token_embd.weight")?;
    let vocab_size = emb.shape.dims().first().copied().unwrap_or(0);
    let rope_scaling = match (read_rope_factors(ct, reader)?, read_rope_scaling(md, arch)?) {
        (None, scaling) => scaling,
        (Some(factors), RopeScaling::None) => RopeScaling::Factors(factors),
        (Some(_), _) => {
            return Err(format!(
                "both {ROPE_FREQS} and rope.scaling metadata scale RoPE"
            ))
        }
    };
    let cfg = LlamaConfig {
        n_layer: req_u32("block_count")?,
        n_embd,
        n_head,
        n_kv_head,
        n_ff: req_u32("feed_forward_length")?,
        vocab_size,
        n_ctx_train: opt_u32("context_length")?.unwrap_or(2048),
        rope_theta: opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
        rms_eps: opt_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5) as f64,
        head_dim,
        arch: kind,
        rope_scaling,
    };
    if let Some(rope_dim) = opt_u32("rope.dimension_count")? {
        if rope_dim != head_dim {
            return Err(format!(
                "{arch}.rope.dimension_count = {rope_dim}: partial rotary embeddings (head size {head_dim}) are not supported"
            ));
        }
    }
    if let Some(n) = opt_u32("expert_count")? {
        if n > 1 {
            return Err(format!(
                "{arch}.expert_count = {n}: mixture-of-experts models are not supported"
            ));
        }
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// The divisors of the [`ROPE_FREQS`] tensor, when the file has one.
fn read_rope_factors(
    ct: &Content,
    reader: &mut BufReader<File>,
) -> std::result::Result<Option<Vec<f32>>, String> {
    if !ct.tensor_infos.contains_key(ROPE_FREQS) {
        return Ok(None);
    }
    let factors = ct
        .tensor(reader, ROPE_FREQS, &Device::Cpu)
        .and_then(|t| t.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1())
        .map_err(|e| format!("tensor {ROPE_FREQS}: {e}"))?;
    Ok(Some(factors))
}

/// `{arch}.rope.scaling.*`: none, linear or llama3; anything else is refused
/// with the key and value.
fn read_rope_scaling(md: Metadata<'_>, arch: &str) -> std::result::Result<RopeScaling, String> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let factor = || -> std::result::Result<f32, String> {
        match md.f32_of(&key("factor"))? {
            Some(f) if f.is_finite() && f > 0.0 => Ok(f),
            Some(f) => Err(format!("{} = {f} is not a positive number", key("factor"))),
            None => Err(format!("missing metadata {}", key("factor"))),
        }
    };
    match md.string_of(&key("type"))?.as_deref() {
        None | Some("none") => Ok(RopeScaling::None),
        Some("linear") => Ok(RopeScaling::Linear { factor: factor()? }),
        Some("llama3") => {
            let original_context = md.required_u32(&key("original_context_length"))?;
            let low = md.f32_of(&key("low_freq_factor"))?.unwrap_or(1.0);
            let high = md.f32_of(&key("high_freq_factor"))?.unwrap_or(4.0);
            if !(low > 0.0 && high > low) || original_context == 0 {
                return Err(format!(
                    "{arch}.rope.scaling: llama3 needs 0 < low_freq_factor < high_freq_factor and a context"
                ));
            }
            Ok(RopeScaling::Llama3 {
                factor: factor()?,
                low_freq_factor: low,
                high_freq_factor: high,
                original_context,
            })
        }
        Some(other) => Err(format!(
            "unsupported {} = {other:?} (supported: none, linear, llama3)",
            key("type")
        )),
    }
}
