//! ai.onnx Cast, BitCast and Constant: the ops that retype a value or are one.
//!
//! | op | versions | attributes (default) | notes |
//! |---|---|---|---|
//! | Cast | 6- | `to` (required); `saturate` (19), `round_mode` (24): float8/4 only | floats to ints truncate toward zero |
//! | CastLike | 15- | `saturate` (19), `round_mode` (24): float8/4 only | input 1 gives only the target type |
//! | BitCast | 26- | `to` (required; same bit width as the input) | the bits reread as `to`, little endian |
//! | Constant | 1- | exactly one of `value`, `value_float(s)`, `value_int(s)`, `value_string(s)`, `sparse_value` | decoded once, at parse |

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input};
use super::lowering::{NodeCtx, R};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::limits::Limits;
use crate::onnx::tensor::to_tensor;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

#[derive(Debug)]
pub struct Cast {
    pub to: DType,
}

impl Cast {
    pub fn parse(a: &Attrs) -> P {
        let to = a.opt_int("to")?.ok_or("attribute 'to' is required")?;
        let to = i32::try_from(to).map_err(|_| format!("attribute 'to' is not a type: {to}"))?;
        Ok(Box::new(Cast { to: DType(to) }))
    }
}

impl Op for Cast {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(self.to),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        cast
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        use super::wgsl::Ty;
        let (from, to) = (c.ty(0)?, c.out_ty(0)?);
        // float16 is computed in float32 (`Ty::of`); a Cast to it rounds to float16.
        let to_f16 = c.out(0)?.dtype == DType::F16 && c.input(0)?.dtype != DType::F16;
        let (src, dst) = (c.input(0)?.dtype, c.out(0)?.dtype);
        if matches!(dst, DType::U8 | DType::I8) && src != dst {
            return Err(format!("Cast from {src} to {dst} is not on webgpu"));
        }
        if from == to && !to_f16 {
            return Ok(Lowered::Alias);
        }
        let e = match (from, to) {
            (_, Ty::U32) => format!("u32(v0 != {})", from.zero()),
            (Ty::U32, t) => format!("{}(v0)", t.wgsl()),
            (_, t) => format!("{}(v0)", t.wgsl()),
        };
        if to_f16 {
            let l = c.ew(1, &format!("f16r_({e})"))?;
            return Ok(super::lowering::prepend(l, super::wgsl::F16_ROUND));
        }
        c.ew(1, &e)
    }
}

super::plain_ops!(CastLike);

impl Op for CastLike {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(1).dtype,
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        cast_like
    }
}

/// CastLike: Cast to the element type of input 1 (whose values are not read).
pub fn cast_like(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "CastLike";
    let src = input(OP, inputs, 0)?;
    cast_to(ctx, OP, src, input(OP, inputs, 1)?.dtype())
}

#[derive(Debug)]
pub struct Constant {
    /// The value, decoded once when the node is parsed; or why the reference backend cannot
    /// hold it (the kernel's error: the model still loads).
    pub value: Result<Tensor, String>,
    /// The output's type as the attribute states it, even where the value cannot be held
    /// (float16, strings).
    pub ty: TensorType,
}

impl Constant {
    pub fn parse(a: &Attrs) -> P {
        let known = |d: &[i64]| Some(d.iter().map(|&d| Dim::Known(d)).collect());
        let ty = if let Some(t) = a.tensor("value")? {
            TensorType {
                dtype: Some(DType(t.data_type)),
                shape: known(&t.dims),
            }
        } else if a.has("value_float") || a.has("value_int") {
            let f = a.has("value_float");
            TensorType {
                dtype: Some(if f { DType::F32 } else { DType::I64 }),
                shape: Some(vec![]),
            }
        } else if let Some(f) = a.floats("value_floats")? {
            TensorType {
                dtype: Some(DType::F32),
                shape: known(&[f.len() as i64]),
            }
        } else if let Some(i) = a.ints("value_ints")? {
            TensorType {
                dtype: Some(DType::I64),
                shape: known(&[i.len() as i64]),
            }
        } else if a.has("value_string") {
            TensorType {
                dtype: Some(DType::STRING),
                shape: Some(vec![]),
            }
        } else if let Some(s) = a.strings("value_strings")? {
            TensorType {
                dtype: Some(DType::STRING),
                shape: known(&[s.len() as i64]),
            }
        } else {
            TensorType::default()
        };
        Ok(Box::new(Constant {
            value: constant_value(a)?,
            ty,
        }))
    }
}

impl Op for Constant {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, _: &InferCx) -> Vec<TensorType> {
        vec![self.ty.clone()]
    }
    fn kernel(&self) -> Kernel {
        constant
    }
}

