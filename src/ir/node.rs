//! Nodes and typed access to their attributes.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use serde::Serialize;

use crate::onnx::proto::{
    attribute_type as at, AttributeProto, NodeDeviceConfigurationProto, StringStringEntryProto,
    TensorProto,
};

/// Index of a value in its graph's arena. Stable for the graph's lifetime: rewrites never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ValueId(pub u32);

/// Index of a node in its graph's arena. Stable: a removed node's id is never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeId(pub u32);

/// NodeProto fields that no pass reads but a save must keep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeExtra {
    pub overload: String,
    pub doc_string: String,
    pub metadata_props: Vec<StringStringEntryProto>,
    pub device_configurations: Vec<NodeDeviceConfigurationProto>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    /// "" is the default ai.onnx domain.
    pub domain: String,
    /// `None` is an omitted optional input (an empty name in the proto).
    pub inputs: Vec<Option<ValueId>>,
    /// `None` is an omitted optional output.
    pub outputs: Vec<Option<ValueId>>,
    /// The attribute records as the model stores them: written by loading and by rewrites, read
    /// by saving and by the ops layer's parser only (everything else sees typed attributes).
    attributes: Vec<AttributeProto>,
    /// Outer-scope values that this node's subgraph attributes read (If/Loop/Scan bodies).
    pub implicit_inputs: Vec<ValueId>,
    pub extra: NodeExtra,
    /// The ops layer's parse of `attributes` (see `crate::ops::resolve`).
    pub parsed: ParseCache,
}

/// A slot where the ops layer keeps a node's parsed op for one opset version. Opaque to the IR,
/// which knows no op semantics; cleared whenever the attributes change.
#[derive(Clone, Default)]
pub struct ParseCache(OnceLock<(i64, Arc<dyn Any + Send + Sync>)>);

impl ParseCache {
    /// The value parsed for `opset`, parsing with `f` if the slot is empty; `None` when the slot
    /// holds another opset's parse.
    pub fn get_or_init(
        &self,
        opset: i64,
        f: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
    ) -> Option<&(dyn Any + Send + Sync)> {
        let (v, p) = self.0.get_or_init(|| (opset, f()));
        (*v == opset).then_some(&**p)
    }

    /// Whatever parse the slot holds, for whichever opset.
    pub fn peek(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.0.get().map(|(_, p)| &**p)
    }
}

impl PartialEq for ParseCache {
    /// A cache never makes two nodes differ: their attribute records do.
    fn eq(&self, _: &ParseCache) -> bool {
        true
    }
}

impl std::fmt::Debug for ParseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParseCache")
    }
}

impl Node {
    pub fn new(op_type: &str, domain: &str) -> Node {
        Node {
            name: String::new(),
            op_type: op_type.to_string(),
            domain: domain.to_string(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attributes: Vec::new(),
            implicit_inputs: Vec::new(),
            extra: NodeExtra::default(),
            parsed: ParseCache::default(),
        }
    }

    /// The attribute records (for saving and for the ops layer's parser).
    pub fn attributes(&self) -> &[AttributeProto] {
        &self.attributes
    }

    /// Names of the attribute records, in stored order.
    pub fn attribute_names(&self) -> impl Iterator<Item = &str> {
        self.attributes.iter().map(|a| a.name.as_str())
    }

    /// True when an attribute holds a graph (If/Loop/Scan bodies).
    pub fn has_subgraphs(&self) -> bool {
        self.attributes
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
    }

    /// Replaces every attribute record.
    pub fn set_attributes(&mut self, attributes: Vec<AttributeProto>) {
        self.attributes = attributes;
        self.parsed = ParseCache::default();
    }

    /// Forgets the parsed op (the domain's opset version changed).
    pub fn reset_parsed(&mut self) {
        self.parsed = ParseCache::default();
    }

    /// True for the default ONNX domain, however it is spelled.
    pub fn is_onnx_domain(&self) -> bool {
        crate::ir::model::canonical_domain(&self.domain).is_empty()
    }

    /// True when this node is `op_type` in the default ONNX domain.
    pub fn is(&self, op_type: &str) -> bool {
        self.op_type == op_type && self.is_onnx_domain()
    }

    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs.get(i).copied().flatten()
    }

    /// Every value this node reads, explicit inputs first, then subgraph captures.
    pub fn all_inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.inputs
            .iter()
            .flatten()
            .copied()
            .chain(self.implicit_inputs.iter().copied())
    }

    pub fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attributes.iter().find(|a| a.name == name)
    }

    pub fn attr_int(&self, name: &str) -> Option<i64> {
        self.attr(name).filter(|a| a.r#type == at::INT).map(|a| a.i)
    }

    pub fn attr_float(&self, name: &str) -> Option<f32> {
        self.attr(name)
            .filter(|a| a.r#type == at::FLOAT)
            .map(|a| a.f)
    }

    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        self.attr(name)
            .filter(|a| a.r#type == at::INTS)
            .map(|a| a.ints.as_slice())
    }

    pub fn attr_floats(&self, name: &str) -> Option<&[f32]> {
        self.attr(name)
            .filter(|a| a.r#type == at::FLOATS)
            .map(|a| a.floats.as_slice())
    }

    pub fn attr_string(&self, name: &str) -> Option<String> {
        self.attr(name)
            .filter(|a| a.r#type == at::STRING)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }

    pub fn attr_tensor(&self, name: &str) -> Option<&TensorProto> {
        self.attr(name)
            .filter(|a| a.r#type == at::TENSOR)
            .and_then(|a| a.t.as_ref())
    }

    /// Sets (or replaces) an attribute.
    pub fn set_attr(&mut self, attr: AttributeProto) {
        self.attributes.retain(|a| a.name != attr.name);
        self.attributes.push(attr);
        self.parsed = ParseCache::default();
    }

    /// A label for messages: the node's name, or its op type and id when it has none.
    pub fn label(&self, id: NodeId) -> String {
        if self.name.is_empty() {
            format!("{}#{}", self.op_type, id.0)
        } else {
            self.name.clone()
        }
    }
}

/// Attribute constructors for builders and rewrites.
pub mod attr {
    use super::*;

    pub fn int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::INT,
            i,
            ..Default::default()
        }
    }

    pub fn float(name: &str, f: f32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::FLOAT,
            f,
            ..Default::default()
        }
    }

    pub fn ints(name: &str, ints: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::INTS,
            ints: ints.to_vec(),
            ..Default::default()
        }
    }

    pub fn floats(name: &str, floats: &[f32]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::FLOATS,
            floats: floats.to_vec(),
            ..Default::default()
        }
    }

    pub fn string(name: &str, s: &str) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::STRING,
            s: s.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    pub fn strings(name: &str, strings: &[&str]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::STRINGS,
            strings: strings.iter().map(|s| s.as_bytes().to_vec()).collect(),
            ..Default::default()
        }
    }

    pub fn tensor(name: &str, t: TensorProto) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: at::TENSOR,
            t: Some(t),
            ..Default::default()
        }
    }
}
