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

use crate::ir::{Model, NodeId, ValueId};
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
    let attrs = inference_norm(model, bn)?;
    sole_consumer(g, t).map_err(|why| format!("Conv output {why}"))?;
    let dt = require_f32_or_f16(g, t)?;
    // The statistics may be float32 beside float16 data (BatchNormalization's T1/T2).
    let constant =
        |i: Option<ValueId>, what: &str| float_constant(model, i, what).map(|f| f.values);
    let w_id = conv.input(1).ok_or("Conv has no W")?;
    let Floats {
        values: w,
        shape: w_shape,
        ..
    } = float_constant(model, Some(w_id), "Conv's W")
        .ok()
        .filter(|w| w.dtype == dt)
        .ok_or_else(|| format!("Conv's W '{}' is not a {dt} constant", g.name(w_id)))?;
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
    let (w2, b2) = (rounded(w2, &w_shape, dt)?, rounded(b2, &[m], dt)?);

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

/// The BatchNormalization's attributes when it is in inference mode with per-channel statistics
/// (what a fold into constants needs), else why not.
pub(crate) fn inference_norm<'a>(
    model: &Model,
    bn: &'a crate::ir::Node,
) -> Result<&'a BatchNormalization, String> {
    let attrs = crate::ops::attrs_of::<BatchNormalization>(model, bn)
        .ok_or("BatchNormalization's attributes do not parse")?;
    if attrs.training(bn) || !attrs.spatial {
        return Err("BatchNormalization is in training mode or not per channel".into());
    }
    Ok(attrs)
}

/// A float32 or float16 constant: its values in float64, its shape and its element type.
pub(crate) struct Floats {
    pub values: Vec<f64>,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

/// Input `v` of a fold when it is a float32 or float16 constant (`what` names it in the error).
pub(crate) fn float_constant(
    model: &Model,
    v: Option<ValueId>,
    what: &str,
) -> Result<Floats, String> {
    let v = v.ok_or(format!("{what} is absent"))?;
    match constant_value(model, v).as_deref() {
        Some(a) if matches!(a.dtype(), DType::F32 | DType::F16) => Ok(Floats {
            values: a.to_f64_vec(),
            shape: a.shape().to_vec(),
            dtype: a.dtype(),
        }),
        _ => Err(format!(
            "{what} '{}' is not a float constant",
            model.graph.name(v)
        )),
    }
}

/// Folded values `v` of `shape` as a tensor of `dtype` (each value rounded once).
pub(crate) fn rounded(v: Vec<f64>, shape: &[usize], dtype: DType) -> Result<Tensor, String> {
    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v)
        .ok()
        .and_then(|a| Tensor::F64(a).cast(dtype))
        .ok_or_else(|| format!("the folded values do not fit the shape {shape:?}"))
}
