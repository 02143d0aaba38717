//! ai.onnx math: trigonometry beyond Sin/Cos, Mod, bit operations, and the variadic
//! Min/Max/Sum/Mean. Also the element machinery activation.rs shares (`Elem`, `Fp`, `arith_map`,
//! `per_type!`).
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
//!
//! Code size (the wasm budget) shapes the kernels: every binary op here (and Clip, PRelu) runs
//! through one broadcast loop per element type, `arith_map` (or `bit_map` for the integer bit
//! operations), which branches per element on an [`Arith`] (or [`BitOp`]) value; the
//! trigonometric functions are activation.rs's [`Act`] values with its one loop. The registry's
//! op names are handles whose `parse` builds the shared op types (`FloatFn`, `IntBinary`,
//! `Variadic`) with that value.

use std::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Sub};

use ndarray::{ArrayD, IxDyn};

use super::activation::Act;
use super::broadcast::{binary_map, broadcast_shape};
use super::common::{bits, check_out, input, type_mismatch, unsupported_type, Num};
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

    /// `self op y`: the one function of every `arith_map` loop.
    #[inline(always)]
    fn arith(self, op: Arith, y: Self) -> Self {
        match op {
            Arith::Max => max_nan(self, y),
            Arith::Min => min_nan(self, y),
            Arith::Add => self.wadd(y),
            Arith::Div => self.wdiv(y),
            Arith::TruncRem => self.trunc_rem(y),
            Arith::FloorRem => self.floor_rem(y),
            Arith::PRelu => {
                if self > Self::ZERO {
                    self
                } else {
                    self.wmul(y)
                }
            }
        }
    }
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
                // A NaN `r` (NaN operand, infinite dividend, zero divisor) stays NaN: it is not
                // 0, and NaN + y is NaN.
                let r = self % y;
                if r == 0.0 {
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
    + super::common::Float
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

/// `Fp` for `$t`: the functions listed after `native` are `$t`'s own; those after `via` are
/// computed in `$via` and rounded (float32's rarer functions take float64's libm code, which the
/// wasm holds anyway, rather than adding their float32 versions).
macro_rules! impl_fp {
    ($t:ty; native $($f:ident)*; via $via:ty: $($g:ident)*) => {
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
            $(
                #[inline(always)]
                fn $g(self) -> Self {
                    <$via>::$g(self as $via) as $t
                }
            )*
        }
    };
}
impl_fp!(f32; native abs exp tanh;
    via f64: exp_m1 ln_1p tan asin acos atan sinh cosh asinh acosh atanh);
impl_fp!(f64; native abs exp tanh exp_m1 ln_1p tan asin acos atan sinh cosh asinh acosh atanh;
    via f64:);

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
// The shared binary loops

/// An element-wise binary function of any element type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arith {
    /// numpy's `maximum`/`minimum`: NaN propagates.
    Max,
    Min,
    Add,
    /// Integers: the caller rules out a zero divisor.
    Div,
    /// C `fmod` / integer `%`.
    TruncRem,
    /// Python `%`.
    FloorRem,
    /// `a > 0 ? a : a * b`.
    PRelu,
}

/// `op` over `a` and `b` broadcast together: the loop (one per element type) every binary op
/// of this file and Clip/PRelu share.
pub(super) fn arith_map<T: Elem>(
    ctx: &KernelCtx,
    name: &str,
    op: Arith,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> R<ArrayD<T>> {
    binary_map(ctx, name, a, b, move |x, y| x.arith(op, y))
}

/// An integer bit operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BitOp {
    And,
    Or,
    Xor,
    Shl,
    /// Arithmetic (sign-extending) right shift: signed T.
    Shr,
    /// Logical right shift: unsigned T held in a signed type of the same width.
    ShrLogical,
}

