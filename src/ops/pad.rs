//! ai.onnx Pad: grow (or, with negative pads, crop) a tensor along its axes. Pure data movement,
//! one generic kernel over the element type; output sizes are checked against the limits before
//! anything is allocated. Also the row-gather pass Resize's nearest mode shares.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Pad | 1 | `paddings` (required), `mode` ("constant"), `value` (0.0) | data -> padded |
//! | Pad | 2 | `pads` (required), `mode` ("constant"), `value` (0.0) | data -> padded |
//! | Pad | 11, 13 | `mode` ("constant") | data, pads (int64), optional constant_value (scalar of T, 0) -> padded |
//! | Pad | 18 | `mode` ("constant") | ... , optional axes (int32/int64; all axes) -> padded |
//! | Pad | 19, 21, 23, 24, 25 | `mode` ("constant") | as 18 |
//!
//! `pads` is `[b_1, ..., b_k, e_1, ..., e_k]` for the k padded axes (every axis before 18):
//! `b_i` elements added before axis i, `e_i` after; negative values remove elements (the kernel
//! crops first, then pads the cropped tensor). Modes: `constant` fills with the value; `edge`
//! repeats the border element; `reflect` mirrors without repeating the border, periodically
//! when a pad is longer than the axis (as numpy does); `wrap` (from 19) repeats the axis
//! periodically. Version changes: 11 moved pads and value to inputs (the value now of the data's
//! type), 13 widened the types, 18 added `axes`, 19 the `wrap` mode; 21-25 only add element types.

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, int_list, norm_axes, opt_input, Num};
use super::infer::norm_axis as infer_axis;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// Where a Pad's pads and fill value come from.
#[derive(Clone, Debug, PartialEq)]
pub enum PadArgs {
    /// Before 11: the `pads` attribute (`paddings` in version 1) and the float `value`.
    Attributes { pads: Vec<i64>, value: f32 },
    /// From 11: pads, constant_value and (from 18, `axes` true) axes are inputs 1 to 3.
    Inputs { axes: bool },
}

#[derive(Debug)]
pub struct Pad {
    pub mode: PadMode,
    pub args: PadArgs,
}

impl Pad {
    pub fn parse(a: &Attrs) -> P {
        let mode = match a.string("mode")?.as_deref().unwrap_or("constant") {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" if a.opset >= 19 => PadMode::Wrap,
            "wrap" => return Err("Pad: mode 'wrap' is defined from opset 19".into()),
            m => return Err(format!("Pad: mode '{m}' is not supported")),
        };
        let args = if a.opset >= 11 {
            PadArgs::Inputs {
                axes: a.opset >= 18,
            }
        } else {
            let name = if a.opset < 2 { "paddings" } else { "pads" };
            PadArgs::Attributes {
                pads: a
                    .ints(name)?
                    .ok_or_else(|| format!("Pad: attribute '{name}' is required"))?,
                value: a.float("value", 0.0)?,
            }
        };
        Ok(Box::new(Pad { mode, args }))
    }

    /// The output dims: a padded axis of known size gets its new size, one padded by a net zero
    /// keeps its dim; pads or axes not statically known leave the axes they may touch unknown.
    fn shape(&self, cx: &InferCx, s: &[Dim]) -> Vec<Dim> {
        let rank = s.len();
        let (pads, axes) = match &self.args {
            PadArgs::Attributes { pads, .. } => (Some(pads.clone()), Some(None)),
            PadArgs::Inputs { axes } => (
                cx.ints(1),
                if *axes && cx.has_input(3) {
                    cx.ints(3).map(Some)
                } else {
                    Some(None)
                },
            ),
        };
        let axes: Option<Vec<usize>> = match axes {
            Some(Some(a)) => a.iter().map(|&x| infer_axis(x, rank)).collect(),
            Some(None) => Some((0..rank).collect()),
            None => None,
        };
        let mut out = s.to_vec();
        let Some(axes) = axes else {
            return vec![Dim::Unknown; rank];
        };
        let pads = pads.filter(|p| p.len() == 2 * axes.len());
        for (i, &ax) in axes.iter().enumerate() {
            let net = pads
                .as_ref()
                .and_then(|p| p[i].checked_add(p[i + axes.len()]));
            out[ax] = match (&s[ax], net) {
                (d, Some(0)) => d.clone(),
                (Dim::Known(d), Some(n)) => match d.checked_add(n) {
                    Some(v) if v >= 0 => Dim::Known(v),
                    _ => Dim::Unknown,
                },
                _ => Dim::Unknown,
            };
        }
        out
    }
}

impl Op for Pad {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().map(|s| self.shape(cx, s));
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        pad
    }
}

