//! The exporter's live page during the demo: `demo --page` serves it from this process (the
//! exporter's own router, on a thread and a loopback port of its own, reading the segment
//! directory like any exporter: it asks the demo's engine nothing); without `--page`, the
//! demo names the page of an exporter already serving the same directory on its default
//! address, when one answers.

use anyhow::Context as _;
use hydra_exporter::{AppState, Collector};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The page served from this process; stops (and its thread ends) when dropped.
pub struct PageServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PageServer {
    /// Serves the page of the segments in `dir` on `listen` (port 0: a free one).
    pub fn start(dir: &Path, listen: SocketAddr) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(listen)
            .with_context(|| format!("cannot listen on {listen} for the page"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let collector = Arc::new(Collector::new(dir, hydra_probe::Thresholds::default()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the page's runtime")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("demo-page".into())
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let state = AppState {
                        collector,
                        page: true,
                    };
                    hydra_exporter::serve(listener, state, async {
                        let _ = stopped.await;
                    })
                    .await
                });
                if let Err(e) = served {
                    tracing::warn!("the demo's page stopped: {e}");
                }
            })
            .context("cannot start the page's thread")?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The page's address.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The page of an exporter serving `dir` on its default address, when one answers within
/// 300 ms and says it reads that directory.
pub fn running_exporter(dir: &Path) -> Option<String> {
    let base = format!("http://{}", hydra_exporter::DEFAULT_LISTEN);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_millis(300))
        .build();
    let state: serde_json::Value = agent
        .get(&format!("{base}/page/state"))
        .call()
        .ok()?
        .into_json()
        .ok()?;
    (state["dir"].as_str() == Some(&*dir.to_string_lossy())).then(|| format!("{base}/"))
}
