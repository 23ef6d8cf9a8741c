//! The harness behind the `segment_open` fuzz target, and the input encoding that the seed
//! generator (`src/bin/make_seeds.rs`) shares with it.
//!
//! # Input
//! `[ctl0, ctl1, ctl2, file bytes...]`: three control bytes (missing ones read as 0), then
//! the segment file's whole content, of any length.
//!
//! | byte | bits | meaning |
//! |---|---|---|
//! | ctl0 | 0..3 | [`Action`] applied to the file after the reader has mapped and validated it, before any snapshot |
//! | ctl0 | 3..8 | parameter of the action (new length for truncate/extend) |
//! | ctl1 | 0..3 | the `now` the probe classifies at, relative to the header's heartbeat ([`now_ns`]) |
//! | ctl1 | 3 | seqlock retry budget: 0 = 8 spins + 2 yields, 1 = a single attempt |
//! | ctl1 | 4..7 | which hydra-probe CLI command to render afterwards ([`CliCmd`]) |
//! | ctl1 | 7 | `--json` for that command |
//! | ctl2 | 0..2 | classification thresholds ([`thresholds`]) |
//! | ctl2 | 2 | owner policy: 0 = same as directory (default), 1 = any |
//!
//! # What is checked
//! Errors are fine; panics, aborts, hangs, UB and SIGBUS are bugs. Besides "does not
//! crash", the harness asserts what the reader documents:
//! - a reader that opened never has `slot(slot_count)` succeed;
//! - while the file keeps the size it had at open, `snapshot`, `header`, `lifecycle`,
//!   `liveness` and `EngineView::capture` succeed (slots may individually be torn or
//!   contended), the snapshot has exactly `slot_count` slots, liveness is never `Live`
//!   (nobody holds the lock), and `HydraMeta::from_view` gives a meta for every slot and
//!   none past the last;
//! - once the file's size differs from the size at open, every snapshot-like call fails
//!   with `Error::SizeChanged` (the fstat check of the SIGBUS policy), never touching the
//!   lost pages;
//! - the v1.3 regions (statistics, flight recorders, devices) read as a value, absent, or a
//!   clear region error, never past their items: a history is ordered, a device table
//!   within the format's bounds ([`exercise_regions`]).

use clap::Parser;
use hydra_layout::header as h;
use hydra_layout::{
    Error, Lifecycle, Liveness, OpenOptions, OwnerPolicy, ReadPolicy, SegmentReader, Snapshot,
};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use hydra_probe_cli::Cli;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Number of control bytes before the file content.
pub const CTL_LEN: usize = 3;

/// Engine id of the file the harness writes (so the probe's discovery finds it).
pub const ENGINE_ID: &str = "fuzz-0";

/// What happens to the file between `open` and the first snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    /// Nothing: the file stays as opened.
    None = 0,
    /// `ftruncate` to a shorter length (the SIGBUS case: the mapping outlives the pages).
    Truncate = 1,
    /// `ftruncate` to a longer length.
    Extend = 2,
    /// Truncate to a shorter length and back to the original one (same size, zero-filled
    /// tail: what the size check cannot see and need not catch).
    TruncateRestore = 3,
    /// Overwrite the geometry words and `STATE` in place with hostile values (same size):
    /// the reader must keep using the geometry it validated at open.
    HostileRewrite = 4,
    /// Overwrite the whole file with zeros in place (same size).
    Zero = 5,
    /// Unlink the file (the reader keeps its descriptor and mapping).
    Unlink = 6,
    /// Replace the name with a fresh file holding the same bytes (the reader keeps the old
    /// inode).
    Replace = 7,
}

impl Action {
    fn from_bits(b: u8) -> Self {
        match b & 7 {
            0 => Self::None,
            1 => Self::Truncate,
            2 => Self::Extend,
            3 => Self::TruncateRestore,
            4 => Self::HostileRewrite,
            5 => Self::Zero,
            6 => Self::Unlink,
            _ => Self::Replace,
        }
    }

    /// Whether the file the reader mapped keeps its length.
    fn keeps_size(self) -> bool {
        !matches!(self, Self::Truncate | Self::Extend)
    }
}

