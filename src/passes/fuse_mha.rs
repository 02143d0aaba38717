//! Self-attention that `attention` leaves (its projections are not plain MatMuls, its mask is
//! not provable, its q went through rotary) → com.microsoft.MultiHeadAttention, which takes the
//! projected q, k and v as they are. Anchored on the Softmax; runs after `attention` and `rotary`.
//!
//! ```text
//!   before                                                            after
//!
//!   q2 ─► Reshape [.., N, D] ─► Transpose(0,2,1,3) ─► [q form] ─┐      q2 ─► [RotaryEmbedding(num_heads N
//!   k ─► [key form] ───────────────────────────────────────── MatMul        [, rotary_embedding_dim r])]
//!        ─► Mul(scale) ─► Add(mask) ─► Softmax(-1) ─► MatMul(·, v)        ─► MultiHeadAttention(q, k, v,
//!        ─► Transpose(0,2,1,3) ─► Reshape [.., N·D] ─► y                       mask) ─► y
//! ```
//! Query forms: the heads as they are (encoders: int8 BERT's dequantized projections, DistilBERT),
//! `RotaryEmbedding(heads)` (Llama, Qwen: the rotary moves onto the 3-D projection with
//! `num_heads`), or Phi's partial rotary `Concat(RotaryEmbedding(heads[.., :r]), heads[.., r:])`
//! (the 3-D rotary gets `rotary_embedding_dim = r`); also head-local ops before the rotary (a
//! per-head q norm, a Slice of a fused QKV's heads) and any 4-D value under the head Transpose,
//! merged back by one Reshape (`mha_query`). Key and value: heads-first `[B, N, L, D]`
//! values read through `Transpose(0,1,3,2)` (grouped-query repeat_kv included, or torch dynamo's
//! sdpa flatten / Transpose(0,2,1) / unflatten, `mha_query::flattened_key_transpose`) are passed
//! as they are; `Transpose(0,2,3,1)` of `Reshape(k2)` (BERT's exporter) and its value
//! `Transpose(0,2,1,3)` of `Reshape(v2)` pass k2 and v2 as 3-D `[B, L, N·D]` (both or neither).
//! The mask: a float `[B or 1, 1 or N, S, L]` whose S and L are provably the scores' is the
//! op's `attention_bias` (any mask keeps its meaning, nothing to prove); otherwise it must be
//! proved a padding mask `Where(A[b, k] != 0, 0, F)` (`attention_mask`), which becomes
//! `key_padding_mask = Cast(Cast(A, bool), int32)` with `mask_filter_value = F`. Two added
//! masks (T5's position bias and padding mask) must be one attention_bias and one proved padding
//! mask, in either order (`bias_and_padding`); the mask handling lives in `mha_mask`.
//!
//! Decode steps (a KV cache): keys `Concat(past_key [B, N, P, D], Transpose(0,2,1,3)(Reshape(k2)))`
//! on the sequence axis, and values likewise, become the op's past_key/past_value with k2 and v2
//! 3-D; the Concats' outputs (the model's present_key/present_value, read by anything else) become
//! its outputs 1 and 2. The scores' key axis is then P + S: the mask is proved with that length
//! (`attention_mask_after`), a causal part reads `k <= q + P` (the op's `unidirectional` after a
//! past), and the symbol the model declares for present's length (`total`, also the length of its
//! attention_mask input) stands for P + S: the model states that sum by computing present as the
//! Concat (without present outputs nothing states it and the mask's Gather is not provably in
//! range). Grouped-query steps repeat the cache for the query heads after the Concat (repeat_kv),
//! which the op cannot take as its past: the Concats stay, the repeated keys and values go in
//! heads-first, and the mask, proved `[B or 1, 1 or N, S, P + S]`, is the op's attention_bias
//! (float32; the op's own causal mask would start at key 0).
//!
//! Guards: every removed intermediate is single-use; the Transposes have exactly those perms; q2
//! is `[d0, d1, N·D]` and the Reshapes go to `[d0, d1, N, D]` and back to `[d0, d1, N·D]` (the
//! same dims); keys and values have N heads of D; the scale is a rank-0 constant (Mul, or Div by
//! its inverse) or absent (1); Softmax normalizes the last axis (opset ≥ 13); float32 or float16
//! throughout (onnxruntime's CPU kernel runs both); a proved mask with a causal part (`k <= q`,
//! after a cache `k <= q + P`) becomes `unidirectional = 1` (it hides exactly the keys after the
//! query, with the lowest float32), and then F must be the lowest float of the scores' type
//! (`op_filter`: a fully masked row is uniform in the op as in the pattern), or -inf behind
//! sdpa's `Where(IsNaN(P), 0, P)` guard (the filter is then the lowest float32, which weights
//! masked keys 0 as -inf does wherever a row has a visible key, and the rows without one, which
//! the guard zeroes, are zeroed after the op); float16 scores take only a proved mask (in float16
//! a row whose keys are all masked by a finite F rounds to one value, which the op's float32 sum
//! of a bias does not), as attention_bias only beside a repeated cache with -inf behind the NaN
//! guard (masked keys weigh 0 in both, and the guard's rows are zeroed after the op).

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{attr, Model, Node, NodeId, ValueId};
use crate::ops::reduce::Softmax;
use crate::passes::attention_mask::{attention_mask_after, Past};
use crate::passes::matchers::{
    fresh_node_name, guarded_probs, operand_scale, produced_by, require_f32_or_f16, require_perm,
    score_scale, sole_consumer, sole_consumer_op, weights_values,
};
use crate::passes::mha_mask::{bias_and_padding, is_attention_bias, proved_mask, zero_rows_after};
use crate::passes::mha_query::{
    flattened_key_transpose, only_reader, query, query_input, split_dims,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};
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
        let sm = g.node(id);
        if !sm.is("Softmax") {
            return Proposal::NoMatch;
        }
        // Only a Softmax between a score MatMul and a MatMul that weights values (P·V).
        let Some(scores) = scores_matmul(model, sm) else {
            return Proposal::NoMatch;
        };
        if !sm.output(0).is_some_and(|p| weights_values(model, p)) {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id, scores).map(Some))
    }
}

