//! Nodes that pass their input through unchanged, removed: Identity, a Cast to the type its
//! input already has (GPT-2's exporter casts the attention probabilities float32 → float32), a
//! Concat of one input, a Slice that takes the whole of every axis it slices (Phi-3's export
//! splits a head into its rotary part and an empty "pass" part when the rotary dim is the whole
//! head), and an Add of a computed zero that does not broadcast the other operand (torch's
//! dynamo ViT adds `Where(Expand(all true), 0, lowest)`, an all-zero attention mask, to the
//! scores; the sum is the scores, bit for bit but for -0 + 0 = +0). A stored constant of zeros
//! is left alone: it is a parameter (a bias a random initialization left at zero), which the bias
//! fusions take in. `concat_empty` drops a Concat's inputs that are empty along its axis (that
//! empty pass part), leaving a one-input Concat for `identity`.
//!
//! ```text
//!   x ──► Identity ──► y ──► readers        x ──► readers (now reading x)
//! ```
//! When `y` is a graph output its name must survive: then x's producer is re-emitted to write
//! `y` directly and x's other readers read `y`. Rejected when neither name can go (x is a graph
//! input, an initializer or another graph output).

use crate::ir::{Dim, Model, Node, NodeId, ValueId};
use crate::ops::{self, cast::Cast};
use crate::passes::matchers::{concat_axis, constant_value};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};

/// The input `node` writes unchanged to its one output, if any.
fn passed_through(model: &Model, node: &Node) -> Option<ValueId> {
    let g = &model.graph;
    let y = node.output(0)?;
    if node.is("Add") {
        let (a, b) = (node.input(0)?, node.input(1)?);
        let same = |x: ValueId| {
            let (tx, ty) = (&g.value(x).ty, &g.value(y).ty);
            tx.dtype.is_some() && tx.dtype == ty.dtype && tx.same_shape_as(ty)
        };
        // Only a zero the graph computes (a mask): a stored constant is a parameter, a bias that
        // a random initialization left at zero, which the bias fusions take in.
        let computed = |z: ValueId| constant_value(model, z).is_none();
        return [(a, b), (b, a)]
            .into_iter()
            .find(|&(x, z)| same(x) && computed(z) && all_equal(model, z, Fill::Zero, 8))
            .map(|(x, _)| x);
    }
    passes_through(model, node).then_some(node.input(0)?)
}

/// What every element of a value is proved to be.
#[derive(Clone, Copy, PartialEq)]
enum Fill {
    Zero,
    True,
    False,
}

/// Whether every element of `v` is `fill`: a constant, or an Expand, Cast (zero only) or Where
/// (whose condition is proved all true or all false) of one, up to `depth` producers up.
fn all_equal(model: &Model, v: ValueId, fill: Fill, depth: usize) -> bool {
    let g = &model.graph;
    if let Some(t) = constant_value(model, v) {
        let t: &crate::tensor::Tensor = &t;
        return match (fill, t) {
            (Fill::True | Fill::False, crate::tensor::Tensor::Bool(a)) => {
                a.iter().all(|&x| x == (fill == Fill::True))
            }
            (Fill::Zero, t) if t.dtype().is_float() => t.to_f64_vec().iter().all(|&x| x == 0.0),
            _ => false,
        };
    }
    let Some(p) = g.producer(v).filter(|_| depth > 0) else {
        return false;
    };
    let n = g.node(p);
    let up = |i: usize, f: Fill| {
        n.input(i)
            .is_some_and(|x| all_equal(model, x, f, depth - 1))
    };
    if n.is("Expand") || (n.is("Cast") && fill == Fill::Zero) {
        up(0, fill)
    } else if n.is("Where") {
        (up(0, Fill::True) && up(1, fill)) || (up(0, Fill::False) && up(2, fill))
    } else {
        false
    }
}

