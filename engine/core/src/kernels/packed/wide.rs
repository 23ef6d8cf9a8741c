//! The products of AVX-512 VNNI on 512-bit vectors over weights from the cache: two tiles
//! at a time.
//!
//! The tile layout ([`super::tile`]) gives a 32-byte vector per eight rows; here the same
//! vector of two neighbouring tiles fills one 64-byte vector, so that one `vpdpbusd`
//! advances sixteen rows. On the CPUs that have AVX-512 VNNI the 512-bit form issues as
//! often as the 256-bit one (two ports), so a product whose weights come from the cache
//! (a prefill's span, [`Tiles::stream`] off) takes fewer cycles; a decode step's, which
//! streams its weights from memory, keeps the 256-bit kernel, which the memory bounds
//! anyway. The arithmetic is the 256-bit kernel's lane for lane: each lane is one weight
//! row, its exact integer sums and its float steps the same, so the results are the same
//! bit for bit. [`vnni_pairs`] runs the kinds with a scale per block (Q8_0, Q4_0, Q4_1),
//! [`vnni_k_pairs`] the K-quants.

use std::arch::x86_64::*;

use half::f16;

use super::activations::{QuantizedRow, BLOCK};
use super::tile::x86::{bytes, halfs8, min_pairs8, subs8};
use super::tile::{block_start_term, half_start_terms, sum_pairs, Kind, Tiles, SUPER, TILE};

/// Tiles [`vnni_pairs`] and [`vnni_k_pairs`] compute at a time.
pub const PAIR: usize = 2;

/// `lo` in lanes 0-7 (the first tile's rows) and `hi` in lanes 8-15 (the second's).
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// [`join`] for f32 lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn join_ps(lo: __m256, hi: __m256) -> __m512 {
    _mm512_castsi512_ps(join(_mm256_castps_si256(lo), _mm256_castps_si256(hi)))
}

/// The 32-byte vector `t` of tile blocks `p0` (lanes 0-7) and `p1` (lanes 8-15), as the
/// 256-bit kernel's `bytes` reads it (`t < 4` of a 4-bit block, `t < 8` of an 8-bit one).
///
/// # Safety
/// Both point at whole tile blocks holding vector `t`; the CPU has AVX512-F.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn pair_bytes(p0: *const u8, p1: *const u8, t: usize) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe { join(bytes(p0, t), bytes(p1, t)) }
}

/// The scales (minimums) of tile blocks or super-blocks `at0` (lanes 0-7) and `at1`
/// (lanes 8-15), as f32: the 256-bit kernel's `halfs8` of each.
///
/// # Safety
/// As `halfs8` for both; the CPU has AVX512-F.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f")]
unsafe fn halfs16(v: &[f16], at0: usize, at1: usize) -> __m512 {
    // SAFETY: the caller's contract.
    unsafe { join_ps(halfs8(v, at0), halfs8(v, at1)) }
}

/// The integer scales of tile blocks `at0` (lanes 0-7) and `at1` (lanes 8-15): the
/// 256-bit kernel's `subs8` of each.
///
/// # Safety
/// As `subs8` for both; the CPU has AVX512-F.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn subs16(v: &[u8], at0: usize, at1: usize, signed: bool) -> (__m512i, __m512i) {
    // SAFETY: the caller's contract.
    let ((a0, a1), (b0, b1)) = unsafe { (subs8(v, at0, signed), subs8(v, at1, signed)) };
    (join(a0, b0), join(a1, b1))
}

/// The minimums of the super-blocks from tile blocks `at0` (lanes 0-7) and `at1` (lanes
/// 8-15) in pairs of blocks: the 256-bit kernel's `min_pairs8` of each.
///
/// # Safety
/// As `min_pairs8` for both; the CPU has AVX512-F.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn min_pairs16(v: &[u8], at0: usize, at1: usize) -> [__m512i; SUPER / 2] {
    // SAFETY: the caller's contract.
    let (a, b) = unsafe { (min_pairs8(v, at0), min_pairs8(v, at1)) };
    std::array::from_fn(|p| join(a[p], b[p]))
}

/// The eight vectors of tile blocks `p0` (lanes 0-7) and `p1` (lanes 8-15): for 4 bits
/// (`Q4`) load `c`'s low nibbles in `c` and its high ones in `c + 4`, as the 256-bit
/// kernel's `nibbles`; for 8 bits the block's vectors as they are.
///
/// # Safety
/// `p0` and `p1` point at whole tile blocks of the width; the CPU has AVX512-F and BW.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
unsafe fn pair_vectors<const Q4: bool>(p0: *const u8, p1: *const u8) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    let mut u = [_mm512_setzero_si512(); 8];
    for c in 0..4 {
        if Q4 {
            // SAFETY: vector `c` of two 4-bit tile blocks (this function's contract).
            let v = unsafe { pair_bytes(p0, p1, c) };
            u[c] = _mm512_and_si512(v, low);
            u[c + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
        } else {
            // SAFETY: vectors `c` and `c + 4` of two 8-bit tile blocks (this function's
            // contract).
            unsafe {
                u[c] = pair_bytes(p0, p1, c);
                u[c + 4] = pair_bytes(p0, p1, c + 4);
            }
        }
    }
    u
}

