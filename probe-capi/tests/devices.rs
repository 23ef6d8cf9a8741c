//! The device table and the device wait through the C ABI, on a real v1.3 segment of an
//! engine split across two RPC peers, and on one without devices.

mod open_support;

use hydra_fault::segments::{rpc_split_devices, Scratch};
use hydra_probe_ffi::*;
use open_support::open;
use std::ffi::{c_char, CStr};
use std::ptr;

const NO_DEVICE: HydraProbeDevice = HydraProbeDevice {
    id: 99,
    kind: 99,
    flags: 99,
    name: [1; HYDRA_PROBE_DEVICE_NAME_LEN],
    endpoint: [1; HYDRA_PROBE_DEVICE_ENDPOINT_LEN],
    label: [1; HYDRA_PROBE_DEVICE_LABEL_LEN],
};

const NO_RANGE: HydraProbeLayerRange = HydraProbeLayerRange {
    first_layer: 99,
    last_layer: 99,
    device: 99,
};

/// A wait the library has not filled (every field 9).
const UNSET_WAIT: HydraProbeWait = HydraProbeWait {
    published: 9,
    waiting: 9,
    device: 9,
    wait_age_ns: 9,
    layer_device: 9,
};

fn empty_table() -> HydraProbeDeviceTable {
    HydraProbeDeviceTable {
        size: std::mem::size_of::<HydraProbeDeviceTable>() as u32,
        state: 99,
        seq: 99,
        layer_count: 99,
        output_device: 99,
        device_count: 99,
        range_count: 99,
        ranges_ignored: 99,
    }
}

fn text(c: &[c_char]) -> String {
    // SAFETY: the library NUL-terminates every name within its array.
    unsafe { CStr::from_ptr(c.as_ptr()) }
        .to_str()
        .expect("UTF-8")
        .to_owned()
}

