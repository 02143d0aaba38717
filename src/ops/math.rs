//! ai.onnx math: trigonometry beyond Sin/Cos, Mod, bit operations, and the variadic
//! Min/Max/Sum/Mean. Also the element machinery activation.rs shares (`Elem`, `Fp`,
//! `FloatUnary`, `per_type!`).
//!
//! | op | versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | Tan, Asin, Acos, Atan | 7- (22: bfloat16) | none | X: T -> Y: T; T float |
//! | Sinh, Cosh, Asinh, Acosh, Atanh | 9- (22: bfloat16) | none | X: T -> Y: T; T float |
//! | Mod | 10-27 (13: bfloat16) | `fmod` (0; 0 or 1) | A, B: T -> C: T, numpy broadcasting. fmod 0: integer T, Python `%` (the divisor's sign); fmod 1: C `fmod` (the dividend's sign) |
//! | Mod | 28- | as above | fmod 0 also on floats: `A - floor(A / B) * B` (numpy `mod`) |
//! | BitShift | 11-27 | `direction` (required: LEFT, RIGHT) | X, Y: T -> Z: T, numpy broadcasting; T unsigned |
//! | BitShift | 28- | as above | T also signed; RIGHT shifts arithmetically |
//! | BitwiseAnd, BitwiseOr, BitwiseXor | 18- | none | A, B: T (integer) -> C: T, numpy broadcasting |
//! | BitwiseNot | 18- | none | X: T (integer) -> Y: T |
//! | Min, Max | 6-7 | none | data_0 .. data_n-1 (n >= 1): T -> T; all of one shape |
//! | Min, Max | 8- (12: integer T) | none | numpy broadcasting across all inputs; NaN propagates |
//! | Sum, Mean | 6-7, 8- (13: bfloat16) | none | as Min/Max; T float |
//!
//! Element types held here: float32, float64, int32, int64 (the executor widens the narrower
//! ones). An integer divisor of 0 in Mod is an error. A shift count below 0 or at least the
//! width of T gives 0 (-1 for an arithmetic right shift of a negative X). Before opset 28
//! BitShift's T is unsigned, so both shifts are logical there; from 28 int32/int64 are signed.
//! Min/Max accept integers and Sum/Mean reject them at every version (the spec's lists grew at
//! 12); opsets 6-7 refuse inputs of different shapes.

use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Not, Sub};

use ndarray::ArrayD;

use super::broadcast::{binary_map, broadcast_shape};
use super::common::{bits, check_out, input, type_mismatch, Num};
use super::infer::broadcast_inputs;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

type R<T> = Result<T, String>;

/// `Tensor::$v($body)` for each listed variant `$v` of `$t` (`$a` bound to its array; `$body`
/// generic in the element type); any other type is an error naming `$op`.
macro_rules! per_type {
    ($op:expr, $t:expr, [$($v:ident),*], $a:ident => $body:expr) => {
        match $t {
            $($crate::tensor::Tensor::$v($a) => $crate::tensor::Tensor::$v($body),)*
            other => return Err($crate::ops::common::unsupported_type($op, other.dtype())),
        }
    };
}
pub(super) use per_type;

/// An element type the kernels are generic over: its tensor variant, and the operations whose
/// integer and float forms differ.
pub(super) trait Elem: Num {
    const DTYPE: DType;
    fn view(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn to_f64(self) -> f64;
    /// Integers truncate toward zero (saturating), as a C cast of an in-range value.
    fn from_f64(v: f64) -> Self;
    /// Remainder with the dividend's sign: C `fmod`, integer `%` (a zero divisor gives 0;
    /// callers reject it first).
    fn trunc_rem(self, y: Self) -> Self;
    /// Remainder with the divisor's sign (Python `%`, numpy `mod`; a float zero result takes
    /// the divisor's sign).
    fn floor_rem(self, y: Self) -> Self;
}

macro_rules! impl_elem_float {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$v;
            fn view(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$v(a) => Some(a),
                    _ => None,
                }
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn trunc_rem(self, y: Self) -> Self {
                self % y
            }
            #[inline(always)]
            fn floor_rem(self, y: Self) -> Self {
                let r = self % y;
                if r == 0.0 {
                    // A NaN `r` (NaN operand, infinite dividend, zero divisor) stays NaN below.
                    (0.0 as $t).copysign(y)
                } else if (r < 0.0) != (y < 0.0) {
                    r + y
                } else {
                    r
                }
            }
        }
    };
}
impl_elem_float!(f32, F32);
impl_elem_float!(f64, F64);

