//! What an exporter's attention-mask subgraph computes, proved symbolically, so the Attention
//! fusion can hand the model's 2-D `attention_mask` to the fused op as its raw mask.
//!
//! transformers builds the additive mask `M[b, h, q, k]` that is added to the attention scores
//! from `attention_mask[b, k]` with Range, Unsqueeze, broadcasting arithmetic, Flatten, Gather,
//! Reshape, Expand and a final `Where(cond, 0, F)` (BERT tiny: 45 nodes). `padding_mask` reads
//! that subgraph as math: each value becomes an abstract tensor, a shape whose dims are
//! polynomials over the graph's symbolic dims, plus one expression that gives the element at
//! every index (`Range` gives `i0`, `Unsqueeze` renames axes, broadcasting sends an axis of size
//! 1 to index 0, `Gather` substitutes its index expression, `Reshape` and `Flatten` keep the
//! row-major position of graph-input elements). When the result is `Where(X[b, k] != 0, 0, F)`
//! for a graph input `X` of shape `[B, T]`, the mask is exactly Attention's raw mask with
//! `mask_filter_value = F`.
//!
//! Every step is exact or gives up: an op outside the list, a dim that could broadcast at run
//! time (two different symbols), a Gather index that might be negative or past the end, or a
//! comparison that is not decided for every index stops the proof with the reason.

use std::collections::{BTreeMap, HashMap};

use crate::ir::infer::axes_of;
use crate::ir::shape_value::{constant_tensor, int_elements};
use crate::ir::types::Dim;
use crate::ir::{Model, ValueId};
use crate::tensor::{DType, Tensor};

/// Nodes the interpretation may visit for one mask.
const MAX_NODES: usize = 256;

/// A variable of a polynomial: the index along an axis of the tensor the polynomial belongs to,
/// or a symbolic dim. Both are never negative.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Var {
    Idx(usize),
    Sym(String),
}

/// An integer polynomial: monomial (sorted variables) → coefficient, no zero coefficients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Poly(BTreeMap<Vec<Var>, i64>);

impl Poly {
    fn constant(c: i64) -> Poly {
        let mut p = Poly::default();
        if c != 0 {
            p.0.insert(vec![], c);
        }
        p
    }

    fn var(v: Var) -> Poly {
        Poly(BTreeMap::from([(vec![v], 1)]))
    }

    fn idx(axis: usize) -> Poly {
        Poly::var(Var::Idx(axis))
    }

    fn from_dim(d: &Dim) -> Option<Poly> {
        match d {
            Dim::Known(k) => Some(Poly::constant(*k)),
            Dim::Sym(s) => Some(Poly::var(Var::Sym(s.clone()))),
            Dim::Unknown => None,
        }
    }

    fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&vec![]).copied(),
            _ => None,
        }
    }

    fn is_one(&self) -> bool {
        self.as_constant() == Some(1)
    }

    fn add(&self, o: &Poly) -> Option<Poly> {
        let mut out = self.clone();
        for (m, c) in &o.0 {
            let e = out.0.entry(m.clone()).or_insert(0);
            *e = e.checked_add(*c)?;
            if *e == 0 {
                out.0.remove(m);
            }
        }
        Some(out)
    }

    fn scale(&self, k: i64) -> Option<Poly> {
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            out = out.add(&Poly(BTreeMap::from([(m.clone(), c.checked_mul(k)?)])))?;
        }
        Some(out)
    }

    fn sub(&self, o: &Poly) -> Option<Poly> {
        self.add(&o.scale(-1)?)
    }

    fn mul(&self, o: &Poly) -> Option<Poly> {
        let mut out = Poly::default();
        for (m1, c1) in &self.0 {
            for (m2, c2) in &o.0 {
                let mut m: Vec<Var> = m1.iter().chain(m2).cloned().collect();
                m.sort();
                out = out.add(&Poly(BTreeMap::from([(m, c1.checked_mul(*c2)?)])))?;
            }
        }
        Some(out)
    }

    /// True when the value is ≥ 0 for every choice of the (non-negative) variables.
    fn never_negative(&self) -> bool {
        self.0.values().all(|&c| c > 0)
    }

    fn uses_indices(&self) -> bool {
        self.0.keys().flatten().any(|v| matches!(v, Var::Idx(_)))
    }

    /// Replaces every index variable `i_a` by `f(a)`.
    fn subst(&self, f: &dyn Fn(usize) -> Option<Poly>) -> Option<Poly> {
        let mut out = Poly::default();
        for (m, c) in &self.0 {
            let mut term = Poly::constant(*c);
            for v in m {
                let p = match v {
                    Var::Idx(a) => f(*a)?,
                    Var::Sym(_) => Poly::var(v.clone()),
                };
                term = term.mul(&p)?;
            }
            out = out.add(&term)?;
        }
        Some(out)
    }
}

