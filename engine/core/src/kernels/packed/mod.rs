//! The engine's own CPU kernels for quantized weight matmuls with few rows: decode steps
//! (a row per busy slot) and short prefill chunks.
//!
//! Why they exist, when candle-core has quantized kernels: a profile of SmolLM2 decode put
//! 54% of the time in candle's Q8_0 dot product, 8% converting its f16 block scales, and
//! about 20% in its spinning thread pool; and candle computes each (weight row, activation
//! row) pair on its own, so four rows cost four times one. Here:
//! - weights are repacked once at load into tiles of eight rows interleaved block by block
//!   ([`tile`]), with unsigned quants, so that one AVX-512 VNNI `vpdpbusd` (or AVX2
//!   `vpmaddubsw`) advances eight rows at once and the float work per block is shared by
//!   the eight; the f16 block scales stay f16 (decode reads every weight byte once per
//!   token and is bound by memory bandwidth, so bytes count) and the kernels convert eight
//!   at a time (F16C);
//! - Q4_1, which candle only has scalar code for, runs in 4 bits: no conversion to Q8_0
//!   at load, which read 1.7x the bytes per token;
//! - each weight block is read once for up to four activation rows, and with more rows
//!   every group of four is run over a span of weight rows that stays in cache before the
//!   next span (`SPAN_BYTES`);
//! - a layer's products on the same activations (Q, K and V; gate and up) run in one pass
//!   ([`PackedMatrix::matmul_many`]): the activations are quantized once, and the weight
//!   rows are split into pieces run on rayon's pool, the pool the compute thread already
//!   works in, so an idle or descheduled worker costs a steal, never a spinning barrier.
//!
//! `engine/core/benches/qmatmul.rs` measures them against candle's `QMatMul` side by side
//! (BENCHMARKS.md, #13). The activations are quantized to 8-bit blocks of 32 as ggml and
//! candle quantize them (for the K-quants with one f32 scale per super-block of 256, as
//! ggml's Q8_K, and each super-block's integer sums in i32 before one float step, the
//! tile module's K-quants section), and each block's integer dot product is exact, so results differ
//! from candle's only in the order the blocks' float terms are summed (candle sums eight
//! partial lanes per row and adds them at the end; here each block's whole dot product is
//! one term): a few units in the last place, tested below. Every instruction set here
//! gives the same result bit for bit, and a row's result does not depend on the rows
//! computed with it.

pub mod activations;
pub mod kquants;

/// One activation row's block against a tile block's eight weight vectors `$u` (`ymm_reg`
/// or `zmm_reg`, `$bcast` `"{{1to8}}"` or `"{{1to16}}"`): the eight `vpdpbusd` of vector
/// `c` with the row's quants `4c..4c + 4` at `$x` broadcast to every lane, alternately into
/// `$d0` (`c < 4`) and `$d1`. The instructions read the broadcasts themselves (EVEX
/// embedded broadcasts), written with `asm!` because, given the broadcasts as values, the
/// compiler hoisted a block's broadcasts of every row ahead of their uses and spilled
/// them (256-bit), or loaded each into a general register and broadcast it from there
/// (512-bit). Only inside an `unsafe` block whose caller guarantees the 32 bytes at `$x`
/// and the CPU's AVX512-VNNI (and VL for 256 bits).
#[cfg(target_arch = "x86_64")]
macro_rules! block_dots_asm {
    ($d0:ident, $d1:ident, $u:expr, $x:expr, $reg:ident, $bcast:literal) => {
        std::arch::asm!(
            concat!("vpdpbusd {d0}, {u0}, dword ptr [{x}]", $bcast),
            concat!("vpdpbusd {d1}, {u4}, dword ptr [{x} + 16]", $bcast),
            concat!("vpdpbusd {d0}, {u1}, dword ptr [{x} + 4]", $bcast),
            concat!("vpdpbusd {d1}, {u5}, dword ptr [{x} + 20]", $bcast),
            concat!("vpdpbusd {d0}, {u2}, dword ptr [{x} + 8]", $bcast),
            concat!("vpdpbusd {d1}, {u6}, dword ptr [{x} + 24]", $bcast),
            concat!("vpdpbusd {d0}, {u3}, dword ptr [{x} + 12]", $bcast),
            concat!("vpdpbusd {d1}, {u7}, dword ptr [{x} + 28]", $bcast),
            d0 = inout($reg) $d0,
            d1 = inout($reg) $d1,
            u0 = in($reg) $u[0],
            u1 = in($reg) $u[1],
            u2 = in($reg) $u[2],
            u3 = in($reg) $u[3],
            u4 = in($reg) $u[4],
            u5 = in($reg) $u[5],
            u6 = in($reg) $u[6],
            u7 = in($reg) $u[7],
            x = in(reg) $x,
            options(pure, readonly, nostack, preserves_flags),
        )
    };
}

