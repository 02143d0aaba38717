//! BatchNormalization (inference) of a Conv's output folded into the Conv's weights and bias:
//! `BN(Conv(X, W, B))` is `Conv(X, W', B')` with, per output channel m,
//! `s[m] = scale[m] / sqrt(var[m] + epsilon)`, `W'[m, ...] = W[m, ...] · s[m]` and
//! `B'[m] = (B[m] - mean[m]) · s[m] + bias[m]` (B = 0 when the Conv has none).
//!
//! ```text
//!   before                                                  after
//!
//!   X, W, B ─► Conv ─► t ─► BatchNormalization ─► y          X, W', B' ─► Conv ─► y
//!                           ▲ scale, bias, mean, var
//! ```
//! Guards: inference mode (no training outputs, `training_mode` 0) and per-channel statistics
//! (`spatial`); W, B (if any) and the four BatchNormalization inputs are constants of the right
//! lengths ([M], M = W's first dim); Conv's output is read only by the BatchNormalization and is
//! not a graph output; float32 or float16 (W and B of the data's type; the statistics float32 or
//! float16). The folded values are computed in float64 and rounded once to the data's type, so
//! they differ from the two-step result by rounding only (parity within 1e-5 relative in
//! float32).

use crate::ir::{Model, NodeId};
use crate::onnx::tensor::from_tensor;
use crate::ops::norm::BatchNormalization;
use crate::passes::matchers::{
    constant_value, fresh_node_name, produced_by, require_f32_or_f16, sole_consumer,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;
use crate::Tensor;

pub struct FuseConvBatchNorm;

impl Rule for FuseConvBatchNorm {
    fn name(&self) -> &'static str {
        "conv_batchnorm"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["BatchNormalization"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        fold(model, id).into()
    }
}

fn fold(model: &Model, id: NodeId) -> Result<Option<Patch>, String> {
    let g = &model.graph;
    let bn = g.node(id);
    if !bn.is_onnx_domain() || bn.op_type != "BatchNormalization" {
        return Ok(None);
    }
    let (Some(t), Some(y)) = (bn.input(0), bn.output(0)) else {
        return Ok(None);
    };
    let Some((conv_id, conv)) = produced_by(g, t, "Conv") else {
        return Ok(None);
    };
    let attrs = crate::ops::attrs_of::<BatchNormalization>(model, bn)
        .ok_or("BatchNormalization's attributes do not parse")?;
    if attrs.training(bn) || !attrs.spatial {
        return Err("BatchNormalization is in training mode or not per channel".into());
    }
    sole_consumer(g, t).map_err(|why| format!("Conv output {why}"))?;
    let dt = require_f32_or_f16(g, t)?;
    // The statistics may be float32 beside float16 data (BatchNormalization's T1/T2).
    let constant = |i: Option<crate::ir::ValueId>, what: &str| -> Result<Vec<f64>, String> {
        let v = i.ok_or(format!("{what} is absent"))?;
        match constant_value(model, v).as_deref() {
            Some(t) if matches!(t.dtype(), DType::F32 | DType::F16) => Ok(t.to_f64_vec()),
            _ => Err(format!("{what} '{}' is not a float constant", g.name(v))),
        }
    };
    let w_id = conv.input(1).ok_or("Conv has no W")?;
    let (w, w_shape) = match constant_value(model, w_id).as_deref() {
        Some(w) if w.dtype() == dt => (w.to_f64_vec(), w.shape().to_vec()),
        _ => {
            return Err(format!(
                "Conv's W '{}' is not a {dt} constant",
                g.name(w_id)
            ))
        }
    };
    let m = w_shape.first().copied().unwrap_or(0);
    let per_channel = |v: Vec<f64>, what: &str| {
        if v.len() == m {
            Ok(v)
        } else {
            Err(format!(
                "{what} has {} values, W has {m} output channels",
                v.len()
            ))
        }
    };
    let conv_b = match conv.input(2) {
        Some(b) => per_channel(constant(Some(b), "Conv's B")?, "Conv's B")?,
        None => vec![0.0; m],
    };
    let stat = |i: usize, what: &str| per_channel(constant(bn.input(i), what)?, what);
    let (scale, bias) = (stat(1, "scale")?, stat(2, "B")?);
    let (mean, var) = (stat(3, "input_mean")?, stat(4, "input_var")?);
    let eps = attrs.epsilon as f64;
    let s: Vec<f64> = (0..m).map(|c| scale[c] / (var[c] + eps).sqrt()).collect();
    let per = (w.len() / m.max(1)).max(1);
    let w2: Vec<f64> = w.iter().enumerate().map(|(i, &v)| v * s[i / per]).collect();
    let b2: Vec<f64> = (0..m)
        .map(|c| (conv_b[c] - mean[c]) * s[c] + bias[c])
        .collect();
    // Rounded once, to the data's type.
    let typed = |v: Vec<f64>, shape: &[usize]| {
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v)
            .ok()
            .and_then(|a| Tensor::F64(a).cast(dt))
            .ok_or("the folded values do not fit W's shape")
    };
    let (w2, b2) = (typed(w2, &w_shape)?, typed(b2, &[m])?);

    let mut patch = Patch {
        remove: vec![conv_id, id],
        ..Default::default()
    };
    let base = g.name(y).to_string();
    let name = g.fresh_name(&format!("{base}_folded_W"));
    let wv = patch.new_initializer(&name, from_tensor(&name, &w2));
    let name = g.fresh_name(&format!("{base}_folded_B"));
    let bv = patch.new_initializer(&name, from_tensor(&name, &b2));
    let mut folded = NewNode::new("Conv", "");
    folded.name = fresh_node_name(g, &format!("{base}_Conv"));
    folded.inputs = vec![conv.input(0).map(Into::into), Some(wv), Some(bv)];
    folded.outputs = vec![Some(y.into())];
    folded.attributes = conv.attributes().to_vec();
    patch.add.push(folded);
    Ok(Some(patch))
}
