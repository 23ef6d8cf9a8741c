//! What the kernel benches share: their `--threads N` and `--repeat N` arguments, the
//! process set up as the engine binary sets it up, and the timing of one call.

use std::time::Instant;

/// Milliseconds one call of `f` takes.
pub fn ms(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

/// `--threads N` (default 2) and `--repeat N` (default `default_repeat`) from the command
/// line, ignoring any other argument (cargo's `--bench`); then the process set up as the
/// engine binary does it (`hydra_engine_core::memory`) with that many CPU threads. Returns
/// `(threads, repeat)`.
pub fn start(default_repeat: usize) -> candle_core::Result<(usize, usize)> {
    let mut threads = 2;
    let mut repeat = default_repeat;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(2),
            "--repeat" => {
                repeat = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default_repeat)
            }
            _ => {}
        }
    }
    hydra_engine_core::memory::keep_freed_memory();
    hydra_engine_core::threads::set_cpu_threads(threads).map_err(candle_core::Error::wrap)?;
    Ok((threads, repeat))
}
