//! Convolutions: ai.onnx Conv and ConvTranspose, and the window geometry (kernel, strides,
//! dilations, pads, auto_pad) they share with the pools (pool.rs).
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | Conv | 1, 11, 22 | `auto_pad` (NOTSET), `dilations` (1s), `group` (1), `kernel_shape` (W's dims), `pads` (0s), `strides` (1s) | X [N, C, D...], W [M, C/group, k...], B [M] (optional): T -> Y [N, M, out...]: T (float) |
//! | ConvTranspose | 1, 11, 22 | Conv's, and `output_padding` (0s), `output_shape` (computed) | X [N, C, D...], W [C, M/group, k...], B [M] (optional): T -> Y [N, M, out...]: T (float) |
//!
//! Per spatial axis, with the kernel's extent `ek = d·(k - 1) + 1`: Conv (and the pools)
//! `out = floor((in + pb + pe - ek) / s) + 1` under NOTSET (pads) or VALID (no pads); SAME_UPPER
//! and SAME_LOWER give `out = ceil(in / s)` and pad `max(0, (out - 1)·s + ek - in)`, the odd one at
//! the end (UPPER) or the beginning (LOWER). The pools' `ceil_mode` rounds up instead and drops a
//! last window that would start in the end padding (the auto_pad sizes are the same either way).
//! ConvTranspose: `out = s·(in - 1) + output_padding + ek - pb - pe`; SAME_* make `out = in·s`
//! and an `output_shape` sets it; either way the pads are the total `s·(in - 1) +
//! output_padding + ek - out` split in two (floor halves): from 11 the smaller half first for
//! SAME_UPPER and last otherwise; before 11 the other way round (registry entry 11).
//! Conv 11 only reworded auto_pad (SAME sizes as above), 22 added bfloat16: no computed value
//! changes. 1 to 3 spatial dims are supported; more is an error naming the op.
//!
//! The float32 kernel: im2col feeding MatMul's GEMM (`matmul::MatElem`), no copy at all for
//! 1x1 stride-1 unpadded kernels, and a direct loop for depthwise groups (one input channel
//! each). ConvTranspose is the GEMM of W' and X, then col2im.

use ndarray::{ArrayD, ArrayView2, ArrayViewMut2, IxDyn};

use super::common::{check_out, input, opt_input, type_mismatch, unsupported_type, Num};
use super::matmul::MatElem;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// The window attributes the convolutions and the pools share, validated on their own (their
/// lengths against the input's rank by the kernel).
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub auto_pad: AutoPad,
    /// Required by the pools; Conv falls back on W's dims.
    pub kernel_shape: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
    pub dilations: Option<Vec<i64>>,
    /// `[begin..., end...]`.
    pub pads: Option<Vec<i64>>,
    pub ceil_mode: bool,
}

/// One spatial axis of a window in effect: input, output and kernel lengths, stride, dilation
/// and pads (negative only for a ConvTranspose output_shape smaller than its full output).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Axis {
    pub inp: usize,
    pub out: usize,
    pub k: usize,
    pub s: usize,
    pub d: usize,
    pub pb: i64,
    pub pe: i64,
}

const UNIT: Axis = Axis {
    inp: 1,
    out: 1,
    k: 1,
    s: 1,
    d: 1,
    pb: 0,
    pe: 0,
};

/// The indices `t` in `0..count` with `0 <= p0 + t·step < limit`, as a range.
pub(super) fn span(p0: i64, step: usize, count: usize, limit: i64) -> (usize, usize) {
    let st = step as i64;
    let hi = if limit > p0 {
        ((limit - p0 + st - 1) / st).min(count as i64)
    } else {
        0
    };
    let lo = if p0 >= 0 { 0 } else { (-p0 + st - 1) / st }.min(hi);
    (lo as usize, hi as usize)
}

impl Axis {
    /// Input position of output `o`, tap `k` (Conv; the output position of input `o` for
    /// ConvTranspose). Only for `o` in the matching `span`.
    #[inline(always)]
    pub fn pos(&self, o: usize, k: usize) -> usize {
        ((o * self.s + k * self.d) as i64 - self.pb) as usize
    }
    /// The outputs whose tap `k` reads inside the input.
    pub fn outs_of_tap(&self, k: usize) -> (usize, usize) {
        span((k * self.d) as i64 - self.pb, self.s, self.out, self.inp as i64)
    }
    /// The taps of output `o`'s window that read inside the input.
    pub fn taps(&self, o: usize) -> (usize, usize) {
        span((o * self.s) as i64 - self.pb, self.d, self.k, self.inp as i64)
    }
    /// How many taps of output `o`'s window lie inside the padded input.
    pub fn padded_taps(&self, o: usize) -> usize {
        let (lo, hi) = span((o * self.s) as i64, self.d, self.k, self.inp as i64 + self.pb + self.pe);
        hi - lo
    }
}

