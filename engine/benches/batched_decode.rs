//! Batched decode in-process: steps of 1 slot against steps of 4 slots at once
//! (`Slots::decode_batch`), for each `--pool-use` policy, without the HTTP server around
//! them; the model-level form of the "4 slots against 1" figure of
//! `scripts/bench-vs-llamacpp.sh --embedded` (BENCHMARKS.md, #13).
//!
//! ```text
//! cargo bench -p hydra-engine --bench batched_decode -- \
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

use hydra_engine::threads::PoolUse;
use hydra_engine::{LoadOptions, Model, Slots};

struct Args {
    model: Option<String>,
    threads: usize,
    tokens: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        model: None,
        threads: 2,
        tokens: 256,
        rounds: 9,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or(format!("{name} needs a positive number"))
        };
        match arg.as_str() {
            "--model" => a.model = Some(it.next().ok_or("--model needs a path")?),
            "--threads" => a.threads = num("--threads")?,
            "--tokens" => a.tokens = num("--tokens")?,
            "--rounds" => a.rounds = num("--rounds")?,
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
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
            s.prefill(j, &prompt, 512, &mut ())
                .expect("prefill")
                .argmax()
        })
        .collect();
    let t = Instant::now();
    for _ in 0..tokens {
        let steps: Vec<(usize, u32)> = next.iter().copied().enumerate().collect();
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
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    hydra_engine::threads::set_cpu_threads(args.threads).expect("threads");
    let model = Arc::new(match &args.model {
        Some(p) => Model::load_gguf(p, &LoadOptions::default()).expect("load"),
        None => Model::builtin().expect("embedded model"),
    });
    // On a worker of the pool, as the engine's compute loop runs.
    hydra_engine::threads::run_in_pool(|| run(&args, &model));
}

fn run(args: &Args, model: &Arc<Model>) {
    let policies = [PoolUse::Adaptive, PoolUse::Always, PoolUse::Never];
    let mut times = vec![(Vec::new(), Vec::new()); policies.len()];
    step_ms(model, PoolUse::Always, 4, 16);
    for _ in 0..args.rounds {
        for (p, (one, four)) in policies.iter().zip(&mut times) {
            one.push(step_ms(model, *p, 1, args.tokens));
            four.push(step_ms(model, *p, 4, args.tokens));
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
