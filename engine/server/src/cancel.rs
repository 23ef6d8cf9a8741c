//! Cancelling a slot's running task from the front end (`POST /slots/{id}?action=cancel`)
//! without the task queue: the compute thread writes which task each slot runs, the front
//! end marks that task cancelled, and the compute thread stops it at its next step, as it
//! does when the task's client goes away.

use std::sync::atomic::{AtomicU64, Ordering};

/// Per slot: the task running (0: none) and the task asked to stop (0: none).
#[derive(Debug)]
pub struct CancelBoard {
    running: Vec<AtomicU64>,
    cancel: Vec<AtomicU64>,
}

impl CancelBoard {
    /// A board for `n_slots` slots, none running.
    pub fn new(n_slots: usize) -> Self {
        Self {
            running: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
            cancel: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Compute thread: task `task_id` (never 0) runs on `slot` now.
    pub fn started(&self, slot: usize, task_id: u64) {
        // Relaxed: a flag read at the next step, publishing no other data.
        if let Some(r) = self.running.get(slot) {
            r.store(task_id, Ordering::Relaxed);
        }
    }

    /// Compute thread: the task on `slot` has ended.
    pub fn ended(&self, slot: usize) {
        if let Some(r) = self.running.get(slot) {
            r.store(0, Ordering::Relaxed);
        }
    }

    /// Front end: stop whatever runs on `slot`; returns its task id (None: nothing runs,
    /// or no such slot).
    pub fn cancel(&self, slot: usize) -> Option<u64> {
        let id = self.running.get(slot)?.load(Ordering::Relaxed);
        if id == 0 {
            return None;
        }
        self.cancel[slot].store(id, Ordering::Relaxed);
        Some(id)
    }

    /// Compute thread: whether task `task_id` on `slot` was asked to stop.
    pub fn is_cancelled(&self, slot: usize, task_id: u64) -> bool {
        self.cancel
            .get(slot)
            .is_some_and(|c| c.load(Ordering::Relaxed) == task_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancels_only_the_task_that_runs() {
        let b = CancelBoard::new(2);
        assert_eq!(b.cancel(0), None, "idle");
        assert_eq!(b.cancel(5), None, "no such slot");
        b.started(0, 7);
        assert!(!b.is_cancelled(0, 7));
        assert_eq!(b.cancel(0), Some(7));
        assert!(b.is_cancelled(0, 7));
        assert!(!b.is_cancelled(1, 7));
        b.ended(0);
        b.started(0, 8);
        assert!(!b.is_cancelled(0, 8), "a later task is not cancelled");
        assert_eq!(b.cancel(0), Some(8));
        assert!(b.is_cancelled(0, 8));
    }
}