/// 1 to 3 spatial axes as three (unit axes in front), so every kernel loops over (z, y, x).
pub(super) fn to3(axes: &[Axis]) -> [Axis; 3] {
    let mut a = [UNIT; 3];
    a[3 - axes.len()..].copy_from_slice(axes);
    a
}

/// Attribute values must lie in `[min, i32::MAX]` (larger ones only overflow the arithmetic).
fn in_range(name: &str, v: &Option<Vec<i64>>, min: i64) -> R<()> {
    match v {
        Some(v) if v.iter().any(|&x| x < min || x > i32::MAX as i64) => Err(format!(
            "attribute '{name}' must be {} (at most {}), got {v:?}",
            if min > 0 { "positive" } else { "non-negative" },
            i32::MAX
        )),
        _ => Ok(()),
    }
}

impl Window {
    /// `dilations` and `ceil_mode` are read only where the op's version has them.
    pub(super) fn read(a: &Attrs, dilations: bool, ceil_mode: bool) -> R<Window> {
        let auto_pad = match a.string("auto_pad")?.as_deref() {
            None | Some("NOTSET") => AutoPad::NotSet,
            Some("SAME_UPPER") => AutoPad::SameUpper,
            Some("SAME_LOWER") => AutoPad::SameLower,
            Some("VALID") => AutoPad::Valid,
            Some(o) => {
                return Err(format!(
                    "attribute 'auto_pad' is '{o}', not NOTSET, SAME_UPPER, SAME_LOWER or VALID"
                ))
            }
        };
        let w = Window {
            auto_pad,
            kernel_shape: a.ints("kernel_shape")?,
            strides: a.ints("strides")?,
            dilations: if dilations { a.ints("dilations")? } else { None },
            pads: a.ints("pads")?,
            ceil_mode: ceil_mode && a.flag("ceil_mode", false)?,
        };
        in_range("kernel_shape", &w.kernel_shape, 1)?;
        in_range("strides", &w.strides, 1)?;
        in_range("dilations", &w.dilations, 1)?;
        in_range("pads", &w.pads, 0)?;
        let lens = [
            ("kernel_shape", w.kernel_shape.as_ref().map(Vec::len)),
            ("strides", w.strides.as_ref().map(Vec::len)),
            ("dilations", w.dilations.as_ref().map(Vec::len)),
            ("pads", w.pads.as_ref().map(|p| p.len() / 2)),
        ];
        let mut given = lens.iter().filter_map(|(n, l)| l.map(|l| (n, l)));
        if let Some((n0, l0)) = given.next() {
            if let Some((n, l)) = given.find(|(_, l)| *l != l0) {
                return Err(format!(
                    "attributes '{n0}' and '{n}' are for different numbers of spatial axes ({l0} and {l})"
                ));
            }
        }
        if w.pads.as_ref().is_some_and(|p| p.len() % 2 == 1) {
            return Err("attribute 'pads' must have an even length (begins, then ends)".into());
        }
        Ok(w)
    }

    fn stride(&self, i: usize) -> i64 {
        self.strides.as_ref().and_then(|v| v.get(i).copied()).unwrap_or(1)
    }
    fn dilation(&self, i: usize) -> i64 {
        self.dilations.as_ref().and_then(|v| v.get(i).copied()).unwrap_or(1)
    }
    fn pad(&self, i: usize, n: usize) -> (i64, i64) {
        let at = |j: usize| self.pads.as_ref().and_then(|p| p.get(j).copied()).unwrap_or(0);
        (at(i), at(i + n))
    }
    pub(super) fn kernel(&self, i: usize) -> Option<i64> {
        self.kernel_shape.as_ref().and_then(|k| k.get(i).copied())
    }

