//! The engine's devices (format v1.3, FORMAT.md §19): a table of the devices it computes
//! on (CPU, local GPUs, ggml RPC peers with their endpoints) and which transformer layer
//! runs on which, the one item of the `devices` region. With the slot's device words
//! ([`crate::StepDevices`], §5.6) a reader can say "layer 13 of 30, on `RPC1`, waiting on
//! 127.0.0.1:50053 for 4.2 s".
//!
//! The item has its own seqlock (`DEV_SEQ`): a writer that knows its devices at creation
//! publishes them before READY, one that learns them later (the preload library, at the
//! first forward) publishes them then, from the thread of the step events. A reader copies
//! the whole item in one seqlock read and decodes the strings from that copy.
//!
//! - [`Devices`]: the table as a plain value, checked before it is written
//!   ([`Devices::check`]);
//! - [`PublishedDevices`]: a reader's copy, with the truncation flags and the ranges a
//!   hostile or faulty writer got wrong left out.

use crate::header::WORD_LEN;
use crate::slot::DeviceKind;
use crate::words::truncate_utf8;

/// Bytes of the devices item in v1.3.
pub const DEVICES_LEN: usize = 6272;
/// Offset of the item's seqlock sequence (0 = never published).
pub const DEV_SEQ_OFFSET: usize = 0;
/// Offset of the number of devices in the table.
pub const DEVICE_COUNT_OFFSET: usize = 8;
/// Offset of the model's transformer layer count (0 = unknown).
pub const LAYER_COUNT_OFFSET: usize = 16;
/// Offset of the number of layer ranges in the map.
pub const RANGE_COUNT_OFFSET: usize = 24;
/// Offset of the device id of the output head (0 = unknown).
pub const OUTPUT_DEVICE_OFFSET: usize = 32;
/// Offset of device entry 0.
pub const TABLE_OFFSET: usize = 128;
/// Bytes of one device entry.
pub const DEVICE_LEN: usize = 256;
/// Most devices a table holds (the most one ggml scheduler drives).
pub const MAX_DEVICES: usize = 16;
/// Offset of layer range 0.
pub const MAP_OFFSET: usize = TABLE_OFFSET + MAX_DEVICES * DEVICE_LEN;
/// Bytes of one layer range.
pub const RANGE_LEN: usize = 32;
/// Most ranges a map holds.
pub const MAX_RANGES: usize = 64;
/// Data words after `DEV_SEQ` (what a reader copies in one seqlock read).
pub const DATA_WORDS: usize = DEVICES_LEN / WORD_LEN - 1;

/// Offsets inside a device entry.
pub mod entry {
    /// The device's id: its position + 1.
    pub const DEV_ID: usize = 0;
    /// Its [`crate::DeviceKind`].
    pub const DEV_KIND: usize = 8;
    /// Bit 0: the name was truncated; bit 1: the endpoint was.
    pub const DEV_FLAGS: usize = 16;
    /// The name as its backend gives it, NUL-padded UTF-8.
    pub const DEV_NAME: usize = 64;
    /// Bytes of the name field.
    pub const DEV_NAME_LEN: usize = 64;
    /// For an RPC device, the peer as `host:port`, NUL-padded UTF-8.
    pub const DEV_ENDPOINT: usize = 128;
    /// Bytes of the endpoint field.
    pub const DEV_ENDPOINT_LEN: usize = 128;
}

/// Offsets inside a layer range.
pub mod range {
    /// First layer of the range, 0-based.
    pub const FIRST_LAYER: usize = 0;
    /// Last layer of the range, inclusive.
    pub const LAST_LAYER: usize = 8;
    /// Device id the range's layers run on.
    pub const RANGE_DEVICE: usize = 16;
}

/// `DEV_FLAGS` bit: the name was cut to fit its field.
pub const FLAG_NAME_TRUNCATED: u64 = 1;
/// `DEV_FLAGS` bit: the endpoint was cut to fit its field.
pub const FLAG_ENDPOINT_TRUNCATED: u64 = 2;

