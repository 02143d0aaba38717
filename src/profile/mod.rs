//! Where a graph's time goes and what fusing would save: every node timed (the reference
//! executor's observer, or the WebGPU session's per-dispatch timing), summed per op type and per
//! connected op sequence, each sequence with the bytes of the intermediate tensors it writes and
//! reads back; then the sequences as fusion candidates, ranked by an estimated saving and marked
//! with the rule that already fuses them. `fuselab profile`, `fuselab bench --profile` and the
//! wasm `Model.profile` call this module; docs/profile.md defines every figure.
//!
//! The definitions, in short (`sequences.rs` has the details):
//! - An *occurrence* of a sequence is a path n1 → … → nk of 2 to 4 nodes along data edges
//!   (each node reads an output of the one before) whose *intermediates*, the values a path node
//!   writes and a later path node reads, are read by no node outside the path and are not graph
//!   outputs: what one fused kernel would keep to itself.
//! - `intermediate_bytes`: the intermediates' sizes (elements × element size, at the profiled
//!   input sizes), summed over occurrences. Unfused, each is written once and read back, so
//!   the memory traffic a fusion removes is twice that.
//! - `rule`: the default rules and the opt-in lowering run on a copy of the profiled graph; an
//!   occurrence is covered by the first rewrite after which all its nodes are inside one fused
//!   node (a fused node that a later rewrite fuses again stands for what it replaced).

mod sequences;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::ir::model::display_domain;
use crate::ir::{Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::pipeline::Backend;
use crate::runtime::parity::Keep;
use crate::runtime::reference::{Executor, StepObserver};
use crate::runtime::webgpu::{Gpu, GpuSession};
use crate::tensor::Tensor;
use crate::Result;

pub use sequences::{Candidate, Sequence};

/// How node times were taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "kebab-case")]
pub enum NodeTiming {
    /// The reference executor's observer reads the caller's clock around each node (the clock
    /// calls are inside the figures).
    NodeClock,
    /// GPU timestamps written before and after each dispatch (the adapter has `timestamp-query`):
    /// each dispatch runs in a compute pass of its own, so the figures leave out the submission.
    TimestampQuery,
    /// No `timestamp-query`: each dispatch is submitted alone and waited for, so every figure
    /// includes one submission and one wait, which a real run pays once for all dispatches.
    PerDispatch,
}

impl NodeTiming {
    /// What to keep in mind when reading figures taken this way.
    pub fn caveat(self) -> &'static str {
        match self {
            NodeTiming::NodeClock => "per node on the CPU, the clock reads included",
            NodeTiming::TimestampQuery => {
                "GPU timestamps around each dispatch, each in a compute pass of its own"
            }
            NodeTiming::PerDispatch => {
                "the adapter has no timestamp-query: each dispatch was submitted alone and waited \
                 for, so each figure includes a submission and a wait that one run of the graph \
                 pays once"
            }
        }
    }
}

/// The profile of one graph.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Profile {
    pub backend: Backend,
    pub timing: NodeTiming,
    /// `NodeTiming::caveat`.
    pub caveat: String,
    /// Timed runs; every figure is the mean per run.
    pub runs: usize,
    /// The memory bandwidth the estimated savings assume, in GB/s: the larger of what the graph's
    /// elementwise nodes reached together (their bytes read and written over their time) and,
    /// on the reference backend, a plain copy (`copy_bandwidth`). A node's estimated saving is at
    /// most its intermediate bytes at this rate. Null when neither was measurable.
    pub bandwidth_gb_s: Option<f64>,
    /// Milliseconds per run in all nodes.
    pub total_ms: f64,
    pub nodes: usize,
    /// The inputs the graph ran on, in the graph's order.
    pub inputs: Vec<InputShape>,
    /// Per op type, most expensive first.
    pub ops: Vec<OpTime>,
    /// Per op sequence, most expensive first.
    pub sequences: Vec<Sequence>,
    /// The sequences split by the rule that covers them, largest estimated saving first.
    pub candidates: Vec<Candidate>,
}

/// A graph input and the shape it ran with.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct InputShape {
    pub name: String,
    pub shape: Vec<usize>,
}

