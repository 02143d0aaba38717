//! Hard-swish written out with ReLU6, `x · Clip(x + 3, 0, 6) / 6` → HardSwish (ai.onnx opset
//! ≥ 14), or below opset 14 `x · HardSigmoid(x, 1/6, 0.5)`: two nodes for four, one intermediate
//! for three. PaddleOCR's converter (paddle2onnx) and torch exports of `x * relu6(x + 3) / 6` at
//! opset 11–13 write it this way; MobileNetV3-style blocks put one after every Conv.
//!
//! ```text
//!   before                                                  after (opset ≥ 14)
//!
//!   x ─► Add(3) ─► Clip(0, 6) ─► Mul(x, ·) ─► Div(6) ─► y   x ─► HardSwish ─► y
//!   └───────────────────────────────┘
//!                                                           after (opset < 14)
//!   or x ─► Add(3) ─► Clip(0, 6) ─► Div(6) ─► Mul(x, ·) ─► y
//!                                                           x ─► HardSigmoid(1/6, 0.5) ─► Mul(x, ·) ─► y
//! ```
//! Either operand order of the Add and of the Mul by x; `Mul(1/6)` in place of `Div(6)`.
//!
//! Guards: the Add's, Clip's and scaled product's outputs each have exactly one reader and are
//! not graph outputs; the constants are 3, 0, 6, 6 (or 1/6) within `is_scalar`'s tolerance, each
//! of one element and rank 0 or at most the rank of the value it meets (so no broadcast changes
//! a shape; a Clip bound may be one element, as Clip allows); the Mul multiplies by x itself;
//! x is float32, or float16 at opset ≥ 14 (onnxruntime's CPU HardSigmoid is float32 only; its
//! HardSwish runs float16). The rule does not raise the model's opset: raising 11–13 to 14 would
//! change Squeeze, Unsqueeze, Split and the reductions, whose axes became inputs in 13.
//! The two forms agree up to rounding: `x · min(max(x/6 + 0.5, 0), 1)` against
//! `x · min(max(x + 3, 0), 6) / 6`.

use crate::ir::attr;
use crate::ir::{Model, NodeId, ValueId};
use crate::passes::matchers::{
    clip_bounds, fresh_node_name, is_splat, other_input, produced_by, require_f32,
    require_f32_or_f16, sole_consumer, sole_consumer_op, CONST_REL_TOL,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};

/// The ai.onnx opset that has HardSwish.
const HARD_SWISH_OPSET: i64 = 14;

pub struct FuseHardSwishClip;

impl Rule for FuseHardSwishClip {
    fn name(&self) -> &'static str {
        "hard_swish_clip"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Clip"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let clip = g.node(id);
        let Some(u) = clip.input(0) else {
            return Proposal::NoMatch;
        };
        // A candidate: a Clip of `x + 3` whose result, or that result scaled, some Mul multiplies
        // back onto x.
        let Some((add_id, x)) = plus_three(model, u) else {
            return Proposal::NoMatch;
        };
        let Some(r) = clip.output(0) else {
            return Proposal::NoMatch;
        };
        let reaches_x = |v: ValueId| {
            g.consumers(v).iter().any(|&c| {
                let n = g.node(c);
                n.is("Mul") && other_input(n, v) == Some(x)
            })
        };
        let scaled_first = g.consumers(r).iter().any(|&c| {
            let n = g.node(c);
            (n.is("Div") || n.is("Mul")) && n.output(0).is_some_and(reaches_x)
        });
        if !reaches_x(r) && !scaled_first {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id, add_id, x).map(Some))
    }
}

/// `(Add node, x)` when `u` is `Add(x, 3)` or `Add(3, x)` with 3 a constant that does not
/// broadcast x to another shape.
fn plus_three(model: &Model, u: ValueId) -> Option<(NodeId, ValueId)> {
    let (id, n) = produced_by(&model.graph, u, "Add")?;
    let (a, b) = (n.input(0)?, n.input(1)?);
    match (splat(model, a, 3.0, b), splat(model, b, 3.0, a)) {
        (false, true) => Some((id, a)),
        (true, false) => Some((id, b)),
        _ => None,
    }
}

/// True when `k` is a one-element constant near `want` that leaves `x`'s shape as it is:
/// rank 0, or no higher rank than x's known rank (paddle2onnx writes its constants as [1]).
fn splat(model: &Model, k: ValueId, want: f64, x: ValueId) -> bool {
    let rank = model.graph.value(x).ty.rank().unwrap_or(0);
    is_splat(model, k, want, rank)
}

