//! Hostile v1.3 regions (FORMAT §16.4, §17.7, §18.4): a directory that points anywhere, a
//! statistics block whose counts do not add up or that was left mid-update, a ring with
//! impossible fixed words. None of them crashes the reader; each is a clear error or an
//! absent region, and the slot records still read.

mod common;

use common::*;
use hydra_layout::region::{self, Layout};
use hydra_layout::stats::{self, HistogramKind};
use hydra_layout::{flight, Error, ErrorKind, SegmentReader};

const SLOTS: usize = 2;

/// Opens `bytes` written as `fixture.hps` (the name its header carries) in a fresh
/// directory `name` under the scratch directory.
fn open(scratch: &Scratch, name: &str, bytes: &[u8]) -> SegmentReader {
    let dir = scratch.join(name);
    if !dir.exists() {
        scratch.subdir(name);
    }
    SegmentReader::open(write_segment(&dir, "fixture.hps", bytes)).expect("opens")
}

#[test]
fn a_directory_that_points_anywhere_leaves_the_regions_absent() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let layout = Layout::for_slots(SLOTS);
    let entry = |i: usize, field: usize| layout.dir_offset + i * region::ENTRY_LEN + field;
    let cases: Vec<(&str, Vec<(usize, u64)>)> = vec![
        (
            "inside the slot table",
            vec![(hydra_layout::header::REGION_DIR_OFFSET, 1024)],
        ),
        (
            "past the end",
            vec![(hydra_layout::header::REGION_DIR_OFFSET, u64::MAX - 7)],
        ),
        (
            "count of 2^64-1",
            vec![(hydra_layout::header::REGION_COUNT_OFFSET, u64::MAX)],
        ),
        (
            "stats of 2^60 items",
            vec![(entry(0, region::ITEMS_OFFSET), 1 << 60)],
        ),
        ("stats stride 8", vec![(entry(0, region::STRIDE_OFFSET), 8)]),
        (
            "ring offset unaligned",
            vec![(
                entry(1, region::OFFSET_OFFSET),
                layout.flight.offset as u64 + 8,
            )],
        ),
    ];
    for (what, words) in cases {
        let r = open(&scratch, "dir", &patched(&bytes, &words));
        assert!(r.regions().problem.is_some(), "{what}: reported");
        for slot in 0..SLOTS {
            assert_eq!(
                r.slot(slot).unwrap().state,
                sample_state(slot as u64),
                "{what}"
            );
        }
        let stats_gone = r.regions().stats.is_none();
        let ring_gone = r.regions().flight.is_none();
        assert!(stats_gone || ring_gone, "{what}: a region refused");
        if stats_gone {
            assert!(r.stats(0).unwrap().is_none(), "{what}");
        }
        if ring_gone {
            assert!(r.history(0).unwrap().is_none(), "{what}");
        }
    }
}

#[test]
fn statistics_that_do_not_add_up_or_were_left_mid_update_are_errors() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let block = Layout::for_slots(SLOTS).stats.item(1);
    let itl = block + HistogramKind::Itl.offset();
    // A count without its bucket.
    let r = open(
        &scratch,
        "count",
        &patched(&bytes, &[(itl + stats::HIST_COUNT_OFFSET, 5)]),
    );
    let e = r.stats(1).unwrap_err();
    assert!(matches!(e, Error::BadStats { slot: 1, .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::BadRegion);
    assert!(e.to_string().contains("inter_token_latency"), "{e}");
    assert!(r.stats(0).unwrap().is_some(), "the other slot still reads");
    // More tasks ended than begun.
    let ended = block + stats::TASKS_ENDED_OFFSET;
    let r = open(&scratch, "tasks", &patched(&bytes, &[(ended, u64::MAX)]));
    assert!(matches!(r.stats(1), Err(Error::BadStats { .. })));
    // STATS_SEQ odd for ever: a writer that died mid-update.
    let r = open(&scratch, "torn", &patched(&bytes, &[(block, 7)]));
    let e = r.stats(1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RegionTorn {
                slot: Some(1),
                seq: 7,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Torn);
    assert!(r.slot(1).is_ok(), "the record is not torn");
}

#[test]
fn counts_that_go_backwards_between_two_copies_are_caught() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let block = Layout::for_slots(SLOTS).stats.item(0);
    let r = open(&scratch, "before", &bytes);
    let before = r.stats(0).unwrap().unwrap();
    let begun = before.word(stats::TASKS_BEGUN_OFFSET);
    assert!(begun >= 1);
    let after = patched(
        &bytes,
        &[
            (block + stats::TASKS_BEGUN_OFFSET, 0),
            (block + stats::TASKS_ENDED_OFFSET, 0),
        ],
    );
    let later = open(&scratch, "after", &after).stats(0).unwrap().unwrap();
    let e = later.check_since(&before).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("tasks_begun went backwards from {begun} to 0")
    );
}

#[test]
fn a_ring_with_impossible_fixed_words_is_refused_alone() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let ring = Layout::for_slots(SLOTS).flight.item(1);
    for (what, offset, value) in [
        ("capacity 0", flight::FR_CAPACITY_OFFSET, 0),
        ("capacity 2^64-1", flight::FR_CAPACITY_OFFSET, u64::MAX),
        ("capacity past the item", flight::FR_CAPACITY_OFFSET, 65),
        ("entry length 100", flight::FR_ENTRY_LEN_OFFSET, 100),
        ("entry length 2^63", flight::FR_ENTRY_LEN_OFFSET, 1 << 63),
    ] {
        let r = open(
            &scratch,
            "ring",
            &patched(&bytes, &[(ring + offset, value)]),
        );
        let e = r.history(1).unwrap_err();
        assert!(matches!(e, Error::BadRing { slot: 1, .. }), "{what}: {e}");
        assert!(
            r.history(0).unwrap().is_some(),
            "{what}: slot 0's ring reads"
        );
    }
    // Every position torn (odd for ever): nothing shown, each counted.
    let mut torn = bytes.clone();
    for p in 0..flight::CAPACITY {
        set_word(
            &mut torn,
            ring + flight::ENTRIES_OFFSET + p * flight::ENTRY_LEN,
            2 * p as u64 + 1,
        );
    }
    let h = open(&scratch, "torn", &torn).history(1).unwrap().unwrap();
    assert!(h.entries.is_empty());
    assert_eq!(h.torn, flight::CAPACITY);
}

#[test]
fn a_v1_3_file_cut_inside_its_regions_is_refused() {
    let scratch = Scratch::new();
    let bytes = valid_segment(SLOTS);
    let layout = Layout::for_slots(SLOTS);
    for len in [layout.dir_offset, layout.flight.offset + 8, bytes.len() - 8] {
        let path = write_segment(scratch.path(), "fixture.hps", &bytes[..len]);
        let e = SegmentReader::open(&path).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadGeometry, "cut at {len}: {e}");
    }
}
