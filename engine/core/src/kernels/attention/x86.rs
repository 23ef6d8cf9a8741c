//! Decode attention of one group of query heads on x86-64 with AVX2 and FMA: the portable
//! [`super::head_group`]'s arithmetic, rearranged so that every step is a full vector
//! operation and each cached K and V row is read once for several query heads.
//!
//! - Heads: the group's query heads (which share one K/V head) in parts of up to three;
//!   every K or V vector loaded serves each head of the part. Reading each row once per
//!   head instead made long caches bound by the cache's bandwidth.
//! - Scores: eight cached positions at a time for a part of one head, four for more (the
//!   accumulators stay within AVX2's 16 registers), each position's products summed in
//!   eight lanes, then the positions' lanes reduced together into one vector of scores
//!   (rounds of `vhaddps` and a cross-half add) instead of a horizontal sum per position.
//! - Softmax: `exp` on eight scores at once ([`exp8`], within 2 ulp of `f32::exp`).
//! - Weighted sum of values: the output heads stay in registers for the whole cache, four
//!   vectors of each at a time.
//!
//! The float summation order differs from the portable loops, so results agree to rounding
//! (the tests bound the difference), not bit for bit. Each output still depends only on its
//! own sequence, whatever the batch, so a slot decodes the same tokens alone or batched.

use std::arch::x86_64::*;

use super::HeadGroup;
use crate::kernels::exp8::exp8;
use crate::kernels::Isa;

/// A task of the decode kernel ([`head_group`]), for head widths that are a multiple of 8.
///
/// # Panics
/// As [`head_group`], and when `isa` has no AVX2.
#[inline]
pub fn attend(isa: Isa, hg: HeadGroup<'_>) {
    assert!(isa.has_avx2(), "{isa:?} has no AVX2");
    // SAFETY: an `Isa` with AVX2 exists only where the CPU has AVX2 and FMA (checked above).
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
unsafe fn head_group(mut hg: HeadGroup<'_>) {
    let (q, k, v, o) = (hg.q, hg.k, hg.v, &mut *hg.o);
    let (n_rep, hd, len) = (hg.n_rep, hg.hd, hg.len);
    assert!(hd.is_multiple_of(8) && hd > 0, "head width {hd}");
    assert!(
        q.len() >= n_rep * hd && o.len() >= n_rep * hd,
        "query or output heads"
    );
    assert!(k.len() >= len * hd && v.len() >= len * hd, "cache rows");
    // Rounded up to whole vectors, so that every score load and store is a full one.
    let stride = len.next_multiple_of(8);
    let mut scores = vec![0f32; n_rep * stride];
    // The group's heads in chunks of up to `MAX_HEADS`: each K and V row is read once per
    // chunk, not once per head.
    let mut h = 0;
    while h < n_rep {
        let r = (n_rep - h).min(MAX_HEADS);
        let part = Part {
            q: &q[h * hd..(h + r) * hd],
            k,
            v,
            o: &mut o[h * hd..(h + r) * hd],
            scores: &mut scores[h * stride..(h + r) * stride],
            stats: hg.stats.as_deref_mut().map(|s| &mut s[2 * h..2 * (h + r)]),
            stride,
            hd,
            len,
            scale: hg.scale,
        };
        // SAFETY: the CPU has AVX2 and FMA (the caller's contract); `part` holds `r` heads
        // (sliced above) and `k`, `v` hold `len` rows of `hd` (asserted above).
        unsafe {
            match r {
                1 => part.attend::<1>(),
                2 => part.attend::<2>(),
                _ => part.attend::<3>(),
            }
        }
        h += r;
    }
}

/// The most query heads of a group attended together: their accumulators and the K row
/// being read take 3 x 4 + 1 of AVX2's 16 registers.
const MAX_HEADS: usize = 3;

/// `R` query heads of a group (`R` from the call) against the K/V head they share.
struct Part<'a> {
    /// `R` heads of `hd`.
    q: &'a [f32],
    /// `len` rows of `hd`.
    k: &'a [f32],
    /// `len` rows of `hd`.
    v: &'a [f32],
    /// `R` heads of `hd`.
    o: &'a mut [f32],
    /// `R` rows of `stride` scores.
    scores: &'a mut [f32],
    /// `2 * R` softmax statistics, for a block of a longer cache ([`super::HeadGroup`]).
    stats: Option<&'a mut [f32]>,
    /// `len` rounded up to 8.
    stride: usize,
    hd: usize,
    len: usize,
    scale: f32,
}