/// The element types the data-movement kernels (Pad, Resize) handle generically: how to find an
/// array of this type in a `Tensor`, and how to convert to and from f64 (ints round half to
/// even and saturate, as the reference casts an interpolated value back).
pub(super) trait Elem: Copy + Default + PartialEq + Send + Sync + 'static {
    /// What Resize interpolates this type in (float32 for float32, float64 otherwise).
    type Acc: Num + Elem;
    /// False for bool (no interpolation).
    const NUMBER: bool = true;
    fn array(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn of_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

macro_rules! elem {
    ($t:ty, $var:ident, $acc:ty, $of:expr, $to:expr $(, $number:expr)?) => {
        impl Elem for $t {
            type Acc = $acc;
            $(const NUMBER: bool = $number;)?
            fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$var(a) => Some(a),
                    _ => None,
                }
            }
            fn of_f64(v: f64) -> Self {
                $of(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
        }
    };
}
elem!(f32, F32, f32, |v| v as f32, f64::from);
elem!(f64, F64, f64, |v| v, |v| v);
elem!(
    i32,
    I32,
    f64,
    |v: f64| v.round_ties_even() as i32,
    f64::from
);
elem!(i64, I64, f64, |v: f64| v.round_ties_even() as i64, |v| v
    as f64);
elem!(
    bool,
    Bool,
    f64,
    |v| v != 0.0,
    |v| f64::from(u8::from(v)),
    false
);

/// Calls `$f::<T>($a, ...)` for the array in `$t`, whatever its element type, and wraps the
/// `ArrayD<T>` it returns (with `?`) back into a `Tensor`; other element types are an error.
macro_rules! each_elem {
    ($op:expr, $t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::tensor::Tensor::F32($a) => $crate::tensor::Tensor::F32($body?),
            $crate::tensor::Tensor::F64($a) => $crate::tensor::Tensor::F64($body?),
            $crate::tensor::Tensor::I32($a) => $crate::tensor::Tensor::I32($body?),
            $crate::tensor::Tensor::I64($a) => $crate::tensor::Tensor::I64($body?),
            $crate::tensor::Tensor::Bool($a) => $crate::tensor::Tensor::Bool($body?),
            #[allow(unreachable_patterns)]
            t => return Err($crate::ops::common::unsupported_type($op, t.dtype())),
        }
    };
}
pub(super) use each_elem;

/// Copies `src` (row-major, `dims`) into a new buffer whose axis `axis` has `map.len()`
/// entries: entry j is the source's slice `map[j]` along that axis, or `fill` where `None`.
/// Every index in `map` must be below `dims[axis]`.
pub(super) fn gather_axis<T: Clone>(
    src: &[T],
    dims: &[usize],
    axis: usize,
    map: &[Option<usize>],
    fill: &T,
) -> Vec<T> {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let n_in = dims[axis];
    let mut out = Vec::with_capacity(outer * map.len() * inner);
    for o in 0..outer {
        for m in map {
            match m {
                Some(i) => {
                    let start = (o * n_in + i) * inner;
                    out.extend_from_slice(&src[start..start + inner]);
                }
                None => out.extend(std::iter::repeat_n(fill.clone(), inner)),
            }
        }
    }
    out
}

/// Source index (or `None`: the fill value) of each of the `n + b + e` output positions of one
/// axis of `n` elements padded by `b` before and `e` after (negative: cropped), in `mode`.
fn axis_map(mode: PadMode, n: usize, b: i64, e: i64) -> Result<Vec<Option<usize>>, String> {
    let n = n as i64;
    let lo = (-b).max(0);
    let kept = n - lo - (-e).max(0);
    let out = n + b + e;
    if kept <= 0 && out > 0 && mode != PadMode::Constant {
        return Err(format!(
            "Pad: mode {mode:?} has no elements to repeat on an axis of size {n} padded by \
             ({b}, {e})"
        ));
    }
    let first = b.max(0);
    Ok((0..out)
        .map(|j| {
            let t = j - first;
            let t = match mode {
                _ if (0..kept).contains(&t) => t,
                PadMode::Constant => return None,
                PadMode::Edge => t.clamp(0, kept - 1),
                PadMode::Wrap => t.rem_euclid(kept),
                PadMode::Reflect if kept == 1 => 0,
                PadMode::Reflect => {
                    let period = 2 * (kept - 1);
                    let r = t.rem_euclid(period);
                    if r < kept {
                        r
                    } else {
                        period - r
                    }
                }
            };
            Some((lo + t) as usize)
        })
        .collect())
}

