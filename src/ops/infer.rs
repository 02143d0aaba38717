//! Static type and shape inference: the driver over the graph, and the helpers ops share. Each
//! op's own rule is its `Op::infer`. Unknown ops (or unknowable shapes) leave outputs unknown;
//! declared types are never overwritten.

use crate::ir::graph::Graph;
use crate::ir::model::Model;
use crate::ir::node::{Node, ValueId};
use crate::ir::types::{Dim, TensorType};
use crate::ops::shape_value::{constant_ints, constant_tensor, int_elements};
use crate::ops::{resolve, OpRef};
use crate::tensor::DType;
use crate::{Error, Result};

/// What an op's inference may look at: the graph (input types, constant and statically known
/// input values), the node, and its domain's opset version.
pub struct InferCx<'a> {
    pub graph: &'a Graph,
    pub node: &'a Node,
    pub opset: i64,
}

impl InferCx<'_> {
    /// Input `i`'s type (unknown when the input is omitted).
    pub fn input(&self, i: usize) -> TensorType {
        self.node
            .input(i)
            .map(|v| self.graph.value(v).ty.clone())
            .unwrap_or_default()
    }

    /// Whether optional input `i` is given.
    pub fn has_input(&self, i: usize) -> bool {
        self.node.input(i).is_some()
    }

    /// Every input's shape, `None` when any is unknown or omitted.
    pub fn input_shapes(&self) -> Option<Vec<Vec<Dim>>> {
        self.node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| self.graph.value(v).ty.shape.clone()))
            .collect()
    }

    /// Input `i`'s integer contents when every element is statically known.
    pub fn ints(&self, i: usize) -> Option<Vec<i64>> {
        const_ints(self.graph, self.node.input(i))
    }

    /// Input `i`'s elements as dims (known, symbolic or unknown), for shape-valued inputs.
    pub fn elements(&self, i: usize) -> Option<Vec<Dim>> {
        int_elements(self.graph, self.node.input(i)?)
    }

    /// One type per output slot: `types` cut or padded (with unknowns) to fit.
    pub fn fit(&self, mut types: Vec<TensorType>) -> Vec<TensorType> {
        types.resize(self.node.outputs.len(), TensorType::default());
        types
    }
}

/// Output types of one node, as far as they can be known (unknown for ops the registry lacks).
pub fn infer_node(g: &Graph, node: &Node, opset: i64) -> Vec<TensorType> {
    match resolve(node, opset) {
        Ok(op) => {
            let cx = InferCx {
                graph: g,
                node,
                opset,
            };
            cx.fit(op.infer(&cx))
        }
        Err(_) => vec![TensorType::default(); node.outputs.len()],
    }
}

/// Fills in unknown types and shapes of node outputs, in topological order; then unifies the
/// symbols that tools name afresh on declared intermediate shapes (onnxruntime's `unk__N`, an
/// exporter's `s0`) with what inference proves them to be (see `unify_fresh_dims`).
pub fn infer_types(model: &mut Model) {
    let mut proved = fill_types(model);
    // A renaming can make the next proof (`unk__3` is proved `seq` only where an operand's
    // `unk__5` became `seq`), so unify until nothing more is renamed; each round renames at
    // least one symbol for good, and a few rounds settle the chains exporters leave.
    for _ in 0..8 {
        if proved.is_empty() || !unify_fresh_dims(model, proved) {
            break;
        }
        // Shapes inferred from the old names may now be decided: infer those again.
        clear_undecided(model);
        proved = fill_types(model);
    }
}

/// Drops every shape that holds an undecided-dim symbol (inference's own, never declared).
fn clear_undecided(model: &mut Model) {
    for i in 0..model.graph.value_count() {
        let ty = &mut model.graph.value_mut(ValueId(i as u32)).ty;
        if ty.shape.iter().flatten().any(Dim::is_undecided) {
            ty.shape = None;
        }
    }
}

