//! Reading a llama-family GGUF into [`Model`] parts.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::time::Instant;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;

use super::config::LlamaConfig;
use super::quant;
use super::{LoadOptions, Model, Parts};
use crate::error::{EngineError, Result};
use crate::tokenizer::{SpecialIds, Tokenizer};

/// Architectures whose tensors and keys follow the llama layout.
const SUPPORTED: [&str; 2] = ["llama", "mistral"];

pub(crate) fn load(path: &Path, opts: &LoadOptions) -> Result<Model> {
    let start = Instant::now();
    let invalid = |message: String| EngineError::InvalidModel {
        path: path.to_path_buf(),
        message,
    };
    let io = |source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    let ct = Content::read(&mut reader).map_err(|e| invalid(e.to_string()))?;
    let md = &ct.metadata;
    let s = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
    let arch = s("general.architecture").unwrap_or_default();
    if !SUPPORTED.contains(&arch.as_str()) {
        return Err(EngineError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            architecture: arch,
        });
    }
    let config = read_config(md, &arch, &ct).map_err(invalid)?;

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
            .map_err(|e| invalid(format!("tensor {name}: {e}")))?;
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
    let n_embd = req_u32("embedding_length")?;
    let n_head = req_u32("attention.head_count")?;
    let n_kv_head = match get("attention.head_count_kv") {
        Some(v) => v.to_u32().map_err(|e| e.to_string())? as usize,
        None => n_head,
    };
    let emb = ct
        .tensor_infos
        .get("token_embd.weight")
        .ok_or("missing tensor token_embd.weight")?;
    let vocab_size = emb.shape.dims().first().copied().unwrap_or(0);
    let cfg = LlamaConfig {
        n_layer: req_u32("block_count")?,
        n_embd,
        n_head,
        n_kv_head,
        n_ff: req_u32("feed_forward_length")?,
        vocab_size,
        n_ctx_train: req_u32("context_length").unwrap_or(2048),
        rope_theta: get("rope.freq_base")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10_000.0),
        rms_eps: get("attention.layer_norm_rms_epsilon")
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(1e-5) as f64,
    };
    if let Some(Ok(rope_dim)) = get("rope.dimension_count").map(|v| v.to_u32()) {
        if n_head > 0 && rope_dim as usize != n_embd / n_head {
            return Err(format!(
                "partial rotary embeddings (rope dim {rope_dim}, head dim {}) are not supported",
                n_embd / n_head
            ));
        }
    }
    if get("expert_count")
        .and_then(|v| v.to_u32().ok())
        .unwrap_or(0)
        > 1
    {
        return Err("mixture-of-experts models are not supported".into());
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}
