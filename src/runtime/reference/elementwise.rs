//! Element-wise kernels: broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow) and unary math.
//! The ONNX versions 13 and 14 (Add..Div, Relu) and 15 (Pow) only widened the type lists, so no
//! kernel here branches on the opset.

use ndarray::ArrayD;

use super::broadcast::binary_map;
use super::common::{input, type_mismatch, unsupported_type, Num};
use super::fastmath;
use super::{KernelCtx, KernelResult};
use crate::ir::expr::{BinaryOp, UnaryOp};
use crate::tensor::Tensor;

/// The float32 function of each unary op: the one-op kernels below and FusedElementwise
/// (fused_elementwise.rs) both compute through it, so a fused chain equals the chained kernels
/// bit for bit. tanh and erf are the branch-free fastmath forms (3e-7 relative, 2e-7 absolute
/// for erf), several times faster than libm's tanhf and the float64 erf series.
#[inline(always)]
pub(super) fn unary_f32(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Erf => fastmath::erf(x),
        UnaryOp::Tanh => fastmath::tanh(x),
        // exp(-x) overflows to +inf for very negative x, which still gives the right limit 0.
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        // `x < 0 ? 0 : x` keeps NaN as NaN (max(x, 0) would turn it into 0).
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
    }
}

/// The float32 function of each binary op, shared as `unary_f32` is.
#[inline(always)]
pub(super) fn binary_f32(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => AddOp::apply(a, b),
        BinaryOp::Sub => SubOp::apply(a, b),
        BinaryOp::Mul => MulOp::apply(a, b),
        BinaryOp::Div => DivOp::apply(a, b),
        BinaryOp::Pow => a.powf(b),
    }
}

/// A binary arithmetic op over one numeric type (both inputs have the same type: spec's `T`).
trait BinOp {
    const NAME: &'static str;
    /// Integer division by zero has no value: reject it before computing.
    const REJECT_INT_ZERO_DIVISOR: bool = false;
    fn apply<T: Num>(a: T, b: T) -> T;
}

struct AddOp;
impl BinOp for AddOp {
    const NAME: &'static str = "Add";
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wadd(b)
    }
}

struct SubOp;
impl BinOp for SubOp {
    const NAME: &'static str = "Sub";
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wsub(b)
    }
}

struct MulOp;
impl BinOp for MulOp {
    const NAME: &'static str = "Mul";
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wmul(b)
    }
}

struct DivOp;
impl BinOp for DivOp {
    const NAME: &'static str = "Div";
    const REJECT_INT_ZERO_DIVISOR: bool = true;
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wdiv(b)
    }
}

