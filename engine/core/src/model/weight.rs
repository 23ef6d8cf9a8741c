//! A weight matrix of a decoder and the one rule for multiplying activations with it.
//!
//! On a CPU with AVX2, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K matrices are repacked at load for the engine's
//! own kernels ([`crate::kernels::packed`]), which run every row count: with the tile layout they
//! take 0.34-0.80x the time of dequantizing and candle's f32 GEMM at 32 to 512 rows
//! (`engine/core/benches/qmatmul.rs`, one SmolLM2 layer, BENCHMARKS.md, engine throughput against llama.cpp). Every other type,
//! every matrix on other CPUs and every matrix on a GPU stays a candle `QMatMul`; on the CPU
//! from [`DEQUANT_MIN_ROWS`] rows such a matrix is dequantized for the f32 GEMM, which
//! measured 0.11-0.20x candle's quantized kernels' time at 64-512 rows.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor, D};

use crate::kernels::packed::PackedMatrix;

/// Rows from which a CPU matmul of a candle `QMatMul` dequantizes the matrix and runs the
/// f32 GEMM.
const DEQUANT_MIN_ROWS: usize = 64;

/// A weight matrix `(out, in)`.
#[derive(Debug)]
pub(crate) enum Weight {
    /// Repacked for [`PackedMatrix`] (CPU with AVX2: Q8_0, Q4_0, Q4_1 and the K-quants
    /// Q4_K, Q5_K, Q6_K).
    Packed(PackedMatrix),
    /// candle's quantized matmul (other types, and GPUs).
    Candle(QMatMul),
}

impl Weight {
    /// The weight for `t` on `device`.
    pub(crate) fn new(t: Arc<QTensor>, device: &Device) -> candle_core::Result<Self> {
        if device.is_cpu() && PackedMatrix::is_fast_here() {
            if let Some(p) = PackedMatrix::from_qtensor(&t)? {
                return Ok(Self::Packed(p));
            }
        }
        Ok(Self::Candle(QMatMul::from_arc(t)?))
    }

    /// The weight's type and the kernel its products run on (`packed avx2`, `candle`).
    pub(crate) fn kernel(&self) -> (&'static str, String) {
        match self {
            Self::Packed(p) => (
                crate::model::quant::dtype_name(p.dtype()),
                format!("packed {}", p.isa().level().name()),
            ),
            Self::Candle(QMatMul::QTensor(q)) => {
                (crate::model::quant::dtype_name(q.dtype()), "candle".into())
            }
            Self::Candle(QMatMul::Tensor(_)) => ("F32", "candle".into()),
            Self::Candle(QMatMul::TensorF16(_)) => ("F16", "candle".into()),
        }
    }

