//! ai.onnx elementwise math.
//!
//! | op | versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | Add, Sub, Mul, Div | 1-14 | `broadcast`, `axis` (opsets < 7 only; refused) | A, B: T -> C: T, numpy broadcasting |
//! | Pow | 1-15 | as above | X: T, Y: T1 (any numeric) -> Z: T |
//! | Neg, Abs, Relu | 1-14 | none (`consumed_inputs` before 6, ignored) | X: T -> Y: T; T float or signed int |
//! | Sqrt, Exp, Log, Tanh, Sigmoid | 1-13 | none | X: T -> Y: T; T float |
//! | Erf | 9-13 | none | X: T -> Y: T |
//! | Cos, Sin | 7- | none | X: T -> Y: T; T float |
//! | Reciprocal, Floor, Ceil | 1- (6, 13: types only) | none | X: T -> Y: T; T float |
//! | Round | 11- | none | halves to even |
//! | Sign | 9- | none | X: T -> Y: T; T float or int (-1, 0, 1) |
//! | IsNaN | 9- | none | X: float -> Y: bool |
//! | IsInf | 10- | `detect_negative` (1), `detect_positive` (1) | X: float -> Y: bool |
//!
//! Versions 7 (numpy broadcasting replaced the `broadcast`/`axis` attributes), 13 and 14
//! (bfloat16 and more integer types) and 15 (Pow's types) changed no computed value for the
//! types held here, so no kernel branches on the opset.

use ndarray::ArrayD;

use super::activation::map_elems;
use super::broadcast::binary_map;
use super::common::{input, type_mismatch, unsupported_type, Num};
use super::fastmath;
use super::lowering::{NodeCtx, Ty};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::expr::{BinaryOp, UnaryOp};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

/// The float32 function of each unary op: the one-op kernels below and FusedElementwise
/// (fused_elementwise.rs) both compute through it, so a fused chain equals the chained kernels
/// bit for bit. tanh, erf and Sigmoid's exp are the branch-free fastmath forms (3e-7 relative,
/// 2e-7 absolute for erf), several times faster than libm's and vectorizing.
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
        // fastmath's exp saturates near e^89 for very negative x, which still gives ~0.
        UnaryOp::Sigmoid => 1.0 / (1.0 + fastmath::exp(-x)),
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
    /// The same op as a value, for the element types that share one loop (`arith`).
    const KIND: Arith;
    fn apply<T: Num>(a: T, b: T) -> T;
}

/// The four arithmetic ops as a runtime value: float64 and the integer types run one loop for
/// all four (a branch per element), float32 one loop per op (its hot path, branch-free).
#[derive(Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

impl Arith {
    #[inline(always)]
    fn apply<T: Num>(self, a: T, b: T) -> T {
        match self {
            Arith::Add => a.wadd(b),
            Arith::Sub => a.wsub(b),
            Arith::Mul => a.wmul(b),
            Arith::Div => a.wdiv(b),
        }
    }
}

struct AddOp;
impl BinOp for AddOp {
    const NAME: &'static str = "Add";
    const KIND: Arith = Arith::Add;
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wadd(b)
    }
}

struct SubOp;
impl BinOp for SubOp {
    const NAME: &'static str = "Sub";
    const KIND: Arith = Arith::Sub;
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wsub(b)
    }
}

struct MulOp;
impl BinOp for MulOp {
    const NAME: &'static str = "Mul";
    const KIND: Arith = Arith::Mul;
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wmul(b)
    }
}

struct DivOp;
impl BinOp for DivOp {
    const NAME: &'static str = "Div";
    const KIND: Arith = Arith::Div;
    const REJECT_INT_ZERO_DIVISOR: bool = true;
    #[inline(always)]
    fn apply<T: Num>(a: T, b: T) -> T {
        a.wdiv(b)
    }
}

