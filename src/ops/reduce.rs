//! Reductions (ReduceSum, ReduceMean) and Softmax.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | ReduceSum | 1- | `keepdims` (1); `axes` attribute before 13; `noop_with_empty_axes` (0) from 13 | data, axes (optional int64 input from 13): T -> reduced: T |
//! | ReduceMean | 1- | `keepdims` (1); `axes` attribute before 18; `noop_with_empty_axes` (0) from 18 | data, axes (optional int64 input from 18): T -> reduced: T |
//! | Softmax | 1- | `axis` (1 before 13, -1 from 13) | input: T -> output: T; T float |
//!
//! Empty (or absent) axes reduce every axis, unless `noop_with_empty_axes` makes the node the
//! identity. Softmax before 13 coerces the input to 2-D at `axis` ([prod(dims before axis),
//! prod(dims from axis)]) and normalizes each row; from 13 it normalizes along `axis` alone.
//! The other versions (11: negative axes; 13, 18, 21: types) change no computed value here.
//! The other reductions (reduce_more.rs) share `Reduce`; Softmax walks its lanes with
//! `lanes::map_lanes`, as LogSoftmax and Hardmax do.

use ndarray::{ArrayD, Axis, IxDyn};

use super::common::{
    bits, check_out, input, int_list, norm_axes, opt_input, unsupported_type, Float, Num,
};
use super::infer::{norm_axis as infer_axis, Axes};
use super::lanes::map_lanes;
use super::lowering::{norm_axis as lower_axis, run, static_ints, NodeCtx};
use super::wgsl::{self, numel};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

/// The attributes ReduceSum and ReduceMean share.
#[derive(Debug)]
pub struct Reduce {
    /// The `axes` attribute (empty when absent) or, from the version that made it one, input 1.
    pub axes: Axes,
    pub keepdims: bool,
    /// Empty axes leave the data as is (only from the version with the axes input).
    pub noop_with_empty_axes: bool,
}

/// The reduced axes and the output shape of one reduction.
pub(super) type Plan = (Vec<usize>, Vec<usize>);

impl Reduce {
    /// What every reduction kernel does first: the axes (`axes_for`) and output shape for
    /// `data`, with the output checked against the limits; `None` for the identity.
    pub(super) fn plan(
        &self,
        ctx: &KernelCtx,
        op: &str,
        inputs: &[Option<&Tensor>],
        data: &Tensor,
    ) -> Result<Option<Plan>, String> {
        let Some(axes) = self.axes_for(op, inputs, data.shape().len())? else {
            return Ok(None);
        };
        // Reducing an empty axis yields identity values over the other axes, which can be far
        // larger than the (empty) input: check the output against the limit first.
        check_out(
            ctx,
            op,
            &kept_shape(data.shape(), &axes),
            bits(data.dtype()),
        )?;
        let shape = self.out_shape(data.shape(), &axes);
        Ok(Some((axes, shape)))
    }

    /// `axes_input_since`: the first version taking the axes as input 1.
    pub(super) fn parse(a: &Attrs, axes_input_since: i64) -> Result<Reduce, String> {
        let as_input = a.opset >= axes_input_since;
        Ok(Reduce {
            axes: if as_input {
                Axes::Input
            } else {
                Axes::Attribute(a.ints("axes")?.unwrap_or_default())
            },
            keepdims: a.flag("keepdims", true)?,
            noop_with_empty_axes: as_input && a.flag("noop_with_empty_axes", false)?,
        })
    }

    pub(super) fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let axes = match &self.axes {
            Axes::Attribute(a) => Some(a.clone()),
            Axes::Input if !cx.has_input(1) => Some(vec![]),
            Axes::Input => cx.ints(1),
        };
        let shape = match (x.shape.as_ref(), axes) {
            (Some(s), Some(axes)) => self.reduced_shape(s, &axes),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }

    fn reduced_shape(&self, s: &[Dim], axes: &[i64]) -> Option<Vec<Dim>> {
        if axes.is_empty() && self.noop_with_empty_axes {
            return Some(s.to_vec());
        }
        let axes: Vec<usize> = if axes.is_empty() {
            (0..s.len()).collect()
        } else {
            axes.iter()
                .map(|&a| infer_axis(a, s.len()))
                .collect::<Option<_>>()?
        };
        Some(
            s.iter()
                .enumerate()
                .filter_map(|(i, d)| match (axes.contains(&i), self.keepdims) {
                    (true, true) => Some(Dim::Known(1)),
                    (true, false) => None,
                    _ => Some(d.clone()),
                })
                .collect(),
        )
    }

    /// One dispatch summing (or averaging) rows: the reduced axes must be the trailing ones.
    fn lower(&self, c: &NodeCtx, mean: bool) -> Result<Lowered, String> {
        let x = &c.input(0)?.shape;
        let rank = x.len();
        let axes: Vec<i64> = match &self.axes {
            Axes::Input => static_ints(c, 1, "axes")?.unwrap_or_default(),
            Axes::Attribute(a) => a.clone(),
        };
        let mut axes: Vec<usize> = axes
            .iter()
            .map(|&a| lower_axis(a, rank))
            .collect::<Result<_, String>>()?;
        if axes.is_empty() {
            if self.noop_with_empty_axes {
                return Ok(Lowered::Alias);
            }
            axes = (0..rank).collect();
        }
        crate::ops::common::sort_usizes(&mut axes);
        axes.dedup();
        let first = rank - axes.len();
        if axes.iter().enumerate().any(|(i, &a)| a != first + i) {
            return Err(format!(
                "{} over axes {axes:?}: webgpu reduces trailing axes only",
                c.node.op_type
            ));
        }
        let len: usize = x[first..].iter().product();
        run(wgsl::reduce_rows(numel(x) / len.max(1), len, mean))
    }
}

#[derive(Debug)]
pub struct ReduceSum(pub Reduce);

#[derive(Debug)]
pub struct ReduceMean(pub Reduce);

impl ReduceSum {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ReduceSum(Reduce::parse(a, 13)?)))
    }
}

impl ReduceMean {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ReduceMean(Reduce::parse(a, 18)?)))
    }
}

impl Op for ReduceSum {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.0.infer(cx)
    }
    fn kernel(&self) -> Kernel {
        reduce_sum
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        self.0.lower(c, false)
    }
}

impl Op for ReduceMean {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.0.infer(cx)
    }
    fn kernel(&self) -> Kernel {
        reduce_mean
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        self.0.lower(c, true)
    }
}

#[derive(Debug)]
pub struct Softmax {
    pub axis: i64,
    /// Before 13: the input is coerced to 2-D at `axis`, whose rows are normalized.
    pub coerce_2d: bool,
}

impl Softmax {
    pub fn parse(a: &Attrs) -> P {
        let v13 = a.opset >= 13;
        Ok(Box::new(Softmax {
            axis: a.int("axis", if v13 { -1 } else { 1 })?,
            coerce_2d: !v13,
        }))
    }
}

impl Op for Softmax {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        softmax
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let x = &c.input(0)?.shape;
        let axis = lower_axis(self.axis, x.len())?;
        // Coerced to 2-D at `axis`, rows are the trailing dims from `axis`: for the last axis
        // that is the same as the per-lane softmax.
        if axis + 1 != x.len() && !self.coerce_2d {
            return Err(format!(
                "Softmax over axis {axis} of a rank-{} input (webgpu does the last axis)",
                x.len()
            ));
        }
        let len: usize = x[axis..].iter().product();
        run(wgsl::softmax(numel(x) / len.max(1), len))
    }
}

/// ReduceSum: `axes` became an optional input in version 13 (an attribute before).
pub fn reduce_sum(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let r = &ctx.attrs::<ReduceSum>()?.0;
    reduce(ctx, inputs, "ReduceSum", false, r)
}

