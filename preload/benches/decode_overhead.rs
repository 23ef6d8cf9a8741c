//! Cost of the `llama_decode` wrapper per call: the same batches passed to a trivial
//! stand-in for the real function, directly and through the wrapper (segment creation
//! happens once, before measuring). The difference of the two is the preload's cost.
//!
//! `cargo bench -p hydra-preload --bench decode_overhead`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
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

/// A batch of `per_seq` tokens for each of `seqs` sequences, over owned arrays.
struct Batch {
    pos: Vec<i32>,
    n_seq_id: Vec<i32>,
    ids: Vec<i32>,
    ptrs: Vec<*mut i32>,
}

impl Batch {
    fn new(seqs: i32, per_seq: i32) -> Self {
        let mut b = Batch {
            pos: vec![],
            n_seq_id: vec![],
            ids: vec![],
            ptrs: vec![],
        };
        for s in 0..seqs {
            for p in 0..per_seq {
                b.pos.push(p);
                b.n_seq_id.push(1);
                b.ids.push(s);
            }
        }
        let base = b.ids.as_mut_ptr();
        // SAFETY: every offset is below `ids.len()`.
        b.ptrs = (0..b.ids.len()).map(|i| unsafe { base.add(i) }).collect();
        b
    }

    fn raw(&mut self) -> LlamaBatch {
        LlamaBatch {
            n_tokens: self.pos.len() as i32,
            pos: self.pos.as_mut_ptr(),
            n_seq_id: self.n_seq_id.as_mut_ptr(),
            seq_id: self.ptrs.as_mut_ptr(),
            ..LlamaBatch::empty(0)
        }
    }
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
        let mut b = Batch::new(seqs, per_seq);
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
    // llama-server's path: the builder calls of a one-token batch (recorded by the
    // preload's wrappers) and llama_process.
    let ext_cell = Box::new(0u8);
    let b = &*ext_cell as *const u8 as *mut LlamaBatchExt;
    g.bench_function("ext_1seq_x1/direct", |bn| {
        // SAFETY: the stand-in reads nothing behind its arguments.
        bn.iter(|| unsafe { fake_process(black_box(ctx), 1, black_box(b)) })
    });
    let mut pos = 0;
    g.bench_function("ext_1seq_x1/wrapped", |bn| {
        bn.iter(|| {
            ext::cleared(b);
            ext::added(b, 0, 0);
            ext::pos_set(b, 0, pos);
            pos += 1;
            // SAFETY: the stand-in reads nothing behind its arguments.
            unsafe { interpose::process_with(fake_process, black_box(ctx), 1, black_box(b), facts) }
        })
    });
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
