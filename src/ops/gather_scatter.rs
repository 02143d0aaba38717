//! ai.onnx element- and slice-wise indexing: GatherElements, GatherND, ScatterElements (and its
//! opset 9-10 name, Scatter) and ScatterND; plus the movement primitives the data-movement
//! families share (`take`/`take_tensor` over `Starts`, `Strided`, `norm_index`). Indices are
//! int32 or int64 (the spec's int64-only ops accept int32 too) and count from the end when
//! negative; an index out of range is an error naming the op, the index and the axis. Output
//! sizes are checked against the limits before anything is allocated.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | GatherElements | 11, 13 | `axis` (0) | data (rank r >= 1), indices (rank r) -> indices' shape: out[p] = data[p with p[axis] = indices[p]] |
//! | GatherND | 11 | none | data (rank r >= 1), indices (rank q >= 1, last dim k in 1..=r) -> indices[..q-1] ++ data[k..] |
//! | GatherND | 12, 13 | `batch_dims` (0) | as 11, the first batch_dims dims of data and indices matched: indices[..q-1] ++ data[b+k..] |
//! | ScatterElements | 11, 13 | `axis` (0) | data, indices (rank r), updates (indices' shape) -> data with out[p with p[axis] = indices[p]] = updates[p] |
//! | ScatterElements | 16 | `axis` (0), `reduction` ("none"; "add", "mul") | as 11, combining with the reduction |
//! | ScatterElements | 18 | `axis` (0), `reduction` ("none"; "add", "mul", "max", "min") | as 16 |
//! | Scatter | 9, 10 | `axis` (0) | ScatterElements 11 under its old name (deprecated in 11: refused from 11) |
//! | ScatterND | 11, 13 | none | data (rank r), indices (last dim k in 1..=r), updates (indices[..q-1] ++ data[k..]) -> data with slices replaced |
//! | ScatterND | 16, 18 | `reduction` (as ScatterElements at that version) | as 11, combining with the reduction |
//!
//! Version changes: 13 only adds bfloat16 (widened before the kernel runs); GatherND 12 adds
//! `batch_dims`; reductions come in 16 (add, mul) and 18 (max, min), read only from those
//! versions. Indices may be smaller than data off the axis (GatherElements, ScatterElements), as
//! onnxruntime allows. Duplicate indices with reduction "none" apply in index order (the spec
//! leaves the result undefined). On bool, add is `or` and mul is `and` (numpy's rule); max and
//! min propagate NaN from either side.

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, map_tensor, norm_axis, type_mismatch, Num};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

// ---------------------------------------------------------------------------------------------
// Shared movement primitives

