//! The other reductions: ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
//! ReduceLogSumExp, ReduceSumSquare. Their attributes, axes and inference are ReduceSum's and
//! ReduceMean's (`reduce::Reduce`).
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | ReduceMax, ReduceMin | 1- | `keepdims` (1); `axes` attribute before 18; `noop_with_empty_axes` (0) from 18 | data, axes (optional int64 input from 18): T -> reduced: T; bool from 20 |
//! | ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare | 1- | as above | T float or int |
//! | ReduceLogSum, ReduceLogSumExp | 1- | as above | T float (and int before 28) |
//!
//! Over the reduced elements: max, min (a NaN wins both), product, sum of absolute values,
//! square root of the sum of squares, ln of the sum, `max + ln(sum(exp(x - max)))`, sum of
//! squares. An empty set reduces to the op's identity: -inf (the type's lowest value for
//! integers, false for bool) for Max, +inf (highest, true) for Min, 1 for Prod, 0 for L1, L2
//! and SumSquare, -inf for LogSum and LogSumExp. Integers wrap in Prod, L1 and SumSquare; L2,
//! LogSum and LogSumExp compute in float64 (for every type) and truncate back for integers.
//! Versions 11 (negative axes), 12, 13 and 28 (types) change nothing else here.

use ndarray::{ArrayD, IxDyn};

use super::common::{input, unsupported_type, Num};
use super::lanes::{elements, Lanes};
use super::reduce::Reduce;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// One op type per reduction: `Name(Reduce)` with its parse, inference and kernel.
macro_rules! reductions {
    ($($name:ident: $kind:ident),* $(,)?) => {
        $(
            #[derive(Debug)]
            pub struct $name(pub Reduce);

            impl $name {
                pub fn parse(a: &Attrs) -> P {
                    Ok(Box::new($name(Reduce::parse(a, 18)?)))
                }
            }

            impl Op for $name {
                fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
                    self.0.infer(cx)
                }
                fn kernel(&self) -> Kernel {
                    |ctx, inputs| {
                        let r = &ctx.attrs::<$name>()?.0;
                        reduce(ctx, inputs, stringify!($name), Kind::$kind, r)
                    }
                }
            }
        )*
    };
}

reductions!(
    ReduceMax: Max,
    ReduceMin: Min,
    ReduceProd: Prod,
    ReduceL1: L1,
    ReduceL2: L2,
    ReduceLogSum: LogSum,
    ReduceLogSumExp: LogSumExp,
    ReduceSumSquare: SumSquare,
);

fn reduce(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    kind: Kind,
    r: &Reduce,
) -> KernelResult {
    let data = input(op, inputs, 0)?;
    let Some((axes, shape)) = r.plan(ctx, op, inputs, data)? else {
        return Ok(vec![data.clone()]);
    };
    let e = |e: ndarray::ShapeError| format!("{op}: {e}");
    Ok(vec![match data {
        Tensor::F32(a) => Tensor::F32(reduce_typed(a, &axes, &shape, kind).map_err(e)?),
        Tensor::F64(a) => Tensor::F64(reduce_typed(a, &axes, &shape, kind).map_err(e)?),
        Tensor::I32(a) => Tensor::I32(reduce_typed(a, &axes, &shape, kind).map_err(e)?),
        Tensor::I64(a) => Tensor::I64(reduce_typed(a, &axes, &shape, kind).map_err(e)?),
        // false < true: max is any, min is all (their identities, i32::MIN and MAX, false and
        // true).
        Tensor::Bool(a) if matches!(kind, Kind::Max | Kind::Min) => {
            let r = reduce_typed(&a.mapv(i32::from), &axes, &shape, kind).map_err(e)?;
            Tensor::Bool(r.mapv(|v| v > 0))
        }
        other => return Err(unsupported_type(op, other.dtype())),
    }])
}