/// Whether `node` writes its input 0 unchanged to its one output.
fn passes_through(model: &Model, node: &Node) -> bool {
    let g = &model.graph;
    let (Some(x), Some(y)) = (node.input(0), node.output(0)) else {
        return false;
    };
    if node.is("Identity") {
        return true;
    }
    if node.is("Cast") {
        let from = g.value(x).ty.dtype;
        return from.is_some() && ops::attrs_of::<Cast>(model, node).map(|c| c.to) == from;
    }
    if node.is("Concat") {
        return node.inputs.len() == 1;
    }
    if node.is("Slice") {
        // Same shape and steps all positive: every sliced axis is taken whole, in order (a
        // negative step over a whole axis reverses it). Shapes come from inference, which counts
        // with the kernel's own clamping.
        let (tx, ty) = (&g.value(x).ty, &g.value(y).ty);
        let forward = match node.input(4) {
            None => true,
            Some(s) => constant_value(model, s)
                .and_then(|t| t.to_i64_vec())
                .is_some_and(|v| v.iter().all(|&k| k > 0)),
        };
        return forward && tx.dtype.is_some() && tx.dtype == ty.dtype && tx.same_shape_as(ty);
    }
    false
}

pub struct IdentityElimination;

impl Rule for IdentityElimination {
    fn name(&self) -> &'static str {
        "identity"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Identity", "Cast", "Concat", "Slice", "Add"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        let (Some(x), Some(y)) = (passed_through(model, node), node.output(0)) else {
            return Proposal::NoMatch;
        };
        let data_inputs = if node.is("Slice") || node.is("Add") {
            1
        } else {
            node.inputs.len()
        };
        if node.outputs.len() != 1 || data_inputs != 1 {
            return Proposal::Reject(format!(
                "{} with other than one input and one output",
                node.op_type
            ));
        }
        if !g.is_graph_output(y) {
            return Proposal::Rewrite(Patch {
                remove: vec![id],
                redirect: vec![(y, x)],
                ..Default::default()
            });
        }
        let Some(p) = g.producer(x) else {
            return Proposal::Reject(format!(
                "output '{}' is a graph output fed directly by graph input or initializer '{}'",
                g.name(y),
                g.name(x)
            ));
        };
        if g.is_graph_output(x) {
            return Proposal::Reject(format!(
                "both '{}' and '{}' are graph outputs",
                g.name(x),
                g.name(y)
            ));
        }
        let mut producer = g.node(p).clone();
        for slot in producer.outputs.iter_mut() {
            if *slot == Some(x) {
                *slot = Some(y);
            }
        }
        Proposal::Rewrite(Patch {
            remove: vec![id, p],
            redirect: vec![(x, y)],
            add: vec![producer.into()],
            ..Default::default()
        })
    }
}

pub struct ConcatEmpty;

impl Rule for ConcatEmpty {
    fn name(&self) -> &'static str {
        "concat_empty"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Concat"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let node = g.node(id);
        if !node.is("Concat") || node.inputs.len() < 2 {
            return Proposal::NoMatch;
        }
        let Some(rank) = node
            .output(0)
            .and_then(|y| g.value(y).ty.shape.as_ref().map(|s| s.len()))
        else {
            return Proposal::NoMatch;
        };
        let axis = concat_axis(model, node);
        let Some(axis) = usize::try_from(if axis < 0 { axis + rank as i64 } else { axis })
            .ok()
            .filter(|&a| a < rank)
        else {
            return Proposal::NoMatch;
        };
        let empty = |v: Option<crate::ir::ValueId>| {
            v.and_then(|v| {
                g.value(v)
                    .ty
                    .shape
                    .as_ref()
                    .map(|s| s.get(axis) == Some(&Dim::Known(0)))
            })
            .unwrap_or(false)
        };
        let kept: Vec<_> = node.inputs.iter().copied().filter(|&v| !empty(v)).collect();
        // All empty: the output is empty too, and which input stays is no simpler.
        if kept.len() == node.inputs.len() || kept.is_empty() {
            return Proposal::NoMatch;
        }
        let mut concat = node.clone();
        concat.inputs = kept;
        Proposal::Rewrite(Patch {
            remove: vec![id],
            add: vec![NewNode::from(concat)],
            ..Default::default()
        })
    }
}
