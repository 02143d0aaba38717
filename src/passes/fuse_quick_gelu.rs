//! `x · sigmoid(α·x)` → com.microsoft.QuickGelu(alpha = α): CLIP's GELU approximation
//! (α = 1.702) and SiLU / Swish (α = 1: the gate activation of every SwiGLU MLP — Llama, Qwen,
//! Mistral, Phi-3).
//!
//! ```text
//!   before                                        after
//!
//!   x ─► [Mul(α)] ─► Sigmoid ─► Mul(x, ·) ─► y     x ─► QuickGelu(alpha = α) ─► y
//!   └───────────────────────────────┘
//! ```
//! Either operand order of both Muls. Without the inner Mul α is 1.
//!
//! Guards: the scaled value and the sigmoid each have exactly one reader and are not graph
//! outputs; α is a finite rank-0 constant; the outer Mul multiplies by x itself (the same value,
//! so no broadcast can change the shape); x is float32 or float16 (onnxruntime's CPU QuickGelu kernel
//! runs both).

use crate::ir::model::MS_DOMAIN;
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::passes::matchers::{
    constant_value, fresh_node_name, other_input, produced_by, require_f32_or_f16, scalar_constant,
    sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct FuseQuickGelu;

impl Rule for FuseQuickGelu {
    fn name(&self) -> &'static str {
        "quick_gelu"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Sigmoid"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let sig = g.node(id);
        let (Some(u), Some(s)) = (sig.input(0), sig.output(0)) else {
            return Proposal::NoMatch;
        };
        // Only a sigmoid that some Mul multiplies back onto its input starts the pattern: the
        // unscaled x of `Sigmoid(Mul(x, α))`, else the sigmoid's own input (α = 1).
        let gates = |x: ValueId| {
            g.consumers(s).iter().any(|&c| {
                let n = g.node(c);
                n.is("Mul") && other_input(n, s) == Some(x)
            })
        };
        let candidates = [
            scaled(model, u).map(|(mul_id, x, a)| (x, a, Some(mul_id))),
            Some((u, 1.0, None)),
        ];
        let Some((x, alpha, scale_node)) = candidates.into_iter().flatten().find(|c| gates(c.0))
        else {
            return Proposal::NoMatch;
        };
        Proposal::from(fuse(model, id, x, alpha, scale_node).map(Some))
    }
}

/// `(Mul node, x, α)` when `u` is `Mul(x, α)` or `Mul(α, x)` with α a rank-0 constant and x not
/// constant.
fn scaled(model: &Model, u: ValueId) -> Option<(NodeId, ValueId, f64)> {
    let (id, n) = produced_by(&model.graph, u, "Mul")?;
    let (a, b) = (n.input(0)?, n.input(1)?);
    let (x, c) = if scalar_constant(model, b).is_some() {
        (a, b)
    } else {
        (b, a)
    };
    if constant_value(model, x).is_some() {
        return None;
    }
    Some((id, x, scalar_constant(model, c)?))
}

fn fuse(
    model: &Model,
    sig_id: NodeId,
    x: ValueId,
    alpha: f64,
    scale_node: Option<NodeId>,
) -> Result<Patch, String> {
    let g = &model.graph;
    let sig = g.node(sig_id);
    let mut remove = vec![sig_id];
    if let Some(mul_id) = scale_node {
        let u = sig.input(0).ok_or("Sigmoid has no input")?;
        if sole_consumer(g, u)? != sig_id {
            return Err(format!("'{}' is read elsewhere", g.name(u)));
        }
        remove.push(mul_id);
    }
    if !alpha.is_finite() {
        return Err(format!("alpha {alpha} is not finite"));
    }
    let s = sig.output(0).ok_or("Sigmoid has no output")?;
    let (gate_id, gate) = sole_consumer_op(g, s, "Mul", "sigmoid")?;
    if other_input(gate, s) != Some(x) {
        return Err(format!(
            "Mul '{}' does not multiply the sigmoid by its input",
            gate.label(gate_id)
        ));
    }
    require_f32_or_f16(g, x)?;
    remove.push(gate_id);
    let y = gate.output(0).ok_or("Mul has no output")?;
    let mut fused = Node::new("QuickGelu", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_QuickGelu", g.name(y)));
    fused.inputs = vec![Some(x)];
    fused.outputs = vec![Some(y)];
    fused.set_attr(crate::ir::attr::float("alpha", alpha as f32));
    Ok(Patch {
        remove,
        add: vec![fused.into()],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    })
}
