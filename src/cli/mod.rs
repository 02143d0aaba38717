//! The native command line: inspect, optimize, run, bench, profile. Errors exit 2 with one message;
//! a failed parity check exits 1.

mod backend;
mod bench;
mod npy;
mod profile;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::ir::Model;
use crate::limits::Limits;
use crate::passes::target::Target;
use crate::passes::RuleKind;
use crate::pipeline::{self, OptimizeOptions};
use crate::runtime::inputs::random_inputs;
use crate::tensor::Tensor;
use crate::{report, Error, Result};

#[derive(Parser)]
#[command(
    name = "fuselab",
    version,
    about = "ONNX graph optimizer: fuse adjacent operators, check parity, benchmark"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `optimize --rules` help, listing the registered rules by kind.
fn rules_help() -> String {
    let list = |kind| crate::passes::names(kind).join(", ");
    format!(
        "Comma-separated rules to run (default: all but the opt-in ones). Cleanup: {}. \
         Fusions: {}. Opt-in (ai.fuselab ops that onnxruntime cannot run; fuse what the others \
         leave): {}.",
        list(RuleKind::Cleanup),
        list(RuleKind::Fusion),
        list(RuleKind::BackendLowering)
    )
}

#[derive(Subcommand)]
enum Command {
    /// Show opsets, inputs and outputs, node count, op histogram and initializer bytes.
    Inspect {
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Run the passes, check outputs of original vs optimized, write the optimized model.
    Optimize {
        model: PathBuf,
        /// Where to write the optimized model.
        #[arg(short, long)]
        output: PathBuf,
        /// Write the optimization report (JSON) here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Save initializers of at least THRESHOLD bytes (default 1024) in OUTPUT.data beside
        /// the model. Chosen automatically when the model would pass protobuf's 2 GiB.
        #[arg(long, value_name = "THRESHOLD", num_args = 0..=1,
              default_missing_value = "1024")]
        external_data: Option<u64>,
        #[arg(long, value_delimiter = ',', help = rules_help())]
        rules: Vec<String>,
        /// The runtime the saved model is for: ort-cpu (onnxruntime's CPU EP: no ai.fuselab
        /// op), ort-webgpu (onnxruntime-web's WebGPU EP: only fused ops it runs on the GPU, e.g.
        /// MultiHeadAttention where an Attention would carry a mask), fuselab (also the
        /// ai.fuselab lowering only fuselab runs). Default: the default rules, nothing refused.
        #[arg(long, value_enum)]
        target: Option<Target>,
        /// Skip the parity check. Where the reference backend lacks an op, the check compares
        /// what it can compute (partial parity) and fails only when that is nothing.
        #[arg(long)]
        no_parity: bool,
        /// Largest max-abs-diff accepted by the parity check [default: 2e-2 for a model that
        /// computes in float16/bfloat16, else 1e-4].
        #[arg(long)]
        tolerance: Option<f64>,
        /// Specialize the saved model to a fixed size of a symbolic dim, NAME=VALUE
        /// (repeatable): shape chains then fold away. `--dim` only sizes the parity inputs.
        #[arg(long = "fix-dim", value_name = "NAME=VALUE")]
        fix_dims: Vec<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run a model (reference or webgpu backend); write each output as DIR/NAME.npy.
    Run {
        model: PathBuf,
        /// Where to run it.
        #[arg(long, value_enum, default_value_t = backend::Backend::Reference)]
        backend: backend::Backend,
        /// Folder for the outputs.
        #[arg(long, default_value = "out")]
        out: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Time the original and the optimized graph, interleaved, on the same inputs.
    Bench(bench::BenchArgs),
    /// Time every node; sum per op type and per op sequence (paths of 2-4 nodes whose
    /// intermediates nothing else reads) with the bytes of their intermediates; rank the
    /// sequences as fusion candidates, each with the rule that already fuses it or none.
    Profile(profile::ProfileArgs),
    /// List the operators the reference backend runs (domain, op type, opset versions covered,
    /// WebGPU kernel), from the ops registry; `--markdown` prints docs/ops.md.
    Ops {
        #[arg(long)]
        markdown: bool,
    },
}

#[derive(Args, Clone)]
pub(crate) struct Common {
    /// Largest tensor, in bytes, that loading or running may allocate.
    #[arg(long, default_value_t = crate::limits::DEFAULT_MAX_TENSOR_BYTES)]
    max_tensor_bytes: u64,
}

#[derive(Args, Clone)]
pub(crate) struct RunArgs {
    /// Size of a symbolic dim, NAME=VALUE (repeatable); `?=VALUE` sizes every unnamed dim;
    /// `INPUT[AXIS]=VALUE` sizes one axis of one input (before the others). Unset dims are 8,
    /// or the sum the model computes them as (a decode step's total = past + seq); `bench`
    /// prints the input shapes it timed.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dims: Vec<String>,
    /// An input's values, NAME=FILE.npy (repeatable); inputs not given get seeded random values.
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Threads the reference backend's kernels may use: 1 runs everything on this thread; N
    /// splits large matrix products (by columns), attention (by heads) and the FastGelu and
    /// skip-norm rows over a pool of N (the results are the same bit for bit at any count).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[command(flatten)]
    common: Common,
}

impl Common {
    fn limits(&self) -> Limits {
        Limits {
            max_tensor_bytes: self.max_tensor_bytes,
        }
    }
}

impl RunArgs {
    /// The `--input NAME=FILE.npy` flags, read.
    fn given(&self) -> Result<HashMap<String, Tensor>> {
        self.inputs
            .iter()
            .map(|spec| {
                let (name, file) = split_pair(spec, "--input")?;
                Ok((name.to_string(), npy::read(Path::new(file))?))
            })
            .collect()
    }

