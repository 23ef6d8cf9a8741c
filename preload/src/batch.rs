//! Reading a `llama_batch`: how many tokens each sequence has in it and which positions.
//!
//! Only counts and positions are kept; token ids and embeddings are never read (nothing in
//! the segment may carry them). Every pointer may be null where llama.h allows it:
//! `n_seq_id`/`seq_id` null means every token belongs to sequence 0 (as
//! `llama_batch_get_one` leaves them), `pos` null means positions are unknown.
//!
//! The scan runs inside the host's decode loop, once per token of every batch, so it goes
//! by runs: consecutive tokens that each belong to exactly one sequence, the same one, are
//! counted with one comparison per token and credited once per run (a prompt chunk is one
//! run, a decode batch one run per sequence). Per-sequence shares live in a plain array
//! indexed by sequence id: no hashing, no allocation once built. Any other token (several
//! sequences, a null row, an id without a slot) takes the general path, one token at a
//! time.

use crate::ffi::{LlamaBatch, LlamaPos, LlamaSeqId};
use std::ops::Range;

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

    /// Adds `count` tokens whose positions span `span` (lowest, highest), if known.
    fn add(&mut self, count: u32, span: Option<(i32, i32)>) {
        self.count = self.count.saturating_add(count);
        if let Some((lo, hi)) = span {
            self.min_pos = Some(self.min_pos.map_or(lo, |m| m.min(lo)));
            self.max_pos = Some(self.max_pos.map_or(hi, |m| m.max(hi)));
        }
    }
}

/// Lowest and highest of a non-empty run of positions (two passes the compiler vectorises).
fn span_of(pos: &[LlamaPos]) -> Option<(i32, i32)> {
    Some((*pos.iter().min()?, *pos.iter().max()?))
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
    /// Whether the batch asks for outputs (logits or embeddings) that the host will read
    /// after the call: a token flagged in `logits`, or no flags at all (llama.cpp then
    /// outputs the last token). Unknown batches count as asking.
    pub outputs: bool,
}

impl BatchScan {
    /// A scan for a context with `n_seqs` sequences.
    pub fn new(n_seqs: usize) -> Self {
        Self {
            shares: vec![SeqShare::NONE; n_seqs],
            touched: Vec::with_capacity(n_seqs.min(64)),
            ignored: 0,
            outputs: true,
        }
    }

    /// Forgets the last batch.
    pub fn clear(&mut self) {
        for &s in &self.touched {
            self.shares[s as usize] = SeqShare::NONE;
        }
        self.touched.clear();
        self.ignored = 0;
        self.outputs = true;
    }

    /// Counts one token of sequence `seq` at `pos` (ignored when `seq` has no slot).
    pub fn add(&mut self, seq: i32, pos: Option<i32>) {
        self.add_run(seq, 1, pos.map(|p| (p, p)));
    }

    /// Counts `count` tokens of sequence `seq` whose positions span `span` (lowest,
    /// highest) when known; ignored when `seq` has no slot.
    pub fn add_run(&mut self, seq: i32, count: usize, span: Option<(i32, i32)>) {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        match usize::try_from(seq).ok().filter(|&s| s < self.shares.len()) {
            Some(s) => {
                if self.shares[s].count == 0 {
                    self.touched.push(s as u32);
                }
                self.shares[s].add(count, span);
            }
            None => self.ignored += u64::from(count),
        }
    }