/// The hydra-probe command rendered after the library calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CliCmd {
    /// None.
    None = 0,
    /// `list`.
    List = 1,
    /// `show` (the only engine).
    Show = 2,
    /// `show fuzz-0 --slot 1`.
    ShowSlot = 3,
    /// `check`.
    Check = 4,
    /// `meta fuzz-0 0`.
    Meta0 = 5,
    /// `meta <path> 3`.
    Meta3 = 6,
    /// `check fuzz-0`.
    CheckOne = 7,
}

/// Encodes the control bytes (for the seed generator).
#[allow(clippy::too_many_arguments)]
pub fn control(
    action: Action,
    param: u8,
    now_sel: u8,
    single_attempt: bool,
    cli: CliCmd,
    json: bool,
    thresholds_sel: u8,
    owner_any: bool,
) -> [u8; CTL_LEN] {
    [
        action as u8 | (param & 31) << 3,
        (now_sel & 7) | u8::from(single_attempt) << 3 | (cli as u8) << 4 | u8::from(json) << 7,
        (thresholds_sel & 3) | u8::from(owner_any) << 2,
    ]
}

/// The classification `now`: the header's heartbeat (or creation time, whichever is later)
/// plus an offset chosen by `sel`, or an extreme.
pub fn now_ns(sel: u8, base: u64) -> u64 {
    const MS: u64 = 1_000_000;
    match sel & 7 {
        0 => base,
        1 => base.saturating_add(MS),
        2 => base.saturating_add(1000 * MS),
        3 => base.saturating_add(31_000 * MS),
        4 => base.saturating_add(3_600_000 * MS),
        5 => u64::MAX,
        6 => 0,
        _ => base.saturating_sub(1000 * MS),
    }
}

/// The thresholds for `sel`: default, a 1 s budget, all zero, all extreme.
pub fn thresholds(sel: u8) -> Thresholds {
    let d = Thresholds::default();
    match sel & 3 {
        0 => d,
        1 => Thresholds {
            budget: Some(Duration::from_secs(1)),
            ..d
        },
        2 => Thresholds {
            stall_floor: Duration::ZERO,
            confident_stall_floor: Duration::ZERO,
            confident_error: 0.0,
            slow_factor: 0.0,
            stall_factor: 0.0,
            budget: Some(Duration::ZERO),
            heartbeat_timeout: Duration::ZERO,
        },
        _ => Thresholds {
            stall_floor: Duration::MAX,
            confident_stall_floor: Duration::MAX,
            confident_error: f64::MAX,
            slow_factor: f64::MAX,
            stall_factor: f64::MAX,
            budget: Some(Duration::MAX),
            heartbeat_timeout: Duration::MAX,
        },
    }
}

/// Length the file gets for a truncate (`shorter`) or extend action with parameter `p`.
fn resized_len(len: u64, p: u8, shorter: bool) -> u64 {
    if shorter {
        let l = match p {
            0 => 0,
            1 => 7,
            2 => 8,
            3 => 1023,
            4 => len.saturating_sub(1),
            5 => len.saturating_sub(8),
            6 => len.saturating_sub(4096),
            _ => len * u64::from(p - 6) / 26,
        };
        l.min(len.saturating_sub(1))
    } else {
        match p {
            0 => len + 1,
            1 => len + 8,
            2 => len + 256,
            3 => len + 4096,
            _ => len + u64::from(p) * 4096,
        }
    }
}

struct Ctx {
    dir: PathBuf,
    path: PathBuf,
    /// Parsed once per process (clap parsing is slow); index = ctl1 >> 4.
    clis: Vec<Option<Cli>>,
}

