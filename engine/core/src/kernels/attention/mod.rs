//! Attention of new queries against a slot's cached keys and values, in two forms with one
//! meaning:
//! - [`attend`]: candle ops, on any device, for any number of queries with an optional
//!   causal mask (on a GPU: prefill chunks, and decode per sequence);
//! - [`attend_cpu`]: every new token of a forward (a decode batch, prefill chunks, or both)
//!   in one call, computed in place over the CPU cache buffers.
//!
//! Why the second form exists: with candle ops, one sequence's decode attention is about ten
//! ops per layer (a matmul against the cache, the scale, softmax, a matmul against V and the
//! reshapes and copies around them), each allocating its result, and in a batched decode
//! step they repeat for every sequence. A prefill chunk's ops also build a mask and a score
//! matrix of chunk x cache positions per head, then scale, mask and softmax it into three
//! more (on the embedded model, the candle form made a 512-token prefill 2.6x slower than
//! the kernel: BENCHMARKS.md, #13). The kernel's loops come in two codes (`Isa`): the
//! portable ones, and on x86-64 with AVX2 and FMA the `x86` module's, which score eight
//! cached positions per vector and take `exp` eight at a time. With the engine's own weight
//! matmuls fast, attention is a tenth to a sixth of an embedded-model decode step, and
//! more with long contexts. `engine/core/benches/attention.rs` measures the three side by side
//! (BENCHMARKS.md, #13).
//!
//! Grouped-query attention: query head `h` attends with K/V head `h / (n_head / n_kv_head)`.

use candle_core::{DType, Storage, Tensor};
use rayon::prelude::*;

use super::Isa;

// SIMD loads and stores through raw pointers (x86 intrinsics have no slice API).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86;

/// The head layout of an attention block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (divides `n_head`).
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
}

/// Attention of `q` `(1, n_head, n, head_dim)` against the cache views `k`, `v`
/// `(1, n_kv_head, n_past + n, head_dim)`; returns `(1, n, n_head * head_dim)`.
///
/// `mask` (`(n, n_past + n)`, 1 where a query may not look) is needed when `n > 1`. The query
/// heads that share a K/V head are stacked as rows of one matmul against it
/// (`(1, n_kv, n_rep * n, head_dim)`), so the cache is read in place, never repeated.
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    heads: Heads,
) -> candle_core::Result<Tensor> {
    let (n, len) = (q.dim(2)?, k.dim(2)?);
    let rows = (SCORES_BLOCK_ELEMS / (heads.n_head * len).max(1)).max(1);
    if n <= rows {
        return attend_block(q, k, v, mask, heads);
    }
    // A long chunk against a long cache: the queries in blocks, so that each block's scores
    // stay under SCORES_BLOCK_ELEMS (the rows are independent; the result is the same).
    let mut ys = Vec::with_capacity(n.div_ceil(rows));
    for start in (0..n).step_by(rows) {
        let b = rows.min(n - start);
        let mask = mask.map(|m| m.narrow(0, start, b)).transpose()?;
        ys.push(attend_block(
            &q.narrow(2, start, b)?,
            k,
            v,
            mask.as_ref(),
            heads,
        )?);
    }
    Tensor::cat(&ys, 1)
}

/// The most attention scores (f32) one block of queries materialises: 16 MiB. Each score
/// tensor, and each of the three more of its size that scaling, masking and softmax make,
/// is then served by the allocator from memory it has already mapped; at 4,000 cached
/// positions and a 512-token chunk one unblocked tensor is 74 MB, which glibc maps fresh
/// and the kernel zero-fills on every layer (page faults were about 15% of a 4,000-token
/// prefill's time; BENCHMARKS.md, #13).
const SCORES_BLOCK_ELEMS: usize = 1 << 22;

