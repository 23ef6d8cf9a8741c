//! Cancelling a slot's running task from the front end (`POST /slots/{id}?action=cancel`)
//! without the task queue: the compute thread writes which task each slot runs, the front
//! end marks that task cancelled, and the compute thread stops it at its next step, as it
//! does when the task's client goes away.
//!
//! One word per slot holds the task, the phase it began in and its fate: running,
//! cancelled, or finishing (past its last step, completing). A cancel and the task's own
//! end race for that word with compare-and-swap, so exactly one of them wins and the
//! cancel's answer is what happens: a task whose cancel landed ends as cancelled, even
//! when its last step ran on meanwhile, and a task that reached its end first is reported
//! as finishing, not as cancelled.

use hydra_layout::Phase;
use std::sync::atomic::{AtomicU64, Ordering};

/// The fate bits of a slot's word.
const FATE_BITS: u32 = 2;
/// The phase bits above them.
const KIND_BITS: u32 = 6;
const RUNNING: u64 = 0;
const CANCELLED: u64 = 1;
const FINISHING: u64 = 2;

/// A slot's word: `task_id` (never 0), the phase it began in and its fate; 0 when idle.
fn word(task_id: u64, kind: Phase, fate: u64) -> u64 {
    let kind = kind.to_raw() & ((1 << KIND_BITS) - 1);
    (task_id << (KIND_BITS + FATE_BITS)) | (kind << FATE_BITS) | fate
}

/// The task id, phase and fate a non-zero word holds.
fn unpack(w: u64) -> (u64, Phase, u64) {
    let kind = (w >> FATE_BITS) & ((1 << KIND_BITS) - 1);
    (
        w >> (KIND_BITS + FATE_BITS),
        Phase::from_raw(kind),
        w & ((1 << FATE_BITS) - 1),
    )
}

/// Per slot: the task running, the phase it began in and its fate (see the module).
#[derive(Debug)]
pub struct CancelBoard {
    slots: Vec<AtomicU64>,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The task stops at its next chunk, token or block, or, when its last one already ran,
    /// ends as cancelled instead of completing: every task the compute thread starts on
    /// the board reads it.
    Stopping {
        /// The task's id.
        task_id: u64,
        /// The phase it began in: a prefill (a generation's prompt too), a decode, a
        /// state save or restore.
        kind: Phase,
        /// An earlier cancel had already stopped it.
        again: bool,
    },
    /// The task had already run its last step and completes: the cancel changed nothing.
    Finishing {
        /// The task's id.
        task_id: u64,
        /// The phase it began in.
        kind: Phase,
    },
    /// No task runs on the slot (or there is no such slot).
    Idle,
}