/// Where `take` reads its runs from.
pub(super) enum Starts<'a> {
    /// Listed offsets.
    List(&'a [usize]),
    /// The offsets of a strided walk (shape, strides; see `Strided`); the last axis runs as a
    /// tight loop.
    Walk(&'a [usize], &'a [usize]),
    /// Offsets computed on the fly.
    Iter(&'a mut dyn Iterator<Item = usize>),
}

/// Copies `run` consecutive elements of `a` (row-major) from each offset `starts` gives, in
/// order, into a new array of `shape` (whose size the caller has checked).
pub(super) fn take<T: Clone>(
    op: &str,
    a: &ArrayD<T>,
    starts: Starts,
    run: usize,
    shape: &[usize],
) -> Result<ArrayD<T>, String> {
    let n: usize = shape.iter().product();
    let mut v = Vec::with_capacity(n);
    if n > 0 && run > 0 {
        let a = a.as_standard_layout();
        let src = a
            .as_slice()
            .ok_or_else(|| format!("{op}: input is not contiguous"))?;
        let past = |s: usize| format!("{op}: internal: offset {s} past the input");
        let mut copy = |s: usize| -> Result<(), String> {
            if run == 1 {
                v.push(src.get(s).ok_or_else(|| past(s))?.clone());
            } else {
                let part = s.checked_add(run).and_then(|e| src.get(s..e));
                v.extend_from_slice(part.ok_or_else(|| past(s))?);
            }
            Ok(())
        };
        match starts {
            Starts::List(l) => l.iter().try_for_each(|&s| copy(s))?,
            Starts::Iter(it) => it.take(n / run).try_for_each(copy)?,
            Starts::Walk(shape, strides) => {
                let r = shape.len().saturating_sub(1);
                let (len, step) = (shape.get(r).copied(), strides.get(r).copied());
                let (len, step) = (len.unwrap_or(1), step.unwrap_or(0));
                for base in Strided::new(&shape[..r], &strides[..r]) {
                    (0..len).try_for_each(|j| copy(base + j * step))?;
                }
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("{op}: {e}"))
}

/// `take` on a tensor of any element type (the one place the data-movement kernels dispatch
/// on it).
pub(super) fn take_tensor(
    op: &str,
    t: &Tensor,
    starts: Starts,
    run: usize,
    shape: &[usize],
) -> Result<Tensor, String> {
    Ok(map_tensor!(t, a => take(op, a, starts, run, shape)?))
}

/// Row-major strides of `dims` (in elements).
pub(super) fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Offsets visited by walking `shape` in row-major order where one step along axis `d` moves
/// `strides[d]` (a permuted, broadcast or tiled view of row-major data).
pub(super) struct Strided {
    shape: Vec<usize>,
    strides: Vec<usize>,
    idx: Vec<usize>,
    off: usize,
    left: usize,
}

impl Strided {
    pub(super) fn new(shape: &[usize], strides: &[usize]) -> Strided {
        Strided {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            idx: vec![0; shape.len()],
            off: 0,
            // Zero when any dim is; saturating otherwise (a caller walks what it has checked).
            left: if shape.contains(&0) {
                0
            } else {
                shape
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .unwrap_or(usize::MAX)
            },
        }
    }
}

impl Iterator for Strided {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let cur = self.off;
        for d in (0..self.shape.len()).rev() {
            self.idx[d] += 1;
            self.off += self.strides[d];
            if self.idx[d] < self.shape[d] {
                break;
            }
            self.off -= self.strides[d] * self.shape[d];
            self.idx[d] = 0;
        }
        Some(cur)
    }
}

/// `i` as a position on axis `axis` of `n` entries (negative counts from the end).
pub(super) fn norm_index(op: &str, i: i64, axis: usize, n: usize) -> Result<usize, String> {
    let j = if i < 0 {
        i.checked_add(n as i64)
    } else {
        Some(i)
    };
    j.and_then(|j| usize::try_from(j).ok())
        .filter(|&j| j < n)
        .ok_or_else(|| {
            format!(
                "{op}: index {i} is out of range for axis {axis} of size {n} (valid: [{}, {}])",
                -(n as i64),
                n as i64 - 1
            )
        })
}

/// An index input's values (int32 or int64).
pub(super) fn index_values(op: &str, what: &str, t: &Tensor) -> Result<Vec<i64>, String> {
    t.to_i64_vec()
        .ok_or_else(|| format!("{op}: {what} must be int32 or int64, got {}", t.dtype()))
}

// ---------------------------------------------------------------------------------------------
// Ops

#[derive(Debug)]
pub struct GatherElements {
    pub axis: i64,
}

impl GatherElements {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(GatherElements {
            axis: a.int("axis", 0)?,
        }))
    }
}

impl Op for GatherElements {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape: cx.input(1).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        gather_elements
    }
}

#[derive(Debug)]
pub struct GatherND {
    pub batch_dims: i64,
}

impl GatherND {
    pub fn parse(a: &Attrs) -> P {
        let batch_dims = if a.opset >= 12 {
            a.int("batch_dims", 0)?
        } else {
            0
        };
        if batch_dims < 0 {
            return Err(format!(
                "GatherND: batch_dims must be >= 0, got {batch_dims}"
            ));
        }
        Ok(Box::new(GatherND { batch_dims }))
    }
}

impl Op for GatherND {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (data, idx) = (cx.input(0), cx.input(1));
        let b = self.batch_dims as usize;
        let shape = match (&data.shape, &idx.shape) {
            (Some(d), Some(i)) => match i.last() {
                Some(Dim::Known(k)) if *k >= 1 && b + (*k as usize) <= d.len() => {
                    Some([&i[..i.len() - 1], &d[b + *k as usize..]].concat())
                }
                _ => None,
            },
            _ => None,
        };
        vec![TensorType {
            dtype: data.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        gather_nd
    }
    /// One dispatch (`wgsl::gather_nd`), any element type the GPU holds.
    fn lower(&self, c: &super::NodeCtx) -> Result<super::Lowered, String> {
        let (data, idx) = (c.input(0)?, &c.input(1)?.shape);
        let b = usize::try_from(self.batch_dims).unwrap_or(usize::MAX);
        nd_tuple_len("GatherND", &data.shape, idx, b)?;
        if c.ty(1)? != super::lowering::Ty::I32 {
            return Err("GatherND: indices must be int64 or int32".into());
        }
        super::lowering::run(super::wgsl::gather_nd(&data.shape, idx, b, c.ty(0)?))
    }
}

/// How ScatterElements and ScatterND combine an update with the value it lands on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    /// The `reduction` attribute as the node's opset has it (absent before 16).
    fn parse(op: &str, a: &Attrs) -> Result<Reduction, String> {
        if a.opset < 16 {
            return Ok(Reduction::None);
        }
        Ok(match a.string("reduction")?.as_deref() {
            None | Some("none") => Reduction::None,
            Some("add") => Reduction::Add,
            Some("mul") => Reduction::Mul,
            Some("max") if a.opset >= 18 => Reduction::Max,
            Some("min") if a.opset >= 18 => Reduction::Min,
            Some(r @ ("max" | "min")) => {
                return Err(format!(
                    "{op}: reduction '{r}' exists from opset 18; the model imports {}",
                    a.opset
                ))
            }
            Some(r) => {
                return Err(format!(
                    "{op}: unknown reduction '{r}' (none, add, mul, max, min)"
                ))
            }
        })
    }
}

