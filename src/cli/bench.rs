//! `fuselab bench`: original vs optimized on the same inputs, in one process, interleaved (the
//! order alternates every run), so machine noise hits both alike and the ratio means something.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use super::{load, ms, RunArgs};
use crate::runtime::inputs::random_inputs;
use crate::runtime::parity::compare;
use crate::runtime::reference::Executor;
use crate::{passes, Result};

#[derive(Args)]
pub(crate) struct BenchArgs {
    model: PathBuf,
    /// Timed runs of each graph.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Untimed runs of each graph first.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Comma-separated rules for the optimized graph (default: all).
    #[arg(long, value_delimiter = ',')]
    rules: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Serialize)]
struct Timing {
    median_ms: f64,
    min_ms: f64,
}

#[derive(Serialize)]
struct BenchReport {
    backend: &'static str,
    runs: usize,
    original: Timing,
    optimized: Timing,
    speedup: f64,
    max_abs_diff: f64,
    nodes_before: usize,
    nodes_after: usize,
}

fn timing(mut v: Vec<f64>) -> Timing {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Timing {
        median_ms: median,
        min_ms: v.first().copied().unwrap_or(f64::NAN),
    }
}

pub(crate) fn bench(args: &BenchArgs) -> Result<i32> {
    let limits = args.run.common.limits();
    let original = load(&args.model, &limits)?;
    let mut optimized = original.clone();
    let names: Vec<&str> = args.rules.iter().map(|s| s.as_str()).collect();
    passes::optimize(&mut optimized, &names)?;
    let inputs = random_inputs(
        &original,
        &HashMap::new(),
        &args.run.dims()?,
        args.run.seed,
        &limits,
    )?;
    let ex_a = Executor::new(&original, &limits)?;
    let ex_b = Executor::new(&optimized, &limits)?;
    let out_a = ex_a.run(&inputs)?;
    let out_b = ex_b.run(&inputs)?;
    let diff = compare(&out_a, &out_b, f64::INFINITY).max_abs_diff;
    for _ in 0..args.warmup {
        ex_a.run(&inputs)?;
        ex_b.run(&inputs)?;
    }
    let progress = std::io::stderr().is_terminal() && !args.json;
    let (mut ta, mut tb) = (Vec::with_capacity(args.runs), Vec::with_capacity(args.runs));
    for i in 0..args.runs {
        // Alternate which graph goes first so neither always runs on a warmer cache.
        for first in [i % 2 == 0, i % 2 != 0] {
            let t = Instant::now();
            if first {
                std::hint::black_box(ex_a.run(&inputs)?);
                ta.push(ms(t));
            } else {
                std::hint::black_box(ex_b.run(&inputs)?);
                tb.push(ms(t));
            }
        }
        if progress && (i + 1) % (args.runs / 20).max(1) == 0 {
            eprint!("\rbench: {}/{} runs", i + 1, args.runs);
        }
    }
    if progress {
        eprintln!();
    }
    let (a, b) = (timing(ta), timing(tb));
    let rep = BenchReport {
        backend: "reference",
        runs: args.runs,
        speedup: a.median_ms / b.median_ms,
        original: a,
        optimized: b,
        max_abs_diff: diff,
        nodes_before: original.graph.node_count(),
        nodes_after: optimized.graph.node_count(),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rep).expect("serializable")
        );
    } else {
        println!(
            "{}: reference backend, {} runs\n  original  ({:>4} nodes): median {:.4} ms, min {:.4} ms\n  optimized ({:>4} nodes): median {:.4} ms, min {:.4} ms\n  speedup {:.2}x, max |diff| {:e}",
            args.model.display(),
            rep.runs,
            rep.nodes_before,
            rep.original.median_ms,
            rep.original.min_ms,
            rep.nodes_after,
            rep.optimized.median_ms,
            rep.optimized.min_ms,
            rep.speedup,
            rep.max_abs_diff
        );
    }
    Ok(0)
}
