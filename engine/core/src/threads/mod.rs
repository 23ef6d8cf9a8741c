//! CPU threads: how many, where the compute loop runs, and whether a step's kernels
//! spread over the pool ([`pool_use`]).
//!
//! candle's CPU backend sizes its worker pools (a rayon pool for tensor ops
//! and gemm, and a spinning "barrier pool" for quantized matmuls) once, on
//! first use, from the environment: `CANDLE_NUM_THREADS` for the barrier
//! pool, falling back to `RAYON_NUM_THREADS`, which also sizes the rayon pool.
//! The default is the number of physical cores. [`set_cpu_threads`] sets
//! both variables, so it only has an effect when called before the first
//! model is built or run; later calls change nothing for this process.
//!
//! [`run_in_pool`] runs the compute loop on a worker of rayon's global pool, the pool
//! candle's small CPU ops use (RMS norm, RoPE, softmax: `par_chunks`; the f32 GEMM of
//! attention). Called from a thread outside the pool, each of those ops is handed to a
//! pool worker and the caller sleeps until it is woken again: two context switches per
//! op, even for a one-row op that is never split, and five such ops per layer (two RMS
//! norms, two RoPEs, a softmax), 150 per decoded token on SmolLM2's 30 layers.
//! When the CPUs are shared with another busy process, each hand-off waits for the
//! scheduler to run the worker, and decode collapses. Called from a pool worker, an op
//! that is not split runs inline, and a split one runs its own halves unless an idle
//! worker steals them: nothing waits on a thread that is not running.

use std::cell::Cell;

use crate::error::{EngineError, Result};

pub mod awake;
pub mod pool_use;

pub use awake::with_workers_awake;
pub use pool_use::{PoolChooser, PoolUse};

thread_local! {
    /// Set while this thread runs a step whose kernels stay on it ([`with_pool`]).
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

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

/// Runs `f` on a worker thread of rayon's global pool (where candle's parallel CPU ops then
/// run inline or with work stealing, see the module documentation); the calling thread
/// blocks until `f` returns.
pub fn run_in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// The threads the engine's own kernels (packed matmuls, decode attention) may spread a
/// piece of work over when called from this thread: rayon's pool size, or 1 inside
/// [`with_pool`]`(false, ..)`.
pub fn kernel_threads() -> usize {
    if ALONE.with(Cell::get) {
        1
    } else {
        rayon::current_num_threads()
    }
}

/// Runs `f` on this thread with the engine's kernels spreading their work over the pool
/// (`use_pool`, the pool's other workers then kept awake through `f`: [`awake`]) or keeping
/// it on this thread; the previous setting is back afterwards, also when `f` panics.
/// candle's own ops are not affected.
pub fn with_pool<R>(use_pool: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALONE.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(ALONE.with(|a| a.replace(!use_pool)));
    if use_pool {
        with_workers_awake(f)
    } else {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_pool_sets_the_kernels_threads_and_restores_them_also_on_panic() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(kernel_threads(), 2);
            with_pool(false, || {
                assert_eq!(kernel_threads(), 1);
                with_pool(true, || assert_eq!(kernel_threads(), 2));
                assert_eq!(kernel_threads(), 1);
            });
            let panicked = std::panic::catch_unwind(|| with_pool(false, || panic!("in a step")));
            assert!(panicked.is_err());
            assert_eq!(kernel_threads(), 2);
        });
    }
}