#[derive(Debug)]
pub struct ScatterElements {
    pub axis: i64,
    pub reduction: Reduction,
}

impl ScatterElements {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ScatterElements {
            axis: a.int("axis", 0)?,
            reduction: Reduction::parse("ScatterElements", a)?,
        }))
    }
}

/// Scatter (9, 10): ScatterElements without reductions under its old name. Parses to a
/// `ScatterElements`.
#[derive(Debug)]
pub struct Scatter;

impl Scatter {
    pub fn parse(a: &Attrs) -> P {
        if a.opset >= 11 {
            return Err(format!(
                "Scatter is deprecated from opset 11 (the model imports {}); use ScatterElements",
                a.opset
            ));
        }
        Ok(Box::new(ScatterElements {
            axis: a.int("axis", 0)?,
            reduction: Reduction::None,
        }))
    }
}

impl Op for ScatterElements {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        scatter_elements
    }
}

#[derive(Debug)]
pub struct ScatterND {
    pub reduction: Reduction,
}

impl ScatterND {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(ScatterND {
            reduction: Reduction::parse("ScatterND", a)?,
        }))
    }
}

impl Op for ScatterND {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        scatter_nd
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// For GatherElements and ScatterElements: the data offset each index addresses, in the
/// indices' row-major order.
fn element_offsets(
    op: &str,
    dims: &[usize],
    idx_t: &Tensor,
    axis: i64,
) -> Result<Vec<usize>, String> {
    if dims.is_empty() {
        return Err(format!("{op}: data must have rank >= 1, got a scalar"));
    }
    let axis = norm_axis(op, axis, dims.len())?;
    let ishape = idx_t.shape();
    let fits =
        ishape.len() == dims.len() && (0..dims.len()).all(|d| d == axis || ishape[d] <= dims[d]);
    if !fits {
        return Err(format!(
            "{op}: indices of shape {ishape:?} do not fit data of shape {dims:?} (same rank, \
             no larger off axis {axis})"
        ));
    }
    let raw = index_values(op, "indices", idx_t)?;
    let strides = strides_of(dims);
    let mut walk = strides.clone();
    walk[axis] = 0;
    let (n, step) = (dims[axis], strides[axis]);
    // The last axis as a tight loop over the outer positions of the walk.
    let r = ishape.len() - 1;
    let mut out = Vec::with_capacity(raw.len());
    let mut idx = raw.iter();
    for base in Strided::new(&ishape[..r], &walk[..r]) {
        for j in 0..ishape[r] {
            let i = idx.next().copied().unwrap_or_default();
            let k = if i < 0 { i.wrapping_add(n as i64) } else { i };
            if !(0..n as i64).contains(&k) {
                return Err(norm_index(op, i, axis, n).err().unwrap_or_default());
            }
            out.push(base + j * walk[r] + k as usize * step);
        }
    }
    Ok(out)
}

/// GatherElements (11, 13): out[p] = data[p with p[axis] replaced by indices[p]].
pub fn gather_elements(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "GatherElements";
    let data = input(OP, inputs, 0)?;
    let idx_t = input(OP, inputs, 1)?;
    let axis = ctx.attrs::<GatherElements>()?.axis;
    let offsets = element_offsets(OP, data.shape(), idx_t, axis)?;
    let shape = idx_t.shape();
    check_out(ctx, OP, shape, bits(data.dtype()))?;
    Ok(vec![take_tensor(
        OP,
        data,
        Starts::List(&offsets),
        1,
        shape,
    )?])
}

/// GatherND's and ScatterND's shape checks: data `dims`, indices `ishape` and `b` batch dims;
/// returns the tuple length k (indices' last dim).
pub(super) fn nd_tuple_len(
    op: &str,
    dims: &[usize],
    ishape: &[usize],
    b: usize,
) -> Result<usize, String> {
    let (r, q) = (dims.len(), ishape.len());
    if r == 0 || q == 0 {
        return Err(format!(
            "{op}: data and indices must have rank >= 1, got shapes {dims:?} and {ishape:?}"
        ));
    }
    if b >= q.min(r) {
        return Err(format!(
            "{op}: batch_dims {b} must be below the ranks of data ({r}) and indices ({q})"
        ));
    }
    if ishape[..b] != dims[..b] {
        return Err(format!(
            "{op}: the {b} batch dims of indices {ishape:?} and data {dims:?} differ"
        ));
    }
    let k = ishape[q - 1];
    if k == 0 || b + k > r {
        return Err(format!(
            "{op}: the last dim of indices {ishape:?} must be in [1, {}] for data of shape {dims:?}",
            r - b
        ));
    }
    Ok(k)
}

/// For GatherND and ScatterND: the data offset of each index tuple (indices' last axis) and the
/// length of the slice it addresses; `b` leading dims are batch dims shared with the indices.
fn nd_offsets(
    op: &str,
    dims: &[usize],
    idx_t: &Tensor,
    b: usize,
) -> Result<(Vec<usize>, usize), String> {
    let ishape = idx_t.shape();
    let q = ishape.len();
    let k = nd_tuple_len(op, dims, ishape, b)?;
    let raw = index_values(op, "indices", idx_t)?;
    let strides = strides_of(dims);
    let run: usize = dims[b + k..].iter().product();
    let batch_stride = if b == 0 { 0 } else { strides[b - 1] };
    let per_batch: usize = ishape[b..q - 1].iter().product();
    let mut out = Vec::with_capacity(raw.len() / k);
    for (t, tuple) in raw.chunks_exact(k).enumerate() {
        let mut off = (t / per_batch.max(1)) * batch_stride;
        for (j, &i) in tuple.iter().enumerate() {
            off += norm_index(op, i, b + j, dims[b + j])? * strides[b + j];
        }
        out.push(off);
    }
    Ok((out, run))
}

/// GatherND (11, 12, 13): the slices of data addressed by the tuples along indices' last axis.
pub fn gather_nd(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "GatherND";
    let data = input(OP, inputs, 0)?;
    let idx_t = input(OP, inputs, 1)?;
    let b = usize::try_from(ctx.attrs::<GatherND>()?.batch_dims).unwrap_or(usize::MAX);
    let (offsets, run) = nd_offsets(OP, data.shape(), idx_t, b)?;
    let ishape = idx_t.shape();
    let k = ishape[ishape.len() - 1];
    let shape = [&ishape[..ishape.len() - 1], &data.shape()[b + k..]].concat();
    check_out(ctx, OP, &shape, bits(data.dtype()))?;
    Ok(vec![take_tensor(
        OP,
        data,
        Starts::List(&offsets),
        run,
        &shape,
    )?])
}

/// The element operations a scatter reduction needs (bool: add is `or`, mul is `and`).
pub(super) trait Elem: Copy + PartialOrd + 'static {
    fn plus(self, o: Self) -> Self;
    fn times(self, o: Self) -> Self;
}

