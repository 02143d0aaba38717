//! ai.onnx data-dependent selection: NonZero, Compress, Unique and OneHot. The first three have
//! output sizes only the data decides: inference leaves those dims unknown (the driver names
//! each `?value[axis]`), and the kernels find the count first (working memory at most in
//! proportion to the input) and check the output against the limits before allocating it.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | NonZero | 9, 13 | none | X -> int64 [rank(X), count]: the coordinates of each non-zero element, row-major order |
//! | Compress | 9 | `axis` (absent: X flattened) | input, condition (bool, 1-D) -> the slices (elements) where condition is true |
//! | Compress | 11, 28 | as 9, `axis` may be negative | as 9 |
//! | Unique | 11, 28 | `axis` (absent: X flattened), `sorted` (1) | X -> Y, indices, inverse_indices, counts (int64, 1-D) |
//! | OneHot | 9 | `axis` (-1), in [-r-1, r] | indices (any numeric), depth (one number), values ([off, on]) -> values' type, indices' shape with depth inserted at axis |
//! | OneHot | 11, 28 | as 9 | as 9; negative indices count from the end (index + depth) |
//!
//! Version changes: 13 and 28 only add element types. OneHot 9 leaves any index outside
//! [0, depth) all off; from 11 the range is [-depth, depth). Compress 9 documents no negative
//! axis (accepted anyway). NonZero of a scalar is [0, count] (onnx's reference). Compress:
//! condition may be shorter than the axis (the rest is dropped) and longer only with false
//! entries (numpy's rule). Unique compares floats with NaN after every number and all NaNs
//! equal; sorted order is ascending, lexicographic over each subtensor's row-major elements when
//! `axis` is given; unsorted is the order of first occurrence. A fractional OneHot index matches
//! no position.

use std::cmp::Ordering;

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, norm_axis};
use super::gather_scatter::{take_tensor, Starts};
use super::infer::{const_scalar_f64, dim_product, norm_axis as infer_axis};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};
use crate::with_tensor;

type P = Result<Box<dyn Op>, String>;

super::plain_ops!(NonZero);

impl Op for NonZero {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = cx
            .input(0)
            .rank()
            .map(|r| vec![Dim::Known(r as i64), Dim::Unknown]);
        vec![TensorType {
            dtype: Some(DType::I64),
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        non_zero
    }
}

/// Dims of `s` with axis `axis` (ONNX range) made unknown, when the axis is valid.
fn unknown_at(s: &[Dim], axis: i64) -> Option<Vec<Dim>> {
    let ax = infer_axis(axis, s.len())?;
    let mut out = s.to_vec();
    out[ax] = Dim::Unknown;
    Some(out)
}

#[derive(Debug)]
pub struct Compress {
    pub axis: Option<i64>,
}

impl Compress {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Compress {
            axis: a.opt_int("axis")?,
        }))
    }
}

impl Op for Compress {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match self.axis {
            None => Some(vec![Dim::Unknown]),
            Some(axis) => x.shape.as_deref().and_then(|s| unknown_at(s, axis)),
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        compress
    }
}

#[derive(Debug)]
pub struct Unique {
    pub axis: Option<i64>,
    pub sorted: bool,
}

impl Unique {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Unique {
            axis: a.opt_int("axis")?,
            sorted: a.flag("sorted", true)?,
        }))
    }
}

impl Op for Unique {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let vec1 = |d: Option<Dim>| TensorType {
            dtype: Some(DType::I64),
            shape: d.map(|d| vec![d]),
        };
        let (y, inverse) = match self.axis {
            None => (
                Some(vec![Dim::Unknown]),
                x.shape.as_deref().map(dim_product),
            ),
            Some(axis) => {
                let s = x.shape.as_deref();
                (
                    s.and_then(|s| unknown_at(s, axis)),
                    s.and_then(|s| Some(s[infer_axis(axis, s.len())?].clone())),
                )
            }
        };
        vec![
            TensorType {
                dtype: x.dtype,
                shape: y,
            },
            vec1(Some(Dim::Unknown)),
            vec1(inverse),
            vec1(Some(Dim::Unknown)),
        ]
    }
    fn kernel(&self) -> Kernel {
        unique
    }
}

