//! `fuselab bench`: original vs optimized on the same inputs, in one process, under the policy of
//! `crate::bench` (interleaved, the order alternating every pair, so machine noise hits both
//! alike and the ratio means something) with the native clock.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use super::backend::{Backend, Runner};
use super::{load, ms, RunArgs};
use crate::bench::{Bench, Graph, Pair, Policy, Timing};
use crate::profile::{self, OpTime};
use crate::runtime::inputs::random_inputs;
use crate::runtime::parity::compare;
use crate::{passes, pipeline, Result};

#[derive(Args)]
pub(crate) struct BenchArgs {
    model: PathBuf,
    /// Timed runs of each graph.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Untimed runs of each graph first.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Comma-separated rules for the optimized graph (default: every rule but the opt-in ones,
    /// and on webgpu the backend's lowering too; see `optimize --help`).
    #[arg(long, value_delimiter = ',')]
    rules: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Where to run both graphs.
    #[arg(long, value_enum, default_value_t = Backend::Reference)]
    backend: Backend,
    /// Also time every node of the optimized graph (in `--runs` further runs, after the timed
    /// ones) and print the time per op type, most expensive first.
    #[arg(long)]
    profile: bool,
    /// What the timings count: `wall` time, or `cpu`, the time this thread spent on a CPU
    /// (Unix), which other processes on a busy machine do not inflate (reference backend).
    #[arg(long, value_enum, default_value_t = Clock::Wall)]
    clock: Clock,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Clock {
    Wall,
    Cpu,
}

impl Clock {
    /// Milliseconds on this clock since some fixed point.
    fn read(self, t0: Instant) -> Result<f64> {
        match self {
            Clock::Wall => Ok(ms(t0)),
            Clock::Cpu => thread_cpu_ms(),
        }
    }
}

/// This thread's time on a CPU (`CLOCK_THREAD_CPUTIME_ID`, nanosecond resolution; the
/// scheduler's /proc statistics only advance at its ticks).
#[cfg(unix)]
fn thread_cpu_ms() -> Result<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Err(crate::Error::Other(format!(
            "--clock cpu: clock_gettime failed ({})",
            std::io::Error::last_os_error()
        )));
    }
    Ok(ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6)
}

#[cfg(not(unix))]
fn thread_cpu_ms() -> Result<f64> {
    Err(crate::Error::Other(
        "--clock cpu: this platform has no thread CPU clock here (Unix only)".into(),
    ))
}

#[derive(Serialize)]
struct BenchReport {
    backend: &'static str,
    /// The GPU adapter (webgpu).
    #[serde(skip_serializing_if = "Option::is_none")]
    adapter: Option<String>,
    /// Compute dispatches per run of each graph (webgpu).
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatches: Option<Pair<usize>>,
    runs: usize,
    clock: Clock,
    /// Threads the reference backend's kernels could use (`--threads`).
    threads: usize,
    original: Timing,
    optimized: Timing,
    speedup: f64,
    max_abs_diff: f64,
    nodes_before: usize,
    nodes_after: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Vec<OpTime>>,
}

pub(crate) fn bench(args: &BenchArgs) -> Result<i32> {
    if args.run.threads > 1 && args.clock == Clock::Cpu {
        return Err(crate::Error::Other(
            "--clock cpu counts this thread's time only; time --threads N with --clock wall".into(),
        ));
    }
    crate::threads::with_threads(args.run.threads, || bench_on(args))?
}

