//! Common-subexpression elimination: two nodes with the same op, domain, inputs and attributes
//! compute the same values, so the later one's readers read the earlier one's outputs. Exporters
//! emit `Shape(x)` and its Gathers once per use; this merges them. Two inputs are the same when
//! they are one value, or two small constants (at most `SMALL_CONST` elements) with the same
//! type, shape and bits: exporters repeat such constants per layer (a mask's 0 and -inf, an
//! axis), so each layer's copy of a mask computation would otherwise stay apart.
//!
//! Not merged: nodes with subgraphs (their bodies may differ in what they capture), nodes
//! without inputs (Constant: const_fold turns them into initializers), ops that are not
//! deterministic (RandomNormal, Multinomial, ...), and a later node whose output is a graph
//! output (redirecting it would rename the graph's interface).

use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::matchers::{constant_shape, constant_value};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

/// Ops whose two evaluations on equal inputs may differ.
const NONDETERMINISTIC: &[&str] = &[
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
];

/// Most elements of a constant input that is compared by value.
const SMALL_CONST: usize = 16;

pub struct CommonSubexpressions;

impl Rule for CommonSubexpressions {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::Any
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        let Some(first) = node.input(0) else {
            return Proposal::NoMatch;
        };
        if !node.implicit_inputs.is_empty()
            || node
                .attributes()
                .iter()
                .any(|a| a.g.is_some() || !a.graphs.is_empty())
            || NONDETERMINISTIC.contains(&node.op_type.as_str())
            || node.outputs.iter().flatten().any(|&v| g.is_graph_output(v))
        {
            return Proposal::NoMatch;
        }
        let twin = g.consumers(first).iter().copied().find(|&other| {
            let o = g.node(other);
            other < id
                && o.op_type == node.op_type
                && crate::ir::model::same_domain(&o.domain, &node.domain)
                && o.inputs.len() == node.inputs.len()
                && o.inputs
                    .iter()
                    .zip(&node.inputs)
                    .all(|(&a, &b)| same_input(model, a, b))
                && o.outputs.len() == node.outputs.len()
                && o.implicit_inputs.is_empty()
                && same_attributes(o, node)
        });
        let Some(twin) = twin else {
            return Proposal::NoMatch;
        };
        let t = g.node(twin);
        let mut redirect = Vec::new();
        for (mine, theirs) in node.outputs.iter().zip(&t.outputs) {
            match (mine, theirs) {
                (Some(m), Some(t)) => redirect.push((*m, *t)),
                (Some(m), None) if !g.consumers(*m).is_empty() => return Proposal::NoMatch,
                _ => {}
            }
        }
        Proposal::Rewrite(Patch {
            remove: vec![id],
            redirect,
            ..Default::default()
        })
    }
}

/// One value, or two small constants with the same type, shape and bits (encoded as ONNX does,
/// so -0.0 and 0.0 differ).
fn same_input(model: &Model, a: Option<ValueId>, b: Option<ValueId>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return a == b;
    };
    if a == b {
        return true;
    }
    let small = |v| constant_shape(model, v).filter(|s| s.iter().product::<usize>() <= SMALL_CONST);
    match (small(a), small(b)) {
        (Some(x), Some(y)) if x == y => {
            match (constant_value(model, a), constant_value(model, b)) {
                (Some(p), Some(q)) => from_tensor("", &p) == from_tensor("", &q),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Same attributes in any order.
fn same_attributes(a: &crate::ir::Node, b: &crate::ir::Node) -> bool {
    a.attributes().len() == b.attributes().len()
        && a.attributes()
            .iter()
            .all(|x| b.attributes().iter().any(|y| x == y))
}
