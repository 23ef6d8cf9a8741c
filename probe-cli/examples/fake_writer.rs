//! A fake engine for benchmarks and demos: `fake_writer DIR ENGINE_ID [SLOTS] [SECONDS]`.
//! Publishes decode progress on every slot thousands of times per second until stdin closes
//! or SECONDS (default 600) pass, then closes its segment. Prints `fake-writer-ready PATH` when up.

#[path = "../tests/common/fake.rs"]
mod fake;

use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: fake_writer DIR ENGINE_ID [SLOTS] [SECONDS]");
        std::process::exit(3);
    }
    let slots = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let secs = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(600);
    fake::run(
        std::path::Path::new(&args[0]),
        &args[1],
        slots,
        Duration::from_secs(secs),
        Duration::from_micros(50),
    );
}