    /// `xs @ W^T` over the last dimension of `xs`.
    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let [y] = Self::forward_many([self], xs)?;
        Ok(y)
    }

    /// `[xs @ W^T for W in ws]`. The packed matrices among `ws` run in one pass of the
    /// packed kernels with the activations quantized once ([`PackedMatrix::matmul_many`]);
    /// every other product runs on its own.
    pub(crate) fn forward_many<const N: usize>(
        ws: [&Weight; N],
        xs: &Tensor,
    ) -> candle_core::Result<[Tensor; N]> {
        let k = xs.dim(D::Minus1)?;
        let rows = xs.elem_count() / k.max(1);
        let packed: Vec<&PackedMatrix> = ws.iter().filter_map(|w| w.kernel_for(k)).collect();
        let mut results = if packed.is_empty() {
            Vec::new()
        } else {
            let x = xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            PackedMatrix::matmul_many(&packed, &x, rows)
        }
        .into_iter();
        let mut dims = xs.dims().to_vec();
        let outs: Vec<Tensor> = ws
            .iter()
            .map(|w| match w.kernel_for(k) {
                Some(p) => {
                    *dims.last_mut().expect("k was read from the last dimension") = p.dims().0;
                    let out = results.next().expect("one result per packed matrix");
                    Tensor::from_vec(out, dims.as_slice(), xs.device())
                }
                None => w.forward_alone(xs, k, rows),
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(outs.try_into().expect("one result per weight"))
    }

    /// The packed matrix, when activations of width `k` go through the packed kernels.
    fn kernel_for(&self, k: usize) -> Option<&PackedMatrix> {
        match self {
            Self::Packed(p) if p.dims().1 == k => Some(p),
            _ => None,
        }
    }

    /// One product on candle's paths: the f32 GEMM from [`DEQUANT_MIN_ROWS`] rows, else
    /// candle's `QMatMul` (a packed matrix reaches here only when `k` does not match it).
    fn forward_alone(&self, xs: &Tensor, k: usize, rows: usize) -> candle_core::Result<Tensor> {
        match self {
            Self::Packed(p) => {
                candle_core::bail!(
                    "matmul: activations have {k} columns, weights {}",
                    p.dims().1
                )
            }
            Self::Candle(QMatMul::QTensor(q))
                if rows >= DEQUANT_MIN_ROWS && xs.device().is_cpu() =>
            {
                xs.broadcast_matmul(&q.dequantize(xs.device())?.t()?)
            }
            Self::Candle(w) => w.forward(xs),
        }
    }
}

/// `Q4_K: packed avx2 (169), Q6_K: packed avx2 (25)`: each weight type of `ws` with its
/// kernels and matrix counts, for the load log.
pub(crate) fn kernel_summary<'a>(ws: impl IntoIterator<Item = &'a Weight>) -> String {
    let mut seen: Vec<((&'static str, String), usize)> = Vec::new();
    for w in ws {
        let k = w.kernel();
        match seen.iter_mut().find(|(s, _)| *s == k) {
            Some((_, n)) => *n += 1,
            None => seen.push((k, 1)),
        }
    }
    seen.iter()
        .map(|((dtype, kernel), n)| format!("{dtype}: {kernel} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::GgmlDType;

    fn weight(n: usize, k: usize, dtype: GgmlDType) -> (Weight, QMatMul) {
        let w = Tensor::randn(0f32, 0.1, (n, k), &Device::Cpu).unwrap();
        let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
        (
            Weight::new(q.clone(), &Device::Cpu).unwrap(),
            QMatMul::from_arc(q).unwrap(),
        )
    }

    #[test]
    fn packed_and_candle_weights_together_give_candles_products() {
        let k = 256;
        // Matrix heights that are not multiples of 16: for those (at this width) candle picks its
        // repacked tile kernels, which measured up to 0.05 away from its own one-row kernel
        // and from the packed and portable paths, which agree with each other.
        let (a, a_ref) = weight(50, k, GgmlDType::Q8_0);
        let (b, b_ref) = weight(16, k, GgmlDType::Q2K);
        let (c, c_ref) = weight(41, k, GgmlDType::Q4_0);
        if PackedMatrix::is_fast_here() {
            assert!(matches!(a, Weight::Packed(_)) && matches!(c, Weight::Packed(_)));
        }
        assert!(matches!(b, Weight::Candle(_)));
        let summary = kernel_summary([&a, &b, &c, &a]);
        assert!(summary.contains("Q2_K: candle (1)"), "{summary}");
        if PackedMatrix::is_fast_here() {
            assert!(summary.starts_with("Q8_0: packed avx"), "{summary}");
            assert!(
                summary.contains("Q8_0: packed") && summary.contains(" (2)"),
                "{summary}"
            );
        }
        for rows in [1, 3, 70] {
            let xs = Tensor::randn(0f32, 1.0, (1, rows, k), &Device::Cpu).unwrap();
            let [ya, yb, yc] = Weight::forward_many([&a, &b, &c], &xs).unwrap();
            for (y, w, r) in [(ya, &a, &a_ref), (yb, &b, &b_ref), (yc, &c, &c_ref)] {
                let alone = w.forward(&xs).unwrap();
                assert_eq!(y.dims(), alone.dims());
                let diff = (&y - &alone).unwrap().abs().unwrap().max_all().unwrap();
                assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0, "{rows} rows");
                if rows < DEQUANT_MIN_ROWS || matches!(w, Weight::Packed(_)) {
                    // Quantized activations on both sides (the f32 GEMM takes candle's
                    // other types from DEQUANT_MIN_ROWS rows). The packed kernels sum
                    // candle's exact block products in another order: a few units in the
                    // last place of the largest product.
                    let theirs = r.forward(&xs).unwrap();
                    let diff = (&y - &theirs).unwrap().abs().unwrap().max_all().unwrap();
                    let scale = theirs.abs().unwrap().max_all().unwrap();
                    let (diff, scale) = (
                        diff.to_scalar::<f32>().unwrap(),
                        scale.to_scalar::<f32>().unwrap(),
                    );
                    assert!(
                        diff <= 1e-5 * scale,
                        "{rows} rows, {w:?}: {diff} of {scale}"
                    );
                }
            }
        }
        // A width that does not match is an error, not a panic.
        let xs = Tensor::zeros((1, 2, 128), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(a.forward(&xs).is_err());
    }
}
