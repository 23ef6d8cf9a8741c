//! Cost of the writer C ABI's per-layer publish, called as C calls it (through the
//! exported `extern "C"` functions), on a real tmpfs-backed segment.
//!
//! `cargo bench -p hydra-layout-capi --bench writer_abi`
//!
//! - `layer_done`: `hydra_writer_layer_done`, the position in the step in flight now;
//! - `layer_done_in_step`: `hydra_writer_layer_done_in_step`, what a device's host
//!   callback calls (no handle lock);
//! - `step_start`: `hydra_writer_step_start`, a whole-record publish, for comparison.

use criterion::{criterion_group, criterion_main, Criterion};
use hydra_writer::*;
use std::hint::black_box;

// The tests use all of it; the benchmark, what sets up a step.
#[allow(dead_code)]
#[path = "../tests/support/mod.rs"]
mod support;

fn benches(c: &mut Criterion) {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let tmp = tempfile::Builder::new()
        .prefix("hydra-bench")
        .tempdir_in(base)
        .unwrap();
    let d = HydraWriterDescription {
        model_name: std::ptr::null(),
        model_quant: std::ptr::null(),
        model_path: std::ptr::null(),
        tokenizer: std::ptr::null(),
        model_alias: std::ptr::null(),
        device: std::ptr::null(),
        capabilities: 0,
    };
    // SAFETY: the description's strings are NULL.
    let w = unsafe { support::create(tmp.path(), c"bench", 2, &d) };
    // SAFETY: every pointer is valid for the call; the handle is closed at the end and not
    // used after.
    unsafe {
        support::start_prefill_step(w, 512);
        let mut step = 0u64;
        assert_eq!(hydra_writer_step_id(w, 0, &mut step), HYDRA_WRITER_OK);
        let mut k = 0u64;
        c.bench_function("writer_abi/layer_done", |b| {
            b.iter(|| {
                k += 1;
                black_box(hydra_writer_layer_done(w, 0, black_box(k % 30), 30))
            })
        });
        c.bench_function("writer_abi/layer_done_in_step", |b| {
            b.iter(|| {
                k += 1;
                black_box(hydra_writer_layer_done_in_step(
                    w,
                    0,
                    step,
                    black_box(k % 30),
                    30,
                ))
            })
        });
        c.bench_function("writer_abi/step_start", |b| {
            b.iter(|| black_box(hydra_writer_step_start(w, 1, black_box(1))))
        });
        assert_eq!(hydra_writer_close(w), HYDRA_WRITER_OK);
    }
}

criterion_group!(writer_abi, benches);
criterion_main!(writer_abi);
