//! ai.onnx data movement: Identity, Reshape, Transpose, Shape, Unsqueeze and Squeeze
//! (Concat: concat.rs; Cast and Constant: cast.rs).
//!
//! | op | versions | attributes (default) | notes |
//! |---|---|---|---|
//! | Identity | 1- | none | |
//! | Reshape | 5- | `allowzero` (0, from 14) | shape is input 1; 0 copies the input dim unless allowzero |
//! | Transpose | 1- | `perm` (reversed axes) | |
//! | Shape | 1- | `start` (0), `end` (rank), from 15 | clamped to [0, rank] |
//! | Unsqueeze, Squeeze | 1- | `axes` (attribute before 13, input 1 from 13) | Squeeze without axes drops every 1 |

use ndarray::{ArrayD, IxDyn};

use super::common::{input, int_list, map_tensor, norm_axes, opt_input};
use super::infer::{const_ints, norm_axis as infer_axis, Axes};
use super::lowering::{norm_axis as lower_axis, run, NodeCtx, R};
use super::wgsl::{self, strides, Access};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

super::plain_ops!(Identity);

impl Op for Identity {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        identity
    }
    fn lower(&self, _: &NodeCtx) -> R<Lowered> {
        Ok(Lowered::Alias)
    }
    fn relabel(&self) -> Option<RelabelShape> {
        Some(|_, inputs| Ok(input("Identity", inputs, 0)?.shape().to_vec()))
    }
}

#[derive(Debug)]
pub struct Reshape {
    pub allowzero: bool,
}

impl Reshape {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Reshape {
            allowzero: a.opset >= 14 && a.flag("allowzero", false)?,
        }))
    }
}

impl Op for Reshape {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = cx.elements(1).map(|target| {
            super::shape_value::reshape_dims(x.shape.as_deref(), &target, self.allowzero)
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        reshape
    }
    fn lower(&self, _: &NodeCtx) -> R<Lowered> {
        Ok(Lowered::Alias)
    }
    fn relabel(&self) -> Option<RelabelShape> {
        Some(reshape_shape)
    }
}

#[derive(Debug)]
pub struct Transpose {
    /// `None`: the axes reversed.
    pub perm: Option<Vec<i64>>,
}

impl Transpose {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Transpose {
            perm: a.ints("perm")?,
        }))
    }
}

impl Op for Transpose {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().and_then(|s| {
            let perm: Vec<usize> = match &self.perm {
                Some(p) => p
                    .iter()
                    .map(|&a| infer_axis(a, s.len()))
                    .collect::<Option<_>>()?,
                None => (0..s.len()).rev().collect(),
            };
            (perm.len() == s.len()).then(|| perm.iter().map(|&p| s[p].clone()).collect())
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        transpose
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let inp = c.input(0)?;
        let rank = inp.shape.len();
        let perm: Vec<usize> = match &self.perm {
            Some(p) => p
                .iter()
                .map(|&a| lower_axis(a, rank))
                .collect::<R<Vec<_>>>()?,
            None => (0..rank).rev().collect(),
        };
        let st = strides(&inp.shape);
        let access = Access {
            ty: c.ty(0)?,
            base: 0,
            strides: perm.iter().map(|&p| st[p]).collect(),
        };
        run(wgsl::elementwise(
            &c.out(0)?.shape,
            c.out_ty(0)?,
            &[access],
            "v0",
        ))
    }
}

#[derive(Debug)]
pub struct Shape {
    pub start: i64,
    /// `None`: the rank.
    pub end: Option<i64>,
}

impl Shape {
    pub fn parse(a: &Attrs) -> P {
        // start/end exist from opset 15.
        let v15 = a.opset >= 15;
        Ok(Box::new(Shape {
            start: if v15 { a.int("start", 0)? } else { 0 },
            end: if v15 { a.opt_int("end")? } else { None },
        }))
    }

