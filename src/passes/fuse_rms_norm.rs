//! Decomposed RMS normalization (Llama, Qwen, Mistral, Gemma, T5) → SimplifiedLayerNormalization
//! (onnxruntime's contract, default domain), or the standard RMSNormalization when the model
//! imports ai.onnx opset 23 or later.
//!
//! ```text
//!   before                                                         after
//!
//!   x ─► [Cast f32] ─► xf ─► Pow(·, 2) | Mul(xf, xf) ─► ReduceMean(-1)   x ─► SimplifiedLayer-
//!                      │     ─► Add(eps) ─► Sqrt ─► Div(1, ·) | Reciprocal      Normalization(eps)
//!                      │                                  │ r                     ▲ weight
//!                      └──────────────► Mul(xf, r) ◄──────┘                       │
//!                                         ─► [Cast back] ─► Mul(weight) ─► y      └─► y
//! ```
//! Also `Div(xf, Sqrt(...))` in place of the reciprocal and the Mul. The Casts are absorbed as a
//! pair: `x → Cast(f32)` in front and `Cast(x's type)` after the normalization (the mixed-precision
//! form transformers exports for float16 models; the fused op accumulates in f32, stash_type 1).
//! Without the back Cast the front one stays and the norm starts at its output. The weight Mul
//! is optional (without it the scale is a constant of ones); either operand order is accepted.
//!
//! Guards: every intermediate has exactly one reader and is not a graph output (the front Cast's
//! output may be read only by the pattern); the ReduceMean reduces only the last axis and keeps
//! it; the exponent is the constant 2, the numerator of Div(1, ·) the constant 1, eps a finite
//! non-negative constant; the weight is a 1-D constant of the hidden size (the statically known
//! last dim) of x's element type; x is float32 or float16 (float64 statistics would need
//! stash_type 11, which onnxruntime's CPU kernel lacks); x is not `x0 - ReduceMean(x0)` (the
//! inside of a decomposed LayerNormalization: `layer_norm` fuses the whole).

use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::matchers::{
    fresh_node_name, is_scalar, last_dim, ones_vector, other_input, produced_by, reduces_last_axis,
    require_vector, scalar_constant, sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;

/// The ai.onnx opset that has RMSNormalization.
pub const RMS_NORM_OPSET: i64 = 23;

pub struct FuseRmsNorm;

impl Rule for FuseRmsNorm {
    fn name(&self) -> &'static str {
        "rms_norm"
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
        let Some(sq) = mean.input(0) else {
            return Proposal::NoMatch;
        };
        // Only a mean of squares starts the pattern.
        let Some(xf) = square_of(model, sq) else {
            return Proposal::NoMatch;
        };
        Proposal::from(match_rest(model, id, sq, xf).map(Some))
    }
}

/// `x` when `v` is `Pow(x, 2)` or `Mul(x, x)`.
fn square_of(model: &Model, v: ValueId) -> Option<ValueId> {
    let g = &model.graph;
    if let Some((_, n)) = produced_by(g, v, "Pow") {
        return n
            .input(1)
            .filter(|&e| is_scalar(model, e, 2.0))
            .and(n.input(0));
    }
    let (_, n) = produced_by(g, v, "Mul")?;
    (n.inputs.len() == 2 && n.input(0) == n.input(1))
        .then(|| n.input(0))
        .flatten()
}