/// ReduceMean: `axes` is an attribute up to version 17 and an optional input from 18, which
/// also adds `noop_with_empty_axes`.
pub fn reduce_mean(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let r = &ctx.attrs::<ReduceMean>()?.0;
    reduce(ctx, inputs, "ReduceMean", true, r)
}

fn reduce(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    mean: bool,
    r: &Reduce,
) -> KernelResult {
    let data = input(op, inputs, 0)?;
    let Some((axes, shape)) = r.plan(ctx, op, inputs, data)? else {
        return Ok(vec![data.clone()]);
    };
    Ok(vec![match data {
        Tensor::F32(a) => Tensor::F32(reduce_typed(op, a, &axes, &shape, mean)?),
        Tensor::F64(a) => Tensor::F64(reduce_typed(op, a, &axes, &shape, mean)?),
        Tensor::I32(a) => Tensor::I32(reduce_typed(op, a, &axes, &shape, mean)?),
        Tensor::I64(a) => Tensor::I64(reduce_typed(op, a, &axes, &shape, mean)?),
        other => return Err(unsupported_type(op, other.dtype())),
    }])
}

impl Reduce {
    /// The axes the node reduces over data of rank `rank`, normalized (duplicates and
    /// out-of-range axes are errors): every axis when none are given, `None` when
    /// `noop_with_empty_axes` makes the node the identity.
    pub(super) fn axes_for(
        &self,
        op: &str,
        inputs: &[Option<&Tensor>],
        rank: usize,
    ) -> Result<Option<Vec<usize>>, String> {
        let axes = match &self.axes {
            Axes::Input => opt_input(inputs, 1)
                .map(|t| int_list(op, "axes", t))
                .transpose()?
                .unwrap_or_default(),
            Axes::Attribute(a) => a.clone(),
        };
        Ok(match axes.is_empty() {
            true if self.noop_with_empty_axes => None,
            true => Some((0..rank).collect()),
            false => Some(norm_axes(op, &axes, rank)?),
        })
    }

