//! Prefill and decode throughput of hydra-engine next to candle-transformers'
//! own `quantized_llama` loop on the same weights.
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench inference -- \
//!     [--model PATH] [--threads N] [--prompt-tokens N] [--decode-tokens N] [--ubatch N]
//! ```
//!
//! Always measures the embedded model; with `--model`, also that GGUF. For
//! a GGUF whose weights hydra converts at load (Q4_1 -> Q8_0), the
//! reference runs both the file as shipped and the converted file. Each
//! figure is the best of `--repeat` runs (default 3), engines interleaved.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use hydra_engine_core::model::builtin::{
    byte_tokenizer_metadata, BuiltinSpec, BUILTIN_DTYPE, BUILTIN_NAME,
};
use hydra_engine_core::model::quant::convert_gguf_file;
use hydra_engine_core::{Conversion, LoadOptions, Logits, Model, Slots};

struct Args {
    model: Option<PathBuf>,
    threads: usize,
    prompt_tokens: usize,
    decode_tokens: usize,
    ubatch: Option<usize>,
    repeat: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        model: None,
        threads: 2,
        prompt_tokens: 256,
        decode_tokens: 128,
        ubatch: None,
        repeat: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--model" => a.model = Some(it.next().ok_or("--model needs a path")?.into()),
            "--threads" => a.threads = num("--threads")?,
            "--prompt-tokens" => a.prompt_tokens = num("--prompt-tokens")?,
            "--decode-tokens" => a.decode_tokens = num("--decode-tokens")?,
            "--ubatch" => a.ubatch = Some(num("--ubatch")?),
            "--repeat" => a.repeat = num("--repeat")?.max(1),
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

struct Row {
    model: String,
    engine: String,
    weights: String,
    prefill_tps: f64,
    decode_tps: f64,
}

fn prompt_for(model: &Model, n: usize) -> Vec<u32> {
    let text = "The history of science is the study of the development of science and \
                scientific knowledge, including both the natural and social sciences. ";
    let mut ids = model.tokenizer().encode(&text.repeat(n / 8 + 2), false);
    ids.truncate(n);
    ids
}

/// Best of `repeat` runs of each measurement, the engines interleaved so
/// that load from other processes hits both alike.
fn best_of(repeat: usize, mut runs: Vec<Box<dyn FnMut() -> (f64, f64) + '_>>) -> Vec<(f64, f64)> {
    let mut best = vec![(0f64, 0f64); runs.len()];
    for _ in 0..repeat {
        for (b, run) in best.iter_mut().zip(runs.iter_mut()) {
            let (p, d) = run();
            *b = (b.0.max(p), b.1.max(d));
        }
    }
    best
}

fn bench_ours(model: Arc<Model>, prompt: &[u32], n_decode: usize, ubatch: usize) -> (f64, f64) {
    let n_ctx = prompt.len() + n_decode + 8;
    let mut slots = Slots::new(model, 1, n_ctx).expect("slots");
    // Warm-up: start the thread pools.
    let l = slots
        .prefill(
            slots.id(0).unwrap(),
            &prompt[..8.min(prompt.len())],
            ubatch,
            &mut (),
        )
        .unwrap();
    slots.decode_step(slots.id(0).unwrap(), l.argmax()).unwrap();
    slots.erase(slots.id(0).unwrap());

    let t = Instant::now();
    let mut logits: Logits = slots
        .prefill(slots.id(0).unwrap(), prompt, ubatch, &mut ())
        .expect("prefill");
    let prefill = prompt.len() as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..n_decode {
        logits = slots
            .decode_step(slots.id(0).unwrap(), logits.argmax())
            .expect("decode");
    }
    let decode = n_decode as f64 / t.elapsed().as_secs_f64();
    (prefill, decode)
}

fn load_reference(path: &Path) -> ModelWeights {
    let mut f = std::fs::File::open(path).expect("open");
    let ct = gguf_file::Content::read(&mut f).expect("gguf");
    ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).expect("reference model")
}

fn bench_reference(m: &mut ModelWeights, prompt: &[u32], n_decode: usize) -> (f64, f64) {
    let dev = Device::Cpu;
    m.clear_kv_cache();
    let argmax =
        |l: &Tensor| Logits::from(l.squeeze(0).unwrap().to_vec1::<f32>().unwrap()).argmax();
    let warm = Tensor::new(&prompt[..8.min(prompt.len())], &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    m.forward(&warm, 0).unwrap();
    let t = Instant::now();
    let input = Tensor::new(prompt, &dev).unwrap().unsqueeze(0).unwrap();
    let mut next = argmax(&m.forward(&input, 0).unwrap());
    let prefill = prompt.len() as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..n_decode {
        let input = Tensor::new(&[next], &dev).unwrap().unsqueeze(0).unwrap();
        next = argmax(&m.forward(&input, prompt.len() + i).unwrap());
    }
    let decode = n_decode as f64 / t.elapsed().as_secs_f64();
    (prefill, decode)
}

fn write_builtin_gguf(path: &Path) {
    let spec = BuiltinSpec::default();
    let tensors = spec.tensors(BUILTIN_DTYPE).unwrap();
    let mut md = spec.gguf_metadata(BUILTIN_NAME);
    md.extend(byte_tokenizer_metadata());
    let md: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &ts).unwrap();
}

