//! The writer C ABI called from Rust: argument checks and error codes, and what a
//! sequence of calls publishes (read back with the layout crate's reader).

use hydra_layout::{ErrorCode, FinishReason, Phase, SegmentReader, WorkUnit};
use hydra_writer::*;
use std::ffi::{c_char, CStr, CString};
use std::ptr;

mod support;

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: `buf` is writable for its length; `needed` may be NULL.
    unsafe { hydra_writer_last_error(buf.as_mut_ptr(), buf.len(), ptr::null_mut()) };
    // SAFETY: the buffer is NUL-terminated by the call.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn description() -> HydraWriterDescription {
    HydraWriterDescription {
        model_name: c"m".as_ptr(),
        model_quant: ptr::null(),
        model_path: ptr::null(),
        tokenizer: ptr::null(),
        model_alias: c"alias".as_ptr(),
        device: c"cpu".as_ptr(),
        capabilities: HYDRA_WRITER_CAP_COMPLETION
            | HYDRA_WRITER_CAP_STATE_SAVE_RESTORE
            | HYDRA_WRITER_CAP_LAYER_PROGRESS,
    }
}

/// `hydra_writer_create` with each NULL argument and each invalid value: the error code,
/// and no handle.
fn create_refuses_misuse(dir: &CStr, d: &HydraWriterDescription) {
    let mut w: *mut HydraWriter = ptr::null_mut();
    // SAFETY: every non-NULL pointer is valid; NULLs and bad values are what is tested.
    unsafe {
        assert_eq!(
            hydra_writer_create(ptr::null(), c"e".as_ptr(), 1, d, &mut w),
            HYDRA_WRITER_E_NULL
        );
        assert!(last_error().contains("`dir`"));
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), ptr::null(), 1, d, &mut w),
            HYDRA_WRITER_E_NULL
        );
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 1, ptr::null(), &mut w),
            HYDRA_WRITER_E_NULL
        );
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 1, d, ptr::null_mut()),
            HYDRA_WRITER_E_NULL
        );
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"a/b".as_ptr(), 1, d, &mut w),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 0, d, &mut w),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 5000, d, &mut w),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        let bad = [0xffu8, 0];
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), bad.as_ptr().cast(), 1, d, &mut w),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
    }
    assert!(w.is_null());
}

/// Every call given a NULL handle.
fn null_handles_are_refused() {
    // SAFETY: the NULL handles are what is tested; no call dereferences them.
    unsafe {
        for f in [
            hydra_writer_heartbeat(ptr::null_mut()),
            hydra_writer_close(ptr::null_mut()),
            hydra_writer_step_start(ptr::null_mut(), 0, 1),
            hydra_writer_step_finish(ptr::null_mut(), 0, 1),
            hydra_writer_begin_task(ptr::null_mut(), 0, 1, 3, 1, 10),
            hydra_writer_pending_queued(ptr::null(), 0),
            hydra_writer_slot_count(ptr::null(), ptr::null_mut()),
        ] {
            assert_eq!(f, HYDRA_WRITER_E_NULL);
        }
    }
}

/// An open writer `w` (engine `e` in `dir`) given a second creation of its id, slots out of
/// range, invalid phases, units, reasons and codes, and buffers too small.
fn open_writer_refuses_misuse(w: *mut HydraWriter, dir: &CStr, d: &HydraWriterDescription) {
    // SAFETY: `w` is an open handle and every other non-NULL pointer is valid; NULLs and
    // bad values are what is tested.
    unsafe {
        let mut w2: *mut HydraWriter = ptr::null_mut();
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 2, d, &mut w2),
            HYDRA_WRITER_E_ENGINE_ID_IN_USE
        );
        assert!(last_error().contains("in use"), "{}", last_error());
        assert_eq!(
            hydra_writer_begin_task(w, 2, 1, 3, 1, 10),
            HYDRA_WRITER_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_writer_begin_task(w, 0, 1, 42, 1, 10),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_begin_task(w, 0, 1, u64::MAX, 1, 10),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_begin_task(w, 0, 1, 3, 9, 10),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_finish(w, 0, 7, 0),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_finish(w, 0, 3, 99),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert_eq!(
            hydra_writer_pending_dequeued(w, 9),
            HYDRA_WRITER_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_writer_set_counters(w, ptr::null()),
            HYDRA_WRITER_E_NULL
        );
        let mut need = 0usize;
        let mut small = [0 as c_char; 4];
        assert_eq!(
            hydra_writer_path(w, small.as_mut_ptr(), 4, &mut need),
            HYDRA_WRITER_E_BUFFER_TOO_SMALL
        );
        assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes().len(), 3);
        assert!(need > 4);
        assert_eq!(
            hydra_writer_path(w, ptr::null_mut(), 4, &mut need),
            HYDRA_WRITER_E_NULL
        );
    }
}

