//! Decode attention of one group of query heads on x86-64 with AVX2 and FMA: the portable
//! [`super::head_group`]'s arithmetic, rearranged so that every step is a full vector
//! operation.
//!
//! - Scores: eight cached positions at a time, each position's products summed in eight
//!   lanes, then the eight positions' lanes reduced together into one vector of eight scores
//!   (three rounds of `vhaddps` and a cross-half add), instead of a horizontal sum per
//!   position.
//! - Softmax: `exp` on eight scores at once ([`exp8`], within 2 ulp of `f32::exp`).
//! - Weighted sum of values: the output head stays in registers for the whole cache, which
//!   is read once per head instead of the output being loaded and stored per position.
//!
//! The float summation order differs from the portable loops, so results agree to rounding
//! (the tests bound the difference), not bit for bit. Each output still depends only on its
//! own sequence, whatever the batch, so a slot decodes the same tokens alone or batched.

use std::arch::x86_64::*;

use super::HeadGroup;
use crate::model::simd::{exp8, Avx2Fma};

/// A task of the decode kernel ([`head_group`]), for head widths that are a multiple of 8.
///
/// # Panics
/// As [`head_group`].
#[inline]
pub fn attend(_: Avx2Fma, hg: HeadGroup<'_>) {
    // SAFETY: an `Avx2Fma` exists only where the CPU has AVX2 and FMA.
    unsafe { head_group(hg) }
}

/// The attention of a [`HeadGroup`].
///
/// # Panics
/// When `hd` is not a multiple of 8 or a slice is shorter than the shapes say.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn head_group(hg: HeadGroup<'_>) {
    let HeadGroup {
        q,
        k,
        v,
        o,
        n_rep,
        hd,
        len,
        scale,
    } = hg;
    assert!(hd.is_multiple_of(8) && hd > 0, "head width {hd}");
    assert!(
        q.len() >= n_rep * hd && o.len() >= n_rep * hd,
        "query or output heads"
    );
    assert!(k.len() >= len * hd && v.len() >= len * hd, "cache rows");
    // Rounded up to whole vectors, so that every score load and store is a full one.
    let stride = len.next_multiple_of(8);
    let mut scores = vec![0f32; n_rep * stride];
    for (r, row) in scores.chunks_exact_mut(stride).enumerate() {
        let q = &q[r * hd..(r + 1) * hd];
        // SAFETY: the CPU has AVX2 and FMA (the caller's contract); `q` is `hd` long, `k`
        // holds `len` rows of `hd` and `row` is `stride` long (asserted and sliced above).
        unsafe { scores_row(q, k, row, hd, len, scale) };
        // SAFETY: as above; the first `len` entries of `row` are scores.
        unsafe { softmax_row(row, len) };
    }
    for (r, o) in o.chunks_exact_mut(hd).take(n_rep).enumerate() {
        // SAFETY: as above: `v` holds `len` rows of `hd`, `o` is `hd` long.
        unsafe { weighted_sum(&scores[r * stride..r * stride + len], v, o, hd) };
    }
}

/// `row[t] = scale * dot(q, k[t])` for `t < len`, and 0 up to the next multiple of 8.
///
/// # Safety
/// AVX2 and FMA; `q.len() == hd`, `k.len() >= len * hd`, `row.len() >= len` rounded up to 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn scores_row(q: &[f32], k: &[f32], row: &mut [f32], hd: usize, len: usize, scale: f32) {
    let scale = _mm256_set1_ps(scale);
    for t0 in (0..len).step_by(8) {
        // Whole blocks of 8 positions with a constant count, so that the loop over them
        // unrolls with no test per position; only the last block may be shorter.
        // SAFETY: positions `t0..t0 + n` are below `len` (`k`'s rows, the caller's
        // contract), and `q.len() == hd`.
        let acc = unsafe {
            match len - t0 {
                8.. => dots::<8>(q, k, t0, hd),
                n => dots_short(q, k, t0, hd, n),
            }
        };
        let sums = _mm256_mul_ps(reduce8(&acc), scale);
        // SAFETY: `t0 + 8 <= row.len()` (it is rounded up to 8); lanes past `len` hold the
        // zero accumulators' sums.
        unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(t0), sums) };
    }
}

