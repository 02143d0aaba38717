//! The query side of `multi_head_attention`: from the score MatMul's first operand back to a
//! `[d0, d1, N·D]` query that MultiHeadAttention (and a 3-D RotaryEmbedding before it) reads.
//!
//! ```text
//!   q4 = [rotary] ( [head-local ops] ( Transpose(0,2,1,3) ( t ) ) )       t: [d0, d1, N, E]
//!
//!   t = Reshape(q2) [d0, d1, N, D], nothing head-local   → the op reads q2 as it is
//!   otherwise                                             → Reshape(local'(t), [0, 0, N·D])
//! ```
//! Rotary forms: none (encoders), `RotaryEmbedding(heads)` (Llama, Qwen), or the partial form
//! `Concat(RotaryEmbedding(heads[.., :r]), heads[.., r:])` (Phi, GPT-NeoX; r = D, an empty pass
//! part, is Phi-3's full rotary written the same way). Head-local ops act on the last axis only,
//! so they commute with the head Transpose and are re-emitted on the `[d0, d1, N, E]` layout:
//! a Slice of the last axis (GPT-NeoX's fused QKV, `[.., N, 3·D]` per head) and a norm over the
//! last axis whose scale and bias are at most 1-D (Qwen3's and Gemma3's per-head q_norm, written
//! before or after the Transpose). `t` itself may be anything 4-D with known N and E and named or
//! known d0, d1 (ModernBERT's Squeeze(Split(Reshape(qkv))) too): one Reshape merges its heads.
//!
//! Guards: every removed value is read only by the next node of the chain and is not a graph
//! output; the Transpose and t's producer stay when something else reads them (GPT-NeoX's key
//! and value Slices read the same Transpose); the Slices are constant with step 1; the norms'
//! mean / inv-std outputs are unread.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::passes::matchers::{
    concat_axis, fresh_node_name, norm_attrs, produced_by, require_perm, slice_params,
    sole_consumer,
};
use crate::passes::rewrite::{NewNode, Patch, ValueRef};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// The query, located: what MultiHeadAttention will read and what goes.
pub struct Query {
    /// The 3-D projection the op reads as it is, or (with `merge`) the 4-D `t`.
    pub q2: ValueId,
    /// `[d0, d1, N·D]`: the op's query and output shape.
    pub dims: Vec<Dim>,
    pub remove: Vec<NodeId>,
    pub heads: i64,
    pub head: i64,
    /// q's rotary: its node, and r for a partial one.
    pub rope: Option<(NodeId, Option<i64>)>,
    /// The head-local nodes to re-emit on `q2` (innermost first) before a merging Reshape; None
    /// when q2 is the 3-D projection.
    pub merge: Option<Vec<NodeId>>,
}

fn dims(model: &Model, v: ValueId) -> Option<Vec<Dim>> {
    model.graph.value(v).ty.shape.clone()
}

/// Ok when `v` is read only by node `reader` (once) and is not a graph output.
pub fn only_reader(g: &Graph, v: ValueId, reader: NodeId) -> Result<(), String> {
    if sole_consumer(g, v)? != reader {
        return Err(format!("'{}' is read elsewhere", g.name(v)));
    }
    Ok(())
}

/// (N, D) when `split` = Reshape(`x`) is `[d0, d1, N, D]` of `x` `[d0, d1, N·D]`, d0 and d1 known
/// or named.
pub fn split_dims(model: &Model, x: ValueId, split: ValueId) -> Option<(i64, i64)> {
    match (dims(model, x).as_deref(), dims(model, split).as_deref()) {
        (Some([a, b, Dim::Known(h)]), Some([c, d, Dim::Known(n), Dim::Known(hd)]))
            if a == c
                && b == d
                && *n * *hd == *h
                && !matches!(a, Dim::Unknown)
                && !matches!(b, Dim::Unknown) =>
        {
            Some((*n, *hd))
        }
        _ => None,
    }
}

