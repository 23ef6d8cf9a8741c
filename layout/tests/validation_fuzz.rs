//! Validation never panics: `SegmentReader::open` on arbitrary bytes, and on mutations of
//! a valid segment, returns `Ok` or `Err`; when it returns `Ok`, every read also returns.
//!
//! A panic anywhere (an unchecked offset, an overflow in debug builds, a slice out of
//! range) fails the property; proptest then shrinks the input and prints it.

mod common;

use common::*;
use hydra_layout::header as h;
use hydra_layout::slot as s;
use hydra_layout::{OpenOptions, ReadPolicy, SegmentReader};
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const SLOTS: usize = 4;

fn valid() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| valid_segment(SLOTS))
}

/// Opens `bytes` written to `dir` and, when the open succeeds, exercises every read.
/// Returns whether the open succeeded.
fn open_and_read_everything(dir: &Path, bytes: &[u8]) -> bool {
    let path = write_segment(dir, "fuzz.seg", bytes);
    // Small retry budget: a mutated SEQ word makes a slot torn, and the default budget
    // (2000 yields) per torn slot would only slow the run down.
    let options = OpenOptions {
        read_policy: ReadPolicy {
            spins: 4,
            yields: 4,
        },
        ..Default::default()
    };
    let outcomes = [
        SegmentReader::open(&path),
        SegmentReader::open_with(&path, &options),
    ];
    let mut ok = false;
    for reader in outcomes.into_iter().flatten() {
        ok = true;
        let snap = reader.snapshot().expect("snapshot of an unchanged file");
        assert_eq!(snap.slots.len(), reader.slot_count());
        let _ = reader.header().expect("header of an unchanged file");
        let _ = reader.liveness();
        let _ = reader.lifecycle();
        let id = reader.identity();
        let _ = id.to_realtime_ns(u64::MAX);
        let _ = id.to_realtime_ns(0);
        for i in 0..=reader.slot_count() {
            let _ = reader.slot(i);
        }
        let _ = reader.slot(usize::MAX);
    }
    ok
}

/// Interesting values for a header or slot word: boundaries of every check the reader makes.
fn word_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..16,
        (0u64..64).prop_map(|x| x * s::SLOT_ALIGN as u64),
        (0u64..64).prop_map(|x| x * 8),
        Just(h::HEADER_LEN as u64),
        Just(s::SLOT_STRIDE as u64),
        Just(hydra_layout::MAX_SLOTS as u64),
        Just(hydra_layout::MAX_SLOTS as u64 + 1),
        Just(u64::MAX),
        Just(u64::MAX - 7),
        Just(1u64 << 63),
        Just(1u64 << 52),
        Just(h::BYTE_ORDER_MARK_SWAPPED),
        (0u64..5),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite the word at this index.
    Word(usize, u64),
    /// Overwrite one byte.
    Byte(usize, u8),
    /// Cut (or zero-extend) the file to this length.
    Resize(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let words = hydra_layout::segment_len(SLOTS) / 8;
    prop_oneof![
        // Mostly the geometry and lifecycle words, where the checks are.
        4 => (1usize..10, word_value()).prop_map(|(i, v)| Mutation::Word(i, v)),
        3 => (0usize..words, word_value()).prop_map(|(i, v)| Mutation::Word(i, v)),
        2 => (0usize..words * 8, any::<u8>()).prop_map(|(i, v)| Mutation::Byte(i, v)),
        2 => (0usize..words * 8 + 512).prop_map(Mutation::Resize),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Word(i, v) => {
            if (i + 1) * 8 <= bytes.len() {
                set_word(bytes, i * 8, v);
            }
        }
        Mutation::Byte(i, v) => {
            if let Some(b) = bytes.get_mut(i) {
                *b = v;
            }
        }
        Mutation::Resize(len) => bytes.resize(len, 0),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..8192)) {
        let scratch = Scratch::new();
        open_and_read_everything(scratch.path(), &bytes);
    }

    #[test]
    fn random_bytes_behind_a_valid_prefix_never_panic(
        prefix_words in 0usize..10,
        tail in proptest::collection::vec(any::<u8>(), 0..8192),
    ) {
        // Keep the first words of a real header (magic, byte order, major, ...) so the
        // random part reaches the later checks.
        let scratch = Scratch::new();
        let mut bytes = valid()[..prefix_words * 8].to_vec();
        bytes.extend_from_slice(&tail);
        open_and_read_everything(scratch.path(), &bytes);
    }

    #[test]
    fn mutated_segments_never_panic(mutations in proptest::collection::vec(mutation(), 1..8)) {
        let scratch = Scratch::new();
        let mut bytes = valid().to_vec();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        open_and_read_everything(scratch.path(), &bytes);
    }

    #[test]
    fn truncated_segments_are_refused(len in 0usize..hydra_layout::segment_len(SLOTS)) {
        let scratch = Scratch::new();
        let opened = open_and_read_everything(scratch.path(), &valid()[..len]);
        prop_assert!(!opened, "a segment cut to {} bytes was accepted", len);
    }

    #[test]
    fn slot_word_mutations_keep_the_segment_readable(
        slot in 0usize..SLOTS,
        word in 0usize..s::SLOT_STRIDE / 8,
        value in word_value(),
    ) {
        // Slot words are data, never geometry: any value opens, and reads return.
        let scratch = Scratch::new();
        let mut bytes = valid().to_vec();
        set_word(&mut bytes, h::HEADER_LEN + slot * s::SLOT_STRIDE + word * 8, value);
        prop_assert!(open_and_read_everything(scratch.path(), &bytes));
    }
}

/// Guards the mutation property against testing only the first checks: a good share of
/// mutated segments must still open (and so reach the snapshot code), and a good share must
/// be refused.
#[test]
fn mutations_reach_both_outcomes() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let scratch = Scratch::new();
    let mut runner = TestRunner::deterministic();
    let strategy = proptest::collection::vec(mutation(), 1..8);
    let (mut opened, total) = (0u32, 400u32);
    for _ in 0..total {
        let mutations = strategy.new_tree(&mut runner).unwrap().current();
        let mut bytes = valid().to_vec();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        opened += u32::from(open_and_read_everything(scratch.path(), &bytes));
    }
    eprintln!("mutated segments opened: {opened} of {total}");
    assert!(
        opened >= total / 20 && opened <= total - total / 20,
        "only {opened} of {total} mutated segments opened: the mutations miss a path"
    );
}

#[test]
fn the_unmutated_fixture_opens() {
    // Guards the properties above against a fixture that never opens at all.
    let scratch = Scratch::new();
    assert!(open_and_read_everything(scratch.path(), valid()));
}
