use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::*;
use crate::kernels::Isa;

/// Deterministic values in about [-1, 1) (a small LCG; no RNG crate needed).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

fn quantized(n: usize, k: usize, dtype: GgmlDType, seed: u64) -> Arc<QTensor> {
    let w = Tensor::from_vec(values(n * k, seed), (n, k), &Device::Cpu).unwrap();
    Arc::new(QTensor::quantize(&w, dtype).unwrap())
}

fn candle_matmul(q: &Arc<QTensor>, x: &[f32], rows: usize) -> Vec<f32> {
    let k = q.shape().dims()[1];
    let xs = Tensor::from_vec(x.to_vec(), (rows, k), &Device::Cpu).unwrap();
    let mm = QMatMul::from_arc(q.clone()).unwrap();
    mm.forward(&xs)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// `|a - b| <= tol * scale` element-wise, where `scale` is the largest magnitude of `b`.
fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * scale,
            "{what}: element {i}: {x} vs {y} (scale {scale})"
        );
    }
}

/// Every available instruction set's product of `packed` with the `rows` rows of `x` is
/// `want` bit for bit (the same integer dot products and the same float steps in every
/// kernel), and each row's is the same computed alone (a row's products do not depend on
/// the rows computed with it).
fn assert_every_isa_gives(want: &[f32], packed: &PackedMatrix, x: &[f32], rows: usize, what: &str) {
    let (n, k) = packed.dims();
    for isa in Isa::available() {
        let got = packed.clone().with_isa(isa).matmul(x, rows);
        assert_eq!(got, want, "{what} {isa:?}, {rows} rows: bit for bit");
        for r in 0..rows {
            let alone = packed
                .clone()
                .with_isa(isa)
                .matmul(&x[r * k..(r + 1) * k], 1);
            assert_eq!(alone, got[r * n..(r + 1) * n], "{what} {isa:?} row {r}");
        }
    }
}

#[test]
fn every_isa_agrees_with_candle_for_each_type_and_any_row_count() {
    for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q4_1] {
        // 37 rows: four whole tiles and one of 5 rows and 3 of padding.
        let (n, k) = (37, 162 * 32);
        let q = quantized(n, k, dtype, 7);
        let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
        for rows in [1, 2, 3, 4, 5, 9] {
            let x = values(rows * k, rows as u64);
            let reference = candle_matmul(&q, &x, rows);
            let scalar = packed.clone().with_isa(Isa::PORTABLE).matmul(&x, rows);
            // candle rounds each activation block's scale to f16 for Q4_1 (Q8_1 blocks),
            // and sums each row's blocks in eight partial lanes, here one exact integer
            // dot product per block.
            let tol = if dtype == GgmlDType::Q4_1 { 2e-3 } else { 1e-5 };
            assert_close(
                &scalar,
                &reference,
                tol,
                &format!("{dtype:?} scalar, {rows} rows"),
            );
            assert_every_isa_gives(&scalar, &packed, &x, rows, &format!("{dtype:?}"));
        }
    }
}

/// A pool of `threads` threads for a test's matmuls.
fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

#[test]
fn parallel_chunks_give_the_sequential_result() {
    // Large enough to be split over the pool (n * k * rows >= PARALLEL_MIN_WORK).
    let (n, k, rows) = (1001, 256, 3);
    assert!(n * k * rows >= PARALLEL_MIN_WORK);
    let q = quantized(n, k, GgmlDType::Q8_0, 3);
    let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
    let x = values(rows * k, 11);
    let split = pool(3).install(|| packed.matmul(&x, rows));
    let one = pool(1).install(|| packed.matmul(&x, rows));
    assert_eq!(split, one);
    // One piece of 126 tiles, computed `GROUP_TILES` at a time: the same as candle's.
    assert_close(
        &one,
        &candle_matmul(&q, &x, rows),
        1e-5,
        "one piece of many tiles",
    );
}

