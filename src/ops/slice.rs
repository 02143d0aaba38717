//! ai.onnx Slice and Split: parts of a tensor along axes. Output sizes are checked against the
//! limits before anything is allocated; bad arguments are errors, never panics.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Slice | 1 | `starts`, `ends` (required), `axes` (0..len(starts)) | data -> sliced |
//! | Slice | 10, 11, 13 | none | data, starts, ends, optional axes (leading axes), optional steps (1s) -> sliced |
//! | Split | 1, 2, 11 | `axis` (0), `split` (equal parts, one per output) | input -> outputs |
//! | Split | 13 | `axis` (0) | input, optional split (equal parts) -> outputs |
//! | Split | 18 | `axis` (0), `num_outputs` | input, optional split -> outputs |
//!
//! Slice: from 10 starts/ends/axes/steps are inputs (int32/int64) and steps may be negative;
//! 11 allows negative axes (accepted in every version). Starts and ends count from the end when
//! negative and are then clamped to the axis. Split: the sizes are an attribute before 13 and an
//! input from 13; from 18, without sizes, `num_outputs` equal parts (rounded up, the last one
//! smaller). Split 1's optional sizes input is not read.

use ndarray::{ArrayD, Axis, IxDyn, Slice as Cut};

use super::common::{
    bits, check_out, input, int_list, map_tensor, norm_axes, norm_axis, opt_input,
};
use super::infer::norm_axis as infer_axis;
use super::lowering::{norm_axis as lower_axis, run, static_ints, NodeCtx, R};
use super::shape_value::int_elements;
use super::wgsl::{self, numel, strides, Access, Ty};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

/// Where a Slice's starts, ends, axes and steps come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SliceArgs {
    /// Inputs 1 to 4 (from opset 10).
    Inputs,
    /// Attributes (before 10; no steps). Missing `starts`/`ends` are the kernel's error.
    Attributes {
        starts: Option<Vec<i64>>,
        ends: Option<Vec<i64>>,
        axes: Option<Vec<i64>>,
    },
}

#[derive(Debug)]
pub struct Slice {
    pub args: SliceArgs,
}

impl Slice {
    pub fn parse(a: &Attrs) -> P {
        let args = if a.opset >= 10 {
            SliceArgs::Inputs
        } else {
            SliceArgs::Attributes {
                starts: a.ints("starts")?,
                ends: a.ints("ends")?,
                axes: a.ints("axes")?,
            }
        };
        Ok(Box::new(Slice { args }))
    }
}

impl Op for Slice {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().and_then(|s| self.shape(cx, s));
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        slice
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        lower_slice(c)
    }
}

type SliceLists = (
    Option<Vec<i64>>,
    Option<Vec<i64>>,
    Option<Option<Vec<i64>>>,
    Option<Vec<i64>>,
);

impl Slice {
    /// Starts, ends, axes and steps as far as they are statically known. Axes: `None` when not
    /// known, `Some(None)` when absent.
    fn static_lists(&self, cx: &InferCx) -> SliceLists {
        match &self.args {
            SliceArgs::Inputs => {
                // Absent: `Some(None)`; given but not known: `None`.
                let opt = |i: usize| {
                    if cx.has_input(i) {
                        cx.ints(i).map(Some)
                    } else {
                        Some(None)
                    }
                };
                // Steps present but not constant: no sliced length is known.
                let steps = opt(4).unwrap_or_default();
                let starts = if cx.has_input(4) && steps.is_none() {
                    None
                } else {
                    cx.ints(1)
                };
                (starts, cx.ints(2), opt(3), steps)
            }
            SliceArgs::Attributes { starts, ends, axes } => {
                (starts.clone(), ends.clone(), Some(axes.clone()), None)
            }
        }
    }

