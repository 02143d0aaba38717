//! Grouped-query attention traced at one new token → the heads-first form that
//! `multi_head_attention` fuses. torch's legacy exporter writes sdpa with `enable_gqa` (a
//! transformers 5.x Llama/Qwen decode step traced with one new token) by grouping the query heads
//! instead of repeating the keys: a Reshape of the query `[B, N, S, D]` to `[B, Hkv, G, D]` (N =
//! Hkv·G query heads, Hkv key/value heads), the attention on Hkv heads of G rows, and a Reshape back.
//!
//! ```text
//!   before                                             after
//!
//!   q4 [B, N, S, D] ─► Reshape ─► qg [B, Hkv, G, D]      q4 [B, N, S, D]
//!   qg ─► [Mul(c)] ─► MatMul(·, kᵀ) ─► [Add(mask)]        q4 ─► [Mul(c)] ─► MatMul(·, kᵀ') ─► [Add(mask)]
//!      ─► Softmax(-1) ─► [NaN guard] ─► MatMul(·, v)         ─► Softmax(-1) ─► [NaN guard] ─► MatMul(·, v')
//!      ─► Reshape [B, -1, S, D] ─► y                         ─► y
//!
//!   kᵀ = [Mul(c)](Transpose(0,1,3,2)(k)), k and v [B, Hkv, T, D]; kᵀ' and v' read k and v
//!   repeated for the query heads: Reshape [0, Hkv, 1, -1, D] → Expand [1, 1, G, 1, 1] →
//!   Reshape [0, N, -1, D] (transformers' repeat_kv), then kᵀ's own head-local ops again.
//! ```
//! Why it is exact: the grouping Reshape only runs at S = 1 (N·S·D elements into Hkv·G·D), where
//! qg[b, h, g] = q4[b, h·G + g, 0]: query head n reads key head ⌊n / G⌋, which is what head n of
//! the repeated keys and values is. Every op between the two Reshapes is elementwise or a Softmax
//! over the last axis, and its other operands are broadcast along both head and query axes (dim 1
//! is 1; dim 2 is 1 or S), so it computes the same in either layout; the closing Reshape gives
//! back q4's layout, which the new chain has already. (The new chain also runs for S > 1, where
//! the original stopped at its Reshape.)
//!
//! Guards: N = Hkv·G with G > 1, all known; the chain's values are `[B, Hkv, G, ·]`, read only
//! inside the chain (no graph output); it holds only elementwise ops, Softmax over the last axis
//! and MatMuls whose left operand is the chain (their right operand, `[B, Hkv, ·, ·]` with a
//! known last dim, is repeated: through the head-local ops above it that nothing else reads,
//! Transposes keeping axes 0 and 1 and Mul/Div by a rank-0 constant (`matchers::score_scale`),
//! which are emitted again on the repeated value); the closing Reshape's target is
//! `[B or 0, N or -1, S, D or 0 or -1]`.

use std::collections::{HashMap, HashSet};

use crate::ir::types::{Dim, TensorType};
use crate::ir::{Graph, Model, Node, NodeId, ValueId};
use crate::ops::reduce::Softmax;
use crate::ops::shape_ops::{Reshape, Transpose};
use crate::passes::fuse_rotary::shared_ints;
use crate::passes::matchers::{fresh_node_name, scalar_constant, score_scale};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind, ValueRef};

pub struct GroupedQueryHeads;

impl Rule for GroupedQueryHeads {
    fn name(&self) -> &'static str {
        "grouped_query_heads"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Reshape"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        if !model.graph.node(id).is("Reshape") {
            return Proposal::NoMatch;
        }
        Proposal::from(rewrite(model, id))
    }
}

/// Ops that may sit between the two Reshapes besides Softmax and MatMul: elementwise, so their
/// meaning does not depend on how the leading axes are split.
const ELEMENTWISE: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Where", "IsNaN", "IsInf", "Not", "And", "Or", "Equal", "Less",
    "Greater", "Max", "Min", "Neg", "Exp", "Cast", "Identity",
];

