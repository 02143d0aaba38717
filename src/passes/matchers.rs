//! Guards shared by rules: single-consumer checks, constant lookup, unique names.

use std::borrow::Cow;

use crate::ir::types::{Dim, TensorType};
use crate::ir::{attr, Graph, Model, Node, NodeId, ValueId};
use crate::ops::transformer::LayerNormalization;
use crate::passes::rewrite::{NewNode, Patch, ValueRef};
use crate::tensor::{DType, Tensor};

/// Ok when `v` feeds exactly one node use and is not a graph output; else the reason.
pub fn sole_consumer(g: &Graph, v: ValueId) -> Result<NodeId, String> {
    if g.is_graph_output(v) {
        return Err(format!("'{}' is a graph output", g.name(v)));
    }
    match g.consumers(v) {
        [only] => Ok(*only),
        [] => Err(format!("'{}' has no consumer", g.name(v))),
        many => Err(format!(
            "'{}' has {} consumers; fusing would duplicate it",
            g.name(v),
            many.len()
        )),
    }
}

/// The value of `v` when it is a constant: an initializer that no input overrides, or the output
/// of a Constant node. Borrowed from where it was decoded once (the graph, the parsed Constant).
pub fn constant_value(model: &Model, v: ValueId) -> Option<Cow<'_, Tensor>> {
    crate::ops::shape_value::constant_tensor(&model.graph, v)
}

/// A constant's shape, without decoding an initializer's bytes (a rule that only checks the
/// shape of a weight should not make the graph decode megabytes).
pub fn constant_shape(model: &Model, v: ValueId) -> Option<Vec<usize>> {
    match model.graph.constant(v) {
        Some(t) => t.dims.iter().map(|&d| usize::try_from(d).ok()).collect(),
        None => constant_value(model, v).map(|t| t.shape().to_vec()),
    }
}

/// A node name not used in the graph, derived from `base`.
pub fn fresh_node_name(g: &Graph, base: &str) -> String {
    let taken = |n: &str| g.has_node_named(n);
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken(n))
        .expect("unbounded")
}

/// Names that something other than a node reads: quantization annotations' parameter tensors and
/// training bindings. Their initializers must not be dropped, and trainable ones not folded.
pub fn pinned_names(model: &Model) -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    for a in &model.graph.extra.quantization_annotation {
        names.insert(a.tensor_name.clone());
        names.extend(
            a.quant_parameter_tensor_names
                .iter()
                .map(|kv| kv.value.clone()),
        );
    }
    for t in &model.proto.training_info {
        for kv in t.initialization_binding.iter().chain(&t.update_binding) {
            names.insert(kv.key.clone());
            names.insert(kv.value.clone());
        }
    }
    names
}

/// How close a pattern constant must be to the value the fused op hard-codes: relative 1e-5,
/// which accepts every f32/f64 spelling of constants like sqrt(2) or 0.044715 and nothing else.
pub const CONST_REL_TOL: f64 = 1e-5;

/// The value of a rank-0 constant `v`, as f64. A one-element constant of higher rank is not a
/// scalar here: broadcasting it could raise the rank of the pattern's output.
pub fn scalar_constant(model: &Model, v: ValueId) -> Option<f64> {
    let t = constant_value(model, v)?;
    if !t.shape().is_empty() {
        return None;
    }
    match t.to_f64_vec().as_slice() {
        [x] => Some(*x),
        _ => None,
    }
}

/// True when `v` is a rank-0 constant within `CONST_REL_TOL` of `want`, or, stored as float16
/// or bfloat16, `want` rounded to that type (half an ulp: 2^-11 or 2^-8 relative), so that
/// √(2/π) is 0.7978515625 in a float16 model.
pub fn is_scalar(model: &Model, v: ValueId, want: f64) -> bool {
    is_splat(model, v, want, 0)
}

/// True when `v` is a one-element constant near `want` (as `is_scalar`) of rank at most `rank`:
/// broadcast against a value of rank ≥ its own, such a constant changes no shape (paddle2onnx
/// writes its scalars as shape [1]).
pub fn is_splat(model: &Model, v: ValueId, want: f64, rank: usize) -> bool {
    use crate::tensor::DType;
    let Some(t) = constant_value(model, v) else {
        return false;
    };
    let rel = match t.dtype() {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => CONST_REL_TOL,
    };
    if t.len() != 1 || t.shape().len() > rank {
        return false;
    }
    matches!(t.to_f64_vec().as_slice(), [x] if (x - want).abs() <= rel * want.abs())
}

