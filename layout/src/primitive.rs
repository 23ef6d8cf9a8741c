//! The atomic primitives the seqlock protocol is written against.
//!
//! Normal builds use `core::sync::atomic`; `--cfg loom` builds swap in loom's
//! model-checked versions so `seqlock`'s protocol can be explored exhaustively
//! on heap atomics (loom cannot overlay a mapped file, so the mapped word source
//! always uses core atomics; see [`crate::words`]). The writers' per-slot guard is a
//! `Mutex` from the same place, so the model checks the two-writer protocol too.

#[cfg(not(loom))]
#[allow(unused_imports)] // AtomicU64 is only used by the loom model's heap source.
pub(crate) use core::sync::atomic::{fence, AtomicU64};
#[cfg(loom)]
#[allow(unused_imports)] // AtomicU64 is only used by the loom model's heap source.
pub(crate) use loom::sync::atomic::{fence, AtomicU64};

pub(crate) use core::sync::atomic::Ordering;
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
