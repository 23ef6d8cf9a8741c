//! One line on stderr per kind of trouble, never more: a host that calls `llama_decode`
//! thousands of times a second must not have its log flooded by the preload.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Writes `hydra-preload: <message>` to stderr the first time `flag` is passed (each
/// call site owns one flag). Write errors are ignored: logging must never hurt the host.
pub fn once(flag: &AtomicBool, message: std::fmt::Arguments<'_>) {
    // Relaxed: the flag guards nothing but itself; a duplicate line in a race is harmless.
    if !flag.swap(true, Ordering::Relaxed) {
        let _ = writeln!(std::io::stderr(), "hydra-preload: {message}");
    }
}

/// [`once`] with a per-call-site flag: `warn_once!("no directory {}", d)`.
macro_rules! warn_once {
    ($($arg:tt)*) => {{
        static FLAG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        $crate::log::once(&FLAG, format_args!($($arg)*));
    }};
}
pub(crate) use warn_once;
