//! A weight matrix of a decoder and the one rule for multiplying activations with it.
//!
//! On a CPU with AVX2, Q8_0, Q4_0 and Q4_1 matrices are repacked at load for the engine's
//! own kernels ([`super::packed`]); every other type, every matrix on other CPUs and every
//! matrix on a GPU stays a candle `QMatMul`. By row count:
//! - fewer than [`DEQUANT_MIN_ROWS`] rows (decode steps, short chunks): the quantized
//!   kernels;
//! - more: the matrix is dequantized and candle's f32 GEMM runs. `engine/benches/qmatmul.rs`
//!   measured one SmolLM2 layer at 0.20x the quantized kernel's time for 64 rows and
//!   0.11-0.20x for 128-512, the dequantization included (BENCHMARKS.md, #13).

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor, D};

use super::packed::PackedMatrix;

/// Rows from which a CPU weight matmul dequantizes the matrix and runs the f32 GEMM.
const DEQUANT_MIN_ROWS: usize = 64;

/// A weight matrix `(out, in)`.
#[derive(Debug)]
pub(crate) enum Weight {
    /// Repacked for [`PackedMatrix`] (CPU with AVX2: Q8_0, Q4_0 and Q4_1).
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

    /// `xs @ W^T` over the last dimension of `xs`.
    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let k = xs.dim(D::Minus1)?;
        let rows = xs.elem_count() / k.max(1);
        match self {
            Self::Packed(p) => {
                let (n, pk) = p.dims();
                if k != pk {
                    candle_core::bail!("matmul: activations have {k} columns, weights {pk}");
                }
                let mut dims = xs.dims().to_vec();
                *dims.last_mut().expect("k was read from the last dimension") = n;
                let out = if rows >= DEQUANT_MIN_ROWS {
                    let w = Tensor::from_vec(p.dequantize(), (n, k), xs.device())?;
                    xs.reshape((rows, k))?.matmul(&w.t()?)?
                } else {
                    let x = xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                    Tensor::from_vec(p.matmul(&x, rows), (rows, n), xs.device())?
                };
                out.reshape(dims)
            }
            Self::Candle(QMatMul::QTensor(q))
                if rows >= DEQUANT_MIN_ROWS && xs.device().is_cpu() =>
            {
                xs.broadcast_matmul(&q.dequantize(xs.device())?.t()?)
            }
            Self::Candle(w) => w.forward(xs),
        }
    }

    /// `[xs @ W^T for W in ws]`: when every matrix is packed and the rows few, the
    /// activations are quantized once and all the products run in one parallel pass
    /// ([`PackedMatrix::matmul_many`]); otherwise one [`Weight::forward`] each.
    pub(crate) fn forward_many<const N: usize>(
        ws: [&Weight; N],
        xs: &Tensor,
    ) -> candle_core::Result<[Tensor; N]> {
        let k = xs.dim(D::Minus1)?;
        let rows = xs.elem_count() / k.max(1);
        let packed: Option<Vec<&PackedMatrix>> = ws
            .iter()
            .map(|w| match w {
                Self::Packed(p) if p.dims().1 == k => Some(p),
                _ => None,
            })
            .collect();
        let outs: Vec<Tensor> = match packed {
            Some(ps) if rows < DEQUANT_MIN_ROWS => {
                let x = xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                let mut dims = xs.dims().to_vec();
                PackedMatrix::matmul_many(&ps, &x, rows)
                    .into_iter()
                    .zip(&ps)
                    .map(|(out, p)| {
                        *dims.last_mut().expect("k was read from the last dimension") = p.dims().0;
                        Tensor::from_vec(out, dims.as_slice(), xs.device())
                    })
                    .collect::<candle_core::Result<_>>()?
            }
            _ => ws
                .iter()
                .map(|w| w.forward(xs))
                .collect::<candle_core::Result<_>>()?,
        };
        Ok(outs.try_into().expect("one result per weight"))
    }
}
