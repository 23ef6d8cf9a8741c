//! The hostile-file corpus through every reader surface: the probe library, the
//! `hydra-probe` CLI, the exporter (library and HTTP) and the C ABI. Every refused entry
//! gets the expected kind of error with a message that names it; every well-formed but
//! hostile segment is read without harm; nothing panics, hangs or dies of SIGBUS.

use hydra_exporter::{Collector, Format};
use hydra_fault::corpus::{self, c_code, Case, Expect};
use hydra_fault::{bins, http, process, scratch};
use hydra_layout::{clock, ErrorKind, SegmentReader};
use hydra_probe::{EngineView, HydraMeta, Thresholds};
use hydra_probe_ffi as c;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::process::Command;

fn kind_of(e: &hydra_probe::ProbeError) -> ErrorKind {
    e.kind()
}

/// The reader kind behind an exporter error label (the corpus never expects the
/// exporter's `directory` or `other`).
fn exporter_kind(case: &Case, kind: hydra_exporter::stats::ErrorKind) -> ErrorKind {
    match kind {
        hydra_exporter::stats::ErrorKind::Segment(k) => k,
        other => panic!(
            "exporter: case {} ({}): kind {other}, not a segment's",
            case.engine_id, case.name
        ),
    }
}

fn check_refusal(case: &Case, allowed: &[ErrorKind], surface: &str, kind: ErrorKind, msg: &str) {
    assert!(
        allowed.contains(&kind),
        "{surface}: case {} ({}): got kind {kind:?}, expected one of {allowed:?}: {msg}",
        case.engine_id,
        case.name
    );
    assert!(
        msg.contains(&case.engine_id),
        "{surface}: case {} ({}): message does not name the file: {msg}",
        case.engine_id,
        case.name
    );
    assert!(
        !msg.contains('\n'),
        "{surface}: message is not one line: {msg:?}"
    );
}

/// Opens and fully reads a segment through the probe library; the error if any.
fn probe_read(dir: &Path, id: &str) -> Result<EngineView, hydra_probe::ProbeError> {
    let reader = hydra_probe::open(dir, Some(id))?;
    let view = EngineView::capture(&reader, clock::monotonic_ns(), &Thresholds::default())?;
    for i in 0..view.slots.len() {
        let meta = HydraMeta::from_view(&view, i).expect("meta of an existing slot");
        let json = meta.to_json();
        serde_json::from_str::<serde_json::Value>(&json).expect("meta is valid JSON");
    }
    Ok(view)
}

fn last_c_error() -> String {
    let mut buf = vec![0 as std::ffi::c_char; 1024];
    let mut needed = 0usize;
    // SAFETY: `buf` is writable for its length and `needed` is a valid out pointer.
    let rc = unsafe { c::hydra_probe_last_error(buf.as_mut_ptr(), buf.len(), &mut needed) };
    assert!(rc == c::HYDRA_PROBE_OK || rc == c::HYDRA_PROBE_E_BUFFER_TOO_SMALL);
    // SAFETY: the call NUL-terminated `buf` within its length.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Opens through the C ABI; on success reads every slot and its meta JSON, then closes.
fn c_read(dir: &Path, id: &str) -> Result<(), (i32, String)> {
    let cdir = CString::new(dir.as_os_str().as_encoded_bytes()).expect("dir has no NUL");
    let cid = CString::new(id).expect("id has no NUL");
    let mut probe = std::ptr::null_mut();
    // SAFETY: both strings are NUL-terminated and `probe` is a valid out pointer.
    let rc = unsafe { c::hydra_probe_open(cdir.as_ptr(), cid.as_ptr(), &mut probe) };
    if rc != c::HYDRA_PROBE_OK {
        assert!(probe.is_null(), "failed open left a handle");
        return Err((rc, last_c_error()));
    }
    let mut count = 0u32;
    // SAFETY: `probe` is the open handle; `count` is a valid out pointer.
    let rc = unsafe { c::hydra_probe_slot_count(probe, &mut count) };
    assert_eq!(rc, c::HYDRA_PROBE_OK);
    let mut result = Ok(());
    for slot in 0..count {
        let mut out = std::mem::MaybeUninit::<c::HydraProbeSlot>::uninit();
        // SAFETY: `probe` is open; `out` is writable for one HydraProbeSlot.
        let rc = unsafe { c::hydra_probe_read_slot(probe, slot, out.as_mut_ptr()) };
        if rc != c::HYDRA_PROBE_OK {
            result = Err((rc, last_c_error()));
            break;
        }
        let mut buf = vec![0 as std::ffi::c_char; 8192];
        let mut needed = 0usize;
        // SAFETY: `probe` is open; `buf` is writable for its length; `needed` is valid.
        let rc = unsafe {
            c::hydra_probe_meta_json(probe, slot, buf.as_mut_ptr(), buf.len(), &mut needed)
        };
        assert_eq!(rc, c::HYDRA_PROBE_OK, "meta_json: {}", last_c_error());
        // SAFETY: the call NUL-terminated `buf`.
        let json = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .expect("UTF-8");
        serde_json::from_str::<serde_json::Value>(json).expect("C meta is valid JSON");
    }
    // SAFETY: `probe` is open and not used again.
    assert_eq!(unsafe { c::hydra_probe_close(probe) }, c::HYDRA_PROBE_OK);
    result
}

#[test]
fn every_reader_refuses_every_hostile_file_with_a_clear_error() {
    let root = scratch("hydra-corpus.");
    let dir = root.path().join("segments");
    let outside = root.path().join("outside");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&outside).unwrap();
    let cases = corpus::build(&dir, &outside);
    assert!(cases.len() > 80, "corpus has {} cases", cases.len());

    // A live engine in the same directory must be unaffected by its neighbours.
    let live = hydra_layout::SegmentWriter::create(&hydra_layout::SegmentConfig {
        dir: dir.clone(),
        engine_id: "healthy".into(),
        slot_count: 2,
        description: Default::default(),
    })
    .expect("live writer");

    probe_library_refuses(&dir, &cases);
    c_abi_refuses(&dir, &cases);
    exporter_library_refuses(&dir, &cases);
    exporter_over_http_serves(&dir, &cases);
    probe_cli_refuses(&dir, &cases);
    live.close().expect("close live writer");
}

