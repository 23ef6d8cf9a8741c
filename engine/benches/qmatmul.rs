//! Where a prefill chunk's weight matmuls spend their time: candle's quantized kernels
//! against dequantizing the layer's weights once per chunk and running the f32 GEMM.
//!
//! ```text
//! cargo bench -p hydra-engine --bench qmatmul -- [--threads N] [--repeat N]
//! ```
//!
//! One SmolLM2-135M layer's seven matrices (576 x 576 Q and O, 192 x 576 K and V,
//! 1536 x 576 gate and up, 576 x 1536 down), Q8_0 (what the engine runs after converting
//! the Q4_1 file) and Q4_0 (the embedded model's type), for chunks of 1 to 512 rows. Each
//! strategy runs the seven matmuls on the same random activations; every figure is the
//! best of `--repeat` runs, strategies interleaved:
//! - `quantized`: `QMatMul::forward` (activations quantized to Q8 rows, integer dot
//!   products, 16-row tiles);
//! - `dequant+f32`: dequantize the seven matrices, then `x @ W^T` with candle's f32 GEMM
//!   (the cost of dequantizing is paid per chunk, as it would be in the engine);
//! - `f32 only`: the GEMM alone on weights kept in f32 (an upper bound that would cost 4x
//!   the weight memory).

use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

const SHAPES: [(usize, usize); 7] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
];

fn best_ms(repeat: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    best
}

fn main() -> candle_core::Result<()> {
    let mut threads = 2;
    let mut repeat = 5;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(2),
            "--repeat" => repeat = it.next().and_then(|v| v.parse().ok()).unwrap_or(5),
            _ => {}
        }
    }
    hydra_engine::threads::set_cpu_threads(threads).map_err(candle_core::Error::wrap)?;
    let dev = Device::Cpu;
    println!("# one SmolLM2-135M layer's 7 weight matmuls, {threads} threads, best of {repeat}; ms per chunk (and per row)");
    println!("| weights | rows | quantized | dequant+f32 | f32 only | dequant+f32 / quantized |");
    println!("|---|---:|---:|---:|---:|---:|");
    for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0] {
        let mut qs = Vec::new();
        let mut fs = Vec::new();
        for (n, k) in SHAPES {
            let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?;
            let q = Arc::new(QTensor::quantize(&w, dtype)?);
            fs.push(q.dequantize(&dev)?);
            qs.push(q);
        }
        let mms: Vec<QMatMul> = qs
            .iter()
            .map(|q| QMatMul::from_arc(q.clone()))
            .collect::<candle_core::Result<_>>()?;
        for rows in [1usize, 8, 64, 128, 512] {
            let xs: Vec<Tensor> = SHAPES
                .iter()
                .map(|&(_, k)| Tensor::randn(0f32, 1.0, (1, rows, k), &dev))
                .collect::<candle_core::Result<_>>()?;
            let mut quantized = || {
                for (m, x) in mms.iter().zip(&xs) {
                    m.forward(x).expect("quantized matmul");
                }
            };
            let mut dequant = || {
                for (q, x) in qs.iter().zip(&xs) {
                    let w = q.dequantize(&dev).expect("dequantize");
                    x.broadcast_matmul(&w.t().expect("t")).expect("f32 matmul");
                }
            };
            let mut f32_only = || {
                for (w, x) in fs.iter().zip(&xs) {
                    x.broadcast_matmul(&w.t().expect("t")).expect("f32 matmul");
                }
            };
            quantized();
            dequant();
            f32_only();
            let (mut a, mut b, mut c) = (f64::MAX, f64::MAX, f64::MAX);
            for _ in 0..repeat {
                a = a.min(best_ms(1, &mut quantized));
                b = b.min(best_ms(1, &mut dequant));
                c = c.min(best_ms(1, &mut f32_only));
            }
            let per = |ms: f64| format!("{ms:.2} ({:.3})", ms / rows as f64);
            println!(
                "| {dtype:?} | {rows} | {} | {} | {} | {:.2} |",
                per(a),
                per(b),
                per(c),
                b / a
            );
        }
    }
    Ok(())
}
