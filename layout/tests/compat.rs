//! Forward compatibility (a newer minor with a longer header and stride reads the same) and
//! string fields (UTF-8, truncated at a char boundary, read back as written).

mod common;

use common::*;
use hydra_layout::header as h;
use hydra_layout::slot as s;
use hydra_layout::{EngineDescription, SegmentConfig, SegmentReader, SegmentWriter};

const SLOTS: usize = 3;

/// Rebuilds a v1.0 segment as a newer minor would lay it out: `header_len` bytes of header
/// (the extra bytes non-zero), slots at `slot_offset`, `stride` bytes apart, each slot's
/// extra bytes and reserved words non-zero.
fn as_newer_minor(
    v10: &[u8],
    minor: u64,
    header_len: usize,
    slot_offset: usize,
    stride: usize,
) -> Vec<u8> {
    let total = slot_offset + SLOTS * stride;
    let mut out = vec![0u8; total];
    out[..h::HEADER_LEN].copy_from_slice(&v10[..h::HEADER_LEN]);
    // Newer header fields, and the v1.0 reserved areas a newer minor may now use.
    for b in &mut out[h::HEADER_LEN..slot_offset] {
        *b = 0xA5;
    }
    for b in &mut out[h::WORDS_END..h::STRINGS_OFFSET] {
        *b = 0x5A;
    }
    for b in &mut out[h::STRINGS_END..h::HEADER_LEN] {
        *b = 0x3C;
    }
    for i in 0..SLOTS {
        let old = &v10[h::HEADER_LEN + i * s::SLOT_STRIDE..][..s::SLOT_LEN];
        let new = &mut out[slot_offset + i * stride..][..stride];
        new[..s::SLOT_LEN].copy_from_slice(old);
        for b in &mut new[s::GUARDED_END..s::PENDING_OFFSET] {
            *b = 0xC3;
        }
        for b in &mut new[s::PENDING_OFFSET + 8..] {
            *b = 0x96 ^ i as u8;
        }
    }
    set_word(&mut out, h::VERSION_MINOR_OFFSET, minor);
    set_word(&mut out, h::HEADER_LEN_OFFSET, header_len as u64);
    set_word(&mut out, h::SLOT_OFFSET_OFFSET, slot_offset as u64);
    set_word(&mut out, h::SLOT_STRIDE_OFFSET, stride as u64);
    set_word(&mut out, h::TOTAL_LEN_OFFSET, total as u64);
    out
}

#[test]
fn newer_minor_with_longer_header_and_stride_reads_the_same() {
    let scratch = Scratch::new();
    let v10 = valid_segment(SLOTS);
    let original = SegmentReader::open(write_segment(scratch.path(), "v10.seg", &v10)).unwrap();
    let layouts = [
        (1, h::HEADER_LEN, h::HEADER_LEN, s::SLOT_STRIDE),
        (3, 2048, 2048, 512),
        (9, 2048, 2048 + 384, 512),
        (u64::MAX, 1032, 1152, 384),
    ];
    for (minor, header_len, slot_offset, stride) in layouts {
        let what = format!("minor {minor}, header {header_len}, slots at {slot_offset} x {stride}");
        let bytes = as_newer_minor(&v10, minor, header_len, slot_offset, stride);
        let path = write_segment(scratch.path(), "newer.seg", &bytes);
        let r = SegmentReader::open(&path)
            .unwrap_or_else(|e| panic!("{what}: refused: {e}\n{}", describe_file(&path)));
        assert_eq!(r.identity().version_minor, minor, "{what}");
        assert_eq!(r.slot_count(), SLOTS, "{what}");
        assert_eq!(r.len(), bytes.len() as u64, "{what}");
        assert_eq!(
            r.identity().description,
            original.identity().description,
            "{what}"
        );
        assert_eq!(r.identity().engine_id, "fixture", "{what}");
        for i in 0..SLOTS {
            let got = r
                .slot(i)
                .unwrap_or_else(|e| panic!("{what}: slot {i}: {e}"));
            let want = original.slot(i).unwrap();
            assert_eq!(got.state, sample_state(i as u64), "{what}: slot {i}");
            assert_eq!(
                (got.state, got.pending, got.seq),
                (want.state, want.pending, want.seq)
            );
        }
        assert_eq!(r.header().unwrap(), original.header().unwrap(), "{what}");
    }
}

