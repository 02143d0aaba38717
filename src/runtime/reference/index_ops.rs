//! Indexing and shape-producing kernels: Gather, Slice, Split, Expand, Flatten, Trilu, Range and
//! ConstantOfShape. Every output size is checked against the limits before it is allocated, and
//! bad indices or sizes are errors, never panics.

use ndarray::{ArrayD, Axis, IxDyn, Slice};

use super::broadcast::broadcast_shape;
use super::common::{bits, check_out, input, int_list, map_tensor, norm_axis, opt_input};
use super::{KernelCtx, KernelResult};
use crate::onnx::tensor::to_tensor;
use crate::tensor::{DType, Tensor};

/// A shape given as data (Expand, ConstantOfShape): non-negative int64 values.
fn dims_arg(op: &str, what: &str, t: &Tensor) -> Result<Vec<usize>, String> {
    let v = int_list(op, what, t)?;
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| format!("{op}: negative dimension {d} in '{what}' {v:?}"))
        })
        .collect()
}

/// Gather (11, 13): entries of `data` along `axis` picked by `indices` (int32/int64; negative
/// values count from the end). Output shape: data[..axis] ++ indices ++ data[axis+1..].
pub fn gather(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Gather";
    let data = input(OP, inputs, 0)?;
    let idx_t = input(OP, inputs, 1)?;
    let dims = data.shape();
    if dims.is_empty() {
        return Err(format!("{OP}: data must have rank >= 1, got a scalar"));
    }
    let axis = norm_axis(OP, ctx.node.attr_int("axis").unwrap_or(0), dims.len())?;
    let raw = idx_t.to_i64_vec().ok_or_else(|| {
        format!(
            "{OP}: indices must be int32 or int64, got {}",
            idx_t.dtype()
        )
    })?;
    let n = dims[axis];
    let idx: Vec<usize> = raw
        .iter()
        .map(|&i| {
            let j = if i < 0 { i.checked_add(n as i64) } else { Some(i) };
            j.and_then(|j| usize::try_from(j).ok())
                .filter(|&j| j < n)
                .ok_or_else(|| {
                    format!(
                        "{OP}: index {i} is out of range for axis {axis} of size {n} (valid: [{}, {}])",
                        -(n as i64),
                        n as i64 - 1
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    let mut out_shape = dims[..axis].to_vec();
    out_shape.extend_from_slice(idx_t.shape());
    out_shape.extend_from_slice(&dims[axis + 1..]);
    check_out(ctx, OP, &out_shape, bits(data.dtype()))?;
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    fn pick<T: Clone>(
        a: &ArrayD<T>,
        idx: &[usize],
        (outer, n, inner): (usize, usize, usize),
        shape: &[usize],
    ) -> Result<ArrayD<T>, String> {
        let a = a.as_standard_layout();
        let src = a.as_slice().ok_or("Gather: input is not contiguous")?;
        let mut v = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in idx {
                let start = (o * n + i) * inner;
                v.extend_from_slice(&src[start..start + inner]);
            }
        }
        ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("Gather: {e}"))
    }
    Ok(vec![
        map_tensor!(data, a => pick(a, &idx, (outer, n, inner), &out_shape)?),
    ])
}

/// One axis of a Slice, clamped per the spec: (start, end, step) in the form ndarray's `Slice`
/// takes, plus the resulting length.
fn slice_axis(start: i64, end: i64, step: i64, dim: usize) -> (Slice, usize) {
    let empty = || (Slice::new(0, Some(0), 1), 0);
    if dim == 0 {
        return empty();
    }
    let d = dim as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    // A step as long as the axis takes one element; clamping keeps it within isize for ndarray.
    let short_step = step.clamp(-d, d) as isize;
    if step > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        if e <= s {
            return empty();
        }
        let len = (e - s - 1) / step + 1;
        (
            Slice::new(s as isize, Some(e as isize), short_step),
            len as usize,
        )
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        if s <= e {
            return empty();
        }
        // Elements s, s + step, ... while > e; ndarray walks [last, s] backwards by |step|.
        let len = ((s - e - 1) as u64 / step.unsigned_abs()) as i64 + 1;
        let last = s + (len - 1) * step;
        (
            Slice::new(last as isize, Some(s as isize + 1), short_step),
            len as usize,
        )
    }
}

/// Slice (1, 10, 11, 13): starts/ends/axes/steps are inputs from 10, attributes before. Negative
/// starts/ends count from the end and are then clamped; negative steps walk backwards.
pub fn slice(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Slice";
    let data = input(OP, inputs, 0)?;
    let rank = data.shape().len();
    let (starts, ends, axes, steps) = if ctx.opset >= 10 {
        let list = |i: usize, what: &str| {
            opt_input(inputs, i)
                .map(|t| int_list(OP, what, t))
                .transpose()
        };
        (
            int_list(OP, "starts", input(OP, inputs, 1)?)?,
            int_list(OP, "ends", input(OP, inputs, 2)?)?,
            list(3, "axes")?,
            list(4, "steps")?,
        )
    } else {
        let attr = |n: &str| ctx.node.attr_ints(n).map(<[i64]>::to_vec);
        (
            attr("starts").ok_or_else(|| format!("{OP}: attribute 'starts' is required"))?,
            attr("ends").ok_or_else(|| format!("{OP}: attribute 'ends' is required"))?,
            attr("axes"),
            None,
        )
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return Err(format!(
            "{OP}: starts, ends, axes and steps must have the same length, got {}, {}, {} and {}",
            k,
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    let axes = super::common::norm_axes(OP, &axes, rank)?;
    let mut cuts = Vec::with_capacity(k);
    let mut out_shape = data.shape().to_vec();
    for i in 0..k {
        if steps[i] == 0 {
            return Err(format!("{OP}: step for axis {} is 0", axes[i]));
        }
        let (s, len) = slice_axis(starts[i], ends[i], steps[i], out_shape[axes[i]]);
        out_shape[axes[i]] = len;
        cuts.push((axes[i], s));
    }
    check_out(ctx, OP, &out_shape, bits(data.dtype()))?;
    Ok(vec![map_tensor!(data, a => {
        let mut v = a.view();
        for &(ax, s) in &cuts {
            v.slice_axis_inplace(Axis(ax), s);
        }
        v.as_standard_layout().into_owned()
    })])
}

/// Split (11, 13, 18): sizes from the `split` input (an attribute before 13); otherwise equal
/// parts, one per output or (18+) `num_outputs`, the last part smaller when uneven.
pub fn split(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Split";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    if dims.is_empty() {
        return Err(format!("{OP}: cannot split a scalar"));
    }
    let axis = norm_axis(OP, ctx.node.attr_int("axis").unwrap_or(0), dims.len())?;
    let dim = dims[axis];
    let n_out = ctx.node.outputs.len();
    let given = if ctx.opset >= 13 {
        opt_input(inputs, 1)
            .map(|t| int_list(OP, "split", t))
            .transpose()?
    } else {
        ctx.node.attr_ints("split").map(<[i64]>::to_vec)
    };
    let num_outputs = if ctx.opset >= 18 {
        ctx.node.attr_int("num_outputs")
    } else {
        None
    };
    let sizes: Vec<usize> = match (given, num_outputs) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{OP}: give either the 'split' input or 'num_outputs', not both"
            ))
        }
        (Some(s), None) => {
            let sizes: Vec<usize> = s
                .iter()
                .map(|&v| usize::try_from(v).map_err(|_| format!("{OP}: negative split size {v}")))
                .collect::<Result<_, _>>()?;
            let total = sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b));
            if total != Some(dim) {
                return Err(format!(
                    "{OP}: split sizes {s:?} do not sum to the size {dim} of axis {axis}"
                ));
            }
            sizes
        }
        (None, Some(k)) => {
            if k < 1 {
                return Err(format!("{OP}: num_outputs must be positive, got {k}"));
            }
            if n_out != 0 && k as usize != n_out {
                return Err(format!(
                    "{OP}: num_outputs is {k} but the node has {n_out} outputs"
                ));
            }
            let k = k as usize;
            let chunk = dim.div_ceil(k);
            let head = chunk * (k - 1);
            if head > dim {
                return Err(format!(
                    "{OP}: axis {axis} of size {dim} cannot be split into {k} parts \
                     of size {chunk} with a smaller last one"
                ));
            }
            let mut sizes = vec![chunk; k - 1];
            sizes.push(dim - head);
            sizes
        }
        (None, None) => {
            if n_out == 0 || dim % n_out != 0 {
                return Err(format!(
                    "{OP}: axis {axis} of size {dim} cannot be split evenly into {n_out} outputs"
                ));
            }
            vec![dim / n_out; n_out]
        }
    };
    if n_out != 0 && sizes.len() != n_out {
        return Err(format!(
            "{OP}: {} split sizes but the node has {n_out} outputs",
            sizes.len()
        ));
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut pos = 0usize;
    for &s in &sizes {
        let cut = Slice::new(pos as isize, Some((pos + s) as isize), 1);
        out.push(map_tensor!(data, a => a
            .slice_axis(Axis(axis), cut)
            .as_standard_layout()
            .into_owned()));
        pos += s;
    }
    Ok(out)
}