/// [`attend`] for one block of queries.
fn attend_block(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    heads: Heads,
) -> candle_core::Result<Tensor> {
    let (n_head, n_kv, hd) = (heads.n_head, heads.n_kv_head, heads.head_dim);
    let n_rep = n_head / n_kv;
    let n = q.dim(2)?;
    let len = k.dim(2)?;
    let q = q.reshape((1, n_kv, n_rep * n, hd))?;
    let att = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
    let att = match mask {
        None => att,
        Some(m) => {
            let att = att.reshape((1, n_kv, n_rep, n, len))?;
            let m = m.broadcast_as(att.shape())?;
            let neg_inf =
                Tensor::new(f32::NEG_INFINITY, att.device())?.broadcast_as(att.shape())?;
            m.where_cond(&neg_inf, &att)?
                .reshape((1, n_kv, n_rep * n, len))?
        }
    };
    let att = candle_nn::ops::softmax_last_dim(&att)?;
    let y = att.matmul(v)?;
    y.reshape((1, n_head, n, hd))?
        .transpose(1, 2)?
        .reshape((1, n, n_head * hd))
}

/// One sequence of a forward, as [`attend_cpu`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct CachedSequence<'a> {
    /// Key buffer, `(1, n_kv_head, capacity, head_dim)` contiguous f32.
    pub k: &'a Tensor,
    /// Value buffer, the same shape.
    pub v: &'a Tensor,
    /// Positions of the buffers that hold keys and values, the new tokens' included.
    pub len: usize,
    /// The new tokens (at least 1; 1 in a decode step): the last `queries` of the `len`
    /// positions. Each attends causally, to the positions up to and including its own.
    pub queries: usize,
}

/// Work (multiply-adds) below which the kernel stays on the calling thread: spreading a few
/// microseconds of arithmetic over the pool costs more than it saves.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// The fewest positions a block of a split cache holds: a cache is split only from twice
/// this many (256) positions on, when the pool may share the work out and the batch has
/// fewer than [`SPLIT_GROUPS_PER_THREAD`] groups per thread (one sequence has only a few
/// K/V heads: SmolLM2's 3 on two threads left one of them idle for a third of the time).
/// See [`split_blocks`] and BENCHMARKS.md, "Decode attention in equal blocks".
const SPLIT_MIN_BLOCK: usize = 128;

/// Groups per thread from which a batch is not split: enough tasks to share out already.
/// (Four SmolLM2 slots decoding over 2,000-position caches, split whenever fewer than 4
/// groups per thread were in a step, measured 0.85x and 0.93x the decode rate of the
/// unsplit kernel: a cache in blocks costs more than it saves once the groups balance.)
const SPLIT_GROUPS_PER_THREAD: usize = 2;

/// The most positions a block of a split cache holds.
const SPLIT_BLOCK: usize = 512;

/// The blocks a cache of `len` positions is cut into, on `threads` threads, when its
/// batch has few groups (1: not split): a multiple of `threads` (every group then gives
/// each thread the same number of blocks, which [`plan_tasks`] makes as equal as positions
/// allow) of at most [`SPLIT_BLOCK`] positions each, but no more blocks than leave each
/// [`SPLIT_MIN_BLOCK`] positions (many threads and a short cache: fewer, larger blocks).
/// Blocks of 512 from the first position, and none below 1,024 positions, had left a
/// 1,030-position cache in 512, 512 and 6, and a 1,000-position one to three tasks on two
/// threads.
fn split_blocks(len: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let balanced = threads * len.div_ceil(threads * SPLIT_BLOCK);
    balanced.min(len / SPLIT_MIN_BLOCK).max(1)
}

/// One row (new token) of [`attend_cpu`]: its sequence's K and V buffers
/// (`n_kv_head * capacity * head_dim`) and the positions it sees, `0..len`.
#[derive(Clone, Copy)]
struct RowView<'a> {
    k: &'a [f32],
    v: &'a [f32],
    capacity: usize,
    len: usize,
}

/// A task of the kernel: group `t` (row `t / n_kv`, K/V head `t % n_kv`) over the
/// `positions` of its cache, into `o`; with `stats` for a block of a split cache.
struct Task<'a> {
    t: usize,
    positions: std::ops::Range<usize>,
    o: &'a mut [f32],
    stats: Option<&'a mut [f32]>,
}

