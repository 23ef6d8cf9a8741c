//! Opening and closing engines through the reader C ABI, for the Rust-side tests of it.

#![allow(dead_code)]

use hydra_probe_ffi::*;
use std::ffi::CString;
use std::ptr;

/// Opens engine `id` of `dir` through the C ABI (asserting it opens).
pub fn open(dir: &std::path::Path, id: &str) -> *mut HydraProbe {
    let dir = CString::new(dir.to_str().unwrap()).unwrap();
    let id = CString::new(id).unwrap();
    let mut h: *mut HydraProbe = ptr::null_mut();
    // SAFETY: the strings are NUL-terminated and `h` is writable.
    let rc = unsafe { hydra_probe_open(dir.as_ptr(), id.as_ptr(), &mut h) };
    assert_eq!(rc, HYDRA_PROBE_OK);
    h
}

/// Closes `h` (asserting it closes).
pub fn close(h: *mut HydraProbe) {
    // SAFETY: `h` is an open handle, closed once.
    assert_eq!(unsafe { hydra_probe_close(h) }, HYDRA_PROBE_OK);
}
