//! Rotary position embedding in the interleaved form ("rotate every two": GPT-J, CodeGen; the
//! `rotary` rule's second form) → com.microsoft.RotaryEmbedding with `interleaved = 1`.
//!
//! ```text
//!   before (x [B, S, N, r]: the heads before their transpose)            after
//!
//!   x ─┬─► Mul(·, C4) ──────────────────────────────────────────┐       x ─► Reshape [B, S, N·r]
//!      ├─► Slice[0::2] ─► Unsqueeze(-1) ───────┐                Add ─► y   ─► RotaryEmbedding
//!      └─► Slice[1::2] ─► Neg ─► Unsqueeze(-1) ─► Concat(-1) ─►           (interleaved, N heads)
//!            Reshape [B, S, N, r] ─► Mul(·, S4) ┘                      ─► Reshape [B, S, N, r] ─► y
//!
//!   C4 = Reshape(Tile(Unsqueeze…(C), [1, 1, 1, 1, 2]), [1, S, 1, r])    cos_cache = Reshape(C, [-1, r/2])
//!   (dynamo: Expand(Unsqueeze(C), [1, 1, 1, 1, 2]) in place of the Tile)
//!   (each of C's r/2 columns twice, side by side: repeat_interleave)
//! ```
//! Pairs (x[2i], x[2i+1]) become (x[2i]·C[i] − x[2i+1]·S[i], x[2i+1]·C[i] + x[2i]·S[i]), the op's
//! interleaved rotation, for any tables C and S `[1, seq, r/2]` (one row per token): so nothing
//! about how the model computes them (GPT-J gathers rows of one sin|cos table by position) needs
//! proof, and, as in the rotate-half form, the caches are the rows themselves read from the start
//! offset `[0]` (token s reads row s). The op runs on the 3-D view `[B, S, N·r]` of x with
//! `num_heads` N, which is x's own layout (no transpose).
//!
//! Partial rotary (GPT-J rotates the first `rotary_dim` channels of each head): when x is
//! `k[..., :r]` of a `[B, S, N, D]` k and y is only joined back as `Concat(y, k[..., r:])`, the op
//! takes k with `rotary_embedding_dim = r` and the Slices and the Concat go too.
//!
//! Guards: x is float32 or float16, 4-D with known N and even r; the Slices take x's last axis
//! from 0 and from 1 to its end with step 2; Neg reads the odd one; each is unsqueezed on a new
//! last axis and Concat joins (−odd, even) there; a Reshape gives back x's shape (the flatten of
//! the pairs; checked dim by dim); every removed intermediate is single-use; each table is
//! `[1, S, 1, r]` from Tile(`[1, S, 1, r/2, 1]`, repeats `[1, 1, 1, 1, 2]`) or Expand to that shape of Unsqueezes of a
//! `[1, S, r/2]` C of x's type, with S x's own seq dim.

use crate::ir::attr;
use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Model, NodeId, ValueId};
use crate::passes::fuse_rotary::{rotary_sum, shared_ints};
use crate::passes::matchers::{
    concat_axis, constant_value, fresh_node_name, produced_by, require_f32_or_f16, slice_params,
    sole_consumer, sole_consumer_op,
};
use crate::passes::rewrite::{NewNode, Patch, ValueRef};

/// Whether the Neg at `neg_id` reads a step-2 Slice (this form, not rotate-half).
pub(super) fn is_interleaved(model: &Model, neg_id: NodeId) -> bool {
    let g = &model.graph;
    let slice = g
        .node(neg_id)
        .input(0)
        .and_then(|v| produced_by(g, v, "Slice"));
    slice
        .and_then(|(_, s)| slice_params(model, s))
        .is_some_and(|p| p.3 == 2)
}