fn kind_name(raw: u64) -> String {
    // SAFETY: a known kind gives a static NUL-terminated string.
    unsafe { CStr::from_ptr(hydra_probe_value_name(HYDRA_PROBE_VALUE_DEVICE_KIND, raw)) }
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_table_of_an_rpc_split_reads_whole_and_names_its_peers() {
    let scratch = Scratch::new();
    let (_w, _) = scratch.rpc_split("split");
    let h = open(&scratch.dir, "split");
    let mut table = empty_table();
    let mut devices = [NO_DEVICE; HYDRA_PROBE_MAX_DEVICES];
    let mut ranges = [NO_RANGE; HYDRA_PROBE_MAX_LAYER_RANGES];
    // SAFETY: the handle is open, the arrays hold their capacities; closed at the end.
    unsafe {
        let rc = hydra_probe_read_devices(
            h,
            &mut table,
            devices.as_mut_ptr(),
            devices.len(),
            ranges.as_mut_ptr(),
            ranges.len(),
        );
        assert_eq!(rc, HYDRA_PROBE_OK);
        assert_eq!(table.state, HYDRA_PROBE_DEVICES_KNOWN);
        assert_ne!(table.seq, 0);
        assert_eq!(
            (table.layer_count, table.output_device, table.ranges_ignored),
            (30, 2, 0)
        );
        assert_eq!((table.device_count, table.range_count), (2, 2));
        let want = rpc_split_devices();
        for (got, (want, id)) in devices.iter().zip(want.devices.iter().zip(1u64..)) {
            assert_eq!((got.id, got.flags), (id, 0));
            assert_eq!(kind_name(got.kind), "rpc");
            assert_eq!(text(&got.name), want.name);
            assert_eq!(text(&got.endpoint), want.endpoint);
        }
        assert_eq!(text(&devices[0].label), "RPC0[127.0.0.1:50052]");
        assert_eq!(text(&devices[1].label), "RPC1 127.0.0.1:50053");
        assert_eq!(devices[2], NO_DEVICE, "nothing written past the count");
        let got: Vec<_> = ranges[..2]
            .iter()
            .map(|r| (r.first_layer, r.last_layer, r.device))
            .collect();
        assert_eq!(got, [(0, 15, 1), (16, 29, 2)]);
        assert_eq!(ranges[2], NO_RANGE);

        // Short arrays: what fits, the counts, and BUFFER_TOO_SMALL.
        let mut one = [NO_DEVICE; 1];
        let rc = hydra_probe_read_devices(h, &mut table, one.as_mut_ptr(), 1, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_E_BUFFER_TOO_SMALL);
        assert_eq!((table.device_count, table.range_count), (2, 2));
        assert_eq!(text(&one[0].name), "RPC0[127.0.0.1:50052]");
        // Counts only: no arrays.
        let rc = hydra_probe_read_devices(h, &mut table, ptr::null_mut(), 0, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_E_BUFFER_TOO_SMALL);
        // Bad arguments.
        let rc = hydra_probe_read_devices(h, &mut table, ptr::null_mut(), 4, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_E_NULL);
        let rc =
            hydra_probe_read_devices(h, ptr::null_mut(), ptr::null_mut(), 0, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_E_NULL);
        table.size = 8;
        let rc = hydra_probe_read_devices(h, &mut table, ptr::null_mut(), 0, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_E_INVALID_ARGUMENT);
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}

#[test]
fn a_step_waiting_on_a_peer_reads_with_its_device_in_the_wait_and_the_meta() {
    let scratch = Scratch::new();
    let (w, _) = scratch.rpc_split("split");
    let h = open(&scratch.dir, "split");
    let mut wait = UNSET_WAIT;
    // SAFETY: the handle is open and the out-parameters writable; closed at the end.
    unsafe {
        assert_eq!(hydra_probe_read_wait(h, 0, &mut wait), HYDRA_PROBE_OK);
        assert_eq!(
            (wait.published, wait.waiting, wait.device, wait.layer_device),
            (1, 1, 2, 2)
        );
        assert!(wait.wait_age_ns >= 5_000_000_000, "{wait:?}");
        // The idle slot: published, no wait, no layer.
        assert_eq!(hydra_probe_read_wait(h, 1, &mut wait), HYDRA_PROBE_OK);
        assert_eq!(
            (wait.published, wait.waiting, wait.device, wait.wait_age_ns),
            (1, 0, 0, -1)
        );
        assert_eq!(wait.layer_device, 0);
        assert_eq!(
            hydra_probe_read_wait(h, 2, &mut wait),
            HYDRA_PROBE_E_SLOT_OUT_OF_RANGE
        );
        assert_eq!(
            hydra_probe_read_wait(h, 0, ptr::null_mut()),
            HYDRA_PROBE_E_NULL
        );

        // The meta carries the same wait; a prefill wait is not judged by the peer's
        // history. A version-3 caller gets 440 bytes.
        let mut meta = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        meta.size = std::mem::size_of::<HydraProbeMeta>() as u32;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut meta), HYDRA_PROBE_OK);
        assert_eq!(meta.size, 520);
        assert_eq!(
            (meta.peer.published, meta.peer.unread),
            (0, 0),
            "not watched"
        );
        assert_eq!((meta.peer.unread_ns, meta.peer.threshold_ns), (-1, -1));
        assert_eq!((meta.wait.waiting, meta.wait.device), (1, 2));
        assert_eq!((meta.wait_learnt_max_ns, meta.wait_threshold_ns), (-1, -1));
        let mut v3 = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        v3.size = 440;
        v3.wait.device = 77;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut v3), HYDRA_PROBE_OK);
        assert_eq!(
            (v3.size, v3.wait.device),
            (440, 77),
            "past its size untouched"
        );

        // The meta JSON names the device and the layer's device.
        let mut buf = vec![0 as c_char; 8192];
        let rc = hydra_probe_meta_json(h, 0, buf.as_mut_ptr(), buf.len(), ptr::null_mut());
        assert_eq!(rc, HYDRA_PROBE_OK);
        let json: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(buf.as_ptr()).to_str().unwrap()).unwrap();
        assert_eq!(json["wait_device"], "RPC1 127.0.0.1:50053", "{json}");
        assert_eq!(json["layer_device"], "RPC1 127.0.0.1:50053", "{json}");
        assert!(
            json["wait_ms"].as_u64().is_some_and(|ms| ms >= 5000),
            "{json}"
        );
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
    drop(w);
}