/// At most this many ops between the two Reshapes (an attention has about eight).
const MAX_CHAIN: usize = 32;

fn shape(model: &Model, v: ValueId) -> Option<&[Dim]> {
    model.graph.value(v).ty.shape.as_deref()
}

/// The grouping, read off the query Reshape: (B, N, S, Hkv, G).
struct Grouping {
    batch: Dim,
    heads: i64,
    seq: Dim,
    kv_heads: i64,
    group: i64,
}

fn rewrite(model: &Model, id: NodeId) -> Result<Option<Patch>, String> {
    let g = &model.graph;
    let r = g.node(id);
    let (Some(q4), Some(qg)) = (r.input(0), r.output(0)) else {
        return Ok(None);
    };
    let (Some(qs), Some(gs)) = (shape(model, q4), shape(model, qg)) else {
        return Ok(None);
    };
    let ([b, Dim::Known(n), s, d], [b2, Dim::Known(kv), Dim::Known(grp), d2]) = (qs, gs) else {
        return Ok(None);
    };
    if *grp < 2 || kv * grp != *n || !b.provably_eq(b2) || !d.provably_eq(d2) {
        return Ok(None);
    }
    let grouping = Grouping {
        batch: b.clone(),
        heads: *n,
        seq: s.clone(),
        kv_heads: *kv,
        group: *grp,
    };
    let chain = walk(model, qg, &grouping)?;
    let mut patch = Patch {
        remove: vec![id, chain.closing],
        ..Default::default()
    };
    // Old chain value → what the new chain reads instead.
    let mut map: HashMap<ValueId, ValueRef> = HashMap::from([(qg, q4.into())]);
    for &c in &chain.nodes {
        let out = g.node(c).output(0).ok_or("a chain op has no output")?;
        let new = if out == chain.ctx {
            g.node(chain.closing)
                .output(0)
                .ok_or("the closing Reshape has no output")?
                .into()
        } else {
            let ty = regrouped(&g.value(out).ty, &grouping);
            patch.new_value(&g.fresh_name(&format!("{}_heads", g.name(out))), ty)
        };
        map.insert(out, new);
    }
    let mut repeated: HashMap<ValueId, ValueRef> = HashMap::new();
    for &c in &chain.nodes {
        let node = g.node(c);
        let mut inputs: Vec<Option<ValueRef>> = Vec::with_capacity(node.inputs.len());
        for input in &node.inputs {
            let Some(v) = *input else {
                inputs.push(None);
                continue;
            };
            let slot = inputs.len();
            inputs.push(Some(match map.get(&v) {
                Some(&m) => m,
                None if node.is("MatMul") && slot == 1 => {
                    if let Some(&m) = repeated.get(&v) {
                        m
                    } else {
                        let m = repeat(model, &mut patch, v, &grouping)?;
                        repeated.insert(v, m);
                        m
                    }
                }
                None => v.into(),
            }));
        }
        let out = map[&node.output(0).expect("checked")];
        patch.remove.push(c);
        patch.add.push(again(g, node, inputs, out));
    }
    for &c in &chain.shapes {
        let node = g.node(c);
        let (input, out) = (
            node.input(0).map(|v| map[&v]),
            node.output(0).expect("Shape"),
        );
        patch.remove.push(c);
        patch.add.push(again(g, node, vec![input], out.into()));
    }
    Ok(Some(patch))
}

/// The ops between the grouping Reshape and the closing one.
struct Chain {
    /// In the order they were reached.
    nodes: Vec<NodeId>,
    /// Shape ops that read a chain value for its batch or last dim only (the exporter sizes the
    /// closing Reshape from them): they read the new chain's value, whose dims 0 and 3 are the
    /// same.
    shapes: Vec<NodeId>,
    /// The value the closing Reshape reads.
    ctx: ValueId,
    closing: NodeId,
}