/// A Clip node's (min, max), read through the ops layer: its attributes before opset 11, its
/// constant inputs from 11 (rank 0, or one element, as the op allows); an absent bound is
/// ∓`f32::MAX`. Why not, when a bound is not constant.
pub fn clip_bounds(model: &Model, clip: &Node) -> Result<(f32, f32), String> {
    let c = crate::ops::attrs_of::<crate::ops::activation::Clip>(model, clip)
        .ok_or_else(|| "Clip's attributes do not parse".to_string())?;
    if let Some(bounds) = c.attr_bounds {
        return Ok(bounds);
    }
    let bound = |i: usize, absent: f32| match clip.input(i) {
        None => Ok(absent),
        Some(v) => constant_value(model, v)
            .filter(|t| t.len() == 1 && t.shape().len() <= 1)
            .and_then(|t| t.to_f64_vec().first().copied())
            .map(|b| b as f32)
            .ok_or_else(|| format!("Clip's bound '{}' is not a constant", model.graph.name(v))),
    };
    Ok((bound(1, -f32::MAX)?, bound(2, f32::MAX)?))
}

/// The producer of `v` when it is `op_type` in the default domain.
pub fn produced_by<'a>(g: &'a Graph, v: ValueId, op_type: &str) -> Option<(NodeId, &'a Node)> {
    let id = g.producer(v)?;
    let n = g.node(id);
    n.is(op_type).then_some((id, n))
}

/// The producer of `v` when it is `op` with one operand ≈ `c`: (node, the other operand).
pub fn scaled_by(model: &Model, v: ValueId, op: &str, c: f64) -> Result<(NodeId, ValueId), String> {
    let g = &model.graph;
    let (id, n) =
        produced_by(g, v, op).ok_or_else(|| format!("'{}' is not computed by {op}", g.name(v)))?;
    let k = [n.input(0), n.input(1)]
        .into_iter()
        .flatten()
        .find(|&k| is_scalar(model, k, c))
        .ok_or_else(|| format!("{op} '{}' has no constant operand {c}", n.label(id)))?;
    Ok((id, other_input(n, k).ok_or("not a binary op")?))
}

/// For a two-input node that reads `v`, the other input (`v` itself when both inputs are `v`).
pub fn other_input(node: &Node, v: ValueId) -> Option<ValueId> {
    match (node.input(0), node.input(1)) {
        (Some(a), Some(b)) if node.inputs.len() == 2 && a == v => Some(b),
        (Some(a), Some(b)) if node.inputs.len() == 2 && b == v => Some(a),
        _ => None,
    }
}

/// The single consumer of `v` when it is a default-domain `op_type` node with one output;
/// otherwise why not, for the report (`what` names `v` in the message).
pub fn sole_consumer_op<'a>(
    g: &'a Graph,
    v: ValueId,
    op_type: &str,
    what: &str,
) -> Result<(NodeId, &'a Node), String> {
    let id = sole_consumer(g, v).map_err(|why| format!("{what} {why}"))?;
    let n = g.node(id);
    if !n.is(op_type) || n.outputs.len() != 1 || n.output(0).is_none() {
        return Err(format!(
            "{what} '{}' feeds {} '{}', not {op_type}",
            g.name(v),
            n.op_type,
            n.label(id)
        ));
    }
    Ok((id, n))
}

/// Element type of `v` when it is f32, else why a com.microsoft fusion (f32 kernels in
/// onnxruntime's CPU provider) must not fire.
pub fn require_f32(g: &Graph, v: ValueId) -> Result<(), String> {
    match g.value(v).ty.dtype {
        Some(crate::tensor::DType::F32) => Ok(()),
        Some(d) => Err(format!("'{}' is {d}; the fused op is f32 only", g.name(v))),
        None => Err(format!("element type of '{}' is unknown", g.name(v))),
    }
}

/// Ok when `v` is float32 or float16 (ops whose onnxruntime CPU kernels take both and accumulate
/// in float32: the layer norms), else why not.
pub fn require_f32_or_f16(g: &Graph, v: ValueId) -> Result<DType, String> {
    match g.value(v).ty.dtype {
        Some(d @ (DType::F32 | DType::F16)) => Ok(d),
        Some(d) => Err(format!(
            "'{}' is {d}; the fused op takes float32 and float16",
            g.name(v)
        )),
        None => Err(format!("element type of '{}' is unknown", g.name(v))),
    }
}