    /// The output dims: unsliced axes pass through, sliced ones are computed from constant
    /// starts/ends/steps where the dim is known (or the slice is plainly the whole axis).
    fn shape(&self, cx: &InferCx, s: &[Dim]) -> Option<Vec<Dim>> {
        let rank = s.len();
        let (starts, ends, axes, steps) = self.static_lists(cx);
        // Without constant axes any axis may change: only the rank is known.
        let Some(axes) = axes else {
            return Some(vec![Dim::Unknown; rank]);
        };
        let (Some(starts), Some(ends)) = (&starts, &ends) else {
            let Some(axes) = axes else {
                return Some(vec![Dim::Unknown; rank]);
            };
            // Ends that are symbolic dims' values (`Shape(x)[1]`), from 0 in steps of 1, over
            // axes of known size d: min(end, d) each.
            let ends = match (&self.args, &starts) {
                (SliceArgs::Inputs, Some(st)) if st.len() == axes.len() => cx
                    .node
                    .input(2)
                    .and_then(|e| int_elements(cx.graph, e))
                    .filter(|e| e.len() == axes.len()),
                _ => None,
            };
            let steps_one = steps.as_ref().is_none_or(|v| v.iter().all(|&x| x == 1));
            let mut out = s.to_vec();
            for (i, a) in axes.iter().enumerate() {
                let ax = infer_axis(*a, rank)?;
                out[ax] = match (&ends, &s[ax]) {
                    (Some(e), &Dim::Known(d))
                        if steps_one && d >= 1 && starts.as_ref().is_some_and(|st| st[i] == 0) =>
                    {
                        match &e[i] {
                            Dim::Sym(name) if !e[i].is_undecided() => Dim::min_of(name, d),
                            _ => Dim::Unknown,
                        }
                    }
                    _ => Dim::Unknown,
                };
            }
            return Some(out);
        };
        let k = starts.len();
        let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; k]);
        if ends.len() != k || axes.len() != k || steps.len() != k {
            return None;
        }
        let mut out = s.to_vec();
        for i in 0..k {
            let ax = infer_axis(axes[i], rank)?;
            let (st, en, step) = (starts[i], ends[i], steps[i]);
            if step == 0 {
                return None;
            }
            out[ax] = match &s[ax] {
                Dim::Known(d) => Dim::Known(slice_range(st, en, step, *d).1),
                // [0, INT64_MAX) with step 1 is the whole axis, whatever its size.
                d if st == 0 && step == 1 && en >= i32::MAX as i64 => d.clone(),
                _ => Dim::Unknown,
            };
        }
        Some(out)
    }
}

/// One axis of a Slice, clamped per the spec: the first index taken and how many are taken
/// (`step` apart), for an axis of `d` elements. The kernel and inference both count with it.
fn slice_range(start: i64, end: i64, step: i64, d: i64) -> (i64, i64) {
    if d <= 0 {
        return (0, 0);
    }
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    if step > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        if e <= s {
            (0, 0)
        } else {
            (s, (e - s - 1) / step + 1)
        }
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        if s <= e {
            (0, 0)
        } else {
            (s, ((s - e - 1) as u64 / step.unsigned_abs()) as i64 + 1)
        }
    }
}

/// Where a Split's part sizes come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SplitSizes {
    /// The `split` attribute (before 13); `None`: absent.
    Attribute(Option<Vec<i64>>),
    /// The optional input 1 (from 13).
    Input,
}

#[derive(Debug)]
pub struct Split {
    pub axis: i64,
    pub sizes: SplitSizes,
    /// From 18: the number of equal parts when no sizes are given.
    pub num_outputs: Option<i64>,
    /// From 18: equal parts round up, leaving a smaller last part.
    pub round_up: bool,
}

impl Split {
    pub fn parse(a: &Attrs) -> P {
        let v18 = a.opset >= 18;
        Ok(Box::new(Split {
            axis: a.int("axis", 0)?,
            sizes: if a.opset >= 13 {
                SplitSizes::Input
            } else {
                SplitSizes::Attribute(a.ints("split")?)
            },
            num_outputs: if v18 { a.opt_int("num_outputs")? } else { None },
            round_up: v18,
        }))
    }
}

impl Op for Split {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.shapes(cx)
    }
    fn kernel(&self) -> Kernel {
        split
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        lower_split(c, self.axis)
    }
}

