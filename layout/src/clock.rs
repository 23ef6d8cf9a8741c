//! Clocks and process identity used in the header.
//!
//! All progress timestamps are CLOCK_MONOTONIC nanoseconds: the same clock in every process
//! of one boot (and what .NET's `Stopwatch` reads on Linux). Wall-clock time appears only
//! in the creation anchors, for display.

use rustix::time::{clock_gettime, ClockId};

/// CLOCK_MONOTONIC now, in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    timespec_ns(clock_gettime(ClockId::Monotonic))
}

/// CLOCK_REALTIME now, in nanoseconds since the Unix epoch.
#[inline]
pub fn realtime_ns() -> u64 {
    timespec_ns(clock_gettime(ClockId::Realtime))
}

fn timespec_ns(ts: rustix::time::Timespec) -> u64 {
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), or an empty string when
/// unavailable. Monotonic timestamps are only comparable between processes of one boot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Start time of process `pid` in nanoseconds since boot (from `/proc/<pid>/stat`), or
/// `None` when it cannot be read. Together with the pid it names a process even after
/// pid reuse.
pub fn process_start_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain spaces or ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 22 overall is starttime; `rest` starts at field 3.
    let ticks: u64 = rest.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(ticks.saturating_mul(1_000_000_000) / hz)
}

/// A random 64-bit value from the kernel (never 0).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let filled =
        rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()).unwrap_or(0);
    let v = u64::from_ne_bytes(buf);
    if filled == 8 && v != 0 {
        v
    } else {
        // Fall back to a mix of time and pid; uniqueness, not secrecy, is what matters here.
        realtime_ns() ^ (u64::from(std::process::id()) << 32) ^ monotonic_ns().rotate_left(17) | 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
    }

    #[test]
    fn own_process_start_is_readable_and_in_the_past() {
        let start = process_start_ns(std::process::id()).expect("/proc/self/stat readable");
        // Start time is since boot; CLOCK_BOOTTIME >= it. Monotonic excludes suspend, so
        // compare against boottime.
        let boot = timespec_ns(clock_gettime(ClockId::Boottime));
        assert!(start <= boot);
    }

    #[test]
    fn random_values_differ() {
        assert_ne!(random_u64(), random_u64());
    }
}