#[derive(Debug)]
pub struct OneHot {
    pub axis: i64,
    /// From 11: an index in [-depth, 0) counts from the end.
    pub wrap_negative: bool,
}

impl OneHot {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(OneHot {
            axis: a.int("axis", -1)?,
            wrap_negative: a.opset >= 11,
        }))
    }

    /// The position of the depth axis in an output of rank `rank + 1`.
    fn out_axis(&self, rank: usize) -> Option<usize> {
        infer_axis(self.axis, rank + 1)
    }
}

impl Op for OneHot {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let depth = const_scalar_f64(cx.graph, cx.node.input(1))
            .filter(|d| *d >= 0.0 && d.fract() == 0.0 && *d < i64::MAX as f64)
            .map_or(Dim::Unknown, |d| Dim::Known(d as i64));
        let shape = cx.input(0).shape.and_then(|mut s| {
            s.insert(self.out_axis(s.len())?, depth);
            Some(s)
        });
        vec![TensorType {
            dtype: cx.input(2).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        one_hot
    }
}

/// The row-major positions of the non-zero (true, NaN) elements.
fn set_positions<T: PartialEq + Default>(a: &ArrayD<T>) -> Vec<usize> {
    let zero = T::default();
    let set = a.iter().enumerate().filter(|(_, v)| **v != zero);
    set.map(|(k, _)| k).collect()
}

/// NonZero (9, 13): the coordinates of the non-zero elements, one column each.
pub fn non_zero(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "NonZero";
    let x = input(OP, inputs, 0)?;
    let dims = x.shape();
    // The flat positions of the non-zero elements (at most the input's size), then the output
    // checked against the limits before it is allocated.
    let hits: Vec<usize> = with_tensor!(x, a => set_positions(a));
    let (rank, count) = (dims.len(), hits.len());
    check_out(ctx, OP, &[rank, count], 64)?;
    let mut out = vec![0i64; rank * count];
    for (j, mut k) in hits.into_iter().enumerate() {
        for d in (0..rank).rev() {
            out[d * count + j] = (k % dims[d]) as i64;
            k /= dims[d];
        }
    }
    let y = ArrayD::from_shape_vec(IxDyn(&[rank, count]), out).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![Tensor::I64(y)])
}

/// (outer, n, inner) of `dims` split at `axis` (the axis's own length n), or the flattened
/// tensor as (1, len, 1) without an axis.
fn split_at_axis(op: &str, dims: &[usize], axis: Option<i64>) -> Result<[usize; 3], String> {
    Ok(match axis {
        None => [1, dims.iter().product(), 1],
        Some(a) => {
            let ax = norm_axis(op, a, dims.len())?;
            [
                dims[..ax].iter().product(),
                dims[ax],
                dims[ax + 1..].iter().product(),
            ]
        }
    })
}

/// The output shape keeping `k` of the `n` entries along `axis` (or the flattened input).
fn kept_shape(dims: &[usize], axis: Option<i64>, k: usize) -> Vec<usize> {
    let mut out = dims.to_vec();
    match axis.map(|a| if a < 0 { a + dims.len() as i64 } else { a }) {
        Some(a) => out[a as usize] = k,
        None => out = vec![k],
    }
    out
}

