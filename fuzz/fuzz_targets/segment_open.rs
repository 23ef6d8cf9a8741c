//! Segment open + validation + snapshot + probe classification on arbitrary file contents
//! and lengths, with the file optionally truncated, extended or rewritten after the reader
//! mapped it. Input encoding and checks: `src/lib.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hydra_fuzz::segment_open(data);
});
