//! A per-channel Mul or Add by a constant after a Conv (or an inference BatchNormalization)
//! folded into that node's parameters. Caffe2-era exports (densenet121, inception_v2) follow
//! every BatchNormalization with such a scale and shift; once `conv_batchnorm` has folded the
//! BatchNormalization they sit between the Conv and its Relu and keep `conv_activation` out.
//!
//! ```text
//!   before                                        after
//!
//!   X, W, B ─► Conv ─► t ─► Mul(t, c) ─► y        X, W·c, B·c ─► Conv ─► y
//!   X, W, B ─► Conv ─► t ─► Add(t, d) ─► y        X, W, B + d ─► Conv ─► y
//!   X ─► BatchNormalization(s, b, μ, σ²) ─► Mul(·, c) ─► y
//!                                        X ─► BatchNormalization(s·c, b·c, μ, σ²) ─► y
//!   X ─► BatchNormalization(s, b, μ, σ²) ─► Add(·, d) ─► y
//!                                        X ─► BatchNormalization(s, b + d, μ, σ²) ─► y
//! ```
//! (W·c scales output channel m of W by c[m]; B is 0 when the Conv has none.) Exact in real
//! arithmetic: both nodes are affine per output channel.
//!
//! Guards: the constant is float32 and varies at most along the channel axis (axis 1) of the
//! node's output once broadcast, and has no more dimensions than that output, so the Mul/Add
//! neither broadcasts the output to a larger shape nor mixes channels; the Conv's W and B (or the
//! BatchNormalization's scale and B) are float32 constants with one value per channel; the
//! BatchNormalization is in inference mode and per channel; the output feeds only the Mul/Add and
//! is not a graph output. Values are computed in float64 and rounded once (parity within float32
//! rounding of the two-step result).

use crate::ir::{Model, NodeId, ValueId};
use crate::onnx::tensor::from_tensor;
use crate::ops::norm::BatchNormalization;
use crate::passes::matchers::{constant_value, fresh_node_name, other_input, sole_consumer};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};
use crate::tensor::DType;
use crate::Tensor;

pub struct FuseConvAffine;

impl Rule for FuseConvAffine {
    fn name(&self) -> &'static str {
        "conv_affine"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Mul", "Add"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        fold(model, id).into()
    }
}

/// Which node takes the scale or shift.
enum Host {
    Conv,
    BatchNorm,
}