/// The node producing `v` when it acts on the last axis of a 4-D value only: a constant Slice
/// of that axis with step 1, or a norm over it whose scale and bias are at most 1-D and whose
/// statistics outputs are unread.
fn head_local(model: &Model, v: ValueId) -> Option<NodeId> {
    let g = &model.graph;
    let id = g.producer(v)?;
    let n = g.node(id);
    if !n.domain.is_empty() || n.output(0) != Some(v) {
        return None;
    }
    let last = |axis: i64| axis == -1 || axis == 3;
    let ok = match n.op_type.as_str() {
        "Slice" => slice_params(model, n).is_some_and(|(axis, _, _, step)| last(axis) && step == 1),
        "LayerNormalization" | "SimplifiedLayerNormalization" | "RMSNormalization" => {
            let small = |i: usize| {
                n.input(i)
                    .is_none_or(|w| g.value(w).ty.shape.as_ref().is_some_and(|s| s.len() <= 1))
            };
            let stats_unread = n
                .outputs
                .iter()
                .skip(1)
                .flatten()
                .all(|&o| !g.is_graph_output(o) && g.consumers(o).is_empty());
            norm_attrs(model, n).is_some_and(|(axis, _, _)| last(axis))
                && small(1)
                && small(2)
                && stats_unread
        }
        _ => false,
    };
    (ok && dims(model, n.input(0)?).is_some_and(|d| d.len() == 4)).then_some(id)
}

/// The query of the score MatMul `mm_id`, whose first operand is `q4`.
pub fn query(model: &Model, q4: ValueId, mm_id: NodeId) -> Result<Query, String> {
    let g = &model.graph;
    only_reader(g, q4, mm_id)?;
    let rotary = |v: ValueId| {
        g.producer(v).filter(|&p| {
            let n = g.node(p);
            n.op_type == "RotaryEmbedding" && n.domain == MS_DOMAIN
        })
    };
    let mut remove = vec![];
    let (heads_v, rope) = if let Some(rot_id) = rotary(q4) {
        remove.push(rot_id);
        let x = g
            .node(rot_id)
            .input(0)
            .ok_or("RotaryEmbedding has no input")?;
        only_reader(g, x, rot_id)?;
        (x, Some((rot_id, None)))
    } else if let Some((cat_id, cat)) = produced_by(g, q4, "Concat") {
        // Concat(RotaryEmbedding(heads[.., :r]), heads[.., r:]) on the last axis.
        let (Some(a), Some(b), 2) = (cat.input(0), cat.input(1), cat.inputs.len()) else {
            return Err("the query Concat does not join two parts".into());
        };
        let rot_id = rotary(a).ok_or("the query Concat's first part is not a RotaryEmbedding")?;
        let rot_in = g
            .node(rot_id)
            .input(0)
            .ok_or("RotaryEmbedding has no input")?;
        let (s1_id, s1) =
            produced_by(g, rot_in, "Slice").ok_or("the rotary part is not a Slice")?;
        let (s2_id, s2) = produced_by(g, b, "Slice").ok_or("the pass part is not a Slice")?;
        let t = s1.input(0).ok_or("Slice has no input")?;
        if s2.input(0) != Some(t) {
            return Err("the rotary and pass parts slice different heads".into());
        }
        let d = match dims(model, t).as_deref() {
            Some([_, _, _, Dim::Known(d)]) => *d,
            _ => return Err(format!("the query heads {} are not 4-D", g.value(t).ty)),
        };
        let last = |axis: i64| axis == -1 || axis == 3;
        let r = match (slice_params(model, s1), slice_params(model, s2)) {
            (Some((a1, 0, r, 1)), Some((a2, r2, end, 1)))
                if last(a1) && last(a2) && r == r2 && 0 < r && r <= d && end >= d =>
            {
                r
            }
            _ => return Err("the query slices are not [:r] and [r:] of the last axis".into()),
        };
        if !last(concat_axis(model, cat)) {
            return Err("the query Concat is not on the last axis".into());
        }
        for (v, reader) in [(a, cat_id), (b, cat_id), (rot_in, rot_id)] {
            only_reader(g, v, reader)?;
        }
        let readers = g.consumers(t);
        if g.is_graph_output(t) || readers.len() != 2 || !readers.contains(&s2_id) {
            return Err(format!("'{}' is read outside the query", g.name(t)));
        }
        remove.extend([cat_id, rot_id, s1_id, s2_id]);
        // r = D: the pass part is empty and the rotary covers every channel.
        (t, Some((rot_id, (r < d).then_some(r))))
    } else {
        (q4, None)
    };
    let head = match dims(model, heads_v).as_deref() {
        Some([_, _, _, Dim::Known(d)]) => *d,
        _ => {
            return Err(format!(
                "the query heads '{}' {} are not 4-D with a known head size",
                g.name(heads_v),
                g.value(heads_v).ty
            ))
        }
    };
    // Head-local ops between the heads and their Transpose, outermost first.
    let mut local = vec![];
    let mut v = heads_v;
    while produced_by(g, v, "Transpose").is_none() {
        let id = head_local(model, v)
            .filter(|_| local.len() < 4)
            .ok_or_else(|| format!("query heads '{}' are not a Transpose", g.name(v)))?;
        if let Some(&next) = local.last() {
            only_reader(g, v, next)?;
        }
        local.push(id);
        v = g.node(id).input(0).ok_or("no input")?;
    }
    let (qt_id, qt) = produced_by(g, v, "Transpose").ok_or("unreachable")?;
    require_perm(model, qt, qt_id, &[0, 2, 1, 3])?;
    let t = qt.input(0).ok_or("Transpose has no input")?;
    // The Transpose goes when only the chain (or the query's reader) reads it.
    let transpose_single = match local.last() {
        None => true, // heads_v itself: its reader was checked above
        Some(&inner) => only_reader(g, v, inner).is_ok(),
    };
    if local.is_empty() {
        if let Some((qr_id, qr_n)) = produced_by(g, t, "Reshape") {
            let q2 = qr_n.input(0).ok_or("Reshape has no input")?;
            if let (Some((heads, hd)), Ok(())) =
                (split_dims(model, q2, t), only_reader(g, t, qt_id))
            {
                remove.extend([qt_id, qr_id]);
                return Ok(Query {
                    q2,
                    dims: dims(model, q2).unwrap_or_default(),
                    remove,
                    heads,
                    head: hd,
                    rope,
                    merge: None,
                });
            }
        }
    }
    // Anything else 4-D: the heads merge back with one Reshape.
    let (d0, d1, heads) = match dims(model, t).as_deref() {
        Some([a, b, Dim::Known(n), Dim::Known(_)])
            if !matches!(a, Dim::Unknown) && !matches!(b, Dim::Unknown) =>
        {
            (a.clone(), b.clone(), *n)
        }
        _ => {
            return Err(format!(
                "the query heads are not Transpose(0,2,1,3) of a [d0, d1, N, E] value ('{}' {})",
                g.name(t),
                g.value(t).ty
            ))
        }
    };
    if transpose_single {
        remove.push(qt_id);
    }
    remove.extend(&local);
    local.reverse();
    Ok(Query {
        q2: t,
        dims: vec![d0, d1, Dim::Known(heads * head)],
        remove,
        heads,
        head,
        rope,
        merge: Some(local),
    })
}