/// 1. The probe library.
fn probe_library_refuses(dir: &Path, cases: &[Case]) {
    for case in cases {
        match (case.expect, probe_read(dir, &case.engine_id)) {
            (Expect::Refused(allowed), Err(e)) => {
                check_refusal(case, allowed, "probe", kind_of(&e), &e.to_string())
            }
            (Expect::Refused(_), Ok(_)) => {
                panic!("probe accepted {} ({})", case.engine_id, case.name)
            }
            (Expect::Readable, Ok(_)) => {}
            (Expect::Readable, Err(e)) => {
                panic!("probe refused {} ({}): {e}", case.engine_id, case.name)
            }
        }
    }
}

/// 2. The C ABI.
fn c_abi_refuses(dir: &Path, cases: &[Case]) {
    for case in cases {
        match (case.expect, c_read(dir, &case.engine_id)) {
            (Expect::Refused(allowed), Err((code, msg))) => {
                let codes: Vec<i32> = allowed.iter().map(|k| c_code(*k)).collect();
                assert!(
                    codes.contains(&code),
                    "C ABI: {} ({}): code {code}, expected {codes:?}: {msg}",
                    case.engine_id,
                    case.name
                );
                assert!(msg.contains(&case.engine_id), "C ABI message: {msg}");
            }
            (Expect::Refused(_), Ok(())) => {
                panic!("C ABI accepted {} ({})", case.engine_id, case.name)
            }
            (Expect::Readable, Ok(())) => {}
            (Expect::Readable, Err((code, msg))) => {
                panic!(
                    "C ABI refused {} ({}): {code} {msg}",
                    case.engine_id, case.name
                )
            }
        }
    }
}

/// 3. The exporter library: one scrape sees every entry, counts every error, still serves
///    the live engine, and its exposition is valid.
fn exporter_library_refuses(dir: &Path, cases: &[Case]) {
    let collector = Collector::new(dir, Thresholds::default());
    let collection = collector.collect();
    assert!(collection.dir_error.is_none());
    for case in cases {
        let entry = collection
            .engines
            .iter()
            .find(|e| e.engine_id == case.engine_id)
            .unwrap_or_else(|| panic!("exporter skipped {} ({})", case.engine_id, case.name));
        match (case.expect, &entry.view) {
            (Expect::Refused(allowed), Err(e)) => check_refusal(
                case,
                allowed,
                "exporter",
                exporter_kind(case, e.kind),
                &e.message,
            ),
            (Expect::Refused(_), Ok(_)) => {
                panic!("exporter accepted {} ({})", case.engine_id, case.name)
            }
            (Expect::Readable, Ok(_)) => {}
            (Expect::Readable, Err(e)) => {
                panic!("exporter refused {} ({}): {e}", case.engine_id, case.name)
            }
        }
    }
    let healthy = collection
        .engines
        .iter()
        .find(|e| e.engine_id == "healthy")
        .expect("live engine listed");
    assert_eq!(
        healthy.view.as_ref().expect("live engine read").health,
        hydra_probe::EngineHealth::Live
    );
    let refused = cases
        .iter()
        .filter(|c| matches!(c.expect, Expect::Refused(_)))
        .count();
    let text = collector.scrape(Format::Text);
    let errors: f64 = text
        .lines()
        .filter(|l| l.starts_with("hydra_exporter_read_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // Two collections so far (collect + scrape), each counting every refused entry.
    assert_eq!(errors as usize, 2 * refused, "read errors counted");
    promtool_accepts(&text);
}

/// `promtool check metrics` finds no error in `text` (where promtool is installed).
fn promtool_accepts(text: &str) {
    let Ok(status) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())?;
            child.wait_with_output()
        })
    else {
        return;
    };
    let problems = String::from_utf8_lossy(&status.stderr);
    // promtool exits 3 for lint warnings only (e.g. help text style); 1 for errors.
    assert_ne!(status.status.code(), Some(1), "promtool: {problems}");
}

