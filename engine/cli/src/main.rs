//! `hydra-engine`: serve a model with live per-slot progress in shared memory, or run the
//! demo. Argument parsing and the demo ([`demo`], which belongs to the binary); the engine
//! itself is the two library crates, `hydra-engine-server` and `hydra-engine-core`.

mod demo;
mod perplexity_cmd;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use hydra_engine_core::threads::PoolUse;
use hydra_engine_core::{Conversion, DeviceSpec, LoadOptions};
use hydra_engine_server::config::{
    ModelSource, Schedule, ServerConfig, DEFAULT_MAX_WAITING, DEFAULT_UBATCH,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hydra-engine",
    version,
    about = "A single-compute-thread inference engine whose per-slot progress is readable from other processes with zero IPC",
    after_help = "Exit status: 0 after a clean shutdown; 1 on an error; 2 on a bad command line; \
                  3 when the device cannot be used (a build without CUDA, a GPU that cannot be \
                  opened, or a model that does not fit in its memory)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a model over HTTP, publishing progress to a shared-memory segment.
    Serve(ServeArgs),
    /// Start an engine on the embedded model, keep every slot busy and show live progress
    /// read from the segment through the probe library.
    Demo(demo::DemoArgs),
    /// A model's perplexity over a text file, computed as llama.cpp's llama-perplexity
    /// computes it (windows of --ctx tokens, the second half of each scored).
    Perplexity(perplexity_cmd::PerplexityArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// GGUF model file: architecture llama, mistral, qwen2 or qwen3; tokenizer llama
    /// (SentencePiece) or gpt2 (byte-level BPE with a pre-tokenizer llama.cpp knows).
    #[arg(
        long,
        value_name = "PATH.gguf",
        conflicts_with = "builtin",
        required_unless_present = "builtin"
    )]
    model: Option<PathBuf>,
    /// Use the embedded, deterministically seeded model (no file needed).
    #[arg(long)]
    builtin: bool,
    /// `tokenizer.json` to use instead of the GGUF's own vocabulary.
    #[arg(long, value_name = "PATH")]
    tokenizer_json: Option<PathBuf>,
    /// Load-time weight conversion: auto (types without a fast kernel -> Q8_0), auto:q4_0, q8_0, q4_0, none.
    #[arg(long, default_value = "auto")]
    convert: Conversion,
    /// Compute device: cpu or cuda:N (needs a build with the `cuda` feature). A GPU is
    /// named on stderr at start; one that cannot be used exits with status 3.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Number of slots.
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// Context size per slot in tokens (0: the model's training context).
    #[arg(long, default_value_t = 2048)]
    ctx: usize,
    /// Prefill chunk size in tokens; progress is published after every chunk.
    #[arg(long, default_value_t = DEFAULT_UBATCH)]
    ubatch: usize,
    /// How the compute thread orders work: batched (every decoding slot advances one token
    /// per forward, prefill chunks interleaved) or serial (one task at a time, FIFO).
    #[arg(long, default_value_t = Schedule::Batched)]
    schedule: Schedule,
    /// Whether decode steps spread their kernels over the CPU threads: adaptive (time the
    /// steps, and run them on the compute thread alone while that is faster, as under CPU
    /// contention), always, or never.
    #[arg(long, default_value_t = PoolUse::Adaptive)]
    pool_use: PoolUse,
    /// CPU threads for compute.
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Engine id (names the progress segment `<id>.hps`).
    #[arg(long, default_value = "engine-0")]
    engine_id: String,
    /// Directory of progress segments [default: $HYDRA_PROGRESS_DIR or /dev/shm/hydra-progress].
    #[arg(long, value_name = "DIR")]
    progress_dir: Option<PathBuf>,
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Alias clients know the model by (Hydra's model_alias, the id in /v1/models)
    /// [default: the model file's name without .gguf].
    #[arg(long)]
    alias: Option<String>,
    /// Jinja chat template for /v1/chat/completions, used instead of the model's
    /// tokenizer.chat_template (a model with neither answers chat requests with a 400).
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// Most generation requests that may wait for a busy slot; one more gets a 503 with
    /// Retry-After.
    #[arg(long, default_value_t = DEFAULT_MAX_WAITING)]
    max_waiting: usize,
    /// Do not publish progress (only for measuring publishing overhead).
    #[arg(long)]
    no_publish: bool,
    /// Largest JSON request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_body: usize,
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A kernel ceiling that cannot be used is refused before anything is loaded.
    if let Err(e) = hydra_engine_core::kernels::Isa::ceiling() {
        eprintln!("hydra-engine: {e}");
        return ExitCode::from(2);
    }
    // The demo draws its own live view: keep the engine's log to warnings there.
    init_logging(if matches!(cli.command, Command::Demo(_)) {
        "warn"
    } else {
        "info"
    });
    if !hydra_engine_core::memory::keep_freed_memory() {
        tracing::debug!("allocator settings not applied (not glibc): freed memory goes back");
    }
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Demo(args) => demo::run(&args),
        Command::Perplexity(args) => perplexity_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hydra-engine: {e:#}");
            exit_code(&e)
        }
    }
}

