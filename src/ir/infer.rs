//! Static type and shape inference for the ops the reference backend supports. Unknown ops (or
//! unknowable shapes) leave outputs unknown; declared types are never overwritten.

use crate::ir::graph::Graph;
use crate::ir::model::{Model, FUSELAB_DOMAIN, MS_DOMAIN};
use crate::ir::node::{Node, ValueId};
use crate::ir::shape_value::{constant_ints, int_elements, reshape_dims};
use crate::ir::types::{Dim, TensorType};
use crate::tensor::DType;
use crate::{Error, Result};

/// Ops whose inputs must all share one element type (the ONNX type constraint `T`).
const SAME_TYPE_OPS: &[&str] = &["Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Concat"];

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
            let cur = &mut model.graph.value_mut(*v).ty;
            if cur.dtype.is_none() {
                cur.dtype = ty.dtype;
            }
            if cur.shape.is_none() {
                cur.shape = ty.shape;
            }
        }
    }
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

/// Integer contents of a constant input (initializer or Constant node).
fn const_ints(g: &Graph, v: Option<ValueId>) -> Option<Vec<i64>> {
    constant_ints(g, v?)
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
            let axes_from_input = match node.op_type.as_str() {
                "ReduceMean" => opset >= 18,
                _ => opset >= 13,
            };
            let axes = if axes_from_input {
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
            };
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
        "LayerNormalization" => layer_norm_types(node, x),
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
        _ => vec![TensorType::default(); node.outputs.len()],
    }
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
