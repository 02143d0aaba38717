//! Root-mean-square layer normalizations, as onnxruntime's transformer fusions emit them
//! (onnxruntime's contrib schemas; the kernels follow its CPU `layer_norm_impl` / `skip_layer_norm`).
//!
//! | op | domain, versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | SimplifiedLayerNormalization | ai.onnx 1 and com.microsoft 1 (onnxruntime's contrib schema) | `axis` (-1), `epsilon` (1e-5), `stash_type` (1) | X, scale -> Y, inv_std_var? |
//! | SkipSimplifiedLayerNormalization | com.microsoft 1 | `epsilon` (1e-12) | input, skip, gamma, bias? -> output, mean?, inv_std_var?, input_skip_bias_sum? |
//!
//! Per row of the normalized dims: `d = sqrt(sum(x²) / n + epsilon)`, `y = x / d * scale`,
//! `inv_std_var = 1 / d` (the division, not a multiply by `1 / d`, as onnxruntime computes it).
//! SimplifiedLayerNormalization's inv_std_var is of the stash type (1 float32, 11 float64) shaped
//! as X with dims [axis, rank) set to 1; scale broadcasts unidirectionally to those dims.
//! SkipSimplifiedLayerNormalization normalizes `input + skip (+ bias)` over the last dim; skip has
//! input's shape or [1, seq, hidden] / [seq, hidden] for a 3-D input; gamma and bias are 1-D of
//! the hidden size; `mean` is not computed by onnxruntime (declared "unused"): we fill it with
//! zeros when named; inv_std_var is float32 shaped as input with the last dim 1.
//!
//! Element types: float32 (accumulated in float32, as onnxruntime) and float64 (in float64);
//! float16/bfloat16 arrive widened to float32. Every other type is an error naming the op.
//! On WebGPU each is one float32 dispatch (`wgsl::layer_norm` with `rms`).

use super::common::{check_out, input, norm_axis, unsupported_type};
use super::infer::norm_axis as infer_axis;
use super::lanes::elements;
use super::lowering::{norm_axis as lower_axis, Lowered, NodeCtx};
use super::transformer::lower_layer_norm;
use super::transformer::{
    cvt, lane_fold, param_row, placeholder, required, shaped, skip_norm, stats_tensor, wanted, Real,
};
use super::wgsl::numel;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::onnx::proto::data_type as dt;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// SimplifiedLayerNormalization (onnxruntime's contrib schema, default and com.microsoft domains).
#[derive(Debug)]
pub struct SimplifiedLayerNormalization {
    /// The first normalized axis (negative counts from the end).
    pub axis: i64,
    pub epsilon: f32,
    /// inv_std_var's element type: 1 (float32) or 11 (float64); others are refused by the kernel.
    pub stash_type: i64,
}

impl SimplifiedLayerNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(SimplifiedLayerNormalization {
            axis: a.int("axis", -1)?,
            epsilon: a.float("epsilon", 1e-5)?,
            stash_type: a.int("stash_type", dt::FLOAT as i64)?,
        }))
    }

    fn stash_dtype(&self) -> Option<DType> {
        match self.stash_type {
            v if v == dt::FLOAT as i64 => Some(DType::F32),
            v if v == dt::DOUBLE as i64 => Some(DType::F64),
            _ => None,
        }
    }
}

impl Op for SimplifiedLayerNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().and_then(|s| {
            let a = infer_axis(self.axis, s.len())?;
            Some(
                s.iter()
                    .enumerate()
                    .map(|(i, d)| if i < a { d.clone() } else { Dim::Known(1) })
                    .collect(),
            )
        });
        let stats = TensorType {
            dtype: self.stash_dtype(),
            shape,
        };
        vec![x, stats]
    }
    fn kernel(&self) -> Kernel {
        simplified_layer_norm
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        if self.stash_type != dt::FLOAT as i64 {
            return Err(
                "SimplifiedLayerNormalization with float64 statistics has no webgpu kernel".into(),
            );
        }
        let x = &c.input(0)?.shape;
        let axis = lower_axis(self.axis, x.len())?;
        let len: usize = x[axis..].iter().product();
        let outs = (None, c.has_out(1).then_some(1), None);
        lower_layer_norm(c, self.epsilon, len, true, None, None, outs)
    }
}

/// com.microsoft SkipSimplifiedLayerNormalization.
#[derive(Debug)]
pub struct SkipSimplifiedLayerNormalization {
    pub epsilon: f32,
}

impl SkipSimplifiedLayerNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(SkipSimplifiedLayerNormalization {
            epsilon: a.float("epsilon", 1e-12)?,
        }))
    }
}

impl Op for SkipSimplifiedLayerNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().filter(|s| !s.is_empty()).map(|s| {
            let mut s = s.clone();
            if let Some(last) = s.last_mut() {
                *last = Dim::Known(1);
            }
            s
        });
        let stats = TensorType {
            dtype: Some(DType::F32),
            shape,
        };
        vec![x.clone(), stats.clone(), stats, x]
    }
    fn kernel(&self) -> Kernel {
        skip_simplified_layer_norm
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let x = &c.input(0)?.shape;
        let len = *x
            .last()
            .ok_or("SkipSimplifiedLayerNormalization of a scalar")?;
        let skip_len = numel(&c.input(1)?.shape);
        if skip_len == 0 || !skip_len.is_multiple_of(len.max(1)) {
            return Err("skip does not tile the input's rows".into());
        }
        // `mean` (output 1) is written as zeros: the RMS kernel's mean is 0, as the reference
        // kernel fills it.
        let outs = (
            c.has_out(1).then_some(1),
            c.has_out(2).then_some(2),
            c.has_out(3).then_some(3),
        );
        let bias = c.has_input(3).then_some(3);
        lower_layer_norm(c, self.epsilon, len, true, Some((1, skip_len)), bias, outs)
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// RMS-normalizes `row` in place (`v / d * gamma`, `d = sqrt(mean(v²) + eps)`, statistics in
/// `A`) and returns `1 / d`. `row` is not empty.
#[inline]
pub(super) fn rms_row<T: Real, A: Real>(row: &mut [T], gamma: &[T], eps: A) -> A {
    // Four lanes at a time in the wasm build (see `normalize_row`).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if A::DTYPE == crate::tensor::DType::F32 {
        if let (Some(g), Some(r)) = (T::f32s(gamma), T::f32s_mut(row)) {
            return A::from_f64(super::simd::rms_row(r, g, eps.to_f64() as f32) as f64);
        }
    }
    let n = A::from_f64(row.len() as f64);
    let sq = lane_fold(row, |v| {
        let v = cvt::<T, A>(v);
        v * v
    });
    let d = (sq / n + eps).sqrt();
    for (v, &g) in row.iter_mut().zip(gamma) {
        *v = cvt(cvt::<T, A>(*v) / d * cvt::<T, A>(g));
    }
    A::ONE / d
}

/// SimplifiedLayerNormalization: outputs Y, inv_std_var? (see the table above).
pub fn simplified_layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "SimplifiedLayerNormalization";
    let x = input(OP, inputs, 0)?;
    let a = ctx.attrs::<SimplifiedLayerNormalization>()?;
    let stash = a.stash_dtype().ok_or_else(|| {
        format!(
            "{OP}: stash_type {} is not supported (1 = float32 and 11 = float64 are)",
            a.stash_type
        )
    })?;
    match (x.dtype(), stash) {
        (DType::F32, DType::F32) => simplified_typed::<f32, f32>(ctx, inputs, stash),
        (DType::F32, _) => simplified_typed::<f32, f64>(ctx, inputs, stash),
        (DType::F64, _) => simplified_typed::<f64, f64>(ctx, inputs, stash),
        (t, _) => Err(unsupported_type(OP, t)),
    }
}

fn simplified_typed<T: Real, A: Real>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    stash: DType,
) -> KernelResult {
    const OP: &str = "SimplifiedLayerNormalization";
    let x = required::<T>(OP, inputs, 0)?;
    let scale = required::<T>(OP, inputs, 1)?;
    let (n_out, want) = wanted(ctx, OP, 2)?;
    let shape = x.shape();
    if shape.is_empty() {
        return Err(format!("{OP}: X must have rank 1 or more, got a scalar"));
    }
    let a = ctx.attrs::<SimplifiedLayerNormalization>()?;
    let axis = norm_axis(OP, a.axis, shape.len())?;
    let eps = A::from_f64(a.epsilon as f64);
    let norm_shape = &shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let rows: usize = shape[..axis].iter().product();
    let gamma = param_row(OP, "scale", scale, norm_shape)?;
    let stat_shape: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if i < axis { d } else { 1 })
        .collect();
    check_out(ctx, OP, shape, T::DTYPE.bits().unwrap_or(64))?;
    if want[1] {
        check_out(ctx, OP, &stat_shape, stash.bits().unwrap_or(64))?;
    }

    let mut y = elements(x).into_owned();
    let mut invs = Vec::with_capacity(if want[1] { rows } else { 0 });
    if cols == 0 {
        // sqrt(0 / 0 + eps): NaN, as onnxruntime's loop gives.
        invs.resize(if want[1] { rows } else { 0 }, A::from_f64(f64::NAN));
    } else {
        for row in y.chunks_exact_mut(cols) {
            let inv = rms_row(row, &gamma, eps);
            if want[1] {
                invs.push(inv);
            }
        }
    }
    let mut outs = vec![shaped(OP, shape, y)?];
    if n_out > 1 {
        outs.push(if want[1] {
            stats_tensor(OP, stash, &stat_shape, invs)?
        } else {
            placeholder(stash)
        });
    }
    Ok(outs)
}

/// com.microsoft SkipSimplifiedLayerNormalization (see the table above): SkipLayerNormalization's
/// kernel without centering or beta (`transformer::skip_norm`).
pub fn skip_simplified_layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let eps = ctx.attrs::<SkipSimplifiedLayerNormalization>()?.epsilon;
    skip_norm(ctx, inputs, "SkipSimplifiedLayerNormalization", true, eps)
}

#[cfg(test)]
#[path = "rms_tests.rs"]
mod tests;
