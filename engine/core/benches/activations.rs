//! The activation-side work of a decode step, portable code against the engine's AVX2
//! code, side by side: quantizing activation rows for the packed matmuls
//! (`QuantizedRows::new_with`), and the gated SiLU of the feed-forward block
//! (`silu_mul_with`, whose portable form is candle's `silu` and multiply).
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench activations -- [--repeat N]
//! ```
//!
//! Row widths of the embedded model (256 in, 768 in the feed-forward block) and of
//! SmolLM2-135M (576 and 1536), for 1 and 4 rows (one or four decoding slots). Each figure
//! is the best of `--repeat` rounds of 200 calls, the two forms interleaved within each
//! round, in microseconds per call; the last column is native time / portable time (below
//! 1: the native code is faster). On one thread, a worker of rayon's pool as the engine's
//! compute loop is: a step runs this work on the compute thread between the pool's
//! parallel sections.

use std::hint::black_box;
use std::time::Instant;

use candle_core::{Device, Tensor};
use clap::Parser;
use hydra_engine_core::kernels::packed::activations::QuantizedRows;
use hydra_engine_core::kernels::silu_mul::silu_mul_with;
use hydra_engine_core::kernels::Isa;

const CALLS: usize = 200;

/// Microseconds per call of `f`, over [`CALLS`] calls.
fn per_call_us(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..CALLS {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / CALLS as f64
}

/// The best of `repeat` rounds of each of `a` and `b`, interleaved.
fn best_of(repeat: usize, a: &mut dyn FnMut(), b: &mut dyn FnMut()) -> (f64, f64) {
    let (mut ta, mut tb) = (f64::MAX, f64::MAX);
    for _ in 0..repeat {
        ta = ta.min(per_call_us(a));
        tb = tb.min(per_call_us(b));
    }
    (ta, tb)
}

/// Deterministic values in [-4, 4).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
        })
        .collect()
}

/// The activation work of a decode step: portable code against the AVX2 code.
#[derive(Parser)]
struct Args {
    /// Rounds of 200 calls; each figure is the best round.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> candle_core::Result<()> {
    let args = Args::parse();
    // As the engine binary does (`hydra_engine_core::memory`).
    hydra_engine_core::memory::keep_freed_memory();
    hydra_engine_core::threads::set_cpu_threads(1).map_err(candle_core::Error::wrap)?;
    // On a worker of the pool, as the engine's compute loop runs (candle's ops then run
    // inline instead of being handed to the pool).
    hydra_engine_core::threads::run_in_pool(|| run(args.repeat as usize))
}

fn run(repeat: usize) -> candle_core::Result<()> {
    println!("# activation work of a decode step, 1 thread, best of {repeat} x {CALLS} calls; us per call");
    println!("| work | rows x width | portable | native | native / portable |");
    println!("|---|---:|---:|---:|---:|");
    for (rows, k) in [(1, 256), (4, 256), (4, 768), (1, 576), (4, 576), (4, 1536)] {
        let x = values(rows * k, (rows * k) as u64);
        let (p, n) = best_of(
            repeat,
            &mut || {
                black_box(QuantizedRows::new_with(&x, rows, k, Isa::PORTABLE));
            },
            &mut || {
                black_box(QuantizedRows::new_with(&x, rows, k, Isa::best()));
            },
        );
        println!(
            "| quantize rows | {rows} x {k} | {p:.2} | {n:.2} | {:.2} |",
            n / p
        );
    }
    for (rows, k) in [(1, 768), (4, 768), (1, 1536), (4, 1536)] {
        let gate = Tensor::from_vec(values(rows * k, 7), (1, rows, k), &Device::Cpu)?;
        let up = Tensor::from_vec(values(rows * k, 9), (1, rows, k), &Device::Cpu)?;
        let (p, n) = best_of(
            repeat,
            &mut || {
                black_box(silu_mul_with(&gate, &up, Isa::PORTABLE).expect("candle ops"));
            },
            &mut || {
                black_box(silu_mul_with(&gate, &up, Isa::best()).expect("fused"));
            },
        );
        println!(
            "| silu(gate) * up | {rows} x {k} | {p:.2} | {n:.2} | {:.2} |",
            n / p
        );
    }
    Ok(())
}