macro_rules! impl_elem_int {
    ($t:ty, $v:ident) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$v;
            fn view(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$v(a) => Some(a),
                    _ => None,
                }
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn trunc_rem(self, y: Self) -> Self {
                // MIN % -1 wraps to 0 instead of trapping.
                if y == 0 {
                    0
                } else {
                    self.wrapping_rem(y)
                }
            }
            #[inline(always)]
            fn floor_rem(self, y: Self) -> Self {
                let r = self.trunc_rem(y);
                if r != 0 && (r < 0) != (y < 0) {
                    r.wrapping_add(y)
                } else {
                    r
                }
            }
        }
    };
}
impl_elem_int!(i32, I32);
impl_elem_int!(i64, I64);

/// Float math for the generic float kernels (here and in activation.rs).
pub(super) trait Fp:
    Elem
    + Neg<Output = Self>
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    /// A float attribute as this type.
    fn of(v: f32) -> Self;
    fn abs(self) -> Self;
    fn exp(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln_1p(self) -> Self;
    fn tanh(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
}

macro_rules! impl_fp {
    ($t:ty; $($f:ident)*) => {
        impl Fp for $t {
            #[inline(always)]
            fn of(v: f32) -> Self {
                v as $t
            }
            $(
                #[inline(always)]
                fn $f(self) -> Self {
                    <$t>::$f(self)
                }
            )*
        }
    };
}
impl_fp!(f32; abs exp exp_m1 ln_1p tanh tan asin acos atan sinh cosh asinh acosh atanh);
impl_fp!(f64; abs exp exp_m1 ln_1p tanh tan asin acos atan sinh cosh asinh acosh atanh);

/// `max` as numpy's `maximum`: a NaN on either side is the result.
#[inline(always)]
pub(super) fn max_nan<T: Num>(a: T, b: T) -> T {
    // `a != a` only for NaN; `a > NaN` is false, so a NaN `b` is returned.
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a > b || a_nan {
        a
    } else {
        b
    }
}

/// `min` as numpy's `minimum`: a NaN on either side is the result.
#[inline(always)]
pub(super) fn min_nan<T: Num>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    let a_nan = a != a;
    if a < b || a_nan {
        a
    } else {
        b
    }
}

/// Input `i` as an array of `T`, the element type of input 0.
pub(super) fn typed<'a, T: Elem>(
    op: &str,
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> R<&'a ArrayD<T>> {
    let t = input(op, inputs, i)?;
    T::view(t).ok_or_else(|| type_mismatch(op, T::DTYPE, t.dtype()))
}

/// Output type of a same-type op over inputs `0..n` broadcast together.
fn broadcast_type(cx: &InferCx, n: usize) -> Vec<TensorType> {
    vec![TensorType {
        dtype: (0..n).find_map(|i| cx.input(i).dtype),
        shape: broadcast_inputs(cx, n),
    }]
}

// ---------------------------------------------------------------------------------------------
// Float unary ops

/// A float-only element-wise op: its name and its function, generic over float32/float64.
pub(super) trait FloatUnary: Op {
    const NAME: &'static str;
    fn apply<T: Fp>(&self, x: T) -> T;
}

/// The kernel of every `FloatUnary` op: float32 computed in float32, float64 in float64.
pub(super) fn float_unary<U: FloatUnary>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
) -> KernelResult {
    let u = ctx.attrs::<U>()?;
    Ok(vec![
        per_type!(U::NAME, input(U::NAME, inputs, 0)?, [F32, F64], a => a.mapv(|x| u.apply(x))),
    ])
}

