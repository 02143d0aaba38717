//! Identity elimination, and of a Cast to the type its input already has (GPT-2's exporter
//! casts the attention probabilities float32 → float32).
//!
//! ```text
//!   x ──► Identity ──► y ──► readers        x ──► readers (now reading x)
//! ```
//! When `y` is a graph output its name must survive: then x's producer is re-emitted to write
//! `y` directly and x's other readers read `y`. Rejected when neither name can go (x is a graph
//! input, an initializer or another graph output).

use crate::ir::{Model, NodeId};
use crate::ops::{self, cast::Cast};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct IdentityElimination;

impl Rule for IdentityElimination {
    fn name(&self) -> &'static str {
        "identity"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Identity", "Cast"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        let same_type_cast = node.is("Cast")
            && node.input(0).is_some_and(|x| {
                let from = g.value(x).ty.dtype;
                from.is_some() && ops::attrs_of::<Cast>(model, node).map(|c| c.to) == from
            });
        if !node.is("Identity") && !same_type_cast {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(y)) = (node.input(0), node.output(0)) else {
            return Proposal::NoMatch;
        };
        if node.outputs.len() != 1 || node.inputs.len() != 1 {
            return Proposal::Reject(format!(
                "{} with other than one input and one output",
                node.op_type
            ));
        }
        if !g.is_graph_output(y) {
            return Proposal::Rewrite(Patch {
                remove: vec![id],
                redirect: vec![(y, x)],
                ..Default::default()
            });
        }
        let Some(p) = g.producer(x) else {
            return Proposal::Reject(format!(
                "output '{}' is a graph output fed directly by graph input or initializer '{}'",
                g.name(y),
                g.name(x)
            ));
        };
        if g.is_graph_output(x) {
            return Proposal::Reject(format!(
                "both '{}' and '{}' are graph outputs",
                g.name(x),
                g.name(y)
            ));
        }
        let mut producer = g.node(p).clone();
        for slot in producer.outputs.iter_mut() {
            if *slot == Some(x) {
                *slot = Some(y);
            }
        }
        Proposal::Rewrite(Patch {
            remove: vec![id, p],
            redirect: vec![(x, y)],
            add: vec![producer.into()],
            ..Default::default()
        })
    }
}
