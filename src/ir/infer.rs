//! Static type and shape inference for the ops the reference backend supports. Unknown ops (or
//! unknowable shapes) leave outputs unknown; declared types are never overwritten.

use crate::ir::graph::Graph;
use crate::ir::model::{Model, FUSELAB_DOMAIN, MS_DOMAIN};
use crate::ir::node::{Node, ValueId};
use crate::ir::shape_value::{constant_ints, constant_tensor, int_elements, reshape_dims};
use crate::ir::types::{Dim, TensorType};
use crate::tensor::DType;
use crate::{Error, Result};

/// Ops whose inputs must all share one element type (the ONNX type constraint `T`).
const SAME_TYPE_OPS: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "MatMul",
    "Gemm",
    "Concat",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
];

/// Fills in unknown types and shapes of node outputs, in topological order.
pub fn infer_types(model: &mut Model) {
    let Ok(order) = model.graph.topo_order() else {
        return;
    };
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
            if cur.shape.is_none() {
                cur.shape = ty.shape.map(|dims| name_unknown_dims(&name, dims));
            }
        }
    }
}

/// Re-infers every shape that holds an undecided-dim symbol (`?value[axis]`), after rewrites or
/// `--fix-dim` made more known: such shapes are inference's own, never declared.
pub fn refresh_inferred_types(model: &mut Model) {
    for i in 0..model.graph.value_count() {
        let ty = &mut model.graph.value_mut(ValueId(i as u32)).ty;
        if ty.shape.iter().flatten().any(Dim::is_undecided) {
            ty.shape = None;
        }
    }
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
        if node.is_onnx_domain() && SAME_TYPE_OPS.contains(&node.op_type.as_str()) {
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
        let opset = model.opset(&node.domain).unwrap_or(0);
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
fn const_ints(g: &Graph, v: Option<ValueId>) -> Option<Vec<i64>> {
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

/// True when `op` (Unsqueeze, Squeeze, ReduceMean, ReduceSum) takes its axes as an input at
/// `opset`: from 13, ReduceMean from 18; before that they are the `axes` attribute.
pub fn axes_are_input(op: &str, opset: i64) -> bool {
    match op {
        "ReduceMean" => opset >= 18,
        _ => opset >= 13,
    }
}

/// The axes of an Unsqueeze/Squeeze/ReduceMean/ReduceSum node at `opset`: absent axes are
/// empty; `None` when the axes input is not statically known.
pub fn axes_of(g: &Graph, node: &Node, opset: i64) -> Option<Vec<i64>> {
    if axes_are_input(&node.op_type, opset) {
        match node.input(1) {
            None => Some(vec![]),
            Some(_) => const_ints(g, node.input(1)),
        }
    } else {
        Some(
            node.attr_ints("axes")
                .map(|a| a.to_vec())
                .unwrap_or_default(),
        )
    }
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
            (Dim::Known(x), Dim::Known(y)) if x != y => return None,
            (Dim::Known(x), _) | (_, Dim::Known(x)) => Dim::Known(*x),
            _ => Dim::Unknown,
        });
    }
    Some(out)
}

fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Output types of one node, as far as they can be known.
pub fn infer_node(g: &Graph, node: &Node, opset: i64) -> Vec<TensorType> {
    let ty = |i: usize| -> TensorType {
        node.input(i)
            .map(|v| g.value(v).ty.clone())
            .unwrap_or_default()
    };
    let unknown = vec![TensorType::default(); node.outputs.len()];
    if node.domain == FUSELAB_DOMAIN && node.op_type == "AddEyeLike" {
        return vec![ty(0)];
    }
    if node.domain == FUSELAB_DOMAIN && node.op_type == "FusedElementwise" {
        // float32, the broadcast of every input's shape.
        let mut shape = Some(Vec::new());
        for v in node.inputs.iter() {
            let s = v.and_then(|v| g.value(v).ty.shape.clone());
            shape = match (shape, s) {
                (Some(a), Some(b)) => broadcast_dims(&a, &b),
                _ => None,
            };
        }
        return vec![TensorType {
            dtype: Some(DType::F32),
            shape,
        }];
    }
    if node.domain == MS_DOMAIN {
        return infer_ms_node(g, node);
    }
    if !node.is_onnx_domain() {
        return unknown;
    }
    let one = |t: TensorType| vec![t];
    match node.op_type.as_str() {
        "Identity" | "Neg" | "Abs" | "Exp" | "Log" | "Relu" | "Sigmoid" | "Tanh" | "Erf"
        | "Sqrt" | "Softmax" => one(ty(0)),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
            let (a, b) = (ty(0), ty(1));
            let shape = match (&a.shape, &b.shape) {
                (Some(x), Some(y)) => broadcast_dims(x, y),
                _ => None,
            };
            one(TensorType {
                dtype: a.dtype,
                shape,
            })
        }
        "EyeLike" => {
            let x = ty(0);
            let dtype = node.attr_int("dtype").map(|d| DType(d as i32)).or(x.dtype);
            one(TensorType {
                dtype,
                shape: x.shape,
            })
        }
        "Cast" => one(TensorType {
            dtype: node.attr_int("to").map(|d| DType(d as i32)),
            shape: ty(0).shape,
        }),
        "Shape" => {
            let rank = ty(0).rank().map(|r| r as i64);
            let len = rank.map(|r| {
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r);
                // start/end exist from opset 15.
                let attr = |n: &str, d: i64| {
                    if opset >= 15 {
                        node.attr_int(n).unwrap_or(d)
                    } else {
                        d
                    }
                };
                let start = clamp(attr("start", 0));
                let end = clamp(attr("end", r));
                (end - start).max(0)
            });
            one(TensorType {
                dtype: Some(DType::I64),
                shape: len.map(|l| vec![Dim::Known(l)]),
            })
        }
        "Constant" => {
            let t = node
                .attr_tensor("value")
                .map(|t| (DType(t.data_type), t.dims.clone()));
            let (dtype, shape) = match t {
                Some((d, s)) => (Some(d), Some(s.into_iter().map(Dim::Known).collect())),
                None if node.attr("value_float").is_some() => (Some(DType::F32), Some(vec![])),
                None if node.attr("value_int").is_some() => (Some(DType::I64), Some(vec![])),
                None => match (
                    node.attr_floats("value_floats"),
                    node.attr_ints("value_ints"),
                ) {
                    (Some(f), _) => (Some(DType::F32), Some(vec![Dim::Known(f.len() as i64)])),
                    (_, Some(i)) => (Some(DType::I64), Some(vec![Dim::Known(i.len() as i64)])),
                    _ => (None, None),
                },
            };
            one(TensorType { dtype, shape })
        }
        "Transpose" => {
            let x = ty(0);
            let shape = x.shape.as_ref().and_then(|s| {
                let perm: Vec<usize> = match node.attr_ints("perm") {
                    Some(p) => p
                        .iter()
                        .map(|&a| norm_axis(a, s.len()))
                        .collect::<Option<_>>()?,
                    None => (0..s.len()).rev().collect(),
                };
                (perm.len() == s.len()).then(|| perm.iter().map(|&p| s[p].clone()).collect())
            });
            one(TensorType {
                dtype: x.dtype,
                shape,
            })
        }
        "MatMul" => {
            let (a, b) = (ty(0), ty(1));
            let shape = match (&a.shape, &b.shape) {
                (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
                    broadcast_dims(&x[..x.len() - 2], &y[..y.len() - 2]).map(|mut batch| {
                        batch.push(x[x.len() - 2].clone());
                        batch.push(y[y.len() - 1].clone());
                        batch
                    })
                }
                _ => None,
            };
            one(TensorType {
                dtype: a.dtype,
                shape,
            })
        }
        "Gemm" => {
            let (a, b) = (ty(0), ty(1));
            let ta = node.attr_int("transA").unwrap_or(0) != 0;
            let tb = node.attr_int("transB").unwrap_or(0) != 0;
            let shape = match (&a.shape, &b.shape) {
                (Some(x), Some(y)) if x.len() == 2 && y.len() == 2 => Some(vec![
                    x[if ta { 1 } else { 0 }].clone(),
                    y[if tb { 0 } else { 1 }].clone(),
                ]),
                _ => None,
            };
            one(TensorType {
                dtype: a.dtype,
                shape,
            })
        }
        "Reshape" => {
            let x = ty(0);
            let allowzero = opset >= 14 && node.attr_int("allowzero").unwrap_or(0) != 0;
            let shape = node
                .input(1)
                .and_then(|t| int_elements(g, t))
                .map(|target| reshape_dims(x.shape.as_deref(), &target, allowzero));
            one(TensorType {
                dtype: x.dtype,
                shape,
            })
        }
        "Unsqueeze" | "Squeeze" | "ReduceMean" | "ReduceSum" => {
            let x = ty(0);
            let axes_from_input = axes_are_input(&node.op_type, opset);
            let axes = axes_of(g, node, opset);
            // The Squeeze kernel treats an explicitly empty `axes` input as "squeeze nothing"
            // (as the ONNX reference does); only absent axes squeeze every size-1 dim.
            let explicit_empty_squeeze = node.op_type == "Squeeze"
                && axes_from_input
                && node.input(1).is_some()
                && axes.as_ref().is_some_and(|a| a.is_empty());
            let shape = match (x.shape.as_ref(), axes) {
                (Some(s), _) if explicit_empty_squeeze => Some(s.clone()),
                (Some(s), Some(axes)) => reduce_like_shape(node, s, &axes),
                _ => None,
            };
            one(TensorType {
                dtype: x.dtype,
                shape,
            })
        }
        "Concat" => {
            let first = ty(0);
            let shape = (|| {
                let axis = node.attr_int("axis")?;
                let shapes: Vec<Vec<Dim>> = node
                    .inputs
                    .iter()
                    .map(|v| v.and_then(|v| g.value(v).ty.shape.clone()))
                    .collect::<Option<_>>()?;
                let rank = shapes.first()?.len();
                let ax = norm_axis(axis, rank)?;
                let mut out = shapes[0].clone();
                let mut total = Some(0i64);
                for s in &shapes {
                    total = match (total, s.get(ax)) {
                        (Some(t), Some(Dim::Known(d))) => t.checked_add(*d),
                        _ => None,
                    };
                }
                out[ax] = total.map(Dim::Known).unwrap_or(Dim::Unknown);
                Some(out)
            })();
            one(TensorType {
                dtype: first.dtype,
                shape,
            })
        }
        "LayerNormalization" => layer_norm_types(node, ty(0)),
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            let shape = match (&ty(0).shape, &ty(1).shape) {
                (Some(x), Some(y)) => broadcast_dims(x, y),
                _ => None,
            };
            one(TensorType {
                dtype: Some(DType::BOOL),
                shape,
            })
        }
        "Not" => one(TensorType {
            dtype: Some(DType::BOOL),
            shape: ty(0).shape,
        }),
        "Where" => {
            let (c, x, y) = (ty(0), ty(1), ty(2));
            let shape = match (&c.shape, &x.shape, &y.shape) {
                (Some(c), Some(x), Some(y)) => {
                    broadcast_dims(c, x).and_then(|cx| broadcast_dims(&cx, y))
                }
                _ => None,
            };
            one(TensorType {
                dtype: x.dtype.or(y.dtype),
                shape,
            })
        }
        "Trilu" => one(ty(0)),
        "Gather" => {
            let (data, idx) = (ty(0), ty(1));
            let shape = match (&data.shape, &idx.shape) {
                (Some(d), Some(i)) => norm_axis(node.attr_int("axis").unwrap_or(0), d.len())
                    .map(|ax| [&d[..ax], &i[..], &d[ax + 1..]].concat()),
                _ => None,
            };
            one(TensorType {
                dtype: data.dtype,
                shape,
            })
        }
        "Flatten" => {
            let x = ty(0);
            let shape = x.shape.as_ref().and_then(|s| {
                let r = s.len() as i64;
                let axis = node.attr_int("axis").unwrap_or(1);
                let axis = (-r..=r)
                    .contains(&axis)
                    .then(|| if axis < 0 { axis + r } else { axis })?
                    as usize;
                Some(vec![dim_product(&s[..axis]), dim_product(&s[axis..])])
            });
            one(TensorType {
                dtype: x.dtype,
                shape,
            })
        }
        "Expand" => {
            let x = ty(0);
            let target = node.input(1).and_then(|t| int_elements(g, t));
            let shape = match (&x.shape, target) {
                (Some(s), Some(t)) if t.iter().all(|d| !matches!(d, Dim::Known(k) if *k < 0)) => {
                    broadcast_dims(s, &t)
                }
                // Only the rank is known: the larger of the two.
                (Some(s), None) => match ty(1).static_shape().as_deref() {
                    Some(&[k]) if (0..=MAX_SHAPE_DATA_RANK).contains(&k) => {
                        Some(vec![Dim::Unknown; s.len().max(k as usize)])
                    }
                    _ => None,
                },
                _ => None,
            };
            one(TensorType {
                dtype: x.dtype,
                shape,
            })
        }
        "ConstantOfShape" => {
            let dtype = match node.attr_tensor("value") {
                Some(t) => DType(t.data_type),
                None => DType::F32,
            };
            let shape = match node.input(0).and_then(|t| int_elements(g, t)) {
                Some(d) if d.iter().all(|v| !matches!(v, Dim::Known(k) if *k < 0)) => Some(d),
                Some(_) => None,
                None => match ty(0).static_shape().as_deref() {
                    Some(&[k]) if (0..=MAX_SHAPE_DATA_RANK).contains(&k) => {
                        Some(vec![Dim::Unknown; k as usize])
                    }
                    _ => None,
                },
            };
            one(TensorType {
                dtype: Some(dtype),
                shape,
            })
        }
        "Range" => {
            // Range(0, n, 1) has n elements, n symbolic or not.
            let elem = |i: usize| node.input(i).and_then(|v| int_elements(g, v));
            let counted = match (elem(0), elem(1), elem(2)) {
                (Some(s), Some(l), Some(d)) if s == [Dim::Known(0)] && d == [Dim::Known(1)] => {
                    l.first().filter(|_| l.len() == 1).cloned()
                }
                _ => None,
            };
            let len = [0, 1, 2]
                .iter()
                .map(|&i| const_scalar_f64(g, node.input(i)))
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| range_len(v[0], v[1], v[2]));
            let n = match (len, counted) {
                (Some(k), _) => Dim::Known(k),
                (None, Some(d @ Dim::Sym(_))) => d,
                _ => Dim::Unknown,
            };
            one(TensorType {
                dtype: ty(0).dtype,
                shape: Some(vec![n]),
            })
        }
        "Slice" => {
            let x = ty(0);
            one(TensorType {
                dtype: x.dtype,
                shape: x
                    .shape
                    .as_ref()
                    .and_then(|s| slice_shape(g, node, opset, s)),
            })
        }
        "Split" => {
            let x = ty(0);
            split_shapes(g, node, opset, &x)
        }
        _ => unknown,
    }
}

