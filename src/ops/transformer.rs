//! Layer normalizations, as transformer fusions emit them (the GELU activations are in
//! `gelu.rs`, which shares this file's float kernels' machinery).
//!
//! | op | domain, versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | LayerNormalization | ai.onnx 17- (and 1-16 as onnxruntime's contrib schema) | `axis` (-1), `epsilon` (1e-5), `stash_type` (1) | X, Scale, B? -> Y, Mean?, InvStdDev? |
//! | SkipLayerNormalization | com.microsoft 1 | `epsilon` (1e-12) | input, skip, gamma, beta?, bias? -> output, mean?, inv_std_var?, input_skip_bias_sum? |
//!
//! LayerNormalization entered ai.onnx at 17 and has not changed since (onnxruntime also has a
//! contrib schema of the same name; the com.microsoft ops are from its docs/ContribOperators.md).
//! LayerNormalization's Mean and InvStdDev are of the stash type (1 float32, 11 float64) shaped as
//! X with dims [axis, rank) set to 1; SkipLayerNormalization's mean and inv_std_var are float32
//! shaped as input with the last dim 1.
//!
//! Element types: float32 and float64; every other type is an error naming the op. Each kernel
//! makes one pass over its input: SkipLayerNormalization forms a row of `input + skip (+ bias)`,
//! writes it out when asked, normalizes it in place and moves on, as the fused op promises.
//!
//! Row statistics accumulate in float32 for float32 data (as onnxruntime's CPU kernels do) and in
//! float64 for float64 data or `stash_type = 11`, mean first, then the variance about it.
//! Outputs a node omits are not computed: their slots get an empty placeholder the executor drops.
//! On WebGPU each norm is one float32 dispatch (`wgsl::layer_norm`).

use std::borrow::Cow;
use std::ops::{Add, Div, Mul, Sub};

use ndarray::{ArrayD, IxDyn};

use super::broadcast::check_unidirectional;
use super::common::{check_out, input, norm_axis, opt_input, type_mismatch, unsupported_type};
use super::elementwise::ErfF64;
use super::infer::norm_axis as infer_axis;
use super::lanes::elements;
use super::lowering::{norm_axis as lower_axis, run, NodeCtx, R};
use super::wgsl::{self, numel, LayerNorm};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::onnx::proto::data_type as dt;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

// ---------------------------------------------------------------------------------------------
// The ops: typed attributes, inference, lowering

/// ai.onnx LayerNormalization (17-).
#[derive(Debug)]
pub struct LayerNormalization {
    /// The first normalized axis (negative counts from the end): dims [axis, rank) are normalized.
    pub axis: i64,
    pub epsilon: f32,
    /// The statistics' element type as an ONNX data type: 1 (float32) or 11 (float64); any other
    /// value parses, but the kernel refuses it and inference leaves the statistics' type unknown.
    pub stash_type: i64,
}

impl LayerNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(LayerNormalization {
            axis: a.int("axis", -1)?,
            epsilon: a.float("epsilon", 1e-5)?,
            stash_type: a.int("stash_type", dt::FLOAT as i64)?,
        }))
    }

    /// The element type of Mean and InvStdDev; `None` for an unsupported `stash_type`.
    pub fn stash_dtype(&self) -> Option<DType> {
        match self.stash_type {
            v if v == dt::FLOAT as i64 => Some(DType::F32),
            v if v == dt::DOUBLE as i64 => Some(DType::F64),
            _ => None,
        }
    }
}

impl Op for LayerNormalization {
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
        vec![x, stats.clone(), stats]
    }
    fn kernel(&self) -> Kernel {
        layer_norm
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let x = &c.input(0)?.shape;
        let axis = lower_axis(self.axis, x.len())?;
        let len: usize = x[axis..].iter().product();
        lower_layer_norm(
            c,
            self.epsilon,
            len,
            false,
            None,
            None,
            (c.has_out(1).then_some(1), c.has_out(2).then_some(2), None),
        )
    }
}

/// com.microsoft SkipLayerNormalization.
#[derive(Debug)]
pub struct SkipLayerNormalization {
    pub epsilon: f32,
}

impl SkipLayerNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(SkipLayerNormalization {
            epsilon: a.float("epsilon", 1e-12)?,
        }))
    }
}