    /// The [start, end) range of a rank-`r` shape, clamped as the spec says.
    fn range(&self, r: i64) -> (i64, i64) {
        let clamp = |v: i64| if v < 0 { v + r } else { v }.clamp(0, r);
        (clamp(self.start), clamp(self.end.unwrap_or(r)))
    }
}

impl Op for Shape {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let len = cx.input(0).rank().map(|r| {
            let (start, end) = self.range(r as i64);
            (end - start).max(0)
        });
        vec![TensorType {
            dtype: Some(DType::I64),
            shape: len.map(|l| vec![Dim::Known(l)]),
        }]
    }
    fn kernel(&self) -> Kernel {
        shape
    }
    fn reads_only_shapes(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct Unsqueeze {
    pub axes: Axes,
}

#[derive(Debug)]
pub struct Squeeze {
    pub axes: Axes,
}

/// Squeeze/Unsqueeze axes: the `axes` attribute before 13, input 1 from 13.
fn parse_axes(a: &Attrs) -> R<Axes> {
    Ok(if a.opset >= 13 {
        Axes::Input
    } else {
        Axes::Attribute(a.ints("axes")?.unwrap_or_default())
    })
}

impl Unsqueeze {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Unsqueeze {
            axes: parse_axes(a)?,
        }))
    }
}

impl Squeeze {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Squeeze {
            axes: parse_axes(a)?,
        }))
    }
}

/// The statically known axes of a Squeeze/Unsqueeze (`None`: an input not known).
fn static_axes(cx: &InferCx, axes: &Axes) -> Option<Vec<i64>> {
    match axes {
        Axes::Attribute(a) => Some(a.clone()),
        Axes::Input if !cx.has_input(1) => Some(vec![]),
        Axes::Input => const_ints(cx.graph, cx.node.input(1)),
    }
}

impl Op for Unsqueeze {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match (x.shape.as_ref(), static_axes(cx, &self.axes)) {
            (Some(s), Some(axes)) => unsqueezed(s, &axes),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        unsqueeze
    }
    fn lower(&self, _: &NodeCtx) -> R<Lowered> {
        Ok(Lowered::Alias)
    }
    fn relabel(&self) -> Option<RelabelShape> {
        Some(unsqueeze_shape)
    }
}

impl Op for Squeeze {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let axes = static_axes(cx, &self.axes);
        // The kernel treats an explicitly empty `axes` input as "squeeze nothing" (as the ONNX
        // reference does); only absent axes squeeze every size-1 dim.
        let explicit_empty = self.axes == Axes::Input
            && cx.has_input(1)
            && axes.as_ref().is_some_and(|a| a.is_empty());
        let shape = match (x.shape.as_ref(), axes) {
            (Some(s), _) if explicit_empty => Some(s.clone()),
            (Some(s), Some(axes)) => squeezed(s, &axes),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        squeeze
    }
    fn lower(&self, _: &NodeCtx) -> R<Lowered> {
        Ok(Lowered::Alias)
    }
    fn relabel(&self) -> Option<RelabelShape> {
        Some(squeeze_shape)
    }
}

fn unsqueezed(s: &[Dim], axes: &[i64]) -> Option<Vec<Dim>> {
    let rank = s.len() + axes.len();
    let axes: Vec<usize> = axes
        .iter()
        .map(|&a| infer_axis(a, rank))
        .collect::<Option<_>>()?;
    let mut it = s.iter();
    (0..rank)
        .map(|i| {
            if axes.contains(&i) {
                Some(Dim::Known(1))
            } else {
                it.next().cloned()
            }
        })
        .collect()
}

fn squeezed(s: &[Dim], axes: &[i64]) -> Option<Vec<Dim>> {
    if axes.is_empty() {
        // Without axes every size-1 dim goes: only decidable when all dims are known.
        return s
            .iter()
            .filter(|d| **d != Dim::Known(1))
            .map(|d| matches!(d, Dim::Known(_)).then(|| d.clone()))
            .collect();
    }
    let axes: Vec<usize> = axes
        .iter()
        .map(|&a| infer_axis(a, s.len()))
        .collect::<Option<_>>()?;
    Some(
        s.iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, d)| d.clone())
            .collect(),
    )
}

pub fn identity(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    Ok(vec![input("Identity", inputs, 0)?.clone()])
}

/// The output shape of a kernel whose output is its input 0 with the same elements in the same
/// row-major order, only relabelled (Identity, Reshape, Squeeze, Unsqueeze, Flatten). The
/// executor uses it to hand over input 0 without a copy when this node is its last reader.
pub type RelabelShape = fn(&KernelCtx, &[Option<&Tensor>]) -> Result<Vec<usize>, String>;