/// The 3-D query the op (or its 3-D rotary) reads: `q.q2` itself, or the head-local nodes
/// re-emitted on the `[d0, d1, N, E]` value and `Reshape(·, [0, 0, N·D])`.
pub fn query_input(model: &Model, patch: &mut Patch, q: &Query, dt: DType) -> ValueRef {
    let g = &model.graph;
    let Some(local) = &q.merge else {
        return q.q2.into();
    };
    let base = g.name(q.q2).to_string();
    let mut cur: ValueRef = q.q2.into();
    for &id in local {
        let n = g.node(id);
        let name = g.fresh_name(&format!("{}_bsnh", g.name(n.output(0).unwrap_or(q.q2))));
        let out = patch.new_value(
            &name,
            TensorType {
                dtype: Some(dt),
                shape: None,
            },
        );
        let mut node: NewNode = n.clone().into();
        node.name = fresh_node_name(g, &format!("{}_bsnh", n.label(id)));
        node.inputs[0] = Some(cur);
        node.outputs = vec![Some(out)];
        patch.add.push(node);
        cur = out;
    }
    let shape_name = g.fresh_name(&format!("{base}_merge_shape"));
    let target = Tensor::I64(
        ArrayD::from_shape_vec(IxDyn(&[3]), vec![0, 0, q.heads * q.head]).expect("3 values"),
    );
    let shape = patch.new_initializer(&shape_name, from_tensor(&shape_name, &target));
    let name = g.fresh_name(&format!("{base}_merged"));
    let out = patch.new_value(
        &name,
        TensorType {
            dtype: Some(dt),
            shape: Some(q.dims.clone()),
        },
    );
    let mut reshape = NewNode::new("Reshape", "");
    reshape.name = fresh_node_name(g, &name);
    reshape.inputs = vec![Some(cur), Some(shape)];
    reshape.outputs = vec![Some(out)];
    patch.add.push(reshape);
    out
}

