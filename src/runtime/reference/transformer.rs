//! Single-pass kernels for the normalization and activation ops transformer fusions emit:
//!
//! - `LayerNormalization`, ONNX opset 17 (ai.onnx; onnxruntime also accepts it at older default
//!   opsets, where its contrib schema of the same name lives) and com.microsoft's spelling;
//! - com.microsoft `SkipLayerNormalization`, `Gelu`, `FastGelu`, `BiasGelu` (onnxruntime's
//!   docs/ContribOperators.md).
//!
//! Element types: float32 and float64; every other type is an error naming the op. Each kernel
//! makes one pass over its input: SkipLayerNormalization forms a row of `input + skip (+ bias)`,
//! writes it out when asked, normalizes it in place and moves on, as the fused op promises.
//!
//! Row statistics accumulate in float32 for float32 data (as onnxruntime's CPU kernels do) and in
//! float64 for float64 data or `stash_type = 11`, mean first, then the variance about it.
//! Outputs a node omits are not computed: their slots get an empty placeholder the executor drops.

use std::borrow::Cow;
use std::ops::{Add, Div, Mul, Sub};

use ndarray::{ArrayD, IxDyn};

use super::broadcast::check_unidirectional;
use super::common::{check_out, input, norm_axis, opt_input, type_mismatch, unsupported_type};
use super::elementwise::Erf;
use super::fastmath;
use super::{KernelCtx, KernelResult};
use crate::onnx::proto::data_type as dt;
use crate::tensor::{DType, Tensor};

/// The float element types these kernels compute in.
pub(super) trait Real:
    Copy
    + PartialEq
    + std::fmt::Debug
    + Erf
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
}

macro_rules! impl_real {
    ($t:ty, $dtype:expr, $variant:ident) => {
        impl Real for $t {
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
impl_real!(f32, DType::F32, F32);
impl_real!(f64, DType::F64, F64);

#[inline(always)]
fn cvt<T: Real, A: Real>(v: T) -> A {
    // f32 -> f64 -> f32 is exact, and the compiler folds the round trip away.
    A::from_f64(v.to_f64())
}

/// Input `i` as an array of `T`: the type must be the first input's.
fn same_type<'a, T: Real>(
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

fn required<'a, T: Real>(
    op: &str,
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> Result<&'a ArrayD<T>, String> {
    let t = input(op, inputs, i)?;
    T::view(t).ok_or_else(|| type_mismatch(op, T::DTYPE, t.dtype()))
}

/// The elements of `a` in row-major order, borrowed when `a` already is row-major.
pub(super) fn row_major<'a, T: Real>(op: &str, a: &'a ArrayD<T>) -> Result<Cow<'a, [T]>, String> {
    match a.as_slice() {
        Some(s) => Ok(Cow::Borrowed(s)),
        None => {
            let v: Vec<T> = a.iter().copied().collect();
            if v.len() == a.len() {
                Ok(Cow::Owned(v))
            } else {
                Err(format!(
                    "{op}: could not read input of shape {:?}",
                    a.shape()
                ))
            }
        }
    }
}