#[test]
fn misuse_gives_error_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = CString::new(tmp.path().join("segs").to_str().unwrap()).unwrap();
    let d = description();
    create_refuses_misuse(&dir, &d);
    null_handles_are_refused();
    let mut w: *mut HydraWriter = ptr::null_mut();
    // SAFETY: every pointer is valid; `w` is closed last and not used after.
    unsafe {
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"e".as_ptr(), 2, &d, &mut w),
            HYDRA_WRITER_OK
        );
        assert_eq!(last_error(), "");
        open_writer_refuses_misuse(w, &dir, &d);
        assert_eq!(hydra_writer_close(w), HYDRA_WRITER_OK);
    }
}

/// What `calls_publish_the_records_the_reader_expects` published first: slot 1 prefilling
/// 512 tokens, one step of 256 done and one in flight; one task pending on slot 2; the
/// host's counters and description.
fn check_prefill_step(reader: &SegmentReader) {
    let s = reader.slot(1).unwrap();
    assert_eq!(
        (s.state.task_id, s.state.phase, s.state.work_unit),
        (9, Phase::Prefill, WorkUnit::Tokens)
    );
    assert_eq!(
        (s.state.work_done, s.state.work_total, s.state.steps_done),
        (256, 512, 1)
    );
    assert_eq!(
        (s.state.n_ctx, s.state.tokens_cached, s.state.state_size),
        (4096, 12, 777)
    );
    assert_eq!(s.state.step_size, 256);
    assert!(s.state.step_start_ns >= s.state.last_progress_ns);
    assert!(s.state.last_progress_ns >= s.state.phase_start_ns && s.state.phase_start_ns > 0);
    assert_eq!(reader.slot(2).unwrap().pending, 1);
    let h = reader.snapshot().unwrap().header;
    assert_eq!(h.counters.prompt_tokens_total, 256);
    assert_eq!(h.counters.requests_waiting, 1);
    assert!(h.heartbeat_ns >= s.state.step_start_ns);
    assert_eq!(reader.identity().description.model_alias, "alias");
    // The host's bits, and the families every writer derives by itself (format v1.3).
    assert_eq!(
        reader.identity().description.capabilities,
        11 | hydra_layout::header::capabilities::WRITER_DERIVED
    );
}

