//! Rotary position embedding in the rotate-half form (Llama, Qwen, Mistral, GPT-NeoX exports,
//! legacy and dynamo; float32 and float16) → com.microsoft.RotaryEmbedding, for q and k alike.
//! The interleaved form (GPT-J) is the same rule's other match: `fuse_rotary_interleaved`.
//!
//! ```text
//!   before                                                      after
//!
//!   x ─┬─► Mul(·, cos4) ────────────────────────┐               x ─► RotaryEmbedding ─► y
//!      ├─► Slice[0:h] ─────────────┐            Add ─► y              ▲ [0] (start offset)
//!      └─► Slice[h:] ─► Neg ─► Concat(·, ·) ─► Mul(·, sin4) ┘          ▲ cos_cache, sin_cache
//!
//!   cos4 = [Cast] Unsqueeze(C, 1)                                 cos_cache = [Cast to x's type]
//!   C = [Cast] [Mul(·, s)] [Cast] Cos([Cast] Concat(F, F))                  Reshape(C[..., :h], [-1, h])
//! ```
//! x is one head-split projection `[batch, heads, seq, d]` (d even, h = d/2). The angle tables the
//! model computes, `C = Cos(Concat(F, F))` (optionally scaled by a constant, as transformers'
//! `attention_scaling`), are `[1, seq, d]` with equal halves. The fused op reads their first half
//! as its caches, one row per token, with position ids given as the start offset `[0]` (token s
//! reads row s). That is exact whatever F holds, so the positions need no proof; the tables stay
//! computed once per model and are shared by every layer (the helper Slice/Reshape nodes of each
//! site are equal and `cse` merges them).
//!
//! Mixed precision: onnxruntime's op takes one type T for x and both caches. A float Cast may sit
//! on the table anywhere in `[...]` above (a float16 export casts float32 tables to x's type);
//! rounding is elementwise, so the halves stay equal. A cache whose table C is not x's type gets
//! one Cast to it after the Reshape (the values x was multiplied by); one that is (a float16
//! table, or the model's own Cast below the Unsqueeze) is used as it is.
//!
//! Guards: the Slices cut the last axis of x at exactly h with step 1 (the second to its end);
//! every removed intermediate is single-use; the Concat joins `-x[h:]` then `x[:h]` on the last
//! axis; both tables are `Unsqueeze(·, axes [1])` (optionally then a float Cast) of rank-3 values
//! whose first dim is 1, whose second is x's seq dim (the same known or symbolic dim: a table that
//! broadcast along seq would not be a per-token cache), and whose last is d; each is a Cos / Sin
//! (the sine one Sin) of `Concat(F, F)` on the last axis, optionally times a rank-0 constant,
//! through float Casts only; x and C are float32 or float16 (onnxruntime's CPU kernels; its
//! schema lists bfloat16 too, which no CPU kernel runs).

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::matchers::{
    cast, concat_axis, constant_value, fresh_node_name, other_input, produced_by,
    require_f32_or_f16, scalar_constant, slice_params, sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};
use crate::tensor::{DType, Tensor};

pub struct FuseRotary;

impl Rule for FuseRotary {
    fn name(&self) -> &'static str {
        "rotary"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Neg"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let neg = g.node(id);
        // The interleaved form ("rotate every two") has its own file.
        if super::fuse_rotary_interleaved::is_interleaved(model, id) {
            return Proposal::from(super::fuse_rotary_interleaved::fuse(model, id).map(Some));
        }
        // Only Neg(Slice(x)) read by a Concat starts the rotate-half pattern.
        let Some(x2) = neg.input(0) else {
            return Proposal::NoMatch;
        };
        let Some((_, s2)) = produced_by(g, x2, "Slice") else {
            return Proposal::NoMatch;
        };
        let Some(x) = s2.input(0) else {
            return Proposal::NoMatch;
        };
        let feeds_concat = neg
            .output(0)
            .is_some_and(|v| g.consumers(v).iter().any(|&c| g.node(c).is("Concat")));
        if !feeds_concat {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id, x).map(Some))
    }
}

