//! Dot products of one packed weight row with up to four quantized activation rows, for
//! each instruction set the packed matmul can run on.
//!
//! The weights are stored unsigned, as `w + o` (`o` = 128 for 8-bit, 8 for 4-bit), so that
//! the unsigned-by-signed byte products of `vpmaddubsw` and `vpdpbusd` apply; the offset
//! comes back out through the activation block's quant sum. Each weight block is loaded
//! (and for 4-bit unpacked) once and multiplied with every activation row of the group,
//! so a batch of rows reads the weights once.

use super::activations::{QuantizedRow, BLOCK};

/// An instruction set the kernels are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust; the reference the others are tested against.
    Scalar,
    /// AVX2 and FMA (`vpmaddubsw`, `vpmaddwd`).
    Avx2,
    /// AVX-512 VNNI on 256-bit vectors (`vpdpbusd`): one instruction per block and row.
    Avx512Vnni,
}

impl Isa {
    /// Every instruction set, fastest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512Vnni, Isa::Avx2, Isa::Scalar];

    /// Whether this CPU can run the kernels of `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.is_available()
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest instruction set this CPU has.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .find(|i| i.is_available())
            .unwrap_or(Isa::Scalar)
    }
}

/// How a packed matrix stores its weights: unsigned quants `u` and per block a scale `d`,
/// for Q4_1 also a minimum `m`; the weight is `d * (u - offset)`, or `d * u + m` for Q4_1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A byte per weight, `u = q + 128` (from ggml Q8_0).
    Q8_0,
    /// Two weights per byte, `u = q + 8`, the first 16 of a block in the low nibbles and
    /// the last 16 in the high ones (ggml Q4_0's order).
    Q4_0,
    /// Two weights per byte as Q4_0, `u = q`, with the block's minimum (ggml Q4_1).
    Q4_1,
}

impl Kind {
    /// Bytes of one block of [`BLOCK`] weights.
    pub fn block_bytes(self) -> usize {
        match self {
            Kind::Q8_0 => BLOCK,
            Kind::Q4_0 | Kind::Q4_1 => BLOCK / 2,
        }
    }

    /// The unsigned offset of a stored quant (0 for Q4_1, whose blocks have a minimum).
    pub fn offset(self) -> i32 {
        match self {
            Kind::Q8_0 => 128,
            Kind::Q4_0 => 8,
            Kind::Q4_1 => 0,
        }
    }

    /// The stored (unsigned) value of weight `j` of the block `wb`.
    pub fn stored(self, wb: &[u8], j: usize) -> i32 {
        match self {
            Kind::Q8_0 => i32::from(wb[j]),
            _ if j < BLOCK / 2 => i32::from(wb[j] & 0x0F),
            _ => i32::from(wb[j - BLOCK / 2] >> 4),
        }
    }
}