const _: () = assert!(MAP_OFFSET == 4224);
const _: () = assert!(MAP_OFFSET + MAX_RANGES * RANGE_LEN == DEVICES_LEN);
const _: () = assert!(entry::DEV_ENDPOINT + entry::DEV_ENDPOINT_LEN == DEVICE_LEN);

/// One device of the table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Device {
    /// What it is.
    pub kind: DeviceKind,
    /// Its name as its backend gives it (`CPU`, `CUDA0`, `cuda:0`, `RPC0`,
    /// `RPC[10.0.0.5:50052]`); at most 63 bytes are kept.
    pub name: String,
    /// For an RPC device, the peer as `host:port`; empty for a local one. Only the address
    /// the engine connects to; at most 127 bytes are kept.
    pub endpoint: String,
}

/// A run of layers on one device: layers `first..=last` run on device `device` (an id:
/// position in the table + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerRange {
    /// First layer, 0-based.
    pub first: u64,
    /// Last layer, inclusive.
    pub last: u64,
    /// The device id.
    pub device: u64,
}

/// The engine's devices and its layer map, as a writer publishes them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Devices {
    /// The table; entry `j` has the id `j + 1`.
    pub devices: Vec<Device>,
    /// Transformer layers of the model (0 = unknown).
    pub layer_count: u64,
    /// Layer ranges, sorted by their first layer, not overlapping.
    pub ranges: Vec<LayerRange>,
    /// Device id of the output head (0 = unknown).
    pub output_device: u64,
}

impl Devices {
    /// One device that runs all `layer_count` layers and the output head: what an engine
    /// on one CPU or one GPU publishes.
    pub fn single(device: Device, layer_count: u64) -> Self {
        Self {
            devices: vec![device],
            layer_count,
            ranges: (layer_count > 0)
                .then_some(LayerRange {
                    first: 0,
                    last: layer_count - 1,
                    device: 1,
                })
                .into_iter()
                .collect(),
            output_device: 1,
        }
    }

    /// Checks the table against the format's rules (FORMAT §19.2, §19.3): at most 16
    /// devices and 64 ranges, ranges sorted, not overlapping, within the layer count, on
    /// devices of the table, and an output device of the table or 0.
    pub fn check(&self) -> Result<(), String> {
        let n = self.devices.len() as u64;
        if self.devices.len() > MAX_DEVICES {
            return Err(format!("{n} devices: at most {MAX_DEVICES}"));
        }
        if self.ranges.len() > MAX_RANGES {
            return Err(format!(
                "{} layer ranges: at most {MAX_RANGES}",
                self.ranges.len()
            ));
        }
        if self.output_device > n {
            return Err(format!("output device {} of {n}", self.output_device));
        }
        let mut next_free = 0u64;
        for (i, r) in self.ranges.iter().enumerate() {
            if let Some(defect) = range_defect(r, self.layer_count, n) {
                return Err(format!("range {i}: {defect}"));
            }
            if i > 0 && r.first < next_free {
                return Err(format!(
                    "range {i} (layers {}..={}) overlaps or precedes the one before",
                    r.first, r.last
                ));
            }
            next_free = r.last.saturating_add(1);
        }
        Ok(())
    }

    /// The device `id` names (1-based), if the table has it.
    pub fn device(&self, id: u64) -> Option<&Device> {
        (id as usize)
            .checked_sub(1)
            .and_then(|j| self.devices.get(j))
    }

    /// The id of the device layer `layer` (0-based) runs on: the first range that holds
    /// it; none when no range does.
    pub fn device_of_layer(&self, layer: u64) -> Option<u64> {
        self.ranges
            .iter()
            .find(|r| r.first <= layer && layer <= r.last)
            .map(|r| r.device)
    }