/// One pass of inference in topological order, filling what is unknown; returns the declared
/// symbols that inference proved to be something else (declared, inferred).
fn fill_types(model: &mut Model) -> Vec<(Dim, Dim)> {
    let Ok(order) = model.graph.topo_order() else {
        return Vec::new();
    };
    // Declared dims (a symbol, or unknown) that inference proves to be a number or another
    // symbol, from each node output's declared shape against its op's inferred one.
    let mut proved: Vec<(Dim, Dim)> = Vec::new();
    for id in order {
        let opset = model.opset(&model.graph.node(id).domain).unwrap_or(0);
        let node = model.graph.node(id).clone();
        let inferred = infer_node(&model.graph, &node, opset);
        for (slot, ty) in node.outputs.iter().zip(inferred) {
            let Some(v) = slot else { continue };
            let name = model.graph.name(*v).to_string();
            let cur = &mut model.graph.value_mut(*v).ty;
            if cur.dtype.is_none() {
                cur.dtype = ty.dtype;
            }
            match (&mut cur.shape, ty.shape) {
                (None, shape) => cur.shape = shape.map(|dims| name_unknown_dims(&name, dims)),
                (Some(declared), Some(inferred)) if declared.len() == inferred.len() => {
                    for (d, i) in declared.iter_mut().zip(inferred) {
                        let proof = matches!(i, Dim::Known(_))
                            || matches!(&i, Dim::Sym(_) if !i.is_undecided());
                        if !proof || *d == i {
                            continue;
                        }
                        match d {
                            // An unknown declared dim is refined in place.
                            Dim::Unknown => *d = i,
                            Dim::Sym(_) if !d.is_undecided() => proved.push((d.clone(), i)),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }
    proved
}

/// Renames declared symbols that inference proved equal to something else, everywhere outside
/// the graph inputs. `proved` pairs a declared symbol with the dim inference computed at the same
/// place. A symbol is renamed only when every proof agrees, and never when a graph input declares
/// it: an input's symbols are the model's interface (`--dim batch=2`), so they are what others
/// are renamed to. Chains (`unk__2` proved `unk__1`, proved `batch`) resolve to their end.
/// Inference is never wrong (unknown stays unknown), so in a model that runs, a declared symbol
/// and the inferred dim at the same place are the same run-time size.
/// Returns whether anything was renamed.
fn unify_fresh_dims(model: &mut Model, proved: Vec<(Dim, Dim)>) -> bool {
    use std::collections::{HashMap, HashSet};
    let g = &model.graph;
    let interface: HashSet<&str> = g
        .inputs
        .iter()
        .filter_map(|&v| g.value(v).ty.shape.as_ref())
        .flatten()
        .filter_map(|d| match d {
            Dim::Sym(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let mut map: HashMap<String, Option<Dim>> = HashMap::new();
    for (from, to) in proved {
        let Dim::Sym(s) = from else { continue };
        if interface.contains(s.as_str()) {
            continue;
        }
        map.entry(s)
            .and_modify(|e| {
                if e.as_ref() != Some(&to) {
                    *e = None; // two different proofs: keep the name
                }
            })
            .or_insert(Some(to));
    }
    let resolve = |d: &Dim| -> Option<Dim> {
        let mut cur = d.clone();
        let mut changed = false;
        for _ in 0..=map.len() {
            match &cur {
                Dim::Sym(s) => match map.get(s) {
                    Some(Some(next)) if *next != cur => {
                        cur = next.clone();
                        changed = true;
                    }
                    _ => break,
                },
                _ => break,
            }
        }
        changed.then_some(cur)
    };
    let inputs: HashSet<ValueId> = model.graph.inputs.iter().copied().collect();
    let mut renamed = Vec::new();
    for i in 0..model.graph.value_count() {
        let v = ValueId(i as u32);
        if inputs.contains(&v) {
            continue;
        }
        if let Some(shape) = &model.graph.value(v).ty.shape {
            let new: Vec<Dim> = shape
                .iter()
                .map(|d| resolve(d).unwrap_or(d.clone()))
                .collect();
            if new != *shape {
                renamed.push((v, new));
            }
        }
    }
    let any = !renamed.is_empty();
    for (v, shape) in renamed {
        model.graph.value_mut(v).ty.shape = Some(shape);
    }
    any
}

/// Re-infers every shape that holds an undecided-dim symbol (`?value[axis]`), after rewrites or
/// `--fix-dim` made more known: such shapes are inference's own, never declared.
pub fn refresh_inferred_types(model: &mut Model) {
    clear_undecided(model);
    infer_types(model);
}

/// Gives each dim that inference could not decide a symbol of its own, `?value[axis]`: the
/// run-time size of that axis of that value. Values computed from it (elementwise ops, norms,
/// reshapes that copy the dim) then provably share it, as onnxruntime's symbolic shape
/// inference does with its `unk__N` names; two such symbols are never assumed equal.
fn name_unknown_dims(value: &str, dims: Vec<Dim>) -> Vec<Dim> {
    dims.into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            Dim::Unknown => Dim::undecided(value, i),
            d => d,
        })
        .collect()
}

/// Type errors `verify()` reports: same-type ops fed different element types, and node outputs
/// declared with an element type other than the one their op computes.
pub fn check_types(model: &Model) -> Result<()> {
    let g = &model.graph;
    for id in g.node_ids() {
        let node = g.node(id);
        let opset = model.opset(&node.domain).unwrap_or(0);
        let same_type = resolve(node, opset).is_ok_and(|op| op.same_type_inputs());
        if same_type {
            let types: Vec<(ValueId, DType)> = node
                .inputs
                .iter()
                .flatten()
                .filter_map(|&v| g.value(v).ty.dtype.map(|d| (v, d)))
                .collect();
            if let Some(&(v0, d0)) = types.first() {
                if let Some(&(v1, d1)) = types.iter().find(|(_, d)| *d != d0) {
                    return Err(Error::Verify(format!(
                        "{} node '{}': input '{}' is {d0} but input '{}' is {d1}",
                        node.op_type,
                        node.label(id),
                        g.name(v0),
                        g.name(v1)
                    )));
                }
            }
        }
        let inferred = infer_node(g, node, opset);
        for (slot, ty) in node.outputs.iter().zip(inferred) {
            let Some(v) = slot else { continue };
            if let (Some(declared), Some(computed)) = (g.value(*v).ty.dtype, ty.dtype) {
                if declared != computed {
                    return Err(Error::Verify(format!(
                        "{} node '{}': output '{}' is declared {declared} but the op computes {computed}",
                        node.op_type,
                        node.label(id),
                        g.name(*v)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Integer contents of an input whose every element is statically known: a constant, or a
/// shape computation `shape_value` can evaluate (e.g. from a Shape of a fully known shape).
pub fn const_ints(g: &Graph, v: Option<ValueId>) -> Option<Vec<i64>> {
    let v = v?;
    if let Some(c) = constant_ints(g, v) {
        return Some(c);
    }
    int_elements(g, v)?
        .into_iter()
        .map(|d| match d {
            Dim::Known(k) => Some(k),
            _ => None,
        })
        .collect()
}

/// The axes of an Unsqueeze/Squeeze/ReduceMean/ReduceSum node (attribute or input, as its
/// opset has them): absent axes are empty; `None` when the axes input is not statically known
/// or the node is none of these ops.
pub fn axes_of(g: &Graph, node: &Node, opset: i64) -> Option<Vec<i64>> {
    let op = resolve(node, opset).ok()?;
    let source = axes_source(&op)?;
    match source {
        Axes::Attribute(a) => Some(a.clone()),
        Axes::Input if node.input(1).is_none() => Some(vec![]),
        Axes::Input => const_ints(g, node.input(1)),
    }
}

fn axes_source<'a>(op: &'a OpRef) -> Option<&'a Axes> {
    use crate::ops::{reduce, shape_ops};
    if let Some(o) = op.get::<shape_ops::Unsqueeze>() {
        return Some(&o.axes);
    }
    if let Some(o) = op.get::<shape_ops::Squeeze>() {
        return Some(&o.axes);
    }
    op.get::<reduce::ReduceMean>()
        .map(|o| &o.0.axes)
        .or_else(|| op.get::<reduce::ReduceSum>().map(|o| &o.0.axes))
}

/// Where an op's axes come from at its opset: the `axes` attribute (empty when absent) or
/// input 1 (from opset 13; ReduceMean from 18).
#[derive(Clone, Debug, PartialEq)]
pub enum Axes {
    Attribute(Vec<i64>),
    Input,
}

/// numpy broadcasting over static dims; None when it cannot be decided.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            &a[i + a.len() - n]
        } else {
            &Dim::Known(1)
        };
        let db = if i + b.len() >= n {
            &b[i + b.len() - n]
        } else {
            &Dim::Known(1)
        };
        out.push(match (da, db) {
            (Dim::Known(1), d) | (d, Dim::Known(1)) => d.clone(),
            (x, y) if x == y => x.clone(),
            // s against min(s, d) (d ≥ 1): equal, or one is 1 and then so is min(s, d), or d is
            // 1 and s broadcasts over it; s in every case where the op runs.
            (s, m) | (m, s) if m.is_min_of(s) => s.clone(),
            (Dim::Known(x), Dim::Known(y)) if x != y => return None,
            (Dim::Known(x), _) | (_, Dim::Known(x)) => Dim::Known(*x),
            _ => Dim::Unknown,
        });
    }
    Some(out)
}

/// The broadcast of the shapes of inputs `0..n` (`None` when one is unknown or they clash).
pub fn broadcast_inputs(cx: &InferCx, n: usize) -> Option<Vec<Dim>> {
    let mut out = cx.input(0).shape?;
    for i in 1..n {
        out = broadcast_dims(&out, &cx.input(i).shape?)?;
    }
    Some(out)
}

pub fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Largest rank inferred from the declared length of a shape input (Expand, ConstantOfShape):
/// declared dims are unchecked, and a bigger rank is implausible.
pub const MAX_SHAPE_DATA_RANK: i64 = 64;

/// Product of dims: known numbers multiply; a single symbolic dim among 1s passes through.
pub fn dim_product(dims: &[Dim]) -> Dim {
    let mut known = 1i64;
    let mut other = Vec::new();
    for d in dims {
        match d {
            Dim::Known(v) => match known.checked_mul(*v) {
                Some(p) => known = p,
                None => return Dim::Unknown,
            },
            d => other.push(d),
        }
    }
    match other.as_slice() {
        [] => Dim::Known(known),
        [one] if known == 1 => (*one).clone(),
        _ if known == 0 => Dim::Known(0),
        _ => Dim::Unknown,
    }
}

/// The one value of a constant scalar input (any numeric type) as f64.
pub fn const_scalar_f64(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = constant_tensor(g, v?)?;
    (t.len() == 1 && t.dtype() != DType::BOOL).then(|| t.to_f64_vec()[0])
}