/// The lane-wise products of `q` with positions `t0..t0 + N` of `k`, summed over the
/// head's vectors (`acc[i]` for position `t0 + i`).
///
/// # Safety
/// AVX2 and FMA; `q.len() == hd`, a multiple of 8; `k.len() >= (t0 + N) * hd`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots<const N: usize>(q: &[f32], k: &[f32], t0: usize, hd: usize) -> [__m256; 8] {
    let mut acc = [_mm256_setzero_ps(); 8];
    for c in (0..hd).step_by(8) {
        // SAFETY: `c + 8 <= hd == q.len()`.
        let qv = unsafe { _mm256_loadu_ps(q.as_ptr().add(c)) };
        for (i, acc) in acc.iter_mut().enumerate().take(N) {
            // SAFETY: position `t0 + i < t0 + N`, so its lanes `c..c + 8` lie inside `k`.
            let kv = unsafe { _mm256_loadu_ps(k.as_ptr().add((t0 + i) * hd + c)) };
            *acc = _mm256_fmadd_ps(qv, kv, *acc);
        }
    }
    acc
}

/// [`dots`] for a count `n < 8` known only at run time (the last block of a row).
///
/// # Safety
/// As [`dots`] with `N = n`.
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_short(q: &[f32], k: &[f32], t0: usize, hd: usize, n: usize) -> [__m256; 8] {
    // SAFETY: the caller's contract, for each count.
    unsafe {
        match n {
            1 => dots::<1>(q, k, t0, hd),
            2 => dots::<2>(q, k, t0, hd),
            3 => dots::<3>(q, k, t0, hd),
            4 => dots::<4>(q, k, t0, hd),
            5 => dots::<5>(q, k, t0, hd),
            6 => dots::<6>(q, k, t0, hd),
            _ => dots::<7>(q, k, t0, hd),
        }
    }
}

/// `[sum of the lanes of a[i]] for i in 0..8`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce8(a: &[__m256; 8]) -> __m256 {
    let s01 = _mm256_hadd_ps(a[0], a[1]);
    let s23 = _mm256_hadd_ps(a[2], a[3]);
    let s45 = _mm256_hadd_ps(a[4], a[5]);
    let s67 = _mm256_hadd_ps(a[6], a[7]);
    // Lanes: a0..a3's sums of their low halves, then of their high halves.
    let s0123 = _mm256_hadd_ps(s01, s23);
    let s4567 = _mm256_hadd_ps(s45, s67);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(s0123, s4567),
        _mm256_permute2f128_ps::<0x31>(s0123, s4567),
    )
}

/// Softmax of `row[..len]` in place (`row` is `len` rounded up to 8 long; the lanes past
/// `len` are left with values that are never read).
///
/// # Safety
/// AVX2 and FMA; `row.len() >= len` rounded up to 8, `len > 0`.
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row(row: &mut [f32], len: usize) {
    let full = len / 8 * 8;
    let mut max = f32::NEG_INFINITY;
    if full > 0 {
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for t in (0..full).step_by(8) {
            // SAFETY: `t + 8 <= full <= row.len()`.
            m = _mm256_max_ps(m, unsafe { _mm256_loadu_ps(row.as_ptr().add(t)) });
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` is 8 writable f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
        max = lanes.into_iter().fold(max, f32::max);
    }
    max = row[full..len].iter().copied().fold(max, f32::max);
    let vmax = _mm256_set1_ps(max);
    let mut vsum = _mm256_setzero_ps();
    for t in (0..full).step_by(8) {
        // SAFETY: `t + 8 <= full <= row.len()`.
        let e = exp8(_mm256_sub_ps(
            unsafe { _mm256_loadu_ps(row.as_ptr().add(t)) },
            vmax,
        ));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(t), e) };
        vsum = _mm256_add_ps(vsum, e);
    }
    let mut sum = hsum(vsum);
    if full < len {
        // The tail through one vector: its lanes past `len` are computed and dropped.
        // SAFETY: `full + 8 <= row.len()` (rounded up to 8).
        let e = exp8(_mm256_sub_ps(
            unsafe { _mm256_loadu_ps(row.as_ptr().add(full)) },
            vmax,
        ));
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` is 8 writable f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), e) };
        for (s, e) in row[full..len].iter_mut().zip(lanes) {
            *s = e;
            sum += e;
        }
    }
    let inv = _mm256_set1_ps(1.0 / sum);
    for t in (0..len.next_multiple_of(8)).step_by(8) {
        // SAFETY: `t + 8 <= row.len()`.
        unsafe {
            let p = row.as_mut_ptr().add(t);
            _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv));
        }
    }
}

