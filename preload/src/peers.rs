//! Whether each RPC peer reads what the host sends it (format v1.3, FORMAT §19.7).
//!
//! ggml's RPC client (0c1e570) sends a peer its graphs without waiting for an answer, so a
//! pipeline-parallel llama-server runs seconds ahead of a frozen peer and first blocks on
//! it 7-10 s later (measured with two peers on loopback). The host's kernel knows at once:
//! a peer whose process reads nothing leaves the right edge of its receive window (bytes
//! acked plus the window it advertises) where it was, while its window fills and then the
//! host's bytes wait unsent. This module watches each RPC device's socket with
//! `getsockopt(TCP_INFO)` from the preload's background thread (no traffic, nothing sent
//! on llama.cpp's connection) and tells the tracker since when each peer has read nothing.
//!
//! The socket of a device is found by its endpoint: among this process's descriptors, the
//! TCP socket whose peer address is the endpoint (a numeric `host:port`, as llama-server's
//! `--rpc` is normally given; a name is never resolved, since that would be traffic: such
//! a device is matched by its port alone, when exactly one socket has that remote port).

use std::net::SocketAddr;
use std::os::fd::RawFd;

/// What one `TCP_INFO` sample says of the host's side of a peer's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// Bytes the peer's kernel has acknowledged (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// The receive window the peer last advertised (`tcpi_snd_wnd`).
    pub window: u32,
    /// Bytes queued on the host and not yet sent (`tcpi_notsent_bytes`).
    pub notsent: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Bytes received from the peer (`tcpi_bytes_received`): a peer that answers is alive.
    pub bytes_received: u64,
}

impl Sample {
    /// The right edge of the peer's receive window, in bytes of the stream: it moves only
    /// when the peer's process reads (or its buffer grows).
    fn right_edge(&self) -> u64 {
        self.bytes_acked.saturating_add(u64::from(self.window))
    }
}

/// The right edge must pass the episode's by more than this plus a sixteenth of the bytes
/// that arrived since to count as a read (4 KiB): a receiver's advertised window is
/// rounded to its window scale and follows its buffer's accounting, so the edge of a peer
/// that reads nothing still creeps as data arrives (about 20 KB per 2 MB burst, measured
/// on loopback).
pub const MIN_READ_BYTES: u64 = 4 << 10;

/// Bytes that must arrive between two samples for a window under half to begin an episode
/// (8 KiB): a read of fewer bytes could never show as one (it moves the right edge by less
/// than [`MIN_READ_BYTES`] plus a sixteenth of it), so an episode begun by them could not
/// end until more came, however promptly the peer read them.
pub const MIN_ARRIVAL_BYTES: u64 = 2 * MIN_READ_BYTES;

/// One peer's reading, from its samples: since when it has read nothing while data
/// waited for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// The largest window the peer advertised.
    max_window: u32,
    /// The previous sample (none before the first).
    last: Option<Sample>,
    /// The data the peer may not have read (none while it keeps up).
    episode: Option<Episode>,
}

/// Data that arrived at a peer and that it may not have read: since when, and what the
/// samples after showed of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Episode {
    /// The sample that first saw the data, or the last read after it.
    anchor: Sample,
    /// `CLOCK_MONOTONIC` ns of the anchor's sample (never 0).
    since_ns: u64,
    /// What the samples since show.
    seen: Seen,
}

/// What the samples after an episode's anchor show of its data (see [`Reading::observe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Nothing yet: the anchor's data may have been read.
    Unknown,
    /// Unread: the anchor's time is published.
    Unread,
    /// Shown unread, then this many samples in a row without evidence either way (at
    /// most [`QUIET_KEPT`]): not published, the anchor kept.
    Quiet(u32),
}

/// Quiet samples in a row that a shown episode outlives, hidden (see [`Reading::observe`]): 2.
pub const QUIET_KEPT: u32 = 2;

