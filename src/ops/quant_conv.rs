//! Quantized convolutions (ai.onnx): integer inputs with zero points, Conv's geometry.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | ConvInteger | 10 | Conv's: `auto_pad` (NOTSET), `dilations` (1s), `group` (1), `kernel_shape` (W's dims), `pads` (0s), `strides` (1s) | x [N, C, D...]: int8/uint8, w [M, C/group, k...]: int8/uint8, x_zero_point? (x's type, scalar), w_zero_point? (w's type, scalar or [M]) -> y: int32 |
//! | QLinearConv | 10 | Conv's | x, x_scale (scalar), x_zero_point (scalar), w, w_scale (scalar or [M]), w_zero_point (scalar or [M]), y_scale (scalar), y_zero_point (scalar), B? (int32 [M]) -> y (y_zero_point's type) |
//!
//! Both are `conv(x - x_zero_point, w - w_zero_point[m])`, padding standing for x's zero point
//! (a centered 0); QLinearConv then adds B and requantizes: `y = saturate(round_half_even(acc ·
//! (x_scale · w_scale[m] / y_scale)) + y_zero_point)`, the multiplier in float32 and its product
//! with the exact integer sum in float64 (as ONNX's reference does). The convolution is Conv's
//! float64 kernel (conv.rs) on the centered values: every integer sum of 8-bit products is exact
//! there. Neither op has had another version.

use ndarray::{ArrayD, IxDyn};

use super::common::{input, opt_input};
use super::conv::Conv;
use super::quant::{int8_zero_points, int_tensor, qrange, scales};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

#[derive(Debug)]
pub struct ConvInteger {
    pub conv: Conv,
}

impl ConvInteger {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ConvInteger {
            conv: Conv::read(a)?,
        }))
    }
}

impl Op for ConvInteger {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(DType::I32),
            shape: self.conv.infer_shape(cx, 0, 1),
        }]
    }
    fn kernel(&self) -> Kernel {
        conv_integer
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct QLinearConv {
    pub conv: Conv,
}

impl QLinearConv {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(QLinearConv {
            conv: Conv::read(a)?,
        }))
    }
}

impl Op for QLinearConv {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(7).dtype,
            shape: self.conv.infer_shape(cx, 0, 3),
        }]
    }
    fn kernel(&self) -> Kernel {
        qlinear_conv
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

/// An int8/uint8 tensor minus its zero point, as float64: the zero point a scalar, or (`per`)
/// one value per slice of the first axis (w's output channels).
fn center(op: &str, what: &str, x: &Tensor, zp: Option<&Tensor>, per: bool) -> R<Tensor> {
    let sh = x.shape();
    let m = sh.first().copied().unwrap_or(1);
    let z = int8_zero_points(op, what, x, zp)?;
    let per_m = z.len() != 1;
    if per_m && !(per && z.len() == m && zp.is_some_and(|z| z.shape().len() == 1)) {
        return Err(format!(
            "{op}: {what}'s zero point has shape {:?}; want a scalar{}",
            zp.map(|z| z.shape().to_vec()).unwrap_or_default(),
            if per {
                format!(" or [{m}] (one per output channel)")
            } else {
                String::new()
            }
        ));
    }
    let inner = x.len().checked_div(m).unwrap_or(1).max(1);
    let v: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| v - z[if per_m { i / inner } else { 0 }])
        .collect();
    ArrayD::from_shape_vec(IxDyn(sh), v)
        .map(Tensor::F64)
        .map_err(|e| format!("{op}: {e}"))
}

/// The exact integer convolution of centered x and w (float64 values).
fn accumulate(
    ctx: &KernelCtx,
    op: &'static str,
    conv: &Conv,
    x: Tensor,
    w: Tensor,
) -> R<ArrayD<f64>> {
    match conv.run(ctx, op, &[Some(&x), Some(&w)])?.into_iter().next() {
        Some(Tensor::F64(y)) => Ok(y),
        _ => Err(format!("{op}: internal: Conv gave no float64 result")),
    }
}

fn conv_integer(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ConvInteger";
    let p = ctx.attrs::<ConvInteger>()?;
    let x = center(OP, "x", input(OP, inputs, 0)?, opt_input(inputs, 2), false)?;
    let w = center(OP, "w", input(OP, inputs, 1)?, opt_input(inputs, 3), true)?;
    let y = accumulate(ctx, OP, &p.conv, x, w)?;
    Ok(vec![Tensor::I32(y.mapv(|v| v as i32))])
}

fn qlinear_conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "QLinearConv";
    let p = ctx.attrs::<QLinearConv>()?;
    let (xt, wt) = (input(OP, inputs, 0)?, input(OP, inputs, 3)?);
    let m = wt.shape().first().copied().unwrap_or(0);
    let sx = scales(OP, "x_scale", input(OP, inputs, 1)?, 1)?;
    let sw = scales(OP, "w_scale", input(OP, inputs, 4)?, m)?;
    let sy = scales(OP, "y_scale", input(OP, inputs, 6)?, 1)?;
    let yz = input(OP, inputs, 7)?;
    let t = yz.dtype();
    let (lo, hi) = qrange(OP, t)?;
    if yz.len() != 1 {
        return Err(format!(
            "{OP}: y_zero_point must be a scalar, got shape {:?}",
            yz.shape()
        ));
    }
    let yz = yz.to_f64_vec()[0];
    let bias = match opt_input(inputs, 8) {
        None => None,
        Some(b) if b.dtype() == DType::I32 && b.shape() == [m] => Some(b.to_f64_vec()),
        Some(b) => {
            return Err(format!(
                "{OP}: B must be int32 of shape [{m}], got {} {:?}",
                b.dtype(),
                b.shape()
            ))
        }
    };
    let x = center(OP, "x", xt, Some(input(OP, inputs, 2)?), false)?;
    let w = center(OP, "w", wt, Some(input(OP, inputs, 5)?), true)?;
    let acc = accumulate(ctx, OP, &p.conv, x, w)?;
    let shape = acc.shape().to_vec();
    // Y [N, M, spatial...]: the channel of element i is (i / spatial) % M.
    let spatial: usize = shape.iter().skip(2).product::<usize>().max(1);
    let out = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = (i / spatial) % m.max(1);
            let mult = sx[0] * sw[if sw.len() == 1 { 0 } else { c }] / sy[0];
            let v = v + bias.as_ref().map_or(0.0, |b| b[c]);
            ((v * mult as f64).round_ties_even() + yz).clamp(lo, hi)
        })
        .collect();
    Ok(vec![int_tensor(OP, &shape, out, t)?])
}

#[cfg(test)]
#[path = "quant_conv_tests.rs"]
mod tests;
