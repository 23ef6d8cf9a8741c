//! The C ABI called from Rust: argument checks, buffers, a real segment.

use super::*;
use hydra_layout::{Phase, SegmentConfig, SegmentWriter, SlotState, WorkUnit};
use std::ffi::{CStr, CString};
use std::ptr;

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: `buf` is writable for its length; `needed` may be NULL.
    let rc = unsafe { hydra_probe_last_error(buf.as_mut_ptr(), buf.len(), ptr::null_mut()) };
    assert_eq!(rc, HYDRA_PROBE_OK);
    // SAFETY: copy_out always NUL-terminates within the buffer.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn writer(dir: &std::path::Path) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: "e1".into(),
        slot_count: 2,
        description: Default::default(),
    })
    .unwrap()
}

#[test]
fn null_pointers_are_errors() {
    let dir = c"";
    let mut h: *mut HydraProbe = ptr::null_mut();
    let mut n = 0usize;
    // SAFETY: every non-NULL pointer passed is valid; NULLs are what is tested.
    unsafe {
        assert_eq!(
            hydra_probe_open(ptr::null(), c"e".as_ptr(), &mut h),
            HYDRA_PROBE_E_NULL
        );
        assert!(last_error().contains("`dir`"), "{}", last_error());
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), ptr::null(), &mut h),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e".as_ptr(), ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(hydra_probe_close(ptr::null_mut()), HYDRA_PROBE_E_NULL);
        assert_eq!(
            hydra_probe_slot_count(ptr::null(), ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_read_slot(ptr::null(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_meta_json(ptr::null(), 0, ptr::null_mut(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 1, &mut n),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_thresholds_default(ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );
        assert_eq!(
            hydra_probe_set_thresholds(ptr::null_mut(), ptr::null()),
            HYDRA_PROBE_E_NULL
        );
    }
    // SAFETY: the name is a static C string.
    let name = unsafe { CStr::from_ptr(hydra_probe_error_name(HYDRA_PROBE_E_NULL)) };
    assert_eq!(name.to_str().unwrap(), "HYDRA_PROBE_E_NULL");
}

#[test]
fn reads_a_segment_and_sizes_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = writer(tmp.path());
    let now = clock::monotonic_ns();
    w.publish(
        1,
        &SlotState {
            task_id: 3,
            phase: Phase::Decode,
            work_unit: WorkUnit::Tokens,
            work_done: 10,
            work_total: 40,
            phase_start_ns: now - 2_000_000_000,
            last_progress_ns: now - 1_000_000_000,
            ..Default::default()
        },
    )
    .unwrap();
    let dir = CString::new(tmp.path().to_str().unwrap()).unwrap();
    let mut ids = [HydraProbeEngineId { id: [0; 64] }; 1];
    let (mut n, mut h, mut count) = (0usize, ptr::null_mut(), 0u32);
    let mut slot = std::mem::MaybeUninit::<HydraProbeSlot>::uninit();
    let mut t = std::mem::MaybeUninit::<HydraProbeThresholds>::uninit();
    // SAFETY: every pointer passed is valid for what the call writes.
    unsafe {
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ptr::null_mut(), 0, &mut n),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(n, 1);
        assert_eq!(
            hydra_probe_list(dir.as_ptr(), ids.as_mut_ptr(), 1, &mut n),
            HYDRA_PROBE_OK
        );
        assert_eq!(CStr::from_ptr(ids[0].id.as_ptr()).to_str().unwrap(), "e1");
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"nope".as_ptr(), &mut h),
            HYDRA_PROBE_E_NOT_FOUND
        );
        assert!(h.is_null());
        assert!(last_error().contains("found: e1"), "{}", last_error());
        assert_eq!(
            hydra_probe_open(dir.as_ptr(), c"e1".as_ptr(), &mut h),
            HYDRA_PROBE_OK
        );
        assert_eq!(last_error(), "");
        assert_eq!(hydra_probe_slot_count(h, &mut count), HYDRA_PROBE_OK);
        assert_eq!(count, 2);
        assert_eq!(
            hydra_probe_read_slot(h, 2, slot.as_mut_ptr()),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_probe_read_slot(h, 1, slot.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        let s = slot.assume_init();
        assert_eq!(
            (s.slot, s.task_id, s.phase),
            (1, 3, HYDRA_PROBE_PHASE_DECODE)
        );
        assert_eq!(s.slot_class, HydraProbeSlotClass::Progressing);
        assert_eq!(s.engine_health, HydraProbeEngineHealth::Live);
        assert_eq!((s.progress, s.rate_per_s, s.eta_s), (0.25, 10.0, 3.0));
        assert_eq!(s.step_age_ns, -1);

        let mut need = 0usize;
        let mut small = [0 as c_char; 8];
        assert_eq!(
            hydra_probe_meta_json(h, 1, small.as_mut_ptr(), small.len(), &mut need),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(small[0], 0);
        assert!(need > 100);
        let mut big = vec![0 as c_char; need + 1024];
        assert_eq!(
            hydra_probe_meta_json(h, 1, big.as_mut_ptr(), big.len(), &mut need),
            HYDRA_PROBE_OK
        );
        let json: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(big.as_ptr()).to_str().unwrap()).unwrap();
        assert_eq!(json["operation"], "decode");
        assert_eq!(json["classification"], "progressing");

        assert_eq!(
            hydra_probe_thresholds_default(t.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        let mut t = t.assume_init();
        assert_eq!(
            (t.stall_floor_s, t.stall_factor, t.budget_s),
            (30.0, 10.0, -1.0)
        );
        t.stall_factor = f64::NAN;
        assert_eq!(
            hydra_probe_set_thresholds(h, &t),
            HYDRA_PROBE_E_INVALID_ARGUMENT
        );
        t.stall_factor = 10.0;
        t.stall_floor_s = 0.5;
        assert_eq!(hydra_probe_set_thresholds(h, &t), HYDRA_PROBE_OK);
        assert_eq!(
            hydra_probe_read_slot(h, 1, slot.as_mut_ptr()),
            HYDRA_PROBE_OK
        );
        assert_eq!(slot.assume_init().slot_class, HydraProbeSlotClass::Stalled);

        // Truncated last error.
        assert_eq!(
            hydra_probe_read_slot(h, 9, slot.as_mut_ptr()),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        let mut tiny = [0 as c_char; 5];
        assert_eq!(
            hydra_probe_last_error(tiny.as_mut_ptr(), tiny.len(), &mut need),
            HYDRA_PROBE_E_BUFFER_TOO_SMALL
        );
        assert_eq!(CStr::from_ptr(tiny.as_ptr()).to_str().unwrap(), "slot");
        assert!(need > 5);
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}
