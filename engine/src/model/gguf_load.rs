//! Reading a GGUF file of a supported family into [`Model`] parts.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

use super::config::{Architecture, LlamaConfig, RopeScaling};
use super::quant;
use super::support::Support;
use super::{LoadOptions, Model, Parts};
use crate::error::{EngineError, Result};
use crate::tokenizer::{SpecialIds, Tokenizer};

/// Open a GGUF file and read its header (metadata and tensor index); the reader is
/// left for the tensors.
pub(crate) fn read_header(path: &Path) -> Result<(Content, BufReader<File>)> {
    let mut reader = BufReader::new(File::open(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?);
    let ct = Content::read(&mut reader).map_err(|e| EngineError::InvalidModel {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok((ct, reader))
}

pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<Model> {
    let start = Instant::now();
    let invalid = |message: String| EngineError::InvalidModel {
        path: path.to_path_buf(),
        message,
    };
    let (ct, mut reader) = read_header(path)?;
    let md = &ct.metadata;
    let s = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
    let arch = s("general.architecture").unwrap_or_default();
    if opts.tokenizer_json.is_none() {
        Support::check(md, path)?;
    }
    let Some(kind) = Architecture::from_gguf(&arch) else {
        return Err(EngineError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            architecture: arch,
        });
    };
    let mut config = read_config(md, &arch, kind, &ct).map_err(invalid)?;

    let tokenizer = match &opts.tokenizer_json {
        None => Tokenizer::from_gguf_metadata(md)?,
        Some(tj) => {
            let text = std::fs::read_to_string(tj).map_err(|source| EngineError::Io {
                path: tj.clone(),
                source,
            })?;
            // bos/eos/add_bos are not in tokenizer.json: take them from the GGUF.
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
            Tokenizer::from_tokenizer_json(&text, ids)?
        }
    };
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(invalid(format!(
            "tokenizer has {} tokens but the embedding matrix only {}",
            tokenizer.vocab_size(),
            config.vocab_size
        )));
    }

    let device = opts.device.open()?;
    let mut tensors = HashMap::with_capacity(ct.tensor_infos.len());
    let (mut before, mut after): (Vec<GgmlDType>, Vec<GgmlDType>) = (Vec::new(), Vec::new());
    let mut n_converted = 0usize;
    let conv_start = Instant::now();
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let t = ct
            .tensor(&mut reader, name, &device)
            .map_err(|e| match EngineError::from(e) {
                EngineError::Candle(e) => invalid(format!("tensor {name}: {e}")),
                out_of_memory => out_of_memory,
            })?;
        let is_matrix = t.shape().rank() == 2;
        if is_matrix {
            before.push(t.dtype());
        }
        let t = match quant::conversion_for(&t, opts.conversion, &device) {
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
    // Llama 3.1's RoPE scaling as llama.cpp's converter stores it: one divisor per pair.
    if let Some(t) = tensors.remove("rope_freqs.weight") {
        if config.rope_scaling != RopeScaling::None {
            return Err(invalid(
                "both rope_freqs.weight and rope.scaling metadata scale RoPE".into(),
            ));
        }
        let factors: Vec<f32> = t
            .dequantize(&candle_core::Device::Cpu)?
            .flatten_all()?
            .to_vec1()?;
        config.rope_scaling = RopeScaling::Factors(factors);
        config.validate()?;
    }
    if n_converted > 0 {
        tracing::info!(
            tensors = n_converted,
            quantization = %quantization,
            convert_ms = conv_start.elapsed().as_secs_f64() * 1e3,
            "converted weights without a fast kernel (disable with conversion=none)"
        );
    }
    let name = s("general.name").unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let model = Model::assemble(
        Parts {
            name,
            architecture: arch,
            quantization,
            path: Some(path.to_path_buf()),
            config,
            tensors,
            tokenizer,
            device: opts.device,
            chat_template: s("tokenizer.chat_template"),
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

fn read_config(
    md: &HashMap<String, Value>,
    arch: &str,
    kind: Architecture,
    ct: &Content,
) -> std::result::Result<LlamaConfig, String> {
    let get = |k: &str| md.get(&format!("{arch}.{k}"));
    let req_u32 = |k: &str| -> std::result::Result<usize, String> {
        get(k)
            .ok_or_else(|| format!("missing metadata {arch}.{k}"))?
            .to_u32()
            .map(|v| v as usize)
            .map_err(|e| format!("{arch}.{k}: {e}"))
    };
    let opt_u32 = |k: &str| -> std::result::Result<Option<usize>, String> {
        get(k)
            .map(|v| v.to_u32().map(|v| v as usize))
            .transpose()
            .map_err(|e| format!("{arch}.{k}: {e}"))
    };
    let opt_f32 = |k: &str| -> std::result::Result<Option<f32>, String> {
        get(k)
            .map(Value::to_f32)
            .transpose()
            .map_err(|e| format!("{arch}.{k}: {e}"))
    };
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
    let rope_scaling = read_rope_scaling(md, arch)?;
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

/// `{arch}.rope.scaling.*`: none, linear or llama3; anything else is refused
/// with the key and value.
fn read_rope_scaling(
    md: &HashMap<String, Value>,
    arch: &str,
) -> std::result::Result<RopeScaling, String> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let f32_of = |k: &str| -> std::result::Result<Option<f32>, String> {
        md.get(&key(k))
            .map(Value::to_f32)
            .transpose()
            .map_err(|e| format!("{}: {e}", key(k)))
    };
    let kind = md
        .get(&key("type"))
        .map(|v| v.to_string().cloned())
        .transpose()
        .map_err(|e| format!("{}: {e}", key("type")))?;
    let factor = || -> std::result::Result<f32, String> {
        match f32_of("factor")? {
            Some(f) if f.is_finite() && f > 0.0 => Ok(f),
            Some(f) => Err(format!("{} = {f} is not a positive number", key("factor"))),
            None => Err(format!("missing {}", key("factor"))),
        }
    };
    match kind.as_deref() {
        None | Some("none") => Ok(RopeScaling::None),
        Some("linear") => Ok(RopeScaling::Linear { factor: factor()? }),
        Some("llama3") => {
            let original_context = md
                .get(&key("original_context_length"))
                .ok_or_else(|| format!("missing {}", key("original_context_length")))?
                .to_u32()
                .map_err(|e| format!("{}: {e}", key("original_context_length")))?
                as usize;
            let low = f32_of("low_freq_factor")?.unwrap_or(1.0);
            let high = f32_of("high_freq_factor")?.unwrap_or(4.0);
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
