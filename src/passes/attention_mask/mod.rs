//! What an exporter's attention-mask subgraph computes, proved symbolically, so the Attention
//! fusion can hand the model's 2-D `attention_mask` to the fused op as its raw mask.
//!
//! transformers builds the additive mask `M[b, h, q, k]` that is added to the attention scores
//! from `attention_mask[b, k]` with Range, Unsqueeze, broadcasting arithmetic, Flatten, Gather,
//! Reshape, Expand and a final `Where(cond, 0, F)` (BERT tiny: 45 nodes; GPT-2 also compares
//! key and query positions for the causal part). `attention_mask` reads that subgraph as math:
//! each value becomes an abstract tensor, a shape whose dims are polynomials over the graph's
//! symbolic dims, plus one expression that gives the element at every index (`Range` gives
//! `i0`, `Unsqueeze` renames axes, broadcasting sends an axis of size 1 to index 0, `Gather`
//! substitutes its index expression, `Reshape` and `Flatten` keep the row-major position of
//! graph-input elements, a comparison it cannot decide stays a term). When the result is
//! `Where(keep, 0, F)` with `keep` a conjunction of `X[b, k] != 0` (X a graph input of shape
//! [B, T]) and `k <= q`, the mask is exactly Attention's raw mask with `mask_filter_value = F`,
//! plus `unidirectional = 1` for the causal part.
//!
//! Every step is exact or gives up: an op outside the list, a dim that could broadcast at run
//! time (two different symbols), a Gather index that might be negative or past the end stops the
//! proof with the reason.

mod filter;
mod poly;

use std::collections::HashMap;

pub use filter::op_filter;
use poly::{broadcast_shapes, pin_unit_axes, product, ravel, Poly};

use crate::ir::types::Dim;
use crate::ir::{Model, ValueId};
use crate::ops;
use crate::ops::cast::Cast;
use crate::ops::index_ops::{Flatten, Gather};
use crate::ops::infer::axes_of;
use crate::ops::shape_ops::{Reshape, Shape};
use crate::ops::shape_value::{constant_tensor, int_elements};
use crate::tensor::{DType, Tensor};

/// Nodes the interpretation may visit for one mask.
const MAX_NODES: usize = 256;

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
    /// `a <= b`, not decided statically (a causal mask compares key and query positions).
    Le(Poly, Poly),
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
            Elem::Le(x, y) => Elem::Le(x.subst(f)?, y.subst(f)?),
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

/// The proved meaning of an additive attention mask: score (b, ·, q, k) is kept (0 is added)
/// where every stated condition holds, and gets `filter` added otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionMask {
    /// A graph input `X` of shape `[B, T]`: the condition `X[b, k] != 0`.
    pub padding: Option<ValueId>,
    /// The condition `k <= q` (after a cache of P keys, `k <= q + P`: query i is token P + i).
    pub causal: bool,
    pub filter: f64,
}

/// Keys that follow a cache (a decode step): the scores' key axis is `past` cached keys then
/// `new` ones, `past + new` long, and the causal condition is `k <= q + past`.
pub struct Past<'a> {
    pub past: &'a Dim,
    pub new: &'a Dim,
    /// A symbol the model states to be `past + new`: its present key/value output is declared
    /// with this length while the graph computes it as the Concat of the two. Masks and the
    /// `attention_mask` input are sized by it.
    pub total: Option<&'a str>,
}

/// Proves that `mask`, added to attention scores of shape `scores` `[B, N, S, T]`, equals
/// `Where(keep, 0, F)` broadcast over heads, where `keep` is `X[b, k] != 0` for a graph input `X`
/// of shape `[B, T]` (padding), `k <= q` (causal), or both, and that adding it does not change
/// the scores' shape. Otherwise says where the proof stopped.
pub fn attention_mask(
    model: &Model,
    mask: ValueId,
    scores: &[Dim],
) -> Result<AttentionMask, String> {
    attention_mask_after(model, mask, scores, None)
}