// SIMD loads through raw pointers (x86 intrinsics have no slice API).
#[allow(unsafe_code)]
pub mod tile;
// The same, on 512-bit vectors.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wide;

use candle_core::quantized::{GgmlDType, QTensor};
use half::f16;
use rayon::prelude::*;

use activations::{QuantizedRow, QuantizedRows, BLOCK};
pub use tile::{Kind, Tiles, SUB_BYTES, SUPER, TILE};

use crate::kernels::Isa;

/// Products below this many multiply-adds (weight count times rows, summed over the
/// matrices of one pass) run on the calling thread: one or two microseconds of work at
/// these kernels' speed, about what handing a piece to another pool thread costs. (Four
/// times this, with pieces four times larger, measured no different on the embedded
/// model's 4-slot step, BENCHMARKS.md #13.)
const PARALLEL_MIN_WORK: usize = 1 << 17;

/// Pieces of output rows per pool thread: more than one, so that a thread that runs slower
/// (another process on its core) leaves the rest of its share to the others.
const PIECES_PER_THREAD: usize = 4;

/// The fewest multiply-adds a piece is given (pieces smaller than this cost more to hand
/// out than they save).
const PIECE_MIN_WORK: usize = 1 << 15;

/// Bytes of packed weight rows run against every group of activation rows before the
/// next rows, when there are more than four activation rows ([`PackedMatrix::rows_into`]):
/// small enough to stay in a core's L2 cache (512 KiB and more on the CPUs here) beside
/// the activations.
const SPAN_BYTES: usize = 128 << 10;

/// Tiles computed per call of the kernel within a piece (their results, up to four rows'
/// worth, sit in a 4 KiB buffer on the stack).
const GROUP_TILES: usize = 32;

/// A quantized weight matrix `(n, k)` in the tile layout of [`tile`], its rows padded
/// with zero rows to a whole number of tiles.
#[derive(Clone)]
pub struct PackedMatrix {
    kind: Kind,
    isa: Isa,
    n: usize,
    k: usize,
    /// Per tile and block, the tile's eight rows' quants.
    quants: Vec<u8>,
    /// Per tile and block (K-quants: super-block), the eight rows' scales.
    scales: Vec<f16>,
    /// The minimums (Q4_1's per block, the K-quants' `dmin`), laid out as the scales; empty
    /// for the other kinds.
    mins: Vec<f16>,
    /// The K-quants' integer scales, [`SUB_BYTES`] per tile and block; empty for the others.
    subs: Vec<u8>,
}

impl std::fmt::Debug for PackedMatrix {
    /// The shape and kind, not the weights.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("kind", &self.kind)
            .field("isa", &self.isa)
            .field("n", &self.n)
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}

impl PackedMatrix {
    /// Whether this CPU has SIMD kernels for packed matrices. Without them (CPUs other than
    /// x86-64 with AVX2), the engine keeps candle's kernels, which have NEON code, and only
    /// the tests run the portable path.
    pub fn is_fast_here() -> bool {
        Isa::best().has_avx2()
    }

    /// Whether a matrix of `dtype` with rows of `k` can be packed.
    pub fn supports(dtype: GgmlDType, k: usize) -> bool {
        Self::kind_of(dtype)
            .is_some_and(|kind| k.is_multiple_of(BLOCK * kind.scale_blocks()) && k > 0)
    }

    /// The kind a matrix of `dtype` is packed as, if any.
    pub fn kind_of(dtype: GgmlDType) -> Option<Kind> {
        match dtype {
            GgmlDType::Q8_0 => Some(Kind::Q8_0),
            GgmlDType::Q4_0 => Some(Kind::Q4_0),
            GgmlDType::Q4_1 => Some(Kind::Q4_1),
            GgmlDType::Q4K => Some(Kind::Q4K),
            GgmlDType::Q5K => Some(Kind::Q5K),
            GgmlDType::Q6K => Some(Kind::Q6K),
            _ => None,
        }
    }

