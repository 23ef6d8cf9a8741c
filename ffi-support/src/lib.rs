//! The plumbing the two C ABIs of hydra-progress share (the reader `hydra-probe-capi` and
//! the writer `hydra-layout-capi`), written once:
//!
//! - [`Abi`]: what tells one ABI from the other: its library name, its return codes, and
//!   its thread-local last-error message. Each ABI maps every [`ErrorKind`] to a code in
//!   one exhaustive `match`, so a new kind fails to compile until both ABIs classify it.
//! - [`FfiError`]: a failure on its way to the C caller (a kind or an argument problem,
//!   plus its one-line message).
//! - [`guard`]: the body of every exported function runs inside it: the last error is
//!   cleared, a panic is caught (never unwinds into C), and the outcome becomes a code.
//! - Argument helpers ([`arg_str`], [`opt_str`], [`out_ptr`], [`handle`]) and the caller
//!   buffer protocol ([`copy_out`]: NUL-terminated, needed size reported, too-small
//!   buffers refused or truncated), with [`copy_last_error`] for `*_last_error`.
//! - With the `header-check` feature (tests only): `header::assert_current`, which fails
//!   when a committed cbindgen header is stale.
//!
//! ```
//! use hydra_ffi_support::{guard, Abi, ErrorKind, FfiError};
//! use std::cell::RefCell;
//! use std::thread::LocalKey;
//!
//! struct Demo;
//! thread_local! { static LAST: RefCell<String> = const { RefCell::new(String::new()) }; }
//! impl Abi for Demo {
//!     const LIBRARY: &'static str = "libdemo";
//!     const OK: i32 = 0;
//!     const E_NULL: i32 = -1;
//!     const E_BUFFER_TOO_SMALL: i32 = -2;
//!     const E_INTERNAL: i32 = -3;
//!     fn code_of(_kind: ErrorKind) -> i32 { -4 }
//!     fn last_error() -> &'static LocalKey<RefCell<String>> { &LAST }
//! }
//! assert_eq!(guard::<Demo>(|| Err(FfiError::null("out"))), -1);
//! assert_eq!(LAST.with(|m| m.borrow().clone()), "argument `out` is NULL");
//! ```

#![deny(missing_docs)]

#[cfg(feature = "header-check")]
pub mod header;

pub use hydra_layout::ErrorKind;

use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::LocalKey;

/// One C ABI: its name, its codes and its last-error store.
pub trait Abi {
    /// The library's file name stem ("libhydra_probe_ffi"), named in panic messages.
    const LIBRARY: &'static str;
    /// Success.
    const OK: i32;
    /// A required pointer argument was NULL.
    const E_NULL: i32;
    /// The caller's buffer is too small.
    const E_BUFFER_TOO_SMALL: i32;
    /// A bug in the library (a caught panic).
    const E_INTERNAL: i32;
    /// The code of a failure of `kind`. Implement it as one `match` without a catch-all.
    fn code_of(kind: ErrorKind) -> i32;
    /// This ABI's thread-local message of the last failed call ("" after a success).
    fn last_error() -> &'static LocalKey<RefCell<String>>;
}

/// What failed, before an [`Abi`] turns it into its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Null,
    BufferTooSmall,
    Kind(ErrorKind),
}

/// A failure on its way to the C caller: what failed and the message for `*_last_error`.
#[derive(Debug)]
pub struct FfiError {
    failure: Failure,
    message: String,
}

