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
//! Guards: the output is float32 or float16; the constant is a float32 or float16 constant that
//! varies at most along the channel axis (axis 1) of the node's output once broadcast, and has no
//! more dimensions than that output, so the Mul/Add neither broadcasts the output to a larger
//! shape nor mixes channels; the Conv's W (of the output's type) and B, or the
//! BatchNormalization's scale and B, are float constants with one value per channel; the
//! BatchNormalization is in inference mode and per channel; the output feeds only the Mul/Add and
//! is not a graph output. A Mul/Add whose other operand is computed at run time (a residual
//! Add's shortcut) is another pattern, not reported as a refusal. Values are computed in float64 and rounded once to each parameter's
//! type (parity within that type's rounding of the two-step result).

use crate::ir::{Model, NodeId};
use crate::onnx::tensor::from_tensor;
use crate::passes::fuse_conv_batchnorm::{float_constant, inference_norm, rounded, Floats};
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
    // An operand computed at run time (a residual Add's shortcut, a gate) is another pattern,
    // not a near miss of this one: nothing to report.
    if constant_value(model, c_id).is_none() {
        return Ok(None);
    }
    if host.outputs.iter().skip(1).any(Option::is_some) {
        return Err(format!("{what} has more than one output"));
    }
    sole_consumer(g, t).map_err(|why| format!("{what} output {why}"))?;
    let dt = g.value(t).ty.dtype;
    if !matches!(dt, Some(DType::F32 | DType::F16)) {
        return Err(format!(
            "'{}' is not known to be float32 or float16",
            g.name(t)
        ));
    }
    let c = float_constant(
        model,
        Some(c_id),
        &format!("{}'s other operand", op.op_type),
    )?;
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
    // Per-channel parameters `p` (one value per channel) replaced by `f(p, k)`, in p's type.
    let redo = |patch: &mut Patch, p: &Floats, k: &[f64], suffix: &str, f: Combine| {
        let v: Vec<f64> = p.values.iter().zip(k).map(|(&a, &b)| f(a, b)).collect();
        rounded(v, &p.shape, p.dtype).map(|t| new_input(patch, suffix, t))
    };
    let scale: Combine = |a, b| a * b;
    let shift: Combine = |a, b| a + b;
    match kind {
        Host::Conv => {
            let w = float_constant(model, host.input(1), "Conv's W")?;
            if Some(w.dtype) != dt {
                return Err(format!("Conv's W is {}, its output {dt:?}", w.dtype));
            }
            let m = w.shape.first().copied().unwrap_or(0);
            let k = per_channel(&c, w.shape.len(), m)?;
            let b = match host.input(2) {
                Some(b) => float_constant(model, Some(b), "Conv's B")?,
                None => Floats {
                    values: vec![0.0; m],
                    shape: vec![m],
                    dtype: w.dtype,
                },
            };
            if b.values.len() != m {
                return Err(format!(
                    "Conv's B has {} values for {m} channels",
                    b.values.len()
                ));
            }
            node.inputs.resize(3, None);
            if mul {
                let per = (w.values.len() / m.max(1)).max(1);
                let kw: Vec<f64> = (0..w.values.len()).map(|i| k[i / per]).collect();
                node.inputs[1] = Some(redo(&mut patch, &w, &kw, "folded_W", scale)?);
                if host.input(2).is_some() {
                    node.inputs[2] = Some(redo(&mut patch, &b, &k, "folded_B", scale)?);
                }
            } else {
                node.inputs[2] = Some(redo(&mut patch, &b, &k, "folded_B", shift)?);
            }
        }
        Host::BatchNorm => {
            inference_norm(model, host)?;
            let rank = g
                .value(t)
                .ty
                .rank()
                .ok_or("the BatchNormalization output's rank is unknown")?;
            let gamma = float_constant(model, host.input(1), "scale")?;
            let beta = float_constant(model, host.input(2), "B")?;
            let m = gamma.values.len();
            if beta.values.len() != m {
                return Err(format!("B has {} values, scale {m}", beta.values.len()));
            }
            let k = per_channel(&c, rank, m)?;
            if mul {
                node.inputs[1] = Some(redo(&mut patch, &gamma, &k, "folded_scale", scale)?);
                node.inputs[2] = Some(redo(&mut patch, &beta, &k, "folded_B", scale)?);
            } else {
                node.inputs[2] = Some(redo(&mut patch, &beta, &k, "folded_B", shift)?);
            }
        }
    }
    patch.add.push(node);
    Ok(Some(patch))
}

/// How a parameter and the constant's value for its channel combine (a scale, a shift).
type Combine = fn(f64, f64) -> f64;

/// The constant `c`, broadcast against an output of `rank` dims with `m` channels on axis 1, as
/// one value per channel; an error when it would vary along another axis or add dimensions.
fn per_channel(c: &Floats, rank: usize, m: usize) -> Result<Vec<f64>, String> {
    let shape = &c.shape;
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
    Ok(if c.values.len() == m {
        c.values.clone()
    } else {
        vec![c.values[0]; m]
    })
}