    /// Reads `batch` (after [`clear`](Self::clear)ing the last one).
    ///
    /// # Safety
    /// What `llama_decode` itself requires of `batch`: each non-null array holds
    /// `n_tokens` elements, and `seq_id[i]` (when `seq_id` is not null) points to
    /// `n_seq_id[i]` sequence ids. Only `pos`, `n_seq_id`, `seq_id` and `logits` are read.
    pub unsafe fn read(&mut self, batch: &LlamaBatch) -> Result<(), OddBatch> {
        self.clear();
        let n = usize::try_from(batch.n_tokens).unwrap_or(0);
        if n == 0 {
            return Ok(());
        }
        if !batch.logits.is_null() {
            // SAFETY: `logits` is non-null and holds `n_tokens` flags (see `pos`).
            let flags = unsafe { std::slice::from_raw_parts(batch.logits, n) };
            self.outputs = flags.iter().any(|&f| f != 0);
        }
        let pos: Option<&[LlamaPos]> = if batch.pos.is_null() {
            None
        } else {
            // SAFETY: `pos` is non-null and holds `n_tokens` positions, which the host does
            // not change while the call that passes them runs.
            Some(unsafe { std::slice::from_raw_parts(batch.pos, n) })
        };
        let span = |r: Range<usize>| pos.and_then(|p| span_of(&p[r]));
        if batch.n_seq_id.is_null() || batch.seq_id.is_null() {
            self.add_run(0, n, span(0..n));
            return Ok(());
        }
        // SAFETY: both are non-null and hold `n_tokens` elements (see `pos`).
        let (counts, rows) = unsafe {
            (
                std::slice::from_raw_parts(batch.n_seq_id, n),
                std::slice::from_raw_parts(batch.seq_id as *const *const LlamaSeqId, n),
            )
        };
        // The sequence of token `i` when it has exactly one, through a non-null row.
        let single = |i: usize| -> Option<LlamaSeqId> {
            let row = rows[i];
            // SAFETY: `seq_id[i]` is non-null and holds `n_seq_id[i]` = 1 id.
            (counts[i] == 1 && !row.is_null()).then(|| unsafe { *row })
        };
        let mut i = 0;
        while i < n {
            if let Some(seq) = single(i) {
                let start = i;
                i += 1;
                while i < n && single(i) == Some(seq) {
                    i += 1;
                }
                self.add_run(seq, i - start, span(start..i));
                continue;
            }
            let k = counts[i];
            match usize::try_from(k) {
                Ok(k) if k <= self.shares.len() => {
                    let row = rows[i];
                    if row.is_null() {
                        self.ignored += k as u64;
                    } else {
                        // SAFETY: `seq_id[i]` holds `n_seq_id[i]` = k ids.
                        let ids = unsafe { std::slice::from_raw_parts(row, k) };
                        let at = span(i..i + 1);
                        for &seq in ids {
                            self.add_run(seq, 1, at);
                        }
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
            i += 1;
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

/// A `llama_batch` over arrays it owns, as a host builds one (`seq_id[i]` a separate
/// array per token): for the tests and the benchmark of the wrappers. Token ids and
/// embeddings stay null (the preload never reads them).
#[derive(Debug, Clone)]
pub struct OwnedBatch {
    /// Position of each token.
    pub pos: Vec<LlamaPos>,
    /// Sequence count of each token (a test may make it disagree with `ids`).
    pub n_seq_id: Vec<i32>,
    /// Sequence ids of each token.
    pub ids: Vec<Vec<LlamaSeqId>>,
    /// `seq_id`: a pointer into each of `ids` (a test may null one).
    pub rows: Vec<*mut LlamaSeqId>,
    /// Output flag of each token (`logits`); empty: null, the host asks for none.
    pub logits: Vec<i8>,
}

impl OwnedBatch {
    /// A batch of `(position, sequences)` tokens.
    pub fn new<S: AsRef<[LlamaSeqId]>>(tokens: &[(LlamaPos, S)]) -> Self {
        let mut ids: Vec<Vec<LlamaSeqId>> = tokens.iter().map(|t| t.1.as_ref().to_vec()).collect();
        Self {
            pos: tokens.iter().map(|t| t.0).collect(),
            n_seq_id: ids.iter().map(|v| v.len() as i32).collect(),
            rows: ids.iter_mut().map(|v| v.as_mut_ptr()).collect(),
            ids,
            logits: Vec::new(),
        }
    }

    /// A batch of `(position, sequence)` tokens, one sequence each.
    pub fn single(tokens: &[(LlamaPos, LlamaSeqId)]) -> Self {
        let tokens: Vec<_> = tokens.iter().map(|&(p, s)| (p, [s])).collect();
        Self::new(&tokens)
    }

    /// The batch as passed to `llama_decode`; valid while `self` lives unchanged in size.
    pub fn raw(&mut self) -> LlamaBatch {
        LlamaBatch {
            n_tokens: self.pos.len() as i32,
            pos: self.pos.as_mut_ptr(),
            n_seq_id: self.n_seq_id.as_mut_ptr(),
            seq_id: self.rows.as_mut_ptr(),
            logits: if self.logits.is_empty() {
                std::ptr::null_mut()
            } else {
                self.logits.as_mut_ptr()
            },
            ..LlamaBatch::empty(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(scan: &mut BatchScan, b: &LlamaBatch) -> Result<Vec<(usize, SeqShare)>, OddBatch> {
        // SAFETY: every batch in these tests is an `OwnedBatch` or has null arrays.
        unsafe { scan.read(b) }?;
        Ok(scan.shares().collect())
    }

    fn share(count: u32, min: i32, max: i32) -> SeqShare {
        SeqShare {
            count,
            min_pos: Some(min),
            max_pos: Some(max),
        }
    }

    #[test]
    fn counts_tokens_and_positions_per_sequence() {
        let mut o = OwnedBatch::new(&[
            (5, &[1][..]),
            (10, &[0]),
            (11, &[0]),
            (12, &[0]),
            (6, &[0, 1]),
        ]);
        let mut scan = BatchScan::new(2);
        let got = read(&mut scan, &o.raw()).unwrap();
        assert_eq!(got, vec![(1, share(2, 5, 6)), (0, share(4, 6, 12))]);
        assert_eq!(scan.ignored, 0);
    }

    #[test]
    fn outputs_are_asked_by_a_flag_or_by_no_flags() {
        let mut o = OwnedBatch::single(&[(0, 0), (1, 0), (2, 0)]);
        let mut scan = BatchScan::new(1);
        read(&mut scan, &o.raw()).unwrap();
        assert!(scan.outputs, "no flags: llama.cpp outputs the last token");
        o.logits = vec![0, 0, 0];
        read(&mut scan, &o.raw()).unwrap();
        assert!(
            !scan.outputs,
            "every flag clear: a prompt chunk with no output"
        );
        o.logits = vec![0, 1, 0];
        read(&mut scan, &o.raw()).unwrap();
        assert!(scan.outputs, "one flag set");
        o.logits = vec![0, 0, 0];
        read(&mut scan, &o.raw()).unwrap();
        scan.clear();
        assert!(
            scan.outputs,
            "a cleared scan knows nothing: it counts as asking"
        );
    }

    #[test]
    fn runs_of_one_sequence_are_counted_whole() {
        // A 512-token prompt chunk, out-of-order positions inside it, then runs of two
        // sequences interleaved, each run broken by a shared token and a foreign id.
        let mut chunk: Vec<(i32, i32)> = (0..512).map(|p| (100 + p, 1)).collect();
        chunk.swap(3, 400);
        let mut o = OwnedBatch::single(&chunk);
        let mut scan = BatchScan::new(4);
        assert_eq!(
            read(&mut scan, &o.raw()).unwrap(),
            vec![(1, share(512, 100, 611))]
        );
        let mut o = OwnedBatch::new(&[
            (0, &[0][..]),
            (1, &[0]),
            (7, &[3]),
            (8, &[3]),
            (2, &[0]),
            (9, &[3, 0]),
            (10, &[3]),
            (3, &[9]),
            (11, &[3]),
        ]);
        assert_eq!(
            read(&mut scan, &o.raw()).unwrap(),
            vec![(0, share(4, 0, 9)), (3, share(5, 7, 11))]
        );
        assert_eq!(scan.ignored, 1);
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
        // Positions without sequences: still sequence 0, with its span.
        let mut o = OwnedBatch::single(&[(4, 2), (5, 2), (3, 2)]);
        let mut b = o.raw();
        b.seq_id = std::ptr::null_mut();
        assert_eq!(read(&mut scan, &b).unwrap(), vec![(0, share(3, 3, 5))]);
    }

    #[test]
    fn out_of_range_and_negative_sequences_are_ignored() {
        let mut o = OwnedBatch::new(&[(0, &[2][..]), (1, &[-1]), (2, &[7, 1]), (3, &[])]);
        let mut scan = BatchScan::new(2);
        let got = read(&mut scan, &o.raw()).unwrap();
        assert_eq!(
            got.iter().map(|g| (g.0, g.1.count)).collect::<Vec<_>>(),
            vec![(1, 1)]
        );
        assert_eq!(scan.ignored, 3);
    }

    #[test]
    fn odd_counts_and_null_rows_do_not_crash() {
        let mut o = OwnedBatch::single(&[(0, 0), (1, 0)]);
        o.n_seq_id[1] = 1000;
        let mut scan = BatchScan::new(2);
        assert_eq!(
            read(&mut scan, &o.raw()),
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
        assert!(read(&mut scan, &o.raw()).is_err());
        o.n_seq_id[1] = 1;
        o.rows[1] = std::ptr::null_mut();
        let got = read(&mut scan, &o.raw()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(scan.ignored, 1);
        for n in [0, -5] {
            assert!(read(&mut scan, &LlamaBatch::empty(n)).unwrap().is_empty());
        }
    }

    #[test]
    fn a_new_batch_forgets_the_last() {
        let mut o = OwnedBatch::single(&[(0, 0), (1, 0)]);
        let mut p = OwnedBatch::single(&[(9, 1)]);
        let mut scan = BatchScan::new(2);
        read(&mut scan, &o.raw()).unwrap();
        let got = read(&mut scan, &p.raw()).unwrap();
        assert_eq!(got, vec![(1, share(1, 9, 9))]);
    }

    /// The token-by-token reading the run path must agree with.
    fn one_by_one(scan: &mut BatchScan, o: &OwnedBatch) -> Result<(), OddBatch> {
        scan.clear();
        for (i, (&pos, &k)) in o.pos.iter().zip(&o.n_seq_id).enumerate() {
            match usize::try_from(k) {
                Ok(k) if k <= scan.shares.len() => {
                    if o.rows[i].is_null() {
                        scan.ignored += k as u64;
                    } else {
                        for &seq in &o.ids[i][..k] {
                            scan.add(seq, Some(pos));
                        }
                    }
                }
                _ => {
                    scan.clear();
                    return Err(OddBatch::SeqCount {
                        token: i,
                        n_seq_id: k,
                    });
                }
            }
        }
        Ok(())
    }

    #[test]
    fn runs_agree_with_token_by_token_on_mixed_batches() {
        // xorshift64: a fixed sequence of batches mixing runs, shared tokens, foreign and
        // negative ids, null rows and (rarely) refused counts.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let (mut fast, mut slow) = (BatchScan::new(4), BatchScan::new(4));
        for _ in 0..2000 {
            let n = next(40) as usize;
            let mut seq = 0;
            let tokens: Vec<(i32, Vec<i32>)> = (0..n)
                .map(|_| {
                    if next(4) == 0 {
                        seq = next(7) as i32 - 1;
                    }
                    let ids = match next(10) {
                        0 => vec![seq, next(5) as i32],
                        1 => vec![],
                        _ => vec![seq],
                    };
                    (next(100) as i32 - 10, ids)
                })
                .collect();
            let mut o = OwnedBatch::new(&tokens);
            for i in 0..n {
                match next(60) {
                    0 => o.rows[i] = std::ptr::null_mut(),
                    1 => o.n_seq_id[i] = 5,
                    _ => {}
                }
            }
            let want = one_by_one(&mut slow, &o).map(|()| slow.shares().collect::<Vec<_>>());
            assert_eq!(read(&mut fast, &o.raw()), want, "batch {tokens:?}");
            assert_eq!(fast.ignored, slow.ignored, "batch {tokens:?}");
        }
    }
}
