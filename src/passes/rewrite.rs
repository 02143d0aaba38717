//! The rewrite engine. A rule looks at one anchor node and proposes a `Patch` (or rejects the
//! candidate with a reason); the engine applies patches, sweeps all rules until a sweep changes
//! nothing or the iteration cap is hit, and records every rewrite and rejection in a trace. The
//! trace is the single source of truth for reports, the page's highlighting and the tests.
//! Deferred rules (`Rule::deferred`) sweep only once the others are at a fixed point.

use serde::Serialize;

use crate::ir::types::TensorType;
use crate::ir::verify::verify;
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::onnx::proto::TensorProto;
use crate::{Error, Result};

/// A described change. Applied in this order: remove nodes, redirect values, add initializers,
/// add nodes, import opsets. Added nodes may produce values that removed nodes produced, which
/// is how a fused node keeps the replaced pattern's output (name, type, graph-output status).
#[derive(Clone, Debug, Default)]
pub struct Patch {
    pub remove: Vec<NodeId>,
    /// Every reader of `.0` reads `.1` instead.
    pub redirect: Vec<(ValueId, ValueId)>,
    pub initializers: Vec<(ValueId, TensorProto)>,
    /// For a fusion, the fused node comes last; nodes before it are its helpers (input Casts).
    pub add: Vec<Node>,
    /// (domain, version) the added nodes need imported; an older import of the domain is
    /// raised to `version` (the rule checks that raising keeps the other nodes' meaning).
    pub opsets: Vec<(String, i64)>,
    /// New values (name, type, initializer if constant): added nodes name them through the
    /// placeholder ids `new_value`/`new_initializer` return, which `apply` maps to real values.
    pub new_values: Vec<(String, TensorType, Option<TensorProto>)>,
}

/// Placeholder ids for `Patch::new_initializers` count down from here.
const PLACEHOLDER_TOP: u32 = u32::MAX;

impl Patch {
    /// Adds a new initializer called `name` (the rule picks a fresh name) and returns the id
    /// that added nodes use to read it.
    pub fn new_initializer(&mut self, name: &str, t: TensorProto) -> ValueId {
        let ty = TensorType::from_tensor_proto(&t);
        self.new_values.push((name.to_string(), ty, Some(t)));
        ValueId(PLACEHOLDER_TOP - (self.new_values.len() as u32 - 1))
    }

    /// Adds a new intermediate value (an output of an added node) of type `ty`.
    pub fn new_value(&mut self, name: &str, ty: TensorType) -> ValueId {
        self.new_values.push((name.to_string(), ty, None));
        ValueId(PLACEHOLDER_TOP - (self.new_values.len() as u32 - 1))
    }
}

pub enum Proposal {
    /// The anchor is not a candidate for this rule (no report entry).
    NoMatch,
    /// The anchor looked like a candidate but a guard failed; the reason goes in the report.
    Reject(String),
    Rewrite(Patch),
}