/// The nodes of one op type.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct OpTime {
    /// `op_type`, or `domain:op_type` outside the default ONNX domain.
    pub op: String,
    /// Nodes of this type.
    pub count: usize,
    /// Summed over the nodes, per run.
    pub ms: f64,
    /// Of the time in all nodes.
    pub share: f64,
}

/// What a backend measured: milliseconds per run of each node (indexed by `NodeId`; a node the
/// backend does not run, such as a WebGPU static or aliasing one, has 0).
#[derive(Clone, Debug)]
pub struct NodeTimes {
    pub ms: Vec<f64>,
    pub timing: NodeTiming,
    pub runs: usize,
}

/// `op_type`, or `domain:op_type` outside the default ONNX domain.
pub(crate) fn op_label(model: &Model, id: NodeId) -> String {
    let n = model.graph.node(id);
    match display_domain(&n.domain) {
        "ai.onnx" => n.op_type.clone(),
        d => format!("{d}:{}", n.op_type),
    }
}

/// A tensor's size in bytes as ONNX stores it (sub-byte types packed; a string's UTF-8 bytes).
pub fn tensor_bytes(t: &Tensor) -> u64 {
    if let Tensor::Str(a) = t {
        return a.iter().map(|s| s.len() as u64).sum();
    }
    let bits = t.dtype().bits().unwrap_or(0);
    (t.len() as u64 * bits).div_ceil(8)
}

/// Times every node of `ex`'s graph on `feeds` (one untimed run first, then `runs` timed ones)
/// and records every value's size; `clock` returns milliseconds (the caller's: wasm32 has no
/// `Instant`).
pub fn time_nodes(
    ex: &Executor,
    model: &Model,
    feeds: &HashMap<String, Tensor>,
    runs: usize,
    clock: &dyn Fn() -> f64,
) -> Result<(NodeTimes, ValueBytes)> {
    let mut rec = Recorder {
        clock: None,
        start: 0.0,
        ms: vec![0.0; node_slots(model)],
        bytes: ValueBytes::inputs(model, feeds, ex),
        keep: None,
    };
    std::hint::black_box(ex.run_observed(feeds, &mut rec)?);
    rec.clock = Some(clock);
    for _ in 0..runs {
        std::hint::black_box(ex.run_observed(feeds, &mut rec)?);
    }
    for t in &mut rec.ms {
        *t /= runs.max(1) as f64;
    }
    let times = NodeTimes {
        ms: rec.ms,
        timing: NodeTiming::NodeClock,
        runs,
    };
    Ok((times, rec.bytes))
}

/// One slot per node id of `model` (ids of removed nodes stay unused).
fn node_slots(model: &Model) -> usize {
    model
        .graph
        .node_ids()
        .map(|i| i.0 as usize + 1)
        .max()
        .unwrap_or(0)
}

/// Every value's size in bytes at one run's shapes (indexed by `ValueId`): what the nodes
/// wrote, the inputs fed, the initializers.
#[derive(Clone, Debug, Default)]
pub struct ValueBytes(Vec<Option<u64>>);

impl ValueBytes {
    /// The sizes of `feeds` and `ex`'s constants (the profiler's traffic model reads them);
    /// nodes' outputs are added as they run.
    fn inputs(model: &Model, feeds: &HashMap<String, Tensor>, ex: &Executor) -> ValueBytes {
        let g = &model.graph;
        let mut b = vec![None; g.value_count()];
        for &v in &g.inputs {
            if let Some(t) = feeds.get(g.name(v)) {
                b[v.0 as usize] = Some(tensor_bytes(t));
            }
        }
        for (v, _) in g.initializers() {
            if let Some(t) = ex.constant(v) {
                b[v.0 as usize] = Some(tensor_bytes(t));
            }
        }
        ValueBytes(b)
    }

    pub fn get(&self, v: ValueId) -> Option<u64> {
        self.0.get(v.0 as usize).copied().flatten()
    }

    /// Runs `ex` once on `feeds` and records the sizes of what its nodes write; `keep` copies
    /// the values it asks for (the parity check's per-node comparison).
    pub fn of_run(
        ex: &Executor,
        model: &Model,
        feeds: &HashMap<String, Tensor>,
        keep: Option<&mut Keep>,
    ) -> Result<(ValueBytes, Vec<(String, Tensor)>)> {
        let mut rec = Recorder {
            clock: None,
            start: 0.0,
            ms: Vec::new(),
            bytes: ValueBytes(vec![None; model.graph.value_count()]),
            keep,
        };
        let outputs = ex.run_observed(feeds, &mut rec)?;
        Ok((rec.bytes, outputs))
    }
}

