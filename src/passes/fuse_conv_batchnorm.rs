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
//! not a graph output; float32. The folded values are computed in float64 and rounded once, so
//! they differ from the two-step result by rounding only (parity within 1e-5 relative).

use crate::ir::{Model, NodeId};
use crate::onnx::tensor::from_tensor;
use crate::ops::norm::BatchNormalization;
use crate::passes::matchers::{
    constant_value, fresh_node_name, produced_by, require_f32, sole_consumer,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
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
    require_f32(g, t)?;
    let constant = |i: Option<crate::ir::ValueId>, what: &str| -> Result<Vec<f64>, String> {
        let v = i.ok_or(format!("{what} is absent"))?;
        match constant_value(model, v).as_deref() {
            Some(t @ Tensor::F32(_)) => Ok(t.to_f64_vec()),
            _ => Err(format!("{what} '{}' is not a float32 constant", g.name(v))),
        }
    };
    let w_id = conv.input(1).ok_or("Conv has no W")?;
    let w = match constant_value(model, w_id).as_deref() {
        Some(Tensor::F32(w)) => w.clone(),
        _ => {
            return Err(format!(
                "Conv's W '{}' is not a float32 constant",
                g.name(w_id)
            ))
        }
    };
    let m = w.shape().first().copied().unwrap_or(0);
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
    let mut w2 = w;
    let per = w2.len() / m.max(1);
    for (c, chunk) in w2
        .as_slice_mut()
        .ok_or("W is not contiguous")?
        .chunks_exact_mut(per.max(1))
        .enumerate()
    {
        chunk
            .iter_mut()
            .for_each(|v| *v = (*v as f64 * s[c]) as f32);
    }
    let b2: Vec<f32> = (0..m)
        .map(|c| ((conv_b[c] - mean[c]) * s[c] + bias[c]) as f32)
        .collect();
    let b2 = Tensor::F32(ndarray::Array1::from(b2).into_dyn());

    let mut patch = Patch {
        remove: vec![conv_id, id],
        ..Default::default()
    };
    let base = g.name(y).to_string();
    let name = g.fresh_name(&format!("{base}_folded_W"));
    let wv = patch.new_initializer(&name, from_tensor(&name, &Tensor::F32(w2)));
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