fn product(dims: &[Poly]) -> Option<Poly> {
    dims.iter().try_fold(Poly::constant(1), |acc, d| acc.mul(d))
}

/// The row-major position of index `(i_0, …)` in a tensor of shape `dims` (the index along an
/// axis of size 1 is always 0, so it does not appear).
fn ravel(dims: &[Poly]) -> Option<Poly> {
    let mut out = Poly::default();
    for a in 0..dims.len() {
        if !dims[a].is_one() {
            out = out.add(&Poly::idx(a).mul(&product(&dims[a + 1..])?)?)?;
        }
    }
    Some(out)
}

/// `p` with the index along every size-1 axis of `dims` set to its only value, 0.
fn pin_unit_axes(p: &Poly, dims: &[Poly]) -> Option<Poly> {
    p.subst(&|a| {
        Some(match dims.get(a) {
            Some(d) if d.is_one() => Poly::default(),
            _ => Poly::idx(a),
        })
    })
}

/// The element at every index of an abstract tensor.
#[derive(Clone, Debug, PartialEq)]
enum Elem {
    Int(Poly),
    Float(f64),
    Bool(bool),
    /// The element at row-major position `at` of graph input `v`.
    Input(ValueId, Poly),
    /// `x != 0` (Cast to bool).
    NonZero(Box<Elem>),
    And(Box<Elem>, Box<Elem>),
    Select(Box<Elem>, Box<Elem>, Box<Elem>),
}

impl Elem {
    fn subst(&self, f: &dyn Fn(usize) -> Option<Poly>) -> Option<Elem> {
        let b = |e: &Elem| e.subst(f).map(Box::new);
        Some(match self {
            Elem::Int(p) => Elem::Int(p.subst(f)?),
            Elem::Input(v, p) => Elem::Input(*v, p.subst(f)?),
            Elem::Float(_) | Elem::Bool(_) => self.clone(),
            Elem::NonZero(x) => Elem::NonZero(b(x)?),
            Elem::And(x, y) => Elem::And(b(x)?, b(y)?),
            Elem::Select(c, x, y) => Elem::Select(b(c)?, b(x)?, b(y)?),
        })
    }

