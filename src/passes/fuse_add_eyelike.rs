//! EyeLike + Add → ai.fuselab.AddEyeLike (the book's worked example of kernel fusion).
//!
//! ```text
//!   before                                 after
//!
//!     X ──► EyeLike(k, dtype) ──► E          A ──► AddEyeLike(k, dtype) ──► Y
//!                                 │
//!     A ────────────────────► Add ──► Y
//! ```
//! `A` may be `X` itself (`Y = Add(EyeLike(X), X)`). The unfused pair writes an N×N identity and
//! reads it back; the fused op adds 1 on the k-th diagonal of A in one pass.
//!
//! Guards: E has exactly one reader, the Add, and is not a graph output; A has the shape of X
//! (A is X, or both shapes are fully known and equal, symbolic names included), since Add would
//! broadcast a differently shaped A and AddEyeLike does not; E's element type (the `dtype`
//! attribute, else X's type) is A's type. Any element type the reference backend computes on.

use crate::ir::model::FUSELAB_DOMAIN;
use crate::ir::{attr, Model, Node, NodeId};
use crate::ops::eyelike::EyeLike;
use crate::passes::matchers::{fresh_node_name, sole_consumer};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;

pub struct FuseAddEyeLike;

impl Rule for FuseAddEyeLike {
    fn name(&self) -> &'static str {
        "add_eyelike"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["EyeLike"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let eye = g.node(id);
        if !eye.is("EyeLike") {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(e)) = (eye.input(0), eye.output(0)) else {
            return Proposal::NoMatch;
        };
        let feeds_add = g.consumers(e).iter().any(|&c| g.node(c).is("Add"));
        if !feeds_add || eye.outputs.len() != 1 {
            return Proposal::NoMatch;
        }
        let add_id = match sole_consumer(g, e) {
            Ok(c) => c,
            Err(why) => return Proposal::Reject(format!("EyeLike output {why}")),
        };
        let add = g.node(add_id);
        let (Some(lhs), Some(rhs), Some(y)) = (add.input(0), add.input(1), add.output(0)) else {
            return Proposal::NoMatch;
        };
        if add.outputs.len() != 1 || add.inputs.len() != 2 {
            return Proposal::Reject("Add with other than two inputs and one output".into());
        }
        if lhs == rhs {
            return Proposal::Reject("Add reads the EyeLike output twice".into());
        }
        let a = if lhs == e { rhs } else { lhs };
        let (xt, at) = (&g.value(x).ty, &g.value(a).ty);
        if a != x && !xt.same_shape_as(at) {
            return Proposal::Reject(format!(
                "other Add input '{}' has shape {} but EyeLike input '{}' has {}: \
                 Add would broadcast, AddEyeLike does not",
                g.name(a),
                at,
                g.name(x),
                xt
            ));
        }
        if let Some(r) = xt.rank().filter(|&r| r != 2) {
            return Proposal::Reject(format!("EyeLike input has rank {r}, not 2"));
        }
        let Some(eye_attrs) = crate::ops::attrs_of::<EyeLike>(model, eye) else {
            return Proposal::Reject("EyeLike's attributes are not parsed".into());
        };
        let dtype_attr = eye_attrs.dtype;
        let e_type = dtype_attr.or(xt.dtype);
        match (e_type, at.dtype) {
            (Some(et), Some(ay)) if et == ay => {}
            (None, _) | (_, None) if a == x && dtype_attr.is_none() => {}
            (et, ay) => {
                let show = |d: Option<DType>| d.map(|d| d.to_string()).unwrap_or("unknown".into());
                return Proposal::Reject(format!(
                    "element types differ or are unknown: EyeLike output {}, other Add input {}",
                    show(et),
                    show(ay)
                ));
            }
        }
        let mut fused = Node::new("AddEyeLike", FUSELAB_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_AddEyeLike", add.label(add_id)));
        fused.inputs = vec![Some(a)];
        fused.outputs = vec![Some(y)];
        // EyeLike's attributes carry over (AddEyeLike's contract: docs/fused-ops.md).
        if eye_attrs.k != 0 {
            fused.set_attr(attr::int("k", eye_attrs.k));
        }
        if let Some(d) = eye_attrs.dtype {
            fused.set_attr(attr::int("dtype", d.0 as i64));
        }
        Proposal::Rewrite(Patch {
            remove: vec![id, add_id],
            add: vec![fused.into()],
            opsets: vec![(FUSELAB_DOMAIN.to_string(), 1)],
            ..Default::default()
        })
    }
}
