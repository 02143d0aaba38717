//! Op sequences: the paths of 2 to 4 nodes whose intermediates one fused kernel would keep to
//! itself, what they cost, and which rule (if any) already fuses them.
//!
//! ```text
//!   x ──► EyeLike ──► e ──► Add ──► y      the path EyeLike → Add: its intermediate e is read
//!   └───────────────────────┘               only by Add and is not a graph output, so fusing
//!                                           the two never writes e (N·N·4 bytes) or reads it back
//! ```
//!
//! Coverage is decided by running the rules, not by a table of op names: the default rules and
//! the opt-in lowering (`Target::Fuselab`'s rules) run on a copy of the graph, and each
//! occurrence is followed through the rewrite trace (node ids are stable across the copy) to
//! the rewrite that covers it (`Fates::cover`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{op_label, rank, share, NodeTimes, ValueBytes};
use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::passes::target::Target;
use crate::passes::{rules, Engine, RewriteEvent, RuleKind};
use crate::{Error, Result};

/// Longest path, in nodes.
pub const MAX_LEN: usize = 4;

/// One op sequence: all its occurrences in the graph.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Sequence {
    /// Op labels (as `OpTime::op`) in data-flow order.
    pub ops: Vec<String>,
    /// Occurrences.
    pub count: usize,
    /// The occurrences' nodes' time, per run.
    pub ms: f64,
    /// Of the time in all nodes.
    pub share: f64,
    /// Bytes of the intermediates, summed over occurrences.
    pub intermediate_bytes: u64,
}

/// Occurrences of one sequence that one rule covers (or none does): a fusion candidate.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Candidate {
    pub ops: Vec<String>,
    /// The default rule that already fuses these occurrences; null: none does.
    pub rule: Option<String>,
    /// For an uncovered candidate, the opt-in rule that would take it (`fused_elementwise`:
    /// its ops are all elementwise); null otherwise.
    pub opt_in_rule: Option<String>,
    pub count: usize,
    /// The occurrences' nodes' time, per run.
    pub ms: f64,
    /// The time fusing would save, per run, under the memory-traffic model (docs/profile.md):
    /// each node's time times the share of the bytes it moves that are intermediates.
    pub estimated_saving_ms: f64,
    pub intermediate_bytes: u64,
    /// Each occurrence's nodes (names, or `Op#id` when unnamed), in data-flow order.
    pub nodes: Vec<Vec<String>>,
}

