//! Activation rows quantized to 8-bit blocks of 32, the form the packed kernels multiply.
//!
//! Each block keeps its scale in f32 and the sum of its quants, plain (the kernels take the
//! weights' unsigned offset back out of an unsigned-by-signed dot product with it:
//! `sum((w + o) * x) - o * sum(x) = sum(w * x)`) and times the scale (for the per-block
//! minimum of Q4_1 weights: `sum((d * u + m) * x) = d * sum(u * x) + m * sum(x)`).

use half::f16;

/// Values per quantized block.
pub const BLOCK: usize = 32;

/// `rows` activation rows of `k` values each, quantized per block of [`BLOCK`].
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    k: usize,
    rows: usize,
    quants: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    scaled_sums: Vec<f32>,
}

/// One quantized row: its quants, block scales and block sums.
#[derive(Debug, Clone, Copy)]
pub struct QuantizedRow<'a> {
    /// `k` quants.
    pub quants: &'a [i8],
    /// One scale per block.
    pub scales: &'a [f32],
    /// One sum of quants per block.
    pub sums: &'a [i32],
    /// One sum of quants per block, times the block's scale.
    pub scaled_sums: &'a [f32],
}

impl<'a> QuantizedRow<'a> {
    /// Blocks `first..first + len` of the row.
    pub fn blocks(&self, first: usize, len: usize) -> QuantizedRow<'a> {
        let b = first..first + len;
        QuantizedRow {
            quants: &self.quants[first * BLOCK..(first + len) * BLOCK],
            scales: &self.scales[b.clone()],
            sums: &self.sums[b.clone()],
            scaled_sums: &self.scaled_sums[b],
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
        let blocks = rows * k / BLOCK;
        let mut quants = vec![0i8; rows * k];
        let mut scales = Vec::with_capacity(blocks);
        let mut sums = Vec::with_capacity(blocks);
        let mut scaled_sums = Vec::with_capacity(blocks);
        for (xb, qb) in x.chunks_exact(BLOCK).zip(quants.chunks_exact_mut(BLOCK)) {
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
            // equal candle's and llama.cpp's up to the order of summation.
            scales.push(f16::from_f32(d).to_f32());
            sums.push(sum);
            scaled_sums.push(f16::from_f32(d * sum as f32).to_f32());
        }
        Self {
            k,
            rows,
            quants,
            scales,
            sums,
            scaled_sums,
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `m`.
    pub fn row(&self, m: usize) -> QuantizedRow<'_> {
        let blocks = self.k / BLOCK;
        QuantizedRow {
            quants: &self.quants[m * self.k..(m + 1) * self.k],
            scales: &self.scales[m * blocks..(m + 1) * blocks],
            sums: &self.sums[m * blocks..(m + 1) * blocks],
            scaled_sums: &self.scaled_sums[m * blocks..(m + 1) * blocks],
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
        assert_eq!(
            r.sums[0],
            r.quants[..32].iter().map(|&v| i32::from(v)).sum::<i32>()
        );
        assert_eq!(r.quants[63], 127);
        let d1 = 43.0f32 / 127.0;
        assert_eq!(
            r.scaled_sums[1],
            f16::from_f32(d1 * r.sums[1] as f32).to_f32()
        );
        assert_eq!(r.blocks(1, 1).quants, &r.quants[32..]);
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
