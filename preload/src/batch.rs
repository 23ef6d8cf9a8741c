//! Reading a `llama_batch`: how many tokens each sequence has in it and which positions.
//!
//! Only counts and positions are kept; token ids and embeddings are never read (nothing in
//! the segment may carry them). Every pointer may be null where llama.h allows it:
//! `n_seq_id`/`seq_id` null means every token belongs to sequence 0 (as
//! `llama_batch_get_one` leaves them), `pos` null means positions are unknown.

use crate::ffi::LlamaBatch;

/// One sequence's share of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqShare {
    /// Tokens (or embeddings) of the sequence in the batch.
    pub count: u32,
    /// Lowest position given for it; `None` when the batch has no positions.
    pub min_pos: Option<i32>,
    /// Highest position given for it; `None` when the batch has no positions.
    pub max_pos: Option<i32>,
}

impl SeqShare {
    const NONE: Self = Self {
        count: 0,
        min_pos: None,
        max_pos: None,
    };

    fn add(&mut self, pos: Option<i32>) {
        self.count = self.count.saturating_add(1);
        if let Some(p) = pos {
            self.min_pos = Some(self.min_pos.map_or(p, |m| m.min(p)));
            self.max_pos = Some(self.max_pos.map_or(p, |m| m.max(p)));
        }
    }
}

/// Why a batch was not read (the call still goes through, unrecorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OddBatch {
    /// A token claims more sequences than the context has (or a negative count).
    SeqCount {
        /// Index of the token.
        token: usize,
        /// Its `n_seq_id`.
        n_seq_id: i32,
    },
}

impl std::fmt::Display for OddBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SeqCount { token, n_seq_id } => {
                write!(f, "token {token} has n_seq_id = {n_seq_id}")
            }
        }
    }
}

/// Per-sequence shares of the last batch read, reused from call to call (no allocation on
/// the hot path once every sequence has been seen).
#[derive(Debug, Clone, Default)]
pub struct BatchScan {
    shares: Vec<SeqShare>,
    touched: Vec<u32>,
    /// Token-sequence pairs whose sequence id was negative or not below the slot count.
    pub ignored: u64,
}

impl BatchScan {
    /// A scan for a context with `n_seqs` sequences.
    pub fn new(n_seqs: usize) -> Self {
        Self {
            shares: vec![SeqShare::NONE; n_seqs],
            touched: Vec::with_capacity(n_seqs.min(64)),
            ignored: 0,
        }
    }

    /// Forgets the last batch.
    pub fn clear(&mut self) {
        for &s in &self.touched {
            self.shares[s as usize] = SeqShare::NONE;
        }
        self.touched.clear();
        self.ignored = 0;
    }

    /// Counts one token of sequence `seq` at `pos` (ignored when `seq` has no slot).
    pub fn add(&mut self, seq: i32, pos: Option<i32>) {
        match usize::try_from(seq).ok().filter(|&s| s < self.shares.len()) {
            Some(s) => {
                if self.shares[s].count == 0 {
                    self.touched.push(s as u32);
                }
                self.shares[s].add(pos);
            }
            None => self.ignored += 1,
        }
    }

    /// Reads `batch` (after [`clear`](Self::clear)ing the last one).
    ///
    /// # Safety
    /// What `llama_decode` itself requires of `batch`: each non-null array holds
    /// `n_tokens` elements, and `seq_id[i]` (when `seq_id` is not null) points to
    /// `n_seq_id[i]` sequence ids. Only `pos`, `n_seq_id` and `seq_id` are read.
    pub unsafe fn read(&mut self, batch: &LlamaBatch) -> Result<(), OddBatch> {
        self.clear();
        let n = usize::try_from(batch.n_tokens).unwrap_or(0);
        let per_token_seqs = !batch.n_seq_id.is_null() && !batch.seq_id.is_null();
        for i in 0..n {
            let pos = if batch.pos.is_null() {
                None
            } else {
                // SAFETY: `pos` is non-null and holds `n_tokens` elements; i < n_tokens.
                Some(unsafe { *batch.pos.add(i) })
            };
            if !per_token_seqs {
                self.add(0, pos);
                continue;
            }
            // SAFETY: `n_seq_id` is non-null and holds `n_tokens` elements; i < n_tokens.
            let k = unsafe { *batch.n_seq_id.add(i) };
            match usize::try_from(k) {
                Ok(k) if k <= self.shares.len() => {
                    // SAFETY: `seq_id` is non-null and holds `n_tokens` pointers.
                    let ids = unsafe { *batch.seq_id.add(i) };
                    if ids.is_null() {
                        self.ignored += k as u64;
                        continue;
                    }
                    for j in 0..k {
                        // SAFETY: `seq_id[i]` holds `n_seq_id[i]` ids; j < n_seq_id[i].
                        let seq = unsafe { *ids.add(j) };
                        self.add(seq, pos);
                    }
                }
                _ => {
                    self.clear();
                    return Err(OddBatch::SeqCount {
                        token: i,
                        n_seq_id: k,
                    });
                }
            }
        }
        Ok(())
    }