/// The sequences (most expensive first; ties: more intermediate bytes, then by ops) and the
/// candidates (largest estimated saving first; ties: more intermediate bytes, then by ops and
/// rule) of `model`. One pass groups the occurrences by ops and covering rule (the candidates);
/// the sequences merge the candidates of the same ops.
pub(super) fn tables(
    model: &Model,
    times: &NodeTimes,
    bytes: &ValueBytes,
    total_ms: f64,
    bandwidth: Option<f64>,
) -> Result<(Vec<Sequence>, Vec<Candidate>)> {
    let g = &model.graph;
    let folded = constant_nodes(g)?;
    let mut paths = Vec::new();
    let mut path = Vec::with_capacity(MAX_LEN);
    for s in g.topo_order()? {
        if !folded[s.0 as usize] {
            path.push(s);
            extend(g, &folded, &mut path, &mut paths);
            path.pop();
        }
    }
    let events = trace_of(model)?;
    let fates = Fates::new(&events);
    let size = |v: ValueId| bytes.get(v).unwrap_or(0);
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut candidates: Vec<Candidate> = Vec::new();
    for (nodes, inter) in paths {
        let (mut ops, mut names) = (Vec::new(), Vec::new());
        let (mut ms, mut saving) = (0.0, 0.0);
        for &n in &nodes {
            let node = g.node(n);
            ops.push(op_label(model, n));
            names.push(node.label(n));
            let t = times.ms.get(n.0 as usize).copied().unwrap_or(0.0);
            ms += t;
            // Its time's share for the intermediate bytes it moves, at most what moving them
            // takes at `bandwidth` (a compute-bound node spends the rest of its time on
            // arithmetic that fusing keeps).
            let moved = moved_values(node);
            let traffic: u64 = moved.iter().map(|&v| size(v)).sum();
            let mut removed = 0;
            for v in moved.iter().filter(|v| inter.contains(v)) {
                removed += size(*v);
            }
            if traffic > 0 {
                let share = t * removed as f64 / traffic as f64;
                saving += match bandwidth {
                    Some(bw) => share.min(removed as f64 / bw),
                    None => share,
                };
            }
        }
        let covered = fates.cover(&nodes).map(|i| &events[i]);
        let lowering = covered.is_some_and(|e| e.kind == RuleKind::BackendLowering);
        let rule = covered.filter(|_| !lowering).map(|e| e.rule.clone());
        let opt_in = covered.filter(|_| lowering).map(|e| e.rule.clone());
        let mut key = ops.join("\0");
        for r in [&rule, &opt_in] {
            key.push('\u{1}');
            key.push_str(r.as_deref().unwrap_or(""));
        }
        let i = *at.entry(key).or_insert_with(|| {
            candidates.push(Candidate {
                ops,
                rule,
                opt_in_rule: opt_in,
                count: 0,
                ms: 0.0,
                estimated_saving_ms: 0.0,
                intermediate_bytes: 0,
                nodes: Vec::new(),
            });
            candidates.len() - 1
        });
        let c = &mut candidates[i];
        c.count += 1;
        c.ms += ms;
        c.estimated_saving_ms += saving;
        c.intermediate_bytes += inter.iter().map(|&v| size(v)).sum::<u64>();
        c.nodes.push(names);
    }
    let mut seq_at: BTreeMap<String, usize> = BTreeMap::new();
    let mut sequences: Vec<Sequence> = Vec::new();
    for c in &candidates {
        let i = *seq_at.entry(c.ops.join("\0")).or_insert_with(|| {
            sequences.push(Sequence {
                ops: c.ops.clone(),
                count: 0,
                ms: 0.0,
                share: 0.0,
                intermediate_bytes: 0,
            });
            sequences.len() - 1
        });
        let s = &mut sequences[i];
        s.count += c.count;
        s.ms += c.ms;
        s.share = share(s.ms, total_ms);
        s.intermediate_bytes += c.intermediate_bytes;
    }
    Ok((
        rank(sequences, &seq_at, |s| (s.ms, s.intermediate_bytes)),
        rank(candidates, &at, |c| {
            (c.estimated_saving_ms, c.intermediate_bytes)
        }),
    ))
}

/// The values a node reads and writes, each once (its memory traffic).
fn moved_values(node: &crate::ir::Node) -> Vec<ValueId> {
    distinct(node.inputs.iter().chain(&node.outputs).flatten().copied())
}

/// Bytes per millisecond the graph's elementwise nodes moved, together (their bytes read and
/// written over their time): the memory bandwidth this backend reaches on memory-bound ops at
/// these sizes, measured in this run. `None` when no elementwise node took measurable time.
pub(super) fn elementwise_bandwidth(
    model: &Model,
    times: &NodeTimes,
    bytes: &ValueBytes,
) -> Option<f64> {
    let g = &model.graph;
    let (mut traffic, mut ms) = (0u64, 0.0);
    for id in g.node_ids() {
        if crate::passes::fuse_elementwise::is_elementwise(model, id) {
            for v in moved_values(g.node(id)) {
                traffic += bytes.get(v).unwrap_or(0);
            }
            ms += times.ms.get(id.0 as usize).copied().unwrap_or(0.0);
        }
    }
    (ms > 0.0 && traffic > 0).then(|| traffic as f64 / ms)
}

/// Nodes (by id) whose inputs are all constants, directly or through other such nodes (a
/// Constant node has none): they compute the same tensor on every run, `const_fold` makes them
/// initializers, and no fusion is about them, so they join no path.
fn constant_nodes(g: &Graph) -> Result<Vec<bool>> {
    let mut constant: Vec<bool> = (0..g.value_count())
        .map(|v| g.constant(ValueId(v as u32)).is_some())
        .collect();
    let slots = g.node_ids().map(|i| i.0 as usize + 1).max().unwrap_or(0);
    let mut folded = vec![false; slots];
    for id in g.topo_order()? {
        let n = g.node(id);
        if n.implicit_inputs.is_empty()
            && !n.has_subgraphs()
            && n.inputs.iter().flatten().all(|v| constant[v.0 as usize])
        {
            folded[id.0 as usize] = true;
            for v in n.outputs.iter().flatten() {
                constant[v.0 as usize] = true;
            }
        }
    }
    Ok(folded)
}

