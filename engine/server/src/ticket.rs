//! Withdrawing a task that still waits in the compute thread's queue: its client went away,
//! or `POST /slots/{id}?action=cancel&waiting=true` asked for the slot's waiting requests
//! to leave.
//!
//! Every task carries a [`Ticket`]: queued, started, or withdrawn. The compute thread takes
//! a task by swapping queued for started; the front end withdraws one by swapping queued
//! for withdrawn. Exactly one of them wins, and the winner takes the task off the slot's
//! pending count in the segment, so `requests_waiting` drops the moment a request is
//! withdrawn, while the compute thread may be inside a long step. The compute thread
//! answers a withdrawn task (the `cancelled` error) and drops it at its next iteration,
//! never starting it.

use hydra_layout::PendingCounter;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

/// A task's place in the queue, shared by the task and whoever may withdraw it.
#[derive(Debug, Clone, Default)]
pub struct Ticket(Arc<AtomicU8>);

impl Ticket {
    /// Queued to `to` (started or withdrawn): true for the one swap that wins, which also
    /// takes the task off `slot`'s pending count (`pending`; None: not publishing).
    fn leave(&self, to: u8, slot: usize, pending: Option<&PendingCounter>) -> bool {
        // Relaxed: the word is the whole message; the pending count is a display counter.
        let won = self
            .0
            .compare_exchange(QUEUED, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if let (true, Some(p)) = (won, pending) {
            p.dequeued(slot);
        }
        won
    }

    /// Compute thread: takes the task for `slot` to run it; false when it was withdrawn
    /// first.
    pub fn start(&self, slot: usize, pending: Option<&PendingCounter>) -> bool {
        self.leave(STARTED, slot, pending)
    }

    /// Front end: withdraws the task for `slot`; false when it had already started (or
    /// left).
    pub fn withdraw(&self, slot: usize, pending: Option<&PendingCounter>) -> bool {
        self.leave(WITHDRAWN, slot, pending)
    }

    /// Whether the task was withdrawn.
    pub fn is_withdrawn(&self) -> bool {
        self.0.load(Ordering::Relaxed) == WITHDRAWN
    }

    /// Whether the task still waits.
    fn is_queued(&self) -> bool {
        self.0.load(Ordering::Relaxed) == QUEUED
    }
}

/// The front end's list, per slot, of the tickets of tasks posted for that slot that may
/// still wait, and the segment's pending count they are on.
#[derive(Debug, Clone)]
pub struct WaitingTasks {
    slots: Arc<Vec<Mutex<Vec<Ticket>>>>,
    pending: Option<PendingCounter>,
}

impl WaitingTasks {
    /// Lists for `n_slots` slots; `pending` is the segment's count (None: not publishing).
    pub fn new(n_slots: usize, pending: Option<PendingCounter>) -> Self {
        Self {
            slots: Arc::new((0..n_slots).map(|_| Mutex::new(Vec::new())).collect()),
            pending,
        }
    }

    fn lock(&self, slot: usize) -> Option<MutexGuard<'_, Vec<Ticket>>> {
        // Nothing panics while holding the lock; a poisoned one still holds valid data.
        let m = self.slots.get(slot)?;
        Some(m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A task with `ticket` is posted for `slot`: counts it pending and lists it (the
    /// tickets of tasks that left are dropped from the list here).
    pub fn queued(&self, slot: usize, ticket: &Ticket) {
        if let Some(p) = &self.pending {
            p.queued(slot);
        }
        if let Some(mut list) = self.lock(slot) {
            list.retain(Ticket::is_queued);
            list.push(ticket.clone());
        }
    }

    /// Withdraws one task for `slot` (its client went away, or its post failed); true when
    /// it still waited.
    pub fn withdraw(&self, slot: usize, ticket: &Ticket) -> bool {
        ticket.withdraw(slot, self.pending.as_ref())
    }

    /// Withdraws every task still waiting for `slot`; returns how many.
    pub fn withdraw_all(&self, slot: usize) -> usize {
        let tickets = self.lock(slot).map(|mut l| std::mem::take(&mut *l));
        tickets
            .unwrap_or_default()
            .iter()
            .filter(|t| self.withdraw(slot, t))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn a_ticket_is_started_or_withdrawn_never_both() {
        let t = Ticket::default();
        assert!(t.start(0, None));
        assert!(!t.withdraw(0, None), "started first");
        assert!(!t.is_withdrawn());
        let t = Ticket::default();
        assert!(t.withdraw(0, None));
        assert!(t.is_withdrawn());
        assert!(!t.start(0, None), "withdrawn first");
        assert!(!t.withdraw(0, None), "once");
    }

    #[test]
    fn withdraw_all_takes_the_slots_waiting_tickets_only() {
        let w = WaitingTasks::new(2, None);
        let (a, b, c, other) = Default::default();
        for t in [&a, &b, &c] {
            w.queued(0, t);
        }
        w.queued(1, &other);
        assert!(a.start(0, None), "a runs");
        assert_eq!(w.withdraw_all(0), 2, "b and c waited");
        assert!(b.is_withdrawn() && c.is_withdrawn());
        assert!(!other.is_withdrawn(), "another slot's task stays");
        assert_eq!(w.withdraw_all(0), 0, "the list is empty now");
        assert_eq!(w.withdraw_all(7), 0, "no such slot");
        let late = Ticket::default();
        w.queued(0, &late);
        assert_eq!(w.withdraw_all(0), 1, "a task posted after");
    }

    /// The compute thread's start and a withdrawal raced, many times: exactly one wins.
    #[test]
    fn a_racing_start_and_withdrawal_have_one_winner() {
        const ROUNDS: usize = 2_000;
        let tickets: Arc<Vec<Ticket>> = Arc::new((0..ROUNDS).map(|_| Ticket::default()).collect());
        let go = Arc::new(Barrier::new(2));
        let front = {
            let (tickets, go) = (Arc::clone(&tickets), Arc::clone(&go));
            std::thread::spawn(move || {
                tickets
                    .iter()
                    .map(|t| {
                        go.wait();
                        t.withdraw(0, None)
                    })
                    .collect::<Vec<_>>()
            })
        };
        let started: Vec<bool> = tickets
            .iter()
            .map(|t| {
                go.wait();
                t.start(0, None)
            })
            .collect();
        let withdrawn = front.join().expect("the front end thread");
        for (i, (s, w)) in started.iter().zip(&withdrawn).enumerate() {
            assert!(s ^ w, "round {i}: started {s}, withdrawn {w}");
        }
    }
}