#[test]
fn many_rows_over_weights_larger_than_a_span_give_each_rows_product() {
    // One piece (one thread) of 1,100 weight rows, 2 KiB a tile: three spans of
    // `SPAN_BYTES` (512, 512 and 76 rows, the last tile padded), each run by three groups
    // of activation rows (4, 4 and 1).
    let (n, k, rows) = (1100, 256, 9);
    let tile_bytes = k / BLOCK * Kind::Q8_0.tile_block_bytes();
    assert!(n * tile_bytes / TILE > 2 * SPAN_BYTES);
    let q = quantized(n, k, GgmlDType::Q8_0, 5);
    let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
    let x = values(rows * k, 13);
    let one = pool(1);
    let want = one.install(|| packed.clone().with_isa(Isa::PORTABLE).matmul(&x, rows));
    one.install(|| assert_every_isa_gives(&want, &packed, &x, rows, "spans"));
    assert_close(&want, &candle_matmul(&q, &x, rows), 1e-5, "spans");
}

#[test]
fn several_matrices_in_one_pass_give_each_ones_product() {
    let k = 256;
    let qs: Vec<_> = [
        (600, GgmlDType::Q8_0),
        (200, GgmlDType::Q4_1),
        (37, GgmlDType::Q4_0),
    ]
    .into_iter()
    .map(|(n, t)| quantized(n, k, t, n as u64))
    .collect();
    let ps: Vec<PackedMatrix> = qs
        .iter()
        .map(|q| PackedMatrix::from_qtensor(q).unwrap().unwrap())
        .collect();
    let refs: Vec<&PackedMatrix> = ps.iter().collect();
    let (three, one) = (pool(3), pool(1));
    for rows in [1, 3, 6] {
        let x = values(rows * k, 40 + rows as u64);
        let together = three.install(|| PackedMatrix::matmul_many(&refs, &x, rows));
        assert_eq!(together.len(), 3);
        for (p, got) in ps.iter().zip(&together) {
            let alone = one.install(|| p.matmul(&x, rows));
            assert_eq!(got, &alone, "{:?}, {rows} rows", p.kind());
        }
    }
    let empty = PackedMatrix::matmul_many(&refs, &[], 0);
    assert!(empty.iter().all(Vec::is_empty));
}

#[test]
fn dequantize_gives_candles_weights() {
    for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q4_1] {
        let q = quantized(65, 96, dtype, 5);
        let ours = PackedMatrix::from_qtensor(&q)
            .unwrap()
            .unwrap()
            .dequantize();
        let theirs: Vec<f32> = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        // Q4_1 computes `d * u + m` in another order than candle's.
        assert_close(&ours, &theirs, 1e-6, &format!("{dtype:?}"));
    }
}

#[test]
fn other_types_and_shapes_are_not_packed() {
    assert!(
        PackedMatrix::from_qtensor(&quantized(8, 256, GgmlDType::Q3K, 1))
            .unwrap()
            .is_none()
    );
    let v = Tensor::from_vec(values(64, 1), 64, &Device::Cpu).unwrap();
    let one_d = QTensor::quantize(&v, GgmlDType::Q8_0).unwrap();
    assert!(PackedMatrix::from_qtensor(&one_d).unwrap().is_none());
    assert!(!PackedMatrix::supports(GgmlDType::Q8_0, 48));
}