/// `t` (owned) relabelled to `shape`, which has its element count: no copy when `t` is row-major.
pub fn relabel(op: &str, t: Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if shape.iter().product::<usize>() != t.len() {
        return Err(format!(
            "{op}: cannot reshape {:?} ({} elements) to {shape:?}",
            t.shape(),
            t.len()
        ));
    }
    Ok(map_tensor!(t, a => a
        .into_shape_clone(IxDyn(shape))
        .map_err(|e| format!("{op}: {e}"))?))
}

/// Same data in a new shape with the same element count (row-major order is preserved).
fn reshaped(op: &str, t: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    if n != t.len() {
        return Err(format!(
            "{op}: cannot reshape {:?} ({} elements) to {shape:?}",
            t.shape(),
            t.len()
        ));
    }
    // `to_shape` borrows a row-major input and copies only what the output needs to own.
    Ok(map_tensor!(t, a => a
        .to_shape(IxDyn(shape))
        .map_err(|e| format!("{op}: {e}"))?
        .into_owned()))
}

/// Reshape (5, 13; 14+ adds `allowzero`): 0 copies the input dim (unless allowzero), -1 is
/// inferred from the element count.
pub fn reshape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = reshape_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Reshape",
        input("Reshape", inputs, 0)?,
        &shape,
    )?])
}

fn reshape_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Reshape";
    let data = input(OP, inputs, 0)?;
    let spec = int_list(OP, "shape", input(OP, inputs, 1)?)?;
    let allowzero = ctx.attrs::<Reshape>()?.allowzero;
    let mismatch = || {
        format!(
            "{OP}: cannot reshape {:?} ({} elements) to {spec:?}",
            data.shape(),
            data.len()
        )
    };
    if allowzero && spec.contains(&0) && spec.contains(&-1) {
        return Err(format!(
            "{OP}: shape {spec:?} has both 0 and -1, which allowzero=1 makes ambiguous"
        ));
    }
    let mut infer = None;
    let mut shape = Vec::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        shape.push(match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(format!("{OP}: shape {spec:?} has more than one -1"));
                }
                1
            }
            0 if !allowzero => *data.shape().get(i).ok_or_else(|| {
                format!(
                    "{OP}: shape {spec:?} has 0 at index {i}, past the input rank {} of {:?}",
                    data.shape().len(),
                    data.shape()
                )
            })?,
            d if d < 0 => return Err(format!("{OP}: invalid dimension {d} in shape {spec:?}")),
            d => usize::try_from(d).map_err(|_| mismatch())?,
        });
    }
    // Overflow here means the product cannot equal the element count.
    let known = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(mismatch)?;
    if let Some(i) = infer {
        if known == 0 || data.len() % known != 0 {
            return Err(mismatch());
        }
        shape[i] = data.len() / known;
    } else if known != data.len() {
        return Err(mismatch());
    }
    Ok(shape)
}

/// Transpose: `perm` defaults to reversing the axes.
pub fn transpose(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Transpose";
    let data = input(OP, inputs, 0)?;
    let rank = data.shape().len();
    let perm: Vec<usize> = match ctx.attrs::<Transpose>()?.perm.as_deref() {
        None => (0..rank).rev().collect(),
        Some(p) => {
            let mut seen = vec![false; rank];
            let mut out = Vec::with_capacity(rank);
            for &v in p {
                match usize::try_from(v).ok().filter(|&u| u < rank) {
                    Some(u) if !seen[u] => {
                        seen[u] = true;
                        out.push(u);
                    }
                    _ => break,
                }
            }
            if out.len() != rank || p.len() != rank {
                return Err(format!(
                    "{OP}: perm {p:?} is not a permutation of the {rank} axes of {:?}",
                    data.shape()
                ));
            }
            out
        }
    };
    Ok(vec![map_tensor!(data, a => permuted(a, &perm))])
}

