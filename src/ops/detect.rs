//! Detection-model ops: NonMaxSuppression, RoiAlign and MaxUnpool (DeformConv is in deform.rs).
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | NonMaxSuppression | 10, 11 | `center_point_box` (0) | boxes: float [B, N, 4], scores: float [B, C, N], max_output_boxes_per_class?: int64 [1] (0), iou_threshold?: float [1] (0), score_threshold?: float [1] (none) -> selected_indices: int64 [K, 3] |
//! | RoiAlign | 10, 16, 22 | `mode` ("avg"; "max"), `output_height` (1), `output_width` (1), `sampling_ratio` (0), `spatial_scale` (1.0); `coordinate_transformation_mode` ("half_pixel"; "output_half_pixel") from 16 | X: T1 [N, C, H, W], rois: T1 [R, 4], batch_indices: int64 [R] -> Y: T1 [R, C, output_height, output_width] |
//! | MaxUnpool | 9, 11, 22 | `kernel_shape` (required), `pads` (0s), `strides` (1s) | X: T1 [N, C, D1..Dk], I: int64 (X's shape), output_shape?: int64 [k + 2] -> output: T1 |
//!
//! NonMaxSuppression, per batch and class: boxes whose score is above `score_threshold` (all
//! boxes without it) are taken in order of falling score (equal scores by index), each kept
//! unless its intersection over union with a box already kept for the class is above
//! `iou_threshold`, until `max_output_boxes_per_class` are kept. Boxes are corners [y1, x1, y2,
//! x2] in either order (`center_point_box` 0) or [x_centre, y_centre, width, height] (1); a box
//! of no area suppresses nothing. Output rows are [batch, class, box] in selection order. 11
//! changes nothing here.
//!
//! RoiAlign averages (or takes the largest of, "max") bilinear samples of X over a grid of
//! `sampling_ratio`² points per output bin (ceil(roi size / output size) per axis when 0). A
//! roi's corners [x1, y1, x2, y2] are scaled by `spatial_scale`; with "half_pixel" 0.5 is then
//! subtracted, with "output_half_pixel" (the only behaviour before 16) rois are instead made at
//! least 1x1. A sample more than one element outside X counts 0; others are clamped to X. "max"
//! takes the largest of the four weighted corner values of each sample (onnxruntime's rule,
//! which the spec's tests follow). 22 adds types.
//!
//! MaxUnpool scatters X into zeros of the shape MaxPool would have pooled it from,
//! `(in - 1) * stride - pad_begin - pad_end + kernel` per spatial axis, at the flat indices I
//! (MaxPool's Indices: row-major over that whole tensor). With `output_shape`, that result sits
//! at the origin of a zero tensor of `output_shape` (each dim at least the computed one), as the
//! spec's tests have it. 11 and 22 only add types.
//!
//! Float arithmetic runs in float64; float outputs take the input's float type.

use super::common::{check_out, input, int_list, opt_input};
use super::loss::{float_in, float_out};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// The one value of an optional scalar input (shape [] or [1]); `None` when omitted or empty.
fn scalar_input(
    op: &str,
    what: &str,
    inputs: &[Option<&Tensor>],
    i: usize,
) -> Result<Option<f64>, String> {
    let Some(t) = opt_input(inputs, i) else {
        return Ok(None);
    };
    if t.dtype() == DType::BOOL || t.len() > 1 {
        return Err(format!(
            "{op}: '{what}' must be one number, got {} of shape {:?}",
            t.dtype(),
            t.shape()
        ));
    }
    Ok(t.to_f64_vec().first().copied())
}

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression

#[derive(Debug)]
pub struct NonMaxSuppression {
    pub center_point_box: bool,
}

impl NonMaxSuppression {
    pub fn parse(a: &Attrs) -> P {
        let center_point_box = match a.int("center_point_box", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(format!(
                    "attribute 'center_point_box' must be 0 or 1, got {v}"
                ))
            }
        };
        Ok(Box::new(NonMaxSuppression { center_point_box }))
    }
}

