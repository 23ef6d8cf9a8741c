//! The region directory (format v1.3, FORMAT.md §16): where the data that does not fit a
//! 256-byte slot record lives — per-slot statistics ([`crate::stats`]), per-slot flight
//! recorders ([`crate::flight`]) and the engine's devices — after the slot table.
//!
//! Two header words point to the directory (`REGION_DIR_OFFSET`, `REGION_COUNT`); each
//! entry is four words `{kind, offset, stride, items}`. The writer lays the regions out
//! once at creation ([`Layout::for_slots`]); a reader validates the directory once, after
//! the geometry, and keeps the validated offsets (`Regions::find`), never re-reading the
//! directory for address computation.

use crate::header::{self as h, WORD_LEN};
use crate::slot::SLOT_STRIDE;
use crate::words::MappedWords;

/// Bytes of one directory entry.
pub const ENTRY_LEN: usize = 32;
/// Most entries a directory may have (readers refuse more).
pub const MAX_REGIONS: u64 = 64;
/// Alignment of region offsets and item strides (as slot records).
pub const REGION_ALIGN: usize = 128;

/// Offset in an entry of the region kind.
pub const KIND_OFFSET: usize = 0;
/// Offset in an entry of the byte offset of item 0.
pub const OFFSET_OFFSET: usize = KIND_OFFSET + WORD_LEN;
/// Offset in an entry of the item stride.
pub const STRIDE_OFFSET: usize = OFFSET_OFFSET + WORD_LEN;
/// Offset in an entry of the item count.
pub const ITEMS_OFFSET: usize = STRIDE_OFFSET + WORD_LEN;

/// Region kinds (FORMAT §6.10).
pub mod kind {
    /// A slot's statistics ([`crate::stats`]), one item per slot.
    pub const SLOT_STATS: u64 = 1;
    /// A slot's flight recorder ([`crate::flight`]), one item per slot.
    pub const FLIGHT_RECORDER: u64 = 2;
    /// The device table and layer map, one item.
    pub const DEVICES: u64 = 3;
}

use crate::devices::DEVICES_LEN;

/// One validated region: item `i` starts at `offset + i * stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte offset of item 0 in the file.
    pub offset: usize,
    /// Bytes from one item to the next.
    pub stride: usize,
    /// Number of items.
    pub items: usize,
}

impl Region {
    /// Byte offset of item `i` (callers check `i < items`).
    pub fn item(&self, i: usize) -> usize {
        self.offset + i * self.stride
    }
}

/// Where the writer puts the directory and the regions of a segment with `n` slots
/// (FORMAT §16.3): the directory right after the slot table, three entries padded to 128
/// bytes, then statistics, flight recorders and devices in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Byte offset of the directory.
    pub dir_offset: usize,
    /// The per-slot statistics.
    pub stats: Region,
    /// The per-slot flight recorders.
    pub flight: Region,
    /// The devices item.
    pub devices: Region,
    /// Total file length.
    pub total_len: usize,
}

/// Entries the reference writer puts in its directory.
pub const WRITER_ENTRIES: usize = 3;

impl Layout {
    /// The reference layout for `slot_count` slots.
    pub fn for_slots(slot_count: usize) -> Self {
        let dir_offset = h::HEADER_LEN + slot_count * SLOT_STRIDE;
        let dir_len = (WRITER_ENTRIES * ENTRY_LEN).next_multiple_of(REGION_ALIGN);
        let stats = Region {
            offset: dir_offset + dir_len,
            stride: crate::stats::STATS_LEN,
            items: slot_count,
        };
        let flight = Region {
            offset: stats.offset + slot_count * stats.stride,
            stride: crate::flight::RING_LEN,
            items: slot_count,
        };
        let devices = Region {
            offset: flight.offset + slot_count * flight.stride,
            stride: DEVICES_LEN,
            items: 1,
        };
        Self {
            dir_offset,
            stats,
            flight,
            devices,
            total_len: devices.offset + DEVICES_LEN,
        }
    }

    /// Writes the header's directory words and the directory entries (before READY).
    pub(crate) fn write(&self, w: &MappedWords) {
        let r = crate::primitive::Ordering::Relaxed;
        w.store(h::REGION_DIR_OFFSET, self.dir_offset as u64, r);
        w.store(h::REGION_COUNT_OFFSET, WRITER_ENTRIES as u64, r);
        let entries = [
            (kind::SLOT_STATS, self.stats),
            (kind::FLIGHT_RECORDER, self.flight),
            (kind::DEVICES, self.devices),
        ];
        for (i, (k, region)) in entries.iter().enumerate() {
            let at = self.dir_offset + i * ENTRY_LEN;
            w.store(at + KIND_OFFSET, *k, r);
            w.store(at + OFFSET_OFFSET, region.offset as u64, r);
            w.store(at + STRIDE_OFFSET, region.stride as u64, r);
            w.store(at + ITEMS_OFFSET, region.items as u64, r);
        }
    }
}

