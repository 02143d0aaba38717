//! `fuselab profile`: where a graph's time goes per op type and per op sequence, and the
//! sequences as fusion candidates (`crate::profile` computes all of it; this file parses the
//! flags and prints).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::backend::Backend;
use super::{load, ms, RunArgs};
use crate::profile::{self, Profile, ProfileOptions};
use crate::{passes, pipeline, Error, Result};

#[derive(Args)]
pub(crate) struct ProfileArgs {
    model: PathBuf,
    /// Timed runs (after one untimed run); every figure is the mean per run.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Where to run: the reference backend (the executor times every node) or webgpu (GPU
    /// timestamps around each dispatch where the adapter has timestamp-query, otherwise each
    /// dispatch submitted alone and waited for, which the output states).
    #[arg(long, value_enum, default_value_t = Backend::Reference)]
    backend: Backend,
    /// Profile the optimized graph (the default rules; on webgpu also the backend's lowering,
    /// as `bench` runs it) instead of the model as it is: the candidates are then what the rules
    /// leave.
    #[arg(long)]
    optimized: bool,
    /// Print JSON (every row of every table) instead of text.
    #[arg(long)]
    json: bool,
    /// Rows per table in the text output.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    run: RunArgs,
}

pub(crate) fn profile(args: &ProfileArgs) -> Result<i32> {
    if args.runs == 0 {
        return Err(Error::Other("--runs must be at least 1".into()));
    }
    crate::threads::with_threads(args.run.threads, || profile_on(args))?
}

fn profile_on(args: &ProfileArgs) -> Result<i32> {
    let limits = args.run.common.limits();
    let original = load(&args.model, &limits)?;
    let model = if args.optimized {
        let mut m = original;
        passes::optimize(&mut m, &[])?;
        pipeline::for_backend(&m, args.backend)?
    } else {
        original
    };
    let opts = ProfileOptions {
        runs: args.runs,
        dims: args.run.dims()?,
        inputs: args.run.given()?,
        seed: args.run.seed,
        limits,
    };
    let t0 = Instant::now();
    let clock = || ms(t0);
    let p = match args.backend.gpu()? {
        None => profile::profile_reference(&model, &opts, &clock)?,
        Some(gpu) => pollster::block_on(profile::profile_webgpu(&gpu, &model, &opts, &clock))?,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&p).expect("serializable")
        );
    } else {
        print_text(args, &p);
    }
    Ok(0)
}

fn print_text(args: &ProfileArgs, p: &Profile) {
    println!(
        "{}: {} graph ({} nodes) on the {} backend, {} runs: {:.4} ms per run in nodes",
        args.model.display(),
        if args.optimized {
            "optimized"
        } else {
            "original"
        },
        p.nodes,
        p.backend.name(),
        p.runs,
        p.total_ms
    );
    println!("  timing: {}", p.caveat);
    if let Some(bw) = p.bandwidth_gb_s {
        println!("  bandwidth {bw:.2} GB/s (caps each node's estimated saving)");
    }
    let inputs: Vec<String> = (p.inputs.iter())
        .map(|i| format!("{} {:?}", i.name, i.shape))
        .collect();
    println!("  inputs: {}", inputs.join(", "));
    let shown = |n: usize| format!("{} of {n}", args.top.min(n));
    println!("  op types ({}, most expensive first):", shown(p.ops.len()));
    println!(
        "    {:<44} {:>5} {:>10} {:>6}",
        "op", "count", "ms/run", "share"
    );
    for r in p.ops.iter().take(args.top) {
        let share = 100.0 * r.share;
        println!(
            "    {:<44} {:>5} {:>10.4} {share:>5.1}%",
            r.op, r.count, r.ms
        );
    }
    println!(
        "  sequences ({}, most expensive first):",
        shown(p.sequences.len())
    );
    println!(
        "    {:<44} {:>5} {:>10} {:>6} {:>12}",
        "ops", "count", "ms/run", "share", "intermediate"
    );
    for s in p.sequences.iter().take(args.top) {
        println!(
            "    {:<44} {:>5} {:>10.4} {:>5.1}% {:>12}",
            s.ops.join(" -> "),
            s.count,
            s.ms,
            100.0 * s.share,
            human_bytes(s.intermediate_bytes)
        );
    }
    println!(
        "  candidates ({}, largest estimated saving first):",
        shown(p.candidates.len())
    );
    println!(
        "    {:<44} {:>5} {:>10} {:>12}  rule",
        "ops", "count", "saving ms", "intermediate"
    );
    for c in p.candidates.iter().take(args.top) {
        let rule = match (&c.rule, &c.opt_in_rule) {
            (Some(r), _) => r.clone(),
            (None, Some(o)) => format!("none ({o}, opt-in, would take it)"),
            (None, None) => "none".to_string(),
        };
        println!(
            "    {:<44} {:>5} {:>10.4} {:>12}  {rule}",
            c.ops.join(" -> "),
            c.count,
            c.estimated_saving_ms,
            human_bytes(c.intermediate_bytes)
        );
    }
}

/// 262144 → "256.0 KiB".
fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{x:.1} {}", units[u]),
    }
}
