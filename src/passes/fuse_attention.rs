//! Multi-head self-attention → com.microsoft.Attention (onnxruntime's contrib op). Anchored on
//! the Softmax.
//!
//! ```text
//!   before (BERT's encoder, as torch exports it)                  after
//!
//!        ┌─► MatMul(Wq) ─► Add(bq) ─► Reshape[B,S,N,D] ─► Transpose(0,2,1,3) ─┐
//!   X ───┼─► MatMul(Wk) ─► Add(bk) ─► Reshape[B,S,N,D] ─► Transpose(0,2,3,1) ─┴► MatMul ─► Mul(c) ─┐
//!        └─► MatMul(Wv) ─► Add(bv) ─► Reshape[B,S,N,D] ─► Transpose(0,2,1,3) ─┐                   │
//!                                                                            │    M ─► Add ◄──────┘
//!                                                                            │          │
//!                                                                            │       Softmax(-1)
//!                                                                            ▼          │
//!           Y ◄─ Reshape[B,S,N·D] ◄─ Transpose(0,2,1,3) ◄─────────────────── MatMul ◄───┘
//!
//!   X ─► Attention(W = [Wq|Wk|Wv], b = [bq|bk|bv], mask_index = Cast(Cast(A, bool), int32);
//!                  num_heads = N, scale = c, mask_filter_value = F) ─► Y
//! ```
//!
//! Guards: every intermediate is read once and is not a graph output; float32, or float16 with
//! float16 weights kept as they are; Q, K and V project the same X with 2-D constant weights of
//! one width N·D (biases 1-D constants of that width, or none); a projection scaled by a scalar
//! constant, `(X·W + b)·c` as Whisper's and BART's query is, folds c into `scale` (q's or k's; a
//! scaled V is refused); the Reshapes split exactly the last axis into [N, D] (checked on inferred shapes, with
//! X's batch and sequence dims); the perms are the ones drawn; Softmax runs over the last axis;
//! the scale is a scalar constant (Mul by c, Div by 1/c, or none: 1). The mask M, when present,
//! must be *proved* (see `attention_mask`) to equal `Where(A[b, k] != 0, 0, F)` for a graph
//! input A of shape [B, T], which is what Attention's raw 2-D mask computes: onnxruntime adds 0
//! to kept and `mask_filter_value` to masked scores. Any mask, left padding included, keeps its
//! meaning. (onnxruntime's own fusion passes the mask as per-row lengths, which assumes right
//! padding.) The Cast through bool keeps `!= 0` exact for any integer mask value. A causal mask
//! needs F = the lowest float (onnxruntime's causal value); on float16 scores F = -65504 is
//! emitted as the lowest float32, the one value that rounds a padded query's row of masked
//! scores to a uniform row in float32 as float16 does (`attention_mask::op_filter`).