/// A per-position parameter (scale, bias) broadcast unidirectionally to `to`, as one row.
fn param_row<'a, T: Real>(
    op: &str,
    what: &str,
    p: &'a ArrayD<T>,
    to: &[usize],
) -> Result<Cow<'a, [T]>, String> {
    check_unidirectional(op, what, p.shape(), to)?;
    if p.shape() == to {
        return row_major(op, p);
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
        [n] if *n == h => row_major(op, p),
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
fn stats_tensor<A: Real>(op: &str, s: DType, shape: &[usize], v: Vec<A>) -> Result<Tensor, String> {
    if s == A::DTYPE {
        return shaped(op, shape, v);
    }
    match s.0 {
        dt::FLOAT => shaped(op, shape, v.into_iter().map(cvt::<A, f32>).collect()),
        _ => shaped(op, shape, v.into_iter().map(cvt::<A, f64>).collect()),
    }
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
    let n = A::from_f64(row.len() as f64);
    let mean = row.iter().fold(A::ZERO, |s, &v| s + cvt::<T, A>(v)) / n;
    let var = row.iter().fold(A::ZERO, |s, &v| {
        let d = cvt::<T, A>(v) - mean;
        s + d * d
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
// LayerNormalization

/// The stash type: float32 (1, the default) or float64 (11).
fn stash_type(op: &str, ctx: &KernelCtx) -> Result<DType, String> {
    match ctx.node.attr_int("stash_type").unwrap_or(dt::FLOAT as i64) {
        v if v == dt::FLOAT as i64 => Ok(DType::F32),
        v if v == dt::DOUBLE as i64 => Ok(DType::F64),
        v => Err(format!(
            "{op}: stash_type {v} is not supported (1 = float32 and 11 = float64 are)"
        )),
    }
}

/// LayerNormalization (ONNX 17; onnxruntime's contrib schema has the same contract):
/// inputs X, Scale, B?; attributes axis (-1), epsilon (1e-5), stash_type (1); outputs Y, Mean?,
/// InvStdDev?, the statistics shaped as X with dims [axis, rank) set to 1 and of the stash type.
/// Scale and B broadcast unidirectionally to X's dims [axis, rank).
pub fn layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LayerNormalization";
    let x = input(OP, inputs, 0)?;
    let stash = stash_type(OP, ctx)?;
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
    let axis = norm_axis(OP, ctx.node.attr_int("axis").unwrap_or(-1), shape.len())?;
    let eps = A::from_f64(ctx.node.attr_float("epsilon").unwrap_or(1e-5) as f64);
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

    let mut y = row_major(OP, x)?.into_owned();
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

// ---------------------------------------------------------------------------------------------
// SkipLayerNormalization

/// com.microsoft SkipLayerNormalization: inputs input, skip, gamma, beta?, bias?; attribute
/// epsilon (1e-12); outputs output, mean?, inv_std_var?, input_skip_bias_sum?.
///
/// `input` is [batch, seq, hidden] or [tokens, hidden]; `skip` has input's shape, or for a 3-D
/// input [1, seq, hidden] or [seq, hidden] (shared by every batch). gamma, beta and bias are 1-D
/// of the hidden size. mean and inv_std_var are float32 (onnxruntime's type `U`), shaped as
/// input with the last dim 1.
pub fn skip_layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "SkipLayerNormalization";
    match input(OP, inputs, 0)?.dtype() {
        DType::F32 => skip_layer_norm_typed::<f32>(ctx, inputs),
        DType::F64 => skip_layer_norm_typed::<f64>(ctx, inputs),
        t => Err(unsupported_type(OP, t)),
    }
}

fn skip_layer_norm_typed<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "SkipLayerNormalization";
    let x = required::<T>(OP, inputs, 0)?;
    let skip = required::<T>(OP, inputs, 1)?;
    let gamma = required::<T>(OP, inputs, 2)?;
    let beta = same_type::<T>(OP, inputs, 3)?;
    let bias = same_type::<T>(OP, inputs, 4)?;
    let (n_out, want) = wanted(ctx, OP, 4)?;
    let shape = x.shape();
    if !(2..=3).contains(&shape.len()) {
        return Err(format!(
            "{OP}: input must be 2-D [tokens, hidden] or 3-D [batch, seq, hidden], got shape {shape:?}"
        ));
    }
    let h = shape[shape.len() - 1];
    if h == 0 {
        return Err(format!("{OP}: hidden size (input's last dim) is 0"));
    }
    let skip_ok = skip.shape() == shape
        || (shape.len() == 3
            && (skip.shape() == [1, shape[1], h] || skip.shape() == [shape[1], h]));
    if !skip_ok {
        return Err(format!(
            "{OP}: skip of shape {:?} does not fit input {shape:?} (skip must have input's shape, \
             or [1, seq, hidden] or [seq, hidden] for a 3-D input)",
            skip.shape()
        ));
    }
    let gamma = vector_param(OP, "gamma", gamma, h)?;
    let beta = beta.map(|b| vector_param(OP, "beta", b, h)).transpose()?;
    let bias = bias.map(|b| vector_param(OP, "bias", b, h)).transpose()?;
    let eps = ctx.node.attr_float("epsilon").unwrap_or(1e-12);
    let mut stat_shape = shape.to_vec();
    stat_shape[shape.len() - 1] = 1;
    let bits = T::DTYPE.bits().unwrap_or(64);
    check_out(ctx, OP, shape, bits)?;
    if want[3] {
        check_out(ctx, OP, shape, bits)?;
    }
    if want[1] || want[2] {
        check_out(ctx, OP, &stat_shape, 32)?;
    }

    let xs = row_major(OP, x)?;
    let ss = row_major(OP, skip)?;
    let total = xs.len();
    let mut y = vec![T::ZERO; total];
    let mut sum = if want[3] {
        vec![T::ZERO; total]
    } else {
        Vec::new()
    };
    let rows = total / h;
    let mut means = Vec::with_capacity(if want[1] { rows } else { 0 });
    let mut invs = Vec::with_capacity(if want[2] { rows } else { 0 });
    // At least 1: with no skip rows there are no input rows either.
    let skip_rows = (ss.len() / h).max(1);
    for (r, (yr, xr)) in y.chunks_exact_mut(h).zip(xs.chunks_exact(h)).enumerate() {
        let sr = &ss[(r % skip_rows) * h..][..h];
        match &bias {
            Some(b) => {
                for (((o, &a), &s), &c) in yr.iter_mut().zip(xr).zip(sr).zip(b.iter()) {
                    *o = a + s + c;
                }
            }
            None => {
                for ((o, &a), &s) in yr.iter_mut().zip(xr).zip(sr) {
                    *o = a + s;
                }
            }
        }
        if want[3] {
            sum[r * h..][..h].copy_from_slice(yr);
        }
        let (m, inv) = if T::DTYPE == DType::F64 {
            let (m, inv) = normalize_row::<T, f64>(yr, &gamma, beta.as_deref(), eps as f64);
            (m as f32, inv as f32)
        } else {
            normalize_row::<T, f32>(yr, &gamma, beta.as_deref(), eps)
        };
        if want[1] {
            means.push(m);
        }
        if want[2] {
            invs.push(inv);
        }
    }

    let mut outs = vec![shaped(OP, shape, y)?];
    for (i, stats) in [(1, means), (2, invs)] {
        if i < n_out {
            outs.push(if want[i] {
                shaped(OP, &stat_shape, stats)?
            } else {
                placeholder(DType::F32)
            });
        }
    }
    if n_out > 3 {
        outs.push(if want[3] {
            shaped(OP, shape, sum)?
        } else {
            placeholder(T::DTYPE)
        });
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// Gelu, FastGelu, BiasGelu

/// `0.5 * x * (1 + erf(x / sqrt 2))`, evaluated in float64.
#[inline]
fn gelu_erf<T: Real>(x: T) -> T {
    let v = x.to_f64();
    T::from_f64(0.5 * v * (1.0 + (v * std::f64::consts::FRAC_1_SQRT_2).onnx_erf()))
}

/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`.
#[inline]
fn gelu_tanh<T: Real>(x: T) -> T {
    let c = T::from_f64(0.797_884_560_802_865_4);
    let k = T::from_f64(0.044_715);
    let half = T::from_f64(0.5);
    half * x * (T::ONE + (c * (x + k * x * x * x)).tanh())
}

/// float32 Gelu (erf form) on the branch-free `fastmath` erf, so the loop vectorizes; 1 + erf is
/// computed without cancellation for negative x.
#[inline(always)]
fn gelu_erf_f32(x: f32) -> f32 {
    0.5 * x * fastmath::one_plus_erf(x * std::f32::consts::FRAC_1_SQRT_2)
}

/// float32 FastGelu (tanh form) on the branch-free `fastmath` tanh.
#[inline(always)]
fn gelu_tanh_f32(x: f32) -> f32 {
    let c = 0.797_884_6_f32;
    let k = 0.044_715_f32;
    0.5 * x * fastmath::one_plus_tanh(c * (x + k * x * x * x))
}

/// `f(x + bias)` over `x`, `bias` (when given) 1-D along the last dim; one pass. Generic in `f`
/// so that it inlines into the loop.
fn biased_map<T: Real, F: Fn(T) -> T>(
    ctx: &KernelCtx,
    op: &str,
    x: &ArrayD<T>,
    bias: Option<&ArrayD<T>>,
    f: F,
) -> Result<Tensor, String> {
    let shape = x.shape();
    check_out(ctx, op, shape, T::DTYPE.bits().unwrap_or(64))?;
    let xs = row_major(op, x)?;
    let y: Vec<T> = match bias {
        None => xs.iter().map(|&v| f(v)).collect(),
        Some(b) => {
            let Some(&h) = shape.last() else {
                return Err(format!(
                    "{op}: a bias needs an input of rank 1 or more, got a scalar"
                ));
            };
            let b = vector_param(op, "bias", b, h)?;
            let mut y = vec![T::ZERO; xs.len()];
            if h > 0 {
                for (yr, xr) in y.chunks_exact_mut(h).zip(xs.chunks_exact(h)) {
                    for ((o, &v), &c) in yr.iter_mut().zip(xr).zip(b.iter()) {
                        *o = f(v + c);
                    }
                }
            }
            y
        }
    };
    shaped(op, shape, y)
}

fn activation(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    bias_required: bool,
    f32_fn: impl Fn(f32) -> f32,
    f64_fn: impl Fn(f64) -> f64,
) -> KernelResult {
    let x = input(op, inputs, 0)?;
    if bias_required {
        input(op, inputs, 1)?;
    }
    Ok(vec![match x.dtype() {
        DType::F32 => {
            let b = same_type::<f32>(op, inputs, 1)?;
            biased_map(ctx, op, required::<f32>(op, inputs, 0)?, b, f32_fn)?
        }
        DType::F64 => {
            let b = same_type::<f64>(op, inputs, 1)?;
            biased_map(ctx, op, required::<f64>(op, inputs, 0)?, b, f64_fn)?
        }
        t => return Err(unsupported_type(op, t)),
    }])
}

/// com.microsoft Gelu(X): the exact (erf) form, element-wise.
pub fn gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    if inputs.iter().skip(1).any(|i| i.is_some()) {
        return Err("Gelu: takes one input".to_string());
    }
    activation(ctx, inputs, "Gelu", false, gelu_erf_f32, gelu_erf::<f64>)
}

/// com.microsoft FastGelu(X, bias?): the tanh form of `X + bias`, bias 1-D along the last dim.
pub fn fast_gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    activation(
        ctx,
        inputs,
        "FastGelu",
        false,
        gelu_tanh_f32,
        gelu_tanh::<f64>,
    )
}

/// com.microsoft BiasGelu(A, B): the erf form of `A + B`, B 1-D along the last dim.
pub fn bias_gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    activation(ctx, inputs, "BiasGelu", true, gelu_erf_f32, gelu_erf::<f64>)
}

#[cfg(test)]
#[path = "transformer_tests.rs"]
mod tests;