const _: () = assert!(crate::stats::STATS_LEN % REGION_ALIGN == 0);
const _: () = assert!(crate::flight::RING_LEN % REGION_ALIGN == 0);
const _: () = assert!(DEVICES_LEN % REGION_ALIGN == 0);

/// The regions a reader found and validated (FORMAT §16.4); a region that is missing or
/// failed a check is `None`, and `problem` says why the first one failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Regions {
    /// The per-slot statistics.
    pub stats: Option<Region>,
    /// The per-slot flight recorders.
    pub flight: Option<Region>,
    /// The devices item.
    pub devices: Option<Region>,
    /// Why the directory or a region was refused, if one was.
    pub problem: Option<String>,
}

impl Regions {
    /// Reads and validates the directory of a mapped segment of `len` bytes whose
    /// geometry passed (slot table ends at `slot_end`, `slot_count` slots), and whose
    /// minor version is `minor`. Never fails: a bad directory means no regions.
    pub(crate) fn find(
        w: &MappedWords,
        minor: u64,
        slot_end: u64,
        slot_count: u64,
        len: u64,
    ) -> Self {
        let mut found = Self::default();
        if minor < h::REGIONS_MINOR {
            return found;
        }
        let dir = w.load(h::REGION_DIR_OFFSET);
        let count = w.load(h::REGION_COUNT_OFFSET);
        if dir == 0 {
            return found;
        }
        let dir_end = u128::from(dir) + u128::from(count) * ENTRY_LEN as u128;
        if dir % WORD_LEN as u64 != 0
            || dir < slot_end
            || !(1..=MAX_REGIONS).contains(&count)
            || dir_end > u128::from(len)
        {
            found.problem = Some(format!(
                "bad region directory: offset {dir}, {count} entries, in a {len}-byte file whose slot table ends at {slot_end}"
            ));
            return found;
        }
        for i in 0..count as usize {
            let at = dir as usize + i * ENTRY_LEN;
            let k = w.load(at + KIND_OFFSET);
            let (min_len, items_wanted, place) = match k {
                kind::SLOT_STATS => (crate::stats::STATS_LEN as u64, slot_count, &mut found.stats),
                kind::FLIGHT_RECORDER => (
                    crate::flight::MIN_RING_LEN as u64,
                    slot_count,
                    &mut found.flight,
                ),
                kind::DEVICES => (DEVICES_LEN as u64, 1, &mut found.devices),
                _ => continue,
            };
            if place.is_some() {
                continue; // The first entry of a kind wins.
            }
            let offset = w.load(at + OFFSET_OFFSET);
            let stride = w.load(at + STRIDE_OFFSET);
            let items = w.load(at + ITEMS_OFFSET);
            let end = u128::from(offset) + u128::from(items) * u128::from(stride);
            let align = REGION_ALIGN as u64;
            if offset % align != 0
                || u128::from(offset) < dir_end
                || stride % align != 0
                || stride < min_len
                || items != items_wanted
                || end > u128::from(len)
            {
                found.problem.get_or_insert_with(|| {
                    format!(
                        "bad region of kind {k}: offset {offset}, stride {stride}, {items} items in a {len}-byte file"
                    )
                });
                continue;
            }
            // All three fit in usize: they are bounded by `len`, which is mapped.
            *place = Some(Region {
                offset: offset as usize,
                stride: stride as usize,
                items: items as usize,
            });
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_layout_matches_format_16_3() {
        for n in [1usize, 4, 64, 4096] {
            let l = Layout::for_slots(n);
            assert_eq!(l.dir_offset, 1024 + 256 * n);
            assert_eq!(l.stats.offset, 1152 + 256 * n);
            assert_eq!(l.flight.offset, 1152 + 6272 * n);
            assert_eq!(l.devices.offset, 1152 + 14592 * n);
            assert_eq!(l.total_len, 7424 + 14592 * n);
        }
        assert_eq!(Layout::for_slots(4).total_len, 65_792);
        assert_eq!(Layout::for_slots(64).total_len, 941_312);
    }
}