    /// Every sequence the last batch touched, with its share, in order of first appearance.
    pub fn shares(&self) -> impl Iterator<Item = (usize, SeqShare)> + '_ {
        self.touched
            .iter()
            .map(|&s| (s as usize, self.shares[s as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::LlamaSeqId;

    /// Owns the arrays of a test batch.
    struct Owned {
        pos: Vec<i32>,
        n_seq_id: Vec<i32>,
        ids: Vec<Vec<LlamaSeqId>>,
        ptrs: Vec<*mut LlamaSeqId>,
    }

    impl Owned {
        fn new(tokens: &[(i32, &[LlamaSeqId])]) -> Self {
            let mut o = Owned {
                pos: tokens.iter().map(|t| t.0).collect(),
                n_seq_id: tokens.iter().map(|t| t.1.len() as i32).collect(),
                ids: tokens.iter().map(|t| t.1.to_vec()).collect(),
                ptrs: Vec::new(),
            };
            o.ptrs = o.ids.iter_mut().map(|v| v.as_mut_ptr()).collect();
            o
        }

        fn batch(&mut self) -> LlamaBatch {
            LlamaBatch {
                n_tokens: self.pos.len() as i32,
                pos: self.pos.as_mut_ptr(),
                n_seq_id: self.n_seq_id.as_mut_ptr(),
                seq_id: self.ptrs.as_mut_ptr(),
                ..LlamaBatch::empty(0)
            }
        }
    }

    fn read(scan: &mut BatchScan, b: &LlamaBatch) -> Result<Vec<(usize, SeqShare)>, OddBatch> {
        // SAFETY: every batch in these tests is built by `Owned` or has null arrays.
        unsafe { scan.read(b) }?;
        Ok(scan.shares().collect())
    }

    #[test]
    fn counts_tokens_and_positions_per_sequence() {
        let mut o = Owned::new(&[(5, &[1]), (10, &[0]), (11, &[0]), (12, &[0]), (6, &[0, 1])]);
        let mut scan = BatchScan::new(2);
        let got = read(&mut scan, &o.batch()).unwrap();
        assert_eq!(
            got,
            vec![
                (
                    1,
                    SeqShare {
                        count: 2,
                        min_pos: Some(5),
                        max_pos: Some(6)
                    }
                ),
                (
                    0,
                    SeqShare {
                        count: 4,
                        min_pos: Some(6),
                        max_pos: Some(12)
                    }
                ),
            ]
        );
        assert_eq!(scan.ignored, 0);
    }

    #[test]
    fn null_arrays_mean_sequence_zero_without_positions() {
        let mut scan = BatchScan::new(4);
        let got = read(&mut scan, &LlamaBatch::empty(7)).unwrap();
        assert_eq!(
            got,
            vec![(
                0,
                SeqShare {
                    count: 7,
                    min_pos: None,
                    max_pos: None
                }
            )]
        );
    }

    #[test]
    fn out_of_range_and_negative_sequences_are_ignored() {
        let mut o = Owned::new(&[(0, &[2]), (1, &[-1]), (2, &[7, 1]), (3, &[])]);
        let mut scan = BatchScan::new(2);
        let got = read(&mut scan, &o.batch()).unwrap();
        assert_eq!(
            got.iter().map(|g| (g.0, g.1.count)).collect::<Vec<_>>(),
            vec![(1, 1)]
        );
        assert_eq!(scan.ignored, 3);
    }

    #[test]
    fn odd_counts_and_null_rows_do_not_crash() {
        let mut o = Owned::new(&[(0, &[0]), (1, &[0])]);
        o.n_seq_id[1] = 1000;
        let mut scan = BatchScan::new(2);
        assert_eq!(
            read(&mut scan, &o.batch()),
            Err(OddBatch::SeqCount {
                token: 1,
                n_seq_id: 1000
            })
        );
        assert_eq!(
            scan.shares().count(),
            0,
            "a refused batch leaves nothing behind"
        );
        o.n_seq_id[1] = -3;
        assert!(read(&mut scan, &o.batch()).is_err());
        o.n_seq_id[1] = 1;
        o.ptrs[1] = std::ptr::null_mut();
        let got = read(&mut scan, &o.batch()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(scan.ignored, 1);
        for n in [0, -5] {
            assert!(read(&mut scan, &LlamaBatch::empty(n)).unwrap().is_empty());
        }
    }

    #[test]
    fn a_new_batch_forgets_the_last() {
        let mut o = Owned::new(&[(0, &[0]), (1, &[0])]);
        let mut p = Owned::new(&[(9, &[1])]);
        let mut scan = BatchScan::new(2);
        read(&mut scan, &o.batch()).unwrap();
        let got = read(&mut scan, &p.batch()).unwrap();
        assert_eq!(
            got,
            vec![(
                1,
                SeqShare {
                    count: 1,
                    min_pos: Some(9),
                    max_pos: Some(9)
                }
            )]
        );
    }
}
