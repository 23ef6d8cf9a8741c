//! `hydra-exporter`: parses arguments, binds, serves until SIGINT or SIGTERM.
//!
//! Prints `listening on http://ADDR` on stdout once bound (so `--listen 127.0.0.1:0`
//! callers learn the port); logs go to stderr (`RUST_LOG`, default `info`). Exit status:
//! 0 after a graceful shutdown, 1 on an error (printed as one line), 2 on a usage error.

use anyhow::Context as _;
use clap::Parser;
use hydra_exporter::{AppState, Collector};
use hydra_probe::ThresholdArgs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Serves every hydra-progress segment of a directory as Prometheus metrics, Hydra meta
/// JSON and a live page for a browser (at /), reading the segments only (never posting to
/// an engine).
#[derive(Debug, Parser)]
#[command(name = "hydra-exporter", version, max_term_width = 100)]
struct Cli {
    /// Address to listen on (port 0 picks a free port; the bound address is printed)
    #[arg(long, value_name = "ADDR", default_value = hydra_exporter::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Segment directory [default: $HYDRA_PROGRESS_DIR, else /dev/shm/hydra-progress]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Export each engine's statistics (the latency histograms and the task, token and step
    /// counters) per slot, with a `slot` label, instead of summed per engine. Costs about
    /// 700 series per slot
    #[arg(long)]
    per_slot_stats: bool,
    /// Do not serve the live page (`/` and `/page/state`); the metrics and JSON endpoints
    /// stay
    #[arg(long)]
    no_page: bool,
    /// Classification thresholds (the same flags as hydra-probe).
    #[command(flatten)]
    thresholds: ThresholdArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: logs piped to a file or a supervisor stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "hydra-exporter: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let dir = hydra_layout::naming::resolve_dir(cli.dir.as_deref());
    let collector = Arc::new(
        Collector::new(dir.clone(), cli.thresholds.thresholds())
            .with_per_slot_stats(cli.per_slot_stats),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cli.listen)
            .await
            .with_context(|| format!("listen on {}", cli.listen))?;
        let addr = listener.local_addr().context("read the bound address")?;
        {
            let mut out = std::io::stdout().lock();
            // A closed stdout is not a reason to stop serving.
            let _ = writeln!(out, "listening on http://{addr}");
            let _ = out.flush();
        }
        tracing::info!(%addr, dir = %dir.display(), "serving");
        hydra_exporter::serve(
            listener,
            AppState {
                collector,
                page: !cli.no_page,
            },
            shutdown_signal(),
        )
        .await
        .context("serve")?;
        tracing::info!("shut down");
        Ok(())
    })
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for SIGINT: {e}");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent_and_takes_the_probe_threshold_flags() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "hydra-exporter",
            "--listen",
            "127.0.0.1:0",
            "--dir",
            "/tmp/x",
            "--stall-floor",
            "1s",
            "--heartbeat-timeout",
            "5s",
        ])
        .unwrap();
        let t = cli.thresholds.thresholds();
        assert_eq!(t.stall_floor, std::time::Duration::from_secs(1));
        assert_eq!(t.heartbeat_timeout, std::time::Duration::from_secs(5));
        assert_eq!(cli.listen.port(), 0);
    }
}