/// 4. The exporter over HTTP, as a separate process: it serves, lists every entry, and
///    answers a meta of a link or a FIFO with an error.
fn exporter_over_http_serves(dir: &Path, cases: &[Case]) {
    let mut exporter = process::start_exporter(dir, &[]);
    let (code, body) = http::get(&exporter.url("/metrics"));
    assert_eq!(code, 200, "{body}");
    let (code, engines) = http::get(&exporter.url("/engines"));
    assert_eq!(code, 200);
    let listed = engines.as_array().map(Vec::len).unwrap_or_default();
    assert!(listed > cases.len(), "/engines lists {listed}: {engines}");
    for case in cases
        .iter()
        .filter(|c| c.engine_id.starts_with("link") || c.engine_id == "fifo")
    {
        let (code, body) =
            http::get(&exporter.url(&format!("/engines/{}/slots/0/state/meta", case.engine_id)));
        assert!(
            (400..600).contains(&code) && body["error"]["message"].is_string(),
            "meta of {}: {code} {body}",
            case.engine_id
        );
    }
    assert!(exporter.is_running(), "exporter died");
    exporter.terminate();
}

/// 5. The probe CLI: exit 3 and one line naming the file for a refused entry.
fn probe_cli_refuses(dir: &Path, cases: &[Case]) {
    let probe = bins::probe();
    for case in cases {
        let out = Command::new(&probe)
            .arg("--dir")
            .arg(dir)
            .args(["show", &case.engine_id])
            .output()
            .expect("run hydra-probe");
        let stderr = String::from_utf8_lossy(&out.stderr);
        match case.expect {
            Expect::Refused(_) => {
                assert_eq!(
                    out.status.code(),
                    Some(3),
                    "hydra-probe show {} ({}): {stderr}",
                    case.engine_id,
                    case.name
                );
                assert!(
                    stderr.contains(&case.engine_id) && stderr.lines().count() == 1,
                    "hydra-probe show {}: {stderr:?}",
                    case.engine_id
                );
            }
            Expect::Readable => assert!(
                out.status.code().is_some_and(|c| c != 3) && out.status.code().is_some(),
                "hydra-probe show {} ({}) failed: {stderr}",
                case.engine_id,
                case.name
            ),
        }
    }
}

