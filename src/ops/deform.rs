//! Deformable convolution: DeformConv.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | DeformConv | 19, 22 | `dilations` (1s), `group` (1), `kernel_shape` (W's), `offset_group` (1), `pads` (0s), `strides` (1s) | X: T [N, C, H, W], W: T [M, C / group, kH, kW], offset: T [N, offset_group * kH * kW * 2, oH, oW], B?: T [M], mask?: T [N, offset_group * kH * kW, oH, oW] -> Y: T [N, M, oH, oW] |
//!
//! DeformConv is Conv whose every tap (a, b) of output (i, j) reads X bilinearly at its usual
//! place plus an offset, (i * stride + a * dilation - pad_begin + offset_y, likewise x),
//! neighbours outside X reading 0, times the mask when given. The offsets (y then x per tap,
//! taps row-major) and mask come per offset group of C / offset_group input channels. Only 2-D
//! is implemented (the spec allows more spatial axes: an error names it). 22 adds types.
//!
//! Arithmetic runs in float64; the output takes X's float type.

use super::common::{check_out, input, opt_input};
use super::loss::{float_in, float_out};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

#[derive(Debug)]
pub struct DeformConv {
    pub dilations: Option<Vec<i64>>,
    pub group: usize,
    pub kernel_shape: Option<Vec<i64>>,
    pub offset_group: usize,
    pub pads: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
}

impl DeformConv {
    pub fn parse(a: &Attrs) -> P {
        let positive = |name: &str| -> Result<usize, String> {
            let v = a.int(name, 1)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| format!("attribute '{name}' must be positive, got {v}"))
        };
        let list = |name: &str, min: i64| -> Result<Option<Vec<i64>>, String> {
            let v = a.ints(name)?;
            match &v {
                Some(l) if l.iter().any(|&x| x < min || x > i32::MAX as i64) => Err(format!(
                    "attribute '{name}' values must lie in [{min}, {}], got {l:?}",
                    i32::MAX
                )),
                _ => Ok(v),
            }
        };
        Ok(Box::new(DeformConv {
            dilations: list("dilations", 1)?,
            group: positive("group")?,
            kernel_shape: list("kernel_shape", 1)?,
            offset_group: positive("offset_group")?,
            pads: list("pads", 0)?,
            strides: list("strides", 1)?,
        }))
    }
}

impl Op for DeformConv {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match (x.shape.as_ref(), cx.input(1).shape, cx.input(2).shape) {
            (Some(xs), Some(ws), Some(os)) if xs.len() == 4 && ws.len() == 4 && os.len() == 4 => {
                Some(vec![
                    xs[0].clone(),
                    ws[0].clone(),
                    os[2].clone(),
                    os[3].clone(),
                ])
            }
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        deform_conv
    }
}

/// X's plane (`h` x `w`) read bilinearly at (y, x); neighbours outside read 0.
fn sample_zero(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let at = |yy: f64, xx: f64| -> f64 {
        if yy >= 0.0 && xx >= 0.0 && yy < h as f64 && xx < w as f64 {
            plane[yy as usize * w + xx as usize]
        } else {
            0.0
        }
    };
    (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x0 + 1.0))
        + ly * ((1.0 - lx) * at(y0 + 1.0, x0) + lx * at(y0 + 1.0, x0 + 1.0))
}

