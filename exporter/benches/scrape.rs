//! Scrape render time for 16 engines x 64 slots, every slot decoding: reading alone
//! (`collect`: scan, cached readers, capture + classification), encoding alone (`render`
//! of a prepared collection) and both (`scrape`), in both formats; and, for comparison in
//! the same run, the former all-prometheus-client encoding (`*_prometheus_client`, the
//! oracle of `tests/exposition.rs`).
//!
//! `cargo bench -p hydra-exporter --bench scrape`

#[path = "../tests/oracle/mod.rs"]
mod oracle;

use criterion::{criterion_group, criterion_main, Criterion};
use hydra_exporter::{render, Collector, Format};
use hydra_layout::{clock, SegmentWriter};
use hydra_probe::Thresholds;
use std::hint::black_box;
use std::sync::Arc;

mod fleet;

use fleet::{ENGINES, SLOTS};

fn setup(dir: &std::path::Path) -> Vec<SegmentWriter> {
    let now = clock::monotonic_ns();
    (0..ENGINES)
        .map(|e| {
            let mut w = fleet::engine(dir, e);
            for s in 0..SLOTS {
                let state = fleet::decoding(now, now - 10_000_000_000, 100 + s as u64);
                w.publish(s, &state).expect("publish");
            }
            w.heartbeat(now);
            w
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("segs");
    let _writers = setup(&dir);
    let collector = Collector::new(&dir, Thresholds::default());
    let prepared = Arc::new(collector.collect());
    assert_eq!(prepared.views().count(), ENGINES);
    for format in [Format::Text, Format::OpenMetrics] {
        let text = render(prepared.clone(), collector.stats(), format);
        eprintln!(
            "scrape of {ENGINES} engines x {SLOTS} slots: {} bytes, {} lines ({format:?})",
            text.len(),
            text.lines().count()
        );
    }
    let mut g = c.benchmark_group(format!("{ENGINES}x{SLOTS}"));
    g.bench_function("collect", |b| b.iter(|| black_box(collector.collect())));
    g.bench_function("render_text", |b| {
        b.iter(|| black_box(render(prepared.clone(), collector.stats(), Format::Text)))
    });
    g.bench_function("render_openmetrics", |b| {
        b.iter(|| {
            black_box(render(
                prepared.clone(),
                collector.stats(),
                Format::OpenMetrics,
            ))
        })
    });
    g.bench_function("render_text_prometheus_client", |b| {
        b.iter(|| {
            black_box(oracle::render_prometheus_client(
                prepared.clone(),
                collector.stats(),
                Format::Text,
            ))
        })
    });
    g.bench_function("render_openmetrics_prometheus_client", |b| {
        b.iter(|| {
            black_box(oracle::render_prometheus_client(
                prepared.clone(),
                collector.stats(),
                Format::OpenMetrics,
            ))
        })
    });
    g.bench_function("scrape_text", |b| {
        b.iter(|| black_box(collector.scrape(Format::Text)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