impl CancelBoard {
    /// A board for `n_slots` slots, none running.
    pub fn new(n_slots: usize) -> Self {
        Self {
            slots: (0..n_slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Compute thread: task `task_id` (never 0), which begins as `kind`, runs on `slot`
    /// now.
    pub fn started(&self, slot: usize, task_id: u64, kind: Phase) {
        if let Some(w) = self.slots.get(slot) {
            // Relaxed: the word is the whole message (every field is in it).
            w.store(word(task_id, kind, RUNNING), Ordering::Relaxed);
        }
    }

    /// Compute thread: the task on `slot` has ended.
    pub fn ended(&self, slot: usize) {
        if let Some(w) = self.slots.get(slot) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Front end: stop the task that runs on `slot`; says what the cancel did.
    pub fn cancel(&self, slot: usize) -> Cancelled {
        let Some(w) = self.slots.get(slot) else {
            return Cancelled::Idle;
        };
        // Retries only while the compute thread changes the word between the load and the
        // swap (a task starting or ending): lock-free.
        let swapped = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
            let (task_id, kind, fate) = unpack(cur);
            (cur != 0 && fate == RUNNING).then(|| word(task_id, kind, CANCELLED))
        });
        match swapped {
            Ok(was) => {
                let (task_id, kind, _) = unpack(was);
                Cancelled::Stopping {
                    task_id,
                    kind,
                    again: false,
                }
            }
            Err(0) => Cancelled::Idle,
            Err(cur) => match unpack(cur) {
                (task_id, kind, FINISHING) => Cancelled::Finishing { task_id, kind },
                (task_id, kind, _) => Cancelled::Stopping {
                    task_id,
                    kind,
                    again: true,
                },
            },
        }
    }

    /// Compute thread: whether task `task_id` on `slot` was asked to stop.
    pub fn is_cancelled(&self, slot: usize, task_id: u64) -> bool {
        self.slots.get(slot).is_some_and(|w| {
            let (id, _, fate) = unpack(w.load(Ordering::Relaxed));
            id == task_id && fate == CANCELLED
        })
    }

    /// Compute thread: whether task `task_id` on `slot` must stop now: its client has
    /// gone (`client_gone`: a generation's output abandoned, or the receiving end of a
    /// reply dropped with the request), or the front end cancelled it.
    pub fn task_stops(&self, slot: usize, task_id: u64, client_gone: bool) -> bool {
        client_gone || self.is_cancelled(slot, task_id)
    }

    /// Compute thread: task `task_id` on `slot` has run its last step and would complete.
    /// True: it completes, and a cancel from now on answers [`Cancelled::Finishing`].
    /// False: a cancel landed first (answered [`Cancelled::Stopping`]), so the task must
    /// end as cancelled. A task not on the board completes.
    pub fn finishing(&self, slot: usize, task_id: u64) -> bool {
        let Some(w) = self.slots.get(slot) else {
            return true;
        };
        let swapped = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
            let (id, kind, fate) = unpack(cur);
            (cur != 0 && id == task_id && fate == RUNNING).then(|| word(id, kind, FINISHING))
        });
        match swapped {
            Ok(_) | Err(0) => true,
            Err(cur) => !matches!(unpack(cur), (id, _, CANCELLED) if id == task_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn stopping(task_id: u64, kind: Phase) -> Cancelled {
        Cancelled::Stopping {
            task_id,
            kind,
            again: false,
        }
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
        assert!(!b.is_cancelled(0, 6), "another task id");
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

    #[test]
    fn a_second_cancel_says_the_task_was_already_stopping() {
        let b = CancelBoard::new(1);
        b.started(0, 9, Phase::Decode);
        assert_eq!(b.cancel(0), stopping(9, Phase::Decode));
        assert_eq!(
            b.cancel(0),
            Cancelled::Stopping {
                task_id: 9,
                kind: Phase::Decode,
                again: true
            }
        );
        assert!(!b.finishing(0, 9), "a cancelled task does not complete");
    }

    #[test]
    fn a_task_past_its_last_step_completes_and_the_cancel_says_so() {
        let b = CancelBoard::new(1);
        b.started(0, 11, Phase::Prefill);
        assert!(b.finishing(0, 11));
        assert_eq!(
            b.cancel(0),
            Cancelled::Finishing {
                task_id: 11,
                kind: Phase::Prefill
            }
        );
        assert!(!b.is_cancelled(0, 11));
        assert!(b.finishing(0, 11), "asking again changes nothing");
        b.ended(0);
        assert_eq!(b.cancel(0), Cancelled::Idle);
        assert!(b.finishing(0, 11), "a task not on the board completes");
        assert!(CancelBoard::new(0).finishing(3, 1), "no such slot");
    }

    #[test]
    fn large_task_ids_and_every_phase_survive_the_word() {
        let b = CancelBoard::new(1);
        let id = (1 << 55) + 3;
        for kind in [Phase::Prefill, Phase::Decode, Phase::Save, Phase::Restore] {
            b.started(0, id, kind);
            assert_eq!(b.cancel(0), stopping(id, kind));
            assert!(b.is_cancelled(0, id));
        }
    }

    /// A cancel and the task's end raced from two threads, many times: exactly one wins,
    /// and the cancel's answer says which.
    #[test]
    fn a_racing_cancel_and_end_agree_on_what_happened() {
        const ROUNDS: u64 = 2_000;
        let board = Arc::new(CancelBoard::new(1));
        let go = Arc::new(Barrier::new(2));
        let front = {
            let (board, go) = (Arc::clone(&board), Arc::clone(&go));
            std::thread::spawn(move || {
                (1..=ROUNDS)
                    .map(|_| {
                        go.wait();
                        let answer = board.cancel(0);
                        go.wait();
                        answer
                    })
                    .collect::<Vec<_>>()
            })
        };
        let mut completed = Vec::new();
        for id in 1..=ROUNDS {
            board.started(0, id, Phase::Decode);
            go.wait();
            completed.push(board.finishing(0, id));
            go.wait();
            board.ended(0);
        }
        let answers = front.join().expect("the front end thread");
        for (id, (done, answer)) in (1..=ROUNDS).zip(completed.iter().zip(&answers)) {
            let expected = if *done {
                Cancelled::Finishing {
                    task_id: id,
                    kind: Phase::Decode,
                }
            } else {
                stopping(id, Phase::Decode)
            };
            assert_eq!(*answer, expected, "round {id}");
        }
    }
}
