//! Rearranging images: Col2Im and CenterCropPad.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Col2Im | 18 | `dilations` (1s), `pads` (0s), `strides` (1s) | input: T [N, C * prod(block_shape), L], image_shape: int64 [r], block_shape: int64 [r] -> output: T [N, C, image_shape...] |
//! | CenterCropPad | 18 | `axes` (all) | input_data: T, shape: Tind [len(axes)] -> output_data: T |
//!
//! Col2Im is im2col's adjoint: column (c * prod(block_shape) + k, l) is added into the image at
//! block position l's origin (l counted row-major over the blocks that fit, `origin = l * stride
//! - pad_begin`) plus block offset k times the dilation; places outside the image are dropped.
//!
//! CenterCropPad crops or zero-pads each listed axis to `shape` around its centre: a crop of d
//! elements removes floor(d / 2) at the start, a pad of d adds floor(d / 2) at the start (the odd
//! one goes at the end). Pure data movement: any element type.
//!
//! Col2Im's arithmetic runs in float64; its output takes the input's float type.

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, int_list, map_tensor, norm_axes, unsupported_type};
use super::infer::norm_axis as infer_axis;
use super::loss::{float_in, float_out};
use super::sample::{next_index, product, strides};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

// ---------------------------------------------------------------------------------------------
// Col2Im

#[derive(Debug)]
pub struct Col2Im {
    pub dilations: Option<Vec<i64>>,
    pub pads: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
}

impl Col2Im {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Col2Im {
            dilations: a.ints("dilations")?,
            pads: a.ints("pads")?,
            strides: a.ints("strides")?,
        }))
    }

    /// Dilations, begin pads, end pads and strides for `r` spatial axes, checked.
    fn geometry(&self, r: usize) -> Result<[Vec<i64>; 4], String> {
        const OP: &str = "Col2Im";
        let per_axis = |v: &Option<Vec<i64>>, what: &str, default: i64, min: i64| {
            let v = v.clone().unwrap_or_else(|| vec![default; r]);
            if v.len() != r {
                return Err(format!(
                    "{OP}: '{what}' must have {r} values (one per image axis), got {v:?}"
                ));
            }
            if v.iter().any(|&x| x < min) {
                return Err(format!("{OP}: '{what}' values must be >= {min}, got {v:?}"));
            }
            Ok(v)
        };
        let dil = per_axis(&self.dilations, "dilations", 1, 1)?;
        let strides = per_axis(&self.strides, "strides", 1, 1)?;
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * r]);
        if pads.len() != 2 * r || pads.iter().any(|&x| x < 0) {
            return Err(format!(
                "{OP}: 'pads' must have {} non-negative values (begins, then ends), got {pads:?}",
                2 * r
            ));
        }
        Ok([dil, pads[..r].to_vec(), pads[r..].to_vec(), strides])
    }
}

impl Op for Col2Im {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = (|| {
            let xs = x.shape.as_ref().filter(|s| s.len() == 3)?;
            let image = cx.ints(1)?;
            let block = cx.ints(2)?;
            let k = block.iter().try_fold(1i64, |a, &b| a.checked_mul(b))?;
            let c = match &xs[1] {
                Dim::Known(d) if k > 0 && d % k == 0 => Dim::Known(d / k),
                Dim::Known(_) => return None,
                _ => Dim::Unknown,
            };
            if image.iter().any(|&d| d < 0) {
                return None;
            }
            let mut s = vec![xs[0].clone(), c];
            s.extend(image.iter().map(|&d| Dim::Known(d)));
            Some(s)
        })();
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        col2im
    }
}

