//! How long the engine's waits on each device usually last (format v1.3, FORMAT.md §19.6):
//! per device and per kind of step (prefill, decode), how many steps waited on it and the
//! longest wait of the recent ones. A reader judges a wait in progress against them: a
//! step blocked on a peer for a second when its waits on that peer never took more than a
//! few milliseconds is stalled *on that peer*, long before its step outlives ten
//! predictions.
//!
//! The writer learns them from its own device words ([`StepDevices`](crate::StepDevices)):
//! a wait ends when the slot's next device update no longer shows it. "Recent" counts
//! steps, not waits: ggml asks an RPC peer's buffer type about every tensor of a graph it
//! places, hundreds of waits of microseconds that would otherwise push a peer's real waits
//! (a whole ubatch's compute) out of any window of waits. The words live in the reserved
//! part of each device entry of the `devices` region, outside the region's seqlock: each
//! is one word stored Relaxed by the writer's thread and loaded Relaxed by readers, like a
//! slot's `PENDING` (a reader may see a count one ahead of its maximum, which changes
//! nothing it concludes).

use crate::devices::{DEVICE_LEN, MAX_DEVICES, TABLE_OFFSET};
use crate::slot::Phase;

/// Offsets of the wait words inside a device entry (§19.2, §19.6).
pub mod entry {
    /// Prefill steps whose waits on the device have ended (saturating count).
    pub const DEV_PREFILL_WAIT_STEPS: usize = 24;
    /// The longest wait of the recent ones, ns.
    pub const DEV_PREFILL_WAIT_MAX_NS: usize = 32;
    /// Decode steps whose waits on the device have ended (saturating count).
    pub const DEV_DECODE_WAIT_STEPS: usize = 40;
    /// The longest wait of the recent ones, ns.
    pub const DEV_DECODE_WAIT_MAX_NS: usize = 48;
}

// All four lie between the entry's flags and its name, in what was reserved.
const _: () = assert!(
    entry::DEV_PREFILL_WAIT_STEPS > crate::devices::entry::DEV_FLAGS
        && entry::DEV_DECODE_WAIT_MAX_NS + 8 <= crate::devices::entry::DEV_NAME
);

/// "Recent" is the last `WINDOW` to `2 * WINDOW` steps of a kind that waited on a device:
/// the writer keeps the maxima of the window of 16 steps in progress and of the window
/// before it, so one unusually long wait (a peer that came back after a freeze) is
/// forgotten after at most 32 more steps.
pub const WINDOW: u64 = 16;

/// What a reader needs before it trusts the history of a kind of wait: the waits of at
/// least two steps, so that a device's long waits (a whole ubatch computed on a peer) are
/// in it and not just the first step's first few.
pub const MIN_STEPS: u64 = 2;

/// The ended waits of one kind of step on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitHistory {
    /// How many steps of the kind waited on the device (0 = none, or a writer that does
    /// not publish them).
    pub steps: u64,
    /// The longest wait of the recent steps (see [`WINDOW`]), ns.
    pub recent_max_ns: u64,
}

impl WaitHistory {
    /// The longest recent wait, once enough steps waited to trust it ([`MIN_STEPS`]).
    pub fn learnt_max_ns(&self) -> Option<u64> {
        (self.steps >= MIN_STEPS).then_some(self.recent_max_ns)
    }
}

/// The wait histories of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceWaits {
    /// Waits of prefill steps.
    pub prefill: WaitHistory,
    /// Waits of decode steps.
    pub decode: WaitHistory,
}

impl DeviceWaits {
    /// The history that judges a wait of a step in `phase` (none for phases without one:
    /// saves, restores, and a phase this reader does not know).
    pub fn for_phase(&self, phase: Phase) -> Option<&WaitHistory> {
        match phase {
            Phase::Prefill => Some(&self.prefill),
            Phase::Decode => Some(&self.decode),
            _ => None,
        }
    }
}

/// Where the wait words of one device and kind of step lie inside the `devices` item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WordOffsets {
    pub steps: usize,
    pub max_ns: usize,
}

/// The wait words of device `id` (1-based) for `phase`; none for another phase or id.
pub(crate) fn word_offsets(id: u64, phase: Phase) -> Option<WordOffsets> {
    let j = usize::try_from(id.checked_sub(1)?).ok()?;
    if j >= MAX_DEVICES {
        return None;
    }
    let at = TABLE_OFFSET + j * DEVICE_LEN;
    match phase {
        Phase::Prefill => Some(WordOffsets {
            steps: at + entry::DEV_PREFILL_WAIT_STEPS,
            max_ns: at + entry::DEV_PREFILL_WAIT_MAX_NS,
        }),
        Phase::Decode => Some(WordOffsets {
            steps: at + entry::DEV_DECODE_WAIT_STEPS,
            max_ns: at + entry::DEV_DECODE_WAIT_MAX_NS,
        }),
        _ => None,
    }
}

/// The writer's window of one kind of wait on one device.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    steps: u64,
    /// `STEP_START_NS` of the latest step noted: a wait of a later step begins a new one
    /// (the same wait seen again, by another slot of a batched call or after a nested
    /// wait, changes only the maxima, which it cannot lower).
    last_step: u64,
    /// The longest wait of the window in progress and of the one before it.
    current_max: u64,
    previous_max: u64,
}