fn fold(model: &Model, id: NodeId) -> Result<Option<Patch>, String> {
    let g = &model.graph;
    let op = g.node(id);
    if !op.is_onnx_domain() || op.inputs.len() != 2 {
        return Ok(None);
    }
    let mul = op.op_type == "Mul";
    let Some(y) = op.output(0) else {
        return Ok(None);
    };
    // The operand computed by a Conv or a BatchNormalization; the other must be the constant.
    let Some((t, host_id, host, kind)) =
        [op.input(0), op.input(1)]
            .into_iter()
            .flatten()
            .find_map(|t| {
                let p = g.producer(t)?;
                let n = g.node(p);
                let kind = match n.op_type.as_str() {
                    "Conv" if n.is_onnx_domain() => Host::Conv,
                    "BatchNormalization" if n.is_onnx_domain() => Host::BatchNorm,
                    _ => return None,
                };
                Some((t, p, n, kind))
            })
    else {
        return Ok(None);
    };
    let what = match kind {
        Host::Conv => "Conv",
        Host::BatchNorm => "BatchNormalization",
    };
    let c_id = other_input(op, t).ok_or("not a binary op")?;
    if c_id == t {
        return Err(format!("{} reads the {what} output twice", op.op_type));
    }
    if host.outputs.iter().skip(1).any(Option::is_some) {
        return Err(format!("{what} has more than one output"));
    }
    sole_consumer(g, t).map_err(|why| format!("{what} output {why}"))?;
    if g.value(t).ty.dtype != Some(DType::F32) {
        return Err(format!("'{}' is not known to be float32", g.name(t)));
    }
    let c = match constant_value(model, c_id).as_deref() {
        Some(Tensor::F32(c)) => c.clone(),
        _ => {
            return Err(format!(
                "{}'s other operand '{}' is not a float32 constant",
                op.op_type,
                g.name(c_id)
            ))
        }
    };
    let f32_constant = |v: Option<ValueId>, what: &str| -> Result<ndarray::ArrayD<f32>, String> {
        let v = v.ok_or(format!("{what} is absent"))?;
        match constant_value(model, v).as_deref() {
            Some(Tensor::F32(a)) => Ok(a.clone()),
            _ => Err(format!("{what} '{}' is not a float32 constant", g.name(v))),
        }
    };
    let mut patch = Patch {
        remove: vec![host_id, id],
        ..Default::default()
    };
    let base = g.name(y).to_string();
    let new_input = |patch: &mut Patch, suffix: &str, t: Tensor| {
        let name = g.fresh_name(&format!("{base}_{suffix}"));
        patch.new_initializer(&name, from_tensor(&name, &t))
    };
    let mut node = NewNode::new(&host.op_type, "");
    node.name = fresh_node_name(g, &format!("{base}_{what}"));
    node.outputs = vec![Some(y.into())];
    node.attributes = host.attributes().to_vec();
    node.inputs = host.inputs.iter().map(|v| v.map(Into::into)).collect();
    match kind {
        Host::Conv => {
            let w = f32_constant(host.input(1), "Conv's W")?;
            let m = w.shape().first().copied().unwrap_or(0);
            let k = per_channel(&c, w.ndim(), m)?;
            let b = match host.input(2) {
                Some(b) => f32_constant(Some(b), "Conv's B")?
                    .iter()
                    .map(|&v| v as f64)
                    .collect(),
                None => vec![0.0; m],
            };
            if b.len() != m {
                return Err(format!("Conv's B has {} values for {m} channels", b.len()));
            }
            node.inputs.resize(3, None);
            if mul {
                let mut w2 = w;
                let per = (w2.len() / m.max(1)).max(1);
                let slice = w2.as_slice_mut().ok_or("W is not contiguous")?;
                for (ch, chunk) in slice.chunks_exact_mut(per).enumerate() {
                    chunk
                        .iter_mut()
                        .for_each(|v| *v = (*v as f64 * k[ch]) as f32);
                }
                node.inputs[1] = Some(new_input(&mut patch, "folded_W", Tensor::F32(w2)));
                if host.input(2).is_some() {
                    let b2 = (0..m).map(|ch| b[ch] * k[ch]).collect();
                    node.inputs[2] = Some(new_input(&mut patch, "folded_B", vector(b2)));
                }
            } else {
                let b2 = (0..m).map(|ch| b[ch] + k[ch]).collect();
                node.inputs[2] = Some(new_input(&mut patch, "folded_B", vector(b2)));
            }
        }
        Host::BatchNorm => {
            let attrs = crate::ops::attrs_of::<BatchNormalization>(model, host)
                .ok_or("BatchNormalization's attributes do not parse")?;
            if attrs.training(host) || !attrs.spatial {
                return Err("BatchNormalization is in training mode or not per channel".into());
            }
            let rank = g
                .value(t)
                .ty
                .rank()
                .ok_or("the BatchNormalization output's rank is unknown")?;
            let scale = f32_constant(host.input(1), "scale")?;
            let bias = f32_constant(host.input(2), "B")?;
            let m = scale.len();
            if bias.len() != m {
                return Err(format!("B has {} values, scale {m}", bias.len()));
            }
            let k = per_channel(&c, rank, m)?;
            let scale: Vec<f64> = scale.iter().map(|&v| v as f64).collect();
            let bias: Vec<f64> = bias.iter().map(|&v| v as f64).collect();
            if mul {
                let s2 = (0..m).map(|ch| scale[ch] * k[ch]).collect();
                node.inputs[1] = Some(new_input(&mut patch, "folded_scale", vector(s2)));
                let b2 = (0..m).map(|ch| bias[ch] * k[ch]).collect();
                node.inputs[2] = Some(new_input(&mut patch, "folded_B", vector(b2)));
            } else {
                let b2 = (0..m).map(|ch| bias[ch] + k[ch]).collect();
                node.inputs[2] = Some(new_input(&mut patch, "folded_B", vector(b2)));
            }
        }
    }
    patch.add.push(node);
    Ok(Some(patch))
}

fn vector(v: Vec<f64>) -> Tensor {
    let v: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
    Tensor::F32(ndarray::Array1::from(v).into_dyn())
}

/// The constant `c`, broadcast against an output of `rank` dims with `m` channels on axis 1, as
/// one value per channel; an error when it would vary along another axis or add dimensions.
pub(crate) fn per_channel(
    c: &ndarray::ArrayD<f32>,
    rank: usize,
    m: usize,
) -> Result<Vec<f64>, String> {
    let shape = c.shape();
    if shape.len() > rank || rank < 2 {
        return Err(format!(
            "the constant's shape {shape:?} has more dimensions than the output's {rank}"
        ));
    }
    let lead = rank - shape.len();
    for (i, &d) in shape.iter().enumerate() {
        let axis = lead + i;
        if d != 1 && !(axis == 1 && d == m) {
            return Err(format!(
                "the constant's shape {shape:?} is not one value per channel (axis 1 of {m})"
            ));
        }
    }
    let values: Vec<f64> = c.iter().map(|&v| v as f64).collect();
    Ok(if values.len() == m {
        values
    } else {
        vec![values[0]; m]
    })
}