    /// How a reader names device `id`: its name, and its endpoint when it has one and the
    /// name does not already hold it (`RPC1 127.0.0.1:50053`, `RPC[10.0.0.5:50052]`,
    /// `cpu`); `device #k` for an id the table lacks.
    pub fn describe(&self, id: u64) -> String {
        match self.device(id) {
            Some(d) if d.endpoint.is_empty() || d.name.contains(&d.endpoint) => d.name.clone(),
            Some(d) => format!("{} {}", d.name, d.endpoint),
            None => format!("device #{id}"),
        }
    }

    /// The item's data words (after `DEV_SEQ`), strings cut to fit as §3.3 says.
    pub(crate) fn to_words(&self) -> Box<[u64]> {
        let mut w = vec![0u64; DATA_WORDS].into_boxed_slice();
        let mut put = |offset: usize, value: u64| w[offset / WORD_LEN - 1] = value;
        put(DEVICE_COUNT_OFFSET, self.devices.len() as u64);
        put(LAYER_COUNT_OFFSET, self.layer_count);
        put(RANGE_COUNT_OFFSET, self.ranges.len() as u64);
        put(OUTPUT_DEVICE_OFFSET, self.output_device);
        for (j, d) in self.devices.iter().take(MAX_DEVICES).enumerate() {
            let at = TABLE_OFFSET + j * DEVICE_LEN;
            put(at + entry::DEV_ID, j as u64 + 1);
            put(at + entry::DEV_KIND, d.kind.to_raw());
            let mut flags = 0;
            if put_str(&mut put, at + entry::DEV_NAME, entry::DEV_NAME_LEN, &d.name) {
                flags |= FLAG_NAME_TRUNCATED;
            }
            let endpoint = &d.endpoint;
            if put_str(
                &mut put,
                at + entry::DEV_ENDPOINT,
                entry::DEV_ENDPOINT_LEN,
                endpoint,
            ) {
                flags |= FLAG_ENDPOINT_TRUNCATED;
            }
            put(at + entry::DEV_FLAGS, flags);
        }
        for (i, r) in self.ranges.iter().take(MAX_RANGES).enumerate() {
            let at = MAP_OFFSET + i * RANGE_LEN;
            put(at + range::FIRST_LAYER, r.first);
            put(at + range::LAST_LAYER, r.last);
            put(at + range::RANGE_DEVICE, r.device);
        }
        w
    }
}

/// Why `r` is not a usable range of a map with `layer_count` layers (0 = unknown) and
/// `devices` devices; none when it is.
fn range_defect(r: &LayerRange, layer_count: u64, devices: u64) -> Option<String> {
    if r.first > r.last {
        return Some(format!("first layer {} after last {}", r.first, r.last));
    }
    if layer_count != 0 && r.last >= layer_count {
        return Some(format!("last layer {} of {layer_count}", r.last));
    }
    if r.device == 0 || r.device > devices {
        return Some(format!("device {} of {devices}", r.device));
    }
    None
}

/// Stores `text` NUL-padded into the `len`-byte field at `offset` through `put`, cut at a
/// character boundary to leave one NUL; true when it was cut.
fn put_str(put: &mut impl FnMut(usize, u64), offset: usize, len: usize, text: &str) -> bool {
    let bytes = truncate_utf8(text, len - 1);
    let mut field = vec![0u8; len];
    field[..bytes.len()].copy_from_slice(bytes);
    for (i, chunk) in field.chunks_exact(WORD_LEN).enumerate() {
        put(
            offset + i * WORD_LEN,
            u64::from_ne_bytes(chunk.try_into().expect("8 bytes")),
        );
    }
    bytes.len() < text.len()
}

