//! Test-only hooks (cargo feature `test-hooks`; never in the release library): a log of
//! what the layer hook did, and a fault that stops the compute inside a layer.
//!
//! - `HYDRA_PRELOAD_TEST_LOG=<file>`: one line per graph computed inside a tracked call,
//!   `<plan> <call tokens>` (`Pass`, `Count` or `Arm`, see [`crate::layers::Plan`]).
//! - `HYDRA_PRELOAD_TEST_STALL_AT_LAYER=<k>`: the compute thread stops right after layer
//!   `k` finished (and was published), for `HYDRA_PRELOAD_TEST_STALL_S` seconds (default
//!   600), as a compute stuck inside layer `k + 1` would.
//! - In the same log, one line per sample of an RPC peer's socket (`peer ...`, see
//!   [`peer_sampled`]), so that a test that sees a peer verdict can show what the samples
//!   said around it.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn log(line: std::fmt::Arguments<'_>) {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var("HYDRA_PRELOAD_TEST_LOG").ok()) else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// A graph computed inside a tracked call of `n_tokens` tokens was given `plan` (logged by
/// its `Debug` name, so that this module needs nothing from the hooks it serves).
pub fn planned(n_tokens: u32, plan: impl std::fmt::Debug) {
    log(format_args!("{plan:?} {n_tokens}"));
}

/// Layer `done` (1-based) finished and was published.
pub fn layer_finished(done: u64) {
    static STALL: OnceLock<Option<u64>> = OnceLock::new();
    if *STALL.get_or_init(|| env_u64("HYDRA_PRELOAD_TEST_STALL_AT_LAYER")) != Some(done) {
        return;
    }
    let secs = env_u64("HYDRA_PRELOAD_TEST_STALL_S").unwrap_or(600);
    log(format_args!("stalled {done}"));
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// RPC device `device`'s socket was sampled at `now_ns` (`CLOCK_MONOTONIC`): `sample` (its
/// `Debug` form: `Some(Sample { .. })`, or `None` when the socket was not found) gave
/// `unread_since` (0: keeps up). Logged as `peer <device> <now_ns> <unread_since> <sample>`.
pub fn peer_sampled(device: u64, now_ns: u64, unread_since: u64, sample: &dyn std::fmt::Debug) {
    log(format_args!(
        "peer {device} {now_ns} {unread_since} {sample:?}"
    ));
}