/// `a` reduced over `axes` (normalized, distinct) into `shape`. Axes that are one run of
/// adjacent dims are lanes of `a` as it is; others are permuted behind the kept dims first.
fn reduce_typed<T: Elem>(
    a: &ArrayD<T>,
    axes: &[usize],
    shape: &[usize],
    kind: Kind,
) -> Result<ArrayD<T>, ndarray::ShapeError> {
    let mut reduced = axes.to_vec();
    crate::ops::common::sort_usizes(&mut reduced);
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut fold_lanes = |lanes: Lanes, s: &[T]| lanes.each(s, |_, l| out.push(fold(kind, l)));
    match (reduced.first(), reduced.last()) {
        (Some(&first), Some(&last)) if last - first + 1 == reduced.len() => {
            fold_lanes(Lanes::span(a.shape(), first, last), &elements(a));
        }
        (Some(_), _) => {
            let mut order: Vec<usize> = (0..a.ndim()).filter(|d| !reduced.contains(d)).collect();
            let kept = order.len();
            order.extend(&reduced);
            let p = a.view().permuted_axes(IxDyn(&order));
            let lanes = Lanes::span(p.shape(), kept, a.ndim() - 1);
            fold_lanes(lanes, &p.iter().copied().collect::<Vec<T>>());
        }
        // A scalar: the reduction of its one element.
        (None, _) => {
            let one = Lanes {
                outer: a.len(),
                len: 1,
                inner: 1,
            };
            fold_lanes(one, &elements(a));
        }
    }
    // An empty reduced set: each output element is the identity.
    out.resize(n, fold(kind, &[]));
    ArrayD::from_shape_vec(IxDyn(shape), out)
}

/// One reduction of `c` (the identity when `c` is empty).
fn fold<T: Elem>(kind: Kind, c: &[T]) -> T {
    let f64s = || c.iter().map(|v| v.to_f64());
    match kind {
        Kind::Max => extremum(c, T::LOWEST, |v, m| v > m),
        Kind::Min => extremum(c, T::HIGHEST, |v, m| v < m),
        Kind::Prod => c.iter().fold(T::ONE, |p, &v| p.wmul(v)),
        Kind::L1 => c.iter().fold(T::ZERO, |s, &v| s.wadd(v.abs())),
        Kind::SumSquare => c.iter().fold(T::ZERO, |s, &v| s.wadd(v.wmul(v))),
        Kind::L2 => T::from_f64(f64s().map(|v| v * v).sum::<f64>().sqrt()),
        Kind::LogSum => T::from_f64(f64s().sum::<f64>().ln()),
        Kind::LogSumExp => {
            let m = f64s().fold(f64::NEG_INFINITY, f64::max);
            if m.is_finite() {
                T::from_f64(m + f64s().map(|v| (v - m).exp()).sum::<f64>().ln())
            } else {
                // All -inf (or empty): -inf; any +inf: +inf.
                T::from_f64(m)
            }
        }
    }
}

/// The max or min of `c` (`beats(v, m)`: v replaces m) from `init`, a NaN beating everything,
/// in 8 interleaved accumulators so the loop vectorizes.
fn extremum<T: Elem>(c: &[T], init: T, beats: impl Fn(T, T) -> bool) -> T {
    // Once an accumulator is NaN it stays NaN: NaN > m and NaN < m are false, and v != v is
    // only true for a NaN v.
    #[allow(clippy::eq_op)]
    let pick = |m: T, v: T| if beats(v, m) | (v != v) { v } else { m };
    let mut acc = [init; 8];
    let mut chunks = c.chunks_exact(8);
    for ch in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(ch) {
            *a = pick(*a, v);
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&acc)
        .fold(init, |m, &v| pick(m, v))
}

/// The element types the reductions compute on.
trait Elem: Num {
    const LOWEST: Self;
    const HIGHEST: Self;
    fn abs(self) -> Self;
    fn to_f64(self) -> f64;
    /// Integers truncate (saturating; NaN becomes 0).
    fn from_f64(v: f64) -> Self;
}

macro_rules! impl_elem {
    ($t:ty, $lo:expr, $hi:expr, $abs:ident) => {
        impl Elem for $t {
            const LOWEST: Self = $lo;
            const HIGHEST: Self = $hi;
            fn abs(self) -> Self {
                self.$abs()
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
impl_elem!(f32, f32::NEG_INFINITY, f32::INFINITY, abs);
impl_elem!(f64, f64::NEG_INFINITY, f64::INFINITY, abs);
impl_elem!(i32, i32::MIN, i32::MAX, wrapping_abs);
impl_elem!(i64, i64::MIN, i64::MAX, wrapping_abs);

#[cfg(test)]
#[path = "reduce_more_tests.rs"]
mod tests;
