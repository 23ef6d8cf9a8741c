//! One layer's weight matmuls by every strategy the engine has or had, side by side:
//! candle's quantized kernels, the engine's packed kernels (`kernels::packed`),
//! dequantizing once per chunk for the f32 GEMM, and the GEMM alone.
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench qmatmul -- [--threads N] [--repeat N]
//!     [--layer smollm2|llama-1b] [--types q8_0,q4_1,q4_0,q4k,q5k,q6k] [--rows 1,128]
//! ```
//!
//! `--layer smollm2` (the default): one SmolLM2-135M layer's seven matrices (576 x 576 Q
//! and O, 192 x 576 K and V, 1536 x 576 gate and up, 576 x 1536 down), Q8_0 (what the
//! engine runs after converting the Q4_1 file), Q4_1 and Q4_0 (the embedded model's type),
//! for 1 to 512 rows. `--layer llama-1b`: one layer of a 1.1B llama (TinyLlama's shape:
//! 2048 x 2048 Q and O, 256 x 2048 K and V, 5632 x 2048 gate and up, 2048 x 5632 down),
//! by default Q4_K, Q6_K and Q8_0 for 1 and 128 rows: the width at which the K-quants were
//! measured behind llama.cpp. Each strategy runs the seven matmuls on the same random
//! activations, on a worker of rayon's pool as the engine's compute loop does; every
//! figure is the best of `--repeat` runs, strategies interleaved:
//! - `candle`: `QMatMul::forward` (activations quantized to Q8 rows, integer dot products,
//!   16-row tiles, candle's spinning pool);
//! - `packed`: `PackedMatrix::matmul` on the best instruction set of this CPU, and
//!   `packed avx2` forced to AVX2 (the difference is AVX-512 VNNI);
//! - `dequant+f32`: dequantize the seven packed matrices, then `x @ W^T` with candle's f32
//!   GEMM (the cost of dequantizing is paid per chunk, as it is in the engine);
//! - `f32 only`: the GEMM alone on weights kept in f32 (an upper bound that would cost 4x
//!   the weight memory).
//!
//! The `GB/s` columns are the layer's weights in their file's type (what a decode step must
//! read) over the best time: for one row, compare them with `--bench bandwidth`.

mod support;

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use hydra_engine_core::kernels::packed::PackedMatrix;
use hydra_engine_core::kernels::{Isa, Level};

const SMOLLM2: [(usize, usize); 7] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (1536, 576),
    (576, 1536),
];

const LLAMA_1B: [(usize, usize); 7] = [
    (2048, 2048),
    (256, 2048),
    (256, 2048),
    (2048, 2048),
    (5632, 2048),
    (5632, 2048),
    (2048, 5632),
];

/// What the command line asks for beyond `support::start`'s flags.
struct Plan {
    layer: &'static str,
    shapes: [(usize, usize); 7],
    types: Vec<GgmlDType>,
    rows: Vec<usize>,
}

/// `--layer`, `--types` and `--rows`; an unknown value is an error that says what is known.
fn plan() -> candle_core::Result<Plan> {
    let (mut layer, mut types, mut rows) = ("smollm2".to_owned(), None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--layer" => layer = it.next().unwrap_or_default(),
            "--types" => types = it.next(),
            "--rows" => rows = it.next(),
            _ => {}
        }
    }
    let bad = |what: String| candle_core::Error::Msg(what);
    let (layer, shapes, default_types, default_rows) = match layer.as_str() {
        "smollm2" => (
            "SmolLM2-135M",
            SMOLLM2,
            "q8_0,q4_1,q4_0",
            "1,2,4,8,16,32,64,128,512",
        ),
        "llama-1b" => ("1.1B llama", LLAMA_1B, "q4k,q6k,q8_0", "1,128"),
        other => return Err(bad(format!("--layer {other:?}: smollm2 or llama-1b"))),
    };
    let types = types
        .as_deref()
        .unwrap_or(default_types)
        .split(',')
        .map(|t| match t {
            "q8_0" => Ok(GgmlDType::Q8_0),
            "q4_0" => Ok(GgmlDType::Q4_0),
            "q4_1" => Ok(GgmlDType::Q4_1),
            "q4k" => Ok(GgmlDType::Q4K),
            "q5k" => Ok(GgmlDType::Q5K),
            "q6k" => Ok(GgmlDType::Q6K),
            other => Err(bad(format!(
                "--types: {other:?} (q8_0 q4_0 q4_1 q4k q5k q6k)"
            ))),
        })
        .collect::<candle_core::Result<_>>()?;
    let rows = rows
        .as_deref()
        .unwrap_or(default_rows)
        .split(',')
        .map(|r| r.parse().ok().filter(|&n: &usize| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("--rows: positive counts, comma-separated".into()))?;
    Ok(Plan {
        layer,
        shapes,
        types,
        rows,
    })
}