/// `a` with its axes permuted, in row-major order. A row-major input is walked directly: an
/// odometer over the output's outer dims, the innermost dim copied as one run (a slice copy when
/// it is the input's innermost too). Otherwise ndarray permutes a view and copies it.
fn permuted<T: Clone>(a: &ArrayD<T>, perm: &[usize]) -> ArrayD<T> {
    let (src, rank) = match a.as_slice() {
        Some(s) if a.ndim() > 0 && !s.is_empty() => (s, a.ndim()),
        _ => {
            return a
                .view()
                .permuted_axes(perm.to_vec())
                .as_standard_layout()
                .into_owned()
        }
    };
    let shape = a.shape();
    let mut in_strides = vec![1usize; rank];
    for d in (0..rank - 1).rev() {
        in_strides[d] = in_strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let (inner, step) = (out_shape[rank - 1], strides[rank - 1]);
    let mut out = Vec::with_capacity(src.len());
    let mut idx = vec![0usize; rank - 1];
    let mut base = 0usize;
    for _ in 0..src.len() / inner {
        if step == 1 {
            out.extend_from_slice(&src[base..base + inner]);
        } else {
            out.extend((0..inner).map(|j| src[base + j * step].clone()));
        }
        for d in (0..rank - 1).rev() {
            idx[d] += 1;
            base += strides[d];
            if idx[d] < out_shape[d] {
                break;
            }
            base -= strides[d] * out_shape[d];
            idx[d] = 0;
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).expect("a permutation keeps the element count")
}

/// Shape; from version 15, `start`/`end` slice it, clamped to [0, rank] after adding rank to
/// negative values.
pub fn shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let data = input("Shape", inputs, 0)?;
    let dims: Vec<i64> = data.shape().iter().map(|&d| d as i64).collect();
    let (start, end) = ctx.attrs::<Shape>()?.range(dims.len() as i64);
    let slice = if start < end {
        &dims[start as usize..end as usize]
    } else {
        &[]
    };
    Ok(vec![Tensor::from_i64s(slice)])
}

/// Axes of Squeeze/Unsqueeze: an input from version 13, an attribute before (`None`: absent).
fn axes_arg(axes: &Axes, op: &str, inputs: &[Option<&Tensor>]) -> Result<Option<Vec<i64>>, String> {
    match axes {
        Axes::Input => opt_input(inputs, 1)
            .map(|t| int_list(op, "axes", t))
            .transpose(),
        Axes::Attribute(a) if a.is_empty() => Ok(None),
        Axes::Attribute(a) => Ok(Some(a.clone())),
    }
}

/// Unsqueeze: axes index the output, whose rank is input rank + len(axes).
pub fn unsqueeze(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = unsqueeze_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Unsqueeze",
        input("Unsqueeze", inputs, 0)?,
        &shape,
    )?])
}

fn unsqueeze_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Unsqueeze";
    let data = input(OP, inputs, 0)?;
    let axes = axes_arg(&ctx.attrs::<Unsqueeze>()?.axes, OP, inputs)?
        .ok_or_else(|| format!("{OP}: 'axes' is required"))?;
    let out_rank = data.shape().len() + axes.len();
    let axes = norm_axes(OP, &axes, out_rank)?;
    let mut rest = data.shape().iter();
    Ok((0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                rest.next().copied().unwrap_or(1)
            }
        })
        .collect())
}

/// Squeeze: without axes, every dim of size 1 goes; a listed axis whose dim is not 1 is an error.
pub fn squeeze(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = squeeze_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Squeeze",
        input("Squeeze", inputs, 0)?,
        &shape,
    )?])
}

fn squeeze_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Squeeze";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    let drop: Vec<usize> = match axes_arg(&ctx.attrs::<Squeeze>()?.axes, OP, inputs)? {
        None => (0..dims.len()).filter(|&i| dims[i] == 1).collect(),
        Some(axes) => {
            let axes = norm_axes(OP, &axes, dims.len())?;
            if let Some(&bad) = axes.iter().find(|&&a| dims[a] != 1) {
                return Err(format!(
                    "{OP}: axis {bad} of shape {dims:?} has size {}, not 1",
                    dims[bad]
                ));
            }
            axes
        }
    };
    Ok((0..dims.len())
        .filter(|i| !drop.contains(i))
        .map(|i| dims[i])
        .collect())
}

#[cfg(test)]
#[path = "shape_ops_tests.rs"]
mod tests;
