//! Sampling grids: GridSample and AffineGrid (Col2Im and CenterCropPad are in rearrange.rs).
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | GridSample | 16 | `mode` ("bilinear"; "nearest", "bicubic"), `padding_mode` ("zeros"; "border", "reflection"), `align_corners` (0) | X: T1 [N, C, H, W], grid: T2 [N, H_out, W_out, 2] -> Y: T1 [N, C, H_out, W_out] |
//! | GridSample | 20, 22 | `mode` ("linear"; "nearest", "cubic"), `padding_mode`, `align_corners` as 16 | X: T1 [N, C, D1..Dr], grid: T2 [N, O1..Or, r] -> Y: T1 [N, C, O1..Or] |
//! | AffineGrid | 20 | `align_corners` (0) | theta: T1 [N, 2, 3] or [N, 3, 4], size: int64 [N, C, H, W] or [N, C, D, H, W] -> grid: T1 [N, H, W, 2] or [N, D, H, W, 3] |
//!
//! GridSample reads, for each output position, a point of X's spatial space from `grid`, its
//! components in reverse axis order (x first, the last axis), normalized to [-1, 1]: -1 and 1 are
//! the centres of the corner elements with `align_corners` (x = (g + 1) / 2 * (len - 1)), their
//! outer edges without (x = ((g + 1) * len - 1) / 2). A point outside the border (those bounds)
//! is clamped to [0, len - 1] with padding "border", or reflected at the bounds until inside with
//! "reflection"; then "nearest" takes the element at x rounded half to even, "linear" weighs the
//! 2^r neighbours by distance, "cubic" the 4^r neighbours by Keys' cubic convolution (a = -0.75).
//! Neighbours outside X read 0 ("zeros"), the nearest border element ("border") or their
//! reflection ("reflection"). Version 16 takes 4-D X only and spells the modes "bilinear" and
//! "bicubic"; 20 names them "linear" and "cubic" and takes any r >= 1; 22 adds types. Integer X
//! is an error here (the spec admits it; interpolating integers is not defined).
//!
//! AffineGrid maps the base grid of an output of `size` (each axis's points spaced evenly in
//! [-1, 1]: the element centres, or with `align_corners` the corners; 0 for an axis of one) by
//! each batch's `theta`: grid[n, h, w] = theta[n] @ (x_w, y_h, 1), and (x_w, y_h, z_d, 1) in 3-D.
//!
//! Arithmetic runs in float64; float outputs take the input's float type.

use super::common::{check_out, input, int_list, unsupported_type};
use super::loss::{float_in, float_out};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// Row-major strides of `shape`.
pub(super) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Steps a row-major multi-index over `shape` (the last axis fastest).
pub(super) fn next_index(idx: &mut [usize], shape: &[usize]) {
    for i in (0..idx.len()).rev() {
        idx[i] += 1;
        if idx[i] < shape[i] {
            return;
        }
        idx[i] = 0;
    }
}

pub(super) fn product(op: &str, dims: &[usize]) -> Result<usize, String> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("{op}: the size of {dims:?} overflows"))
}

// ---------------------------------------------------------------------------------------------
// GridSample

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SampleMode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Padding {
    Zeros,
    Border,
    Reflection,
}

#[derive(Debug)]
pub struct GridSample {
    pub mode: SampleMode,
    pub padding: Padding,
    pub align_corners: bool,
    /// Version 16 takes 4-D X only.
    pub only_2d: bool,
}

impl GridSample {
    pub fn parse(a: &Attrs) -> P {
        let v20 = a.opset >= 20;
        let (linear, cubic) = if v20 {
            ("linear", "cubic")
        } else {
            ("bilinear", "bicubic")
        };
        let mode = match a.string("mode")?.as_deref().unwrap_or(linear) {
            "nearest" => SampleMode::Nearest,
            m if m == linear => SampleMode::Linear,
            m if m == cubic => SampleMode::Cubic,
            m => {
                return Err(format!(
                    "attribute 'mode' must be \"{linear}\", \"nearest\" or \"{cubic}\" at opset {}, got \"{m}\"",
                    a.opset
                ))
            }
        };
        let padding = match a.string("padding_mode")?.as_deref().unwrap_or("zeros") {
            "zeros" => Padding::Zeros,
            "border" => Padding::Border,
            "reflection" => Padding::Reflection,
            m => {
                return Err(format!(
                "attribute 'padding_mode' must be \"zeros\", \"border\" or \"reflection\", got \"{m}\""
            ))
            }
        };
        Ok(Box::new(GridSample {
            mode,
            padding,
            align_corners: a.flag("align_corners", false)?,
            only_2d: !v20,
        }))
    }
}

impl Op for GridSample {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match (x.shape, cx.input(1).shape) {
            (Some(xs), Some(gs)) if xs.len() >= 3 && gs.len() == xs.len() => {
                let mut s = xs[..2].to_vec();
                s.extend_from_slice(&gs[1..gs.len() - 1]);
                Some(s)
            }
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        grid_sample
    }
}

