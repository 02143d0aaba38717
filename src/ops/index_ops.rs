//! ai.onnx indexing and generators: Gather, Flatten, Expand, Trilu, Range and ConstantOfShape
//! (Slice and Split are in slice.rs). Every output size is checked against the limits before it
//! is allocated, and bad indices or sizes are errors, never panics.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Gather | 1, 11, 13 | `axis` (0) | data, indices (int32/int64) -> data[..axis] ++ indices ++ data[axis+1..] |
//! | Flatten | 1, 9, 11, 13, 21 | `axis` (1), in [-r, r] | input -> 2-D [prod(dims[..axis]), prod(dims[axis..])] |
//! | Expand | 8, 13 | none | input, shape (int64) -> input broadcast bidirectionally with shape |
//! | Trilu | 14 | `upper` (1) | input (rank >= 2), optional k (int64 scalar, 0) -> same type and shape |
//! | Range | 11 | none | start, limit, delta (scalars of one type) -> 1-D, max(ceil((limit - start) / delta), 0) long |
//! | ConstantOfShape | 9, 20, 21 | `value` (a one-element tensor; float32 0) | shape (int64) -> shape filled with value |
//!
//! Version changes: Gather 11 and Flatten 11 allow negative indices/axis (the kernels accept
//! them in every version); 13 and later (Gather, Flatten, Expand) and ConstantOfShape 20/21 only
//! add element types this backend does not hold. No kernel branches on the opset.

use ndarray::{ArrayD, IxDyn};

use super::broadcast::broadcast_shape;
use super::common::{bits, check_out, input, int_list, map_tensor, norm_axis, opt_input};
use super::infer::{
    broadcast_dims, const_scalar_f64, dim_product, norm_axis as infer_axis, MAX_SHAPE_DATA_RANK,
};
use super::lowering::{norm_axis as lower_axis, run, NodeCtx, R};
use super::wgsl;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op, RelabelShape};
use crate::ir::{Dim, TensorType};
use crate::limits::Limits;
use crate::onnx::tensor::to_tensor;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

#[derive(Debug)]
pub struct Gather {
    pub axis: i64,
}

impl Gather {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Gather {
            axis: a.int("axis", 0)?,
        }))
    }
}

impl Op for Gather {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (data, idx) = (cx.input(0), cx.input(1));
        let shape = match (&data.shape, &idx.shape) {
            (Some(d), Some(i)) => {
                infer_axis(self.axis, d.len()).map(|ax| [&d[..ax], &i[..], &d[ax + 1..]].concat())
            }
            _ => None,
        };
        vec![TensorType {
            dtype: data.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        gather
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let data = &c.input(0)?.shape;
        let axis = lower_axis(self.axis, data.len())?;
        run(wgsl::gather(data, &c.input(1)?.shape, axis, c.ty(0)?))
    }
}

#[derive(Debug)]
pub struct Flatten {
    pub axis: i64,
}

impl Flatten {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Flatten {
            axis: a.int("axis", 1)?,
        }))
    }
}

impl Op for Flatten {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().and_then(|s| {
            let r = s.len() as i64;
            let axis = self.axis;
            let axis = (-r..=r)
                .contains(&axis)
                .then(|| if axis < 0 { axis + r } else { axis })? as usize;
            Some(vec![dim_product(&s[..axis]), dim_product(&s[axis..])])
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        flatten
    }
    fn lower(&self, _: &NodeCtx) -> R<Lowered> {
        Ok(Lowered::Alias)
    }
    fn relabel(&self) -> Option<RelabelShape> {
        Some(flatten_shape)
    }
}

super::plain_ops!(Expand, Range);

/// The declared rank of a 1-D shape-valued input whose elements are not known, when plausible.
fn shape_data_rank(cx: &InferCx, i: usize) -> Option<usize> {
    match cx.input(i).static_shape().as_deref() {
        Some(&[k]) if (0..=MAX_SHAPE_DATA_RANK).contains(&k) => Some(k as usize),
        _ => None,
    }
}

fn has_negative(dims: &[Dim]) -> bool {
    dims.iter().any(|d| matches!(d, Dim::Known(k) if *k < 0))
}

impl Op for Expand {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match (&x.shape, cx.elements(1)) {
            (Some(s), Some(t)) if !has_negative(&t) => broadcast_dims(s, &t),
            // Only the rank is known: the larger of the two.
            (Some(s), None) => shape_data_rank(cx, 1).map(|k| vec![Dim::Unknown; s.len().max(k)]),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        expand
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        c.ew(1, "v0")
    }
}

#[derive(Debug)]
pub struct Trilu {
    pub upper: bool,
}

impl Trilu {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Trilu {
            upper: a.flag("upper", true)?,
        }))
    }
}