    /// The output shape for `shape` reduced over `axes` (normalized).
    pub(super) fn out_shape(&self, shape: &[usize], axes: &[usize]) -> Vec<usize> {
        (0..shape.len())
            .filter_map(|d| match (axes.contains(&d), self.keepdims) {
                (false, _) => Some(shape[d]),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }
}

/// `shape` with the dims in `axes` set to 1 (the element count of a reduction's output).
fn kept_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    for &a in axes {
        if let Some(d) = s.get_mut(a) {
            *d = 1;
        }
    }
    s
}

fn reduce_typed<T: Num>(
    op: &str,
    a: &ArrayD<T>,
    axes: &[usize],
    shape: &[usize],
    mean: bool,
) -> Result<ArrayD<T>, String> {
    let mut sorted = axes.to_vec();
    crate::ops::common::sort_usizes(&mut sorted);
    // Highest axis first, so the lower axis numbers stay valid as dims disappear.
    let mut acc: Option<ArrayD<T>> = None;
    for &ax in sorted.iter().rev() {
        let src = acc.as_ref().unwrap_or(a);
        acc = Some(src.fold_axis(Axis(ax), T::ZERO, |s, &v| s.wadd(v)));
    }
    let mut out = acc.unwrap_or_else(|| a.clone());
    if mean {
        let count: usize = sorted.iter().map(|&ax| a.shape()[ax]).product();
        if T::IS_INT && count == 0 && !out.is_empty() {
            return Err(format!("{op}: integer mean over an empty set of values"));
        }
        out.mapv_inplace(|v| v.div_count(count).unwrap_or(T::ZERO));
    }
    Ok(out
        .to_shape(IxDyn(shape))
        .map_err(|e| format!("{op}: {e}"))?
        .into_owned())
}

/// Softmax. From version 13 it normalizes along `axis`. Versions 1 and 11 coerce the input to
/// 2-D at `axis` and normalize each row of that matrix.
pub fn softmax(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Softmax";
    let p = ctx.attrs::<Softmax>()?;
    let x = input(OP, inputs, 0)?;
    Ok(vec![match x {
        Tensor::F32(a) => Tensor::F32(softmax_typed(p, a)?),
        Tensor::F64(a) => Tensor::F64(softmax_typed(p, a)?),
        other => return Err(unsupported_type(OP, other.dtype())),
    }])
}

fn softmax_typed<T: Float>(p: &Softmax, a: &ArrayD<T>) -> Result<ArrayD<T>, String> {
    map_lanes("Softmax", a, p.axis, p.coerce_2d, softmax_row)
}

/// exp(x - max) / sum over one lane (subtracting the max keeps exp from overflowing), as
/// separate slice passes that vectorize: the max and the sum use 8 partial accumulators (so their
/// order differs from a serial loop by rounding only), and exp is `fast_exp`. Inlined, so that a
/// caller inside `simd::widest` gets it compiled for the widest vectors.
#[inline(always)]
pub(super) fn softmax_row<T: Float>(row: &mut [T]) {
    // The wasm build does not vectorize these loops (it is optimized for size): float32 rows
    // take a four-lane version of the same passes there.
    if T::softmax_lanes(row) {
        return;
    }
    const L: usize = 8;
    let pick = |m: T, v: T| if v > m { v } else { m };
    let mut maxes = [T::NEG_INFINITY; L];
    let mut chunks = row.chunks_exact(L);
    for c in &mut chunks {
        for (m, &v) in maxes.iter_mut().zip(c) {
            *m = pick(*m, v);
        }
    }
    let max = chunks
        .remainder()
        .iter()
        .chain(&maxes)
        .fold(T::NEG_INFINITY, |m, &v| pick(m, v));
    for v in row.iter_mut() {
        let d = v.wsub(max);
        // A select, not a branch: the f32 loop still vectorizes, and f64 skips libm's slow
        // underflow path for masked scores.
        *v = if d < T::EXP_ZERO {
            T::ZERO
        } else {
            d.fast_exp()
        };
    }
    let sum = super::common::lane_sum(row);
    for v in row.iter_mut() {
        *v = v.wdiv(sum);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::*;

    #[test]
    fn exp_zero_thresholds_are_where_exp_is_zero() {
        use super::super::common::Float;
        assert_eq!(<f32 as Float>::EXP_ZERO.exp(), 0.0);
        assert_eq!(<f64 as Float>::EXP_ZERO.exp(), 0.0);
        assert_eq!(<f32 as Float>::EXP_ZERO.fast_exp(), 0.0);
        assert_eq!(<f64 as Float>::EXP_ZERO.fast_exp(), 0.0);
        // A masked lane: exactly the softmax of the unmasked entries.
        let x = f32s(&[1, 3], &[1.0, -3.4e38, 2.0]);
        let y = run1(softmax, "Softmax", &[&x]).unwrap();
        let (a, b) = (1f32.exp(), 2f32.exp());
        assert_close(&y, &f32s(&[1, 3], &[a / (a + b), 0.0, b / (a + b)]), 1e-7);
    }
    use crate::ir::{attr, Node};

    fn node(op: &str, attrs: Vec<crate::onnx::proto::AttributeProto>) -> Node {
        let mut n = Node::new(op, "");
        for a in attrs {
            n.set_attr(a);
        }
        n
    }

    fn x23() -> Tensor {
        f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.])
    }

