//! The engine's devices and the device a slot's step waits on (segment format v1.3, FORMAT
//! §5.6 and §19), added in ABI minor 4: `hydra_probe_read_devices` and
//! `hydra_probe_read_wait`, and `HydraProbeWait` as version 4 of `HydraProbeMeta`.

use crate::error::guard;
use crate::{handle, read_into, versioned_out, write_versioned, HydraProbe, Versioned};
use hydra_ffi_support::{out_ptr, FfiError};
use hydra_layout::devices::{FLAG_ENDPOINT_TRUNCATED, FLAG_NAME_TRUNCATED};
use hydra_layout::{DeviceTable, LayerRange};
use hydra_probe::SlotView;
use std::ffi::c_char;

/// `HydraProbeDeviceTable::state`: the engine publishes no device table (a writer before
/// format v1.3, or one without the `devices` capability).
pub const HYDRA_PROBE_DEVICES_ABSENT: u32 = 0;

/// `HydraProbeDeviceTable::state`: the engine publishes its devices but has not yet (it is
/// still loading its model).
pub const HYDRA_PROBE_DEVICES_NOT_YET_KNOWN: u32 = 1;

/// `HydraProbeDeviceTable::state`: the table below is the engine's.
pub const HYDRA_PROBE_DEVICES_KNOWN: u32 = 2;

/// `HydraProbeDeviceTable::state`: no consistent copy could be read (the writer stopped in
/// the middle of publishing it); read again, or read the devices as unknown.
pub const HYDRA_PROBE_DEVICES_UNREADABLE: u32 = 3;

/// Most devices a table holds (FORMAT §19.2): an array of this many `HydraProbeDevice`
/// always has room for every device.
pub const HYDRA_PROBE_MAX_DEVICES: usize = 16;

/// Most layer ranges a table holds: an array of this many `HydraProbeLayerRange` always
/// has room for every range.
pub const HYDRA_PROBE_MAX_LAYER_RANGES: usize = 64;

/// Bytes of `HydraProbeDevice::name`: the longest name the format keeps (63 bytes) plus
/// its NUL.
pub const HYDRA_PROBE_DEVICE_NAME_LEN: usize = 64;

/// Bytes of `HydraProbeDevice::endpoint`: the longest endpoint the format keeps (127
/// bytes) plus its NUL.
pub const HYDRA_PROBE_DEVICE_ENDPOINT_LEN: usize = 128;

/// Bytes of `HydraProbeDevice::label`: a name, a space and an endpoint, plus the NUL.
pub const HYDRA_PROBE_DEVICE_LABEL_LEN: usize = 192;

/// `HydraProbeDevice::flags`: the writer cut the device's name to fit.
pub const HYDRA_PROBE_DEVICE_NAME_TRUNCATED: u64 = 1;

/// `HydraProbeDevice::flags`: the writer cut the device's endpoint to fit.
pub const HYDRA_PROBE_DEVICE_ENDPOINT_TRUNCATED: u64 = 2;

// The constants are literals for the C header; each is the format's own (FORMAT §19.2).
const _: () = {
    use hydra_layout::devices::{entry, MAX_DEVICES, MAX_RANGES};
    assert!(HYDRA_PROBE_MAX_DEVICES == MAX_DEVICES);
    assert!(HYDRA_PROBE_MAX_LAYER_RANGES == MAX_RANGES);
    assert!(HYDRA_PROBE_DEVICE_NAME_LEN == entry::DEV_NAME_LEN);
    assert!(HYDRA_PROBE_DEVICE_ENDPOINT_LEN == entry::DEV_ENDPOINT_LEN);
    assert!(HYDRA_PROBE_DEVICE_NAME_TRUNCATED == FLAG_NAME_TRUNCATED);
    assert!(HYDRA_PROBE_DEVICE_ENDPOINT_TRUNCATED == FLAG_ENDPOINT_TRUNCATED);
    assert!(HYDRA_PROBE_DEVICE_LABEL_LEN >= entry::DEV_NAME_LEN + entry::DEV_ENDPOINT_LEN - 1);
};

