//! Bias Add + Gelu → com.microsoft.BiasGelu. Runs after `gelu`, on the fused Gelu, and on the
//! standard Gelu (ai.onnx 20) that torch's dynamo exporter writes from opset 20 on.
//!
//! ```text
//!   before                                        after
//!
//!   A ─► Add(B) ─► t ─► Gelu ─► y                  A ─► BiasGelu(·, B) ─► y
//!   A ─► Add(B) ─► t ─► Gelu(approximate=tanh) ─► y    A ─► FastGelu(·, B) ─► y
//! ```
//! com.microsoft.Gelu and ai.onnx Gelu without `approximate` (or "none") are the erf form, which
//! BiasGelu computes on `A + B`; `approximate = "tanh"` is the tanh form FastGelu computes, which
//! takes the bias as its second input. Guards: B is a 1-D constant of the hidden size (A's
//! statically known last dim, so the Add does not broadcast A); t is read only by the Gelu and
//! is not a graph output; float32 or float16.

use crate::ir::model::MS_DOMAIN;
use crate::ir::{Model, Node, NodeId};
use crate::ops::{activation, attrs_of};
use crate::passes::matchers::{
    bias_add, fresh_node_name, last_dim, produced_by, require_f32_or_f16,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct FuseBiasGelu;

impl Rule for FuseBiasGelu {
    fn name(&self) -> &'static str {
        "bias_gelu"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::Ops(vec![(MS_DOMAIN, "Gelu"), ("", "Gelu")])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let gelu = g.node(id);
        if gelu.op_type != "Gelu" || gelu.inputs.len() != 1 {
            return Proposal::NoMatch;
        }
        // com.microsoft.Gelu is the erf form; the standard one says which form it is.
        let fused_op = if gelu.domain == MS_DOMAIN {
            "BiasGelu"
        } else if gelu.is("Gelu") {
            match attrs_of::<activation::Gelu>(model, gelu) {
                Some(a) if a.tanh => "FastGelu",
                Some(_) => "BiasGelu",
                None => return Proposal::NoMatch,
            }
        } else {
            return Proposal::NoMatch;
        };
        let (Some(t), Some(y)) = (gelu.input(0), gelu.output(0)) else {
            return Proposal::NoMatch;
        };
        if produced_by(g, t, "Add").is_none() {
            return Proposal::NoMatch;
        }
        if let Err(why) = require_f32_or_f16(g, t) {
            return Proposal::Reject(why);
        }
        let hidden = match last_dim(g, t) {
            Ok(h) => h,
            Err(why) => return Proposal::Reject(why),
        };
        let Some((add_id, a, b)) = bias_add(model, t, hidden) else {
            return Proposal::Reject(format!(
                "'{}' is not a single-use Add of a 1-D constant bias of size {hidden}",
                g.name(t)
            ));
        };
        let mut fused = Node::new(fused_op, MS_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_{fused_op}", g.name(y)));
        fused.inputs = vec![Some(a), Some(b)];
        fused.outputs = vec![Some(y)];
        Proposal::Rewrite(Patch {
            remove: vec![add_id, id],
            add: vec![fused.into()],
            opsets: vec![(MS_DOMAIN.to_string(), 1)],
            ..Default::default()
        })
    }
}