fn arith_typed<O: BinOp, T: Num>(
    ctx: &KernelCtx,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> Result<ArrayD<T>, String> {
    // Every divisor element is used unless `a` is empty.
    if O::REJECT_INT_ZERO_DIVISOR && T::IS_INT && !a.is_empty() && b.iter().any(|&v| v == T::ZERO) {
        return Err(format!("{}: integer division by zero", O::NAME));
    }
    binary_map(ctx, O::NAME, a, b, O::apply::<T>)
}

/// Opsets before 7 broadcast by `broadcast`/`axis` attributes (axis-aligned, not numpy's
/// right-aligned rule). Refused rather than computed the modern way, which would be wrong.
pub(super) fn refuse_legacy_broadcast(ctx: &KernelCtx, op: &str) -> Result<(), String> {
    if ctx.node.attr("broadcast").is_some() || (ctx.opset < 7 && ctx.node.attr("axis").is_some()) {
        return Err(format!(
            "{op}: the legacy (opset < 7) broadcast/axis attributes are not supported"
        ));
    }
    Ok(())
}

fn arith<O: BinOp>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    refuse_legacy_broadcast(ctx, O::NAME)?;
    let a = input(O::NAME, inputs, 0)?;
    let b = input(O::NAME, inputs, 1)?;
    let out = match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(arith_typed::<O, f32>(ctx, a, b)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(arith_typed::<O, f64>(ctx, a, b)?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(arith_typed::<O, i32>(ctx, a, b)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(arith_typed::<O, i64>(ctx, a, b)?),
        (a, b) if a.dtype() == b.dtype() => return Err(unsupported_type(O::NAME, a.dtype())),
        (a, b) => return Err(type_mismatch(O::NAME, a.dtype(), b.dtype())),
    };
    Ok(vec![out])
}

pub fn add(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    arith::<AddOp>(ctx, inputs)
}

pub fn sub(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    arith::<SubOp>(ctx, inputs)
}

pub fn mul(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    arith::<MulOp>(ctx, inputs)
}

pub fn div(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    arith::<DivOp>(ctx, inputs)
}

/// `base^exp` for integers by squaring, wrapping on overflow. `exp >= 0`.
fn ipow<T: Num>(base: T, exp: i64) -> T {
    let (mut acc, mut b, mut e) = (T::ONE, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wmul(b);
        }
        b = b.wmul(b);
        e >>= 1;
    }
    acc
}

/// Pow: output has the base's type (`T`); the exponent (`T1`) may be any numeric type. Float
/// exponents of an integer base go through f64 and truncate, as a C cast would.
pub fn pow(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Pow";
    refuse_legacy_broadcast(ctx, OP)?;
    let x = input(OP, inputs, 0)?;
    let y = input(OP, inputs, 1)?;
    if matches!(x, Tensor::I32(_) | Tensor::I64(_)) {
        let negative = match y {
            Tensor::I32(e) => e.iter().any(|&v| v < 0),
            Tensor::I64(e) => e.iter().any(|&v| v < 0),
            _ => false,
        };
        // numpy refuses this too: the result is not an integer.
        if negative && !x.is_empty() {
            return Err(format!(
                "{OP}: integer base {} with a negative integer exponent",
                x.dtype()
            ));
        }
    }
    let out = match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(binary_map(ctx, OP, a, b, |p, q| {
            binary_f32(BinaryOp::Pow, p, q)
        })?),
        (Tensor::F32(a), Tensor::F64(b)) => Tensor::F32(binary_map(ctx, OP, a, b, |p, q: f64| {
            (p as f64).powf(q) as f32
        })?),
        (Tensor::F32(a), Tensor::I32(b)) => {
            Tensor::F32(binary_map(ctx, OP, a, b, |p: f32, q| p.powf(q as f32))?)
        }
        (Tensor::F32(a), Tensor::I64(b)) => {
            Tensor::F32(binary_map(ctx, OP, a, b, |p: f32, q| p.powf(q as f32))?)
        }
        (Tensor::F64(a), Tensor::F32(b)) => {
            Tensor::F64(binary_map(ctx, OP, a, b, |p: f64, q| p.powf(q as f64))?)
        }
        (Tensor::F64(a), Tensor::F64(b)) => {
            Tensor::F64(binary_map(ctx, OP, a, b, |p: f64, q| p.powf(q))?)
        }
        (Tensor::F64(a), Tensor::I32(b)) => {
            Tensor::F64(binary_map(ctx, OP, a, b, |p: f64, q| p.powf(q as f64))?)
        }
        (Tensor::F64(a), Tensor::I64(b)) => {
            Tensor::F64(binary_map(ctx, OP, a, b, |p: f64, q| p.powf(q as f64))?)
        }
        (Tensor::I32(a), Tensor::I32(b)) => {
            Tensor::I32(binary_map(ctx, OP, a, b, |p: i32, q| ipow(p, q as i64))?)
        }
        (Tensor::I32(a), Tensor::I64(b)) => {
            Tensor::I32(binary_map(ctx, OP, a, b, |p: i32, q| ipow(p, q))?)
        }
        (Tensor::I64(a), Tensor::I32(b)) => {
            Tensor::I64(binary_map(ctx, OP, a, b, |p: i64, q| ipow(p, q as i64))?)
        }
        (Tensor::I64(a), Tensor::I64(b)) => {
            Tensor::I64(binary_map(ctx, OP, a, b, |p: i64, q| ipow(p, q))?)
        }
        (Tensor::I32(a), Tensor::F32(b)) => Tensor::I32(binary_map(ctx, OP, a, b, |p, q: f32| {
            (p as f64).powf(q as f64) as i32
        })?),
        (Tensor::I32(a), Tensor::F64(b)) => Tensor::I32(binary_map(ctx, OP, a, b, |p, q: f64| {
            (p as f64).powf(q) as i32
        })?),
        (Tensor::I64(a), Tensor::F32(b)) => Tensor::I64(binary_map(ctx, OP, a, b, |p, q: f32| {
            (p as f64).powf(q as f64) as i64
        })?),
        (Tensor::I64(a), Tensor::F64(b)) => Tensor::I64(binary_map(ctx, OP, a, b, |p, q: f64| {
            (p as f64).powf(q) as i64
        })?),
        (x, y) => {
            return Err(format!(
                "{OP}: unsupported base/exponent types {} and {}",
                x.dtype(),
                y.dtype()
            ))
        }
    };
    Ok(vec![out])
}