/// Every reader of the grouped query and of what is computed from it, up to the closing Reshape;
/// why not when one of them may not be moved to the heads-first layout.
fn walk(model: &Model, qg: ValueId, grouping: &Grouping) -> Result<Chain, String> {
    let g = &model.graph;
    let mut nodes: Vec<NodeId> = vec![];
    let mut values: HashSet<ValueId> = HashSet::from([qg]);
    let mut closing: Option<(NodeId, ValueId)> = None;
    let mut shapes: Vec<NodeId> = vec![];
    let mut stack = vec![qg];
    while let Some(v) = stack.pop() {
        if g.is_graph_output(v) {
            return Err(format!("'{}' is a graph output", g.name(v)));
        }
        for &c in g.consumers(v) {
            if nodes.contains(&c) || shapes.contains(&c) || closing.is_some_and(|(e, _)| e == c) {
                continue;
            }
            let node = g.node(c);
            if node.is("Shape") && reads_outer_dims(model, node) {
                shapes.push(c);
                continue;
            }
            if node.is("Reshape") && node.input(0) == Some(v) && v != qg {
                if closing.is_some() {
                    return Err("two Reshapes read the grouped attention".into());
                }
                closing_target(model, node, v, grouping)?;
                closing = Some((c, v));
                continue;
            }
            let softmax_last = node.is("Softmax")
                && crate::ops::attrs_of::<Softmax>(model, node).is_some_and(|s| {
                    let rank = shape(model, v).map_or(0, <[Dim]>::len) as i64;
                    s.axis == -1 || s.axis == rank - 1
                });
            let matmul_left = node.is("MatMul") && node.input(0) == Some(v);
            let elementwise = node.domain.is_empty() && ELEMENTWISE.iter().any(|o| node.is(o));
            if !(softmax_last || matmul_left || elementwise) || node.outputs.len() != 1 {
                return Err(format!(
                    "{} '{}' reads the grouped query heads: only elementwise ops, a Softmax over \
                     the last axis and MatMuls with them on the left may",
                    node.op_type, node.name
                ));
            }
            nodes.push(c);
            if nodes.len() > MAX_CHAIN {
                return Err(format!(
                    "more than {MAX_CHAIN} ops read the grouped query heads"
                ));
            }
            let out = node.output(0).ok_or("an op without output")?;
            if !grouped(shape(model, out), grouping) {
                return Err(format!(
                    "'{}' is not [B, {}, {}, ·]",
                    g.name(out),
                    grouping.kv_heads,
                    grouping.group
                ));
            }
            values.insert(out);
            stack.push(out);
        }
    }
    let (closing, ctx) = closing.ok_or("no Reshape gives the query heads back")?;
    // Operands from outside the chain: a MatMul's right one is repeated; any other must be
    // broadcast along heads and queries.
    for &c in &nodes {
        let node = g.node(c);
        for (slot, v) in node.inputs.iter().enumerate() {
            let Some(v) = *v else { continue };
            if values.contains(&v) {
                continue;
            }
            if node.is("MatMul") {
                if slot != 1 {
                    return Err(format!(
                        "MatMul '{}' reads the heads on the right",
                        node.name
                    ));
                }
            } else if !broadcast_along_heads(shape(model, v), &grouping.seq) {
                return Err(format!(
                    "'{}' (read by {} '{}') is not broadcast along the heads and queries",
                    g.name(v),
                    node.op_type,
                    node.name
                ));
            }
        }
    }
    Ok(Chain {
        nodes,
        shapes,
        ctx,
        closing,
    })
}