pub trait Rule {
    /// Short stable name, used by `--rules` and in the trace.
    fn name(&self) -> &'static str;
    /// Proposes a rewrite anchored at `node`. Must not assume anything about other anchors.
    fn propose(&self, model: &Model, node: NodeId) -> Proposal;
    /// A deferred rule runs only in a sweep where the other rules changed nothing, wherever it
    /// stands in the rule list: it takes what is left once they are at their fixed point, never
    /// a pattern they would have matched a sweep later (the generic elementwise fusion would
    /// otherwise eat a Gelu's or an attention mask's ops before refreshed shapes let the named
    /// fusion fire).
    fn deferred(&self) -> bool {
        false
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct NodeRef {
    pub name: String,
    pub op_type: String,
    pub domain: String,
}

impl NodeRef {
    fn of(node: &Node, id: NodeId) -> NodeRef {
        NodeRef {
            name: node.label(id),
            op_type: node.op_type.clone(),
            domain: node.domain.clone(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct RewriteEvent {
    pub rule: String,
    pub iteration: usize,
    pub removed: Vec<NodeRef>,
    pub added: Vec<NodeRef>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Rejection {
    pub rule: String,
    /// The anchor node (name, or `Op#id` when unnamed).
    pub candidate: String,
    pub op_type: String,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A full sweep of every rule changed nothing.
    FixedPoint,
    /// The iteration cap was reached while rules still fired.
    IterationCap,
}

#[derive(Clone, Debug, Serialize)]
pub struct Trace {
    pub rewrites: Vec<RewriteEvent>,
    /// Rejections seen in the final sweep: candidates that are still unfused, and why.
    pub rejected: Vec<Rejection>,
    pub iterations: usize,
    pub stop: StopReason,
}

pub struct Engine {
    pub rules: Vec<Box<dyn Rule>>,
    pub max_iterations: usize,
    /// Run `verify()` after every rewrite (on in debug and test builds).
    pub verify_each: bool,
}

impl Engine {
    pub fn new(rules: Vec<Box<dyn Rule>>) -> Engine {
        Engine {
            rules,
            max_iterations: 32,
            verify_each: cfg!(debug_assertions),
        }
    }

    pub fn run(&self, model: &mut Model) -> Result<Trace> {
        let mut rewrites = Vec::new();
        let mut rejected = Vec::new();
        let mut iterations = 0;
        let mut stop = StopReason::IterationCap;
        while iterations < self.max_iterations {
            iterations += 1;
            rejected.clear();
            let mut changed = self.sweep(model, false, iterations, &mut rewrites, &mut rejected)?;
            if !changed {
                changed = self.sweep(model, true, iterations, &mut rewrites, &mut rejected)?;
            }
            if !changed {
                stop = StopReason::FixedPoint;
                break;
            }
            // Rewrites can make dims decidable that were not (a MatMul now produces what a
            // Reshape of a Gemm did): re-infer the shapes inference had left undecided.
            crate::ir::infer::refresh_inferred_types(model);
        }
        let pinned = crate::passes::matchers::pinned_names(model);
        model.graph.remove_unused_initializers(&pinned);
        // Always, not only in debug builds: an invalid graph must never be saved.
        verify(model).map_err(|e| Error::Other(format!("optimized graph is invalid: {e}")))?;
        Ok(Trace {
            rewrites,
            rejected,
            iterations,
            stop,
        })
    }

    /// One sweep of the deferred (or of the other) rules over every node; true if it rewrote.
    fn sweep(
        &self,
        model: &mut Model,
        deferred: bool,
        iteration: usize,
        rewrites: &mut Vec<RewriteEvent>,
        rejected: &mut Vec<Rejection>,
    ) -> Result<bool> {
        let mut changed = false;
        for rule in self.rules.iter().filter(|r| r.deferred() == deferred) {
            for id in model.graph.topo_order()? {
                if model.graph.try_node(id).is_none() {
                    continue;
                }
                match rule.propose(model, id) {
                    Proposal::NoMatch => {}
                    Proposal::Reject(reason) => {
                        let node = model.graph.node(id);
                        let r = Rejection {
                            rule: rule.name().to_string(),
                            candidate: node.label(id),
                            op_type: node.op_type.clone(),
                            reason,
                        };
                        if !rejected.contains(&r) {
                            rejected.push(r);
                        }
                    }
                    Proposal::Rewrite(patch) => {
                        // Subgraphs read outer values by name; redirecting one would leave the
                        // body naming a value that no longer exists.
                        if let Some(v) = captured_redirect(model, &patch) {
                            let node = model.graph.node(id);
                            rejected.push(Rejection {
                                rule: rule.name().to_string(),
                                candidate: node.label(id),
                                op_type: node.op_type.clone(),
                                reason: format!(
                                    "'{}' is read by name inside a subgraph",
                                    model.graph.name(v)
                                ),
                            });
                            continue;
                        }
                        let event = apply(model, patch, rule.name(), iteration)?;
                        if self.verify_each {
                            verify(model).map_err(|e| {
                                Error::Other(format!(
                                    "rule '{}' left an invalid graph: {e}",
                                    rule.name()
                                ))
                            })?;
                        }
                        rewrites.push(event);
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }
}

/// A redirected value that some node's subgraph reads implicitly, if any.
fn captured_redirect(model: &Model, patch: &Patch) -> Option<ValueId> {
    let g = &model.graph;
    patch.redirect.iter().map(|&(from, _)| from).find(|&v| {
        g.consumers(v)
            .iter()
            .any(|&c| g.node(c).implicit_inputs.contains(&v))
    })
}

/// Applies one patch. Fails (without touching the graph) if it removes a node that is gone.
pub fn apply(
    model: &mut Model,
    patch: Patch,
    rule: &str,
    iteration: usize,
) -> Result<RewriteEvent> {
    let g = &mut model.graph;
    if let Some(gone) = patch.remove.iter().find(|&&id| g.try_node(id).is_none()) {
        return Err(Error::Other(format!(
            "rule '{rule}' removes node #{} which no longer exists",
            gone.0
        )));
    }
    let removed: Vec<NodeRef> = patch
        .remove
        .iter()
        .map(|&id| NodeRef::of(g.node(id), id))
        .collect();
    for &id in &patch.remove {
        g.remove_node(id);
    }
    for (from, to) in patch.redirect {
        g.replace_uses(from, to);
    }
    for (v, t) in patch.initializers {
        g.set_initializer(v, t);
    }
    let mut placeholders = Vec::new();
    for (name, ty, init) in patch.new_values {
        let v = g.new_value(&name, ty);
        if let Some(t) = init {
            g.set_initializer(v, t);
        }
        placeholders.push(v);
    }
    let resolve = |v: ValueId| -> ValueId {
        let slot = PLACEHOLDER_TOP - v.0;
        placeholders.get(slot as usize).copied().unwrap_or(v)
    };
    let mut added = Vec::new();
    for mut node in patch.add {
        for v in node
            .inputs
            .iter_mut()
            .chain(node.outputs.iter_mut())
            .flatten()
        {
            *v = resolve(*v);
        }
        let id = g.add_node(node)?;
        added.push(NodeRef::of(g.node(id), id));
    }
    for (domain, version) in patch.opsets {
        model.require_opset(&domain, version);
    }
    Ok(RewriteEvent {
        rule: rule.to_string(),
        iteration,
        removed,
        added,
    })
}
