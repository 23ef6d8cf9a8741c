//! Hostile, truncated, foreign and misplaced files: every one is refused with its own clear
//! error. Files are built by copying a real segment's bytes and patching words at the
//! documented offsets.

mod common;

use common::*;
use hydra_layout::header as h;
use hydra_layout::slot as s;
use hydra_layout::{
    Error, Lifecycle, Liveness, OpenOptions, OwnerPolicy, SegmentReader, SegmentWriter, MAX_SLOTS,
};
use std::path::Path;
use std::time::Duration;

const SLOTS: usize = 4;

/// Words to overwrite: `(offset, value)`.
type Patch = Vec<(usize, u64)>;

fn default_opts() -> OpenOptions {
    OpenOptions::default()
}

/// Writes `bytes` as `name` in `dir` and expects the open to fail as `expected` says.
fn refused(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    what: &str,
    expected: impl FnOnce(&Error) -> bool,
) -> Error {
    let path = write_segment(dir, name, bytes);
    expect_open_err(&path, &default_opts(), what, expected)
}

/// Makes the FIFO `path` (mode 0640).
fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o640),
    )
    .expect("mkfifo");
}

#[test]
fn unpatched_copy_is_accepted() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let path = write_segment(scratch.path(), "copy.seg", &bytes);
    let r = SegmentReader::open(&path)
        .unwrap_or_else(|e| panic!("valid copy refused: {e}\n{}", describe_file(&path)));
    assert_eq!(r.slot_count(), SLOTS);
    for i in 0..SLOTS {
        assert_eq!(read_slot(&r, i), sample_state(i as u64));
        assert_eq!(r.slot(i).unwrap().pending, i as u64);
    }
    // Nobody holds the copy's lock and it was READY: it reads as a dead writer's segment.
    assert_eq!(r.liveness().unwrap(), Liveness::Dead);
}

#[test]
fn copy_under_another_engine_name_is_refused() {
    // FORMAT §2.2: `<id>.hps` must carry `<id>` in its header. The copy above is opened by
    // a name that is not an engine's (`copy.seg`); under an engine's name it is refused.
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let header_id = SegmentReader::open(write_segment(scratch.path(), "copy.seg", &bytes))
        .expect("valid copy")
        .identity()
        .engine_id
        .clone();
    let path = write_segment(scratch.path(), "planted.hps", &bytes);
    let e = expect_open_err(&path, &default_opts(), "planted copy", |e| {
        matches!(e, Error::EngineIdMismatch { .. })
    });
    assert_eq!(e.kind(), hydra_layout::ErrorKind::EngineIdMismatch);
    let msg = e.to_string();
    assert!(
        msg.contains("planted") && msg.contains(&header_id) && msg.contains("planted.hps"),
        "{msg}"
    );
    // Under its own engine's name the same bytes are accepted.
    let own = write_segment(scratch.path(), &format!("{header_id}.hps"), &bytes);
    SegmentReader::open(&own).expect("copy under its own name");
}

#[test]
fn truncated_files_name_what_is_missing() {
    let scratch = Scratch::new();
    // The slot table ends a v1.2 file; a v1.3 file's regions follow it (cut below).
    let bytes = common::v1_2_segment(SLOTS);
    let cases: [(usize, u64, &str); 5] = [
        (0, 8, "magic"),
        (7, 8, "magic"),
        (15, 16, "byte-order marker"),
        (23, 24, "major version"),
        (h::HEADER_LEN - 1, h::HEADER_LEN as u64, "v1 header"),
    ];
    // The file cut to `len` bytes is refused with the error `expected` names `what`.
    let cut = |len: usize, what: &str, expected: fn(&Error) -> bool| {
        let what = format!("{what} at {len} bytes");
        refused(scratch.path(), "cut.hps", &bytes[..len], &what, expected)
    };
    for (len, want_needed, want_what) in cases {
        let e = cut(len, "Truncated", |e| matches!(e, Error::Truncated { .. }));
        match e {
            Error::Truncated {
                len: got_len,
                needed,
                what,
                ..
            } => {
                assert_eq!(got_len, len as u64, "len, file cut at {len}");
                assert_eq!(needed, want_needed, "needed, file cut at {len}");
                assert_eq!(what, want_what, "what, file cut at {len}");
            }
            _ => unreachable!(),
        }
    }
    // Header intact, slot table cut: in the middle of a slot, at a slot boundary, and
    // right at the end of the header.
    for len in [
        h::HEADER_LEN,
        h::HEADER_LEN + 100,
        h::HEADER_LEN + 2 * s::SLOT_STRIDE,
        bytes.len() - 8,
    ] {
        let e = cut(len, "SlotTableOutOfBounds", |e| {
            matches!(e, Error::SlotTableOutOfBounds { .. })
        });
        if let Error::SlotTableOutOfBounds { end, len: got, .. } = e {
            assert_eq!(end, bytes.len() as u128);
            assert_eq!(got, len as u64);
        }
    }
}

