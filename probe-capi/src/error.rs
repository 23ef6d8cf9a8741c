//! Error codes, the thread-local last-error message, and the guard every exported function
//! runs its body in (argument checks, `catch_unwind`, error-to-code mapping).

use hydra_probe::ProbeError;
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

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
/// directory, device), or owned by an unexpected user.
pub const HYDRA_PROBE_E_REFUSED: i32 = -8;
/// A system call failed (permission denied, ...), or the file changed size while mapped.
pub const HYDRA_PROBE_E_IO: i32 = -9;
/// A bug in this library (a Rust panic, caught before it reached the caller).
pub const HYDRA_PROBE_E_INTERNAL: i32 = -10;

/// A failure on its way to the C caller: a code and the message for `hydra_probe_last_error`.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl FfiError {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn null(arg: &str) -> Self {
        Self::new(HYDRA_PROBE_E_NULL, format!("argument `{arg}` is NULL"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(HYDRA_PROBE_E_INVALID_ARGUMENT, message)
    }
}

/// The code of a layout error.
fn layout_code(e: &hydra_layout::Error) -> i32 {
    use hydra_layout::Error as E;
    match e {
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            HYDRA_PROBE_E_NOT_FOUND
        }
        E::Io { .. } | E::SizeChanged { .. } => HYDRA_PROBE_E_IO,
        E::InvalidEngineId { .. } => HYDRA_PROBE_E_INVALID_ARGUMENT,
        E::SymlinkFile { .. }
        | E::SymlinkDirectory { .. }
        | E::NotRegularFile { .. }
        | E::WrongOwner { .. }
        | E::UnsafeDirectory { .. } => HYDRA_PROBE_E_REFUSED,
        E::UnsupportedMajor { .. } => HYDRA_PROBE_E_UNSUPPORTED_VERSION,
        E::SlotOutOfRange { .. } => HYDRA_PROBE_E_SLOT_OUT_OF_RANGE,
        E::Truncated { .. }
        | E::BadMagic { .. }
        | E::ForeignByteOrder { .. }
        | E::BadByteOrderMark { .. }
        | E::BadGeometry { .. }
        | E::SlotTableOutOfBounds { .. }
        | E::SizeMismatch { .. }
        | E::NotReady { .. }
        | E::BadState { .. }
        | E::Torn { .. }
        | E::Contended { .. } => HYDRA_PROBE_E_NOT_A_SEGMENT,
        // Writer-side errors (and variants added later) never come out of a reader.
        _ => HYDRA_PROBE_E_INTERNAL,
    }
}

impl From<hydra_layout::Error> for FfiError {
    fn from(e: hydra_layout::Error) -> Self {
        Self::new(layout_code(&e), e.to_string())
    }
}

impl From<ProbeError> for FfiError {
    fn from(e: ProbeError) -> Self {
        let code = match &e {
            ProbeError::Layout(inner) => layout_code(inner),
            ProbeError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                HYDRA_PROBE_E_NOT_FOUND
            }
            ProbeError::Io { .. } => HYDRA_PROBE_E_IO,
            ProbeError::NoEngines { .. } | ProbeError::UnknownEngine { .. } => {
                HYDRA_PROBE_E_NOT_FOUND
            }
            ProbeError::AmbiguousEngine { .. } => HYDRA_PROBE_E_INVALID_ARGUMENT,
            ProbeError::SlotOutOfRange { .. } => HYDRA_PROBE_E_SLOT_OUT_OF_RANGE,
            // `ProbeError` is non-exhaustive: a variant added later is a bug until mapped.
            _ => HYDRA_PROBE_E_INTERNAL,
        };
        Self::new(code, e.to_string())
    }
}

thread_local! {
    /// Message of the last failed call on this thread ("" after a successful one).
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(crate) fn set_last_error(message: String) {
    LAST_ERROR.with(|m| *m.borrow_mut() = message);
}

pub(crate) fn last_error() -> String {
    LAST_ERROR.with(|m| m.borrow().clone())
}

/// Runs an exported function's body: clears the last error, catches any panic, and turns
/// the outcome into a return code (storing the message of a failure).
pub(crate) fn guard(body: impl FnOnce() -> Result<(), FfiError>) -> i32 {
    set_last_error(String::new());
    // AssertUnwindSafe: after a panic the only state we touch again is the thread-local
    // message (rewritten below); handles are only read by the bodies.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => HYDRA_PROBE_OK,
        Ok(Err(e)) => {
            set_last_error(e.message);
            e.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            set_last_error(format!(
                "internal error in libhydra_probe_ffi (a bug): {what}"
            ));
            HYDRA_PROBE_E_INTERNAL
        }
    }
}

/// Reads a required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and unchanged for `'a`.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(FfiError::null(name));
    }
    // SAFETY: `p` is not NULL (checked above), and the caller guarantees it points to a
    // NUL-terminated string valid for `'a`.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|_| FfiError::invalid(format!("argument `{name}` is not valid UTF-8")))
}

/// Copies `text` and a NUL into the caller's buffer `buf` of `cap` bytes, storing the
/// needed size (`text.len() + 1`) in `needed` when that is not NULL.
///
/// When the buffer is too small: with `truncate`, the longest prefix that fits (cut at a
/// UTF-8 boundary) is copied, NUL-terminated; without, an empty string is stored (if
/// `cap > 0`). Either way the result is [`HYDRA_PROBE_E_BUFFER_TOO_SMALL`].
///
/// # Safety
/// - `buf` is NULL or valid for writes of `cap` bytes;
/// - `needed` is NULL or valid for a write of one `usize`.
pub(crate) unsafe fn copy_out(
    text: &str,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
    truncate: bool,
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
    } else if truncate && cap > 0 {
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
        Err(FfiError::new(
            HYDRA_PROBE_E_BUFFER_TOO_SMALL,
            format!("buffer of {cap} bytes is too small: {need} needed"),
        ))
    }
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