/// True when Shape `node` (of a 4-D value) is read only for dims 0 and 3: by Gathers on axis 0
/// of a rank-0 constant index 0, 3, -1 or -4.
fn reads_outer_dims(model: &Model, node: &Node) -> bool {
    let g = &model.graph;
    let whole = crate::ops::attrs_of::<crate::ops::shape_ops::Shape>(model, node)
        .is_some_and(|s| s.start == 0 && s.end.is_none());
    let Some(out) = node.output(0) else {
        return false;
    };
    whole
        && !g.is_graph_output(out)
        && g.consumers(out).iter().all(|&c| {
            let r = g.node(c);
            r.is("Gather")
                && r.input(0) == Some(out)
                && crate::ops::attrs_of::<crate::ops::index_ops::Gather>(model, r)
                    .is_some_and(|a| a.axis == 0)
                && r.input(1)
                    .and_then(|i| scalar_constant(model, i))
                    .is_some_and(|i| [0.0, 3.0, -1.0, -4.0].contains(&i))
        })
}

/// `[·, Hkv, G, ·]`.
fn grouped(dims: Option<&[Dim]>, grouping: &Grouping) -> bool {
    matches!(dims, Some([_, Dim::Known(h), Dim::Known(q), _])
        if *h == grouping.kv_heads && *q == grouping.group)
}

/// A chain value's type in the heads-first layout: `[B, Hkv, G, X]` → `[B, N, S, X]`.
fn regrouped(ty: &TensorType, grouping: &Grouping) -> TensorType {
    let mut ty = ty.clone();
    if let Some(s) = ty.shape.as_mut() {
        s[1] = Dim::Known(grouping.heads);
        s[2] = grouping.seq.clone();
    }
    ty
}

/// True when an operand of rank ≤ 4, aligned to the right, has 1 at the head axis and 1 or S at
/// the query axis.
fn broadcast_along_heads(dims: Option<&[Dim]>, seq: &Dim) -> bool {
    let Some(d) = dims else { return false };
    let r = d.len();
    r <= 4
        && (r < 3 || d[r - 3] == Dim::Known(1))
        && (r < 2 || d[r - 2] == Dim::Known(1) || d[r - 2].provably_eq(seq))
}

/// Ok when the closing Reshape of `ctx` `[B, Hkv, G, E]` targets `[B, N, S, E]`: each element
/// that dim, 0 (copying ctx's, when that is the same dim) or one -1.
fn closing_target(
    model: &Model,
    node: &Node,
    ctx: ValueId,
    grouping: &Grouping,
) -> Result<(), String> {
    let g = &model.graph;
    let fail = || format!("Reshape '{}' does not give back [B, N, S, D]", node.name);
    let cs = shape(model, ctx).ok_or_else(fail)?;
    let want = [
        grouping.batch.clone(),
        Dim::Known(grouping.heads),
        grouping.seq.clone(),
        cs[3].clone(),
    ];
    let copy = !crate::ops::attrs_of::<Reshape>(model, node).is_some_and(|r| r.allowzero);
    let to = node
        .input(1)
        .and_then(|t| crate::ops::shape_value::int_elements(g, t))
        .ok_or_else(fail)?;
    let mut inferred = 0;
    let ok = to.len() == 4
        && to.iter().enumerate().all(|(i, e)| match e {
            Dim::Known(0) if copy => cs[i].provably_eq(&want[i]),
            Dim::Known(-1) => {
                inferred += 1;
                true
            }
            e => e.provably_eq(&want[i]),
        });
    if ok && inferred <= 1 {
        Ok(())
    } else {
        Err(fail())
    }
}