    /// Repack a 2-D Q8_0, Q4_0, Q4_1, Q4_K, Q5_K or Q6_K tensor; `None` for any other type
    /// or shape.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let &[n, k] = t.shape().dims() else {
            return Ok(None);
        };
        let Some(kind) = Self::kind_of(t.dtype()).filter(|_| Self::supports(t.dtype(), k)) else {
            return Ok(None);
        };
        if kind.is_k() {
            return Self::from_k_blocks(kind, n, k, &t.data()?).map(Some);
        }
        // Each ggml block: an f16 scale, for Q4_1 an f16 minimum, then the quants.
        let header = if kind == Kind::Q4_1 { 4 } else { 2 };
        let src_block = header + kind.block_bytes();
        let data = t.data()?;
        let blocks = n * k / BLOCK;
        if data.len() != blocks * src_block {
            candle_core::bail!(
                "{:?} tensor {n}x{k} holds {} bytes, expected {}",
                t.dtype(),
                data.len(),
                blocks * src_block
            );
        }
        // Into tiles of eight rows, block by block (the layout of `tile`).
        let blocks_per_row = k / BLOCK;
        let tile_blocks = n.div_ceil(TILE) * blocks_per_row;
        let tb = kind.tile_block_bytes();
        let mut quants = vec![0u8; tile_blocks * tb];
        let mut scales = vec![f16::ZERO; tile_blocks * TILE];
        let mut mins = vec![f16::ZERO; if header == 4 { tile_blocks * TILE } else { 0 }];
        for (i, src) in data.chunks_exact(src_block).enumerate() {
            let (row, b) = (i / blocks_per_row, i % blocks_per_row);
            let (r, at) = (row % TILE, (row / TILE) * blocks_per_row + b);
            scales[at * TILE + r] = f16::from_le_bytes([src[0], src[1]]);
            if header == 4 {
                mins[at * TILE + r] = f16::from_le_bytes([src[2], src[3]]);
            }
            let tile_block = &mut quants[at * tb..(at + 1) * tb];
            for (j, &q) in src[header..].iter().enumerate() {
                // ggml's bytes: one quant each (Q8_0, stored `q + 128`), or two nibbles, of
                // quants `j` and `j + 16`, which the tile keeps in one byte as ggml does.
                let (to, _) = kind.position(r, j);
                tile_block[to] = match kind {
                    Kind::Q8_0 => q ^ 0x80,
                    Kind::Q4_0 | Kind::Q4_1 => q,
                    Kind::Q4K | Kind::Q5K | Kind::Q6K => unreachable!("packed by from_k_blocks"),
                };
            }
        }
        Ok(Some(Self {
            kind,
            isa: Isa::best(),
            n,
            k,
            quants,
            scales,
            mins,
            subs: Vec::new(),
        }))
    }

    /// Repack the ggml super-blocks `data` of a K-quant `(n, k)` matrix.
    fn from_k_blocks(kind: Kind, n: usize, k: usize, data: &[u8]) -> candle_core::Result<Self> {
        let src_bytes = kquants::source_bytes(kind).expect("a K-quant");
        let supers_per_row = k / kquants::SUPER_WEIGHTS;
        if data.len() != n * supers_per_row * src_bytes {
            candle_core::bail!(
                "{kind:?} tensor {n}x{k} holds {} bytes, expected {}",
                data.len(),
                n * supers_per_row * src_bytes
            );
        }
        let (blocks_per_row, tiles) = (k / BLOCK, n.div_ceil(TILE));
        let tb = kind.tile_block_bytes();
        let mut quants = vec![0u8; tiles * blocks_per_row * tb];
        let mut subs = vec![0u8; tiles * blocks_per_row * SUB_BYTES];
        let mut scales = vec![f16::ZERO; tiles * supers_per_row * TILE];
        let mut mins = vec![f16::ZERO; if kind.has_mins() { scales.len() } else { 0 }];
        for (i, src) in data.chunks_exact(src_bytes).enumerate() {
            let (row, sb) = (i / supers_per_row, i % supers_per_row);
            let (r, tile) = (row % TILE, row / TILE);
            let block = kquants::decode(kind, src);
            let st = (tile * supers_per_row + sb) * TILE + r;
            scales[st] = block.d;
            if let Some(m) = mins.get_mut(st) {
                *m = block.dmin;
            }
            for (j, (qb, sub)) in block.q.chunks_exact(BLOCK).zip(block.subs).enumerate() {
                let at = tile * blocks_per_row + sb * SUPER + j;
                subs[at * SUB_BYTES + r] = sub[0];
                subs[at * SUB_BYTES + TILE + r] = sub[1];
                let tile_block = &mut quants[at * tb..(at + 1) * tb];
                match kind {
                    // Quants `j` and `j + 16` in one byte, as Q4_1's.
                    Kind::Q4K => {
                        for j in 0..BLOCK / 2 {
                            let (to, _) = kind.position(r, j);
                            tile_block[to] = qb[j] | (qb[j + BLOCK / 2] << 4);
                        }
                    }
                    // `q` as it is (Q5_K, Q6_K: the offset is the kind's).
                    _ => {
                        for (j, &q) in qb.iter().enumerate() {
                            let (to, _) = kind.position(r, j);
                            tile_block[to] = q;
                        }
                    }
                }
            }
        }
        Ok(Self {
            kind,
            isa: Isa::best(),
            n,
            k,
            quants,
            scales,
            mins,
            subs,
        })
    }

    /// The same matrix computed with the code of `isa`.
    pub fn with_isa(mut self, isa: Isa) -> Self {
        self.isa = isa;
        self
    }

    /// `(n, k)`: output and input width.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// How the weights are stored.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The ggml type the weights came from.
    pub fn dtype(&self) -> GgmlDType {
        match self.kind {
            Kind::Q8_0 => GgmlDType::Q8_0,
            Kind::Q4_0 => GgmlDType::Q4_0,
            Kind::Q4_1 => GgmlDType::Q4_1,
            Kind::Q4K => GgmlDType::Q4K,
            Kind::Q5K => GgmlDType::Q5K,
            Kind::Q6K => GgmlDType::Q6K,
        }
    }

    /// The code its products run.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `x @ W^T` for the `rows` rows of `x` (row-major `rows * k`): row-major `rows * n`.
    ///
    /// # Panics
    /// When `x.len() != rows * k`.
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        Self::matmul_many(&[self], x, rows)
            .pop()
            .expect("one matrix, one result")
    }

    /// `x @ W^T` for each matrix of `mats` (all `k` wide) on the same activations, which
    /// are quantized once, in one parallel pass over the rows of all of them (a layer's Q,
    /// K and V projections, or its gate and up projections: one hand-off to the pool
    /// instead of three or two).
    ///
    /// # Panics
    /// When the matrices differ in width or `x.len() != rows * k`.
    pub fn matmul_many(mats: &[&PackedMatrix], x: &[f32], rows: usize) -> Vec<Vec<f32>> {
        let k = mats.first().map_or(0, |m| m.k);
        assert!(
            mats.iter().all(|m| m.k == k),
            "matrices of different widths"
        );
        assert_eq!(x.len(), rows * k, "activations are not rows * k");
        if rows == 0 || k == 0 {
            return vec![Vec::new(); mats.len()];
        }
        // The K-quants' kernels take one activation scale per super-block (as ggml's Q8_K
        // has), the others one per block: each form is quantized once, where a matrix
        // needs it.
        let quantize = |group: usize| {
            let needed = mats.iter().any(|m| m.kind.scale_blocks() == group);
            needed.then(|| QuantizedRows::new_grouped(x, rows, k, group, Isa::best()))
        };
        let (plain, grouped) = (quantize(1), quantize(SUPER));
        fn rows_of(q: &Option<QuantizedRows>) -> Vec<QuantizedRow<'_>> {
            q.as_ref()
                .map(|q| (0..q.rows()).map(|m| q.row(m)).collect())
                .unwrap_or_default()
        }
        let (plain, grouped) = (rows_of(&plain), rows_of(&grouped));
        let mut outs: Vec<Vec<f32>> = mats.iter().map(|m| vec![0f32; rows * m.n]).collect();
        let total: usize = mats.iter().map(|m| m.n).sum();
        let threads = crate::threads::kernel_threads();
        let parallel = threads > 1 && total * k * rows >= PARALLEL_MIN_WORK;
        // Pieces are whole tiles; the last piece of a matrix may be shorter.
        let piece = if parallel {
            let min_rows = PIECE_MIN_WORK.div_ceil(k * rows);
            total.div_ceil(threads * PIECES_PER_THREAD).max(min_rows)
        } else {
            total
        }
        .next_multiple_of(TILE);
        // A piece: a matrix, its first weight row, and its part of each activation row's
        // outputs (row-major results, written in place: no transposition after).
        let mut pieces: Vec<(&PackedMatrix, usize, Vec<&mut [f32]>)> = Vec::new();
        for (&m, out) in mats.iter().zip(&mut outs) {
            let mut by_row: Vec<_> = out.chunks_mut(m.n).map(|r| r.chunks_mut(piece)).collect();
            for i in 0..m.n.div_ceil(piece) {
                let parts = by_row
                    .iter_mut()
                    .map(|r| r.next().expect("every row has a part per piece"))
                    .collect();
                pieces.push((m, i * piece, parts));
            }
        }
        let run = |(m, first, mut parts): (&PackedMatrix, usize, Vec<&mut [f32]>)| {
            let acts = if m.kind.scale_blocks() == 1 {
                &plain
            } else {
                &grouped
            };
            m.rows_into(first, acts, &mut parts)
        };
        if parallel && pieces.len() > 1 {
            pieces.into_par_iter().for_each(run);
        } else {
            pieces.into_iter().for_each(run);
        }
        outs
    }

    /// Weight rows `first..first + out[0].len()` into `out` (`out[r][j]`: activation row
    /// `r` against weight row `first + j`); `first` is the first row of a tile.
    ///
    /// The kernels take up to four activation rows at a time. With more rows, the weight
    /// rows are taken a span of [`SPAN_BYTES`] at a time, and every group of four
    /// activation rows is run over the span before the next: each weight byte is then read
    /// from memory once and from the cache by the other groups, instead of once per group
    /// (a 128-row chunk of a 1.1B model's layer read its weights 32 times over). Each
    /// output is computed by the same kernel call on the same rows either way.
    fn rows_into(&self, first: usize, act_rows: &[QuantizedRow<'_>], out: &mut [&mut [f32]]) {
        debug_assert_eq!(first % TILE, 0, "pieces start at a tile");
        // Up to the kernels' four rows the weights are read once, from memory, and the
        // kernels prefetch them ([`Tiles::stream`]). Over spans a prefetch measured a few
        // per cent slower with VNNI at 64 and 512 rows (BENCHMARKS.md, the prefetch
        // paragraph): the spans' later groups find the weights in the cache.
        if act_rows.len() <= 4 {
            return self.groups(first, act_rows, out, true);
        }
        let n_out = out.first().map_or(0, |o| o.len());
        let tile_bytes = self.k / BLOCK * self.kind.tile_block_bytes();
        let span = (SPAN_BYTES / tile_bytes.max(1)).max(1) * TILE;
        for at in (0..n_out).step_by(span) {
            let end = (at + span).min(n_out);
            let mut part: Vec<&mut [f32]> = out.iter_mut().map(|o| &mut o[at..end]).collect();
            self.groups(first + at, act_rows, &mut part, false);
        }
    }

    /// Weight rows `first..first + out[0].len()` against every activation row, four at a
    /// time (the kernels' most).
    fn groups(
        &self,
        first: usize,
        act_rows: &[QuantizedRow<'_>],
        out: &mut [&mut [f32]],
        stream: bool,
    ) {
        let n_out = out.first().map_or(0, |o| o.len());
        let mut r = 0;
        while r < act_rows.len() {
            r += match act_rows.len() - r {
                1 => self.group::<1>(first, n_out, act_rows, r, out, stream),
                2 => self.group::<2>(first, n_out, act_rows, r, out, stream),
                3 => self.group::<3>(first, n_out, act_rows, r, out, stream),
                _ => self.group::<4>(first, n_out, act_rows, r, out, stream),
            };
        }
    }

    /// Weight rows `first..first + n` (`first` at a tile) against activation rows
    /// `r..r + M`, into `out[r + m][j]`, prefetching the weights when they `stream` from
    /// memory; returns `M`.
    fn group<const M: usize>(
        &self,
        first: usize,
        n: usize,
        acts: &[QuantizedRow<'_>],
        r: usize,
        out: &mut [&mut [f32]],
        stream: bool,
    ) -> usize {
        let rows: &[QuantizedRow<'_>; M] = acts[r..r + M].try_into().expect("M rows");
        let all = Tiles {
            blocks: self.k / BLOCK,
            quants: &self.quants,
            scales: &self.scales,
            mins: &self.mins,
            subs: &self.subs,
            stream,
        };
        // The tiles' results go through a buffer on the stack, `GROUP_TILES` tiles at a
        // time: no allocation per piece and group of rows, and sized by `M` (a decode
        // step's one row zeroed 4 KB for 1 KB used, 1.9 % of its instructions).
        let mut dots = [[[0f32; TILE]; M]; GROUP_TILES];
        let dots = dots.as_flattened_mut();
        let (first_tile, end_tile) = (first / TILE, (first + n).div_ceil(TILE));
        for t0 in (first_tile..end_tile).step_by(GROUP_TILES) {
            let t1 = (t0 + GROUP_TILES).min(end_tile);
            let dots = &mut dots[..(t1 - t0) * M];
            tile::tile_dots(
                self.isa,
                self.kind,
                all.range(self.kind, t0, t1),
                rows,
                dots,
            );
            for (t, per_row) in dots.chunks_exact(M).enumerate() {
                let at = (t0 + t) * TILE - first;
                let take = n.saturating_sub(at).min(TILE);
                for (m, tile) in per_row.iter().enumerate() {
                    let dst = &mut out[r + m][at..at + take];
                    // A whole tile is a copy of a known length, one vector move; a slice
                    // of a length known only here is a `memmove` call per tile and row
                    // (1.4% of a SmolLM2 Q8_0 prefill's samples on AVX2).
                    match <&mut [f32; TILE]>::try_from(&mut *dst) {
                        Ok(whole) => *whole = *tile,
                        Err(_) => dst.copy_from_slice(&tile[..take]),
                    }
                }
            }
        }
        M
    }

    /// The weights as f32, row-major `n * k` (for chunks long enough that the f32 GEMM
    /// wins, `weight.rs`).
    pub fn dequantize(&self) -> Vec<f32> {
        if self.kind.is_k() {
            return self.dequantize_k();
        }
        let mut out = vec![0f32; self.n * self.k];
        let (kind, off) = (self.kind, self.kind.offset() as f32);
        let (blocks, tb) = (self.k / BLOCK, kind.tile_block_bytes());
        out.par_chunks_mut(self.k).enumerate().for_each(|(n, row)| {
            let (r, tile) = (n % TILE, n / TILE);
            for (b, ob) in row.chunks_exact_mut(BLOCK).enumerate() {
                let at = tile * blocks + b;
                let quants = &self.quants[at * tb..(at + 1) * tb];
                let d = self.scales[at * TILE + r].to_f32();
                let m = self.mins.get(at * TILE + r).map_or(0.0, |m| m.to_f32());
                for (j, o) in ob.iter_mut().enumerate() {
                    *o = (kind.stored(quants, r, j) as f32 - off) * d + m;
                }
            }
        });
        out
    }

    /// [`Self::dequantize`] for the K-quants, as ggml computes the weights:
    /// `(d * sc) * q - dmin * m`, or `(d * s) * (q - 32)`.
    fn dequantize_k(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        let kind = self.kind;
        let (blocks, tb) = (self.k / BLOCK, kind.tile_block_bytes());
        let supers = blocks / SUPER;
        out.par_chunks_mut(self.k).enumerate().for_each(|(n, row)| {
            let (r, tile) = (n % TILE, n / TILE);
            for (b, ob) in row.chunks_exact_mut(BLOCK).enumerate() {
                let at = tile * blocks + b;
                let st = (tile * supers + b / SUPER) * TILE + r;
                let quants = &self.quants[at * tb..(at + 1) * tb];
                let subs = &self.subs[at * SUB_BYTES..(at + 1) * SUB_BYTES];
                let d = self.scales[st].to_f32();
                for (j, o) in ob.iter_mut().enumerate() {
                    let q = (kind.stored(quants, r, j) - kind.offset()) as f32;
                    *o = if kind == Kind::Q6K {
                        let s = subs[(j / (BLOCK / 2)) * TILE + r] as i8;
                        d * f32::from(s) * q
                    } else {
                        let m = self.mins[st].to_f32() * f32::from(subs[TILE + r]);
                        (d * f32::from(subs[r])) * q - m
                    };
                }
            }
        });
        out
    }
}

#[cfg(test)]
mod tests;