    fn dims(&self) -> Result<HashMap<String, usize>> {
        self.dims
            .iter()
            .map(|d| {
                let (k, v) = split_pair(d, "--dim")?;
                let n = v.parse::<usize>().map_err(|_| {
                    Error::Other(format!("--dim {d}: '{v}' is not a non-negative integer"))
                })?;
                Ok((k.to_string(), n))
            })
            .collect()
    }
}

fn split_pair<'a>(s: &'a str, flag: &str) -> Result<(&'a str, &'a str)> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| Error::Other(format!("{flag} '{s}': expected NAME=VALUE")))
}

pub(crate) fn load(path: &Path, limits: &Limits) -> Result<Model> {
    crate::io::load_file(path, limits)
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Asks glibc's allocator to keep freed blocks for reuse instead of returning them to the
/// kernel: every run of a graph frees and allocates the same tensor sizes, and with the default
/// thresholds each large one came back as fresh pages that the kernel zeroes on first touch
/// (`clear_page` was 15% of a MobileNetV3 run). The process's peak memory is unchanged; what it
/// freed stays mapped until it exits.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    keep_freed_memory();
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fuselab: error: {e}");
            2
        }
    }
}

fn dispatch(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Inspect {
            model,
            json,
            common,
        } => inspect(&model, json, &common.limits()),
        Command::Optimize {
            model,
            output,
            report,
            external_data,
            rules,
            target,
            no_parity,
            tolerance,
            fix_dims,
            run,
        } => {
            let opts = OptimizeOptions {
                rules,
                target,
                parity: !no_parity,
                tolerance,
                dims: run.dims()?,
                inputs: run.given()?,
                fix_dims: fixed_dims(&fix_dims)?,
                seed: run.seed,
                limits: run.common.limits(),
            };
            crate::threads::with_threads(run.threads, || {
                optimize(&model, &output, report.as_deref(), external_data, &opts)
            })?
        }
        Command::Run {
            model,
            backend,
            out,
            run,
        } => crate::threads::with_threads(run.threads, || run_model(&model, backend, &out, &run))?,
        Command::Bench(args) => bench::bench(&args),
        Command::Profile(args) => profile::profile(&args),
        Command::Ops { markdown } => {
            if markdown {
                print!("{}", crate::ops::registry::markdown_table());
            } else {
                for d in crate::ops::registry() {
                    let domain = crate::ir::model::display_domain(d.domain);
                    println!("{domain:<16} {:<28} from opset {}", d.op_type, d.since);
                }
            }
            Ok(0)
        }
    }
}

