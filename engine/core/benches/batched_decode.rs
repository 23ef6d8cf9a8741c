//! Batched decode in-process: steps of 1 slot against steps of 4 slots at once
//! (`Slots::decode_batch`), for each `--pool-use` policy, without the HTTP server around
//! them; the model-level form of the "4 slots against 1" figure of
//! `scripts/bench-vs-llamacpp.sh --embedded` (BENCHMARKS.md, #13).
//!
//! ```text
//! cargo bench -p hydra-engine-core --bench batched_decode -- \
//!     [--model PATH] [--threads N] [--tokens N] [--rounds N]
//! ```
//!
//! The embedded model unless `--model`. Each round decodes `--tokens` (default 256) tokens
//! in each configuration (policies x {1, 4} slots) one after another, after a 7-token
//! prompt per slot; the figures are medians over `--rounds` (default 9). For each policy it
//! prints the step times, the split of a step into a part that does not grow with the rows
//! and a part per row (from the 1- and 4-slot steps), and 4-slot tokens/s over 1-slot.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use hydra_engine_core::threads::PoolUse;
use hydra_engine_core::{LoadOptions, Model, Slots};

/// Batched decode in-process: 1 slot against 4 slots at once, per `--pool-use` policy.
#[derive(Parser)]
struct Args {
    /// A GGUF model (default: the embedded model).
    #[arg(long)]
    model: Option<String>,
    /// Compute threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// Tokens each slot decodes per measurement.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    tokens: u32,
    /// Rounds; the figures are medians over them.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Milliseconds per step of `slots` slots decoding `tokens` tokens each, batched.
fn step_ms(model: &Arc<Model>, policy: PoolUse, slots: usize, tokens: usize) -> f64 {
    let mut s = Slots::new(model.clone(), slots, 64 + tokens).expect("slots");
    s.set_pool_use(policy);
    let vocab = model.info().vocab_size as u32;
    let mut next: Vec<u32> = (0..slots)
        .map(|j| {
            let prompt: Vec<u32> = (0..7)
                .map(|i| (31 * j as u32 + 7 * i + 65) % vocab)
                .collect();
            s.prefill(s.id(j).unwrap(), &prompt, 512, &mut ())
                .expect("prefill")
                .argmax()
        })
        .collect();
    let t = Instant::now();
    for _ in 0..tokens {
        let steps: Vec<_> = s.ids().zip(next.iter().copied()).collect();
        let logits = s.decode_batch(&steps, &mut ()).expect("decode");
        next = logits.iter().map(|l| l.argmax()).collect();
    }
    t.elapsed().as_secs_f64() * 1e3 / tokens as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    // As the engine binary does (`hydra_engine_core::memory`).
    hydra_engine_core::memory::keep_freed_memory();
    hydra_engine_core::threads::set_cpu_threads(args.threads.into()).expect("threads");
    let model = Arc::new(match &args.model {
        Some(p) => Model::load_gguf(p, &LoadOptions::default()).expect("load"),
        None => Model::builtin().expect("embedded model"),
    });
    // On a worker of the pool, as the engine's compute loop runs.
    hydra_engine_core::threads::run_in_pool(|| run(&args, &model));
}

fn run(args: &Args, model: &Arc<Model>) {
    let policies = [PoolUse::Adaptive, PoolUse::Always, PoolUse::Never];
    let mut times = vec![(Vec::new(), Vec::new()); policies.len()];
    step_ms(model, PoolUse::Always, 4, 16);
    let tokens = args.tokens as usize;
    for _ in 0..args.rounds {
        for (p, (one, four)) in policies.iter().zip(&mut times) {
            one.push(step_ms(model, *p, 1, tokens));
            four.push(step_ms(model, *p, 4, tokens));
        }
    }
    println!(
        "# {}, {} threads, {} tokens per slot, medians of {} rounds; ms per step",
        model.info().name,
        args.threads,
        args.tokens,
        args.rounds
    );
    println!("| --pool-use | 1 slot | 4 slots | per row | fixed | 4 slots / 1 slot, tok/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (p, (one, four)) in policies.iter().zip(times) {
        let (one, four) = (median(one), median(four));
        let per_row = (four - one) / 3.0;
        println!(
            "| {p} | {one:.3} | {four:.3} | {per_row:.3} | {:.3} | {:.2}x |",
            one - per_row,
            4.0 * one / four
        );
    }
}