impl Op for Trilu {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        trilu
    }
}

/// Range's length, max(ceil((limit - start) / delta), 0), when it is a sane number.
fn range_len(start: f64, limit: f64, delta: f64) -> Option<i64> {
    let n = ((limit - start) / delta).ceil();
    (delta != 0.0 && n.is_finite() && n < i64::MAX as f64).then(|| n.max(0.0) as i64)
}

impl Op for Range {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        // Range(0, n, 1) has n elements, n symbolic or not.
        let counted = match (cx.elements(0), cx.elements(1), cx.elements(2)) {
            (Some(s), Some(l), Some(d)) if s == [Dim::Known(0)] && d == [Dim::Known(1)] => {
                l.first().filter(|_| l.len() == 1).cloned()
            }
            _ => None,
        };
        let len = (0..3)
            .map(|i| const_scalar_f64(cx.graph, cx.node.input(i)))
            .collect::<Option<Vec<f64>>>()
            .and_then(|v| range_len(v[0], v[1], v[2]));
        let n = match (len, counted) {
            (Some(k), _) => Dim::Known(k),
            (None, Some(d @ Dim::Sym(_))) => d,
            _ => Dim::Unknown,
        };
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape: Some(vec![n]),
        }]
    }
    fn kernel(&self) -> Kernel {
        range
    }
}

#[derive(Debug)]
pub struct ConstantOfShape {
    /// The `value` attribute's one element, decoded once; `None`: absent (the spec's default, a
    /// float32 0, see `fill`) or unusable (then `invalid` says why).
    pub value: Option<Tensor>,
    /// The output's element type as the attribute states it, even where the value cannot be
    /// held (float16).
    pub dtype: DType,
    /// Why the reference backend cannot use `value` (the kernel's error: the model still loads).
    pub invalid: Option<String>,
}

impl ConstantOfShape {
    /// The fill without a `value` attribute.
    fn default_fill() -> Tensor {
        Tensor::scalar_f32(0.0)
    }

    pub fn parse(a: &Attrs) -> P {
        const OP: &str = "ConstantOfShape";
        let Some(tp) = a.tensor("value")? else {
            return Ok(Box::new(ConstantOfShape {
                value: None,
                dtype: Self::default_fill().dtype(),
                invalid: None,
            }));
        };
        let dtype = DType(tp.data_type);
        let decoded = if !matches!(
            dtype,
            DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::BOOL
        ) {
            Err(format!(
                "{OP}: value type {dtype} is not supported by the reference backend"
            ))
        } else {
            match to_tensor(tp, &Limits::default()) {
                Err(e) => Err(format!("{OP}: value: {e}")),
                Ok(t) if t.len() != 1 => Err(format!(
                    "{OP}: 'value' must hold exactly one element, got shape {:?}",
                    t.shape()
                )),
                Ok(t) => Ok(t),
            }
        };
        let (value, invalid) = match decoded {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e)),
        };
        Ok(Box::new(ConstantOfShape {
            value,
            dtype,
            invalid,
        }))
    }

    /// The element every output position holds.
    fn fill(&self) -> Result<Tensor, String> {
        match (&self.invalid, &self.value) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(v)) => Ok(v.clone()),
            (None, None) => Ok(Self::default_fill()),
        }
    }
}