/// The padded array: one gather pass per padded axis, the shrinking axes first (so no
/// intermediate is larger than both the input and the output).
fn pad_array<T: Clone>(
    a: &ArrayD<T>,
    mode: PadMode,
    pads: &[(usize, i64, i64)],
    out_dims: &[usize],
    fill: T,
) -> Result<ArrayD<T>, String> {
    let mut dims = a.shape().to_vec();
    if out_dims.contains(&0) {
        return ArrayD::from_shape_vec(IxDyn(out_dims), vec![]).map_err(|e| e.to_string());
    }
    let mut data: Vec<T> = a.iter().cloned().collect();
    for (ax, b, e) in shrinking_first(pads) {
        let map = axis_map(mode, dims[ax], b, e)?;
        data = gather_axis(&data, &dims, ax, &map, &fill);
        dims[ax] = map.len();
    }
    ArrayD::from_shape_vec(IxDyn(&dims), data).map_err(|e| e.to_string())
}

/// The padded axes, the shrinking ones first (not generic: one sort for every element type).
fn shrinking_first(pads: &[(usize, i64, i64)]) -> Vec<(usize, i64, i64)> {
    let mut order: Vec<(usize, i64, i64)> = pads
        .iter()
        .copied()
        .filter(|p| p.1 != 0 || p.2 != 0)
        .collect();
    crate::ops::common::sort_by_dyn(&mut order, &|p, q| {
        p.1.saturating_add(p.2).cmp(&q.1.saturating_add(q.2))
    });
    order
}

/// The fill value: the constant_value input (of the data's type, one element), or the `value`
/// attribute before 11, or zero.
fn fill_value<T: Elem>(cv: Option<&Tensor>, value: f32) -> Result<T, String> {
    let Some(t) = cv else {
        return Ok(T::of_f64(f64::from(value)));
    };
    let a = T::array(t)
        .ok_or_else(|| format!("Pad: constant_value is {} but the data is not", t.dtype()))?;
    match a.len() {
        1 => Ok(a.iter().copied().next().unwrap_or_default()),
        n => Err(format!(
            "Pad: constant_value must have one element, got {n}"
        )),
    }
}

/// Pad (1 to 25): see the table above.
pub fn pad(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Pad";
    let a = ctx.attrs::<Pad>()?;
    let data = input(OP, inputs, 0)?;
    let rank = data.shape().len();
    let (pads, value, cv, axes) = match &a.args {
        PadArgs::Attributes { pads, value } => (pads.clone(), *value, None, None),
        PadArgs::Inputs { axes } => {
            let axes = match opt_input(inputs, 3).filter(|_| *axes) {
                Some(t) => Some(int_list(OP, "axes", t)?),
                None => None,
            };
            let pads = int_list(OP, "pads", input(OP, inputs, 1)?)?;
            (pads, 0.0, opt_input(inputs, 2), axes)
        }
    };
    let axes = match axes {
        Some(ax) => norm_axes(OP, &ax, rank)?,
        None => (0..rank).collect(),
    };
    let k = axes.len();
    if pads.len() != 2 * k {
        return Err(format!(
            "{OP}: 'pads' has {} values; {} expected (begin and end for {k} axes)",
            pads.len(),
            2 * k
        ));
    }
    let mut out_dims = data.shape().to_vec();
    let mut per_axis = Vec::with_capacity(k);
    for (i, &ax) in axes.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + k]);
        let d = out_dims[ax];
        let size = (d as i64)
            .checked_add(b)
            .and_then(|v| v.checked_add(e))
            .filter(|&v| v >= 0)
            .ok_or_else(|| format!("{OP}: axis {ax} of size {d} padded by ({b}, {e}) has a negative or overflowing size"))?;
        out_dims[ax] =
            usize::try_from(size).map_err(|_| format!("{OP}: axis {ax} is too large"))?;
        per_axis.push((ax, b, e));
    }
    check_out(ctx, OP, &out_dims, bits(data.dtype()))?;
    let m = a.mode;
    let out = match data {
        // Strings: the constant is constant_value's one string, or "" (the spec's zero).
        Tensor::Str(x) => {
            let fill = match cv {
                None => String::new(),
                Some(Tensor::Str(c)) if c.len() == 1 => {
                    c.iter().next().cloned().unwrap_or_default()
                }
                Some(t) => {
                    return Err(format!(
                    "{OP}: constant_value must be one string for string data, got {} of shape {:?}",
                    t.dtype(),
                    t.shape()
                ))
                }
            };
            Tensor::Str(pad_array(x, m, &per_axis, &out_dims, fill)?)
        }
        _ => each_elem!(OP, data, x => fill_value(cv, value)
            .and_then(|f| pad_array(x, m, &per_axis, &out_dims, f))),
    };
    Ok(vec![out])
}

#[cfg(test)]
#[path = "pad_tests.rs"]
mod tests;
