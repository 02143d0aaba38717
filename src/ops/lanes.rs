//! Ops that transform each lane along one axis in place (LogSoftmax, Hardmax, CumSum, CumProd,
//! LpNormalization), and the lane walk they share with Softmax (reduce.rs), ArgMax/TopK
//! (arg.rs) and the other reductions (reduce_more.rs).
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | LogSoftmax | 1- | `axis` (1 before 13, -1 from 13) | input: T -> output: T; T float |
//! | Hardmax | 1- | `axis` (1 before 13, -1 from 13) | input: T -> output: T; T float |
//! | CumSum | 11- | `exclusive` (0), `reverse` (0) | x: T, axis: int32/int64 scalar -> y: T; T float or int |
//! | CumProd | 26- | `exclusive` (0), `reverse` (0) | x: T, axis: int32/int64 scalar -> y: T; T float or int |
//! | LpNormalization | 1- | `axis` (-1), `p` (2; 1 or 2) | input: T -> output: T; T float |
//!
//! LogSoftmax and Hardmax before 13 coerce the input to 2-D at `axis` ([prod(dims before
//! axis), prod(dims from axis)]) and work on each row, as Softmax does; from 13 a lane is the
//! one axis. Hardmax puts its 1 at the first maximum (a NaN counts as the maximum, as numpy's
//! argmax has it). LogSoftmax is `x - max - ln(sum(exp(x - max)))`. CumSum's `exclusive` leaves
//! out the element itself (the first sum is 0), `reverse` sums from the end; integers wrap.
//! CumProd is the same walk with products (an exclusive product starts at 1).
//! LpNormalization divides by the lane's L1 or L2 norm, giving 0 where the norm is 0 (22).
//! Versions 11 (negative axes), 13 (types), 14 and 22 (types) change nothing else here.

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use super::arg::extreme;
use super::common::{input, norm_axis, unsupported_type, Float, Num};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

// ---------------------------------------------------------------------------------------------
// The lane walk

/// A row-major array seen as `outer` blocks of `len` x `inner` elements: the lanes run along the
/// middle (`len`) axis, `inner` elements apart.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lanes {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

/// Strided lanes are copied out this many at a time (one 64-byte line of float32 per row).
const TILE: usize = 16;

impl Lanes {
    /// The lanes along `axis` of `shape`; with `coerce_2d` (the Softmax family before 13) a lane
    /// is a row of the input coerced to 2-D at `axis`: every element from `axis` on.
    pub(super) fn new(shape: &[usize], axis: usize, coerce_2d: bool) -> Lanes {
        let last = if coerce_2d {
            shape.len().max(1) - 1
        } else {
            axis
        };
        Lanes::span(shape, axis, last)
    }

    /// The lanes over the dims `first..=last` of `shape` taken together.
    pub(super) fn span(shape: &[usize], first: usize, last: usize) -> Lanes {
        let prod = |d: Option<&[usize]>| d.map_or(1, |d| d.iter().product::<usize>());
        Lanes {
            outer: prod(shape.get(..first)),
            len: prod(shape.get(first..=last)),
            inner: prod(shape.get(last + 1..)),
        }
    }

    /// Calls `f(n, lane)` for every lane of `s` (row-major, `outer * len * inner` elements) in
    /// (outer, inner) order, `n` counting the lanes; strided lanes are copied out, `TILE` at a
    /// time. Visits nothing when `s` is empty.
    pub(super) fn each<T: Copy>(&self, s: &[T], mut f: impl FnMut(usize, &[T])) {
        let block = self.len * self.inner;
        if s.is_empty() || block == 0 {
            return;
        }
        if self.inner == 1 {
            s.chunks_exact(self.len)
                .enumerate()
                .for_each(|(n, l)| f(n, l));
            return;
        }
        let mut buf = Vec::new();
        for (o, b) in s.chunks_exact(block).enumerate() {
            for j0 in (0..self.inner).step_by(TILE) {
                let w = TILE.min(self.inner - j0);
                self.gather(b, j0, w, &mut buf);
                for (jj, lane) in buf.chunks_exact(self.len).enumerate() {
                    f(o * self.inner + j0 + jj, lane);
                }
            }
        }
    }

    /// `f` on every lane of `s` in place.
    pub(super) fn map<T: Copy>(&self, s: &mut [T], mut f: impl FnMut(&mut [T])) {
        let block = self.len * self.inner;
        if s.is_empty() || block == 0 {
            return;
        }
        if self.inner == 1 {
            s.chunks_exact_mut(self.len).for_each(f);
            return;
        }
        let mut buf = Vec::new();
        for b in s.chunks_exact_mut(block) {
            for j0 in (0..self.inner).step_by(TILE) {
                let w = TILE.min(self.inner - j0);
                self.gather(b, j0, w, &mut buf);
                buf.chunks_exact_mut(self.len).for_each(&mut f);
                for (k, row) in b.chunks_exact_mut(self.inner).enumerate() {
                    for (jj, d) in row[j0..j0 + w].iter_mut().enumerate() {
                        *d = buf[jj * self.len + k];
                    }
                }
            }
        }
    }