#[test]
fn an_engine_without_devices_says_absent_and_unpublished() {
    let scratch = Scratch::new();
    let _w = scratch.writer("plain", 1);
    let h = open(&scratch.dir, "plain");
    let mut table = empty_table();
    let mut wait = UNSET_WAIT;
    // SAFETY: the handle is open and the out-parameters writable; closed at the end.
    unsafe {
        let rc = hydra_probe_read_devices(h, &mut table, ptr::null_mut(), 0, ptr::null_mut(), 0);
        assert_eq!(rc, HYDRA_PROBE_OK);
        assert_eq!(table.state, HYDRA_PROBE_DEVICES_ABSENT);
        assert_eq!(
            (table.device_count, table.range_count, table.seq),
            (0, 0, 0)
        );
        assert_eq!(hydra_probe_read_wait(h, 0, &mut wait), HYDRA_PROBE_OK);
        assert_eq!(
            (wait.published, wait.waiting, wait.device, wait.wait_age_ns),
            (0, 0, 0, -1)
        );
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
}

#[test]
fn device_kinds_have_their_format_names() {
    let names: Vec<_> = (0..6).map(kind_name).collect();
    assert_eq!(
        names,
        ["unspecified", "cpu", "gpu", "rpc", "accel", "unknown"]
    );
}

#[test]
fn a_decode_wait_past_the_peers_history_reads_with_the_wait_rule_in_meta_v5() {
    let scratch = Scratch::new();
    let (w, _) = scratch.rpc_split_decoding("split");
    let h = open(&scratch.dir, "split");
    // SAFETY: the handle is open and the out-parameters writable; closed at the end.
    unsafe {
        let mut meta = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        meta.size = std::mem::size_of::<HydraProbeMeta>() as u32;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut meta), HYDRA_PROBE_OK);
        assert_eq!((meta.size, meta.wait.device), (520, 2));
        let max = meta.wait_learnt_max_ns;
        assert!((2_000_000..100_000_000).contains(&max), "~2 ms: {max}");
        assert_eq!(meta.wait_threshold_ns, 1_000_000_000, "the 1 s floor");
        assert_eq!(
            meta.slot.slot_class, HYDRA_PROBE_SLOT_CLASS_STALLED,
            "5 s past a 1 s threshold"
        );
        // A version-4 caller gets 472 bytes, and nothing past them.
        let mut v4 = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        v4.size = 472;
        v4.wait_threshold_ns = 77;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut v4), HYDRA_PROBE_OK);
        assert_eq!((v4.size, v4.wait_threshold_ns), (472, 77));

        let mut buf = vec![0 as c_char; 8192];
        let rc = hydra_probe_meta_json(h, 0, buf.as_mut_ptr(), buf.len(), ptr::null_mut());
        assert_eq!(rc, HYDRA_PROBE_OK);
        let json: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(buf.as_ptr()).to_str().unwrap()).unwrap();
        assert_eq!(json["wait_threshold_ms"], 1000, "{json}");
        assert_eq!(json["wait_learnt_max_ms"], max / 1_000_000, "{json}");
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
    drop(w);
}

#[test]
fn a_peer_that_reads_nothing_reads_in_meta_v7_and_its_json() {
    let scratch = Scratch::new();
    let (w, _) = scratch.rpc_split_unread("split");
    let h = open(&scratch.dir, "split");
    // SAFETY: the handle is open and the out-parameters writable; closed at the end.
    unsafe {
        let mut meta = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        meta.size = std::mem::size_of::<HydraProbeMeta>() as u32;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut meta), HYDRA_PROBE_OK);
        let p = meta.peer;
        assert_eq!((meta.size, p.published, p.unread, p.device), (520, 1, 1, 2));
        assert!(p.unread_ns >= 5_000_000_000, "{p:?}");
        assert_eq!(p.threshold_ns, 4_000_000_000, "two steps of 2 s");
        assert_eq!(meta.slot.slot_class, HYDRA_PROBE_SLOT_CLASS_STALLED);
        // A version-5 caller gets 488 bytes, and nothing past them.
        let mut v5 = std::mem::MaybeUninit::<HydraProbeMeta>::zeroed().assume_init();
        v5.size = 488;
        v5.peer.device = 77;
        assert_eq!(hydra_probe_read_meta(h, 0, &mut v5), HYDRA_PROBE_OK);
        assert_eq!((v5.size, v5.peer.device), (488, 77));
        // The idle slot: watched, no peer unread during a step.
        assert_eq!(hydra_probe_read_meta(h, 1, &mut meta), HYDRA_PROBE_OK);
        let p = meta.peer;
        assert_eq!(
            (p.published, p.unread, p.device, p.unread_ns),
            (1, 0, 0, -1)
        );

        let mut buf = vec![0 as c_char; 8192];
        let rc = hydra_probe_meta_json(h, 0, buf.as_mut_ptr(), buf.len(), ptr::null_mut());
        assert_eq!(rc, HYDRA_PROBE_OK);
        let json: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(buf.as_ptr()).to_str().unwrap()).unwrap();
        assert_eq!(json["unread_peer"], "RPC1 127.0.0.1:50053", "{json}");
        assert_eq!(json["unread_peer_threshold_ms"], 4000, "{json}");
        assert!(
            json["unread_peer_ms"].as_u64().is_some_and(|ms| ms >= 5000),
            "{json}"
        );
        assert_eq!(hydra_probe_close(h), HYDRA_PROBE_OK);
    }
    drop(w);
}
