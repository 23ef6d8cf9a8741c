//! Activation rows quantized to 8-bit blocks of 32, the form the packed kernels multiply.
//!
//! Each block keeps its scale in f32, the sum of its quants (the kernels take the weights'
//! unsigned offset back out of an unsigned-by-signed dot product with it:
//! `sum((w + o) * x) - o * sum(x) = sum(w * x)`), and that sum times its scale (for the
//! per-block minimum of Q4_1 weights: `sum((d * u + m) * x) = d * sum(u * x) + m * sum(x)`),
//! and for the K-quants the sum of its first half. For the K-quants the rows are quantized
//! with one scale per super-block of 256 values ([`QuantizedRows::new_grouped`]).

use half::f16;

use crate::kernels::Isa;

// SIMD loads and stores through raw pointers (x86 intrinsics have no slice API).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86;

/// Values per quantized block.
pub const BLOCK: usize = 32;

/// `rows` activation rows of `k` values each, quantized per block of [`BLOCK`].
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    k: usize,
    rows: usize,
    quants: Vec<i8>,
    scales: Vec<f32>,
    scaled_sums: Vec<f32>,
    sums: Vec<i32>,
    half_sums: Vec<i32>,
}

/// One quantized row: its quants, and per block its scale, scaled sum and sum.
#[derive(Debug, Clone, Copy)]
pub struct QuantizedRow<'a> {
    /// `k` quants.
    pub quants: &'a [i8],
    /// The scale of each block.
    pub scales: &'a [f32],
    /// The sum of each block's quants times its scale, rounded to f16 as ggml's Q8_1 has it.
    pub scaled_sums: &'a [f32],
    /// The sum of each block's quants.
    pub sums: &'a [i32],
    /// The sum of each block's first 16 quants (for the K-quants' half blocks).
    pub half_sums: &'a [i32],
}

/// A block's scale as kept: rounded to f16 as ggml's Q8_0 and Q8_1 store it, or for a
/// group of blocks in f32 as ggml's Q8_K does.
fn scale_kept(d: f32, group: usize) -> f32 {
    if group == 1 {
        f16::from_f32(d).to_f32()
    } else {
        d
    }
}

/// The quantization of [`QuantizedRows::new`], for pulp's dispatch: `with_simd` is inlined
/// into a function compiled for the instruction set pulp picks, so the block loop is
/// vectorized and its rounding is an instruction, not a call to libm's `roundf` (a perf
/// profile of the embedded model with 4 slots had that call at 3% of the compute thread).
struct Quantize<'a> {
    x: &'a [f32],
    q: &'a mut QuantizedRows,
    /// Blocks that share one scale (see [`QuantizedRows::new_grouped`]).
    group: usize,
}