/// The reader of `v` when it divides by 6 or multiplies by 1/6: (node, its output).
fn sixth_of(model: &Model, v: ValueId, what: &str) -> Result<(NodeId, ValueId), String> {
    let g = &model.graph;
    let id = sole_consumer(g, v).map_err(|why| format!("{what} {why}"))?;
    let n = g.node(id);
    let ok = match (n.op_type.as_str(), n.input(0), n.input(1)) {
        ("Div", Some(a), Some(k)) if n.is_onnx_domain() => a == v && splat(model, k, 6.0, v),
        ("Mul", Some(_), Some(_)) if n.is_onnx_domain() => {
            other_input(n, v).is_some_and(|k| splat(model, k, 1.0 / 6.0, v))
        }
        _ => false,
    };
    match n.output(0) {
        Some(y) if ok && n.outputs.len() == 1 => Ok((id, y)),
        _ => Err(format!(
            "{what} '{}' feeds {} '{}', not a division by 6",
            g.name(v),
            n.op_type,
            n.label(id)
        )),
    }
}

/// The reader of `v` when it is `Mul(x, v)` in either order: (node, its output).
fn times_x(model: &Model, v: ValueId, x: ValueId, what: &str) -> Result<(NodeId, ValueId), String> {
    let g = &model.graph;
    let (id, mul) = sole_consumer_op(g, v, "Mul", what)?;
    if other_input(mul, v) != Some(x) {
        return Err(format!(
            "Mul '{}' does not multiply {what} by '{}'",
            mul.label(id),
            g.name(x)
        ));
    }
    Ok((id, mul.output(0).ok_or("Mul has no output")?))
}

fn fuse(model: &Model, clip_id: NodeId, add_id: NodeId, x: ValueId) -> Result<Patch, String> {
    let g = &model.graph;
    let clip = g.node(clip_id);
    let u = clip.input(0).ok_or("Clip has no input")?;
    let r = clip.output(0).ok_or("Clip has no output")?;
    if sole_consumer(g, u)? != clip_id {
        return Err(format!("'{}' is read elsewhere", g.name(u)));
    }
    let (lo, hi) = clip_bounds(model, clip)?;
    if lo != 0.0 || (hi as f64 - 6.0).abs() > 6.0 * CONST_REL_TOL {
        return Err(format!(
            "Clip's bounds are {lo} and {hi}; hard-swish's ReLU6 has 0 and 6"
        ));
    }
    // x · r first, or r / 6 first: which reads the Clip decides.
    let first = g.node(sole_consumer(g, r).map_err(|why| format!("the clip {why}"))?);
    let (mid_id, last_id, y) = if other_input(first, r) == Some(x) && first.is("Mul") {
        let (mid_id, m) = times_x(model, r, x, "the clip")?;
        let (last_id, y) = sixth_of(model, m, "the product")?;
        (mid_id, last_id, y)
    } else {
        let (mid_id, s) = sixth_of(model, r, "the clip")?;
        let (last_id, y) = times_x(model, s, x, "the scaled clip")?;
        (mid_id, last_id, y)
    };
    let opset = model.opset("").unwrap_or(1);
    let remove = vec![add_id, clip_id, mid_id, last_id];
    if opset >= HARD_SWISH_OPSET {
        require_f32_or_f16(g, x)?;
        let mut fused = NewNode::new("HardSwish", "");
        fused.name = fresh_node_name(g, &format!("{}_HardSwish", g.name(y)));
        fused.inputs = vec![Some(x.into())];
        fused.outputs = vec![Some(y.into())];
        return Ok(Patch {
            remove,
            add: vec![fused],
            ..Default::default()
        });
    }
    require_f32(g, x)?;
    let mut patch = Patch {
        remove,
        ..Default::default()
    };
    let ty = g.value(x).ty.clone();
    let gate = patch.new_value(&g.fresh_name(&format!("{}_hard_sigmoid", g.name(y))), ty);
    let mut hs = NewNode::new("HardSigmoid", "");
    hs.name = fresh_node_name(g, &format!("{}_HardSigmoid", g.name(y)));
    hs.inputs = vec![Some(x.into())];
    hs.outputs = vec![Some(gate)];
    hs.set_attr(attr::float("alpha", 1.0 / 6.0));
    hs.set_attr(attr::float("beta", 0.5));
    let mut mul = NewNode::new("Mul", "");
    mul.name = fresh_node_name(g, &format!("{}_HardSwish", g.name(y)));
    mul.inputs = vec![Some(x.into()), Some(gate)];
    mul.outputs = vec![Some(y.into())];
    // The gate is the fused node (added last: what the report counts and the page highlights);
    // the Mul is its helper. The engine orders nodes by their edges, not by this list.
    patch.add.extend([mul, hs]);
    Ok(patch)
}
