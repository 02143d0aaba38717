//! Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | NegativeLogLikelihoodLoss | 12, 13, 22 | `reduction` ("mean"; "none", "sum"), `ignore_index` (none) | input: T [N, C, d1..dk], target: Tind [N, d1..dk], weight?: T [C] -> loss: T |
//! | SoftmaxCrossEntropyLoss | 12, 13 | `reduction` ("mean"; "none", "sum"), `ignore_index` (none) | scores: T [N, C, d1..dk], labels: Tind [N, d1..dk], weights?: T [C] -> output: T, log_prob?: T [N, C, d1..dk] |
//!
//! Both take class scores laid out [N, C, d1..dk] (k >= 0) and one class index per (n, d1..dk)
//! in `target`. NegativeLogLikelihoodLoss's element loss is `-weight[t] * input[n, t, d]` with
//! `t = target[n, d]` (weight 1 without `weight`); SoftmaxCrossEntropyLoss first takes the log
//! softmax of `scores` over C (its optional second output) and then the same loss. A target equal
//! to `ignore_index` contributes 0 and weighs 0; any other target must lie in [0, C). Reduction
//! "none" returns the element losses in target's shape; "sum" their sum; "mean" their sum divided
//! by the sum of the weights of the elements not ignored (the number of them without `weight`;
//! N * d1 * ... * dk when there is neither `weight` nor `ignore_index`) — NaN when that is 0.
//! The versions differ only in the types they admit (13 adds nothing here; NLL 22 bfloat16), so
//! one parse serves all. Arithmetic runs in float64; outputs take the scores' float type.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, opt_input, unsupported_type};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduction {
    None,
    Sum,
    Mean,
}

/// The attributes both losses share.
#[derive(Debug)]
pub struct LossAttrs {
    pub reduction: Reduction,
    pub ignore_index: Option<i64>,
}

impl LossAttrs {
    fn parse(a: &Attrs) -> Result<LossAttrs, String> {
        let reduction = match a.string("reduction")?.as_deref().unwrap_or("mean") {
            "none" => Reduction::None,
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            other => {
                return Err(format!(
                    "attribute 'reduction' must be \"none\", \"sum\" or \"mean\", got \"{other}\""
                ))
            }
        };
        Ok(LossAttrs {
            reduction,
            ignore_index: a.opt_int("ignore_index")?,
        })
    }

    /// The loss's type: the scores' element type; target's shape for "none", else a scalar.
    fn loss_type(&self, cx: &InferCx) -> TensorType {
        let x = cx.input(0);
        let shape = if self.reduction == Reduction::None {
            cx.input(1).shape.or_else(|| {
                x.shape.as_ref().filter(|s| s.len() >= 2).map(|s| {
                    let mut s: Vec<Dim> = s.clone();
                    s.remove(1);
                    s
                })
            })
        } else {
            Some(vec![])
        };
        TensorType {
            dtype: x.dtype,
            shape,
        }
    }
}

#[derive(Debug)]
pub struct NegativeLogLikelihoodLoss(pub LossAttrs);

#[derive(Debug)]
pub struct SoftmaxCrossEntropyLoss(pub LossAttrs);

impl NegativeLogLikelihoodLoss {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(NegativeLogLikelihoodLoss(LossAttrs::parse(a)?)))
    }
}

impl SoftmaxCrossEntropyLoss {
    pub fn parse(a: &Attrs) -> P {
        if a.outputs() > 2 {
            return Err(format!(
                "SoftmaxCrossEntropyLoss has at most 2 outputs, the node names {}",
                a.outputs()
            ));
        }
        Ok(Box::new(SoftmaxCrossEntropyLoss(LossAttrs::parse(a)?)))
    }
}

impl Op for NegativeLogLikelihoodLoss {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![self.0.loss_type(cx)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let p = &ctx.attrs::<NegativeLogLikelihoodLoss>()?.0;
            loss(ctx, inputs, "NegativeLogLikelihoodLoss", p, false)
        }
    }
}

impl Op for SoftmaxCrossEntropyLoss {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![self.0.loss_type(cx), cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let p = &ctx.attrs::<SoftmaxCrossEntropyLoss>()?.0;
            loss(ctx, inputs, "SoftmaxCrossEntropyLoss", p, true)
        }
    }
}