/// Publishes on slot 0 that layer `done` of 30 of `state`'s step in flight finished 5 ns
/// into the step; returns the position.
fn publish_layer(w: &mut SegmentWriter, state: &s::SlotState, done: u64) -> s::Substep {
    let layer = s::Substep {
        done,
        total: 30,
        at_ns: state.step_start_ns + 5,
        step_start_ns: state.step_start_ns,
    };
    w.publish_substep(0, &layer).unwrap();
    layer
}

fn create_with(dir: &std::path::Path, description: EngineDescription) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: "strings".into(),
        slot_count: 1,
        description,
    })
    .unwrap()
}

/// The longest prefix of `s` of at most `max` bytes ending on a char boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[test]
fn unicode_strings_round_trip_and_long_ones_are_cut_at_a_char_boundary() {
    let scratch = Scratch::new();
    let d = EngineDescription {
        // 3-byte chars: 127 bytes available, 42 chars = 126 bytes fit.
        model_name: "模型".repeat(100),
        // 4-byte chars: 31 bytes available, 7 emoji = 28 bytes fit.
        model_quant: "🦙".repeat(20),
        // 2-byte chars after one ASCII byte: 255 bytes available, "/" + 127 "é" = 255 fit.
        model_path: format!("/{}", "é".repeat(300)),
        // Exactly the field (31 bytes + NUL): kept whole.
        tokenizer: "t".repeat(h::TOKENIZER_LEN - 1),
        // One byte too many: the last byte goes.
        model_alias: "a".repeat(h::MODEL_ALIAS_LEN),
        // Short mixed text: kept whole.
        device: "cuda:0 — Ünïcødé ✓".into(),
        capabilities: h::capabilities::COMPLETION | h::capabilities::CHUNKED_PREFILL,
    };
    let w = create_with(scratch.path(), d.clone());
    let r = SegmentReader::open(w.path()).unwrap();
    let got = &r.identity().description;

    let cases: [(&str, &str, &str, usize); 6] = [
        (
            "model_name",
            &got.model_name,
            &d.model_name,
            h::MODEL_NAME_LEN,
        ),
        (
            "model_quant",
            &got.model_quant,
            &d.model_quant,
            h::MODEL_QUANT_LEN,
        ),
        (
            "model_path",
            &got.model_path,
            &d.model_path,
            h::MODEL_PATH_LEN,
        ),
        ("tokenizer", &got.tokenizer, &d.tokenizer, h::TOKENIZER_LEN),
        (
            "model_alias",
            &got.model_alias,
            &d.model_alias,
            h::MODEL_ALIAS_LEN,
        ),
        ("device", &got.device, &d.device, h::DEVICE_LEN),
    ];
    for (name, got, wrote, field_len) in cases {
        assert_eq!(got, prefix(wrote, field_len - 1), "{name}");
        assert!(got.len() < field_len, "{name}: no room left for the NUL");
        assert!(wrote.starts_with(got), "{name}: not a prefix");
    }
    assert_eq!(got.model_name.chars().count(), 42);
    assert_eq!(got.model_quant, "🦙".repeat(7));
    assert_eq!(got.model_path.len(), 255);
    assert_eq!(got.tokenizer, d.tokenizer);
    assert_eq!(got.model_alias.len(), h::MODEL_ALIAS_LEN - 1);
    assert_eq!(got.device, d.device);
    assert_eq!(
        got.capabilities,
        d.capabilities | h::capabilities::WRITER_DERIVED
    );

    // On disk every string field ends in NUL padding.
    let bytes = std::fs::read(w.path()).unwrap();
    for (off, len) in [
        (h::ENGINE_ID_OFFSET, h::ENGINE_ID_LEN),
        (h::MODEL_NAME_OFFSET, h::MODEL_NAME_LEN),
        (h::MODEL_QUANT_OFFSET, h::MODEL_QUANT_LEN),
        (h::TOKENIZER_OFFSET, h::TOKENIZER_LEN),
        (h::DEVICE_OFFSET, h::DEVICE_LEN),
        (h::MODEL_ALIAS_OFFSET, h::MODEL_ALIAS_LEN),
        (h::MODEL_PATH_OFFSET, h::MODEL_PATH_LEN),
    ] {
        assert_eq!(
            bytes[off + len - 1],
            0,
            "field at {off} is not NUL-terminated"
        );
    }
}