impl Op for NonMaxSuppression {
    fn infer(&self, _: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(DType::I64),
            shape: Some(vec![Dim::Unknown, Dim::Known(3)]),
        }]
    }
    fn kernel(&self) -> Kernel {
        nms
    }
}

/// A box as (x_min, y_min, x_max, y_max).
fn corners(b: &[f64], centre: bool) -> [f64; 4] {
    if centre {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh]
    } else {
        [
            b[1].min(b[3]),
            b[0].min(b[2]),
            b[1].max(b[3]),
            b[0].max(b[2]),
        ]
    }
}

/// Whether `a` and `b` overlap by more than `threshold` (intersection over union); boxes of no
/// area never do.
fn overlaps(a: &[f64; 4], b: &[f64; 4], threshold: f64) -> bool {
    let iw = a[2].min(b[2]) - a[0].max(b[0]);
    let ih = a[3].min(b[3]) - a[1].max(b[1]);
    if iw <= 0.0 || ih <= 0.0 {
        return false;
    }
    let inter = iw * ih;
    let area = |c: &[f64; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let (aa, ab) = (area(a), area(b));
    let union = aa + ab - inter;
    if aa <= 0.0 || ab <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

fn nms(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "NonMaxSuppression";
    let p = ctx.attrs::<NonMaxSuppression>()?;
    let boxes = input(OP, inputs, 0)?;
    let scores = input(OP, inputs, 1)?;
    let (bs, ss) = (boxes.shape(), scores.shape());
    if bs.len() != 3 || bs[2] != 4 {
        return Err(format!(
            "{OP}: boxes must have shape [batches, boxes, 4], got {bs:?}"
        ));
    }
    if ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(format!(
            "{OP}: scores must have shape [{}, classes, {}] for boxes of shape {bs:?}, got {ss:?}",
            bs[0], bs[1]
        ));
    }
    let max_out = scalar_input(OP, "max_output_boxes_per_class", inputs, 2)?.unwrap_or(0.0);
    let max_out = if max_out > 0.0 { max_out as usize } else { 0 };
    let iou = scalar_input(OP, "iou_threshold", inputs, 3)?.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&iou) {
        return Err(format!("{OP}: iou_threshold {iou} is outside [0, 1]"));
    }
    let score_threshold = scalar_input(OP, "score_threshold", inputs, 4)?;
    let (_, bv) = float_in(OP, "boxes", boxes)?;
    let (_, sv) = float_in(OP, "scores", scores)?;
    let (nb, nc, n) = (bs[0], ss[1], bs[1]);
    let mut rows: Vec<i64> = Vec::new();
    let mut order: Vec<usize> = Vec::with_capacity(n);
    let mut kept: Vec<[f64; 4]> = Vec::new();
    for b in 0..nb {
        let bx: Vec<[f64; 4]> = (0..n)
            .map(|i| corners(&bv[(b * n + i) * 4..][..4], p.center_point_box))
            .collect();
        for c in 0..nc {
            let s = &sv[(b * nc + c) * n..][..n];
            order.clear();
            order.extend((0..n).filter(|&i| score_threshold.is_none_or(|t| s[i] > t)));
            super::common::sort_indices(&mut order, &|i, j| s[j].total_cmp(&s[i]).then(i.cmp(&j)));
            kept.clear();
            for &i in &order {
                if kept.len() >= max_out {
                    break;
                }
                if kept.iter().any(|k| overlaps(&bx[i], k, iou)) {
                    continue;
                }
                kept.push(bx[i]);
                check_out(ctx, OP, &[rows.len() / 3 + 1, 3], 64)?;
                rows.extend([b as i64, c as i64, i as i64]);
            }
        }
    }
    let k = rows.len() / 3;
    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[k, 3]), rows)
        .map(|a| vec![Tensor::I64(a)])
        .map_err(|e| format!("{OP}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// RoiAlign

#[derive(Debug)]
pub struct RoiAlign {
    pub max: bool,
    pub output_height: usize,
    pub output_width: usize,
    pub sampling_ratio: usize,
    pub spatial_scale: f32,
    pub half_pixel: bool,
}

impl RoiAlign {
    pub fn parse(a: &Attrs) -> P {
        let max = match a.string("mode")?.as_deref().unwrap_or("avg") {
            "avg" => false,
            "max" => true,
            m => {
                return Err(format!(
                    "attribute 'mode' must be \"avg\" or \"max\", got \"{m}\""
                ))
            }
        };
        let half_pixel = if a.opset >= 16 {
            match a
                .string("coordinate_transformation_mode")?
                .as_deref()
                .unwrap_or("half_pixel")
            {
                "half_pixel" => true,
                "output_half_pixel" => false,
                m => {
                    return Err(format!(
                        "attribute 'coordinate_transformation_mode' must be \"half_pixel\" or \"output_half_pixel\", got \"{m}\""
                    ))
                }
            }
        } else {
            false
        };
        let positive = |name: &str| -> Result<usize, String> {
            let v = a.int(name, 1)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| format!("attribute '{name}' must be positive, got {v}"))
        };
        let sampling_ratio = a.int("sampling_ratio", 0)?;
        Ok(Box::new(RoiAlign {
            max,
            output_height: positive("output_height")?,
            output_width: positive("output_width")?,
            sampling_ratio: usize::try_from(sampling_ratio).map_err(|_| {
                format!("attribute 'sampling_ratio' must be >= 0, got {sampling_ratio}")
            })?,
            spatial_scale: a.float("spatial_scale", 1.0)?,
            half_pixel,
        }))
    }
}

impl Op for RoiAlign {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let rois = cx.input(1).shape.and_then(|s| s.first().cloned());
        let shape = match (x.shape.as_ref().filter(|s| s.len() == 4), rois) {
            (Some(xs), Some(r)) => Some(vec![
                r,
                xs[1].clone(),
                Dim::Known(self.output_height as i64),
                Dim::Known(self.output_width as i64),
            ]),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        roi_align
    }
}

/// One bilinear sample: four (plane offset, weight) corners, `None` for a point outside.
type Sample = Option<[(usize, f64); 4]>;

/// One bilinear sample of a plane of `h` x `w` at (y, x): the four (offset, weight) corners, or
/// `None` when the point is more than one element outside.
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Sample {
    let (hf, wf) = (h as f64, w as f64);
    let outside = |v: f64, len: f64| v.is_nan() || v < -1.0 || v > len;
    if outside(y, hf) || outside(x, wf) {
        return None;
    }
    let axis = |v: f64, len: usize| {
        let v = v.max(0.0);
        let low = v.floor() as usize;
        if low >= len - 1 {
            (len - 1, len - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = axis(y, h);
    let (x0, x1, lx) = axis(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some([
        (y0 * w + x0, hy * hx),
        (y0 * w + x1, hy * lx),
        (y1 * w + x0, ly * hx),
        (y1 * w + x1, ly * lx),
    ])
}

fn roi_align(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "RoiAlign";
    let p = ctx.attrs::<RoiAlign>()?;
    let x = input(OP, inputs, 0)?;
    let rois = input(OP, inputs, 1)?;
    let bi = input(OP, inputs, 2)?;
    let xs = x.shape();
    if xs.len() != 4 {
        return Err(format!("{OP}: X must have shape [N, C, H, W], got {xs:?}"));
    }
    let nr = bi.shape().first().copied().unwrap_or(0);
    if bi.shape().len() != 1 || rois.shape() != [nr, 4] {
        return Err(format!(
            "{OP}: rois must be [R, 4] and batch_indices [R], got {:?} and {:?}",
            rois.shape(),
            bi.shape()
        ));
    }
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ow) = (p.output_height, p.output_width);
    let out_shape = [nr, c, oh, ow];
    check_out(ctx, OP, &out_shape, 64)?;
    let batch = int_list(OP, "batch_indices", bi)?;
    let (dtype, xv) = float_in(OP, "X", x)?;
    let (_, rv) = float_in(OP, "rois", rois)?;
    if nr > 0 && c > 0 && (h == 0 || w == 0) {
        return Err(format!("{OP}: X has an empty spatial axis: {xs:?}"));
    }
    let mut out = vec![0.0f64; nr * c * oh * ow];
    let scale = p.spatial_scale as f64;
    let offset = if p.half_pixel { 0.5 } else { 0.0 };
    for r in 0..nr {
        let b = usize::try_from(batch[r])
            .ok()
            .filter(|&b| b < n)
            .ok_or_else(|| format!("{OP}: batch index {} is outside [0, {n})", batch[r]))?;
        let roi = &rv[r * 4..][..4];
        let (x1, y1) = (roi[0] * scale - offset, roi[1] * scale - offset);
        let (x2, y2) = (roi[2] * scale - offset, roi[3] * scale - offset);
        let (mut rw, mut rh) = (x2 - x1, y2 - y1);
        if !p.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bin_h, bin_w) = (rh / oh as f64, rw / ow as f64);
        let grid = |size: f64| -> usize {
            if p.sampling_ratio > 0 {
                p.sampling_ratio
            } else {
                // Saturating: NaN and negatives give 0, absurd sizes are refused below.
                size.ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(bin_h), grid(bin_w));
        // The bins' samples are held at once: sized against the limits like an output (a
        // hostile roi or sampling_ratio asks for absurd numbers of them).
        check_out(
            ctx,
            OP,
            &[oh, ow, gh, gw],
            8 * std::mem::size_of::<Sample>() as u64,
        )?;
        let samples = gh * gw;
        let count = samples.max(1) as f64;
        // The samples of each bin, shared by every channel.
        let mut bins: Vec<Vec<Sample>> = Vec::with_capacity(oh * ow);
        for ph in 0..oh {
            for pw in 0..ow {
                let mut s = Vec::with_capacity(samples);
                for iy in 0..gh {
                    let y = y1 + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                    for ix in 0..gw {
                        let xx = x1 + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                        s.push(bilinear(y, xx, h, w));
                    }
                }
                bins.push(s);
            }
        }
        for ci in 0..c {
            let plane = &xv[(b * c + ci) * h * w..][..h * w];
            for (k, s) in bins.iter().enumerate() {
                let v = |sample: &Sample| -> [f64; 4] {
                    match sample {
                        Some(q) => q.map(|(o, wt)| wt * plane[o]),
                        None => [0.0; 4],
                    }
                };
                out[((r * c + ci) * oh * ow) + k] = if p.max {
                    s.iter()
                        .map(|q| v(q).into_iter().fold(f64::NEG_INFINITY, f64::max))
                        .reduce(f64::max)
                        .unwrap_or(0.0)
                } else {
                    s.iter().map(|q| v(q).iter().sum::<f64>()).sum::<f64>() / count
                };
            }
        }
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

// ---------------------------------------------------------------------------------------------
// MaxUnpool

#[derive(Debug)]
pub struct MaxUnpool {
    pub kernel_shape: Vec<i64>,
    pub pads: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
}

impl MaxUnpool {
    pub fn parse(a: &Attrs) -> P {
        let kernel_shape = a
            .ints("kernel_shape")?
            .ok_or("attribute 'kernel_shape' is required")?;
        if kernel_shape.is_empty() || kernel_shape.iter().any(|&k| k < 1) {
            return Err(format!(
                "attribute 'kernel_shape' must be positive, got {kernel_shape:?}"
            ));
        }
        let k = kernel_shape.len();
        let pads = a.ints("pads")?;
        if let Some(p) = &pads {
            if p.len() != 2 * k || p.iter().any(|&v| v < 0) {
                return Err(format!(
                    "attribute 'pads' must have {} non-negative values, got {p:?}",
                    2 * k
                ));
            }
        }
        let strides = a.ints("strides")?;
        if let Some(s) = &strides {
            if s.len() != k || s.iter().any(|&v| v < 1) {
                return Err(format!(
                    "attribute 'strides' must have {k} positive values, got {s:?}"
                ));
            }
        }
        Ok(Box::new(MaxUnpool {
            kernel_shape,
            pads,
            strides,
        }))
    }

    /// The unpooled size of spatial axis `i` for an input size `d`, if it is a size.
    fn unpooled(&self, i: usize, d: i64) -> Option<i64> {
        let k = self.kernel_shape.len();
        let s = self.strides.as_ref().map_or(1, |s| s[i]);
        let (pb, pe) = self.pads.as_ref().map_or((0, 0), |p| (p[i], p[i + k]));
        (d.checked_sub(1)?)
            .checked_mul(s)?
            .checked_sub(pb.checked_add(pe)?)?
            .checked_add(self.kernel_shape[i])
            .filter(|&v| v >= 0)
    }
}

impl Op for MaxUnpool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = if cx.has_input(2) {
            cx.ints(2)
                .filter(|s| s.iter().all(|&d| d >= 0))
                .map(|s| s.into_iter().map(Dim::Known).collect())
        } else {
            x.shape.as_ref().and_then(|s| {
                if s.len() != self.kernel_shape.len() + 2 {
                    return None;
                }
                let mut out = s[..2].to_vec();
                for (i, d) in s[2..].iter().enumerate() {
                    out.push(match d {
                        Dim::Known(d) => Dim::Known(self.unpooled(i, *d)?),
                        _ => Dim::Unknown,
                    });
                }
                Some(out)
            })
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        max_unpool
    }
}

fn max_unpool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MaxUnpool";
    let p = ctx.attrs::<MaxUnpool>()?;
    let x = input(OP, inputs, 0)?;
    let ind = input(OP, inputs, 1)?;
    let xs = x.shape();
    let k = p.kernel_shape.len();
    if xs.len() != k + 2 {
        return Err(format!(
            "{OP}: X must have rank {} (kernel_shape has {k} axes), got shape {xs:?}",
            k + 2
        ));
    }
    if ind.shape() != xs {
        return Err(format!(
            "{OP}: I must have X's shape {xs:?}, got {:?}",
            ind.shape()
        ));
    }
    let mut inferred = xs[..2].to_vec();
    for (i, &d) in xs[2..].iter().enumerate() {
        let u = p
            .unpooled(i, d as i64)
            .and_then(|u| usize::try_from(u).ok())
            .ok_or_else(|| format!("{OP}: spatial axis {i} of size {d} unpools to no size"))?;
        inferred.push(u);
    }
    let out_shape: Vec<usize> = match opt_input(inputs, 2) {
        None => inferred.clone(),
        Some(t) => {
            let s = int_list(OP, "output_shape", t)?;
            let ok = s.len() == inferred.len()
                && s.iter().zip(&inferred).enumerate().all(|(i, (&o, &d))| {
                    if i < 2 {
                        o == d as i64
                    } else {
                        o >= d as i64
                    }
                });
            if !ok {
                return Err(format!(
                    "{OP}: output_shape {s:?} must keep N and C and be at least the unpooled shape {inferred:?}"
                ));
            }
            s.iter().map(|&d| d as usize).collect()
        }
    };
    check_out(ctx, OP, &out_shape, 64)?;
    let (dtype, xv) = float_in(OP, "X", x)?;
    let iv = ind
        .to_i64_vec()
        .ok_or_else(|| format!("{OP}: I must be int64, got {}", ind.dtype()))?;
    let total: usize = inferred.iter().product();
    let ostr = {
        let mut s = vec![1usize; out_shape.len()];
        for i in (0..s.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * out_shape[i + 1];
        }
        s
    };
    let mut out = vec![0.0f64; out_shape.iter().product()];
    for (&v, &at) in xv.iter().zip(&iv) {
        let flat = usize::try_from(at)
            .ok()
            .filter(|&a| a < total)
            .ok_or_else(|| {
                format!("{OP}: index {at} is outside the unpooled tensor {inferred:?}")
            })?;
        // The row-major place of `flat` in the unpooled shape, placed in the output.
        let (mut rest, mut dst) = (flat, 0usize);
        for i in (0..inferred.len()).rev() {
            dst += (rest % inferred[i]) * ostr[i];
            rest /= inferred[i];
        }
        out[dst] = v;
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

#[cfg(test)]
#[path = "detect_tests.rs"]
mod tests;
