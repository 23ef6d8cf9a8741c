//! Which slot a generation request runs on, and the bounded wait for one.
//!
//! A request that names no slot (`id_slot` absent or -1) takes an idle slot, preferring the
//! one whose cached tokens share the longest prefix with its prompt (llama-server's
//! `cache_prompt`: that prefix is not evaluated again); ties go to the lowest slot. When
//! every slot is busy it waits, at most `--max-waiting` requests at once; one
//! more is refused ([`PoolError::Full`], a 503 with `Retry-After`). A waiting request is
//! counted in the segment as pending on the slot with the fewest waiting (so readers show
//! it as queued) until it gets a slot, or its client goes away.
//!
//! The cached tokens kept here are a hint for the choice only, recorded by the front end
//! after each request; the compute thread decides what it reuses from what the slot really
//! holds.

use std::sync::{Arc, Mutex, MutexGuard};

use hydra_engine_core::slots::SlotId;
use hydra_layout::PendingCounter;
use tokio::sync::Notify;

/// Why no slot was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Every slot is busy and the wait queue is full.
    #[error("all {n_slots} slots are busy and {waiting} requests already wait; retry later")]
    Full {
        /// Slots.
        n_slots: usize,
        /// Requests waiting.
        waiting: usize,
    },
    /// The request waited for slot `slot`, and `POST /slots/{slot}?action=cancel` removed it
    /// from the queue.
    #[error("cancelled while waiting for slot {slot}")]
    Cancelled {
        /// The slot it was counted on.
        slot: usize,
    },
}

#[derive(Debug)]
struct Inner {
    busy: Vec<bool>,
    cached: Vec<Vec<u32>>,
    /// Requests waiting, in all and as counted on each slot.
    waiting: usize,
    waiting_on: Vec<usize>,
    /// Per slot: how many times the requests waiting on it were cancelled; a waiter that
    /// sees this change from what it joined with leaves the queue.
    cancels: Vec<u64>,
}

/// The slots' leases and the wait queue.
#[derive(Debug)]
pub struct SlotPool {
    /// Every slot of the engine, by index.
    ids: Vec<SlotId>,
    inner: Mutex<Inner>,
    freed: Notify,
    max_waiting: usize,
    pending: Option<PendingCounter>,
}

/// A slot held by one request; dropping it frees the slot.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<SlotPool>,
    slot: SlotId,
    #[cfg(test)]
    reuse: usize,
}

impl Lease {
    /// The slot.
    pub fn slot(&self) -> SlotId {
        self.slot
    }

    /// How many of the prompt's first tokens the slot held, per the hint.
    #[cfg(test)]
    fn prefix_hint(&self) -> usize {
        self.reuse
    }

    /// The slot's cache holds `tokens` now (a hint for later choices).
    pub fn record(&self, tokens: Vec<u32>) {
        self.pool.lock().cached[self.slot.get()] = tokens;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.lock().busy[self.slot.get()] = false;
        self.pool.freed.notify_waiters();
    }
}

/// A request counted as waiting; uncounted when dropped (slot found, or client gone).
struct Waiting<'a> {
    pool: &'a SlotPool,
    slot: usize,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut inner = self.pool.lock();
        inner.waiting -= 1;
        inner.waiting_on[self.slot] -= 1;
        drop(inner);
        if let Some(p) = &self.pool.pending {
            p.dequeued(self.slot);
        }
    }
}

