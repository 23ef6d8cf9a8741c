//! What the machine's memory gives one and two threads: the bandwidth probe that
//! `scripts/bench-vs-llamacpp.sh` runs in every round beside its decode figures, so that a
//! decode rate reads as a fraction of what memory allows (weight bytes per token x tokens/s
//! / bandwidth).
//!
//! Each thread sums its own contiguous part of one buffer, far larger than the caches
//! (512 MiB by default), in 64-bit words with eight independent accumulators (the
//! compiler vectorises them), every part at once; a pass's bandwidth is the buffer's bytes
//! over the slowest thread's time. The buffer is written before it is read, so that its
//! pages are real memory and not the kernel's shared zero page.
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench bandwidth -- [--mib 512] [--passes 5] [--threads 1,2]
//! ```
//!
//! One JSON object per thread count on stdout: `{"threads":2,"mib":512,"passes":5,
//! "gb_per_s":[...],"median_gb_per_s":..,"max_gb_per_s":..}` (GB = 10^9 bytes).

use clap::Parser;
use std::hint::black_box;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Memory read bandwidth of 1 and 2 threads over a buffer larger than the caches")]
struct Args {
    /// Buffer size in MiB (at least 64, so that no cache holds it).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(64..=65536))]
    mib: u64,
    /// Timed passes per thread count (after one untimed pass).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    passes: u32,
    /// Thread counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Sums `words` with the widest vector loads the CPU has (AVX-512, AVX2, else the
/// baseline's SSE2), as the engine's own kernels read their weights: on this project's
/// 2-core Intel Xeon guest AVX2 read 13 % more than SSE2 with one thread.
fn sum_words(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { sum_words_avx512(words) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { sum_words_avx2(words) };
        }
    }
    sum_words_portable(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_words_avx512(words: &[u64]) -> u64 {
    sum_words_portable(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_words_avx2(words: &[u64]) -> u64 {
    sum_words_portable(words)
}

/// Sums `words` with eight independent accumulators: a loop the compiler turns into vector
/// loads and adds of the width it is compiled for (inlined into the callers above), bound
/// by memory rather than by one dependency chain.
#[inline(always)]
fn sum_words_portable(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let tail: u64 = chunks.remainder().iter().fold(0, |a, w| a.wrapping_add(*w));
    for c in chunks {
        for (a, w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*w);
        }
    }
    acc.iter().fold(tail, |a, w| a.wrapping_add(*w))
}

/// One pass of `threads` threads over `buffer`, each over its own part at once: GB/s.
fn pass(buffer: &[u64], threads: usize) -> f64 {
    let part = buffer.len().div_ceil(threads);
    let slowest = std::thread::scope(|s| {
        let handles: Vec<_> = buffer
            .chunks(part)
            .map(|chunk| {
                s.spawn(move || {
                    let t0 = Instant::now();
                    black_box(sum_words(black_box(chunk)));
                    t0.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a probe thread panicked"))
            .max()
            .unwrap_or_default()
    });
    (buffer.len() * 8) as f64 / slowest.as_secs_f64().max(1e-9) / 1e9
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.threads.iter().all(|&t| (1..=256).contains(&t)),
        "--threads takes counts from 1 to 256, got {:?}",
        args.threads
    );
    let words = usize::try_from(args.mib * (1 << 20) / 8)?;
    // Written, not zeroed: every page is a real one.
    let buffer: Vec<u64> = (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    for &threads in &args.threads {
        pass(&buffer, threads);
        let rates: Vec<f64> = (0..args.passes).map(|_| pass(&buffer, threads)).collect();
        let max = rates.iter().copied().fold(0.0, f64::max);
        let round = |r: f64| (r * 100.0).round() / 100.0;
        let line = serde_json::json!({
            "threads": threads,
            "mib": args.mib,
            "passes": args.passes,
            "gb_per_s": rates.iter().map(|&r| round(r)).collect::<Vec<_>>(),
            "median_gb_per_s": round(median(&rates)),
            "max_gb_per_s": round(max),
        });
        println!("{line}");
    }
    Ok(())
}
