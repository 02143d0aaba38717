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
//! | Shrink | 9- | `lambd` (0.5), `bias` (0.0) | x < -lambd ? x + bias : x > lambd ? x - bias : 0; T float or integer (integers computed in float64, truncated) |
//! | Gelu | 20- | `approximate` ("none"; or "tanh") | 0.5·x·(1 + erf(x/√2)); tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) |
//! | Swish | 24- | `alpha` (1.0) | x·sigmoid(alpha·x) |
//! | QuickGelu | com.microsoft 1 | `alpha` (1.702) | x·sigmoid(alpha·x) |
//!
//! T is float (float32 and float64 here; the executor widens float16/bfloat16) unless the row
//! says otherwise. Versions 1 (whose `consumed_inputs` only mattered to old runtimes; Selu 1 also
//! had other defaults) are not covered, and version 6 of PRelu (another broadcasting rule)
//! neither. The later versions listed only widened the type lists, except Clip 11 (bounds
//! moved from attributes to inputs); the kernels accept the types a later version added at
//! every version (float64 Celu before 28, integer Clip before 12, integer PRelu before 9). NaN
//! propagates through every max/min (numpy's `maximum`/`minimum`). Softplus is computed as
//! max(x, 0) + ln(1 + exp(-|x|)), which neither overflows nor loses small results.
//!
//! Code size (the wasm budget) shapes the kernels: every float function here and math.rs's
//! trigonometry is a value of [`Act`], parsed into the one op type [`FloatFn`]; the op names in
//! the registry are handles whose `parse` builds that value. The cheap arithmetic ones
//! (LeakyRelu, HardSigmoid, HardSwish, ThresholdedRelu, Shrink, Clip, Softsign) each get a slice
//! loop of their own per element type, which vectorizes; the ones calling libm share one loop
//! per element type that branches on the `Act` per element (beside the call the branch is
//! cheap). Float Clip is an `Act` too; integer Clip (two passes, max then min) and PRelu go
//! through math.rs's shared binary loop, which still branches per element (Max takes about 2x
//! Add's time); ai.onnx Gelu runs gelu.rs's kernels. On WebGPU every activation is one float32
//! elementwise dispatch (Clip with a `max` but no `min` input has none).

use ndarray::{ArrayD, IxDyn};

use super::broadcast::check_unidirectional;
use super::common::{input, unsupported_type};
use super::gelu;
use super::lowering::{with_fn, NodeCtx, Ty, FAST_GELU, GELU};
use super::math::{arith_map, max_nan, min_nan, per_type, typed, Arith, Elem, Fp};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type R<T> = Result<T, String>;

/// A float element function with its parameters (attributes as parsed).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    LeakyRelu {
        alpha: f32,
    },
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Celu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Softplus,
    Softsign,
    Mish,
    ThresholdedRelu {
        alpha: f32,
    },
    Swish {
        alpha: f32,
    },
    Shrink {
        lambd: f32,
        bias: f32,
    },
    /// Clip of a float X (the bounds in float64 hold either float type's exactly).
    Clip {
        lo: f64,
        hi: f64,
    },
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
}

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

/// `exp(x) - 1` times `a` where x <= 0, else x (Elu and Selu's inner function).
#[inline(always)]
fn elu<T: Fp>(x: T, a: f32) -> T {
    if x > T::ZERO {
        x
    } else {
        T::of(a) * x.exp_m1()
    }
}