    /// This element read in a tensor of shape `to` holding the same row-major sequence as one of
    /// shape `from`. Known for constants and for elementwise functions of graph-input elements
    /// read in order, which is what Reshape and Flatten of a (cast) mask are.
    fn relayout(&self, from: &[Poly], to: &[Poly]) -> Option<Elem> {
        let b = |e: &Elem| e.relayout(from, to).map(Box::new);
        Some(match self {
            Elem::Int(p) if !p.uses_indices() => self.clone(),
            Elem::Float(_) | Elem::Bool(_) => self.clone(),
            Elem::Input(v, p) if pin_unit_axes(p, from)? == ravel(from)? => {
                Elem::Input(*v, ravel(to)?)
            }
            Elem::NonZero(x) => Elem::NonZero(b(x)?),
            Elem::And(x, y) => Elem::And(b(x)?, b(y)?),
            Elem::Select(c, x, y) => Elem::Select(b(c)?, b(x)?, b(y)?),
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
struct Abs {
    dtype: DType,
    shape: Vec<Poly>,
    elem: Elem,
}

impl Abs {
    /// The element expression read at the index space of `out` (numpy broadcasting): an axis of
    /// size 1 reads index 0; any other axis must be the same size as `out`'s.
    fn broadcast_to(&self, out: &[Poly]) -> Option<Elem> {
        let offset = out.len().checked_sub(self.shape.len())?;
        for (a, d) in self.shape.iter().enumerate() {
            if !d.is_one() && *d != out[a + offset] {
                return None;
            }
        }
        let shape = &self.shape;
        self.elem.subst(&|a| {
            Some(if shape[a].is_one() {
                Poly::default()
            } else {
                Poly::idx(a + offset)
            })
        })
    }
}

/// numpy broadcasting of shapes whose dims are equal or 1 (a dim that might be 1 only at run
/// time, such as two different symbols, is not decided).
fn broadcast_shapes(shapes: &[&[Poly]]) -> Option<Vec<Poly>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    (0..rank)
        .map(|i| {
            let mut out = Poly::constant(1);
            for s in shapes {
                let Some(j) = (i + s.len()).checked_sub(rank) else {
                    continue;
                };
                let d = &s[j];
                if d.is_one() {
                    continue;
                }
                if out.is_one() {
                    out = d.clone();
                } else if out != *d {
                    return None;
                }
            }
            Some(out)
        })
        .collect()
}

/// The proved meaning of an additive attention mask.
#[derive(Clone, Debug, PartialEq)]
pub struct PaddingMask {
    /// The graph input `X` of shape `[B, T]`: key position k of batch b is kept where
    /// `X[b, k] != 0`.
    pub input: ValueId,
    /// The value added to scores of masked positions (0 is added to kept ones).
    pub filter: f64,
}

/// Proves that `mask`, added to attention scores of shape `scores` `[B, N, S, T]`, equals
/// `Where(X[b, k] != 0, 0, F)` for a graph input `X` of shape `[B, T]`, broadcast over heads and
/// query positions, and does not change the sum's shape. Otherwise says where the proof stopped.
pub fn padding_mask(model: &Model, mask: ValueId, scores: &[Dim]) -> Result<PaddingMask, String> {
    let g = &model.graph;
    let not_proved = |why: String| {
        format!(
            "mask '{}' is not a proved padding mask: {why}",
            g.name(mask)
        )
    };
    let scores: Vec<Poly> = scores
        .iter()
        .map(Poly::from_dim)
        .collect::<Option<_>>()
        .filter(|s: &Vec<Poly>| s.len() == 4)
        .ok_or_else(|| not_proved("the scores' shape is not known at rank 4".into()))?;
    let mut it = Interp {
        model,
        memo: HashMap::new(),
        visits: 0,
    };
    let m = it.eval(mask).map_err(not_proved)?;
    if m.dtype != DType::F32 {
        return Err(not_proved(format!("it is {}, not float32", m.dtype)));
    }
    if broadcast_shapes(&[&scores, &m.shape]).as_ref() != Some(&scores) {
        return Err(not_proved(format!(
            "adding it would broadcast the scores ({:?} vs {:?})",
            m.shape, scores
        )));
    }
    let e = m
        .broadcast_to(&scores)
        .ok_or_else(|| not_proved("its shape does not broadcast to the scores'".into()))?;
    let shape_err = || not_proved("it is not Where(X[b, k] != 0, 0, F) of a [B, T] input".into());
    let Elem::Select(cond, keep, masked) = e else {
        return Err(shape_err());
    };
    let (Elem::Float(k), Elem::Float(f)) = (*keep, *masked) else {
        return Err(shape_err());
    };
    if k != 0.0 {
        return Err(shape_err());
    }
    let (x, at, nonzero) = match *cond {
        Elem::NonZero(inner) => match *inner {
            Elem::Input(x, at) => (x, at, true),
            _ => return Err(shape_err()),
        },
        Elem::Input(x, at) => (x, at, false),
        _ => return Err(shape_err()),
    };
    let x_ty = &g.value(x).ty;
    if !nonzero && x_ty.dtype != Some(DType::BOOL) {
        return Err(shape_err());
    }
    let x_shape: Vec<Poly> = x_ty
        .shape
        .as_ref()
        .and_then(|s| s.iter().map(Poly::from_dim).collect())
        .ok_or_else(shape_err)?;
    // X[b, k] with b the batch axis and k the key axis of the scores.
    let expected = match x_shape.as_slice() {
        [b, t] if *b == scores[0] && *t == scores[3] => {
            Poly::idx(0).mul(t).and_then(|p| p.add(&Poly::idx(3)))
        }
        _ => None,
    };
    if expected.as_ref() != Some(&at) {
        return Err(shape_err());
    }
    Ok(PaddingMask {
        input: x,
        filter: f,
    })
}

struct Interp<'m> {
    model: &'m Model,
    memo: HashMap<ValueId, Abs>,
    visits: usize,
}

type Step = Result<Abs, String>;

impl Interp<'_> {
    fn eval(&mut self, v: ValueId) -> Step {
        if let Some(a) = self.memo.get(&v) {
            return Ok(a.clone());
        }
        self.visits += 1;
        if self.visits > MAX_NODES {
            return Err(format!("more than {MAX_NODES} nodes"));
        }
        let a = self.eval_uncached(v)?;
        self.memo.insert(v, a.clone());
        Ok(a)
    }

    fn eval_uncached(&mut self, v: ValueId) -> Step {
        let g = &self.model.graph;
        let ty = &g.value(v).ty;
        let name = g.name(v);
        if let Some(t) = constant_tensor(g, v) {
            return uniform_constant(&t).ok_or_else(|| format!("constant '{name}' is not uniform"));
        }
        if g.is_graph_input(v) {
            let dtype = ty
                .dtype
                .ok_or_else(|| format!("'{name}' has no element type"))?;
            let shape: Vec<Poly> = ty
                .shape
                .as_ref()
                .and_then(|s| s.iter().map(Poly::from_dim).collect())
                .ok_or_else(|| format!("the shape of input '{name}' is not known"))?;
            let at = ravel(&shape).ok_or("overflow")?;
            return Ok(Abs {
                dtype,
                shape,
                elem: Elem::Input(v, at),
            });
        }
        // A scalar or one-element shape value: its element may be a symbolic dim.
        if matches!(ty.dtype, Some(DType::I64 | DType::I32)) {
            if let (Some(r @ 0..=1), Some(els)) = (ty.rank(), int_elements(g, v)) {
                if let [d] = els.as_slice() {
                    if let Some(p) = Poly::from_dim(d) {
                        return Ok(Abs {
                            dtype: ty.dtype.unwrap_or(DType::I64),
                            shape: vec![Poly::constant(1); r],
                            elem: Elem::Int(p),
                        });
                    }
                }
            }
        }
        let id = g
            .producer(v)
            .ok_or_else(|| format!("'{name}' has no producer"))?;
        let node = g.node(id);
        let unsupported = || format!("{} '{}' is not interpreted", node.op_type, node.label(id));
        if !node.is_onnx_domain() || node.output(0) != Some(v) {
            return Err(unsupported());
        }
        let opset = self.model.opset("").unwrap_or(1);
        let inp = |i: usize| node.input(i).ok_or_else(unsupported);
        match node.op_type.as_str() {
            "Identity" => self.eval(inp(0)?),
            "Cast" => {
                let x = self.eval(inp(0)?)?;
                let to = DType(node.attr_int("to").ok_or_else(unsupported)? as i32);
                cast(x, to).ok_or_else(unsupported)
            }
            "Range" => {
                let ints = |i: usize| -> Option<Dim> {
                    match int_elements(g, node.input(i)?)?.as_slice() {
                        [d] => Some(d.clone()),
                        _ => None,
                    }
                };
                let (Some(Dim::Known(0)), Some(limit), Some(Dim::Known(1))) =
                    (ints(0), ints(1), ints(2))
                else {
                    return Err(format!("Range '{}' is not Range(0, n, 1)", node.label(id)));
                };
                let n = Poly::from_dim(&limit).ok_or_else(unsupported)?;
                let dtype = ty.dtype.ok_or_else(unsupported)?;
                Ok(Abs {
                    dtype,
                    shape: vec![n],
                    elem: Elem::Int(Poly::idx(0)),
                })
            }
            "Unsqueeze" | "Squeeze" => {
                let x = self.eval(inp(0)?)?;
                let axes = axes_of(g, node, opset).ok_or_else(unsupported)?;
                squeeze_like(x, &axes, node.op_type == "Unsqueeze").ok_or_else(unsupported)
            }
            "Add" | "Sub" | "Mul" | "And" | "GreaterOrEqual" | "LessOrEqual" | "Where" => {
                let args: Vec<Abs> = node
                    .inputs
                    .iter()
                    .map(|x| self.eval(x.ok_or_else(unsupported)?))
                    .collect::<Result<_, _>>()?;
                elementwise(&node.op_type, &args, ty.dtype).ok_or_else(|| {
                    format!(
                        "{} '{}' is not decided for every index",
                        node.op_type,
                        node.label(id)
                    )
                })
            }
            "Expand" => {
                let x = self.eval(inp(0)?)?;
                let target: Vec<Poly> = int_elements(g, inp(1)?)
                    .and_then(|d| d.iter().map(Poly::from_dim).collect())
                    .ok_or_else(unsupported)?;
                let shape = broadcast_shapes(&[&x.shape, &target]).ok_or_else(unsupported)?;
                let elem = x.broadcast_to(&shape).ok_or_else(unsupported)?;
                Ok(Abs { shape, elem, ..x })
            }
            "Flatten" => {
                let x = self.eval(inp(0)?)?;
                let r = x.shape.len() as i64;
                let mut axis = node.attr_int("axis").unwrap_or(1);
                if axis < 0 {
                    axis += r;
                }
                if !(0..=r).contains(&axis) {
                    return Err(unsupported());
                }
                let (outer, inner) = x.shape.split_at(axis as usize);
                let shape = vec![
                    product(outer).ok_or_else(unsupported)?,
                    product(inner).ok_or_else(unsupported)?,
                ];
                relayout(x, shape).ok_or_else(unsupported)
            }
            "Reshape" => {
                let x = self.eval(inp(0)?)?;
                let target =
                    self.reshape_target(inp(1)?, &x, node.attr_int("allowzero") == Some(1));
                let shape = target.ok_or_else(unsupported)?;
                relayout(x, shape).ok_or_else(unsupported)
            }
            "Gather" => {
                let data = self.eval(inp(0)?)?;
                let idx = self.eval(inp(1)?)?;
                gather(data, idx, node.attr_int("axis").unwrap_or(0)).ok_or_else(|| {
                    format!(
                        "Gather '{}' indices are not provably within the data",
                        node.label(id)
                    )
                })
            }
            _ => Err(unsupported()),
        }
    }

    /// Reshape's output shape: the target's elements (0 copies the input dim unless allowzero; a
    /// lone -1 is the element count), or the shape of the value a `Shape` target reads.
    fn reshape_target(&mut self, target: ValueId, x: &Abs, allowzero: bool) -> Option<Vec<Poly>> {
        let g = &self.model.graph;
        if let Some(els) = int_elements(g, target) {
            if let [Dim::Known(-1)] = els.as_slice() {
                return Some(vec![product(&x.shape)?]);
            }
            let dims: Option<Vec<Poly>> = els
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Dim::Known(0) if !allowzero => x.shape.get(i).cloned(),
                    Dim::Known(k) if *k < 0 => None,
                    d => Poly::from_dim(d),
                })
                .collect();
            if dims.is_some() {
                return dims;
            }
        }
        // Concat of one Shape(y), as exporters spell "reshape like y".
        let mut v = target;
        loop {
            let node = g.node(g.producer(v)?);
            match node.op_type.as_str() {
                "Concat" | "Identity" if node.inputs.len() == 1 => v = node.input(0)?,
                "Shape" if node.attr_int("start").is_none() && node.attr_int("end").is_none() => {
                    let y = self.eval(node.input(0)?).ok()?;
                    return Some(y.shape);
                }
                _ => return None,
            }
        }
    }
}