/// `attention_mask` for scores whose keys follow a cache (`past`; None: no cache). The scores'
/// key axis is taken to be `past + new` (its dim in `scores` is not read), and the symbol the
/// model declares equal to it stands for that sum wherever it appears.
pub fn attention_mask_after(
    model: &Model,
    mask: ValueId,
    scores: &[Dim],
    past: Option<&Past>,
) -> Result<AttentionMask, String> {
    let g = &model.graph;
    let not_proved = |why: String| {
        format!(
            "mask '{}' is not a proved attention mask: {why}",
            g.name(mask)
        )
    };
    let cached = match past {
        None => None,
        Some(p) => {
            let (Some(len), Some(new)) = (Poly::from_dim(p.past), Poly::from_dim(p.new)) else {
                return Err(not_proved(
                    "the cache's or the new keys' length is unknown".into(),
                ));
            };
            let total = len.add(&new).ok_or_else(|| not_proved("overflow".into()))?;
            Some((len, total, p.total.map(str::to_string)))
        }
    };
    let alias = cached
        .as_ref()
        .and_then(|(_, total, name)| Some((name.clone()?, total.clone())));
    let offset = cached.as_ref().map_or_else(Poly::default, |c| c.0.clone());
    let mut scores: Vec<Poly> = scores
        .iter()
        .map(Poly::from_dim)
        .collect::<Option<_>>()
        .filter(|s: &Vec<Poly>| s.len() == 4)
        .ok_or_else(|| not_proved("the scores' shape is not known at rank 4".into()))?;
    if let Some((_, total, _)) = &cached {
        scores[3] = total.clone();
    }
    let mut it = Interp {
        model,
        memo: HashMap::new(),
        visits: 0,
        alias,
    };
    let m = it.eval(mask).map_err(not_proved)?;
    if !matches!(m.dtype, DType::F32 | DType::F16) {
        return Err(not_proved(format!(
            "it is {}, not float32 or float16",
            m.dtype
        )));
    }
    if broadcast_shapes(&[&scores, &m.shape]).as_ref() != Some(&scores) {
        return Err(not_proved(format!(
            "its dims {} are not provably the scores' {} (or 1): they could differ at run time",
            poly::show(&m.shape),
            poly::show(&scores)
        )));
    }
    let e = m
        .broadcast_to(&scores)
        .ok_or_else(|| not_proved("its shape does not broadcast to the scores'".into()))?;
    let shape_err = || {
        not_proved(
            "it is not Where(keep, 0, F) with keep made of X[b, k] != 0 for a [B, T] input \
             and k <= q"
                .into(),
        )
    };
    let Elem::Select(cond, keep, masked) = e else {
        return Err(shape_err());
    };
    let (Elem::Float(k), Elem::Float(f)) = (*keep, *masked) else {
        return Err(shape_err());
    };
    if k != 0.0 {
        return Err(shape_err());
    }
    let mut terms = Vec::new();
    conjuncts(*cond, &mut terms);
    let mut out = AttentionMask {
        padding: None,
        causal: false,
        filter: f,
    };
    for t in terms {
        match t {
            Elem::Le(a, b)
                if a == Poly::idx(3)
                    && Poly::idx(2).add(&offset).as_ref() == Some(&b)
                    && !out.causal =>
            {
                out.causal = true;
            }
            Elem::NonZero(inner) if out.padding.is_none() => match *inner {
                Elem::Input(x, at) if it.padding_index(x, &at, &scores) => out.padding = Some(x),
                _ => return Err(shape_err()),
            },
            Elem::Input(x, at)
                if out.padding.is_none()
                    && g.value(x).ty.dtype == Some(DType::BOOL)
                    && it.padding_index(x, &at, &scores) =>
            {
                out.padding = Some(x)
            }
            _ => return Err(shape_err()),
        }
    }
    Ok(out)
}

fn conjuncts(e: Elem, out: &mut Vec<Elem>) {
    match e {
        Elem::And(a, b) => {
            conjuncts(*a, out);
            conjuncts(*b, out);
        }
        e => out.push(e),
    }
}