fn fuse(model: &Model, neg_id: NodeId, x: ValueId) -> Result<Patch, String> {
    let g = &model.graph;
    // onnxruntime's CPU kernel is registered for float and float16 only (its schema also lists
    // bfloat16, which the session then refuses: no kernel).
    let dtype = require_f32_or_f16(g, x)?;
    let ty = &g.value(x).ty;
    let shape = ty
        .shape
        .as_deref()
        .filter(|s| s.len() == 4)
        .ok_or_else(|| {
            format!(
                "'{}' is not a 4-D [batch, heads, seq, head] tensor",
                g.name(x)
            )
        })?;
    let d = match shape[3] {
        Dim::Known(d) if d > 0 && d % 2 == 0 => d,
        _ => {
            return Err(format!(
                "head size of '{}' is not a known even number",
                g.name(x)
            ))
        }
    };
    let h = d / 2;
    let last = |a: i64| a == -1 || a == 3;

    // x2 = x[..., h:], Neg, Concat(-x2, x1) with x1 = x[..., :h].
    let neg = g.node(neg_id);
    let x2 = neg.input(0).ok_or("Neg has no input")?;
    let s2 = g.producer(x2).ok_or("no Slice")?;
    match slice_params(model, g.node(s2)) {
        Some((a, start, end, 1)) if last(a) && start == h && end >= d => {}
        _ => return Err("the second half is not x[..., h:] with constant bounds".into()),
    }
    if sole_consumer(g, x2)? != neg_id {
        return Err(format!("'{}' is read elsewhere", g.name(x2)));
    }
    let nx2 = neg.output(0).ok_or("Neg has no output")?;
    let (cat_id, cat) = sole_consumer_op(g, nx2, "Concat", "-x[h:]")?;
    let cat_axis = concat_axis(model, cat);
    if cat.inputs.len() != 2 || cat.input(0) != Some(nx2) || !last(cat_axis) {
        return Err("the Concat does not join (-x[h:], x[:h]) on the last axis".into());
    }
    let x1 = cat.input(1).ok_or("Concat input")?;
    let (s1, s1n) = produced_by(g, x1, "Slice").ok_or("x[:h] is not a Slice")?;
    match slice_params(model, s1n) {
        Some((a, 0, end, 1)) if last(a) && end == h && s1n.input(0) == Some(x) => {}
        _ => return Err("the first half is not x[..., :h] with constant bounds".into()),
    }
    if sole_consumer(g, x1)? != cat_id {
        return Err(format!("'{}' is read elsewhere", g.name(x1)));
    }

    let rot = cat.output(0).ok_or("Concat has no output")?;
    let sum = rotary_sum(g, x, rot, "rotate_half(x)")?;
    let cos_c = table(model, sum.cos4, "Cos", &shape[2], d)?;
    let sin_c = table(model, sum.sin4, "Sin", &shape[2], d)?;
    let y = sum.y;

    let mut remove = vec![s1, s2, neg_id, cat_id];
    remove.extend(sum.nodes);
    let mut patch = Patch {
        remove,
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let zero = shared_ints(model, &mut patch, "rotary_start", &[0]);
    let ends = shared_ints(model, &mut patch, &format!("rotary_half_{h}"), &[h]);
    let axes = shared_ints(model, &mut patch, "rotary_last_axis", &[-1]);
    let rows = shared_ints(model, &mut patch, &format!("rotary_rows_{h}"), &[-1, h]);
    let mut caches = Vec::new();
    for (c, what) in [(cos_c, "cos"), (sin_c, "sin")] {
        let base = format!("{}_{what}_cache", g.name(c));
        // The table's own type (checked float by `table`); the op wants x's.
        let c_dtype = g.value(c).ty.dtype;
        let half_ty = TensorType {
            dtype: c_dtype,
            shape: Some(vec![Dim::Known(1), shape[2].clone(), Dim::Known(h)]),
        };
        let half = patch.new_value(&g.fresh_name(&format!("{base}_half")), half_ty);
        let cache_shape = Some(vec![shape[2].clone(), Dim::Known(h)]);
        let cache_ty = TensorType {
            dtype: c_dtype,
            shape: cache_shape.clone(),
        };
        let cache = patch.new_value(&g.fresh_name(&base), cache_ty);
        let mut slice = NewNode::new("Slice", "");
        slice.name = fresh_node_name(g, &format!("{base}_Slice"));
        slice.inputs = vec![Some(c.into()), Some(zero), Some(ends), Some(axes)];
        slice.outputs = vec![Some(half)];
        let mut reshape = NewNode::new("Reshape", "");
        reshape.name = fresh_node_name(g, &format!("{base}_Reshape"));
        reshape.inputs = vec![Some(half), Some(rows)];
        reshape.outputs = vec![Some(cache)];
        patch.add.extend([slice, reshape]);
        // A float32 table rounded to x's float16 (or the reverse) as the model's own Cast did:
        // Cast commutes with the Slice and Reshape, so the values are the ones x was multiplied by.
        let cache = if c_dtype == Some(dtype) {
            cache
        } else {
            let name = format!("{base}_{}", dtype.name());
            cast(g, &mut patch, cache, dtype, cache_shape, &name)
        };
        caches.push(cache);
    }
    let mut fused = NewNode::new("RotaryEmbedding", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_RotaryEmbedding", g.name(y)));
    fused.inputs = vec![Some(x.into()), Some(zero), Some(caches[0]), Some(caches[1])];
    fused.outputs = vec![Some(y.into())];
    fused.set_attr(crate::ir::attr::int("interleaved", 0));
    patch.add.push(fused);
    Ok(patch)
}

/// `y = x · cos4 + rot · sin4`, read from the rotated value `rot` (either operand order of the
/// Muls and the Add): both forms of the rule end so.
pub(super) struct RotarySum {
    pub cos4: ValueId,
    pub sin4: ValueId,
    pub y: ValueId,
    /// The two Muls and the Add.
    pub nodes: [NodeId; 3],
}

/// The sum after `rot` (`what` names it in the reasons): rot's sole reader a Mul by sin4, that
/// Mul's sole reader an Add whose other addend is x times cos4, read by nothing else.
pub(super) fn rotary_sum(
    g: &Graph,
    x: ValueId,
    rot: ValueId,
    what: &str,
) -> Result<RotarySum, String> {
    let (sin_mul_id, sin_mul) = sole_consumer_op(g, rot, "Mul", what)?;
    let sin4 = other_input(sin_mul, rot).ok_or("Mul is not binary")?;
    let b = sin_mul.output(0).ok_or("Mul has no output")?;
    let (add_id, add) = sole_consumer_op(g, b, "Add", &format!("{what}·sin"))?;
    let a = other_input(add, b).ok_or("Add is not binary")?;
    let (cos_mul_id, cos_mul) = produced_by(g, a, "Mul").ok_or("the other addend is not a Mul")?;
    let cos4 = other_input(cos_mul, x).ok_or("the other addend is not x times a table")?;
    if sole_consumer(g, a)? != add_id {
        return Err(format!("'{}' is read elsewhere", g.name(a)));
    }
    Ok(RotarySum {
        cos4,
        sin4,
        y: add.output(0).ok_or("Add has no output")?,
        nodes: [sin_mul_id, cos_mul_id, add_id],
    })
}

/// The rank-3 `[1, seq, d]` table C of `t4 = Unsqueeze(C, [1])` (or of a float Cast of that
/// Unsqueeze), when C is `trig(Concat(F, F))` on the last axis, optionally times a rank-0
/// constant, with float Casts anywhere between C and the Concat: its two halves are equal.
fn table(model: &Model, t4: ValueId, trig: &str, seq: &Dim, d: i64) -> Result<ValueId, String> {
    let g = &model.graph;
    let (_, unsq) = produced_by(g, through_casts(g, t4), "Unsqueeze")
        .ok_or_else(|| format!("the {trig} table '{}' is not an Unsqueeze", g.name(t4)))?;
    let opset = model.opset("").unwrap_or(1);
    if crate::ops::infer::axes_of(g, unsq, opset).as_deref() != Some(&[1]) {
        return Err(format!("the {trig} table is not unsqueezed at axis 1"));
    }
    let c = unsq.input(0).ok_or("Unsqueeze has no input")?;
    let fits = matches!(g.value(c).ty.shape.as_deref(),
        Some([Dim::Known(1), s, Dim::Known(w)]) if s == seq && *w == d && !matches!(s, Dim::Unknown));
    if !fits {
        return Err(format!(
            "the {trig} table '{}' {} is not [1, seq, {d}] with x's seq dim",
            g.name(c),
            g.value(c).ty
        ));
    }
    require_f32_or_f16(g, c)?;
    let mut v = through_casts(g, c);
    if let Some((_, m)) = produced_by(g, v, "Mul") {
        let k = [m.input(0), m.input(1)]
            .into_iter()
            .flatten()
            .find(|&k| scalar_constant(model, k).is_some())
            .ok_or_else(|| format!("the {trig} table is scaled by a non-constant"))?;
        v = through_casts(g, other_input(m, k).ok_or("Mul is not binary")?);
    }
    let (_, f) = produced_by(g, v, trig)
        .ok_or_else(|| format!("the {trig} table is not computed by {trig}"))?;
    let arg = through_casts(g, f.input(0).ok_or("no input")?);
    let (_, cat) = produced_by(g, arg, "Concat")
        .ok_or_else(|| format!("the {trig} argument is not Concat(F, F)"))?;
    let axis = concat_axis(model, cat);
    let doubled =
        cat.inputs.len() == 2 && cat.input(0) == cat.input(1) && (axis == -1 || axis == 2);
    if !doubled {
        return Err(format!(
            "the {trig} argument is not Concat(F, F) on the last axis"
        ));
    }
    Ok(c)
}

/// `v` with the float-to-float Casts that produce it stepped over: rounding is elementwise, so
/// it keeps equal halves equal (mixed-precision exports cast the tables to x's type).
fn through_casts(g: &Graph, mut v: ValueId) -> ValueId {
    let float =
        |d: Option<DType>| matches!(d, Some(DType::F16 | DType::BF16 | DType::F32 | DType::F64));
    while let Some(src) = produced_by(g, v, "Cast").and_then(|(_, c)| c.input(0)) {
        if !float(g.value(src).ty.dtype) || !float(g.value(v).ty.dtype) {
            break;
        }
        v = src;
    }
    v
}

/// `shared_constant` of the 1-D int64 `v`.
pub(super) fn shared_ints(model: &Model, patch: &mut Patch, name: &str, v: &[i64]) -> ValueRef {
    let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(vec![v.len()], v.to_vec()).expect("1-D"));
    shared_constant(model, patch, name, t)
}

/// The constant called `name` when the graph has it with these contents (an earlier site made
/// it), else a new initializer of that name.
fn shared_constant(model: &Model, patch: &mut Patch, name: &str, t: Tensor) -> ValueRef {
    let g = &model.graph;
    if let Some(v) = g.find(name) {
        if constant_value(model, v).is_some_and(|c| *c == t) {
            return v.into();
        }
    }
    let name = if g.find(name).is_some() {
        g.fresh_name(name)
    } else {
        name.to_string()
    };
    patch.new_initializer(&name, from_tensor(&name, &t))
}