/// Y: X's type and shape; Mean and InvStdDev: the stash type (float32 unless `stash_type` is 11),
/// X's shape with dims [axis, rank) set to 1. Shared by ai.onnx and com.microsoft.
fn layer_norm_types(node: &Node, x: TensorType) -> Vec<TensorType> {
    let stash = match node.attr_int("stash_type") {
        None | Some(1) => Some(DType::F32),
        Some(11) => Some(DType::F64),
        Some(_) => None,
    };
    let axis = node.attr_int("axis").unwrap_or(-1);
    let shape = x.shape.as_ref().and_then(|s| {
        let a = norm_axis(axis, s.len())?;
        Some(
            s.iter()
                .enumerate()
                .map(|(i, d)| if i < a { d.clone() } else { Dim::Known(1) })
                .collect(),
        )
    });
    let stats = TensorType {
        dtype: stash,
        shape,
    };
    fit(node, vec![x, stats.clone(), stats])
}

/// Output types of the com.microsoft ops the reference backend runs (onnxruntime's
/// docs/ContribOperators.md).
fn infer_ms_node(g: &Graph, node: &Node) -> Vec<TensorType> {
    let x = node
        .input(0)
        .map(|v| g.value(v).ty.clone())
        .unwrap_or_default();
    match node.op_type.as_str() {
        "Gelu" | "FastGelu" | "BiasGelu" => fit(node, vec![x]),
        "SkipLayerNormalization" => {
            // mean and inv_std_var: float32 (type U), input's shape with the last dim 1.
            let shape = x.shape.as_ref().filter(|s| !s.is_empty()).map(|s| {
                let mut s = s.clone();
                if let Some(last) = s.last_mut() {
                    *last = Dim::Known(1);
                }
                s
            });
            let stats = TensorType {
                dtype: Some(DType::F32),
                shape,
            };
            fit(node, vec![x.clone(), stats.clone(), stats, x])
        }
        "Attention" => {
            // [batch, seq, hidden] with hidden a third of the packed weights' width.
            let w = node.input(1).and_then(|v| g.value(v).ty.shape.clone());
            let shape = match (x.shape.as_deref(), w.as_deref()) {
                (Some([b, s, _]), Some([_, Dim::Known(w3)])) if w3 % 3 == 0 => {
                    Some(vec![b.clone(), s.clone(), Dim::Known(w3 / 3)])
                }
                _ => None,
            };
            fit(
                node,
                vec![TensorType {
                    dtype: x.dtype,
                    shape,
                }],
            )
        }
        "FusedGemm" => {
            // Gemm's output type: the activation keeps it.
            let mut gemm = node.clone();
            gemm.op_type = "Gemm".into();
            gemm.domain = String::new();
            infer_node(g, &gemm, 13)
        }
        "EmbedLayerNormalization" => fit(node, embed_layer_norm_types(g, node, &x)),
        _ => vec![TensorType::default(); node.outputs.len()],
    }
}

