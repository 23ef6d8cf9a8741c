//! `hydra-probe gc`.

use super::output::json_line;
use super::{Context, EXIT_OK, EXIT_UNKNOWN};
use hydra_probe::{GcAction, GcOptions};
use std::io::Write;

pub(super) fn run(ctx: &Context, dry_run: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
    let entries = hydra_probe::gc(
        &ctx.dir,
        &GcOptions {
            dry_run,
            ..Default::default()
        },
    )?;
    if ctx.json {
        json_line(out, &entries)?;
    } else if entries.is_empty() {
        writeln!(out, "nothing to do in {}", ctx.dir.display())?;
    } else {
        for e in &entries {
            writeln!(
                out,
                "{}: {}: {}",
                e.action.as_str(),
                e.path.display(),
                e.reason
            )?;
        }
    }
    let failed = entries.iter().any(|e| e.action == GcAction::Failed);
    Ok(if failed { EXIT_UNKNOWN } else { EXIT_OK })
}
