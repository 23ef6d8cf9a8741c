//! Activation rows quantized to 8-bit blocks of 32, the form the packed kernels multiply.
//!
//! Each block keeps its scale in f32, the sums of its quants per 4-byte lane (the kernels
//! take the weights' unsigned offset back out of an unsigned-by-signed dot product with
//! them: `sum((w + o) * x) - o * sum(x) = sum(w * x)`), and the block's sum times its scale
//! (for the per-block minimum of Q4_1 weights:
//! `sum((d * u + m) * x) = d * sum(u * x) + m * sum(x)`).
//! The per-block values of a row are padded with zeros to a multiple of [`GROUP`] blocks, so
//! that the kernels load them eight at a time with no tail.

use half::f16;

/// Values per quantized block.
pub const BLOCK: usize = 32;

/// Blocks whose per-block values the kernels handle at once.
pub const GROUP: usize = 8;

/// Per-block entries of a row of `blocks` blocks: `blocks` rounded up to [`GROUP`].
pub fn padded(blocks: usize) -> usize {
    blocks.next_multiple_of(GROUP)
}

/// `rows` activation rows of `k` values each, quantized per block of [`BLOCK`].
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    k: usize,
    rows: usize,
    quants: Vec<i8>,
    scales: Vec<f32>,
    scaled_sums: Vec<f32>,
    lane_sums: Vec<i32>,
}

/// One quantized row: its quants, its lane sums and, padded to [`padded`] entries with
/// zeros, its block scales and scaled sums.
#[derive(Debug, Clone, Copy)]
pub struct QuantizedRow<'a> {
    /// `k` quants.
    pub quants: &'a [i8],
    /// The scale of each block.
    pub scales: &'a [f32],
    /// The sum of each block's quants times its scale, rounded to f16 as ggml's Q8_1 has it.
    pub scaled_sums: &'a [f32],
    /// Per block, 8 lanes: minus the sum of quants `4j..4j + 4` in lane `j` (the grouping
    /// of `vpdpbusd` and of `vpmaddubsw` + `vpmaddwd`), so that the kernels take the
    /// weights' offset out lane by lane and every lane holds exactly what candle's and
    /// ggml's signed kernels hold.
    pub lane_sums: &'a [i32],
}

/// The quantization of [`QuantizedRows::new`], for pulp's dispatch: `with_simd` is inlined
/// into a function compiled for the instruction set pulp picks, so the block loop is
/// vectorized and its rounding is an instruction, not a call to libm's `roundf` (a perf
/// profile of the embedded model with 4 slots had that call at 3% of the compute thread).
struct Quantize<'a> {
    x: &'a [f32],
    q: &'a mut QuantizedRows,
}

impl pulp::WithSimd for Quantize<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Quantize { x, q } = self;
        let (k, stride) = (q.k, padded(q.k / BLOCK));
        for (r, (xr, qr)) in x
            .chunks_exact(k)
            .zip(q.quants.chunks_exact_mut(k))
            .enumerate()
        {
            let blocks = xr.chunks_exact(BLOCK).zip(qr.chunks_exact_mut(BLOCK));
            for (b, (xb, qb)) in blocks.enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let mut sum = 0i32;
                for (q, v) in qb.iter_mut().zip(xb) {
                    // `as` saturates and maps NaN to 0.
                    *q = (v * id).round() as i8;
                    sum += i32::from(*q);
                }
                // Stored as ggml stores them (Q8_0's and Q8_1's f16 fields), so that results
                // equal candle's (and llama.cpp's, but for its order of summation).
                let at = r * stride + b;
                q.scales[at] = f16::from_f32(d).to_f32();
                q.scaled_sums[at] = f16::from_f32(d * sum as f32).to_f32();
                let lanes = &mut q.lane_sums[(r * k + b * BLOCK) / 4..][..BLOCK / 4];
                for (l, q4) in lanes.iter_mut().zip(qb.chunks_exact(4)) {
                    *l = -q4.iter().map(|&v| i32::from(v)).sum::<i32>();
                }
            }
        }
    }
}

impl QuantizedRows {
    /// Quantize the `rows` rows of `x` (row-major, `rows * k` values; `k` a multiple of
    /// [`BLOCK`]) as ggml's Q8_0 and Q8_1 do: each block's scale is its largest magnitude
    /// over 127, each quant its value over the scale rounded half away from zero; the scale
    /// and the scaled sum are kept rounded to f16. Values that are not finite give a block
    /// of meaningless numbers, never a panic.
    pub fn new(x: &[f32], rows: usize, k: usize) -> Self {
        assert!(
            k.is_multiple_of(BLOCK),
            "row width {k} is not a multiple of {BLOCK}"
        );
        assert_eq!(x.len(), rows * k, "activation length");
        let stride = padded(k / BLOCK);
        let mut q = Self {
            k,
            rows,
            quants: vec![0i8; rows * k],
            scales: vec![0f32; rows * stride],
            scaled_sums: vec![0f32; rows * stride],
            lane_sums: vec![0i32; rows * k / 4],
        };
        // Compiled for the best instruction set the CPU has (see `Quantize`).
        pulp::Arch::new().dispatch(Quantize { x, q: &mut q });
        q
    }
    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `m`.
    pub fn row(&self, m: usize) -> QuantizedRow<'_> {
        let stride = padded(self.k / BLOCK);
        let per_block = m * stride..(m + 1) * stride;
        QuantizedRow {
            quants: &self.quants[m * self.k..(m + 1) * self.k],
            scales: &self.scales[per_block.clone()],
            scaled_sums: &self.scaled_sums[per_block],
            lane_sums: &self.lane_sums[m * self.k / 4..(m + 1) * self.k / 4],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_scale_to_127_and_sum_their_quants() {
        let x: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
        let q = QuantizedRows::new(&x, 1, 64);
        let r = q.row(0);
        assert_eq!(r.scales[0], f16::from_f32(20.0 / 127.0).to_f32());
        assert_eq!(r.quants[0], -127);
        let sum0: i32 = r.quants[..32].iter().map(|&v| i32::from(v)).sum();
        assert_eq!(r.lane_sums[..8].iter().sum::<i32>(), -sum0);
        assert_eq!(r.quants[63], 127);
        let d1 = 43.0f32 / 127.0;
        let sum1: i32 = r.quants[32..].iter().map(|&v| i32::from(v)).sum();
        assert_eq!(r.scaled_sums[1], f16::from_f32(d1 * sum1 as f32).to_f32());
        let lane0: i32 = r.quants[..4].iter().map(|&v| i32::from(v)).sum();
        assert_eq!(r.lane_sums[0], -lane0);
        assert_eq!(r.lane_sums.len(), 16);
        // Two blocks, padded to a group of 8 with zeros.
        assert_eq!(r.scales.len(), GROUP);
        assert!(r.scales[2..]
            .iter()
            .chain(&r.scaled_sums[2..])
            .all(|&v| v == 0.0));
    }

    #[test]
    fn zero_and_non_finite_blocks_do_not_panic() {
        let mut x = vec![0f32; 64];
        x[40] = f32::NAN;
        x[41] = f32::INFINITY;
        let q = QuantizedRows::new(&x, 2, 32);
        assert_eq!(q.row(0).scales[0], 0.0);
        assert!(q.row(0).quants.iter().all(|&v| v == 0));
        assert_eq!(q.rows(), 2);
    }
}
