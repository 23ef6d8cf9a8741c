//! The fault, load and hostile-input suite of hydra-progress.
//!
//! What an operator must be able to believe — "stalled" means stalled, "dead" means dead,
//! and no reader or bad input ever hurts the engine — is shown here with the real binaries
//! running as separate processes:
//!
//! - [`corpus`]: hostile segment files (truncated, bad lengths, foreign versions and byte
//!   order, symlinks, FIFOs, directories, sockets, other owners) that every reader surface
//!   (probe library and CLI, exporter, C ABI) must refuse with a clear error;
//! - [`bins`]: the `hydra-engine`, `hydra-probe` and `hydra-exporter` binaries, built once
//!   per test process with the same cargo and target directory;
//! - [`process`]: an engine or exporter child process, killed and reaped on drop, with its
//!   resident memory;
//! - [`http`]: a small blocking client for the engine's and exporter's JSON APIs;
//! - [`segments`]: a scratch segment directory with test writers and a listing of what
//!   is on disk, shared by the probe CLI's, the exporter's and the C ABI's tests;
//! - [`require`]: what a test needs from outside the repository (the real model, external
//!   tools) and the one rule when it is missing: fail, unless `HYDRA_ALLOW_SKIP=1`;
//! - [`stats`]: percentiles and medians for the figures the suite prints;
//! - [`workload`]: a fresh prefill and a timed decode, as the engine measured it (shared
//!   with the engine's server benchmark).
//!
//! The tests live in `tests/` (`hostile_corpus`, `crash_loop`, `load`, `api_abuse`); the
//! `hydra-fault-reader` binary is the library-loop reader process of the load test.
//! Everything runs in private temporary directories (never `/dev/shm/hydra-progress`) and
//! binds only to 127.0.0.1; every loop is bounded by a count or a deadline.

pub mod bins;
pub mod browser;
pub mod corpus;
pub mod http;
pub mod process;
pub mod require;
pub mod segments;
pub mod stats;
pub mod workload;

use std::time::{Duration, Instant};

/// A private scratch directory for segments, removed on drop.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("create scratch directory")
}

/// The number in environment variable `name` (a test's size or seed), or `default` when
/// it is unset; panics when it is set but not a number.
pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Polls `f` every 5 ms until it returns `Some`, or panics after `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