/// A constant 1-D vector of `len` elements (gamma, beta, bias), else why not.
pub fn require_vector(model: &Model, v: ValueId, len: i64, what: &str) -> Result<(), String> {
    let g = &model.graph;
    let Some(t) = constant_value(model, v) else {
        return Err(format!("{what} '{}' is not a constant", g.name(v)));
    };
    if t.shape() != [len as usize] {
        return Err(format!(
            "{what} '{}' has shape {:?}, not [{len}] (the hidden size)",
            g.name(v),
            t.shape()
        ));
    }
    Ok(())
}

/// The last dim of `v` when it is statically known (the hidden size of a norm or bias).
pub fn last_dim(g: &Graph, v: ValueId) -> Result<i64, String> {
    use crate::ir::types::Dim;
    match g.value(v).ty.shape.as_deref().and_then(|s| s.last()) {
        Some(Dim::Known(d)) => Ok(*d),
        _ => Err(format!(
            "last dim of '{}' is not statically known (shape {})",
            g.name(v),
            g.value(v).ty
        )),
    }
}

/// Matches the tail `0.5 * x * v` shared by the Gelu forms, starting from `v` (the `1 + f(x)`
/// value): any association and operand order of the two Muls, or `Mul(Mul(x, 0.5), v)`.
/// Returns the Mul (and inner Mul) nodes and the product value; else why not.
pub fn half_x_product(
    model: &Model,
    v: ValueId,
    x: ValueId,
) -> Result<(Vec<NodeId>, ValueId), String> {
    let g = &model.graph;
    let (mut need_x, mut need_half) = (true, true);
    let mut cur = v;
    let mut nodes = Vec::new();
    while need_x || need_half {
        let (id, m) = sole_consumer_op(g, cur, "Mul", "product term")?;
        let o = other_input(m, cur).ok_or("Mul is not binary")?;
        if need_x && o == x {
            need_x = false;
        } else if need_half && is_scalar(model, o, 0.5) {
            need_half = false;
        } else if let Some((inner, n)) = produced_by(g, o, "Mul").filter(|_| need_x && need_half) {
            let half = other_input(n, x).filter(|&h| is_scalar(model, h, 0.5));
            if half.is_none() || sole_consumer(g, o).ok() != Some(id) {
                return Err(format!("'{}' is not a single-use 0.5 * x", g.name(o)));
            }
            nodes.push(inner);
            (need_x, need_half) = (false, false);
        } else {
            return Err(format!(
                "Mul '{}' multiplies by '{}', not by x or 0.5",
                m.label(id),
                g.name(o)
            ));
        }
        nodes.push(id);
        cur = m.output(0).ok_or("Mul has no output")?;
    }
    Ok((nodes, cur))
}

/// When `v` is `Add(x, c)` or `Add(c, x)` with `c` a 1-D constant of `hidden` elements, `x` not
/// constant, and `v` read only once: (the Add, x, c).
pub fn bias_add(model: &Model, v: ValueId, hidden: i64) -> Option<(NodeId, ValueId, ValueId)> {
    let g = &model.graph;
    let (id, add) = produced_by(g, v, "Add")?;
    sole_consumer(g, v).ok()?;
    let (p, q) = (add.input(0)?, add.input(1)?);
    let (x, c) = if constant_value(model, q).is_some() {
        (p, q)
    } else {
        (q, p)
    };
    if constant_value(model, x).is_some() || other_input(add, x) != Some(c) {
        return None;
    }
    require_vector(model, c, hidden, "bias").ok()?;
    // x must already have the hidden size last, or Add(x, c) would broadcast x.
    (last_dim(g, x).ok()? == hidden).then_some((id, x, c))
}