impl FfiError {
    /// A failure of `kind` with a one-line message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            failure: Failure::Kind(kind),
            message: message.into(),
        }
    }

    /// A required pointer argument `arg` was NULL.
    pub fn null(arg: &str) -> Self {
        Self {
            failure: Failure::Null,
            message: format!("argument `{arg}` is NULL"),
        }
    }

    /// An invalid argument ([`ErrorKind::InvalidArgument`]).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// A caller buffer that is too small.
    pub fn buffer_too_small(message: impl Into<String>) -> Self {
        Self {
            failure: Failure::BufferTooSmall,
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code `A` returns for this failure.
    pub fn code<A: Abi>(&self) -> i32 {
        match self.failure {
            Failure::Null => A::E_NULL,
            Failure::BufferTooSmall => A::E_BUFFER_TOO_SMALL,
            Failure::Kind(kind) => A::code_of(kind),
        }
    }
}

impl From<hydra_layout::Error> for FfiError {
    fn from(e: hydra_layout::Error) -> Self {
        Self::new(e.kind(), e.to_string())
    }
}

fn set_last_error<A: Abi>(message: String) {
    A::last_error().with(|m| *m.borrow_mut() = message);
}

/// Runs an exported function's body: clears `A`'s last error, catches any panic, and turns
/// the outcome into a return code (storing the message of a failure).
///
/// The body is treated as unwind-safe: after a panic the only shared state touched again is
/// the thread-local message (rewritten here) and the handles' mutexes, which every ABI
/// recovers with `into_inner` (the data behind them is valid in every state).
pub fn guard<A: Abi>(body: impl FnOnce() -> Result<(), FfiError>) -> i32 {
    set_last_error::<A>(String::new());
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => A::OK,
        Ok(Err(e)) => {
            let code = e.code::<A>();
            set_last_error::<A>(e.message);
            code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            set_last_error::<A>(format!("internal error in {} (a bug): {what}", A::LIBRARY));
            A::E_INTERNAL
        }
    }
}

/// The body of `*_last_error`: copies `A`'s message of this thread's last failed call into
/// the caller's buffer, truncated to fit (then [`Abi::E_BUFFER_TOO_SMALL`]), and stores the
/// full size needed in `needed` (may be NULL). The stored message is left as it is.
///
/// # Safety
/// `buf` is NULL (only with `cap == 0`) or writable for `cap` bytes; `needed` is NULL or
/// writable for one `usize`.
pub unsafe fn copy_last_error<A: Abi>(buf: *mut c_char, cap: usize, needed: *mut usize) -> i32 {
    let message = A::last_error().with(|m| m.borrow().clone());
    // SAFETY: the caller's guarantees on `buf`, `cap` and `needed` are copy_out's.
    match catch_unwind(|| unsafe { copy_out(&message, buf, cap, needed, Overflow::Truncate) }) {
        Ok(Ok(())) => A::OK,
        Ok(Err(e)) => e.code::<A>(),
        Err(_) => A::E_INTERNAL,
    }
}

/// Reads a required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and unchanged for `'a`.
pub unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, FfiError> {
    // SAFETY: the caller's guarantee on `p` is opt_str's.
    unsafe { opt_str(p, name) }?.ok_or_else(|| FfiError::null(name))
}

/// Reads an optional NUL-terminated UTF-8 string argument; `None` when `p` is NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and unchanged for `'a`.
pub unsafe fn opt_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, FfiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: `p` is not NULL (checked above), and the caller guarantees it points to a
    // NUL-terminated string valid for `'a`.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| FfiError::invalid(format!("argument `{name}` is not valid UTF-8")))
}

/// Checks a required out-pointer argument.
pub fn out_ptr<T>(p: *mut T, name: &str) -> Result<*mut T, FfiError> {
    if p.is_null() {
        Err(FfiError::null(name))
    } else {
        Ok(p)
    }
}

/// Checks a handle argument named `name`.
///
/// # Safety
/// `h` is NULL or points to a live `T` (a leaked box, say) that is only accessed through
/// shared references for `'a`.
pub unsafe fn handle<'a, T>(h: *const T, name: &str) -> Result<&'a T, FfiError> {
    // SAFETY: the caller guarantees `h` is NULL or valid for shared access during `'a`.
    unsafe { h.as_ref() }.ok_or_else(|| FfiError::null(name))
}

/// What [`copy_out`] does with a buffer too small for the whole text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Copy the longest prefix that fits, cut at a UTF-8 boundary (for messages, paths).
    Truncate,
    /// Store an empty string (for JSON, where a prefix would be a corrupt document).
    Empty,
}