/// Reflects `x` at `lo` and `hi` until it lies in [lo, hi].
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    if x < lo {
        let d = lo - x;
        let k = (d / span).floor();
        let r = d - k * span;
        if k % 2.0 == 0.0 {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let d = x - hi;
        let k = (d / span).floor();
        let r = d - k * span;
        if k % 2.0 == 0.0 {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

/// Keys' cubic convolution weights (a = -0.75) of the neighbours at -1, 0, 1, 2 for a point at
/// fraction `t` past neighbour 0.
fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    // |s| <= 1: (a + 2)|s|^3 - (a + 3)|s|^2 + 1; 1 < |s| < 2: a|s|^3 - 5a|s|^2 + 8a|s| - 4a.
    let near = |s: f64| ((A + 2.0) * s - (A + 3.0)) * s * s + 1.0;
    let far = |s: f64| ((A * s - 5.0 * A) * s + 8.0 * A) * s - 4.0 * A;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

impl GridSample {
    /// The neighbours (index along the axis, or `None` for a zero) and their weights for the
    /// normalized coordinate `g` on an axis of `len` elements.
    fn taps(&self, g: f64, len: usize) -> Vec<(Option<usize>, f64)> {
        let l = len as f64;
        let mut x = if self.align_corners {
            (g + 1.0) / 2.0 * (l - 1.0)
        } else {
            ((g + 1.0) * l - 1.0) / 2.0
        };
        if self.mode == SampleMode::Nearest {
            x = x.round_ties_even();
        }
        let (lo, hi) = if self.align_corners {
            (0.0, l - 1.0)
        } else {
            (-0.5, l - 0.5)
        };
        if x < lo || x > hi {
            match self.padding {
                Padding::Border => x = x.clamp(0.0, l - 1.0),
                Padding::Reflection => x = reflect(x, lo, hi),
                Padding::Zeros => {}
            }
        }
        let place = |i: i64| -> Option<usize> {
            let last = len as i64 - 1;
            match self.padding {
                Padding::Zeros => (0..=last).contains(&i).then_some(i as usize),
                Padding::Border => Some(i.clamp(0, last.max(0)) as usize),
                Padding::Reflection => {
                    let r = reflect(i as f64, lo, hi) as i64;
                    Some(r.clamp(0, last.max(0)) as usize)
                }
            }
        };
        let x0 = x.floor();
        let t = x - x0;
        // Saturating float-to-int casts keep absurd coordinates out of range, never panicking.
        let i0 = x0 as i64;
        match self.mode {
            SampleMode::Nearest => vec![(place(x as i64), 1.0)],
            SampleMode::Linear => vec![(place(i0), 1.0 - t), (place(i0.saturating_add(1)), t)],
            SampleMode::Cubic => {
                let w = cubic_weights(t);
                (0..4)
                    .map(|k| (place(i0.saturating_add(k - 1)), w[k as usize]))
                    .collect()
            }
        }
    }
}

/// Most neighbours one GridSample output point may read (4^8: cubic in 8-D).
const MAX_NEIGHBOURS: usize = 1 << 16;

fn grid_sample(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "GridSample";
    let p = ctx.attrs::<GridSample>()?;
    let x = input(OP, inputs, 0)?;
    let grid = input(OP, inputs, 1)?;
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported_type(OP, x.dtype()));
    }
    let xs = x.shape();
    let gs = grid.shape();
    if xs.len() < 3 || (p.only_2d && xs.len() != 4) {
        let want = if p.only_2d { "4" } else { "3 or more" };
        return Err(format!(
            "{OP}: X must have rank {want} ([N, C, spatial...]) at opset {}, got shape {xs:?}",
            ctx.opset
        ));
    }
    let r = xs.len() - 2;
    if gs.len() != r + 2 || gs[0] != xs[0] || gs[r + 1] != r {
        return Err(format!(
            "{OP}: grid must have shape [{}, out..., {r}] for X of shape {xs:?}, got {gs:?}",
            xs[0]
        ));
    }
    let (n, c) = (xs[0], xs[1]);
    let dims = &xs[2..];
    // Each output point reads taps^r neighbours: refuse absurd numbers of axes.
    let taps: usize = match p.mode {
        SampleMode::Nearest => 1,
        SampleMode::Linear => 2,
        SampleMode::Cubic => 4,
    };
    match u32::try_from(r).ok().and_then(|r| taps.checked_pow(r)) {
        Some(k) if k <= MAX_NEIGHBOURS => {}
        _ => {
            return Err(format!(
                "{OP}: {r} spatial axes give each point {taps}^{r} neighbours, more than {MAX_NEIGHBOURS}"
            ))
        }
    }
    let mut out_shape = vec![n, c];
    out_shape.extend_from_slice(&gs[1..=r]);
    check_out(ctx, OP, &out_shape, 64)?;
    let positions = product(OP, &gs[1..=r])?;
    let plane: usize = dims.iter().product();
    if plane == 0 && n * c * positions > 0 {
        return Err(format!(
            "{OP}: X has an empty spatial axis ({xs:?}): there is nothing to sample"
        ));
    }
    let dstrides = strides(dims);
    let (dtype, xv) = float_in(OP, "X", x)?;
    let (_, gv) = float_in(OP, "grid", grid)?;
    let mut out = vec![0.0f64; n * c * positions];
    // The neighbour combinations of one output position: (offset in the plane, weight).
    let mut combos: Vec<(usize, f64)> = Vec::new();
    for ni in 0..n {
        for o in 0..positions {
            let g = &gv[(ni * positions + o) * r..][..r];
            combos.clear();
            combos.push((0, 1.0));
            let mut zero = false;
            for (j, &len) in dims.iter().enumerate() {
                let taps = p.taps(g[r - 1 - j], len);
                let mut next = Vec::with_capacity(combos.len() * taps.len());
                for &(off, w) in &combos {
                    for &(i, tw) in &taps {
                        if let Some(i) = i {
                            next.push((off + i * dstrides[j], w * tw));
                        }
                    }
                }
                combos = next;
                if combos.is_empty() {
                    zero = true;
                    break;
                }
            }
            if zero {
                continue;
            }
            for ci in 0..c {
                let base = (ni * c + ci) * plane;
                let v: f64 = combos.iter().map(|&(off, w)| w * xv[base + off]).sum();
                out[(ni * c + ci) * positions + o] = v;
            }
        }
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

// ---------------------------------------------------------------------------------------------
// AffineGrid

#[derive(Debug)]
pub struct AffineGrid {
    pub align_corners: bool,
}

impl AffineGrid {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(AffineGrid {
            align_corners: a.flag("align_corners", false)?,
        }))
    }
}

impl Op for AffineGrid {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = cx.ints(1).and_then(|s| {
            let spatial = s.get(2..).filter(|d| matches!(d.len(), 2 | 3))?;
            if s.iter().any(|&d| d < 0) {
                return None;
            }
            let mut out = vec![Dim::Known(s[0])];
            out.extend(spatial.iter().map(|&d| Dim::Known(d)));
            out.push(Dim::Known(spatial.len() as i64));
            Some(out)
        });
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        affine_grid
    }
}