impl Op for SkipLayerNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        // mean and inv_std_var: float32 (type U), input's shape with the last dim 1.
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
        skip_layer_norm
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let x = &c.input(0)?.shape;
        let len = *x.last().ok_or("SkipLayerNormalization of a scalar")?;
        let skip_len = numel(&c.input(1)?.shape);
        if skip_len == 0 || !skip_len.is_multiple_of(len.max(1)) {
            return Err("skip does not tile the input's rows".into());
        }
        lower_layer_norm(
            c,
            self.epsilon,
            len,
            false,
            Some((1, skip_len)),
            c.has_input(4).then_some(4),
            (
                c.has_out(1).then_some(1),
                c.has_out(2).then_some(2),
                c.has_out(3).then_some(3),
            ),
        )
    }
}

/// One `wgsl::layer_norm` dispatch over rows of `len` elements: inputs x, gamma, beta? (at 0, 1,
/// 2), or with `skip` (input position, elements) x, skip, gamma, beta?, bias? as
/// SkipLayerNormalization has them; `outs` are the output positions of mean, inv_std, sum. An
/// `rms` norm (the simplified ones) has no beta (its bias, if any, follows gamma) and no centering.
pub(super) fn lower_layer_norm(
    c: &NodeCtx,
    epsilon: f32,
    len: usize,
    rms: bool,
    skip: Option<(usize, usize)>,
    bias: Option<usize>,
    (mean_out, inv_std_out, sum_out): (Option<usize>, Option<usize>, Option<usize>),
) -> R<Lowered> {
    let x = &c.input(0)?.shape;
    if c.ty(0)? != wgsl::Ty::F32 {
        return Err(format!(
            "{} of {} has no webgpu kernel (float32 only)",
            c.node.op_type,
            c.input(0)?.dtype
        ));
    }
    let gamma_in = if skip.is_some() { 2 } else { 1 };
    let beta_in = gamma_in + 1;
    if numel(&c.input(gamma_in)?.shape) != len {
        return Err("gamma must have one element per normalized element".into());
    }
    run(wgsl::layer_norm(&LayerNorm {
        rows: numel(x) / len.max(1),
        len,
        epsilon,
        rms,
        skip_len: skip.map(|s| s.1),
        mean_out,
        inv_std_out,
        sum_out,
        x_in: 0,
        gamma_in,
        beta_in: (!rms && c.has_input(beta_in)).then_some(beta_in),
        skip_in: skip.map(|s| s.0),
        bias_in: bias,
    })?)
}

// ---------------------------------------------------------------------------------------------
// Kernels: shared row machinery

/// The float element types these kernels compute in.
pub(super) trait Real:
    Copy
    + Send
    + Sync
    + PartialEq
    + std::fmt::Debug
    + ErfF64
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    const DTYPE: DType;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn view(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn wrap(a: ArrayD<Self>) -> Tensor;
    /// The slice as float32, if `Self` is float32 (for kernels with a float32-only fast path).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    fn f32s(s: &[Self]) -> Option<&[f32]>;
    /// [`Real::f32s`], mutable.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    fn f32s_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

macro_rules! impl_real {
    ($t:ty, $dtype:expr, $variant:ident, $as_f32:expr, $as_f32_mut:expr) => {
        impl Real for $t {
            fn f32s(s: &[Self]) -> Option<&[f32]> {
                let f: fn(&[Self]) -> Option<&[f32]> = $as_f32;
                f(s)
            }
            fn f32s_mut(s: &mut [Self]) -> Option<&mut [f32]> {
                let f: fn(&mut [Self]) -> Option<&mut [f32]> = $as_f32_mut;
                f(s)
            }
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const DTYPE: DType = $dtype;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn view(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$variant(a)
            }
        }
    };
}
impl_real!(f32, DType::F32, F32, |s| Some(s), |s| Some(s));
impl_real!(f64, DType::F64, F64, |_| None, |_| None);

#[inline(always)]
pub(super) fn cvt<T: Real, A: Real>(v: T) -> A {
    // f32 -> f64 -> f32 is exact, and the compiler folds the round trip away.
    A::from_f64(v.to_f64())
}

/// Input `i` as an array of `T`: the type must be the first input's.
pub(super) fn same_type<'a, T: Real>(
    op: &str,
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> Result<Option<&'a ArrayD<T>>, String> {
    match opt_input(inputs, i) {
        None => Ok(None),
        Some(t) => T::view(t)
            .map(Some)
            .ok_or_else(|| type_mismatch(op, T::DTYPE, t.dtype())),
    }
}

pub(super) fn required<'a, T: Real>(
    op: &str,
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> Result<&'a ArrayD<T>, String> {
    let t = input(op, inputs, i)?;
    T::view(t).ok_or_else(|| type_mismatch(op, T::DTYPE, t.dtype()))
}