fn ctx() -> &'static Ctx {
    static CTX: OnceLock<Ctx> = OnceLock::new();
    CTX.get_or_init(|| {
        // One directory per process (parallel jobs each have theirs), never the real
        // segment directory. scripts/fuzz.sh points TMPDIR at a scratch directory that it
        // removes afterwards, since libFuzzer exits without running destructors.
        let dir = std::env::temp_dir().join(format!("hydra-fuzz-{}", std::process::id()));
        assert_ne!(
            dir,
            Path::new(hydra_layout::naming::DEFAULT_DIR),
            "refusing to fuzz in the real segment directory"
        );
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the fuzz directory");
        let path = hydra_layout::naming::segment_path(&dir, ENGINE_ID);
        let d = dir.to_str().expect("temp dir is UTF-8").to_owned();
        let p = path.to_str().expect("temp dir is UTF-8").to_owned();
        let mut clis = Vec::new();
        for json in [false, true] {
            for cmd in 0..8u8 {
                let mut args: Vec<String> = vec!["hydra-probe".into(), "--dir".into(), d.clone()];
                if json {
                    args.push("--json".into());
                }
                let rest: &[&str] = match cmd {
                    1 => &["list"],
                    2 => &["show"],
                    3 => &["show", ENGINE_ID, "--slot", "1"],
                    4 => &["check"],
                    5 => &["meta", ENGINE_ID, "0"],
                    6 => &["meta", &p, "3"],
                    7 => &["check", ENGINE_ID],
                    _ => &[],
                };
                clis.push(if rest.is_empty() {
                    None
                } else {
                    args.extend(rest.iter().map(|s| s.to_string()));
                    Some(Cli::try_parse_from(&args).expect("valid hydra-probe arguments"))
                });
            }
        }
        Ctx { dir, path, clis }
    })
}

/// One fuzz iteration.
pub fn segment_open(data: &[u8]) {
    let ctx = ctx();
    let ctl = |i: usize| data.get(i).copied().unwrap_or(0);
    let (c0, c1, c2) = (ctl(0), ctl(1), ctl(2));
    let body = data.get(CTL_LEN..).unwrap_or(&[]);
    let action = Action::from_bits(c0);
    let param = c0 >> 3;

    // A fresh file every time (the previous iteration may have unlinked or replaced it).
    let _ = fs::remove_file(&ctx.path);
    fs::write(&ctx.path, body).expect("write the input file");

    // The probe's directory scan must see exactly our file, whatever its content.
    let found = hydra_probe::discover(&ctx.dir).expect("scan the fuzz directory");
    assert_eq!(found.len(), 1, "discover: {found:?}");
    assert_eq!(found[0].engine_id, ENGINE_ID);

    let options = OpenOptions {
        owner: if c2 & 4 != 0 {
            OwnerPolicy::Any
        } else {
            OwnerPolicy::SameAsDirectory
        },
        // The default budget (64 spins + 2000 yields) costs about a millisecond per torn
        // slot; the retry logic is the same with a small budget, and budget 0 reads once.
        read_policy: if c1 & 8 != 0 {
            ReadPolicy {
                spins: 0,
                yields: 0,
            }
        } else {
            ReadPolicy {
                spins: 8,
                yields: 2,
            }
        },
    };
    let t = thresholds(c2);
    match SegmentReader::open_with(&ctx.path, &options) {
        Ok(reader) => exercise_reader(ctx, &reader, body.len() as u64, action, param, c1, &t),
        Err(e) => {
            // Messages must render; a few kinds are impossible for a regular file we own.
            let _ = e.to_string();
            assert!(
                !matches!(
                    e,
                    Error::SizeChanged { .. }
                        | Error::SymlinkFile { .. }
                        | Error::WrongOwner { .. }
                ),
                "open: unexpected error {e:?}"
            );
        }
    }
    // Render the hydra-probe CLI over the directory (its own open, default read policy,
    // real clock). Bounded: with the default read policy every torn slot costs ~1 ms, so
    // only files with few odd sequence words get the full CLI treatment.
    let idx = usize::from(c1 >> 4);
    if let Some(cli) = &ctx.clis[idx] {
        if odd_seqs(body) <= 2 {
            let mut out = Vec::new();
            if let Ok(code) = hydra_probe_cli::run(cli, &mut out) {
                assert!(code <= 3, "exit code {code}");
            }
            if c1 & 0x80 != 0 {
                // JSON output is one or more JSON documents, one per line.
                for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    serde_json::from_slice::<serde::de::IgnoredAny>(line)
                        .unwrap_or_else(|e| panic!("CLI printed invalid JSON ({e}): {line:?}"));
                }
            }
        }
    }
}

