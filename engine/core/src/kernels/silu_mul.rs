//! `silu(gate) * up`, the gated activation of a SwiGLU feed-forward block, in one pass.
//!
//! With candle ops it is two: `silu` (a libm `expf` call per value) and a multiply, each
//! allocating its result. A perf profile of the embedded model decoding 4 slots had the two
//! at 7% of the compute thread, which runs them while the pool's other threads wait. On
//! x86-64 with AVX2 and FMA the product is computed eight values at a time with a vector
//! `exp` (`kernels::exp8`, within 2 ulp of `expf`); elsewhere, and for tensors that are not
//! contiguous f32 on the CPU, candle's ops run.

use candle_core::Tensor;

#[cfg(target_arch = "x86_64")]
use super::cpu_slices::on_cpu_slices;
use super::Isa;

/// `silu(gate) * up` elementwise (`silu(x) = x / (1 + e^-x)`); the shapes must match.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    silu_mul_with(gate, up, Isa::best())
}

/// [`silu_mul`] with the code of `isa` (AVX2 where it has it; [`Isa::PORTABLE`]: candle's
/// two ops).
pub fn silu_mul_with(gate: &Tensor, up: &Tensor, isa: Isa) -> candle_core::Result<Tensor> {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = isa;
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        if let Some(out) = on_cpu_slices(gate, up, |g, u| x86::silu_mul(isa, g, u))? {
            return Ok(out);
        }
    }
    candle_nn::ops::silu(gate)? * up
}

// SIMD loads and stores through raw pointers (x86 intrinsics have no slice API).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::exp8::exp8;
    use crate::kernels::Isa;

    /// `silu(g) * u` elementwise.
    ///
    /// # Panics
    /// When the lengths differ, or `isa` has no AVX2.
    pub fn silu_mul(isa: Isa, g: &[f32], u: &[f32]) -> Vec<f32> {
        assert!(isa.has_avx2(), "{isa:?} has no AVX2");
        assert_eq!(g.len(), u.len(), "gate and up lengths");
        let mut out = vec![0f32; g.len()];
        // SAFETY: an `Isa` with AVX2 exists only where the CPU has AVX2 and FMA; the three slices
        // have one length.
        unsafe { silu_mul_into(g, u, &mut out) };
        out
    }

    /// # Safety
    /// AVX2 and FMA; `g`, `u` and `out` have one length.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn silu_mul_into(g: &[f32], u: &[f32], out: &mut [f32]) {
        let one = _mm256_set1_ps(1.0);
        let sign = _mm256_set1_ps(-0.0);
        let full = g.len() / 8 * 8;
        for i in (0..full).step_by(8) {
            // SAFETY: `i + 8 <= full <= len` of each slice.
            unsafe {
                let x = _mm256_loadu_ps(g.as_ptr().add(i));
                let e = exp8(_mm256_xor_ps(x, sign));
                let s = _mm256_div_ps(x, _mm256_add_ps(one, e));
                let y = _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i)));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
            }
        }
        for ((o, &x), &u) in out[full..].iter_mut().zip(&g[full..]).zip(&u[full..]) {
            *o = x / (1.0 + (-x).exp()) * u;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// The fused product agrees with candle's `silu` and multiply to a few ulp, over a
    /// length with a tail, values from -100 to 100 and both signs of `up`.
    #[test]
    fn fused_product_matches_candles_ops() {
        let n = 8 * 125 + 5;
        let g: Vec<f32> = (0..n)
            .map(|i| -100.0 + 200.0 * i as f32 / n as f32)
            .collect();
        let u: Vec<f32> = (0..n).map(|i| ((i % 7) as f32 - 3.0) * 0.37).collect();
        let gate = Tensor::from_vec(g, (5, n / 5), &Device::Cpu).unwrap();
        let up = Tensor::from_vec(u, (5, n / 5), &Device::Cpu).unwrap();
        let want = (candle_nn::ops::silu(&gate).unwrap() * &up).unwrap();
        assert_eq!(
            silu_mul(&gate, &up).unwrap().to_vec2::<f32>().unwrap(),
            silu_mul_with(&gate, &up, Isa::best())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
            "the engine's code is the best one's"
        );
        // Every code this CPU has, the portable one included.
        for isa in Isa::available() {
            let got = silu_mul_with(&gate, &up, isa).unwrap();
            assert_eq!(got.dims(), want.dims());
            let (got, want) = (
                got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            if !isa.has_avx2() {
                assert_eq!(got, want, "{isa:?} runs candle's ops");
            }
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                // Below -88, candle's `e^-x` is infinite (a zero product) and `exp8`'s is
                // 1.6e38.
                let tol = 4.0 * f32::EPSILON * b.abs() + 1e-30;
                assert!((a - b).abs() <= tol, "{isa:?} value {i}: {a} against {b}");
            }
        }
    }

    /// Tensors the fast path does not take (a transposed view, other shapes) still give
    /// candle's result, or its error.
    #[test]
    fn other_layouts_fall_back_to_candle() {
        let g = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 4))
            .unwrap();
        let gt = g.t().unwrap();
        let u = Tensor::ones((4, 3), DType::F32, &Device::Cpu).unwrap();
        let got = silu_mul(&gt, &u).unwrap().to_vec2::<f32>().unwrap();
        let want = candle_nn::ops::silu(&gt).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(got, want);
        assert!(silu_mul(&g, &u).is_err(), "shapes differ");
    }
}
