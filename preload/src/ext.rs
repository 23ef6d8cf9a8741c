//! The content of `llama_batch_ext` batches, which llama.h keeps opaque (no getters): the
//! wrapped builder calls (`_add`, `_add_token`, `_add_embd`, `_add_seq`, `_set_pos`,
//! `_clear`, `_free`) record, per batch, each entry's sequences and first position, so
//! that `llama_process` can count them like a `llama_batch`.
//!
//! The record is per thread (no lock on the per-token builder calls): a batch filled on one
//! thread and processed on another is not found, and that call is passed through unrecorded.

use crate::batch::BatchScan;
use crate::ffi::LlamaBatchExt;
use std::cell::RefCell;

/// What the builder calls put in one batch.
#[derive(Debug, Default)]
struct Shadow {
    /// First sequence of each entry.
    seq: Vec<i32>,
    /// First position of each entry, once set.
    pos: Vec<Option<i32>>,
    /// Further sequences of an entry: (entry index, sequence).
    extra: Vec<(usize, i32)>,
}

thread_local! {
    static SHADOWS: RefCell<Vec<(usize, Shadow)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the record of `batch` on this thread (created empty if `create`).
fn with<R>(batch: *mut LlamaBatchExt, create: bool, f: impl FnOnce(&mut Shadow) -> R) -> Option<R> {
    let key = batch as usize;
    SHADOWS
        .try_with(|cell| {
            let mut shadows = cell.try_borrow_mut().ok()?;
            let i = match shadows.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None if create => {
                    shadows.push((key, Shadow::default()));
                    shadows.len() - 1
                }
                None => return None,
            };
            Some(f(&mut shadows[i].1))
        })
        .ok()
        .flatten()
}

/// `llama_batch_ext_clear(batch)` returned: the batch is empty.
pub fn cleared(batch: *mut LlamaBatchExt) {
    with(batch, true, |s| {
        s.seq.clear();
        s.pos.clear();
        s.extra.clear();
    });
}

/// `llama_batch_ext_free(batch)` is about to run: forget it.
pub fn freed(batch: *mut LlamaBatchExt) {
    let key = batch as usize;
    let _ = SHADOWS.try_with(|cell| {
        if let Ok(mut shadows) = cell.try_borrow_mut() {
            shadows.retain(|(k, _)| *k != key);
        }
    });
}

/// An entry of sequence `seq` was added at index `idx` (the add call's non-negative result).
pub fn added(batch: *mut LlamaBatchExt, idx: i32, seq: i32) {
    let Ok(idx) = usize::try_from(idx) else {
        return;
    };
    with(batch, true, |s| {
        let len = s.seq.len();
        if idx == len {
            // The common case: builder calls append in order.
            s.seq.push(seq);
            s.pos.push(None);
            return;
        }
        if idx > len {
            if idx - len > MAX_GAP {
                return;
            }
            s.seq.resize(idx + 1, -1);
            s.pos.resize(idx + 1, None);
        }
        s.seq[idx] = seq;
        s.pos[idx] = None;
    });
}

/// The most entries an add may skip ahead of the last one (llama.cpp returns the next
/// index; a wild index is not recorded rather than allocated for).
const MAX_GAP: usize = 1 << 16;

/// Entry `idx` was added to sequence `seq` too.
pub fn seq_added(batch: *mut LlamaBatchExt, idx: i32, seq: i32) {
    if let Ok(idx) = usize::try_from(idx) {
        with(batch, true, |s| s.extra.push((idx, seq)));
    }
}

/// Entry `idx` got position `pos` (the first of its positions).
pub fn pos_set(batch: *mut LlamaBatchExt, idx: i32, pos: i32) {
    if let Ok(idx) = usize::try_from(idx) {
        with(batch, false, |s| {
            if let Some(p) = s.pos.get_mut(idx) {
                *p = Some(pos);
            }
        });
    }
}

/// Counts the recorded content of `batch` into `scan`, by runs of entries of one sequence
/// (as [`BatchScan::read`] does); false when this thread has no record of it.
pub fn fill(batch: *mut LlamaBatchExt, scan: &mut BatchScan) -> bool {
    with(batch, false, |s| {
        let n = s.seq.len();
        let mut i = 0;
        while i < n {
            let (seq, start) = (s.seq[i], i);
            let mut span: Option<(i32, i32)> = None;
            while i < n && s.seq[i] == seq {
                if let Some(p) = s.pos[i] {
                    span = Some(span.map_or((p, p), |(lo, hi)| (lo.min(p), hi.max(p))));
                }
                i += 1;
            }
            scan.add_run(seq, i - start, span);
        }
        for &(idx, seq) in &s.extra {
            scan.add(seq, s.pos.get(idx).copied().flatten());
        }
    })
    .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_calls_describe_the_batch() {
        let b = 0x1000 as *mut LlamaBatchExt;
        let mut scan = BatchScan::new(3);
        assert!(!fill(b, &mut scan), "unknown batch");
        for (i, seq) in [(0, 2), (1, 2), (2, 0)] {
            added(b, i, seq);
            pos_set(b, i, 10 + i);
        }
        seq_added(b, 2, 1);
        added(b, -1, 1); // a failed add records nothing
        assert!(fill(b, &mut scan));
        let got: Vec<_> = scan
            .shares()
            .map(|(s, x)| (s, x.count, x.min_pos, x.max_pos))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, 2, Some(10), Some(11)),
                (0, 1, Some(12), Some(12)),
                (1, 1, Some(12), Some(12))
            ]
        );
        cleared(b);
        scan.clear();
        assert!(fill(b, &mut scan));
        assert_eq!(scan.shares().count(), 0);
        freed(b);
        assert!(!fill(b, &mut scan));
    }

    #[test]
    fn runs_skip_unset_positions_and_break_on_another_sequence() {
        let b = 0x2000 as *mut LlamaBatchExt;
        for (i, seq) in [(0, 1), (1, 1), (2, 0), (3, 1), (4, 9)] {
            added(b, i, seq);
        }
        pos_set(b, 1, 40);
        pos_set(b, 3, 7);
        let mut scan = BatchScan::new(2);
        assert!(fill(b, &mut scan));
        let got: Vec<_> = scan
            .shares()
            .map(|(s, x)| (s, x.count, x.min_pos, x.max_pos))
            .collect();
        assert_eq!(got, vec![(1, 3, Some(7), Some(40)), (0, 1, None, None)]);
        assert_eq!(scan.ignored, 1, "sequence 9 has no slot");
        freed(b);
    }

    #[test]
    fn out_of_order_and_wild_indices() {
        let b = 0x3000 as *mut LlamaBatchExt;
        added(b, 2, 1);
        added(b, 0, 1);
        added(b, i32::MAX, 0); // never allocated for
        let mut scan = BatchScan::new(2);
        assert!(fill(b, &mut scan));
        let got: Vec<_> = scan.shares().map(|(s, x)| (s, x.count)).collect();
        // Entry 1 was never added: it reads as sequence -1 (no slot).
        assert_eq!((got, scan.ignored), (vec![(1, 2)], 1));
        freed(b);
    }
}
