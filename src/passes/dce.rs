//! Dead-node elimination: a node none of whose outputs is read (by a node, a subgraph or the
//! graph's outputs) is removed. ONNX ops have no side effects, so this is always sound.

use crate::ir::{Model, NodeId};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct DeadNodeElimination;

impl Rule for DeadNodeElimination {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::Any
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let live = g
            .node(id)
            .outputs
            .iter()
            .flatten()
            .any(|&v| !g.consumers(v).is_empty() || g.is_graph_output(v));
        if live {
            return Proposal::NoMatch;
        }
        Proposal::Rewrite(Patch {
            remove: vec![id],
            ..Default::default()
        })
    }
}
