//! The rewrite engine. A rule looks at one anchor node and proposes a `Patch` (or rejects the
//! candidate with a reason); the engine applies patches, sweeps all rules until a sweep changes
//! nothing or the iteration cap is hit, and records every rewrite and rejection in a trace. The
//! trace is the single source of truth for reports, the page's highlighting and the tests.
//! A rule is offered only the nodes its `Rule::anchors` name. Deferred rules (`Rule::deferred`)
//! sweep only once the others are at a fixed point.

use serde::Serialize;

use crate::ir::node::NodeExtra;
use crate::ir::types::TensorType;
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::onnx::proto::{AttributeProto, TensorProto};
use crate::ops::verify;
use crate::{Error, Result};

/// A described change. Applied in this order: remove nodes, redirect values, add initializers,
/// add new values, add nodes, import opsets. Added nodes may produce values that removed nodes
/// produced, which is how a fused node keeps the replaced pattern's output (name, type,
/// graph-output status).
#[derive(Clone, Debug, Default)]
pub struct Patch {
    pub remove: Vec<NodeId>,
    /// Every reader of `.0` reads `.1` instead.
    pub redirect: Vec<(ValueId, ValueId)>,
    pub initializers: Vec<(ValueId, TensorProto)>,
    /// For a fusion, the fused node comes last; nodes before it are its helpers (input Casts).
    pub add: Vec<NewNode>,
    /// (domain, version) the added nodes need imported; an older import of the domain is
    /// raised to `version` (the rule checks that raising keeps the other nodes' meaning).
    pub opsets: Vec<(String, i64)>,
    /// Values the patch adds (name, type, initializer if constant), made by `new_value` and
    /// `new_initializer`, whose `NewValue` handles the added nodes name them by.
    pub new_values: Vec<(String, TensorType, Option<TensorProto>)>,
}

/// A value a patch adds: its place in that patch's new values. It is no `ValueId` (the value
/// does not exist until the patch is applied), so it cannot be read from the graph or be taken
/// for one of its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewValue(usize);

/// A value an added node reads or writes: one the graph has, or one its patch adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRef {
    Existing(ValueId),
    New(NewValue),
}

impl From<ValueId> for ValueRef {
    fn from(v: ValueId) -> ValueRef {
        ValueRef::Existing(v)
    }
}

impl From<NewValue> for ValueRef {
    fn from(v: NewValue) -> ValueRef {
        ValueRef::New(v)
    }
}

/// A node a patch adds: an `ir::Node` whose value slots may name the patch's new values.
#[derive(Clone, Debug)]
pub struct NewNode {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<Option<ValueRef>>,
    pub outputs: Vec<Option<ValueRef>>,
    pub attributes: Vec<AttributeProto>,
    pub implicit_inputs: Vec<ValueId>,
    pub extra: NodeExtra,
}

impl NewNode {
    pub fn new(op_type: &str, domain: &str) -> NewNode {
        Node::new(op_type, domain).into()
    }

    /// Sets an attribute, replacing one of the same name (as `Node::set_attr`).
    pub fn set_attr(&mut self, attr: AttributeProto) {
        self.attributes.retain(|a| a.name != attr.name);
        self.attributes.push(attr);
    }

    /// The node, with the new values' ids; `None` if it names a value the patch does not add.
    fn resolve(self, new: &[ValueId]) -> Option<Node> {
        let NewNode {
            name,
            op_type,
            domain,
            inputs,
            outputs,
            attributes,
            implicit_inputs,
            extra,
        } = self;
        let slot = |s: Option<ValueRef>| match s {
            None => Some(None),
            Some(ValueRef::Existing(v)) => Some(Some(v)),
            Some(ValueRef::New(NewValue(i))) => new.get(i).map(|&v| Some(v)),
        };
        let mut node = Node::new(&op_type, &domain);
        node.name = name;
        node.inputs = inputs.into_iter().map(slot).collect::<Option<_>>()?;
        node.outputs = outputs.into_iter().map(slot).collect::<Option<_>>()?;
        node.set_attributes(attributes);
        node.implicit_inputs = implicit_inputs;
        node.extra = extra;
        Some(node)
    }
}

