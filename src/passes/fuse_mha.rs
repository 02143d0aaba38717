//! Decoder self-attention with rotary q (Llama, Qwen, Mistral exports, legacy and dynamo; grouped
//! key/value heads included) → com.microsoft.MultiHeadAttention, after `rotary` has fused q's and
//! k's RoPE.
//!
//! ```text
//!   before                                                            after
//!
//!   q2 ─► Reshape [.., N, D] ─► Transpose(0,2,1,3) ─► RotaryEmbedding ─┐   q2 ─► RotaryEmbedding(num_heads N)
//!   k4 [B, N, L, D] ─► Transpose(0,1,3,2) ───────────────────────── MatMul      ─► MultiHeadAttention(q, k4, v4,
//!        ─► Mul(scale) ─► Add(mask) ─► Softmax(-1) ─► MatMul(·, v4)                attention_bias = mask) ─► y
//!        ─► Transpose(0,2,1,3) ─► Reshape [.., N·D] ─► y
//! ```
//! k4 and v4 are whatever the model feeds the score and context MatMuls, heads-first with N heads
//! (after transformers' repeat_kv Unsqueeze/Expand/Reshape for grouped heads): MultiHeadAttention
//! takes them as they are. The mask is added to the scores as the op's `attention_bias`, so any
//! mask keeps its meaning (causal, padding on either side, none) with nothing to prove. q's
//! rotary moves onto the 3-D projection, where the op wants its query.
//!
//! Guards: every removed intermediate is single-use; the Transposes have exactly those perms; q2
//! is `[d0, d1, N·D]` and the Reshapes go to `[d0, d1, N, D]` and back to `[d0, d1, N·D]` (the
//! same dims); k4 and v4 are 4-D with N heads of D; the scale is a rank-0 constant (Mul, or Div
//! by its inverse) or absent (1); the mask is a 4-D float32 `[B or 1, 1 or N, S, L]`; Softmax
//! normalizes the last axis (opset ≥ 13); everything is float32.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::ops::reduce::Softmax;
use crate::passes::matchers::{
    fresh_node_name, produced_by, require_f32, require_perm, score_scale, sole_consumer,
    sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;

pub struct FuseMultiHeadAttention;

impl Rule for FuseMultiHeadAttention {
    fn name(&self) -> &'static str {
        "multi_head_attention"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Softmax"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        // Only scores whose query is a fused rotary start the pattern (the `attention` rule owns
        // the forms without RoPE).
        let Some(scores) = scores_matmul(model, g.node(id)) else {
            return Proposal::NoMatch;
        };
        let rotary_q = g.node(scores.matmul).input(0).and_then(|q| {
            let n = g.node(g.producer(q)?);
            (n.op_type == "RotaryEmbedding" && n.domain == MS_DOMAIN).then_some(())
        });
        if rotary_q.is_none() {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id, scores).map(Some))
    }
}

/// The score path `MatMul [→ Mul | Div] [→ Add(mask)] → Softmax`, located: the mask and its Add,
/// the value the Mul/Div (if any) writes, and the score MatMul. The scale is checked by `fuse`
/// (`matchers::score_scale`).
struct Scores {
    mask: Option<(NodeId, ValueId)>,
    scaled: ValueId,
    matmul: NodeId,
}

fn scores_matmul(model: &Model, sm: &Node) -> Option<Scores> {
    let g = &model.graph;
    let mut v = sm.input(0)?;
    let mut mask = None;
    if let Some((id, add)) = produced_by(g, v, "Add") {
        // The scores side is the one computed by Mul/Div/MatMul; the other is the mask.
        let scored = |x: ValueId| {
            g.producer(x)
                .is_some_and(|p| ["Mul", "Div", "MatMul"].iter().any(|o| g.node(p).is(o)))
        };
        let (a, b) = (add.input(0)?, add.input(1)?);
        let (sc, m) = if scored(a) { (a, b) } else { (b, a) };
        mask = Some((id, m));
        v = sc;
    }
    let scaled = v;
    if let Some((_, n)) = produced_by(g, v, "Mul").or(produced_by(g, v, "Div")) {
        v = [n.input(0)?, n.input(1)?]
            .into_iter()
            .find(|&x| produced_by(g, x, "MatMul").is_some())?;
    }
    let (matmul, _) = produced_by(g, v, "MatMul")?;
    Some(Scores {
        mask,
        scaled,
        matmul,
    })
}