fn deform_conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DeformConv";
    let p = ctx.attrs::<DeformConv>()?;
    let x = input(OP, inputs, 0)?;
    let wt = input(OP, inputs, 1)?;
    let offset = input(OP, inputs, 2)?;
    let (xs, ws, os) = (x.shape(), wt.shape(), offset.shape());
    if xs.len() != 4 {
        return Err(format!(
            "{OP}: only 2-D convolution ([N, C, H, W] input) is implemented, got shape {xs:?}"
        ));
    }
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    if ws.len() != 4 || ws[1].checked_mul(p.group) != Some(c) || ws[0] % p.group != 0 {
        return Err(format!(
            "{OP}: W must be [M, C / group, kH, kW] with M a multiple of group = {} for X of shape {xs:?}, got {ws:?}",
            p.group
        ));
    }
    let (m, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if let Some(k) = &p.kernel_shape {
        if k.len() != 2 || k[0] as usize != kh || k[1] as usize != kw {
            return Err(format!(
                "{OP}: kernel_shape {k:?} differs from W's kernel [{kh}, {kw}]"
            ));
        }
    }
    let two = |v: &Option<Vec<i64>>, what: &str, len: usize, default: i64| {
        let v = v.clone().unwrap_or_else(|| vec![default; len]);
        if v.len() == len {
            Ok(v.into_iter().map(|x| x as usize).collect::<Vec<usize>>())
        } else {
            Err(format!("{OP}: '{what}' must have {len} values, got {v:?}"))
        }
    };
    let st = two(&p.strides, "strides", 2, 1)?;
    let dil = two(&p.dilations, "dilations", 2, 1)?;
    let pads = two(&p.pads, "pads", 4, 0)?;
    let og = p.offset_group;
    if c % og != 0 {
        return Err(format!(
            "{OP}: offset_group {og} does not divide the {c} input channels"
        ));
    }
    // Output size per axis: (in + pads - dilation * (k - 1) - 1) / stride + 1.
    let out_len = |inp: usize, pb: usize, pe: usize, k: usize, d: usize, s: usize| {
        let ek = d.saturating_mul(k.saturating_sub(1)).saturating_add(1);
        inp.checked_add(pb)?
            .checked_add(pe)?
            .checked_sub(ek)
            .map(|r| r / s + 1)
    };
    let (oh, ow) = match (
        out_len(h, pads[0], pads[2], kh, dil[0], st[0]),
        out_len(w, pads[1], pads[3], kw, dil[1], st[1]),
    ) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Err(format!(
                "{OP}: the kernel does not fit the padded input {xs:?}"
            ))
        }
    };
    let k = kh * kw;
    let ogk = og
        .checked_mul(k)
        .filter(|v| v.checked_mul(2).is_some())
        .ok_or_else(|| format!("{OP}: offset_group {og} x {k} taps overflows"))?;
    if os != [n, ogk * 2, oh, ow] {
        return Err(format!(
            "{OP}: offset must have shape [{n}, {}, {oh}, {ow}], got {os:?}",
            ogk * 2
        ));
    }
    let mask = opt_input(inputs, 4);
    if let Some(mk) = mask {
        if mk.shape() != [n, ogk, oh, ow] {
            return Err(format!(
                "{OP}: mask must have shape [{n}, {}, {oh}, {ow}], got {:?}",
                ogk,
                mk.shape()
            ));
        }
    }
    let bias = opt_input(inputs, 3);
    if let Some(b) = bias {
        if b.shape() != [m] {
            return Err(format!(
                "{OP}: B must have shape [{m}], got {:?}",
                b.shape()
            ));
        }
    }
    let out_shape = [n, m, oh, ow];
    check_out(ctx, OP, &out_shape, 64)?;
    let (dtype, xv) = float_in(OP, "X", x)?;
    let (_, wv) = float_in(OP, "W", wt)?;
    let (_, ov) = float_in(OP, "offset", offset)?;
    let mv = mask
        .map(|t| float_in(OP, "mask", t))
        .transpose()?
        .map(|v| v.1);
    let bv = bias.map(|t| float_in(OP, "B", t)).transpose()?.map(|v| v.1);
    let (mg, c_per_og, plane, opl) = (m / p.group, c / og, h * w, oh * ow);
    // Where tap t of output o reads before its offset (float: no overflow on 32-bit targets).
    let place = |o: usize, s: usize, t: usize, d: usize, pad: usize| {
        o as f64 * s as f64 + t as f64 * d as f64 - pad as f64
    };
    let mut out = vec![0.0f64; n * m * opl];
    for ni in 0..n {
        for mi in 0..m {
            let g = mi / mg;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = bv.as_ref().map_or(0.0, |b| b[mi]);
                    for cl in 0..cg {
                        let ci = g * cg + cl;
                        let gi = ci / c_per_og;
                        let xp = &xv[(ni * c + ci) * plane..][..plane];
                        for a in 0..kh {
                            for b in 0..kw {
                                let kk = a * kw + b;
                                let oc = ((ni * og + gi) * k + kk) * 2;
                                let dy = ov[oc * opl + i * ow + j];
                                let dx = ov[(oc + 1) * opl + i * ow + j];
                                let y = place(i, st[0], a, dil[0], pads[0]) + dy;
                                let xx = place(j, st[1], b, dil[1], pads[1]) + dx;
                                let mut v = sample_zero(xp, h, w, y, xx);
                                if let Some(mv) = &mv {
                                    v *= mv[((ni * og + gi) * k + kk) * opl + i * ow + j];
                                }
                                acc += wv[((mi * cg + cl) * kh + a) * kw + b] * v;
                            }
                        }
                    }
                    out[(ni * m + mi) * opl + i * ow + j] = acc;
                }
            }
        }
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

#[cfg(test)]
#[path = "deform_tests.rs"]
mod tests;