#[test]
fn wrong_magic_is_not_a_segment() {
    let scratch = Scratch::new();
    let mut bytes = valid_segment(SLOTS);
    bytes[..8].copy_from_slice(b"HYDRPROX");
    let e = refused(
        scratch.path(),
        "m.hps",
        &bytes,
        "BadMagic",
        |e| matches!(e, Error::BadMagic { found, .. } if found == b"HYDRPROX"),
    );
    assert!(
        e.to_string().contains("not a hydra-progress segment"),
        "{e}"
    );
    // A text file and an all-zero file are not segments either.
    let text = b"#!/bin/sh\necho this is not a segment\n".repeat(40);
    refused(scratch.path(), "t.hps", &text, "BadMagic", |e| {
        matches!(e, Error::BadMagic { .. })
    });
    refused(scratch.path(), "z.hps", &[0u8; 4096], "BadMagic", |e| {
        matches!(e, Error::BadMagic { .. })
    });
}

#[test]
fn other_byte_order_and_corrupt_marker() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let swapped = patched(
        &bytes,
        &[(h::BYTE_ORDER_OFFSET, h::BYTE_ORDER_MARK.swap_bytes())],
    );
    // As a writer of the other byte order would also swap every other word, swap them too:
    // the reader must stop at the marker whatever follows.
    let mut fully_swapped = swapped.clone();
    for off in (h::VERSION_MAJOR_OFFSET..h::WORDS_END).step_by(8) {
        let v = word(&fully_swapped, off);
        set_word(&mut fully_swapped, off, v.swap_bytes());
    }
    for (name, b) in [("s1.hps", &swapped), ("s2.hps", &fully_swapped)] {
        let e = refused(scratch.path(), name, b, "ForeignByteOrder", |e| {
            matches!(e, Error::ForeignByteOrder { .. })
        });
        assert!(e.to_string().contains("other byte order"), "{e}");
    }
    refused(
        scratch.path(),
        "c.hps",
        &patched(&bytes, &[(h::BYTE_ORDER_OFFSET, 0x0102_0304_0506_0709)]),
        "BadByteOrderMark",
        |e| matches!(e, Error::BadByteOrderMark { found, .. } if *found == 0x0102_0304_0506_0709),
    );
}

#[test]
fn other_major_versions_are_refused() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    for major in [h::VERSION_MAJOR + 1, 0, u64::MAX] {
        let e = refused(
            scratch.path(),
            "v.hps",
            &patched(&bytes, &[(h::VERSION_MAJOR_OFFSET, major)]),
            &format!("UnsupportedMajor {major}"),
            |e| {
                matches!(e, Error::UnsupportedMajor { found, supported, .. }
                    if *found == major && *supported == h::VERSION_MAJOR)
            },
        );
        assert!(e.to_string().contains("major version"), "{e}");
    }
    // A future major is refused even when the rest of the file is a short, unknown layout.
    let mut short = bytes[..64].to_vec();
    set_word(&mut short, h::VERSION_MAJOR_OFFSET, 2);
    refused(
        scratch.path(),
        "v2short.hps",
        &short,
        "UnsupportedMajor",
        |e| matches!(e, Error::UnsupportedMajor { found: 2, .. }),
    );
}

#[test]
fn slot_table_past_end_of_file() {
    let scratch = Scratch::new();
    let bytes = common::v1_2_segment(SLOTS);
    let len = bytes.len() as u128;
    let cases: [(&str, Patch, u128); 3] = [
        (
            "one slot too many",
            vec![(h::SLOT_COUNT_OFFSET, SLOTS as u64 + 1)],
            len + s::SLOT_STRIDE as u128,
        ),
        (
            "slot offset moved by one stride",
            vec![(
                h::SLOT_OFFSET_OFFSET,
                (h::HEADER_LEN + s::SLOT_STRIDE) as u64,
            )],
            len + s::SLOT_STRIDE as u128,
        ),
        (
            "larger stride",
            vec![(h::SLOT_STRIDE_OFFSET, 2 * s::SLOT_STRIDE as u64)],
            (h::HEADER_LEN + SLOTS * 2 * s::SLOT_STRIDE) as u128,
        ),
    ];
    for (what, words, want_end) in cases {
        let e = refused(
            scratch.path(),
            "t.hps",
            &patched(&bytes, &words),
            what,
            |e| matches!(e, Error::SlotTableOutOfBounds { .. }),
        );
        if let Error::SlotTableOutOfBounds { end, len: l, .. } = e {
            assert_eq!((end, l as u128), (want_end, len), "{what}");
        }
    }
}