#[test]
fn empty_strings_and_invalid_utf8_on_disk() {
    let scratch = Scratch::new();
    let w = create_with(scratch.path(), EngineDescription::default());
    let r = SegmentReader::open(w.path()).unwrap();
    assert_eq!(
        r.identity().description,
        EngineDescription {
            capabilities: h::capabilities::WRITER_DERIVED,
            ..EngineDescription::default()
        }
    );

    // A foreign writer's invalid UTF-8 is replaced, not rejected; a field with no NUL at all
    // is read to its end.
    let mut bytes = std::fs::read(w.path()).unwrap();
    bytes[h::MODEL_NAME_OFFSET..h::MODEL_NAME_OFFSET + 4]
        .copy_from_slice(&[b'm', 0xFF, 0xFE, b'x']);
    for b in &mut bytes[h::DEVICE_OFFSET..h::DEVICE_OFFSET + h::DEVICE_LEN] {
        *b = b'd';
    }
    let path = write_segment(scratch.path(), "strings.hps", &bytes);
    let r = SegmentReader::open(&path).unwrap();
    let d = &r.identity().description;
    assert_eq!(d.model_name, "m\u{FFFD}\u{FFFD}x");
    assert_eq!(d.device, "d".repeat(h::DEVICE_LEN));
}

/// Format v1.1 against v1.0, both ways, with files written by each. A v1.1 writer's file
/// (a layer position published inside a step) and the file a v1.0 writer leaves for the
/// same record (minor 0, the substep words zero: v1.0 writers zero reserved words) read
/// the same through every v1.0 word; the v1.1 reader shows the position for the first and
/// "unknown" (no substep at all) for the second, even where a v1.0 file's reserved words
/// happen to hold what would be a valid position.
#[test]
fn v1_0_and_v1_1_writers_and_readers_agree_on_the_v1_0_words() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&SegmentConfig {
        description: EngineDescription {
            capabilities: h::capabilities::LAYER_PROGRESS,
            ..Default::default()
        },
        ..config(scratch.path(), "v11", 1)
    })
    .unwrap();
    let mut state = sample_state(0);
    state.start_step(64, state.last_progress_ns + 10);
    w.publish(0, &state).unwrap();
    let layer = publish_layer(&mut w, &state, 17);
    let mut v11 = std::fs::read(w.path()).unwrap();
    assert_eq!(
        word(&v11, h::VERSION_MINOR_OFFSET),
        3,
        "this crate writes v1.3"
    );
    // What a v1.1 writer leaves for the same events: the same bytes with minor 1.
    set_word(&mut v11, h::VERSION_MINOR_OFFSET, 1);

    let mut v10 = v11.clone();
    set_word(&mut v10, h::VERSION_MINOR_OFFSET, 0);
    let slot = h::HEADER_LEN;
    for off in (s::SUBSTEP_DONE_OFFSET..s::SUBSTEP_END).step_by(8) {
        set_word(&mut v10, slot + off, 0);
    }
    // A v1.0 file whose reserved words hold a "position" (a hostile or foreign writer).
    let mut v10_noise = v11.clone();
    set_word(&mut v10_noise, h::VERSION_MINOR_OFFSET, 0);
    // A v1.1 writer that does not publish positions (no LAYER_PROGRESS capability).
    let mut v11_no_layers = v11.clone();
    set_word(&mut v11_no_layers, h::MODEL_CAPABILITIES_OFFSET, 0);

    let read = |name: &str, bytes: &[u8]| {
        let path = write_segment(scratch.path(), name, bytes);
        SegmentReader::open(&path).unwrap().slot(0).unwrap()
    };
    let new = read("v11.seg", &v11);
    let old = read("v10.seg", &v10);
    let noise = read("v10-noise.seg", &v10_noise);
    let no_layers = read("v11-no-layers.seg", &v11_no_layers);
    for (what, snap) in [
        ("v1.1", &new),
        ("v1.0", &old),
        ("v1.0 with noise", &noise),
        ("v1.1 without the capability", &no_layers),
    ] {
        assert_eq!(
            (snap.state, snap.pending, snap.seq),
            (state, 0, 4),
            "{what}: the v1.0 words"
        );
    }
    assert_eq!(new.substep, Some(layer));
    assert_eq!(new.layer(), Some(layer));
    for (what, snap) in [
        ("v1.0", &old),
        ("v1.0 with noise", &noise),
        ("v1.1 without the capability", &no_layers),
    ] {
        assert_eq!(
            snap.substep, None,
            "{what}: a v1.0 writer's position is unknown"
        );
        assert_eq!(snap.layer(), None, "{what}");
    }
}