impl pulp::WithSimd for Quantize<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Quantize { x, q, group } = self;
        let (k, stride) = (q.k, q.k / BLOCK);
        for (r, (xr, qr)) in x
            .chunks_exact(k)
            .zip(q.quants.chunks_exact_mut(k))
            .enumerate()
        {
            let mut amax = 0f32;
            let blocks = xr.chunks_exact(BLOCK).zip(qr.chunks_exact_mut(BLOCK));
            for (b, (xb, qb)) in blocks.enumerate() {
                if b % group == 0 {
                    let xg = &xr[b * BLOCK..(b + group) * BLOCK];
                    amax = xg.iter().fold(0f32, |m, v| m.max(v.abs()));
                }
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
                q.scales[at] = scale_kept(d, group);
                q.scaled_sums[at] = f16::from_f32(d * sum as f32).to_f32();
                q.sums[at] = sum;
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
        Self::new_with(x, rows, k, Isa::best())
    }

    /// [`Self::new`] with the code of `isa` (the values are the same, bit for bit).
    pub fn new_with(x: &[f32], rows: usize, k: usize, isa: Isa) -> Self {
        Self::new_grouped(x, rows, k, 1, isa)
    }

    /// As [`Self::new_with`], with one scale for each `group` consecutive blocks of a row
    /// (the largest magnitude of the group over 127, as ggml's Q8_K has one per 256 values
    /// for its K-quants), kept in f32 (not rounded to f16, as Q8_K keeps it) in each
    /// block's entry; `k` a multiple of `group` blocks.
    pub fn new_grouped(x: &[f32], rows: usize, k: usize, group: usize, isa: Isa) -> Self {
        assert!(group > 0, "a group of no blocks");
        assert!(
            k.is_multiple_of(BLOCK * group),
            "row width {k} is not a multiple of {group} blocks of {BLOCK}"
        );
        assert_eq!(x.len(), rows * k, "activation length");
        let mut q = Self::zeroed(rows, k);
        #[cfg(target_arch = "x86_64")]
        if isa.has_avx2() {
            q.quantize_avx2(isa, x, group);
            q.derive_sums();
            return q;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = isa;
        q.quantize_portable(x, group);
        q.derive_sums();
        q
    }

    /// Each block's first half's sum, from its quants.
    fn derive_sums(&mut self) {
        let halves = self.quants.chunks_exact(BLOCK).zip(&mut self.half_sums);
        for (qb, h) in halves {
            *h = qb[..BLOCK / 2].iter().map(|&v| i32::from(v)).sum();
        }
    }

    fn zeroed(rows: usize, k: usize) -> Self {
        let blocks = rows * k / BLOCK;
        Self {
            k,
            rows,
            quants: vec![0i8; rows * k],
            scales: vec![0f32; blocks],
            scaled_sums: vec![0f32; blocks],
            sums: vec![0i32; blocks],
            half_sums: vec![0i32; blocks],
        }
    }

    /// [`Self::new`]'s quantization in portable code.
    fn quantize_portable(&mut self, x: &[f32], group: usize) {
        // Compiled for the best instruction set the CPU has (see `Quantize`).
        pulp::Arch::new().dispatch(Quantize { x, q: self, group });
    }

    /// [`Self::new`]'s quantization with AVX2 (the same values).
    ///
    /// # Panics
    /// When `isa` has no AVX2.
    #[cfg(target_arch = "x86_64")]
    fn quantize_avx2(&mut self, isa: Isa, x: &[f32], group: usize) {
        assert!(isa.has_avx2(), "{isa:?} has no AVX2");
        let xs = x
            .chunks_exact(BLOCK)
            .zip(self.quants.chunks_exact_mut(BLOCK));
        fn block_of(xb: &[f32]) -> &[f32; BLOCK] {
            xb.try_into().expect("a block")
        }
        let mut amax = 0f32;
        for (at, (xb, qb)) in xs.enumerate() {
            let qb = qb.try_into().expect("a block");
            let block = if group == 1 {
                x86::quantize_block(isa, block_of(xb), qb)
            } else {
                if at % group == 0 {
                    let xg = &x[at * BLOCK..(at + group) * BLOCK];
                    amax = xg
                        .chunks_exact(BLOCK)
                        .map(|b| x86::block_amax(isa, block_of(b)))
                        .fold(0f32, f32::max);
                }
                x86::quantize_block_with(isa, block_of(xb), qb, amax)
            };
            self.scales[at] = scale_kept(block.d, group);
            self.scaled_sums[at] = f16::from_f32(block.d * block.sum as f32).to_f32();
            self.sums[at] = block.sum;
        }
    }
    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `m`.
    pub fn row(&self, m: usize) -> QuantizedRow<'_> {
        let blocks = self.k / BLOCK;
        let per_block = m * blocks..(m + 1) * blocks;
        QuantizedRow {
            quants: &self.quants[m * self.k..(m + 1) * self.k],
            scales: &self.scales[per_block.clone()],
            scaled_sums: &self.scaled_sums[per_block.clone()],
            sums: &self.sums[per_block.clone()],
            half_sums: &self.half_sums[per_block],
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
        assert_eq!(r.sums[0], sum0);
        assert_eq!(r.quants[63], 127);
        let d1 = 43.0f32 / 127.0;
        let sum1: i32 = r.quants[32..].iter().map(|&v| i32::from(v)).sum();
        assert_eq!(r.scaled_sums[1], f16::from_f32(d1 * sum1 as f32).to_f32());
        assert_eq!(r.sums[1], sum1);
        let half1: i32 = r.quants[32..48].iter().map(|&v| i32::from(v)).sum();
        assert_eq!(r.half_sums[1], half1);
        assert_eq!(
            (r.scales.len(), r.scaled_sums.len(), r.sums.len()),
            (2, 2, 2)
        );
    }

    /// The AVX2 quantization gives the portable loop's values, bit for bit, on blocks of
    /// every kind: random, exact halves (rounding ties), zeros, NaN and infinities.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_quantization_equals_the_portable_loop() {
        let Some(avx2) = Isa::get(crate::kernels::Level::Avx2) else {
            return;
        };
        let k = 8 * BLOCK;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut x: Vec<f32> = (0..64 * k).map(|_| next() * 7.0).collect();
        // Block 1: halves after scaling (amax 127, so `x * id` is `x`).
        for (i, v) in x[BLOCK..2 * BLOCK].iter_mut().enumerate() {
            *v = if i == 0 { 127.0 } else { i as f32 - 16.5 };
        }
        x[2 * BLOCK..3 * BLOCK].fill(0.0);
        x[3 * BLOCK + 5] = f32::NAN;
        x[4 * BLOCK + 7] = f32::INFINITY;
        x[5 * BLOCK + 9] = f32::NEG_INFINITY;
        x[6 * BLOCK..7 * BLOCK].fill(f32::NAN);
        x[7 * BLOCK + 1] = 1e30;
        x[8 * BLOCK + 2] = -1e-30;
        let rows = x.len() / k;
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for group in [1, 8] {
            let want = QuantizedRows::new_grouped(&x, rows, k, group, Isa::PORTABLE);
            let mut got = QuantizedRows::zeroed(rows, k);
            got.quantize_avx2(avx2, &x, group);
            got.derive_sums();
            assert_eq!(got.quants, want.quants, "group {group}");
            assert_eq!(got.sums, want.sums, "group {group}");
            assert_eq!(got.half_sums, want.half_sums, "group {group}");
            assert_eq!(bits(&got.scales), bits(&want.scales), "group {group}");
            assert_eq!(bits(&got.scaled_sums), bits(&want.scaled_sums));
            let best = QuantizedRows::new_grouped(&x, rows, k, group, Isa::best());
            assert_eq!(best.quants, want.quants, "group {group}");
        }
    }

    /// Grouped, the blocks of a group share the scale of the group's largest magnitude.
    #[test]
    fn a_group_of_blocks_shares_its_largest_magnitude_s_scale() {
        let k = 16 * BLOCK;
        let mut x: Vec<f32> = (0..k).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
        x[5] = -50.8;
        x[300] = 12.7;
        for isa in Isa::available() {
            let q = QuantizedRows::new_grouped(&x, 1, k, 8, isa);
            let r = q.row(0);
            // Kept in f32, as Q8_K keeps it.
            let (first, second) = (50.8f32 / 127.0, 12.7f32 / 127.0);
            assert!(r.scales[..8].iter().all(|&d| d == first), "{isa:?}");
            assert!(r.scales[8..].iter().all(|&d| d == second), "{isa:?}");
            assert_eq!((r.quants[5], r.quants[300]), (-127, 127), "{isa:?}");
            // 0.75 over the group's 0.4 (its own block's scale would make it 127).
            assert_eq!(r.quants[32 + 2], 2, "{isa:?}");
        }
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