#[test]
fn calls_publish_the_records_the_reader_expects() {
    let tmp = tempfile::tempdir().unwrap();
    let mut count = 0u32;
    // SAFETY: the description's strings are NUL-terminated; every pointer passed is valid
    // for what the call reads or writes.
    let w = unsafe { support::create(tmp.path(), c"e1", 3, &description()) };
    // SAFETY: as above.
    let reader = unsafe {
        assert_eq!(hydra_writer_slot_count(w, &mut count), HYDRA_WRITER_OK);
        assert_eq!(count, 3);
        let path = support::path(w);
        assert_eq!(
            hydra_writer_begin_task(
                w,
                1,
                9,
                HYDRA_WRITER_PHASE_PREFILL,
                HYDRA_WRITER_UNIT_TOKENS,
                512
            ),
            0
        );
        assert_eq!(hydra_writer_set_slot_info(w, 1, 4096, 12, 777), 0);
        assert_eq!(hydra_writer_step_start(w, 1, 256), 0);
        assert_eq!(hydra_writer_step_finish(w, 1, 256), 0);
        assert_eq!(hydra_writer_step_start(w, 1, 256), 0);
        assert_eq!(hydra_writer_pending_queued(w, 2), 0);
        assert_eq!(hydra_writer_pending_queued(w, 2), 0);
        assert_eq!(hydra_writer_pending_dequeued(w, 2), 0);
        let c = HydraWriterCounters {
            prompt_tokens_total: 256,
            kv_cells_total: 3 * 4096,
            ..Default::default()
        };
        assert_eq!(hydra_writer_set_counters(w, &c), 0);
        SegmentReader::open(&path).unwrap()
    };
    check_prefill_step(&reader);

    // SAFETY: `w` is the open handle; it is closed last.
    unsafe {
        assert_eq!(
            hydra_writer_begin_phase(w, 1, HYDRA_WRITER_PHASE_DECODE, HYDRA_WRITER_UNIT_TOKENS, 0),
            0
        );
        assert_eq!(hydra_writer_set_work_total(w, 1, 64), 0);
        assert_eq!(hydra_writer_set_work_done(w, 1, 5), 0);
        assert_eq!(hydra_writer_set_n_past(w, 1, 261), 0);
    }
    let s = reader.slot(1).unwrap().state;
    assert_eq!(
        (s.phase, s.work_done, s.work_total, s.n_past, s.steps_done),
        (Phase::Decode, 5, 64, 261, 1)
    );
    assert_eq!(s.step_start_ns, 0);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            hydra_writer_finish(w, 1, HYDRA_WRITER_FINISH_ERROR, HYDRA_WRITER_ERROR_COMPUTE),
            0
        );
    }
    let s = reader.slot(1).unwrap().state;
    assert_eq!(
        (s.phase, s.finish_reason, s.error_code),
        (Phase::Idle, FinishReason::Error, ErrorCode::Compute)
    );
    // SAFETY: `w` is open and no longer used after this.
    assert_eq!(unsafe { hydra_writer_close(w) }, HYDRA_WRITER_OK);
    assert_eq!(reader.liveness().unwrap(), hydra_layout::Liveness::Closed);
}

/// The layer position (format v1.1): `hydra_writer_layer_done` for the step in flight, and
/// `hydra_writer_layer_done_in_step` from another thread (as a CUDA host callback would)
/// while the compute thread keeps publishing the same slot: every update lands, none mixes.
#[test]
fn layer_positions_from_the_compute_thread_and_a_callback_thread() {
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: the description's strings are NUL-terminated.
    let w = unsafe { support::create(tmp.path(), c"layers", 2, &description()) };
    // SAFETY: every pointer is valid for the call; the handle is closed at the end, after
    // the other thread has finished with it.
    unsafe {
        let r = SegmentReader::open(support::path(w)).unwrap();
        let mut step = 7u64;
        assert_eq!(hydra_writer_step_id(w, 0, &mut step), HYDRA_WRITER_OK);
        assert_eq!(step, 0, "no step in flight");
        support::start_prefill_step(w, 512);
        assert_eq!(hydra_writer_layer_done(w, 0, 3, 30), HYDRA_WRITER_OK);
        let layer = r.slot(0).unwrap().layer().expect("a position in the step");
        assert_eq!((layer.done, layer.total), (3, 30));
        assert_eq!(hydra_writer_step_id(w, 0, &mut step), HYDRA_WRITER_OK);
        assert_eq!(step, layer.step_start_ns);
        assert_eq!(
            hydra_writer_layer_done(w, 9, 1, 30),
            HYDRA_WRITER_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_writer_step_id(w, 0, ptr::null_mut()),
            HYDRA_WRITER_E_NULL
        );

        // A callback thread publishes layers 1..=N while the compute thread republishes the
        // record: the sequence counts every update of both.
        const N: u64 = 2000;
        let seq0 = r.slot(0).unwrap().seq;
        let handle = w as usize;
        let callbacks = std::thread::spawn(move || {
            for k in 1..=N {
                let w = handle as *const HydraWriter;
                assert_eq!(
                    hydra_writer_layer_done_in_step(w, 0, step, k, N),
                    HYDRA_WRITER_OK
                );
            }
        });
        for done in 1..=N {
            assert_eq!(hydra_writer_set_n_past(w, 0, done), HYDRA_WRITER_OK);
        }
        callbacks.join().unwrap();
        let end = r.slot(0).unwrap();
        assert_eq!(end.seq, seq0 + 2 * 2 * N, "an update was lost");
        assert_eq!(end.state.n_past, N);
        assert_eq!(end.layer().map(|l| (l.done, l.total)), Some((N, N)));
        assert_eq!(hydra_writer_close(w), HYDRA_WRITER_OK);
    }
}

