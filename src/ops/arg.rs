//! Index-returning reductions along one axis: ArgMax, ArgMin and TopK.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | ArgMax, ArgMin | 1- | `axis` (0), `keepdims` (1), `select_last_index` (0, from 12) | data: T -> reduced: int64 |
//! | TopK | 1- | `axis` (-1); `k` attribute before 10 (K input from 10); `largest` (1), `sorted` (1) from 11 | X: T, K: int64 [1] -> Values: T, Indices: int64 |
//!
//! ArgMax/ArgMin return the first extreme along `axis` (the last with `select_last_index`); a
//! NaN counts as the extreme, as numpy's argmax/argmin have it. The axis must not be empty.
//! TopK returns the `k` largest (or smallest) elements along `axis` and their indices, sorted,
//! equal values in index order; `sorted = 0` leaves the order free, and they are sorted all the
//! same. NaN sorts above every number. Before 11 TopK always takes the largest. Versions 11
//! (negative axes), 13 and 24 (types) change nothing else here.

use std::cmp::Ordering;

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, norm_axis, unsupported_type, Num};
use super::infer::norm_axis as infer_axis;
use super::lanes::{elements, Lanes};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// ArgMax's and ArgMin's attributes.
#[derive(Debug)]
pub struct ArgAttrs {
    pub axis: i64,
    pub keepdims: bool,
    pub select_last_index: bool,
}

impl ArgAttrs {
    fn parse(a: &Attrs) -> Result<ArgAttrs, String> {
        Ok(ArgAttrs {
            axis: a.int("axis", 0)?,
            keepdims: a.flag("keepdims", true)?,
            select_last_index: a.opset >= 12 && a.flag("select_last_index", false)?,
        })
    }

    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = cx.input(0).shape.and_then(|s| {
            let axis = infer_axis(self.axis, s.len())?;
            let mut s = s;
            if self.keepdims {
                s[axis] = Dim::Known(1);
            } else {
                s.remove(axis);
            }
            Some(s)
        });
        vec![TensorType {
            dtype: Some(DType::I64),
            shape,
        }]
    }
}

#[derive(Debug)]
pub struct ArgMax(pub ArgAttrs);

#[derive(Debug)]
pub struct ArgMin(pub ArgAttrs);

impl ArgMax {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ArgMax(ArgAttrs::parse(a)?)))
    }
}

impl ArgMin {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ArgMin(ArgAttrs::parse(a)?)))
    }
}

impl Op for ArgMax {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.0.infer(cx)
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| arg(ctx, inputs, "ArgMax", &ctx.attrs::<ArgMax>()?.0, true)
    }
}

impl Op for ArgMin {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.0.infer(cx)
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| arg(ctx, inputs, "ArgMin", &ctx.attrs::<ArgMin>()?.0, false)
    }
}

fn arg(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    p: &ArgAttrs,
    max: bool,
) -> KernelResult {
    let x = input(op, inputs, 0)?;
    let shape = x.shape();
    let axis = norm_axis(op, p.axis, shape.len())?;
    if shape[axis] == 0 {
        return Err(format!(
            "{op}: axis {axis} is empty: there is no index to return"
        ));
    }
    let mut out_shape = shape.to_vec();
    if p.keepdims {
        out_shape[axis] = 1;
    } else {
        out_shape.remove(axis);
    }
    check_out(ctx, op, &out_shape, 64)?;
    let lanes = Lanes::new(shape, axis, false);
    let last = p.select_last_index;
    let idx = match x {
        Tensor::F32(a) => arg_typed(a, lanes, max, last),
        Tensor::F64(a) => arg_typed(a, lanes, max, last),
        Tensor::I32(a) => arg_typed(a, lanes, max, last),
        Tensor::I64(a) => arg_typed(a, lanes, max, last),
        other => return Err(unsupported_type(op, other.dtype())),
    };
    ArrayD::from_shape_vec(IxDyn(&out_shape), idx)
        .map(|a| vec![Tensor::I64(a)])
        .map_err(|e| format!("{op}: {e}"))
}

fn arg_typed<T: Num>(a: &ArrayD<T>, lanes: Lanes, max: bool, last: bool) -> Vec<i64> {
    let mut out = Vec::with_capacity(lanes.outer * lanes.inner);
    lanes.each(&elements(a), |_, lane| {
        out.push(extreme(lane, max, last) as i64)
    });
    out
}

/// The index of the maximum (`max`) or minimum of `lane`: the first one, or the last with
/// `last`. A NaN beats every number. 0 for an empty lane.
pub(super) fn extreme<T: Num>(lane: &[T], max: bool, last: bool) -> usize {
    #[allow(clippy::eq_op)]
    let nan = |v: T| v != v;
    let mut best = 0;
    for (i, &v) in lane.iter().enumerate().skip(1) {
        let b = lane[best];
        let take = if nan(b) {
            last && nan(v)
        } else if nan(v) {
            true
        } else if max {
            v > b || (last && v == b)
        } else {
            v < b || (last && v == b)
        };
        if take {
            best = i;
        }
    }
    best
}

// ---------------------------------------------------------------------------------------------
// TopK

#[derive(Debug)]
pub struct TopK {
    /// The `k` attribute (before 10); from 10 k is input 1.
    pub k: Option<i64>,
    pub axis: i64,
    pub largest: bool,
    pub sorted: bool,
}