/// Expand (8, 13): `input` broadcast bidirectionally with `shape` (so a 1 in `shape` keeps the
/// input dim, and the output rank is the larger of the two).
pub fn expand(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Expand";
    let data = input(OP, inputs, 0)?;
    let target = dims_arg(OP, "shape", input(OP, inputs, 1)?)?;
    let out_shape = broadcast_shape(OP, data.shape(), &target).map_err(|_| {
        format!(
            "{OP}: input of shape {:?} cannot be expanded to shape {target:?}",
            data.shape()
        )
    })?;
    check_out(ctx, OP, &out_shape, bits(data.dtype()))?;
    Ok(vec![map_tensor!(data, a => a
        .broadcast(IxDyn(&out_shape))
        .ok_or_else(|| format!("{OP}: cannot broadcast {:?} to {out_shape:?}", a.shape()))?
        .as_standard_layout()
        .into_owned())])
}

/// Flatten (13): a 2-D view, [prod(dims[..axis]), prod(dims[axis..])]; axis in [-r, r].
pub fn flatten(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Flatten";
    let data = input(OP, inputs, 0)?;
    let shape = flatten_shape(ctx, inputs)?;
    Ok(vec![map_tensor!(data, a => a
        .to_shape(IxDyn(&shape))
        .map_err(|e| format!("{OP}: {e}"))?
        .into_owned())])
}

