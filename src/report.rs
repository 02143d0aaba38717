//! The optimization report (REPORT.json, the page's panel): counts before and after, the rewrite
//! trace, rejected candidates, parity. Built from the trace only.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::ir::Model;
use crate::passes::{Rejection, RewriteEvent, StopReason, Trace};
use crate::runtime::parity::ParityReport;

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct OptimizeReport {
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub ops_before: BTreeMap<String, usize>,
    pub ops_after: BTreeMap<String, usize>,
    /// Fused op type → number of fused nodes in the optimized graph.
    pub fusions: BTreeMap<String, usize>,
    pub rewrites: Vec<RewriteEvent>,
    pub rejected: Vec<Rejection>,
    pub iterations: usize,
    pub stop: StopReason,
    /// None when the check was skipped (`--no-parity`).
    pub parity: Option<ParityReport>,
    /// Dims used for the parity inputs.
    pub dims: BTreeMap<String, usize>,
    /// Time in the passes.
    pub optimize_ms: f64,
    /// Time in the parity check (both graphs' executors built and run); 0 when skipped.
    pub parity_ms: f64,
    /// The runtime the optimized model is for (`optimize --target`); null: none named (the
    /// default rules).
    pub target: Option<crate::passes::target::Target>,
}

/// Op type → node count.
pub fn op_histogram(model: &Model) -> BTreeMap<String, usize> {
    let g = &model.graph;
    let mut h = BTreeMap::new();
    for id in g.node_ids() {
        *h.entry(g.node(id).op_type.clone()).or_insert(0) += 1;
    }
    h
}

/// Fused nodes still in the graph, by op type. A fusion's fused node is the last node its patch
/// adds; nodes added before it (the Casts that feed Attention its int32 mask) are not counted.
pub fn fusion_counts(after: &Model, trace: &Trace) -> BTreeMap<String, usize> {
    // A fusion's fused node is the last it adds. A later fusion that removes a fused node and
    // adds another of the same op (`multi_head_attention` moves q's RotaryEmbedding onto the 3-D
    // projection) carries it on: the moved node still counts.
    let mut added: HashSet<&str> = HashSet::new();
    for e in trace.rewrites.iter().filter(|e| e.kind.fuses()) {
        let carried: Vec<&str> = e
            .removed
            .iter()
            .filter(|r| added.contains(r.name.as_str()))
            .map(|r| r.op_type.as_str())
            .collect();
        for n in &e.added[..e.added.len().saturating_sub(1)] {
            if carried.contains(&n.op_type.as_str()) {
                added.insert(n.name.as_str());
            }
        }
        if let Some(n) = e.added.last() {
            added.insert(n.name.as_str());
        }
    }
    let g = &after.graph;
    let mut h = BTreeMap::new();
    for id in g.node_ids() {
        let n = g.node(id);
        if added.contains(n.label(id).as_str()) {
            *h.entry(n.op_type.clone()).or_insert(0) += 1;
        }
    }
    h
}

pub fn build(
    before: &Model,
    after: &Model,
    trace: Trace,
    parity: Option<ParityReport>,
) -> OptimizeReport {
    OptimizeReport {
        nodes_before: before.graph.node_count(),
        nodes_after: after.graph.node_count(),
        ops_before: op_histogram(before),
        ops_after: op_histogram(after),
        fusions: fusion_counts(after, &trace),
        iterations: trace.iterations,
        stop: trace.stop,
        rewrites: trace.rewrites,
        rejected: trace.rejected,
        parity,
        dims: BTreeMap::new(),
        optimize_ms: 0.0,
        parity_ms: 0.0,
        target: None,
    }
}