/// A node of the graph (or a copy of one) added as it is: its slots name existing values.
impl From<Node> for NewNode {
    fn from(n: Node) -> NewNode {
        let attributes = n.attributes().to_vec();
        let Node {
            name,
            op_type,
            domain,
            inputs,
            outputs,
            implicit_inputs,
            extra,
            ..
        } = n;
        let slots =
            |s: Vec<Option<ValueId>>| s.into_iter().map(|v| v.map(ValueRef::from)).collect();
        NewNode {
            name,
            op_type,
            domain,
            inputs: slots(inputs),
            outputs: slots(outputs),
            attributes,
            implicit_inputs,
            extra,
        }
    }
}

impl Patch {
    /// Adds a new initializer called `name` (the rule picks a fresh name); added nodes read it
    /// through the returned reference.
    pub fn new_initializer(&mut self, name: &str, t: TensorProto) -> ValueRef {
        let ty = TensorType::from_tensor_proto(&t);
        self.new_values.push((name.to_string(), ty, Some(t)));
        ValueRef::New(NewValue(self.new_values.len() - 1))
    }

    /// Adds a new intermediate value (an output of an added node) of type `ty`.
    pub fn new_value(&mut self, name: &str, ty: TensorType) -> ValueRef {
        self.new_values.push((name.to_string(), ty, None));
        ValueRef::New(NewValue(self.new_values.len() - 1))
    }
}

pub enum Proposal {
    /// The anchor is not a candidate for this rule (no report entry).
    NoMatch,
    /// The anchor looked like a candidate but a guard failed; the reason goes in the report.
    Reject(String),
    Rewrite(Patch),
}

/// A rule's finding written as a `Result`: `Ok(None)` no candidate, `Err(why)` a rejected
/// one, `Ok(Some(patch))` a rewrite (so a rule's matcher can use `?` on its guards).
impl From<Result<Option<Patch>, String>> for Proposal {
    fn from(r: Result<Option<Patch>, String>) -> Proposal {
        match r {
            Ok(Some(p)) => Proposal::Rewrite(p),
            Ok(None) => Proposal::NoMatch,
            Err(why) => Proposal::Reject(why),
        }
    }
}

/// What a rule does to a model, which decides where it runs and how its rewrites are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// Removes or canonicalizes nodes (dead nodes, constants, shape chains); adds no fused op.
    Cleanup,
    /// Replaces a pattern with one fused op that onnxruntime runs.
    Fusion,
    /// Makes `ai.fuselab` ops that only fuselab's backends run: opt-in, never a default.
    BackendLowering,
}

impl RuleKind {
    /// True when a rewrite of this kind makes a fused node (counted and traced to the nodes it
    /// replaced by the report and the page).
    pub fn fuses(self) -> bool {
        self != RuleKind::Cleanup
    }
}

/// The nodes a rule is offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anchors {
    /// Every node: the rule looks at any op (dead nodes, constants, duplicates).
    Any,
    /// Nodes of these (domain, op_type); "" is the default ONNX domain, however a node spells it.
    Ops(Vec<(&'static str, &'static str)>),
}