#[test]
fn total_len_must_equal_file_size() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let len = bytes.len() as u64;
    for declared in [len + 128, len - 8, 0, u64::MAX] {
        refused(
            scratch.path(),
            "l.hps",
            &patched(&bytes, &[(h::TOTAL_LEN_OFFSET, declared)]),
            &format!("SizeMismatch declared {declared}"),
            |e| {
                matches!(e, Error::SizeMismatch { declared: d, actual, .. }
                    if *d == declared && *actual == len)
            },
        );
    }
    // The file grew behind the header's back (TOTAL_LEN unchanged, slot table still fits).
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0u8; 128]);
    refused(
        scratch.path(),
        "g.hps",
        &longer,
        "SizeMismatch on a longer file",
        |e| {
            matches!(e, Error::SizeMismatch { declared, actual, .. }
            if *declared == len && *actual == len + 128)
        },
    );
}

#[test]
fn bad_geometry_is_refused() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let stride = s::SLOT_STRIDE as u64;
    let hl = h::HEADER_LEN as u64;
    let cases = [
        ("stride not a multiple of 128", h::SLOT_STRIDE_OFFSET, 300),
        ("stride 8 over", h::SLOT_STRIDE_OFFSET, stride + 8),
        ("stride too small (128)", h::SLOT_STRIDE_OFFSET, 128),
        ("stride zero", h::SLOT_STRIDE_OFFSET, 0),
        ("misaligned slot offset", h::SLOT_OFFSET_OFFSET, hl + 64),
        ("slot offset 8 past header", h::SLOT_OFFSET_OFFSET, hl + 8),
        ("slot offset inside header", h::SLOT_OFFSET_OFFSET, hl - 128),
        ("slot count zero", h::SLOT_COUNT_OFFSET, 0),
        (
            "slot count above max",
            h::SLOT_COUNT_OFFSET,
            MAX_SLOTS as u64 + 1,
        ),
        ("slot count huge", h::SLOT_COUNT_OFFSET, u64::MAX),
        ("header shorter than v1", h::HEADER_LEN_OFFSET, hl - 8),
        ("header length zero", h::HEADER_LEN_OFFSET, 0),
        (
            "header length not a multiple of 8",
            h::HEADER_LEN_OFFSET,
            hl + 4,
        ),
    ];
    for (what, offset, value) in cases {
        let e = refused(
            scratch.path(),
            "g.hps",
            &patched(&bytes, &[(offset, value)]),
            what,
            |e| matches!(e, Error::BadGeometry { .. }),
        );
        assert!(e.to_string().contains("invalid layout"), "{what}: {e}");
    }
    // A declared header longer than the file is a truncation, not a geometry error.
    refused(
        scratch.path(),
        "hl.hps",
        &patched(&bytes, &[(h::HEADER_LEN_OFFSET, bytes.len() as u64 + 8)]),
        "Truncated (declared header)",
        |e| {
            matches!(
                e,
                Error::Truncated {
                    what: "declared header",
                    ..
                }
            )
        },
    );
}

#[test]
fn slot_table_size_arithmetic_does_not_wrap() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    // count * stride = 4096 * 2^52 = 2^64: wraps to 0 in u64, which would make the table
    // "fit" in any file. The reader must compute the true end.
    let stride = 1u64 << 52;
    let count = MAX_SLOTS as u64;
    assert!(
        count.checked_mul(stride).is_none(),
        "case must overflow u64"
    );
    let e = refused(
        scratch.path(),
        "o.hps",
        &patched(
            &bytes,
            &[
                (h::SLOT_STRIDE_OFFSET, stride),
                (h::SLOT_COUNT_OFFSET, count),
            ],
        ),
        "SlotTableOutOfBounds (overflowing count*stride)",
        |e| matches!(e, Error::SlotTableOutOfBounds { .. }),
    );
    if let Error::SlotTableOutOfBounds { end, .. } = e {
        assert_eq!(end, h::HEADER_LEN as u128 + (1u128 << 64));
    }
    // offset + count * stride overflowing: a slot offset near u64::MAX.
    let far = !(s::SLOT_ALIGN as u64 - 1);
    let e = refused(
        scratch.path(),
        "o2.hps",
        &patched(&bytes, &[(h::SLOT_OFFSET_OFFSET, far)]),
        "SlotTableOutOfBounds (offset near u64::MAX)",
        |e| matches!(e, Error::SlotTableOutOfBounds { .. }),
    );
    if let Error::SlotTableOutOfBounds { end, .. } = e {
        assert_eq!(end, far as u128 + (SLOTS * s::SLOT_STRIDE) as u128);
    }
}

