//! `hydra-engine perplexity`: a model's perplexity over a text file, computed as llama.cpp's
//! `llama-perplexity` computes it ([`hydra_engine_core::perplexity`]), with a progress bar.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use hydra_engine_core::{Conversion, DeviceSpec, LoadOptions, Model, Slots};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Args)]
pub struct PerplexityArgs {
    /// GGUF model file.
    #[arg(long, value_name = "PATH.gguf")]
    model: PathBuf,
    /// Text file to score (UTF-8), e.g. /usr/share/common-licenses/GPL-3.
    #[arg(long, value_name = "PATH")]
    file: PathBuf,
    /// Tokens per window; the second half of each is scored (llama-perplexity's -c).
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Prefill chunk size in tokens.
    #[arg(long, default_value_t = 512)]
    ubatch: usize,
    /// Load-time weight conversion: auto, auto:q4_0, q8_0, q4_0, none. `none` scores the
    /// weights as stored, as llama.cpp does.
    #[arg(long, default_value = "none")]
    convert: Conversion,
    /// Compute device: cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// CPU threads for compute.
    #[arg(long, default_value_t = super::default_threads())]
    threads: usize,
}

pub fn run(args: &PerplexityArgs) -> anyhow::Result<()> {
    hydra_engine_core::threads::set_cpu_threads(args.threads)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {} as UTF-8 text", args.file.display()))?;
    let opts = LoadOptions {
        device: args.device,
        conversion: args.convert,
        tokenizer_json: None,
    };
    let model = Arc::new(Model::load_gguf(&args.model, &opts)?);
    let tok = model.tokenizer();
    let add_bos = tok.add_bos_by_default();
    // As llama-perplexity tokenizes: special tokens added, none parsed from the text.
    let tokens = tok.tokenize(&text, true, false)?;
    let windows = hydra_engine_core::perplexity::windows(tokens.len(), args.ctx)?;
    let bos = add_bos.then(|| tok.bos_token()).flatten();
    eprintln!(
        "perplexity: {} tokens, {windows} windows of {} (the second half of each scored)",
        tokens.len(),
        args.ctx
    );
    let mut slots = Slots::new(model.clone(), 1, args.ctx)?;
    let bar = ProgressBar::new(windows as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} windows, {elapsed} (eta {eta}) {msg}")
            .expect("a valid template"),
    );
    let start = Instant::now();
    let result = hydra_engine_core::perplexity::perplexity(
        &mut slots,
        &tokens,
        args.ctx,
        args.ubatch,
        bos,
        &mut |done, _, ppl| {
            bar.set_position(done as u64);
            bar.set_message(format!("PPL {ppl:.4}"));
        },
    );
    bar.finish_and_clear();
    let p = result?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "perplexity: {} tokens scored in {secs:.1} s ({:.1} tokens/s evaluated)",
        p.scored,
        (p.windows * args.ctx) as f64 / secs.max(1e-9)
    );
    println!("Final estimate: PPL = {:.4} +/- {:.5}", p.ppl, p.error);
    Ok(())
}
