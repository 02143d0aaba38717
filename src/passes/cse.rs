//! Common-subexpression elimination: two nodes with the same op, domain, inputs and attributes
//! compute the same values, so the later one's readers read the earlier one's outputs. Exporters
//! emit `Shape(x)` and its Gathers once per use; this merges them.
//!
//! Not merged: nodes with subgraphs (their bodies may differ in what they capture), nodes
//! without inputs (Constant: const_fold turns them into initializers), ops that are not
//! deterministic (RandomNormal, Multinomial, ...), and a later node whose output is a graph
//! output (redirecting it would rename the graph's interface).

use crate::ir::{Model, NodeId};
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
                && o.inputs == node.inputs
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

/// Same attributes in any order.
fn same_attributes(a: &crate::ir::Node, b: &crate::ir::Node) -> bool {
    a.attributes().len() == b.attributes().len()
        && a.attributes()
            .iter()
            .all(|x| b.attributes().iter().any(|y| x == y))
}