fn dims(model: &Model, v: ValueId) -> Option<Vec<Dim>> {
    model.graph.value(v).ty.shape.clone()
}

fn fuse(model: &Model, sm_id: NodeId, scores: Scores) -> Result<Patch, String> {
    let g = &model.graph;
    let sm = g.node(sm_id);
    let last = crate::ops::attrs_of::<Softmax>(model, sm)
        .is_some_and(|a| !a.coerce_2d && (a.axis == -1 || a.axis == 3));
    if !last {
        return Err("Softmax does not normalize the last axis (opset >= 13)".into());
    }
    let mm_id = scores.matmul;
    let mm = g.node(mm_id);
    // MatMul → [Mul | Div] → [Add] → Softmax, each step single-use.
    let mut remove = vec![sm_id, mm_id];
    let mut chain = vec![mm.output(0).ok_or("MatMul has no output")?];
    let mut scale = 1.0;
    if let Some((id, x, c)) = score_scale(model, scores.scaled)? {
        if Some(x) != mm.output(0) {
            return Err("the scale does not apply to the score MatMul".into());
        }
        scale = c;
        chain.push(scores.scaled);
        remove.push(id);
    }
    if let Some((id, _)) = scores.mask {
        remove.push(id);
        chain.push(sm.input(0).ok_or("Softmax has no input")?);
    }
    for v in chain {
        sole_consumer(g, v)?;
    }

    // q: RotaryEmbedding(Transpose(Reshape(q2))).
    let q4 = mm.input(0).ok_or("MatMul has no input")?;
    let rot_id = g.producer(q4).ok_or("no rotary")?;
    let rot = g.node(rot_id);
    let qh = rot.input(0).ok_or("RotaryEmbedding has no input")?;
    let (qt_id, qt) =
        produced_by(g, qh, "Transpose").ok_or("the rotary's input is not a Transpose")?;
    require_perm(model, qt, qt_id, &[0, 2, 1, 3])?;
    let qr = qt.input(0).ok_or("Transpose has no input")?;
    let (qr_id, qr_n) = produced_by(g, qr, "Reshape").ok_or("the query heads are not a Reshape")?;
    let q2 = qr_n.input(0).ok_or("Reshape has no input")?;
    for (val, id) in [(q4, mm_id), (qh, rot_id), (qr, qt_id)] {
        if sole_consumer(g, val)? != id {
            return Err(format!("'{}' is read elsewhere", g.name(val)));
        }
    }
    let (heads, head) = match (dims(model, q2).as_deref(), dims(model, qr).as_deref()) {
        (Some([a, b, Dim::Known(h)]), Some([c, d, Dim::Known(n), Dim::Known(hd)]))
            if a == c
                && b == d
                && *n * *hd == *h
                && !matches!(a, Dim::Unknown)
                && !matches!(b, Dim::Unknown) =>
        {
            (*n, *hd)
        }
        _ => {
            return Err(format!(
                "the query heads are not [d0, d1, N, D] of a [d0, d1, N·D] projection ({} -> {})",
                g.value(q2).ty,
                g.value(qr).ty
            ))
        }
    };
    require_f32(g, q2)?;
    remove.extend([rot_id, qt_id, qr_id]);

    // k4 through Transpose(0, 1, 3, 2); v4 from the context MatMul.
    let kt = mm.input(1).ok_or("MatMul has no second input")?;
    let (kt_id, kt_n) = produced_by(g, kt, "Transpose").ok_or("the keys are not transposed")?;
    require_perm(model, kt_n, kt_id, &[0, 1, 3, 2])?;
    if sole_consumer(g, kt)? != mm_id {
        return Err(format!("'{}' is read elsewhere", g.name(kt)));
    }
    let k4 = kt_n.input(0).ok_or("Transpose has no input")?;
    let probs = sm.output(0).ok_or("Softmax has no output")?;
    let (ctx_id, ctx_n) = sole_consumer_op(g, probs, "MatMul", "attention probabilities")?;
    let ctx = ctx_n.output(0).ok_or("MatMul has no output")?;
    if ctx_n.input(0) != Some(probs) {
        return Err("the probabilities are not the context MatMul's first input".into());
    }
    let v4 = ctx_n.input(1).ok_or("MatMul has no second input")?;
    for (what, x) in [("key", k4), ("value", v4)] {
        let ok = matches!(dims(model, x).as_deref(),
            Some([_, Dim::Known(n), _, Dim::Known(d)]) if *n == heads && *d == head);
        if !ok {
            return Err(format!(
                "the {what} '{}' {} is not heads-first [B, {heads}, L, {head}]",
                g.name(x),
                g.value(x).ty
            ));
        }
        require_f32(g, x)?;
    }
    let (ct_id, ct_n) = sole_consumer_op(g, ctx, "Transpose", "attention context")?;
    require_perm(model, ct_n, ct_id, &[0, 2, 1, 3])?;
    let ct = ct_n.output(0).ok_or("Transpose has no output")?;
    let (out_id, out_n) = sole_consumer_op(g, ct, "Reshape", "transposed context")?;
    let y = out_n.output(0).ok_or("Reshape has no output")?;
    let merged = matches!((dims(model, q2).as_deref(), dims(model, y).as_deref()),
        (Some(q), Some(o)) if q == o);
    if !merged {
        return Err(format!(
            "the merged heads {} are not the query projection's shape {}",
            g.value(y).ty,
            g.value(q2).ty
        ));
    }
    remove.extend([kt_id, ctx_id, ct_id, out_id]);
    if let Some((_, mask)) = scores.mask {
        let ty = &g.value(mask).ty;
        let ok = ty.dtype == Some(DType::F32)
            && matches!(ty.shape.as_deref(),
                Some([_, Dim::Known(h), _, _]) if *h == 1 || *h == heads);
        if !ok {
            return Err(format!(
                "the mask '{}' {ty} is not a float32 [B or 1, 1 or {heads}, S, L] attention bias",
                g.name(mask)
            ));
        }
    }

    let mut patch = Patch {
        remove,
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let q3_ty = TensorType {
        dtype: Some(DType::F32),
        shape: dims(model, q2),
    };
    let q3 = patch.new_value(&g.fresh_name(&format!("{}_rotary", g.name(q2))), q3_ty);
    let mut rope: NewNode = rot.clone().into();
    rope.name = fresh_node_name(g, &format!("{}_3d", rot.label(rot_id)));
    rope.inputs[0] = Some(q2.into());
    rope.outputs = vec![Some(q3)];
    rope.set_attr(crate::ir::attr::int("num_heads", heads));
    let mut mha = NewNode::new("MultiHeadAttention", MS_DOMAIN);
    mha.name = fresh_node_name(g, &format!("{}_MultiHeadAttention", g.name(y)));
    mha.inputs = vec![Some(q3), Some(k4.into()), Some(v4.into())];
    if let Some((_, mask)) = scores.mask {
        mha.inputs.extend([None, None, Some(mask.into())]);
    }
    mha.outputs = vec![Some(y.into())];
    mha.set_attr(crate::ir::attr::int("num_heads", heads));
    mha.set_attr(crate::ir::attr::float("scale", scale as f32));
    patch.add.extend([rope, mha]);
    Ok(patch)
}