/// Float values of `dtype` (float32 or float64) shaped `shape`.
pub(super) fn float_out(
    op: &str,
    dtype: DType,
    shape: &[usize],
    v: Vec<f64>,
) -> Result<Tensor, String> {
    let r = if dtype == DType::F64 {
        ArrayD::from_shape_vec(IxDyn(shape), v).map(Tensor::F64)
    } else {
        ArrayD::from_shape_vec(IxDyn(shape), v.into_iter().map(|x| x as f32).collect())
            .map(Tensor::F32)
    };
    r.map_err(|e| format!("{op}: {e}"))
}

/// A float32 or float64 input's elements as float64 (row-major), and its type.
pub(super) fn float_in(op: &str, what: &str, t: &Tensor) -> Result<(DType, Vec<f64>), String> {
    match t.dtype() {
        DType::F32 | DType::F64 => Ok((t.dtype(), t.to_f64_vec())),
        d => Err(format!("{op}: '{what}' must be float, got {d}")),
    }
}

fn loss(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    p: &LossAttrs,
    softmax: bool,
) -> KernelResult {
    let x = input(op, inputs, 0)?;
    let (dtype, mut xv) = match x.dtype() {
        DType::F32 | DType::F64 => (x.dtype(), x.to_f64_vec()),
        d => return Err(unsupported_type(op, d)),
    };
    let shape = x.shape();
    if shape.len() < 2 {
        return Err(format!(
            "{op}: input must have rank 2 or more ([N, C, d1, ...]), got shape {shape:?}"
        ));
    }
    let (n, c) = (shape[0], shape[1]);
    let d: usize = shape[2..].iter().product();
    let target = input(op, inputs, 1)?;
    let mut want_t = vec![n];
    want_t.extend_from_slice(&shape[2..]);
    if target.shape() != want_t.as_slice() {
        return Err(format!(
            "{op}: target must have shape {want_t:?} (input's without axis 1), got {:?}",
            target.shape()
        ));
    }
    let tv = target.to_i64_vec().ok_or_else(|| {
        format!(
            "{op}: target must be int32 or int64, got {}",
            target.dtype()
        )
    })?;
    let weight = match opt_input(inputs, 2) {
        None => None,
        Some(w) => {
            if w.shape() != [c] {
                return Err(format!(
                    "{op}: weight must have shape [{c}] (one per class), got {:?}",
                    w.shape()
                ));
            }
            Some(float_in(op, "weight", w)?.1)
        }
    };
    let want_log_prob = softmax && ctx.node.output(1).is_some();
    let loss_shape: &[usize] = if p.reduction == Reduction::None {
        &want_t
    } else {
        &[]
    };
    check_out(ctx, op, loss_shape, 64)?;
    if want_log_prob {
        check_out(ctx, op, shape, 64)?;
    }
    if softmax {
        // log softmax over C, in place: x - max - ln(sum(exp(x - max))).
        for ni in 0..n {
            for di in 0..d {
                let at = |ci: usize| (ni * c + ci) * d + di;
                let max = (0..c)
                    .map(|ci| xv[at(ci)])
                    .fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = (0..c).map(|ci| (xv[at(ci)] - max).exp()).sum();
                let shift = max + sum.ln();
                for ci in 0..c {
                    xv[at(ci)] -= shift;
                }
            }
        }
    }
    let mut losses = Vec::with_capacity(n * d);
    let (mut total, mut weight_sum) = (0.0f64, 0.0f64);
    for ni in 0..n {
        for di in 0..d {
            let t = tv[ni * d + di];
            if p.ignore_index == Some(t) {
                losses.push(0.0);
                continue;
            }
            let ci = usize::try_from(t)
                .ok()
                .filter(|&ci| ci < c)
                .ok_or_else(|| {
                    format!("{op}: target value {t} is outside [0, {c}) and is not ignore_index")
                })?;
            let w = weight.as_ref().map_or(1.0, |w| w[ci]);
            let l = -w * xv[(ni * c + ci) * d + di];
            losses.push(l);
            total += l;
            weight_sum += w;
        }
    }
    let out = match p.reduction {
        Reduction::None => losses,
        Reduction::Sum => vec![total],
        Reduction::Mean => {
            let denom = if weight.is_some() || p.ignore_index.is_some() {
                weight_sum
            } else {
                (n * d) as f64
            };
            vec![total / denom]
        }
    };
    let mut outs = vec![float_out(op, dtype, loss_shape, out)?];
    if softmax && ctx.node.outputs.len() > 1 {
        outs.push(if want_log_prob {
            float_out(op, dtype, shape, xv)?
        } else {
            float_out(op, dtype, &[0], vec![])?
        });
    }
    Ok(outs)
}

#[cfg(test)]
#[path = "loss_tests.rs"]
mod tests;