#[test]
fn hostile_weights_compute_without_panicking() {
    // Quants at -128 (never written by a quantizer, legal in a file) and non-finite scales.
    let (n, k) = (4, 64);
    let q = quantized(n, k, GgmlDType::Q8_0, 9);
    let mut bytes = q.data().unwrap().into_owned();
    for b in bytes.chunks_exact_mut(34) {
        b[2..].fill(0x80);
    }
    bytes[0..2].copy_from_slice(&half::f16::NAN.to_le_bytes());
    bytes[34..36].copy_from_slice(&half::f16::INFINITY.to_le_bytes());
    let hostile = QTensor::new(
        candle_core::quantized::QStorage::from_data(
            std::borrow::Cow::Owned(bytes),
            &Device::Cpu,
            GgmlDType::Q8_0,
        )
        .unwrap(),
        (n, k),
    )
    .unwrap();
    let packed = PackedMatrix::from_qtensor(&hostile).unwrap().unwrap();
    let x = values(2 * k, 2);
    for isa in Isa::available() {
        let out = packed.clone().with_isa(isa).matmul(&x, 2);
        assert_eq!(out.len(), 2 * n);
        // Rows 2 and 3 have finite scales: their dot with -128 everywhere is finite.
        assert!(out[2].is_finite() && out[3].is_finite(), "{isa:?}: {out:?}");
    }
}

#[test]
#[should_panic(expected = "activations are not rows * k")]
fn wrong_activation_length_is_refused() {
    let packed = PackedMatrix::from_qtensor(&quantized(4, 64, GgmlDType::Q8_0, 1))
        .unwrap()
        .unwrap();
    packed.matmul(&[0.0; 10], 1);
}

/// Random ggml super-blocks of `dtype` for an `(n, k)` matrix: random quant and scale
/// bytes (every 6-bit scale and minimum, every signed Q6_K scale from -128 to 127), and
/// f16 super-block scales drawn from tiny, ordinary, large and zero magnitudes of both
/// signs.
fn random_k(n: usize, k: usize, dtype: GgmlDType, seed: u64) -> Arc<QTensor> {
    let src = match dtype {
        GgmlDType::Q4K => 144,
        GgmlDType::Q5K => 176,
        GgmlDType::Q6K => 210,
        other => panic!("{other:?} is not a K-quant"),
    };
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut byte = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 24) as u8
    };
    let extremes = [6.0e-5f32, 1.0e-3, 0.02, 1.0, 300.0, 60000.0, 0.0];
    let mut bytes = vec![0u8; n * k / 256 * src];
    for block in bytes.chunks_exact_mut(src) {
        block.iter_mut().for_each(|b| *b = byte());
        let mut scale = || {
            let v = extremes[usize::from(byte()) % extremes.len()];
            let v = if byte() & 1 == 1 { -v } else { v };
            half::f16::from_f32(v).to_le_bytes()
        };
        if dtype == GgmlDType::Q6K {
            block[208..210].copy_from_slice(&scale());
        } else {
            block[0..2].copy_from_slice(&scale());
            block[2..4].copy_from_slice(&scale());
        }
    }
    let storage = candle_core::quantized::QStorage::from_data(
        std::borrow::Cow::Owned(bytes),
        &Device::Cpu,
        dtype,
    )
    .unwrap();
    Arc::new(QTensor::new(storage, (n, k)).unwrap())
}

fn candle_weights(q: &QTensor) -> Vec<f32> {
    q.dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

const K_TYPES: [GgmlDType; 3] = [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K];

/// The packed K-quants' weights are candle's dequantization of the same blocks, bit for bit
/// (so the decoding of ggml's layouts is candle's).
#[test]
fn k_quants_dequantize_as_candle_does() {
    for dtype in K_TYPES {
        for seed in 1..4 {
            let q = random_k(13, 512, dtype, seed);
            let ours = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
            assert_eq!(ours.dims(), (13, 512));
            let (ours, theirs) = (ours.dequantize(), candle_weights(&q));
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&ours), bits(&theirs), "{dtype:?} seed {seed}");
        }
    }
}