fn uniform_constant(t: &Tensor) -> Option<Abs> {
    let shape = t
        .shape()
        .iter()
        .map(|&d| Poly::constant(d as i64))
        .collect();
    let elem = match t {
        Tensor::Bool(a) => {
            let first = *a.iter().next()?;
            a.iter().all(|&x| x == first).then_some(Elem::Bool(first))?
        }
        Tensor::I32(_) | Tensor::I64(_) => {
            let v = t.to_i64_vec()?;
            let first = *v.first()?;
            v.iter()
                .all(|&x| x == first)
                .then(|| Elem::Int(Poly::constant(first)))?
        }
        Tensor::F32(_) | Tensor::F64(_) => {
            let v = t.to_f64_vec();
            let first = *v.first()?;
            v.iter()
                .all(|&x| x.to_bits() == first.to_bits())
                .then_some(Elem::Float(first))?
        }
    };
    Some(Abs {
        dtype: t.dtype(),
        shape,
        elem,
    })
}

fn cast(x: Abs, to: DType) -> Option<Abs> {
    let elem = match (x.dtype, to) {
        (a, b) if a == b => x.elem,
        (DType::I32, DType::I64) => x.elem,
        (DType::BOOL, _) => return None,
        (_, DType::BOOL) => match x.elem {
            Elem::Int(p) => Elem::Bool(p.as_constant()? != 0),
            Elem::Float(f) => Elem::Bool(f != 0.0),
            e => Elem::NonZero(Box::new(e)),
        },
        _ => return None,
    };
    Some(Abs {
        dtype: to,
        elem,
        ..x
    })
}

