//! Gemm followed by an activation → com.microsoft.FusedGemm (onnxruntime's contrib op: Gemm's
//! inputs and attributes plus `activation`). BERT's pooler is `Tanh(Gemm(·))`.
//!
//! ```text
//!   before                                   after
//!
//!   A, B, C ─► Gemm ─► t ─► Tanh ─► y          A, B, C ─► FusedGemm(activation = "Tanh") ─► y
//! ```
//! Guards: the activation is Relu, Tanh or Sigmoid (the ones whose FusedGemm form has no extra
//! parameters); t is read only by it and is not a graph output; float32 (onnxruntime's FusedGemm
//! kernel is float only); the Gemm has its C input (FusedGemm's schema requires it).

use crate::ir::model::MS_DOMAIN;
use crate::ir::{attr, Model, Node, NodeId};
use crate::passes::matchers::{fresh_node_name, produced_by, require_f32, sole_consumer};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

/// Activations FusedGemm takes without parameters.
pub const ACTIVATIONS: &[&str] = &["Relu", "Tanh", "Sigmoid"];

pub struct FuseGemmActivation;

impl Rule for FuseGemmActivation {
    fn name(&self) -> &'static str {
        "gemm_activation"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(ACTIVATIONS)
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let act = g.node(id);
        if !act.is_onnx_domain() || !ACTIVATIONS.contains(&act.op_type.as_str()) {
            return Proposal::NoMatch;
        }
        let (Some(t), Some(y)) = (act.input(0), act.output(0)) else {
            return Proposal::NoMatch;
        };
        let Some((gemm_id, gemm)) = produced_by(g, t, "Gemm") else {
            return Proposal::NoMatch;
        };
        if let Err(why) = sole_consumer(g, t) {
            return Proposal::Reject(format!("Gemm output {why}"));
        }
        if let Err(why) = require_f32(g, t) {
            return Proposal::Reject(why);
        }
        if gemm.input(2).is_none() {
            return Proposal::Reject(format!(
                "Gemm '{}' has no C input, which FusedGemm requires",
                gemm.label(gemm_id)
            ));
        }
        let mut fused = Node::new("FusedGemm", MS_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_FusedGemm", g.name(y)));
        fused.inputs = gemm.inputs.clone();
        fused.outputs = vec![Some(y)];
        fused.set_attributes(gemm.attributes().to_vec());
        fused.set_attr(attr::string("activation", &act.op_type));
        Proposal::Rewrite(Patch {
            remove: vec![gemm_id, id],
            add: vec![fused.into()],
            opsets: vec![(MS_DOMAIN.to_string(), 1)],
            ..Default::default()
        })
    }
}