impl Split {
    /// The output types: the split axis takes the part sizes where they are known.
    fn shapes(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let n = cx.node.outputs.len();
        let axis = || infer_axis(self.axis, x.shape.as_ref()?.len());
        let parts = |sizes: Option<Vec<Dim>>| -> Vec<TensorType> {
            let shape_of = |i: usize| {
                let mut out = x.shape.clone()?;
                out[axis()?] = sizes
                    .as_ref()
                    .and_then(|v| v.get(i).cloned())
                    .unwrap_or(Dim::Unknown);
                Some(out)
            };
            (0..n)
                .map(|i| TensorType {
                    dtype: x.dtype,
                    shape: shape_of(i),
                })
                .collect()
        };
        let given = match &self.sizes {
            SplitSizes::Input => cx.ints(1),
            SplitSizes::Attribute(a) => a.clone(),
        };
        if let Some(v) = given {
            return parts((v.len() == n).then(|| v.into_iter().map(Dim::Known).collect()));
        }
        if self.sizes == SplitSizes::Input && cx.has_input(1) {
            return parts(None);
        }
        let dim = match x.shape.as_ref().zip(axis()).map(|(s, ax)| &s[ax]) {
            Some(Dim::Known(d)) => Some(*d),
            _ => None,
        };
        let k = self.num_outputs.unwrap_or(n as i64);
        let sizes = dim
            .filter(|&d| d >= 0 && k >= 1 && k as usize == n)
            .and_then(|d| {
                let round_up = self.round_up && d % k != 0;
                let chunk = d / k + i64::from(round_up);
                let last = d - chunk.checked_mul(k - 1)?;
                let even = self.round_up || d % k == 0;
                (even && last >= 0).then(|| {
                    let mut v = vec![Dim::Known(chunk); n - 1];
                    v.push(Dim::Known(last));
                    v
                })
            });
        parts(sizes)
    }
}

/// One axis of a Slice in the form ndarray takes, plus the resulting length.
fn slice_axis(start: i64, end: i64, step: i64, dim: usize) -> (Cut, usize) {
    let d = dim as i64;
    let (first, len) = slice_range(start, end, step, d);
    if len == 0 {
        return (Cut::new(0, Some(0), 1), 0);
    }
    // A step as long as the axis takes one element; clamping keeps it within isize for ndarray.
    let short_step = step.clamp(-d, d) as isize;
    // The last index taken; `len` was counted so that it stays within the axis.
    let last = first + (len - 1) * step;
    let cut = if step > 0 {
        Cut::new(first as isize, Some(last as isize + 1), short_step)
    } else {
        // ndarray walks [last, first] backwards by |step|.
        Cut::new(last as isize, Some(first as isize + 1), short_step)
    };
    (cut, len as usize)
}

/// Slice (1, 10, 11, 13): starts/ends/axes/steps are inputs from 10, attributes before. Negative
/// starts/ends count from the end and are then clamped; negative steps walk backwards.
pub fn slice(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Slice";
    let data = input(OP, inputs, 0)?;
    let rank = data.shape().len();
    let (starts, ends, axes, steps) = match &ctx.attrs::<Slice>()?.args {
        SliceArgs::Inputs => {
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
        }
        SliceArgs::Attributes { starts, ends, axes } => {
            let required = |v: &Option<Vec<i64>>, n: &str| {
                v.clone()
                    .ok_or_else(|| format!("{OP}: attribute '{n}' is required"))
            };
            (
                required(starts, "starts")?,
                required(ends, "ends")?,
                axes.clone(),
                None,
            )
        }
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
    let axes = norm_axes(OP, &axes, rank)?;
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
    let a = ctx.attrs::<Split>()?;
    let axis = norm_axis(OP, a.axis, dims.len())?;
    let dim = dims[axis];
    let n_out = ctx.node.outputs.len();
    let given = match &a.sizes {
        SplitSizes::Input => opt_input(inputs, 1)
            .map(|t| int_list(OP, "split", t))
            .transpose()?,
        SplitSizes::Attribute(s) => s.clone(),
    };
    let num_outputs = a.num_outputs;
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
        out.push(map_tensor!(data, a => axis_part(a, axis, pos, s)));
        pos += s;
    }
    Ok(out)
}

