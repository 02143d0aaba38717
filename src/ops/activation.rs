//! ai.onnx activations (element-wise; output type and shape are X's).
//!
//! | op | versions | attributes (default) | y = |
//! |---|---|---|---|
//! | Clip | 6-10 | `min` (-3.4028234663852886e38), `max` (3.4028234663852886e38) | min(max(x, min), max); T float |
//! | Clip | 11- (12: integer T; 13: bfloat16) | none; optional inputs `min`, `max` (scalars of T) | as above, an absent bound is none |
//! | LeakyRelu | 6- (16: bfloat16) | `alpha` (0.01) | x > 0 ? x : alpha·x |
//! | PRelu | 7- (9: int32/int64/uint32/uint64; 16: bfloat16) | none; input `slope` broadcast unidirectionally to X | x > 0 ? x : slope·x |
//! | Elu | 6- (22: bfloat16) | `alpha` (1.0) | x > 0 ? x : alpha·(exp(x) - 1) |
//! | Selu | 6- (22: bfloat16) | `alpha` (1.67326319217681884765625), `gamma` (1.05070102214813232421875) | gamma·(x > 0 ? x : alpha·(exp(x) - 1)) |
//! | Celu | 12- (28: float16, bfloat16, double) | `alpha` (1.0) | max(0, x) + min(0, alpha·(exp(x/alpha) - 1)) |
//! | HardSigmoid | 6- (22: bfloat16) | `alpha` (0.2), `beta` (0.5) | max(0, min(1, alpha·x + beta)) |
//! | HardSwish | 14- (22: bfloat16) | none | x·HardSigmoid(x) with alpha 1/6, beta 0.5 |
//! | Softplus | 1- (22: bfloat16) | none | ln(1 + exp(x)) |
//! | Softsign | 1- (22: bfloat16) | none | x / (1 + \|x\|) |
//! | Mish | 18- (22: bfloat16) | none | x·tanh(Softplus(x)) |
//! | ThresholdedRelu | 10- (22: bfloat16) | `alpha` (1.0) | x > alpha ? x : 0 |
//! | Shrink | 9- | `lambd` (0.5), `bias` (0.0) | x < -lambd ? x + bias : x > lambd ? x - bias : 0; T float or integer (computed in float64, truncated) |
//! | Gelu | 20- | `approximate` ("none"; or "tanh") | 0.5·x·(1 + erf(x/√2)); tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) |
//! | Swish | 24- | `alpha` (1.0) | x·sigmoid(alpha·x) |
//!
//! T is float (float32 and float64 here; the executor widens float16/bfloat16) unless the row
//! says otherwise. Versions 1 (whose `consumed_inputs` only mattered to old runtimes; Selu 1 also
//! had other defaults) are not covered, and version 6 of PRelu (another broadcasting rule)
//! neither. The later versions listed only widened the type lists, except Clip 11 (bounds
//! moved from attributes to inputs). NaN propagates through every max/min (numpy's
//! `maximum`/`minimum`). Softplus is computed as max(x, 0) + ln(1 + exp(-|x|)), which neither
//! overflows nor loses small results. On WebGPU every op but Clip with only a `max` input is
//! one float32 elementwise dispatch.

use ndarray::ArrayD;

use super::broadcast::{binary_map, check_unidirectional};
use super::common::input;
use super::gelu;
use super::lowering::{with_fn, NodeCtx, Ty, FAST_GELU, GELU};
use super::math::{float_unary_ops, max_nan, min_nan, per_type, typed, Elem, Fp};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type R<T> = Result<T, String>;

/// max(0, min(1, v)), NaN propagating.
#[inline(always)]
fn clamp01<T: Fp>(v: T) -> T {
    max_nan(min_nan(v, T::ONE), T::ZERO)
}

/// ln(1 + exp(x)) without overflow: max(x, 0) + ln(1 + exp(-|x|)).
#[inline(always)]
fn softplus<T: Fp>(x: T) -> T {
    max_nan(x, T::ZERO) + (-x.abs()).exp().ln_1p()
}

/// A float32-only elementwise WGSL expression of inputs `0..n` (the GPU has no float64).
fn float_ew(c: &NodeCtx, n: usize, expr: &str) -> R<Lowered> {
    if c.ty(0)? != Ty::F32 {
        return Err(format!("{} is float32-only on webgpu", c.node.op_type));
    }
    c.ew(n, expr)
}

/// A float attribute as a WGSL literal (parenthesized, so a sign cannot bind elsewhere).
fn lit(v: f32) -> R<String> {
    if v.is_finite() {
        Ok(format!("({v:?})"))
    } else {
        Err(format!("attribute value {v} has no webgpu literal"))
    }
}

