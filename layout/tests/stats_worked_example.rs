//! FORMAT.md §20, the worked example of v1.3, replayed through the real `SegmentWriter`:
//! the same events, made with the same `SlotState` transitions every writer uses, must
//! leave exactly the statistics words and flight recorder entries the example lists, at
//! the file offsets it gives. Then the reader's view of them, and a hostile ring head.

mod common;

use common::{word, Scratch};
use hydra_layout::header::capabilities as caps;
use hydra_layout::stats::{Counter, HistogramKind};
use hydra_layout::{
    ErrorCode, FinishCause, FinishReason, Phase, Prediction, SegmentConfig, SegmentReader,
    SegmentWriter, SlotState, StepResult, Substep, WorkUnit,
};

const CAPS: u64 = caps::COMPLETION
    | caps::STATE_SAVE_RESTORE
    | caps::CHUNKED_PREFILL
    | caps::LAYER_PROGRESS
    | caps::STEP_PREDICTION
    | caps::ARRIVAL_TIMES
    | caps::FINISH_CAUSES;

/// The example's events on slot 0 of a one-slot segment; returns the writer (alive, so the
/// file stays) and the file's bytes afterwards.
fn replay(scratch: &Scratch) -> (SegmentWriter, Vec<u8>) {
    let mut config = common::config(scratch.path(), "engine-0", 1);
    config.description.capabilities = CAPS;
    let mut w = SegmentWriter::create(&SegmentConfig { ..config }).expect("create");
    let mut s = SlotState::default();
    let layers = |w: &mut SegmentWriter, done: u64, step_start_ns: u64| {
        w.publish_substep(
            0,
            &Substep {
                done,
                total: 30,
                at_ns: step_start_ns + 1,
                step_start_ns,
            },
        )
        .unwrap();
    };
    let predicted = |expected: u64, start: u64| Prediction {
        step_expected_ns: expected,
        step_start_ns: start,
        ..Prediction::default()
    };
    // 1-2: task 7 arrives, and begins 2 ms later with 24 tokens cached.
    w.note_arrival(0, 5_000_000_000).unwrap();
    s.n_past = 24;
    s.begin_task(7, Phase::Prefill, WorkUnit::Tokens, 1000, 5_002_000_000);
    s.tokens_cached = 24;
    w.publish(0, &s).unwrap();
    // 3-4: a 512-token chunk without a prediction.
    s.start_step(512, 5_002_500_000);
    w.publish(0, &s).unwrap();
    layers(&mut w, 30, 5_002_500_000);
    s.finish_step(512, 5_152_500_000);
    s.n_past = 536;
    w.publish(0, &s).unwrap();
    // 5-6: the last 488 tokens, predicted 140 ms.
    s.start_step(488, 5_153_000_000);
    w.publish_with_prediction(0, &s, &predicted(140_000_000, 5_153_000_000))
        .unwrap();
    layers(&mut w, 30, 5_153_000_000);
    s.finish_step(1000, 5_313_000_000);
    s.n_past = 1024;
    w.publish(0, &s).unwrap();
    // 7: decode.
    s.enter_phase(Phase::Decode, WorkUnit::Tokens, 256, 5_313_500_000);
    s.tokens_cached = s.n_past;
    w.publish(0, &s).unwrap();
    // 8-13: three decode steps.
    for (start, expected, took) in [
        (5_314_000_000u64, 10_000_000u64, 12_000_000u64),
        (5_326_500_000, 11_000_000, 11_000_000),
        (5_338_000_000, 12_000_000, 13_000_000),
    ] {
        s.start_step(1, start);
        w.publish_with_prediction(0, &s, &predicted(expected, start))
            .unwrap();
        layers(&mut w, 30, start);
        s.finish_step(s.work_done + 1, start + took);
        s.n_past += 1;
        w.publish(0, &s).unwrap();
    }
    // 14: the task ends in EOS.
    w.note_finish(0, FinishCause::Eos, 5_351_200_000).unwrap();
    s.finish(FinishCause::Eos.reason(), ErrorCode::None);
    w.publish(0, &s).unwrap();
    // 15-16: task 8, nothing cached, its first chunk predicted 149 ms.
    w.note_arrival(0, 6_000_000_000).unwrap();
    s.n_past = 0;
    s.begin_task(8, Phase::Prefill, WorkUnit::Tokens, 2000, 6_001_000_000);
    s.tokens_cached = 0;
    w.publish(0, &s).unwrap();
    s.start_step(512, 6_001_500_000);
    w.publish_with_prediction(0, &s, &predicted(149_000_000, 6_001_500_000))
        .unwrap();
    layers(&mut w, 7, 6_001_500_000);
    // 17: the forward fails after layer 7.
    w.note_finish(0, FinishCause::Error, 6_101_500_000).unwrap();
    s.finish(FinishReason::Error, ErrorCode::Compute);
    w.publish(0, &s).unwrap();
    let bytes = std::fs::read(w.path()).expect("read the segment");
    (w, bytes)
}