fn squeeze_like(x: Abs, axes: &[i64], unsqueeze: bool) -> Option<Abs> {
    let out_rank = if unsqueeze {
        x.shape.len() + axes.len()
    } else {
        x.shape.len().checked_sub(axes.len())?
    };
    let axis_rank = if unsqueeze { out_rank } else { x.shape.len() };
    let mut marked = vec![false; axis_rank];
    for &a in axes {
        let a = if a < 0 { a + axis_rank as i64 } else { a };
        let slot = marked.get_mut(usize::try_from(a).ok()?)?;
        if *slot {
            return None;
        }
        *slot = true;
    }
    // Input axis → output axis.
    let mut map = Vec::new();
    let mut shape = Vec::new();
    if unsqueeze {
        let mut next = 0;
        for (o, &m) in marked.iter().enumerate() {
            if m {
                shape.push(Poly::constant(1));
            } else {
                shape.push(x.shape.get(next)?.clone());
                map.push(Some(o));
                next += 1;
            }
        }
    } else {
        for (i, &m) in marked.iter().enumerate() {
            if m {
                if !x.shape[i].is_one() {
                    return None;
                }
                map.push(None);
            } else {
                map.push(Some(shape.len()));
                shape.push(x.shape[i].clone());
            }
        }
    }
    let elem = x.elem.subst(&|a| {
        Some(match map.get(a).copied().flatten() {
            Some(o) => Poly::idx(o),
            None => Poly::default(),
        })
    })?;
    Some(Abs {
        dtype: x.dtype,
        shape,
        elem,
    })
}