/// The one observer: node times when it has a clock, value sizes always, copies of some values
/// when asked.
struct Recorder<'c> {
    clock: Option<&'c dyn Fn() -> f64>,
    start: f64,
    ms: Vec<f64>,
    bytes: ValueBytes,
    keep: Option<&'c mut Keep>,
}

impl StepObserver for Recorder<'_> {
    fn before(&mut self, _node: NodeId) {
        if let Some(c) = self.clock {
            self.start = c();
        }
    }
    fn after(&mut self, node: NodeId) {
        if let Some(c) = self.clock {
            self.ms[node.0 as usize] += c() - self.start;
        }
    }
    fn produced(&mut self, v: ValueId, t: &Tensor) {
        if let Some(slot) = self.bytes.0.get_mut(v.0 as usize) {
            *slot = Some(tensor_bytes(t));
        }
        if let Some(k) = self.keep.as_deref_mut() {
            k.produced(v, t);
        }
    }
}

/// Time per op type, most expensive first (ties by name).
pub fn op_times(model: &Model, times: &NodeTimes) -> Vec<OpTime> {
    let g = &model.graph;
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut rows: Vec<OpTime> = Vec::new();
    for id in g.node_ids() {
        let op = op_label(model, id);
        let i = *at.entry(op.clone()).or_insert_with(|| {
            rows.push(OpTime {
                op,
                count: 0,
                ms: 0.0,
                share: 0.0,
            });
            rows.len() - 1
        });
        rows[i].count += 1;
        rows[i].ms += times.ms.get(id.0 as usize).copied().unwrap_or(0.0);
    }
    let total: f64 = rows.iter().map(|r| r.ms).sum();
    for r in &mut rows {
        r.share = share(r.ms, total);
    }
    rank(rows, &at, |r| (r.ms, 0))
}

/// `rows`, grouped under the text keys of `at` (key → row), ordered by `key` (larger first),
/// ties in key order. Every table goes through here: one map type (the report's histogram's)
/// and one ordering loop in the wasm build, whatever the row type.
fn rank<T>(rows: Vec<T>, at: &BTreeMap<String, usize>, key: impl Fn(&T) -> (f64, u64)) -> Vec<T> {
    let mut keys = Vec::with_capacity(rows.len());
    for &i in at.values() {
        let (a, b) = key(&rows[i]);
        keys.push((a, b, i));
    }
    let mut slots: Vec<Option<T>> = rows.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for i in order(keys) {
        out.extend(slots[i].take());
    }
    out
}

/// The third fields of `keys` (in key order), larger first by the first two fields, ties in
/// their given order. An insertion sort: the tables are small, and the library's sorts would
/// add kilobytes to the wasm build.
fn order(keys: Vec<(f64, u64, usize)>) -> Vec<usize> {
    let mut out: Vec<(f64, u64, usize)> = Vec::with_capacity(keys.len());
    for k in keys {
        let after = |o: &(f64, u64, usize)| o.0 > k.0 || (o.0 == k.0 && o.1 >= k.1);
        let at = out.partition_point(after);
        out.insert(at, k);
    }
    out.into_iter().map(|k| k.2).collect()
}

fn share(ms: f64, total: f64) -> f64 {
    if total > 0.0 {
        ms / total
    } else {
        0.0
    }
}

/// The profile of `model` from a backend's node times and one run's value sizes.
/// `copy_bw`: a plain copy's bandwidth in bytes per millisecond, where the caller measured one.
pub fn analyze(
    model: &Model,
    backend: Backend,
    times: &NodeTimes,
    bytes: &ValueBytes,
    feeds: &HashMap<String, Tensor>,
    copy_bw: Option<f64>,
) -> Result<Profile> {
    let total_ms: f64 = model
        .graph
        .node_ids()
        .map(|id| times.ms.get(id.0 as usize).copied().unwrap_or(0.0))
        .sum();
    let elementwise = sequences::elementwise_bandwidth(model, times, bytes);
    let bandwidth = match (elementwise, copy_bw) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let (sequences, candidates) = sequences::tables(model, times, bytes, total_ms, bandwidth)?;
    Ok(Profile {
        backend,
        timing: times.timing,
        caveat: times.timing.caveat().to_string(),
        runs: times.runs,
        bandwidth_gb_s: bandwidth.map(|b| b / 1e6),
        total_ms,
        nodes: model.graph.node_count(),
        inputs: (model.graph.inputs.iter())
            .map(|&v| model.graph.name(v))
            .filter_map(|name| feeds.get(name).map(|t| (name, t)))
            .map(|(name, t)| InputShape {
                name: name.to_string(),
                shape: t.shape().to_vec(),
            })
            .collect(),
        ops: op_times(model, times),
        sequences,
        candidates,
    })
}