/// Elements `pos..pos + len` of `axis`, row-major: for a row-major input, one block copy per
/// index before `axis` (a fused QKV's three parts); otherwise ndarray's strided walk.
fn axis_part<T: Clone>(a: &ArrayD<T>, axis: usize, pos: usize, len: usize) -> ArrayD<T> {
    let dims = a.shape();
    let mut shape = dims.to_vec();
    shape[axis] = len;
    if let Some(data) = a.as_slice() {
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis + 1..].iter().product();
        let mut v = Vec::with_capacity(outer * len * inner);
        for o in 0..outer {
            v.extend_from_slice(&data[(o * dims[axis] + pos) * inner..][..len * inner]);
        }
        if let Ok(part) = ArrayD::from_shape_vec(IxDyn(&shape), v) {
            return part;
        }
    }
    let cut = Cut::new(pos as isize, Some((pos + len) as isize), 1);
    a.slice_axis(Axis(axis), cut)
        .as_standard_layout()
        .into_owned()
}

/// Slice on webgpu: one strided read (positive steps), with starts/axes/steps fixed.
fn lower_slice(c: &NodeCtx) -> R<Lowered> {
    let inp = c.input(0)?;
    let rank = inp.shape.len();
    let starts = static_ints(c, 1, "starts")?.ok_or("Slice without starts")?;
    let axes: Vec<usize> = match static_ints(c, 3, "axes")? {
        Some(a) => a.iter().map(|&a| lower_axis(a, rank)).collect::<R<_>>()?,
        None => (0..starts.len()).collect(),
    };
    let steps = static_ints(c, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    let st = strides(&inp.shape);
    let mut base = 0usize;
    let mut access: Vec<usize> = st.clone();
    for (k, &ax) in axes.iter().enumerate() {
        let d = inp.shape[ax] as i64;
        let step = *steps.get(k).unwrap_or(&1);
        if step == 0 {
            return Err("Slice step 0".into());
        }
        let mut s = starts[k];
        if s < 0 {
            s += d;
        }
        // Clamp per the spec: [0, d] for positive steps, [0, d-1] for negative ones.
        let s = if step > 0 {
            s.clamp(0, d)
        } else {
            s.clamp(0, (d - 1).max(0))
        };
        if step < 0 {
            return Err("Slice with a negative step has no webgpu kernel yet".into());
        }
        base += s as usize * st[ax];
        access[ax] = st[ax] * step as usize;
    }
    run(wgsl::elementwise(
        &c.out(0)?.shape,
        c.out_ty(0)?,
        &[Access {
            ty: c.ty(0)?,
            base,
            strides: access,
        }],
        "v0",
    ))
}

/// Split on webgpu: one copy per wanted output.
fn lower_split(c: &NodeCtx, axis: i64) -> R<Lowered> {
    let inp = c.input(0)?;
    let axis = lower_axis(axis, inp.shape.len())?;
    let st = strides(&inp.shape);
    let mut dispatches = Vec::new();
    let mut start = 0usize;
    for o in 0..c.outs.len() {
        let Some(info) = &c.outs[o] else {
            continue;
        };
        let mut d = wgsl::elementwise(
            &info.shape,
            Ty::of(info.dtype)?,
            &[Access {
                ty: c.ty(0)?,
                base: start * st[axis],
                strides: st.clone(),
            }],
            "v0",
        );
        d.writes = vec![wgsl::Bind::Out(o)];
        start += info.shape[axis];
        if !d.groups.contains(&0) && numel(&info.shape) > 0 {
            dispatches.push(d);
        }
    }
    Ok(Lowered::Run {
        dispatches,
        scratch: vec![],
    })
}

#[cfg(test)]
#[path = "slice_tests.rs"]
mod tests;
