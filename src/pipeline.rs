//! The jobs shared by the CLI and the wasm facade: optimize (run the rules, then compare original
//! and optimized outputs on seeded random inputs, and build the report), and the graph a backend
//! runs for an optimized model (`for_backend`).

use std::collections::HashMap;

use crate::ir::{Model, ValueId};
use crate::limits::Limits;
use crate::passes::target::{for_target, Target};
use crate::passes::{rules, Engine, RewriteEvent, Rule, ALL_RULES};
use crate::profile::ValueBytes;
use crate::report::{self, OptimizeReport};
use crate::runtime::inputs::{random_inputs, DEFAULT_DIM};
use crate::runtime::parity::{compare, model_tolerance, node_diffs, Keep, ParityReport, Partial};
use crate::runtime::partial::{restrict, Runnable};
use crate::runtime::reference::Executor;
use crate::tensor::Tensor;
use crate::view::Provenance;
use crate::{Error, Result};

/// Where a graph runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// ndarray kernels on the CPU (the parity reference)
    #[default]
    Reference,
    /// WGSL kernels through wgpu (natively Vulkan, Mesa's lavapipe without a GPU; in a browser
    /// its WebGPU)
    Webgpu,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Reference => "reference",
            Backend::Webgpu => "webgpu",
        }
    }
}

/// The graph `backend` runs in place of `optimized`, a model the default rules optimized. The
/// WebGPU backend also gets its lowering (`passes::BACKEND_LOWERING_RULES`: elementwise chains
/// as one generated kernel, ops that onnxruntime cannot run, so in a saved model only for
/// `--target fuselab`); the
/// reference backend runs the model as it is. The CLI's `bench` and the wasm `GpuBench` (the
/// page's WebGPU benchmark) both take the optimized graph from here, so they time the same one.
pub fn for_backend(optimized: &Model, backend: Backend) -> Result<Model> {
    let mut m = optimized.clone();
    if backend == Backend::Webgpu {
        // The `fuselab` target's rules (the defaults and the lowering), so that the lowering's
        // leftovers get the same cleanup as in one run of all of them (a model at the default
        // rules' fixed point sweeps them once, unchanged).
        Engine::new(rules(&Target::Fuselab.default_rules())?).run(&mut m)?;
    }
    Ok(m)
}

#[derive(Clone, Debug)]
pub struct OptimizeOptions {
    /// Rule names; empty means the target's default rules (`Target::default_rules`). Opt-in
    /// rules (`passes::BACKEND_LOWERING_RULES`) run only when named or for `Target::Fuselab`.
    pub rules: Vec<String>,
    /// The runtime the saved model is for: its default rules, and the fused ops it refuses.
    /// `None`: the default rules (`passes::ALL_RULES`), nothing refused.
    pub target: Option<Target>,
    /// Compare outputs of original vs optimized (needs every op on the reference backend).
    pub parity: bool,
    /// Largest max-abs-diff accepted; `None`: `parity::model_tolerance` (2e-2 for a model that
    /// computes in float16/bfloat16 anywhere, else 1e-4).
    pub tolerance: Option<f64>,
    /// Sizes of symbolic input dims for the parity inputs. Never changes the saved model.
    pub dims: HashMap<String, usize>,
    /// Parity inputs given by name (the CLI's `--input NAME=FILE.npy`): a model whose control
    /// flow or shapes depend on an input's value (a sample rate, a length) needs real ones.
    /// Inputs not given get seeded random values.
    pub inputs: HashMap<String, crate::tensor::Tensor>,
    /// Symbolic dims the optimized model is specialized to (`--fix-dim`); the parity inputs use
    /// these sizes too.
    pub fix_dims: HashMap<String, i64>,
    pub seed: u64,
    pub limits: Limits,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        OptimizeOptions {
            rules: Vec::new(),
            target: None,
            parity: true,
            tolerance: None,
            dims: HashMap::new(),
            inputs: HashMap::new(),
            fix_dims: HashMap::new(),
            seed: 0,
            limits: Limits::default(),
        }
    }
}