#[test]
fn lifecycle_init_is_not_ready_and_unknown_is_bad_state() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let e = refused(
        scratch.path(),
        "i.hps",
        &patched(&bytes, &[(h::STATE_OFFSET, Lifecycle::INIT)]),
        "NotReady",
        |e| matches!(e, Error::NotReady { .. }),
    );
    assert!(e.to_string().contains("still being initialised"), "{e}");
    for raw in [0, 4, 99, u64::MAX] {
        refused(
            scratch.path(),
            "u.hps",
            &patched(&bytes, &[(h::STATE_OFFSET, raw)]),
            &format!("BadState {raw}"),
            |e| matches!(e, Error::BadState { raw: r, .. } if *r == raw),
        );
    }
    // CLOSED is a valid state to open (a clean exit whose file was kept).
    let path = write_segment(
        scratch.path(),
        "c.seg",
        &patched(&bytes, &[(h::STATE_OFFSET, Lifecycle::CLOSED)]),
    );
    let r = SegmentReader::open(&path).expect("closed segment opens");
    assert_eq!(r.lifecycle().unwrap(), Lifecycle::Closed);
    assert_eq!(r.liveness().unwrap(), Liveness::Closed);
}

#[test]
fn symlinked_file_and_directory_are_refused() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let real_dir = scratch.subdir("real");
    let target = write_segment(&real_dir, "fixture.hps", &bytes);
    // The segment is fine through its real path.
    SegmentReader::open(&target).expect("real path opens");

    let link = real_dir.join("link.hps");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = expect_open_err(
        &link,
        &default_opts(),
        "SymlinkFile",
        |e| matches!(e, Error::SymlinkFile { path } if path == &link),
    );
    assert!(e.to_string().contains("symbolic link"), "{e}");

    let link_dir = scratch.join("linkdir");
    std::os::unix::fs::symlink(&real_dir, &link_dir).unwrap();
    let via = link_dir.join("fixture.hps");
    expect_open_err(
        &via,
        &default_opts(),
        "SymlinkDirectory",
        |e| matches!(e, Error::SymlinkDirectory { path } if path == &link_dir),
    );
    let e = SegmentReader::open_engine(&link_dir, "fixture").expect_err("open_engine via link");
    assert!(matches!(e, Error::SymlinkDirectory { .. }), "{e:?}");

    // A dangling symlink is refused as a symlink too, not followed.
    let dangling = real_dir.join("dangling.hps");
    std::os::unix::fs::symlink(scratch.join("nowhere"), &dangling).unwrap();
    expect_open_err(&dangling, &default_opts(), "SymlinkFile (dangling)", |e| {
        matches!(e, Error::SymlinkFile { .. })
    });
}

#[test]
fn fifo_and_directory_in_place_of_the_file() {
    let scratch = Scratch::new();
    let fifo = scratch.join("fifo.hps");
    mkfifo(&fifo);
    // Open in a thread so that a hang (a blocking open of a FIFO) fails the test instead of
    // hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    let p = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(SegmentReader::open(&p).map(|_| ()));
    });
    let outcome = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("opening a FIFO hung for 10 s");
    match outcome {
        Err(Error::NotRegularFile { kind: "FIFO", path }) => assert_eq!(path, fifo),
        other => panic!("FIFO: expected NotRegularFile, got {other:?}"),
    }

    let dir = scratch.subdir("dir.hps");
    expect_open_err(&dir, &default_opts(), "NotRegularFile (directory)", |e| {
        matches!(
            e,
            Error::NotRegularFile {
                kind: "directory",
                ..
            }
        )
    });
    // A missing file is an I/O error naming the path.
    let missing = scratch.join("missing.hps");
    let e = expect_open_err(
        &missing,
        &default_opts(),
        "Io (missing)",
        |e| matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
    );
    assert!(e.to_string().contains("missing.hps"), "{e}");
}

