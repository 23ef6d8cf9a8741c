//! How long the engine's waits on each device usually last (format v1.3, FORMAT.md §19.6):
//! per device and per kind of step (prefill, decode), how many waits have ended and the
//! longest of the recent ones. A reader judges a wait in progress against them: a step
//! blocked on a peer for a second when its waits on that peer never took more than a few
//! milliseconds is stalled *on that peer*, long before its step outlives ten predictions.
//!
//! The writer learns them from its own device words ([`StepDevices`](crate::StepDevices)):
//! a wait ends when the slot's next device update no longer shows it. The words live in
//! the reserved part of each device entry of the `devices` region, outside the region's
//! seqlock: each is one word stored Relaxed by the writer's thread and loaded Relaxed by
//! readers, like a slot's `PENDING` (a reader may see a count one ahead of its maximum,
//! which changes nothing it concludes).

use crate::devices::{DEVICE_LEN, MAX_DEVICES, TABLE_OFFSET};
use crate::slot::Phase;

/// Offsets of the wait words inside a device entry (§19.2, §19.6).
pub mod entry {
    /// Waits of prefill steps on the device that have ended (saturating count).
    pub const DEV_PREFILL_WAITS: usize = 24;
    /// The longest of the recent ones, ns.
    pub const DEV_PREFILL_WAIT_MAX_NS: usize = 32;
    /// Waits of decode steps on the device that have ended (saturating count).
    pub const DEV_DECODE_WAITS: usize = 40;
    /// The longest of the recent ones, ns.
    pub const DEV_DECODE_WAIT_MAX_NS: usize = 48;
}

// All four lie between the entry's flags and its name, in what was reserved.
const _: () = assert!(
    entry::DEV_PREFILL_WAITS > crate::devices::entry::DEV_FLAGS
        && entry::DEV_DECODE_WAIT_MAX_NS + 8 <= crate::devices::entry::DEV_NAME
);

/// "Recent" is the last `WINDOW` to `2 * WINDOW` ended waits of a kind on a device: the
/// writer keeps the longest of the window in progress and of the one before it, so one
/// unusually long wait (a peer that came back after a freeze) is forgotten after at most
/// 128 more.
pub const WINDOW: u64 = 64;

/// What a reader needs before it trusts the history of a kind of wait: at least this many
/// ended (32), so that the longest of them stands for the device's normal waits and not
/// for the first few steps of a run.
pub const MIN_WAITS: u64 = 32;

/// The ended waits of one kind of step on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitHistory {
    /// How many have ended (0 = none, or a writer that does not publish them).
    pub count: u64,
    /// The longest of the recent ones (see [`WINDOW`]), ns.
    pub recent_max_ns: u64,
}

