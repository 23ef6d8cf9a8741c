//! `hydra-probe meta`: always JSON, one line.

use super::output::json_line;
use super::{Context, EXIT_OK};
use hydra_layout::clock;
use hydra_probe::{EngineView, HydraMeta};
use std::io::Write;

pub(super) fn run(
    ctx: &Context,
    engine: &str,
    slot: usize,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let reader = hydra_probe::open(&ctx.dir, Some(engine))?;
    let view = EngineView::capture(&reader, clock::monotonic_ns(), &ctx.thresholds)?;
    view.slot(slot)?;
    let meta = HydraMeta::from_view(&view, slot).ok_or_else(|| {
        hydra_probe::ProbeError::SlotOutOfRange {
            engine: view.engine_id.clone(),
            slot,
            count: view.slots.len(),
        }
    })?;
    json_line(out, &meta)?;
    Ok(EXIT_OK)
}