#[derive(Serialize)]
struct IoInfo {
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

#[derive(Serialize)]
struct Inspection {
    ir_version: i64,
    producer: String,
    opsets: BTreeMap<String, i64>,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    nodes: usize,
    ops: BTreeMap<String, usize>,
    initializers: usize,
    initializer_bytes: usize,
}

fn inspect(path: &Path, json: bool, limits: &Limits) -> Result<i32> {
    let m = load(path, limits)?;
    let g = &m.graph;
    let io = |ids: &[crate::ir::ValueId]| -> Vec<IoInfo> {
        ids.iter()
            .filter(|&&v| g.initializer(v).is_none())
            .map(|&v| IoInfo {
                name: g.name(v).to_string(),
                ty: g.value(v).ty.to_string(),
            })
            .collect()
    };
    let info = Inspection {
        ir_version: m.proto.ir_version,
        producer: format!("{} {}", m.proto.producer_name, m.proto.producer_version)
            .trim()
            .to_string(),
        opsets: m
            .proto
            .opset_import
            .iter()
            .map(|o| {
                let d = crate::ir::model::display_domain(&o.domain);
                (d.to_string(), o.version)
            })
            .collect(),
        inputs: io(&g.inputs),
        outputs: io(&g.outputs),
        nodes: g.node_count(),
        ops: report::op_histogram(&m),
        initializers: g.initializers().count(),
        initializer_bytes: g
            .initializers()
            .map(|(_, t)| {
                t.raw_data.len()
                    + 4 * (t.float_data.len() + t.int32_data.len())
                    + 8 * (t.int64_data.len() + t.double_data.len() + t.uint64_data.len())
            })
            .sum(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&info).expect("serializable")
        );
        return Ok(0);
    }
    println!(
        "model: {} (ir_version {}, {})",
        path.display(),
        info.ir_version,
        info.producer
    );
    let opsets: Vec<String> = info
        .opsets
        .iter()
        .map(|(d, v)| format!("{d} {v}"))
        .collect();
    println!("opsets: {}", opsets.join(", "));
    for (label, list) in [("input", &info.inputs), ("output", &info.outputs)] {
        for v in list {
            println!("{label}: {} {}", v.name, v.ty);
        }
    }
    println!("nodes: {}", info.nodes);
    for (op, n) in &info.ops {
        println!("  {op:<28} {n}");
    }
    println!(
        "initializers: {} ({} bytes)",
        info.initializers, info.initializer_bytes
    );
    Ok(0)
}

/// `--fix-dim NAME=VALUE` flags as a map.
fn fixed_dims(flags: &[String]) -> Result<HashMap<String, i64>> {
    flags
        .iter()
        .map(|d| {
            let (k, v) = split_pair(d, "--fix-dim")?;
            let n = v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                Error::Other(format!(
                    "--fix-dim {d}: '{v}' is not a non-negative integer"
                ))
            })?;
            Ok((k.to_string(), n))
        })
        .collect()
}