/// Float-only unary ops (spec `T`: float types); float32 goes through `unary_f32`.
macro_rules! float_unary {
    ($fname:ident, $name:literal, f32 |$x:ident| $body32:expr, f64 |$y:ident| $body64:expr) => {
        pub fn $fname(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
            let t = input($name, inputs, 0)?;
            Ok(vec![match t {
                Tensor::F32(a) => Tensor::F32(a.mapv(|$x: f32| $body32)),
                Tensor::F64(a) => Tensor::F64(a.mapv(|$y: f64| $body64)),
                other => return Err(unsupported_type($name, other.dtype())),
            }])
        }
    };
}

/// Unary ops defined on floats and signed integers (Abs, Neg, Relu).
macro_rules! num_unary {
    ($fname:ident, $name:literal, f32 |$x:ident| $body32:expr, f64 |$z:ident| $body64:expr,
     int |$y:ident| $ibody:expr) => {
        pub fn $fname(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
            let t = input($name, inputs, 0)?;
            Ok(vec![match t {
                Tensor::F32(a) => Tensor::F32(a.mapv(|$x: f32| $body32)),
                Tensor::F64(a) => Tensor::F64(a.mapv(|$z: f64| $body64)),
                Tensor::I32(a) => Tensor::I32(a.mapv(|$y: i32| $ibody)),
                Tensor::I64(a) => Tensor::I64(a.mapv(|$y: i64| $ibody)),
                other => return Err(unsupported_type($name, other.dtype())),
            }])
        }
    };
}

float_unary!(
    sqrt,
    "Sqrt",
    f32 | x | unary_f32(UnaryOp::Sqrt, x),
    f64 | x | x.sqrt()
);
float_unary!(
    exp,
    "Exp",
    f32 | x | unary_f32(UnaryOp::Exp, x),
    f64 | x | x.exp()
);
float_unary!(
    log,
    "Log",
    f32 | x | unary_f32(UnaryOp::Log, x),
    f64 | x | x.ln()
);
float_unary!(
    tanh,
    "Tanh",
    f32 | x | unary_f32(UnaryOp::Tanh, x),
    f64 | x | x.tanh()
);
float_unary!(
    sigmoid,
    "Sigmoid",
    f32 | x | unary_f32(UnaryOp::Sigmoid, x),
    f64 | x | 1.0 / (1.0 + (-x).exp())
);
float_unary!(
    erf,
    "Erf",
    f32 | x | unary_f32(UnaryOp::Erf, x),
    f64 | x | Erf::onnx_erf(x)
);

num_unary!(
    abs,
    "Abs",
    f32 | x | unary_f32(UnaryOp::Abs, x),
    f64 | x | x.abs(),
    int | v | v.wrapping_abs()
);
num_unary!(
    neg,
    "Neg",
    f32 | x | unary_f32(UnaryOp::Neg, x),
    f64 | x | -x,
    int | v | v.wrapping_neg()
);
num_unary!(
    relu,
    "Relu",
    f32 | x | unary_f32(UnaryOp::Relu, x),
    f64 | x | if x < 0.0 { 0.0 } else { x },
    int | v | v.max(0)
);

/// erf per element; shared with the fused Gelu kernels (transformer.rs).
pub(super) trait Erf {
    fn onnx_erf(self) -> Self;
}

impl Erf for f64 {
    /// erf without libm: for |x| < 2.5 the series
    /// erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n * x / (1*3*...*(2n+1)), whose terms are
    /// all positive (no cancellation); above, 1 - erfc(x) with erfc's continued fraction
    /// erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))).
    /// Relative error is about 1e-15; erf(x) rounds to 1 beyond 6.
    fn onnx_erf(self) -> f64 {
        let x = self;
        if x.is_nan() {
            return x;
        }
        let ax = x.abs();
        let r = if ax < 2.5 {
            let x2 = ax * ax;
            let (mut term, mut sum, mut n) = (ax, ax, 0.0f64);
            loop {
                n += 1.0;
                term *= 2.0 * x2 / (2.0 * n + 1.0);
                sum += term;
                if term <= sum * 1e-17 {
                    break;
                }
            }
            std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum
        } else if ax < 6.0 {
            let mut t = ax;
            for n in (1..=60).rev() {
                t = ax + (n as f64 * 0.5) / t;
            }
            1.0 - (-ax * ax).exp() * (0.5 * std::f64::consts::FRAC_2_SQRT_PI) / t
        } else {
            1.0
        };
        r.copysign(x)
    }
}

