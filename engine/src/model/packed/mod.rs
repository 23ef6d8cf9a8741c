//! The engine's own CPU kernels for quantized weight matmuls with few rows: decode steps
//! (a row per busy slot) and short prefill chunks.
//!
//! Why they exist, when candle-core has quantized kernels: a profile of SmolLM2 decode put
//! 54% of the time in candle's Q8_0 dot product, 8% converting its f16 block scales, and
//! about 20% in its spinning thread pool; and candle computes each (weight row, activation
//! row) pair on its own, so four rows cost four times one. Here:
//! - weights are repacked once at load with unsigned quants, so that AVX-512 VNNI's
//!   `vpdpbusd` (or AVX2's `vpmaddubsw`) applies; the f16 block scales stay f16 (decode
//!   reads every weight byte once per token and is bound by memory bandwidth, so bytes
//!   count) and are converted eight at a time per segment of a row;
//! - Q4_1, which candle only has scalar code for, runs in 4 bits: no conversion to Q8_0
//!   at load, which read 1.7x the bytes per token;
//! - each weight block is read once for up to four activation rows ([`kernels`]);
//! - the output rows are split into chunks run on rayon's pool, the pool the compute
//!   thread already works in, so an idle or descheduled worker costs a steal, never a
//!   spinning barrier.
//!
//! `engine/benches/qmatmul.rs` measures them against candle's `QMatMul` side by side
//! (BENCHMARKS.md, #13). Results agree with candle's to rounding (tests below): both
//! quantize the activations to 8-bit blocks of 32 the same way.

pub mod activations;
// SIMD loads through raw pointers (x86 intrinsics have no slice API).
#[allow(unsafe_code)]
pub mod kernels;

use candle_core::quantized::{GgmlDType, QTensor};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use activations::{QuantizedRow, QuantizedRows, BLOCK};
pub use kernels::{Isa, Kind};

/// Matrices below this many multiply-adds (weight count times rows) run on the calling
/// thread: waking a pool worker costs more than it saves (`engine/benches/qmatmul.rs`).
const PARALLEL_MIN_WORK: usize = 1 << 17;

/// Chunks of output rows per pool thread.
const CHUNKS_PER_THREAD: usize = 1;

/// Blocks of a weight row whose scales are converted to f32 at a time.
const SEGMENT: usize = 64;

/// A quantized weight matrix `(n, k)` in the packed form of [`kernels`].
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    kind: Kind,
    isa: Isa,
    n: usize,
    k: usize,
    quants: Vec<u8>,
    scales: Vec<f16>,
    /// Q4_1's block minimums; empty for the other kinds.
    mins: Vec<f16>,
}

impl PackedMatrix {
    /// Whether a matrix of `dtype` with rows of `k` can be packed.
    pub fn supports(dtype: GgmlDType, k: usize) -> bool {
        Self::kind_of(dtype).is_some() && k.is_multiple_of(BLOCK) && k > 0
    }

    fn kind_of(dtype: GgmlDType) -> Option<Kind> {
        match dtype {
            GgmlDType::Q8_0 => Some(Kind::Q8_0),
            GgmlDType::Q4_0 => Some(Kind::Q4_0),
            GgmlDType::Q4_1 => Some(Kind::Q4_1),
            _ => None,
        }
    }

