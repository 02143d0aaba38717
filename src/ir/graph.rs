//! The graph: arenas of values and nodes with stable ids, producer/consumer indices kept in step
//! with every edit, and a topological order computed on demand.

use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::ir::node::{Node, NodeId, ValueId};
use crate::ir::types::TensorType;
use crate::limits::Limits;
use crate::onnx::proto::{
    SparseTensorProto, StringStringEntryProto, TensorAnnotation, TensorProto, ValueInfoProto,
};
use crate::onnx::tensor::to_tensor;
use crate::tensor::Tensor;
use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    /// Element type and shape, as declared or as inferred.
    pub ty: TensorType,
    /// The ValueInfoProto the model declared for this graph input or output, kept
    /// verbatim so a save loses nothing (doc strings, denotations, non-tensor types).
    pub info: Option<ValueInfoProto>,
}

/// GraphProto fields that no pass reads but a save must keep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphExtra {
    pub doc_string: String,
    pub sparse_initializer: Vec<SparseTensorProto>,
    pub quantization_annotation: Vec<TensorAnnotation>,
    pub metadata_props: Vec<StringStringEntryProto>,
    /// IR < 4 only (`None` otherwise): the IR required every initializer to be listed as a graph
    /// input too, and such an input is not one a caller may feed (onnxruntime reads it so:
    /// initializers are overridable from IR 4 on). Load takes those inputs out of `inputs`, so
    /// their initializers are constants, and keeps the inputs' order and their declarations
    /// here; save lists every initializer as an input again, in that order, with its declaration
    /// where it had one.
    pub initializers_as_inputs: Option<InitializerInputs>,
}

/// IR < 4: the graph's inputs as read (names, in order) and the declarations of those that
/// restated an initializer (`GraphExtra::initializers_as_inputs`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitializerInputs {
    pub order: Vec<String>,
    pub declared: HashMap<String, ValueInfoProto>,
}

/// An initializer's decoded value, filled on first use. Shared by the clones of a graph (the
/// optimizer's copy and the original decode each weight once between them); a new or replaced
/// initializer gets a cell of its own (`set_initializer`), so a cell always belongs to its bytes.
#[derive(Clone, Default)]
struct Decoded(Arc<OnceLock<Option<Tensor>>>);

impl PartialEq for Decoded {
    /// Derived from the TensorProto next to it, which is what two graphs compare on.
    fn eq(&self, _: &Decoded) -> bool {
        true
    }
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decoded")
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub name: String,
    values: Vec<Value>,
    nodes: Vec<Option<Node>>,
    producer: Vec<Option<NodeId>>,
    /// One entry per (consumer, use): a node reading a value twice appears twice.
    consumers: Vec<Vec<NodeId>>,
    by_name: HashMap<String, ValueId>,
    /// Live nodes per node name (names may repeat): `has_node_named` without a scan, which made
    /// naming each fused node O(nodes) and the passes quadratic.
    node_names: HashMap<String, u32>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Initializers in file order, data inlined (external data already read).
    initializers: Vec<(ValueId, TensorProto, Decoded)>,
    /// Position in `initializers` by value.
    init_pos: HashMap<ValueId, usize>,
    /// Declared info of graph outputs that are also graph inputs (their `Value::info` is the
    /// input's declaration, and the two may differ in doc strings or shape detail).
    pub output_info: HashMap<ValueId, ValueInfoProto>,
    /// Values defined by GraphProto.sparse_initializer (kept verbatim in `extra`).
    pub sparse_values: Vec<ValueId>,
    /// GraphProto.value_info entries, kept verbatim; saved while their value is still produced.
    pub value_info: Vec<(ValueId, ValueInfoProto)>,
    pub extra: GraphExtra,
}

impl Graph {
    pub fn new(name: &str) -> Graph {
        Graph {
            name: name.to_string(),
            ..Default::default()
        }
    }

    // ----- values -----

    /// The value called `name`, created (undefined, untyped) if it does not exist yet.
    pub fn value_named(&mut self, name: &str) -> ValueId {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        self.new_value(name, TensorType::default())
    }

    /// A new value. An empty or taken name is replaced by a fresh unique one.
    pub fn new_value(&mut self, name: &str, ty: TensorType) -> ValueId {
        let name = if name.is_empty() || self.by_name.contains_key(name) {
            self.fresh_name(if name.is_empty() { "v" } else { name })
        } else {
            name.to_string()
        };
        let id = ValueId(self.values.len() as u32);
        self.by_name.insert(name.clone(), id);
        self.values.push(Value {
            name,
            ty,
            info: None,
        });
        self.producer.push(None);
        self.consumers.push(Vec::new());
        id
    }

    /// A name not used by any value, derived from `base`.
    pub fn fresh_name(&self, base: &str) -> String {
        (0..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| !self.by_name.contains_key(n))
            .expect("unbounded")
    }

