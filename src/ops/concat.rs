//! ai.onnx Concat (versions 1-; `axis` required from 4, negative from 11): inputs of one type and
//! rank, dims equal except on `axis`, joined along it.

use std::borrow::Cow;

use ndarray::{ArrayD, ArrayViewD, IxDyn};

use super::common::{bits, check_out, input, norm_axis, type_mismatch};
use super::infer::norm_axis as infer_axis;
use super::lowering::{norm_axis as lower_axis, run, NodeCtx, R};
use super::wgsl;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

#[derive(Debug)]
pub struct Concat {
    /// Required; its absence is the kernel's error (a model may still load and be optimized).
    pub axis: Option<i64>,
}

impl Concat {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Concat {
            axis: a.opt_int("axis")?,
        }))
    }
}

impl Op for Concat {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = (|| {
            let shapes = cx.input_shapes()?;
            let rank = shapes.first()?.len();
            let ax = infer_axis(self.axis?, rank)?;
            let mut out = shapes[0].clone();
            // The sum of the parts: known sizes add up; one symbolic part beside parts of
            // size 0 (a Concat of one input, an empty cache) is that symbol.
            let mut known = Some(0i64);
            let mut named: Vec<&Dim> = vec![];
            for s in &shapes {
                match s.get(ax) {
                    Some(Dim::Known(d)) => known = known.and_then(|t| t.checked_add(*d)),
                    Some(d @ Dim::Sym(_)) => named.push(d),
                    _ => known = None,
                }
            }
            out[ax] = match (known, named.as_slice()) {
                (Some(t), []) => Dim::Known(t),
                (Some(0), [d]) => (*d).clone(),
                _ => Dim::Unknown,
            };
            Some(out)
        })();
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        concat
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let out = &c.out(0)?.shape;
        let axis = lower_axis(self.axis.ok_or("Concat without axis")?, out.len())?;
        let shapes: Vec<Vec<usize>> = (0..c.ins.len())
            .map(|i| c.input(i).map(|x| x.shape.clone()))
            .collect::<R<_>>()?;
        if shapes.len() > 7 {
            return Err(format!(
                "Concat of {} inputs (at most 7 on webgpu)",
                shapes.len()
            ));
        }
        run(wgsl::concat(&shapes, out, axis, c.out_ty(0)?))
    }
}

/// Concat: same type and rank everywhere; dims agree except on `axis`.
pub fn concat(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Concat";
    if inputs.is_empty() {
        return Err(format!("{OP}: needs at least one input"));
    }
    let ts: Vec<&Tensor> = (0..inputs.len())
        .map(|i| input(OP, inputs, i))
        .collect::<Result<_, _>>()?;
    let first = ts[0];
    let rank = first.shape().len();
    let axis = ctx
        .attrs::<Concat>()?
        .axis
        .ok_or_else(|| format!("{OP}: attribute 'axis' is required"))?;
    if rank == 0 {
        return Err(format!("{OP}: cannot concatenate scalars"));
    }
    let axis = norm_axis(OP, axis, rank)?;
    let mut out_shape = first.shape().to_vec();
    out_shape[axis] = 0;
    for t in &ts {
        if t.dtype() != first.dtype() {
            return Err(type_mismatch(OP, first.dtype(), t.dtype()));
        }
        let s = t.shape();
        let agrees = s.len() == rank && (0..rank).all(|d| d == axis || s[d] == first.shape()[d]);
        if !agrees {
            return Err(format!(
                "{OP}: shape {s:?} does not match {:?} outside axis {axis}",
                first.shape()
            ));
        }
        out_shape[axis] = out_shape[axis]
            .checked_add(s[axis])
            .ok_or_else(|| format!("{OP}: output dimension overflows"))?;
    }
    check_out(ctx, OP, &out_shape, bits(first.dtype()))?;
    macro_rules! cat {
        ($v:ident) => {{
            let views: Vec<ArrayViewD<_>> = ts
                .iter()
                .filter_map(|t| match t {
                    Tensor::$v(a) => Some(a.view()),
                    _ => None,
                })
                .collect();
            Tensor::$v(joined(&views, axis, &out_shape)?)
        }};
    }
    Ok(vec![match first {
        Tensor::F32(_) => cat!(F32),
        Tensor::F64(_) => cat!(F64),
        Tensor::I32(_) => cat!(I32),
        Tensor::I64(_) => cat!(I64),
        Tensor::Bool(_) => cat!(Bool),
        Tensor::F16(_) => cat!(F16),
        Tensor::BF16(_) => cat!(BF16),
        Tensor::I8(_) => cat!(I8),
        Tensor::U8(_) => cat!(U8),
        Tensor::I16(_) => cat!(I16),
        Tensor::U16(_) => cat!(U16),
        Tensor::U32(_) => cat!(U32),
        Tensor::U64(_) => cat!(U64),
        Tensor::I4(_) => cat!(I4),
        Tensor::U4(_) => cat!(U4),
        Tensor::Str(_) => cat!(Str),
    }])
}

/// Inputs joined along `axis` by block copies: for each index before `axis`, each input's run of
/// `dim(axis) · inner` elements in turn (a KV cache's past and new rows). An input not stored
/// row-major is copied to row-major first. One routine for Concat and a Loop's stacked scan
/// outputs (ndarray's `concatenate`/`stack` would be another copy per element type in the wasm).
pub(crate) fn joined<T: Clone>(
    views: &[ArrayViewD<T>],
    axis: usize,
    out_shape: &[usize],
) -> Result<ArrayD<T>, String> {
    let slices: Vec<Cow<[T]>> = views
        .iter()
        .map(|v| match v.as_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(v.iter().cloned().collect()),
        })
        .collect();
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let runs: Vec<usize> = views.iter().map(|v| v.shape()[axis] * inner).collect();
    let mut out = Vec::with_capacity(out_shape.iter().product());
    for o in 0..outer {
        for (s, &run) in slices.iter().zip(&runs) {
            out.extend_from_slice(&s[o * run..][..run]);
        }
    }
    ArrayD::from_shape_vec(IxDyn(out_shape), out).map_err(|e| format!("Concat: {e}"))
}