    /// Repack a 2-D Q8_0, Q4_0 or Q4_1 tensor; `None` for any other type or shape.
    pub fn from_qtensor(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let &[n, k] = t.shape().dims() else {
            return Ok(None);
        };
        let Some(kind) = Self::kind_of(t.dtype()).filter(|_| Self::supports(t.dtype(), k)) else {
            return Ok(None);
        };
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
        let mut quants = Vec::with_capacity(blocks * kind.block_bytes());
        let mut scales = Vec::with_capacity(blocks);
        let mut mins = Vec::with_capacity(if header == 4 { blocks } else { 0 });
        for src in data.chunks_exact(src_block) {
            scales.push(f16::from_le_bytes([src[0], src[1]]));
            if header == 4 {
                mins.push(f16::from_le_bytes([src[2], src[3]]));
            }
            let q = &src[header..];
            match kind {
                Kind::Q8_0 => quants.extend(q.iter().map(|&v| v ^ 0x80)),
                Kind::Q4_0 | Kind::Q4_1 => quants.extend_from_slice(q),
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
        }))
    }

    /// The same matrix computed with `isa`; `None` when this CPU lacks it.
    pub fn with_isa(mut self, isa: Isa) -> Option<Self> {
        isa.is_available().then(|| {
            self.isa = isa;
            self
        })
    }

    /// `(n, k)`: output and input width.
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// How the weights are stored.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The instruction set the matmul runs on.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `x @ W^T` for the `rows` rows of `x` (row-major `rows * k`): row-major `rows * n`.
    ///
    /// # Panics
    /// When `x.len() != rows * k`.
    pub fn matmul(&self, x: &[f32], rows: usize) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.k, "activations are not rows * k");
        if rows == 0 {
            return Vec::new();
        }
        let acts = QuantizedRows::new(x, rows, self.k);
        // Output-major (`n * rows`), so that each chunk of weight rows owns a contiguous
        // piece of the result; transposed at the end when there is more than one row.
        let mut out = vec![0f32; self.n * rows];
        let threads = rayon::current_num_threads();
        let work = self.n * self.k * rows;
        let chunk = if threads > 1 && work >= PARALLEL_MIN_WORK {
            self.n.div_ceil(threads * CHUNKS_PER_THREAD).max(1)
        } else {
            self.n
        };
        let run = |(c, part): (usize, &mut [f32])| self.rows_into(c * chunk, &acts, part);
        if chunk < self.n {
            out.par_chunks_mut(chunk * rows).enumerate().for_each(run);
        } else {
            run((0, &mut out));
        }
        if rows == 1 {
            return out;
        }
        let mut t = vec![0f32; out.len()];
        for (j, col) in out.chunks_exact(rows).enumerate() {
            for (m, &v) in col.iter().enumerate() {
                t[m * self.n + j] = v;
            }
        }
        t
    }

    /// Weight rows `first..` into `out` (`rows` outputs per weight row, output-major).
    fn rows_into(&self, first: usize, acts: &QuantizedRows, out: &mut [f32]) {
        let rows = acts.rows();
        let blocks = self.k / BLOCK;
        let bb = self.kind.block_bytes();
        let (mut d, mut m) = ([0f32; SEGMENT], [0f32; SEGMENT]);
        for (j, o) in out.chunks_exact_mut(rows).enumerate() {
            let n = first + j;
            for b0 in (0..blocks).step_by(SEGMENT) {
                let len = SEGMENT.min(blocks - b0);
                let (at, d) = (n * blocks + b0, &mut d[..len]);
                self.scales[at..at + len].convert_to_f32_slice(d);
                let w = &self.quants[at * bb..(at + len) * bb];
                let mins = (!self.mins.is_empty()).then(|| {
                    self.mins[at..at + len].convert_to_f32_slice(&mut m[..len]);
                    &m[..len]
                });
                let seg = Segment { w, d, mins, b0 };
                let mut r = 0;
                while r < rows {
                    r += match rows - r {
                        1 => self.group::<1>(&seg, acts, r, o),
                        2 => self.group::<2>(&seg, acts, r, o),
                        3 => self.group::<3>(&seg, acts, r, o),
                        _ => self.group::<4>(&seg, acts, r, o),
                    };
                }
            }
        }
    }

    /// A weight row segment against activation rows `r..r + M`, added to `o[r..r + M]`;
    /// returns `M`.
    fn group<const M: usize>(
        &self,
        seg: &Segment<'_>,
        acts: &QuantizedRows,
        r: usize,
        o: &mut [f32],
    ) -> usize {
        let len = seg.d.len();
        let rows: [QuantizedRow<'_>; M] =
            std::array::from_fn(|i| acts.row(r + i).blocks(seg.b0, len));
        let dots = kernels::row_dots(self.isa, self.kind, seg.w, seg.d, &rows);
        for ((o, dot), a) in o[r..r + M].iter_mut().zip(dots).zip(&rows) {
            *o += dot;
            if let Some(mins) = seg.mins {
                *o += mins
                    .iter()
                    .zip(a.scaled_sums)
                    .map(|(m, s)| m * s)
                    .sum::<f32>();
            }
        }
        M
    }

    /// The weights as f32, row-major `n * k` (for chunks long enough that the f32 GEMM
    /// wins, `weight.rs`).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        let bb = self.kind.block_bytes();
        let (kind, off) = (self.kind, self.kind.offset() as f32);
        out.par_chunks_mut(BLOCK * 64)
            .enumerate()
            .for_each(|(c, part)| {
                for (i, ob) in part.chunks_exact_mut(BLOCK).enumerate() {
                    let b = c * 64 + i;
                    let wb = &self.quants[b * bb..(b + 1) * bb];
                    let d = self.scales[b].to_f32();
                    let m = self.mins.get(b).map_or(0.0, |m| m.to_f32());
                    for (j, o) in ob.iter_mut().enumerate() {
                        *o = (kind.stored(wb, j) as f32 - off) * d + m;
                    }
                }
            });
        out
    }
}

/// Up to [`SEGMENT`] blocks of one weight row, scales converted.
struct Segment<'a> {
    w: &'a [u8],
    d: &'a [f32],
    mins: Option<&'a [f32]>,
    /// The first block's index in the row.
    b0: usize,
}

#[cfg(test)]
mod tests;
