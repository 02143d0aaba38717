//! Conv followed by an activation, directly or through a residual Add → com.microsoft.FusedConv
//! (onnxruntime's contrib op: Conv's inputs and attributes, `activation` with its
//! `activation_params`, and an optional Z added before the activation). A CNN's Conv + Relu,
//! MobileNetV3's squeeze-excitation Conv + HardSigmoid, ResNet's Conv + Add(shortcut) + Relu
//! (or Sum(conv, shortcut), as opset-9 ResNets write it).
//!
//! ```text
//!   before                                        after
//!
//!   X, W, B ─► Conv ─► t ─► Relu ─► y             X, W, B ─► FusedConv(activation = "Relu") ─► y
//!
//!   X, W, B ─► Conv ─► t ─► Add ─► s ─► Relu ─► y X, W, B, Z ─► FusedConv(Z, "Relu") ─► y
//!                           ▲
//!                           Z (Y's shape exactly)
//! ```
//! Guards: the activation is one onnxruntime's FusedConv takes: Relu, Tanh, Sigmoid, LeakyRelu
//! (alpha), HardSigmoid (alpha, beta) or Clip with constant bounds (attributes before opset 11,
//! constant inputs from 11; an absent bound is ±f32::MAX); Conv's output (and the Add's) is read
//! only by the next node and is not a graph output; float32 (onnxruntime's FusedConv kernel is
//! float only); Z has the Conv output's shape, every dim the same known size or symbol (FusedConv
//! adds Z element by element, no broadcasting). HardSwish is not in onnxruntime's list, so it
//! stays a node of its own.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::Dim;
use crate::ir::{attr, Graph, Model, Node, NodeId, ValueId};
use crate::ops::activation::{Act, FloatFn};
use crate::passes::matchers::{
    clip_bounds, fresh_node_name, other_input, produced_by, require_f32, sole_consumer,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

/// The activations onnxruntime's FusedConv takes (`activation` attribute values).
pub const ACTIVATIONS: &[&str] = &[
    "Relu",
    "Tanh",
    "Sigmoid",
    "LeakyRelu",
    "HardSigmoid",
    "Clip",
];

pub struct FuseConvActivation;

impl Rule for FuseConvActivation {
    fn name(&self) -> &'static str {
        "conv_activation"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(ACTIVATIONS)
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let act = g.node(id);
        if !act.is_onnx_domain() || !ACTIVATIONS.contains(&act.op_type.as_str()) {
            return Proposal::NoMatch;
        }
        let (Some(t), Some(y)) = (act.input(0), act.output(0)) else {
            return Proposal::NoMatch;
        };
        // Conv right before the activation, or a residual Add of a Conv's output and Z.
        let (conv_id, conv, add) = match produced_by(g, t, "Conv") {
            Some((c, conv)) => (c, conv, None),
            None => match residual(g, t) {
                Some(Ok(found)) => found,
                Some(Err(why)) => return Proposal::Reject(why),
                None => return Proposal::NoMatch,
            },
        };
        if let Err(why) = sole_consumer(g, t) {
            return Proposal::Reject(format!(
                "{} output {why}",
                if add.is_some() { "Add" } else { "Conv" }
            ));
        }
        if let Err(why) = require_f32(g, t) {
            return Proposal::Reject(why);
        }
        let params = match activation_params(model, act) {
            Ok(p) => p,
            Err(why) => return Proposal::Reject(why),
        };
        let mut fused = Node::new("FusedConv", MS_DOMAIN);
        fused.name = fresh_node_name(g, &format!("{}_FusedConv", g.name(y)));
        fused.inputs = conv.inputs.clone();
        // No empty trailing slot: onnxruntime-web's WebGPU Conv takes any third input as the
        // bias (a missing one failed its run), so B's slot is written only before a Z.
        while fused.inputs.last() == Some(&None) {
            fused.inputs.pop();
        }
        let mut remove = vec![conv_id, id];
        if let Some((add_id, z)) = add {
            fused.inputs.resize(3, None);
            fused.inputs.push(Some(z));
            remove.push(add_id);
        }
        fused.outputs = vec![Some(y)];
        fused.set_attributes(conv.attributes().to_vec());
        fused.set_attr(attr::string("activation", &act.op_type));
        if !params.is_empty() {
            fused.set_attr(attr::floats("activation_params", &params));
        }
        Proposal::Rewrite(Patch {
            remove,
            add: vec![fused.into()],
            opsets: vec![(MS_DOMAIN.to_string(), 1)],
            ..Default::default()
        })
    }
}

/// `s = Add(Conv(..), Z)` (either order; or a Sum of the two): the Conv, the Add and Z; None
/// when `s` is no such Add, Err when it is one that cannot fuse.
#[allow(clippy::type_complexity)]
fn residual(
    g: &Graph,
    s: ValueId,
) -> Option<Result<(NodeId, &Node, Option<(NodeId, ValueId)>), String>> {
    // A two-input Sum (the residual of opset-9 ResNets) is the same Add.
    let (add_id, add) = produced_by(g, s, "Add")
        .or_else(|| produced_by(g, s, "Sum").filter(|(_, n)| n.inputs.len() == 2))?;
    let (conv_id, conv, z) = add.inputs.iter().flatten().find_map(|&v| {
        let (c, conv) = produced_by(g, v, "Conv")?;
        Some((c, conv, other_input(add, v)?))
    })?;
    let t = conv.output(0)?;
    Some((|| {
        if z == t {
            return Err("the residual Add adds the Conv output to itself".into());
        }
        sole_consumer(g, t).map_err(|why| format!("Conv output {why}"))?;
        require_f32(g, t)?;
        let (ts, zs) = (&g.value(t).ty.shape, &g.value(z).ty.shape);
        let proved = |s: &Option<Vec<Dim>>| {
            s.as_ref()
                .is_some_and(|s| s.iter().all(|d| !matches!(d, Dim::Unknown)))
        };
        if !(proved(ts) && ts == zs) {
            return Err(format!(
                "the residual '{}' is not proved to have the Conv output's shape ({:?} vs {:?}): FusedConv's Z does not broadcast",
                g.name(z),
                zs,
                ts
            ));
        }
        Ok((conv_id, conv, Some((add_id, z))))
    })())
}

/// FusedConv's `activation_params` for activation node `act`, read through the ops layer.
fn activation_params(model: &Model, act: &Node) -> Result<Vec<f32>, String> {
    let name = act.op_type.as_str();
    match name {
        "Relu" | "Tanh" | "Sigmoid" => Ok(Vec::new()),
        "Clip" => {
            let (lo, hi) = clip_bounds(model, act)?;
            Ok(vec![lo, hi])
        }
        _ => match crate::ops::attrs_of::<FloatFn>(model, act).map(|f| f.0) {
            Some(Act::LeakyRelu { alpha }) => Ok(vec![alpha]),
            Some(Act::HardSigmoid { alpha, beta }) => Ok(vec![alpha, beta]),
            _ => Err(format!("{name}'s attributes do not parse")),
        },
    }
}
