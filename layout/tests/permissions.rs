//! File modes and read-only mappings, checked in child processes (this binary re-executed):
//! the umask is process-wide and a fault kills the whole process, so neither can be tried
//! in a test thread.

mod common;

use common::*;
use hydra_layout::{SegmentReader, SegmentWriter, SEGMENT_MODE};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::time::Duration;

const ENGINE_ID: &str = "modes";

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The child: sets umask 077, creates a probe file asking for 0666 (to prove the umask is
/// in effect), then a segment in `<dir>/segs` (a directory the writer must create), and
/// leaves the segment behind as a crash would so the parent can inspect it.
#[test]
#[ignore = "child process of modes_under_umask_077; does nothing unless re-executed by it"]
fn child_creates_under_umask_077() {
    let Some(dir) = child_dir() else { return };
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(dir.join("umask-probe"))
        .expect("child: create probe");
    let w = SegmentWriter::create(&config(&dir.join("segs"), ENGINE_ID, 2)).expect("create");
    w.simulate_crash();
}

#[test]
fn modes_under_umask_077() {
    let scratch = Scratch::new();
    let dir = scratch.subdir("work");
    let mut child = spawn_child("child_creates_under_umask_077", &dir, scratch.path());
    let status = child.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "child failed: {status}\n{}", child.logs());
    assert_eq!(
        mode(&dir.join("umask-probe")),
        0o600,
        "the child's umask 077 was not in effect"
    );
    let segs = dir.join("segs");
    assert_eq!(mode(&segs), 0o750, "segment directory mode");
    let file = segs.join("modes.hps");
    assert_eq!(
        mode(&file),
        0o640,
        "segment file mode\n{}",
        describe_file(&file)
    );
    assert_eq!(SEGMENT_MODE, 0o640);
    // The left-behind segment is a complete, dead one.
    let r = SegmentReader::open(&file).expect("open the child's segment");
    assert_eq!(r.liveness().unwrap(), hydra_layout::Liveness::Dead);
}

#[test]
fn modes_under_the_default_umask() {
    let scratch = Scratch::new();
    let segs = scratch.join("segs");
    let w = SegmentWriter::create(&config(&segs, ENGINE_ID, 1)).unwrap();
    assert_eq!(mode(w.path()), 0o640);
    assert_eq!(mode(&segs), 0o750);
    // An existing directory's mode is left alone.
    let existing = scratch.subdir("existing");
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o700)).unwrap();
    let w2 = SegmentWriter::create(&config(&existing, ENGINE_ID, 1)).unwrap();
    assert_eq!(mode(&existing), 0o700);
    assert_eq!(mode(w2.path()), 0o640);
}

/// Offset the child writes to through the read-only mapping.
const POKE_OFFSET: usize = hydra_layout::header::HEADER_LEN + hydra_layout::slot::N_PAST_OFFSET;

/// The child: opens the segment with a reader and stores through its mapping. The store must
/// fault; if it does not, the child reports it and exits 0, which fails the parent.
#[test]
#[ignore = "child process of reader_mapping_is_read_only; does nothing unless re-executed by it"]
fn child_writes_through_reader_mapping() {
    let Some(dir) = child_dir() else { return };
    let r = SegmentReader::open_engine(&dir, ENGINE_ID).expect("child: open");
    eprintln!("child: about to write through the read-only mapping");
    let ptr = r.mapping_ptr() as *mut u8;
    assert!((POKE_OFFSET as u64) < r.len());
    // The store is expected to fault (PROT_READ); had it not, it would only change a data
    // byte of a test segment. SAFETY: the offset is inside the mapping (asserted above).
    unsafe { ptr.add(POKE_OFFSET).write_volatile(0x55) };
    eprintln!("child: THE WRITE SUCCEEDED");
}

#[test]
fn reader_mapping_is_read_only() {
    let scratch = Scratch::new();
    let dir = scratch.subdir("segs");
    let mut w = SegmentWriter::create(&config(&dir, ENGINE_ID, 2)).unwrap();
    w.publish(0, &sample_state(0)).unwrap();
    let before = std::fs::read(w.path()).unwrap();

    let mut child = spawn_child("child_writes_through_reader_mapping", &dir, scratch.path());
    let status = child.wait_exit(Duration::from_secs(60));
    let logs = child.logs();
    assert!(
        logs.contains("about to write"),
        "the child did not reach the write: {status}\n{logs}"
    );
    assert!(
        matches!(status.signal(), Some(11) | Some(7)),
        "expected the child to die of SIGSEGV or SIGBUS, got {status}\n{logs}"
    );
    assert!(!logs.contains("WRITE SUCCEEDED"), "{logs}");

    let after = std::fs::read(w.path()).unwrap();
    assert!(before == after, "segment content changed");
    let r = SegmentReader::open(w.path()).unwrap();
    assert_eq!(read_slot(&r, 0), sample_state(0));
}
