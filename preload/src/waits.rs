//! The wait of this thread's tracked call on a device, published while the host thread
//! blocks in an interposed ggml call (format v1.3, FORMAT.md §5.6; which calls, and how
//! their device is found: [`crate::devices`]). Waits nest (a copy between two peers gets
//! from one and sets into the other): the innermost names the device, and when it ends
//! the one around it is published again, with its own start.

use crate::interpose;
use crate::layers;
use crate::registry;
use hydra_layout::{clock, StepDevices};
use std::cell::Cell;

thread_local! {
    /// The wait published for this thread's call now: `(device id, since ns)`.
    static CURRENT: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// A wait of this thread's tracked call on a device, published while it lasts: made by
/// [`Wait::begin`]; when dropped (a normal return or an unwinding exception) the wait
/// around it, if any, is published again, else none.
#[must_use = "the wait is cleared when this is dropped"]
pub struct Wait {
    /// The wait around this one (`None` inside: none), when this one was published.
    outer: Option<Option<(u64, u64)>>,
}

impl Wait {
    /// The host thread is about to block on device `device` (none: not a waitable device,
    /// and nothing is published).
    pub fn begin(device: Option<u64>) -> Self {
        let Some(device) = device else {
            return Self { outer: None };
        };
        let now = clock::monotonic_ns();
        let Ok(outer) = CURRENT.try_with(|c| c.replace(Some((device, now)))) else {
            return Self { outer: None };
        };
        if !publish(&wait_words(Some((device, now)))) {
            let _ = CURRENT.try_with(|c| c.set(outer));
            return Self { outer: None };
        }
        Self { outer: Some(outer) }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if let Some(outer) = self.outer {
            let _ = CURRENT.try_with(|c| c.set(outer));
            publish(&wait_words(outer));
        }
    }
}

/// The step's device words for a wait on `(device, since)`, or for none.
fn wait_words(wait: Option<(u64, u64)>) -> StepDevices {
    let (wait_device, wait_since_ns) = wait.unwrap_or((0, 0));
    StepDevices {
        layers_sent: 0,
        wait_device,
        wait_since_ns,
    }
}

/// Publishes `d` for the slots of this thread's tracked call; false when there is none.
fn publish(d: &StepDevices) -> bool {
    interpose::guarded_bool(|| {
        layers::with_call_slots(|ctx, slots| {
            registry::with_existing(ctx, |t| t.step_devices(slots, d))
        })
        .flatten()
        .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wait_is_published_without_a_tracked_call_or_a_device() {
        // Not a waitable device, or no tracked call on this thread: nothing published,
        // nothing to restore, and no wait left behind.
        for device in [None, Some(3)] {
            let w = Wait::begin(device);
            assert!(w.outer.is_none());
            drop(w);
            assert_eq!(CURRENT.with(Cell::get), None);
        }
    }

    #[test]
    fn the_words_of_a_wait_and_of_none() {
        assert_eq!(
            wait_words(Some((2, 77))),
            StepDevices {
                layers_sent: 0,
                wait_device: 2,
                wait_since_ns: 77
            }
        );
        assert_eq!(wait_words(None), StepDevices::default());
    }
}
