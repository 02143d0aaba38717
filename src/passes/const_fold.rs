//! Constant folding through the ops layer's reference kernels (`ops::evaluate`): a node whose inputs are all constants is
//! evaluated once and its outputs become initializers. Constant nodes fold into initializers.
//! Nodes whose outputs would be large are left alone, so a fold never inflates the model much:
//! an output may have `MAX_FOLD_ELEMENTS`, or as many elements as the node's largest constant
//! input (a Cast or Transpose of a weight, as onnxruntime's fp16 converter writes for the weights
//! an IR 3 file lists as inputs, is the weight in another form, not growth).
//! A DequantizeLinear of constants is left alone too: it is a weight's quantized storage, which
//! folding would inflate (4 to 8 times) and hide from the fusion that reads it (`matmul_nbits`)
//! and from onnxruntime's own QDQ handling.

use crate::ir::{Model, NodeId};
use crate::limits::Limits;
use crate::onnx::tensor::{from_tensor, to_tensor};
use crate::ops::{self, OpError};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

/// Largest folded output, in elements.
pub const MAX_FOLD_ELEMENTS: usize = 1 << 20;

pub struct ConstantFolding;

impl Rule for ConstantFolding {
    fn name(&self) -> &'static str {
        "const_fold"
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
        if !node.implicit_inputs.is_empty()
            || node.has_subgraphs()
            || node.outputs.iter().all(|o| o.is_none())
        {
            return Proposal::NoMatch;
        }
        if node.is("DequantizeLinear") {
            return Proposal::NoMatch;
        }
        if !node
            .inputs
            .iter()
            .flatten()
            .all(|&v| g.constant(v).is_some())
        {
            return Proposal::NoMatch;
        }
        let opset = model.opset(&node.domain).unwrap_or(1);
        let largest_input = (node.inputs.iter().flatten())
            .filter_map(|&v| g.constant(v))
            .map(|t| t.dims.iter().map(|&d| d.max(0) as u64).product::<u64>())
            .max()
            .unwrap_or(0);
        let cap = (MAX_FOLD_ELEMENTS as u64).max(largest_input);
        // Kernels refuse outputs past the folding cap before allocating them.
        let fold_limits = Limits {
            max_tensor_bytes: cap.saturating_mul(8),
        };
        let mut args = Vec::with_capacity(node.inputs.len());
        for v in &node.inputs {
            match v {
                None => args.push(None),
                Some(v) => match g.constant_value(*v) {
                    Some(t) => args.push(Some(t)),
                    None => {
                        let e =
                            to_tensor(g.constant(*v).expect("checked above"), &Limits::default())
                                .err()
                                .map_or_else(|| "not decodable".to_string(), |e| e.to_string());
                        return Proposal::Reject(format!("cannot decode a constant input: {e}"));
                    }
                },
            }
        }
        let outs = match ops::evaluate(node, opset, &fold_limits, &args) {
            Err(OpError::BadAttributes(e)) => {
                return Proposal::Reject(format!("evaluation failed: {e}"))
            }
            Err(OpError::Unsupported) => {
                return Proposal::Reject(format!(
                    "all inputs are constant but the reference backend has no {} kernel",
                    node.op_type
                ))
            }
            Ok(r) => r,
        };
        let outs = match outs {
            Ok(o) => o,
            Err(e) if e.contains("byte limit") => {
                return Proposal::Reject(format!(
                    "output is over the {cap} element folding limit: {e}"
                ))
            }
            Err(e) => return Proposal::Reject(format!("evaluation failed: {e}")),
        };
        if outs.len() < node.outputs.len() {
            return Proposal::Reject(format!(
                "kernel gives {} outputs, the node names {}",
                outs.len(),
                node.outputs.len()
            ));
        }
        if let Some(big) = outs.iter().find(|t| t.len() as u64 > cap) {
            return Proposal::Reject(format!(
                "output has {} elements, over the {cap} folding limit",
                big.len()
            ));
        }
        let initializers = node
            .outputs
            .iter()
            .zip(&outs)
            .filter_map(|(slot, t)| slot.map(|v| (v, from_tensor(g.name(v), t))))
            .collect();
        Proposal::Rewrite(Patch {
            remove: vec![id],
            initializers,
            ..Default::default()
        })
    }
}
