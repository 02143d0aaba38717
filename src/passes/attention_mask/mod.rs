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
//! Lengths that are sums of dims (a decode step's `Range(0, past + seq)`, its Expand and Reshape
//! sizes) are read by interpreting the scalars and Concats that compute them (`int_vector`), and
//! torch's expand sizes `Where(Equal(s, -1), 1, s)` element by element. After a cache
//! (`attention_mask_after`), the scores' key axis is `past + new`, the causal term is
//! `k <= q + past`, and the symbol the model declares for that sum stands for it everywhere.
//!
//! Every step is exact or gives up: an op outside the list, a dim that could broadcast at run
//! time (two different symbols), a Gather index that might be negative or past the end stops the
//! proof with the reason.

mod elem;
mod filter;
mod poly;

use std::collections::HashMap;

use elem::{
    cast, elementwise, gather, gather_nd, relayout, squeeze_like, uniform_constant, Abs, Elem,
};
pub use filter::op_filter;
use poly::{broadcast_shapes, product, ravel, Poly};

use crate::ir::types::Dim;
use crate::ir::{Model, ValueId};
use crate::ops;
use crate::ops::cast::Cast;
use crate::ops::concat::Concat;
use crate::ops::gather_scatter::GatherND;
use crate::ops::index_ops::{Flatten, Gather};
use crate::ops::infer::axes_of;
use crate::ops::shape_ops::{Reshape, Shape};
use crate::ops::shape_value::{constant_tensor, int_elements};
use crate::tensor::DType;

/// Nodes the interpretation may visit for one mask.
const MAX_NODES: usize = 256;

/// The proved meaning of an additive attention mask: score (b, ·, q, k) is kept (0 is added)
/// where every stated condition holds, and gets `filter` added otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionMask {
    /// A graph input `X` of shape `[B, T]`: the condition `X[b, k] != 0`.
    pub padding: Option<ValueId>,
    /// The condition `k <= q` (after a cache of P keys, `k <= q + P`: query i is token P + i).
    pub causal: bool,
    pub filter: f64,
    /// The mask is 4-D with the scores' query and key lengths (its batch and head dims theirs
    /// or 1): an attention_bias as it is.
    pub bias_shape: bool,
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
    let bias_shape = m.shape.len() == 4 && m.shape[2..] == scores[2..];
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
        bias_shape,
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
            "GatherND" => {
                let data = self.eval(inp(0)?)?;
                let batch_dims = ops::attrs_of::<GatherND>(self.model, node)
                    .ok_or_else(unsupported)?
                    .batch_dims;
                let cat = g
                    .producer(inp(1)?)
                    .map(|c| g.node(c))
                    .filter(|c| c.is("Concat"))
                    .ok_or_else(unsupported)?;
                let rank = g.value(inp(1)?).ty.rank().ok_or_else(unsupported)? as i64;
                let axis = ops::attrs_of::<Concat>(self.model, cat)
                    .and_then(|c| c.axis)
                    .ok_or_else(unsupported)?;
                if batch_dims != 0 || !(axis == -1 || axis == rank - 1) {
                    return Err(format!(
                        "GatherND '{}' does not index by a Concat of coordinates along the last axis",
                        node.label(id)
                    ));
                }
                let mut pieces = vec![];
                for x in cat.inputs.iter() {
                    let a = self.eval(x.ok_or_else(unsupported)?)?;
                    if !a.shape.last().is_some_and(|d| d.is_one()) {
                        return Err(unsupported());
                    }
                    let last = a.shape.len() as i64 - 1;
                    pieces.push(squeeze_like(a, &[last], false).ok_or_else(unsupported)?);
                }
                gather_nd(data, &pieces).ok_or_else(|| {
                    format!(
                        "GatherND '{}' indices are not provably within the data",
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
