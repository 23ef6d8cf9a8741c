//! Replays step traces recorded by `scripts/bench-eta.py batch --record FILE` through the
//! cost model of this tree, and prints the ETA error it would have published at 10, 25, 50
//! and 75% of each measured phase, with the mean absolute error from 25% on (the join
//! case's 25%, the moment the other rows join, left out: nobody can know they will).
//!
//!   cargo run --release -p hydra-layout --example eta-replay -- TRACE...

#[path = "../tests/replay/mod.rs"]
mod replay;

use std::process::ExitCode;

fn main() -> ExitCode {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() || paths.iter().any(|p| p == "-h" || p == "--help") {
        eprintln!("usage: eta-replay TRACE... (traces of scripts/bench-eta.py batch --record)");
        return ExitCode::from(2);
    }
    let mut all = Vec::new();
    for path in &paths {
        let trace = match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| replay::Trace::parse(&t))
        {
            Ok(t) => t,
            Err(e) => {
                eprintln!("eta-replay: {path}: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("{path}");
        for c in replay::replay(&trace) {
            let cells: Vec<String> = c.errors.iter().map(|e| fmt(*e)).collect();
            println!(
                "  {:28} {}   steps {}",
                c.case,
                cells.join("  "),
                fmt(c.step_error)
            );
            all.extend(replay::measured_points(&c));
        }
    }
    let n = all.len().max(1) as f64;
    let mean = all.iter().map(|e| e.abs()).sum::<f64>() / n;
    let worst = all.iter().map(|e| e.abs()).fold(0.0, f64::max);
    println!(
        "mean abs error from 25%: {:.1}%, worst {:.1}%, over {} points",
        100.0 * mean,
        100.0 * worst,
        all.len()
    );
    ExitCode::SUCCESS
}

fn fmt(e: Option<f64>) -> String {
    e.map_or_else(|| "      -".into(), |e| format!("{:+6.1}%", 100.0 * e))
}
