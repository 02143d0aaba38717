//! A small builder for graphs in code (tests, examples). It does not verify: tests build broken
//! graphs on purpose and call `verify()` themselves.

use crate::ir::graph::Graph;
use crate::ir::model::Model;
use crate::ir::node::{Node, ValueId};
use crate::ir::types::{Dim, TensorType};
use crate::onnx::proto::AttributeProto;
use crate::tensor::{DType, Tensor};

pub struct GraphBuilder {
    pub graph: Graph,
    opset: i64,
    extra_opsets: Vec<(String, i64)>,
    counter: usize,
}

/// Symbolic dim shorthand for builders.
pub fn sym(name: &str) -> Dim {
    Dim::Sym(name.to_string())
}

/// Known dims shorthand for builders.
pub fn dims(v: &[i64]) -> Vec<Dim> {
    v.iter().map(|&d| Dim::Known(d)).collect()
}

impl GraphBuilder {
    pub fn new(name: &str, onnx_opset: i64) -> GraphBuilder {
        GraphBuilder {
            graph: Graph::new(name),
            opset: onnx_opset,
            extra_opsets: Vec::new(),
            counter: 0,
        }
    }

    pub fn import(&mut self, domain: &str, version: i64) -> &mut Self {
        self.extra_opsets.push((domain.to_string(), version));
        self
    }

    pub fn input(&mut self, name: &str, dtype: DType, shape: Vec<Dim>) -> ValueId {
        let id = self.graph.new_value(name, TensorType::new(dtype, shape));
        self.graph.inputs.push(id);
        id
    }

    pub fn initializer(&mut self, name: &str, t: &Tensor) -> ValueId {
        let shape = t.shape().iter().map(|&d| Dim::Known(d as i64)).collect();
        let id = self
            .graph
            .new_value(name, TensorType::new(t.dtype(), shape));
        self.graph
            .set_initializer(id, crate::onnx::tensor::from_tensor(name, t));
        id
    }

    /// A single-output node in the default domain.
    pub fn op(&mut self, op_type: &str, inputs: &[ValueId], attrs: Vec<AttributeProto>) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.node("", op_type, &ins, 1, attrs)[0]
    }

    /// A node with any domain, optional inputs and `n_outputs` fresh outputs.
    pub fn node(
        &mut self,
        domain: &str,
        op_type: &str,
        inputs: &[Option<ValueId>],
        n_outputs: usize,
        attrs: Vec<AttributeProto>,
    ) -> Vec<ValueId> {
        self.counter += 1;
        let mut node = Node::new(op_type, domain);
        node.name = format!("{}_{}", op_type.to_lowercase(), self.counter);
        node.inputs = inputs.to_vec();
        node.set_attributes(attrs);
        let outs: Vec<ValueId> = (0..n_outputs)
            .map(|i| {
                let name = format!("{}_out{}", node.name, i);
                self.graph.new_value(&name, TensorType::default())
            })
            .collect();
        node.outputs = outs.iter().map(|&v| Some(v)).collect();
        self.graph
            .add_node(node)
            .expect("builder outputs are fresh values");
        outs
    }

    /// Marks `v` as a graph output, renaming it to `name`.
    pub fn output(&mut self, v: ValueId, name: &str) {
        if self.graph.name(v) != name && self.graph.find(name).is_none() {
            self.graph.rename_value(v, name);
        }
        self.graph.outputs.push(v);
    }

    pub fn build(self) -> Model {
        let mut m = Model::new(self.graph, self.opset);
        for (d, v) in self.extra_opsets {
            m.ensure_opset(&d, v);
        }
        crate::ops::infer::infer_types(&mut m);
        m
    }
}