/// A file that grows or shrinks while mapped: every surface reports "size changed" at the
/// next read (the fstat check before each snapshot), never SIGBUS, and a file restored to
/// its size is read again.
#[test]
fn a_segment_resized_while_mapped_is_reported_never_a_sigbus() {
    let root = scratch("hydra-resize.");
    let dir = root.path();
    let bytes = corpus::template();
    let path = dir.join(format!("{}.hps", corpus::TEMPLATE_ID));
    std::fs::write(&path, &bytes).unwrap();

    let reader = SegmentReader::open(&path).expect("open");
    let collector = Collector::new(dir, Thresholds::default());
    assert!(collector.collect().engines[0].view.is_ok());
    let cdir = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let cid = CString::new(corpus::TEMPLATE_ID).unwrap();
    let mut cprobe = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings and a valid out pointer.
    let rc = unsafe { c::hydra_probe_open(cdir.as_ptr(), cid.as_ptr(), &mut cprobe) };
    assert_eq!(rc, c::HYDRA_PROBE_OK, "{}", last_c_error());

    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let read_slot0 = |cprobe| {
        let mut out = std::mem::MaybeUninit::<c::HydraProbeSlot>::uninit();
        // SAFETY: `cprobe` is the open handle; `out` is writable.
        unsafe { c::hydra_probe_read_slot(cprobe, 0, out.as_mut_ptr()) }
    };
    for (what, len) in [
        ("shrunk to the header", 1024u64),
        ("shrunk to nothing", 0),
        ("grown by a page", bytes.len() as u64 + 4096),
        ("grown huge (sparse)", 1 << 30),
    ] {
        // Restore the segment (same inode, same mapping): everything reads again.
        use std::os::unix::fs::FileExt as _;
        file.set_len(bytes.len() as u64).unwrap();
        file.write_all_at(&bytes, 0).unwrap();
        reader.snapshot().expect("restored: snapshot");
        assert!(
            collector.collect().engines[0].view.is_ok(),
            "restored: exporter"
        );
        assert_eq!(read_slot0(cprobe), c::HYDRA_PROBE_OK, "restored: C ABI");

        file.set_len(len).unwrap();
        let e = reader.snapshot().expect_err(what);
        assert!(
            matches!(e, hydra_layout::Error::SizeChanged { .. }),
            "{what}: reader said {e}"
        );
        for i in 0..corpus::SLOTS {
            assert!(reader.slot(i).is_err(), "{what}: slot {i} read");
        }
        let view = EngineView::capture(&reader, clock::monotonic_ns(), &Thresholds::default());
        assert!(view.is_err(), "{what}: probe captured");
        let entry = &collector.collect().engines[0];
        let err = entry.view.as_ref().expect_err(what);
        assert_eq!(
            err.kind,
            hydra_exporter::stats::ErrorKind::Segment(ErrorKind::SizeChanged),
            "{what}: exporter said {err:?}"
        );
        assert_eq!(
            read_slot0(cprobe),
            c::HYDRA_PROBE_E_IO,
            "{what}: {}",
            last_c_error()
        );
        assert!(
            last_c_error().contains("changed size"),
            "{}",
            last_c_error()
        );
    }
    // SAFETY: `cprobe` is open and not used again.
    assert_eq!(unsafe { c::hydra_probe_close(cprobe) }, c::HYDRA_PROBE_OK);
}

/// A file resized over and over by another thread while readers read it in a loop: every
/// read either succeeds or reports the size change; the process survives. Growth is
/// harmless by construction; shrinking is the SIGBUS risk the fstat check guards, with the
/// documented window between the check and the loads (FORMAT.md §10.4), which only the
/// file's owner can open. This run shrinks no further than the header.
#[test]
fn readers_survive_a_file_that_keeps_changing_size() {
    let root = scratch("hydra-resize-loop.");
    let dir = root.path().to_path_buf();
    let bytes = corpus::template();
    let path = dir.join(format!("{}.hps", corpus::TEMPLATE_ID));
    std::fs::write(&path, &bytes).unwrap();
    let reader = SegmentReader::open(&path).expect("open");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flapper = {
        let stop = stop.clone();
        let path = path.clone();
        let len = bytes.len() as u64;
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 200_000 {
                let _ = f.set_len(if n % 2 == 0 { len + 8192 } else { len });
                n += 1;
            }
            let _ = f.set_len(len);
            n
        })
    };
    let (mut ok, mut changed) = (0u32, 0u32);
    for _ in 0..20_000 {
        match reader.snapshot() {
            Ok(_) => ok += 1,
            Err(hydra_layout::Error::SizeChanged { .. }) => changed += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flapper.join().unwrap();
    eprintln!("{flips} resizes; {ok} snapshots read, {changed} reported the size change");
    assert_eq!(ok + changed, 20_000);
}

/// A wait history at its limits (every word all ones) saturates the wait rule's threshold:
/// the decoding slot that waits is judged, named and not called stalled by it.
#[test]
fn a_wait_history_at_its_limits_saturates_the_wait_threshold() {
    let root = scratch("hydra-corpus.");
    let dir = root.path().join("segments");
    let outside = root.path().join("outside");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&outside).unwrap();
    corpus::build(&dir, &outside);
    let view = probe_read(&dir, "devices-wait-history-hostile").expect("readable");
    let s = &view.slots[0];
    assert_eq!(s.state.phase, hydra_layout::Phase::Decode);
    assert_eq!(s.derived.wait_stall_threshold_ns, Some(u64::MAX), "{s:?}");
    assert!(!s.derived.stalled_on_wait(), "{s:?}");
    assert!(s
        .wait
        .as_ref()
        .is_some_and(|w| w.learnt_max_ns == Some(u64::MAX)));
}