impl Anchors {
    /// Ops of the default ONNX domain.
    pub fn onnx(ops: &[&'static str]) -> Anchors {
        Anchors::Ops(ops.iter().map(|&op| ("", op)).collect())
    }

    pub fn matches(&self, node: &Node) -> bool {
        match self {
            Anchors::Any => true,
            Anchors::Ops(ops) => ops.iter().any(|&(domain, op)| {
                node.op_type == op && crate::ir::model::same_domain(&node.domain, domain)
            }),
        }
    }
}

pub trait Rule {
    /// Short stable name, used by `--rules` and in the trace.
    fn name(&self) -> &'static str;
    /// What the rule makes: whether it is a default rule and how reports count its rewrites.
    fn kind(&self) -> RuleKind;
    /// The ops the rule anchors on: no other node is offered to `propose`. A rule that proposes
    /// (or rejects) at a node its anchors miss would silently stop firing there.
    fn anchors(&self) -> Anchors;
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

/// A registered rule (`&'static dyn Rule`) is a rule.
impl<R: Rule + ?Sized> Rule for &R {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn kind(&self) -> RuleKind {
        (**self).kind()
    }
    fn anchors(&self) -> Anchors {
        (**self).anchors()
    }
    fn propose(&self, model: &Model, node: NodeId) -> Proposal {
        (**self).propose(model, node)
    }
    fn deferred(&self) -> bool {
        (**self).deferred()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct NodeRef {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// The node's id in the graph the engine rewrote (ids are stable, so also in the graph it
    /// was cloned from); not serialized: reports name nodes by `name`.
    #[serde(skip)]
    pub id: NodeId,
}

impl NodeRef {
    fn of(node: &Node, id: NodeId) -> NodeRef {
        NodeRef {
            id,
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
    pub kind: RuleKind,
    pub iteration: usize,
    pub removed: Vec<NodeRef>,
    pub added: Vec<NodeRef>,
    /// Values the removed nodes wrote that nothing writes after the rewrite: the intermediates
    /// it eliminated (an output the added nodes write again, or a redirected one, is not).
    #[serde(skip)]
    pub eliminated: Vec<ValueId>,
    /// For a fusion, in an optimization report: the bytes of the values it eliminated at the
    /// parity run's sizes (`crate::profile::value_bytes`). Null for cleanup rules, values the
    /// original graph never computed, and when the parity check was skipped.
    pub intermediate_bytes: Option<u64>,
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
    /// Offer every node to every rule, ignoring `Rule::anchors` (off: the check that the
    /// declared anchors miss nothing compares the two).
    pub offer_every_node: bool,
}

impl Engine {
    pub fn new(rules: Vec<Box<dyn Rule>>) -> Engine {
        Engine {
            rules,
            max_iterations: 32,
            verify_each: cfg!(debug_assertions),
            offer_every_node: false,
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
            crate::ops::infer::refresh_inferred_types(model);
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

    /// One sweep of the deferred (or of the other) rules, each over the nodes it anchors on in
    /// topological order; true if it rewrote.
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
            let anchors = if self.offer_every_node {
                Anchors::Any
            } else {
                rule.anchors()
            };
            let g = &model.graph;
            if anchors != Anchors::Any && !g.node_ids().any(|id| anchors.matches(g.node(id))) {
                continue;
            }
            for id in model.graph.topo_order()? {
                // Gone (removed by an earlier rewrite of this pass) or not an anchor.
                if !model.graph.try_node(id).is_some_and(|n| anchors.matches(n)) {
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
                        let event = apply(model, patch, rule.name(), rule.kind(), iteration)?;
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

/// Applies one patch. Fails (without touching the graph) if it removes a node that is gone or
/// names a new value it does not add.
pub fn apply(
    model: &mut Model,
    patch: Patch,
    rule: &str,
    kind: RuleKind,
    iteration: usize,
) -> Result<RewriteEvent> {
    let g = &mut model.graph;
    if let Some(gone) = patch.remove.iter().find(|&&id| g.try_node(id).is_none()) {
        return Err(Error::Other(format!(
            "rule '{rule}' removes node #{} which no longer exists",
            gone.0
        )));
    }
    let unknown = |n: &&NewNode| {
        n.inputs
            .iter()
            .chain(&n.outputs)
            .any(|s| matches!(s, Some(ValueRef::New(NewValue(i))) if *i >= patch.new_values.len()))
    };
    if let Some(n) = patch.add.iter().find(unknown) {
        return Err(Error::Other(format!(
            "rule '{rule}' adds node '{}' naming a new value its patch does not add",
            n.name
        )));
    }
    let removed: Vec<NodeRef> = patch
        .remove
        .iter()
        .map(|&id| NodeRef::of(g.node(id), id))
        .collect();
    let written: Vec<ValueId> = patch
        .remove
        .iter()
        .flat_map(|&id| g.node(id).outputs.iter().flatten().copied())
        .filter(|v| !patch.redirect.iter().any(|(from, _)| from == v))
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
    let mut new_values = Vec::new();
    for (name, ty, init) in patch.new_values {
        let v = g.new_value(&name, ty);
        if let Some(t) = init {
            g.set_initializer(v, t);
        }
        new_values.push(v);
    }
    let mut added = Vec::new();
    for node in patch.add {
        let node = node
            .resolve(&new_values)
            .ok_or_else(|| Error::Other(format!("rule '{rule}' names an unknown new value")))?;
        let id = g.add_node(node)?;
        added.push(NodeRef::of(g.node(id), id));
    }
    let eliminated = written
        .into_iter()
        .filter(|&v| g.producer(v).is_none())
        .collect();
    for (domain, version) in patch.opsets {
        model.require_opset(&domain, version);
    }
    Ok(RewriteEvent {
        rule: rule.to_string(),
        kind,
        iteration,
        removed,
        added,
        eliminated,
        intermediate_bytes: None,
    })
}
