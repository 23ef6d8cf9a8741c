//! [`exp8`], `e^x` on eight f32 lanes with AVX2 and FMA, for the softmax of decode
//! attention and the gated SiLU: libm's `expf` is a call per value, which a perf profile of
//! the embedded model put at 2-3% of a decode step on its own. Range reduction
//! `x = n ln 2 + r`, `|r| <= ln 2 / 2` (`ln 2` in two parts, so that `r` is exact), `e^r` by
//! Cephes' degree-6 polynomial, and `2^n` built in the exponent bits.

use std::arch::x86_64::*;

/// `e^x` in each lane, within 2 ulp of `f32::exp` on `[-87.3, 88]`. Larger `x` are
/// clamped at 88 (`e^88` is 1.6e38, where `f32::exp` overflows to infinity above 88.7);
/// lanes below -87.3 give 0, where `f32::exp` underflows too (to subnormals at most
/// 2^-126). NaN lanes give a meaningless value, never a trap.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub fn exp8(x: __m256) -> __m256 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.3));
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.3)),
        _mm256_set1_ps(88.0),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut y = _mm256_set1_ps(P[0]);
    for c in &P[1..] {
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(*c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let y = _mm256_fmadd_ps(y, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0)));
    let pow2n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    )));
    _mm256_andnot_ps(underflow, _mm256_mul_ps(y, pow2n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp8` against `f32::exp` over `[-90, 88]`, in relative error.
    #[test]
    fn exp8_is_within_two_ulp_of_exp() {
        if !crate::kernels::Isa::best().has_avx2() {
            return;
        }
        let mut worst = 0f32;
        for i in 0..200_000 {
            let x0 = -90.0 + i as f32 * (178.0 / 200_000.0);
            let xs: [f32; 8] = std::array::from_fn(|j| x0 + j as f32 * 1e-5);
            let mut got = [0f32; 8];
            // SAFETY: the CPU has AVX2 and FMA (checked above); `xs` and `got` are 8 f32.
            unsafe {
                _mm256_storeu_ps(got.as_mut_ptr(), exp8(_mm256_loadu_ps(xs.as_ptr())));
            }
            for (x, g) in xs.into_iter().zip(got) {
                let want = x.exp();
                if x > 88.0 {
                    continue;
                }
                if x < -87.3 {
                    assert!(g == 0.0 && want < 1.3e-38, "exp({x}) = {g}, want {want}");
                } else {
                    worst = worst.max((g - want).abs() / want);
                }
            }
        }
        assert!(worst < 2.0 * f32::EPSILON, "worst relative error {worst}");
        // SAFETY: as above.
        let zero = unsafe {
            let mut z = [0f32; 8];
            _mm256_storeu_ps(z.as_mut_ptr(), exp8(_mm256_setzero_ps()));
            z
        };
        assert_eq!(zero, [1.0; 8], "e^0 is exactly 1");
    }
}