/// Cast between any two held types (`Tensor::cast` owns the conversions). `saturate` (19+)
/// and `round_mode` (24+) only concern float8/float4 targets, which this backend does not hold.
pub fn cast(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Cast";
    let src = input(OP, inputs, 0)?;
    cast_to(ctx, OP, src, ctx.attrs::<Cast>()?.to)
}

fn cast_to(ctx: &KernelCtx, op: &str, src: &Tensor, to: DType) -> KernelResult {
    check_out(ctx, op, src.shape(), bits(to))?;
    let out = src
        .try_cast(to)
        .map_err(|e| format!("{op}: {}", e.trim_start_matches("Cast: ")))?;
    Ok(vec![out])
}

/// ai.onnx BitCast (26): the input's bytes reread as `to`.
#[derive(Debug)]
pub struct BitCast {
    pub to: DType,
}

impl BitCast {
    pub fn parse(a: &Attrs) -> P {
        let to = a
            .opt_int("to")?
            .ok_or("BitCast: attribute 'to' is required")?;
        let to = i32::try_from(to).map_err(|_| format!("BitCast: 'to' is not a type: {to}"))?;
        let to = DType(to);
        if to.bits().is_none() {
            return Err(format!("BitCast: 'to' = {to} has no fixed bit width"));
        }
        Ok(Box::new(BitCast { to }))
    }
}

impl Op for BitCast {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: Some(self.to),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        bit_cast
    }
}

/// BitCast: the input encoded as little-endian bytes (the codec's raw form) and decoded as
/// `to`, which must have the input's bit width. A bool target reads any nonzero byte as true.
pub fn bit_cast(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "BitCast";
    let src = input(OP, inputs, 0)?;
    let to = ctx.attrs::<BitCast>()?.to;
    let (from_bits, to_bits) = (src.dtype().bits(), to.bits());
    if from_bits != to_bits {
        return Err(format!(
            "{OP}: {} ({from_bits:?} bits) and {to} ({to_bits:?} bits) differ in width",
            src.dtype()
        ));
    }
    check_out(ctx, OP, src.shape(), bits(to))?;
    let mut proto = crate::onnx::tensor::from_tensor("", src);
    proto.data_type = to.0;
    let out = to_tensor(&proto, ctx.limits).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![out])
}

const CONSTANT_ATTRS: [&str; 8] = [
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "sparse_value",
];

/// Constant: its value, decoded when the node was parsed.
pub fn constant(ctx: &KernelCtx, _inputs: &[Option<&Tensor>]) -> KernelResult {
    Ok(vec![ctx.attrs::<Constant>()?.value.clone()?])
}

/// Exactly one of the value attributes gives the output. Wrong attribute types are parse errors;
/// what the reference backend cannot hold (strings, sparse, float16) is the kernel's error.
fn constant_value(a: &Attrs) -> R<Result<Tensor, String>> {
    const OP: &str = "Constant";
    let present: Vec<&str> = CONSTANT_ATTRS
        .iter()
        .copied()
        .filter(|n| a.has(n))
        .collect();
    let name = match present.as_slice() {
        [one] => *one,
        _ => {
            return Ok(Err(format!(
                "{OP}: expected exactly one of {CONSTANT_ATTRS:?}, found {present:?}"
            )))
        }
    };
    let wrong = || format!("{OP}: attribute '{name}' has the wrong attribute type");
    let vec1 = |v: usize| IxDyn(&[v]);
    Ok(Ok(match name {
        "value" => {
            let tp = a.tensor(name)?.ok_or_else(wrong)?;
            match to_tensor(tp, &Limits::default()) {
                Ok(t) => t,
                Err(e) => return Ok(Err(format!("{OP}: {e}"))),
            }
        }
        "value_float" => Tensor::scalar_f32(a.opt_float(name)?.ok_or_else(wrong)?),
        "value_floats" => {
            let v = a.floats(name)?.ok_or_else(wrong)?;
            Tensor::F32(ArrayD::from_shape_vec(vec1(v.len()), v).map_err(|e| e.to_string())?)
        }
        "value_int" => Tensor::I64(ArrayD::from_elem(
            IxDyn(&[]),
            a.opt_int(name)?.ok_or_else(wrong)?,
        )),
        "value_ints" => Tensor::from_i64s(&a.ints(name)?.ok_or_else(wrong)?),
        "value_string" => Tensor::Str(ArrayD::from_elem(
            IxDyn(&[]),
            a.string(name)?.ok_or_else(wrong)?,
        )),
        "value_strings" => {
            let v = a.strings(name)?.ok_or_else(wrong)?;
            Tensor::Str(ArrayD::from_shape_vec(vec1(v.len()), v).map_err(|e| e.to_string())?)
        }
        _ => {
            return Ok(Err(format!(
                "{OP}: '{name}' is not supported: the reference backend has no sparse tensors"
            )))
        }
    }))
}

#[cfg(test)]
#[path = "cast_tests.rs"]
mod tests;