/// Integer element types: the bit operations, shifts with ONNX's out-of-range rule.
pub(super) trait Bits:
    Elem + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self>
{
    /// `self` shifted by `s` bits; `signed`: `s` and `self` are signed (arithmetic right
    /// shift), else both are read as unsigned of the same width (logical shifts).
    fn shift(self, s: Self, left: bool, signed: bool) -> Self;

    #[inline(always)]
    fn bit(self, op: BitOp, y: Self) -> Self {
        match op {
            BitOp::And => self & y,
            BitOp::Or => self | y,
            BitOp::Xor => self ^ y,
            BitOp::Shl => self.shift(y, true, true),
            BitOp::Shr => self.shift(y, false, true),
            BitOp::ShrLogical => self.shift(y, false, false),
        }
    }
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

/// `op` over integer `a` and `b` broadcast together (one loop per integer type).
fn bit_map<T: Bits>(
    ctx: &KernelCtx,
    name: &str,
    op: BitOp,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> R<ArrayD<T>> {
    binary_map(ctx, name, a, b, move |x, y| x.bit(op, y))
}

// ---------------------------------------------------------------------------------------------
// Trigonometry: activation.rs's `FloatFn`

super::activation::float_fn_ops! {
    Tan => |_a| Act::Tan;
    Asin => |_a| Act::Asin;
    Acos => |_a| Act::Acos;
    Atan => |_a| Act::Atan;
    Sinh => |_a| Act::Sinh;
    Cosh => |_a| Act::Cosh;
    Asinh => |_a| Act::Asinh;
    Acosh => |_a| Act::Acosh;
    Atanh => |_a| Act::Atanh;
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
    let op = if m.fmod {
        Arith::TruncRem
    } else {
        Arith::FloorRem
    };
    Ok(vec![
        per_type!(OP, a, [F32, F64, I32, I64], x => mod_typed(ctx, op, x, inputs)?),
    ])
}

fn mod_typed<T: Elem>(
    ctx: &KernelCtx,
    op: Arith,
    a: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    const OP: &str = "Mod";
    let b = typed::<T>(OP, inputs, 1)?;
    // Every divisor element is used unless `a` is empty.
    if T::IS_INT && !a.is_empty() && b.iter().any(|&v| v == T::ZERO) {
        return Err(format!("{OP}: integer division by zero"));
    }
    arith_map(ctx, OP, op, a, b)
}

// ---------------------------------------------------------------------------------------------
// BitShift, BitwiseAnd/Or/Xor/Not

/// Every binary integer bit op: output has the inputs' broadcast shape and input 0's type.
#[derive(Debug)]
pub struct IntBinary(pub BitOp);

impl Op for IntBinary {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        broadcast_type(cx, 2)
    }
    fn kernel(&self) -> Kernel {
        int_binary
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn int_binary(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let name = &ctx.node.op_type;
    let op = ctx.attrs::<IntBinary>()?.0;
    let a = input(name, inputs, 0)?;
    Ok(vec![per_type!(name, a, [I32, I64], x => {
        bit_map(ctx, name, op, x, typed(name, inputs, 1)?)?
    })])
}

/// BitShift's handle: `direction` and the opset decide the [`BitOp`].
pub struct BitShift;

impl BitShift {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let op = match a.string("direction")?.as_deref() {
            Some("LEFT") => BitOp::Shl,
            // From opset 28 T includes signed types; before it int32/int64 hold unsigned values.
            Some("RIGHT") if a.opset >= 28 => BitOp::Shr,
            Some("RIGHT") => BitOp::ShrLogical,
            Some(d) => {
                return Err(format!(
                    "attribute 'direction' must be 'LEFT' or 'RIGHT', got '{d}'"
                ))
            }
            None => return Err("attribute 'direction' is required".into()),
        };
        Ok(Box::new(IntBinary(op)))
    }
}

/// Declares the handles of attribute-less `IntBinary` ops.
macro_rules! bitwise_ops {
    ($($name:ident => $op:ident;)*) => {$(
        pub struct $name;
        impl $name {
            pub fn parse(_: &Attrs) -> Result<Box<dyn Op>, String> {
                Ok(Box::new(IntBinary(BitOp::$op)))
            }
        }
    )*};
}

bitwise_ops! {
    BitwiseAnd => And;
    BitwiseOr => Or;
    BitwiseXor => Xor;
}

super::plain_ops!(BitwiseNot);

impl Op for BitwiseNot {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        bitwise_not
    }
}

/// `!x` as `x ^ -1` (all bits set), on the shared loop.
fn bitwise_not(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "BitwiseNot";
    fn not<T: Bits>(ctx: &KernelCtx, a: &ArrayD<T>) -> R<ArrayD<T>> {
        let ones = ArrayD::from_elem(IxDyn(&[]), T::ZERO.wsub(T::ONE));
        bit_map(ctx, OP, BitOp::Xor, a, &ones)
    }
    Ok(vec![
        per_type!(OP, input(OP, inputs, 0)?, [I32, I64], a => not(ctx, a)?),
    ])
}

// ---------------------------------------------------------------------------------------------
// Min, Max, Sum, Mean

/// Every variadic op: its inputs folded pairwise with `op`, divided by their count for Mean.
#[derive(Debug)]
pub struct Variadic {
    pub op: Arith,
    pub mean: bool,
    /// Sum and Mean: float types only.
    pub floats_only: bool,
    /// Opset 8 and later: numpy broadcasting across the inputs.
    pub broadcast: bool,
}

impl Op for Variadic {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        broadcast_type(cx, cx.node.inputs.len())
    }
    fn kernel(&self) -> Kernel {
        variadic
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// Declares the handles of the variadic ops: `Name => op, mean, floats_only`.
macro_rules! variadic_ops {
    ($($name:ident => $op:ident, $mean:expr, $floats:expr;)*) => {$(
        pub struct $name;
        impl $name {
            pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
                Ok(Box::new(Variadic {
                    op: Arith::$op,
                    mean: $mean,
                    floats_only: $floats,
                    broadcast: a.opset >= 8,
                }))
            }
        }
    )*};
}

variadic_ops! {
    Max => Max, false, false;
    Min => Min, false, false;
    Sum => Add, false, true;
    Mean => Add, true, true;
}

fn variadic(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let v = ctx.attrs::<Variadic>()?;
    let name = &ctx.node.op_type;
    let first = input(name, inputs, 0)?;
    // Check every input and the output's size before computing.
    let mut shape = first.shape().to_vec();
    for i in 1..inputs.len() {
        let s = input(name, inputs, i)?.shape();
        if v.broadcast {
            shape = broadcast_shape(name, &shape, s)?;
        } else if s != first.shape() {
            return Err(format!(
                "{name}: input {i} has shape {s:?} but input 0 has {:?} (broadcasting needs opset 8)",
                first.shape()
            ));
        }
    }
    check_out(ctx, name, &shape, bits(first.dtype()))?;
    if v.floats_only && !first.dtype().is_float() {
        return Err(unsupported_type(name, first.dtype()));
    }
    Ok(vec![
        per_type!(name, first, [F32, F64, I32, I64], a => fold(ctx, v, a, inputs)?),
    ])
}

fn fold<T: Elem>(
    ctx: &KernelCtx,
    v: &Variadic,
    first: &ArrayD<T>,
    inputs: &[Option<&Tensor>],
) -> R<ArrayD<T>> {
    let name = &ctx.node.op_type;
    let mut acc: Option<ArrayD<T>> = None;
    for i in 1..inputs.len() {
        let b = typed::<T>(name, inputs, i)?;
        acc = Some(arith_map(
            ctx,
            name,
            v.op,
            acc.as_ref().unwrap_or(first),
            b,
        )?);
    }
    let acc = acc.unwrap_or_else(|| first.clone());
    if !v.mean {
        return Ok(acc);
    }
    let n = ArrayD::from_elem(IxDyn(&[]), T::from_f64(inputs.len() as f64));
    arith_map(ctx, name, Arith::Div, &acc, &n)
}

#[cfg(test)]
#[path = "math_tests.rs"]
mod tests;
