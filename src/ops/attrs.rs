//! Reading a node's attribute records into an op's typed attributes: the one place that looks at
//! `AttributeProto`. A record of the wrong type is an error naming the attribute; an absent one
//! takes the default the op's parse passes in (the spec's default for that opset).

use crate::ir::Node;
use crate::onnx::proto::{attribute_type as at, AttributeProto, TensorProto};

pub struct Attrs<'a> {
    node: &'a Node,
    /// The opset version imported for the node's domain.
    pub opset: i64,
}

type R<T> = Result<T, String>;

fn type_name(t: i32) -> &'static str {
    match t {
        at::FLOAT => "FLOAT",
        at::INT => "INT",
        at::STRING => "STRING",
        at::TENSOR => "TENSOR",
        at::GRAPH => "GRAPH",
        at::FLOATS => "FLOATS",
        at::INTS => "INTS",
        at::STRINGS => "STRINGS",
        _ => "another type",
    }
}

impl<'a> Attrs<'a> {
    pub fn new(node: &'a Node, opset: i64) -> Attrs<'a> {
        Attrs { node, opset }
    }

    /// Number of output slots the node names (ops like Split take their arity from it).
    pub fn outputs(&self) -> usize {
        self.node.outputs.len()
    }

    pub fn has(&self, name: &str) -> bool {
        self.record(name).is_some()
    }

    fn record(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attributes().iter().find(|a| a.name == name)
    }

    /// The record called `name`, checked to be of type `ty`.
    fn typed(&self, name: &str, ty: i32) -> R<Option<&'a AttributeProto>> {
        match self.record(name) {
            None => Ok(None),
            Some(a) if a.r#type == ty => Ok(Some(a)),
            Some(a) => Err(format!(
                "attribute '{name}' has the wrong type: {} expected, found {}",
                type_name(ty),
                type_name(a.r#type)
            )),
        }
    }

    pub fn opt_int(&self, name: &str) -> R<Option<i64>> {
        Ok(self.typed(name, at::INT)?.map(|a| a.i))
    }

    pub fn int(&self, name: &str, default: i64) -> R<i64> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    /// A 0/1 flag stored as an int (any non-zero is true, as onnxruntime reads them).
    pub fn flag(&self, name: &str, default: bool) -> R<bool> {
        Ok(self.opt_int(name)?.map_or(default, |v| v != 0))
    }

    pub fn opt_float(&self, name: &str) -> R<Option<f32>> {
        Ok(self.typed(name, at::FLOAT)?.map(|a| a.f))
    }

    pub fn float(&self, name: &str, default: f32) -> R<f32> {
        Ok(self.opt_float(name)?.unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        Ok(self.typed(name, at::INTS)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> R<Option<Vec<f32>>> {
        Ok(self.typed(name, at::FLOATS)?.map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str) -> R<Option<String>> {
        Ok(self
            .typed(name, at::STRING)?
            .map(|a| String::from_utf8_lossy(&a.s).into_owned()))
    }

    pub fn strings(&self, name: &str) -> R<Option<Vec<String>>> {
        Ok(self.typed(name, at::STRINGS)?.map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        }))
    }

    pub fn tensor(&self, name: &str) -> R<Option<&'a TensorProto>> {
        match self.typed(name, at::TENSOR)? {
            None => Ok(None),
            Some(a) => {
                a.t.as_ref()
                    .map(Some)
                    .ok_or_else(|| format!("attribute '{name}' is a TENSOR without a tensor"))
            }
        }
    }

    /// A GRAPH attribute (If's branches, Loop's and Scan's bodies).
    pub fn graph(&self, name: &str) -> R<Option<&'a crate::onnx::proto::GraphProto>> {
        match self.typed(name, at::GRAPH)? {
            None => Ok(None),
            Some(a) => {
                a.g.as_deref()
                    .map(Some)
                    .ok_or_else(|| format!("attribute '{name}' is a GRAPH without a graph"))
            }
        }
    }
}