/// (axis, epsilon, stash_type) of a LayerNormalization, SimplifiedLayerNormalization or
/// RMSNormalization node: the norms a residual Add can be fused into.
pub fn norm_attrs(model: &Model, ln: &Node) -> Option<(i64, f32, i64)> {
    use crate::ops::{attrs_of, norm::RMSNormalization, rms::SimplifiedLayerNormalization};
    match ln.op_type.as_str() {
        "LayerNormalization" => {
            attrs_of::<LayerNormalization>(model, ln).map(|a| (a.axis, a.epsilon, a.stash_type))
        }
        "SimplifiedLayerNormalization" => attrs_of::<SimplifiedLayerNormalization>(model, ln)
            .map(|a| (a.axis, a.epsilon, a.stash_type)),
        "RMSNormalization" => {
            attrs_of::<RMSNormalization>(model, ln).map(|a| (a.axis, a.epsilon, a.stash_type))
        }
        _ => None,
    }
}

/// The scale and bias of a norm `ln` (one of `norm_attrs`'s) over the last axis of its rank-`rank` input of
/// `hidden` features, when a fusion may absorb it: the axis is the last, statistics are f32
/// (stash_type 1), the mean / inv_std_var outputs are not read, and scale and bias are 1-D
/// constants of `hidden`. (output, scale, bias) or why not.
pub fn absorbable_layer_norm(
    model: &Model,
    ln: &Node,
    ln_id: NodeId,
    rank: i64,
    hidden: i64,
) -> Result<(ValueId, ValueId, Option<ValueId>), String> {
    let g = &model.graph;
    let op = &ln.op_type;
    let (axis, _, stash_type) =
        norm_attrs(model, ln).ok_or_else(|| format!("{op}'s attributes are not parsed"))?;
    if axis != -1 && axis != rank - 1 {
        return Err(format!(
            "{op} '{}' axis {axis} is not the last axis",
            ln.label(ln_id)
        ));
    }
    if stash_type != 1 {
        return Err(format!(
            "{op} computes its statistics in f64 (stash_type {stash_type})"
        ));
    }
    for (i, out) in ln.outputs.iter().enumerate().skip(1) {
        if let Some(v) = out {
            if g.is_graph_output(*v) || !g.consumers(*v).is_empty() {
                return Err(format!("{op} output {i} ('{}') is read", g.name(*v)));
            }
        }
    }
    let y = ln.output(0).ok_or_else(|| format!("{op} has no output"))?;
    let gamma = ln.input(1).ok_or_else(|| format!("{op} has no scale"))?;
    require_vector(model, gamma, hidden, "scale")?;
    let beta = ln.input(2);
    if let Some(beta) = beta {
        require_vector(model, beta, hidden, "bias")?;
    }
    Ok((y, gamma, beta))
}

/// Ok when ReduceMean `node` reduces only the last axis of its rank-`rank` input and keeps it
/// (the statistics of a layer or RMS norm); else why not.
pub fn reduces_last_axis(model: &Model, node: &Node, rank: usize) -> Result<(), String> {
    let opset = model.opset("").unwrap_or(1);
    let axes = crate::ops::infer::axes_of(&model.graph, node, opset);
    let ok = matches!(axes.as_deref(), Some([a]) if *a == -1 || *a == rank as i64 - 1);
    if !ok {
        return Err(format!(
            "ReduceMean '{}' reduces axes {axes:?}, not only the last axis",
            node.name
        ));
    }
    let keepdims = crate::ops::attrs_of::<crate::ops::reduce::ReduceMean>(model, node)
        .is_some_and(|r| r.0.keepdims);
    if !keepdims {
        return Err(format!("ReduceMean '{}' drops the reduced axis", node.name));
    }
    Ok(())
}

/// Largest hidden size a rule writes a constant vector for (a scale of ones): 2^24 elements. A
/// declared dim beyond it (a hostile or broken shape) is refused, never allocated.
pub const MAX_NEW_VECTOR: i64 = 1 << 24;

/// A scale of `hidden` ones of `dtype` (float32 or float16), for a norm without a weight; else
/// why not.
pub fn ones_vector(hidden: i64, dtype: crate::tensor::DType) -> Result<Tensor, String> {
    if !(1..=MAX_NEW_VECTOR).contains(&hidden) {
        return Err(format!(
            "hidden size {hidden} is outside 1..={MAX_NEW_VECTOR}: no scale of ones is made"
        ));
    }
    let ones = Tensor::F32(ndarray::ArrayD::ones(vec![hidden as usize]));
    ones.cast(dtype)
        .ok_or_else(|| format!("no {dtype} scale of ones"))
}