/// The engine's device table (filled by `hydra_probe_read_devices`): its state, counts
/// and layer map summary; the devices and the ranges go to the caller's arrays. Version 1
/// is 56 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeDeviceTable {
    /// Set by the caller to `sizeof(HydraProbeDeviceTable)` before the call; the library
    /// stores the bytes it filled (fields added later go at the end).
    pub size: u32,
    /// `HYDRA_PROBE_DEVICES_ABSENT`, `_NOT_YET_KNOWN`, `_KNOWN` or `_UNREADABLE`; the
    /// fields below are 0 unless KNOWN.
    pub state: u32,
    /// The table's sequence word: it changes whenever the writer publishes the table again.
    pub seq: u64,
    /// Transformer layers of the model (0 = unknown).
    pub layer_count: u64,
    /// Device id of the output head (0 = unknown).
    pub output_device: u64,
    /// Devices in the table (at most `HYDRA_PROBE_MAX_DEVICES`).
    pub device_count: u64,
    /// Usable layer ranges (at most `HYDRA_PROBE_MAX_LAYER_RANGES`).
    pub range_count: u64,
    /// Ranges the writer published that are unusable and left out (reversed, past the
    /// layer count, on a device the table lacks, or overlapping an earlier one).
    pub ranges_ignored: u64,
}

/// One device of the table.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeDevice {
    /// Its id: position in the table + 1 (what `HydraProbeWait::device` and
    /// `HydraProbeLayerRange::device` hold).
    pub id: u64,
    /// Raw kind: 0 unspecified, 1 cpu, 2 gpu, 3 rpc, 4 accel (named by
    /// `hydra_probe_value_name(HYDRA_PROBE_VALUE_DEVICE_KIND, kind)`).
    pub kind: u64,
    /// `HYDRA_PROBE_DEVICE_*_TRUNCATED` bits.
    pub flags: u64,
    /// Its name as its backend gives it (`CPU`, `CUDA0`, `RPC0`, `RPC[10.0.0.5:50052]`),
    /// UTF-8, NUL-terminated.
    pub name: [c_char; HYDRA_PROBE_DEVICE_NAME_LEN],
    /// For an RPC device the peer as `host:port`, else empty; NUL-terminated.
    pub endpoint: [c_char; HYDRA_PROBE_DEVICE_ENDPOINT_LEN],
    /// How the probe names the device in its verdicts and the meta JSON's `wait_device`
    /// and `layer_device`: the name, and the endpoint when the name lacks it
    /// (`RPC1 127.0.0.1:50053`, `RPC[10.0.0.5:50052]`, `CPU`); NUL-terminated.
    pub label: [c_char; HYDRA_PROBE_DEVICE_LABEL_LEN],
}

/// Layers `first_layer..=last_layer` (0-based) run on device `device`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeLayerRange {
    /// First layer of the run.
    pub first_layer: u64,
    /// Last layer of the run, inclusive.
    pub last_layer: u64,
    /// The device id.
    pub device: u64,
}

/// The device a slot's step in flight waits on (segment format v1.3), and the device of
/// the layer it computes. Added in ABI minor 4, also as version 4 of `HydraProbeMeta`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbeWait {
    /// 1 when the engine publishes the device a step waits on; 0 when not: then a wait is
    /// unknown, not absent, and the fields below are 0 or -1.
    pub published: u32,
    /// 1 while the step in flight is blocked on a device, else 0.
    pub waiting: u32,
    /// The id of that device (see `hydra_probe_read_devices`); 0 when none.
    pub device: u64,
    /// ns the step has been blocked on it; -1 when not waiting.
    pub wait_age_ns: i64,
    /// The id of the device of the layer the step in flight computes, from the engine's
    /// layer map; 0 when unknown (between steps, or no layer map).
    pub layer_device: u64,
}

const _: () = assert!(std::mem::size_of::<HydraProbeDeviceTable>() == 56);
const _: () = assert!(std::mem::size_of::<HydraProbeDevice>() == 408);
const _: () = assert!(std::mem::size_of::<HydraProbeLayerRange>() == 24);
const _: () = assert!(std::mem::size_of::<HydraProbeWait>() == 32);
const _: () = assert!(std::mem::size_of::<HydraProbePeer>() == 32);