impl Reading {
    /// Takes the sample `s` taken at `now_ns` and returns since when the peer has read
    /// nothing (0: it keeps up). The peer has read nothing of the data an anchor sample
    /// saw arrive as long as the right edge has not passed the anchor's by more than
    /// [`MIN_READ_BYTES`] plus a sixteenth of what arrived since; the samples **show** it
    /// unread when, meanwhile:
    /// - bytes are unsent or unacknowledged (`pending`); or
    /// - at least [`MIN_ARRIVAL_BYTES`] arrived again: the receiver's acknowledgement of
    ///   them advertised a window computed from its free buffer, which a read of the
    ///   anchor's data would have grown. (A frozen peer at steps of GPU size, measured on
    ///   0c1e570: from its first sample after SIGSTOP on, 55-110 KB arrived per 125 ms
    ///   sample while its edge crept 2-4 KB; its window fell under half only 2.2 s later.)
    ///   Or
    /// - its window is under half of the largest it advertised as such an arrival comes
    ///   (a Linux receiver announces a larger window by itself once its window fell under
    ///   half of its clamp).
    ///
    /// A sample with none of these, and a window not under half, is no evidence either way
    /// (a receiver that reads without its window doubling announces nothing until more data
    /// arrives): it returns 0, and ends an episode not yet shown, whose anchor lives only
    /// while data keeps arriving. A shown episode outlives [`QUIET_KEPT`] such samples in a
    /// row, hidden, and is shown again from its anchor when more arrives with the edge
    /// still unmoved (a host pausing for a sample as it waits on the other peer cost a
    /// frozen peer's verdict 0.6 s when that ended the episode; holding it shown through
    /// them gave false stalls, a peer's read never announced). A peer that answers (bytes
    /// received) has read everything sent before the command it answers (ggml's RPC peer
    /// serves its commands in order, and its client sends nothing while it awaits an
    /// answer): the episode ends, unless bytes are pending. Without these a peer idle
    /// between steps, its last window stale and low, reads as unread from its last answer
    /// on (the likeliest cause of false stalls on a CI machine: a peer unread for 2.2-2.6 s
    /// as a step began, which ended within 90 ms, when that step's data arrived).
    ///
    /// The host being blocked on the peer's answer is not counted as data waiting: a peer
    /// computing a long step legitimately answers late, and the step's prediction, which
    /// would have to bound that, can be far off for a step of a new size (measured: a
    /// 1,085-token call predicted under 0.5 s after small prompts, while the first peer
    /// computed it for seconds).
    pub fn observe(&mut self, s: Sample, now_ns: u64) -> u64 {
        self.max_window = self.max_window.max(s.window);
        let last = self.last.replace(s).unwrap_or(s);
        let pending = s.notsent > 0 || s.unacked > 0;
        let low = u64::from(s.window) * 2 < u64::from(self.max_window);
        let arrived = s.bytes_acked.saturating_sub(last.bytes_acked) >= MIN_ARRIVAL_BYTES;
        let answered = s.bytes_received > last.bytes_received;
        let unread = self.episode.filter(|e| !read_since(&e.anchor, &s));
        self.episode = match unread {
            // All that waited was read before an answer.
            _ if answered && !pending => None,
            // Still unread: shown by more arriving or waiting; unknown without either.
            Some(e) => {
                let seen = match e.seen {
                    _ if pending || arrived => Some(Seen::Unread),
                    seen if low => Some(seen),
                    Seen::Unread => Some(Seen::Quiet(1)),
                    Seen::Quiet(n) if n < QUIET_KEPT => Some(Seen::Quiet(n + 1)),
                    Seen::Quiet(_) | Seen::Unknown => None,
                };
                seen.map(|seen| Episode { seen, ..e })
            }
            // The first data that may wait, or a read after which more may.
            None if pending || arrived => Some(Episode {
                anchor: s,
                since_ns: now_ns.max(1),
                seen: if pending || low {
                    Seen::Unread
                } else {
                    Seen::Unknown
                },
            }),
            None => None,
        };
        match self.episode {
            Some(Episode {
                since_ns,
                seen: Seen::Unread,
                ..
            }) => since_ns,
            _ => 0,
        }
    }
}

/// Whether the peer read between samples `a` and `s`: the right edge moved past the
/// episode's by more than the receiver's rounding.
fn read_since(a: &Sample, s: &Sample) -> bool {
    let arrived = s.bytes_acked.saturating_sub(a.bytes_acked);
    let tolerance = MIN_READ_BYTES.saturating_add(arrived / 16);
    s.right_edge() > a.right_edge().saturating_add(tolerance)
}

/// The address an endpoint names, when it is numeric (`10.0.0.5:50052`, `[fd00::5]:50052`).
pub fn numeric(endpoint: &str) -> Option<SocketAddr> {
    endpoint.parse().ok()
}