impl Op for ConstantOfShape {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = match cx.elements(0) {
            Some(d) if !has_negative(&d) => Some(d),
            Some(_) => None,
            None => shape_data_rank(cx, 0).map(|k| vec![Dim::Unknown; k]),
        };
        vec![TensorType {
            dtype: Some(self.dtype),
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        constant_of_shape
    }
}

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
    let axis = norm_axis(OP, ctx.attrs::<Gather>()?.axis, dims.len())?;
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
    if let Tensor::F32(a) = data {
        if let Some(y) = broadcast_runs(a, &out_shape) {
            return Ok(vec![Tensor::F32(y)]);
        }
    }
    Ok(vec![map_tensor!(data, a => a
        .broadcast(IxDyn(&out_shape))
        .ok_or_else(|| format!("{OP}: cannot broadcast {:?} to {out_shape:?}", a.shape()))?
        .as_standard_layout()
        .into_owned())])
}

/// `a` (standard layout) broadcast to `out` by copying runs: the trailing dims that `a` has in
/// full are one contiguous run of its memory, copied once per index of the leading dims (a
/// broadcast dim rereads the same run). Grouped-query attention's repeat of a KV cache is runs of
/// seq·head elements; ndarray's element-by-element copy of a broadcast view was ~5x slower there.
/// `None` for runs under 16 elements (broadcasting the last axes), left to that copy. float32
/// only: one more instance per element type would grow the wasm build for ops exports rarely
/// expand in bulk.
fn broadcast_runs(a: &ArrayD<f32>, out: &[usize]) -> Option<ArrayD<f32>> {
    let src = a.as_slice()?;
    let r = out.len();
    let pad = r.checked_sub(a.ndim())?;
    let dims: Vec<usize> = (0..r)
        .map(|i| if i < pad { 1 } else { a.shape()[i - pad] })
        .collect();
    let (mut k, mut run) = (r, 1usize);
    while k > 0 && dims[k - 1] == out[k - 1] {
        k -= 1;
        run *= out[k];
    }
    if run < 16 {
        return None;
    }
    // Each leading axis's step through `src`, 0 where it is broadcast.
    let mut steps = vec![0; k];
    let mut step = run;
    for i in (0..k).rev() {
        steps[i] = if dims[i] == 1 { 0 } else { step };
        step *= dims[i];
    }
    let outer: usize = out[..k].iter().product();
    let mut v = Vec::with_capacity(outer * run);
    let mut idx = vec![0usize; k];
    for _ in 0..outer {
        let at: usize = idx.iter().zip(&steps).map(|(i, s)| i * s).sum();
        v.extend_from_slice(&src[at..at + run]);
        for i in (0..k).rev() {
            idx[i] += 1;
            if idx[i] < out[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    ArrayD::from_shape_vec(IxDyn(out), v).ok()
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
fn flatten_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Flatten";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    let r = dims.len() as i64;
    let axis = ctx.attrs::<Flatten>()?.axis;
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
    let upper = ctx.attrs::<Trilu>()?.upper;
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
/// `value` attribute (decoded at parse). An empty shape gives a scalar.
pub fn constant_of_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ConstantOfShape";
    let shape = dims_arg(OP, "input", input(OP, inputs, 0)?)?;
    let value = ctx.attrs::<ConstantOfShape>()?.fill()?;
    check_out(ctx, OP, &shape, bits(value.dtype()))?;
    Ok(vec![map_tensor!(&value, a => {
        let v = a.iter().next().cloned().unwrap_or_default();
        ArrayD::from_elem(IxDyn(&shape), v)
    })])
}

#[cfg(test)]
#[path = "index_ops_tests.rs"]
mod tests;