impl Act {
    #[inline(always)]
    pub(super) fn eval<T: Fp>(self, x: T) -> T {
        let zero = T::ZERO;
        match self {
            Act::LeakyRelu { alpha } => {
                if x > zero {
                    x
                } else {
                    T::of(alpha) * x
                }
            }
            Act::Elu { alpha } => elu(x, alpha),
            Act::Selu { alpha, gamma } => T::of(gamma) * elu(x, alpha),
            Act::Celu { alpha } => {
                let a = T::of(alpha);
                max_nan(x, zero) + min_nan(a * (x / a).exp_m1(), zero)
            }
            Act::HardSigmoid { alpha, beta } => clamp01(T::of(alpha) * x + T::of(beta)),
            Act::HardSwish => x * clamp01(T::of(1.0 / 6.0) * x + T::of(0.5)),
            Act::Softplus => softplus(x),
            Act::Softsign => x / (T::ONE + x.abs()),
            Act::Mish => x * softplus(x).tanh(),
            Act::ThresholdedRelu { alpha } => {
                if x > T::of(alpha) {
                    x
                } else {
                    zero
                }
            }
            // The gate of every SwiGLU MLP: float32 takes fastmath's vectorizing exp (3e-7
            // relative), as Sigmoid does, so a fused SiLU and Sigmoid · x agree.
            Act::Swish { alpha } => x / (T::ONE + (-(T::of(alpha) * x)).fast_exp()),
            Act::Shrink { lambd, bias } => {
                let (l, b) = (T::of(lambd), T::of(bias));
                if x < -l {
                    x + b
                } else if x > l {
                    x - b
                } else {
                    zero
                }
            }
            Act::Clip { lo, hi } => min_nan(max_nan(x, T::from_f64(lo)), T::from_f64(hi)),
            Act::Tan => x.tan(),
            Act::Asin => x.asin(),
            Act::Acos => x.acos(),
            Act::Atan => x.atan(),
            Act::Sinh => x.sinh(),
            Act::Cosh => x.cosh(),
            Act::Asinh => x.asinh(),
            Act::Acosh => x.acosh(),
            Act::Atanh => x.atanh(),
        }
    }

    /// The float32 WGSL expression of `v0` (`None`: no WebGPU kernel).
    pub(crate) fn wgsl(self) -> R<Option<String>> {
        let l = lit;
        Ok(Some(match self {
            Act::LeakyRelu { alpha } => format!("select({} * v0, v0, v0 > 0.0)", l(alpha)?),
            Act::Elu { alpha } => format!("select({} * (exp(v0) - 1.0), v0, v0 > 0.0)", l(alpha)?),
            Act::Selu { alpha, gamma } => format!(
                "{} * select({} * (exp(v0) - 1.0), v0, v0 > 0.0)",
                l(gamma)?,
                l(alpha)?
            ),
            Act::Celu { alpha } => {
                let a = l(alpha)?;
                format!("max(v0, 0.0) + min({a} * (exp(v0 / {a}) - 1.0), 0.0)")
            }
            Act::HardSigmoid { alpha, beta } => {
                format!("clamp({} * v0 + {}, 0.0, 1.0)", l(alpha)?, l(beta)?)
            }
            Act::HardSwish => "v0 * clamp(v0 / 6.0 + 0.5, 0.0, 1.0)".into(),
            Act::Softplus => "max(v0, 0.0) + log(1.0 + exp(-abs(v0)))".into(),
            Act::Softsign => "v0 / (1.0 + abs(v0))".into(),
            Act::Mish => "v0 * tanh_(max(v0, 0.0) + log(1.0 + exp(-abs(v0))))".into(),
            Act::ThresholdedRelu { alpha } => format!("select(0.0, v0, v0 > {})", l(alpha)?),
            Act::Swish { alpha } => format!("v0 / (1.0 + exp(-{} * v0))", l(alpha)?),
            Act::Shrink { lambd, bias } => {
                let (l, b) = (l(lambd)?, l(bias)?);
                format!("select(select(0.0, v0 - {b}, v0 > {l}), v0 + {b}, v0 < -{l})")
            }
            Act::Clip { lo, hi } => format!("min(max(v0, {}), {})", l(lo as f32)?, l(hi as f32)?),
            _ => return Ok(None),
        }))
    }
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

/// Every op whose value is one [`Act`] of X.
#[derive(Debug)]
pub struct FloatFn(pub Act);

impl Op for FloatFn {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        float_fn
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        match self.0.wgsl()? {
            Some(e) => float_ew(c, 1, &e),
            None => Err(super::lowering::no_kernel(c)),
        }
    }
}