/// `o = sum over t of p[t] * v[t]` (`p.len()` rows of `hd` in `v`).
///
/// # Safety
/// AVX2 and FMA; `o.len() == hd`, a multiple of 8; `v.len() >= p.len() * hd`.
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum(p: &[f32], v: &[f32], o: &mut [f32], hd: usize) {
    let mut c = 0;
    while c < hd {
        // Up to 8 vectors of the head at a time (64 lanes), never past `hd`.
        let vectors = match (hd - c) / 8 {
            1 => 1,
            2 | 3 => 2,
            4..=7 => 4,
            _ => 8,
        };
        // SAFETY: the CPU has AVX2 and FMA (this function's contract); `c + 8 * vectors <=
        // hd`, so lanes `c..c + 8 * vectors` lie inside `o` and inside each row of `v`.
        c += unsafe {
            match vectors {
                1 => weighted_lanes::<1>(p, v, o, hd, c),
                2 => weighted_lanes::<2>(p, v, o, hd, c),
                4 => weighted_lanes::<4>(p, v, o, hd, c),
                _ => weighted_lanes::<8>(p, v, o, hd, c),
            }
        };
    }
}

/// Lanes `c..c + 8 * W` of [`weighted_sum`]; returns `8 * W`.
///
/// # Safety
/// AVX2 and FMA; `c + 8 * W <= hd == o.len()`, `v.len() >= p.len() * hd`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_lanes<const W: usize>(
    p: &[f32],
    v: &[f32],
    o: &mut [f32],
    hd: usize,
    c: usize,
) -> usize {
    let step = |acc: &mut [__m256; W], t: usize| {
        let weight = _mm256_set1_ps(p[t]);
        let row = t * hd + c;
        for (w, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `row + 8 * w + 8 <= t * hd + hd <= v.len()` (the caller's contract).
            let x = unsafe { _mm256_loadu_ps(v.as_ptr().add(row + 8 * w)) };
            *acc = _mm256_fmadd_ps(weight, x, *acc);
        }
    };
    // Below 8 vectors, two sets of accumulators, for even and odd positions: twice the
    // independent FMA chains, so that a head of 4 vectors (32 lanes) is not bound by the
    // FMA's latency. 8 vectors are 8 chains already, and two sets of them would take all
    // 16 of AVX2's registers: they use one. The sets are indexed only by constants
    // (positions go in pairs), so they stay in registers: indexed by `t % 2`, they lived
    // on the stack, and every FMA waited for a store and a load (`perf annotate`: 55% of
    // the kernel's time).
    let mut even = [_mm256_setzero_ps(); W];
    let mut odd = [_mm256_setzero_ps(); W];
    if W >= 8 {
        for t in 0..p.len() {
            step(&mut even, t);
        }
    } else {
        for t in (0..p.len() / 2 * 2).step_by(2) {
            step(&mut even, t);
            step(&mut odd, t + 1);
        }
        if p.len() % 2 == 1 {
            step(&mut even, p.len() - 1);
        }
    }
    for (w, (even, odd)) in even.iter().zip(&odd).enumerate() {
        // SAFETY: `c + 8 * w + 8 <= o.len()` (the caller's contract).
        unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(c + 8 * w), _mm256_add_ps(*even, *odd)) };
    }
    8 * W
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}