/// Every instruction set gives the portable reference's products bit for bit on random
/// K-quant blocks with extreme scales, for any number of rows and alone or together; and
/// the reference is the exact product of candle's dequantized weights with the quantized
/// activations, to the rounding of f32 sums.
#[test]
fn k_quant_kernels_match_the_reference_and_candles_weights() {
    for dtype in K_TYPES {
        // 37 rows: four whole tiles and one of 5 rows and 3 of padding; 3 super-blocks.
        let (n, k) = (37, 768);
        let q = random_k(n, k, dtype, 11);
        let w = candle_weights(&q);
        let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
        for rows in [1, 2, 3, 4, 5, 9] {
            let x = values(rows * k, 100 + rows as u64);
            let scalar = packed.clone().with_isa(Isa::PORTABLE).matmul(&x, rows);
            // The reference in f64: candle's weights times the activations as quantized
            // for the K-quants (one scale per super-block).
            let acts = activations::QuantizedRows::new_grouped(&x, rows, k, SUPER, Isa::PORTABLE);
            for m in 0..rows {
                let a = acts.row(m);
                let xs: Vec<f64> = (0..k)
                    .map(|j| f64::from(a.quants[j]) * f64::from(a.scales[j / BLOCK]))
                    .collect();
                let want: Vec<f64> = (0..n)
                    .map(|r| {
                        w[r * k..(r + 1) * k]
                            .iter()
                            .zip(&xs)
                            .map(|(&w, &x)| f64::from(w) * x)
                            .sum()
                    })
                    .collect();
                // Relative to the sum of magnitudes (the f32 terms' rounding).
                for r in 0..n {
                    let mag: f64 = w[r * k..(r + 1) * k]
                        .iter()
                        .zip(&xs)
                        .map(|(&w, &x)| (f64::from(w) * x).abs())
                        .sum();
                    let got = f64::from(scalar[m * n + r]);
                    assert!(
                        (got - want[r]).abs() <= 1e-5 * mag.max(1e-30),
                        "{dtype:?} row {m} weight row {r}: {got} vs {} (of {mag})",
                        want[r]
                    );
                }
            }
            assert_every_isa_gives(&scalar, &packed, &x, rows, &format!("{dtype:?}"));
        }
    }
}

/// Products over spans, one piece on one thread (37 rows: five tiles, the last padded)
/// give the reference's products bit for bit, for every type and in every group of
/// activation rows: for the K-quants, two pairs of tiles on the wide kernel where the CPU
/// has it (`wide.rs`) and an odd fifth tile on the 256-bit one.
#[test]
fn products_over_spans_pair_tiles_and_give_the_reference() {
    let (n, k, rows) = (37, 512, 9);
    let one = pool(1);
    let plain = [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q4_1];
    for dtype in plain.into_iter().chain(K_TYPES) {
        let q = if plain.contains(&dtype) {
            quantized(n, k, dtype, 17)
        } else {
            random_k(n, k, dtype, 17)
        };
        let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
        let x = values(rows * k, 19);
        let want = one.install(|| packed.clone().with_isa(Isa::PORTABLE).matmul(&x, rows));
        one.install(|| assert_every_isa_gives(&want, &packed, &x, rows, &format!("{dtype:?}")));
    }
}

/// On weights a quantizer writes (candle's), the packed K-quant products agree with candle's
/// own K-quant matmul to the order of the float sums (1e-5 of the largest product): both
/// quantize the activations as Q8_K does, one f32 scale per 256 values (with a scale per 32
/// values, as before, they differed by 3e-3 and more).
#[test]
fn k_quant_kernels_agree_with_candles_matmul() {
    for dtype in K_TYPES {
        let (n, k) = (40, 512);
        let q = quantized(n, k, dtype, 21);
        let packed = PackedMatrix::from_qtensor(&q).unwrap().unwrap();
        for rows in [1, 3] {
            let x = values(rows * k, rows as u64 + 5);
            let theirs = candle_matmul(&q, &x, rows);
            let ours = packed.matmul(&x, rows);
            assert_close(&ours, &theirs, 1e-5, &format!("{dtype:?}, {rows} rows"));
        }
    }
}

#[test]
fn k_quants_need_whole_super_blocks() {
    assert!(PackedMatrix::supports(GgmlDType::Q4K, 512));
    assert!(!PackedMatrix::supports(GgmlDType::Q6K, 288));
    assert!(!PackedMatrix::supports(GgmlDType::Q2K, 512));
}
