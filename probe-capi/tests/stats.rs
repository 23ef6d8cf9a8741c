//! The statistics and the flight recorder through the C ABI (minor 6), on a v1.3 segment
//! of an engine that served requests, against the Rust library's reading of the same
//! segment; an engine without them reads as absent; misuse gives error codes.

mod open_support;

use hydra_fault::segments::Scratch;
use hydra_layout::stats::HistogramKind;
use hydra_probe::StatsSum;
use hydra_probe_ffi::*;
use open_support::{close, open};
use std::ffi::CStr;
use std::ptr;

/// A history head the library has not filled (every field 99), its size set.
fn unset_history() -> HydraProbeHistory {
    HydraProbeHistory {
        size: std::mem::size_of::<HydraProbeHistory>() as u32,
        state: 99,
        count: 99,
        torn: 99,
        head: 99,
    }
}

/// Stats the library has not filled (every counter 99).
fn unset() -> HydraProbeStats {
    let h = HydraProbeHistogram {
        present: 9,
        count: 9,
        sum: 9,
        bucket_count: 9,
        buckets: [9; HYDRA_PROBE_HISTOGRAM_BUCKETS],
    };
    HydraProbeStats {
        size: std::mem::size_of::<HydraProbeStats>() as u32,
        state: 99,
        slots_summed: 99,
        slots_left_out: 99,
        tasks_begun: 99,
        tasks_ended: 99,
        tasks_no_arrival: 99,
        prompt_tokens_computed: 99,
        prompt_tokens_reused: 99,
        tokens_generated: 99,
        causes_present: 99,
        tasks_by_cause: [99; HYDRA_PROBE_CAUSES],
        errors_by_code: [99; HYDRA_PROBE_CAUSES],
        busy_ns: [99; HYDRA_PROBE_PHASES],
        steps: [99; HYDRA_PROBE_PHASES],
        steps_abandoned: [99; HYDRA_PROBE_PHASES],
        histograms: [h; HYDRA_PROBE_HISTOGRAMS],
    }
}

fn read_stats(h: *mut HydraProbe, slot: i64) -> (i32, HydraProbeStats) {
    let mut s = unset();
    // SAFETY: `h` is open and `s` writable with its size set.
    let rc = unsafe { hydra_probe_read_stats(h, slot, &mut s) };
    (rc, s)
}