pub(super) fn fuse(model: &Model, neg_id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let neg = g.node(neg_id);
    let odd = neg.input(0).ok_or("Neg has no input")?;
    let (s_odd, s_odd_n) = produced_by(g, odd, "Slice").ok_or("no Slice")?;
    let x = s_odd_n.input(0).ok_or("Slice has no input")?;
    let dtype = require_f32_or_f16(g, x)?;
    let shape = g.value(x).ty.shape.clone().unwrap_or_default();
    let (heads, r) = match shape[..] {
        [_, _, Dim::Known(n), Dim::Known(r)] if n > 0 && r > 0 && r % 2 == 0 => (n, r),
        _ => {
            return Err(format!(
                "'{}' {} is not [batch, seq, heads, head] with known heads and an even head",
                g.name(x),
                g.value(x).ty
            ))
        }
    };
    let last = |a: i64| a == -1 || a == 3;
    let every_two = |s: &crate::ir::Node, from: i64| matches!(slice_params(model, s), Some((a, f, end, 2)) if last(a) && f == from && end >= r);
    if !every_two(s_odd_n, 1) {
        return Err("the odd channels are not x[..., 1::2]".into());
    }
    if sole_consumer(g, odd)? != neg_id {
        return Err(format!("'{}' is read elsewhere", g.name(odd)));
    }
    // stack((-odd, even), -1): each unsqueezed on a new last axis, then joined there.
    let new_last = |n: &crate::ir::Node| {
        let opset = model.opset("").unwrap_or(1);
        matches!(
            crate::ops::infer::axes_of(g, n, opset).as_deref(),
            Some([-1 | 4])
        )
    };
    let neg_out = neg.output(0).ok_or("Neg has no output")?;
    let (u_neg, u_neg_n) = sole_consumer_op(g, neg_out, "Unsqueeze", "-x[1::2]")?;
    let un = u_neg_n.output(0).ok_or("Unsqueeze has no output")?;
    let (cat, cat_n) = sole_consumer_op(g, un, "Concat", "the unsqueezed -x[1::2]")?;
    let axis = concat_axis(model, cat_n);
    if !new_last(u_neg_n) || cat_n.inputs.len() != 2 || cat_n.input(0) != Some(un) {
        return Err("the pairs are not stacked as (-x[1::2], x[0::2]) on a new last axis".into());
    }
    if axis != -1 && axis != 4 {
        return Err("the pairs are not stacked on a new last axis".into());
    }
    let ue = cat_n.input(1).ok_or("Concat input")?;
    let (u_even, u_even_n) = produced_by(g, ue, "Unsqueeze").ok_or("x[0::2] is not unsqueezed")?;
    let even = u_even_n.input(0).ok_or("Unsqueeze has no input")?;
    let (s_even, s_even_n) = produced_by(g, even, "Slice").ok_or("x[0::2] is not a Slice")?;
    if !new_last(u_even_n) || !every_two(s_even_n, 0) || s_even_n.input(0) != Some(x) {
        return Err("the even channels are not x[..., 0::2] unsqueezed on a new last axis".into());
    }
    for (v, reader) in [(even, u_even), (ue, cat)] {
        if sole_consumer(g, v)? != reader {
            return Err(format!("'{}' is read elsewhere", g.name(v)));
        }
    }
    // flatten(-2): back to x's shape.
    let stacked = cat_n.output(0).ok_or("Concat has no output")?;
    let (flat, flat_n) = sole_consumer_op(g, stacked, "Reshape", "the stacked pairs")?;
    let rx = flat_n.output(0).ok_or("Reshape has no output")?;
    if !same_dims(g.value(rx).ty.shape.as_deref(), &shape) {
        return Err(format!(
            "the stacked pairs are reshaped to {}, not x's shape",
            g.value(rx).ty
        ));
    }

    // y = x · C4 + rx · S4.
    let sum = rotary_sum(g, x, rx, "rotate_every_two(x)")?;
    let cos = table(model, sum.cos4, &shape[1], r, "cos")?;
    let sin = table(model, sum.sin4, &shape[1], r, "sin")?;
    let y = sum.y;

    let mut remove = vec![s_odd, neg_id, u_neg, s_even, u_even, cat, flat];
    remove.extend(sum.nodes);
    let (src, out, width) = match partial(model, x, y, r) {
        Some(p) => {
            remove.extend(p.remove);
            p.whole
        }
        None => (x, y, r),
    };

    let mut patch = Patch {
        remove,
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let zero = shared_ints(model, &mut patch, "rotary_start", &[0]);
    let rows = shared_ints(
        model,
        &mut patch,
        &format!("rotary_rows_{}", r / 2),
        &[-1, r / 2],
    );
    let to_3d = shared_ints(model, &mut patch, "rotary_bsnh_3d", &[0, 0, -1]);
    let to_4d = shared_ints(
        model,
        &mut patch,
        &format!("rotary_bsnh_{heads}x{width}"),
        &[0, 0, heads, width],
    );
    let reshape = |patch: &mut Patch, name: &str, from: ValueRef, to: ValueRef, ty: TensorType| {
        let v = patch.new_value(&g.fresh_name(name), ty);
        let mut n = NewNode::new("Reshape", "");
        n.name = fresh_node_name(g, &format!("{name}_Reshape"));
        n.inputs = vec![Some(from), Some(to)];
        n.outputs = vec![Some(v)];
        patch.add.push(n);
        v
    };
    let mut caches = vec![];
    for c in [cos, sin] {
        let ty = TensorType {
            dtype: Some(dtype),
            shape: Some(vec![shape[1].clone(), Dim::Known(r / 2)]),
        };
        let name = format!("{}_cache", g.name(c));
        caches.push(reshape(&mut patch, &name, c.into(), rows, ty));
    }
    let hidden = match (&shape[2], width) {
        (Dim::Known(n), w) => Dim::Known(n * w),
        _ => Dim::Unknown,
    };
    let flat_ty = |d: Dim| TensorType {
        dtype: Some(dtype),
        shape: Some(vec![shape[0].clone(), shape[1].clone(), d]),
    };
    let x3 = reshape(
        &mut patch,
        &format!("{}_3d", g.name(src)),
        src.into(),
        to_3d,
        flat_ty(hidden.clone()),
    );
    let y3 = patch.new_value(
        &g.fresh_name(&format!("{}_3d", g.name(out))),
        flat_ty(hidden),
    );
    let mut rope = NewNode::new("RotaryEmbedding", MS_DOMAIN);
    rope.name = fresh_node_name(g, &format!("{}_RotaryEmbedding", g.name(out)));
    rope.inputs = vec![Some(x3), Some(zero), Some(caches[0]), Some(caches[1])];
    rope.outputs = vec![Some(y3)];
    rope.set_attr(attr::int("interleaved", 1));
    rope.set_attr(attr::int("num_heads", heads));
    if width != r {
        rope.set_attr(attr::int("rotary_embedding_dim", r));
    }
    let mut back = NewNode::new("Reshape", "");
    back.name = fresh_node_name(g, &format!("{}_Reshape", g.name(out)));
    back.inputs = vec![Some(y3), Some(to_4d)];
    back.outputs = vec![Some(out.into())];
    // The fused node is the last one added (the report counts it).
    patch.add.extend([back, rope]);
    Ok(patch)
}

/// Whether `got` is provably `want`, dim by dim (known and equal, or the same symbol).
fn same_dims(got: Option<&[Dim]>, want: &[Dim]) -> bool {
    got.is_some_and(|got| {
        got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(a, b)| a.provably_eq(b) && !matches!(a, Dim::Unknown))
    })
}