/// Runs the named rules on a copy of `original`; `clock` returns milliseconds (the caller's
/// timer: `Instant` does not exist on wasm32-unknown-unknown).
pub fn optimize(
    original: &Model,
    opts: &OptimizeOptions,
    clock: &dyn Fn() -> f64,
) -> Result<(Model, OptimizeReport)> {
    let names: Vec<&str> = if opts.rules.is_empty() {
        opts.target
            .map_or(ALL_RULES.to_vec(), Target::default_rules)
    } else {
        opts.rules.iter().map(|s| s.as_str()).collect()
    };
    let rules = rules(&names)?;
    let rules = match opts.target {
        Some(t) => for_target(rules, t),
        None => rules,
    };
    optimize_with(original, rules, opts, clock)
}

/// As `optimize`, with rule objects (tests use this to run a deliberately wrong rule).
pub fn optimize_with(
    original: &Model,
    rules: Vec<Box<dyn Rule>>,
    opts: &OptimizeOptions,
    clock: &dyn Fn() -> f64,
) -> Result<(Model, OptimizeReport)> {
    if let Some(t) = opts.tolerance.filter(|t| t.is_nan() || *t < 0.0) {
        return Err(Error::Other(format!(
            "tolerance must be a non-negative number, got {t}"
        )));
    }
    let mut dims = opts.dims.clone();
    for (name, &v) in &opts.fix_dims {
        match dims.get(name) {
            Some(&d) if d as i64 != v => {
                return Err(Error::Other(format!(
                    "--dim {name}={d} contradicts --fix-dim {name}={v}"
                )))
            }
            _ => {
                dims.insert(name.clone(), v as usize);
            }
        }
    }
    let mut optimized = original.clone();
    let t0 = clock();
    crate::passes::specialize::fix_dims(&mut optimized, &opts.fix_dims)?;
    let trace = Engine::new(rules).run(&mut optimized)?;
    let optimize_ms = clock() - t0;
    let t1 = clock();
    let parity = if opts.parity {
        Some(parity_sized(
            original,
            &optimized,
            &trace.rewrites,
            opts,
            &mut dims,
        )?)
    } else {
        None
    };
    let parity_ms = if opts.parity { clock() - t1 } else { 0.0 };
    let (parity, sizes) = parity.unzip();
    let mut rep = report::build(original, &optimized, trace, parity);
    if let Some(sizes) = sizes {
        intermediate_bytes(&mut rep.rewrites, &sizes);
    }
    rep.optimize_ms = optimize_ms;
    rep.parity_ms = parity_ms;
    rep.target = opts.target;
    for &i in &original.graph.inputs {
        for d in original.graph.value(i).ty.shape.iter().flatten() {
            if let crate::ir::Dim::Sym(s) = d {
                let n = dims.get(s).copied().unwrap_or(DEFAULT_DIM);
                rep.dims.insert(s.clone(), n);
            }
        }
    }
    Ok((optimized, rep))
}