fn name(kind: u32, raw: u64) -> String {
    // SAFETY: a known kind gives a static NUL-terminated string.
    unsafe { CStr::from_ptr(hydra_probe_value_name(kind, raw)) }
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_statistics_read_the_same_as_the_rust_library_summed_and_per_slot() {
    let scratch = Scratch::new();
    let _w = scratch.served("served", 3);
    let reader = hydra_layout::SegmentReader::open_engine(&scratch.dir, "served").unwrap();
    let h = open(&scratch.dir, "served");
    for slot in [None, Some(0), Some(2)] {
        let want = StatsSum::capture(&reader, slot).unwrap();
        let (rc, got) = read_stats(h, slot.map_or(-1, |s| s as i64));
        assert_eq!(rc, HYDRA_PROBE_OK);
        assert_eq!(got.state, HYDRA_PROBE_STATS_KNOWN);
        assert_eq!(got.slots_summed, want.slots.len() as u64);
        assert_eq!(got.slots_left_out, 0);
        assert_eq!(
            got.tokens_generated as u64,
            want.counter(hydra_layout::stats::Counter::TokensGenerated)
                .unwrap()
        );
        assert_eq!(Some(got.tasks_by_cause), want.tasks_by_cause);
        assert_eq!((got.busy_ns, got.steps), (want.busy_ns, want.steps));
        for kind in HistogramKind::ALL {
            let c = &got.histograms[kind as usize];
            let r = want.histogram(kind).expect("every family is filled");
            assert_eq!((c.present, c.count, c.sum), (1, r.count, r.sum), "{kind:?}");
            let used = c.bucket_count as usize;
            assert_eq!(&c.buckets[..used], r.buckets.as_slice(), "{kind:?}");
            assert!(c.buckets[used..].iter().all(|b| *b == 0), "{kind:?}");
        }
    }
    // The whole engine: 3 served + 1 failed, 2 + 3 + 4 tokens.
    let (_, all) = read_stats(h, -1);
    assert_eq!(
        (all.tasks_begun, all.tasks_ended, all.tokens_generated),
        (4, 4, 9)
    );
    let length = 2; // FinishCause::Length
    assert_eq!(name(HYDRA_PROBE_VALUE_FINISH_CAUSE, length), "length");
    assert_eq!(all.tasks_by_cause[length as usize], 3);
    assert_eq!(all.errors_by_code[5], 1, "one compute error");
    let itl = &all.histograms[HYDRA_PROBE_HISTOGRAM_ITL as usize];
    assert_eq!((itl.count, itl.sum), (9, 9 * 10_000_000));
    // 10 ms lies in the bucket bounded by 12.288 ms.
    let k = (0..54).find(|k| itl.buckets[*k] > 0).unwrap() as u32;
    assert_eq!(
        hydra_probe_histogram_bound(HYDRA_PROBE_HISTOGRAM_ITL, k),
        12_288_000
    );
    assert_eq!(name(HYDRA_PROBE_VALUE_HISTOGRAM, 1), "inter_token_latency");
    close(h);
}

#[test]
fn histogram_bounds_follow_the_format_and_end_at_inf() {
    use hydra_layout::stats::buckets::{ratio_bound_q20, time_bound_us, Q20_ONE};
    let ttft = HYDRA_PROBE_HISTOGRAM_TTFT;
    assert_eq!(hydra_probe_histogram_bound(ttft, 0), 128_000);
    assert_eq!(
        hydra_probe_histogram_bound(ttft, 52),
        time_bound_us(52).unwrap() * 1000
    );
    assert_eq!(hydra_probe_histogram_bound(ttft, 53), u64::MAX, "+Inf");
    assert_eq!(hydra_probe_histogram_bound(ttft, 999), u64::MAX);
    let ratio = HYDRA_PROBE_HISTOGRAM_RATIO_DECODE;
    assert_eq!(hydra_probe_histogram_bound(ratio, 0), Q20_ONE / 64);
    assert_eq!(
        hydra_probe_histogram_bound(ratio, 48),
        ratio_bound_q20(48).unwrap()
    );
    assert_eq!(hydra_probe_histogram_bound(ratio, 49), u64::MAX);
    assert_eq!(
        hydra_probe_histogram_bound(12, 0),
        u64::MAX,
        "no such histogram"
    );
}

#[test]
fn the_flight_recorder_reads_oldest_first_and_a_short_array_is_told() {
    let scratch = Scratch::new();
    let _w = scratch.served("served", 2);
    let reader = hydra_layout::SegmentReader::open_engine(&scratch.dir, "served").unwrap();
    let want = reader.history(1).unwrap().expect("a flight recorder");
    let h = open(&scratch.dir, "served");
    let blank = HydraProbeStep {
        ordinal: 0,
        task_id: 0,
        kind: 0,
        result: 0,
        start_ns: 0,
        duration_ns: 0,
        size: 0,
        advanced: 0,
        context: 0,
        layers_done: 0,
        layers_total: 0,
        predicted_ns: 0,
        wait_device: 0,
        wait_ns: 0,
    };
    let mut head = unset_history();
    let mut steps = [blank; 64];
    // SAFETY: `h` is open; `head` and `steps` are writable for their sizes.
    let rc = unsafe { hydra_probe_read_history(h, 1, &mut head, steps.as_mut_ptr(), 64) };
    assert_eq!(rc, HYDRA_PROBE_OK);
    assert_eq!(head.state, HYDRA_PROBE_STATS_KNOWN);
    assert_eq!((head.count, head.torn), (want.entries.len() as u64, 0));
    // Slot 1: a prefill and 3 decode steps, then the failed request's prefill step.
    assert_eq!(head.count, 5);
    for (got, e) in steps.iter().zip(&want.entries) {
        assert_eq!(
            (got.ordinal, got.kind, got.duration_ns, got.predicted_ns),
            (e.ordinal, e.kind.to_raw(), e.duration_ns, e.predicted_ns)
        );
    }
    assert_eq!(name(HYDRA_PROBE_VALUE_PHASE, steps[4].kind), "prefill");
    assert_eq!(
        name(HYDRA_PROBE_VALUE_STEP_RESULT, steps[4].result),
        "advanced"
    );
    assert_eq!(steps[0].predicted_ns, 20_000_000);

    let mut short = [blank; 2];
    // SAFETY: as above, with room for 2 steps.
    let rc = unsafe { hydra_probe_read_history(h, 1, &mut head, short.as_mut_ptr(), 2) };
    assert_eq!(rc, HYDRA_PROBE_E_BUFFER_TOO_SMALL);
    assert_eq!(head.count, 5, "the count is stored");
    assert_eq!(short[1].ordinal, steps[1].ordinal, "the oldest that fit");
    // SAFETY: a NULL array with a capacity of 0 asks for the count only.
    let rc = unsafe { hydra_probe_read_history(h, 1, &mut head, ptr::null_mut(), 0) };
    assert_eq!((rc, head.count), (HYDRA_PROBE_E_BUFFER_TOO_SMALL, 5));
    // SAFETY: `h` is open; the slot is out of range.
    let rc = unsafe { hydra_probe_read_history(h, 2, &mut head, ptr::null_mut(), 0) };
    assert_eq!(rc, HYDRA_PROBE_E_SLOT_OUT_OF_RANGE);
    close(h);
}

#[test]
fn an_engine_without_statistics_reads_absent_and_misuse_is_refused() {
    let scratch = Scratch::new();
    // A v1.2 segment (a v1.3 one relabelled): no statistics, no flight recorder.
    let elsewhere = Scratch::new();
    let w = elsewhere.served("old", 2);
    let mut bytes = std::fs::read(w.path()).unwrap();
    let minor = hydra_layout::header::VERSION_MINOR_OFFSET;
    bytes[minor..minor + 8].copy_from_slice(&2u64.to_ne_bytes());
    std::fs::write(
        hydra_layout::naming::segment_path(&scratch.dir, "old"),
        &bytes,
    )
    .unwrap();
    let h = open(&scratch.dir, "old");
    let (rc, s) = read_stats(h, -1);
    assert_eq!((rc, s.state), (HYDRA_PROBE_OK, HYDRA_PROBE_STATS_ABSENT));
    assert_eq!(
        (s.tasks_begun, s.tokens_generated, s.causes_present),
        (-1, -1, 0)
    );
    assert!(s.histograms.iter().all(|h| h.present == 0 && h.count == 0));
    let mut head = unset_history();
    // SAFETY: `h` is open, `head` writable.
    let rc = unsafe { hydra_probe_read_history(h, 0, &mut head, ptr::null_mut(), 0) };
    assert_eq!(
        (rc, head.state, head.count),
        (HYDRA_PROBE_OK, HYDRA_PROBE_STATS_ABSENT, 0)
    );

    // Misuse: a slot past the engine's, a size never set, NULLs.
    assert_eq!(read_stats(h, 2).0, HYDRA_PROBE_E_SLOT_OUT_OF_RANGE);
    let mut small = unset();
    small.size = 8;
    // SAFETY: `h` is open; `small` is writable (its size field says too little).
    let rc = unsafe { hydra_probe_read_stats(h, -1, &mut small) };
    assert_eq!(rc, HYDRA_PROBE_E_INVALID_ARGUMENT);
    // SAFETY: NULL arguments are checked by the library.
    let rc = unsafe { hydra_probe_read_stats(h, -1, ptr::null_mut()) };
    assert_eq!(rc, HYDRA_PROBE_E_NULL);
    let mut s = unset();
    // SAFETY: a NULL handle is checked by the library.
    let rc = unsafe { hydra_probe_read_stats(ptr::null(), -1, &mut s) };
    assert_eq!(rc, HYDRA_PROBE_E_NULL);
    // SAFETY: steps NULL with a capacity is refused.
    let rc = unsafe { hydra_probe_read_history(h, 0, &mut head, ptr::null_mut(), 4) };
    assert_eq!(rc, HYDRA_PROBE_E_NULL);
    close(h);
}

#[test]
fn hostile_statistics_and_rings_of_the_corpus_give_figures_or_error_codes() {
    let scratch = Scratch::new();
    let outside = Scratch::new();
    hydra_fault::corpus::build(&scratch.dir, &outside.dir);
    // Slot 1's histogram adds up to more than its count: left out of the sum, named.
    let h = open(&scratch.dir, "stats-buckets-backwards");
    let (rc, s) = read_stats(h, -1);
    assert_eq!(rc, HYDRA_PROBE_OK);
    assert_eq!(
        (s.state, s.slots_summed, s.slots_left_out),
        (HYDRA_PROBE_STATS_KNOWN, 2, 1)
    );
    assert_eq!(
        read_stats(h, 1).1.slots_left_out,
        1,
        "slot 1 alone: left out"
    );
    close(h);

    let h = open(&scratch.dir, "stats-rings-hostile");
    let mut head = unset_history();
    let history = |slot: u32, head: &mut HydraProbeHistory| {
        let mut steps = [0u8; 112 * 64];
        // SAFETY: `h` is open; the byte array has room for 64 steps.
        unsafe { hydra_probe_read_history(h, slot, head, steps.as_mut_ptr().cast(), 64) }
    };
    // A head word that lies is only a hint: every entry still reads.
    assert_eq!(history(0, &mut head), HYDRA_PROBE_OK);
    assert_eq!(
        (head.count, head.head),
        (3, u64::MAX),
        "a prefill and 2 decode steps"
    );
    // A capacity of all ones: the ring is refused.
    let rc = history(1, &mut head);
    assert!(rc < 0 && rc != HYDRA_PROBE_E_INTERNAL, "{rc}");
    // An entry of all ones is never shown: its own sequence does not vouch for it.
    assert_eq!(history(2, &mut head), HYDRA_PROBE_OK);
    assert!(head.count < 5 && head.count + head.torn >= 4, "{head:?}");
    close(h);
}