/// A per-position parameter (scale, bias) broadcast unidirectionally to `to`, as one row.
pub(super) fn param_row<'a, T: Real>(
    op: &str,
    what: &str,
    p: &'a ArrayD<T>,
    to: &[usize],
) -> Result<Cow<'a, [T]>, String> {
    check_unidirectional(op, what, p.shape(), to)?;
    if p.shape() == to {
        return Ok(elements(p));
    }
    let v = p.broadcast(IxDyn(to)).ok_or_else(|| {
        format!(
            "{op}: {what} of shape {:?} cannot be broadcast to {to:?}",
            p.shape()
        )
    })?;
    Ok(Cow::Owned(v.iter().copied().collect()))
}

/// A 1-D parameter of length `h` along the last dim (onnxruntime's gamma/beta/bias contract).
pub(super) fn vector_param<'a, T: Real>(
    op: &str,
    what: &str,
    p: &'a ArrayD<T>,
    h: usize,
) -> Result<Cow<'a, [T]>, String> {
    match p.shape() {
        [n] if *n == h => Ok(elements(p)),
        [n] => Err(format!(
            "{op}: '{what}' has length {n}, the hidden size (input's last dim) is {h}"
        )),
        s => Err(format!(
            "{op}: '{what}' must be 1-D of the hidden size {h}, got shape {s:?}"
        )),
    }
}

pub(super) fn shaped<T: Real>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor, String> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(T::wrap)
        .map_err(|e| format!("{op}: {e}"))
}

/// Which outputs the node asks for: output 0 always; others when the node names them. Returns
/// the number of output slots to fill (the node's, at least 1), or an error past `max`.
pub(super) fn wanted(ctx: &KernelCtx, op: &str, max: usize) -> Result<(usize, Vec<bool>), String> {
    let n = ctx.node.outputs.len().max(1);
    if n > max {
        return Err(format!(
            "{op}: the node names {n} outputs, the op has at most {max}"
        ));
    }
    let mut want: Vec<bool> = (0..max).map(|i| ctx.node.output(i).is_some()).collect();
    want[0] = true;
    Ok((n, want))
}

pub(super) fn placeholder(t: DType) -> Tensor {
    match t.0 {
        dt::DOUBLE => Tensor::F64(ArrayD::zeros(IxDyn(&[0]))),
        _ => Tensor::F32(ArrayD::zeros(IxDyn(&[0]))),
    }
}

/// Row statistics as a tensor of the stash type `s` (float32 or float64).
pub(super) fn stats_tensor<A: Real>(
    op: &str,
    s: DType,
    shape: &[usize],
    v: Vec<A>,
) -> Result<Tensor, String> {
    if s == A::DTYPE {
        return shaped(op, shape, v);
    }
    match s.0 {
        dt::FLOAT => shaped(op, shape, v.into_iter().map(cvt::<A, f32>).collect()),
        _ => shaped(op, shape, v.into_iter().map(cvt::<A, f64>).collect()),
    }
}

/// `Σ f(v)` over a row in `LANES` interleaved partial sums, added up at the end: the adds are
/// independent, so the loop vectorizes instead of waiting on one running sum (a 768-wide norm
/// row took ~2 µs that way).
pub(super) fn lane_fold<T: Copy, A: Real>(row: &[T], f: impl Fn(T) -> A) -> A {
    const LANES: usize = 8;
    let mut acc = [A::ZERO; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (s, &v) in acc.iter_mut().zip(c) {
            *s = *s + f(v);
        }
    }
    let tail = chunks.remainder().iter().fold(A::ZERO, |s, &v| s + f(v));
    acc.iter().fold(tail, |s, &x| s + x)
}

/// Normalizes `row` in place: `(v - mean) / sqrt(var + eps) * gamma (+ beta)`, statistics in `A`.
/// Returns (mean, 1 / sqrt(var + eps)). `row` is not empty.
#[inline]
pub(super) fn normalize_row<T: Real, A: Real>(
    row: &mut [T],
    gamma: &[T],
    beta: Option<&[T]>,
    eps: A,
) -> (A, A) {
    // The wasm build vectorizes no loop (it is optimized for size): float32 rows with float32
    // statistics take a four-lane version of the same passes there.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if A::DTYPE == DType::F32 {
        let beta32 = match beta {
            None => Some(None),
            Some(b) => T::f32s(b).map(Some),
        };
        if let (Some(g), Some(b), Some(r)) = (T::f32s(gamma), beta32, T::f32s_mut(row)) {
            let (m, inv) = super::simd::layer_norm_row(r, g, b, eps.to_f64() as f32);
            return (A::from_f64(m as f64), A::from_f64(inv as f64));
        }
    }
    let n = A::from_f64(row.len() as f64);
    let mean = lane_fold(row, cvt::<T, A>) / n;
    let var = lane_fold(row, |v| {
        let d = cvt::<T, A>(v) - mean;
        d * d
    }) / n;
    let inv = A::ONE / (var + eps).sqrt();
    match beta {
        Some(beta) => {
            for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
                let z = (cvt::<T, A>(*v) - mean) * inv;
                *v = cvt(z * cvt::<T, A>(g) + cvt::<T, A>(b));
            }
        }
        None => {
            for (v, &g) in row.iter_mut().zip(gamma) {
                *v = cvt((cvt::<T, A>(*v) - mean) * inv * cvt::<T, A>(g));
            }
        }
    }
    (mean, inv)
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization kernel