impl TopK {
    pub fn parse(a: &Attrs) -> P {
        let v11 = a.opset >= 11;
        let k = if a.opset < 10 {
            Some(
                a.opt_int("k")?
                    .ok_or("TopK: attribute 'k' is required before opset 10")?,
            )
        } else {
            None
        };
        Ok(Box::new(TopK {
            k,
            axis: a.int("axis", -1)?,
            largest: !v11 || a.flag("largest", true)?,
            sorted: !v11 || a.flag("sorted", true)?,
        }))
    }
}

impl Op for TopK {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let k = match self.k {
            Some(k) => Some(k),
            None => cx.ints(1).and_then(|v| (v.len() == 1).then(|| v[0])),
        };
        let shape = x.shape.as_ref().and_then(|s| {
            let axis = infer_axis(self.axis, s.len())?;
            let mut s = s.clone();
            s[axis] = k.filter(|&k| k >= 0).map_or(Dim::Unknown, Dim::Known);
            Some(s)
        });
        vec![
            TensorType {
                dtype: x.dtype,
                shape: shape.clone(),
            },
            TensorType {
                dtype: Some(DType::I64),
                shape,
            },
        ]
    }
    fn kernel(&self) -> Kernel {
        top_k
    }
}

pub fn top_k(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "TopK";
    let p = ctx.attrs::<TopK>()?;
    let x = input(OP, inputs, 0)?;
    let k = match p.k {
        Some(k) => k,
        None => {
            let t = input(OP, inputs, 1)?;
            match t.to_i64_vec().as_deref() {
                Some(&[k]) if t.shape().len() <= 1 => k,
                _ => {
                    return Err(format!(
                        "{OP}: 'K' must be one int64 value, got {} of shape {:?}",
                        t.dtype(),
                        t.shape()
                    ))
                }
            }
        }
    };
    let shape = x.shape();
    let axis = norm_axis(OP, p.axis, shape.len())?;
    let len = shape[axis];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= len)
        .ok_or_else(|| format!("{OP}: k = {k} is outside [0, {len}] (the size of axis {axis})"))?;
    let mut out_shape = shape.to_vec();
    out_shape[axis] = k;
    check_out(ctx, OP, &out_shape, bits(x.dtype()))?;
    check_out(ctx, OP, &out_shape, 64)?;
    let lanes = Lanes::new(shape, axis, false);
    let (values, indices) = match x {
        Tensor::F32(a) => top_k_typed(a, lanes, k, p.largest, &out_shape, Tensor::F32),
        Tensor::F64(a) => top_k_typed(a, lanes, k, p.largest, &out_shape, Tensor::F64),
        Tensor::I32(a) => top_k_typed(a, lanes, k, p.largest, &out_shape, Tensor::I32),
        Tensor::I64(a) => top_k_typed(a, lanes, k, p.largest, &out_shape, Tensor::I64),
        other => return Err(unsupported_type(OP, other.dtype())),
    }
    .map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![values, Tensor::I64(indices)])
}

/// `a` before `b` when it is larger (or with `!largest`, smaller); NaN is above every number;
/// equal values in index order.
fn rank_order<T: Num>(lane: &[T], a: usize, b: usize, largest: bool) -> Ordering {
    let (x, y) = (lane[a], lane[b]);
    #[allow(clippy::eq_op)]
    let by_value = x.partial_cmp(&y).unwrap_or_else(|| (x != x).cmp(&(y != y)));
    let by_value = if largest {
        by_value.reverse()
    } else {
        by_value
    };
    by_value.then(a.cmp(&b))
}

/// The indices `0..len` ranked by `cmp`, cut to the first `k`. Not generic (the comparator is
/// a trait object): one copy of the selection and sort code serves every element type.
fn first_k(order: &mut Vec<usize>, len: usize, k: usize, cmp: &dyn Fn(usize, usize) -> Ordering) {
    order.clear();
    order.extend(0..len);
    let cmp = |a: &usize, b: &usize| cmp(*a, *b);
    if k < len {
        order.select_nth_unstable_by(k.saturating_sub(1), cmp);
        order.truncate(k);
    }
    order.sort_unstable_by(cmp);
}

type TopKOut = Result<(Tensor, ArrayD<i64>), ndarray::ShapeError>;

fn top_k_typed<T: Num>(
    a: &ArrayD<T>,
    lanes: Lanes,
    k: usize,
    largest: bool,
    out_shape: &[usize],
    wrap: fn(ArrayD<T>) -> Tensor,
) -> TopKOut {
    let n: usize = out_shape.iter().product();
    let mut values = vec![T::ZERO; n];
    let mut indices = vec![0i64; n];
    let mut order: Vec<usize> = Vec::with_capacity(lanes.len);
    if k > 0 {
        lanes.each(&elements(a), |lane_no, lane| {
            first_k(&mut order, lane.len(), k, &|a, b| {
                rank_order(lane, a, b, largest)
            });
            // Output element j of this lane: outer block o, position j along the axis, column i.
            let (o, i) = (lane_no / lanes.inner, lane_no % lanes.inner);
            for (j, &src) in order.iter().enumerate() {
                let at = (o * k + j) * lanes.inner + i;
                values[at] = lane[src];
                indices[at] = src as i64;
            }
        });
    }
    Ok((
        wrap(ArrayD::from_shape_vec(IxDyn(out_shape), values)?),
        ArrayD::from_shape_vec(IxDyn(out_shape), indices)?,
    ))
}

#[cfg(test)]
#[path = "arg_tests.rs"]
mod tests;
