//! A zero Pad of a Conv's input's spatial axes moved into the Conv's own `pads`.
//!
//! ```text
//!   before                                         after
//!
//!   X ─► Pad(constant 0, spatial) ─► p ─► Conv ─► y     X ─► Conv(pads + Pad's) ─► y
//! ```
//! Guards: mode `constant` with value 0 (an absent constant_value is 0); pads constant,
//! non-negative, zero on the batch and channel axes, and no `axes` input (opset 18) to map;
//! the Conv's `auto_pad` is NOTSET (explicit pads to add to); the Pad's output is read only by the
//! Conv, as its X, and is not a graph output. A Conv reads a padded position as 0, so the sum of
//! both paddings gives the same windows.

use crate::ir::{attr, Model, Node, NodeId};
use crate::ops::conv::Conv;
use crate::ops::pad::{Pad, PadArgs, PadMode};
use crate::passes::matchers::{
    constant_value, fresh_node_name, produced_by, scalar_constant, sole_consumer,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct FusePadConv;

impl Rule for FusePadConv {
    fn name(&self) -> &'static str {
        "pad_conv"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Conv"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        fold(model, id).into()
    }
}

fn fold(model: &Model, id: NodeId) -> Result<Option<Patch>, String> {
    let g = &model.graph;
    let conv = g.node(id);
    if !conv.is_onnx_domain() || conv.op_type != "Conv" {
        return Ok(None);
    }
    let Some(p) = conv.input(0) else {
        return Ok(None);
    };
    let Some((pad_id, pad)) = produced_by(g, p, "Pad") else {
        return Ok(None);
    };
    let pad_attrs =
        crate::ops::attrs_of::<Pad>(model, pad).ok_or("Pad's attributes do not parse")?;
    if pad_attrs.mode != PadMode::Constant {
        return Err("Pad is not in constant mode".into());
    }
    let (pads, value) = match &pad_attrs.args {
        PadArgs::Attributes { pads, value } => (pads.clone(), *value as f64),
        PadArgs::Inputs { axes } => {
            if *axes && pad.input(3).is_some() {
                return Err("Pad has an axes input".into());
            }
            let pads = pad
                .input(1)
                .and_then(|v| constant_value(model, v))
                .map(|t| t.to_f64_vec().iter().map(|&v| v as i64).collect::<Vec<_>>())
                .ok_or("Pad's pads are not a constant")?;
            let value = match pad.input(2) {
                None => 0.0,
                Some(v) => {
                    scalar_constant(model, v).ok_or("Pad's constant_value is not a constant")?
                }
            };
            (pads, value)
        }
    };
    if value != 0.0 {
        return Err(format!("Pad's value is {value}, not 0"));
    }
    let rank = pads.len() / 2;
    if rank < 3 || pads.len() != 2 * rank {
        return Err(format!(
            "Pad's pads {pads:?} are not for an [N, C, spatial...] input"
        ));
    }
    let (begin, end) = pads.split_at(rank);
    if begin[..2].iter().chain(&end[..2]).any(|&v| v != 0) || pads.iter().any(|&v| v < 0) {
        return Err(format!(
            "Pad's pads {pads:?} touch the batch or channel axis, or crop"
        ));
    }
    let n = rank - 2;
    let old = crate::ops::attrs_of::<Conv>(model, conv)
        .ok_or("Conv's attributes do not parse")?
        .explicit_pads(n)
        .ok_or("Conv's auto_pad is set")?;
    sole_consumer(g, p).map_err(|why| format!("Pad output {why}"))?;
    if old.len() != 2 * n {
        return Err(format!("Conv's pads {old:?} are not for {n} spatial axes"));
    }
    let merged: Vec<i64> = (0..2 * n)
        .map(|i| old[i] + if i < n { begin[2 + i] } else { end[2 + i - n] })
        .collect();
    let mut folded = Node::new("Conv", "");
    folded.name = fresh_node_name(g, &format!("{}_padded", conv.label(id)));
    folded.inputs = conv.inputs.clone();
    folded.inputs[0] = pad.input(0);
    folded.outputs = conv.outputs.clone();
    folded.set_attributes(conv.attributes().to_vec());
    folded.set_attr(attr::ints("pads", &merged));
    Ok(Some(Patch {
        remove: vec![pad_id, id],
        add: vec![folded.into()],
        ..Default::default()
    }))
}
