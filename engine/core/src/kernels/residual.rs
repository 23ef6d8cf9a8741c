//! `a + b` for a layer's residual connections, on the calling thread.
//!
//! candle's CPU add hands a tensor of 64K values or more (a 128-token prefill chunk of
//! SmolLM2 already has 73,728) to its "barrier pool", whose worker then spins for some
//! 25,000 `pause`s before it sleeps. During a prefill that spin runs beside the packed
//! matmul that follows, on the cores the engine's pool computes on: a perf profile of a
//! SmolLM2 Q8_0 prefill on 2 threads had candle's worker at 5.7% of the samples
//! (BENCHMARKS.md, "candle's spinning worker"). The sum itself is a memory-bound pass of a
//! few tens of microseconds, so it runs here, where the compute thread is.

use candle_core::Tensor;

use super::cpu_slices::on_cpu_slices;

/// `a + b` elementwise, bit for bit candle's; contiguous f32 tensors of one shape on the
/// CPU are summed on this thread, anything else by candle (its result or its error).
pub fn add(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    let sum = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x + y).collect();
    match on_cpu_slices(a, b, sum)? {
        Some(out) => Ok(out),
        None => a + b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// The same bits as candle's add, below and above the length at which candle splits
    /// the work over its pool (64K values), with a tail that is no whole vector.
    #[test]
    fn sums_are_candles_bit_for_bit() {
        for n in [1usize, 7, 576, 3 * 576, 128 * 576 + 3] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos() / 7.0).collect();
            let a = Tensor::from_vec(a, (1, n), &Device::Cpu).unwrap();
            let b = Tensor::from_vec(b, (1, n), &Device::Cpu).unwrap();
            let want = (&a + &b).unwrap().to_vec2::<f32>().unwrap();
            let got = add(&a, &b).unwrap();
            assert_eq!(got.dims(), &[1, n]);
            let got = got.to_vec2::<f32>().unwrap();
            let same = got[0]
                .iter()
                .zip(&want[0])
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{n} values differ from candle's sum");
        }
    }

    /// A view that is not contiguous, or a narrowed one (an offset into its storage), and
    /// other types or shapes go to candle: its result, or its error.
    #[test]
    fn other_layouts_fall_back_to_candle() {
        let a = Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 4))
            .unwrap();
        let at = a.t().unwrap();
        let ones = Tensor::ones((4, 3), DType::F32, &Device::Cpu).unwrap();
        let want = (&at + &ones).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(add(&at, &ones).unwrap().to_vec2::<f32>().unwrap(), want);
        let tail = a.narrow(0, 1, 2).unwrap();
        let twos = Tensor::full(2f32, (2, 4), &Device::Cpu).unwrap();
        let want = (&tail + &twos).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(add(&tail, &twos).unwrap().to_vec2::<f32>().unwrap(), want);
        let whole = Tensor::ones((3, 4), DType::F64, &Device::Cpu).unwrap();
        let want = (&whole + &whole).unwrap().to_vec2::<f64>().unwrap();
        assert_eq!(add(&whole, &whole).unwrap().to_vec2::<f64>().unwrap(), want);
        assert!(add(&a, &ones).is_err(), "shapes differ");
    }
}