fn affine_grid(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "AffineGrid";
    let p = ctx.attrs::<AffineGrid>()?;
    let theta = input(OP, inputs, 0)?;
    let size = int_list(OP, "size", input(OP, inputs, 1)?)?;
    if !matches!(theta.dtype(), DType::F32 | DType::F64) {
        return Err(unsupported_type(OP, theta.dtype()));
    }
    let r = match size.len() {
        4 => 2,
        5 => 3,
        k => {
            return Err(format!(
                "{OP}: size must have 4 ([N, C, H, W]) or 5 ([N, C, D, H, W]) elements, got {k}"
            ))
        }
    };
    let size: Vec<usize> = size
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{OP}: size {size:?} has a negative dim"))?;
    let n = size[0];
    if theta.shape() != [n, r, r + 1] {
        return Err(format!(
            "{OP}: theta must have shape [{n}, {r}, {}] for size {size:?}, got {:?}",
            r + 1,
            theta.shape()
        ));
    }
    let spatial = &size[2..];
    let mut out_shape = vec![n];
    out_shape.extend_from_slice(spatial);
    out_shape.push(r);
    check_out(ctx, OP, &out_shape, 64)?;
    let (dtype, tv) = float_in(OP, "theta", theta)?;
    // The base coordinate of element i on an axis of `len`.
    let base = |i: usize, len: usize| -> f64 {
        if len <= 1 {
            0.0
        } else if p.align_corners {
            -1.0 + 2.0 * i as f64 / (len - 1) as f64
        } else {
            -1.0 + (2 * i + 1) as f64 / len as f64
        }
    };
    let points = product(OP, spatial)?;
    let mut out = Vec::with_capacity(n * points * r);
    let mut idx = vec![0usize; r];
    for ni in 0..n {
        let t = &tv[ni * r * (r + 1)..][..r * (r + 1)];
        idx.iter_mut().for_each(|i| *i = 0);
        for _ in 0..points {
            // Homogeneous point: x (last axis) first, then y, (z), then 1.
            let mut h: Vec<f64> = (0..r)
                .map(|j| base(idx[r - 1 - j], spatial[r - 1 - j]))
                .collect();
            h.push(1.0);
            for row in 0..r {
                out.push((0..=r).map(|k| t[row * (r + 1) + k] * h[k]).sum());
            }
            next_index(&mut idx, spatial);
        }
    }
    Ok(vec![float_out(OP, dtype, &out_shape, out)?])
}

#[cfg(test)]
#[path = "sample_tests.rs"]
mod tests;