/// Exit status when the device cannot be used: this build lacks CUDA, the GPU cannot be
/// opened (no driver, no such ordinal), or the model does not fit in its memory. Any other
/// failure exits with 1, a bad command line with 2.
const EXIT_DEVICE: u8 = 3;

fn exit_code(e: &anyhow::Error) -> ExitCode {
    use hydra_engine_core::EngineError;
    let device_error = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<EngineError>(),
            Some(
                EngineError::InvalidDevice { .. }
                    | EngineError::DeviceUnavailable { .. }
                    | EngineError::OutOfMemory(_)
            )
        )
    });
    if device_error {
        ExitCode::from(EXIT_DEVICE)
    } else {
        ExitCode::FAILURE
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (tracing's `EnvFilter` syntax, e.g. `debug` or
/// `hydra_engine=debug`), as every binary of the workspace does; `default` without it.
fn init_logging(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only on a terminal: logs piped to a file or a supervisor stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    hydra_engine_core::threads::set_cpu_threads(args.threads)?;
    // Opens the GPU before the model is read, so an unusable one fails at once.
    if args.device != DeviceSpec::Cpu {
        eprintln!("{}", args.device.describe()?);
    }
    if let (Some(path), None) = (&args.model, &args.tokenizer_json) {
        eprintln!("{}", hydra_engine_core::model::describe_gguf(path)?);
    }
    let config = ServerConfig {
        model: match args.model {
            Some(path) => ModelSource::Gguf(path),
            None => ModelSource::Builtin,
        },
        load: LoadOptions {
            device: args.device,
            conversion: args.convert,
            tokenizer_json: args.tokenizer_json,
        },
        model_alias: args.alias,
        slots: args.slots,
        ctx: args.ctx,
        ubatch: args.ubatch,
        schedule: args.schedule,
        pool_use: args.pool_use,
        engine_id: args.engine_id,
        progress_dir: hydra_layout::naming::resolve_dir(args.progress_dir.as_deref()),
        listen: args.listen,
        publish: !args.no_publish,
        max_json_body: args.max_body,
        chat_template: args.chat_template,
        max_waiting: args.max_waiting,
    };
    let server = hydra_engine_server::Server::start(config)?;
    // Print the bound address on stdout (machine-readable) for scripts and tests that
    // listen on port 0. A reader that stops reading after the first line must not take the
    // server down: write errors (EPIPE) are ignored rather than panicking as println! does.
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{}", server.addr());
        if let Some(path) = server.segment_path() {
            let _ = writeln!(out, "progress segment {}", path.display());
        }
        let _ = out.flush();
    }
    wait_for_signal()?;
    tracing::info!("signal received: shutting down");
    server.shutdown()
}

/// Blocks until SIGINT or SIGTERM.
fn wait_for_signal() -> anyhow::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("cannot install the signal handler")?;
    let _ = rx.recv();
    Ok(())
}