impl Part<'_> {
    /// Scores, softmax and weighted sum of the `R` heads.
    ///
    /// # Safety
    /// AVX2 and FMA; the slices are as long as the fields' documentation says, `R >= 1`,
    /// `hd` a multiple of 8.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend<const R: usize>(mut self) {
        // Eight positions at a time for one head (eight FMA chains), four for more.
        // SAFETY: the caller's contract, for each block size.
        unsafe {
            if R == 1 {
                self.scores::<R, 8>();
            } else {
                self.scores::<R, 4>();
            }
        }
        let normalize = self.stats.is_none();
        for r in 0..R {
            // SAFETY: AVX2 and FMA; row `r` is `stride` long and holds `len` scores.
            let (max, sum) =
                unsafe { softmax_row(&mut self.scores[r * self.stride..], self.len, normalize) };
            if let Some(stats) = self.stats.as_deref_mut() {
                stats[2 * r] = max;
                stats[2 * r + 1] = sum;
            }
        }
        let mut c = 0;
        while c < self.hd {
            // Up to 4 vectors of the heads at a time (32 lanes), never past `hd`.
            // SAFETY: the caller's contract; `c + 8 * W <= hd` for the `W` picked.
            c += unsafe {
                match (self.hd - c) / 8 {
                    1 => self.weighted::<R, 1>(c),
                    2 | 3 => self.weighted::<R, 2>(c),
                    _ => self.weighted::<R, 4>(c),
                }
            };
        }
    }

    /// `scores[r][t] = scale * dot(q[r], k[t])` for `t < len`, and 0 up to the next
    /// multiple of 8, `P` positions at a time.
    ///
    /// # Safety
    /// As [`Part::attend`]; `P` is 4 or 8.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn scores<const R: usize, const P: usize>(&mut self) {
        let scale = _mm256_set1_ps(self.scale);
        for t0 in (0..self.len).step_by(P) {
            let n = (self.len - t0).min(P);
            // A constant count for whole blocks, so that their loop unrolls with no test
            // per position; only the last block may be shorter.
            // SAFETY: the caller's contract; positions `t0..t0 + n` are below `len`.
            let acc = unsafe {
                if n == P {
                    self.dots::<R, P>(t0, P)
                } else {
                    self.dots::<R, P>(t0, n)
                }
            };
            for (r, acc) in acc.iter().enumerate() {
                let at = r * self.stride + t0;
                // Lanes past `len` hold the zero accumulators' sums.
                // SAFETY: `t0 + P <= stride` (`t0 < len`, a multiple of `P`, which divides 8).
                unsafe {
                    let out = self.scores.as_mut_ptr().add(at);
                    if P == 8 {
                        let a: &[__m256; 8] = acc[..].try_into().expect("8 accumulators");
                        _mm256_storeu_ps(out, _mm256_mul_ps(reduce8(a), scale));
                    } else {
                        let a: &[__m256; 4] = acc[..4].try_into().expect("4 accumulators");
                        _mm_storeu_ps(out, _mm_mul_ps(reduce4(a), _mm256_castps256_ps128(scale)));
                    }
                }
            }
        }
    }

    /// Lane-wise products of each of the `R` query heads with positions `t0..t0 + n` of
    /// `k` (`n <= P`), summed over the head's vectors: `acc[r][i]` for position `t0 + i`,
    /// zero from `n` on.
    ///
    /// # Safety
    /// As [`Part::attend`]; `t0 + n <= len`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dots<const R: usize, const P: usize>(&self, t0: usize, n: usize) -> [[__m256; P]; R] {
        let (q, k, hd) = (self.q, self.k, self.hd);
        let mut acc = [[_mm256_setzero_ps(); P]; R];
        for c in (0..hd).step_by(8) {
            for i in 0..P.min(n) {
                // SAFETY: position `t0 + i < len`, so its lanes `c..c + 8` lie inside `k`.
                let kv = unsafe { _mm256_loadu_ps(k.as_ptr().add((t0 + i) * hd + c)) };
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: `r < R` heads of `hd` in `q`, and `c + 8 <= hd`.
                    let qv = unsafe { _mm256_loadu_ps(q.as_ptr().add(r * hd + c)) };
                    acc[i] = _mm256_fmadd_ps(qv, kv, acc[i]);
                }
            }
        }
        acc
    }

    /// Lanes `c..c + 8 * W` of `o[r] = sum over t of scores[r][t] * v[t]` for the `R`
    /// heads; returns `8 * W`. Each V row's lanes are loaded once for all `R` heads.
    ///
    /// # Safety
    /// As [`Part::attend`]; `c + 8 * W <= hd`, and the scores are probabilities (softmax
    /// done).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weighted<const R: usize, const W: usize>(&mut self, c: usize) -> usize {
        let (v, hd, stride) = (self.v, self.hd, self.stride);
        let p = &self.scores[..];
        let step = |acc: &mut [[__m256; W]; R], t: usize| {
            let row = t * hd + c;
            for w in 0..W {
                // SAFETY: `row + 8 * w + 8 <= t * hd + hd <= v.len()` (`t < len`).
                let x = unsafe { _mm256_loadu_ps(v.as_ptr().add(row + 8 * w)) };
                for (r, acc) in acc.iter_mut().enumerate() {
                    let weight = _mm256_set1_ps(p[r * stride + t]);
                    acc[w] = _mm256_fmadd_ps(weight, x, acc[w]);
                }
            }
        };
        // With fewer than 8 accumulators, a second set for odd positions: enough
        // independent FMA chains not to wait on the FMA's latency. Both sets are indexed
        // only by constants (positions go in pairs), so they stay in registers (indexed by
        // `t % 2`, they lived on the stack: `perf annotate`, 55% of the kernel's time).
        let mut even = [[_mm256_setzero_ps(); W]; R];
        let mut odd = [[_mm256_setzero_ps(); W]; R];
        if R * W >= 8 {
            for t in 0..self.len {
                step(&mut even, t);
            }
        } else {
            for t in (0..self.len / 2 * 2).step_by(2) {
                step(&mut even, t);
                step(&mut odd, t + 1);
            }
            if self.len % 2 == 1 {
                step(&mut even, self.len - 1);
            }
        }
        for (r, (even, odd)) in even.iter().zip(&odd).enumerate() {
            for w in 0..W {
                // SAFETY: `r < R` heads of `hd` in `o`, and `c + 8 * w + 8 <= hd`.
                unsafe {
                    _mm256_storeu_ps(
                        self.o.as_mut_ptr().add(r * hd + c + 8 * w),
                        _mm256_add_ps(even[w], odd[w]),
                    )
                };
            }
        }
        8 * W
    }
}

/// `[sum of the lanes of a[i]] for i in 0..4`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce4(a: &[__m256; 4]) -> __m128 {
    let s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
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
/// `len` are left with values that are never read), or with `normalize` false only
/// `exp(s - max)`; returns `max` and the sum of the exponentials.
///
/// # Safety
/// AVX2 and FMA; `row.len() >= len` rounded up to 8, `len > 0`.
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row(row: &mut [f32], len: usize, normalize: bool) -> (f32, f32) {
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
    if !normalize {
        return (max, sum);
    }
    let inv = _mm256_set1_ps(1.0 / sum);
    for t in (0..len.next_multiple_of(8)).step_by(8) {
        // SAFETY: `t + 8 <= row.len()`.
        unsafe {
            let p = row.as_mut_ptr().add(t);
            _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), inv));
        }
    }
    (max, sum)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}
