//! Cancelling a slot's running task from the front end (`POST /slots/{id}?action=cancel`)
//! without the task queue: the compute thread writes which task each slot runs, the front
//! end marks that task cancelled, and the compute thread stops it at its next step, as it
//! does when the task's client goes away.

use hydra_layout::Phase;
use std::sync::atomic::{AtomicU64, Ordering};

/// Per slot: the task running (0: none), the phase it began in, and the task asked to
/// stop (0: none).
#[derive(Debug)]
pub struct CancelBoard {
    running: Vec<AtomicU64>,
    kind: Vec<AtomicU64>,
    cancel: Vec<AtomicU64>,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The task stops at its next chunk, token or block: every task the compute thread
    /// starts on the board reads it.
    Stopping {
        /// The task's id.
        task_id: u64,
        /// The phase it began in: a prefill (a generation's prompt too), a decode, a
        /// state save or restore.
        kind: Phase,
    },
    /// No task runs on the slot (or there is no such slot).
    Idle,
}

impl CancelBoard {
    /// A board for `n_slots` slots, none running.
    pub fn new(n_slots: usize) -> Self {
        Self {
            running: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
            kind: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
            cancel: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Compute thread: task `task_id` (never 0), which begins as `kind`, runs on `slot`
    /// now.
    pub fn started(&self, slot: usize, task_id: u64, kind: Phase) {
        if let (Some(r), Some(k)) = (self.running.get(slot), self.kind.get(slot)) {
            k.store(kind.to_raw(), Ordering::Relaxed);
            // Release: a front end that reads this id (Acquire) reads its kind too.
            r.store(task_id, Ordering::Release);
        }
    }

    /// Compute thread: the task on `slot` has ended.
    pub fn ended(&self, slot: usize) {
        if let Some(r) = self.running.get(slot) {
            r.store(0, Ordering::Relaxed);
        }
    }

    /// Front end: stop the task that runs on `slot`; says which.
    pub fn cancel(&self, slot: usize) -> Cancelled {
        let (Some(running), Some(kind)) = (self.running.get(slot), self.kind.get(slot)) else {
            return Cancelled::Idle;
        };
        let task_id = running.load(Ordering::Acquire);
        if task_id == 0 {
            return Cancelled::Idle;
        }
        // Relaxed: a flag read at the next step, publishing no other data.
        self.cancel[slot].store(task_id, Ordering::Relaxed);
        Cancelled::Stopping {
            task_id,
            kind: Phase::from_raw(kind.load(Ordering::Relaxed)),
        }
    }

    /// Compute thread: whether task `task_id` on `slot` was asked to stop.
    pub fn is_cancelled(&self, slot: usize, task_id: u64) -> bool {
        self.cancel
            .get(slot)
            .is_some_and(|c| c.load(Ordering::Relaxed) == task_id)
    }

    /// Compute thread: whether task `task_id` on `slot` must stop now: its client has
    /// gone (`client_gone`: a generation's output abandoned, or the receiving end of a
    /// reply dropped with the request), or the front end cancelled it.
    pub fn task_stops(&self, slot: usize, task_id: u64, client_gone: bool) -> bool {
        client_gone || self.is_cancelled(slot, task_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopping(task_id: u64, kind: Phase) -> Cancelled {
        Cancelled::Stopping { task_id, kind }
    }

    #[test]
    fn cancels_only_the_task_that_runs() {
        let b = CancelBoard::new(2);
        assert_eq!(b.cancel(0), Cancelled::Idle, "idle");
        assert_eq!(b.cancel(5), Cancelled::Idle, "no such slot");
        b.started(0, 7, Phase::Prefill);
        assert!(!b.is_cancelled(0, 7));
        assert_eq!(b.cancel(0), stopping(7, Phase::Prefill));
        assert!(b.is_cancelled(0, 7));
        assert!(!b.is_cancelled(1, 7));
        b.ended(0);
        b.started(0, 8, Phase::Decode);
        assert!(!b.is_cancelled(0, 8), "a later task is not cancelled");
        assert_eq!(b.cancel(0), stopping(8, Phase::Decode));
        assert!(b.is_cancelled(0, 8));
    }

    #[test]
    fn saves_and_restores_stop_too() {
        let b = CancelBoard::new(1);
        for (id, kind) in [(3, Phase::Save), (4, Phase::Restore)] {
            b.started(0, id, kind);
            assert_eq!(b.cancel(0), stopping(id, kind));
            assert!(b.is_cancelled(0, id));
            b.ended(0);
        }
        assert_eq!(b.cancel(0), Cancelled::Idle);
    }
}
