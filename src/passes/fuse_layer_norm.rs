//! Decomposed layer normalization → ai.onnx LayerNormalization (what torch exports below
//! opset 17).
//!
//! ```text
//!   before                                              after
//!
//!   x ─► ReduceMean(-1) ─► Sub ◄─ x                       x ─► LayerNormalization(axis=-1, eps)
//!                           │ d                                  ▲ scale      ▲ bias
//!              ┌────────────┴───────────┐
//!              ▼                        │
//!      Pow(d, 2) ─► ReduceMean(-1)      │
//!         ─► Add(eps) ─► Sqrt ─► Div(d, ·) ─► Mul(scale) ─► Add(bias) ─► y
//! ```
//! The Mul and the Add are optional (without Mul the scale is a constant of ones; without the
//! Add there is no bias). Either operand order of Add/Mul is accepted.
//!
//! Guards: every intermediate has exactly one reader (d exactly two: the Pow and the Div) and is
//! not a graph output; both ReduceMeans reduce only the last axis and keep it; the exponent is
//! the constant 2 and eps a non-negative constant; scale and bias are 1-D constants of the hidden
//! size, the statically known last dim of x (so Mul/Add do not broadcast x to another shape);
//! x is f32 (see `match_rest` for why not f64).
//!
//! LayerNormalization exists in ai.onnx from opset 17. A model importing opset 14–16 is raised
//! to 17: no op changed meaning between 14 and 17 except RoiAlign (a new default for
//! `coordinate_transformation_mode` in 16), so a model holding RoiAlign or a subgraph is left
//! alone, as is a model below opset 14.

use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::matchers::{
    fresh_node_name, is_scalar, last_dim, ones_vector, other_input, reduces_last_axis,
    require_vector, scalar_constant, sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;

/// The opset that has ai.onnx LayerNormalization.
pub const LAYER_NORM_OPSET: i64 = 17;
/// The lowest opset this rule raises to 17 (see the module comment).
const LOWEST_RAISED_OPSET: i64 = 14;

pub struct FuseLayerNorm;

impl Rule for FuseLayerNorm {
    fn name(&self) -> &'static str {
        "layer_norm"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["ReduceMean"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let mean = g.node(id);
        if !mean.is("ReduceMean") {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(m1)) = (mean.input(0), mean.output(0)) else {
            return Proposal::NoMatch;
        };
        // Only a ReduceMean that feeds Sub(x, ·) starts the pattern.
        let subtracts = |&c: &NodeId| {
            let n = g.node(c);
            n.is("Sub") && n.input(0) == Some(x) && n.input(1) == Some(m1)
        };
        if !g.consumers(m1).iter().any(subtracts) {
            return Proposal::NoMatch;
        }
        let sub_id = match sole_consumer_op(g, m1, "Sub", "mean") {
            Ok((id, _)) => id,
            Err(why) => return Proposal::Reject(why),
        };
        match match_rest(model, id, x, sub_id) {
            Ok(patch) => Proposal::Rewrite(patch),
            Err(why) => Proposal::Reject(why),
        }
    }
}

fn match_rest(model: &Model, mean_id: NodeId, x: ValueId, sub_id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let sub = g.node(sub_id);
    let d = sub.output(0).ok_or("Sub has no output")?;
    let dtype = g.value(x).ty.dtype;
    // f32 only: for f64 the default stash_type (1) would compute the statistics in f32, and
    // onnxruntime's CPU provider has no stash_type 11 (f64) LayerNormalization at opset 17.
    if dtype != Some(DType::F32) {
        return Err(format!(
            "'{}' is {}; LayerNormalization is fused for f32 only",
            g.name(x),
            dtype
                .map(|d| d.to_string())
                .unwrap_or("of unknown type".into())
        ));
    }
    let rank = g
        .value(x)
        .ty
        .rank()
        .ok_or_else(|| format!("rank of '{}' is unknown", g.name(x)))?;
    let hidden = last_dim(g, x)?;
    reduces_last_axis(model, g.node(mean_id), rank)?;

    // d feeds exactly Pow(d, 2) and Div(d, ·).
    if g.is_graph_output(d) {
        return Err(format!("'{}' is a graph output", g.name(d)));
    }
    let readers = g.consumers(d);
    let (pow, div) = match readers {
        [a, b] => {
            let (na, nb) = (g.node(*a), g.node(*b));
            if na.is("Pow") && nb.is("Div") {
                (*a, *b)
            } else if na.is("Div") && nb.is("Pow") {
                (*b, *a)
            } else {
                return Err(format!(
                    "'{}' feeds {} and {}, not Pow and Div",
                    g.name(d),
                    na.op_type,
                    nb.op_type
                ));
            }
        }
        _ => {
            return Err(format!(
                "'{}' has {} readers; the pattern needs exactly Pow and Div",
                g.name(d),
                readers.len()
            ))
        }
    };
    let pow_n = g.node(pow);
    if pow_n.input(0) != Some(d) || !pow_n.input(1).is_some_and(|e| is_scalar(model, e, 2.0)) {
        return Err("Pow exponent is not the constant 2".into());
    }
    let p = pow_n.output(0).ok_or("Pow has no output")?;
    let (var_id, var) = sole_consumer_op(g, p, "ReduceMean", "square")?;
    reduces_last_axis(model, var, rank)?;
    let v = var.output(0).ok_or("ReduceMean has no output")?;
    let (add_eps_id, add_eps) = sole_consumer_op(g, v, "Add", "variance")?;
    let eps_v = other_input(add_eps, v).ok_or("variance Add is not binary")?;
    let eps = scalar_constant(model, eps_v)
        .ok_or_else(|| format!("epsilon '{}' is not a constant scalar", g.name(eps_v)))?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(format!("epsilon {eps} is not a finite non-negative number"));
    }
    let ve = add_eps.output(0).ok_or("Add has no output")?;
    let (sqrt_id, sqrt) = sole_consumer_op(g, ve, "Sqrt", "variance + epsilon")?;
    let s = sqrt.output(0).ok_or("Sqrt has no output")?;
    let (div_id, div_n) = sole_consumer_op(g, s, "Div", "standard deviation")?;
    if div_id != div || div_n.input(0) != Some(d) || div_n.input(1) != Some(s) {
        return Err("Div does not compute (x - mean) / stddev".into());
    }
    let mut removed = vec![mean_id, sub_id, pow, var_id, add_eps_id, sqrt_id, div_id];
    let mut out = div_n.output(0).ok_or("Div has no output")?;

    // Optional Mul(scale) then Add(bias): absorbed only when the normalized value feeds them alone.
    let mut scale = None;
    let mut bias = None;
    if let Some((mul_id, s_v)) = affine_step(model, out, "Mul", hidden) {
        removed.push(mul_id);
        scale = Some(s_v);
        out = g.node(mul_id).output(0).ok_or("Mul has no output")?;
        if let Some((add_id, b_v)) = affine_step(model, out, "Add", hidden) {
            removed.push(add_id);
            bias = Some(b_v);
            out = g.node(add_id).output(0).ok_or("Add has no output")?;
        }
    }
    let opset = model.opset("").unwrap_or(1);
    let mut opsets = Vec::new();
    if opset < LAYER_NORM_OPSET {
        check_raise(model, opset)?;
        opsets.push((String::new(), LAYER_NORM_OPSET));
    }

    let mut patch = Patch {
        remove: removed,
        opsets,
        ..Default::default()
    };
    let scale = match scale {
        Some(s) => s.into(),
        None => {
            let ones = ones_vector(hidden, DType::F32)?;
            let name = g.fresh_name(&format!("{}_scale", g.name(out)));
            patch.new_initializer(&name, from_tensor(&name, &ones))
        }
    };
    let mut fused = NewNode::new("LayerNormalization", "");
    fused.name = fresh_node_name(g, &format!("{}_LayerNormalization", g.name(out)));
    fused.inputs = vec![Some(x.into()), Some(scale)];
    if let Some(b) = bias {
        fused.inputs.push(Some(b.into()));
    }
    fused.outputs = vec![Some(out.into())];
    fused.set_attr(crate::ir::attr::int("axis", -1));
    fused.set_attr(crate::ir::attr::float("epsilon", eps as f32));

    patch.add.push(fused);
    Ok(patch)
}