impl Interp<'_> {
    /// True when `at` is the position of `X[b, k]` (b the batch axis and k the key axis of the
    /// scores) in a graph input `x` of shape `[B, T]`.
    fn padding_index(&self, x: ValueId, at: &Poly, scores: &[Poly]) -> bool {
        match self.shape_of(x).as_deref() {
            Some([b, t]) if *b == scores[0] && *t == scores[3] => {
                Poly::idx(0)
                    .mul(t)
                    .and_then(|p| p.add(&Poly::idx(3)))
                    .as_ref()
                    == Some(at)
            }
            _ => false,
        }
    }

    /// A dim as a polynomial, the declared total (`Past::total`) read as the sum it stands for.
    fn poly(&self, d: &Dim) -> Option<Poly> {
        match (d, &self.alias) {
            (Dim::Sym(s), Some((name, total))) if s == name => Some(total.clone()),
            _ => Poly::from_dim(d),
        }
    }

    fn shape_of(&self, v: ValueId) -> Option<Vec<Poly>> {
        let s = self.model.graph.value(v).ty.shape.as_ref()?;
        s.iter().map(|d| self.poly(d)).collect()
    }

    /// The integer elements of a 1-D (or scalar) shape-like value: its statically known
    /// elements, else (a sum of dims, as `past + seq` is) what the interpretation gives a scalar
    /// or a Concat of scalars.
    fn int_vector(&mut self, v: ValueId) -> Option<Vec<Poly>> {
        let g = &self.model.graph;
        if let Some(els) = int_elements(g, v) {
            if let Some(p) = els.iter().map(|d| self.poly(d)).collect() {
                return Some(p);
            }
        }
        let rank1 = |x: ValueId| g.value(x).ty.rank() == Some(1);
        if let Some(id) = g.producer(v) {
            let n = g.node(id);
            match n.op_type.as_str() {
                "Concat" if n.inputs.len() > 1 => {
                    let mut out = vec![];
                    for i in n.inputs.clone() {
                        out.extend(self.int_vector(i?)?);
                    }
                    return Some(out);
                }
                // A vector reshaped to a vector: the same elements.
                "Reshape" if rank1(v) && n.input(0).is_some_and(rank1) => {
                    return self.int_vector(n.input(0)?);
                }
                // torch's expand sizes: Where(Equal(s, -1), a, s) takes a's element where s
                // has the constant -1, s's where it provably has no -1.
                "Where" => {
                    let (c, a, s) = (n.input(0)?, n.input(1)?, n.input(2)?);
                    let (_, eq) = crate::passes::matchers::produced_by(g, c, "Equal")?;
                    let minus_one = |x: Option<ValueId>| {
                        x.and_then(|x| int_elements(g, x))
                            .is_some_and(|e| e.iter().all(|d| *d == Dim::Known(-1)))
                    };
                    let reads_s = eq.input(0) == Some(s) && minus_one(eq.input(1))
                        || eq.input(1) == Some(s) && minus_one(eq.input(0));
                    if !reads_s {
                        return None;
                    }
                    let (els, alt) = (self.int_vector(s)?, self.int_vector(a)?);
                    if alt.len() != els.len() {
                        return None;
                    }
                    return els
                        .into_iter()
                        .zip(alt)
                        .map(|(p, q)| match p.as_constant() {
                            Some(-1) => Some(q),
                            Some(_) => Some(p),
                            None => p.never_negative().then_some(p),
                        })
                        .collect();
                }
                _ => {}
            }
        }
        let a = self.eval(v).ok()?;
        match (
            &a.elem,
            a.shape.iter().all(Poly::is_one) && a.shape.len() <= 1,
        ) {
            // A sum of dims; a polynomial that could be negative is no length.
            (Elem::Int(p), true)
                if !p.uses_indices() && (p.as_constant().is_some() || p.never_negative()) =>
            {
                Some(vec![p.clone()])
            }
            _ => None,
        }
    }
}