/// A string field out of a copy of the item's data words; invalid UTF-8 is replaced.
fn get_str(words: &[u64], offset: usize, len: usize) -> String {
    let first = offset / WORD_LEN - 1;
    let bytes: Vec<u8> = words[first..first + len / WORD_LEN]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The devices as a reader copied them (one consistent seqlock read of the item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedDevices {
    /// The table and the usable ranges.
    pub devices: Devices,
    /// Per device, its `DEV_FLAGS` (truncated name or endpoint).
    pub flags: Vec<u64>,
    /// Ranges left out as unusable (§19.3: reversed, past the layer count, on a device the
    /// table lacks, or overlapping an earlier one).
    pub ranges_ignored: usize,
    /// `DEV_SEQ` of the copy (it changes when the writer publishes again).
    pub seq: u64,
}

impl PublishedDevices {
    /// Decodes a consistent copy of the data words, as §19.3 says a reader does: at most
    /// 16 devices and 64 ranges, bad or overlapping ranges left out. Never fails.
    pub(crate) fn from_words(words: &[u64], seq: u64) -> Self {
        let get = |offset: usize| words[offset / WORD_LEN - 1];
        let count = (get(DEVICE_COUNT_OFFSET).min(MAX_DEVICES as u64)) as usize;
        let layer_count = get(LAYER_COUNT_OFFSET);
        let mut flags = Vec::with_capacity(count);
        let devices: Vec<Device> = (0..count)
            .map(|j| {
                let at = TABLE_OFFSET + j * DEVICE_LEN;
                flags.push(get(at + entry::DEV_FLAGS));
                Device {
                    kind: DeviceKind::from_raw(get(at + entry::DEV_KIND)),
                    name: get_str(words, at + entry::DEV_NAME, entry::DEV_NAME_LEN),
                    endpoint: get_str(words, at + entry::DEV_ENDPOINT, entry::DEV_ENDPOINT_LEN),
                }
            })
            .collect();
        let n_ranges = (get(RANGE_COUNT_OFFSET).min(MAX_RANGES as u64)) as usize;
        let mut ranges: Vec<LayerRange> = Vec::with_capacity(n_ranges);
        let mut ranges_ignored = 0;
        for i in 0..n_ranges {
            let at = MAP_OFFSET + i * RANGE_LEN;
            let r = LayerRange {
                first: get(at + range::FIRST_LAYER),
                last: get(at + range::LAST_LAYER),
                device: get(at + range::RANGE_DEVICE),
            };
            let overlaps = ranges
                .iter()
                .any(|p| p.first <= r.last && r.first <= p.last);
            if overlaps || range_defect(&r, layer_count, count as u64).is_some() {
                ranges_ignored += 1;
            } else {
                ranges.push(r);
            }
        }
        ranges.sort_by_key(|r| r.first);
        let output = get(OUTPUT_DEVICE_OFFSET);
        Self {
            devices: Devices {
                devices,
                layer_count,
                ranges,
                output_device: if output <= count as u64 { output } else { 0 },
            },
            flags,
            ranges_ignored,
            seq,
        }
    }
}

/// What a reader knows of the engine's devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceTable {
    /// The segment has none: an older minor, no `devices` capability, or no valid region.
    Absent,
    /// The writer publishes devices but has not yet (`DEV_SEQ` 0): not known yet.
    NotYetKnown,
    /// The published table.
    Known(PublishedDevices),
}

impl DeviceTable {
    /// The table, when known.
    pub fn known(&self) -> Option<&Devices> {
        match self {
            Self::Known(p) => Some(&p.devices),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc_split() -> Devices {
        let rpc = |name: &str, endpoint: &str| Device {
            kind: DeviceKind::Rpc,
            name: name.into(),
            endpoint: endpoint.into(),
        };
        Devices {
            devices: vec![
                Device {
                    kind: DeviceKind::Cpu,
                    name: "CPU".into(),
                    endpoint: String::new(),
                },
                rpc("RPC0", "127.0.0.1:50052"),
                rpc("RPC[10.0.0.6:50052]", "10.0.0.6:50052"),
            ],
            layer_count: 30,
            ranges: vec![
                LayerRange {
                    first: 0,
                    last: 15,
                    device: 2,
                },
                LayerRange {
                    first: 16,
                    last: 29,
                    device: 3,
                },
            ],
            output_device: 3,
        }
    }

    #[test]
    fn a_table_round_trips_through_its_words() {
        let d = rpc_split();
        d.check().expect("a valid table");
        let back = PublishedDevices::from_words(&d.to_words(), 2);
        assert_eq!(back.devices, d);
        assert_eq!(back.flags, vec![0, 0, 0]);
        assert_eq!(back.ranges_ignored, 0);
        assert_eq!(back.devices.device_of_layer(16), Some(3));
        assert_eq!(back.devices.device_of_layer(30), None);
        assert_eq!(back.devices.describe(2), "RPC0 127.0.0.1:50052");
        assert_eq!(back.devices.describe(3), "RPC[10.0.0.6:50052]");
        assert_eq!(back.devices.describe(1), "CPU");
        assert_eq!(back.devices.describe(9), "device #9");
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary_and_flagged() {
        let mut d = rpc_split();
        d.devices[0].name = "é".repeat(40); // 80 bytes
        d.devices[1].endpoint = format!("[{}]:50052", "f".repeat(200));
        let back = PublishedDevices::from_words(&d.to_words(), 2);
        assert_eq!(back.devices.devices[0].name, "é".repeat(31)); // 62 bytes
        assert_eq!(back.flags[0], FLAG_NAME_TRUNCATED);
        assert_eq!(back.devices.devices[1].endpoint.len(), 127);
        assert_eq!(back.flags[1], FLAG_ENDPOINT_TRUNCATED);
    }

    #[test]
    fn check_refuses_what_the_format_forbids() {
        let bad = |f: &dyn Fn(&mut Devices)| {
            let mut d = rpc_split();
            f(&mut d);
            d.check().expect_err("refused")
        };
        assert!(bad(&|d| d.ranges[1].first = 15).contains("overlaps"));
        assert!(bad(&|d| d.ranges[1].last = 30).contains("last layer 30 of 30"));
        assert!(bad(&|d| d.ranges[0].device = 0).contains("device 0 of 3"));
        assert!(bad(&|d| d.ranges[0].device = 4).contains("device 4 of 3"));
        assert!(bad(&|d| d.ranges[0] = LayerRange {
            first: 3,
            last: 2,
            device: 1
        })
        .contains("after last"));
        assert!(bad(&|d| d.output_device = 4).contains("output device"));
        assert!(bad(&|d| d.devices = vec![Device::default(); 17]).contains("17 devices"));
        let many = |d: &mut Devices| {
            d.layer_count = 0;
            d.ranges = (0..65)
                .map(|i| LayerRange {
                    first: i,
                    last: i,
                    device: 1,
                })
                .collect();
        };
        assert!(bad(&many).contains("65 layer ranges"));
    }

    #[test]
    fn a_reader_leaves_out_hostile_ranges_and_counts() {
        let d = rpc_split();
        let mut w = d.to_words();
        let idx = |offset: usize| offset / WORD_LEN - 1;
        // A count past the table, a range on a missing device, one overlapping the first,
        // and an output device the table lacks.
        w[idx(DEVICE_COUNT_OFFSET)] = u64::MAX;
        w[idx(RANGE_COUNT_OFFSET)] = 4;
        let r2 = MAP_OFFSET + 2 * RANGE_LEN;
        w[idx(r2 + range::FIRST_LAYER)] = 3;
        w[idx(r2 + range::LAST_LAYER)] = 4;
        w[idx(r2 + range::RANGE_DEVICE)] = 1;
        let r3 = MAP_OFFSET + 3 * RANGE_LEN;
        w[idx(r3 + range::RANGE_DEVICE)] = 99;
        w[idx(OUTPUT_DEVICE_OFFSET)] = 99;
        let back = PublishedDevices::from_words(&w, 4);
        assert_eq!(back.devices.devices.len(), MAX_DEVICES);
        assert_eq!(back.devices.ranges, d.ranges);
        assert_eq!(back.ranges_ignored, 2);
        assert_eq!(back.devices.output_device, 0);
        let single = Devices::single(Device::default(), 30);
        assert_eq!(
            single.ranges,
            vec![LayerRange {
                first: 0,
                last: 29,
                device: 1
            }]
        );
        single.check().expect("valid");
    }
}
