//! Helpers of the unit tests.

use hydra_layout::{SegmentConfig, SegmentWriter};
use std::path::Path;

/// A live engine `id` with `slots` idle slots in `dir` (created if missing).
pub(crate) fn writer(dir: &Path, id: &str, slots: usize) -> SegmentWriter {
    SegmentWriter::create(&SegmentConfig {
        dir: dir.to_path_buf(),
        engine_id: id.into(),
        slot_count: slots,
        description: Default::default(),
    })
    .expect("create a segment")
}