    /// Output length and pads of spatial axis `i` of `n` (Conv and the pools), for input
    /// length `inp` and kernel `k`.
    fn out_len(&self, i: usize, n: usize, inp: i64, k: i64) -> R<(i64, i64, i64)> {
        let (s, d) = (self.stride(i), self.dilation(i));
        let ek = d.saturating_mul(k - 1).saturating_add(1);
        if matches!(self.auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
            let out = inp.saturating_add(s - 1) / s;
            let total = ((out - 1).saturating_mul(s) + ek - inp).max(0);
            let small = total / 2;
            let pads = if self.auto_pad == AutoPad::SameUpper {
                (small, total - small)
            } else {
                (total - small, small)
            };
            return Ok((out, pads.0, pads.1));
        }
        let (pb, pe) = if self.auto_pad == AutoPad::Valid {
            (0, 0)
        } else {
            self.pad(i, n)
        };
        let span = inp + pb + pe - ek;
        if span < 0 {
            return Err(format!(
                "the kernel's extent {ek} (kernel {k}, dilation {d}) is larger than the padded \
                 input {inp} + {pb} + {pe} on spatial axis {i}"
            ));
        }
        let mut out = span / s + 1;
        if self.ceil_mode && self.auto_pad == AutoPad::NotSet {
            out = (span + s - 1) / s + 1;
            if (out - 1) * s >= inp + pb {
                out -= 1;
            }
        }
        Ok((out, pb, pe))
    }

    /// The axes in effect for input spatial dims `x` and kernel dims `k` (from W or the
    /// attribute), after checking the attributes' lengths against them.
    pub(super) fn axes(&self, op: &str, x: &[usize], k: &[usize]) -> R<Vec<Axis>> {
        let n = x.len();
        let lens = [
            ("kernel_shape", self.kernel_shape.as_ref().map(Vec::len)),
            ("strides", self.strides.as_ref().map(Vec::len)),
            ("dilations", self.dilations.as_ref().map(Vec::len)),
            ("pads", self.pads.as_ref().map(|p| p.len() / 2)),
        ];
        if let Some((name, Some(l))) = lens.iter().find(|(_, l)| l.is_some_and(|l| l != n)) {
            return Err(format!(
                "{op}: attribute '{name}' is for {l} spatial axes, the input has {n}"
            ));
        }
        (0..n)
            .map(|i| {
                let (out, pb, pe) = self
                    .out_len(i, n, x[i] as i64, k[i] as i64)
                    .map_err(|e| format!("{op}: {e}"))?;
                Ok(Axis {
                    inp: x[i],
                    out: out as usize,
                    k: k[i],
                    s: self.stride(i) as usize,
                    d: self.dilation(i) as usize,
                    pb,
                    pe,
                })
            })
            .collect()
    }

    /// The output dim of spatial axis `i` of `n` for input dim `inp` and kernel `k`: computed when
    /// known; the same symbol when the arithmetic is the identity; else a symbol derived from the
    /// input's and the attributes (equal inputs and attributes, equal names), or unknown.
    pub(super) fn infer_dim(&self, i: usize, n: usize, inp: &Dim, k: Option<i64>) -> Dim {
        let Some(k) = k.filter(|&k| k > 0) else {
            return Dim::Unknown;
        };
        let name = match inp {
            Dim::Known(v) => {
                return self.out_len(i, n, *v, k).map_or(Dim::Unknown, |o| Dim::Known(o.0))
            }
            Dim::Sym(name) => name,
            Dim::Unknown => return Dim::Unknown,
        };
        let s = self.stride(i);
        let ek = self.dilation(i).saturating_mul(k - 1).saturating_add(1);
        let (pb, pe) = self.pad(i, n);
        let a = if self.auto_pad == AutoPad::Valid {
            -ek
        } else {
            pb + pe - ek
        };
        match self.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower if s == 1 => Dim::Sym(name.clone()),
            AutoPad::SameUpper | AutoPad::SameLower => derived(format!("ceil({name}/{s})")),
            _ if s == 1 => {
                // Rounding up changes nothing at stride 1, but a last window starting in the
                // end padding (pe >= ek) is dropped.
                let c = a + 1 - i64::from(self.ceil_mode && pe >= ek);
                if c == 0 {
                    Dim::Sym(name.clone())
                } else {
                    derived(format!("{name}{}", offset(c)))
                }
            }
            _ if self.ceil_mode && self.auto_pad == AutoPad::NotSet => {
                derived(format!("ceil_window({name}{},{s},{pb})", offset(a)))
            }
            _ => derived(format!("({name}{})/{s}+1", offset(a))),
        }
    }
}