/// The two halves' exact integer products of tile blocks `p0` and `p1` (4-bit when `Q4`,
/// else 8-bit) with block `b` of each activation row, per row, started from the halves'
/// offset terms.
///
/// # Safety
/// `p0` and `p1` point at whole tile blocks of the width; every row of `acts` holds more
/// than `b` blocks; the CPU has AVX512-F, BW and VNNI.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
unsafe fn block_pairs<const M: usize, const Q4: bool, const OFFSET: i32>(
    p0: *const u8,
    p1: *const u8,
    b: usize,
    acts: &[QuantizedRow<'_>; M],
) -> [[__m512i; 2]; M] {
    // SAFETY: whole tile blocks of the width (this function's contract).
    let u = unsafe { pair_vectors::<Q4>(p0, p1) };
    std::array::from_fn(|m| {
        let [s0, s1] = half_start_terms::<OFFSET>(&acts[m], b);
        let d = [_mm512_set1_epi32(s0), _mm512_set1_epi32(s1)];
        // SAFETY: row `m` holds more than `b` blocks (this function's contract), so block
        // `b`'s 32 quants.
        unsafe { row_dots(d, &u, acts[m].quants.as_ptr().add(b * BLOCK)) }
    })
}

/// One activation row's block against two tile blocks' eight vectors `u`, into `d`
/// (`block_dots_asm` on 512-bit vectors).
///
/// # Safety
/// `x` points at 32 readable activation quants; the CPU has AVX512-F and VNNI.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vnni")]
unsafe fn row_dots(d: [__m512i; 2], u: &[__m512i; 8], x: *const i8) -> [__m512i; 2] {
    let [mut d0, mut d1] = d;
    // SAFETY: reads the 32 bytes at `x` (the caller's contract), writes only `d0`, `d1`.
    unsafe {
        block_dots_asm!(d0, d1, u, x, zmm_reg, "{{1to16}}");
    }
    [d0, d1]
}

/// [`super::tile::tile_dots`] for the K-quants over pairs of tiles: `tiles` holds an even
/// number of tiles, `out` `M` entries per tile. The sums of the module's K-quants
/// section, as the 256-bit kernel computes them.
///
/// # Safety
/// The CPU has AVX2, FMA, F16C and AVX512-F, BW and VNNI; `tiles` and `acts` passed
/// `tile_dots`' checks, and `tiles` holds an even number of tiles.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub unsafe fn vnni_k_pairs<const M: usize, const Q4: bool, const OFFSET: i32>(
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
) {
    debug_assert_eq!(OFFSET, kind.offset());
    let (blocks, tb) = (tiles.blocks, kind.tile_block_bytes());
    let supers = blocks / SUPER;
    let six = kind == Kind::Q6K;
    for (pair, outs) in out.chunks_exact_mut(PAIR * M).enumerate() {
        let t = PAIR * pair;
        let mut acc = [_mm512_setzero_ps(); M];
        let mut mins = [_mm512_setzero_ps(); M];
        let mut isum = [_mm512_setzero_si512(); M];
        // One bounds check per pair of tiles.
        let tq = &tiles.quants[t * blocks * tb..(t + PAIR) * blocks * tb];
        for b in 0..blocks {
            let (at0, at1) = (t * blocks + b, (t + 1) * blocks + b);
            let (p0, p1) = (tq[b * tb..].as_ptr(), tq[(blocks + b) * tb..].as_ptr());
            // SAFETY: whole tile blocks of the kind's width, each activation row holds
            // `blocks` blocks (the caller's contract).
            let dots = unsafe { block_pairs::<M, Q4, OFFSET>(p0, p1, b, acts) };
            // SAFETY: `SUB_BYTES` integer scales per block (checked by the caller).
            let (s0, s1) = unsafe { subs16(tiles.subs, at0, at1, six) };
            for (isum, [d0, d1]) in isum.iter_mut().zip(dots) {
                let p = if six {
                    _mm512_add_epi32(_mm512_mullo_epi32(d0, s0), _mm512_mullo_epi32(d1, s1))
                } else {
                    _mm512_mullo_epi32(_mm512_add_epi32(d0, d1), s0)
                };
                *isum = _mm512_add_epi32(*isum, p);
            }
            if b % SUPER != SUPER - 1 {
                continue;
            }
            let (st0, st1) = (t * supers + b / SUPER, (t + 1) * supers + b / SUPER);
            // SAFETY: 8 scales per tile and super-block (checked by the caller).
            let d = unsafe { halfs16(tiles.scales, st0, st1) };
            let first = b + 1 - SUPER;
            // The minimums' sums once per super-block, as in the 256-bit kernel.
            let (dmin, mp) = if six {
                (_mm512_setzero_ps(), [_mm512_setzero_si512(); SUPER / 2])
            } else {
                // SAFETY: as the scales; the super-blocks' integer scales (checked by the
                // caller).
                unsafe {
                    (
                        halfs16(tiles.mins, st0, st1),
                        min_pairs16(tiles.subs, at0 + 1 - SUPER, at1 + 1 - SUPER),
                    )
                }
            };
            let rows = acts.iter().zip(&mut acc).zip(&mut mins);
            for (((a, acc), mins), isum) in rows.zip(isum.iter_mut()) {
                let dx = _mm512_set1_ps(a.scales[first]);
                *acc = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(*isum), *acc);
                if !six {
                    let mut msum = _mm512_setzero_si512();
                    for (mp, sp) in mp.iter().zip(sum_pairs(a, first)) {
                        msum = _mm512_dpwssd_epi32(msum, *mp, _mm512_set1_epi32(sp));
                    }
                    let m = _mm512_cvtepi32_ps(msum);
                    *mins = _mm512_fmadd_ps(_mm512_mul_ps(dmin, dx), m, *mins);
                }
                *isum = _mm512_setzero_si512();
            }
        }
        store_pair(
            outs,
            acc.into_iter().zip(mins).map(|(a, m)| _mm512_sub_ps(a, m)),
        );
    }
}

