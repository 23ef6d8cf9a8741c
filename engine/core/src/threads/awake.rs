//! Keeping the pool's other workers awake through a step that spreads its kernels over the
//! pool.
//!
//! A step hands pieces of work to rayon's pool about five times per layer and joins them
//! (150 hand-offs per token on SmolLM2's 30 layers). Between steps, and between two
//! hand-offs while the compute thread works alone, rayon's idle workers look for work a
//! few rounds and then sleep: the next hand-off waits for a sleeping thread to be woken
//! and scheduled. On a virtual machine whose CPU halts while its threads sleep, that wait
//! measured 0.65-1.10 ms on average and up to 4.1 ms (`perf sched latency` over ten pairs
//! of 128-token prefills, SmolLM2 Q4_0, two threads, three runs; 0.33-0.50 ms with the
//! workers kept awake, in the same minutes).
//! llama.cpp's threads poll between the operations of a graph for the same reason.
//!
//! [`with_workers_awake`] runs a step while every other worker of the pool stays in a loop
//! that takes the pool's pending work as it appears ([`rayon::yield_now`]) and otherwise
//! yields its CPU to any other runnable thread (`sched_yield`, which returns at once on a
//! quiet machine), until the step ends or no work has come for [`IDLE_LIMIT`] (a step in
//! a long serial phase, or stalled, then costs no busy core). Pausing (`pause`) instead
//! of yielding measured 25 % slower decode beside a busy process, which the yield lets
//! run. BENCHMARKS.md ("Workers kept awake through a step") has the measurements.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a worker kept awake waits for work before it goes back to rayon's own idle
/// loop, which soon sleeps: longer than the gaps between the hand-offs of a step (tens to
/// hundreds of microseconds on the models here), short enough that a step which stops
/// handing out work leaves the core free almost at once.
pub const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// Runs `f` on this thread while the pool's other workers are kept awake for its work
/// (see the module documentation). Outside a pool, or in a pool of one thread, `f` just
/// runs. The workers are released when `f` returns or panics.
pub fn with_workers_awake<R>(f: impl FnOnce() -> R) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    if rayon::current_num_threads() < 2 {
        return f();
    }
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    // One job per worker of this pool; this thread's own returns at once when it runs.
    rayon::spawn_broadcast(move |ctx| {
        if ctx.index() != me {
            stay_awake(&flag, IDLE_LIMIT);
        }
    });
    /// Sets the flag when `f` returns or unwinds.
    struct Release(Arc<AtomicBool>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let release = Release(done);
    let out = f();
    drop(release);
    // This thread's copy of the broadcast, if no wait inside `f` ran it, runs now (it
    // returns at once): a copy left queued on a thread that waits on no join until the next
    // step would pile up one per step.
    let _ = rayon::yield_local();
    out
}

/// A worker's loop while kept awake: runs the pool's pending jobs as they appear, and
/// yields its CPU between looks, until `done` or until none has come for `idle_limit`.
/// Returns the jobs it ran.
fn stay_awake(done: &AtomicBool, idle_limit: Duration) -> usize {
    let (mut ran, mut last) = (0, Instant::now());
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            ran += 1;
            last = Instant::now();
        } else if last.elapsed() > idle_limit {
            break;
        } else {
            std::thread::yield_now();
        }
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::mpsc;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    /// Within a bound: `f` on `pool`, or `None` if it has not finished in 10 s.
    fn within_bound<R: Send + 'static>(
        pool: &Arc<rayon::ThreadPool>,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::channel();
        let p = Arc::clone(pool);
        std::thread::spawn(move || {
            let _ = tx.send(p.install(f));
        });
        rx.recv_timeout(Duration::from_secs(10)).ok()
    }

    #[test]
    fn the_step_s_parallel_work_gives_its_result_and_the_workers_are_released() {
        let pool = Arc::new(pool(3));
        for _ in 0..20 {
            let sum = within_bound(&pool, || {
                with_workers_awake(|| (0..100_000u64).into_par_iter().map(|v| v % 7).sum())
            });
            assert_eq!(sum, Some((0..100_000u64).map(|v| v % 7).sum::<u64>()));
        }
        // Every worker takes a broadcast job only once its loop has ended.
        let seen = within_bound(&pool, || rayon::broadcast(|ctx| ctx.index()).len());
        assert_eq!(seen, Some(3));
    }

    #[test]
    fn a_panicking_step_releases_the_workers() {
        let pool = Arc::new(pool(2));
        let caught = within_bound(&pool, || {
            std::panic::catch_unwind(|| with_workers_awake(|| panic!("in a step"))).is_err()
        });
        assert_eq!(caught, Some(true));
        let seen = within_bound(&pool, || rayon::broadcast(|ctx| ctx.index()).len());
        assert_eq!(seen, Some(2));
    }

    #[test]
    fn a_worker_left_without_work_returns_after_the_idle_limit() {
        let pool = pool(2);
        let never = AtomicBool::new(false);
        let started = Instant::now();
        let ran = pool.install(|| stay_awake(&never, Duration::from_millis(20)));
        assert_eq!(ran, 0);
        assert!(started.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_worker_kept_awake_runs_the_work_handed_out() {
        let pool = pool(2);
        let done = AtomicBool::new(false);
        // The loop runs here; the other closure, and the pieces it hands out (each long
        // enough that the other worker cannot take them all), go to the pool.
        let (ran, n) = pool.install(|| {
            rayon::join(
                || stay_awake(&done, Duration::from_secs(5)),
                || {
                    let n = (0..8)
                        .into_par_iter()
                        .map(|_| std::thread::sleep(Duration::from_millis(2)))
                        .count();
                    done.store(true, Ordering::Release);
                    n
                },
            )
        });
        assert_eq!(n, 8);
        assert!(ran >= 1, "the loop ran none of the pool's jobs");
    }

    #[test]
    fn outside_a_pool_the_step_just_runs() {
        assert_eq!(with_workers_awake(|| 7), 7);
    }
}