impl WaitHistory {
    /// The longest recent wait, when enough waits ended to trust it ([`MIN_WAITS`]).
    pub fn learnt_max_ns(&self) -> Option<u64> {
        (self.count >= MIN_WAITS).then_some(self.recent_max_ns)
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

/// Offset inside the `devices` item of the wait words of device `id` (1-based) for
/// `phase`: `(count, recent max)`; none for another phase or id.
pub(crate) fn word_offsets(id: u64, phase: Phase) -> Option<(usize, usize)> {
    let j = usize::try_from(id.checked_sub(1)?).ok()?;
    if j >= MAX_DEVICES {
        return None;
    }
    let at = TABLE_OFFSET + j * DEVICE_LEN;
    match phase {
        Phase::Prefill => Some((
            at + entry::DEV_PREFILL_WAITS,
            at + entry::DEV_PREFILL_WAIT_MAX_NS,
        )),
        Phase::Decode => Some((
            at + entry::DEV_DECODE_WAITS,
            at + entry::DEV_DECODE_WAIT_MAX_NS,
        )),
        _ => None,
    }
}

/// The writer's window of one kind of wait on one device.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    count: u64,
    current_max: u64,
    previous_max: u64,
    /// `(since, longest duration)` of the last wait noted: the same wait reported again
    /// (for another slot of a batched call, or ended again after a nested wait on another
    /// device) is not counted twice.
    last: Option<(u64, u64)>,
}

impl Window {
    /// Notes a wait that began at `since` and lasted `ns`; returns the words to publish.
    fn note(&mut self, since: u64, ns: u64) -> WaitHistory {
        match self.last {
            Some((s, longest)) if s == since => {
                let longest = longest.max(ns);
                self.last = Some((since, longest));
                self.current_max = self.current_max.max(longest);
            }
            _ => {
                if self.count % WINDOW == 0 {
                    self.previous_max = self.current_max;
                    self.current_max = 0;
                }
                self.count = self.count.saturating_add(1);
                self.current_max = self.current_max.max(ns);
                self.last = Some((since, ns));
            }
        }
        WaitHistory {
            count: self.count,
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
    /// A wait on device `id` (1-based) by a step in `phase`, begun at `since`, ended after
    /// `ns`: the words to store and where (count offset, max offset); none for a phase or
    /// device without history.
    pub(crate) fn note(
        &mut self,
        id: u64,
        phase: Phase,
        since: u64,
        ns: u64,
    ) -> Option<((usize, usize), WaitHistory)> {
        let offsets = word_offsets(id, phase)?;
        let kind = usize::from(phase == Phase::Decode);
        let window = &mut self.windows[(id - 1) as usize][kind];
        Some((offsets, window.note(since, ns)))
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
        let first = word_offsets(1, Phase::Prefill).unwrap();
        assert_eq!(first, (TABLE_OFFSET + 24, TABLE_OFFSET + 32));
        assert_eq!(
            word_offsets(16, Phase::Decode),
            Some((TABLE_OFFSET + 15 * 256 + 40, TABLE_OFFSET + 15 * 256 + 48))
        );
        for (id, phase) in [(0, Phase::Prefill), (17, Phase::Decode), (1, Phase::Save)] {
            assert_eq!(word_offsets(id, phase), None, "{id} {phase:?}");
        }
    }

    #[test]
    fn the_recent_maximum_forgets_a_long_wait_after_two_windows() {
        let mut w = Window::default();
        let mut since = 0;
        let mut note = |w: &mut Window, ns| {
            since += 1;
            w.note(since, ns)
        };
        assert_eq!(note(&mut w, 5_000).recent_max_ns, 5_000);
        for _ in 0..WINDOW - 1 {
            assert_eq!(note(&mut w, 10).recent_max_ns, 5_000);
        }
        // A new window begins: the long one is still in the previous.
        for _ in 0..WINDOW {
            assert_eq!(note(&mut w, 10).recent_max_ns, 5_000);
        }
        let h = note(&mut w, 20);
        assert_eq!(
            h,
            WaitHistory {
                count: 2 * WINDOW + 1,
                recent_max_ns: 20
            }
        );
    }

    #[test]
    fn the_same_wait_reported_again_is_counted_once_at_its_longest() {
        let mut w = Window::default();
        // A wait on A from 100, cut at 40 ns by a nested wait on another device, then ended
        // at 90 ns; and the same wait seen by a second slot of the call.
        assert_eq!(w.note(100, 40).count, 1);
        let h = w.note(100, 90);
        assert_eq!(
            h,
            WaitHistory {
                count: 1,
                recent_max_ns: 90
            }
        );
        assert_eq!(w.note(100, 90).count, 1);
        assert_eq!(w.note(300, 1).count, 2);
    }

    #[test]
    fn a_history_is_trusted_from_its_thirty_second_wait() {
        let h = |count| WaitHistory {
            count,
            recent_max_ns: 7,
        };
        assert_eq!(h(MIN_WAITS - 1).learnt_max_ns(), None);
        assert_eq!(h(MIN_WAITS).learnt_max_ns(), Some(7));
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
        assert_eq!((at, h.count), (word_offsets(2, Phase::Prefill).unwrap(), 1));
        assert_eq!(l.note(2, Phase::Decode, 2, 7).unwrap().1.recent_max_ns, 7);
        assert_eq!(l.note(3, Phase::Prefill, 3, 9).unwrap().1.count, 1);
        assert_eq!(
            l.note(2, Phase::Prefill, 4, 1).unwrap().1,
            WaitHistory {
                count: 2,
                recent_max_ns: 50
            }
        );
        assert!(l.note(2, Phase::Save, 5, 1).is_none());
        l.reset();
        assert_eq!(l.note(2, Phase::Prefill, 6, 1).unwrap().1.count, 1);
    }
}