/// `v`'s sole reader when it is `op(v, c)` or `op(c, v)` with `c` a 1-D constant of `hidden`
/// elements: (that node, c).
fn affine_step(model: &Model, v: ValueId, op: &str, hidden: i64) -> Option<(NodeId, ValueId)> {
    let g = &model.graph;
    let id = sole_consumer(g, v).ok()?;
    let n = g.node(id);
    if !n.is(op) || n.outputs.len() != 1 {
        return None;
    }
    let c = other_input(n, v)?;
    require_vector(model, c, hidden, "").ok()?;
    Some((id, c))
}

/// Raising the default opset to 17 is safe for this model (see the module comment).
fn check_raise(model: &Model, opset: i64) -> Result<(), String> {
    if opset < LOWEST_RAISED_OPSET {
        return Err(format!(
            "the model imports ai.onnx opset {opset}; LayerNormalization needs 17 and raising \
             from below {LOWEST_RAISED_OPSET} is not supported"
        ));
    }
    if !model.proto.functions.is_empty() {
        return Err(format!(
            "raising opset {opset} to 17 is not checked for the model's local functions"
        ));
    }
    let g = &model.graph;
    for id in g.node_ids() {
        let n = g.node(id);
        if n.is("RoiAlign") {
            return Err(format!(
                "raising opset {opset} to 17 would change RoiAlign '{}'",
                n.label(id)
            ));
        }
        if n.has_subgraphs() {
            return Err(format!(
                "raising opset {opset} to 17 is not checked for subgraphs (node '{}')",
                n.label(id)
            ));
        }
    }
    Ok(())
}