/// com.microsoft EmbedLayerNormalization: output and embedding_sum are [B, S, H] of the word
/// table's type (H its dim 1), mask_index int32 [B]; `ids` is input_ids' type, [B, S].
fn embed_layer_norm_types(g: &Graph, node: &Node, ids: &TensorType) -> Vec<TensorType> {
    let table = node.input(2).map(|v| &g.value(v).ty);
    let ids_dims = ids.shape.as_ref().filter(|s| s.len() == 2);
    let hidden = table
        .and_then(|t| t.shape.as_ref())
        .filter(|s| s.len() == 2)
        .map(|s| s[1].clone());
    let out = TensorType {
        dtype: table.and_then(|t| t.dtype),
        shape: ids_dims.map(|s| vec![s[0].clone(), s[1].clone(), hidden.unwrap_or(Dim::Unknown)]),
    };
    let mask_index = TensorType {
        dtype: Some(DType::I32),
        shape: ids_dims.map(|s| vec![s[0].clone()]),
    };
    vec![out.clone(), mask_index, out]
}

/// One type per output slot of `node`: `types` cut or padded (with unknowns) to fit.
fn fit(node: &Node, mut types: Vec<TensorType>) -> Vec<TensorType> {
    types.resize(node.outputs.len(), TensorType::default());
    types
}

