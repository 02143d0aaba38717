//! Guards shared by rules: single-consumer checks, constant lookup, unique names.

use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::limits::Limits;
use crate::onnx::tensor::to_tensor;
use crate::tensor::Tensor;

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
/// of a Constant node.
pub fn constant_value(model: &Model, v: ValueId) -> Option<Tensor> {
    let g = &model.graph;
    let limits = Limits::default();
    if let Some(t) = g.constant(v) {
        return to_tensor(t, &limits).ok();
    }
    let p = g.producer(v)?;
    let node = g.node(p);
    if !node.is("Constant") {
        return None;
    }
    let kernel = crate::runtime::reference::lookup("", "Constant")?;
    let ctx = crate::runtime::reference::KernelCtx {
        node,
        opset: model.opset("").unwrap_or(1),
        limits: &limits,
    };
    kernel(&ctx, &[]).ok()?.into_iter().next()
}

/// A node name not used in the graph, derived from `base`.
pub fn fresh_node_name(g: &Graph, base: &str) -> String {
    let taken = |n: &str| g.node_ids().any(|id| g.node(id).name == n);
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
