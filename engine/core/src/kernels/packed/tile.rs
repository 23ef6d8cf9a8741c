//! Dot products of a tile of eight packed weight rows with up to four quantized activation
//! rows, for each instruction set the packed matmul can run on.
//!
//! # The tile layout
//!
//! Weight rows are stored in tiles of [`TILE`] = 8 consecutive rows, block by block: for
//! each tile and each block of 32 weights, the eight rows' quants interleaved so that a
//! 32-byte vector holds four consecutive quants of each of the eight rows. One `vpdpbusd`
//! (or `vpmaddubsw` + `vpmaddwd`) of such a vector with four activation bytes broadcast to
//! every lane then advances all eight rows by four products, and the eight lanes of the
//! result are the eight rows' sums: no horizontal sum per row, and one float conversion,
//! one scale multiply and one FMA per block serve eight rows. This is the layout llama.cpp
//! repacks its Q4_0 weights into for the same reason (its `block_q4_0x8`).
//!
//! - Q8_0: per tile and block, eight vectors; vector `t` byte `4r + p` is row `r`'s quant
//!   `4t + p`, stored unsigned as `q + 128`.
//! - Q4_0 and Q4_1: per tile and block, four vectors; vector `c` byte `4r + p` is row `r`'s
//!   ggml byte `4c + p`, whose low nibble is quant `4c + p` and high nibble quant
//!   `16 + 4c + p` (ggml's order), stored unsigned as ggml stores them (`q + 8` for Q4_0).
//! - Scales (and Q4_1's minimums): per tile and block, the eight rows' f16 values.
//!
//! The unsigned quants `u` take the weight's offset `o` (128, 8, or 0 for Q4_1) back out
//! through the activation block's quant sum: `sum((u - o) * x) = sum(u * x) - o * sum(x)`,
//! exact in integers. Each block's float step is `acc += (d * dx) * dot` (one rounding for
//! the scale product, one fused multiply-add), the same in every kernel, so every
//! instruction set gives the same result bit for bit, for any number of activation rows.
//!
//! # K-quants
//!
//! ggml's Q4_K, Q5_K and Q6_K group 256 weights into a super-block with an f16 scale `d`
//! (and for Q4_K and Q5_K an f16 minimum scale `dmin`), and give each part of it a small
//! integer scale: each block of 32 a 6-bit scale `sc` and minimum `m` (the weight is
//! `d * sc * q - dmin * m`, `q` of 4 or 5 bits), or for Q6_K each half block of 16 an
//! 8-bit signed scale `s` (the weight is `d * s * (q - 32)`, `q` of 6 bits). Packed, a row's
//! 32-weight blocks keep the tile layout above: Q4_K's quants as Q4_1's nibbles, Q5_K's and
//! Q6_K's in the 8-bit layout of Q8_0's, as they are (`u = q`, of 5 or 6 bits: offset 0, or
//! 32 for Q6_K, whose weight is `q - 32`), so that AVX2 multiplies them unsigned directly;
//! per tile and block the eight rows' integer scales ([`SUB_BYTES`]: `sc` then `m`, or the
//! halves' `s`); per tile and super-block the eight rows' `d` (in `scales`) and `dmin` (in
//! `mins`). The activations come with one scale `dx` per super-block (as ggml's Q8_K has
//! them), so a super-block's integer scales apply in integers: with `p_bh` the exact
//! integer dot product of half `h` of block `b`, each row sums
//! `P = Σ_b sc_b * (p_b0 + p_b1)` and `S = Σ_b m_b * sum(x_b)` (Q4_K, Q5_K) or
//! `P = Σ_b (s_b0 * p_b0 + s_b1 * p_b1)` (Q6_K) in i32 (at most 2^27 in magnitude), and the
//! super-block's one float step is `acc += (d * dx) * P` and `mins += (dmin * dx) * S`, the
//! same in every kernel: 8 float steps fewer per super-block and row than with a scale per
//! block.

use half::f16;

use super::activations::{QuantizedRow, BLOCK};
use crate::kernels::{Isa, Level};

/// Weight rows per tile.
pub const TILE: usize = 8;

/// Blocks of [`BLOCK`] per K-quant super-block (256 weights).
pub const SUPER: usize = 8;

/// Bytes of a tile block's integer scales for the K-quants: [`TILE`] rows' `sc`, then their
/// `m` (Q4_K, Q5_K), or their first half's `s`, then their second's (Q6_K).
pub const SUB_BYTES: usize = 2 * TILE;

/// How a packed matrix stores its weights: unsigned quants `u` and per block a scale `d`,
/// for Q4_1 also a minimum `m`; the weight is `d * (u - offset)`, or `d * u + m` for Q4_1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A byte per weight, `u = q + 128` (from ggml Q8_0).
    Q8_0,
    /// Two weights per byte, `u = q + 8`, in ggml Q4_0's nibble order.
    Q4_0,
    /// Two weights per byte as Q4_0, `u = q`, with the block's minimum (ggml Q4_1).
    Q4_1,
    /// Two weights per byte as Q4_1, `u = q`, with integer scales and minimums per block
    /// under a super-block's two f16 scales (ggml Q4_K).
    Q4K,
    /// A byte per weight, `u = q` (`q` of 5 bits), scaled as Q4_K (ggml Q5_K).
    Q5K,
    /// A byte per weight, `u = q` (`q` of 6 bits, the weight `q - 32`), with a signed
    /// integer scale per half block under a super-block's f16 scale (ggml Q6_K).
    Q6K,
}

impl Kind {
    /// Bytes of one row's block of [`BLOCK`] weights.
    pub fn block_bytes(self) -> usize {
        match self {
            Kind::Q8_0 | Kind::Q5K | Kind::Q6K => BLOCK,
            Kind::Q4_0 | Kind::Q4_1 | Kind::Q4K => BLOCK / 2,
        }
    }

    /// Whether this is a K-quant (super-blocks of [`SUPER`] blocks, integer scales).
    pub fn is_k(self) -> bool {
        matches!(self, Kind::Q4K | Kind::Q5K | Kind::Q6K)
    }

    /// Blocks that share one entry of `scales` (and `mins`): 1, or a super-block.
    pub fn scale_blocks(self) -> usize {
        if self.is_k() {
            SUPER
        } else {
            1
        }
    }