/// `o` (`n_rep * hd`, zeroed) from the unnormalized outputs `parts` and the statistics
/// `stats` of a group's blocks ([`HeadGroup::stats`]): per head, the blocks' outputs and
/// sums rescaled to the largest of their maximums, then divided by the total sum.
fn merge_blocks(o: &mut [f32], parts: &[f32], stats: &[f32], n_rep: usize, hd: usize) {
    let blocks = stats.len() / (2 * n_rep);
    for (r, o) in o.chunks_exact_mut(hd).enumerate() {
        let stat = |b: usize, i: usize| stats[b * 2 * n_rep + 2 * r + i];
        let max = (0..blocks)
            .map(|b| stat(b, 0))
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for b in 0..blocks {
            let w = (stat(b, 0) - max).exp();
            sum += w * stat(b, 1);
            let part = &parts[(b * n_rep + r) * hd..(b * n_rep + r + 1) * hd];
            axpy(w, part, o);
        }
        let inv = 1.0 / sum;
        for x in o.iter_mut() {
            *x *= inv;
        }
    }
}

/// Attention of the new tokens of a forward (a decode batch, prefill chunks, or both) over
/// the CPU cache buffers: `q` `(rows, n_head, 1, head_dim)` contiguous f32, the rows being
/// the new tokens of `seqs[0]` in order, then those of `seqs[1]`, and so on, whose keys and
/// values are already in the buffers. Returns `(1, rows, n_head * head_dim)`: for each
/// sequence what [`attend`] with a causal mask gives, concatenated.
///
/// Scores, softmax and the weighted sum of values run over the cache buffers in place, one
/// task per (row, K/V head), with no score matrix, mask or copy of the cache; the tasks are
/// spread over the current rayon pool when the forward holds enough work.
pub fn attend_cpu(
    q: &Tensor,
    seqs: &[CachedSequence<'_>],
    heads: Heads,
) -> candle_core::Result<Tensor> {
    attend_cpu_with(q, seqs, heads, Isa::best())
}

/// [`attend_cpu`] with the head-group code of `isa` (with AVX2, `x86`'s for head widths
/// that are a multiple of 8; the portable loops for other widths and for
/// [`Isa::PORTABLE`]).
pub fn attend_cpu_with(
    q: &Tensor,
    seqs: &[CachedSequence<'_>],
    heads: Heads,
    isa: Isa,
) -> candle_core::Result<Tensor> {
    let (n_head, n_kv, hd) = (heads.n_head, heads.n_kv_head, heads.head_dim);
    let n_rows = check_shapes(q, seqs, heads)?;
    let (q_storage, q_layout) = q.storage_and_layout();
    let q_all = cpu_rows(&q_storage, q_layout, n_rows * n_head * hd, "queries")?;
    // Read guards of every buffer, held while the kernel runs (nothing writes them meanwhile:
    // the forward that wrote the new rows has finished its writes).
    let guards: Vec<_> = seqs
        .iter()
        .map(|s| (s.k.storage_and_layout(), s.v.storage_and_layout(), s))
        .collect();
    let views = row_views(&guards, n_rows, n_kv * hd)?;

    let n_rep = n_head / n_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; n_rows * n_head * hd];
    #[cfg(target_arch = "x86_64")]
    let avx2 = isa.has_avx2() && hd.is_multiple_of(8);
    // Group `t = j * n_kv + g`: the n_rep query heads of row j that share K/V head g, whose
    // outputs are adjacent in `out` ((rows, n_head, head_dim) order). Each K and V row is
    // read once for all n_rep heads. A group over a long cache is split into blocks of
    // positions when the pool may share them out, so that one sequence's few K/V heads
    // still keep every thread busy; its blocks' unnormalized outputs and softmax
    // statistics are merged below.
    let threads = crate::threads::kernel_threads();
    let few_groups = threads > 1 && n_rows * n_kv < SPLIT_GROUPS_PER_THREAD * threads;
    let blocks = |t: usize| match views[t / n_kv].len {
        len if few_groups => split_blocks(len, threads),
        _ => 1,
    };
    let split: usize = (0..n_rows * n_kv).map(blocks).filter(|&b| b > 1).sum();
    let mut block_out = vec![0f32; split * n_rep * hd];
    let mut block_stats = vec![0f32; split * 2 * n_rep];
    let tasks = plan_tasks(
        &mut out,
        &mut block_out,
        &mut block_stats,
        (n_rep, hd),
        |t| (views[t / n_kv].len, blocks(t)),
    );
    let groups = Groups {
        views: &views,
        q_all,
        heads,
        scale,
        isa,
        #[cfg(target_arch = "x86_64")]
        avx2,
    };
    let task = |t: Task<'_>| groups.run(t);
    let work: usize = views.iter().map(|v| v.len).sum::<usize>() * n_head * hd;
    if work >= PARALLEL_MIN_WORK && threads > 1 {
        tasks.into_par_iter().for_each(task);
    } else {
        tasks.into_iter().for_each(task);
    }
    merge_split(&mut out, &block_out, &block_stats, n_rep, hd, blocks);
    drop(views);
    drop(guards);
    drop(q_storage);
    Tensor::from_vec(out, (1, n_rows, n_head * hd), q.device())
}

/// A buffer's read guard and layout, held while the kernel reads it.
type Guard<'a> = (candle_core::StorageRef<'a>, &'a candle_core::Layout);

/// One [`RowView`] per new token of every sequence (`guards`: its K and V buffers), each
/// seeing its sequence's positions up to itself; `kv_row` is `n_kv_head * head_dim`.
fn row_views<'g>(
    guards: &'g [(Guard<'_>, Guard<'_>, &CachedSequence<'_>)],
    n_rows: usize,
    kv_row: usize,
) -> candle_core::Result<Vec<RowView<'g>>> {
    let mut views = Vec::with_capacity(n_rows);
    for ((ks, kl), (vs, vl), s) in guards {
        let capacity = kl.dims()[2];
        let n = capacity * kv_row;
        let (k, v) = (cpu_rows(ks, kl, n, "keys")?, cpu_rows(vs, vl, n, "values")?);
        for i in 0..s.queries {
            views.push(RowView {
                k,
                v,
                capacity,
                len: s.len - s.queries + i + 1,
            });
        }
    }
    Ok(views)
}

