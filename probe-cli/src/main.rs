//! `hydra-probe`: parses arguments, runs [`hydra_probe_cli::run`], maps the outcome to a
//! Nagios-style exit status (0 ok, 1 warning, 2 critical, 3 unknown/error). Errors are one
//! line on stderr; a closed output pipe is success.

use clap::Parser;
use hydra_probe_cli::{self as cli, Cli};
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let parsed = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = cli::clap_exit_code(&e);
            if code == cli::EXIT_OK {
                // --help / --version go to stdout.
                let _ = e.print();
            } else {
                let _ = writeln!(
                    std::io::stderr(),
                    "hydra-probe: {}",
                    cli::render_clap_error(&e)
                );
            }
            return ExitCode::from(code);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli::run(&parsed, &mut out) {
        Ok(code) => ExitCode::from(code),
        Err(e) if cli::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "hydra-probe: {e:#}");
            ExitCode::from(cli::EXIT_UNKNOWN)
        }
    }
}