float_unary_ops! {
    LeakyRelu { alpha: 0.01 } |s, x| if x > T::ZERO { x } else { T::of(s.alpha) * x },
        wgsl: |s, c| float_ew(c, 1, &format!("select({} * v0, v0, v0 > 0.0)", lit(s.alpha)?));
    Elu { alpha: 1.0 } |s, x| if x > T::ZERO { x } else { T::of(s.alpha) * x.exp_m1() },
        wgsl: |s, c| float_ew(c, 1, &format!(
            "select({} * (exp(v0) - 1.0), v0, v0 > 0.0)", lit(s.alpha)?));
    Selu { alpha: 1.673_263_2, gamma: 1.050_701 }
        |s, x| T::of(s.gamma) * if x > T::ZERO { x } else { T::of(s.alpha) * x.exp_m1() },
        wgsl: |s, c| float_ew(c, 1, &format!(
            "{} * select({} * (exp(v0) - 1.0), v0, v0 > 0.0)", lit(s.gamma)?, lit(s.alpha)?));
    Celu { alpha: 1.0 } |s, x| {
            let a = T::of(s.alpha);
            max_nan(x, T::ZERO) + min_nan(a * (x / a).exp_m1(), T::ZERO)
        },
        wgsl: |s, c| {
            let a = lit(s.alpha)?;
            float_ew(c, 1, &format!("max(v0, 0.0) + min({a} * (exp(v0 / {a}) - 1.0), 0.0)"))
        };
    HardSigmoid { alpha: 0.2, beta: 0.5 } |s, x| clamp01(T::of(s.alpha) * x + T::of(s.beta)),
        wgsl: |s, c| float_ew(c, 1, &format!(
            "clamp({} * v0 + {}, 0.0, 1.0)", lit(s.alpha)?, lit(s.beta)?));
    HardSwish {} |_s, x| x * clamp01(T::of(1.0 / 6.0) * x + T::of(0.5)),
        wgsl: |_s, c| float_ew(c, 1, "v0 * clamp(v0 / 6.0 + 0.5, 0.0, 1.0)");
    Softplus {} |_s, x| softplus(x),
        wgsl: |_s, c| float_ew(c, 1, "max(v0, 0.0) + log(1.0 + exp(-abs(v0)))");
    Softsign {} |_s, x| x / (T::ONE + x.abs()),
        wgsl: |_s, c| float_ew(c, 1, "v0 / (1.0 + abs(v0))");
    Mish {} |_s, x| x * softplus(x).tanh(),
        wgsl: |_s, c| float_ew(c, 1, "v0 * tanh_(max(v0, 0.0) + log(1.0 + exp(-abs(v0))))");
    ThresholdedRelu { alpha: 1.0 } |s, x| if x > T::of(s.alpha) { x } else { T::ZERO },
        wgsl: |s, c| float_ew(c, 1, &format!("select(0.0, v0, v0 > {})", lit(s.alpha)?));
    Swish { alpha: 1.0 } |s, x| x / (T::ONE + (-(T::of(s.alpha) * x)).exp()),
        wgsl: |s, c| float_ew(c, 1, &format!("v0 / (1.0 + exp(-{} * v0))", lit(s.alpha)?));
}

// ---------------------------------------------------------------------------------------------
// Clip

#[derive(Debug)]
pub struct Clip {
    /// Opsets 6-10: the `min`/`max` attributes. From 11 the bounds are inputs 1 and 2.
    pub attr_bounds: Option<(f32, f32)>,
}

impl Clip {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let attr_bounds = if a.opset < 11 {
            Some((a.float("min", -f32::MAX)?, a.float("max", f32::MAX)?))
        } else {
            None
        };
        Ok(Box::new(Clip { attr_bounds }))
    }
}