/// Copies `text` and a NUL into the caller's buffer `buf` of `cap` bytes, storing the
/// needed size (`text.len() + 1`) in `needed` when that is not NULL.
///
/// A buffer too small gets what `overflow` says (when `cap > 0`) and the result is a
/// buffer-too-small failure; a NULL `buf` with `cap > 0` is a NULL-argument failure.
///
/// # Safety
/// - `buf` is NULL or valid for writes of `cap` bytes;
/// - `needed` is NULL or valid for a write of one `usize`.
pub unsafe fn copy_out(
    text: &str,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
    overflow: Overflow,
) -> Result<(), FfiError> {
    if buf.is_null() && cap > 0 {
        return Err(FfiError::null("buf"));
    }
    let need = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: `needed` is not NULL and the caller guarantees it is valid for a write.
        unsafe { needed.write(need) };
    }
    let fits = need <= cap;
    let copy = if fits {
        text.len()
    } else if overflow == Overflow::Truncate && cap > 0 {
        let mut end = cap - 1;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        end
    } else {
        0
    };
    if cap > 0 {
        // `buf` is not NULL (cap > 0; the NULL case returned above); `text` is Rust-owned.
        // SAFETY: `buf` is valid for `cap` bytes (caller) and `copy + 1 <= cap` (every branch).
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), copy);
            buf.add(copy).write(0);
        }
    }
    if fits {
        Ok(())
    } else {
        Err(FfiError::buffer_too_small(format!(
            "buffer of {cap} bytes is too small: {need} needed"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct T;
    thread_local! {
        static LAST: RefCell<String> = const { RefCell::new(String::new()) };
    }
    impl Abi for T {
        const LIBRARY: &'static str = "libtest";
        const OK: i32 = 0;
        const E_NULL: i32 = -1;
        const E_BUFFER_TOO_SMALL: i32 = -2;
        const E_INTERNAL: i32 = -3;
        fn code_of(kind: ErrorKind) -> i32 {
            if kind == ErrorKind::InvalidArgument {
                -4
            } else {
                -5
            }
        }
        fn last_error() -> &'static LocalKey<RefCell<String>> {
            &LAST
        }
    }

    fn last() -> String {
        LAST.with(|m| m.borrow().clone())
    }

    #[test]
    fn guard_maps_outcomes_and_catches_panics() {
        assert_eq!(guard::<T>(|| Err(FfiError::invalid("bad"))), -4);
        assert_eq!(last(), "bad");
        assert_eq!(guard::<T>(|| Ok(())), 0);
        assert_eq!(last(), "");
        assert_eq!(guard::<T>(|| panic!("boom")), -3);
        assert_eq!(last(), "internal error in libtest (a bug): boom");
        let layout = hydra_layout::naming::validate_engine_id("").unwrap_err();
        assert_eq!(guard::<T>(|| Err(layout.into())), -4);
    }

    #[test]
    fn copy_out_truncates_or_empties() {
        let mut buf = [0x55 as c_char; 4];
        let mut needed = 0;
        // SAFETY: `buf` is writable for 4 bytes and `needed` for one usize.
        let r = unsafe {
            copy_out(
                "héllo",
                buf.as_mut_ptr(),
                4,
                &mut needed,
                Overflow::Truncate,
            )
        };
        assert_eq!(r.unwrap_err().code::<T>(), -2);
        assert_eq!(needed, 7);
        // "h" + the 2-byte "é" fit in 3 bytes; the NUL follows.
        // SAFETY: copy_out NUL-terminated `buf`.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str(), Ok("hé"));
        // SAFETY: as above.
        let r = unsafe { copy_out("hello", buf.as_mut_ptr(), 4, &mut needed, Overflow::Empty) };
        assert!(r.is_err());
        assert_eq!(buf[0], 0);
        // SAFETY: a NULL buffer with cap 0 asks for the size only.
        let r = unsafe { copy_out("ab", std::ptr::null_mut(), 0, &mut needed, Overflow::Empty) };
        assert!(r.is_err() && needed == 3);
        // SAFETY: a NULL buffer with cap > 0 is refused before any write.
        let r = unsafe { copy_out("ab", std::ptr::null_mut(), 8, &mut needed, Overflow::Empty) };
        assert_eq!(r.unwrap_err().code::<T>(), -1);
        // SAFETY: `buf` is writable for 4 bytes.
        let r = unsafe {
            copy_out(
                "ab",
                buf.as_mut_ptr(),
                4,
                std::ptr::null_mut(),
                Overflow::Empty,
            )
        };
        assert!(r.is_ok());
        // SAFETY: copy_out NUL-terminated `buf`.
        assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str(), Ok("ab"));
    }

    #[test]
    fn last_error_copy_leaves_the_message() {
        guard::<T>(|| Err(FfiError::invalid("a long message")));
        let mut buf = [0 as c_char; 4];
        let mut needed = 0;
        // SAFETY: `buf` is writable for 4 bytes and `needed` for one usize.
        let rc = unsafe { copy_last_error::<T>(buf.as_mut_ptr(), 4, &mut needed) };
        assert_eq!((rc, needed), (-2, 15));
        assert_eq!(last(), "a long message");
    }
}