/// Bytes per millisecond a plain copy of 16 MiB (more than a core's caches hold on most CPUs)
/// moves on this thread, reading and writing, by `clock`: the memory bandwidth a memory-bound
/// kernel of the reference backend can reach. One untimed copy first (the pages get mapped),
/// then copies until 20 ms have passed (at least 3, at most 64). `None` when the clock did not
/// advance.
pub fn copy_bandwidth(clock: &dyn Fn() -> f64) -> Option<f64> {
    const WORDS: usize = 2 << 20;
    let src = vec![1u64; WORDS];
    let mut dst = vec![0u64; WORDS];
    dst.copy_from_slice(&src);
    let t0 = clock();
    let mut copies = 0u32;
    while copies < 3 || (copies < 64 && clock() - t0 < 20.0) {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        copies += 1;
    }
    let ms = clock() - t0;
    (ms > 0.0).then(|| (2 * 8 * WORDS) as f64 * copies as f64 / ms)
}

/// Options of a reference-backend profile.
#[derive(Clone, Debug, Default)]
pub struct ProfileOptions {
    /// Timed runs (after one untimed run).
    pub runs: usize,
    /// Sizes of symbolic input dims (unnamed ones are 8).
    pub dims: HashMap<String, usize>,
    /// Inputs given by name; the others get seeded random values.
    pub inputs: HashMap<String, Tensor>,
    pub seed: u64,
    pub limits: Limits,
}

/// Profiles `model` as it is on the reference backend; `clock` returns milliseconds.
pub fn profile_reference(
    model: &Model,
    opts: &ProfileOptions,
    clock: &dyn Fn() -> f64,
) -> Result<Profile> {
    let feeds = crate::runtime::inputs::random_inputs(
        model,
        &opts.inputs,
        &opts.dims,
        opts.seed,
        &opts.limits,
    )?;
    let ex = Executor::new(model, &opts.limits)?;
    let (times, bytes) = time_nodes(&ex, model, &feeds, opts.runs, clock)?;
    let copy = copy_bandwidth(clock);
    analyze(model, Backend::Reference, &times, &bytes, &feeds, copy)
}

/// Profiles `model` as it is on the WebGPU backend: node times from `GpuSession::time_nodes`,
/// value sizes from one run on the reference backend (the sizes ONNX gives them, whatever the
/// GPU holds them as); `clock` returns milliseconds (used without `timestamp-query`).
pub async fn profile_webgpu(
    gpu: &Gpu,
    model: &Model,
    opts: &ProfileOptions,
    clock: &dyn Fn() -> f64,
) -> Result<Profile> {
    let feeds = crate::runtime::inputs::random_inputs(
        model,
        &opts.inputs,
        &opts.dims,
        opts.seed,
        &opts.limits,
    )?;
    let ex = Executor::new(model, &opts.limits)?;
    let (bytes, _) = ValueBytes::of_run(&ex, model, &feeds, None)?;
    let session = GpuSession::for_inputs(gpu, model, &feeds, &opts.limits).await?;
    let (per_node, stamps) = session.time_nodes(&feeds, opts.runs, clock).await?;
    let mut ms = vec![0.0; node_slots(model)];
    for (n, t) in per_node {
        ms[n.0 as usize] += t;
    }
    let timing = match stamps {
        true => NodeTiming::TimestampQuery,
        false => NodeTiming::PerDispatch,
    };
    let times = NodeTimes {
        ms,
        timing,
        runs: opts.runs,
    };
    analyze(model, Backend::Webgpu, &times, &bytes, &feeds, None)
}
