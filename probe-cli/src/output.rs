//! Output helpers: tables, JSON lines, clap errors, broken pipes.

use std::io::Write;

/// Exit status for a clap parse error: 0 for `--help` / `--version` (printed to stdout),
/// 3 for every usage error.
pub fn clap_exit_code(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => super::EXIT_OK,
        // Includes a bare `hydra-probe` (help shown because the subcommand is missing).
        _ => super::EXIT_UNKNOWN,
    }
}

/// A usage error as one line: clap's message (up to its usage section) joined into one
/// line without its `error: ` prefix, plus a hint.
pub fn render_clap_error(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
    ) {
        return "missing command: list, show, stats, history, trace, meta, watch, check or gc (see hydra-probe --help)"
            .into();
    }
    let text = e.render().to_string();
    let message: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let joined = message.join(" ");
    let joined = joined.strip_prefix("error: ").unwrap_or(&joined);
    let joined = if joined.is_empty() {
        "invalid arguments"
    } else {
        joined
    };
    format!("{joined} (see hydra-probe --help)")
}

/// Whether an error is (caused by) a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `value` as one line of JSON.
pub(crate) fn json_line<T: serde::Serialize + ?Sized>(
    out: &mut dyn Write,
    value: &T,
) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes rows as columns separated by two spaces, every column but the last padded.
pub(crate) fn table(out: &mut dyn Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}