/// `check_parity`, and where the original fails at the default size of a symbolic dim the caller
/// left open, again: with an open dim that no output names at a sum the outputs declare
/// (`declared_sums`: a dynamo decode step's mask `total` at `past + seq`), then with one open dim
/// at 1, each in the order the inputs name them (an export traced at one new token, whose
/// grouped-query Reshape holds only there, runs at seq = 1). The
/// first run that works is the check, with `resized` saying what happened and `dims` updated;
/// when none does, the first error.
fn parity_sized(
    original: &Model,
    optimized: &Model,
    rewrites: &[RewriteEvent],
    opts: &OptimizeOptions,
    dims: &mut HashMap<String, usize>,
) -> Result<(ParityReport, ValueBytes)> {
    let (first, told) = match check_parity(original, optimized, rewrites, opts, dims) {
        Err(ParityError::OriginalRun { what, told }) => (what, told),
        Err(ParityError::Other(e)) => return Err(e),
        Ok(r) => return Ok(r),
    };
    let g = &original.graph;
    let mut open: Vec<String> = Vec::new();
    for &v in &g.inputs {
        for d in g.value(v).ty.shape.iter().flatten() {
            if let crate::ir::Dim::Sym(s) = d {
                if !dims.contains_key(s) && !open.contains(s) {
                    open.push(s.clone());
                }
            }
        }
    }
    // First the sums the outputs declare (their sizes at these dims), then each open dim at 1.
    let sums = declared_sums(g, &open, dims);
    for (s, size, expr) in sums {
        let mut at = dims.clone();
        at.insert(s.clone(), size);
        if let Ok((mut p, sizes)) = check_parity(original, optimized, rewrites, opts, &at) {
            p.resized = Some(format!(
                "the original does not run with {s}={DEFAULT_DIM} ({first}); checked with \
                 {s}={size} ({expr}, as the outputs declare)"
            ));
            *dims = at;
            return Ok((p, sizes));
        }
    }
    for s in open {
        let mut at = dims.clone();
        at.insert(s.clone(), 1);
        if let Ok((mut p, sizes)) = check_parity(original, optimized, rewrites, opts, &at) {
            p.resized = Some(format!(
                "the original does not run with {s}={DEFAULT_DIM} ({first}); checked with {s}=1"
            ));
            *dims = at;
            return Ok((p, sizes));
        }
    }
    Err(told)
}