/// A symbol derived by inference: `?` like the undecided dims, so a re-inference replaces it.
fn derived(body: String) -> Dim {
    Dim::Sym(format!("?({body})"))
}

fn offset(c: i64) -> String {
    if c == 0 {
        String::new()
    } else {
        format!("{c:+}")
    }
}

/// Element types of the convolution and pool kernels.
pub(super) trait Elem: Num {
    const LOWEST: Self;
    fn of(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn wrap(a: ArrayD<Self>) -> Tensor;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! elem {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            const LOWEST: Self = <$t>::MIN;
            fn of(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$v(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$v(a)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
elem!(f32, F32);
elem!(f64, F64);
elem!(i32, I32);
elem!(i64, I64);

/// `t` as X's element type `T`.
pub(super) fn same<'a, T: Elem>(op: &str, x: &Tensor, t: &'a Tensor) -> R<&'a ArrayD<T>> {
    T::of(t).ok_or_else(|| type_mismatch(op, x.dtype(), t.dtype()))
}

/// A contiguous copy-free slice of `a` (standard layout), or an owned one.
pub(super) fn data<T: Clone>(a: &ArrayD<T>) -> std::borrow::Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().cloned().collect()),
    }
}

/// The number of spatial dims of an input of shape `xs` (1 to 3).
pub(super) fn spatial(op: &str, xs: &[usize]) -> R<usize> {
    match xs.len() {
        3..=5 => Ok(xs.len() - 2),
        r if r > 5 => Err(format!(
            "{op}: {} spatial dims are not supported (1 to 3 are)",
            r - 2
        )),
        _ => Err(format!(
            "{op}: X must be [N, C, spatial...] with 1 to 3 spatial dims, got shape {xs:?}"
        )),
    }
}

#[derive(Debug)]
pub struct Conv {
    pub window: Window,
    pub group: i64,
}

impl Conv {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Conv {
            window: Window::read(a, true, false)?,
            group: group(a)?,
        }))
    }
}

fn group(a: &Attrs) -> R<i64> {
    match a.int("group", 1)? {
        g if g >= 1 => Ok(g),
        g => Err(format!("attribute 'group' must be positive, got {g}")),
    }
}

fn known(d: &Dim) -> Option<i64> {
    match d {
        Dim::Known(v) => Some(*v),
        _ => None,
    }
}

/// X's shape, and W's when it has X's rank (>= 3).
fn shapes(cx: &InferCx) -> Option<(Vec<Dim>, Option<Vec<Dim>>)> {
    let x = cx.input(0).shape.filter(|s| s.len() >= 3)?;
    let w = cx.input(1).shape.filter(|w| w.len() == x.len());
    Some((x, w))
}

impl Op for Conv {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = shapes(cx).map(|(x, w)| {
            let n = x.len() - 2;
            let mut out = vec![x[0].clone(), w.as_ref().map_or(Dim::Unknown, |w| w[0].clone())];
            for i in 0..n {
                let k = self.window.kernel(i);
                let k = k.or_else(|| w.as_ref().and_then(|w| known(&w[i + 2])));
                out.push(self.window.infer_dim(i, n, &x[i + 2], k));
            }
            out
        });
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        conv
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct ConvTranspose {
    pub window: Window,
    pub group: i64,
    pub output_padding: Option<Vec<i64>>,
    /// Spatial dims only (a full [N, C, ...] shape is cut to them at parse).
    pub output_shape: Option<Vec<i64>>,
    /// Before 11 the larger half of the computed pads goes first for SAME_UPPER.
    pub upper_first: bool,
}

impl ConvTranspose {
    pub fn parse(a: &Attrs) -> P {
        let window = Window::read(a, true, false)?;
        let output_padding = a.ints("output_padding")?;
        in_range("output_padding", &output_padding, 0)?;
        let output_shape = a.ints("output_shape")?;
        in_range("output_shape", &output_shape, 0)?;
        Ok(Box::new(ConvTranspose {
            window,
            group: group(a)?,
            output_padding,
            output_shape,
            upper_first: a.opset < 11,
        }))
    }