/// The RPC peer that has read nothing the longest of what the engine sent it, while the
/// slot's step is in flight (segment format v1.3 §19.7), with the peer rule's threshold.
/// Added in ABI minor 7 as version 7 of `HydraProbeMeta`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HydraProbePeer {
    /// 1 when the engine watches its RPC peers' reads; 0 when not: then such a peer is
    /// unknown, not absent, and the fields below are 0 or -1.
    pub published: u32,
    /// 1 while a peer has read nothing during the step in flight, else 0.
    pub unread: u32,
    /// The id of that peer's device (see `hydra_probe_read_devices`); 0 when none.
    pub device: u64,
    /// ns it has read nothing; -1 when none.
    pub unread_ns: i64,
    /// The peer rule's threshold, ns (a peer unread for longer stalls the slot); -1 when
    /// none (no such peer, or no expected step).
    pub threshold_ns: i64,
}

impl HydraProbePeer {
    pub(crate) fn from_view(v: &SlotView) -> Self {
        let ns = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        let p = v.unread_peer.as_ref();
        Self {
            published: u32::from(v.peers_published),
            unread: u32::from(p.is_some()),
            device: p.map_or(0, |p| p.device),
            unread_ns: p.map_or(-1, |p| ns(p.age_ns)),
            threshold_ns: p.and_then(|p| p.threshold_ns).map_or(-1, ns),
        }
    }
}

impl HydraProbeWait {
    pub(crate) fn from_view(v: &SlotView) -> Self {
        Self {
            published: u32::from(v.waits_published),
            waiting: u32::from(v.wait.is_some()),
            device: v.wait.as_ref().map_or(0, |w| w.device),
            wait_age_ns: v
                .wait
                .as_ref()
                .map_or(-1, |w| i64::try_from(w.age_ns).unwrap_or(i64::MAX)),
            layer_device: v.layer_device.as_ref().map_or(0, |d| d.device),
        }
    }
}

impl Versioned for HydraProbeDeviceTable {
    const NAME: &'static str = "HydraProbeDeviceTable";
    const MIN_SIZE: usize = 56;
}

/// `text` as a NUL-terminated C array: cut at a character boundary to leave room for the
/// NUL (the format keeps at most `N - 1` bytes, so nothing is cut from a writer's table).
fn c_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    let mut end = text.len().min(N - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, src) in out.iter_mut().zip(&text.as_bytes()[..end]) {
        *dst = *src as c_char;
    }
    out
}

/// What one read of the device table gives: the table words, the devices, the ranges.
fn table_of(table: Result<DeviceTable, hydra_layout::Error>) -> Table {
    let mut t = Table {
        head: HydraProbeDeviceTable {
            size: std::mem::size_of::<HydraProbeDeviceTable>() as u32,
            state: HYDRA_PROBE_DEVICES_ABSENT,
            seq: 0,
            layer_count: 0,
            output_device: 0,
            device_count: 0,
            range_count: 0,
            ranges_ignored: 0,
        },
        devices: Vec::new(),
        ranges: Vec::new(),
    };
    match table {
        Ok(DeviceTable::Absent) => {}
        Ok(DeviceTable::NotYetKnown) => t.head.state = HYDRA_PROBE_DEVICES_NOT_YET_KNOWN,
        Err(_) => t.head.state = HYDRA_PROBE_DEVICES_UNREADABLE,
        Ok(DeviceTable::Known(p)) => {
            let d = &p.devices;
            t.head.state = HYDRA_PROBE_DEVICES_KNOWN;
            t.head.seq = p.seq;
            t.head.layer_count = d.layer_count;
            t.head.output_device = d.output_device;
            t.head.device_count = d.devices.len() as u64;
            t.head.range_count = d.ranges.len() as u64;
            t.head.ranges_ignored = p.ranges_ignored as u64;
            t.devices = d
                .devices
                .iter()
                .zip(1u64..)
                .map(|(dev, id)| HydraProbeDevice {
                    id,
                    kind: dev.kind.to_raw(),
                    flags: p.flags.get(id as usize - 1).copied().unwrap_or(0),
                    name: c_array(&dev.name),
                    endpoint: c_array(&dev.endpoint),
                    label: c_array(&d.describe(id)),
                })
                .collect();
            t.ranges = d.ranges.iter().map(range).collect();
        }
    }
    t
}

fn range(r: &LayerRange) -> HydraProbeLayerRange {
    HydraProbeLayerRange {
        first_layer: r.first,
        last_layer: r.last,
        device: r.device,
    }
}

struct Table {
    head: HydraProbeDeviceTable,
    devices: Vec<HydraProbeDevice>,
    ranges: Vec<HydraProbeLayerRange>,
}

