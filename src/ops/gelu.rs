//! com.microsoft GELU activations (onnxruntime's docs/ContribOperators.md), one pass each.
//!
//! | op | domain, versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | Gelu | com.microsoft 1 | none | X -> Y: `0.5·x·(1 + erf(x/√2))` |
//! | FastGelu | com.microsoft 1 | none | X, bias? -> Y: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` of X + bias |
//! | BiasGelu | com.microsoft 1 | none | A, B -> C: Gelu's erf form of A + B |
//!
//! (QuickGelu, `x·sigmoid(alpha·x)`, is `activation.rs`'s Swish with another default alpha.)
//! Y has X's type and shape; a bias is 1-D along the last dim. Element types: float32 (on the
//! branch-free `fastmath` erf/tanh, so the loops vectorize) and float64 (erf in float64); every
//! other type is an error naming the op. On WebGPU each is one elementwise dispatch.

use ndarray::ArrayD;

use super::common::{check_out, input, unsupported_type};
use super::elementwise::ErfF64;
use super::fastmath::{self, Lane};
use super::lanes::elements;
use super::lowering::{with_fn, NodeCtx, FAST_GELU, GELU, R};
use super::simd::LaneFn;
use super::transformer::{required, same_type, shaped, vector_param, Real};
use super::{InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

super::plain_ops!(
    /// com.microsoft Gelu: the exact (erf) form.
    Gelu,
    /// com.microsoft FastGelu: the tanh form, of `X + bias` when the bias is given.
    FastGelu,
    /// com.microsoft BiasGelu: the erf form of `A + B`.
    BiasGelu
);

impl Op for Gelu {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        gelu
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        c.ew(1, "gelu_(v0)").map(|l| with_fn(l, GELU))
    }
}

impl Op for FastGelu {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        fast_gelu
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let (n, e) = if c.has_input(1) {
            (2, "gelu_(v0 + v1)")
        } else {
            (1, "gelu_(v0)")
        };
        c.ew(n, e).map(|l| with_fn(l, FAST_GELU))
    }
}

impl Op for BiasGelu {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        bias_gelu
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        c.ew(2, "gelu_(v0 + v1)").map(|l| with_fn(l, GELU))
    }
}

// ---------------------------------------------------------------------------------------------
// Kernels

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
/// The erf form in float32 on any [`Lane`]: `0.5·x·(1 + erf(x/√2))`.
struct ErfForm;
impl LaneFn for ErfForm {
    #[inline(always)]
    fn at<L: Lane>(&self, x: L) -> L {
        let v = x * L::splat(std::f32::consts::FRAC_1_SQRT_2);
        L::splat(0.5) * x * fastmath::one_plus_erf_l(v)
    }
}

/// The tanh form in float32 on any [`Lane`]: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
struct TanhForm;
impl LaneFn for TanhForm {
    #[inline(always)]
    fn at<L: Lane>(&self, x: L) -> L {
        let (c, k) = (L::splat(0.797_884_6), L::splat(0.044_715));
        L::splat(0.5) * x * fastmath::one_plus_tanh_l(c * (x + k * x * x * x))
    }
}

fn biased_map<T: Real + Send + Sync>(
    ctx: &KernelCtx,
    op: &str,
    x: &ArrayD<T>,
    bias: Option<&ArrayD<T>>,
    apply: impl Fn(&mut [T], &[T], Option<&[T]>) + Sync,
) -> Result<Tensor, String> {
    let shape = x.shape();
    check_out(ctx, op, shape, T::DTYPE.bits().unwrap_or(64))?;
    let xs = elements(x);
    let b = match bias {
        None => None,
        Some(b) => {
            let Some(&h) = shape.last() else {
                return Err(format!(
                    "{op}: a bias needs an input of rank 1 or more, got a scalar"
                ));
            };
            Some(vector_param(op, "bias", b, h)?)
        }
    };
    let mut y = vec![T::ZERO; xs.len()];
    // Rows of the bias's length (or runs of 4096 elements without one), split between threads
    // inside a pool of several (`--threads`): each element is computed the same way anywhere.
    let row = match &b {
        Some(b) => b.len(),
        None => 4096,
    };
    if row == 0 || xs.is_empty() {
        return shaped(op, shape, y);
    }
    let run = |rows: std::ops::Range<usize>, ys: &mut [T]| -> Result<(), String> {
        let xs = &xs[rows.start * row..][..ys.len()];
        apply(ys, xs, b.as_deref());
        Ok(())
    };
    // About 16 multiply-adds' worth per element (a tanh or erf polynomial).
    let units = xs.len().div_ceil(row);
    match crate::threads::split(units, xs.len() * 16) {
        Some(parts) => crate::threads::for_each_rows(&mut y, row, parts, run)?,
        None => run(0..units, &mut y)?,
    }
    shaped(op, shape, y)
}

fn activation(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    bias_required: bool,
    f32_fn: &impl LaneFn,
    f64_fn: fn(f64) -> f64,
) -> KernelResult {
    let x = input(op, inputs, 0)?;
    if bias_required {
        input(op, inputs, 1)?;
    }
    Ok(vec![match x.dtype() {
        DType::F32 => {
            let b = same_type::<f32>(op, inputs, 1)?;
            // The widest vectors the CPU has (`simd`), or four lanes at a time in the wasm
            // build (`simd::map_biased`): the erf and tanh forms are branch-free arithmetic.
            let apply = |ys: &mut [f32], xs: &[f32], b: Option<&[f32]>| {
                super::simd::widest(
                    #[cfg_attr(target_arch = "x86_64", inline(always))]
                    || super::simd::map_biased(ys, xs, b, f32_fn),
                )
            };
            biased_map(ctx, op, required::<f32>(op, inputs, 0)?, b, apply)?
        }
        DType::F64 => {
            let b = same_type::<f64>(op, inputs, 1)?;
            let apply = |ys: &mut [f64], xs: &[f64], b: Option<&[f64]>| match b {
                None => ys.iter_mut().zip(xs).for_each(|(o, &v)| *o = f64_fn(v)),
                Some(b) => {
                    for (yr, xr) in ys.chunks_exact_mut(b.len()).zip(xs.chunks_exact(b.len())) {
                        for ((o, &v), &c) in yr.iter_mut().zip(xr).zip(b) {
                            *o = f64_fn(v + c);
                        }
                    }
                }
            };
            biased_map(ctx, op, required::<f64>(op, inputs, 0)?, b, apply)?
        }
        t => return Err(unsupported_type(op, t)),
    }])
}

/// com.microsoft Gelu(X): the exact (erf) form, element-wise.
pub fn gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    if inputs.iter().skip(1).any(|i| i.is_some()) {
        return Err("Gelu: takes one input".to_string());
    }
    activation(ctx, inputs, "Gelu", false, &ErfForm, gelu_erf::<f64>)
}

/// com.microsoft FastGelu(X, bias?): the tanh form of `X + bias`, bias 1-D along the last dim.
pub fn fast_gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    activation(ctx, inputs, "FastGelu", false, &TanhForm, gelu_tanh::<f64>)
}

/// com.microsoft BiasGelu(A, B): the erf form of `A + B`, B 1-D along the last dim.
pub fn bias_gelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    activation(ctx, inputs, "BiasGelu", true, &ErfForm, gelu_erf::<f64>)
}
