//! Shape-subgraph simplification with dynamic dims, from `ir::shape_value`'s knowledge of what
//! small integer tensors hold:
//!
//! - `shape_fold`: a node whose integer output is fully known (e.g. `Gather(Shape(x), 2)` where
//!   x is `[batch, seq, 64]`, or every shape once `--fix-dim` has fixed the dims) becomes an
//!   initializer; the chain that computed it dies.
//! - `reshape_target`: `Reshape(x, t)` whose target is known symbolically gets a constant target:
//!   an element equal to x's dim at the same position becomes 0 (copy, when `allowzero` is 0)
//!   and a known number stays; anything else leaves the Reshape alone. GPT-2's
//!   `Reshape(h, Concat(batch, seq, 4, 16))` turns into `Reshape(h, [0, 0, 4, 16])`.
//! - `reshape_noop`: a Reshape whose output shape provably equals its input's is removed.

use crate::ir::types::Dim;
use crate::ir::{Model, Node, NodeId};
use crate::onnx::tensor::from_tensor;
use crate::ops::shape_value::int_elements;
use crate::ops::{self, shape_ops::Reshape};
use crate::passes::matchers::fresh_node_name;
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::{DType, Tensor};

pub struct ShapeFold;

impl Rule for ShapeFold {
    fn name(&self) -> &'static str {
        "shape_fold"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::Any
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        if node.outputs.len() != 1 || !node.implicit_inputs.is_empty() || node.is("Constant") {
            return Proposal::NoMatch;
        }
        let Some(v) = node.output(0) else {
            return Proposal::NoMatch;
        };
        let ty = &g.value(v).ty;
        let (Some(dtype), Some(rank)) = (ty.dtype, ty.rank()) else {
            return Proposal::NoMatch;
        };
        if rank > 1 || !matches!(dtype, DType::I64 | DType::I32) || g.constant(v).is_some() {
            return Proposal::NoMatch;
        }
        let Some(elems) = int_elements(g, v) else {
            return Proposal::NoMatch;
        };
        let Some(vals) = elems
            .iter()
            .map(|d| match d {
                Dim::Known(k) => Some(*k),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()
        else {
            return Proposal::NoMatch;
        };
        // A declared type that disagrees with the computed elements: leave it to verify.
        let declared_len = ty.static_shape().and_then(|s| s.first().copied());
        if (rank == 0 && vals.len() != 1)
            || (rank == 1 && declared_len.is_some_and(|n| n != vals.len() as i64))
        {
            return Proposal::NoMatch;
        }
        let shape: Vec<usize> = if rank == 0 { vec![] } else { vec![vals.len()] };
        let t = match dtype {
            DType::I32 => {
                let v32: Option<Vec<i32>> = vals.iter().map(|&x| i32::try_from(x).ok()).collect();
                let Some(v32) = v32 else {
                    return Proposal::NoMatch;
                };
                Tensor::I32(ndarray::ArrayD::from_shape_vec(shape, v32).expect("len"))
            }
            _ => Tensor::I64(ndarray::ArrayD::from_shape_vec(shape, vals).expect("len")),
        };
        Proposal::Rewrite(Patch {
            remove: vec![id],
            initializers: vec![(v, from_tensor(g.name(v), &t))],
            ..Default::default()
        })
    }
}

pub struct ReshapeTarget;

impl Rule for ReshapeTarget {
    fn name(&self) -> &'static str {
        "reshape_target"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Reshape"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        if !node.is("Reshape") {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(t)) = (node.input(0), node.input(1)) else {
            return Proposal::NoMatch;
        };
        if g.constant(t).is_some() {
            return Proposal::NoMatch;
        }
        let Some(target) = int_elements(g, t) else {
            return Proposal::NoMatch;
        };
        let Some(reshape) = ops::attrs_of::<Reshape>(model, node) else {
            return Proposal::NoMatch;
        };
        let allowzero = reshape.allowzero;
        let in_dims = g.value(x).ty.shape.clone().unwrap_or_default();
        let mut out = Vec::with_capacity(target.len());
        for (i, d) in target.iter().enumerate() {
            let same = in_dims.get(i).is_some_and(|s| s == d);
            out.push(match d {
                Dim::Known(k) => *k,
                Dim::Sym(_) if same && !allowzero => 0,
                // Solving it as -1 instead would fail where a dim is 0 (-1 is then ambiguous).
                _ => {
                    return Proposal::Reject(format!(
                        "target element {i} ({d}) is neither known nor the input's dim {i}"
                    ))
                }
            });
        }
        let mut patch = Patch {
            remove: vec![id],
            ..Default::default()
        };
        let name = g.fresh_name(&format!("{}_shape", node.label(id)));
        let tensor =
            Tensor::I64(ndarray::ArrayD::from_shape_vec(vec![out.len()], out).expect("len"));
        let c = patch.new_initializer(&name, from_tensor(&name, &tensor));
        let mut new = NewNode::from(node.clone());
        new.name = fresh_node_name(g, &node.label(id));
        new.inputs[1] = Some(c);
        patch.add.push(new);
        Proposal::Rewrite(patch)
    }
}

pub struct ReshapeNoop;

impl Rule for ReshapeNoop {
    fn name(&self) -> &'static str {
        "reshape_noop"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Reshape", "Squeeze", "Unsqueeze", "Flatten"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node: &Node = g.node(id);
        if !(node.is("Reshape") || node.is("Squeeze") || node.is("Unsqueeze") || node.is("Flatten"))
        {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(y)) = (node.input(0), node.output(0)) else {
            return Proposal::NoMatch;
        };
        let (tx, ty) = (&g.value(x).ty, &g.value(y).ty);
        if !tx.same_shape_as(ty) || tx.dtype != ty.dtype {
            return Proposal::NoMatch;
        }
        if g.is_graph_output(y) {
            return Proposal::Reject(format!("'{}' is a graph output", g.name(y)));
        }
        Proposal::Rewrite(Patch {
            remove: vec![id],
            redirect: vec![(y, x)],
            ..Default::default()
        })
    }
}