    fn requested(&self, i: usize, n: usize) -> R<Option<i64>> {
        match &self.output_shape {
            None => Ok(None),
            Some(s) if s.len() == n => Ok(Some(s[i])),
            Some(s) if s.len() == n + 2 => Ok(Some(s[i + 2])),
            Some(s) => Err(format!(
                "ConvTranspose: attribute 'output_shape' {s:?} is for {} spatial axes, the input has {n}",
                s.len()
            )),
        }
    }

    /// Output length and pads of spatial axis `i` of `n`.
    fn out_len(&self, i: usize, n: usize, inp: i64, k: i64) -> R<(i64, i64, i64)> {
        let w = &self.window;
        let (s, d) = (w.stride(i), w.dilation(i));
        let op = self.output_padding.as_ref().and_then(|p| p.get(i).copied());
        let full = s
            .saturating_mul(inp - 1)
            .saturating_add(op.unwrap_or(0) + d.saturating_mul(k - 1) + 1);
        let same = matches!(w.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let (out, pb, pe) = match self.requested(i, n)? {
            Some(o) => (o, None, None),
            None if same => (inp.saturating_mul(s), None, None),
            None if w.auto_pad == AutoPad::Valid => (full, Some(0), Some(0)),
            None => {
                let (pb, pe) = w.pad(i, n);
                (full - pb - pe, Some(pb), Some(pe))
            }
        };
        if out < 0 || (inp > 0 && out == 0 && pb.is_some()) {
            return Err(format!(
                "ConvTranspose: the output length on spatial axis {i} would be {out}"
            ));
        }
        if let (Some(pb), Some(pe)) = (pb, pe) {
            return Ok((out, pb, pe));
        }
        let total = full - out;
        let half = total.div_euclid(2);
        let upper = w.auto_pad == AutoPad::SameUpper;
        Ok(if upper != self.upper_first {
            (out, half, total - half)
        } else {
            (out, total - half, half)
        })
    }

    fn infer_dim(&self, i: usize, n: usize, inp: &Dim, k: Option<i64>) -> Dim {
        let w = &self.window;
        if let Ok(Some(o)) = self.requested(i, n) {
            return Dim::Known(o);
        }
        let (Some(k), s) = (k.filter(|&k| k > 0), w.stride(i)) else {
            return Dim::Unknown;
        };
        match inp {
            Dim::Known(v) => self.out_len(i, n, *v, k).map_or(Dim::Unknown, |o| Dim::Known(o.0)),
            Dim::Sym(name) if w.auto_pad != AutoPad::NotSet && w.auto_pad != AutoPad::Valid => {
                if s == 1 {
                    Dim::Sym(name.clone())
                } else {
                    derived(format!("{s}*{name}"))
                }
            }
            Dim::Sym(name) => {
                let op = self.output_padding.as_ref().and_then(|p| p.get(i).copied());
                let (pb, pe) = if w.auto_pad == AutoPad::Valid {
                    (0, 0)
                } else {
                    w.pad(i, n)
                };
                let c = op.unwrap_or(0) + w.dilation(i).saturating_mul(k - 1) + 1 - pb - pe;
                match (s, c) {
                    (1, 1) => Dim::Sym(name.clone()),
                    (1, c) => derived(format!("{name}{}", offset(c - 1))),
                    (s, c) => derived(format!("{s}*({name}-1){}", offset(c))),
                }
            }
            Dim::Unknown => Dim::Unknown,
        }
    }
}

impl Op for ConvTranspose {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = shapes(cx).map(|(x, w)| {
            let n = x.len() - 2;
            let m = w.as_ref().and_then(|w| known(&w[1]));
            let m = m.and_then(|m| m.checked_mul(self.group));
            let mut out = vec![x[0].clone(), m.map_or(Dim::Unknown, Dim::Known)];
            for i in 0..n {
                let k = self.window.kernel(i);
                let k = k.or_else(|| w.as_ref().and_then(|w| known(&w[i + 2])));
                out.push(self.infer_dim(i, n, &x[i + 2], k));
            }
            out
        });
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        conv_transpose
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// What Conv and ConvTranspose tell the shared kernel.
struct Spec<'a> {
    op: &'static str,
    window: &'a Window,
    group: usize,
    /// ConvTranspose's own attributes; `None` for Conv.
    transpose: Option<&'a ConvTranspose>,
}

pub fn conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<Conv>()?;
    let spec = Spec {
        op: "Conv",
        window: &p.window,
        group: p.group as usize,
        transpose: None,
    };
    conv_any(ctx, inputs, &spec)
}

pub fn conv_transpose(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<ConvTranspose>()?;
    let spec = Spec {
        op: "ConvTranspose",
        window: &p.window,
        group: p.group as usize,
        transpose: Some(p),
    };
    conv_any(ctx, inputs, &spec)
}

fn conv_any(ctx: &KernelCtx, inputs: &[Option<&Tensor>], spec: &Spec) -> KernelResult {
    match input(spec.op, inputs, 0)?.dtype() {
        DType::F32 => conv_typed::<f32>(ctx, inputs, spec),
        DType::F64 => conv_typed::<f64>(ctx, inputs, spec),
        t => Err(unsupported_type(spec.op, t)),
    }
}

/// `y = a · b` for row-major `a` [m, k], `b` [k, n] and `y` [m, n] (zeros on entry) by MatMul's
/// GEMM; `a` may instead be given transposed ([k, m] row-major).
fn product<T: MatElem>(a: &[T], a_t: bool, b: &[T], y: &mut [T], mkn: [usize; 3]) -> R<()> {
    let [m, k, n] = mkn;
    let e = |e: ndarray::ShapeError| format!("internal: {e}");
    let av = if a_t {
        ArrayView2::from_shape((k, m), a).map_err(e)?.reversed_axes()
    } else {
        ArrayView2::from_shape((m, k), a).map_err(e)?
    };
    let bv = ArrayView2::from_shape((k, n), b).map_err(e)?;
    let mut yv = ArrayViewMut2::from_shape((m, n), y).map_err(e)?;
    T::gemm_acc(1.0, av, bv, &mut yv);
    Ok(())
}

/// Conv (`transpose` false) and ConvTranspose: checks, then per image and group a GEMM.
fn conv_typed<T: Elem + MatElem>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    spec: &Spec,
) -> KernelResult {
    let (op, window, g) = (spec.op, spec.window, spec.group);
    let transpose = spec.transpose.is_some();
    let xt = input(op, inputs, 0)?;
    let x = same::<T>(op, xt, xt)?;
    let w = same::<T>(op, xt, input(op, inputs, 1)?)?;
    let b = opt_input(inputs, 2).map(|b| same::<T>(op, xt, b)).transpose()?;
    let (xs, ws) = (x.shape(), w.shape());
    let n = spatial(op, xs)?;
    if ws.len() != xs.len() {
        return Err(format!(
            "{op}: W must have X's rank {} ([{}, {}, kernel...]), got shape {ws:?}",
            xs.len(),
            if transpose { "C" } else { "M" },
            if transpose { "M/group" } else { "C/group" },
        ));
    }
    // Conv: W [M, C/g, k...]; ConvTranspose: W [C, M/g, k...].
    let c = xs[1];
    let (w_in, m) = if transpose {
        (ws[0] / g.max(1), ws[1] * g)
    } else {
        (ws[1], ws[0])
    };
    let w_c = if transpose { ws[0] } else { ws[1] * g };
    if w_c != c || (transpose && ws[0] % g != 0) {
        return Err(format!(
            "{op}: X has {c} channels but W of shape {ws:?} with group {g} takes {}",
            if transpose {
                format!("{} (W.shape[0], a multiple of group)", ws[0])
            } else {
                format!("{w_c} (W.shape[1] * group)")
            }
        ));
    }
    if !transpose && m % g != 0 {
        return Err(format!(
            "{op}: W has {m} output channels, not a multiple of group {g}"
        ));
    }
    if let Some(b) = b.filter(|b| b.shape() != [m]) {
        return Err(format!("{op}: B must have shape [{m}], got {:?}", b.shape()));
    }
    let kernel = &ws[2..];
    if let Some(ks) = window.kernel_shape.as_ref() {
        if ks.iter().zip(kernel).any(|(&a, &b)| a != b as i64) || ks.len() != n {
            return Err(format!(
                "{op}: attribute 'kernel_shape' {ks:?} differs from W's kernel dims {kernel:?}"
            ));
        }
    }
    let axes = match spec.transpose {
        Some(t) => t.axes(&xs[2..], kernel)?,
        None => window.axes(op, &xs[2..], kernel)?,
    };
    let mut shape = vec![xs[0], m];
    shape.extend(axes.iter().map(|a| a.out));
    let bits = (std::mem::size_of::<T>() * 8) as u64;
    check_out(ctx, op, &shape, bits)?;
    let a = to3(&axes);
    let ksz: usize = kernel.iter().product();
    let isz: usize = xs[2..].iter().product();
    let osz: usize = axes.iter().map(|a| a.out).product();
    let (cg, mg) = (w_in, m / g);
    let pointwise = a.iter().all(|a| a.k == 1 && a.s == 1 && a.pb == 0 && a.pe == 0);
    let depthwise = !transpose && cg == 1 && !pointwise;
    // The GEMM's other operand: im2col columns [cg·ksz, osz] (Conv), or the product's
    // columns [mg·ksz, isz] before col2im (ConvTranspose).
    let col_len = match () {
        _ if transpose => [mg * ksz, isz],
        _ if pointwise || depthwise => [0, 0],
        _ => [cg * ksz, osz],
    };
    check_out(ctx, &format!("{op} im2col buffer"), &col_len, bits)?;
    let mut col = vec![T::ZERO; col_len[0] * col_len[1]];
    let (x, w) = (data(x), data(w));
    let mut y = vec![T::ZERO; shape.iter().product()];
    let gemm_k = if transpose { cg } else { cg * ksz };
    for (xi, yi) in x.chunks_exact((c * isz).max(1)).zip(y.chunks_exact_mut((m * osz).max(1))) {
        for gi in 0..g {
            let xg = &xi[gi * cg * isz..][..cg * isz];
            let yg = &mut yi[gi * mg * osz..][..mg * osz];
            let wg = &w[gi * mg * cg * ksz..][..mg * cg * ksz];
            if osz == 0 || isz == 0 || gemm_k == 0 {
                continue;
            }
            if transpose {
                col.iter_mut().for_each(|v| *v = T::ZERO);
                product(wg, true, xg, &mut col, [mg * ksz, cg, isz])?;
                col2im(&col, yg, mg, &a);
            } else if depthwise {
                for (wj, yj) in wg.chunks_exact(ksz).zip(yg.chunks_exact_mut(osz)) {
                    direct(xg, wj, yj, &a);
                }
            } else if pointwise {
                product(wg, false, xg, yg, [mg, cg, osz])?;
            } else {
                im2col(xg, cg, &a, &mut col);
                product(wg, false, &col, yg, [mg, cg * ksz, osz])?;
            }
        }
    }
    if let Some(b) = b {
        let b = data(b);
        for (row, &bv) in y.chunks_exact_mut(osz.max(1)).zip(b.iter().cycle()) {
            row.iter_mut().for_each(|v| *v = v.wadd(bv));
        }
    }
    let y = ArrayD::from_shape_vec(IxDyn(&shape), y).map_err(|e| format!("{op}: {e}"))?;
    Ok(vec![T::wrap(y)])
}