/// Compress (9, 11, 28): the entries along `axis` (or the flattened input's elements) whose
/// condition is true.
pub fn compress(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Compress";
    let x = input(OP, inputs, 0)?;
    let cond_t = input(OP, inputs, 1)?;
    let axis = ctx.attrs::<Compress>()?.axis;
    let Tensor::Bool(cond) = cond_t else {
        return Err(format!(
            "{OP}: condition must be bool, got {}",
            cond_t.dtype()
        ));
    };
    if cond.ndim() != 1 {
        return Err(format!(
            "{OP}: condition must be 1-D, got shape {:?}",
            cond.shape()
        ));
    }
    let dims = x.shape();
    if axis.is_some() && dims.is_empty() {
        return Err(format!("{OP}: input must have rank >= 1, got a scalar"));
    }
    let [outer, n, inner] = split_at_axis(OP, dims, axis)?;
    let mut kept = Vec::new();
    for (i, _) in cond.iter().enumerate().filter(|(_, &c)| c) {
        if i >= n {
            return Err(format!(
                "{OP}: condition is true at position {i}, past the {n} entries it selects from"
            ));
        }
        kept.push(i);
    }
    let shape = kept_shape(dims, axis, kept.len());
    check_out(ctx, OP, &shape, bits(x.dtype()))?;
    let mut starts = (0..outer).flat_map(|o| kept.iter().map(move |&i| (o * n + i) * inner));
    Ok(vec![take_tensor(
        OP,
        x,
        Starts::Iter(&mut starts),
        inner,
        &shape,
    )?])
}

/// `a` before `b` in Unique's order: numbers ascending, NaN after every number, NaNs equal.
#[allow(clippy::eq_op)]
fn total_cmp<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| (a != a).cmp(&(b != b)))
}

/// Unique's grouping of rows `0..n`: each group's first row, each row's group, each group's
/// size.
struct Groups {
    first: Vec<usize>,
    inverse: Vec<usize>,
    counts: Vec<usize>,
}

/// Groups rows `0..n` that `cmp` calls equal, in `cmp`'s ascending order (`sorted`) or in order
/// of first occurrence. Not generic: one sort serves every element type.
fn group(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering, sorted: bool) -> Groups {
    // A stable sort keeps each group's rows in input order: its first is its first occurrence.
    let mut order: Vec<usize> = (0..n).collect();
    super::common::sort_indices(&mut order, cmp);
    let mut group_of = vec![0usize; n];
    let (mut first, mut counts) = (Vec::new(), Vec::new());
    for (pos, &r) in order.iter().enumerate() {
        if pos == 0 || cmp(order[pos - 1], r) != Ordering::Equal {
            first.push(r);
            counts.push(0);
        }
        group_of[r] = first.len() - 1;
        if let Some(c) = counts.last_mut() {
            *c += 1;
        }
    }
    if sorted {
        return Groups {
            first,
            inverse: group_of,
            counts,
        };
    }
    // Renumber the groups as the rows first meet them.
    let mut rank = vec![usize::MAX; first.len()];
    let (mut first2, mut counts2) = (Vec::with_capacity(first.len()), Vec::new());
    for (r, &g) in group_of.iter().enumerate() {
        if rank[g] == usize::MAX {
            rank[g] = first2.len();
            first2.push(r);
            counts2.push(counts[g]);
        }
    }
    Groups {
        first: first2,
        inverse: group_of.iter().map(|&g| rank[g]).collect(),
        counts: counts2,
    }
}

/// `group` over the `n` subtensors of `a` split as (outer, n, inner): row r's element
/// j = o * inner + i sits at (o * n + r) * inner + i.
fn group_rows<T: PartialOrd + Clone>(
    op: &str,
    a: &ArrayD<T>,
    [outer, n, inner]: [usize; 3],
    sorted: bool,
) -> Result<Groups, String> {
    let a = a.as_standard_layout();
    let src = a
        .as_slice()
        .ok_or_else(|| format!("{op}: input is not contiguous"))?;
    let cmp_rows = |p: usize, q: usize| {
        for o in 0..outer {
            let (bp, bq) = ((o * n + p) * inner, (o * n + q) * inner);
            for i in 0..inner {
                match total_cmp(&src[bp + i], &src[bq + i]) {
                    Ordering::Equal => {}
                    c => return c,
                }
            }
        }
        Ordering::Equal
    };
    Ok(group(n, &cmp_rows, sorted))
}

