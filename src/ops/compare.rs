//! ai.onnx comparisons, logic and Where. All broadcast multidirectionally (`broadcast.rs`).
//!
//! | op | versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | Equal, Less, Greater | 1- | `broadcast`, `axis` (opsets < 7 only; refused) | A, B: T (numeric; Equal also bool from 11, string from 19) -> C: bool |
//! | LessOrEqual, GreaterOrEqual | 12- | none | A, B: T -> C: bool |
//! | And, Or, Xor | 1- | as Equal | A, B: bool -> C: bool |
//! | Not | 1- | none | X: bool -> Y: bool |
//! | Where | 9- | none | condition: bool, X, Y: T (any type, strings too) -> output: T (from 16 T includes bfloat16) |
//!
//! Versions 7 (numpy broadcasting), 11, 13, 16 and 19 only widened the type lists, so nothing
//! here branches on the opset.

use ndarray::ArrayD;

use super::broadcast::{binary_map, select_map};
use super::common::{input, type_mismatch, unsupported_type};
use super::elementwise::binary_ops;
use super::infer::broadcast_inputs;
use super::lowering::NodeCtx;
use super::strings::{select_strings, zip2};
use super::{InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

binary_ops! {
    Equal => equal, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "u32(v0 == v1)");
    Less => less, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "u32(v0 < v1)");
    LessOrEqual => less_or_equal, same_type: true, out: |_| Some(DType::BOOL),
        wgsl: |c| c.ew(2, "u32(v0 <= v1)");
    Greater => greater, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "u32(v0 > v1)");
    GreaterOrEqual => greater_or_equal, same_type: true, out: |_| Some(DType::BOOL),
        wgsl: |c| c.ew(2, "u32(v0 >= v1)");
    And => and, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "v0 & v1");
    Or => or, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "v0 | v1");
    Xor => xor, same_type: true, out: |_| Some(DType::BOOL), wgsl: |c| c.ew(2, "v0 ^ v1");
}

super::plain_ops!(Not, Where);

impl Op for Not {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(DType::BOOL),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        not
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        c.ew(1, "u32(v0 == 0u)")
    }
}

impl Op for Where {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (x, y) = (cx.input(1), cx.input(2));
        vec![TensorType {
            dtype: x.dtype.or(y.dtype),
            shape: broadcast_inputs(cx, 3),
        }]
    }
    fn kernel(&self) -> Kernel {
        where_
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        c.ew(3, "select(v2, v1, v0 != 0u)")
    }
}

/// A comparison of two values of one type, as the set of orderings it holds for (bits `LT`,
/// `EQ`, `GT`). Float comparisons follow IEEE 754: NaN is unordered with everything, so every
/// comparison with NaN is false (Equal(NaN, NaN) too). One runtime value rather than a type per
/// op: the five ops share one loop per element type.
#[derive(Clone, Copy)]
struct Cmp {
    name: &'static str,
    holds: u8,
    /// Equal accepts bool and string inputs; the ordering comparisons do not.
    equality: bool,
}

const LT: u8 = 1;
const EQ: u8 = 2;
const GT: u8 = 4;

impl Cmp {
    #[inline(always)]
    fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
        let bit = match a.partial_cmp(&b) {
            Some(std::cmp::Ordering::Less) => LT,
            Some(std::cmp::Ordering::Equal) => EQ,
            Some(std::cmp::Ordering::Greater) => GT,
            None => 0,
        };
        self.holds & bit != 0
    }
}

