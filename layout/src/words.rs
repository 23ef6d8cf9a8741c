//! Word-granular atomic access to a mapped segment through raw pointers.
//!
//! Memory that another process writes is never touched through `&[u8]` or `&T`: every
//! access is one aligned 8-byte atomic on a raw pointer, created for the duration of that
//! access only. Readers map the file read-only, and the Rust memory model only allows
//! *Relaxed* atomic loads of register size on read-only memory, so [`MappedWords::load`]
//! is always Relaxed; callers that need Acquire follow it with `fence(Acquire)` (which is
//! at least as strong as an Acquire load).

use crate::primitive::Ordering;
use core::sync::atomic::AtomicU64;

/// A window of 8-byte words over a mapping, addressed by byte offset.
///
/// Invariants (upheld by the constructors' callers, see [`MappedWords::new`]):
/// `base` is 8-aligned and valid for reads (and writes when `writable`) of `len` bytes for
/// as long as this value lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedWords {
    base: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: `MappedWords` is only a pointer and a length into a shared mapping; all accesses
// through it are atomic, so using it from several threads cannot cause a data race.
unsafe impl Send for MappedWords {}
// SAFETY: as above: every access is an atomic operation on an aligned word.
unsafe impl Sync for MappedWords {}

impl MappedWords {
    /// Wraps a mapping.
    ///
    /// # Safety
    /// - `base` is 8-byte aligned (a mapping's base is page-aligned);
    /// - `base..base+len` stays mapped, readable (and writable if `writable`) for the whole
    ///   life of the returned value and every copy of it;
    /// - the file behind it is not truncated below `len` while mapped (a truncation would
    ///   raise SIGBUS on access; see the crate docs for the policy that guards this).
    pub(crate) unsafe fn new(base: *mut u8, len: usize, writable: bool) -> Self {
        debug_assert!(base as usize % 8 == 0);
        Self {
            base,
            len,
            writable,
        }
    }

    /// Inlined: every word access of the writer's per-step path goes through it (some 150
    /// a decoded token); called out of line it was a quarter of the engine's publishing
    /// instructions (callgrind, `scripts/bench-format-cost.sh`).
    #[inline]
    fn word_ptr(&self, offset: usize) -> *mut u64 {
        assert!(
            offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "word offset {offset} outside a {}-byte mapping (a validated offset was not used)",
            self.len
        );
        // `offset + 8 <= len` was checked above, so the result stays inside the mapping.
        self.base.wrapping_add(offset).cast::<u64>()
    }

    /// Relaxed atomic load of the word at byte `offset` (must be 8-aligned and in bounds;
    /// checked, panics otherwise: offsets come from constants or validated geometry).
    #[inline]
    pub(crate) fn load(&self, offset: usize) -> u64 {
        let ptr = self.word_ptr(offset);
        // All concurrent accesses by any process are atomic word accesses of this size, and a
        // Relaxed register-sized load is allowed on read-only memory.
        // SAFETY: `ptr` is in bounds and 8-aligned (`word_ptr`) and readable (constructor).
        unsafe { AtomicU64::from_ptr(ptr) }.load(Ordering::Relaxed)
    }

    /// Atomic store of the word at byte `offset`. Only for writable mappings.
    #[inline]
    pub(crate) fn store(&self, offset: usize, value: u64, order: Ordering) {
        assert!(self.writable, "store through a read-only mapping");
        let ptr = self.word_ptr(offset);
        // All concurrent accesses are atomic word accesses of this size.
        // SAFETY: `ptr` is in bounds and 8-aligned (`word_ptr`); the mapping is writable (above).
        unsafe { AtomicU64::from_ptr(ptr) }.store(value, order);
    }

    /// Atomic add on the word at byte `offset`, returning the previous value.
    #[inline]
    pub(crate) fn fetch_add(&self, offset: usize, delta: u64, order: Ordering) -> u64 {
        assert!(self.writable, "fetch_add through a read-only mapping");
        let ptr = self.word_ptr(offset);
        // SAFETY: as for `store`.
        unsafe { AtomicU64::from_ptr(ptr) }.fetch_add(delta, order)
    }

    /// Atomic saturating subtract on the word at byte `offset` (never wraps below zero).
    #[inline]
    pub(crate) fn saturating_sub(&self, offset: usize, delta: u64, order: Ordering) -> u64 {
        assert!(self.writable, "saturating_sub through a read-only mapping");
        let ptr = self.word_ptr(offset);
        // SAFETY: as for `store`.
        let atomic = unsafe { AtomicU64::from_ptr(ptr) };
        atomic
            .fetch_update(order, Ordering::Relaxed, |v| Some(v.saturating_sub(delta)))
            .unwrap_or_else(|v| v)
    }

    /// Reads `len` bytes at `offset` word by word (Relaxed) and returns them.
    pub(crate) fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        debug_assert!(len % 8 == 0);
        let mut out = Vec::with_capacity(len);
        for word in (offset..offset + len).step_by(8) {
            out.extend_from_slice(&self.load(word).to_ne_bytes());
        }
        out
    }

    /// Writes `bytes` (NUL-padded to `field_len`, truncated at a char boundary to leave at
    /// least one NUL) into the string field at `offset`. Relaxed stores: strings are written
    /// before READY, whose Release store publishes them.
    pub(crate) fn write_str(&self, offset: usize, field_len: usize, text: &str) {
        let bytes = truncate_utf8(text, field_len - 1);
        let mut field = vec![0u8; field_len];
        field[..bytes.len()].copy_from_slice(bytes);
        for (i, chunk) in field.chunks_exact(8).enumerate() {
            let word = u64::from_ne_bytes(chunk.try_into().expect("chunks_exact(8)"));
            self.store(offset + i * 8, word, Ordering::Relaxed);
        }
    }

    /// Reads a NUL-padded string field. Invalid UTF-8 is replaced, never rejected.
    pub(crate) fn read_str(&self, offset: usize, field_len: usize) -> String {
        let bytes = self.read_bytes(offset, field_len);
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
pub(crate) fn truncate_utf8(text: &str, max: usize) -> &[u8] {
    if text.len() <= max {
        return text.as_bytes();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text.as_bytes()[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_utf8("abc", 8), b"abc");
        assert_eq!(truncate_utf8("abcdef", 3), b"abc");
        // 'é' is two bytes: cutting inside it backs off to the boundary.
        assert_eq!(truncate_utf8("aé", 2), b"a");
    }

    #[test]
    fn strings_round_trip_through_words() {
        let mut buf = vec![0u64; 16];
        // SAFETY: `buf` is 8-aligned, writable, 128 bytes, and outlives `words`.
        let words = unsafe { MappedWords::new(buf.as_mut_ptr().cast(), 128, true) };
        words.write_str(0, 64, "SmolLM2-135M ✓");
        assert_eq!(words.read_str(0, 64), "SmolLM2-135M ✓");
        let long = "x".repeat(100);
        words.write_str(64, 64, &long);
        assert_eq!(words.read_str(64, 64), "x".repeat(63));
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_offsets_are_caught() {
        let mut buf = vec![0u64; 2];
        // SAFETY: `buf` is 8-aligned, 16 bytes, and outlives `words`.
        let words = unsafe { MappedWords::new(buf.as_mut_ptr().cast(), 16, false) };
        words.load(16);
    }
}