/// The words a v1.1 reader takes from the v1.2 file `v12`: exactly the record `state`, the
/// position `layer`, and one task pending.
fn v1_1_reader_sees(v12: &[u8], state: &s::SlotState, layer: s::Substep) {
    let slot = h::HEADER_LEN;
    let at = |off: usize| word(v12, slot + off);
    let mut v10_words = [0u64; s::DATA_WORDS];
    for (i, w) in v10_words.iter_mut().enumerate() {
        *w = at(s::TASK_ID_OFFSET + 8 * i);
    }
    assert_eq!(at(s::SEQ_OFFSET) % 2, 0, "a stable record");
    assert_eq!(hydra_layout::SlotState::from_words(&v10_words), *state);
    let substep_words = [
        at(s::SUBSTEP_DONE_OFFSET),
        at(s::SUBSTEP_TOTAL_OFFSET),
        at(s::SUBSTEP_NS_OFFSET),
        at(s::SUBSTEP_STEP_OFFSET),
    ];
    assert_eq!(s::Substep::from_words(&substep_words), layer);
    assert_eq!(
        at(s::PENDING_OFFSET),
        1,
        "the update in parts left PENDING alone"
    );
}

/// After the step of `state` (predicted as `prediction`) ends, `w`'s slot 0 has no step
/// prediction until the next step's own, and keeps the phase's end.
fn prediction_is_its_steps_only(
    w: &mut SegmentWriter,
    state: s::SlotState,
    prediction: s::Prediction,
) {
    let mut next = state;
    next.finish_step(64, state.step_start_ns + 30_000_000);
    w.publish(0, &next).unwrap();
    let r = SegmentReader::open(w.path()).unwrap();
    assert_eq!(r.slot(0).unwrap().step_expected_ns(), None, "between steps");
    assert_eq!(
        r.slot(0).unwrap().phase_end_ns(),
        Some(prediction.task_expected_end_ns),
        "the phase end stays"
    );
    next.start_step(64, next.last_progress_ns + 1);
    w.publish(0, &next).unwrap();
    assert_eq!(r.slot(0).unwrap().step_expected_ns(), None, "a later step");
    w.publish_prediction(
        0,
        &s::Prediction {
            step_start_ns: next.step_start_ns,
            ..prediction
        },
    )
    .unwrap();
    assert_eq!(r.slot(0).unwrap().step_expected_ns(), Some(25_000_000));
    assert_eq!(
        r.slot(0).unwrap().state,
        next,
        "a prediction alone leaves the record"
    );
}

/// Format v1.2 against v1.1, both ways. A v1.2 writer publishes a step with its prediction
/// in one update. A v1.1 reader takes words 8..184 under the seqlock and `PENDING`, and
/// nothing else: it sees exactly the record and layer position that were published (checked
/// here on the file's bytes, word by word, as such a reader decodes them). A v1.2 reader of
/// the same bytes sees the prediction too; of the bytes a v1.1 writer would leave (minor 1,
/// or no `STEP_PREDICTION` capability, even with words in the prediction range) it sees
/// none, and the same v1.1 words.
#[test]
fn v1_1_and_v1_2_writers_and_readers_agree() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&SegmentConfig {
        description: EngineDescription {
            capabilities: h::capabilities::LAYER_PROGRESS | h::capabilities::STEP_PREDICTION,
            ..Default::default()
        },
        ..config(scratch.path(), "v12", 1)
    })
    .unwrap();
    let mut state = sample_state(0);
    state.start_step(64, state.last_progress_ns + 10);
    let prediction = s::Prediction {
        step_expected_ns: 25_000_000,
        step_start_ns: state.step_start_ns,
        task_expected_end_ns: state.step_start_ns + 9_000_000_000,
        phase_start_ns: state.phase_start_ns,
        error_ppm: 80_000,
    };
    w.publish_with_prediction(0, &state, &prediction).unwrap();
    w.pending_counter().queued(0);
    let layer = publish_layer(&mut w, &state, 3);
    let v12 = std::fs::read(w.path()).unwrap();
    assert_eq!(
        word(&v12, h::VERSION_MINOR_OFFSET),
        3,
        "this crate writes v1.3"
    );

    // A v1.1 reader on the v1.2 file: its words, decoded from the bytes.
    v1_1_reader_sees(&v12, &state, layer);

    // A v1.2 reader on the v1.2 file, on a v1.1 writer's file, and on a v1.2 file
    // without the capability.
    let mut v11 = v12.clone();
    set_word(&mut v11, h::VERSION_MINOR_OFFSET, 1);
    let mut no_cap = v12.clone();
    set_word(
        &mut no_cap,
        h::MODEL_CAPABILITIES_OFFSET,
        h::capabilities::LAYER_PROGRESS,
    );
    let read = |name: &str, bytes: &[u8]| {
        let path = write_segment(scratch.path(), name, bytes);
        SegmentReader::open(&path).unwrap().slot(0).unwrap()
    };
    let new = read("v12.seg", &v12);
    assert_eq!(new.prediction, Some(prediction));
    assert_eq!(new.step_expected_ns(), Some(25_000_000));
    assert_eq!(new.phase_end_ns(), Some(prediction.task_expected_end_ns));
    for (what, snap) in [
        ("v1.2", &new),
        ("v1.1", &read("v11.seg", &v11)),
        ("v1.2 without the capability", &read("nocap.seg", &no_cap)),
    ] {
        assert_eq!(
            (snap.state, snap.substep, snap.pending),
            (state, Some(layer), 1),
            "{what}: the v1.1 words"
        );
        if what != "v1.2" {
            assert_eq!(snap.prediction, None, "{what}: no prediction");
            assert_eq!(snap.step_expected_ns(), None, "{what}");
        }
    }

    // The prediction is the step in flight's only: the next step has none until its own.
    prediction_is_its_steps_only(&mut w, state, prediction);
}