    /// Bytes of one tile's block: [`TILE`] rows' blocks.
    pub fn tile_block_bytes(self) -> usize {
        TILE * self.block_bytes()
    }

    /// The unsigned offset of a stored quant (0 for the kinds whose blocks have a minimum).
    pub fn offset(self) -> i32 {
        match self {
            Kind::Q8_0 => 128,
            Kind::Q6K => 32,
            Kind::Q4_0 => 8,
            Kind::Q4_1 | Kind::Q4K | Kind::Q5K => 0,
        }
    }

    /// Whether the weights carry minimums (`mins` is laid out as `scales`).
    pub fn has_mins(self) -> bool {
        matches!(self, Kind::Q4_1 | Kind::Q4K | Kind::Q5K)
    }

    /// Where quant `j` of row `r` of a tile's block lives: the byte, and for 4-bit kinds
    /// whether it is the high nibble.
    pub fn position(self, r: usize, j: usize) -> (usize, bool) {
        match self.block_bytes() {
            BLOCK => (BLOCK * (j / 4) + 4 * r + j % 4, false),
            _ => {
                let low = j % (BLOCK / 2);
                (BLOCK * (low / 4) + 4 * r + low % 4, j >= BLOCK / 2)
            }
        }
    }

    /// The stored (unsigned) quant `j` of row `r` of the tile block `tb`.
    pub fn stored(self, tb: &[u8], r: usize, j: usize) -> i32 {
        let (at, high) = self.position(r, j);
        match (self.block_bytes() == BLOCK, high) {
            (true, _) => i32::from(tb[at]),
            (_, false) => i32::from(tb[at] & 0x0F),
            (_, true) => i32::from(tb[at] >> 4),
        }
    }
}

/// Consecutive tiles of `blocks` blocks each.
#[derive(Debug, Clone, Copy)]
pub struct Tiles<'a> {
    /// Blocks per row.
    pub blocks: usize,
    /// The tiles' quants, [`Kind::tile_block_bytes`] per block.
    pub quants: &'a [u8],
    /// The tiles' scales, [`TILE`] per block (K-quants: per super-block).
    pub scales: &'a [f16],
    /// The tiles' minimums (Q4_1, Q4_K, Q5_K), laid out as the scales, or empty.
    pub mins: &'a [f16],
    /// The K-quants' integer scales, [`SUB_BYTES`] per block; empty for the other kinds.
    pub subs: &'a [u8],
    /// Whether the quants stream from memory, read once (a decode step's product): the
    /// SIMD kernels then prefetch [`PREFETCH_AHEAD`] bytes ahead. Products over spans of
    /// weights kept in the cache leave it off.
    pub stream: bool,
}

/// How far ahead of the tile block they work on the SIMD kernels prefetch quants that
/// stream from memory ([`Tiles::stream`]): a page. Without it a one-row decode step waited
/// on memory (half of the AVX2 Q8_0 kernel's samples fell on the instruction after its
/// first load) at about half the bandwidth two threads draw; Intel documents that its L2
/// streamer does not prefetch across a 4 KiB page. Measured in BENCHMARKS.md (the
/// prefetch paragraph of the K-quant section): 1,024 to 16,384 bytes ahead all gained,
/// 4,096 to 16,384 about equally.
pub const PREFETCH_AHEAD: usize = 4096;

