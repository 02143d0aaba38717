//! A model: the main graph plus everything else in ModelProto, kept for a lossless save.

use crate::ir::graph::Graph;
use crate::onnx::proto::{ModelProto, OperatorSetIdProto};

/// Domain name of our own fused ops.
pub const FUSELAB_DOMAIN: &str = "ai.fuselab";
/// Domain of onnxruntime's contrib ops.
pub const MS_DOMAIN: &str = "com.microsoft";

#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub graph: Graph,
    /// ModelProto without its graph: opset imports, metadata, functions, training info, ...
    pub proto: ModelProto,
}

/// The default domain's stored spelling: "" and "ai.onnx" name the same domain.
pub fn canonical_domain(d: &str) -> &str {
    if d == "ai.onnx" {
        ""
    } else {
        d
    }
}

/// The default domain's spelling for people: "ai.onnx" rather than "".
pub fn display_domain(d: &str) -> &str {
    if d.is_empty() {
        "ai.onnx"
    } else {
        d
    }
}

pub fn same_domain(a: &str, b: &str) -> bool {
    canonical_domain(a) == canonical_domain(b)
}

impl Model {
    pub fn new(graph: Graph, onnx_opset: i64) -> Model {
        Model {
            graph,
            proto: ModelProto {
                ir_version: 8,
                producer_name: "fuselab".into(),
                producer_version: env!("CARGO_PKG_VERSION").into(),
                opset_import: vec![OperatorSetIdProto {
                    domain: String::new(),
                    version: onnx_opset,
                }],
                ..Default::default()
            },
        }
    }

    /// The opset version imported for `domain`.
    pub fn opset(&self, domain: &str) -> Option<i64> {
        self.proto
            .opset_import
            .iter()
            .find(|o| same_domain(&o.domain, domain))
            .map(|o| o.version)
    }

    /// Imports `domain` at `version` unless it is imported already.
    pub fn ensure_opset(&mut self, domain: &str, version: i64) {
        if self.opset(domain).is_none() {
            self.proto.opset_import.push(OperatorSetIdProto {
                domain: domain.to_string(),
                version,
            });
            self.graph.reset_parsed(domain);
        }
    }

    /// Imports `domain` at `version` or more: an older import is raised to `version`.
    pub fn require_opset(&mut self, domain: &str, version: i64) {
        match self
            .proto
            .opset_import
            .iter_mut()
            .find(|o| same_domain(&o.domain, domain))
        {
            Some(o) if o.version >= version => {}
            Some(o) => {
                o.version = version;
                self.graph.reset_parsed(domain);
            }
            None => self.ensure_opset(domain, version),
        }
    }
}