/// `v` (a MatMul's right operand, `[B, Hkv, ·, ·]`) for the query heads: its head-local ops
/// that nothing else reads emitted again on the repeated value they read.
fn repeat(
    model: &Model,
    patch: &mut Patch,
    v: ValueId,
    grouping: &Grouping,
) -> Result<ValueRef, String> {
    let g = &model.graph;
    let (kv, n) = (grouping.kv_heads, grouping.heads);
    // Walk up through head-local ops only this operand reads.
    let mut ops: Vec<(NodeId, ValueId)> = vec![];
    let mut root = v;
    while !g.is_graph_output(root) && g.consumers(root).len() == 1 {
        let Some(p) = g.producer(root) else { break };
        let node = g.node(p);
        let up = if node.is("Transpose") {
            crate::ops::attrs_of::<Transpose>(model, node)
                .and_then(|t| t.perm.as_deref())
                .filter(|p| p.len() == 4 && p[0] == 0 && p[1] == 1)
                .and(node.input(0))
        } else if let Ok(Some((_, x, _))) = score_scale(model, root) {
            Some(x)
        } else {
            None
        };
        let Some(up) = up else { break };
        ops.push((p, up));
        root = up;
    }
    let dims =
        shape(model, root).ok_or_else(|| format!("'{}' has no known shape", g.name(root)))?;
    let [b, Dim::Known(h), t, Dim::Known(e)] = dims else {
        return Err(format!(
            "'{}' is not [B, {kv}, ·, E] with E known",
            g.name(root)
        ));
    };
    if *h != kv {
        return Err(format!("'{}' has {h} heads, not {kv}", g.name(root)));
    }
    let ty = |d: Vec<Dim>| TensorType {
        dtype: g.value(root).ty.dtype,
        shape: Some(d),
    };
    let one = Dim::Known(1);
    let split = shared_ints(
        model,
        patch,
        &format!("gqa_split_{kv}x{e}"),
        &[0, kv, 1, -1, *e],
    );
    let expand = shared_ints(
        model,
        patch,
        &format!("gqa_expand_{}", grouping.group),
        &[1, 1, grouping.group, 1, 1],
    );
    let merge = shared_ints(model, patch, &format!("gqa_merge_{n}x{e}"), &[0, n, -1, *e]);
    let base = g.name(root).to_string();
    let steps = [
        (
            "Reshape",
            split,
            vec![b.clone(), Dim::Known(kv), one, t.clone(), Dim::Known(*e)],
        ),
        (
            "Expand",
            expand,
            vec![
                b.clone(),
                Dim::Known(kv),
                Dim::Known(grouping.group),
                t.clone(),
                Dim::Known(*e),
            ],
        ),
        (
            "Reshape",
            merge,
            vec![b.clone(), Dim::Known(n), t.clone(), Dim::Known(*e)],
        ),
    ];
    let mut x: ValueRef = root.into();
    for (i, (op, arg, d)) in steps.into_iter().enumerate() {
        let out = patch.new_value(&g.fresh_name(&format!("{base}_repeat{i}")), ty(d));
        let mut node = NewNode::new(op, "");
        node.name = fresh_node_name(g, &format!("{base}_repeat{i}_{op}"));
        node.inputs = vec![Some(x), Some(arg)];
        node.outputs = vec![Some(out)];
        patch.add.push(node);
        x = out;
    }
    // The head-local ops again, from the root up, on N heads.
    for &(p, through) in ops.iter().rev() {
        let node = g.node(p);
        let out = node.output(0).ok_or("an op without output")?;
        let mut new_ty = g.value(out).ty.clone();
        match new_ty.shape.as_mut() {
            Some(s) if s.len() == 4 && s[1] == Dim::Known(kv) => s[1] = Dim::Known(n),
            _ => return Err(format!("'{}' is not [B, {kv}, ·, ·]", g.name(out))),
        }
        let y = patch.new_value(&g.fresh_name(&format!("{}_heads", g.name(out))), new_ty);
        let inputs = (node.inputs.iter())
            .map(|&i| {
                if i == Some(through) {
                    Some(x)
                } else {
                    i.map(ValueRef::from)
                }
            })
            .collect();
        patch.remove.push(p);
        patch.add.push(again(g, node, inputs, y));
        x = y;
    }
    Ok(x)
}

/// `node` emitted again (named `{name}_heads`, its attributes kept) reading `inputs` and writing
/// `output`: the chain's ops, the Shapes that size it and the key's head-local ops each are.
fn again(g: &Graph, node: &Node, inputs: Vec<Option<ValueRef>>, output: ValueRef) -> NewNode {
    let mut new: NewNode = node.clone().into();
    new.name = fresh_node_name(g, &format!("{}_heads", node.name));
    new.inputs = inputs;
    new.outputs = vec![Some(output)];
    new
}