/// `f` of every element of `a`, in `a`'s shape: a plain slice loop over the contiguous data
/// (which LLVM vectorizes, for the widest vectors the CPU has), after a copy to standard layout
/// where `a` is in another. The copy is generic over `T` only: a fallback through ndarray's
/// `mapv` was one more ~900-byte function per closure in the wasm build (about 60 of them).
pub(super) fn map_elems<T: Copy, U>(a: &ArrayD<T>, f: impl Fn(T) -> U) -> ArrayD<U> {
    let a = a.as_standard_layout();
    let s = a.as_slice().expect("standard layout is contiguous");
    ArrayD::from_shape_vec(a.raw_dim(), map_slice(s, &f)).expect("one element per element")
}

/// `v = f(v)` for every element of `a`, over the contiguous data (copied to standard layout
/// first where `a` is in another).
pub(super) fn map_elems_in_place<T: Copy>(a: &mut ArrayD<T>, f: impl Fn(T) -> T) {
    if a.as_slice().is_none() {
        *a = a.as_standard_layout().into_owned();
    }
    let s = a.as_slice_mut().expect("standard layout is contiguous");
    map_slice_in_place(s, &f)
}

/// `f` of each element of `s`, in a new vector, compiled for the widest vectors the CPU has
/// (`simd`).
fn map_slice<T: Copy, U, F: Fn(T) -> U>(s: &[T], f: &F) -> Vec<U> {
    super::simd::widest(
        #[cfg_attr(target_arch = "x86_64", inline(always))]
        || {
            let mut v = Vec::with_capacity(s.len());
            for (d, &x) in v.spare_capacity_mut().iter_mut().zip(s) {
                d.write(f(x));
            }
            // SAFETY: the loop wrote the first `s.len()` elements (the capacity is that).
            unsafe { v.set_len(s.len()) };
            v
        },
    )
}

/// `v = f(v)` over `s`, compiled for the widest vectors the CPU has (`simd`).
fn map_slice_in_place<T: Copy, F: Fn(T) -> T>(s: &mut [T], f: &F) {
    super::simd::widest(
        #[cfg_attr(target_arch = "x86_64", inline(always))]
        || s.iter_mut().for_each(|v| *v = f(*v)),
    )
}

/// `$go` (a macro taking a closure) called with `act.eval`, the cheap arithmetic
/// [`Act`]s (and Swish, whose float32 exp is fastmath's branch-free one) each with a closure of
/// its own, in which the variant is a constant: their loops
/// branch no more per element and vectorize (same formula, same bits). The functions of libm
/// calls share one closure that branches per element (a branch is cheap beside the call, and
/// one loop for all keeps the wasm small).
macro_rules! with_act_fn {
    ($act:expr, $go:ident) => {
        with_act_fn!(@arms $act, $go; LeakyRelu { alpha }, HardSigmoid { alpha, beta },
            HardSwish, ThresholdedRelu { alpha }, Shrink { lambd, bias }, Clip { lo, hi },
            Softsign, Swish { alpha })
    };
    (@arms $act:expr, $go:ident; $($v:ident $({ $($f:ident),* })?),*) => {
        match $act {
            $(Act::$v $({ $($f),* })? => $go!(move |x| Act::$v $({ $($f),* })?.eval(x)),)*
            act => $go!(move |x| act.eval(x)),
        }
    };
}

/// `act` of every element of float X (float32 computed in float32).
fn act_map(op: &str, act: Act, x: &Tensor) -> KernelResult {
    fn map<T: Fp + Send + Sync>(a: &ArrayD<T>, act: Act) -> ArrayD<T> {
        // Swish (QuickGelu, SiLU: an exp and a division per element, about 16 multiply-adds'
        // worth) splits between threads where there is enough of it.
        if let Act::Swish { alpha } = act {
            if let Some(y) = split_map(a, move |x| Act::Swish { alpha }.eval(x), 16) {
                return y;
            }
        }
        macro_rules! go {
            ($f:expr) => {
                map_elems(a, $f)
            };
        }
        with_act_fn!(act, go)
    }
    Ok(vec![per_type!(op, x, [F32, F64], a => map(a, act))])
}