/// Records `path` (and its extensions) when it is an occurrence. A path grows only along values
/// whose readers still fit in it, since every reader of an intermediate must be a path node.
fn extend(
    g: &Graph,
    folded: &[bool],
    path: &mut Vec<NodeId>,
    out: &mut Vec<(Vec<NodeId>, Vec<ValueId>)>,
) {
    if path.len() >= 2 {
        if let Some(inter) = intermediates(g, path) {
            out.push((path.clone(), inter));
        }
    }
    if path.len() == MAX_LEN {
        return;
    }
    let last = g.node(*path.last().expect("a path has a node"));
    let mut next: Vec<NodeId> = Vec::new();
    for &v in last.outputs.iter().flatten() {
        let readers = distinct(g.consumers(v).iter().copied());
        if g.is_graph_output(v) || readers.len() > MAX_LEN - path.len() {
            continue;
        }
        for c in readers {
            if !path.contains(&c) && !next.contains(&c) && !folded[c.0 as usize] {
                next.push(c);
            }
        }
    }
    for c in next {
        path.push(c);
        extend(g, folded, path, out);
        path.pop();
    }
}

/// The path's intermediates (values a path node writes and a later one reads), or `None` when
/// one of them is a graph output or has a reader outside the path.
fn intermediates(g: &Graph, path: &[NodeId]) -> Option<Vec<ValueId>> {
    let mut inter = Vec::new();
    for (i, &n) in path[..path.len() - 1].iter().enumerate() {
        for &v in g.node(n).outputs.iter().flatten() {
            let readers = g.consumers(v);
            if !readers.iter().any(|r| path[i + 1..].contains(r)) {
                continue;
            }
            if g.is_graph_output(v) || readers.iter().any(|r| !path.contains(r)) {
                return None;
            }
            inter.push(v);
        }
    }
    Some(inter)
}

fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The rewrites the default rules and the opt-in lowering make on a copy of `model`.
fn trace_of(model: &Model) -> Result<Vec<RewriteEvent>> {
    let mut copy = model.clone();
    let rules = rules(&Target::Fuselab.default_rules())?;
    let trace = Engine::new(rules)
        .run(&mut copy)
        .map_err(|e| Error::Other(format!("profile: running the rules for coverage: {e}")))?;
    Ok(trace.rewrites)
}

/// Where each node went in a rewrite trace.
struct Fates {
    /// Node (by id) → the rewrite that removed it.
    removed_by: Vec<Option<usize>>,
    /// Rewrite → the nodes that stand for what it removed: a fusion's fused node (the last node
    /// it adds; the ones before are helpers such as Attention's mask Casts), every node a
    /// cleanup adds (gemm_to_matmul's MatMul and Add), none for a removal (a folded constant, a
    /// dead node, an Identity).
    successors: Vec<Vec<NodeId>>,
}

impl Fates {
    fn new(events: &[RewriteEvent]) -> Fates {
        let ids = events
            .iter()
            .flat_map(|e| &e.removed)
            .map(|r| r.id.0 as usize);
        let mut removed_by = vec![None; ids.max().map_or(0, |m| m + 1)];
        for (i, e) in events.iter().enumerate() {
            for r in &e.removed {
                removed_by[r.id.0 as usize] = Some(i);
            }
        }
        let successors = (events.iter())
            .map(|e| match (e.kind.fuses(), e.added.last()) {
                (true, Some(fused)) => vec![fused.id],
                _ => e.added.iter().map(|a| a.id).collect(),
            })
            .collect();
        Fates {
            removed_by,
            successors,
        }
    }

    /// The rewrite that covers an occurrence of `nodes`: following the nodes that stand for it
    /// (its own, then what each rewrite put in place of those it removed), the first rewrite
    /// that removes all of them (a fusion taking them into its fused node, a cleanup rewriting
    /// them at once), or after which at most one node stands for it (its intermediates are
    /// gone: a fused node, or one node left once the others were folded or removed). `None`
    /// when the rewrites leave two or more nodes standing for it.
    fn cover(&self, nodes: &[NodeId]) -> Option<usize> {
        let mut standing = nodes.to_vec();
        loop {
            let by = |n: &NodeId| self.removed_by.get(n.0 as usize).copied().flatten();
            let e = standing.iter().filter_map(by).min()?;
            let all = standing.iter().all(|n| by(n) == Some(e));
            standing.retain(|n| by(n) != Some(e));
            for &n in &self.successors[e] {
                if !standing.contains(&n) {
                    standing.push(n);
                }
            }
            if all || standing.len() <= 1 {
                return Some(e);
            }
        }
    }
}