    /// Renames a value (and its initializer). The caller ensures `name` is free.
    pub fn rename_value(&mut self, id: ValueId, name: &str) {
        let old = std::mem::replace(&mut self.values[id.0 as usize].name, name.to_string());
        self.by_name.remove(&old);
        self.by_name.insert(name.to_string(), id);
        if let Some(info) = self.values[id.0 as usize].info.as_mut() {
            info.name = name.to_string();
        }
        for (v, t, _) in self.initializers.iter_mut() {
            if *v == id {
                t.name = name.to_string();
            }
        }
    }

    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0 as usize]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.0 as usize]
    }

    pub fn name(&self, id: ValueId) -> &str {
        &self.values[id.0 as usize].name
    }

    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    pub fn producer(&self, id: ValueId) -> Option<NodeId> {
        self.producer[id.0 as usize]
    }

    /// Nodes reading `id` (explicitly or through a subgraph), one entry per use.
    pub fn consumers(&self, id: ValueId) -> &[NodeId] {
        &self.consumers[id.0 as usize]
    }

    pub fn is_graph_input(&self, id: ValueId) -> bool {
        self.inputs.contains(&id)
    }

    pub fn is_graph_output(&self, id: ValueId) -> bool {
        self.outputs.contains(&id)
    }

    /// The graph output that states `id`'s shape: `id` itself, or a graph output that is a Cast
    /// of it (onnxruntime's float16 converter with keep_io_types casts each output back to
    /// float32; a Cast keeps the shape).
    pub fn stated_as_output(&self, id: ValueId) -> Option<ValueId> {
        if self.is_graph_output(id) {
            return Some(id);
        }
        self.consumers(id).iter().find_map(|&c| {
            let out = self.node(c).output(0)?;
            (self.is_graph_output(out) && self.stated_by_output(out) == id).then_some(out)
        })
    }

    /// The value whose shape the graph output `o` states: what `o` is a Cast of, or `o` itself
    /// (the inverse of `stated_as_output`).
    pub fn stated_by_output(&self, o: ValueId) -> ValueId {
        let cast = self
            .producer(o)
            .map(|p| self.node(p))
            .filter(|n| n.is("Cast"));
        cast.and_then(|n| n.input(0)).unwrap_or(o)
    }

    // ----- initializers -----

    pub fn initializers(&self) -> impl Iterator<Item = (ValueId, &TensorProto)> {
        self.initializers.iter().map(|(v, t, _)| (*v, t))
    }

    pub fn initializer(&self, id: ValueId) -> Option<&TensorProto> {
        self.init_pos.get(&id).map(|&i| &self.initializers[i].1)
    }

    /// A constant: an initializer that is not also a graph input (inputs may override it).
    pub fn constant(&self, id: ValueId) -> Option<&TensorProto> {
        if self.is_graph_input(id) {
            return None;
        }
        self.initializer(id)
    }

    /// A constant's value, decoded on first use and kept (every later reader shares it). `None`
    /// for a non-constant or a tensor the reference backend cannot hold (e.g. float16).
    pub fn constant_value(&self, id: ValueId) -> Option<&Tensor> {
        if self.is_graph_input(id) {
            return None;
        }
        self.initializer_value(id)
    }

    /// An initializer's value (also one a graph input may override), decoded on first use and
    /// kept; `None` when there is none or it cannot be decoded (`to_tensor` says why).
    pub fn initializer_value(&self, id: ValueId) -> Option<&Tensor> {
        let (_, t, cache) = &self.initializers[*self.init_pos.get(&id)?];
        cache
            .0
            .get_or_init(|| to_tensor(t, &Limits::default()).ok())
            .as_ref()
    }

    /// Adds an initializer under the value's name.
    pub fn set_initializer(&mut self, id: ValueId, mut t: TensorProto) {
        t.name = self.name(id).to_string();
        match self.init_pos.get(&id) {
            Some(&i) => self.initializers[i] = (id, t, Decoded::default()),
            None => {
                self.init_pos.insert(id, self.initializers.len());
                self.initializers.push((id, t, Decoded::default()));
            }
        }
    }

    /// Drops initializers that nothing reads any more, except those named in `keep` (names that
    /// quantization annotations or training bindings refer to).
    pub fn remove_unused_initializers(
        &mut self,
        keep_names: &std::collections::HashSet<String>,
    ) -> usize {
        let before = self.initializers.len();
        let keep: Vec<bool> = self
            .initializers
            .iter()
            .map(|(v, _, _)| {
                !self.consumers[v.0 as usize].is_empty()
                    || keep_names.contains(self.name(*v))
                    || self.is_graph_output(*v)
                    || self.is_graph_input(*v)
            })
            .collect();
        let mut it = keep.iter();
        self.initializers
            .retain(|_| *it.next().expect("same length"));
        self.init_pos = self
            .initializers
            .iter()
            .enumerate()
            .map(|(i, (v, _, _))| (*v, i))
            .collect();
        before - self.initializers.len()
    }

    // ----- nodes -----

    /// Forgets the parsed ops of nodes in `domain` (its imported opset version changed).
    pub fn reset_parsed(&mut self, domain: &str) {
        for n in self.nodes.iter_mut().flatten() {
            if crate::ir::model::same_domain(&n.domain, domain) {
                n.reset_parsed();
            }
        }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes[id.0 as usize]
            .as_ref()
            .expect("node id refers to a removed node")
    }

    pub fn try_node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.0 as usize).and_then(|n| n.as_ref())
    }

    /// Live node ids in arena (insertion) order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_some())
            .map(|(i, _)| NodeId(i as u32))
    }

    /// Whether a live node is called `name`.
    pub fn has_node_named(&self, name: &str) -> bool {
        self.node_names.contains_key(name)
    }

    pub fn node_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.is_some()).count()
    }

    /// Adds a node and indexes its inputs and outputs. Fails if an output already has a producer
    /// or is a graph input or initializer (values are defined once).
    pub fn add_node(&mut self, node: Node) -> Result<NodeId> {
        let id = NodeId(self.nodes.len() as u32);
        for out in node.outputs.iter().flatten() {
            if let Some(p) = self.producer[out.0 as usize] {
                return Err(Error::invalid(format!(
                    "value '{}' is produced twice (by '{}' and '{}')",
                    self.name(*out),
                    self.node(p).label(p),
                    node.label(id)
                )));
            }
            if self.is_graph_input(*out) || self.initializer(*out).is_some() {
                return Err(Error::invalid(format!(
                    "node '{}' output '{}' is also a graph input or initializer",
                    node.label(id),
                    self.name(*out)
                )));
            }
        }
        for out in node.outputs.iter().flatten() {
            self.producer[out.0 as usize] = Some(id);
        }
        for inp in node.all_inputs() {
            self.consumers[inp.0 as usize].push(id);
        }
        *self.node_names.entry(node.name.clone()).or_default() += 1;
        self.nodes.push(Some(node));
        Ok(id)
    }

    /// Removes a node; its outputs stay as (now undefined) values.
    pub fn remove_node(&mut self, id: NodeId) -> Node {
        let node = self.nodes[id.0 as usize]
            .take()
            .expect("removing a removed node");
        if let Some(n) = self.node_names.get_mut(&node.name) {
            *n -= 1;
            if *n == 0 {
                self.node_names.remove(&node.name);
            }
        }
        for out in node.outputs.iter().flatten() {
            self.producer[out.0 as usize] = None;
        }
        for inp in node.all_inputs() {
            let list = &mut self.consumers[inp.0 as usize];
            if let Some(pos) = list.iter().position(|&n| n == id) {
                list.remove(pos);
            }
        }
        node
    }

    /// Makes every reader of `from` (nodes and graph outputs) read `to` instead. Redirecting a
    /// graph output renames the graph's interface: rules check `is_graph_output` first.
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        if from == to {
            return;
        }
        let users = std::mem::take(&mut self.consumers[from.0 as usize]);
        let mut seen = Vec::new();
        for n in users {
            if seen.contains(&n) {
                continue;
            }
            seen.push(n);
            let node = self.nodes[n.0 as usize].as_mut().expect("live consumer");
            for slot in node.inputs.iter_mut().flatten() {
                if *slot == from {
                    *slot = to;
                    self.consumers[to.0 as usize].push(n);
                }
            }
            for slot in node.implicit_inputs.iter_mut() {
                if *slot == from {
                    *slot = to;
                    self.consumers[to.0 as usize].push(n);
                }
            }
        }
        for o in self.outputs.iter_mut() {
            if *o == from {
                *o = to;
            }
        }
    }

    /// Nodes in a topological order, ties broken by arena order, so an untouched graph keeps its
    /// file order. Fails naming a node on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>> {
        let n = self.nodes.len();
        let mut pending = vec![0usize; n];
        for id in self.node_ids() {
            pending[id.0 as usize] = self
                .node(id)
                .all_inputs()
                .filter(|v| self.producer(*v).is_some())
                .count();
        }
        let mut ready: BinaryHeap<std::cmp::Reverse<u32>> = self
            .node_ids()
            .filter(|id| pending[id.0 as usize] == 0)
            .map(|id| std::cmp::Reverse(id.0))
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            let id = NodeId(i);
            order.push(id);
            for out in self.node(id).outputs.iter().flatten() {
                for &c in self.consumers(*out) {
                    let p = &mut pending[c.0 as usize];
                    *p -= 1;
                    if *p == 0 {
                        ready.push(std::cmp::Reverse(c.0));
                    }
                }
            }
        }
        if order.len() != self.node_count() {
            let stuck = self
                .node_ids()
                .find(|id| pending[id.0 as usize] > 0)
                .expect("some node is unsorted");
            return Err(Error::Verify(format!(
                "graph has a cycle through node '{}'",
                self.node(stuck).label(stuck)
            )));
        }
        Ok(order)
    }

    /// True if `id` is defined: a graph input, an initializer or a node output.
    pub fn is_defined(&self, id: ValueId) -> bool {
        self.producer(id).is_some()
            || self.is_graph_input(id)
            || self.initializer(id).is_some()
            || self.sparse_values.contains(&id)
    }
}