/// `[sum over blocks of d * dx * dot(u - offset, x) for each row of acts]`, where `u` and `d`
/// are one weight row of `kind` (`w`, `scales`: `scales.len()` blocks) and `x` and `dx` a row
/// of `acts` (each holding as many blocks). Q4_1's minimum is the caller's to add.
///
/// # Panics
/// When the lengths disagree, or `isa` is not available on this CPU.
pub fn row_dots<const M: usize>(
    isa: Isa,
    kind: Kind,
    w: &[u8],
    scales: &[f32],
    acts: &[QuantizedRow<'_>; M],
) -> [f32; M] {
    let blocks = scales.len();
    assert_eq!(w.len(), blocks * kind.block_bytes(), "weight row length");
    for a in acts {
        assert!(
            a.quants.len() == blocks * BLOCK && a.scales.len() == blocks && a.sums.len() == blocks,
            "activation row length"
        );
    }
    match isa {
        Isa::Scalar => scalar(kind, w, scales, acts),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512Vnni => {
            assert!(isa.is_available(), "{isa:?} is not available on this CPU");
            // SAFETY: the CPU has the features each function enables (asserted above), and
            // every row holds `blocks` whole blocks (asserted above), which is all they read.
            unsafe {
                let off = kind.offset();
                match (isa, kind) {
                    (Isa::Avx512Vnni, Kind::Q8_0) => x86::vnni::<M, false>(w, scales, acts, off),
                    (Isa::Avx512Vnni, _) => x86::vnni::<M, true>(w, scales, acts, off),
                    (_, Kind::Q8_0) => x86::avx2::<M, false>(w, scales, acts, off),
                    (_, _) => x86::avx2::<M, true>(w, scales, acts, off),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => panic!("{isa:?} is not available on this CPU"),
    }
}

fn scalar<const M: usize>(
    kind: Kind,
    w: &[u8],
    scales: &[f32],
    acts: &[QuantizedRow<'_>; M],
) -> [f32; M] {
    let mut out = [0f32; M];
    let bb = kind.block_bytes();
    for (b, (wb, &dw)) in w.chunks_exact(bb).zip(scales).enumerate() {
        for (o, a) in out.iter_mut().zip(acts) {
            let xq = &a.quants[b * BLOCK..(b + 1) * BLOCK];
            let dot: i32 = (0..BLOCK)
                .map(|j| kind.stored(wb, j) * i32::from(xq[j]))
                .sum::<i32>()
                - kind.offset() * a.sums[b];
            *o += dw * a.scales[b] * dot as f32;
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{QuantizedRow, BLOCK};

    /// The stored bytes of block `b` as 32 unsigned bytes.
    ///
    /// # Safety
    /// `w` must hold at least `b + 1` blocks (32 bytes each for 8-bit, 16 for 4-bit).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_block<const Q4: bool>(w: *const u8, b: usize) -> __m256i {
        if Q4 {
            // SAFETY: block `b` is 16 bytes at `b * 16`, inside `w` (the caller's contract).
            let lo = unsafe { _mm_loadu_si128(w.add(b * BLOCK / 2).cast()) };
            let hi = _mm_srli_epi16(lo, 4);
            _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
        } else {
            // SAFETY: block `b` is 32 bytes at `b * 32`, inside `w` (the caller's contract).
            unsafe { _mm256_loadu_si256(w.add(b * BLOCK).cast()) }
        }
    }

    /// Activation block `b` of `a`.
    ///
    /// # Safety
    /// `a` must hold at least `b + 1` blocks.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_acts(a: &QuantizedRow<'_>, b: usize) -> __m256i {
        // SAFETY: the block is 32 bytes at `b * 32`, inside `a.quants` (the caller's contract).
        unsafe { _mm256_loadu_si256(a.quants.as_ptr().add(b * BLOCK).cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// AVX2: 8-bit weights through the sign trick (`|w| * sign(x, w)`, which never
    /// saturates `vpmaddubsw`; `offset` must be 128), 4-bit ones directly (at most
    /// 15 * 127 * 2 per pair) less `offset` times the activations' sum.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `w`, `scales` and every row of `acts` hold the same whole
    /// number of blocks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2<const M: usize, const Q4: bool>(
        w: &[u8],
        scales: &[f32],
        acts: &[QuantizedRow<'_>; M],
        offset: i32,
    ) -> [f32; M] {
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(-128);
        let mut acc = [_mm256_setzero_ps(); M];
        for (b, &dw) in scales.iter().enumerate() {
            // SAFETY: `w` holds `scales.len()` blocks (the caller's contract).
            let wb = unsafe { load_block::<Q4>(w.as_ptr(), b) };
            let (wabs, wsigned) = if Q4 {
                (wb, wb)
            } else {
                let s = _mm256_xor_si256(wb, flip);
                (_mm256_sign_epi8(s, s), s)
            };
            for (acc, a) in acc.iter_mut().zip(acts) {
                // SAFETY: every row holds `scales.len()` blocks (the caller's contract).
                let x = unsafe { load_acts(a, b) };
                let dot = if Q4 {
                    let d = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, x), ones);
                    let o = _mm256_zextsi128_si256(_mm_cvtsi32_si128(offset * a.sums[b]));
                    _mm256_sub_epi32(d, o)
                } else {
                    let p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(x, wsigned));
                    _mm256_madd_epi16(p, ones)
                };
                let d = _mm256_set1_ps(dw * a.scales[b]);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
            }
        }
        acc.map(|v| hsum(v))
    }

    /// AVX-512 VNNI on 256-bit vectors: `vpdpbusd` of the stored (unsigned) weights with
    /// the activations, started from `-offset * sum(x)` in one lane (any offset).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, AVX512-VNNI and AVX512-VL; `w`, `scales` and every row of
    /// `acts` hold the same whole number of blocks.
    #[target_feature(enable = "avx2,fma,avx512vnni,avx512vl")]
    pub(super) unsafe fn vnni<const M: usize, const Q4: bool>(
        w: &[u8],
        scales: &[f32],
        acts: &[QuantizedRow<'_>; M],
        offset: i32,
    ) -> [f32; M] {
        let mut acc = [_mm256_setzero_ps(); M];
        for (b, &dw) in scales.iter().enumerate() {
            // SAFETY: `w` holds `scales.len()` blocks (the caller's contract).
            let wb = unsafe { load_block::<Q4>(w.as_ptr(), b) };
            for (acc, a) in acc.iter_mut().zip(acts) {
                // SAFETY: every row holds `scales.len()` blocks (the caller's contract).
                let x = unsafe { load_acts(a, b) };
                let start = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-offset * a.sums[b]));
                let dot = _mm256_dpbusd_epi32(start, wb, x);
                let d = _mm256_set1_ps(dw * a.scales[b]);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
            }
        }
        acc.map(|v| hsum(v))
    }
}
