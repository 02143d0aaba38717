//! `verify()`: the invariants every graph must hold before and after each rewrite.

use std::collections::HashSet;

use crate::ir::model::Model;
use crate::{Error, Result};

/// The structural checks: every value read is defined; no value defined twice; no cycle. The first problem found is reported, naming the node and value.
/// (`crate::ops::verify` adds the type checks, which need op semantics.)
pub fn verify_structure(model: &Model) -> Result<()> {
    let g = &model.graph;
    let mut seen_def = HashSet::new();
    for &i in &g.inputs {
        if !seen_def.insert(i) {
            return Err(Error::Verify(format!(
                "graph input '{}' is listed twice",
                g.name(i)
            )));
        }
    }
    for (v, _) in g.initializers() {
        if !seen_def.insert(v) && !g.is_graph_input(v) {
            return Err(Error::Verify(format!(
                "initializer '{}' is listed twice",
                g.name(v)
            )));
        }
    }
    // Node names are for diagnostics only (onnx IR.md): exporters repeat them (silero-vad's
    // OpenVINO file has two 'F0::anon'), onnx.checker and onnxruntime accept that, and so does
    // this check.
    for id in g.node_ids() {
        let node = g.node(id);
        for v in node.all_inputs() {
            if !g.is_defined(v) {
                return Err(Error::Verify(format!(
                    "node '{}' ({}) uses undefined value '{}'",
                    node.label(id),
                    node.op_type,
                    g.name(v)
                )));
            }
        }
        for v in node.outputs.iter().flatten() {
            if g.producer(*v) != Some(id) || g.is_graph_input(*v) || g.initializer(*v).is_some() {
                return Err(Error::Verify(format!(
                    "value '{}' is defined more than once (node '{}')",
                    g.name(*v),
                    node.label(id)
                )));
            }
        }
    }
    for &o in &g.outputs {
        if !g.is_defined(o) {
            return Err(Error::Verify(format!(
                "graph output '{}' is never produced",
                g.name(o)
            )));
        }
    }
    g.topo_order()?;
    Ok(())
}