use ndarray::ArrayD;

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{dims_provably_eq, Dim};
use crate::ir::{attr, Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::ops;
use crate::passes::attention_mask::{attention_mask, op_filter};
use crate::passes::matchers::{
    bias_add, constant_value, fresh_node_name, guarded_probs, int32_mask, operand_scale,
    produced_by, require_f32_or_f16, require_perm, score_scale, sole_consumer, sole_consumer_op,
    weights_values,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::{DType, Tensor};

pub struct FuseAttention;

impl Rule for FuseAttention {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Softmax"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let sm = g.node(id);
        if !sm.is("Softmax") {
            return Proposal::NoMatch;
        }
        let (Some(_), Some(probs)) = (sm.input(0), sm.output(0)) else {
            return Proposal::NoMatch;
        };
        if !weights_values(model, probs) {
            return Proposal::NoMatch;
        }
        match fuse(model, id) {
            Ok(patch) => Proposal::Rewrite(patch),
            Err(why) => Proposal::Reject(why),
        }
    }
}

fn fuse(model: &Model, softmax: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let sm = g.node(softmax);
    let logits = sm.input(0).ok_or("Softmax has no input")?;
    let probs = sm.output(0).ok_or("Softmax has no output")?;
    // float16 models keep float16 weights; the op computes in their type (onnxruntime and the
    // reference kernel accumulate in float32).
    let dt = require_f32_or_f16(g, logits)?;
    let rank = g.value(logits).ty.rank();
    let axis = ops::attrs_of::<ops::reduce::Softmax>(model, sm)
        .ok_or("Softmax's attributes are not parsed")?
        .axis;
    // Before opset 13 Softmax flattens to 2-D at `axis`: at axis 3 of rank 4 that is the last axis.
    if rank != Some(4) || !(axis == -1 || axis == 3) {
        return Err(format!(
            "Softmax '{}' is not over the last axis of rank-4 scores (axis {axis}, rank {rank:?})",
            sm.label(softmax)
        ));
    }
    let mut removed = vec![softmax];

    // Downstream: P·V → Transpose(0,2,1,3) → Reshape to [B, S, N·D].
    let (guard, probs) = guarded_probs(model, probs)?;
    removed.extend(guard);
    let (pv_id, pv) = sole_consumer_op(g, probs, "MatMul", "attention probabilities")?;
    if pv.input(0) != Some(probs) {
        return Err(format!(
            "MatMul '{}' reads the probabilities second",
            pv.label(pv_id)
        ));
    }
    removed.push(pv_id);
    let v_heads = pv.input(1).ok_or("MatMul has no second input")?;
    let ctx = pv.output(0).ok_or("MatMul has no output")?;
    let (tr_id, tr) = sole_consumer_op(g, ctx, "Transpose", "attention context")?;
    require_perm(model, tr, tr_id, &[0, 2, 1, 3])?;
    removed.push(tr_id);
    let merged = tr.output(0).ok_or("Transpose has no output")?;
    let (rs_id, rs) = sole_consumer_op(g, merged, "Reshape", "transposed context")?;
    removed.push(rs_id);
    let out = rs.output(0).ok_or("Reshape has no output")?;

    // Upstream: [Add(·, M)] ← [Mul(c) | Div(1/c)] ← MatMul(Q, Kᵀ).
    let mut scores = logits;
    let mut mask = None;
    if let Some((add_id, add)) = produced_by(g, logits, "Add") {
        sole_consumer(g, logits)?;
        let (a, b) = (
            add.input(0).ok_or("Add input")?,
            add.input(1).ok_or("Add input")?,
        );
        // The scores side is the one a Mul/Div/MatMul computes from the QK product.
        let is_scores = |v: ValueId| {
            ["Mul", "Div", "MatMul"]
                .iter()
                .any(|op| produced_by(g, v, op).is_some())
        };
        let (s, m) = if is_scores(a) && !is_scores(b) {
            (a, b)
        } else {
            (b, a)
        };
        scores = s;
        mask = Some(m);
        removed.push(add_id);
    }
    let mut scale = 1.0f64;
    if let Some((op_id, qk, c)) = score_scale(model, scores)? {
        sole_consumer(g, scores)?;
        scale = c;
        scores = qk;
        removed.push(op_id);
    }
    let (qk_id, qk) = produced_by(g, scores, "MatMul")
        .ok_or_else(|| format!("'{}' is not a Q·Kᵀ MatMul", g.name(scores)))?;
    sole_consumer(g, scores)?;
    removed.push(qk_id);
    let scores_shape = g
        .value(scores)
        .ty
        .shape
        .clone()
        .ok_or_else(|| format!("shape of scores '{}' is unknown", g.name(scores)))?;

    let mut q_heads = qk.input(0).ok_or("MatMul input")?;
    let mut k_heads = qk.input(1).ok_or("MatMul input")?;
    // sdpa's export scales Q and Kᵀ by √scale each.
    for operand in [&mut q_heads, &mut k_heads] {
        if let Some((id, x, c)) = operand_scale(model, *operand, qk_id) {
            removed.push(id);
            *operand = x;
            scale *= c;
        }
    }
    let (qn, q_lin, heads, head_size) = heads_of(model, q_heads, &[0, 2, 1, 3], "query")?;
    let (kn, k_lin, kh, kd) = heads_of(model, k_heads, &[0, 2, 3, 1], "key")?;
    let (vn, v_lin, vh, vd) = heads_of(model, v_heads, &[0, 2, 1, 3], "value")?;
    if (kh, kd, vh, vd) != (heads, head_size, heads, head_size) {
        return Err("query, key and value split into different heads".into());
    }
    removed.extend(qn.into_iter().chain(kn).chain(vn));
    let hidden = heads * head_size;
    let packed = packed_split(model, [q_lin, k_lin, v_lin], hidden)?;
    let (x, ws, bs, part) = match packed {
        Some((split_id, qkv)) => {
            removed.push(split_id);
            let p = linear(model, qkv, 3 * hidden, dt, "packed QKV")?;
            if p.factor != 1.0 {
                return Err(format!(
                    "the packed QKV projection is scaled by {}",
                    p.factor
                ));
            }
            removed.extend(&p.nodes);
            (p.x, vec![p.weight], vec![p.bias], 3 * hidden as usize)
        }
        None => {
            let q = linear(model, q_lin, hidden, dt, "query")?;
            let k = linear(model, k_lin, hidden, dt, "key")?;
            let v = linear(model, v_lin, hidden, dt, "value")?;
            if q.x != k.x || q.x != v.x {
                return Err("query, key and value do not project the same input".into());
            }
            for p in [&q, &k, &v] {
                removed.extend(&p.nodes);
            }
            // Scaling q or k scales the scores; scaling v would scale the output.
            if v.factor != 1.0 {
                return Err(format!("the value projection is scaled by {}", v.factor));
            }
            scale *= q.factor * k.factor;
            let ws = vec![q.weight, k.weight, v.weight];
            (q.x, ws, vec![q.bias, k.bias, v.bias], hidden as usize)
        }
    };
    if !(scale as f32).is_finite() || scale as f32 == 0.0 {
        return Err(format!("scale {scale} is zero or not finite in float32"));
    }
    if g.value(x).ty.dtype != Some(dt) {
        return Err(format!("input '{}' is not {dt} like the scores", g.name(x)));
    }
    let Some([xb, xs, _]) = g.value(x).ty.shape.as_deref() else {
        return Err(format!("input '{}' is not rank 3", g.name(x)));
    };
    let want_out = [xb.clone(), xs.clone(), Dim::Known(hidden)];
    if !matches!(g.value(out).ty.shape.as_deref(), Some(o) if dims_provably_eq(o, &want_out)) {
        return Err(format!(
            "Reshape '{}' does not merge the heads back to [{xb}, {xs}, {hidden}]",
            rs.label(rs_id),
        ));
    }
    let want_scores = [xb.clone(), Dim::Known(heads), xs.clone(), xs.clone()];
    if !dims_provably_eq(&scores_shape, &want_scores) {
        return Err(format!(
            "scores '{}' are not [batch, heads, seq, seq]",
            g.name(scores)
        ));
    }
    let proved = match mask {
        Some(m) => Some(attention_mask(model, m, &scores_shape)?),
        None => None,
    };

    let mut patch = Patch {
        remove: removed,
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let base = g.name(out).to_string();
    let mut fused = NewNode::new("Attention", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{base}_Attention"));
    fused.inputs = vec![Some(x.into()), None, None];
    fused.outputs = vec![Some(out.into())];
    fused.set_attr(attr::int("num_heads", heads));
    fused.set_attr(attr::float("scale", scale as f32));
    if let Some(m) = proved {
        let filter = op_filter(dt, m.filter, m.causal)?;
        fused.set_attr(attr::float("mask_filter_value", filter));
        if m.causal {
            fused.set_attr(attr::int("unidirectional", 1));
        }
        if let Some(a) = m.padding {
            let mask_index = int32_mask(g, &mut patch, a, &base)?;
            fused.inputs.push(Some(mask_index));
        }
    }
    // The packed weights last, once every guard has passed: they copy megabytes.
    let weights = concat_columns(model, &ws, dt)?;
    let bias = concat_bias(model, &bs, part, dt)?;
    let name = g.fresh_name(&format!("{base}_qkv_weight"));
    fused.inputs[1] = Some(patch.new_initializer(&name, from_tensor(&name, &weights)));
    let name = g.fresh_name(&format!("{base}_qkv_bias"));
    fused.inputs[2] = Some(patch.new_initializer(&name, from_tensor(&name, &bias)));
    patch.add.push(fused);
    Ok(patch)
}

/// `heads_v` = Transpose(perm) of Reshape(lin) into [B, S, N, D], lin [B, S, N·D] read only by
/// the Reshape: ([Transpose, Reshape], lin, N, D).
fn heads_of(
    model: &Model,
    heads_v: ValueId,
    perm: &[i64],
    what: &str,
) -> Result<(Vec<NodeId>, ValueId, i64, i64), String> {
    let g = &model.graph;
    let (tr_id, tr) = produced_by(g, heads_v, "Transpose")
        .ok_or_else(|| format!("{what} heads '{}' are not a Transpose", g.name(heads_v)))?;
    sole_consumer(g, heads_v).map_err(|why| format!("{what} heads {why}"))?;
    require_perm(model, tr, tr_id, perm)?;
    let split = tr.input(0).ok_or("Transpose has no input")?;
    let (rs_id, rs) = produced_by(g, split, "Reshape")
        .ok_or_else(|| format!("{what} '{}' is not a Reshape into heads", g.name(split)))?;
    sole_consumer(g, split).map_err(|why| format!("{what} {why}"))?;
    let lin = rs.input(0).ok_or("Reshape has no input")?;
    sole_consumer(g, lin).map_err(|why| format!("{what} {why}"))?;
    let shape = g.value(split).ty.shape.clone().unwrap_or_default();
    let lin_shape = g.value(lin).ty.shape.clone().unwrap_or_default();
    match (shape.as_slice(), lin_shape.as_slice()) {
        ([b, s, Dim::Known(n), Dim::Known(d)], [b2, s2, Dim::Known(h)])
            if b.provably_eq(b2) && s.provably_eq(s2) && n * d == *h && *n > 0 =>
        {
            Ok((vec![tr_id, rs_id], lin, *n, *d))
        }
        _ => Err(format!(
            "Reshape '{}' does not split the last axis of {what} into heads ({:?} -> {:?})",
            rs.label(rs_id),
            lin_shape,
            shape
        )),
    }
}

/// GPT-2's packed projection: Q, K and V are outputs 0, 1, 2 of one Split of `qkv` along the
/// last axis into three widths of `hidden`. (the Split, qkv) when so; None when they are not
/// Split outputs at all.
fn packed_split(
    model: &Model,
    lins: [ValueId; 3],
    hidden: i64,
) -> Result<Option<(NodeId, ValueId)>, String> {
    let g = &model.graph;
    let splits: Vec<_> = lins
        .iter()
        .map(|&v| g.producer(v).filter(|&p| g.node(p).is("Split")))
        .collect();
    if splits.iter().all(|s| s.is_none()) {
        return Ok(None);
    }
    let id = splits[0].ok_or("query is not a Split output like key and value")?;
    let n = g.node(id);
    let in_order = n.outputs.len() == 3
        && splits.iter().all(|&s| s == Some(id))
        && (0..3).all(|i| n.output(i) == Some(lins[i]));
    if !in_order {
        return Err(format!(
            "Split '{}' does not give query, key and value as outputs 0, 1, 2",
            n.label(id)
        ));
    }
    let qkv = n.input(0).ok_or("Split has no input")?;
    let rank = g.value(qkv).ty.rank().unwrap_or(0) as i64;
    let split =
        ops::attrs_of::<ops::slice::Split>(model, n).ok_or("Split's attributes are not parsed")?;
    let axis = split.axis;
    let sizes = match (&split.sizes, n.input(1)) {
        (ops::slice::SplitSizes::Input, Some(v)) => ops::shape_value::constant_ints(g, v),
        (ops::slice::SplitSizes::Attribute(Some(s)), _) => Some(s.clone()),
        _ => Some(vec![hidden; 3]),
    };
    if !(axis == -1 || axis == rank - 1) || sizes != Some(vec![hidden; 3]) {
        return Err(format!(
            "Split '{}' does not cut the last axis into three widths of {hidden}",
            n.label(id)
        ));
    }
    Ok(Some((id, qkv)))
}

/// One projection: [Mul(c) | Div(1/c)] of [Add(bias)] of MatMul(X, W), with W a 2-D constant of
/// `width` columns and c a scalar constant (`factor`, 1 when absent).
struct Linear {
    nodes: Vec<NodeId>,
    x: ValueId,
    weight: ValueId,
    bias: Option<ValueId>,
    factor: f64,
}

fn linear(
    model: &Model,
    lin: ValueId,
    width: i64,
    dt: DType,
    what: &str,
) -> Result<Linear, String> {
    let g = &model.graph;
    let mut nodes = vec![];
    // Whisper and BART scale the query projection itself: (X·W + b)·c.
    let (lin, factor) = match score_scale(model, lin).map_err(|why| format!("{what}: {why}"))? {
        Some((id, x, c)) => {
            sole_consumer(g, x).map_err(|why| format!("{what} projection {why}"))?;
            nodes.push(id);
            (x, c)
        }
        None => (lin, 1.0),
    };
    let (proj, bias) = match bias_add(model, lin, width) {
        Some((add_id, p, c)) => {
            nodes.push(add_id);
            (p, Some(c))
        }
        None => (lin, None),
    };
    let (mm_id, mm) = produced_by(g, proj, "MatMul")
        .ok_or_else(|| format!("{what} '{}' is not a MatMul projection", g.name(proj)))?;
    sole_consumer(g, proj).map_err(|why| format!("{what} projection {why}"))?;
    nodes.push(mm_id);
    let x = mm.input(0).ok_or("MatMul input")?;
    let weight = mm.input(1).ok_or("MatMul input")?;
    match constant_value(model, weight).as_deref() {
        Some(w) if w.dtype() == dt && w.shape().len() == 2 && w.shape()[1] as i64 == width => {}
        _ => {
            return Err(format!(
                "{what} weight '{}' is not a 2-D {dt} constant with {width} columns",
                g.name(weight),
            ))
        }
    }
    if g.value(x).ty.rank() != Some(3) {
        return Err(format!("{what} input '{}' is not rank 3", g.name(x)));
    }
    Ok(Linear {
        nodes,
        x,
        weight,
        bias,
        factor,
    })
}

/// A constant of type `dt`, widened to float32 (exact for float16), else why not.
fn widened(model: &Model, v: ValueId, dt: DType, what: &str) -> Result<ArrayD<f32>, String> {
    match constant_value(model, v) {
        Some(t) if t.dtype() == dt => match t.widen().into_owned() {
            Tensor::F32(a) => Ok(a),
            _ => Err(format!("{what} '{}' is not a float", model.graph.name(v))),
        },
        _ => Err(format!(
            "{what} '{}' is not a {dt} constant",
            model.graph.name(v)
        )),
    }
}

/// Back to the model's type `dt` (exact: every value came from a `dt` constant).
fn narrowed(a: ArrayD<f32>, dt: DType) -> Result<Tensor, String> {
    Tensor::F32(a)
        .narrow(dt)
        .ok_or_else(|| format!("cannot store weights as {dt}"))
}

/// [Wq | Wk | Wv]: the weights side by side, [in, 3·hidden] (one packed weight as it is).
fn concat_columns(model: &Model, ws: &[ValueId], dt: DType) -> Result<Tensor, String> {
    let arrays: Vec<ArrayD<f32>> = ws
        .iter()
        .map(|&w| widened(model, w, dt, "weight"))
        .collect::<Result<_, _>>()?;
    let views: Vec<_> = arrays.iter().map(|a| a.view()).collect();
    let rows = views.first().map_or(0, |v| v.shape()[0]);
    if views.iter().any(|v| v.ndim() != 2 || v.shape()[0] != rows) {
        return Err("weights do not concatenate: not [in, ·] each".into());
    }
    let cols = views.iter().map(|v| v.shape()[1]).sum();
    let cat = crate::ops::concat::joined(&views, 1, &[rows, cols])?;
    narrowed(cat, dt)
}

/// The biases side by side ([bq | bk | bv], or one packed bias), zeros for a part without one;
/// `hidden` is each part's width.
fn concat_bias(
    model: &Model,
    bs: &[Option<ValueId>],
    hidden: usize,
    dt: DType,
) -> Result<Tensor, String> {
    let mut out = Vec::with_capacity(3 * hidden);
    for b in bs {
        match b {
            None => out.extend(vec![0.0f32; hidden]),
            Some(v) => {
                let a = widened(model, *v, dt, "bias")?;
                if a.len() != hidden {
                    return Err(format!("bias '{}' is not [{hidden}]", model.graph.name(*v)));
                }
                out.extend(a.iter().copied())
            }
        }
    }
    narrowed(
        ArrayD::from_shape_vec(vec![out.len()], out).expect("1-D"),
        dt,
    )
}