impl Erf for f32 {
    fn onnx_erf(self) -> f32 {
        (self as f64).onnx_erf() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::*;

    #[test]
    fn add_same_shape_and_broadcast() {
        let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = f32s(&[2, 3], &[10., 20., 30., 40., 50., 60.]);
        let y = run1(add, "Add", &[&a, &b]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[11., 22., 33., 44., 55., 66.]));
        // [2,3] + [3]
        let c = f32s(&[3], &[1., 0., -1.]);
        let y = run1(add, "Add", &[&a, &c]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[2., 2., 2., 5., 5., 5.]));
        // [2,1] + [1,3]
        let col = f32s(&[2, 1], &[1., 2.]);
        let row = f32s(&[1, 3], &[10., 20., 30.]);
        let y = run1(add, "Add", &[&col, &row]).unwrap();
        assert_eq!(y, f32s(&[2, 3], &[11., 21., 31., 12., 22., 32.]));
        // scalar on either side
        let s = f32s(&[], &[100.]);
        assert_eq!(
            run1(add, "Add", &[&s, &c]).unwrap(),
            f32s(&[3], &[101., 100., 99.])
        );
        assert_eq!(
            run1(add, "Add", &[&c, &s]).unwrap(),
            f32s(&[3], &[101., 100., 99.])
        );
        // a [1,1] operand broadcasting against a 1-D one raises the rank
        let one = f32s(&[1, 1], &[1.]);
        assert_eq!(
            run1(add, "Add", &[&c, &one]).unwrap(),
            f32s(&[1, 3], &[2., 1., 0.])
        );
    }

    #[test]
    fn non_contiguous_inputs() {
        // A transposed (column-major) view of the same data goes through the Zip path.
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let at = match &a {
            Tensor::F32(x) => Tensor::F32(x.t().to_owned()),
            _ => unreachable!(),
        };
        let y = run1(sub, "Sub", &[&at, &a]).unwrap();
        assert_eq!(y, f32s(&[2, 2], &[0., 1., -1., 0.]));
    }

    #[test]
    fn sub_mul_div_types() {
        let a = i64s(&[3], &[7, -7, 9]);
        let b = i64s(&[3], &[2, 2, -4]);
        assert_eq!(
            run1(sub, "Sub", &[&a, &b]).unwrap(),
            i64s(&[3], &[5, -9, 13])
        );
        assert_eq!(
            run1(mul, "Mul", &[&a, &b]).unwrap(),
            i64s(&[3], &[14, -14, -36])
        );
        // integer Div truncates toward zero
        assert_eq!(
            run1(div, "Div", &[&a, &b]).unwrap(),
            i64s(&[3], &[3, -3, -2])
        );
        let a = i32s(&[2], &[i32::MAX, i32::MIN]);
        let b = i32s(&[2], &[1, -1]);
        assert_eq!(
            run1(add, "Add", &[&a, &b]).unwrap(),
            i32s(&[2], &[i32::MIN, i32::MAX])
        );
        assert_eq!(
            run1(div, "Div", &[&a, &b]).unwrap(),
            i32s(&[2], &[i32::MAX, i32::MIN])
        );
        let a = f64s(&[2], &[1., -3.]);
        let b = f64s(&[2], &[4., 0.]);
        let y = run1(div, "Div", &[&a, &b]).unwrap();
        assert_eq!(y, f64s(&[2], &[0.25, f64::NEG_INFINITY]));
    }

    #[test]
    fn int_div_by_zero_is_error() {
        let a = i32s(&[2], &[1, 2]);
        let b = i32s(&[2], &[1, 0]);
        let e = run1(div, "Div", &[&a, &b]).unwrap_err();
        assert!(e.contains("division by zero"), "{e}");
    }

    #[test]
    fn errors() {
        let a = f32s(&[2, 3], &[0.; 6]);
        let b = f32s(&[4], &[0.; 4]);
        let e = run1(add, "Add", &[&a, &b]).unwrap_err();
        assert!(e.contains("[2, 3]") && e.contains("[4]"), "{e}");
        let c = i64s(&[3], &[0; 3]);
        let e = run1(mul, "Mul", &[&a, &c]).unwrap_err();
        assert!(e.contains("float32") && e.contains("int64"), "{e}");
        let t = bools(&[1], &[true]);
        let e = run1(add, "Add", &[&t, &t]).unwrap_err();
        assert!(e.contains("bool"), "{e}");
        let e = run1(sqrt, "Sqrt", &[&c]).unwrap_err();
        assert!(e.contains("int64"), "{e}");
        let node = crate::ir::Node::new("Add", "");
        let e = run_at(add, &node, 17, &[Some(&a)]).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }

    #[test]
    fn broadcast_output_limit() {
        let a = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1 << 16, 1])));
        let b = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1, 1 << 16])));
        let node = crate::ir::Node::new("Add", "");
        let limits = crate::limits::Limits {
            max_tensor_bytes: 1 << 20,
        };
        let ctx = KernelCtx {
            node: &node,
            opset: 17,
            limits: &limits,
        };
        let e = add(&ctx, &[Some(&a), Some(&b)]).unwrap_err();
        assert!(e.contains("limit"), "{e}");
    }

    #[test]
    fn pow_types() {
        let x = f32s(&[3], &[2., 4., 9.]);
        let y = f32s(&[3], &[3., 0.5, 0.5]);
        assert_eq!(
            run1(pow, "Pow", &[&x, &y]).unwrap(),
            f32s(&[3], &[8., 2., 3.])
        );
        let e = i64s(&[], &[2]);
        assert_eq!(
            run1(pow, "Pow", &[&x, &e]).unwrap(),
            f32s(&[3], &[4., 16., 81.])
        );
        let b = i32s(&[3], &[2, -3, 5]);
        let e = i64s(&[3], &[10, 3, 0]);
        assert_eq!(
            run1(pow, "Pow", &[&b, &e]).unwrap(),
            i32s(&[3], &[1024, -27, 1])
        );
        let h = f64s(&[1], &[0.5]);
        assert_eq!(run1(pow, "Pow", &[&b, &h]).unwrap(), i32s(&[3], &[1, 0, 2]));
        let neg = i32s(&[1], &[-1]);
        assert!(run1(pow, "Pow", &[&b, &neg])
            .unwrap_err()
            .contains("negative"));
    }

    #[test]
    fn unary_math() {
        let x = f32s(&[3], &[-1., 0., 4.]);
        assert_eq!(run1(abs, "Abs", &[&x]).unwrap(), f32s(&[3], &[1., 0., 4.]));
        assert_eq!(
            run1(neg, "Neg", &[&x]).unwrap(),
            f32s(&[3], &[1., -0., -4.])
        );
        assert_eq!(
            run1(relu, "Relu", &[&x]).unwrap(),
            f32s(&[3], &[0., 0., 4.])
        );
        let i = i64s(&[3], &[-5, 0, 5]);
        assert_eq!(run1(relu, "Relu", &[&i]).unwrap(), i64s(&[3], &[0, 0, 5]));
        assert_eq!(run1(abs, "Abs", &[&i]).unwrap(), i64s(&[3], &[5, 0, 5]));
        assert_eq!(run1(neg, "Neg", &[&i]).unwrap(), i64s(&[3], &[5, 0, -5]));
        let p = f64s(&[3], &[1., 4., 0.25]);
        assert_eq!(
            run1(sqrt, "Sqrt", &[&p]).unwrap(),
            f64s(&[3], &[1., 2., 0.5])
        );
        let z = f64s(&[2], &[0., 1.]);
        assert_close(
            &run1(exp, "Exp", &[&z]).unwrap(),
            &f64s(&[2], &[1., std::f64::consts::E]),
            1e-15,
        );
        assert_close(
            &run1(log, "Log", &[&p]).unwrap(),
            &f64s(&[3], &[0., 4f64.ln(), -(4f64.ln())]),
            1e-15,
        );
        let s = f32s(&[3], &[0., 1000., -1000.]);
        assert_eq!(
            run1(sigmoid, "Sigmoid", &[&s]).unwrap(),
            f32s(&[3], &[0.5, 1., 0.])
        );
        assert_close(
            &run1(tanh, "Tanh", &[&s]).unwrap(),
            &f32s(&[3], &[0., 1., -1.]),
            0.0,
        );
    }

    #[test]
    fn erf_matches_known_values() {
        // Values from Python's math.erf.
        let xs = [0.0, 1e-10, 0.1, 0.5, 1.0, -1.0, 2.4999, 2.5, 3.0, 5.9, 7.0];
        let want = [
            0.0,
            1.1283791670955126e-10,
            0.1124629160182849,
            0.5204998778130465,
            0.8427007929497149,
            -0.8427007929497149,
            0.9995928300996666,
            0.999593047982555,
            0.9999779095030014,
            0.9999999999999999,
            1.0,
        ];
        let y = run1(erf, "Erf", &[&f64s(&[xs.len()], &xs)]).unwrap();
        assert_close(&y, &f64s(&[want.len()], &want), 1e-15);
        let y = run1(erf, "Erf", &[&f32s(&[1], &[f32::NAN])]).unwrap();
        assert!(y.to_f64_vec()[0].is_nan());
    }
}