struct Interp<'m> {
    model: &'m Model,
    memo: HashMap<ValueId, Abs>,
    visits: usize,
    /// `Past::total`'s symbol and the sum it stands for.
    alias: Option<(String, Poly)>,
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
            let shape: Vec<Poly> = self
                .shape_of(v)
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
                    if let Some(p) = self.poly(d) {
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
                let to = ops::attrs_of::<Cast>(self.model, node)
                    .ok_or_else(unsupported)?
                    .to;
                cast(x, to).ok_or_else(unsupported)
            }
            "Range" => {
                let mut ints = |i: usize| -> Option<Poly> {
                    match self.int_vector(node.input(i)?)?.as_slice() {
                        [d] => Some(d.clone()),
                        _ => None,
                    }
                };
                let (start, n, step) = (ints(0), ints(1), ints(2));
                if start.is_none_or(|p| p.as_constant() != Some(0))
                    || step.is_none_or(|p| !p.is_one())
                {
                    return Err(format!("Range '{}' is not Range(0, n, 1)", node.label(id)));
                }
                let n = n.ok_or_else(unsupported)?;
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
                // Squeeze without axes drops every dim that is 1 at run time: not tracked.
                if axes.is_empty() {
                    return Err(unsupported());
                }
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
                let target: Vec<Poly> = self.int_vector(inp(1)?).ok_or_else(unsupported)?;
                let shape = broadcast_shapes(&[&x.shape, &target]).ok_or_else(unsupported)?;
                let elem = x.broadcast_to(&shape).ok_or_else(unsupported)?;
                Ok(Abs { shape, elem, ..x })
            }
            "Flatten" => {
                let x = self.eval(inp(0)?)?;
                let r = x.shape.len() as i64;
                let mut axis = ops::attrs_of::<Flatten>(self.model, node)
                    .ok_or_else(unsupported)?
                    .axis;
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
                let allowzero = ops::attrs_of::<Reshape>(self.model, node)
                    .ok_or_else(unsupported)?
                    .allowzero;
                let target = self.reshape_target(inp(1)?, &x, allowzero);
                let shape = target.ok_or_else(unsupported)?;
                relayout(x, shape).ok_or_else(unsupported)
            }
            "Gather" => {
                let data = self.eval(inp(0)?)?;
                let idx = self.eval(inp(1)?)?;
                let axis = ops::attrs_of::<Gather>(self.model, node)
                    .ok_or_else(unsupported)?
                    .axis;
                gather(data, idx, axis).ok_or_else(|| {
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
        // Concat of one Shape(y), as exporters spell "reshape like y": y's interpreted shape,
        // exact where inference left a sum of dims undecided.
        if let Some(like) = self.shape_like(target) {
            return Some(like);
        }
        let els = self.int_vector(target)?;
        if let [p] = els.as_slice() {
            if p.as_constant() == Some(-1) {
                return Some(vec![product(&x.shape)?]);
            }
        }
        els.iter()
            .enumerate()
            .map(|(i, p)| match p.as_constant() {
                Some(0) if !allowzero => x.shape.get(i).cloned(),
                Some(k) if k < 0 => None,
                _ => Some(p.clone()),
            })
            .collect()
    }

    /// The shape of `y` when `v` is `Shape(y)` (whole), through one-input Concat or Identity.
    fn shape_like(&mut self, mut v: ValueId) -> Option<Vec<Poly>> {
        let g = &self.model.graph;
        loop {
            let node = g.node(g.producer(v)?);
            match node.op_type.as_str() {
                "Concat" | "Identity" if node.inputs.len() == 1 => v = node.input(0)?,
                "Shape"
                    if ops::attrs_of::<Shape>(self.model, node)
                        .is_some_and(|s| s.start == 0 && s.end.is_none()) =>
                {
                    return Some(self.eval(node.input(0)?).ok()?.shape);
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
        // Other storage types (int8, bfloat16, ...) are not mask material here.
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) => {
            let v = t.to_f64_vec();
            let first = *v.first()?;
            v.iter()
                .all(|&x| x.to_bits() == first.to_bits())
                .then_some(Elem::Float(first))?
        }
        _ => return None,
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
            let exact = match op {
                "Add" => x + y,
                "Sub" => x - y,
                _ => x * y,
            };
            // Round as the graph does: (MIN * 2) * 0.5 is -inf in float32, not MIN.
            Elem::Float(match args[0].dtype {
                DType::F32 => exact as f32 as f64,
                DType::F16 => half::f16::from_f64(exact).to_f64(),
                _ => exact,
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
            if d.never_negative() {
                Elem::Bool(true)
            } else if op == "GreaterOrEqual" {
                Elem::Le(int(b)?, int(a)?)
            } else {
                Elem::Le(int(a)?, int(b)?)
            }
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
