//! Erf-form GELU → com.microsoft.Gelu.
//!
//! ```text
//!   before                                                   after
//!
//!   x ─► Div(√2) ─► Erf ─► Add(1) ─► Mul(x) ─► Mul(0.5) ─► y     x ─► Gelu ─► y
//! ```
//! `0.5 * x * (1 + erf(x / √2))`: the division may be `Mul(1/√2)`; the final product may be in
//! any order or association (`Mul(Mul(x, 0.5), ·)` too), see `matchers::half_x_product`.
//!
//! Guards: each intermediate is read once and is not a graph output; √2, 1/√2, 1 and 0.5 are
//! constants within `CONST_REL_TOL`; x is float32 or float16 (onnxruntime's CPU Gelu
//! kernel runs both).

use crate::ir::model::MS_DOMAIN;
use crate::ir::{Model, Node, NodeId};
use crate::passes::matchers::{
    fresh_node_name, half_x_product, is_scalar, other_input, require_f32_or_f16, scaled_by,
    sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct FuseGelu;

impl Rule for FuseGelu {
    fn name(&self) -> &'static str {
        "gelu"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Erf"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let erf = g.node(id);
        if !erf.is("Erf") {
            return Proposal::NoMatch;
        }
        let Some(scaled) = erf.input(0) else {
            return Proposal::NoMatch;
        };
        let Some(pid) = g.producer(scaled) else {
            return Proposal::NoMatch;
        };
        let pre = g.node(pid);
        if !(pre.is("Div") || pre.is("Mul")) {
            return Proposal::NoMatch;
        }
        // x / √2 (x first) or x * (1/√2) (either order).
        let x = if pre.is("Div") {
            match (pre.input(0), pre.input(1)) {
                (Some(x), Some(c)) if is_scalar(model, c, std::f64::consts::SQRT_2) => x,
                _ => return Proposal::Reject("Erf input is not x / sqrt(2)".into()),
            }
        } else {
            match scaled_by(model, scaled, "Mul", std::f64::consts::FRAC_1_SQRT_2) {
                Ok((_, x)) => x,
                Err(_) => return Proposal::Reject("Erf input is not x * (1/sqrt(2))".into()),
            }
        };
        match propose(model, id, pid, x) {
            Ok(p) => Proposal::Rewrite(p),
            Err(why) => Proposal::Reject(why),
        }
    }
}

fn propose(
    model: &Model,
    erf_id: NodeId,
    pre_id: NodeId,
    x: crate::ir::ValueId,
) -> Result<Patch, String> {
    let g = &model.graph;
    require_f32_or_f16(g, x)?;
    let scaled = g.node(pre_id).output(0).ok_or("no output")?;
    sole_consumer_op(g, scaled, "Erf", "x / sqrt(2)")?;
    let e = g.node(erf_id).output(0).ok_or("Erf has no output")?;
    let (add_id, add) = sole_consumer_op(g, e, "Add", "erf")?;
    let one = other_input(add, e).ok_or("Add is not binary")?;
    if !is_scalar(model, one, 1.0) {
        return Err(format!("Add adds '{}', not the constant 1", g.name(one)));
    }
    let v = add.output(0).ok_or("Add has no output")?;
    let (muls, y) = half_x_product(model, v, x)?;
    let mut fused = Node::new("Gelu", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_Gelu", g.name(y)));
    fused.inputs = vec![Some(x)];
    fused.outputs = vec![Some(y)];
    let mut remove = vec![pre_id, erf_id, add_id];
    remove.extend(muls);
    Ok(Patch {
        remove,
        add: vec![fused.into()],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    })
}