/// Format v1.3 against v1.2, both ways. The v1.3 regions follow the slot table and change
/// no v1.2 word: a v1.2 reader (it validates `TOTAL_LEN` against the file and reads the
/// slot table only) sees every record exactly as before. A v1.3 reader of a v1.2 writer's
/// file (minor 2, no directory, the slot table ending the file), or of a v1.3 file
/// relabelled minor 2 (its directory words are then reserved words that mean nothing),
/// finds no statistics and no flight recorder: absent, not zero.
#[test]
fn v1_2_and_v1_3_writers_and_readers_agree() {
    let scratch = Scratch::new();
    let mut w = SegmentWriter::create(&SegmentConfig {
        description: EngineDescription {
            capabilities: h::capabilities::LAYER_PROGRESS | h::capabilities::STEP_PREDICTION,
            ..Default::default()
        },
        ..config(scratch.path(), "v13", 2)
    })
    .unwrap();
    let mut state = sample_state(0);
    state.start_step(64, state.last_progress_ns + 10);
    w.publish(0, &state).unwrap();
    state.finish_step(state.work_done + 64, state.step_start_ns + 5_000_000);
    w.publish(0, &state).unwrap();
    w.publish(1, &sample_state(1)).unwrap();
    let v13 = std::fs::read(w.path()).unwrap();
    assert_eq!(v13.len(), hydra_layout::segment_len(2));
    assert!(v13.len() > h::HEADER_LEN + 2 * s::SLOT_STRIDE);

    // The v1.2 file of the same events: the slot table ends it, no directory, minor 2.
    let mut v12 = v13[..h::HEADER_LEN + 2 * s::SLOT_STRIDE].to_vec();
    let v12_len = v12.len() as u64;
    set_word(&mut v12, h::VERSION_MINOR_OFFSET, 2);
    set_word(&mut v12, h::TOTAL_LEN_OFFSET, v12_len);
    set_word(&mut v12, h::REGION_DIR_OFFSET, 0);
    set_word(&mut v12, h::REGION_COUNT_OFFSET, 0);
    set_word(
        &mut v12,
        h::MODEL_CAPABILITIES_OFFSET,
        h::capabilities::LAYER_PROGRESS | h::capabilities::STEP_PREDICTION,
    );
    let mut relabelled = v13.clone();
    set_word(&mut relabelled, h::VERSION_MINOR_OFFSET, 2);

    let open = |name: &str, bytes: &[u8]| {
        let dir = scratch.subdir(name);
        SegmentReader::open(write_segment(&dir, "v13.hps", bytes)).unwrap()
    };
    let new = open("new", &v13);
    assert!(new.stats(0).unwrap().is_some());
    let last = *new.history(0).unwrap().unwrap().entries.last().unwrap();
    assert_eq!((last.duration_ns, last.advanced), (5_000_000, 64));
    for (what, r) in [
        ("v1.2", open("old", &v12)),
        ("relabelled", open("relabelled", &relabelled)),
    ] {
        for slot in 0..2 {
            let (a, b) = (new.slot(slot).unwrap(), r.slot(slot).unwrap());
            assert_eq!(
                (a.state, a.substep, a.prediction, a.seq),
                (b.state, b.substep, b.prediction, b.seq),
                "{what}: slot {slot}"
            );
            assert!(r.stats(slot).unwrap().is_none(), "{what}: no statistics");
            assert!(r.history(slot).unwrap().is_none(), "{what}: no ring");
        }
        assert_eq!(r.regions(), &hydra_layout::Regions::default(), "{what}");
    }
}
