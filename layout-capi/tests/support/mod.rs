//! Writer C ABI calls shared by the tests (`tests/abi.rs`) and the benchmark
//! (`benches/writer_abi.rs`).

use hydra_writer::*;
use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::ptr;

/// Creates the segment `<dir>/<engine_id>.hps` with `slots` slots, described by `d`, and
/// returns its writer (asserting that the call succeeds).
///
/// # Safety
/// Each string of `d` is NULL or NUL-terminated.
pub unsafe fn create(
    dir: &Path,
    engine_id: &CStr,
    slots: u32,
    d: &HydraWriterDescription,
) -> *mut HydraWriter {
    let dir = CString::new(dir.to_str().unwrap()).unwrap();
    let mut w: *mut HydraWriter = ptr::null_mut();
    // SAFETY: `dir` and `engine_id` are NUL-terminated, `w` is writable, and the caller
    // guarantees the strings of `d`.
    let rc = unsafe { hydra_writer_create(dir.as_ptr(), engine_id.as_ptr(), slots, d, &mut w) };
    assert_eq!(rc, HYDRA_WRITER_OK);
    w
}

/// The segment file's path, as `hydra_writer_path` gives it.
///
/// # Safety
/// `w` is an open handle.
pub unsafe fn path(w: *const HydraWriter) -> String {
    let mut buf = [0 as c_char; 4096];
    // SAFETY: the caller guarantees `w`; `buf` is writable for its length; `needed` may
    // be NULL.
    let rc = unsafe { hydra_writer_path(w, buf.as_mut_ptr(), buf.len(), ptr::null_mut()) };
    assert_eq!(rc, HYDRA_WRITER_OK);
    // SAFETY: the call NUL-terminated the buffer.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// Begins task 1 on slot 0 in prefill with `tokens` tokens to do, and starts a step
/// carrying all of them (asserting that both calls succeed).
///
/// # Safety
/// `w` is an open handle.
pub unsafe fn start_prefill_step(w: *mut HydraWriter, tokens: u64) {
    // SAFETY: the caller guarantees `w`.
    unsafe {
        assert_eq!(
            hydra_writer_begin_task(
                w,
                0,
                1,
                HYDRA_WRITER_PHASE_PREFILL,
                HYDRA_WRITER_UNIT_TOKENS,
                tokens
            ),
            HYDRA_WRITER_OK
        );
        assert_eq!(hydra_writer_step_start(w, 0, tokens), HYDRA_WRITER_OK);
    }
}