/// The `[1, S, r/2]` table C behind `t4` = `[1, S, 1, r]` Reshape of Tile(Unsqueezes of C,
/// `[1, 1, 1, 1, 2]`) or of Expand(Unsqueezes of C, `[1, 1, 1, 1, 2]`): each of C's columns twice, side by side.
fn table(model: &Model, t4: ValueId, seq: &Dim, r: i64, what: &str) -> Result<ValueId, String> {
    let g = &model.graph;
    let h = r / 2;
    let fail = |why: &str| format!("the {what} table '{}' {why}", g.name(t4));
    let one = Dim::Known(1);
    let want4 = [one.clone(), seq.clone(), one.clone(), Dim::Known(r)];
    if !same_dims(g.value(t4).ty.shape.as_deref(), &want4) {
        return Err(fail(&format!("{} is not [1, seq, 1, {r}]", g.value(t4).ty)));
    }
    let (_, rs) = produced_by(g, t4, "Reshape").ok_or_else(|| fail("is not a Reshape"))?;
    let tiled = rs.input(0).ok_or("Reshape has no input")?;
    // Tile by [1, 1, 1, 1, 2] (torch's legacy exporter) or Expand to [1, 1, 1, 1, 2] (dynamo):
    // from [1, S, 1, r/2, 1] both give each column twice, side by side.
    let (_, tile) = produced_by(g, tiled, "Tile")
        .or_else(|| produced_by(g, tiled, "Expand"))
        .ok_or_else(|| fail("is not a Tile or an Expand"))?;
    let repeats = tile.input(1).and_then(|v| constant_value(model, v));
    if repeats.and_then(|t| t.to_i64_vec()).as_deref() != Some(&[1, 1, 1, 1, 2]) {
        return Err(fail(&format!(
            "does not repeat each column twice ({} [1, 1, 1, 1, 2])",
            tile.op_type
        )));
    }
    let mut v = tile
        .input(0)
        .ok_or_else(|| format!("{} has no input", tile.op_type))?;
    let want5 = [
        one.clone(),
        seq.clone(),
        one.clone(),
        Dim::Known(h),
        one.clone(),
    ];
    if !same_dims(g.value(v).ty.shape.as_deref(), &want5) {
        return Err(fail("is not tiled from [1, seq, 1, r/2, 1]"));
    }
    // Unsqueezes only insert 1s: the elements keep their order.
    let mut steps = 0;
    while let Some((_, u)) = produced_by(g, v, "Unsqueeze") {
        v = u.input(0).ok_or("Unsqueeze has no input")?;
        steps += 1;
    }
    let want3 = [one, seq.clone(), Dim::Known(h)];
    if steps == 0 || !same_dims(g.value(v).ty.shape.as_deref(), &want3) {
        return Err(fail(&format!(
            "is not unsqueezed from a [1, seq, {h}] table"
        )));
    }
    if g.value(v).ty.dtype != g.value(t4).ty.dtype {
        return Err(fail("changes type on the way"));
    }
    Ok(v)
}

