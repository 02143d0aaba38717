//! Static knowledge of the *values* of small integer tensors: the shapes and indices that
//! exporters compute at run time with Shape → Gather → Unsqueeze → Concat chains.
//!
//! `int_elements(g, v)` says, element by element, what `v` holds: a known number, a symbolic dim
//! (`batch`), or unknown. With it, inference gives `Reshape(x, Concat(Unsqueeze(Gather(Shape(x),
//! 0)), [-1, 64]))` the shape `[batch, ?, 64]`, and rewrite rules fold chains whose elements are
//! all known. Symbolic dims are sizes, so they are never negative: comparing one with a negative
//! constant is decidable (exporters compare shapes with -1).
//!
//! The walk goes up producers; it is bounded by `MAX_STEPS` node visits per query, so a hostile
//! graph of shared Concats cannot make it exponential.

use std::borrow::Cow;

use crate::ir::graph::Graph;
use crate::ir::node::{Node, ValueId};
use crate::ir::types::Dim;
use crate::ops::{cast, index_ops, parse_any_version, shape_ops, OpRef};
use crate::tensor::{DType, Tensor};

/// Longest value tracked (a shape of rank 8 is the most exporters build).
pub const MAX_ELEMENTS: usize = 8;
/// Node visits per query.
const MAX_STEPS: usize = 256;

/// The elements of `v` (a scalar is one element) when `v` is a rank-0 or rank-1 integer tensor of
/// at most `MAX_ELEMENTS` elements whose length is known; `None` otherwise.
pub fn int_elements(g: &Graph, v: ValueId) -> Option<Vec<Dim>> {
    let mut steps = 0;
    walk(g, v, &mut steps)
}

/// The rank of `v` when it is 0 or 1 (shape-like values only).
fn small_rank(g: &Graph, v: ValueId) -> Option<usize> {
    g.value(v).ty.rank().filter(|&r| r <= 1)
}

/// A constant tensor: an initializer no input overrides (decoded once, by the graph), or a
/// Constant node's value (decoded once, when the node was parsed).
pub fn constant_tensor(g: &Graph, v: ValueId) -> Option<Cow<'_, Tensor>> {
    if g.constant(v).is_some() {
        return g.constant_value(v).map(Cow::Borrowed);
    }
    let node = g.node(g.producer(v)?);
    if !node.is("Constant") {
        return None;
    }
    match parse_any_version(node)? {
        OpRef::Cached(op) => {
            let any: &dyn std::any::Any = op;
            let c = any.downcast_ref::<cast::Constant>()?;
            c.value.as_ref().ok().map(Cow::Borrowed)
        }
        // A node nobody parsed yet (rare: inference parses every node in order).
        OpRef::Fresh(op) => {
            let any: &dyn std::any::Any = &*op;
            let c = any.downcast_ref::<cast::Constant>()?;
            c.value.clone().ok().map(Cow::Owned)
        }
    }
}

/// Element values of a constant integer tensor of rank 0 or 1.
pub fn constant_ints(g: &Graph, v: ValueId) -> Option<Vec<i64>> {
    let t = constant_tensor(g, v)?;
    if t.shape().len() > 1 || !matches!(t.dtype(), DType::I64 | DType::I32) {
        return None;
    }
    t.to_i64_vec()
}

fn known(v: &[i64]) -> Vec<Dim> {
    v.iter().map(|&d| Dim::Known(d)).collect()
}