/// Each row's results of a pair of tiles, `v[m]` (lanes 0-7 the first tile's rows, 8-15
/// the second's), into `outs`: the first tile's `M` entries, then the second's.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
fn store_pair(outs: &mut [[f32; TILE]], v: impl Iterator<Item = __m512>) {
    let m = outs.len() / PAIR;
    let (first, second) = outs.split_at_mut(m);
    for ((v, o0), o1) in v.zip(first).zip(second) {
        let lo = _mm512_castps512_ps256(v);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        // SAFETY: each entry is 8 writable f32.
        unsafe {
            _mm256_storeu_ps(o0.as_mut_ptr(), lo);
            _mm256_storeu_ps(o1.as_mut_ptr(), hi);
        }
    }
}

/// [`super::tile::tile_dots`] for the kinds with a scale per block (Q8_0, Q4_0, Q4_1) over
/// pairs of tiles: `tiles` holds an even number of tiles, `out` `M` entries per tile. Per
/// block and activation row, the 256-bit kernel's steps on sixteen rows: the exact
/// integer product started from `-OFFSET` times the block's activation sum, one float
/// step `acc += (d * dx) * dot`, and for Q4_1 (`MINS`) `mins += m * s`, `s` the block's
/// scaled activation sum.
///
/// Measured against the 256-bit kernel over the same spans (BENCHMARKS.md, "Q8_0, Q4_0
/// and Q4_1 two tiles at a time on 512-bit vectors"): one SmolLM2 layer at 128 rows on one
/// thread takes about three quarters of the time.
///
/// # Safety
/// The CPU has AVX2, FMA, F16C and AVX512-F, BW and VNNI; `tiles` and `acts` passed
/// `tile_dots`' checks, and `tiles` holds an even number of tiles.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub unsafe fn vnni_pairs<const M: usize, const Q4: bool, const OFFSET: i32, const MINS: bool>(
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
) {
    debug_assert_eq!((OFFSET, MINS), (kind.offset(), kind.has_mins()));
    let (blocks, tb) = (tiles.blocks, kind.tile_block_bytes());
    for (pair, outs) in out.chunks_exact_mut(PAIR * M).enumerate() {
        let t = PAIR * pair;
        let mut acc = [_mm512_setzero_ps(); M];
        let mut mins = [_mm512_setzero_ps(); M];
        // One bounds check per pair of tiles.
        let tq = &tiles.quants[t * blocks * tb..(t + PAIR) * blocks * tb];
        for b in 0..blocks {
            let (at0, at1) = (t * blocks + b, (t + 1) * blocks + b);
            let (p0, p1) = (tq[b * tb..].as_ptr(), tq[(blocks + b) * tb..].as_ptr());
            // SAFETY: whole tile blocks of the kind's width (the caller's contract), and 8
            // scales (minimums) per tile and block (checked by the caller).
            let (u, dw) = unsafe { (pair_vectors::<Q4>(p0, p1), halfs16(tiles.scales, at0, at1)) };
            let mw = if MINS {
                // SAFETY: as the scales.
                unsafe { halfs16(tiles.mins, at0, at1) }
            } else {
                _mm512_setzero_ps()
            };
            for ((a, acc), mins) in acts.iter().zip(&mut acc).zip(&mut mins) {
                let start = _mm512_set1_epi32(block_start_term::<OFFSET>(a, b));
                let d = [start, _mm512_setzero_si512()];
                // SAFETY: `a` holds `blocks` blocks (the caller's contract), so block `b`'s
                // 32 quants.
                let [d0, d1] = unsafe { row_dots(d, &u, a.quants.as_ptr().add(b * BLOCK)) };
                let dd = _mm512_mul_ps(dw, _mm512_set1_ps(a.scales[b]));
                *acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), *acc);
                if MINS {
                    *mins = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.scaled_sums[b]), *mins);
                }
            }
        }
        let sums = acc.into_iter().zip(mins);
        store_pair(
            outs,
            sums.map(|(a, m)| if MINS { _mm512_add_ps(a, m) } else { a }),
        );
    }
}
