//! HTTP scrape latency (p50 / p99) of `/metrics` while every engine is busy: 16 engines x
//! 64 slots, one writer thread per engine republishing every slot and beating continuously
//! (a pass, then a 200 us pause), the exporter served in-process on 127.0.0.1, and a client
//! issuing sequential GETs.
//!
//! `cargo bench -p hydra-exporter --bench scrape_latency` (env `SCRAPES`, default 300).

use hydra_exporter::{AppState, Collector};
use hydra_layout::clock;
use hydra_probe::Thresholds;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod fleet;

use fleet::{ENGINES, SLOTS};

/// One writer thread per engine, republishing every slot and beating until `stop` (or
/// 10 minutes); each pass adds its slot count to `publishes`.
fn busy_writers(
    dir: &std::path::Path,
    stop: &Arc<AtomicBool>,
    publishes: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..ENGINES)
        .map(|e| {
            let mut w = fleet::engine(dir, e);
            let stop = stop.clone();
            let publishes = publishes.clone();
            std::thread::spawn(move || {
                let start = clock::monotonic_ns();
                let deadline = Instant::now() + Duration::from_secs(600);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let now = clock::monotonic_ns();
                    for s in 0..SLOTS {
                        let st = fleet::decoding(now, start, i % 1000);
                        w.publish(s, &st).expect("publish");
                    }
                    w.heartbeat(now);
                    publishes.fetch_add(SLOTS as u64, Ordering::Relaxed);
                    i += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                let _ = w.close();
            })
        })
        .collect()
}

/// The exporter served on 127.0.0.1 by `rt`: its address, the sender that stops it, and
/// its task.
fn serve(
    rt: &tokio::runtime::Runtime,
    collector: &Arc<Collector>,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(hydra_exporter::serve(
        listener,
        AppState {
            collector: collector.clone(),
            page: true,
        },
        async move {
            let _ = rx.await;
        },
    ));
    (addr, tx, server)
}

/// `scrapes` sequential GETs of `url` after 20 untimed: their latencies, sorted, and the
/// last body's size.
fn scrape_many(url: &str, scrapes: usize) -> (Vec<Duration>, usize) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let get = || {
        let t = Instant::now();
        let mut body = Vec::new();
        agent
            .get(url)
            .call()
            .expect("scrape")
            .into_reader()
            .read_to_end(&mut body)
            .expect("body");
        (t.elapsed(), body.len())
    };
    for _ in 0..20 {
        get();
    }
    let mut lat: Vec<Duration> = Vec::with_capacity(scrapes);
    let mut bytes = 0;
    for _ in 0..scrapes {
        let (d, n) = get();
        lat.push(d);
        bytes = n;
    }
    lat.sort();
    (lat, bytes)
}

fn main() {
    let scrapes: usize = std::env::var("SCRAPES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
        .max(1);
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("segs");
    let stop = Arc::new(AtomicBool::new(false));
    let publishes = Arc::new(AtomicU64::new(0));
    let writers = busy_writers(&dir, &stop, &publishes);

    let collector = Arc::new(Collector::new(&dir, Thresholds::default()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (addr, tx, server) = serve(&rt, &collector);

    let published_before = publishes.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let (lat, bytes) = scrape_many(&format!("http://{addr}/metrics"), scrapes);
    let wall = t0.elapsed();
    let published = publishes.load(Ordering::Relaxed) - published_before;
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    let text = collector.scrape(hydra_exporter::Format::Text);
    println!(
        "scrape_latency: {ENGINES} engines x {SLOTS} slots, writers busy ({:.0} slot publishes/s)",
        published as f64 / wall.as_secs_f64()
    );
    println!(
        "  {scrapes} sequential GET /metrics (text 0.0.4, {bytes} bytes): p50 {:?}  p99 {:?}  max {:?}",
        pct(0.50),
        pct(0.99),
        lat[lat.len() - 1]
    );
    println!(
        "  exporter counters: torn reads {}  seqlock retries {}  scrapes {}",
        collector.stats().torn_reads.get(),
        collector.stats().seqlock_retries.get(),
        collector.stats().scrapes.get()
    );
    assert!(text.contains("hydra_slot_phase"));

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.join();
    }
    let _ = tx.send(());
    let _ = rt.block_on(server);
}