impl Window {
    /// Notes a wait of the step that started at `step_start`, ended after `ns`; returns
    /// the words to publish.
    fn note(&mut self, step_start: u64, ns: u64) -> WaitHistory {
        if step_start > self.last_step {
            if self.steps % WINDOW == 0 {
                self.previous_max = self.current_max;
                self.current_max = 0;
            }
            self.steps = self.steps.saturating_add(1);
            self.last_step = step_start;
        }
        self.current_max = self.current_max.max(ns);
        WaitHistory {
            steps: self.steps,
            recent_max_ns: self.current_max.max(self.previous_max),
        }
    }
}

/// The writer's side: every device's windows, fed with the waits its slots' device words
/// show ending.
#[derive(Debug, Default)]
pub(crate) struct WaitLearner {
    windows: [[Window; 2]; MAX_DEVICES],
}

impl WaitLearner {
    /// A wait on device `id` (1-based) by the step in `phase` that started at
    /// `step_start`, ended after `ns`: the words to store and where; none for a phase or
    /// device without history.
    pub(crate) fn note(
        &mut self,
        id: u64,
        phase: Phase,
        step_start: u64,
        ns: u64,
    ) -> Option<(WordOffsets, WaitHistory)> {
        let offsets = word_offsets(id, phase)?;
        let kind = usize::from(phase == Phase::Decode);
        let window = &mut self.windows[(id - 1) as usize][kind];
        Some((offsets, window.note(step_start, ns)))
    }

    /// Forgets everything (the placement was published again).
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_sit_in_the_reserved_part_of_each_entry() {
        let at = TABLE_OFFSET;
        assert_eq!(
            word_offsets(1, Phase::Prefill),
            Some(WordOffsets {
                steps: at + 24,
                max_ns: at + 32,
            })
        );
        let at = TABLE_OFFSET + 15 * 256;
        assert_eq!(
            word_offsets(16, Phase::Decode),
            Some(WordOffsets {
                steps: at + 40,
                max_ns: at + 48,
            })
        );
        for (id, phase) in [(0, Phase::Prefill), (17, Phase::Decode), (1, Phase::Save)] {
            assert_eq!(word_offsets(id, phase), None, "{id} {phase:?}");
        }
    }

    #[test]
    fn the_recent_maxima_forget_a_long_wait_after_two_windows_of_steps() {
        let mut w = Window::default();
        // Step 1 waits 5 us once; each later step waits 10 ns, a hundred times (the
        // allocator's questions): none of them pushes the long one out, only steps do.
        let h = w.note(1, 5_000);
        assert_eq!((h.steps, h.recent_max_ns), (1, 5_000));
        for step in 2..=2 * WINDOW {
            for _ in 0..100 {
                let h = w.note(step, 10);
                assert_eq!((h.steps, h.recent_max_ns), (step, 5_000));
            }
        }
        let h = w.note(2 * WINDOW + 1, 20);
        let expected = WaitHistory {
            steps: 2 * WINDOW + 1,
            recent_max_ns: 20,
        };
        assert_eq!(h, expected);
    }

    #[test]
    fn a_wait_of_an_earlier_step_is_no_new_step() {
        let mut w = Window::default();
        assert_eq!(w.note(100, 40).steps, 1);
        // The same step's longer wait, and a slot of the same call whose step began
        // earlier: the maximum grows, the steps do not.
        assert_eq!(w.note(100, 90), w.note(50, 1));
        assert_eq!(w.note(100, 1).recent_max_ns, 90);
        assert_eq!(w.note(300, 1).steps, 2);
    }

    #[test]
    fn a_history_speaks_from_its_second_step() {
        let h = |steps| WaitHistory {
            steps,
            recent_max_ns: 7,
        };
        assert_eq!(h(MIN_STEPS - 1).learnt_max_ns(), None);
        assert_eq!(h(MIN_STEPS).learnt_max_ns(), Some(7));
        let d = DeviceWaits {
            prefill: h(1),
            decode: h(2),
        };
        assert_eq!(d.for_phase(Phase::Decode), Some(&h(2)));
        assert_eq!(d.for_phase(Phase::Restore), None);
    }

    #[test]
    fn the_learner_keeps_devices_and_kinds_apart() {
        let mut l = WaitLearner::default();
        let (at, h) = l.note(2, Phase::Prefill, 1, 50).unwrap();
        assert_eq!(at, word_offsets(2, Phase::Prefill).unwrap());
        assert_eq!(h.steps, 1);
        let (_, h) = l.note(2, Phase::Decode, 2, 7).unwrap();
        assert_eq!(h.recent_max_ns, 7);
        assert_eq!(l.note(3, Phase::Prefill, 3, 9).unwrap().1.steps, 1);
        let (_, h) = l.note(2, Phase::Prefill, 4, 1).unwrap();
        assert_eq!((h.steps, h.recent_max_ns), (2, 50));
        assert!(l.note(2, Phase::Save, 5, 1).is_none());
        l.reset();
        assert_eq!(l.note(2, Phase::Prefill, 6, 1).unwrap().1.steps, 1);
    }
}