/// For each open input dim that no output names, the sums of input dims the outputs declare
/// (`past + seq`: torch's dynamo exporter states a decode step's present outputs so, while the
/// mask `[batch, total]` keeps a dim of its own that nothing ties to them), each with its size at
/// `dims` (open dims at the default): `(dim, size, sum)`.
fn declared_sums(
    g: &crate::ir::Graph,
    open: &[String],
    dims: &HashMap<String, usize>,
) -> Vec<(String, usize, String)> {
    use crate::ir::Dim;
    let syms = |v: crate::ir::ValueId| {
        g.value(v)
            .ty
            .shape
            .iter()
            .flatten()
            .filter_map(|d| match d {
                Dim::Sym(s) => Some(s.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let input_syms: Vec<String> = g.inputs.iter().flat_map(|&v| syms(v)).collect();
    let output_syms: Vec<String> = g.outputs.iter().flat_map(|&v| syms(v)).collect();
    let size_of = |term: &str| -> Option<usize> {
        match term.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) if input_syms.iter().any(|s| s == term) => {
                Some(dims.get(term).copied().unwrap_or(DEFAULT_DIM))
            }
            Err(_) => None,
        }
    };
    let mut sums: Vec<(String, usize)> = Vec::new();
    for e in &output_syms {
        let terms: Vec<&str> = e.split('+').map(str::trim).collect();
        if terms.len() < 2 || sums.iter().any(|(x, _)| x == e) {
            continue;
        }
        let size = terms
            .iter()
            .map(|t| size_of(t))
            .try_fold(0usize, |acc, t| t.and_then(|t| acc.checked_add(t)));
        if let Some(size) = size {
            sums.push((e.clone(), size));
        }
    }
    let mut out = Vec::new();
    for s in open.iter().filter(|s| !output_syms.contains(s)) {
        for (e, size) in &sums {
            out.push((s.clone(), *size, e.clone()));
        }
    }
    out
}

/// Why `check_parity` failed: the original model's run (the error, and as told to the caller,
/// with the sizes it ran at), or anything else.
enum ParityError {
    OriginalRun { what: String, told: Error },
    Other(Error),
}

impl From<Error> for ParityError {
    fn from(e: Error) -> ParityError {
        ParityError::Other(e)
    }
}

/// Runs both models on the same seeded inputs and compares their outputs and fused nodes. Where
/// the reference backend lacks an op, only what it can compute on both sides is compared
/// (`ParityReport::partial`); with nothing left to compare, the planning error of the side that
/// lacks it.
fn check_parity(
    original: &Model,
    optimized: &Model,
    rewrites: &[RewriteEvent],
    opts: &OptimizeOptions,
    dims: &HashMap<String, usize>,
) -> std::result::Result<(ParityReport, ValueBytes), ParityError> {
    let lim = &opts.limits;
    let inputs = random_inputs(original, &opts.inputs, dims, opts.seed, lim)?;
    let (mut fused, in_a, in_b) = fused_outputs(original, optimized, rewrites);
    let lacks_op = |e: &Error| matches!(e, Error::UnsupportedOp { .. });
    // The whole models are planned first; the partial check is worked out only when one lacks
    // an op.
    let (restricted_a, restricted_b);
    let (ex_a, ex_b, model_a, partial) =
        match (Executor::new(original, lim), Executor::new(optimized, lim)) {
            (Ok(a), Ok(b)) => (a, b, original, None),
            (Err(e), _) if !lacks_op(&e) => return Err(no_parity(e).into()),
            (_, Err(e)) if !lacks_op(&e) => return Err(optimized_failed(e).into()),
            (a, b) => {
                let (ra, rb) = (Runnable::of(original, lim)?, Runnable::of(optimized, lim)?);
                let (left, outs_a, outs_b) =
                    partial_targets(original, optimized, (&ra, &rb), &mut fused, (&in_a, &in_b));
                if outs_a.is_empty() && fused.is_empty() {
                    return Err(match (a, b) {
                        (Err(e), _) => no_parity(e),
                        (_, Err(e)) => optimized_failed(e),
                        _ => Error::Other("parity check: nothing to compare".into()),
                    }
                    .into());
                }
                let with_fused = |outs: &[ValueId], kept: &[ValueId]| {
                    let mut all = outs.to_vec();
                    for &i in fused.iter().flat_map(|(_, _, slots)| slots) {
                        if !all.contains(&kept[i]) {
                            all.push(kept[i]);
                        }
                    }
                    all
                };
                restricted_a = restrict(original, &with_fused(&outs_a, &in_a));
                restricted_b = restrict(optimized, &with_fused(&outs_b, &in_b));
                let ex_a = Executor::new(&restricted_a, lim).map_err(no_parity)?;
                let ex_b = Executor::new(&restricted_b, lim).map_err(optimized_failed)?;
                (ex_a, ex_b, &restricted_a, Some((left, outs_a.len())))
            }
        };
    let (mut keep_a, mut keep_b) = (Keep::new(&in_a), Keep::new(&in_b));
    let (sizes, mut a) =
        ValueBytes::of_run(&ex_a, model_a, &inputs, Some(&mut keep_a)).map_err(|e| {
            ParityError::OriginalRun {
                what: e.to_string(),
                told: no_parity_at(e, original, &inputs),
            }
        })?;
    let mut b = ex_b
        .run_observed(&inputs, &mut keep_b)
        .map_err(optimized_failed)?;
    if let Some((_, compared)) = &partial {
        // The restricted graphs' extra outputs are the fused nodes' values, kept above.
        a.truncate(*compared);
        b.truncate(*compared);
    }
    let tolerance = opts.tolerance.unwrap_or_else(|| model_tolerance(original));
    let mut p = compare(&a, &b, tolerance);
    p.nodes = node_diffs(&fused, &keep_a.got, &keep_b.got);
    p.partial = partial.map(|(left, _)| left);
    Ok((p, sizes))
}

/// What a partial check compares: the graph outputs both sides compute (by position), and, kept
/// in `fused`, the fused nodes whose outputs both compute; the rest goes into the `Partial`.
fn partial_targets(
    original: &Model,
    optimized: &Model,
    (ra, rb): (&Runnable, &Runnable),
    fused: &mut Vec<(String, String, Vec<usize>)>,
    (in_a, in_b): (&[ValueId], &[ValueId]),
) -> (Partial, Vec<ValueId>, Vec<ValueId>) {
    let (ga, gb) = (&original.graph, &optimized.graph);
    let mut left = Partial {
        missing_ops: ra.missing.clone(),
        unchecked_outputs: Vec::new(),
        unchecked_nodes: Vec::new(),
    };
    for m in &rb.missing {
        if !left.missing_ops.contains(m) {
            left.missing_ops.push(m.clone());
        }
    }
    let (mut outs_a, mut outs_b) = (Vec::new(), Vec::new());
    for (i, &a) in ga.outputs.iter().enumerate() {
        match gb.outputs.get(i) {
            Some(&b) if ra.computes(a) && rb.computes(b) => {
                outs_a.push(a);
                outs_b.push(b);
            }
            _ => left.unchecked_outputs.push(ga.name(a).to_string()),
        }
    }
    fused.retain(|(node, _, slots)| {
        let ok = (slots.iter()).all(|&i| ra.computes(in_a[i]) && rb.computes(in_b[i]));
        if !ok {
            left.unchecked_nodes.push(node.clone());
        }
        ok
    });
    (left, outs_a, outs_b)
}

fn no_parity(e: Error) -> Error {
    Error::Other(format!(
        "parity check: original model: {e} (use --no-parity to skip the check)"
    ))
}

/// The original model failed on the parity inputs: which sizes they had, since an export traced
/// at one size (a decode step grouped for one new token) may run at that size only.
fn no_parity_at(e: Error, original: &Model, inputs: &HashMap<String, Tensor>) -> Error {
    let g = &original.graph;
    let mut sizes: Vec<String> = Vec::new();
    for &v in &g.inputs {
        let (Some(dims), Some(t)) = (g.value(v).ty.shape.as_deref(), inputs.get(g.name(v))) else {
            continue;
        };
        for (d, n) in dims.iter().zip(t.shape()) {
            if let crate::ir::types::Dim::Sym(s) = d {
                let size = format!("{s}={n}");
                if !sizes.contains(&size) {
                    sizes.push(size);
                }
            }
        }
    }
    if sizes.is_empty() {
        return no_parity(e);
    }
    Error::Other(format!(
        "parity check: original model at {}: {e} (size the inputs with --dim NAME=N, or use \
         --no-parity to skip the check)",
        sizes.join(", ")
    ))
}

fn optimized_failed(e: Error) -> Error {
    Error::Other(format!("parity check: optimized model: {e}"))
}

/// Gives each fusion of `rewrites` the bytes of the intermediates it eliminated, at the sizes of
/// the original graph's parity run (values the original never computed, such as an earlier
/// fusion's output, count nothing).
fn intermediate_bytes(rewrites: &mut [RewriteEvent], sizes: &ValueBytes) {
    for e in rewrites.iter_mut().filter(|e| e.kind.fuses()) {
        e.intermediate_bytes = Some(e.eliminated.iter().filter_map(|&v| sizes.get(v)).sum());
    }
}

/// The fused nodes of `optimized` (from the rewrites' provenance) whose outputs `original` also
/// computes, by value name: (name, op, their outputs' slots), the original's value ids and the
/// optimized graph's, slot by slot.
type FusedOutputs = (
    Vec<(String, String, Vec<usize>)>,
    Vec<ValueId>,
    Vec<ValueId>,
);

fn fused_outputs(original: &Model, optimized: &Model, rewrites: &[RewriteEvent]) -> FusedOutputs {
    let prov = Provenance::from_rewrites(rewrites);
    let (a, b) = (&original.graph, &optimized.graph);
    let (mut nodes, mut in_a, mut in_b) = (Vec::new(), Vec::new(), Vec::new());
    for id in b.node_ids() {
        let n = b.node(id);
        if !prov.fused_from.contains_key(&n.name) {
            continue;
        }
        let mut slots = Vec::new();
        for o in n.outputs.iter().flatten() {
            if let Some(v) = a.find(b.name(*o)) {
                slots.push(in_a.len());
                in_a.push(v);
                in_b.push(*o);
            }
        }
        if !slots.is_empty() {
            nodes.push((n.name.clone(), n.op_type.clone(), slots));
        }
    }
    (nodes, in_a, in_b)
}