/// The embedded model's rows: hydra-engine and candle's loop on the same weights.
fn embedded_rows(args: &Args, tmp: &Path) -> Vec<Row> {
    let model = Arc::new(Model::builtin().unwrap());
    let prompt = prompt_for(&model, args.prompt_tokens);
    let builtin_path = tmp.join("builtin.gguf");
    write_builtin_gguf(&builtin_path);
    let mut reference = load_reference(&builtin_path);
    let quant = model.info().quantization.clone();
    let ubatch = args.ubatch.unwrap_or(prompt.len());
    let best = best_of(
        args.repeat,
        vec![
            Box::new(|| bench_ours(model.clone(), &prompt, args.decode_tokens, ubatch)),
            Box::new(|| bench_reference(&mut reference, &prompt, args.decode_tokens)),
        ],
    );
    [
        ("hydra-engine", quant.clone()),
        ("candle quantized_llama", quant),
    ]
    .into_iter()
    .zip(best)
    .map(|((engine, weights), (p, d))| Row {
        model: "embedded".into(),
        engine: engine.into(),
        weights,
        prefill_tps: p,
        decode_tps: d,
    })
    .collect()
}

/// The rows of the GGUF at `path`: hydra-engine, candle's loop on the file as shipped, and
/// on the file hydra converts it to at load if it converts it.
fn gguf_rows(args: &Args, path: &Path, tmp: &Path) -> Vec<Row> {
    let t = Instant::now();
    let model = Arc::new(Model::load_gguf(path, &LoadOptions::default()).expect("load"));
    eprintln!(
        "loaded {} in {:.2}s",
        model.info().name,
        t.elapsed().as_secs_f64()
    );
    let prompt = prompt_for(&model, args.prompt_tokens);
    let name = model.info().name.clone();
    let quant = model.info().quantization.clone();
    let mut engines = vec![("hydra-engine".to_string(), quant.clone())];
    let mut refs = Vec::new();
    if quant.contains("->") {
        let converted = tmp.join("converted.gguf");
        convert_gguf_file(path, &converted, Conversion::default()).expect("convert");
        refs.push(load_reference(&converted));
        let _ = std::fs::remove_file(&converted);
        engines.push(("candle quantized_llama".into(), format!("{quant} (same)")));
    }
    refs.push(load_reference(path));
    engines.push((
        "candle quantized_llama".into(),
        format!("{} (as shipped)", quant.split("->").next().unwrap_or("")),
    ));
    let ubatch = args.ubatch.unwrap_or(prompt.len());
    let mut runs: Vec<Box<dyn FnMut() -> (f64, f64) + '_>> = vec![Box::new(|| {
        bench_ours(model.clone(), &prompt, args.decode_tokens, ubatch)
    })];
    for r in refs.iter_mut() {
        let prompt = &prompt;
        runs.push(Box::new(move || {
            bench_reference(r, prompt, args.decode_tokens)
        }));
    }
    let best = best_of(args.repeat, runs);
    engines
        .into_iter()
        .zip(best)
        .map(|((engine, weights), (p, d))| Row {
            model: name.clone(),
            engine,
            weights,
            prefill_tps: p,
            decode_tps: d,
        })
        .collect()
}

fn print_rows(args: &Args, rows: &[Row]) {
    println!(
        "threads={} prompt_tokens={} decode_tokens={} ubatch={} best of {}",
        args.threads,
        args.prompt_tokens,
        args.decode_tokens,
        args.ubatch
            .map_or("whole prompt".to_string(), |u| u.to_string()),
        args.repeat
    );
    println!(
        "| {:<32} | {:<22} | {:<24} | {:>13} | {:>12} |",
        "model", "engine", "weights", "prefill tok/s", "decode tok/s"
    );
    println!(
        "|{:-<34}|{:-<24}|{:-<26}|{:->15}|{:->14}|",
        "", "", "", "", ""
    );
    for r in rows {
        println!(
            "| {:<32} | {:<22} | {:<24} | {:>13.1} | {:>12.1} |",
            r.model, r.engine, r.weights, r.prefill_tps, r.decode_tps
        );
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    // As the engine binary does (`hydra_engine_core::memory`).
    hydra_engine_core::memory::keep_freed_memory();
    hydra_engine_core::threads::set_cpu_threads(args.threads).expect("threads");
    let tmp = std::env::temp_dir().join(format!("hydra-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut rows = embedded_rows(&args, &tmp);
    if let Some(path) = &args.model {
        rows.extend(gguf_rows(&args, path, &tmp));
    }
    let _ = std::fs::remove_dir_all(&tmp);
    print_rows(&args, &rows);
}
