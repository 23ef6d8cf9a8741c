//! Dot products of one packed weight row with up to four quantized activation rows, for
//! each instruction set the packed matmul can run on.
//!
//! The weights are stored unsigned, as `w + o` (`o` = 128 for 8-bit, 8 for 4-bit), so that
//! the unsigned-by-signed byte products of `vpmaddubsw` and `vpdpbusd` apply; the offset
//! comes back out through the activation block's quant sum. Each weight block is loaded
//! (and for 4-bit unpacked) once and multiplied with every activation row of the group,
//! so a batch of rows reads the weights once.

use half::f16;

use super::activations::{padded, QuantizedRow, BLOCK, GROUP};

/// An instruction set the kernels are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust; the reference the others are tested against.
    Scalar,
    /// AVX2, FMA and F16C (`vpmaddubsw`, `vpmaddwd`).
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
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
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

/// A packed weight row of `quants.len() / kind.block_bytes()` blocks.
#[derive(Debug, Clone, Copy)]
pub struct WeightRow<'a> {
    /// The stored quants.
    pub quants: &'a [u8],
    /// One f16 scale per block, padded with zeros to [`padded`] entries.
    pub scales: &'a [f16],
    /// One f16 minimum per block, padded likewise (Q4_1), or empty.
    pub mins: &'a [f16],
}

/// Consecutive packed weight rows of `blocks` blocks each, as [`WeightRow`]s end to end.
#[derive(Debug, Clone, Copy)]
pub struct WeightRows<'a> {
    /// Blocks per row.
    pub blocks: usize,
    /// The rows' stored quants.
    pub quants: &'a [u8],
    /// The rows' scales, [`padded`] entries per row.
    pub scales: &'a [f16],
    /// The rows' minimums (Q4_1), laid out as the scales, or empty.
    pub mins: &'a [f16],
}

impl<'a> WeightRows<'a> {
    /// Row `j` (`bytes`: its quants' length).
    #[inline]
    fn row(&self, j: usize, bytes: usize) -> WeightRow<'a> {
        let pad = padded(self.blocks);
        WeightRow {
            quants: &self.quants[j * bytes..(j + 1) * bytes],
            scales: &self.scales[j * pad..(j + 1) * pad],
            mins: self.mins.get(j * pad..(j + 1) * pad).unwrap_or(&[]),
        }
    }
}