fn elementwise(op: &str, args: &[Abs], out_dtype: Option<DType>) -> Option<Abs> {
    let shapes: Vec<&[Poly]> = args.iter().map(|a| a.shape.as_slice()).collect();
    let shape = broadcast_shapes(&shapes)?;
    let e: Vec<Elem> = args
        .iter()
        .map(|a| a.broadcast_to(&shape))
        .collect::<Option<_>>()?;
    let int = |e: &Elem| match e {
        Elem::Int(p) => Some(p.clone()),
        _ => None,
    };
    let float = |e: &Elem| match e {
        Elem::Float(f) => Some(*f),
        _ => None,
    };
    let elem = match (op, e.as_slice()) {
        ("Add" | "Sub" | "Mul", [a, b]) if args[0].dtype.is_float() => {
            let (x, y) = (float(a)?, float(b)?);
            Elem::Float(match op {
                "Add" => x + y,
                "Sub" => x - y,
                _ => x * y,
            })
        }
        ("Add", [a, b]) => Elem::Int(int(a)?.add(&int(b)?)?),
        ("Sub", [a, b]) => Elem::Int(int(a)?.sub(&int(b)?)?),
        ("Mul", [a, b]) => Elem::Int(int(a)?.mul(&int(b)?)?),
        ("GreaterOrEqual" | "LessOrEqual", [a, b]) => {
            let d = if op == "GreaterOrEqual" {
                int(a)?.sub(&int(b)?)?
            } else {
                int(b)?.sub(&int(a)?)?
            };
            // Decided true for every index, or not interpreted.
            (d.as_constant() == Some(0) || d.never_negative()).then_some(Elem::Bool(true))?
        }
        ("And", [a, b]) => match (a, b) {
            (Elem::Bool(true), x) | (x, Elem::Bool(true)) => x.clone(),
            (Elem::Bool(false), _) | (_, Elem::Bool(false)) => Elem::Bool(false),
            (x, y) => Elem::And(Box::new(x.clone()), Box::new(y.clone())),
        },
        ("Where", [c, a, b]) => match c {
            Elem::Bool(true) => a.clone(),
            Elem::Bool(false) => b.clone(),
            c => Elem::Select(
                Box::new(c.clone()),
                Box::new(a.clone()),
                Box::new(b.clone()),
            ),
        },
        _ => return None,
    };
    Some(Abs {
        dtype: out_dtype?,
        shape,
        elem,
    })
}