/// What every task of one [`attend_cpu_with`] call reads: the rows' caches, the queries,
/// the heads and the code to run.
struct Groups<'a> {
    views: &'a [RowView<'a>],
    q_all: &'a [f32],
    heads: Heads,
    scale: f32,
    isa: Isa,
    #[cfg(target_arch = "x86_64")]
    avx2: bool,
}

impl Groups<'_> {
    /// Runs task `t`: group `t` (row `t / n_kv`, K/V head `t % n_kv`) over its positions.
    #[inline]
    fn run(&self, task: Task<'_>) {
        let Task {
            t,
            positions,
            o,
            stats,
        } = task;
        let Heads {
            n_head,
            n_kv_head: n_kv,
            head_dim: hd,
        } = self.heads;
        let n_rep = n_head / n_kv;
        let (j, g) = (t / n_kv, t % n_kv);
        let RowView { k, v, capacity, .. } = self.views[j];
        let rows = g * capacity * hd + positions.start * hd..g * capacity * hd + positions.end * hd;
        let q = &self.q_all[(j * n_head + g * n_rep) * hd..(j * n_head + (g + 1) * n_rep) * hd];
        let hg = HeadGroup {
            q,
            k: &k[rows.clone()],
            v: &v[rows],
            o,
            n_rep,
            hd,
            len: positions.len(),
            scale: self.scale,
            stats,
        };
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            return x86::attend(self.isa, hg);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = self.isa;
        // The loops are compiled for the best instruction set the CPU has, chosen at run time.
        pulp::Arch::new().dispatch(hg);
    }
}