/// `f` of every element of `a` in runs of 4096 split between threads inside a pool of several
/// (`--threads`), for `cost` multiply-adds' worth per element (`threads::split`); None (nothing
/// done) where it would run on this thread. Each element is computed the same way anywhere.
fn split_map<T: Fp + Send + Sync>(
    a: &ArrayD<T>,
    f: impl Fn(T) -> T + Sync,
    cost: usize,
) -> Option<ArrayD<T>> {
    const RUN: usize = 4096;
    let len = a.len();
    let parts = crate::threads::split(len.div_ceil(RUN), len.saturating_mul(cost))?;
    let a = a.as_standard_layout();
    let s = a.as_slice()?;
    let mut y = vec![T::ZERO; len];
    let run = |runs: std::ops::Range<usize>, ys: &mut [T]| -> Result<(), String> {
        let xs = &s[runs.start * RUN..][..ys.len()];
        super::simd::widest(
            #[cfg_attr(target_arch = "x86_64", inline(always))]
            || ys.iter_mut().zip(xs).for_each(|(o, &x)| *o = f(x)),
        );
        Ok(())
    };
    crate::threads::for_each_rows(&mut y, RUN, parts, run).ok()?;
    ArrayD::from_shape_vec(a.raw_dim(), y).ok()
}

/// `act` of every element of `y`, in place (FusedConv's activation).
pub(super) fn act_in_place<T: Fp>(y: &mut ArrayD<T>, act: Act) {
    macro_rules! go {
        ($f:expr) => {
            map_elems_in_place(y, $f)
        };
    }
    with_act_fn!(act, go)
}

fn float_fn(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let op = &ctx.node.op_type;
    act_map(op, ctx.attrs::<FloatFn>()?.0, input(op, inputs, 0)?)
}