/// float64 and the integer types: one loop for all four ops (not generic in the op).
fn arith_shared<T: Num>(
    ctx: &KernelCtx,
    (name, op, reject_zero): (&str, Arith, bool),
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> Result<ArrayD<T>, String> {
    // Every divisor element is used unless `a` is empty.
    if reject_zero && T::IS_INT && !a.is_empty() && b.iter().any(|&v| v == T::ZERO) {
        return Err(format!("{name}: integer division by zero"));
    }
    binary_map(ctx, name, a, b, move |x, y| op.apply(x, y))
}

/// Opsets before 7 broadcast by `broadcast`/`axis` attributes (axis-aligned, not numpy's
/// right-aligned rule). Such nodes parse (a model holding them still loads) but their kernel is
/// this refusal rather than the modern rule, which would compute something else.
pub(super) fn legacy_broadcast(a: &Attrs) -> bool {
    a.has("broadcast") || (a.opset < 7 && a.has("axis"))
}

/// The kernel of a binary op carrying the legacy broadcast attributes.
pub(super) fn refuse_legacy_broadcast(ctx: &KernelCtx, _: &[Option<&Tensor>]) -> KernelResult {
    Err(format!(
        "{}: the legacy (opset < 7) broadcast/axis attributes are not supported",
        ctx.node.op_type
    ))
}

/// Declares binary ops: the legacy-broadcast flag is their only attribute; the output has the
/// inputs' broadcast shape and the type `out` makes of input 0's.
macro_rules! binary_ops {
    ($($(#[$m:meta])* $name:ident => $kernel:path, same_type: $same:expr, out: $out:expr,
       wgsl: $lower:expr;)*) => {$(
        $(#[$m])*
        #[derive(Debug)]
        pub struct $name {
            pub legacy_broadcast: bool,
        }
        impl $name {
            pub fn parse(a: &$crate::ops::Attrs) -> Result<Box<dyn $crate::ops::Op>, String> {
                Ok(Box::new($name {
                    legacy_broadcast: $crate::ops::elementwise::legacy_broadcast(a),
                }))
            }
        }
        impl $crate::ops::Op for $name {
            fn infer(&self, cx: &$crate::ops::InferCx) -> Vec<$crate::ir::TensorType> {
                let out: fn(Option<$crate::tensor::DType>) -> Option<$crate::tensor::DType> = $out;
                let dtype = out(cx.input(0).dtype);
                let shape = $crate::ops::infer::broadcast_inputs(cx, 2);
                vec![$crate::ir::TensorType { dtype, shape }]
            }
            fn kernel(&self) -> $crate::ops::Kernel {
                if self.legacy_broadcast {
                    $crate::ops::elementwise::refuse_legacy_broadcast
                } else {
                    $kernel
                }
            }
            fn lower(&self, c: &$crate::ops::NodeCtx) -> Result<$crate::ops::Lowered, String> {
                let lower: fn(&$crate::ops::NodeCtx) -> Result<$crate::ops::Lowered, String> = $lower;
                lower(c)
            }
            fn same_type_inputs(&self) -> bool {
                $same
            }
        }
    )*};
}
pub(super) use binary_ops;

binary_ops! {
    Add => add, same_type: true, out: |t| t, wgsl: |c| c.ew(2, "v0 + v1");
    Sub => sub, same_type: true, out: |t| t, wgsl: |c| c.ew(2, "v0 - v1");
    Mul => mul, same_type: true, out: |t| t, wgsl: |c| c.ew(2, "v0 * v1");
    Div => div, same_type: true, out: |t| t, wgsl: |c| c.ew(2, "v0 / v1");
    /// The exponent may have another type than the base.
    Pow => pow, same_type: false, out: |t| t, wgsl: |c| {
        if c.ty(0)? != Ty::F32 || c.ty(1)? != Ty::F32 {
            return Err("Pow is float32-only on webgpu".into());
        }
        c.ew(2, "pow_(v0, v1)")
    };
}

/// Declares attribute-less unary ops: output type and shape are input 0's.
macro_rules! unary_ops {
    ($($name:ident => $kernel:path, wgsl: $lower:expr;)*) => {$(
        super::plain_ops!($name);
        impl Op for $name {
            fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
                vec![cx.input(0)]
            }
            fn kernel(&self) -> Kernel {
                $kernel
            }
            fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
                let lower: fn(&NodeCtx) -> Result<Lowered, String> = $lower;
                lower(c)
            }
        }
    )*};
}

unary_ops! {
    Neg => neg, wgsl: |c| c.ew(1, "-v0");
    Abs => abs, wgsl: |c| c.ew(1, "abs(v0)");
    Sqrt => sqrt, wgsl: |c| c.ew(1, "sqrt(v0)");
    Exp => exp, wgsl: |c| c.ew(1, "exp(v0)");
    Log => log, wgsl: |c| c.ew(1, "log(v0)");
    Erf => erf, wgsl: |c| c.ew(1, "erf_(v0)");
    Tanh => tanh, wgsl: |c| c.ew(1, super::lowering::TANH);
    Sigmoid => sigmoid, wgsl: |c| c.ew(1, super::lowering::SIGMOID);
    Relu => relu, wgsl: |c| c.ew(1, &format!("max(v0, {})", c.ty(0)?.zero()));
    Cos => cos, wgsl: |c| float_ew(c, "cos(v0)");
    Sin => sin, wgsl: |c| float_ew(c, "sin(v0)");
    Reciprocal => reciprocal, wgsl: |c| float_ew(c, "1.0 / v0");
    Floor => floor, wgsl: |c| float_ew(c, "floor(v0)");
    Ceil => ceil, wgsl: |c| float_ew(c, "ceil(v0)");
    Round => round, wgsl: |c| float_ew(c, "round(v0)");
    Sign => sign, wgsl: |c| float_ew(c, "sign(v0)");
}

/// A float32-only WGSL expression of input 0 (the GPU holds ints as i32, where these differ).
fn float_ew(c: &NodeCtx, expr: &str) -> Result<Lowered, String> {
    if c.ty(0)? != Ty::F32 {
        return Err(format!("{} is float32-only on webgpu", c.node.op_type));
    }
    c.ew(1, expr)
}

super::plain_ops!(IsNaN);

impl Op for IsNaN {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(crate::tensor::DType::BOOL),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        is_nan
    }
    /// On the bits: WGSL lets a compiler assume no NaN, so `v0 != v0` may fold to false.
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        float_ew(c, "u32((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u)")
    }
}