/// The port of an endpoint `host:port` (the text after the last colon).
pub fn port_of(endpoint: &str) -> Option<u16> {
    endpoint.rsplit_once(':')?.1.parse().ok()
}

/// The remote address of socket `fd`, when it is a connected IPv4 or IPv6 socket.
pub fn peer_of(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is a valid value; getpeername writes at most
    // `len` bytes into it and only reads `fd` (which may be stale: then it fails).
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let ptr = (&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: `ptr` and `len` describe `storage`, which outlives the call.
    if unsafe { libc::getpeername(fd, ptr, &mut len) } != 0 {
        return None;
    }
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it can.
            let a = unsafe { *(ptr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for a sockaddr_in6.
            let a = unsafe { *(ptr as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}

/// Whether socket `fd`'s peer is what `endpoint` names: its address when numeric, else
/// its port.
fn is_endpoint(fd: RawFd, endpoint: &str) -> bool {
    match (peer_of(fd), numeric(endpoint)) {
        (Some(peer), Some(want)) => peer == want,
        (Some(peer), None) => port_of(endpoint) == Some(peer.port()),
        (None, _) => false,
    }
}

/// This process's socket connected to `endpoint`: a numeric endpoint's first match; a
/// named one's only socket with that remote port (none when several have it).
pub fn find_socket(endpoint: &str) -> Option<RawFd> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    let mut found = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
        })
        .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| is_endpoint(fd, endpoint));
    let first = found.next()?;
    if numeric(endpoint).is_none() && found.next().is_some() {
        return None;
    }
    Some(first)
}

/// One `TCP_INFO` sample of socket `fd`; none when it is no TCP socket (any more) or the
/// kernel does not give the peer's window (Linux before 5.19).
pub fn sample(fd: RawFd) -> Option<Sample> {
    // SAFETY: an all-zero tcp_info is a valid value; the kernel writes at most `len` bytes.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` describe a buffer that outlives the call; `fd` may be stale,
    // and then the call fails without touching anything.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    let needed = std::mem::offset_of!(libc::tcp_info, tcpi_snd_wnd) + 4;
    if rc != 0 || (len as usize) < needed {
        return None;
    }
    Some(Sample {
        bytes_acked: info.tcpi_bytes_acked,
        window: info.tcpi_snd_wnd,
        notsent: info.tcpi_notsent_bytes,
        unacked: info.tcpi_unacked,
        bytes_received: info.tcpi_bytes_received,
    })
}

/// Look for a device's socket again at most this often (1 s) while it is not found.
pub const LOOKUP_EVERY_NS: u64 = 1_000_000_000;

/// One RPC device watched.
#[derive(Debug)]
pub struct Watch {
    /// The device id in the table (1-based).
    pub device: u64,
    endpoint: String,
    fd: Option<RawFd>,
    next_lookup_ns: u64,
    reading: Reading,
    /// The value last published (so that an unchanged one is not stored again).
    published: u64,
}

impl Watch {
    /// Watches device `device` at `endpoint`.
    pub fn new(device: u64, endpoint: &str) -> Self {
        Self {
            device,
            endpoint: endpoint.to_owned(),
            fd: None,
            next_lookup_ns: 0,
            reading: Reading::default(),
            published: 0,
        }
    }

    /// Samples the peer's socket at `now_ns` and returns the value to publish when it
    /// changed (since when the peer has read nothing, or 0). A socket that cannot be found
    /// or sampled (not connected yet, closed, another process's reconnect) is looked for
    /// again at most once a second, and reads as keeping up meanwhile.
    pub fn poll(&mut self, now_ns: u64) -> Option<u64> {
        let s = self
            .fd
            .filter(|&fd| is_endpoint(fd, &self.endpoint))
            .and_then(sample);
        let value = match s {
            Some(s) => self.reading.observe(s, now_ns),
            None => {
                self.fd = None;
                self.reading = Reading::default();
                if now_ns >= self.next_lookup_ns {
                    self.next_lookup_ns = now_ns.saturating_add(LOOKUP_EVERY_NS);
                    self.fd = find_socket(&self.endpoint);
                }
                0
            }
        };
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::peer_sampled(self.device, now_ns, value, &s);
        (value != self.published).then(|| {
            self.published = value;
            value
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    fn s(bytes_acked: u64, window: u32, notsent: u32, unacked: u32) -> Sample {
        Sample {
            bytes_acked,
            window,
            notsent,
            unacked,
            bytes_received: 0,
        }
    }

    const MB: u64 = 1 << 20;

    /// A peer with a 6 MiB window, `acked` MiB acknowledged and `window` KiB advertised.
    fn kib(acked: u64, window: u64, notsent: u32, unacked: u32) -> Sample {
        s(acked * MB, (window << 10) as u32, notsent, unacked)
    }

    #[test]
    fn a_peer_that_reads_keeps_up_whatever_its_window() {
        let mut r = Reading::default();
        // The window fills as a burst arrives (unread for a moment); the peer reads it and
        // the edge moves on.
        assert_eq!(r.observe(kib(0, 6 << 10, 0, 0), 10), 0);
        assert_eq!(
            r.observe(kib(3, 3 << 10, 0, 2), 20),
            20,
            "a burst waits, unread"
        );
        assert_eq!(
            r.observe(kib(3, 6 << 10, 0, 0), 30),
            0,
            "read: nothing waits"
        );
        // A window reduced by less than half, and nothing pending: a stale window after a
        // read the kernel did not announce, not data waiting.
        assert_eq!(r.observe(kib(4, 5 << 10, 0, 0), 40), 0);
        assert_eq!(r.observe(kib(4, 5 << 10, 0, 0), 50), 0);
        // Data waits while the peer reads it piece by piece: each read starts afresh.
        assert_eq!(r.observe(kib(8, 2 << 10, 0, 0), 60), 60);
        assert_eq!(r.observe(kib(9, 2 << 10, 0, 0), 70), 70, "read 1 MiB");
    }

    #[test]
    fn a_peer_that_stops_reading_is_unread_from_the_first_sample_that_shows_it() {
        let mut r = Reading::default();
        assert_eq!(r.observe(kib(10, 6 << 10, 0, 0), 10), 0);
        // A burst: acked, the window at 2 of 6 MiB, the edge where it was but for the
        // receiver's rounding (20 KiB), which is no read.
        assert_eq!(r.observe(kib(14, (2 << 10) + 20, 0, 0), 20), 20);
        assert_eq!(r.observe(kib(14, (2 << 10) + 20, 0, 0), 30), 20);
        // The window closes and the host's bytes wait unsent: still since 20.
        assert_eq!(r.observe(kib(16, 40, 9_000, 0), 40), 20);
        assert_eq!(r.observe(kib(16, 0, 9_000, 0), 90), 20);
        // It reads again (SIGCONT): the edge moves by megabytes, nothing read since 100;
        // then nothing waits any more.
        assert_eq!(r.observe(kib(16, 6 << 10, 3_000, 1), 100), 100);
        assert_eq!(r.observe(kib(19, 6 << 10, 0, 0), 110), 0);
    }

    #[test]
    fn small_creep_is_no_read_and_an_answer_means_everything_before_was_read() {
        let mut r = Reading::default();
        assert_eq!(r.observe(kib(1, 6 << 10, 0, 0), 10), 0);
        // A 4 MiB burst fills the window; the edge creeps by 40 KiB, under 4 KiB plus a
        // sixteenth of the 4 MiB that arrived: no read.
        let burst = kib(5, (2 << 10) + 40, 0, 0);
        assert_eq!(r.observe(burst, 20), 20);
        assert_eq!(r.observe(burst, 30), 20);
        // It answers (bytes received): it read the burst before the command it answers,
        // whatever its stale window says, and nothing has arrived since.
        let answered = Sample {
            bytes_received: 64,
            ..burst
        };
        assert_eq!(r.observe(answered, 40), 0);
        assert_eq!(r.observe(answered, 50), 0);
        // Idle for a minute with that window: still nothing waits.
        assert_eq!(r.observe(answered, 60_000_000_050), 0);
        // An answer while the host's bytes wait unsent: those came after it.
        let pending = Sample {
            notsent: 900,
            bytes_received: 128,
            ..answered
        };
        assert_eq!(r.observe(pending, 60_000_000_060), 60_000_000_060);
    }

    #[test]
    fn a_low_window_begins_an_episode_only_with_enough_arriving() {
        let mut r = Reading::default();
        assert_eq!(r.observe(kib(1, 6 << 10, 0, 0), 10), 0);
        // The peer read a burst without its window doubling, so the host still sees the
        // window low: the peer is idle, nothing arrives, nothing waits.
        let stale = kib(5, 2 << 10, 0, 0);
        assert_eq!(r.observe(stale, 20), 20, "the burst arrives");
        let moved = Sample {
            bytes_acked: 6 << 20,
            ..stale
        };
        assert_eq!(r.observe(moved, 30), 30, "read, and 1 MiB more arrived");
        let idle = Sample {
            window: moved.window + (512 << 10),
            ..moved
        };
        assert_eq!(r.observe(idle, 40), 0, "read, nothing new: keeps up");
        assert_eq!(r.observe(idle, 5_000_000_040), 0, "idle, the window low");
        // A command of 4 KiB arrives: a read of it could never show, so no episode.
        let small = Sample {
            bytes_acked: idle.bytes_acked + 4_096,
            window: idle.window - 4_096,
            ..idle
        };
        assert_eq!(r.observe(small, 5_000_000_050), 0);
        // 64 KiB arrive and the edge stays: unread from this sample.
        let big = Sample {
            bytes_acked: small.bytes_acked + (64 << 10),
            window: small.window - (64 << 10),
            ..small
        };
        assert_eq!(r.observe(big, 5_000_000_060), 5_000_000_060);
        assert_eq!(r.observe(big, 9_000_000_000), 5_000_000_060);
    }

    /// A peer frozen mid-prefill at steps of GPU size, as sampled on 0c1e570 every 125 ms
    /// (bytes acked, window): SIGSTOP just before the sample at 89 ms, which still shows
    /// the read of what came before; then 55-110 KB arrive per sample, the edge creeping
    /// 2-4 KB, the window still well over half.
    #[test]
    fn more_arriving_behind_unread_data_shows_a_frozen_peer_at_once() {
        let trace = [
            (-36, 65_598_488, 3_281_920),
            (89, 65_898_718, 3_227_648),
            (214, 66_009_020, 3_121_152),
            (339, 66_064_171, 3_067_904),
            (464, 66_174_473, 2_961_408),
        ];
        let mut r = Reading::default();
        let got: Vec<u64> = trace
            .iter()
            .map(|&(ms, acked, window)| {
                let now = (1_000 + ms) as u64 * 1_000_000;
                r.observe(s(acked, window, 0, 0), now) / 1_000_000
            })
            .collect();
        assert_eq!(got, [0, 0, 1_089, 1_089, 1_089], "unread from 89 ms on");
    }

    /// A peer that reads keeps its edge moving with what arrives, sample after sample,
    /// and is never shown unread; a mark not shown dies with the first quiet sample.
    #[test]
    fn a_reading_peer_under_steady_arrivals_is_never_shown_unread() {
        let mut r = Reading::default();
        let (mut acked, window) = (64 * MB, 3 << 20);
        assert_eq!(r.observe(s(acked, window, 0, 0), 10), 0);
        for i in 1..=40u64 {
            // 94 KB arrive and are read before the next arrival is acknowledged.
            acked += 94_000;
            assert_eq!(r.observe(s(acked, window, 0, 0), 10 + i * 125), 0, "{i}");
        }
        // Data arrives (a mark), then nothing for a while: the mark is gone, so data
        // that arrives later behind it, the edge unmoved, is unread only from then.
        let edge_kept =
            |acked: u64, arrived: u64| s(acked + arrived, window - arrived as u32, 0, 0);
        assert_eq!(r.observe(edge_kept(acked, 0), 6_000), 0);
        acked += 94_000;
        assert_eq!(r.observe(s(acked, window, 0, 0), 6_125), 0, "a mark");
        assert_eq!(r.observe(s(acked, window, 0, 0), 6_250), 0, "quiet: gone");
        assert_eq!(r.observe(edge_kept(acked, 60_000), 9_000), 0, "a new mark");
        assert_eq!(r.observe(edge_kept(acked, 120_000), 9_125), 9_000);
        // A quiet sample with the window over half: no evidence either way, episode over.
        assert_eq!(r.observe(edge_kept(acked, 120_000), 9_250), 0);
    }

    /// The host pausing for a sample or two (blocked on the other peer) hides a frozen
    /// peer's episode; the next arrival, its edge still unmoved, shows it again from the
    /// same anchor. Measured on 0c1e570: one quiet sample 0.6 s after SIGSTOP, which cost
    /// the verdict 0.6 s when it ended the episode. Three quiet samples end it.
    #[test]
    fn a_quiet_sample_or_two_hides_the_episode_without_ending_it() {
        let window = 3 << 20;
        let edge_kept = |arrived: u64| s(64 * MB + arrived, window - arrived as u32, 0, 0);
        let mut r = Reading::default();
        assert_eq!(r.observe(edge_kept(0), 0), 0);
        assert_eq!(r.observe(edge_kept(60_000), 125), 0, "a mark");
        assert_eq!(r.observe(edge_kept(120_000), 250), 125, "shown");
        assert_eq!(r.observe(edge_kept(120_000), 375), 0, "quiet: hidden");
        assert_eq!(r.observe(edge_kept(120_000), 500), 0, "quiet: hidden");
        assert_eq!(r.observe(edge_kept(180_000), 625), 125, "unread still");
        for t in [750, 875, 1_000] {
            assert_eq!(r.observe(edge_kept(180_000), t), 0, "{t}");
        }
        // The anchor is gone: data arriving now is unread from now on.
        assert_eq!(r.observe(edge_kept(240_000), 1_125), 0, "a new mark");
        assert_eq!(r.observe(edge_kept(300_000), 1_250), 1_125);
        // A read ends it however quiet the samples were.
        assert_eq!(r.observe(edge_kept(300_000), 1_375), 0);
        assert_eq!(
            r.observe(s(64 * MB + 360_000, window, 0, 0), 1_500),
            0,
            "read"
        );
        assert_eq!(r.observe(s(64 * MB + 360_000, window, 0, 0), 1_625), 0);
    }

    #[test]
    fn a_partitioned_peer_acknowledges_nothing_and_is_unread() {
        let mut r = Reading::default();
        assert_eq!(r.observe(kib(1, 6 << 10, 0, 0), 10), 0);
        assert_eq!(r.observe(kib(1, 6 << 10, 0, 3), 20), 20);
        assert_eq!(r.observe(kib(1, 6 << 10, 500, 3), 30), 20);
    }

    #[test]
    fn endpoints_numeric_and_named() {
        assert_eq!(
            numeric("127.0.0.1:50052"),
            Some("127.0.0.1:50052".parse().unwrap())
        );
        assert_eq!(numeric("[fd00::5]:50052").map(|a| a.port()), Some(50052));
        assert_eq!(numeric("gpu-b:50052"), None);
        assert_eq!(port_of("gpu-b:50052"), Some(50052));
        assert_eq!(port_of("[fd00::5]:7"), Some(7));
        assert_eq!(port_of("gpu-b"), None);
        assert_eq!(port_of("gpu-b:http"), None);
    }

    /// A real loopback connection: found by its endpoint, sampled, and seen unread when
    /// the other side stops reading, then keeping up once it reads.
    #[test]
    fn a_real_socket_is_found_sampled_and_seen_unread_then_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        let mut client = std::net::TcpStream::connect(&endpoint).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(find_socket(&endpoint), Some(client.as_raw_fd()));
        let mut w = Watch::new(2, &endpoint);
        let mut now = 1_000;
        assert_eq!(
            w.poll(now),
            None,
            "found: keeps up (0 is what was published)"
        );
        // The server reads nothing: fill its window from a non-blocking client.
        client.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 1 << 16];
        let mut sent = 0usize;
        for _ in 0..4_096 {
            match client.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(sent > 0);
        let mut since = None;
        for _ in 0..50 {
            now += 100;
            if let Some(v) = w.poll(now) {
                since = Some(v);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let since = since.expect("seen unread");
        assert!(since > 1_000 && since <= now, "{since}");
        assert_eq!(w.poll(now + 100), None, "unchanged: nothing to publish");
        // The server reads everything: the edge moves.
        let mut buf = vec![0u8; 1 << 16];
        let mut read = 0usize;
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        while read < sent {
            read += server.read(&mut buf).unwrap();
        }
        let mut cleared = false;
        for _ in 0..50 {
            now += 100;
            if w.poll(now) == Some(0) {
                cleared = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(cleared, "keeps up again once it read");
    }
}