/// Declares float unary ops: a struct of float attributes (`field: default`, read by name),
/// its `FloatUnary` function `|self, x| body`, output type and shape input 0's, and optionally
/// a WebGPU lowering `|self, cx| ...`.
macro_rules! float_unary_ops {
    ($($(#[$m:meta])* $name:ident { $($field:ident: $default:expr),* }
       |$s:ident, $x:ident| $body:expr $(, wgsl: $lower:expr)?;)*) => {$(
        $(#[$m])*
        #[derive(Debug)]
        pub struct $name {
            $(pub $field: f32,)*
        }
        impl $name {
            pub fn parse(_a: &$crate::ops::Attrs) -> Result<Box<dyn $crate::ops::Op>, String> {
                Ok(Box::new($name { $($field: _a.float(stringify!($field), $default)?,)* }))
            }
        }
        impl $crate::ops::math::FloatUnary for $name {
            const NAME: &'static str = stringify!($name);
            #[inline(always)]
            fn apply<T: $crate::ops::math::Fp>(&self, $x: T) -> T {
                let $s = self;
                $body
            }
        }
        impl $crate::ops::Op for $name {
            fn infer(&self, cx: &$crate::ops::InferCx) -> Vec<$crate::ir::TensorType> {
                vec![cx.input(0)]
            }
            fn kernel(&self) -> $crate::ops::Kernel {
                $crate::ops::math::float_unary::<$name>
            }
            $(
                fn lower(&self, c: &$crate::ops::NodeCtx)
                    -> Result<$crate::ops::Lowered, String> {
                    let lower: fn(&$name, &$crate::ops::NodeCtx)
                        -> Result<$crate::ops::Lowered, String> = $lower;
                    lower(self, c)
                }
            )?
        }
    )*};
}
pub(super) use float_unary_ops;

float_unary_ops! {
    Tan {} |_s, x| x.tan();
    Asin {} |_s, x| x.asin();
    Acos {} |_s, x| x.acos();
    Atan {} |_s, x| x.atan();
    Sinh {} |_s, x| x.sinh();
    Cosh {} |_s, x| x.cosh();
    Asinh {} |_s, x| x.asinh();
    Acosh {} |_s, x| x.acosh();
    Atanh {} |_s, x| x.atanh();
}

// ---------------------------------------------------------------------------------------------
// Mod

#[derive(Debug)]
pub struct Mod {
    /// fmod = 1: C `fmod` (truncated quotient); else the floored quotient.
    pub fmod: bool,
    /// Opset 28 defined fmod = 0 on floats; before, the spec requires fmod = 1 for them.
    pub float_floor: bool,
}

impl Mod {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let fmod = match a.int("fmod", 0)? {
            0 => false,
            1 => true,
            v => return Err(format!("attribute 'fmod' must be 0 or 1, got {v}")),
        };
        Ok(Box::new(Mod {
            fmod,
            float_floor: a.opset >= 28,
        }))
    }
}

impl Op for Mod {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        broadcast_type(cx, 2)
    }
    fn kernel(&self) -> Kernel {
        mod_kernel
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn mod_kernel(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Mod";
    let m = ctx.attrs::<Mod>()?;
    let a = input(OP, inputs, 0)?;
    if !m.fmod && !m.float_floor && a.dtype().is_float() {
        return Err(format!(
            "{OP}: fmod=0 on {} inputs needs opset 28 (before it the spec requires fmod=1 for floats)",
            a.dtype()
        ));
    }
    Ok(vec![
        per_type!(OP, a, [F32, F64, I32, I64], x => mod_typed(ctx, m.fmod, x, inputs)?),
    ])
}

fn mod_typed<T: Elem>(
    ctx: &KernelCtx,
    fmod: bool,
    a: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    const OP: &str = "Mod";
    let b = typed::<T>(OP, inputs, 1)?;
    // Every divisor element is used unless `a` is empty.
    if T::IS_INT && !a.is_empty() && b.iter().any(|&v| v == T::ZERO) {
        return Err(format!("{OP}: integer division by zero"));
    }
    if fmod {
        binary_map(ctx, OP, a, b, T::trunc_rem)
    } else {
        binary_map(ctx, OP, a, b, T::floor_rem)
    }
}

// ---------------------------------------------------------------------------------------------
// Bit operations

/// Integer element types: the bitwise operators, and shifts with ONNX's out-of-range rule.
pub(super) trait Bits:
    Elem + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> + Not<Output = Self>
{
    /// `self` shifted by `s` bits; `signed`: `s` and `self` are signed (arithmetic right
    /// shift), else both are read as unsigned of the same width (logical shifts).
    fn shift(self, s: Self, left: bool, signed: bool) -> Self;
}

macro_rules! impl_bits {
    ($t:ty, $u:ty) => {
        impl Bits for $t {
            #[inline(always)]
            fn shift(self, s: Self, left: bool, signed: bool) -> Self {
                // As unsigned, a negative count is huge: out of range either way.
                let n = s as $u;
                if n >= <$t>::BITS as $u {
                    return if !left && signed && self < 0 { -1 } else { 0 };
                }
                let n = n as u32;
                if left {
                    ((self as $u) << n) as $t
                } else if signed {
                    self >> n
                } else {
                    ((self as $u) >> n) as $t
                }
            }
        }
    };
}
impl_bits!(i32, u32);
impl_bits!(i64, u64);

/// A binary op on integers (`apply` may read the node's attributes).
pub(super) trait IntBinary: Op {
    const NAME: &'static str;
    fn apply<T: Bits>(&self, a: T, b: T) -> T;
}

fn int_binary<O: IntBinary>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let o = ctx.attrs::<O>()?;
    let a = input(O::NAME, inputs, 0)?;
    Ok(vec![per_type!(O::NAME, a, [I32, I64], x => {
        binary_map(ctx, O::NAME, x, typed(O::NAME, inputs, 1)?, |p, q| o.apply(p, q))?
    })])
}

#[derive(Debug)]
pub struct BitShift {
    pub left: bool,
    /// From opset 28 T includes signed types; before it int32/int64 hold unsigned values.
    pub signed: bool,
}

impl BitShift {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let left = match a.string("direction")?.as_deref() {
            Some("LEFT") => true,
            Some("RIGHT") => false,
            Some(d) => {
                return Err(format!(
                    "attribute 'direction' must be 'LEFT' or 'RIGHT', got '{d}'"
                ))
            }
            None => return Err("attribute 'direction' is required".into()),
        };
        Ok(Box::new(BitShift {
            left,
            signed: a.opset >= 28,
        }))
    }
}