    /// Lanes `j0..j0 + w` of block `b` ([len, inner], not empty) into `buf`, one after another.
    fn gather<T: Copy>(&self, b: &[T], j0: usize, w: usize, buf: &mut Vec<T>) {
        buf.clear();
        buf.resize(w * self.len, b[0]);
        for (k, row) in b.chunks_exact(self.inner).enumerate() {
            for (jj, &v) in row[j0..j0 + w].iter().enumerate() {
                buf[jj * self.len + k] = v;
            }
        }
    }
}

/// The elements of `a` in row-major order, borrowed when `a` already is row-major. The one
/// owner of that copy for the kernels that read flat slices: `as_standard_layout` copies whole
/// inner rows, where `iter().collect()` paid a multi-dimensional `next()` per element (14% of
/// fused ViT's time went there, on its transposed patches).
pub(super) fn elements<T: Copy>(a: &ArrayD<T>) -> Cow<'_, [T]> {
    match a.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(
            a.as_standard_layout()
                .into_owned()
                .into_raw_vec_and_offset()
                .0,
        ),
    }
}

/// `a` with `f` applied to each lane along `axis` (normalized here; `coerce_2d` as for
/// `Lanes::new`).
pub(super) fn map_lanes<T: Copy>(
    op: &str,
    a: &ArrayD<T>,
    axis: i64,
    coerce_2d: bool,
    f: impl FnMut(&mut [T]),
) -> Result<ArrayD<T>, String> {
    let axis = norm_axis(op, axis, a.ndim())?;
    let mut v = elements(a).into_owned();
    Lanes::new(a.shape(), axis, coerce_2d).map(&mut v, f);
    ArrayD::from_shape_vec(IxDyn(a.shape()), v).map_err(|e| format!("{op}: {e}"))
}

/// The float math the lane kernels need beyond `Float`.
pub(super) trait Math: Float {
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
}

macro_rules! impl_math {
    ($t:ty) => {
        impl Math for $t {
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}
impl_math!(f32);
impl_math!(f64);

// ---------------------------------------------------------------------------------------------
// LogSoftmax, Hardmax

/// LogSoftmax's and Hardmax's attributes (Softmax's, in reduce.rs).
#[derive(Debug)]
pub struct AxisAttrs {
    pub axis: i64,
    /// Before 13: the input is coerced to 2-D at `axis`, whose rows are the lanes.
    pub coerce_2d: bool,
}

impl AxisAttrs {
    fn parse(a: &Attrs) -> Result<AxisAttrs, String> {
        let v13 = a.opset >= 13;
        Ok(AxisAttrs {
            axis: a.int("axis", if v13 { -1 } else { 1 })?,
            coerce_2d: !v13,
        })
    }
}

#[derive(Debug)]
pub struct LogSoftmax(pub AxisAttrs);

#[derive(Debug)]
pub struct Hardmax(pub AxisAttrs);

impl LogSoftmax {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(LogSoftmax(AxisAttrs::parse(a)?)))
    }
}

impl Hardmax {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Hardmax(AxisAttrs::parse(a)?)))
    }
}

impl Op for LogSoftmax {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        log_softmax
    }
}

impl Op for Hardmax {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        hardmax
    }
}

pub fn log_softmax(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LogSoftmax";
    let p = &ctx.attrs::<LogSoftmax>()?.0;
    Ok(vec![match input(OP, inputs, 0)? {
        Tensor::F32(a) => Tensor::F32(map_lanes(OP, a, p.axis, p.coerce_2d, log_softmax_lane)?),
        Tensor::F64(a) => Tensor::F64(map_lanes(OP, a, p.axis, p.coerce_2d, log_softmax_lane)?),
        other => return Err(unsupported_type(OP, other.dtype())),
    }])
}

/// `(x - max) - ln(sum(exp(x - max)))`: subtracting the max keeps exp from overflowing.
fn log_softmax_lane<T: Math>(lane: &mut [T]) {
    let max = lane
        .iter()
        .fold(T::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    let sum = lane
        .iter()
        .fold(T::ZERO, |s, &v| s.wadd(v.wsub(max).fast_exp()));
    let ln_sum = sum.ln();
    for v in lane.iter_mut() {
        *v = v.wsub(max).wsub(ln_sum);
    }
}

pub fn hardmax(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Hardmax";
    let p = &ctx.attrs::<Hardmax>()?.0;
    Ok(vec![match input(OP, inputs, 0)? {
        Tensor::F32(a) => Tensor::F32(map_lanes(OP, a, p.axis, p.coerce_2d, hardmax_lane)?),
        Tensor::F64(a) => Tensor::F64(map_lanes(OP, a, p.axis, p.coerce_2d, hardmax_lane)?),
        other => return Err(unsupported_type(OP, other.dtype())),
    }])
}

fn hardmax_lane<T: Num>(lane: &mut [T]) {
    let at = extreme(lane, true, false);
    for (i, v) in lane.iter_mut().enumerate() {
        *v = if i == at { T::ONE } else { T::ZERO };
    }
}

// ---------------------------------------------------------------------------------------------
// CumSum, CumProd

/// CumSum's and CumProd's attributes.
#[derive(Debug)]
pub struct CumAttrs {
    pub exclusive: bool,
    pub reverse: bool,
}

impl CumAttrs {
    fn parse(a: &Attrs) -> Result<CumAttrs, String> {
        Ok(CumAttrs {
            exclusive: a.flag("exclusive", false)?,
            reverse: a.flag("reverse", false)?,
        })
    }
}

#[derive(Debug)]
pub struct CumSum(pub CumAttrs);

#[derive(Debug)]
pub struct CumProd(pub CumAttrs);

impl CumSum {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(CumSum(CumAttrs::parse(a)?)))
    }
}