    #[test]
    fn reduce_sum_keepdims_both_ways() {
        let x = x23();
        let axes = Tensor::from_i64s(&[1]);
        let n = node("ReduceSum", vec![]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 1], &[6., 15.]));
        let n = node("ReduceSum", vec![attr::int("keepdims", 0)]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[6., 15.]));
        let neg = Tensor::from_i64s(&[-2]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&neg)]).unwrap();
        assert_eq!(y[0], f32s(&[3], &[5., 7., 9.]));
        // no axes: everything
        let y = run_at(reduce_sum, &n, 13, &[Some(&x)]).unwrap();
        assert_eq!(y[0], f32s(&[], &[21.]));
        let k = node("ReduceSum", vec![]);
        let y = run_at(reduce_sum, &k, 13, &[Some(&x), None]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1], &[21.]));
        let i = i64s(&[2, 2], &[1, 2, 3, 4]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&i), Some(&axes)]).unwrap();
        assert_eq!(y[0], i64s(&[2], &[3, 7]));
    }

    #[test]
    fn reduce_noop_with_empty_axes() {
        let x = x23();
        let n = node("ReduceSum", vec![attr::int("noop_with_empty_axes", 1)]);
        let empty = Tensor::from_i64s(&[]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&empty)]).unwrap();
        assert_eq!(y[0], x);
        let m = node("ReduceMean", vec![attr::int("noop_with_empty_axes", 1)]);
        let y = run_at(reduce_mean, &m, 18, &[Some(&x)]).unwrap();
        assert_eq!(y[0], x);
        // Before 18, ReduceMean has no such attribute: it reduces everything.
        let y = run_at(reduce_mean, &m, 17, &[Some(&x)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1], &[3.5]));
    }

    #[test]
    fn reduce_mean_attribute_vs_input() {
        let x = x23();
        // opset 17: axes attribute
        let n = node("ReduceMean", vec![attr::ints("axes", &[0])]);
        let y = run_at(reduce_mean, &n, 17, &[Some(&x)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 3], &[2.5, 3.5, 4.5]));
        // opset 18: the attribute is gone; axes come from input 1
        let n = node("ReduceMean", vec![attr::int("keepdims", 0)]);
        let axes = Tensor::from_i64s(&[-1]);
        let y = run_at(reduce_mean, &n, 18, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[2., 5.]));
        // at 17 the input is ignored, so everything is reduced
        let y = run_at(reduce_mean, &n, 17, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(y[0], f32s(&[], &[3.5]));
        let i = i32s(&[3], &[1, 2, 4]);
        let y = run_at(reduce_mean, &n, 18, &[Some(&i)]).unwrap();
        assert_eq!(y[0], i32s(&[], &[2]));
    }

    #[test]
    fn reduce_multi_axes_and_empty() {
        let x = f64s(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let n = node("ReduceSum", vec![attr::int("keepdims", 0)]);
        let axes = Tensor::from_i64s(&[2, 0]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(y[0], f64s(&[2], &[14., 22.]));
        let e = f32s(&[0, 2], &[]);
        let a0 = Tensor::from_i64s(&[0]);
        let y = run_at(reduce_sum, &n, 13, &[Some(&e), Some(&a0)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[0., 0.]));
        let m = node("ReduceMean", vec![attr::int("keepdims", 0)]);
        let y = run_at(reduce_mean, &m, 18, &[Some(&e), Some(&a0)]).unwrap();
        assert!(y[0].to_f64_vec().iter().all(|v| v.is_nan()));
    }

    #[test]
    fn reduce_errors() {
        let x = x23();
        let n = node("ReduceSum", vec![]);
        let bad = Tensor::from_i64s(&[2]);
        let e = run_at(reduce_sum, &n, 13, &[Some(&x), Some(&bad)]).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        let dup = Tensor::from_i64s(&[1, -1]);
        assert!(run_at(reduce_sum, &n, 13, &[Some(&x), Some(&dup)]).is_err());
        let b = bools(&[1], &[true]);
        assert!(run_at(reduce_sum, &n, 13, &[Some(&b)]).is_err());
        let i = i32s(&[0], &[]);
        let m = node("ReduceMean", vec![]);
        assert!(run_at(reduce_mean, &m, 18, &[Some(&i)]).is_err());
    }

    #[test]
    fn softmax_contiguous_rows_match_strided_lanes_and_f64() {
        // Lanes of 19 (two chunks of 8 and a remainder), one with a NaN, one masked.
        let (r, n) = (5usize, 19usize);
        let mut v: Vec<f32> = (0..r * n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
            .collect();
        v[n + 3] = f32::NAN;
        for x in &mut v[2 * n..2 * n + 17] {
            *x = -3.4e38;
        }
        let x = f32s(&[r, n], &v);
        let last = run_at(softmax, &node("Softmax", vec![]), 13, &[Some(&x)]).unwrap();
        // The same data transposed, normalized along axis 0 (the strided-lane path).
        let t: Vec<f32> = (0..n * r).map(|i| v[(i % r) * n + i / r]).collect();
        let xt = f32s(&[n, r], &t);
        let n0 = node("Softmax", vec![attr::int("axis", 0)]);
        let first = run_at(softmax, &n0, 13, &[Some(&xt)]).unwrap();
        let (a, b) = (last[0].to_f64_vec(), first[0].to_f64_vec());
        for row in 0..r {
            let lane: Vec<f64> = v[row * n..][..n].iter().map(|&x| x as f64).collect();
            let max = lane.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            // x - max rounded to f32 as the kernel forms it; the rest in f64.
            let e: Vec<f64> = lane
                .iter()
                .map(|&x| (((x - max) as f32) as f64).exp())
                .collect();
            let sum: f64 = e.iter().sum();
            for j in 0..n {
                let (got, strided) = (a[row * n + j], b[j * r + row]);
                if row == 1 {
                    assert!(got.is_nan() && strided.is_nan());
                    continue;
                }
                let want = e[j] / sum;
                assert!(
                    (got - want).abs() <= 1e-6 * want + 1e-30,
                    "{row},{j}: {got} vs {want}"
                );
                assert!((strided - want).abs() <= 1e-6 * want + 1e-30, "{row},{j}");
            }
        }
    }

    #[test]
    fn softmax_axis() {
        let x = f64s(&[2, 2], &[0., 0., 0., 2f64.ln()]);
        let n = node("Softmax", vec![]);
        let y = run_at(softmax, &n, 13, &[Some(&x)]).unwrap();
        assert_close(&y[0], &f64s(&[2, 2], &[0.5, 0.5, 1. / 3., 2. / 3.]), 1e-15);
        let n = node("Softmax", vec![attr::int("axis", 0)]);
        let y = run_at(softmax, &n, 13, &[Some(&x)]).unwrap();
        assert_close(&y[0], &f64s(&[2, 2], &[0.5, 1. / 3., 0.5, 2. / 3.]), 1e-15);
        // large values do not overflow
        let big = f32s(&[2], &[1000., 1000.]);
        let n = node("Softmax", vec![]);
        let y = run_at(softmax, &n, 13, &[Some(&big)]).unwrap();
        assert_eq!(y[0], f32s(&[2], &[0.5, 0.5]));
        let n = node("Softmax", vec![attr::int("axis", 2)]);
        assert!(run_at(softmax, &n, 13, &[Some(&x)]).is_err());
        let i = i32s(&[1], &[1]);
        assert!(run_at(softmax, &node("Softmax", vec![]), 13, &[Some(&i)]).is_err());
    }

    #[test]
    fn softmax_opset11_coerces_to_2d() {
        // [1, 2, 2] with axis 1: one row of 4 values.
        let x = f64s(&[1, 2, 2], &[0., 0., 0., 0.]);
        let n = node("Softmax", vec![]);
        let y = run_at(softmax, &n, 11, &[Some(&x)]).unwrap();
        assert_close(&y[0], &f64s(&[1, 2, 2], &[0.25; 4]), 1e-15);
        let y = run_at(softmax, &n, 13, &[Some(&x)]).unwrap();
        assert_close(&y[0], &f64s(&[1, 2, 2], &[0.5; 4]), 1e-15);
    }
}
