//! Memory soak: runs a model many times and prints the process's resident memory as it goes, so
//! growth (a leak, a cache that never stops filling) shows as a rising column.
//!
//! ```text
//! cargo run --release --example soak -- MODEL [RUNS] [--rebuild]
//! ```
//!
//! Each run is one `Executor::run` on the same seeded inputs; with `--rebuild` each run also
//! loads the model from its bytes, optimizes it and plans a new executor (what the wasm API's
//! one-shot `run` does). RSS is read from /proc/self/status (Linux) every RUNS/10 runs; the
//! figures in docs/benchmarks.md ("Memory soak") come from here.

use std::collections::HashMap;
use std::time::Instant;

use fuselab::io::{load_bytes, LoadOptions};
use fuselab::runtime::inputs::random_inputs;
use fuselab::runtime::reference::Executor;
use fuselab::Limits;

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: soak MODEL [RUNS] [--rebuild]");
        std::process::exit(2);
    };
    let runs: usize = args
        .get(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let rebuild = args.iter().any(|a| a == "--rebuild");
    let limits = Limits::default();
    let bytes = std::fs::read(path)?;
    let opts = LoadOptions::default();
    let mut model = load_bytes(&bytes, &opts)?;
    fuselab::passes::optimize(&mut model, &[])?;
    let inputs = random_inputs(&model, &HashMap::new(), &HashMap::new(), 1, &limits)?;
    let executor = Executor::new(&model, &limits)?;
    let every = (runs / 10).max(1);
    println!(
        "{path}: {runs} runs{}",
        if rebuild { ", rebuilding each" } else { "" }
    );
    println!("{:>8} {:>10} {:>10}", "run", "rss_kib", "ms/run");
    let start_rss = rss_kib().unwrap_or(0);
    println!("{:>8} {:>10} {:>10}", 0, start_rss, "-");
    let mut t = Instant::now();
    for i in 1..=runs {
        if rebuild {
            let mut m = load_bytes(&bytes, &opts)?;
            fuselab::passes::optimize(&mut m, &[])?;
            Executor::new(&m, &limits)?.run(&inputs)?;
        } else {
            executor.run(&inputs)?;
        }
        if i % every == 0 {
            let ms = t.elapsed().as_secs_f64() * 1e3 / every as f64;
            println!("{i:>8} {:>10} {ms:>10.3}", rss_kib().unwrap_or(0));
            t = Instant::now();
        }
    }
    Ok(())
}