fn reduce_like_shape(node: &Node, s: &[Dim], axes: &[i64]) -> Option<Vec<Dim>> {
    match node.op_type.as_str() {
        "Unsqueeze" => {
            let rank = s.len() + axes.len();
            let axes: Vec<usize> = axes
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<Option<_>>()?;
            let mut it = s.iter();
            (0..rank)
                .map(|i| {
                    if axes.contains(&i) {
                        Some(Dim::Known(1))
                    } else {
                        it.next().cloned()
                    }
                })
                .collect()
        }
        "Squeeze" => {
            if axes.is_empty() {
                // Without axes every size-1 dim goes: only decidable when all dims are known.
                return s
                    .iter()
                    .filter(|d| **d != Dim::Known(1))
                    .map(|d| matches!(d, Dim::Known(_)).then(|| d.clone()))
                    .collect();
            }
            let axes: Vec<usize> = axes
                .iter()
                .map(|&a| norm_axis(a, s.len()))
                .collect::<Option<_>>()?;
            Some(
                s.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, d)| d.clone())
                    .collect(),
            )
        }
        _ => {
            let keep = node.attr_int("keepdims").unwrap_or(1) != 0;
            let noop = node.attr_int("noop_with_empty_axes").unwrap_or(0) != 0;
            if axes.is_empty() && noop {
                return Some(s.to_vec());
            }
            let axes: Vec<usize> = if axes.is_empty() {
                (0..s.len()).collect()
            } else {
                axes.iter()
                    .map(|&a| norm_axis(a, s.len()))
                    .collect::<Option<_>>()?
            };
            Some(
                s.iter()
                    .enumerate()
                    .filter_map(|(i, d)| match (axes.contains(&i), keep) {
                        (true, true) => Some(Dim::Known(1)),
                        (true, false) => None,
                        _ => Some(d.clone()),
                    })
                    .collect(),
            )
        }
    }
}