impl SlotPool {
    /// `n_slots` free slots; at most `max_waiting` requests wait; waiting requests are
    /// counted in the segment through `pending` (None with publishing off).
    pub fn new(n_slots: usize, max_waiting: usize, pending: Option<PendingCounter>) -> Self {
        Self {
            ids: SlotId::all(n_slots).collect(),
            inner: Mutex::new(Inner {
                busy: vec![false; n_slots],
                cached: vec![Vec::new(); n_slots],
                waiting: 0,
                waiting_on: vec![0; n_slots],
                cancels: vec![0; n_slots],
            }),
            freed: Notify::new(),
            max_waiting,
            pending,
        }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// Removes every request waiting on `slot` (the slot it is counted on in the segment)
    /// from the queue: each gets [`PoolError::Cancelled`]. Returns how many waited.
    pub fn cancel_waiting(&self, slot: usize) -> usize {
        let mut inner = self.lock();
        let Some(n) = inner.waiting_on.get(slot).copied() else {
            return 0;
        };
        inner.cancels[slot] += 1;
        drop(inner);
        self.freed.notify_waiters();
        n
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; a poisoned one still holds valid data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a request with `prompt`: `want`, or the best idle one; waits while none
    /// is free. Dropping the future while it waits leaves the queue, and so does
    /// [`cancel_waiting`](Self::cancel_waiting) of the slot it is counted on.
    pub async fn acquire(
        self: &Arc<Self>,
        want: Option<SlotId>,
        prompt: &[u32],
    ) -> Result<Lease, PoolError> {
        let want = want.map(SlotId::get);
        let mut waiting: Option<(Waiting<'_>, u64)> = None;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check: a slot freed after it wakes this waiter.
            freed.as_mut().enable();
            {
                let mut inner = self.lock();
                let n_slots = inner.busy.len();
                if let Some((w, joined)) = &waiting {
                    if inner.cancels[w.slot] != *joined {
                        let slot = w.slot;
                        drop(inner);
                        return Err(PoolError::Cancelled { slot });
                    }
                }
                if let Some((slot, _reuse)) = choose(&inner, want, prompt) {
                    inner.busy[slot] = true;
                    drop(inner);
                    drop(waiting);
                    return Ok(Lease {
                        pool: self.clone(),
                        slot: self.ids[slot],
                        #[cfg(test)]
                        reuse: _reuse,
                    });
                }
                if waiting.is_none() {
                    if inner.waiting >= self.max_waiting {
                        return Err(PoolError::Full {
                            n_slots,
                            waiting: inner.waiting,
                        });
                    }
                    let slot = want.unwrap_or_else(|| {
                        (0..n_slots)
                            .min_by_key(|&s| inner.waiting_on[s])
                            .unwrap_or(0)
                    });
                    inner.waiting += 1;
                    inner.waiting_on[slot] += 1;
                    let joined = inner.cancels[slot];
                    drop(inner);
                    if let Some(p) = &self.pending {
                        p.queued(slot);
                    }
                    waiting = Some((Waiting { pool: self, slot }, joined));
                }
            }
            freed.await;
        }
    }
}

/// The slot to take now, and the prefix of `prompt` it holds: `want` if free; else the
/// free slot sharing the longest prefix with `prompt` (ties: the lowest).
fn choose(inner: &Inner, want: Option<usize>, prompt: &[u32]) -> Option<(usize, usize)> {
    let common = |s: usize| {
        inner.cached[s]
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    };
    match want {
        Some(s) => (!inner.busy[s]).then(|| (s, common(s))),
        None => (0..inner.busy.len())
            .filter(|&s| !inner.busy[s])
            .map(|s| (s, common(s)))
            // max_by_key keeps the last of equals: reverse so that the lowest slot wins.
            .rev()
            .max_by_key(|&(_, c)| c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(10);

    fn id(slot: usize) -> SlotId {
        SlotId::new(slot, 3).unwrap()
    }

    #[tokio::test]
    async fn prefers_the_longest_cached_prefix_then_the_lowest_slot() {
        let pool = Arc::new(SlotPool::new(3, 4, None));
        let a = pool.acquire(None, &[1, 2, 3]).await.unwrap();
        assert_eq!((a.slot(), a.prefix_hint()), (id(0), 0));
        a.record(vec![1, 2, 3, 9]);
        let b = pool.acquire(None, &[5]).await.unwrap();
        assert_eq!(b.slot(), id(1));
        b.record(vec![1, 2]);
        drop(a);
        drop(b);
        let c = pool.acquire(None, &[1, 2, 3, 4]).await.unwrap();
        assert_eq!(
            (c.slot(), c.prefix_hint()),
            (id(0), 3),
            "slot 0 holds 1 2 3"
        );
        let d = pool.acquire(None, &[1, 2, 7]).await.unwrap();
        assert_eq!((d.slot(), d.prefix_hint()), (id(1), 2), "slot 1 holds 1 2");
        let e = pool.acquire(None, &[1]).await.unwrap();
        assert_eq!(e.slot(), id(2));
    }

    #[tokio::test]
    async fn waits_within_the_bound_and_refuses_past_it() {
        let pool = Arc::new(SlotPool::new(1, 1, None));
        let first = pool.acquire(None, &[1]).await.unwrap();
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.acquire(None, &[2]).await.map(|l| l.slot()) });
        // Bounded wait until the second request is queued.
        tokio::time::timeout(LIMIT, async {
            while pool.waiting() == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the second request queues");
        assert_eq!(
            pool.acquire(None, &[3]).await.unwrap_err(),
            PoolError::Full {
                n_slots: 1,
                waiting: 1
            }
        );
        drop(first);
        let got = tokio::time::timeout(LIMIT, waiter).await.unwrap().unwrap();
        assert_eq!(got, Ok(id(0)));
        assert_eq!(pool.waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_the_queue() {
        let pool = Arc::new(SlotPool::new(1, 1, None));
        let held = pool.acquire(Some(id(0)), &[]).await.unwrap();
        let gone = tokio::time::timeout(Duration::from_millis(20), pool.acquire(None, &[])).await;
        assert!(gone.is_err(), "still waiting when dropped");
        assert_eq!(pool.waiting(), 0);
        drop(held);
        let again = tokio::time::timeout(LIMIT, pool.acquire(Some(id(0)), &[])).await;
        assert_eq!(again.unwrap().unwrap().slot(), id(0));
    }

    #[tokio::test]
    async fn cancel_waiting_removes_the_waiters_of_that_slot_only() {
        let pool = Arc::new(SlotPool::new(2, 4, None));
        let a = pool.acquire(Some(id(0)), &[]).await.unwrap();
        let b = pool.acquire(Some(id(1)), &[]).await.unwrap();
        let spawn = |want| {
            let p = pool.clone();
            tokio::spawn(async move { p.acquire(Some(id(want)), &[]).await.map(|l| l.slot()) })
        };
        let on0 = spawn(0);
        let on1 = spawn(1);
        tokio::time::timeout(LIMIT, async {
            while pool.waiting() < 2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("both queue");
        assert_eq!(pool.cancel_waiting(0), 1, "one waited on slot 0");
        let got = tokio::time::timeout(LIMIT, on0).await.unwrap().unwrap();
        assert_eq!(got, Err(PoolError::Cancelled { slot: 0 }));
        assert_eq!(pool.waiting(), 1, "the waiter of slot 1 still waits");
        assert_eq!(pool.cancel_waiting(7), 0, "no such slot");
        drop(b);
        let got = tokio::time::timeout(LIMIT, on1).await.unwrap().unwrap();
        assert_eq!(got, Ok(id(1)));
        assert_eq!(pool.waiting(), 0);
        // A later waiter on slot 0 is not cancelled by the earlier cancel.
        let later = spawn(0);
        drop(a);
        let got = tokio::time::timeout(LIMIT, later).await.unwrap().unwrap();
        assert_eq!(got, Ok(id(0)));
    }
}