fn col2im(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Col2Im";
    let p = ctx.attrs::<Col2Im>()?;
    let x = input(OP, inputs, 0)?;
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported_type(OP, x.dtype()));
    }
    let image = int_list(OP, "image_shape", input(OP, inputs, 1)?)?;
    let block = int_list(OP, "block_shape", input(OP, inputs, 2)?)?;
    let r = image.len();
    if r == 0 || block.len() != r {
        return Err(format!(
            "{OP}: image_shape and block_shape must have the same non-zero length, got {image:?} and {block:?}"
        ));
    }
    if image.iter().chain(&block).any(|&d| d < 1) {
        return Err(format!(
            "{OP}: image_shape {image:?} and block_shape {block:?} must be positive"
        ));
    }
    let xs = x.shape();
    if xs.len() != 3 {
        return Err(format!(
            "{OP}: input must have rank 3 ([N, C * prod(block_shape), L]), got shape {xs:?}"
        ));
    }
    let [dil, pb, pe, st] = p.geometry(r)?;
    let overflow = || format!("{OP}: image_shape {image:?} and block_shape {block:?} overflow");
    let k_total = block
        .iter()
        .try_fold(1i64, |a, &b| a.checked_mul(b))
        .ok_or_else(overflow)?;
    let k_total = usize::try_from(k_total).map_err(|_| overflow())?;
    if xs[1] % k_total != 0 {
        return Err(format!(
            "{OP}: input's dim 1 ({}) is not a multiple of prod(block_shape) = {k_total}",
            xs[1]
        ));
    }
    let c = xs[1] / k_total;
    // Blocks that fit along each axis: (image + pads - dilation * (block - 1) - 1) / stride + 1.
    let mut n_blocks = Vec::with_capacity(r);
    for i in 0..r {
        let span = dil[i]
            .checked_mul(block[i] - 1)
            .and_then(|s| s.checked_add(1))
            .ok_or_else(overflow)?;
        let room = image[i]
            .checked_add(pb[i])
            .and_then(|v| v.checked_add(pe[i]))
            .and_then(|v| v.checked_sub(span))
            .ok_or_else(overflow)?;
        if room < 0 {
            return Err(format!(
                "{OP}: a block (extent {span}) does not fit on image axis {i} ({} with pads)",
                image[i] + pb[i] + pe[i]
            ));
        }
        n_blocks.push((room / st[i] + 1) as usize);
    }
    let l: usize = product(OP, &n_blocks)?;
    if xs[2] != l {
        return Err(format!(
            "{OP}: input's dim 2 must be the number of blocks {n_blocks:?} = {l}, got {}",
            xs[2]
        ));
    }
    let img: Vec<usize> = image.iter().map(|&d| d as usize).collect();
    let mut out_shape = vec![xs[0], c];
    out_shape.extend_from_slice(&img);
    check_out(ctx, OP, &out_shape, 64)?;
    let blk: Vec<usize> = block.iter().map(|&d| d as usize).collect();
    let plane = product(OP, &img)?;
    let istr = strides(&img);
    let (dtype, xv) = float_in(OP, "input", x)?;
    let mut out = vec![0.0f64; xs[0] * c * plane];
    // For each block offset k and block position b: the plane offset it lands on, if inside.
    let mut places: Vec<Option<usize>> = Vec::with_capacity(k_total * l);
    let mut kk = vec![0usize; r];
    for _ in 0..k_total {
        let mut bb = vec![0usize; r];
        for _ in 0..l {
            let mut off = Some(0usize);
            for i in 0..r {
                let pos = bb[i] as i64 * st[i] - pb[i] + kk[i] as i64 * dil[i];
                off = match off {
                    Some(o) if (0..image[i]).contains(&pos) => Some(o + pos as usize * istr[i]),
                    _ => None,
                };
            }
            places.push(off);
            next_index(&mut bb, &n_blocks);
        }
        next_index(&mut kk, &blk);
    }
    for ni in 0..xs[0] {
        for ci in 0..c {
            let dst = &mut out[(ni * c + ci) * plane..][..plane];
            let src = &xv[(ni * c + ci) * k_total * l..][..k_total * l];
            for (v, place) in src.iter().zip(&places) {
                if let Some(o) = place {
                    dst[*o] += v;
                }
            }
        }
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

// ---------------------------------------------------------------------------------------------
// CenterCropPad

#[derive(Debug)]
pub struct CenterCropPad {
    pub axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(CenterCropPad {
            axes: a.ints("axes")?,
        }))
    }
}

impl Op for CenterCropPad {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = (|| {
            let mut s = x.shape.clone()?;
            let target = cx.ints(1)?;
            let axes: Vec<usize> = match &self.axes {
                None => (0..s.len()).collect(),
                Some(a) => a
                    .iter()
                    .map(|&a| infer_axis(a, s.len()))
                    .collect::<Option<_>>()?,
            };
            if axes.len() != target.len() || target.iter().any(|&d| d < 0) {
                return None;
            }
            for (a, d) in axes.into_iter().zip(target) {
                s[a] = Dim::Known(d);
            }
            Some(s)
        })();
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        center_crop_pad
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

fn center_crop_pad(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "CenterCropPad";
    let p = ctx.attrs::<CenterCropPad>()?;
    let x = input(OP, inputs, 0)?;
    let target = int_list(OP, "shape", input(OP, inputs, 1)?)?;
    let xs = x.shape();
    let axes = match &p.axes {
        None => (0..xs.len()).collect(),
        Some(a) => norm_axes(OP, a, xs.len())?,
    };
    if axes.len() != target.len() {
        return Err(format!(
            "{OP}: shape has {} values for {} axes",
            target.len(),
            axes.len()
        ));
    }
    let mut out_shape = xs.to_vec();
    // Per axis: output index i reads input index i + shift (when inside).
    let mut shift = vec![0i64; xs.len()];
    for (&a, &t) in axes.iter().zip(&target) {
        let t = usize::try_from(t)
            .map_err(|_| format!("{OP}: shape {target:?} has a negative value"))?;
        let d = xs[a];
        shift[a] = if t <= d {
            ((d - t) / 2) as i64
        } else {
            -(((t - d) / 2) as i64)
        };
        out_shape[a] = t;
    }
    check_out(ctx, OP, &out_shape, bits(x.dtype()))?;
    fn place<T: Clone + Default>(a: &ArrayD<T>, out_shape: &[usize], shift: &[i64]) -> ArrayD<T> {
        let shape = a.shape().to_vec();
        ArrayD::from_shape_fn(IxDyn(out_shape), |ix| {
            let mut src = Vec::with_capacity(shape.len());
            for (k, &d) in shape.iter().enumerate() {
                let s = ix[k] as i64 + shift[k];
                if s < 0 || s >= d as i64 {
                    return T::default();
                }
                src.push(s as usize);
            }
            a[IxDyn(&src)].clone()
        })
    }
    Ok(vec![map_tensor!(x, a => place(a, &out_shape, &shift))])
}

#[cfg(test)]
#[path = "rearrange_tests.rs"]
mod tests;
