//! The reader ABI's error codes, the mapping of every error kind to one of them, and its
//! thread-local last-error message; the guard, argument and buffer plumbing itself is
//! `hydra-ffi-support`'s, shared with the writer ABI.

use hydra_ffi_support::{Abi, ErrorKind, FfiError};
use hydra_probe::ProbeError;
use std::cell::RefCell;
use std::ffi::CStr;
use std::thread::LocalKey;

/// Success.
pub const HYDRA_PROBE_OK: i32 = 0;
/// A required pointer argument was NULL.
pub const HYDRA_PROBE_E_NULL: i32 = -1;
/// An argument was invalid: a string that is not UTF-8, an engine id that cannot name a
/// segment, thresholds out of range.
pub const HYDRA_PROBE_E_INVALID_ARGUMENT: i32 = -2;
/// The caller's buffer is too small; the needed size was stored where the call says.
pub const HYDRA_PROBE_E_BUFFER_TOO_SMALL: i32 = -3;
/// No such engine (or file) in the directory.
pub const HYDRA_PROBE_E_NOT_FOUND: i32 = -4;
/// The slot index is past the engine's slot count.
pub const HYDRA_PROBE_E_SLOT_OUT_OF_RANGE: i32 = -5;
/// The file is not a valid hydra-progress segment: wrong magic, truncated, inconsistent
/// geometry, not yet initialised, or written with the other byte order.
pub const HYDRA_PROBE_E_NOT_A_SEGMENT: i32 = -6;
/// The segment has a format major version this library does not read.
pub const HYDRA_PROBE_E_UNSUPPORTED_VERSION: i32 = -7;
/// The file was refused for safety: a symbolic link, not a regular file (FIFO, socket,
/// directory, device), owned by an unexpected user, or named for another engine than its
/// header's ENGINE_ID.
pub const HYDRA_PROBE_E_REFUSED: i32 = -8;
/// A system call failed (permission denied, ...), or the file changed size while mapped.
pub const HYDRA_PROBE_E_IO: i32 = -9;
/// A bug in this library (a Rust panic, caught before it reached the caller).
pub const HYDRA_PROBE_E_INTERNAL: i32 = -10;

/// The reader ABI for the shared FFI plumbing (`hydra-ffi-support`).
pub struct ProbeAbi;

thread_local! {
    /// Message of the last failed call on this thread ("" after a successful one).
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Abi for ProbeAbi {
    const LIBRARY: &'static str = "libhydra_probe_ffi";
    const OK: i32 = HYDRA_PROBE_OK;
    const E_NULL: i32 = HYDRA_PROBE_E_NULL;
    const E_BUFFER_TOO_SMALL: i32 = HYDRA_PROBE_E_BUFFER_TOO_SMALL;
    const E_INTERNAL: i32 = HYDRA_PROBE_E_INTERNAL;

    fn code_of(kind: ErrorKind) -> i32 {
        match kind {
            ErrorKind::NotFound => HYDRA_PROBE_E_NOT_FOUND,
            ErrorKind::Io | ErrorKind::SizeChanged => HYDRA_PROBE_E_IO,
            ErrorKind::InvalidArgument => HYDRA_PROBE_E_INVALID_ARGUMENT,
            ErrorKind::Symlink
            | ErrorKind::NotRegularFile
            | ErrorKind::WrongOwner
            | ErrorKind::UnsafeDirectory
            | ErrorKind::EngineIdMismatch => HYDRA_PROBE_E_REFUSED,
            ErrorKind::UnsupportedVersion => HYDRA_PROBE_E_UNSUPPORTED_VERSION,
            ErrorKind::SlotOutOfRange => HYDRA_PROBE_E_SLOT_OUT_OF_RANGE,
            ErrorKind::Truncated
            | ErrorKind::BadMagic
            | ErrorKind::ByteOrder
            | ErrorKind::BadGeometry
            | ErrorKind::NotReady
            | ErrorKind::BadState
            | ErrorKind::Torn
            // Words the format forbids, in a region rather than the header: the same class.
            | ErrorKind::BadRegion => HYDRA_PROBE_E_NOT_A_SEGMENT,
            // Only creating a segment can find its id in use: never a reader's failure.
            ErrorKind::EngineIdInUse => HYDRA_PROBE_E_INTERNAL,
        }
    }

    fn last_error() -> &'static LocalKey<RefCell<String>> {
        &LAST_ERROR
    }
}

/// A probe error on its way to the C caller.
pub(crate) fn probe_error(e: ProbeError) -> FfiError {
    FfiError::new(e.kind(), e.to_string())
}

/// Runs an exported function's body under the shared guard with this ABI's codes.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), FfiError>) -> i32 {
    hydra_ffi_support::guard::<ProbeAbi>(body)
}

/// Static, NUL-terminated name of an error code (for logs).
pub(crate) fn code_name(code: i32) -> &'static CStr {
    match code {
        HYDRA_PROBE_OK => c"HYDRA_PROBE_OK",
        HYDRA_PROBE_E_NULL => c"HYDRA_PROBE_E_NULL",
        HYDRA_PROBE_E_INVALID_ARGUMENT => c"HYDRA_PROBE_E_INVALID_ARGUMENT",
        HYDRA_PROBE_E_BUFFER_TOO_SMALL => c"HYDRA_PROBE_E_BUFFER_TOO_SMALL",
        HYDRA_PROBE_E_NOT_FOUND => c"HYDRA_PROBE_E_NOT_FOUND",
        HYDRA_PROBE_E_SLOT_OUT_OF_RANGE => c"HYDRA_PROBE_E_SLOT_OUT_OF_RANGE",
        HYDRA_PROBE_E_NOT_A_SEGMENT => c"HYDRA_PROBE_E_NOT_A_SEGMENT",
        HYDRA_PROBE_E_UNSUPPORTED_VERSION => c"HYDRA_PROBE_E_UNSUPPORTED_VERSION",
        HYDRA_PROBE_E_REFUSED => c"HYDRA_PROBE_E_REFUSED",
        HYDRA_PROBE_E_IO => c"HYDRA_PROBE_E_IO",
        HYDRA_PROBE_E_INTERNAL => c"HYDRA_PROBE_E_INTERNAL",
        _ => c"HYDRA_PROBE_E_UNKNOWN_CODE",
    }
}