impl<T: Num> Elem for T {
    fn plus(self, o: Self) -> Self {
        self.wadd(o)
    }
    fn times(self, o: Self) -> Self {
        self.wmul(o)
    }
}

impl Elem for bool {
    fn plus(self, o: Self) -> Self {
        self | o
    }
    fn times(self, o: Self) -> Self {
        self & o
    }
}

/// The combining function of `r` (`old`, `update`) -> new; max and min keep a NaN on either side.
#[allow(clippy::eq_op)]
fn reducer<T: Elem>(r: Reduction) -> fn(T, T) -> T {
    match r {
        Reduction::None => |_, u| u,
        Reduction::Add => T::plus,
        Reduction::Mul => T::times,
        Reduction::Max => |a, u| if u > a || u != u { u } else { a },
        Reduction::Min => |a, u| if u < a || u != u { u } else { a },
    }
}

/// A copy of `data` with update chunk `j` (`run` elements) combined into it at `starts[j]`.
fn scatter<T: Elem>(
    op: &str,
    data: &ArrayD<T>,
    upd: &ArrayD<T>,
    starts: &[usize],
    run: usize,
    r: Reduction,
) -> Result<ArrayD<T>, String> {
    let f = reducer::<T>(r);
    let mut out = data.as_standard_layout().into_owned();
    let u = upd.as_standard_layout();
    let internal = || format!("{op}: internal: a scatter position is past the data");
    let (o, u) = (
        out.as_slice_mut().ok_or_else(internal)?,
        u.as_slice().ok_or_else(internal)?,
    );
    for (j, &s) in starts.iter().enumerate() {
        let dst = o.get_mut(s..s + run).ok_or_else(internal)?;
        let src = u.get(j * run..(j + 1) * run).ok_or_else(internal)?;
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = f(*d, x);
        }
    }
    Ok(out)
}

