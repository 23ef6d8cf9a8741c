//! [`super::QuantizedRows::new`]'s block quantization with AVX2: the same values, bit for
//! bit, as the portable loop (a block's largest magnitude, scale and sums are computed with
//! the same float operations; the quants are rounded half away from zero, as `f32::round`
//! rounds, and NaN gives 0, as `as i8` gives), with the 32 values of a block in four
//! vectors instead of lane by lane (a perf profile of the embedded model with 4 slots had
//! the portable loop at 7% of a decode step).

use std::arch::x86_64::*;

use crate::kernels::Isa;

/// One quantized block: the scale before rounding to f16 and the sum of the quants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Block {
    /// The largest magnitude over 127.
    pub d: f32,
    /// The sum of the quants.
    pub sum: i32,
}

/// Quantize the 32 values `x` into `q`.
///
/// # Panics
/// When `isa` has no AVX2.
#[inline]
pub fn quantize_block(isa: Isa, x: &[f32; 32], q: &mut [i8; 32]) -> Block {
    assert!(isa.has_avx2(), "{isa:?} has no AVX2");
    // SAFETY: an `Isa` with AVX2 exists only where the CPU has AVX2 (checked above).
    unsafe { quantize_avx2(x, q, None) }
}

/// The largest magnitude of the 32 values `x` (NaN left out, as `f32::max` leaves it).
///
/// # Panics
/// When `isa` has no AVX2.
#[inline]
pub fn block_amax(isa: Isa, x: &[f32; 32]) -> f32 {
    assert!(isa.has_avx2(), "{isa:?} has no AVX2");
    // SAFETY: as in `quantize_block`.
    unsafe { amax_avx2(&load(x)) }
}

/// Quantize the 32 values `x` into `q` with the scale of the largest magnitude `amax`
/// (of a group of blocks this one belongs to), as [`quantize_block`] does with its own.
///
/// # Panics
/// When `isa` has no AVX2.
#[inline]
pub fn quantize_block_with(isa: Isa, x: &[f32; 32], q: &mut [i8; 32], amax: f32) -> Block {
    assert!(isa.has_avx2(), "{isa:?} has no AVX2");
    // SAFETY: as in `quantize_block`.
    unsafe { quantize_avx2(x, q, Some(amax)) }
}

/// The block as four vectors.
#[target_feature(enable = "avx2")]
fn load(x: &[f32; 32]) -> [__m256; 4] {
    std::array::from_fn(|i| {
        // SAFETY: `x` is 32 f32, four vectors of 8.
        unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) }
    })
}

/// `max(|v|)` over the four vectors: a NaN lane keeps the maximum so far, as `f32::max`
/// ignores NaN.
#[target_feature(enable = "avx2")]
fn amax_avx2(v: &[__m256; 4]) -> f32 {
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for &v in v {
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
    }
    let mut ms = [0f32; 8];
    // SAFETY: `ms` is 8 writable f32.
    unsafe { _mm256_storeu_ps(ms.as_mut_ptr(), m) };
    ms.into_iter().fold(0f32, f32::max)
}

/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn quantize_avx2(x: &[f32; 32], q: &mut [i8; 32], amax: Option<f32>) -> Block {
    let v = load(x);
    let sign = _mm256_set1_ps(-0.0);
    let amax = amax.unwrap_or_else(|| amax_avx2(&v));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    let mut ints = [_mm256_setzero_si256(); 4];
    for (v, int) in v.iter().zip(&mut ints) {
        let s = _mm256_mul_ps(*v, id);
        // Half away from zero: truncate, then step away from zero when the dropped part is
        // at least a half (exact: `s` and its truncation are within 2^23).
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(s);
        let far = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, _mm256_sub_ps(s, t)), half);
        let step = _mm256_and_ps(far, _mm256_or_ps(one, _mm256_and_ps(sign, s)));
        // NaN lanes (from infinite inputs) are unordered with themselves: 0.
        let r = _mm256_and_ps(_mm256_add_ps(t, step), _mm256_cmp_ps::<_CMP_ORD_Q>(s, s));
        *int = _mm256_cvtps_epi32(r);
    }
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // Saturating packs (as `as i8` saturates), then the 4-byte groups back in order.
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(ints[0], ints[1]),
        _mm256_packs_epi32(ints[2], ints[3]),
    );
    let bytes = _mm256_permutevar8x32_epi32(bytes, order);
    // SAFETY: `q` is 32 writable bytes.
    unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), bytes) };
    // The sum of the saturated bytes: `vpsadbw` of the bytes biased by 128 against zero
    // gives four sums of eight, each 1024 over the signed sum.
    let biased = _mm256_xor_si256(bytes, _mm256_set1_epi8(i8::MIN));
    let eights = _mm256_sad_epu8(biased, _mm256_setzero_si256());
    let s = _mm_add_epi64(
        _mm256_castsi256_si128(eights),
        _mm256_extracti128_si256::<1>(eights),
    );
    let sum = _mm_cvtsi128_si64(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) as i32 - 32 * 128;
    Block { d, sum }
}