/// Number of slot records whose sequence word is odd, by the geometry the file declares
/// (an upper bound on the torn reads the CLI may spend its retry budget on).
fn odd_seqs(body: &[u8]) -> usize {
    let word = |off: usize| -> Option<u64> {
        body.get(off..off.checked_add(8)?)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
    };
    let (Some(off), Some(stride), Some(count)) = (
        word(h::SLOT_OFFSET_OFFSET),
        word(h::SLOT_STRIDE_OFFSET),
        word(h::SLOT_COUNT_OFFSET),
    ) else {
        return 0;
    };
    if stride == 0 {
        return 0;
    }
    (0..count.min(4096))
        .filter_map(|i| {
            let at = off.checked_add(i.checked_mul(stride)?)?;
            word(usize::try_from(at).ok()?)
        })
        .filter(|s| s % 2 == 1)
        .count()
}

fn apply(ctx: &Ctx, action: Action, param: u8, len: u64) {
    let open_rw = || {
        fs::OpenOptions::new()
            .write(true)
            .open(&ctx.path)
            .expect("reopen the input file for writing")
    };
    match action {
        Action::None => {}
        Action::Truncate => open_rw()
            .set_len(resized_len(len, param, true))
            .expect("truncate"),
        Action::Extend => open_rw()
            .set_len(resized_len(len, param, false))
            .expect("extend"),
        Action::TruncateRestore => {
            let f = open_rw();
            f.set_len(resized_len(len, param, true)).expect("truncate");
            f.set_len(len).expect("restore the length");
        }
        Action::HostileRewrite => {
            let f = open_rw();
            let hostile: [(usize, u64); 6] = [
                (h::HEADER_LEN_OFFSET, u64::MAX - 7),
                (h::SLOT_OFFSET_OFFSET, !127u64),
                (h::SLOT_STRIDE_OFFSET, 1 << (7 + (param & 31))),
                (h::SLOT_COUNT_OFFSET, 4096),
                (h::TOTAL_LEN_OFFSET, len),
                (
                    h::STATE_OFFSET,
                    [Lifecycle::INIT, 0, u64::MAX, Lifecycle::CLOSED][usize::from(param & 3)],
                ),
            ];
            for (off, v) in hostile {
                if off as u64 + 8 <= len {
                    f.write_all_at(&v.to_ne_bytes(), off as u64)
                        .expect("rewrite");
                }
            }
        }
        Action::Zero => {
            let f = open_rw();
            f.write_all_at(&vec![0u8; len as usize], 0).expect("zero");
        }
        Action::Unlink => fs::remove_file(&ctx.path).expect("unlink"),
        Action::Replace => {
            let bytes = fs::read(&ctx.path).expect("read back");
            let tmp = ctx.dir.join(".fuzz-replace.tmp");
            let mut f = fs::File::create(&tmp).expect("create the replacement");
            f.write_all(&bytes).expect("write the replacement");
            drop(f);
            fs::rename(&tmp, &ctx.path).expect("rename the replacement");
        }
    }
}

/// What a reader fixes at open holds: its slot count, length, path and identity.
fn check_fixed_at_open(ctx: &Ctx, reader: &SegmentReader, len: u64) {
    let n = reader.slot_count();
    assert!((1..=hydra_layout::MAX_SLOTS).contains(&n));
    assert_eq!(reader.len(), len);
    assert!(!reader.is_empty());
    assert_eq!(reader.path(), ctx.path.as_path());
    let id = reader.identity();
    let _ = format!("{reader:?} {id:?}");
    let _ = id.to_realtime_ns(id.created_monotonic_ns);
    let _ = id.to_realtime_ns(u64::MAX);
    let _ = id.to_realtime_ns(0);
}