fn bench_on(args: &BenchArgs) -> Result<i32> {
    let limits = args.run.common.limits();
    let original = load(&args.model, &limits)?;
    let mut optimized = original.clone();
    let names: Vec<&str> = args.rules.iter().map(|s| s.as_str()).collect();
    passes::optimize(&mut optimized, &names)?;
    if names.is_empty() {
        optimized = pipeline::for_backend(&optimized, args.backend)?;
    }
    let inputs = random_inputs(
        &original,
        &args.run.given()?,
        &args.run.dims()?,
        args.run.seed,
        &limits,
    )?;
    if args.profile && args.backend != Backend::Reference {
        return Err(crate::Error::Other(
            "--profile times nodes on the reference backend only".into(),
        ));
    }
    let gpu = args.backend.gpu()?;
    let ex_a = Runner::new(gpu.as_ref(), &original, &inputs, &limits)?;
    let ex_b = Runner::new(gpu.as_ref(), &optimized, &inputs, &limits)?;
    let out_a = ex_a.run(&inputs)?;
    let out_b = ex_b.run(&inputs)?;
    let diff = compare(&out_a, &out_b, f64::INFINITY).max_abs_diff;
    if args.clock == Clock::Cpu && args.backend != Backend::Reference {
        return Err(crate::Error::Other(
            "--clock cpu times the reference backend only (a GPU's work is not this thread's)"
                .into(),
        ));
    }
    let t0 = Instant::now();
    args.clock.read(t0)?;
    let clock = || args.clock.read(t0);
    let run = |g: Graph| -> Result<()> {
        let ex = if g == Graph::Original { &ex_a } else { &ex_b };
        std::hint::black_box(ex.run(&inputs)?);
        Ok(())
    };
    let mut bench = Bench::new(Policy::native(args.warmup));
    bench.calibrate(None, clock, run)?;
    let progress = std::io::stderr().is_terminal() && !args.json;
    let batch = (args.runs / 20).max(1);
    let mut done = 0;
    while done < args.runs {
        let n = batch.min(args.runs - done);
        bench.sample(n as u64, clock, run)?;
        done += n;
        if progress {
            eprint!("\rbench: {done}/{} runs", args.runs);
        }
    }
    if progress {
        eprintln!();
    }
    let summary = bench.summary();
    let prof = match ex_b.executor() {
        Some(ex) if args.profile => {
            let (times, _) = profile::time_nodes(ex, &optimized, &inputs, args.runs, &|| ms(t0))?;
            Some(profile::op_times(&optimized, &times))
        }
        _ => None,
    };
    let rep = BenchReport {
        backend: args.backend.name(),
        adapter: gpu.as_ref().map(|g| g.describe()),
        dispatches: match (ex_a.dispatches(), ex_b.dispatches()) {
            (Some(original), Some(optimized)) => Some(Pair {
                original,
                optimized,
            }),
            _ => None,
        },
        runs: args.runs,
        clock: args.clock,
        threads: args.run.threads,
        speedup: summary.speedup,
        original: summary.original,
        optimized: summary.optimized,
        max_abs_diff: diff,
        nodes_before: original.graph.node_count(),
        nodes_after: optimized.graph.node_count(),
        profile: prof,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rep).expect("serializable")
        );
    } else {
        let on = match (&rep.adapter, &rep.dispatches) {
            (Some(a), Some(d)) => format!(
                "webgpu backend on {a}; {} -> {} dispatches per run",
                d.original, d.optimized
            ),
            _ => format!("{} backend", rep.backend),
        };
        let on = match rep.threads {
            1 => on,
            n => format!("{on}, {n} threads"),
        };
        println!(
            "{}: {on}, {} runs{}\n  original  ({:>4} nodes): median {:.4} ms, min {:.4} ms\n  optimized ({:>4} nodes): median {:.4} ms, min {:.4} ms\n  speedup {:.2}x, max |diff| {:e}",
            args.model.display(),
            rep.runs,
            if rep.clock == Clock::Cpu {
                " (thread CPU time)"
            } else {
                ""
            },
            rep.nodes_before,
            rep.original.median_ms,
            rep.original.min_ms,
            rep.nodes_after,
            rep.optimized.median_ms,
            rep.optimized.min_ms,
            rep.speedup,
            rep.max_abs_diff
        );
        // The shapes timed: a named dim nobody sized runs at bench's default, which is easy
        // to miss (a batch of 8 where one image was meant).
        let mut shapes: Vec<String> = inputs
            .iter()
            .map(|(name, t)| format!("{name} {:?}", t.shape()))
            .collect();
        shapes.sort();
        println!("  inputs: {}", shapes.join(", "));
        if let Some(rows) = &rep.profile {
            let total: f64 = rows.iter().map(|r| r.ms).sum();
            println!(
                "  profile of the optimized graph ({} runs; {:.4} ms per run in nodes, timer included):",
                rep.runs, total
            );
            println!(
                "    {:<40} {:>5} {:>10} {:>6}",
                "op", "nodes", "ms/run", "share"
            );
            for r in rows {
                println!(
                    "    {:<40} {:>5} {:>10.4} {:>5.1}%",
                    r.op,
                    r.count,
                    r.ms,
                    r.share * 100.0
                );
            }
        }
    }
    Ok(0)
}
