//! Decode attention of a batch: candle ops per sequence (what the engine ran before, and
//! still runs on a GPU) against the CPU kernel `attend_cpu`, which attends for the
//! whole batch in one call over the cache buffers in place, in its two forms: the portable
//! loops (`Isa::PORTABLE`) and the AVX2 code the engine runs where it can (`Isa::best()`).
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench attention -- [--threads N] [--repeat N]
//! ```
//!
//! Head layouts of the embedded model (8 query heads over 4 K/V heads of 32) and of
//! SmolLM2-135M (9 over 3, of 64); batches of 1 and 4 sequences; every sequence holding
//! `len` cached positions in a buffer of 4,096. Each figure is the best of `--repeat`
//! rounds of one layer's attention, the three interleaved within each round; the last two
//! columns are the native kernel's time over the candle ops' and over the portable
//! kernel's (below 1: the native kernel is faster).

mod support;

use candle_core::{Device, Tensor};
use hydra_engine_core::kernels::attention::{attend, attend_cpu_with, CachedSequence, Heads};
use hydra_engine_core::kernels::Isa;

const CAPACITY: usize = 4096;

fn main() -> candle_core::Result<()> {
    let (threads, repeat) = support::start(50)?;
    let dev = Device::Cpu;
    println!("# decode attention of one layer, {threads} threads, best of {repeat}; ms per call");
    println!(
        "| model heads | batch | cached positions | candle ops | portable kernel | native \
         kernel | native / candle ops | native / portable |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let layouts = [("embedded 8/4x32", 8, 4, 32), ("SmolLM2 9/3x64", 9, 3, 64)];
    for (name, n_head, n_kv_head, head_dim) in layouts {
        let heads = Heads {
            n_head,
            n_kv_head,
            head_dim,
        };
        for batch in [1usize, 4] {
            for len in [16usize, 256, 512, 1000, 2048] {
                let buffers: Vec<(Tensor, Tensor)> = (0..batch)
                    .map(|_| {
                        let shape = (1, n_kv_head, CAPACITY, head_dim);
                        Ok((
                            Tensor::randn(0f32, 1.0, shape, &dev)?,
                            Tensor::randn(0f32, 1.0, shape, &dev)?,
                        ))
                    })
                    .collect::<candle_core::Result<_>>()?;
                let q = Tensor::randn(0f32, 1.0, (batch, n_head, 1, head_dim), &dev)?;
                let seqs: Vec<CachedSequence<'_>> = buffers
                    .iter()
                    .map(|(k, v)| CachedSequence {
                        k,
                        v,
                        len,
                        queries: 1,
                    })
                    .collect();
                let ops = || {
                    let ys: Vec<Tensor> = buffers
                        .iter()
                        .enumerate()
                        .map(|(j, (k, v))| {
                            attend(
                                &q.narrow(0, j, 1)?,
                                &k.narrow(2, 0, len)?,
                                &v.narrow(2, 0, len)?,
                                None,
                                heads,
                            )
                        })
                        .collect::<candle_core::Result<_>>()
                        .expect("candle-op attention");
                    Tensor::cat(&ys, 1).expect("cat");
                };
                let portable = || {
                    attend_cpu_with(&q, &seqs, heads, Isa::PORTABLE).expect("portable");
                };
                let native = || {
                    attend_cpu_with(&q, &seqs, heads, Isa::best()).expect("native");
                };
                ops();
                portable();
                native();
                let (mut a, mut b, mut c) = (f64::MAX, f64::MAX, f64::MAX);
                for _ in 0..repeat {
                    a = a.min(support::ms(ops));
                    b = b.min(support::ms(portable));
                    c = c.min(support::ms(native));
                }
                println!(
                    "| {name} | {batch} | {len} | {a:.4} | {b:.4} | {c:.4} | {:.2} | {:.2} |",
                    c / a,
                    c / b
                );
            }
        }
    }
    Ok(())
}