impl Op for Clip {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        clip
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        match self.attr_bounds {
            Some((lo, hi)) => float_ew(c, 1, &format!("min(max(v0, {}), {})", lit(lo)?, lit(hi)?)),
            None if c.has_input(2) && c.has_input(1) => float_ew(c, 3, "min(max(v0, v1), v2)"),
            None if c.has_input(2) => Err("Clip with a max but no min has no webgpu kernel".into()),
            None => float_ew(
                c,
                1 + c.has_input(1) as usize,
                ["v0", "max(v0, v1)"][c.has_input(1) as usize],
            ),
        }
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// Clip's bound input `i` (`None` when omitted): a scalar of X's type.
fn bound<T: Elem>(inputs: &[Option<&Tensor>], i: usize, what: &str) -> R<Option<T>> {
    if inputs.get(i).copied().flatten().is_none() {
        return Ok(None);
    }
    let b = typed::<T>("Clip", inputs, i)?;
    match b.iter().next() {
        Some(&v) if b.len() == 1 && b.ndim() <= 1 => Ok(Some(v)),
        _ => Err(format!(
            "Clip: '{what}' must be a scalar, got shape {:?}",
            b.shape()
        )),
    }
}

fn clip_typed<T: Elem>(c: &Clip, x: &ArrayD<T>, inputs: &[Option<&Tensor>]) -> R<ArrayD<T>> {
    let (lo, hi) = match c.attr_bounds {
        Some((lo, hi)) => (Some(T::from_f64(lo as f64)), Some(T::from_f64(hi as f64))),
        None => (bound::<T>(inputs, 1, "min")?, bound::<T>(inputs, 2, "max")?),
    };
    Ok(x.mapv(|v| {
        let v = lo.map_or(v, |l| max_nan(v, l));
        hi.map_or(v, |h| min_nan(v, h))
    }))
}

fn clip(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Clip";
    let c = ctx.attrs::<Clip>()?;
    let x = input(OP, inputs, 0)?;
    Ok(vec![
        per_type!(OP, x, [F32, F64, I32, I64], a => clip_typed(c, a, inputs)?),
    ])
}

// ---------------------------------------------------------------------------------------------
// PRelu

super::plain_ops!(PRelu);

impl Op for PRelu {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        prelu
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        float_ew(c, 2, "select(v0 * v1, v0, v0 > 0.0)")
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn prelu_typed<T: Elem>(
    ctx: &KernelCtx,
    x: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    const OP: &str = "PRelu";
    let slope = typed::<T>(OP, inputs, 1)?;
    // The output is X's shape: the slope broadcasts to it, never the other way.
    check_unidirectional(OP, "slope", slope.shape(), x.shape())?;
    binary_map(
        ctx,
        OP,
        x,
        slope,
        |v, s| if v > T::ZERO { v } else { v.wmul(s) },
    )
}

fn prelu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "PRelu";
    let x = input(OP, inputs, 0)?;
    Ok(vec![
        per_type!(OP, x, [F32, F64, I32, I64], a => prelu_typed(ctx, a, inputs)?),
    ])
}

// ---------------------------------------------------------------------------------------------
// Shrink

#[derive(Debug)]
pub struct Shrink {
    pub lambd: f32,
    pub bias: f32,
}

impl Shrink {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(Shrink {
            lambd: a.float("lambd", 0.5)?,
            bias: a.float("bias", 0.0)?,
        }))
    }
}

impl Op for Shrink {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        shrink
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let (l, b) = (lit(self.lambd)?, lit(self.bias)?);
        float_ew(
            c,
            1,
            &format!("select(select(0.0, v0 - {b}, v0 > {l}), v0 + {b}, v0 < -{l})"),
        )
    }
}

/// In float64, as the reference computes integer X (float X gives its own type's result: the
/// sum of two float32 values is exact in float64).
fn shrink_typed<T: Elem>(s: &Shrink, x: &ArrayD<T>) -> ArrayD<T> {
    let (l, b) = (s.lambd as f64, s.bias as f64);
    x.mapv(|v| {
        let f = v.to_f64();
        T::from_f64(if f < -l {
            f + b
        } else if f > l {
            f - b
        } else {
            0.0
        })
    })
}

fn shrink(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Shrink";
    let s = ctx.attrs::<Shrink>()?;
    let x = input(OP, inputs, 0)?;
    Ok(vec![
        per_type!(OP, x, [F32, F64, I32, I64], a => shrink_typed(s, a)),
    ])
}

// ---------------------------------------------------------------------------------------------
// Gelu (ai.onnx)

/// ai.onnx Gelu: com.microsoft Gelu's erf form, or with `approximate = "tanh"` FastGelu's.
#[derive(Debug)]
pub struct Gelu {
    pub tanh: bool,
}

impl Gelu {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let tanh = match a.string("approximate")?.as_deref() {
            None | Some("none") => false,
            Some("tanh") => true,
            Some(o) => {
                return Err(format!(
                    "attribute 'approximate' must be 'none' or 'tanh', got '{o}'"
                ))
            }
        };
        Ok(Box::new(Gelu { tanh }))
    }
}

impl Op for Gelu {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        if self.tanh {
            gelu_tanh
        } else {
            gelu::gelu
        }
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        float_ew(c, 1, "gelu_(v0)").map(|l| with_fn(l, if self.tanh { FAST_GELU } else { GELU }))
    }
}

fn gelu_tanh(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    if inputs.iter().skip(1).any(|i| i.is_some()) {
        return Err("Gelu: takes one input".to_string());
    }
    gelu::activation(
        ctx,
        inputs,
        "Gelu",
        false,
        gelu::gelu_tanh_f32,
        gelu::gelu_tanh::<f64>,
    )
}

#[cfg(test)]
#[path = "activation_tests.rs"]
mod tests;