#[test]
fn writer_refuses_misplaced_files_and_unsafe_directories() {
    let scratch = Scratch::new();
    // A FIFO where the segment goes: refused, without hanging.
    let dir = scratch.subdir("w1");
    mkfifo(&dir.join("e1.hps"));
    let e = SegmentWriter::create(&config(&dir, "e1", 1)).expect_err("fifo in place");
    assert!(
        matches!(e, Error::NotRegularFile { kind: "FIFO", .. }),
        "{e:?}"
    );
    // A symlink where the segment goes.
    let dir = scratch.subdir("w2");
    std::os::unix::fs::symlink(scratch.join("elsewhere"), dir.join("e1.hps")).unwrap();
    let e = SegmentWriter::create(&config(&dir, "e1", 1)).expect_err("symlink in place");
    assert!(matches!(e, Error::SymlinkFile { .. }), "{e:?}");
    assert!(
        !scratch.join("elsewhere").exists(),
        "the writer followed the link"
    );
    // A symlinked directory.
    let real = scratch.subdir("w3");
    let link = scratch.join("w3link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = SegmentWriter::create(&config(&link, "e1", 1)).expect_err("symlinked dir");
    assert!(matches!(e, Error::SymlinkDirectory { .. }), "{e:?}");
    // A world-writable directory.
    let ww = scratch.subdir("w4");
    std::fs::set_permissions(&ww, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let e = SegmentWriter::create(&config(&ww, "e1", 1)).expect_err("world-writable dir");
    assert!(matches!(e, Error::UnsafeDirectory { .. }), "{e:?}");
    // Bad ids and slot counts.
    let ok_dir = scratch.subdir("w5");
    for id in ["", ".hidden", "a/b", "../x", "é"] {
        let e = SegmentWriter::create(&config(&ok_dir, id, 1)).expect_err(id);
        assert!(matches!(e, Error::InvalidEngineId { .. }), "{id:?}: {e:?}");
    }
    for count in [0, MAX_SLOTS + 1] {
        let e = SegmentWriter::create(&config(&ok_dir, "e1", count)).expect_err("slot count");
        assert!(matches!(e, Error::SlotCountOutOfRange { .. }), "{e:?}");
    }
    assert_eq!(
        std::fs::read_dir(&ok_dir).unwrap().count(),
        0,
        "refused creations left files behind"
    );
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn file_of_another_owner_is_refused() {
    if !is_root() {
        eprintln!("skipped: changing a file's owner needs root");
        return;
    }
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let path = write_segment(scratch.path(), "o.seg", &bytes);
    std::os::unix::fs::chown(&path, Some(12345), None).unwrap();
    let dir_uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(scratch.path()).unwrap());

    let e = expect_open_err(
        &path,
        &default_opts(),
        "WrongOwner (same as directory)",
        |e| matches!(e, Error::WrongOwner { owner: 12345, expected, .. } if *expected == dir_uid),
    );
    assert!(e.to_string().contains("owned by uid 12345"), "{e}");
    let uid0 = OpenOptions {
        owner: OwnerPolicy::Uid(0),
        ..Default::default()
    };
    expect_open_err(&path, &uid0, "WrongOwner (Uid(0))", |e| {
        matches!(
            e,
            Error::WrongOwner {
                owner: 12345,
                expected: 0,
                ..
            }
        )
    });
    for owner in [OwnerPolicy::Uid(12345), OwnerPolicy::Any] {
        let opts = OpenOptions {
            owner,
            ..Default::default()
        };
        let r = SegmentReader::open_with(&path, &opts)
            .unwrap_or_else(|e| panic!("{owner:?}: {e}\n{}", describe_file(&path)));
        assert_eq!(read_slot(&r, 1), sample_state(1));
    }
    // A directory of another owner: the default policy follows the directory.
    let dir = scratch.subdir("foreign");
    let inner = write_segment(&dir, "e.seg", &bytes);
    std::os::unix::fs::chown(&dir, Some(12345), None).unwrap();
    expect_open_err(
        &inner,
        &default_opts(),
        "WrongOwner (directory owner)",
        |e| {
            matches!(
                e,
                Error::WrongOwner {
                    owner: 0,
                    expected: 12345,
                    ..
                }
            )
        },
    );
}

#[test]
fn slot_index_out_of_range() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&config(scratch.path(), "e1", 2)).unwrap();
    let e = w
        .publish(2, &sample_state(0))
        .expect_err("publish slot 2 of 2");
    assert!(
        matches!(e, Error::SlotOutOfRange { slot: 2, count: 2 }),
        "{e:?}"
    );
    assert!(!w.pending_counter().queued(2));
    let r = SegmentReader::open(w.path()).unwrap();
    for slot in [2, usize::MAX] {
        let e = r.slot(slot).expect_err("read out of range");
        assert!(matches!(e, Error::SlotOutOfRange { count: 2, .. }), "{e:?}");
    }
}