fn compare(ctx: &KernelCtx, inputs: &[Option<&Tensor>], op: Cmp) -> KernelResult {
    let name = op.name;
    let a = input(name, inputs, 0)?;
    let b = input(name, inputs, 1)?;
    let out: ArrayD<bool> = match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => binary_map(ctx, name, a, b, |x, y| op.apply(x, y))?,
        (Tensor::F64(a), Tensor::F64(b)) => binary_map(ctx, name, a, b, |x, y| op.apply(x, y))?,
        (Tensor::I32(a), Tensor::I32(b)) => binary_map(ctx, name, a, b, |x, y| op.apply(x, y))?,
        (Tensor::I64(a), Tensor::I64(b)) => binary_map(ctx, name, a, b, |x, y| op.apply(x, y))?,
        (Tensor::Bool(a), Tensor::Bool(b)) if op.equality => {
            binary_map(ctx, name, a, b, |x, y| x == y)?
        }
        // Strings: Equal only (from 19), byte-wise.
        (Tensor::Str(a), Tensor::Str(b)) if op.equality => zip2(ctx, name, a, b, 8, |x, y| x == y)?,
        (a, b) if a.dtype() == b.dtype() => return Err(unsupported_type(name, a.dtype())),
        (a, b) => return Err(type_mismatch(name, a.dtype(), b.dtype())),
    };
    Ok(vec![Tensor::Bool(out)])
}

const fn order(name: &'static str, holds: u8) -> Cmp {
    Cmp {
        name,
        holds,
        equality: false,
    }
}

pub fn equal(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let op = Cmp {
        name: "Equal",
        holds: EQ,
        equality: true,
    };
    compare(ctx, inputs, op)
}

pub fn less(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    compare(ctx, inputs, order("Less", LT))
}

pub fn less_or_equal(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    compare(ctx, inputs, order("LessOrEqual", LT | EQ))
}

pub fn greater(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    compare(ctx, inputs, order("Greater", GT))
}

pub fn greater_or_equal(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    compare(ctx, inputs, order("GreaterOrEqual", GT | EQ))
}

/// A binary logical op: both inputs bool (the spec's `T` is tensor(bool) only).
fn logical(
    ctx: &KernelCtx,
    op: &str,
    inputs: &[Option<&Tensor>],
    f: fn(bool, bool) -> bool,
) -> KernelResult {
    let a = input(op, inputs, 0)?;
    let b = input(op, inputs, 1)?;
    match (a, b) {
        (Tensor::Bool(a), Tensor::Bool(b)) => Ok(vec![Tensor::Bool(binary_map(ctx, op, a, b, f)?)]),
        (a, b) if a.dtype() == b.dtype() => Err(unsupported_type(op, a.dtype())),
        (a, b) => Err(type_mismatch(op, a.dtype(), b.dtype())),
    }
}

pub fn and(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    logical(ctx, "And", inputs, |a, b| a & b)
}

pub fn or(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    logical(ctx, "Or", inputs, |a, b| a | b)
}

pub fn xor(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    logical(ctx, "Xor", inputs, |a, b| a ^ b)
}

pub fn not(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    match input("Not", inputs, 0)? {
        Tensor::Bool(a) => Ok(vec![Tensor::Bool(a.mapv(|v| !v))]),
        t => Err(unsupported_type("Not", t.dtype())),
    }
}

/// Where(condition, X, Y): X where the bool condition holds, else Y; X and Y share one type and
/// all three broadcast together.
pub fn where_(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Where";
    let c = match input(OP, inputs, 0)? {
        Tensor::Bool(c) => c,
        t => return Err(format!("{OP}: condition must be bool, got {}", t.dtype())),
    };
    let x = input(OP, inputs, 1)?;
    let y = input(OP, inputs, 2)?;
    let out = match (x, y) {
        (Tensor::F32(x), Tensor::F32(y)) => Tensor::F32(select_map(ctx, OP, c, x, y)?),
        (Tensor::F64(x), Tensor::F64(y)) => Tensor::F64(select_map(ctx, OP, c, x, y)?),
        (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(select_map(ctx, OP, c, x, y)?),
        (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(select_map(ctx, OP, c, x, y)?),
        (Tensor::Bool(x), Tensor::Bool(y)) => Tensor::Bool(select_map(ctx, OP, c, x, y)?),
        (Tensor::Str(x), Tensor::Str(y)) => Tensor::Str(select_strings(ctx, OP, c, x, y)?),
        (x, y) if x.dtype() == y.dtype() => return Err(unsupported_type(OP, x.dtype())),
        (x, y) => return Err(type_mismatch(OP, x.dtype(), y.dtype())),
    };
    Ok(vec![out])
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