impl IntBinary for BitShift {
    const NAME: &'static str = "BitShift";
    #[inline(always)]
    fn apply<T: Bits>(&self, a: T, b: T) -> T {
        a.shift(b, self.left, self.signed)
    }
}

/// Declares attribute-less binary integer ops `Name => |a, b| expr`.
macro_rules! bitwise_ops {
    ($($name:ident => |$a:ident, $b:ident| $e:expr;)*) => {$(
        super::plain_ops!($name);
        impl IntBinary for $name {
            const NAME: &'static str = stringify!($name);
            #[inline(always)]
            fn apply<T: Bits>(&self, $a: T, $b: T) -> T {
                $e
            }
        }
    )*};
}

bitwise_ops! {
    BitwiseAnd => |a, b| a & b;
    BitwiseOr => |a, b| a | b;
    BitwiseXor => |a, b| a ^ b;
}

/// `Op` for binary integer ops: broadcast output of input 0's type.
macro_rules! int_binary_op {
    ($($name:ident),*) => {$(
        impl Op for $name {
            fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
                broadcast_type(cx, 2)
            }
            fn kernel(&self) -> Kernel {
                int_binary::<$name>
            }
            fn same_type_inputs(&self) -> bool {
                true
            }
        }
    )*};
}
int_binary_op!(BitShift, BitwiseAnd, BitwiseOr, BitwiseXor);

super::plain_ops!(BitwiseNot);

impl Op for BitwiseNot {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        bitwise_not
    }
}