/// One layer's seven matrices of one type, as each strategy holds them.
struct Layer {
    /// candle's quantized matrices.
    mms: Vec<QMatMul>,
    /// The packed ones on the best instruction set, and forced to AVX2 (empty without it).
    packed: Vec<PackedMatrix>,
    packed_avx2: Vec<PackedMatrix>,
    /// The weights dequantized once, for the f32 GEMM alone.
    fs: Vec<Tensor>,
    /// Bytes of the seven matrices in their type.
    weight_bytes: usize,
}

/// Random weights of `shapes`, quantized to `dtype`.
fn layer(shapes: &[(usize, usize)], dtype: GgmlDType) -> candle_core::Result<Layer> {
    let dev = Device::Cpu;
    let mut qs = Vec::new();
    let mut fs = Vec::new();
    for &(n, k) in shapes {
        let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?;
        let q = Arc::new(QTensor::quantize(&w, dtype)?);
        fs.push(q.dequantize(&dev)?);
        qs.push(q);
    }
    let mms = qs
        .iter()
        .map(|q| QMatMul::from_arc(q.clone()))
        .collect::<candle_core::Result<_>>()?;
    let packed: Vec<PackedMatrix> = qs
        .iter()
        .map(|q| Ok(PackedMatrix::from_qtensor(q)?.expect("every type asked for packs")))
        .collect::<candle_core::Result<_>>()?;
    let packed_avx2 = packed
        .iter()
        .filter_map(|p| Isa::get(Level::Avx2).map(|isa| p.clone().with_isa(isa)))
        .collect();
    Ok(Layer {
        mms,
        packed,
        packed_avx2,
        fs,
        weight_bytes: qs.iter().map(|q| q.storage_size_in_bytes()).sum(),
    })
}

/// The best of `repeat` rounds (after a warm-up round) of each strategy on `rows` random
/// activation rows, in ms: candle, packed, packed AVX2 (NaN without it), dequantize and
/// the f32 GEMM, the f32 GEMM alone; strategies interleaved within each round.
fn best_times(
    l: &Layer,
    shapes: &[(usize, usize)],
    rows: usize,
    repeat: usize,
) -> candle_core::Result<[f64; 5]> {
    let xs: Vec<Tensor> = shapes
        .iter()
        .map(|&(_, k)| Tensor::randn(0f32, 1.0, (1, rows, k), &Device::Cpu))
        .collect::<candle_core::Result<_>>()?;
    let xv: Vec<Vec<f32>> = xs
        .iter()
        .map(|x| x.flatten_all()?.to_vec1())
        .collect::<candle_core::Result<_>>()?;
    let candle = || {
        for (m, x) in l.mms.iter().zip(&xs) {
            m.forward(x).expect("quantized matmul");
        }
    };
    let run_packed = |ps: &[PackedMatrix]| {
        for (p, x) in ps.iter().zip(&xv) {
            std::hint::black_box(p.matmul(x, rows));
        }
    };
    let dequant = || {
        for (p, x) in l.packed.iter().zip(&xs) {
            let (n, k) = p.dims();
            let w = Tensor::from_vec(p.dequantize(), (n, k), &Device::Cpu).expect("w");
            x.broadcast_matmul(&w.t().expect("t")).expect("f32 matmul");
        }
    };
    let f32_only = || {
        for (w, x) in l.fs.iter().zip(&xs) {
            x.broadcast_matmul(&w.t().expect("t")).expect("f32 matmul");
        }
    };
    let mut best = [f64::MAX; 5];
    hydra_engine_core::threads::run_in_pool(|| {
        for round in 0..=repeat {
            let times = [
                support::ms(candle),
                support::ms(|| run_packed(&l.packed)),
                if l.packed_avx2.is_empty() {
                    f64::NAN
                } else {
                    support::ms(|| run_packed(&l.packed_avx2))
                },
                support::ms(dequant),
                support::ms(f32_only),
            ];
            // Round 0 warms caches and pools.
            if round > 0 {
                for (b, t) in best.iter_mut().zip(times) {
                    *b = b.min(t);
                }
            }
        }
    });
    Ok(best)
}

fn main() -> candle_core::Result<()> {
    let (threads, repeat) = support::start(5)?;
    let plan = plan()?;
    println!("# one {} layer's 7 weight matmuls, {threads} threads, best of {repeat}; ms per call (and per row)", plan.layer);
    println!("| weights | rows | candle | packed ({:?}) | packed avx2 | dequant+f32 | f32 only | packed / candle | dequant+f32 / candle | GB/s candle | GB/s packed |", Isa::best().level());
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for dtype in plan.types {
        let l = layer(&plan.shapes, dtype)?;
        for &rows in &plan.rows {
            let best = best_times(&l, &plan.shapes, rows, repeat)?;
            let per = |ms: f64| format!("{ms:.3} ({:.4})", ms / rows as f64);
            let gbs = |ms: f64| l.weight_bytes as f64 / (ms * 1e6);
            println!(
                "| {dtype:?} | {rows} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.1} |",
                per(best[0]),
                per(best[1]),
                per(best[2]),
                per(best[3]),
                per(best[4]),
                best[1] / best[0],
                best[3] / best[0],
                gbs(best[0]),
                gbs(best[1])
            );
        }
    }
    Ok(())
}