/// `scatter` for strings: updates replace (reduction "none" only).
fn scatter_strings(
    op: &str,
    data: &ArrayD<String>,
    upd: &ArrayD<String>,
    starts: &[usize],
    run: usize,
    r: Reduction,
) -> Result<ArrayD<String>, String> {
    if r != Reduction::None {
        return Err(format!("{op}: reduction {r:?} is not defined for strings"));
    }
    let mut out = data.as_standard_layout().into_owned();
    let internal = || format!("{op}: internal: a scatter position is past the data");
    let o = out.as_slice_mut().ok_or_else(internal)?;
    let u: Vec<&String> = upd.iter().collect();
    for (j, &s) in starts.iter().enumerate() {
        let dst = o.get_mut(s..s + run).ok_or_else(internal)?;
        let src = u.get(j * run..(j + 1) * run).ok_or_else(internal)?;
        for (d, x) in dst.iter_mut().zip(src) {
            d.clone_from(x);
        }
    }
    Ok(out)
}

/// `scatter` on two tensors of one element type.
fn scatter_tensor(
    op: &str,
    data: &Tensor,
    upd: &Tensor,
    starts: &[usize],
    run: usize,
    r: Reduction,
) -> Result<Tensor, String> {
    macro_rules! same {
        ($($v:ident),*) => {
            match (data, upd) {
                $((Tensor::$v(d), Tensor::$v(u)) => Tensor::$v(scatter(op, d, u, starts, run, r)?),)*
                (Tensor::Str(d), Tensor::Str(u)) => Tensor::Str(scatter_strings(op, d, u, starts, run, r)?),
                (d, u) => return Err(type_mismatch(op, d.dtype(), u.dtype())),
            }
        };
    }
    Ok(same!(F32, F64, I32, I64, Bool))
}

/// ScatterElements (11-18) and Scatter (9, 10): a copy of data with updates[p] combined into
/// position p with p[axis] replaced by indices[p].
pub fn scatter_elements(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ScatterElements";
    let data = input(OP, inputs, 0)?;
    let idx_t = input(OP, inputs, 1)?;
    let upd = input(OP, inputs, 2)?;
    let at = ctx.attrs::<ScatterElements>()?;
    if upd.shape() != idx_t.shape() {
        return Err(format!(
            "{OP}: updates of shape {:?} differ from indices of shape {:?}",
            upd.shape(),
            idx_t.shape()
        ));
    }
    let offsets = element_offsets(OP, data.shape(), idx_t, at.axis)?;
    check_out(ctx, OP, data.shape(), bits(data.dtype()))?;
    Ok(vec![scatter_tensor(
        OP,
        data,
        upd,
        &offsets,
        1,
        at.reduction,
    )?])
}

/// ScatterND (11-18): a copy of data with each updates slice combined into the slice addressed
/// by the matching tuple along indices' last axis.
pub fn scatter_nd(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ScatterND";
    let data = input(OP, inputs, 0)?;
    let idx_t = input(OP, inputs, 1)?;
    let upd = input(OP, inputs, 2)?;
    let r = ctx.attrs::<ScatterND>()?.reduction;
    let (offsets, run) = nd_offsets(OP, data.shape(), idx_t, 0)?;
    let ishape = idx_t.shape();
    let k = ishape[ishape.len() - 1];
    let want = [&ishape[..ishape.len() - 1], &data.shape()[k..]].concat();
    if upd.shape() != want.as_slice() {
        return Err(format!(
            "{OP}: updates must have shape {want:?} (indices {ishape:?}, data {:?}), got {:?}",
            data.shape(),
            upd.shape()
        ));
    }
    check_out(ctx, OP, data.shape(), bits(data.dtype()))?;
    Ok(vec![scatter_tensor(OP, data, upd, &offsets, run, r)?])
}

#[cfg(test)]
#[path = "gather_scatter_tests.rs"]
mod tests;