impl CumProd {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(CumProd(CumAttrs::parse(a)?)))
    }
}

impl Op for CumSum {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| cumulate(inputs, "CumSum", &ctx.attrs::<CumSum>()?.0, false)
    }
}

impl Op for CumProd {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| cumulate(inputs, "CumProd", &ctx.attrs::<CumProd>()?.0, true)
    }
}

/// The running sum (or with `product`, product) along the axis given by input 1.
fn cumulate(inputs: &[Option<&Tensor>], op: &str, p: &CumAttrs, product: bool) -> KernelResult {
    let x = input(op, inputs, 0)?;
    let t = input(op, inputs, 1)?;
    let axis = match t.to_i64_vec().as_deref() {
        Some(&[a]) if t.shape().len() <= 1 => a,
        _ => {
            return Err(format!(
                "{op}: 'axis' must be one int32 or int64 value, got {} of shape {:?}",
                t.dtype(),
                t.shape()
            ))
        }
    };
    let (ex, rev) = (p.exclusive, p.reverse);
    macro_rules! run {
        ($a:expr) => {
            map_lanes(op, $a, axis, false, |l| cum_lane(l, ex, rev, product))?
        };
    }
    Ok(vec![match x {
        Tensor::F32(a) => Tensor::F32(run!(a)),
        Tensor::F64(a) => Tensor::F64(run!(a)),
        Tensor::I32(a) => Tensor::I32(run!(a)),
        Tensor::I64(a) => Tensor::I64(run!(a)),
        other => return Err(unsupported_type(op, other.dtype())),
    }])
}

fn cum_lane<T: Num>(lane: &mut [T], exclusive: bool, reverse: bool, product: bool) {
    if reverse {
        lane.reverse();
    }
    let step = |acc: T, x: T| if product { acc.wmul(x) } else { acc.wadd(x) };
    let mut acc = if product { T::ONE } else { T::ZERO };
    for v in lane.iter_mut() {
        let x = *v;
        if exclusive {
            *v = acc;
            acc = step(acc, x);
        } else {
            acc = step(acc, x);
            *v = acc;
        }
    }
    if reverse {
        lane.reverse();
    }
}

// ---------------------------------------------------------------------------------------------
// LpNormalization

#[derive(Debug)]
pub struct LpNormalization {
    pub axis: i64,
    /// 1 or 2.
    pub p: i64,
}

impl LpNormalization {
    pub fn parse(a: &Attrs) -> P {
        let p = a.int("p", 2)?;
        if p != 1 && p != 2 {
            return Err(format!(
                "LpNormalization: attribute 'p' is {p}; only 1 and 2 are defined"
            ));
        }
        Ok(Box::new(LpNormalization {
            axis: a.int("axis", -1)?,
            p,
        }))
    }
}

impl Op for LpNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        lp_normalization
    }
}

pub fn lp_normalization(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LpNormalization";
    let p = ctx.attrs::<LpNormalization>()?;
    let l1 = p.p == 1;
    Ok(vec![match input(OP, inputs, 0)? {
        Tensor::F32(a) => Tensor::F32(map_lanes(OP, a, p.axis, false, |l| lp_lane(l, l1))?),
        Tensor::F64(a) => Tensor::F64(map_lanes(OP, a, p.axis, false, |l| lp_lane(l, l1))?),
        other => return Err(unsupported_type(OP, other.dtype())),
    }])
}

fn lp_lane<T: Math>(lane: &mut [T], l1: bool) {
    let norm = if l1 {
        lane.iter().fold(T::ZERO, |s, &v| s.wadd(v.abs()))
    } else {
        lane.iter().fold(T::ZERO, |s, &v| s.wadd(v.wmul(v))).sqrt()
    };
    for v in lane.iter_mut() {
        *v = if norm == T::ZERO {
            T::ZERO
        } else {
            v.wdiv(norm)
        };
    }
}

/// Test helper: runs `n`'s own kernel, parsed as the registry has it at `opset`.
#[cfg(test)]
pub(super) fn run_node(
    n: &crate::ir::Node,
    opset: i64,
    inputs: &[Option<&Tensor>],
) -> KernelResult {
    let op = super::resolve(n, opset).map_err(|e| e.to_string())?;
    super::common::test_util::run_at(op.kernel(), n, opset, inputs)
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
