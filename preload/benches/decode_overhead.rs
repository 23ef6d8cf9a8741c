//! Cost of the `llama_decode` wrapper per call: the same batches passed to a trivial
//! stand-in for the real function, directly and through the wrapper (segment creation
//! happens once, before measuring). The difference of the two is the preload's cost.
//!
//! `cargo bench -p hydra-preload --bench decode_overhead`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hydra_preload::batch::OwnedBatch;
use hydra_preload::describe::ContextFacts;
use hydra_preload::ext;
use hydra_preload::ffi::{LlamaBatch, LlamaBatchExt, LlamaContext};
use hydra_preload::interpose;
use std::hint::black_box;

/// Stands in for libllama's `llama_decode`: reads the batch size and succeeds.
unsafe extern "C-unwind" fn fake_decode(ctx: *mut LlamaContext, batch: LlamaBatch) -> i32 {
    black_box(ctx);
    black_box(batch.n_tokens);
    0
}

/// Stands in for libllama's `llama_process`.
unsafe extern "C-unwind" fn fake_process(
    ctx: *mut LlamaContext,
    kind: i32,
    batch: *mut LlamaBatchExt,
) -> i32 {
    black_box((ctx, kind, batch));
    0
}

/// A batch of `per_seq` tokens for each of `seqs` sequences, at positions 0...
fn batch(seqs: i32, per_seq: i32) -> OwnedBatch {
    let tokens: Vec<(i32, i32)> = (0..seqs)
        .flat_map(|s| (0..per_seq).map(move |p| (p, s)))
        .collect();
    OwnedBatch::single(&tokens)
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    std::env::set_var("HYDRA_PROGRESS_DIR", tmp.path());
    std::env::set_var("HYDRA_ENGINE_ID", "bench-preload");
    let ctx_cell = Box::new(0u8);
    let ctx = &*ctx_cell as *const u8 as *mut LlamaContext;
    let facts = || ContextFacts {
        n_seqs: 4,
        n_ctx_seq: 4096,
        n_ctx: 16384,
        ..Default::default()
    };
    let mut g = c.benchmark_group("llama_decode");
    for (name, seqs, per_seq) in [("1seq_x1", 1, 1), ("4seq_x1", 4, 1), ("1seq_x512", 1, 512)] {
        let mut b = batch(seqs, per_seq);
        let raw = b.raw();
        g.bench_function(format!("{name}/direct"), |bn| {
            // SAFETY: the stand-in reads nothing behind its arguments.
            bn.iter(|| unsafe { fake_decode(black_box(ctx), black_box(raw)) })
        });
        g.bench_function(format!("{name}/wrapped"), |bn| {
            // SAFETY: `raw` points into `b`, alive for the whole benchmark.
            bn.iter(|| unsafe {
                interpose::decode_with(fake_decode, black_box(ctx), black_box(raw), facts)
            })
        });
    }
    // llama-server's path: llama_process of an extended batch, whose builder calls the
    // preload's wrappers record (their share is counted here too).
    let ext_cell = Box::new(0u8);
    let b = &*ext_cell as *const u8 as *mut LlamaBatchExt;
    g.bench_function("ext_1seq_x1/direct", |bn| {
        // SAFETY: the stand-in reads nothing behind its arguments.
        bn.iter(|| unsafe { fake_process(black_box(ctx), 1, black_box(b)) })
    });
    // One decode token, then a 512-token prompt chunk: the record of every builder call
    // (`_clear`, then `_add_token` and `_set_pos` per token), then llama_process.
    for (name, n) in [("ext_1seq_x1", 1), ("ext_1seq_x512", 512)] {
        let mut pos = 0;
        g.bench_function(format!("{name}/wrapped"), |bn| {
            bn.iter(|| {
                ext::cleared(b);
                for i in 0..n {
                    interpose::record(|| ext::added(b, i, 0));
                    interpose::record(|| ext::pos_set(b, i, pos));
                    pos = pos.wrapping_add(1);
                }
                // SAFETY: the stand-in reads nothing behind its arguments.
                unsafe {
                    interpose::process_with(fake_process, black_box(ctx), 1, black_box(b), facts)
                }
            })
        });
    }
    // The sweeper's share: one pass over the registry with nothing to end.
    g.bench_function("idle_sweep", |bn| {
        bn.iter_batched(
            hydra_layout::clock::monotonic_ns,
            |now| hydra_preload::registry::sweep(now, u64::MAX),
            BatchSize::SmallInput,
        )
    });
    g.finish();
    drop(ctx_cell);
    drop(ext_cell);
}

criterion_group!(benches, bench);
criterion_main!(benches);
