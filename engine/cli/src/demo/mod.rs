//! `hydra-engine demo`: starts an engine on the embedded model (or on a GGUF, `--model`)
//! on a free loopback port,
//! keeps every slot busy (a long prefill, long decodes, a state save and restore), shows a
//! live per-slot view read from the segment through the probe library, and ends with a
//! summary: meta latency while the slots were busy (segment vs. the old queue path), and
//! for each request its queue wait and its compute time apart (tokens/s is compute only).
//!
//! Part of the `hydra-engine` binary, not of the library.

mod live_view;
mod page;
mod workload;

use anyhow::Context as _;
use hydra_engine_server::config::{ModelSource, Schedule, ServerConfig};
use hydra_engine_server::Server;
use std::path::PathBuf;
use std::time::Duration;

/// Options of the demo. The defaults keep the live view running about 20 s on the
/// embedded model (BENCHMARKS.md has the machine and figures).
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Run on this GGUF model instead of the embedded one (any file `serve --model` takes).
    #[arg(long, value_name = "PATH.gguf")]
    pub model: Option<PathBuf>,
    /// Number of slots (each gets work).
    #[arg(long, default_value_t = 4)]
    pub slots: usize,
    /// Tokens each decode generates.
    #[arg(long, default_value_t = 1024)]
    pub decode_tokens: usize,
    /// Tokens of the long prompt.
    #[arg(long, default_value_t = 3000)]
    pub prompt_tokens: usize,
    /// Times each slot's work is repeated (the first round also saves slot 1 and restores
    /// it into the last slot).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Prefill chunk size.
    #[arg(long, default_value_t = 32)]
    pub ubatch: usize,
    /// Live view refresh interval, ms.
    #[arg(long, default_value_t = 100)]
    pub interval_ms: u64,
    /// Directory of progress segments [default: $HYDRA_PROGRESS_DIR or /dev/shm/hydra-progress].
    #[arg(long, value_name = "DIR")]
    pub progress_dir: Option<PathBuf>,
    /// Engine id [default: demo-PID, where PID is this process id].
    #[arg(long)]
    pub engine_id: Option<String>,
    /// Serve the exporter's live page of the demo's segments from this process, on ADDR
    /// [default with no ADDR: a free loopback port], and print its address
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub page: Option<std::net::SocketAddr>,
}

/// Runs the demo to completion.
pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.slots >= 2, "the demo needs at least 2 slots");
    let dir = hydra_layout::naming::resolve_dir(args.progress_dir.as_deref());
    let engine_id = args
        .engine_id
        .clone()
        .unwrap_or_else(|| format!("demo-{}", std::process::id()));
    let mut config = ServerConfig::builtin(&engine_id, dir.clone(), args.slots);
    let (tokenizer, what) = match &args.model {
        Some(path) => {
            config.model = ModelSource::Gguf(path.clone());
            let tokenizer = hydra_engine_core::Tokenizer::from_gguf_file(path)
                .with_context(|| format!("cannot read the tokenizer of {}", path.display()))?;
            (tokenizer, path.display().to_string())
        }
        None => (
            hydra_engine_core::Tokenizer::bytes(),
            "the embedded model".to_string(),
        ),
    };
    config.ubatch = args.ubatch;
    // The demo shows the serial queue starving a meta query behind a long decode.
    config.schedule = Schedule::Serial;
    // Slot 0 holds the long prompt; a decode slot its short prompt and generated tokens,
    // the restored slot half as many again.
    let decoded = args.decode_tokens + args.decode_tokens / 2 + 64;
    config.ctx = (args.prompt_tokens.max(decoded) + 64).max(1024);
    println!(
        "hydra-engine demo: starting engine {engine_id:?} on {what} ({} slots)",
        args.slots
    );
    let server = Server::start(config).context("cannot start the demo engine")?;
    let base = format!("http://{}", server.addr());
    let segment = server
        .segment_path()
        .cloned()
        .context("the demo engine publishes no segment")?;
    println!("  HTTP  {base}");
    println!(
        "  segment {}  (try: hydra-probe --dir {} watch)",
        segment.display(),
        dir.display()
    );
    let page = args
        .page
        .map(|listen| page::PageServer::start(&dir, listen))
        .transpose()?;
    match page.as_ref().map(page::PageServer::url) {
        Some(url) => println!("  page  {url}  (the exporter's live page)"),
        None => match page::running_exporter(&dir) {
            Some(url) => println!("  page  {url}  (the exporter beside the demo)"),
            None => println!("  page  (--page serves the live page, for a browser)"),
        },
    }
    println!();

    let plan = workload::Plan {
        base: base.clone(),
        slots: args.slots,
        long_prompt: workload::long_prompt(&tokenizer, args.prompt_tokens),
        decode_tokens: args.decode_tokens,
        rounds: args.rounds as usize,
    };
    let running = workload::start(plan);
    let stats = live_view::run(
        &segment,
        Duration::from_millis(args.interval_ms.max(10)),
        &running,
    )?;
    let outcome = running.join()?;
    server.shutdown()?;
    drop(page);
    println!();
    workload::print_summary(&outcome, &stats);
    Ok(())
}