fn relayout(x: Abs, shape: Vec<Poly>) -> Option<Abs> {
    if product(&shape)? != product(&x.shape)? {
        return None;
    }
    let elem = if shape == x.shape {
        x.elem
    } else {
        x.elem.relayout(&x.shape, &shape)?
    };
    Some(Abs {
        dtype: x.dtype,
        shape,
        elem,
    })
}

/// Gather along axis 0 with indices that are provably in `[0, len)` everywhere (so neither
/// negative wrap-around nor the out-of-range error can happen).
fn gather(data: Abs, idx: Abs, axis: i64) -> Option<Abs> {
    let axis = if axis < 0 {
        axis + data.shape.len() as i64
    } else {
        axis
    };
    if axis != 0 || data.shape.is_empty() {
        return None;
    }
    let Elem::Int(at) = &idx.elem else {
        return None;
    };
    if !(at.as_constant() == Some(0) || at.never_negative()) {
        return None;
    }
    // The largest index: every index variable at its axis' last position (`at` only grows).
    let top = at.subst(&|a| idx.shape.get(a)?.sub(&Poly::constant(1)))?;
    let room = data.shape[0].sub(&Poly::constant(1))?.sub(&top)?;
    if !(room.as_constant() == Some(0) || room.never_negative()) {
        return None;
    }
    let r = idx.shape.len();
    let elem = data.elem.subst(&|a| {
        Some(if a == 0 {
            at.clone()
        } else {
            Poly::idx(r + a - 1)
        })
    })?;
    let mut shape = idx.shape.clone();
    shape.extend(data.shape[1..].iter().cloned());
    Some(Abs {
        dtype: data.dtype,
        shape,
        elem,
    })
}