/// Ok when Transpose `node` has exactly `perm`; else why not.
pub fn require_perm(model: &Model, node: &Node, id: NodeId, perm: &[i64]) -> Result<(), String> {
    let t = crate::ops::attrs_of::<crate::ops::shape_ops::Transpose>(model, node);
    match t.and_then(|t| t.perm.as_deref()) {
        Some(p) if p == perm => Ok(()),
        p => Err(format!(
            "Transpose '{}' has perm {p:?}, not {perm:?}",
            node.label(id)
        )),
    }
}

/// The attention scale on scores `v`: when `v` is `Mul(x, c)`, `Mul(c, x)` or `Div(x, c)` with c a
/// rank-0 constant, `(that node, x, the scale)` (1/c for Div); `None` when `v` is neither a Mul
/// nor a Div. Attention ops read scale 0 as "the default 1/√D", so a scale that is zero or not
/// finite in float32 is an error, as is a Mul/Div by something else.
pub fn score_scale(model: &Model, v: ValueId) -> Result<Option<(NodeId, ValueId, f64)>, String> {
    let g = &model.graph;
    let Some((id, op)) = produced_by(g, v, "Mul").or(produced_by(g, v, "Div")) else {
        return Ok(None);
    };
    let (a, b) = (op.input(0).ok_or("input")?, op.input(1).ok_or("input")?);
    let (x, c) = match (scalar_constant(model, a), scalar_constant(model, b)) {
        (_, Some(c)) => (a, c),
        (Some(c), None) if op.is("Mul") => (b, c),
        _ => {
            return Err(format!(
                "{} '{}' does not scale the scores by a scalar constant",
                op.op_type,
                op.label(id)
            ))
        }
    };
    let scale = if op.is("Div") { 1.0 / c } else { c };
    if !(scale as f32).is_finite() || scale as f32 == 0.0 {
        return Err(format!("scale {scale} is zero or not finite in float32"));
    }
    Ok(Some((id, x, scale)))
}

/// An operand of the score MatMul scaled on its own, as torch's export of
/// scaled_dot_product_attention scales Q and Kᵀ each by √scale: `Mul(x, c)` with c a scalar
/// constant and the product read only by `reader`. Returns (the Mul, x, c); None for any other
/// operand (then the operand is matched as it is).
pub fn operand_scale(model: &Model, v: ValueId, reader: NodeId) -> Option<(NodeId, ValueId, f64)> {
    let g = &model.graph;
    let (id, mul) = produced_by(g, v, "Mul")?;
    if g.consumers(v) != [reader] || g.is_graph_output(v) {
        return None;
    }
    let (a, b) = (mul.input(0)?, mul.input(1)?);
    let (x, c) = match (single_value(model, a, b), single_value(model, b, a)) {
        (_, Some(c)) => (a, c),
        (Some(c), None) => (b, c),
        _ => return None,
    };
    ((c as f32).is_finite() && c as f32 != 0.0).then_some((id, x, c))
}

/// The value of a one-element constant `v` that broadcasts against `other` without changing its
/// shape (rank 0, or a rank no higher than `other`'s known rank): torch exports such scalars as
/// [1] constants.
fn single_value(model: &Model, v: ValueId, other: ValueId) -> Option<f64> {
    let t = constant_value(model, v)?;
    let rank_ok = t.shape().is_empty()
        || model
            .graph
            .value(other)
            .ty
            .rank()
            .is_some_and(|r| t.shape().len() <= r);
    match t.to_f64_vec().as_slice() {
        [x] if rank_ok => Some(*x),
        _ => None,
    }
}

/// What the P·V MatMul reads from the attention probabilities `p`: `p` itself, or — torch's
/// export of scaled_dot_product_attention — `Where(IsNaN(p), 0, p)`, which zeroes the NaN rows
/// a softmax over only -inf scores gives. With a finite mask value a row is NaN only when its
/// scores are (NaN or infinite inputs), so the guard is a no-op on finite inputs and goes with
/// the fused nodes; a -inf mask is the caller's to handle (`multi_head_attention` zeroes those
/// rows after the op, a proved -inf filter is refused). Returns (guard nodes, the value read).
pub fn guarded_probs(model: &Model, p: ValueId) -> Result<(Vec<NodeId>, ValueId), String> {
    let g = &model.graph;
    let readers = g.consumers(p);
    let [a, b] = readers else {
        return Ok((vec![], p));
    };
    let (nan_id, where_id) = if g.node(*a).is("IsNaN") {
        (*a, *b)
    } else {
        (*b, *a)
    };
    let (isnan, wh) = (g.node(nan_id), g.node(where_id));
    if !isnan.is("IsNaN") || !wh.is("Where") {
        return Ok((vec![], p));
    }
    let flag = isnan.output(0).ok_or("IsNaN has no output")?;
    let zero = wh.input(1).and_then(|z| single_value(model, z, p));
    if g.consumers(flag) != [where_id]
        || g.is_graph_output(flag)
        || wh.input(0) != Some(flag)
        || wh.input(2) != Some(p)
        || zero != Some(0.0)
    {
        return Err(format!(
            "the probabilities feed IsNaN '{}' and Where '{}' that are not Where(IsNaN(p), 0, p)",
            isnan.label(nan_id),
            wh.label(where_id)
        ));
    }
    let out = wh.output(0).ok_or("Where has no output")?;
    Ok((vec![nan_id, where_id], out))
}