/// Unique (11, 28): the distinct elements (or subtensors along `axis`), the first occurrence of
/// each, each input entry's position among them, and how often each occurs.
pub fn unique(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Unique";
    let x = input(OP, inputs, 0)?;
    let at = ctx.attrs::<Unique>()?;
    let dims = x.shape();
    if at.axis.is_some() && dims.is_empty() {
        return Err(format!(
            "{OP}: input must have rank >= 1 with an axis, got a scalar"
        ));
    }
    let split = split_at_axis(OP, dims, at.axis)?;
    // inverse_indices (int64, one per subtensor) bounds the grouping's own working memory.
    check_out(ctx, OP, &[split[1]], 64)?;
    let g = with_tensor!(x, a => group_rows(OP, a, split, at.sorted)?);
    let [outer, n, inner] = split;
    let shape = kept_shape(dims, at.axis, g.first.len());
    check_out(ctx, OP, &shape, bits(x.dtype()))?;
    let mut starts = (0..outer).flat_map(|o| g.first.iter().map(move |&r| (o * n + r) * inner));
    let y = take_tensor(OP, x, Starts::Iter(&mut starts), inner, &shape)?;
    let ints = |v: &[usize]| Tensor::from_i64s(&v.iter().map(|&k| k as i64).collect::<Vec<_>>());
    Ok(vec![y, ints(&g.first), ints(&g.inverse), ints(&g.counts)])
}

/// OneHot (9, 11, 28): off everywhere, on where the depth coordinate equals the index.
pub fn one_hot(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "OneHot";
    let idx_t = input(OP, inputs, 0)?;
    let depth_t = input(OP, inputs, 1)?;
    let values = input(OP, inputs, 2)?;
    let at = ctx.attrs::<OneHot>()?;
    if idx_t.dtype() == DType::BOOL || depth_t.dtype() == DType::BOOL {
        return Err(format!("{OP}: indices and depth must be numbers, not bool"));
    }
    let depth = match *depth_t.to_f64_vec().as_slice() {
        [d] if d >= 0.0 && d.fract() == 0.0 && d < (1u64 << 53) as f64 => d as usize,
        [d] => {
            return Err(format!(
                "{OP}: depth must be a whole number in [0, 2^53), got {d}"
            ))
        }
        _ => {
            return Err(format!(
                "{OP}: depth must hold one number, got shape {:?}",
                depth_t.shape()
            ))
        }
    };
    if values.len() != 2 {
        return Err(format!(
            "{OP}: values must hold two elements [off, on], got shape {:?}",
            values.shape()
        ));
    }
    let dims = idx_t.shape();
    let axis = at.out_axis(dims.len()).ok_or_else(|| {
        format!(
            "{OP}: axis {} is out of range for output rank {}",
            at.axis,
            dims.len() + 1
        )
    })?;
    let mut shape = dims.to_vec();
    shape.insert(axis, depth);
    check_out(ctx, OP, &shape, bits(values.dtype()))?;
    let (outer, inner): (usize, usize) =
        (dims[..axis].iter().product(), dims[axis..].iter().product());
    // Each index's position on the depth axis (usize::MAX: none, all off).
    let d = depth as f64;
    let hot: Vec<usize> = idx_t
        .to_f64_vec()
        .iter()
        .map(|&v| {
            let v = if v < 0.0 && at.wrap_negative {
                v + d
            } else {
                v
            };
            if v >= 0.0 && v < d && v.fract() == 0.0 {
                v as usize
            } else {
                usize::MAX
            }
        })
        .collect();
    // Output (o, k, i) reads values[1] (on) where index (o, i) is k, else values[0] (off).
    let hot = &hot;
    let mut pick = (0..outer).flat_map(|o| {
        (0..depth).flat_map(move |k| (0..inner).map(move |i| (hot[o * inner + i] == k) as usize))
    });
    Ok(vec![take_tensor(
        OP,
        values,
        Starts::Iter(&mut pick),
        1,
        &shape,
    )?])
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