/// Arrival times and finish causes from the host (writer ABI minor 1): a request that
/// arrived 5 ms before its task began, prefilled, decoded 3 tokens and ended by length
/// shows its queue wait, time to first token, end-to-end time and cause; a cause this
/// library does not know, a slot past the engine's and a NULL handle are refused.
#[test]
fn arrivals_and_finish_causes_fill_the_statistics() {
    use hydra_layout::stats::HistogramKind;
    let tmp = tempfile::tempdir().unwrap();
    let dir = CString::new(tmp.path().join("segs").to_str().unwrap()).unwrap();
    let mut d = description();
    d.capabilities |= HYDRA_WRITER_CAP_ARRIVAL_TIMES | HYDRA_WRITER_CAP_FINISH_CAUSES;
    let mut w: *mut HydraWriter = ptr::null_mut();
    assert_eq!(hydra_writer_abi_minor(), 1);
    // SAFETY: every pointer is valid; `w` is used while open and closed once.
    unsafe {
        assert_eq!(
            hydra_writer_create(dir.as_ptr(), c"causes".as_ptr(), 2, &d, &mut w),
            HYDRA_WRITER_OK
        );
        let arrived = hydra_layout::clock::monotonic_ns() - 5_000_000;
        assert_eq!(hydra_writer_note_arrival(w, 0, arrived), HYDRA_WRITER_OK);
        let tokens = HYDRA_WRITER_UNIT_TOKENS;
        assert_eq!(
            hydra_writer_begin_task(w, 0, 7, HYDRA_WRITER_PHASE_PREFILL, tokens, 4),
            HYDRA_WRITER_OK
        );
        hydra_writer_step_start(w, 0, 4);
        hydra_writer_step_finish(w, 0, 4);
        hydra_writer_begin_phase(w, 0, HYDRA_WRITER_PHASE_DECODE, tokens, 3);
        for done in 1..=3 {
            hydra_writer_step_start(w, 0, 1);
            hydra_writer_step_finish(w, 0, done);
        }
        assert_eq!(
            hydra_writer_note_finish(w, 0, HYDRA_WRITER_CAUSE_LENGTH),
            HYDRA_WRITER_OK
        );
        assert_eq!(
            hydra_writer_finish(w, 0, HYDRA_WRITER_FINISH_COMPLETED, HYDRA_WRITER_ERROR_NONE),
            HYDRA_WRITER_OK
        );
        assert_eq!(
            hydra_writer_note_finish(w, 0, 99),
            HYDRA_WRITER_E_INVALID_ARGUMENT
        );
        assert!(last_error().contains("99"), "{}", last_error());
        assert_eq!(
            hydra_writer_note_arrival(w, 2, arrived),
            HYDRA_WRITER_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_writer_note_finish(ptr::null_mut(), 0, 0),
            HYDRA_WRITER_E_NULL
        );

        let r = SegmentReader::open_engine(&tmp.path().join("segs"), "causes").unwrap();
        let stats = r.stats(0).unwrap().expect("statistics");
        let observed = |kind| stats.histogram(kind).map(|h| h.count);
        assert_eq!(observed(HistogramKind::QueueWait), Some(1));
        assert_eq!(observed(HistogramKind::Ttft), Some(1));
        assert_eq!(observed(HistogramKind::E2e), Some(1));
        let e2e = stats.histogram(HistogramKind::E2e).unwrap();
        assert!(e2e.sum >= 5_000_000, "from the arrival: {e2e:?}");
        let causes = stats.tasks_by_cause().expect("causes");
        assert_eq!(causes[HYDRA_WRITER_CAUSE_LENGTH as usize], 1);
        assert_eq!(hydra_writer_close(w), HYDRA_WRITER_OK);
    }
}