#[derive(Debug)]
pub struct IsInf {
    pub detect_negative: bool,
    pub detect_positive: bool,
}

impl IsInf {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(IsInf {
            detect_negative: a.flag("detect_negative", true)?,
            detect_positive: a.flag("detect_positive", true)?,
        }))
    }
}

impl Op for IsInf {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(crate::tensor::DType::BOOL),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        is_inf
    }
    /// On the bits, as IsNaN: ±infinity is exponent all ones and a zero mantissa; the sign bit
    /// says which.
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let sign = match (self.detect_negative, self.detect_positive) {
            (true, true) => "true",
            (true, false) => "(bitcast<u32>(v0) >> 31u) == 1u",
            (false, true) => "(bitcast<u32>(v0) >> 31u) == 0u",
            (false, false) => "false",
        };
        float_ew(
            c,
            &format!("u32((bitcast<u32>(v0) & 0x7fffffffu) == 0x7f800000u && {sign})"),
        )
    }
}

/// IsNaN (9, 13, 20): true where the float element is NaN.
pub fn is_nan(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "IsNaN";
    Ok(vec![Tensor::Bool(match input(OP, inputs, 0)? {
        Tensor::F32(a) => a.mapv(f32::is_nan),
        Tensor::F64(a) => a.mapv(f64::is_nan),
        other => return Err(unsupported_type(OP, other.dtype())),
    })])
}

/// IsInf (10, 20): true where the float element is an infinity of a detected sign.
pub fn is_inf(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "IsInf";
    let a = ctx.attrs::<IsInf>()?;
    let (neg, pos) = (a.detect_negative, a.detect_positive);
    let hit = move |v: f64| v.is_infinite() && if v > 0.0 { pos } else { neg };
    Ok(vec![Tensor::Bool(match input(OP, inputs, 0)? {
        Tensor::F32(a) => a.mapv(|v| hit(v as f64)),
        Tensor::F64(a) => a.mapv(hit),
        other => return Err(unsupported_type(OP, other.dtype())),
    })])
}

