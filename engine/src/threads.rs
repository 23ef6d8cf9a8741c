//! CPU thread count.
//!
//! candle's CPU backend sizes its worker pools (a rayon pool for tensor ops
//! and gemm, and a spinning "barrier pool" for quantized matmuls) once, on
//! first use, from the environment: `CANDLE_NUM_THREADS` for the barrier
//! pool, falling back to `RAYON_NUM_THREADS`, which also sizes the rayon pool.
//! The default is the number of physical cores. [`set_cpu_threads`] sets
//! both variables, so it only has an effect when called before the first
//! model is built or run; later calls change nothing for this process.

use crate::error::{EngineError, Result};

/// Set the number of CPU threads candle will use.
///
/// Call this at the start of `main`, before any other thread is spawned
/// (it writes process environment variables) and before any model is
/// loaded. `n` must be at least 1.
pub fn set_cpu_threads(n: usize) -> Result<()> {
    if n == 0 {
        return Err(EngineError::InvalidOption {
            name: "threads",
            message: "must be at least 1".into(),
        });
    }
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
    Ok(())
}

/// The thread count candle will use (or is using), as it computes it.
pub fn cpu_threads() -> usize {
    candle_core::utils::get_num_threads()
}