fn match_rest(model: &Model, mean_id: NodeId, sq: ValueId, xf: ValueId) -> Result<Patch, String> {
    let g = &model.graph;
    let square_id = g.producer(sq).ok_or("square has no producer")?;
    if sole_consumer(g, sq)? != mean_id {
        return Err(format!("'{}' is read elsewhere", g.name(sq)));
    }
    if let Some((_, sub)) = produced_by(g, xf, "Sub") {
        let centred = sub.input(1).and_then(|m| produced_by(g, m, "ReduceMean"));
        if centred.is_some_and(|(_, m)| m.input(0) == sub.input(0)) {
            return Err(format!(
                "'{}' is x - mean(x): the inside of a LayerNormalization",
                g.name(xf)
            ));
        }
    }
    let rank = g
        .value(xf)
        .ty
        .rank()
        .ok_or_else(|| format!("rank of '{}' is unknown", g.name(xf)))?;
    let hidden = last_dim(g, xf)?;
    reduces_last_axis(model, g.node(mean_id), rank)?;

    let mean = g.node(mean_id);
    let ms = mean.output(0).ok_or("ReduceMean has no output")?;
    let (add_id, add) = sole_consumer_op(g, ms, "Add", "mean square")?;
    let eps_v = other_input(add, ms).ok_or("epsilon Add is not binary")?;
    let eps = scalar_constant(model, eps_v)
        .ok_or_else(|| format!("epsilon '{}' is not a constant scalar", g.name(eps_v)))?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(format!("epsilon {eps} is not a finite non-negative number"));
    }
    let v = add.output(0).ok_or("Add has no output")?;
    let (sqrt_id, sqrt) = sole_consumer_op(g, v, "Sqrt", "mean square + epsilon")?;
    let s = sqrt.output(0).ok_or("Sqrt has no output")?;
    let mut remove = vec![square_id, mean_id, add_id, sqrt_id];
    let n = scale_by_inverse(model, s, xf, &mut remove)?;

    // x: the front Cast's input when the back Cast undoes it and the Cast feeds only the pattern.
    let mut x = xf;
    let mut out = n;
    if let Some((cast_id, cast)) = produced_by(g, xf, "Cast") {
        let x0 = cast.input(0).ok_or("Cast has no input")?;
        let only_pattern =
            !g.is_graph_output(xf) && g.consumers(xf).iter().all(|c| remove.contains(c));
        let back = sole_consumer_op(g, n, "Cast", "normalized value")
            .ok()
            .filter(|(_, b)| {
                b.output(0)
                    .is_some_and(|o| g.value(o).ty.dtype == g.value(x0).ty.dtype)
            });
        if let (true, Some((back_id, b))) = (only_pattern, back) {
            remove.extend([cast_id, back_id]);
            x = x0;
            out = b.output(0).ok_or("Cast has no output")?;
        }
    }
    let dtype = g.value(x).ty.dtype;
    if !matches!(dtype, Some(DType::F32 | DType::F16)) {
        return Err(format!(
            "'{}' is {}; the RMS norm is fused for float32 and float16",
            g.name(x),
            dtype.map_or("of unknown type".into(), |d| d.to_string())
        ));
    }

    // The weight: out's sole reader Mul(out, w) with w a constant vector of x's type.
    let mut scale = None;
    if let Ok((mul_id, mul)) = sole_consumer_op(g, out, "Mul", "normalized value") {
        let w = other_input(mul, out).filter(|&w| w != out);
        let fits = |w: ValueId| {
            require_vector(model, w, hidden, "weight").is_ok() && g.value(w).ty.dtype == dtype
        };
        if let Some(w) = w.filter(|&w| fits(w)) {
            remove.push(mul_id);
            scale = Some(w);
            out = mul.output(0).ok_or("Mul has no output")?;
        }
    }
    if g.value(out).ty.dtype != dtype {
        return Err(format!("'{}' is not of x's element type", g.name(out)));
    }

    let opset = model.opset("").unwrap_or(1);
    let mut patch = Patch {
        remove,
        ..Default::default()
    };
    let scale = match scale {
        Some(w) => w.into(),
        None => {
            let ones = ones_vector(hidden, dtype.unwrap_or(DType::F32))?;
            let name = g.fresh_name(&format!("{}_scale", g.name(out)));
            patch.new_initializer(&name, from_tensor(&name, &ones))
        }
    };
    let op = if opset >= RMS_NORM_OPSET {
        "RMSNormalization"
    } else {
        "SimplifiedLayerNormalization"
    };
    let mut fused = NewNode::new(op, "");
    fused.name = fresh_node_name(g, &format!("{}_{op}", g.name(out)));
    fused.inputs = vec![Some(x.into()), Some(scale)];
    fused.outputs = vec![Some(out.into())];
    fused.set_attr(crate::ir::attr::int("axis", -1));
    fused.set_attr(crate::ir::attr::float("epsilon", eps as f32));
    patch.add.push(fused);
    Ok(patch)
}

/// From the root mean square `s`, the value `xf / s`: `Mul(xf, Div(1, s))`,
/// `Mul(xf, Reciprocal(s))` (either Mul operand order) or `Div(xf, s)`. Pushes the nodes it
/// crosses onto `remove`.
fn scale_by_inverse(
    model: &Model,
    s: ValueId,
    xf: ValueId,
    remove: &mut Vec<NodeId>,
) -> Result<ValueId, String> {
    let g = &model.graph;
    let id = sole_consumer(g, s).map_err(|why| format!("root mean square {why}"))?;
    let n = g.node(id);
    remove.push(id);
    let out = n.output(0).ok_or("no output")?;
    if n.is("Div") && n.input(0) == Some(xf) && n.input(1) == Some(s) {
        return Ok(out);
    }
    let inverse = (n.is("Div") && n.input(1) == Some(s))
        && n.input(0).is_some_and(|one| is_scalar(model, one, 1.0))
        || n.is("Reciprocal");
    if !inverse {
        return Err(format!(
            "root mean square '{}' feeds {} '{}', not Div or Reciprocal",
            g.name(s),
            n.op_type,
            n.label(id)
        ));
    }
    let (mul_id, mul) = sole_consumer_op(g, out, "Mul", "inverse root mean square")?;
    if other_input(mul, out) != Some(xf) {
        return Err(format!(
            "Mul '{}' does not multiply x by the inverse root mean square",
            mul.label(mul_id)
        ));
    }
    remove.push(mul_id);
    mul.output(0).ok_or_else(|| "Mul has no output".into())
}