fn optimize(
    path: &Path,
    output: &Path,
    report_path: Option<&Path>,
    external: Option<u64>,
    opts: &OptimizeOptions,
) -> Result<i32> {
    let start = Instant::now();
    let clock = || ms(start);
    let original = load(path, &opts.limits)?;
    let load_ms = clock();
    let (optimized, rep) = pipeline::optimize(&original, opts, &clock)?;
    let t = clock();
    let saved = crate::io::save_file(&optimized, output, external)?;
    let save_ms = clock() - t;
    if let Some(p) = report_path {
        let text = serde_json::to_string_pretty(&rep).expect("serializable");
        std::fs::write(p, text).map_err(|e| Error::io(p.display(), e))?;
    }
    let fused: Vec<String> = rep
        .fusions
        .iter()
        .map(|(k, v)| format!("{k} x{v}"))
        .collect();
    println!(
        "{}: {} -> {} nodes{} in {:.1} ms; wrote {}",
        path.display(),
        rep.nodes_before,
        rep.nodes_after,
        if fused.is_empty() {
            String::new()
        } else {
            format!(" ({})", fused.join(", "))
        },
        rep.optimize_ms,
        output.display()
    );
    if let Some(data) = &saved.data_file {
        println!(
            "  external data: {} tensors, {} bytes in {}{}",
            saved.external_tensors,
            saved.external_bytes,
            data.display(),
            if saved.automatic {
                " (the model would pass protobuf's 2 GiB)"
            } else {
                ""
            }
        );
    }
    println!(
        "  time: load {load_ms:.0} ms, passes {:.0} ms, parity {:.0} ms, save {save_ms:.0} ms; \
         total {:.0} ms",
        rep.optimize_ms,
        rep.parity_ms,
        clock()
    );
    // One line per (rule, reason): a 24-layer model's same rejection is one line, not 24.
    let mut groups: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for r in &rep.rejected {
        let key = (r.rule.as_str(), r.reason.as_str());
        let i = *index.entry(key).or_insert_with(|| {
            groups.push((key.0, key.1, Vec::new()));
            groups.len() - 1
        });
        groups[i].2.push(&r.candidate);
    }
    for (rule, why, at) in groups {
        let more = match at.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        println!("  not fused: {rule} at '{}'{more}: {why}", at[0]);
    }
    match &rep.parity {
        None => println!("parity: skipped (--no-parity)"),
        Some(p) => {
            println!(
                "parity{}: max |diff| = {:e} (tolerance {:e}) {}",
                if p.partial.is_some() {
                    " (partial)"
                } else {
                    ""
                },
                p.max_abs_diff,
                p.tolerance,
                if p.ok { "ok" } else { "FAILED" }
            );
            if let Some(why) = &p.resized {
                println!("  {why}");
            }
            if let Some(left) = &p.partial {
                println!(
                    "  partial: compared {} of {} outputs and {} of {} fused nodes; the rest need \
                     ops the reference backend lacks: {}",
                    p.outputs.len(),
                    p.outputs.len() + left.unchecked_outputs.len(),
                    p.nodes.len(),
                    p.nodes.len() + left.unchecked_nodes.len(),
                    left.missing_ops.join(", ")
                );
            }
            if !p.ok {
                // Which fusions to suspect: fused nodes whose own outputs differ past tolerance.
                for d in p.nodes.iter().take(5) {
                    match d.max_abs_diff {
                        Some(x) if x <= p.tolerance => break,
                        Some(x) => {
                            println!("  fused node {} ({}): max |diff| = {x:e}", d.node, d.op)
                        }
                        None => {
                            println!("  fused node {} ({}): shape or type differs", d.node, d.op)
                        }
                    }
                }
                eprintln!(
                    "fuselab: parity check failed: optimized outputs differ from the original"
                );
                return Ok(1);
            }
        }
    }
    Ok(0)
}

fn run_model(path: &Path, backend: backend::Backend, out: &Path, run: &RunArgs) -> Result<i32> {
    let limits = run.common.limits();
    let model = load(path, &limits)?;
    let inputs = random_inputs(&model, &run.given()?, &run.dims()?, run.seed, &limits)?;
    let gpu = backend.gpu()?;
    let outputs = backend::Runner::new(gpu.as_ref(), &model, &inputs, &limits)?.run(&inputs)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out.display(), e))?;
    let mut stems = std::collections::HashSet::new();
    for (name, t) in &outputs {
        let stem = npy::file_stem(name);
        if !stems.insert(stem.clone()) {
            return Err(Error::Other(format!(
                "two outputs map to the same file {stem}.npy; rename one of them"
            )));
        }
        let file = out.join(format!("{stem}.npy"));
        npy::write(&file, t)?;
        println!(
            "{} {:?} {} -> {}",
            name,
            t.shape(),
            t.dtype(),
            file.display()
        );
    }
    Ok(0)
}