/// GPT-J's partial rotary around the rotation of `x` into `y`: x = `k[..., :r]` of a `[B, S, N,
/// D]` k (D > r), read only by this rotation, and y read only by `Concat(y, k[..., r:])` on the
/// last axis.
struct Partial {
    /// (k, the Concat's output, D).
    whole: (ValueId, ValueId, i64),
    remove: Vec<NodeId>,
}

fn partial(model: &Model, x: ValueId, y: ValueId, r: i64) -> Option<Partial> {
    let g = &model.graph;
    let last = |a: i64| a == -1 || a == 3;
    let (s_rot, s_rot_n) = produced_by(g, x, "Slice")?;
    let k = s_rot_n.input(0)?;
    let d = match g.value(k).ty.shape.as_deref()? {
        [_, _, _, Dim::Known(d)] if *d > r => *d,
        _ => return None,
    };
    if !matches!(slice_params(model, s_rot_n), Some((a, 0, e, 1)) if last(a) && e == r) {
        return None;
    }
    // x's readers are the rotation's three (both step-2 Slices and the cos Mul).
    if g.consumers(x).len() != 3 {
        return None;
    }
    let cat = sole_consumer(g, y).ok()?;
    let cat_n = g.node(cat);
    if !cat_n.is("Concat") || !last(concat_axis(model, cat_n)) || cat_n.inputs.len() != 2 {
        return None;
    }
    if cat_n.input(0) != Some(y) {
        return None;
    }
    let pass = cat_n.input(1)?;
    let (s_pass, s_pass_n) = produced_by(g, pass, "Slice")?;
    let rest =
        matches!(slice_params(model, s_pass_n), Some((a, s, e, 1)) if last(a) && s == r && e >= d);
    if !rest || s_pass_n.input(0) != Some(k) || sole_consumer(g, pass).ok()? != cat {
        return None;
    }
    Some(Partial {
        whole: (k, cat_n.output(0)?, d),
        remove: vec![s_rot, s_pass, cat],
    })
}