/// Largest rank inferred from the declared length of a shape input (Expand, ConstantOfShape):
/// declared dims are unchecked, and a bigger rank is implausible.
const MAX_SHAPE_DATA_RANK: i64 = 64;

/// Product of dims: known numbers multiply; a single symbolic dim among 1s passes through.
fn dim_product(dims: &[Dim]) -> Dim {
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
fn const_scalar_f64(g: &Graph, v: Option<ValueId>) -> Option<f64> {
    let t = constant_tensor(g, v?)?;
    (t.len() == 1 && t.dtype() != DType::BOOL).then(|| t.to_f64_vec()[0])
}

/// Range's length, max(ceil((limit - start) / delta), 0), when it is a sane number.
fn range_len(start: f64, limit: f64, delta: f64) -> Option<i64> {
    let n = ((limit - start) / delta).ceil();
    (delta != 0.0 && n.is_finite() && n < i64::MAX as f64).then(|| n.max(0.0) as i64)
}

/// Slice's output dims: unsliced axes pass through, sliced ones are computed from constant
/// starts/ends/steps where the dim is known (or the slice is plainly the whole axis).
fn slice_shape(g: &Graph, node: &Node, opset: i64, s: &[Dim]) -> Option<Vec<Dim>> {
    let rank = s.len();
    let (starts, ends, axes, steps) = if opset >= 10 {
        let opt = |i: usize| match node.input(i) {
            None => Some(None),
            Some(_) => const_ints(g, node.input(i)).map(Some),
        };
        // Steps present but not constant: no sliced length is known.
        let steps = opt(4).unwrap_or_default();
        let starts = if node.input(4).is_some() && steps.is_none() {
            None
        } else {
            const_ints(g, node.input(1))
        };
        (starts, const_ints(g, node.input(2)), opt(3), steps)
    } else {
        let a = |n: &str| node.attr_ints(n).map(<[i64]>::to_vec);
        (a("starts"), a("ends"), Some(a("axes")), None)
    };
    // Without constant axes any axis may change: only the rank is known.
    let Some(axes) = axes else {
        return Some(vec![Dim::Unknown; rank]);
    };
    let (Some(starts), Some(ends)) = (starts, ends) else {
        let Some(axes) = axes else {
            return Some(vec![Dim::Unknown; rank]);
        };
        let mut out = s.to_vec();
        for a in axes {
            out[norm_axis(a, rank)?] = Dim::Unknown;
        }
        return Some(out);
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return None;
    }
    let mut out = s.to_vec();
    for i in 0..k {
        let ax = norm_axis(axes[i], rank)?;
        let (st, en, step) = (starts[i], ends[i], steps[i]);
        if step == 0 {
            return None;
        }
        out[ax] = match &s[ax] {
            Dim::Known(d) => Dim::Known(slice_len(st, en, step, *d)),
            // [0, INT64_MAX) with step 1 is the whole axis, whatever its size.
            d if st == 0 && step == 1 && en >= i32::MAX as i64 => d.clone(),
            _ => Dim::Unknown,
        };
    }
    Some(out)
}

/// Elements a Slice of a known axis keeps (same clamping as the kernel).
fn slice_len(start: i64, end: i64, step: i64, d: i64) -> i64 {
    if d <= 0 {
        return 0;
    }
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    if step > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        if e <= s {
            0
        } else {
            (e - s - 1) / step + 1
        }
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        if s <= e {
            0
        } else {
            ((s - e - 1) as u64 / step.unsigned_abs()) as i64 + 1
        }
    }
}