fn bitwise_not(_: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "BitwiseNot";
    fn not<T: Bits>(a: &ArrayD<T>) -> ArrayD<T> {
        a.mapv(|v| !v)
    }
    Ok(vec![
        per_type!(OP, input(OP, inputs, 0)?, [I32, I64], a => not(a)),
    ])
}

// ---------------------------------------------------------------------------------------------
// Min, Max, Sum, Mean

/// A variadic op: folds its inputs pairwise with `apply`; `MEAN` divides by their count.
trait Fold: Op {
    const NAME: &'static str;
    const MEAN: bool = false;
    fn apply<T: Elem>(a: T, b: T) -> T;
    /// Whether the node's opset broadcasts (8 and later).
    fn broadcasts(&self) -> bool;
}

/// Checks a variadic node's inputs (at least one; all present; one shape before opset 8, else
/// broadcastable) and the output's size; returns input 0.
fn fold_inputs<'a, O: Fold>(ctx: &KernelCtx, inputs: &[Option<&'a Tensor>]) -> R<&'a Tensor> {
    let op = O::NAME;
    let first = input(op, inputs, 0)?;
    let broadcasts = ctx.attrs::<O>()?.broadcasts();
    let mut shape = first.shape().to_vec();
    for i in 1..inputs.len() {
        let s = input(op, inputs, i)?.shape();
        if broadcasts {
            shape = broadcast_shape(op, &shape, s)?;
        } else if s != first.shape() {
            return Err(format!(
                "{op}: input {i} has shape {s:?} but input 0 has {:?} (broadcasting needs opset 8)",
                first.shape()
            ));
        }
    }
    check_out(ctx, op, &shape, bits(first.dtype()))?;
    Ok(first)
}

fn fold<O: Fold, T: Elem>(
    ctx: &KernelCtx,
    first: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    let mut acc: Option<ArrayD<T>> = None;
    for i in 1..inputs.len() {
        let b = typed::<T>(O::NAME, inputs, i)?;
        let a = acc.as_ref().unwrap_or(first);
        acc = Some(binary_map(ctx, O::NAME, a, b, O::apply::<T>)?);
    }
    let mut acc = acc.unwrap_or_else(|| first.clone());
    if O::MEAN {
        let n = T::from_f64(inputs.len() as f64);
        acc.mapv_inplace(|v| v.wdiv(n));
    }
    Ok(acc)
}

/// Declares the variadic ops: `Name [tensor variants] mean: bool => |a, b| expr`.
macro_rules! fold_ops {
    ($($(#[$m:meta])* $name:ident [$($v:ident),*] mean: $mean:expr => |$a:ident, $b:ident| $e:expr;)*) => {$(
        $(#[$m])*
        #[derive(Debug)]
        pub struct $name {
            /// Opset 8 and later: numpy broadcasting across the inputs.
            pub broadcast: bool,
        }
        impl $name {
            pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
                Ok(Box::new($name { broadcast: a.opset >= 8 }))
            }
        }
        impl Fold for $name {
            const NAME: &'static str = stringify!($name);
            const MEAN: bool = $mean;
            #[inline(always)]
            fn apply<T: Elem>($a: T, $b: T) -> T {
                $e
            }
            fn broadcasts(&self) -> bool {
                self.broadcast
            }
        }
        impl Op for $name {
            fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
                broadcast_type(cx, cx.node.inputs.len())
            }
            fn kernel(&self) -> Kernel {
                fn k(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
                    let first = fold_inputs::<$name>(ctx, inputs)?;
                    Ok(vec![per_type!(stringify!($name), first, [$($v),*],
                        a => fold::<$name, _>(ctx, a, inputs)?)])
                }
                k
            }
            fn same_type_inputs(&self) -> bool {
                true
            }
        }
    )*};
}

fold_ops! {
    Max [F32, F64, I32, I64] mean: false => |a, b| max_nan(a, b);
    Min [F32, F64, I32, I64] mean: false => |a, b| min_nan(a, b);
    Sum [F32, F64] mean: false => |a, b| a.wadd(b);
    Mean [F32, F64] mean: true => |a, b| a.wadd(b);
}

#[cfg(test)]
#[path = "math_tests.rs"]
mod tests;