/// Flatten's output shape: [product of dims before axis, product of the rest].
pub(super) fn flatten_shape(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<usize>, String> {
    const OP: &str = "Flatten";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    let r = dims.len() as i64;
    let axis = ctx.node.attr_int("axis").unwrap_or(1);
    if axis < -r || axis > r {
        return Err(format!(
            "{OP}: axis {axis} is out of range for rank {r} (valid: [{}, {r}])",
            -r
        ));
    }
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        dims[..axis].iter().product::<usize>(),
        dims[axis..].iter().product::<usize>(),
    ])
}

/// Trilu (14): the upper (default) or lower triangle of the last two dims, diagonal offset `k`
/// (an optional int64 scalar input); everything else becomes zero (false for bool).
pub fn trilu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Trilu";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    if dims.len() < 2 {
        return Err(format!("{OP}: input must have rank >= 2, got {dims:?}"));
    }
    let k = match opt_input(inputs, 1) {
        None => 0,
        Some(t) => match t.to_i64_vec().as_deref() {
            Some(&[k]) => k,
            _ => {
                return Err(format!(
                    "{OP}: k must be a single int64 value, got {} of shape {:?}",
                    t.dtype(),
                    t.shape()
                ))
            }
        },
    };
    let upper = ctx.node.attr_int("upper").unwrap_or(1) != 0;
    let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    // Keep (i, j) when j - i >= k (upper) or j - i <= k (lower); i, j fit in i64.
    let keep = move |flat: usize| {
        let j = (flat % cols) as i64;
        let i = ((flat / cols) % rows) as i64;
        if upper {
            j - i >= k
        } else {
            j - i <= k
        }
    };
    fn mask<T: Clone + Default>(a: &ArrayD<T>, keep: impl Fn(usize) -> bool) -> ArrayD<T> {
        let mut out = a.as_standard_layout().into_owned();
        for (flat, v) in out.iter_mut().enumerate() {
            if !keep(flat) {
                *v = T::default();
            }
        }
        out
    }
    Ok(vec![map_tensor!(data, a => mask(a, keep))])
}

/// The one value of a scalar input (a single-element tensor is accepted too).
fn scalar_of<'a>(op: &str, what: &str, t: &'a Tensor) -> Result<&'a Tensor, String> {
    if t.len() != 1 {
        return Err(format!(
            "{op}: '{what}' must be a scalar, got shape {:?}",
            t.shape()
        ));
    }
    Ok(t)
}