#[test]
fn the_geometry_and_directory_are_those_of_section_20() {
    let scratch = Scratch::new();
    let (_w, b) = replay(&scratch);
    assert_eq!(b.len(), 22_016);
    let expect = [
        (24, 3),
        (32, 1024),
        (40, 1024),
        (48, 256),
        (56, 1),
        (64, 22_016),
        (184, CAPS | caps::SLOT_STATS | caps::FLIGHT_RECORDER),
        (200, 1280),
        (208, 3),
        (1280, 1),
        (1288, 1408),
        (1296, 6016),
        (1304, 1),
        (1312, 2),
        (1320, 7424),
        (1328, 8320),
        (1336, 1),
        (1344, 3),
        (1352, 15_744),
        (1360, 6272),
        (1368, 1),
        (1376, 0),
        (1400, 0),
        (7432, 64),
        (7440, 128),
    ];
    for (offset, value) in expect {
        assert_eq!(word(&b, offset), value, "word at {offset}");
    }
}

#[test]
fn the_statistics_item_holds_exactly_the_listed_words() {
    let scratch = Scratch::new();
    let (_w, b) = replay(&scratch);
    let mut listed: Vec<(usize, u64)> = vec![
        (1408, 24),
        (1416, 2),
        (1424, 2),
        (1432, 6_000_000_000),
        (1448, 7),
        (1456, 1000),
        (1464, 24),
        (1472, 3),
        (1544, 1),
        (1592, 1),
        (1704, 1),
        (1808, 410_000_000),
        (1816, 36_000_000),
        (1872, 2),
        (1880, 3),
        (1936, 1),
    ];
    // Histograms: (COUNT at, COUNT, SUM, [(bucket at, n)]).
    type Listed<'a> = (usize, u64, u64, &'a [(usize, u64)]);
    let histograms: [Listed; 10] = [
        (2048, 1, 313_500_000, &[(2248, 1)]),
        (2496, 3, 36_000_000, &[(2616, 2), (2624, 1)]),
        (2944, 2, 4_000_000, &[(3016, 1), (3032, 1)]),
        (3392, 1, 311_000_000, &[(3592, 1)]),
        (3840, 1, 37_500_000, &[(3992, 1)]),
        (4288, 2, 452_700_000, &[(4464, 1), (4488, 1)]),
        (4736, 2, 310_000_000, &[(4920, 2)]),
        (5184, 3, 36_000_000, &[(5304, 2), (5312, 1)]),
        (6528, 1, 1_198_372, &[(6744, 1)]),
        (6976, 3, 3_442_824, &[(7184, 1), (7192, 2)]),
    ];
    for (at, count, sum, buckets) in histograms {
        listed.push((at, count));
        listed.push((at + 8, sum));
        listed.extend_from_slice(buckets);
    }
    // Every word of the item is either listed with its value or 0.
    for offset in (1408..1408 + 6016).step_by(8) {
        let want = listed
            .iter()
            .find(|(at, _)| *at == offset)
            .map_or(0, |&(_, v)| v);
        assert_eq!(word(&b, offset), want, "statistics word at {offset}");
    }
}

/// The flight recorder's six entries as FORMAT.md's worked example lists them: sequence,
/// task, kind, result, start, duration, size, advanced, context, layers done, layers in
/// all, predicted duration (the device words after them are 0 here).
#[rustfmt::skip]
const FLIGHT_ROWS: [[u64; 12]; 6] = [
    [2, 7, 2, 1, 5_002_500_000, 150_000_000, 512, 512, 24, 30, 30, 0],
    [4, 7, 2, 1, 5_153_000_000, 160_000_000, 488, 488, 536, 30, 30, 140_000_000],
    [6, 7, 3, 1, 5_314_000_000, 12_000_000, 1, 1, 1024, 30, 30, 10_000_000],
    [8, 7, 3, 1, 5_326_500_000, 11_000_000, 1, 1, 1025, 30, 30, 11_000_000],
    [10, 7, 3, 1, 5_338_000_000, 13_000_000, 1, 1, 1026, 30, 30, 12_000_000],
    [12, 8, 2, 4, 6_001_500_000, 100_000_000, 512, 0, 0, 7, 30, 149_000_000],
];