/// The score path `MatMul [→ Mul | Div] [→ Add(bias)] [→ Add(mask)] → Softmax`, located: the
/// added masks and their Adds (outermost first: at most two, T5's relative position bias and its
/// padding mask), the value the Mul/Div (if any) writes, and the score MatMul. The scale is
/// checked by `fuse` (`matchers::score_scale`).
struct Scores {
    masks: Vec<(NodeId, ValueId)>,
    scaled: ValueId,
    matmul: NodeId,
}

fn scores_matmul(model: &Model, sm: &Node) -> Option<Scores> {
    let g = &model.graph;
    let mut v = sm.input(0)?;
    let mut masks = vec![];
    // The scores side of an Add is the one computed by Mul/Div/MatMul (or, for the outer of two
    // Adds, by an Add of such a value); the other is the mask.
    let direct = |x: ValueId| {
        g.producer(x)
            .is_some_and(|p| ["Mul", "Div", "MatMul"].iter().any(|o| g.node(p).is(o)))
    };
    let through_add = |x: ValueId| {
        produced_by(g, x, "Add").is_some_and(|(_, n)| n.inputs.iter().flatten().any(|&i| direct(i)))
    };
    while let Some((id, add)) = produced_by(g, v, "Add").filter(|_| masks.len() < 2) {
        let (a, b) = (add.input(0)?, add.input(1)?);
        let (sc, m) = if direct(a) {
            (a, b)
        } else if direct(b) {
            (b, a)
        } else if masks.is_empty() && through_add(a) {
            (a, b)
        } else if masks.is_empty() && through_add(b) {
            (b, a)
        } else {
            return None;
        };
        masks.push((id, m));
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
        masks,
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
    let logits = mm.output(0).ok_or("MatMul has no output")?;
    let dt = require_f32_or_f16(g, logits)?;
    // MatMul → [Mul | Div] → [Add] → Softmax, each step single-use.
    let mut remove = vec![sm_id, mm_id];
    let mut chain = vec![logits];
    let mut scale = 1.0;
    if let Some((id, x, c)) = score_scale(model, scores.scaled)? {
        if x != logits {
            return Err("the scale does not apply to the score MatMul".into());
        }
        scale = c;
        chain.push(scores.scaled);
        remove.push(id);
    }
    for &(id, _) in &scores.masks {
        remove.push(id);
        chain.push(g.node(id).output(0).ok_or("Add has no output")?);
    }
    for v in chain {
        sole_consumer(g, v)?;
    }

    // sdpa's export scales Q and Kᵀ by √scale each: (operand, the node that reads it).
    let mut operands = [0, 1].map(|i| (mm.input(i), mm_id));
    for (v, reader) in &mut operands {
        let Some(x) = *v else { continue };
        if let Some((id, inner, c)) = operand_scale(model, x, mm_id) {
            remove.push(id);
            (*v, *reader) = (Some(inner), id);
            scale *= c;
        }
    }
    let [(q_in, q_reader), (k_in, k_reader)] = operands;
    let q = query(model, q_in.ok_or("MatMul has no input")?, q_reader)?;
    remove.extend(&q.remove);
    let (heads, head) = (q.heads, q.head);
    let (guard, probs) = guarded_probs(model, sm.output(0).ok_or("Softmax has no output")?)?;
    let nan_guard = !guard.is_empty();
    remove.extend(guard);
    let (ctx_id, ctx_n) = sole_consumer_op(g, probs, "MatMul", "attention probabilities")?;
    let ctx = ctx_n.output(0).ok_or("MatMul has no output")?;
    if ctx_n.input(0) != Some(probs) {
        return Err("the probabilities are not the context MatMul's first input".into());
    }
    let kv = keys_and_values(
        model,
        k_in.ok_or("MatMul has no second input")?,
        k_reader,
        ctx_n.input(1).ok_or("MatMul has no second input")?,
        ctx_id,
        (heads, head),
    )?;
    remove.extend(&kv.remove);
    for x in [kv.key, kv.value] {
        if g.value(x).ty.dtype != Some(dt) {
            return Err(format!("'{}' is not {dt} like the scores", g.name(x)));
        }
    }
    let (ct_id, ct_n) = sole_consumer_op(g, ctx, "Transpose", "attention context")?;
    require_perm(model, ct_n, ct_id, &[0, 2, 1, 3])?;
    let ct = ct_n.output(0).ok_or("Transpose has no output")?;
    let (out_id, out_n) = sole_consumer_op(g, ct, "Reshape", "transposed context")?;
    let y = out_n.output(0).ok_or("Reshape has no output")?;
    let q_ty = TensorType {
        dtype: Some(dt),
        shape: Some(q.dims.clone()),
    };
    let merged = matches!((q_ty.shape.as_deref(), dims(model, y).as_deref()),
        (Some(q), Some(o)) if q == o);
    // The heads merged straight to 2-D rows ([B*S, H], torch dynamo's GPT-2): the op's
    // [B, S, H] output holds the same elements in the same order as the transposed context, and
    // a 2-element target reads at most dims 0 and 1 of its input (B and S in both), so the
    // Reshape stays, reading the op's output.
    let to_rows = !merged
        && q_ty.rank() == Some(3)
        && (out_n.input(1)).is_some_and(|t| g.value(t).ty.shape == Some(vec![Dim::Known(2)]));
    if !merged && !to_rows {
        return Err(format!(
            "the merged heads {} are not the query projection's shape {} (nor 2-D rows)",
            g.value(y).ty,
            q_ty
        ));
    }
    remove.extend([ctx_id, ct_id, out_id]);

    let mut patch = Patch {
        remove,
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let mut out: ValueRef = if to_rows {
        let name = g.fresh_name(&format!("{}_heads", g.name(y)));
        let heads_out = patch.new_value(&name, q_ty.clone());
        let mut rows: NewNode = out_n.clone().into();
        rows.name = fresh_node_name(g, &out_n.label(out_id));
        rows.inputs[0] = Some(heads_out);
        patch.add.push(rows);
        heads_out
    } else {
        y.into()
    };
    let q_in = query_input(model, &mut patch, &q, dt);
    let q3: ValueRef = match q.rope {
        None => q_in,
        Some((rot_id, rot_dim)) => {
            let rot = g.node(rot_id);
            let name = g.fresh_name(&format!("{}_rotary", g.name(q.q2)));
            let q3 = patch.new_value(&name, q_ty.clone());
            let mut rope: NewNode = rot.clone().into();
            rope.name = fresh_node_name(g, &format!("{}_3d", rot.label(rot_id)));
            rope.inputs[0] = Some(q_in);
            rope.outputs = vec![Some(q3)];
            rope.set_attr(attr::int("num_heads", heads));
            if let Some(r) = rot_dim {
                rope.set_attr(attr::int("rotary_embedding_dim", r));
            }
            patch.add.push(rope);
            q3
        }
    };
    let mut mha = NewNode::new("MultiHeadAttention", MS_DOMAIN);
    mha.name = fresh_node_name(g, &format!("{}_MultiHeadAttention", g.name(y)));
    mha.inputs = vec![Some(q3), Some(kv.key.into()), Some(kv.value.into())];
    if let [(_, outer), (_, inner)] = scores.masks[..] {
        let scores_dims = dims(model, logits).unwrap_or_default();
        let base = g.name(y).to_string();
        bias_and_padding(
            model,
            &mut patch,
            &mut mha,
            [outer, inner],
            &scores_dims,
            heads,
            dt,
        )
        .and_then(|()| match nan_guard {
            true => Err(format!("the NaN guard with two masks ({base})")),
            false => Ok(()),
        })?;
    } else if let Some(&(_, m)) = scores.masks.first() {
        let scores_dims = dims(model, logits).unwrap_or_default();
        // float16 rounds every score of a row whose keys are all masked to F (a uniform row);
        // the op adds the bias in float32. Only a proved padding mask (a row is fully masked
        // only when a whole sequence is padding, as `attention` accepts) keeps that meaning.
        // The mask is the op's attention_bias when its declared shape is one, or when it is
        // proved one beside keys that hold a cache repeated for the query heads; otherwise it
        // is a proved mask the op reads as its own (`proved_mask`).
        let as_bias = if dt == DType::F32 && is_attention_bias(model, m, &scores_dims, heads, dt) {
            true
        } else {
            let lengths = match &kv.cache {
                Some(c) => Some(
                    cache_lengths(model, c.past_key, (kv.key, 1), c.present_key)
                        .ok_or("the cache's or the new keys' length is unknown")?,
                ),
                None => repeated_cache(model, kv.key),
            };
            // Heads-first keys that already hold a cache (repeated for the query heads).
            let hidden = kv.cache.is_none() && lengths.is_some();
            let past = lengths.as_ref().map(|(p, n, total)| Past {
                past: p,
                new: n,
                total: total.as_deref(),
            });
            let proved =
                attention_mask_after(model, m, &scores_dims, past.as_ref()).map_err(|why| {
                    if dt == DType::F32 {
                        format!("{why}; nor is it a [B or 1, 1 or {heads}, S, L] attention_bias")
                    } else {
                        format!("{why} ({dt} scores take only a proved mask)")
                    }
                })?;
            if hidden {
                // The op gets no past here, so its causal mask would start at key 0: the mask,
                // proved to be [B or 1, 1 or N, S, P + S], is added as the attention_bias it is.
                // In float16 a finite filter rounds a fully masked row to a uniform one, which
                // the op's float32 sum does not; -inf behind sdpa's NaN guard masks the same
                // keys in both (and the rows it zeroes are zeroed after the op).
                let exact = dt == DType::F32 || (nan_guard && proved.filter == f64::NEG_INFINITY);
                if !exact || !proved.bias_shape {
                    return Err(format!(
                        "the keys hold a cache repeated for {heads} heads: only a float32 mask \
                         (or -inf behind the NaN guard) of the scores' query and key lengths can \
                         go in, as attention_bias"
                    ));
                }
            } else {
                let ctx = (m, y, &q_ty);
                proved_mask(
                    model, &mut patch, &mut mha, ctx, &proved, nan_guard, &mut out,
                )?;
            }
            hidden
        };
        if as_bias {
            mha.inputs.extend([None, None, Some(m.into())]);
            if nan_guard {
                // The guard zeroes a row whose bias is -inf throughout (its softmax is NaN);
                // onnxruntime's op gives NaN there, so the rows are zeroed after it.
                zero_rows_after(model, &mut patch, m, (y, &q_ty), &mut out)?;
            }
        }
    }
    mha.outputs = vec![Some(out)];
    if let Some(c) = &kv.cache {
        mha.inputs.resize(6, None);
        mha.inputs
            .extend([Some(c.past_key.into()), Some(c.past_value.into())]);
        mha.outputs
            .extend([Some(c.present_key.into()), Some(c.present_value.into())]);
    }
    mha.set_attr(attr::int("num_heads", heads));
    mha.set_attr(attr::float("scale", scale as f32));
    patch.add.push(mha);
    Ok(patch)
}

/// Heads-first keys `[B, N, T, D]` that are a cache repeated for the query heads (grouped-query
/// attention's repeat_kv: Unsqueeze, Expand, Reshape of `Concat(past, new)` on the sequence
/// axis): the cache's lengths as `cache_lengths` gives them.
fn repeated_cache(model: &Model, k4: ValueId) -> Option<(Dim, Dim, Option<String>)> {
    let g = &model.graph;
    let mut v = k4;
    for _ in 0..4 {
        let (_, n) = ["Reshape", "Expand", "Unsqueeze", "Identity"]
            .iter()
            .find_map(|op| produced_by(g, v, op))?;
        let x = n.input(0)?;
        if let Some((_, c)) = produced_by(g, x, "Concat") {
            let axis = crate::ops::attrs_of::<crate::ops::concat::Concat>(model, c)?.axis?;
            let [Some(past), Some(new)] = c.inputs[..] else {
                return None;
            };
            if !matches!(axis, 2 | -2) || dims(model, past)?.len() != 4 {
                return None;
            }
            return cache_lengths(model, past, (new, 2), x);
        }
        v = x;
    }
    None
}

/// The length P of the cache `past` `[B, N, P, D]`, that of the new keys (`new`'s dim `axis`)
/// and the symbol the model declares to be their sum: the length of `present` (their Concat) when
/// it is a graph output declared `[B, N, total, D]` (the model states that total = P + new by
/// computing the output as the Concat).
fn cache_lengths(
    model: &Model,
    past: ValueId,
    (new, axis): (ValueId, usize),
    present: ValueId,
) -> Option<(Dim, Dim, Option<String>)> {
    let g = &model.graph;
    let p = dims(model, past)?.get(2)?.clone();
    let n = dims(model, new)?.get(axis)?.clone();
    let total = match g
        .stated_as_output(present)
        .and_then(|o| dims(model, o))
        .as_deref()
    {
        Some([_, _, Dim::Sym(t), _]) => Some(t.clone()),
        _ => None,
    };
    Some((p, n, total))
}

/// What MultiHeadAttention reads as key and value, and the nodes that go.
struct KeysValues {
    key: ValueId,
    value: ValueId,
    remove: Vec<NodeId>,
    cache: Option<Cache>,
}

/// A decode step's keys and values: `Concat(past, new)` on the sequence axis, whose outputs
/// become the op's present_key and present_value.
struct Cache {
    past_key: ValueId,
    past_value: ValueId,
    present_key: ValueId,
    present_value: ValueId,
}

/// `kt` is the score MatMul's second input, `v4` the context MatMul's.
fn keys_and_values(
    model: &Model,
    kt: ValueId,
    mm_id: NodeId,
    v4: ValueId,
    ctx_id: NodeId,
    (heads, head): (i64, i64),
) -> Result<KeysValues, String> {
    let g = &model.graph;
    let heads_first = |k4: ValueId, remove: Vec<NodeId>| -> Result<KeysValues, String> {
        // k4 [B, N, L, D] as it is; v4 likewise.
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
        }
        Ok(KeysValues {
            key: k4,
            value: v4,
            remove,
            cache: None,
        })
    };
    // torch dynamo's sdpa: Kᵀ as flatten, Transpose(0,2,1), unflatten.
    if let Some((k4, nodes)) = flattened_key_transpose(model, kt, mm_id) {
        return heads_first(k4, nodes);
    }
    let (kt_id, kt_n) = produced_by(g, kt, "Transpose").ok_or("the keys are not transposed")?;
    only_reader(g, kt, mm_id)?;
    let perm = crate::ops::attrs_of::<crate::ops::shape_ops::Transpose>(model, kt_n)
        .and_then(|t| t.perm.clone());
    // Heads-first from 3-D: Transpose(0,2,1,3) of Reshape(x3) [d0, d1, N·D] read only here.
    let from_3d = |v: ValueId, reader: NodeId| -> Option<(ValueId, [NodeId; 2])> {
        let (t_id, t) = produced_by(g, v, "Transpose")?;
        require_perm(model, t, t_id, &[0, 2, 1, 3]).ok()?;
        let r = t.input(0)?;
        let (r_id, r_n) = produced_by(g, r, "Reshape")?;
        let x3 = r_n.input(0)?;
        (only_reader(g, v, reader).is_ok()
            && only_reader(g, r, t_id).is_ok()
            && split_dims(model, x3, r) == Some((heads, head)))
        .then_some((x3, [t_id, r_id]))
    };
    // A decode step: x4 = Concat(past [B, N, P, D], Transpose(0,2,1,3)(Reshape(x3))) on the
    // sequence axis; x4 may have other readers (the present output), which the op's present
    // output then feeds.
    let after_cache = |x4: ValueId| -> Option<(NodeId, ValueId, ValueId, [NodeId; 2])> {
        let (c_id, c) = produced_by(g, x4, "Concat")?;
        let axis = crate::ops::attrs_of::<crate::ops::concat::Concat>(model, c)?.axis?;
        let [Some(past), Some(new)] = c.inputs[..] else {
            return None;
        };
        let (x3, nodes) = from_3d(new, c_id)?;
        let past_heads = matches!(dims(model, past).as_deref(),
            Some([_, Dim::Known(n), _, _]) if *n == heads);
        (matches!(axis, 2 | -2) && past_heads).then_some((c_id, past, x3, nodes))
    };
    match perm.as_deref() {
        Some([0, 1, 3, 2]) => {
            let k4 = kt_n.input(0).ok_or("Transpose has no input")?;
            if let (Some(k), Some(v)) = (after_cache(k4), after_cache(v4)) {
                let (kc_id, past_key, k2, k_nodes) = k;
                let (vc_id, past_value, v2, v_nodes) = v;
                let key_ok = matches!(dims(model, past_key).as_deref(),
                    Some([_, _, _, Dim::Known(d)]) if *d == head);
                if !key_ok {
                    return Err(format!(
                        "the cached keys '{}' {} are not [B, {heads}, P, {head}]",
                        g.name(past_key),
                        g.value(past_key).ty
                    ));
                }
                let mut remove = vec![kt_id, kc_id, vc_id];
                remove.extend(k_nodes);
                remove.extend(v_nodes);
                return Ok(KeysValues {
                    key: k2,
                    value: v2,
                    remove,
                    cache: Some(Cache {
                        past_key,
                        past_value,
                        present_key: k4,
                        present_value: v4,
                    }),
                });
            }
            heads_first(k4, vec![kt_id])
        }
        Some([0, 2, 3, 1]) => {
            // BERT's exporter: Kᵀ straight from Reshape(k2); then v must come from 3-D too.
            let kr = kt_n.input(0).ok_or("Transpose has no input")?;
            let (kr_id, kr_n) =
                produced_by(g, kr, "Reshape").ok_or("the keys are not a Reshape")?;
            // The split goes with Kᵀ unless something else reads it (T5 takes the key length
            // from its Transpose(0,2,1,3) for the position bias).
            let kr_single = only_reader(g, kr, kt_id).is_ok() && !g.is_graph_output(kr);
            let k2 = kr_n.input(0).ok_or("Reshape has no input")?;
            if split_dims(model, k2, kr) != Some((heads, head)) {
                return Err(format!(
                    "the keys are not [d0, d1, {heads}, {head}] of a 3-D projection ({} -> {})",
                    g.value(k2).ty,
                    g.value(kr).ty
                ));
            }
            let (v2, v_nodes) = from_3d(v4, ctx_id).ok_or_else(|| {
                format!(
                    "the values '{}' are not Transpose(0,2,1,3) of a Reshape into {heads} heads \
                     of {head} (3-D keys need 3-D values)",
                    g.name(v4)
                )
            })?;
            let mut remove = vec![kt_id];
            remove.extend(kr_single.then_some(kr_id));
            remove.extend(v_nodes);
            Ok(KeysValues {
                key: k2,
                value: v2,
                remove,
                cache: None,
            })
        }
        p => Err(format!(
            "Transpose '{}' of the keys has perm {p:?}, not [0, 1, 3, 2] or [0, 2, 3, 1]",
            kt_n.label(kt_id)
        )),
    }
}