/// Range (11): start, start + delta, ... while before `limit`; the length is
/// max(ceil((limit - start) / delta), 0). All three inputs are scalars of one type.
pub fn range(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Range";
    let s = scalar_of(OP, "start", input(OP, inputs, 0)?)?;
    let l = scalar_of(OP, "limit", input(OP, inputs, 1)?)?;
    let d = scalar_of(OP, "delta", input(OP, inputs, 2)?)?;
    if s.dtype() != l.dtype() || s.dtype() != d.dtype() {
        return Err(format!(
            "{OP}: start, limit and delta must share one type, got {}, {} and {}",
            s.dtype(),
            l.dtype(),
            d.dtype()
        ));
    }
    let zero_delta = || format!("{OP}: delta is 0");
    // The element count, size-checked before anything is allocated.
    let count = |n: u64| -> Result<usize, String> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        check_out(ctx, OP, &[n], bits(s.dtype()))?;
        Ok(n)
    };
    let float_count = |n: f64| -> Result<usize, String> {
        if n.is_nan() {
            return Err(format!(
                "{OP}: the element count is NaN (a NaN or infinite input)"
            ));
        }
        // `as` saturates: an infinite count fails the size check.
        count(n.max(0.0) as u64)
    };
    let first = |t: &Tensor| t.to_f64_vec()[0];
    let vec1 = |n: usize| IxDyn(&[n]);
    let out = match s.dtype() {
        DType::I32 | DType::I64 => {
            let get = |t: &Tensor| t.to_i64_vec().map_or(0, |v| v[0] as i128);
            let (s0, l0, d0) = (get(s), get(l), get(d));
            if d0 == 0 {
                return Err(zero_delta());
            }
            // Ceiling division in i128, which cannot overflow for 64-bit operands.
            let diff = l0 - s0;
            let q = diff / d0;
            let n = if diff % d0 != 0 && ((diff < 0) == (d0 < 0)) {
                q + 1
            } else {
                q
            };
            let n = count(n.clamp(0, u64::MAX as i128) as u64)?;
            let vals = (0..n).map(|i| s0 + i as i128 * d0);
            // Every value lies between start and limit, so it fits the element type.
            let err = |e: ndarray::ShapeError| format!("{OP}: {e}");
            if s.dtype() == DType::I32 {
                Tensor::I32(
                    ArrayD::from_shape_vec(vec1(n), vals.map(|v| v as i32).collect())
                        .map_err(err)?,
                )
            } else {
                Tensor::I64(
                    ArrayD::from_shape_vec(vec1(n), vals.map(|v| v as i64).collect())
                        .map_err(err)?,
                )
            }
        }
        DType::F32 => {
            let (s0, l0, d0) = (first(s) as f32, first(l) as f32, first(d) as f32);
            if d0 == 0.0 {
                return Err(zero_delta());
            }
            let n = float_count(((l0 - s0) as f64 / d0 as f64).ceil())?;
            Tensor::F32(ArrayD::from_shape_fn(vec1(n), |i| s0 + i[0] as f32 * d0))
        }
        DType::F64 => {
            let (s0, l0, d0) = (first(s), first(l), first(d));
            if d0 == 0.0 {
                return Err(zero_delta());
            }
            let n = float_count(((l0 - s0) / d0).ceil())?;
            Tensor::F64(ArrayD::from_shape_fn(vec1(n), |i| s0 + i[0] as f64 * d0))
        }
        t => return Err(format!("{OP}: element type {t} is not supported")),
    };
    Ok(vec![out])
}

/// ConstantOfShape (9, 20, 21): a tensor of the given shape filled with the one element of the
/// `value` attribute (default: float32 0). An empty shape gives a scalar.
pub fn constant_of_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ConstantOfShape";
    let shape = dims_arg(OP, "input", input(OP, inputs, 0)?)?;
    let value = match ctx.node.attr_tensor("value") {
        None => Tensor::scalar_f32(0.0),
        Some(tp) => {
            let dtype = DType(tp.data_type);
            if !matches!(
                dtype,
                DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::BOOL
            ) {
                return Err(format!(
                    "{OP}: value type {dtype} is not supported by the reference backend"
                ));
            }
            to_tensor(tp, ctx.limits).map_err(|e| format!("{OP}: value: {e}"))?
        }
    };
    if value.len() != 1 {
        return Err(format!(
            "{OP}: 'value' must hold exactly one element, got shape {:?}",
            value.shape()
        ));
    }
    check_out(ctx, OP, &shape, bits(value.dtype()))?;
    Ok(vec![map_tensor!(&value, a => {
        let v = a.iter().next().cloned().unwrap_or_default();
        ArrayD::from_elem(IxDyn(&shape), v)
    })])
}

#[cfg(test)]
#[path = "index_ops_tests.rs"]
mod tests;