/// `out[j] = [dot(w_j, a) for a in acts]` for each weight row `w_j` of `w`: for each
/// activation row, the sum over blocks of `d * dx * dot(u - offset, x)`, plus
/// `m * dx * sum(x)` for Q4_1. The loop over the weight rows runs inside the kernel of
/// `isa`, and the lengths are checked once for all of them.
///
/// # Panics
/// When the lengths of the rows disagree, or `out` has another number of rows than `w`.
///
/// # Safety
/// `isa` must be available on this CPU ([`Isa::is_available`]).
pub unsafe fn rows_dots<const M: usize>(
    isa: Isa,
    kind: Kind,
    w: WeightRows<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; M]],
) {
    let (blocks, bytes) = (w.blocks, w.blocks * kind.block_bytes());
    let pad = padded(blocks);
    let rows = out.len();
    assert_eq!(w.quants.len(), rows * bytes, "weight rows' length");
    assert_eq!(w.scales.len(), rows * pad, "weight scales");
    let has_mins = kind == Kind::Q4_1;
    assert_eq!(
        w.mins.len(),
        if has_mins { rows * pad } else { 0 },
        "minimums"
    );
    for a in acts {
        assert!(
            a.quants.len() == blocks * BLOCK
                && a.biased.len() == blocks * BLOCK
                && a.scales.len() == pad
                && a.scaled_sums.len() == pad
                && a.lane_sums.len() == blocks * BLOCK / 4,
            "activation row length"
        );
    }
    match isa {
        Isa::Scalar => {
            for (j, o) in out.iter_mut().enumerate() {
                *o = scalar(kind, w.row(j, bytes), acts);
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512Vnni => {
            // The shifts and VNNI's offsets are the kinds' offsets: 128 = 1 << 7 (-128 as an
            // `i8`, the same byte), 8 = 1 << 3; Q4_1 has none.
            // SAFETY: the CPU has the features each function enables (the caller's contract);
            // every row holds `blocks` blocks and `pad` entries (asserted above), all they read.
            unsafe {
                match (isa, kind) {
                    (Isa::Avx512Vnni, Kind::Q8_0) => {
                        x86::vnni::<M, false, { i8::MIN }>(w, bytes, acts, out)
                    }
                    (Isa::Avx512Vnni, Kind::Q4_0) => x86::vnni::<M, true, 8>(w, bytes, acts, out),
                    (Isa::Avx512Vnni, Kind::Q4_1) => x86::vnni::<M, true, 0>(w, bytes, acts, out),
                    (_, Kind::Q8_0) => x86::avx2_q8(w, bytes, acts, out),
                    (_, Kind::Q4_0) => x86::avx2_q4::<M, 3>(w, bytes, acts, out),
                    (_, Kind::Q4_1) => x86::avx2_q4::<M, 0>(w, bytes, acts, out),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("{isa:?} is only available on x86_64"),
    }
}

fn scalar<const M: usize>(kind: Kind, w: WeightRow<'_>, acts: &[QuantizedRow<'_>; M]) -> [f32; M] {
    let mut out = [0f32; M];
    let bb = kind.block_bytes();
    for (b, (wb, dw)) in w.quants.chunks_exact(bb).zip(w.scales).enumerate() {
        let dw = dw.to_f32();
        let min = w.mins.get(b).map(|m| m.to_f32());
        for (o, a) in out.iter_mut().zip(acts) {
            let xq = &a.quants[b * BLOCK..(b + 1) * BLOCK];
            // The lane sums are negated: adding them takes the offset out.
            let lanes: i32 = a.lane_sums[b * BLOCK / 4..(b + 1) * BLOCK / 4].iter().sum();
            let dot: i32 = (0..BLOCK)
                .map(|j| kind.stored(wb, j) * i32::from(xq[j]))
                .sum::<i32>()
                + kind.offset() * lanes;
            *o += dw * a.scales[b] * dot as f32;
            if let Some(m) = min {
                *o += m * a.scaled_sums[b];
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{QuantizedRow, WeightRow, WeightRows, BLOCK, GROUP};

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

    /// Activation block `b` of `a`, biased by 128 (unsigned).
    ///
    /// # Safety
    /// `a` must hold at least `b + 1` blocks.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_biased_acts(a: &QuantizedRow<'_>, b: usize) -> __m256i {
        // SAFETY: the block is 32 bytes at `b * 32`, inside `a.biased` (the caller's contract).
        unsafe { _mm256_loadu_si256(a.biased.as_ptr().add(b * BLOCK).cast()) }
    }

    /// `v[at..at + 8]` as f32.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn halfs8(v: &[f16], at: usize) -> __m256 {
        let v = &v[at..at + GROUP];
        // SAFETY: `v` is 8 f16, 16 readable bytes (the slice above is bounds-checked).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(v.as_ptr().cast()) })
    }

    /// `v[at..at + 8]`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn floats8(v: &[f32], at: usize) -> __m256 {
        let v = &v[at..at + GROUP];
        // SAFETY: `v` is 8 f32, 32 readable bytes (the slice above is bounds-checked).
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// Block `b`'s 8 negated lane sums of `a`.
    ///
    /// # Safety
    /// `a` must hold at least `b + 1` blocks.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load_lane_sums(a: &QuantizedRow<'_>, b: usize) -> __m256i {
        // SAFETY: the block's 8 lanes are 32 bytes at `b * 8`, inside `a.lane_sums` (the
        // caller's contract).
        unsafe { _mm256_loadu_si256(a.lane_sums.as_ptr().add(b * BLOCK / 4).cast()) }
    }

    /// The loops of every SIMD kernel, over the weight rows and their blocks, in a macro so
    /// that they compile inside each one's `target_feature` function.
    ///
    /// Per group of 8 blocks, for each activation row: the products of the weight and
    /// activation scales (`d * dx`, one multiply for the 8) and the Q4_1 minimum term
    /// `m * dx * sum(x)` are vector operations. Per block, `$prep` readies the loaded
    /// weights once for all rows, and `$dot` gives 8 lanes of integer products with one
    /// activation row's block `$x` (read by `$load`; `$ls`: its negated lane sums, for the
    /// offset), each lane
    /// the sum over 4 consecutive bytes, as candle's and ggml's kernels have them, so that
    /// the float arithmetic after it is theirs too.
    macro_rules! block_loop {
        ($rows:expr, $bytes:expr, $acts:expr, $out:expr, $m:ident, $q4:expr, $load:ident,
         |$wb:ident| $prep:expr, |$p:ident, $x:ident, $ls:ident| $dot:expr) => {{
            let (rows, acts): (WeightRows<'_>, &[QuantizedRow<'_>; $m]) = ($rows, $acts);
            for (j, o) in $out.iter_mut().enumerate() {
            let w: WeightRow<'_> = rows.row(j, $bytes);
            let blocks = rows.blocks;
            let mut acc = [_mm256_setzero_ps(); $m];
            let mut mins_acc = [_mm256_setzero_ps(); $m];
            let mut dd = [[0f32; GROUP]; $m];
            for g in (0..blocks).step_by(GROUP) {
                let dw = halfs8(w.scales, g);
                let mins = (!w.mins.is_empty()).then(|| halfs8(w.mins, g));
                for ((a, dd), mins_acc) in acts.iter().zip(&mut dd).zip(&mut mins_acc) {
                    // SAFETY: `dd` is 8 writable f32.
                    unsafe {
                        _mm256_storeu_ps(dd.as_mut_ptr(), _mm256_mul_ps(dw, floats8(a.scales, g)))
                    };
                    if let Some(m) = mins {
                        *mins_acc = _mm256_fmadd_ps(m, floats8(a.scaled_sums, g), *mins_acc);
                    }
                }
                for (j, b) in (g..blocks.min(g + GROUP)).enumerate() {
                    // SAFETY: `w` holds `blocks` blocks (the caller's contract).
                    let $wb = unsafe { load_block::<{ $q4 }>(w.quants.as_ptr(), b) };
                    let $p = $prep;
                    for ((acc, a), dd) in acc.iter_mut().zip(acts).zip(&dd) {
                        // SAFETY: every row holds `blocks` blocks (the caller's contract).
                        let ($x, $ls) = unsafe { ($load(a, b), load_lane_sums(a, b)) };
                        let dot = _mm256_cvtepi32_ps($dot);
                        *acc = _mm256_fmadd_ps(_mm256_set1_ps(dd[j]), dot, *acc);
                    }
                }
            }
            *o = if w.mins.is_empty() {
                std::array::from_fn(|i| hsum(acc[i]))
            } else {
                std::array::from_fn(|i| hsum(acc[i]) + hsum(mins_acc[i]))
            };
            }
        }};
    }

    /// AVX2, 8-bit weights: the sign trick (`|w| * sign(x, w)`, which never saturates
    /// `vpmaddubsw`) on the signed weights, so no offset term.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; the weight row and every row of `acts` hold the same
    /// whole number of blocks, and the per-block entries of [`super::padded`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_q8<const M: usize>(
        w: WeightRows<'_>,
        bytes: usize,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; M]],
    ) {
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(-128);
        block_loop!(
            w,
            bytes,
            acts,
            out,
            M,
            false,
            load_acts,
            |wb| {
                let s = _mm256_xor_si256(wb, flip);
                (_mm256_sign_epi8(s, s), s)
            },
            |p, x, _ls| _mm256_madd_epi16(
                _mm256_maddubs_epi16(p.0, _mm256_sign_epi8(x, p.1)),
                ones
            )
        )
    }

    /// AVX2, 4-bit weights: unsigned nibbles times signed activations in `vpmaddubsw`
    /// directly (at most 15 * 127 * 2 per pair), less the offset `1 << SHIFT` (none when
    /// `SHIFT` is 0: Q4_1) times each lane's activation sum.
    ///
    /// # Safety
    /// As [`avx2_q8`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_q4<const M: usize, const SHIFT: i32>(
        w: WeightRows<'_>,
        bytes: usize,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; M]],
    ) {
        let ones = _mm256_set1_epi16(1);
        block_loop!(w, bytes, acts, out, M, true, load_acts, |wb| wb, |u, x, ls| {
            let d = _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones);
            if SHIFT > 0 {
                _mm256_add_epi32(d, _mm256_slli_epi32::<SHIFT>(ls))
            } else {
                d
            }
        })
    }

    /// AVX-512 VNNI on 256-bit vectors: one `vpdpbusd` per block and row, of the activations
    /// biased by 128 (unsigned) with the signed weights `u - OFFSET` (a wrapping byte
    /// subtraction: Q8_0's 128 is -128 as an `i8`), started from minus 128 times the weights'
    /// lane sums, which one more `vpdpbusd` per weight block gives for every row. Each lane
    /// is then `sum((x + 128) * w) - 128 * sum(w) = sum(x * w)`, exactly the signed kernels'
    /// lane, and the rows share all the work on the weights.
    ///
    /// # Safety
    /// As [`avx2_q8`], and the CPU has AVX512-VNNI and AVX512-VL.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn vnni<const M: usize, const Q4: bool, const OFFSET: i8>(
        w: WeightRows<'_>,
        bytes: usize,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; M]],
    ) {
        let bias = _mm256_set1_epi8(i8::MIN);
        block_loop!(
            w,
            bytes,
            acts,
            out,
            M,
            Q4,
            load_biased_acts,
            |wb| {
                let signed = _mm256_sub_epi8(wb, _mm256_set1_epi8(OFFSET));
                let bias_lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, signed);
                (signed, _mm256_sub_epi32(_mm256_setzero_si256(), bias_lanes))
            },
            |p, x, _ls| _mm256_dpbusd_epi32(p.1, x, p.0)
        )
    }
}
