//! Whether each RPC peer reads what the engine sends it (format v1.3, FORMAT §19.7).
//!
//! A ggml RPC client sends a peer its graphs without waiting for an answer, so a host can
//! run seconds ahead of a peer and first block on it long after the peer stopped. The
//! host's kernel knows earlier: a peer that reads nothing of what it was sent leaves the
//! right edge of its receive window where it was, while its window fills or the host's
//! bytes wait unsent. The writer watches each peer's socket (`TCP_INFO`, no traffic) and
//! publishes, per device, since when the peer has read nothing while data waited for it.
//!
//! One word per device entry, in what was reserved after the wait histories, outside the
//! region's seqlock: stored Relaxed by the one thread that watches the sockets, loaded
//! Relaxed by readers, as the wait histories are (§19.6).

use crate::devices::{DEVICE_LEN, MAX_DEVICES, TABLE_OFFSET};

/// Offset of the word inside a device entry (§19.2).
pub mod entry {
    /// `CLOCK_MONOTONIC` ns since when the peer has read nothing of the bytes queued to
    /// it; 0 = it keeps up (or the device is no peer, or nothing is known yet).
    pub const DEV_UNREAD_SINCE_NS: usize = 56;
}

const _: () = assert!(
    entry::DEV_UNREAD_SINCE_NS >= crate::device_waits::entry::DEV_DECODE_WAIT_MAX_NS + 8
        && entry::DEV_UNREAD_SINCE_NS + 8 <= crate::devices::entry::DEV_NAME
);

/// Where device `id`'s (1-based) word lies inside the `devices` item; none for an id
/// outside `1..=16`.
pub(crate) fn word_offset(id: u64) -> Option<usize> {
    let j = usize::try_from(id.checked_sub(1)?).ok()?;
    (j < MAX_DEVICES).then(|| TABLE_OFFSET + j * DEVICE_LEN + entry::DEV_UNREAD_SINCE_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_follows_the_wait_histories_of_each_entry() {
        assert_eq!(word_offset(1), Some(TABLE_OFFSET + 56));
        assert_eq!(word_offset(16), Some(TABLE_OFFSET + 15 * 256 + 56));
        assert_eq!(word_offset(0), None);
        assert_eq!(word_offset(17), None);
        assert_eq!(word_offset(u64::MAX), None);
    }
}