impl ConvTranspose {
    fn axes(&self, x: &[usize], k: &[usize]) -> R<Vec<Axis>> {
        let n = x.len();
        // The lengths checks Conv's geometry does (its sizes are not used).
        let mut w = self.window.clone();
        w.auto_pad = AutoPad::Valid;
        w.kernel_shape = None;
        w.axes("ConvTranspose", x, &vec![1; n])?;
        if let Some(p) = self.output_padding.as_ref().filter(|p| p.len() != n) {
            return Err(format!(
                "ConvTranspose: attribute 'output_padding' {p:?} is for {} spatial axes, the input has {n}",
                p.len()
            ));
        }
        (0..n)
            .map(|i| {
                let (out, pb, pe) = self.out_len(i, n, x[i] as i64, k[i] as i64)?;
                Ok(Axis {
                    inp: x[i],
                    out: out as usize,
                    k: k[i],
                    s: self.window.stride(i) as usize,
                    d: self.window.dilation(i) as usize,
                    pb,
                    pe,
                })
            })
            .collect()
    }
}

/// Rows (c, kz, ky, kx) by columns (oz, oy, ox) of one group's input channels `x`.
fn im2col<T: Num>(x: &[T], cg: usize, a: &[Axis; 3], col: &mut [T]) {
    let [az, ay, ax] = a;
    let isz = az.inp * ay.inp * ax.inp;
    let osz = az.out * ay.out * ax.out;
    let mut rows = col.chunks_exact_mut(osz);
    for xc in x.chunks_exact(isz).take(cg) {
        for kz in 0..az.k {
            let (z0, z1) = az.outs_of_tap(kz);
            for ky in 0..ay.k {
                let (y0, y1) = ay.outs_of_tap(ky);
                for kx in 0..ax.k {
                    let (x0, x1) = ax.outs_of_tap(kx);
                    let Some(row) = rows.next() else { return };
                    for (oz, plane) in row.chunks_exact_mut(ay.out * ax.out).enumerate() {
                        for (oy, dst) in plane.chunks_exact_mut(ax.out).enumerate() {
                            if !(z0..z1).contains(&oz) || !(y0..y1).contains(&oy) || x0 >= x1 {
                                dst.iter_mut().for_each(|v| *v = T::ZERO);
                                continue;
                            }
                            let src = (az.pos(oz, kz) * ay.inp + ay.pos(oy, ky)) * ax.inp;
                            let src = &xc[src..][..ax.inp];
                            dst[..x0].iter_mut().for_each(|v| *v = T::ZERO);
                            dst[x1..].iter_mut().for_each(|v| *v = T::ZERO);
                            if ax.s == 1 {
                                let from = ax.pos(x0, kx);
                                dst[x0..x1].copy_from_slice(&src[from..from + x1 - x0]);
                            } else {
                                for (ox, v) in dst.iter_mut().enumerate().take(x1).skip(x0) {
                                    *v = src[ax.pos(ox, kx)];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One output channel of a depthwise group: `y += w ⊛ x` tap by tap, each tap a run of
/// multiply-adds along output rows (contiguous at stride 1).
fn direct<T: Num>(x: &[T], w: &[T], y: &mut [T], a: &[Axis; 3]) {
    let [az, ay, ax] = a;
    let mut taps = w.iter();
    for kz in 0..az.k {
        let (z0, z1) = az.outs_of_tap(kz);
        for ky in 0..ay.k {
            let (y0, y1) = ay.outs_of_tap(ky);
            for kx in 0..ax.k {
                let (x0, x1) = ax.outs_of_tap(kx);
                let Some(&wv) = taps.next() else { return };
                if x0 >= x1 {
                    continue;
                }
                for oz in z0..z1 {
                    for oy in y0..y1 {
                        let dst = &mut y[(oz * ay.out + oy) * ax.out..][x0..x1];
                        let src = (az.pos(oz, kz) * ay.inp + ay.pos(oy, ky)) * ax.inp;
                        let src = &x[src..][..ax.inp];
                        if ax.s == 1 {
                            let from = ax.pos(x0, kx);
                            for (v, &xv) in dst.iter_mut().zip(&src[from..]) {
                                *v = v.wadd(wv.wmul(xv));
                            }
                        } else {
                            for (ox, v) in (x0..x1).zip(dst.iter_mut()) {
                                *v = v.wadd(wv.wmul(src[ax.pos(ox, kx)]));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// ConvTranspose's scatter: row (j, kz, ky, kx) of `col` (one value per input position) adds
/// into output channel j at `i·s + k·d - pb`. `a`'s `inp` is X's length, `out` Y's.
fn col2im<T: Num>(col: &[T], y: &mut [T], mg: usize, a: &[Axis; 3]) {
    let [az, ay, ax] = a;
    let isz = az.inp * ay.inp * ax.inp;
    let osz = az.out * ay.out * ax.out;
    // Which inputs land inside the output, for tap k: the roles of `outs_of_tap` swapped.
    let ins = |a: &Axis, k: usize| span((k * a.d) as i64 - a.pb, a.s, a.inp, a.out as i64);
    let mut rows = col.chunks_exact(isz);
    for yj in y.chunks_exact_mut(osz).take(mg) {
        for kz in 0..az.k {
            let (z0, z1) = ins(az, kz);
            for ky in 0..ay.k {
                let (y0, y1) = ins(ay, ky);
                for kx in 0..ax.k {
                    let (x0, x1) = ins(ax, kx);
                    let Some(row) = rows.next() else { return };
                    for iz in z0..z1 {
                        for iy in y0..y1 {
                            let dst = (az.pos(iz, kz) * ay.out + ay.pos(iy, ky)) * ax.out;
                            let dst = &mut yj[dst..][..ax.out];
                            let src = &row[(iz * ay.inp + iy) * ax.inp..][..ax.inp];
                            for ix in x0..x1 {
                                let o = ax.pos(ix, kx);
                                dst[o] = dst[o].wadd(src[ix]);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "conv_tests.rs"]
mod tests;