fn exercise_reader(
    ctx: &Ctx,
    reader: &SegmentReader,
    len: u64,
    action: Action,
    param: u8,
    c1: u8,
    t: &Thresholds,
) {
    check_fixed_at_open(ctx, reader, len);
    let n = reader.slot_count();
    apply(ctx, action, param, len);
    let same_size = action.keeps_size();
    let size_err = |what: &str, e: &Error| {
        assert!(
            matches!(e, Error::SizeChanged { was, .. } if *was == len),
            "{what} after {action:?}: expected SizeChanged, got {e:?}"
        );
        let _ = e.to_string();
    };
    assert!(matches!(
        reader.slot(n),
        Err(Error::SlotOutOfRange { slot, count }) if slot == n && count == n
    ));
    assert!(reader.slot(usize::MAX).is_err());
    match reader.check_size() {
        Ok(()) => assert!(same_size, "check_size missed {action:?}"),
        Err(e) => size_err("check_size", &e),
    }
    let snapshot = exercise_snapshot(reader, n, action, &size_err);
    exercise_header_reads(reader, same_size, &size_err);
    for i in 0..n.min(64) {
        match reader.slot(i) {
            Ok(_) | Err(Error::Torn { .. }) | Err(Error::Contended { .. }) if same_size => {}
            Ok(_) => panic!("slot {i} read after {action:?}"),
            Err(e) if !same_size => size_err("slot", &e),
            Err(e) => panic!("slot {i}: {e:?}"),
        }
    }

    exercise_regions(reader, n, same_size, &size_err);

    let created = reader.identity().created_monotonic_ns;
    let base = match &snapshot {
        Ok(s) => s.header.heartbeat_ns.max(created),
        Err(_) => created,
    };
    let now = now_ns(c1, base);
    match EngineView::capture(reader, now, t) {
        Ok(view) => {
            assert!(same_size);
            render_view(&view, n, t);
        }
        Err(hydra_probe::ProbeError::Layout(e)) if !same_size => size_err("capture", &e),
        Err(e) => panic!("capture after {action:?}: {e:?}"),
    }
}

/// A snapshot: while the file keeps its size, `n` slots, each a consistent copy (even
/// sequence), torn (odd) or contended; once it changed, `SizeChanged`.
fn exercise_snapshot(
    reader: &SegmentReader,
    n: usize,
    action: Action,
    size_err: &dyn Fn(&str, &Error),
) -> Result<Snapshot, Error> {
    let snapshot = reader.snapshot();
    match &snapshot {
        Ok(s) => {
            assert!(action.keeps_size(), "snapshot after {action:?} succeeded");
            assert_eq!(s.slots.len(), n);
            for r in &s.slots {
                match r {
                    Ok(slot) => assert_eq!(slot.seq % 2, 0, "consistent copy at odd seq"),
                    Err(Error::Torn { seq, .. }) => assert_eq!(seq % 2, 1),
                    Err(Error::Contended { .. }) => {}
                    Err(e) => panic!("slot error {e:?}"),
                }
            }
            let _ = format!("{s:?}");
        }
        Err(e) => size_err("snapshot", e),
    }
    snapshot
}

/// The header, the lifecycle and the liveness: values while the file keeps its size (never
/// `Live`: nobody holds the lock), `SizeChanged` once it changed.
fn exercise_header_reads(reader: &SegmentReader, same_size: bool, size_err: &dyn Fn(&str, &Error)) {
    match reader.header() {
        Ok(hs) => {
            assert!(same_size);
            let _ = format!("{hs:?}");
        }
        Err(e) => size_err("header", &e),
    }
    match reader.lifecycle() {
        Ok(l) => {
            assert!(same_size);
            let _ = format!("{l:?}");
        }
        Err(e) => size_err("lifecycle", &e),
    }
    match reader.liveness() {
        Ok(l) => {
            assert!(same_size);
            assert_ne!(l, Liveness::Live, "nobody holds the lock");
            let _ = l.as_str();
        }
        Err(e) => size_err("liveness", &e),
    }
}