/// Checks the heads, the queries and every sequence's buffers of [`attend_cpu_with`];
/// the number of rows (new tokens) when they agree.
fn check_shapes(
    q: &Tensor,
    seqs: &[CachedSequence<'_>],
    heads: Heads,
) -> candle_core::Result<usize> {
    let (n_head, n_kv, hd) = (heads.n_head, heads.n_kv_head, heads.head_dim);
    if n_kv == 0 || n_head % n_kv != 0 || hd == 0 {
        candle_core::bail!("cached attention: {n_head} query heads over {n_kv} K/V heads of {hd}")
    }
    if seqs.is_empty() {
        candle_core::bail!("cached attention: no sequences")
    }
    // Rows: one per new token.
    let n_rows: usize = seqs.iter().map(|s| s.queries).sum();
    if q.dims() != [n_rows, n_head, 1, hd] || q.dtype() != DType::F32 {
        candle_core::bail!(
            "cached attention: queries {:?} {:?}, expected ({n_rows}, {n_head}, 1, {hd}) f32",
            q.dims(),
            q.dtype()
        )
    }
    for s in seqs {
        for (name, t) in [("keys", s.k), ("values", s.v)] {
            let d = t.dims();
            if d.len() != 4 || d[0] != 1 || d[1] != n_kv || d[3] != hd || s.len > d[2] {
                candle_core::bail!(
                    "cached attention: {name} buffer {d:?} cannot hold {} positions of \
                     ({n_kv}, {hd})",
                    s.len
                )
            }
            if s.queries == 0 || s.queries > s.len {
                candle_core::bail!(
                    "cached attention: {} new tokens in {} positions",
                    s.queries,
                    s.len
                )
            }
        }
    }
    Ok(n_rows)
}

/// The kernel's tasks: each group `t` of `out` (`n_rep` heads of `hd` values) whole, or
/// in `n_blocks` blocks of equal positions (one apart at most) writing to `block_out` and
/// `block_stats`;
/// `shape(t)` is the group's positions and its number of blocks.
fn plan_tasks<'a>(
    out: &'a mut [f32],
    block_out: &'a mut [f32],
    block_stats: &'a mut [f32],
    (n_rep, hd): (usize, usize),
    shape: impl Fn(usize) -> (usize, usize),
) -> Vec<Task<'a>> {
    let capacity = out.len() / (n_rep * hd) + block_stats.len() / (2 * n_rep);
    let mut tasks = Vec::with_capacity(capacity);
    let mut outs = block_out.chunks_mut(n_rep * hd);
    let mut stats = block_stats.chunks_mut(2 * n_rep);
    for (t, o) in out.chunks_mut(n_rep * hd).enumerate() {
        let (len, n_blocks) = shape(t);
        if n_blocks == 1 {
            tasks.push(Task {
                t,
                positions: 0..len,
                o,
                stats: None,
            });
            continue;
        }
        // Block b holds positions [b·len/n, (b+1)·len/n): sizes differ by at most one
        // ([`split_blocks`] leaves each at least SPLIT_MIN_BLOCK).
        let edge = |b: usize| b * len / n_blocks;
        for b in 0..n_blocks {
            tasks.push(Task {
                t,
                positions: edge(b)..edge(b + 1),
                o: outs.next().expect("a block output per block"),
                stats: stats.next(),
            });
        }
    }
    tasks
}

/// Each split group of `out` from its blocks' outputs and statistics ([`merge_blocks`]).
fn merge_split(
    out: &mut [f32],
    block_out: &[f32],
    block_stats: &[f32],
    n_rep: usize,
    hd: usize,
    blocks: impl Fn(usize) -> usize,
) {
    let mut at = 0;
    for (t, o) in out.chunks_mut(n_rep * hd).enumerate() {
        let n = blocks(t);
        if n > 1 {
            merge_blocks(
                o,
                &block_out[at * n_rep * hd..(at + n) * n_rep * hd],
                &block_stats[at * 2 * n_rep..(at + n) * 2 * n_rep],
                n_rep,
                hd,
            );
            at += n;
        }
    }
}

/// The `n` f32 values a contiguous CPU tensor's layout covers.
fn cpu_rows<'a>(
    storage: &'a Storage,
    layout: &candle_core::Layout,
    n: usize,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    let Storage::Cpu(cpu) = storage else {
        candle_core::bail!("cached attention: {what} are not on the CPU")
    };
    if !layout.is_contiguous() {
        candle_core::bail!("cached attention: {what} are not contiguous")
    }
    let start = layout.start_offset();
    cpu.as_slice::<f32>()?
        .get(start..start + n)
        .ok_or_else(|| candle_core::Error::Msg(format!("cached attention: {what} out of range")))
}

/// One task of the kernel: attention of `n_rep` query heads `q` (`n_rep * hd`) that
/// share one K/V head, whose `len` rows are `k` and `v` (`len * hd`), into `o`
/// (`n_rep * hd`, zeroed), scores scaled by `scale`.
///
/// The portable code runs through pulp's dispatch: `with_simd` is inlined into a function
/// compiled for the instruction set pulp picks (AVX2 and FMA on x86-64), so the loops of
/// [`head_group`], inlined into it, are vectorized for it. (A closure handed to `dispatch`
/// is not: a perf profile showed its body compiled for SSE2, 18% of a SmolLM2 decode.)
struct HeadGroup<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    o: &'a mut [f32],
    n_rep: usize,
    hd: usize,
    len: usize,
    scale: f32,
    /// For a block of a longer cache (`2 * n_rep`): the softmax is left unnormalized, `o`
    /// gets `sum over t of exp(s_t - max) * v_t`, and head `r`'s `max` and sum of
    /// `exp(s_t - max)` go to `stats[2r]` and `stats[2r + 1]` ([`merge_blocks`]).
    stats: Option<&'a mut [f32]>,
}