/// True when the probabilities `p` (through sdpa's NaN guard, if any) are the first operand of
/// a MatMul: a Softmax that weights values (P·V) looks like attention.
/// (A guard that is not sdpa's still counts, so that the rule reports why it stops there.)
pub fn weights_values(model: &Model, p: ValueId) -> bool {
    let g = &model.graph;
    let first_of_matmul = |v: ValueId| {
        g.consumers(v).iter().any(|&c| {
            let n = g.node(c);
            n.is("MatMul") && n.input(0) == Some(v)
        })
    };
    first_of_matmul(p)
        || g.consumers(p).iter().any(|&c| {
            let n = g.node(c);
            n.is("Where") && n.output(0).is_some_and(first_of_matmul)
        })
}

/// The constant `(axis, start, end, step)` of a one-axis Slice (opset ≥ 10 inputs).
pub fn slice_params(model: &Model, n: &Node) -> Option<(i64, i64, i64, i64)> {
    let ints = |i: usize| -> Option<Vec<i64>> { constant_value(model, n.input(i)?)?.to_i64_vec() };
    let one = |v: Option<Vec<i64>>| match v.as_deref() {
        Some([a]) => Some(*a),
        _ => None,
    };
    let start = one(ints(1))?;
    let end = one(ints(2))?;
    let axis = if n.input(3).is_some() {
        one(ints(3))?
    } else {
        0
    };
    let step = if n.input(4).is_some() {
        one(ints(4))?
    } else {
        1
    };
    Some((axis, start, end, step))
}

/// A Concat's axis (an impossible one when it has none: the kernel refuses such a node).
pub fn concat_axis(model: &Model, n: &Node) -> i64 {
    crate::ops::attrs_of::<crate::ops::concat::Concat>(model, n)
        .and_then(|c| c.axis)
        .unwrap_or(i64::MIN)
}

/// The int32 raw mask Attention and MultiHeadAttention read: 1 where `a != 0`. A bool input casts once; other types
/// go through bool so that `!= 0` holds for every value (a direct int32 Cast would wrap).
pub fn int32_mask(
    g: &crate::ir::Graph,
    patch: &mut Patch,
    a: ValueId,
    base: &str,
) -> Result<ValueRef, String> {
    let shape = g.value(a).ty.shape.clone();
    let mut src = ValueRef::from(a);
    if g.value(a).ty.dtype != Some(DType::BOOL) {
        let name = format!("{base}_mask_bool");
        src = cast(g, patch, src, DType::BOOL, shape.clone(), &name);
    }
    let name = format!("{base}_mask_int32");
    Ok(cast(g, patch, src, DType::I32, shape, &name))
}

/// Adds `Cast(x, to)` to the patch (x may be a value the patch adds, so its shape is given);
/// returns the output, named from `base`.
pub fn cast(
    g: &crate::ir::Graph,
    patch: &mut Patch,
    x: ValueRef,
    to: DType,
    shape: Option<Vec<Dim>>,
    base: &str,
) -> ValueRef {
    let name = g.fresh_name(base);
    let ty = TensorType {
        dtype: Some(to),
        shape,
    };
    let out = patch.new_value(&name, ty);
    let mut node = NewNode::new("Cast", "");
    node.name = fresh_node_name(g, &name);
    node.inputs = vec![Some(x)];
    node.outputs = vec![Some(out)];
    node.set_attr(attr::int("to", to.0 as i64));
    patch.add.push(node);
    out
}