/// LayerNormalization: outputs Y, Mean?, InvStdDev? (see the table above). Scale and B broadcast
/// unidirectionally to X's dims [axis, rank).
pub fn layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LayerNormalization";
    let x = input(OP, inputs, 0)?;
    let a = ctx.attrs::<LayerNormalization>()?;
    let stash = a.stash_dtype().ok_or_else(|| {
        format!(
            "{OP}: stash_type {} is not supported (1 = float32 and 11 = float64 are)",
            a.stash_type
        )
    })?;
    match (x.dtype(), stash) {
        (DType::F32, DType::F32) => layer_norm_typed::<f32, f32>(ctx, inputs, stash),
        (DType::F32, _) => layer_norm_typed::<f32, f64>(ctx, inputs, stash),
        (DType::F64, _) => layer_norm_typed::<f64, f64>(ctx, inputs, stash),
        (t, _) => Err(unsupported_type(OP, t)),
    }
}

fn layer_norm_typed<T: Real, A: Real>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    stash: DType,
) -> KernelResult {
    const OP: &str = "LayerNormalization";
    let x = required::<T>(OP, inputs, 0)?;
    let scale = required::<T>(OP, inputs, 1)?;
    let bias = same_type::<T>(OP, inputs, 2)?;
    let (n_out, want) = wanted(ctx, OP, 3)?;
    let shape = x.shape();
    if shape.is_empty() {
        return Err(format!("{OP}: X must have rank 1 or more, got a scalar"));
    }
    let a = ctx.attrs::<LayerNormalization>()?;
    let axis = norm_axis(OP, a.axis, shape.len())?;
    let eps = A::from_f64(a.epsilon as f64);
    let norm_shape = &shape[axis..];
    let cols: usize = norm_shape.iter().product();
    let rows: usize = shape[..axis].iter().product();
    let gamma = param_row(OP, "Scale", scale, norm_shape)?;
    let beta = bias
        .map(|b| param_row(OP, "B", b, norm_shape))
        .transpose()?;
    let stat_shape: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if i < axis { d } else { 1 })
        .collect();
    check_out(ctx, OP, shape, T::DTYPE.bits().unwrap_or(64))?;
    let want_stats = want[1] || want[2];
    if want_stats {
        check_out(ctx, OP, &stat_shape, stash.bits().unwrap_or(64))?;
    }

    let mut y = elements(x).into_owned();
    let mut means = Vec::with_capacity(if want[1] { rows } else { 0 });
    let mut invs = Vec::with_capacity(if want[2] { rows } else { 0 });
    if cols == 0 {
        // Statistics over no elements: 0 / 0, as the spec's ReduceMean would give.
        let nan = A::from_f64(f64::NAN);
        means.resize(if want[1] { rows } else { 0 }, nan);
        invs.resize(if want[2] { rows } else { 0 }, nan);
    } else {
        for row in y.chunks_exact_mut(cols) {
            let (m, inv) = normalize_row(row, &gamma, beta.as_deref(), eps);
            if want[1] {
                means.push(m);
            }
            if want[2] {
                invs.push(inv);
            }
        }
    }

    let mut outs = vec![shaped(OP, shape, y)?];
    for (i, stats) in [(1, means), (2, invs)] {
        if i >= n_out {
            break;
        }
        outs.push(if want[i] {
            stats_tensor(OP, stash, &stat_shape, stats)?
        } else {
            placeholder(stash)
        });
    }
    Ok(outs)
}

#[path = "skip_norm.rs"]
mod skip;
pub use skip::skip_layer_norm;
pub(super) use skip::skip_norm;

// The GELU kernels' tests live with the norms' (transformer_tests.rs).
#[cfg(test)]
use super::gelu::{bias_gelu, fast_gelu, gelu};

#[cfg(test)]
#[path = "transformer_tests.rs"]
mod tests;