fn walk(g: &Graph, v: ValueId, steps: &mut usize) -> Option<Vec<Dim>> {
    *steps += 1;
    if *steps > MAX_STEPS {
        return None;
    }
    if let Some(c) = constant_ints(g, v) {
        return (c.len() <= MAX_ELEMENTS).then(|| known(&c));
    }
    let node = g.node(g.producer(v)?);
    if !node.is_onnx_domain() || node.output(0) != Some(v) {
        return None;
    }
    let input = |i: usize, steps: &mut usize| node.input(i).and_then(|x| walk(g, x, steps));
    let op = typed(node)?;
    let out = match node.op_type.as_str() {
        "Shape" => {
            let dims = g.value(node.input(0)?).ty.shape.clone()?;
            let r = dims.len() as i64;
            let clamp = |a: i64| (if a < 0 { a + r } else { a }).clamp(0, r) as usize;
            let a = op.get::<shape_ops::Shape>()?;
            let start = clamp(a.start);
            let end = clamp(a.end.unwrap_or(r));
            dims.get(start..end.max(start))?.to_vec()
        }
        "Identity" | "Squeeze" | "Unsqueeze" | "Reshape" | "Flatten" => {
            // Reshaping between rank 0 and 1 keeps the elements in order.
            small_rank(g, v)?;
            input(0, steps)?
        }
        "Cast" => {
            let to = op.get::<cast::Cast>()?.to;
            if !matches!(to, DType::I64 | DType::I32) {
                return None;
            }
            let src = g.value(node.input(0)?).ty.dtype?;
            if !matches!(src, DType::I64 | DType::I32) {
                return None;
            }
            let vals = input(0, steps)?;
            // Casting to int32 wraps values outside its range: not tracked.
            let fits = |d: &Dim| !matches!(d, Dim::Known(k) if i32::try_from(*k).is_err());
            if to == DType::I32 && !vals.iter().all(fits) {
                return None;
            }
            vals
        }
        "Concat" => {
            let mut out = Vec::new();
            for x in node.inputs.iter() {
                out.extend(walk(g, (*x)?, steps)?);
            }
            out
        }
        "Gather" => {
            if op.get::<index_ops::Gather>()?.axis != 0 {
                return None;
            }
            let data = input(0, steps)?;
            let idx = constant_ints(g, node.input(1)?)?;
            let n = data.len() as i64;
            idx.iter()
                .map(|&i| {
                    let j = if i < 0 { i + n } else { i };
                    (0..n).contains(&j).then(|| data[j as usize].clone())
                })
                .collect::<Option<Vec<_>>>()?
        }
        "Slice" => {
            let data = input(0, steps)?;
            let c = |i: usize| node.input(i).and_then(|x| constant_ints(g, x));
            let (starts, ends) = (c(1)?, c(2)?);
            let axes = match node.input(3) {
                Some(_) => c(3)?,
                None => vec![0],
            };
            let stepv = match node.input(4) {
                Some(_) => c(4)?,
                None => vec![1],
            };
            if starts.len() != 1 || ends.len() != 1 || !matches!(axes[..], [0] | [-1]) {
                return None;
            }
            if stepv != [1] {
                return None;
            }
            let n = data.len() as i64;
            let clamp = |a: i64| (if a < 0 { a + n } else { a }).clamp(0, n) as usize;
            let (s, e) = (clamp(starts[0]), clamp(ends[0]));
            data.get(s..e.max(s))?.to_vec()
        }
        "Add" | "Sub" | "Mul" | "Div" | "Equal" => {
            binary(node.op_type.as_str(), input(0, steps)?, input(1, steps)?)?
        }
        "Where" => {
            let cond = input(0, steps)?;
            let (a, b) = (input(1, steps)?, input(2, steps)?);
            let n = cond.len().max(a.len()).max(b.len());
            let at = |x: &[Dim], i: usize| x.get(if x.len() == 1 { 0 } else { i }).cloned();
            (0..n)
                .map(|i| match at(&cond, i)? {
                    Dim::Known(0) => at(&b, i),
                    Dim::Known(_) => at(&a, i),
                    _ => Some(Dim::Unknown),
                })
                .collect::<Option<Vec<_>>>()?
        }
        "ConstantOfShape" => {
            let shape = input(0, steps)?;
            let n = match shape.as_slice() {
                [] => 1,
                [Dim::Known(n)] if (0..=MAX_ELEMENTS as i64).contains(n) => *n as usize,
                _ => return None,
            };
            let value = match &op.get::<index_ops::ConstantOfShape>()?.value {
                Some(t) if matches!(t.dtype(), DType::I64 | DType::I32) => {
                    *t.to_i64_vec()?.first()?
                }
                _ => return None,
            };
            vec![Dim::Known(value); n]
        }
        _ => return None,
    };
    (out.len() <= MAX_ELEMENTS).then_some(out)
}

/// The node's parsed op. The walk has no model at hand: it takes the parse the node holds (every
/// loaded or rewritten node is parsed at its model's opset before shapes are asked about).
fn typed(node: &Node) -> Option<OpRef<'_>> {
    parse_any_version(node)
}