#[test]
fn the_flight_recorder_holds_the_six_listed_entries() {
    let scratch = Scratch::new();
    let (_w, b) = replay(&scratch);
    assert_eq!(word(&b, 7424), 6, "FR_HEAD");
    for (n, row) in FLIGHT_ROWS.iter().enumerate() {
        let at = 7552 + 128 * n;
        for (i, &v) in row.iter().enumerate() {
            assert_eq!(word(&b, at + 8 * i), v, "entry {} word {i}", n + 1);
        }
        for tail in [96, 104, 112, 120] {
            assert_eq!(word(&b, at + tail), 0, "entry {} at +{tail}", n + 1);
        }
    }
    for p in 6..64 {
        assert_eq!(word(&b, 7552 + 128 * p), 0, "FR_SEQ of position {p}");
    }
}

#[test]
fn a_reader_derives_what_the_example_says() {
    let scratch = Scratch::new();
    let (w, _) = replay(&scratch);
    let r = SegmentReader::open(w.path()).unwrap();
    assert_eq!(r.regions().problem, None);
    let stats = r.stats(0).unwrap().expect("v1.3 statistics");
    assert_eq!(stats.counter(Counter::TasksEnded), Some(2));
    let ttft = stats.histogram(HistogramKind::Ttft).unwrap();
    assert!((ttft.mean().unwrap() - 0.3135).abs() < 1e-9);
    let itl = stats.histogram(HistogramKind::Itl).unwrap();
    assert!((itl.mean().unwrap() - 0.012).abs() < 1e-9);
    let ratio = stats.histogram(HistogramKind::RatioDecode).unwrap();
    assert!((ratio.mean().unwrap() - 1.0945).abs() < 1e-3);
    let by_cause = stats.tasks_by_cause().unwrap();
    assert_eq!((by_cause[1], by_cause[7]), (1, 1));
    assert_eq!(stats.errors_by_code().unwrap()[5], 1);

    let history = r.history(0).unwrap().expect("v1.3 flight recorder");
    let ordinals: Vec<u64> = history.entries.iter().map(|e| e.ordinal).collect();
    assert_eq!(ordinals, [1, 2, 3, 4, 5, 6]);
    let last = history.entries.last().unwrap();
    assert_eq!(
        (last.task_id, last.kind, last.result, last.layers_done),
        (8, Phase::Prefill, StepResult::Failed, 7)
    );
}

#[test]
fn a_hostile_ring_head_sends_the_reader_nowhere_outside_the_ring() {
    let scratch = Scratch::new();
    let (_w, bytes) = replay(&scratch);
    let dir = scratch.subdir("copy");
    let hostile = common::patched(&bytes, &[(7424, u64::MAX)]);
    let path = common::write_segment(&dir, "engine-0.hps", &hostile);
    let r = SegmentReader::open(&path).unwrap();
    let history = r.history(0).unwrap().unwrap();
    assert_eq!(history.head, u64::MAX);
    let ordinals: Vec<u64> = history.entries.iter().map(|e| e.ordinal).collect();
    assert_eq!(ordinals, [1, 2, 3, 4, 5, 6]);
    // An entry at a position it cannot belong to is not shown: entry 2's words copied to
    // position 3 (where only ordinals 4, 68, ... may live).
    let mut moved = bytes.clone();
    let (from, to) = (7552 + 128, 7552 + 128 * 3);
    moved.copy_within(from..from + 128, to);
    let path = common::write_segment(&scratch.subdir("moved"), "engine-0.hps", &moved);
    let r = SegmentReader::open(&path).unwrap();
    let ordinals: Vec<u64> = r
        .history(0)
        .unwrap()
        .unwrap()
        .entries
        .iter()
        .map(|e| e.ordinal)
        .collect();
    assert_eq!(ordinals, [1, 2, 3, 5, 6]);
}