/// Copies `items` into the caller's array `out` of `cap` entries; false when it is short
/// (the first `cap` are still copied).
///
/// # Safety
/// `out` is NULL only with `cap == 0`, else writable for `cap` entries.
unsafe fn fill<T: Copy>(items: &[T], out: *mut T, cap: usize) -> bool {
    let n = items.len().min(cap);
    if n > 0 {
        // SAFETY: `out` is writable for `cap >= n` entries (caller) and does not overlap
        // `items`, which this library owns.
        unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, n) };
    }
    items.len() <= cap
}

/// Reads the engine's device table and layer map now (one consistent copy) into
/// `*table`, `devices[0..min(device_count, device_cap)]` and
/// `ranges[0..min(range_count, range_cap)]`. Arrays of `HYDRA_PROBE_MAX_DEVICES` and
/// `HYDRA_PROBE_MAX_LAYER_RANGES` entries always have room. When an array is shorter than
/// its count, the call fills what fits and returns `HYDRA_PROBE_E_BUFFER_TOO_SMALL`, with
/// the counts stored. An engine without a table is not an error: `table->state` says
/// ABSENT, NOT_YET_KNOWN or UNREADABLE. Set `table->size` to
/// `sizeof(HydraProbeDeviceTable)` first. `devices` (`ranges`) may be NULL when
/// `device_cap` (`range_cap`) is 0. Added in ABI minor 4.
///
/// Errors: `HYDRA_PROBE_E_IO` when the file changed size.
///
/// # Safety
/// `probe` is NULL or an open handle; `table` is NULL or readable and writable;
/// `devices` is NULL or writable for `device_cap` entries, `ranges` for `range_cap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_devices(
    probe: *const HydraProbe,
    table: *mut HydraProbeDeviceTable,
    devices: *mut HydraProbeDevice,
    device_cap: usize,
    ranges: *mut HydraProbeLayerRange,
    range_cap: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller guarantees `probe` is NULL or an open handle.
        let probe = unsafe { handle(probe) }?;
        // SAFETY: the caller guarantees `table` is NULL or readable.
        let (table, len) = unsafe { versioned_out(table) }?;
        if device_cap > 0 {
            out_ptr(devices, "devices")?;
        }
        if range_cap > 0 {
            out_ptr(ranges, "ranges")?;
        }
        probe
            .reader
            .check_size()
            .map_err(|e| crate::error::probe_error(e.into()))?;
        let t = table_of(probe.reader.devices());
        // SAFETY: `table` is not NULL and writable for its size (caller); the arrays are
        // writable for their capacities, or NULL with a capacity of 0 (checked above).
        let fits = unsafe {
            write_versioned(table, t.head, len);
            fill(&t.devices, devices, device_cap) & fill(&t.ranges, ranges, range_cap)
        };
        if !fits {
            return Err(FfiError::buffer_too_small(format!(
                "{} devices and {} layer ranges, room for {device_cap} and {range_cap}",
                t.devices.len(),
                t.ranges.len()
            )));
        }
        Ok(())
    })
}

/// Reads slot `slot` now (the same read and classification as `hydra_probe_read_slot`)
/// and fills `*out` with the device its step in flight waits on and the device of the
/// layer it computes. Added in ABI minor 4: check `hydra_probe_abi_minor() >= 4` first.
///
/// Errors: those of `hydra_probe_read_slot`.
///
/// # Safety
/// `probe` is NULL or an open handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hydra_probe_read_wait(
    probe: *const HydraProbe,
    slot: u32,
    out: *mut HydraProbeWait,
) -> i32 {
    // SAFETY: the caller guarantees `probe` is NULL or an open handle, `out` NULL or writable.
    unsafe { read_into(probe, slot, out, |_, v| HydraProbeWait::from_view(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(c: &[c_char]) -> String {
        let bytes: Vec<u8> = c
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| b as u8)
            .collect();
        String::from_utf8(bytes).expect("UTF-8")
    }

    #[test]
    fn names_are_cut_at_a_character_boundary() {
        let a: [c_char; 4] = c_array("ab\u{e9}");
        assert_eq!(text(&a), "ab", "the 2-byte é does not fit before the NUL");
        let b: [c_char; 8] = c_array("ab\u{e9}");
        assert_eq!(text(&b), "ab\u{e9}");
    }
}