/// Elementwise arithmetic and Equal on element lists (numpy broadcasting of lengths 1 and n).
/// Equal gives 1/0. Unknown where it cannot be decided.
fn binary(op: &str, a: Vec<Dim>, b: Vec<Dim>) -> Option<Vec<Dim>> {
    let n = match (a.len(), b.len()) {
        (x, y) if x == y => x,
        (1, y) => y,
        (x, 1) => x,
        _ => return None,
    };
    let at = |x: &[Dim], i: usize| x[if x.len() == 1 { 0 } else { i }].clone();
    Some(
        (0..n)
            .map(|i| {
                let (x, y) = (at(&a, i), at(&b, i));
                match (op, &x, &y) {
                    ("Add", Dim::Known(p), Dim::Known(q)) => p.checked_add(*q).map(Dim::Known),
                    ("Sub", Dim::Known(p), Dim::Known(q)) => p.checked_sub(*q).map(Dim::Known),
                    ("Mul", Dim::Known(p), Dim::Known(q)) => p.checked_mul(*q).map(Dim::Known),
                    ("Mul", d, Dim::Known(k)) | ("Mul", Dim::Known(k), d) => Dim::scaled(d, *k),
                    ("Div", Dim::Known(p), Dim::Known(q)) if *q != 0 => {
                        p.checked_div(*q).map(Dim::Known)
                    }
                    ("Div", d, Dim::Known(q)) => d.divided(*q),
                    ("Equal", Dim::Known(p), Dim::Known(q)) => Some(Dim::Known((p == q) as i64)),
                    ("Equal", Dim::Sym(p), Dim::Sym(q)) if p == q => Some(Dim::Known(1)),
                    // A size is never negative.
                    ("Equal", Dim::Sym(_), Dim::Known(q))
                    | ("Equal", Dim::Known(q), Dim::Sym(_))
                        if *q < 0 =>
                    {
                        Some(Dim::Known(0))
                    }
                    _ => None,
                }
                .unwrap_or(Dim::Unknown)
            })
            .collect(),
    )
}

/// Reshape's output dims from the input dims and the target's elements (`allowzero` per the
/// spec: a known 0 copies the input dim unless it is set; see below for symbolic elements). The -1 entry is solved when the remaining
/// sizes cancel: known factors divide, equal symbols cancel (a scaled symbol `k*s` counts as the
/// factor `k` and the symbol `s`), and what is left is a number or one symbol times a number.
pub fn reshape_dims(input: Option<&[Dim]>, target: &[Dim], allowzero: bool) -> Vec<Dim> {
    let mut out: Vec<Dim> = target
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Dim::Known(0) if !allowzero => input
                .and_then(|s| s.get(i).cloned())
                .unwrap_or(Dim::Unknown),
            Dim::Known(d) if *d < 0 => Dim::Unknown,
            Dim::Known(d) => Dim::Known(*d),
            // Assumption (as in onnxruntime's symbolic shape inference): a symbolic size in a
            // target is not 0 at run time. Were it 0 with allowzero = 0, Reshape would copy
            // the input's dim there instead; that empty-tensor corner is not modelled.
            d => d.clone(),
        })
        .collect();
    let Some(pos) = target.iter().position(|d| *d == Dim::Known(-1)) else {
        return out;
    };
    let Some(input) = input else {
        return out;
    };
    // Split each side into a known product and a list of symbols; give up on unknowns.
    let factor = |dims: &mut dyn Iterator<Item = &Dim>| -> Option<(i64, Vec<String>)> {
        let (mut k, mut syms) = (1i64, Vec::new());
        for d in dims {
            match d {
                Dim::Known(v) if *v >= 0 => k = k.checked_mul(*v)?,
                Dim::Sym(s) => match d.as_scaled() {
                    Some((j, base)) => {
                        k = k.checked_mul(j)?;
                        syms.push(base.to_string());
                    }
                    None => syms.push(s.clone()),
                },
                _ => return None,
            }
        }
        Some((k, syms))
    };
    let Some((kin, mut sin)) = factor(&mut input.iter()) else {
        return out;
    };
    let rest = out
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != pos)
        .map(|(_, d)| d);
    let Some((kout, sout)) = factor(&mut rest.collect::<Vec<_>>().into_iter()) else {
        return out;
    };
    for s in &sout {
        match sin.iter().position(|x| x == s) {
            Some(i) => {
                sin.remove(i);
            }
            None => return out,
        }
    }
    if kout == 0 || kin % kout != 0 {
        return out;
    }
    let k = kin / kout;
    out[pos] = match (k, sin.as_slice()) {
        (k, []) => Dim::Known(k),
        (k, [s]) => Dim::scaled(&Dim::Sym(s.clone()), k).unwrap_or(Dim::Unknown),
        _ => Dim::Unknown,
    };
    out
}