fn arith<O: BinOp>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shared = (O::NAME, O::KIND, O::REJECT_INT_ZERO_DIVISOR);
    let a = input(O::NAME, inputs, 0)?;
    let b = input(O::NAME, inputs, 1)?;
    let out = match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(binary_map(ctx, O::NAME, a, b, O::apply)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(arith_shared(ctx, shared, a, b)?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(arith_shared(ctx, shared, a, b)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(arith_shared(ctx, shared, a, b)?),
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
    // The exponent in one of two types (i64 for an integer exponent of an integer base, f64
    // otherwise), so that each base type has at most two loops, not one per exponent type;
    // f32 ** f32 keeps its own.
    let unsupported = || {
        format!(
            "{OP}: unsupported base/exponent types {} and {}",
            x.dtype(),
            y.dtype()
        )
    };
    let int_exp = matches!(y, Tensor::I32(_) | Tensor::I64(_));
    let exp_as = |to: DType| match y {
        Tensor::I32(_) | Tensor::I64(_) | Tensor::F32(_) | Tensor::F64(_) => {
            y.cast(to).ok_or_else(unsupported)
        }
        _ => Err(unsupported()),
    };
    let out = match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(binary_map(ctx, OP, a, b, |p, q| {
            binary_f32(BinaryOp::Pow, p, q)
        })?),
        (Tensor::F32(a), _) => match exp_as(DType::F64)? {
            Tensor::F64(e) => Tensor::F32(binary_map(ctx, OP, a, &e, |p, q: f64| {
                (p as f64).powf(q) as f32
            })?),
            _ => return Err(unsupported()),
        },
        (Tensor::F64(a), _) => match exp_as(DType::F64)? {
            Tensor::F64(e) => Tensor::F64(binary_map(ctx, OP, a, &e, |p: f64, q| p.powf(q))?),
            _ => return Err(unsupported()),
        },
        // An int32 base, or any integer base with a float exponent, is computed in the wider
        // loop and narrowed as `as` narrows: wrapping products keep their low 32 bits, float
        // results truncate toward zero and saturate. The same values as a loop of its own (the
        // unit tests pin both), at one loop fewer per pair in the wasm.
        (Tensor::I32(_) | Tensor::I64(_), _) if !int_exp || matches!(x, Tensor::I32(_)) => {
            let wide = x
                .cast(if int_exp { DType::I64 } else { DType::F64 })
                .ok_or_else(unsupported)?;
            let out = pow(ctx, &[Some(&wide), Some(y)])?;
            out[0].cast(x.dtype()).ok_or_else(unsupported)?
        }
        (Tensor::I64(a), _) => match exp_as(DType::I64)? {
            Tensor::I64(e) => Tensor::I64(binary_map(ctx, OP, a, &e, |p: i64, q| ipow(p, q))?),
            _ => return Err(unsupported()),
        },
        _ => return Err(unsupported()),
    };
    Ok(vec![out])
}

/// Float-only unary ops (spec `T`: float types); float32 goes through `unary_f32`. Each op is
/// its own slice loop (`map_elems`), vectorized where the function allows.
macro_rules! float_unary {
    ($fname:ident, $name:literal, f32 |$x:ident| $body32:expr, f64 |$y:ident| $body64:expr) => {
        pub fn $fname(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
            let t = input($name, inputs, 0)?;
            Ok(vec![match t {
                Tensor::F32(a) => Tensor::F32(map_elems(a, |$x: f32| $body32)),
                Tensor::F64(a) => Tensor::F64(map_elems(a, |$y: f64| $body64)),
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
                Tensor::F32(a) => Tensor::F32(map_elems(a, |$x: f32| $body32)),
                Tensor::F64(a) => Tensor::F64(map_elems(a, |$z: f64| $body64)),
                Tensor::I32(a) => Tensor::I32(map_elems(a, |$y: i32| $ibody)),
                Tensor::I64(a) => Tensor::I64(map_elems(a, |$y: i64| $ibody)),
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
    f64 | x | ErfF64::onnx_erf(x)
);

float_unary!(cos, "Cos", f32 | x | x.cos(), f64 | x | x.cos());
float_unary!(sin, "Sin", f32 | x | x.sin(), f64 | x | x.sin());
float_unary!(
    reciprocal,
    "Reciprocal",
    f32 | x | 1.0 / x,
    f64 | x | 1.0 / x
);
float_unary!(floor, "Floor", f32 | x | x.floor(), f64 | x | x.floor());
float_unary!(ceil, "Ceil", f32 | x | x.ceil(), f64 | x | x.ceil());
// Round: halves to even, as the spec (and numpy) say.
float_unary!(
    round,
    "Round",
    f32 | x | x.round_ties_even(),
    f64 | x | x.round_ties_even()
);
// Sign: -1, 0 or 1 (NaN stays NaN for floats).
num_unary!(
    sign,
    "Sign",
    f32 | x
        | if x == 0.0 || x.is_nan() {
            x
        } else {
            x.signum()
        },
    f64 | x
        | if x == 0.0 || x.is_nan() {
            x
        } else {
            x.signum()
        },
    int | v | v.signum()
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
pub(super) trait ErfF64 {
    fn onnx_erf(self) -> Self;
}

impl ErfF64 for f64 {
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

impl ErfF64 for f32 {
    fn onnx_erf(self) -> f32 {
        (self as f64).onnx_erf() as f32
    }
}

#[cfg(test)]
#[path = "elementwise_tests.rs"]
mod tests;