/// The v1.3 regions (FORMAT §16-§19): each slot's statistics and flight recorder, and the
/// device table, read whatever the directory, the rings and the tables say. While the
/// file keeps its size, a read is a value, absent, or a torn, contended or invalid region;
/// once it changed, absent or `SizeChanged`. A history is ordered and within its ring, a
/// device table within the format's bounds.
fn exercise_regions(
    reader: &SegmentReader,
    n: usize,
    same_size: bool,
    size_err: &dyn Fn(&str, &Error),
) {
    let region_err = |what: &str, e: &Error| match e {
        Error::RegionTorn { .. } | Error::RegionContended { .. } if same_size => {}
        Error::BadStats { .. } | Error::BadRing { .. } => {}
        e if !same_size => size_err(what, e),
        e => panic!("{what}: {e:?}"),
    };
    let _ = format!("{:?}", reader.regions());
    for i in 0..n.min(8) {
        match reader.stats(i) {
            Ok(Some(stats)) => {
                assert!(same_size, "statistics read after a resize");
                let _ = format!("{stats:?}");
            }
            Ok(None) => {}
            Err(e) => region_err("stats", &e),
        }
        match reader.history(i) {
            Ok(Some(h)) => {
                assert!(same_size, "history read after a resize");
                assert!(h.entries.len() as u64 <= hydra_layout::flight::MAX_CAPACITY);
                let ordinals: Vec<u64> = h.entries.iter().map(|e| e.ordinal).collect();
                assert!(ordinals.windows(2).all(|w| w[0] < w[1]), "{ordinals:?}");
            }
            Ok(None) => {}
            Err(e) => region_err("history", &e),
        }
    }
    match reader.devices() {
        Ok(hydra_layout::DeviceTable::Known(p)) => {
            assert!(same_size, "devices read after a resize");
            let d = &p.devices;
            assert!(d.devices.len() <= hydra_layout::devices::MAX_DEVICES);
            assert!(d.ranges.len() <= hydra_layout::devices::MAX_RANGES);
            assert!(d.ranges.windows(2).all(|w| w[0].last < w[1].first));
            for r in &d.ranges {
                assert!(r.first <= r.last && r.device >= 1);
                assert!(d.device(r.device).is_some(), "{r:?} names no device");
                let _ = d.describe(r.device);
            }
        }
        Ok(_) => {}
        Err(e) => region_err("devices", &e),
    }
}

fn render_view(view: &EngineView, n: usize, t: &Thresholds) {
    assert_eq!(view.slots.len(), n);
    let _ = view.busy_slots();
    let _ = view.liveness();
    let _ = view.health.as_str();
    let _ = view.health.severity().exit_code();
    for s in &view.slots {
        let _ = (
            s.unit(),
            s.is_active(),
            s.class.as_str(),
            s.class.severity(),
        );
        for f in [s.derived.progress, s.derived.rate_per_s, s.derived.eta_s]
            .into_iter()
            .flatten()
        {
            assert!(f.is_finite() && f >= 0.0, "derived figure {f} of {s:?}");
        }
        if let Some(p) = s.derived.progress {
            assert!(p <= 1.0);
        }
        let _ =
            hydra_probe::human::progress(s.state.work_done, s.state.work_total, s.derived.progress);
        let _ = hydra_probe::human::rate(s.derived.rate_per_s, s.unit());
        let _ = hydra_probe::human::age(s.derived.last_progress_age_ns);
        let _ = hydra_probe::human::duration_ns(s.stall_threshold_ns());
        if let Some(e) = s.derived.eta_s {
            let _ = hydra_probe::human::seconds(e);
        }
    }
    for f in hydra_probe::findings(view, t) {
        let _ = format!("{f:?}");
    }
    // Serialising must not fail (no map with non-string keys, no non-finite float
    // surprises). The output is serde_json's own and is not parsed back (too slow for what it
    // would find); the CLI's JSON lines are checked in `segment_open`.
    serde_json::to_vec(view).expect("serialise the view");
    for i in 0..n {
        let meta = HydraMeta::from_view(view, i).expect("a meta for every slot");
        let line = meta.to_json();
        assert!(
            line.starts_with('{') && line.ends_with('}') && !line.contains('\n'),
            "meta JSON: {line}"
        );
        assert!(!line.starts_with("{\"error\""), "meta JSON failed: {line}");
    }
    assert!(HydraMeta::from_view(view, n).is_none());
    assert!(view.slot(n).is_err());
}