/// Declares registry handles of [`FloatFn`] ops: `Name => |attrs| act`, the [`Act`] the node's
/// attributes make.
macro_rules! float_fn_ops {
    ($($(#[$m:meta])* $name:ident => |$a:ident| $act:expr;)*) => {$(
        $(#[$m])*
        pub struct $name;
        impl $name {
            pub fn parse(
                $a: &$crate::ops::Attrs,
            ) -> Result<Box<dyn $crate::ops::Op>, String> {
                Ok(Box::new($crate::ops::activation::FloatFn($act)))
            }
        }
    )*};
}
pub(super) use float_fn_ops;

float_fn_ops! {
    LeakyRelu => |a| Act::LeakyRelu { alpha: a.float("alpha", 0.01)? };
    Elu => |a| Act::Elu { alpha: a.float("alpha", 1.0)? };
    Selu => |a| Act::Selu {
        alpha: a.float("alpha", 1.673_263_2)?,
        gamma: a.float("gamma", 1.050_701)?,
    };
    Celu => |a| Act::Celu { alpha: a.float("alpha", 1.0)? };
    HardSigmoid => |a| Act::HardSigmoid {
        alpha: a.float("alpha", 0.2)?,
        beta: a.float("beta", 0.5)?,
    };
    HardSwish => |_a| Act::HardSwish;
    Softplus => |_a| Act::Softplus;
    Softsign => |_a| Act::Softsign;
    Mish => |_a| Act::Mish;
    ThresholdedRelu => |a| Act::ThresholdedRelu { alpha: a.float("alpha", 1.0)? };
    Swish => |a| Act::Swish { alpha: a.float("alpha", 1.0)? };
    /// com.microsoft QuickGelu (CLIP's GELU approximation; SiLU at alpha 1): Swish's formula.
    QuickGelu => |a| Act::Swish { alpha: a.float("alpha", 1.702)? };
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
        let (min, max) = (c.has_input(1), c.has_input(2));
        match self.attr_bounds {
            Some((lo, hi)) => float_ew(c, 1, &format!("min(max(v0, {}), {})", lit(lo)?, lit(hi)?)),
            None if min && max => float_ew(c, 3, "min(max(v0, v1), v2)"),
            None if min => float_ew(c, 2, "max(v0, v1)"),
            None if max => Err("Clip with a max but no min has no webgpu kernel".into()),
            None => float_ew(c, 1, "v0"),
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

/// Integer Clip: two passes of the shared binary loop, max then min.
fn clip_int<T: Elem>(
    ctx: &KernelCtx,
    c: &Clip,
    x: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    const OP: &str = "Clip";
    let (lo, hi) = match c.attr_bounds {
        Some((lo, hi)) => (Some(T::from_f64(lo as f64)), Some(T::from_f64(hi as f64))),
        None => (bound::<T>(inputs, 1, "min")?, bound::<T>(inputs, 2, "max")?),
    };
    let scalar = |v| ArrayD::from_elem(IxDyn(&[]), v);
    let y = match lo {
        Some(lo) => arith_map(ctx, OP, Arith::Max, x, &scalar(lo))?,
        None => x.clone(),
    };
    match hi {
        Some(hi) => arith_map(ctx, OP, Arith::Min, &y, &scalar(hi)),
        None => Ok(y),
    }
}

/// Float Clip is one pass of [`Act::Clip`] (an absent bound is an infinity).
fn clip(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Clip";
    let c = ctx.attrs::<Clip>()?;
    let x = input(OP, inputs, 0)?;
    if !x.dtype().is_float() {
        return Ok(vec![
            per_type!(OP, x, [I32, I64], a => clip_int(ctx, c, a, inputs)?),
        ]);
    }
    let float_bound = |i, what, none: f64| -> R<f64> {
        let b = match x {
            Tensor::F32(_) => bound::<f32>(inputs, i, what)?.map(f64::from),
            _ => bound::<f64>(inputs, i, what)?,
        };
        Ok(b.unwrap_or(none))
    };
    let (lo, hi) = match c.attr_bounds {
        Some((lo, hi)) => (lo as f64, hi as f64),
        None => (
            float_bound(1, "min", f64::NEG_INFINITY)?,
            float_bound(2, "max", f64::INFINITY)?,
        ),
    };
    act_map(OP, Act::Clip { lo, hi }, x)
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
    arith_map(ctx, OP, Arith::PRelu, x, slope)
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

/// Shrink: [`Act::Shrink`] on floats; on integers (the spec's T has them) in float64, as the
/// reference computes, then truncated.
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
    fn act(&self) -> Act {
        Act::Shrink {
            lambd: self.lambd,
            bias: self.bias,
        }
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
        float_ew(c, 1, &self.act().wgsl()?.unwrap_or_default())
    }
}

fn shrink(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Shrink";
    fn int<T: Elem>(a: &ArrayD<T>, l: f64, b: f64) -> ArrayD<T> {
        a.mapv(|v| {
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
    let s = ctx.attrs::<Shrink>()?;
    let x = input(OP, inputs, 0)?;
    if x.dtype().is_float() {
        return act_map(OP, s.act(), x);
    }
    let (l, b) = (s.lambd as f64, s.bias as f64);
    Ok(vec![per_type!(OP, x, [I32, I64], a => int(a, l, b))])
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
        let f = if self.tanh { FAST_GELU } else { GELU };
        float_ew(c, 1, "gelu_(v0)").map(|l| with_fn(l, f))
    }
}

/// FastGelu without a bias, once what its messages would name FastGelu is checked here.
fn gelu_tanh(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Gelu";
    if inputs.iter().skip(1).any(|i| i.is_some()) {
        return Err(format!("{OP}: takes one input"));
    }
    match input(OP, inputs, 0)? {
        Tensor::F32(_) | Tensor::F64(_) => gelu::fast_gelu(ctx, inputs),
        other => Err(unsupported_type(OP, other.dtype())),
    }
}

#[cfg(test)]
#[path = "activation_tests.rs"]
mod tests;