/// `out[t * M + m][r]`: the product of row `r` of tile `t` of `tiles` with activation row
/// `m` of `acts`, the sum over blocks of `d * dx * dot(u - offset, x)`, plus
/// `m * dx * sum(x)` for Q4_1 (for the K-quants, the sums of the module's K-quants
/// section, over activation rows with one scale per super-block:
/// `QuantizedRows::new_grouped` with [`SUPER`]). The loop over the tiles runs inside the
/// kernel of `isa`, and the lengths are checked once for all of them.
///
/// # Panics
/// When the lengths disagree, or `out` is not `M` entries per tile.
pub fn tile_dots<const M: usize>(
    isa: Isa,
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
) {
    check_lengths(kind, &tiles, acts, out.len());
    match isa.level() {
        Level::Portable if kind.is_k() => scalar_k(kind, tiles, acts, out),
        Level::Portable => scalar(kind, tiles, acts, out),
        #[cfg(target_arch = "x86_64")]
        level @ (Level::Avx2 | Level::Avx512Vnni) => {
            // Every tile and row holds `blocks` blocks (`check_lengths`), all they read.
            // SAFETY: the CPU has the features each function enables (an `Isa` of `level`
            // exists only where it does), and the reads stay inside the tiles and rows.
            unsafe {
                // Each kind's offset is a constant of its kernel's instance (the last
                // parameter): computed at run time, the start terms it gives cost a 1.1B
                // layer's Q4_K product a fifth of its time (BENCHMARKS.md).
                let vnni = level == Level::Avx512Vnni;
                // Weights from the cache run two tiles at a time on 512-bit vectors; a
                // decode step's, streaming from memory, on 256-bit ones (`super::wide`).
                let wide = vnni && !tiles.stream;
                match kind {
                    Kind::Q8_0 if wide => {
                        in_pairs(kind, tiles, acts, out, plain::<M, false, 128, false>())
                    }
                    Kind::Q4_0 if wide => {
                        in_pairs(kind, tiles, acts, out, plain::<M, true, 8, false>())
                    }
                    Kind::Q4_1 if wide => {
                        in_pairs(kind, tiles, acts, out, plain::<M, true, 0, true>())
                    }
                    Kind::Q4K if wide => in_pairs(kind, tiles, acts, out, k::<M, true, 0>()),
                    Kind::Q5K if wide => in_pairs(kind, tiles, acts, out, k::<M, false, 0>()),
                    Kind::Q6K if wide => in_pairs(kind, tiles, acts, out, k::<M, false, 32>()),
                    Kind::Q4K if vnni => x86::vnni_k::<M, true, 0>(kind, tiles, acts, out),
                    Kind::Q5K if vnni => x86::vnni_k::<M, false, 0>(kind, tiles, acts, out),
                    Kind::Q6K if vnni => x86::vnni_k::<M, false, 32>(kind, tiles, acts, out),
                    Kind::Q8_0 if vnni => x86::vnni::<M, false, 128>(kind, tiles, acts, out),
                    Kind::Q4_0 if vnni => x86::vnni::<M, true, 8>(kind, tiles, acts, out),
                    Kind::Q4_1 if vnni => x86::vnni::<M, true, 0>(kind, tiles, acts, out),
                    Kind::Q4K => x86::avx2_k4(tiles, acts, out),
                    Kind::Q5K => x86::avx2_k8::<M, 0>(kind, tiles, acts, out),
                    Kind::Q6K => x86::avx2_k8::<M, 32>(kind, tiles, acts, out),
                    Kind::Q8_0 => x86::avx2_q8(tiles, acts, out),
                    Kind::Q4_0 => x86::avx2_q4::<M, 8>(kind, tiles, acts, out),
                    Kind::Q4_1 => x86::avx2_q4::<M, 0>(kind, tiles, acts, out),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("{isa:?} is only available on x86_64"),
    }
}

/// `tile_dots`' checks: `tiles`, the activation rows and `out_len` outputs (`M` per tile)
/// agree in their lengths, so that every kernel's reads stay inside them.
///
/// # Panics
/// When they do not.
fn check_lengths<const M: usize>(
    kind: Kind,
    tiles: &Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out_len: usize,
) {
    let blocks = tiles.blocks;
    assert_eq!(out_len % M.max(1), 0, "M outputs per tile");
    let n_tiles = out_len / M.max(1);
    assert_eq!(
        tiles.quants.len(),
        n_tiles * blocks * kind.tile_block_bytes(),
        "tile quants"
    );
    assert!(
        blocks.is_multiple_of(kind.scale_blocks()),
        "whole super-blocks"
    );
    assert_eq!(
        tiles.scales.len(),
        n_tiles * blocks / kind.scale_blocks() * TILE,
        "tile scales"
    );
    let mins = if kind.has_mins() {
        tiles.scales.len()
    } else {
        0
    };
    assert_eq!(tiles.mins.len(), mins, "tile minimums");
    let subs = if kind.is_k() {
        n_tiles * blocks * SUB_BYTES
    } else {
        0
    };
    assert_eq!(tiles.subs.len(), subs, "tile integer scales");
    for a in acts {
        assert!(
            a.quants.len() == blocks * BLOCK
                && a.scales.len() >= blocks
                && a.scaled_sums.len() >= blocks
                && a.sums.len() == blocks
                && a.half_sums.len() == blocks,
            "activation row length"
        );
        // The K-quant kernels read each super-block's scale from its first block.
        debug_assert!(
            !kind.is_k()
                || a.scales[..blocks]
                    .chunks_exact(SUPER)
                    .all(|s| s.iter().all(|d| d.to_bits() == s[0].to_bits())),
            "K-quant activations need one scale per super-block"
        );
    }
}

/// The start term of block `b` of activation row `a` for a kind stored with offset
/// `OFFSET`: `-OFFSET` times the block's activation sum (0, and no load, for no offset).
#[inline(always)]
pub(super) fn block_start_term<const OFFSET: i32>(a: &QuantizedRow<'_>, b: usize) -> i32 {
    if OFFSET == 0 {
        0
    } else {
        -OFFSET * a.sums[b]
    }
}

/// The start terms of the two halves of block `b` of activation row `a` for a K-quant
/// stored with offset `OFFSET`: `-OFFSET` times each half's activation sum.
#[inline(always)]
pub(super) fn half_start_terms<const OFFSET: i32>(a: &QuantizedRow<'_>, b: usize) -> [i32; 2] {
    let (sum, first) = (a.sums[b], a.half_sums[b]);
    [-OFFSET * first, -OFFSET * (sum - first)]
}

/// The activation sums of the eight blocks of the super-block from block `first` of `a`,
/// in pairs as the SIMD kernels multiply them with the blocks' minimums (`vpmaddwd`):
/// entry `p` holds block `first + 2p`'s sum in its low 16 bits and block `first + 2p + 1`'s
/// in its high 16, each an i16 (a block's sum is at most 32 * 127 in magnitude).
#[inline(always)]
pub(super) fn sum_pairs(a: &QuantizedRow<'_>, first: usize) -> [i32; SUPER / 2] {
    std::array::from_fn(|p| {
        let half = |b: usize| u32::from(a.sums[first + b] as i16 as u16);
        (half(2 * p) | half(2 * p + 1) << 16) as i32
    })
}

impl<'a> Tiles<'a> {
    /// Tiles `t0..t1` of `self` (tiles of `kind`): the one rule for where a tile's quants,
    /// scales, minimums and integer scales lie.
    pub fn range(self, kind: Kind, t0: usize, t1: usize) -> Tiles<'a> {
        let blocks = self.blocks;
        let per_tile = blocks / kind.scale_blocks() * TILE;
        let at = |v_per_tile: usize| t0 * v_per_tile..t1 * v_per_tile;
        let (mins, subs) = (
            if self.mins.is_empty() { 0 } else { per_tile },
            if self.subs.is_empty() {
                0
            } else {
                blocks * SUB_BYTES
            },
        );
        Tiles {
            quants: &self.quants[at(blocks * kind.tile_block_bytes())],
            scales: &self.scales[at(per_tile)],
            mins: &self.mins[at(mins)],
            subs: &self.subs[at(subs)],
            ..self
        }
    }
}

/// Splits the products of `tiles` for AVX-512 VNNI over weights that do not stream from
/// memory: the pairs of tiles (an even number of them, and their outputs) on 512-bit
/// vectors ([`super::wide`]), and an odd last tile on the 256-bit kernel.
#[cfg(target_arch = "x86_64")]
fn split_pairs<'t, 'o, const M: usize>(
    kind: Kind,
    tiles: Tiles<'t>,
    out: &'o mut [[f32; TILE]],
) -> [Part<'t, 'o>; 2] {
    let n_tiles = out.len() / M;
    let even = n_tiles - n_tiles % super::wide::PAIR;
    let (out_pairs, out_last) = out.split_at_mut(even * M);
    [
        (tiles.range(kind, 0, even), out_pairs),
        (tiles.range(kind, even, n_tiles), out_last),
    ]
}

/// The 512-bit and 256-bit kernels of a kind with a scale per block, for [`in_pairs`].
#[cfg(target_arch = "x86_64")]
fn plain<const M: usize, const Q4: bool, const OFFSET: i32, const MINS: bool>(
) -> (Kernel<M>, Kernel<M>) {
    (
        super::wide::vnni_pairs::<M, Q4, OFFSET, MINS>,
        x86::vnni::<M, Q4, OFFSET>,
    )
}

/// The 512-bit and 256-bit kernels of a K-quant, for [`in_pairs`].
#[cfg(target_arch = "x86_64")]
fn k<const M: usize, const Q4: bool, const OFFSET: i32>() -> (Kernel<M>, Kernel<M>) {
    (
        super::wide::vnni_k_pairs::<M, Q4, OFFSET>,
        x86::vnni_k::<M, Q4, OFFSET>,
    )
}

/// Tiles and their outputs, `M` entries per tile.
#[cfg(target_arch = "x86_64")]
type Part<'t, 'o> = (Tiles<'t>, &'o mut [[f32; TILE]]);

/// A kernel's signature, as [`tile_dots`] calls it with the constants of an instance.
#[cfg(target_arch = "x86_64")]
type Kernel<const M: usize> =
    unsafe fn(Kind, Tiles<'_>, &[QuantizedRow<'_>; M], &mut [[f32; TILE]]);

/// [`split_pairs`] between `pairs` (a 512-bit kernel of [`super::wide`]) and `single`
/// (the 256-bit kernel of the same kind).
///
/// # Safety
/// As `pairs`, but any number of tiles, and `single` is the 256-bit kernel of the kind.
#[cfg(target_arch = "x86_64")]
unsafe fn in_pairs<const M: usize>(
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
    (pairs, single): (Kernel<M>, Kernel<M>),
) {
    let [(even, out_even), (last, out_last)] = split_pairs::<M>(kind, tiles, out);
    // SAFETY: the caller's contract, over an even number of tiles and the one left.
    unsafe {
        pairs(kind, even, acts, out_even);
        if !out_last.is_empty() {
            single(kind, last, acts, out_last);
        }
    }
}

/// The reference: every kernel's arithmetic, one value at a time.
fn scalar<const M: usize>(
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
) {
    let (blocks, tb) = (tiles.blocks, kind.tile_block_bytes());
    for (t, outs) in out.chunks_exact_mut(M).enumerate() {
        for (a, o) in acts.iter().zip(outs) {
            let mut acc = [0f32; TILE];
            let mut mins = [0f32; TILE];
            for b in 0..blocks {
                let at = t * blocks + b;
                let quants = &tiles.quants[at * tb..(at + 1) * tb];
                let xq = &a.quants[b * BLOCK..(b + 1) * BLOCK];
                for r in 0..TILE {
                    let dot = (0..BLOCK)
                        .map(|j| kind.stored(quants, r, j) * i32::from(xq[j]))
                        .sum::<i32>()
                        - kind.offset() * a.sums[b];
                    let dd = tiles.scales[at * TILE + r].to_f32() * a.scales[b];
                    acc[r] = dd.mul_add(dot as f32, acc[r]);
                    if let Some(m) = tiles.mins.get(at * TILE + r) {
                        mins[r] = m.to_f32().mul_add(a.scaled_sums[b], mins[r]);
                    }
                }
            }
            *o = if kind.has_mins() {
                std::array::from_fn(|r| acc[r] + mins[r])
            } else {
                acc
            };
        }
    }
}

/// The reference for the K-quants, one value at a time (the module's K-quants section).
fn scalar_k<const M: usize>(
    kind: Kind,
    tiles: Tiles<'_>,
    acts: &[QuantizedRow<'_>; M],
    out: &mut [[f32; TILE]],
) {
    let blocks = tiles.blocks;
    let supers = blocks / SUPER;
    for (t, outs) in out.chunks_exact_mut(M).enumerate() {
        for (a, o) in acts.iter().zip(outs) {
            let mut acc = [0f32; TILE];
            let mut mins = [0f32; TILE];
            for s in 0..supers {
                let st = (t * supers + s) * TILE;
                let dx = a.scales[s * SUPER];
                for r in 0..TILE {
                    let (dots, msum) = super_sums(kind, tiles, a, t * blocks + s * SUPER, s, r);
                    let d = tiles.scales[st + r].to_f32();
                    acc[r] = (d * dx).mul_add(dots as f32, acc[r]);
                    if let Some(dmin) = tiles.mins.get(st + r) {
                        mins[r] = (dmin.to_f32() * dx).mul_add(msum as f32, mins[r]);
                    }
                }
            }
            *o = std::array::from_fn(|r| acc[r] - mins[r]);
        }
    }
}

/// Row `r`'s exact integer sums over super-block `s` of activation row `a` (its tile
/// block `first` on): the integer scales times the blocks' (or halves') dot products, and
/// the minimums times the blocks' activation sums (0 for Q6_K).
fn super_sums(
    kind: Kind,
    tiles: Tiles<'_>,
    a: &QuantizedRow<'_>,
    first: usize,
    s: usize,
    r: usize,
) -> (i32, i32) {
    let tb = kind.tile_block_bytes();
    let (mut dots, mut msum) = (0i32, 0i32);
    for i in 0..SUPER {
        let (at, b) = (first + i, s * SUPER + i);
        let quants = &tiles.quants[at * tb..(at + 1) * tb];
        let subs = &tiles.subs[at * SUB_BYTES..(at + 1) * SUB_BYTES];
        let xq = &a.quants[b * BLOCK..(b + 1) * BLOCK];
        let half = |h: usize| {
            (h * BLOCK / 2..(h + 1) * BLOCK / 2)
                .map(|j| (kind.stored(quants, r, j) - kind.offset()) * i32::from(xq[j]))
                .sum::<i32>()
        };
        if kind == Kind::Q6K {
            let (s0, s1) = (i32::from(subs[r] as i8), i32::from(subs[TILE + r] as i8));
            dots += s0 * half(0) + s1 * half(1);
        } else {
            dots += i32::from(subs[r]) * (half(0) + half(1));
            msum += i32::from(subs[TILE + r]) * a.sums[b];
        }
    }
    (dots, msum)
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    use super::{
        block_start_term, half_start_terms, sum_pairs, Kind, QuantizedRow, Tiles, BLOCK,
        PREFETCH_AHEAD, SUB_BYTES, SUPER, TILE,
    };

    /// The 8 scales (or minimums) of block `at`, as f32.
    ///
    /// # Safety
    /// `v` holds at least `8 * (at + 1)` values.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    pub(in crate::kernels::packed) unsafe fn halfs8(v: &[half::f16], at: usize) -> __m256 {
        // SAFETY: 8 f16 (16 bytes) at `8 * at`, inside `v` (the caller's contract).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(v.as_ptr().add(TILE * at).cast()) })
    }

    /// Activation quants `4t..4t + 4` of block `b` of `a`, in every 32-bit lane.
    ///
    /// # Safety
    /// `a` holds at least `b + 1` blocks; `t < 8`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fours(a: &QuantizedRow<'_>, b: usize, t: usize) -> __m256i {
        // SAFETY: 4 bytes at `32 b + 4 t`, inside `a.quants` (the caller's contract).
        let v = unsafe {
            a.quants
                .as_ptr()
                .add(b * BLOCK + 4 * t)
                .cast::<i32>()
                .read_unaligned()
        };
        _mm256_set1_epi32(v)
    }

    /// One activation row's block against a tile block's eight unsigned vectors `u`, into
    /// `d` (`block_dots_asm` on 256-bit vectors).
    ///
    /// # Safety
    /// `x` points at a block of 32 readable activation quants; the CPU has AVX512-VNNI and
    /// AVX512-VL.
    #[inline]
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    unsafe fn block_dots(d: [__m256i; 2], u: &[__m256i; 8], x: *const i8) -> [__m256i; 2] {
        let [mut d0, mut d1] = d;
        // SAFETY: reads the 32 bytes at `x` (the caller's contract), writes only `d0`, `d1`.
        unsafe {
            block_dots_asm!(d0, d1, u, x, ymm_reg, "{{1to8}}");
        }
        [d0, d1]
    }

    /// Vector `c` of a 4-bit tile block, as its low nibbles (quants `4c..4c + 4` of the eight
    /// rows) and its high nibbles (quants `16 + 4c..`), unsigned.
    ///
    /// # Safety
    /// `q` points at a 4-bit tile block (128 bytes); `c < 4`.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn nibbles(q: *const u8, c: usize) -> (__m256i, __m256i) {
        let low = _mm256_set1_epi8(0x0F);
        // SAFETY: vector `c` of the 128 bytes (the caller's contract).
        let v = unsafe { _mm256_loadu_si256(q.add(BLOCK * c).cast()) };
        (
            _mm256_and_si256(v, low),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
        )
    }

    /// Vector `t` of an 8-bit tile block (quants `4t..4t + 4` of the eight rows), unsigned.
    ///
    /// # Safety
    /// `q` points at an 8-bit tile block (256 bytes); `t < 8`.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::kernels::packed) unsafe fn bytes(q: *const u8, t: usize) -> __m256i {
        // SAFETY: vector `t` of the 256 bytes (the caller's contract).
        unsafe { _mm256_loadu_si256(q.add(BLOCK * t).cast()) }
    }

    /// Ask for the tile block `PREFETCH_AHEAD` bytes past the one at `q` (`tb` bytes) to
    /// be brought into the L1 cache: see [`PREFETCH_AHEAD`].
    #[inline(always)]
    fn prefetch_ahead(q: *const u8, tb: usize) {
        for line in (0..tb).step_by(64) {
            // A prefetch reads nothing into the program and never faults, whatever the
            // address (past the end of the weights it fetches a line nobody uses).
            let p = q.wrapping_add(PREFETCH_AHEAD + line);
            // SAFETY: `_mm_prefetch` needs only SSE, which every x86-64 CPU has.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
        }
    }

    /// The start term of block `b` of every activation row: `-OFFSET` times the block's
    /// activation sum (zero, and no loads, when `OFFSET` is 0).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block_starts<const M: usize, const OFFSET: i32>(
        acts: &[QuantizedRow<'_>; M],
        b: usize,
    ) -> [__m256i; M] {
        std::array::from_fn(|m| _mm256_set1_epi32(block_start_term::<OFFSET>(&acts[m], b)))
    }

    /// The two halves' start terms of block `b` of every activation row: `-OFFSET` times
    /// the half's activation sum (zero, and no loads, when `OFFSET` is 0).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn half_starts<const M: usize, const OFFSET: i32>(
        acts: &[QuantizedRow<'_>; M],
        b: usize,
    ) -> [[__m256i; 2]; M] {
        std::array::from_fn(|m| {
            if OFFSET == 0 {
                return [_mm256_setzero_si256(); 2];
            }
            let [first, second] = half_start_terms::<OFFSET>(&acts[m], b);
            [_mm256_set1_epi32(first), _mm256_set1_epi32(second)]
        })
    }

    /// The loops of every SIMD kernel, over the tiles and their blocks, and each block's
    /// float step per activation row, in a macro so that they compile inside each one's
    /// `target_feature` function. `$dots` gives the eight rows' exact integer dot products
    /// of tile block `$q` (a pointer) with block `$b` of every activation row, each started
    /// from its `starts` entry ([`block_starts`] of `$offset`, a constant: the offset the
    /// kernel's products take out, 0 for none). The work on a weight
    /// vector is done once and used for every activation row before the next vector is
    /// read, so no more than one or two weight vectors are live at a time.
    macro_rules! tile_loop {
        ($kind:expr, $offset:expr, $tiles:expr, $acts:expr, $out:expr, $m:ident,
         |$q:ident, $b:ident, $starts:ident| $dots:expr) => {{
            let (kind, tiles, acts): (Kind, Tiles<'_>, &[QuantizedRow<'_>; $m]) =
                ($kind, $tiles, $acts);
            let (blocks, tb) = (tiles.blocks, kind.tile_block_bytes());
            let has_mins = kind.has_mins();
            for (t, outs) in $out.chunks_exact_mut($m).enumerate() {
                let mut acc = [_mm256_setzero_ps(); $m];
                let mut mins = [_mm256_setzero_ps(); $m];
                // One bounds check per tile, then one tile block per chunk (indexing the
                // quants by block, a check per block, cost a decode step some 8 % more
                // instructions in the 4-bit kernel, measured with callgrind). Inside the
                // quants (checked by the caller).
                let tq = &tiles.quants[t * blocks * tb..(t + 1) * blocks * tb];
                for ($b, qb) in tq.chunks_exact(tb).enumerate() {
                    let at = t * blocks + $b;
                    let $q = qb.as_ptr();
                    if tiles.stream {
                        prefetch_ahead($q, tb);
                    }
                    let $starts = block_starts::<$m, { $offset }>(acts, $b);
                    let dots: [__m256i; $m] = $dots;
                    // SAFETY: 8 scales (minimums) per block (checked by the caller).
                    let dw = unsafe { halfs8(tiles.scales, at) };
                    let mw = if has_mins {
                        // SAFETY: as the scales.
                        Some(unsafe { halfs8(tiles.mins, at) })
                    } else {
                        None
                    };
                    for (((a, acc), mins), dot) in
                        acts.iter().zip(&mut acc).zip(&mut mins).zip(dots)
                    {
                        let dd = _mm256_mul_ps(dw, _mm256_set1_ps(a.scales[$b]));
                        *acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(dot), *acc);
                        if let Some(mw) = mw {
                            let ss = _mm256_set1_ps(a.scaled_sums[$b]);
                            *mins = _mm256_fmadd_ps(mw, ss, *mins);
                        }
                    }
                }
                for ((o, acc), mins) in outs.iter_mut().zip(acc).zip(mins) {
                    let v = if has_mins {
                        _mm256_add_ps(acc, mins)
                    } else {
                        acc
                    };
                    // SAFETY: `o` is 8 writable f32.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
                }
            }
        }};
    }

    /// AVX2, 8-bit weights: the quants made signed again (`u ^ 0x80`) and the sign trick
    /// (`|w| * sign(x, w)`, which never saturates `vpmaddubsw`), so no offset term.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `tiles` and every row of `acts` hold the same
    /// number of blocks, and `out` has `M` entries per tile.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_q8<const M: usize>(
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(i8::MIN);
        // The sign trick multiplies the signed weights: no offset to take out.
        tile_loop!(Kind::Q8_0, 0, tiles, acts, out, M, |q, b, _starts| {
            let mut sums = [_mm256_setzero_si256(); M];
            for t in 0..8 {
                // SAFETY: `q` is a whole 8-bit tile block.
                let w = _mm256_xor_si256(unsafe { bytes(q, t) }, flip);
                let abs = _mm256_sign_epi8(w, w);
                for (a, sum) in acts.iter().zip(&mut sums) {
                    // SAFETY: `a` holds `blocks` blocks (the caller's contract).
                    let x = unsafe { fours(a, b, t) };
                    let prod = _mm256_maddubs_epi16(abs, _mm256_sign_epi8(x, w));
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(prod, ones));
                }
            }
            sums
        })
    }

    /// AVX2, 4-bit weights: unsigned nibbles times signed activations in `vpmaddubsw`
    /// directly; the eight vectors' 16-bit pair sums (each at most 15 * 127 * 2) add up
    /// without overflow (8 * 3810 < 32768) before one `vpmaddwd`.
    ///
    /// # Safety
    /// As [`avx2_q8`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_q4<const M: usize, const OFFSET: i32>(
        kind: Kind,
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        debug_assert_eq!(OFFSET, kind.offset());
        let ones = _mm256_set1_epi16(1);
        tile_loop!(kind, OFFSET, tiles, acts, out, M, |q, b, starts| {
            // SAFETY: `q` is a whole 4-bit tile block and each activation row holds `blocks`
            // blocks (the caller's contract).
            let pairs = unsafe { avx2_q4_pairs(q, b, acts) };
            std::array::from_fn(|m| _mm256_add_epi32(starts[m], _mm256_madd_epi16(pairs[m], ones)))
        })
    }

    /// One tile block's 16-bit pair sums of its unsigned nibbles times `M` activation
    /// rows' signed quants (AVX2 `vpmaddubsw`), per row: the block's four loads against
    /// each row's block `b`. The sums stay below 32768 (8 * 15 * 127 * 2), so each kernel
    /// widens them once, with `vpmaddwd`. Shared by the plain and the K-quant AVX2 kernels.
    ///
    /// The eight nibble vectors stay in registers and each row's eight broadcasts, products
    /// and sums are one `asm!` block. Written with intrinsics, the compiler broadcast all
    /// `8 * M` activation groups first and spilled them to the stack (more than AVX2's 16
    /// vector registers), and a SmolLM2 Q4_0 prefill of 128 tokens ran at 0.80-0.82 of
    /// this speed (BENCHMARKS.md, "Prefill on AVX2: ... the 4-bit kernel's broadcasts").
    ///
    /// # Safety
    /// `q` points at a whole 4-bit tile block and every row of `acts` holds more than `b`
    /// blocks.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn avx2_q4_pairs<const M: usize>(
        q: *const u8,
        b: usize,
        acts: &[QuantizedRow<'_>; M],
    ) -> [__m256i; M] {
        // SAFETY: `q` is a whole 4-bit tile block (this function's contract).
        let [(l0, h0), (l1, h1), (l2, h2), (l3, h3)] =
            std::array::from_fn(|c| unsafe { nibbles(q, c) });
        std::array::from_fn(|m| {
            // SAFETY: `acts[m]` holds more than `b` blocks (this function's contract).
            let x = unsafe { acts[m].quants.as_ptr().add(b * BLOCK) };
            let pairs: __m256i;
            // SAFETY: reads the 32 bytes at `x`; writes only its two vector registers.
            unsafe {
                std::arch::asm!(
                    "vpbroadcastd {p}, dword ptr [{x}]",
                    "vpmaddubsw {p}, {l0}, {p}",
                    "vpbroadcastd {t}, dword ptr [{x} + 16]",
                    "vpmaddubsw {t}, {h0}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 4]",
                    "vpmaddubsw {t}, {l1}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 20]",
                    "vpmaddubsw {t}, {h1}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 8]",
                    "vpmaddubsw {t}, {l2}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 24]",
                    "vpmaddubsw {t}, {h2}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 12]",
                    "vpmaddubsw {t}, {l3}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    "vpbroadcastd {t}, dword ptr [{x} + 28]",
                    "vpmaddubsw {t}, {h3}, {t}",
                    "vpaddw {p}, {p}, {t}",
                    p = out(ymm_reg) pairs,
                    t = out(ymm_reg) _,
                    l0 = in(ymm_reg) l0, l1 = in(ymm_reg) l1,
                    l2 = in(ymm_reg) l2, l3 = in(ymm_reg) l3,
                    h0 = in(ymm_reg) h0, h1 = in(ymm_reg) h1,
                    h2 = in(ymm_reg) h2, h3 = in(ymm_reg) h3,
                    x = in(reg) x,
                    options(pure, readonly, nostack, preserves_flags),
                );
            }
            pairs
        })
    }

    /// One tile block's exact integer products with `M` activation rows, added to `d`
    /// (per row, the two halves' lanes): the block's vectors `c` and `c + 4` (for 4 bits,
    /// the two halves of load `c`) against each row's block `b`. Shared by the plain and
    /// the K-quant VNNI kernels.
    ///
    /// # Safety
    /// `q` points at a whole tile block (4-bit when `Q4`, else 8-bit) and every row of
    /// `acts` holds more than `b` blocks.
    #[inline]
    #[target_feature(enable = "avx2,avx512vnni,avx512vl")]
    unsafe fn vnni_block<const M: usize, const Q4: bool>(
        q: *const u8,
        b: usize,
        acts: &[QuantizedRow<'_>; M],
        d: &mut [[__m256i; 2]; M],
    ) {
        let mut u = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            (u[c], u[c + 4]) = if Q4 {
                // SAFETY: `q` is a whole 4-bit tile block (this function's contract).
                unsafe { nibbles(q, c) }
            } else {
                // SAFETY: `q` is a whole 8-bit tile block (this function's contract).
                unsafe { (bytes(q, c), bytes(q, c + 4)) }
            };
        }
        for (a, d) in acts.iter().zip(d) {
            if M == 1 {
                // One row: the broadcasts as values; the compiler keeps them in registers
                // here, and `block_dots` measured 1.0-1.1x the time.
                for c in 0..4 {
                    // SAFETY: `a` holds more than `b` blocks (this function's contract).
                    let (x0, x1) = unsafe { (fours(a, b, c), fours(a, b, c + 4)) };
                    d[0] = _mm256_dpbusd_epi32(d[0], u[c], x0);
                    d[1] = _mm256_dpbusd_epi32(d[1], u[c + 4], x1);
                }
            } else {
                // SAFETY: `a` holds more than `b` blocks (this function's contract), so
                // block `b`'s 32 quants.
                *d = unsafe { block_dots(*d, &u, a.quants.as_ptr().add(b * BLOCK)) };
            }
        }
    }

    /// AVX-512 VNNI on 256-bit vectors: eight `vpdpbusd` per block and activation row, in
    /// two independent chains per row (the integer sums are exact in any order).
    ///
    /// # Safety
    /// As [`avx2_q8`], and the CPU has AVX512-VNNI and AVX512-VL.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn vnni<const M: usize, const Q4: bool, const OFFSET: i32>(
        kind: Kind,
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        debug_assert_eq!(OFFSET, kind.offset());
        tile_loop!(kind, OFFSET, tiles, acts, out, M, |q, b, starts| {
            let mut d = [[_mm256_setzero_si256(); 2]; M];
            for (d, start) in d.iter_mut().zip(starts) {
                d[0] = start;
            }
            // SAFETY: `q` is a whole tile block of this width and each activation row holds
            // `blocks` blocks (the caller's contract).
            unsafe { vnni_block::<M, Q4>(q, b, acts, &mut d) };
            d.map(|[d0, d1]| _mm256_add_epi32(d0, d1))
        })
    }

    /// A tile block's eight rows' integer scales, one per 32-bit lane: `sc` and `m`
    /// (unsigned), or the halves' `s` (signed).
    ///
    /// # Safety
    /// `v` holds at least `SUB_BYTES * (at + 1)` bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::kernels::packed) unsafe fn subs8(
        v: &[u8],
        at: usize,
        signed: bool,
    ) -> (__m256i, __m256i) {
        // SAFETY: 16 bytes at `SUB_BYTES * at`, inside `v` (the caller's contract).
        let (lo, hi) = unsafe {
            let p = v.as_ptr().add(SUB_BYTES * at);
            (
                _mm_loadl_epi64(p.cast()),
                _mm_loadl_epi64(p.add(TILE).cast()),
            )
        };
        if signed {
            (_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(hi))
        } else {
            (_mm256_cvtepu8_epi32(lo), _mm256_cvtepu8_epi32(hi))
        }
    }

    /// The minimums `m` of the super-block whose first tile block is `at`, in pairs of
    /// blocks: vector `p` lane `r` holds row `r`'s `m` of blocks `2p` and `2p + 1` as two
    /// i16, for `vpmaddwd` with [`sum_pairs`].
    ///
    /// # Safety
    /// `v` holds at least `SUB_BYTES * (at + SUPER)` bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(in crate::kernels::packed) unsafe fn min_pairs8(
        v: &[u8],
        at: usize,
    ) -> [__m256i; SUPER / 2] {
        std::array::from_fn(|p| {
            // SAFETY: the 8 minimums of blocks `at + 2p` and `at + 2p + 1`, inside `v` (the
            // caller's contract).
            let (a, b) = unsafe {
                let first = v.as_ptr().add(SUB_BYTES * (at + 2 * p) + TILE);
                (
                    _mm_loadl_epi64(first.cast()),
                    _mm_loadl_epi64(first.add(SUB_BYTES).cast()),
                )
            };
            _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b))
        })
    }

    /// The loops of every K-quant SIMD kernel, as [`tile_loop`] is for the other kinds:
    /// `$dots` gives, per activation row, the eight rows' exact integer dot products of the
    /// two halves of tile block `$q` with block `$b` (offset terms included). They are
    /// scaled by the blocks' integer scales and summed in integers over each super-block,
    /// and the float step comes once per super-block, as the module's K-quants section says
    /// (and [`super::super_sums`] computes one value at a time).
    macro_rules! tile_loop_k {
        ($kind:expr, $tiles:expr, $acts:expr, $out:expr, $m:ident,
         |$q:ident, $b:ident| $dots:expr) => {{
            let (kind, tiles, acts): (Kind, Tiles<'_>, &[QuantizedRow<'_>; $m]) =
                ($kind, $tiles, $acts);
            let (blocks, tb) = (tiles.blocks, kind.tile_block_bytes());
            let supers = blocks / SUPER;
            let six = kind == Kind::Q6K;
            for (t, outs) in $out.chunks_exact_mut($m).enumerate() {
                let mut acc = [_mm256_setzero_ps(); $m];
                let mut mins = [_mm256_setzero_ps(); $m];
                let mut isum = [_mm256_setzero_si256(); $m];
                // As in `tile_loop`: one bounds check per tile, one tile block per chunk.
                let tq = &tiles.quants[t * blocks * tb..(t + 1) * blocks * tb];
                for ($b, qb) in tq.chunks_exact(tb).enumerate() {
                    let at = t * blocks + $b;
                    let $q = qb.as_ptr();
                    if tiles.stream {
                        prefetch_ahead($q, tb);
                    }
                    let dots: [[__m256i; 2]; $m] = $dots;
                    // SAFETY: `SUB_BYTES` integer scales per block (checked by the caller).
                    let (s0, s1) = unsafe { subs8(tiles.subs, at, six) };
                    for (isum, dot) in isum.iter_mut().zip(dots) {
                        if six {
                            let p = _mm256_add_epi32(
                                _mm256_mullo_epi32(dot[0], s0),
                                _mm256_mullo_epi32(dot[1], s1),
                            );
                            *isum = _mm256_add_epi32(*isum, p);
                        } else {
                            let p = _mm256_mullo_epi32(_mm256_add_epi32(dot[0], dot[1]), s0);
                            *isum = _mm256_add_epi32(*isum, p);
                        }
                    }
                    if $b % SUPER != SUPER - 1 {
                        continue;
                    }
                    let st = t * supers + $b / SUPER;
                    // SAFETY: 8 scales per super-block (checked by the caller).
                    let d = unsafe { halfs8(tiles.scales, st) };
                    let first = $b + 1 - SUPER;
                    // The minimums' sums, once per super-block: `S = Σ_b m_b * sum(x_b)` in
                    // four `vpmaddwd` per row.
                    let (dmin, mp) = if six {
                        (_mm256_setzero_ps(), [_mm256_setzero_si256(); SUPER / 2])
                    } else {
                        // SAFETY: as the scales; the super-block's `SUPER` blocks of integer
                        // scales (checked by the caller).
                        unsafe {
                            (
                                halfs8(tiles.mins, st),
                                min_pairs8(tiles.subs, at + 1 - SUPER),
                            )
                        }
                    };
                    let rows = acts.iter().zip(&mut acc).zip(&mut mins);
                    for (((a, acc), mins), isum) in rows.zip(isum.iter_mut()) {
                        let dx = _mm256_set1_ps(a.scales[first]);
                        let p = _mm256_cvtepi32_ps(*isum);
                        *acc = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), p, *acc);
                        if !six {
                            let mut msum = _mm256_setzero_si256();
                            for (mp, sp) in mp.iter().zip(sum_pairs(a, first)) {
                                let m = _mm256_madd_epi16(*mp, _mm256_set1_epi32(sp));
                                msum = _mm256_add_epi32(msum, m);
                            }
                            let m = _mm256_cvtepi32_ps(msum);
                            *mins = _mm256_fmadd_ps(_mm256_mul_ps(dmin, dx), m, *mins);
                        }
                        *isum = _mm256_setzero_si256();
                    }
                }
                for ((o, acc), mins) in outs.iter_mut().zip(acc).zip(mins) {
                    // SAFETY: `o` is 8 writable f32.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_sub_ps(acc, mins)) };
                }
            }
        }};
    }

    /// AVX2, Q4_K: [`avx2_q4`]'s integer products (no offset), whole blocks in the first
    /// half's lanes (one scale per block).
    ///
    /// # Safety
    /// As [`avx2_q8`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_k4<const M: usize>(
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        let ones = _mm256_set1_epi16(1);
        tile_loop_k!(Kind::Q4K, tiles, acts, out, M, |q, b| {
            // SAFETY: `q` is a whole 4-bit tile block and each activation row holds `blocks`
            // blocks (the caller's contract).
            let pairs = unsafe { avx2_q4_pairs(q, b, acts) };
            std::array::from_fn(|m| [_mm256_madd_epi16(pairs[m], ones), _mm256_setzero_si256()])
        })
    }

    /// AVX2, Q5_K and Q6_K: the unsigned quants (`u < 64`) times the signed activations in
    /// `vpmaddubsw` directly, two vectors' 16-bit pair sums added (each at most
    /// 63 * 128 * 2, so two stay below 32768) before one `vpmaddwd`; vectors 0-3 into the
    /// first half and 4-7 into the second, each started from its offset term (`OFFSET`:
    /// the kind's offset, 0 or 32).
    ///
    /// # Safety
    /// As [`avx2_q8`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn avx2_k8<const M: usize, const OFFSET: i32>(
        kind: Kind,
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        debug_assert_eq!(OFFSET, kind.offset());
        let ones = _mm256_set1_epi16(1);
        tile_loop_k!(kind, tiles, acts, out, M, |q, b| {
            let mut sums = half_starts::<M, OFFSET>(acts, b);
            for t in (0..8).step_by(2) {
                // SAFETY: `q` is a whole 8-bit tile block.
                let (w0, w1) = unsafe { (bytes(q, t), bytes(q, t + 1)) };
                for (a, sum) in acts.iter().zip(&mut sums) {
                    // SAFETY: `a` holds `blocks` blocks (the caller's contract).
                    let (x0, x1) = unsafe { (fours(a, b, t), fours(a, b, t + 1)) };
                    let pairs = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w0, x0),
                        _mm256_maddubs_epi16(w1, x1),
                    );
                    sum[t / 4] = _mm256_add_epi32(sum[t / 4], _mm256_madd_epi16(pairs, ones));
                }
            }
            sums
        })
    }

    /// AVX-512 VNNI, the K-quants: [`vnni`]'s two chains per row are the two halves, each
    /// started from its half's offset term (`OFFSET`: the kind's offset, 32 for Q6_K; for
    /// Q4_K and Q5_K 0, and the chains start from zero).
    ///
    /// # Safety
    /// As [`vnni`].
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn vnni_k<const M: usize, const Q4: bool, const OFFSET: i32>(
        kind: Kind,
        tiles: Tiles<'_>,
        acts: &[QuantizedRow<'_>; M],
        out: &mut [[f32; TILE]],
    ) {
        debug_assert_eq!(OFFSET, kind.offset());
        tile_loop_k!(kind, tiles, acts, out, M, |q, b| {
            let mut d = half_starts::<M, OFFSET>(acts, b);
            // SAFETY: `q` is a whole tile block of this width and each activation row holds
            // `blocks` blocks (the caller's contract).
            unsafe { vnni_block::<M, Q4>(q, b, acts, &mut d) };
            d
        })
    }
}