/// Split's output types: the split axis takes the part sizes where they are known.
fn split_shapes(g: &Graph, node: &Node, opset: i64, x: &TensorType) -> Vec<TensorType> {
    let n = node.outputs.len();
    let parts = |sizes: Option<Vec<Dim>>| -> Vec<TensorType> {
        let shape_of = |i: usize| {
            let s = x.shape.as_ref()?;
            let ax = norm_axis(node.attr_int("axis").unwrap_or(0), s.len())?;
            let mut out = s.clone();
            out[ax] = sizes
                .as_ref()
                .and_then(|v| v.get(i).cloned())
                .unwrap_or(Dim::Unknown);
            Some(out)
        };
        (0..n)
            .map(|i| TensorType {
                dtype: x.dtype,
                shape: shape_of(i),
            })
            .collect()
    };
    let given = if opset >= 13 {
        node.input(1).and_then(|_| const_ints(g, node.input(1)))
    } else {
        node.attr_ints("split").map(<[i64]>::to_vec)
    };
    if let Some(v) = given {
        return parts((v.len() == n).then(|| v.into_iter().map(Dim::Known).collect()));
    }
    if opset >= 13 && node.input(1).is_some() {
        return parts(None);
    }
    let dim = x.shape.as_ref().and_then(|s| {
        let ax = norm_axis(node.attr_int("axis").unwrap_or(0), s.len())?;
        match s[ax] {
            Dim::Known(d) => Some(d),
            _ => None,
        }
    });
    let k = if opset >= 18 {
        node.attr_int("num_outputs").unwrap_or(n as i64)
    } else {
        n as i64
    };
    let sizes = dim
        .filter(|&d| d >= 0 && k >= 1 && k as usize == n)
        .and_then(|d| {
            let round_up = opset >= 18 && d % k != 0;
            let chunk = d / k + i64::from(round_up);
            let last = d - chunk.checked_mul(k - 1)?;
            let even = opset >= 18 || d % k == 0;
            (even && last >= 0).then(|| {
                let mut v = vec![Dim::Known(chunk); n - 1];
                v.push(Dim::Known(last));
                v
            })
        });
    parts(sizes)
}