/// One element of a shape computed in the graph: a constant, or dim `i` of a value's type.
#[derive(Clone, Debug, PartialEq)]
enum ShapeElem {
    Const(i64),
    Dim(Dim),
}

/// The elements of `v` when it is `Concat` (axis 0) of constant int vectors and
/// `Slice(Shape(x), start, end)` / `Shape(x)` pieces, with x's dims read from its type
/// (torch dynamo's decomposition of sdpa builds its reshape targets so).
fn shape_elems(model: &Model, v: ValueId, x: ValueId) -> Option<Vec<ShapeElem>> {
    let g = &model.graph;
    let xd = dims(model, x)?;
    let piece = |p: ValueId| -> Option<Vec<ShapeElem>> {
        if let Some(c) = crate::passes::matchers::constant_value(model, p) {
            return Some(c.to_i64_vec()?.into_iter().map(ShapeElem::Const).collect());
        }
        let (whole, range) = match produced_by(g, p, "Shape") {
            Some((_, s)) => (s, (0, xd.len() as i64)),
            None => {
                let (_, sl) = produced_by(g, p, "Slice")?;
                let (axis, start, end, step) = slice_params(model, sl)?;
                let (_, s) = produced_by(g, sl.input(0)?, "Shape")?;
                (axis == 0 && step == 1).then_some(())?;
                (s, (start, end))
            }
        };
        // A Shape with start/end attributes is not read here.
        let whole_shape = crate::ops::attrs_of::<crate::ops::shape_ops::Shape>(model, whole)
            .is_some_and(|a| a.start == 0 && a.end.is_none());
        if whole.input(0) != Some(x) || !whole_shape {
            return None;
        }
        let r = xd.len() as i64;
        let clamp = |i: i64| if i < 0 { (i + r).max(0) } else { i.min(r) };
        let (a, b) = (clamp(range.0), clamp(range.1));
        Some(
            (a..b.max(a))
                .map(|i| ShapeElem::Dim(xd[i as usize].clone()))
                .collect(),
        )
    };
    if let Some((_, cat)) = produced_by(g, v, "Concat") {
        let mut out = vec![];
        for p in cat.inputs.iter() {
            out.extend(piece((*p)?)?);
        }
        return Some(out);
    }
    piece(v)
}

/// k4 `[a, b, c, d]` when `kt` is torch dynamo's `Kᵀ` for sdpa: `Reshape(Transpose(Reshape(k4,
/// [-1, c, d]), [0, 2, 1]), [a, b, d, c])`, both targets computed from k4's own shape (flatten the
/// leading axes, swap the last two, unflatten: the last two axes transposed). The three nodes go
/// when each feeds only the next (and the last only `reader`).
pub fn flattened_key_transpose(
    model: &Model,
    kt: ValueId,
    reader: NodeId,
) -> Option<(ValueId, Vec<NodeId>)> {
    let g = &model.graph;
    let (outer_id, outer) = produced_by(g, kt, "Reshape")?;
    let t = outer.input(0)?;
    let (t_id, tn) = produced_by(g, t, "Transpose")?;
    require_perm(model, tn, t_id, &[0, 2, 1]).ok()?;
    let flat = tn.input(0)?;
    let (inner_id, inner) = produced_by(g, flat, "Reshape")?;
    let k4 = inner.input(0)?;
    let [a, b, c, d] = dims(model, k4)?.try_into().ok()?;
    use ShapeElem::{Const, Dim as D};
    let same = |e: &ShapeElem, want: &Dim| match (e, want) {
        (Const(v), Dim::Known(w)) => v == w,
        (D(x), w) => x.provably_eq(w),
        _ => false,
    };
    let inner_t = shape_elems(model, inner.input(1)?, k4)?;
    let outer_t = shape_elems(model, outer.input(1)?, k4)?;
    let ok_inner = inner_t.len() == 3
        && inner_t[0] == Const(-1)
        && same(&inner_t[1], &c)
        && same(&inner_t[2], &d);
    let ok_outer = outer_t.len() == 4
        && [&a, &b, &d, &c]
            .iter()
            .zip(&outer_t)
            .all(|(w, e)| same(e, w));
    let single = only_reader(g, kt, reader).is_ok()
        && only_reader(g, t, outer_id).is_ok()
        && only_reader(g, flat, t_id).is_ok();
    (ok_inner && ok_outer && single).then(|| (k4, vec![outer_id, t_id, inner_id]))
}