impl pulp::WithSimd for HeadGroup<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        head_group(self);
    }
}

/// The portable loops of a [`HeadGroup`].
#[inline(always)]
fn head_group(hg: HeadGroup<'_>) {
    let HeadGroup {
        q,
        k,
        v,
        o,
        n_rep,
        hd,
        len,
        scale,
        mut stats,
    } = hg;
    // scores[r * len + t]: query head r against position t.
    let mut scores = vec![0f32; n_rep * len];
    for (t, k) in k.chunks_exact(hd).enumerate() {
        for (r, q) in q.chunks_exact(hd).enumerate() {
            scores[r * len + t] = dot(q, k) * scale;
        }
    }
    for (r, row) in scores.chunks_exact_mut(len).enumerate() {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for s in row.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        if let Some(stats) = stats.as_deref_mut() {
            stats[2 * r] = max;
            stats[2 * r + 1] = sum;
            continue;
        }
        let inv = 1.0 / sum;
        for s in row.iter_mut() {
            *s *= inv;
        }
    }
    for (t, v) in v.chunks_exact(hd).enumerate() {
        for (r, o) in o.chunks_exact_mut(hd).enumerate() {
            axpy(scores[r * len + t], v, o);
        }
    }
}

/// `a . b`, in eight lanes the compiler vectorizes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `o += p * v`.
#[inline(always)]
fn axpy(p: f32, v: &[f32], o: &mut [f32]) {
    for (o, v) in o.iter_mut().zip(v) {
        *o += p * v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::max_abs_diff;
    use candle_core::Device;

    fn seeded(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        let mut x = seed;
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(vals, shape, &Device::Cpu).unwrap()
    }

    /// A split cache gives each thread as many blocks, of equal positions (one apart at
    /// most), none over SPLIT_BLOCK and none under SPLIT_MIN_BLOCK; a short cache is not
    /// split, and many threads over a short cache get fewer, larger blocks.
    #[test]
    fn split_caches_give_every_thread_equal_blocks() {
        let cases = [
            (255, 2, 1),
            (256, 2, 2),
            (1024, 2, 2),
            (1030, 2, 4),
            (2048, 2, 4),
        ];
        for (len, threads, want) in cases {
            assert_eq!(split_blocks(len, threads), want, "{len} on {threads}");
        }
        assert_eq!(split_blocks(4000, 3), 9);
        assert_eq!(
            split_blocks(300, 16),
            2,
            "blocks of at least SPLIT_MIN_BLOCK"
        );
        for len in [256, 257, 1030, 4097, 9000] {
            for threads in [2, 3, 4, 16] {
                let n = split_blocks(len, threads);
                let sizes: Vec<usize> = (0..n).map(|b| (b + 1) * len / n - b * len / n).collect();
                assert_eq!(sizes.iter().sum::<usize>(), len);
                let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
                assert!(lo >= SPLIT_MIN_BLOCK, "{len}/{threads}: {sizes:?}");
                assert!(
                    hi <= SPLIT_BLOCK && hi - lo <= 1,
                    "{len}/{threads}: {sizes:?}"
                );
                let whole = n.is_multiple_of(threads) || n == len / SPLIT_MIN_BLOCK;
                assert!(whole, "{len}/{threads}: {n}");
            }
        }
    }

    /// The kernel agrees with the candle-op form for every sequence of a batch of unequal
    /// lengths, read out of buffers larger than what they hold, on both the sequential and
    /// the parallel path, and for caches split into blocks of positions, in every code this
    /// CPU has (the portable loops for every head width too).
    #[test]
    fn decode_kernel_matches_the_candle_ops() {
        for (heads, lens) in [
            (
                Heads {
                    n_head: 8,
                    n_kv_head: 4,
                    head_dim: 32,
                },
                // Every length of a short last block of 8 positions (1-7), and whole ones.
                vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 300],
            ),
            (
                Heads {
                    n_head: 9,
                    n_kv_head: 3,
                    head_dim: 64,
                },
                vec![2000, 5],
            ),
            // Few enough groups (2 and 3) for their long caches to be split into blocks.
            (
                Heads {
                    n_head: 4,
                    n_kv_head: 1,
                    head_dim: 12,
                },
                vec![3, 1500],
            ),
            // One SmolLM2 row: its 3 groups split in 2 blocks of 128 and 129, and in 4 of
            // 257 and 258 positions.
            (
                Heads {
                    n_head: 9,
                    n_kv_head: 3,
                    head_dim: 64,
                },
                vec![257],
            ),
            (
                Heads {
                    n_head: 9,
                    n_kv_head: 3,
                    head_dim: 64,
                },
                vec![1030],
            ),
            // One query head per K/V head, and 7 per K/V head (heads in parts of 3, 3 and 1),
            // with head widths that leave 1 and 2 vectors after the 4-vector passes.
            (
                Heads {
                    n_head: 4,
                    n_kv_head: 4,
                    head_dim: 16,
                },
                vec![1, 2, 9, 33],
            ),
            (
                Heads {
                    n_head: 7,
                    n_kv_head: 1,
                    head_dim: 40,
                },
                vec![5, 70, 1100],
            ),
        ] {
            decode_rows_match_the_candle_ops(heads, &lens);
        }
    }

    /// One decode row per sequence of `lens` with `heads`, checked against the candle ops
    /// in every code this CPU has, on two threads.
    fn decode_rows_match_the_candle_ops(heads: Heads, lens: &[usize]) {
        let Heads {
            n_head,
            n_kv_head,
            head_dim,
        } = heads;
        let capacity = lens.iter().max().unwrap() + 9;
        let bufs: Vec<(Tensor, Tensor)> = (0..lens.len() as u64)
            .map(|j| {
                (
                    seeded((1, n_kv_head, capacity, head_dim), 2 * j + 1),
                    seeded((1, n_kv_head, capacity, head_dim), 2 * j + 2),
                )
            })
            .collect();
        let q = seeded((lens.len(), n_head, 1, head_dim), 99);
        let seqs: Vec<CachedSequence<'_>> = bufs
            .iter()
            .zip(lens)
            .map(|((k, v), &len)| CachedSequence {
                k,
                v,
                len,
                queries: 1,
            })
            .collect();
        // On two threads, so that long caches of batches with few groups are split
        // into blocks (1500, 1100, 1030 and 257 here) on any machine.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for isa in Isa::available() {
            let got = pool.install(|| attend_cpu_with(&q, &seqs, heads, isa).unwrap());
            assert_eq!(got.dims(), [1, lens.len(), n_head * head_dim]);
            for (j, ((k, v), &len)) in bufs.iter().zip(lens).enumerate() {
                let want = attend(
                    &q.narrow(0, j, 1).unwrap(),
                    &k.narrow(2, 0, len).unwrap(),
                    &v.narrow(2, 0, len).unwrap(),
                    None,
                    heads,
                )
                .unwrap();
                let diff = max_abs_diff(&got.narrow(1, j, 1).unwrap(), &want);
                assert!(
                    diff < 1e-5,
                    "{isa:?} {heads:?} sequence {j} of length {len}: {diff}"
                );
            }
        }
    }

    /// Sequences bringing several new tokens (prefill chunks, one from an empty cache), mixed
    /// with single decode tokens in one call: each row attends causally, as the candle ops
    /// with a causal mask do, in every code this CPU has, for a head width the AVX2 code
    /// takes (32) and one it leaves to the portable loops (12).
    #[test]
    fn chunks_match_the_masked_candle_ops() {
        let seqs_of = [(0, 5), (37, 9), (300, 1), (0, 1), (64, 17)];
        for heads in [
            Heads {
                n_head: 8,
                n_kv_head: 4,
                head_dim: 32,
            },
            Heads {
                n_head: 4,
                n_kv_head: 1,
                head_dim: 12,
            },
        ] {
            let (nh, nkv, hd) = (heads.n_head, heads.n_kv_head, heads.head_dim);
            let bufs: Vec<(Tensor, Tensor)> = (0..seqs_of.len() as u64)
                .map(|j| {
                    let capacity = seqs_of[j as usize].0 + seqs_of[j as usize].1 + 3;
                    (
                        seeded((1, nkv, capacity, hd), 2 * j + 11),
                        seeded((1, nkv, capacity, hd), 2 * j + 12),
                    )
                })
                .collect();
            let rows: usize = seqs_of.iter().map(|s| s.1).sum();
            let q = seeded((rows, nh, 1, hd), 42);
            let seqs: Vec<CachedSequence<'_>> = bufs
                .iter()
                .zip(seqs_of)
                .map(|((k, v), (past, n))| CachedSequence {
                    k,
                    v,
                    len: past + n,
                    queries: n,
                })
                .collect();
            for isa in Isa::available() {
                let got = attend_cpu_with(&q, &seqs, heads, isa).unwrap();
                assert_eq!(got.dims(), [1, rows, nh * hd]);
                let mut row = 0;
                for ((k, v), (past, n)) in bufs.iter().zip(seqs_of) {
                    // (n, heads, 1, hd) rows -> (1, heads, n, hd), as the chunk path lays queries out.
                    let q = q
                        .narrow(0, row, n)
                        .unwrap()
                        .reshape((1, n, nh, hd))
                        .unwrap()
                        .transpose(1, 2)
                        .unwrap()
                        .contiguous()
                        .unwrap();
                    let mask = (n > 1).then(|| {
                        candle_transformers::utils::build_causal_mask(n, past, &Device::Cpu)
                            .unwrap()
                    });
                    let want = attend(
                        &q,
                        &k.narrow(2, 0, past + n).unwrap(),
                        &v.narrow(2, 0, past + n).unwrap(),
                        mask.as_ref(),
                        heads,
                    )
                    .unwrap();
                    let diff = max_abs_diff(&got.narrow(1, row, n).unwrap(), &want);
                    assert!(diff < 1e-5, "{isa:?} {heads:?} past {past} n {n}: {diff}");
                    row += n;
                }
            }
        }
    }

    /// A chunk long enough to be split into query blocks gives what one block gives.
    #[test]
    fn blocked_queries_match_one_block() {
        let heads = Heads {
            n_head: 8,
            n_kv_head: 4,
            head_dim: 16,
        };
        let (n, n_past) = (600, 1400);
        let len = n + n_past;
        assert!(
            n * heads.n_head * len > SCORES_BLOCK_ELEMS,
            "the test must split"
        );
        let q = seeded((1, 8, n, 16), 5);
        let k = seeded((1, 4, len, 16), 6);
        let v = seeded((1, 4, len, 16), 7);
        let mask = candle_transformers::utils::build_causal_mask(n, n_past, &Device::Cpu).unwrap();
        let got = attend(&q, &k, &v, Some(&mask), heads).unwrap();
        let want = attend_block(&q, &k, &v, Some(&mask), heads).unwrap();
        assert_eq!(got.dims(), [1, n, 8 * 16]);
        assert_eq!(max_abs_diff(&got, &want), 0.0);
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        let heads = Heads {
            n_head: 2,
            n_kv_head: 1,
            head_dim: 4,
        };
        let k = seeded((1, 1, 3, 4), 1);
        let q = seeded((1, 2, 1, 4), 2);
        let one = |k, len, queries| {
            [CachedSequence {
                k,
                v: k,
                len,
                queries,
            }]
        };
        assert!(
            attend_cpu(&q, &one(&k, 4, 1), heads).is_err(),
            "beyond the buffer"
        );
        assert!(
            attend_cpu(&q, &one(&k, 0, 1), heads).is_err(),
            "no positions"
        );
        assert!(attend_cpu(&q, &one(&k, 3, 1), heads).is_ok());
        let q4 = seeded((4, 2, 1, 4), 2);
        assert!(
            attend_cpu(&q4, &one(&k, 3, 4), heads).is_err(),
            "more tokens than positions"
        );
        assert!(attend_cpu(&q, &[], heads).is_err(), "no sequences");
        assert!(
            attend_cpu(&q4, &one(&k, 3, 1), heads).is_err(),
            "rows mismatch"
        );
        let strided = seeded((1, 1, 4, 3), 3).transpose(2, 3).unwrap();
        assert_eq!(strided.dims(), k.dims());
        let bad = [CachedSequence {
            k: &strided,
            v: &k,
            len: 3,
            queries: 1,
        }];
        assert!(attend_cpu(&q, &bad, heads).is_err());
    }
}
