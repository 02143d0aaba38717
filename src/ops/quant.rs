//! Linear quantization (ai.onnx): values stored as small integers with a scale and zero point.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | QuantizeLinear | 10, 13, 19, 21, 23 | `axis` (1, 13+), `saturate` (1, 19+, float8 only), `block_size` (0, 21+), `output_dtype` (0, 21+), `precision` (0, 23+) | x, y_scale, y_zero_point? -> y (zero point's type, else output_dtype, else uint8) |
//! | DequantizeLinear | 10, 13, 19, 21, 23 | `axis` (1, 13+), `block_size` (0, 21+), `output_dtype` (0, 23+) | x, x_scale, x_zero_point? -> y (output_dtype, else the scale's type) |
//! | DynamicQuantizeLinear | 11 | - | x (float32) -> y (uint8), y_scale (scalar), y_zero_point (uint8 scalar) |
//! | MatMulInteger | 10 | - | A, B (int8/uint8), a_zero_point? (scalar or per row), b_zero_point? (scalar or per column) -> int32 |
//! | QLinearMatMul | 10, 21 | - | a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp -> y (y_zp's type) |
//!
//! Granularity of scale/zero point (13+): a scalar (or one element) is per tensor; a 1-D tensor
//! of x.shape[axis] elements is per axis; with `block_size` > 0 (21+) the scale has x's rank and
//! x's dims except ceil(x.shape[axis] / block_size) on `axis` (blocked). QuantizeLinear is
//! `saturate(round_half_even(x / scale) + zero_point)`; 19 adds float8 outputs, 21 int4/uint4 and
//! int16/uint16, 23 float4 and `precision` (the type the division is computed in): int4 and
//! uint4 are held (saturating to [-8, 7] and [0, 15]); the float8, float4 and 2-bit types are not
//! held by this backend and are refused with an error naming the type. 21 changes QLinearMatMul only in the types it lists (float16/bfloat16 scales, float8).
//! Kernels take every element type as stored (`any_element_type`): the zero point's type decides
//! the output's.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, norm_axis, opt_input, unsupported_type};
use super::lowering::{NodeCtx, Ty, R};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

mod lower;

type P = Result<Box<dyn Op>, String>;

fn dtype_attr(a: &Attrs, name: &str) -> Result<Option<DType>, String> {
    match a.int(name, 0)? {
        0 => Ok(None),
        d => i32::try_from(d)
            .map(|d| Some(DType(d)))
            .map_err(|_| format!("attribute '{name}' is not a type: {d}")),
    }
}

/// The integer range of a quantized type held by this backend.
pub(super) fn qrange(op: &str, t: DType) -> Result<(f64, f64), String> {
    Ok(match t {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::I4 => (-8.0, 7.0),
        DType::U4 => (0.0, 15.0),
        _ => {
            return Err(format!(
                "{op}: quantized type {t} is not supported (only int4, uint4, int8, uint8, int16, uint16; float8, float4 and 2-bit types are not held)"
            ))
        }
    })
}

/// Which scale/zero-point element each element of x uses.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Tensor,
    /// Per axis: dim of the axis, product of the dims after it.
    Axis {
        d: usize,
        inner: usize,
    },
    /// Blocked along the axis.
    Blocked {
        d: usize,
        inner: usize,
        block: usize,
        nb: usize,
    },
}

impl Layout {
    fn new(op: &str, x: &[usize], p: &[usize], axis: i64, block: i64) -> Result<Layout, String> {
        let n: usize = p.iter().product();
        if block == 0 && p.len() <= 1 && n == 1 {
            return Ok(Layout::Tensor);
        }
        let ax = norm_axis(op, axis, x.len())?;
        let d = x[ax];
        let inner: usize = x[ax + 1..].iter().product();
        if block == 0 {
            if p.len() == 1 && p[0] == d {
                return Ok(Layout::Axis { d, inner });
            }
            return Err(format!(
                "{op}: scale shape {p:?} fits input shape {x:?} neither per tensor nor per axis {axis}"
            ));
        }
        let block =
            usize::try_from(block).map_err(|_| format!("{op}: block_size {block} is negative"))?;
        let nb = d.div_ceil(block);
        let fits = p.len() == x.len()
            && p.iter()
                .zip(x)
                .enumerate()
                .all(|(i, (&a, &b))| if i == ax { a == nb } else { a == b });
        if !fits {
            return Err(format!(
                "{op}: scale shape {p:?} does not fit input shape {x:?} blocked by {block} on axis {axis} (want dim {nb} there, the rest equal)"
            ));
        }
        Ok(Layout::Blocked {
            d,
            inner,
            block,
            nb,
        })
    }

    #[inline]
    fn idx(self, i: usize) -> usize {
        match self {
            Layout::Tensor => 0,
            Layout::Axis { d, inner } => (i / inner) % d,
            Layout::Blocked {
                d,
                inner,
                block,
                nb,
            } => {
                let a = (i / inner) % d;
                ((i / (inner * d)) * nb + a / block) * inner + i % inner
            }
        }
    }
}

/// A per-tensor parameter's shape: a scalar or a one-element vector.
fn one(shape: &[usize]) -> bool {
    shape.len() <= 1 && shape.iter().product::<usize>() == 1
}

/// Scale and zero point (as f64), validated against x; the zero point must match the scale's
/// shape (or both be one element of rank 0 or 1).
fn params(
    op: &str,
    x: &Tensor,
    scale: &Tensor,
    zp: Option<&Tensor>,
    axis: i64,
    block: i64,
) -> Result<(Layout, Vec<f64>, Vec<f64>), String> {
    let layout = Layout::new(op, x.shape(), scale.shape(), axis, block)?;
    let s = scale.to_f64_vec();
    let z = match zp {
        // Per tensor, a scalar and a one-element vector are the same parameter (onnx's int4
        // DequantizeLinear case pairs a scalar scale with a [1] zero point).
        Some(z) if z.shape() != scale.shape() && !(one(z.shape()) && one(scale.shape())) => {
            return Err(format!(
                "{op}: zero point shape {:?} differs from scale shape {:?}",
                z.shape(),
                scale.shape()
            ))
        }
        Some(z) => z.to_f64_vec(),
        None => vec![0.0; s.len()],
    };
    Ok((layout, s, z))
}

pub(super) fn float_math(t: DType) -> bool {
    matches!(t, DType::F32 | DType::F16 | DType::BF16)
}

/// `saturate(round_half_even(x / s) + z)` into `[lo, hi]`, the division in float32 unless
/// `f64_math`.
#[inline]
pub(super) fn quantize1(x: f64, s: f64, z: f64, lo: f64, hi: f64, f64_math: bool) -> f64 {
    let q = if f64_math {
        x / s
    } else {
        (x as f32 / s as f32) as f64
    };
    let r = q.round_ties_even() + z;
    if r.is_nan() {
        z.clamp(lo, hi)
    } else {
        r.clamp(lo, hi)
    }
}

/// A tensor of type `t` from exact integer values.
pub(super) fn int_tensor(
    op: &str,
    shape: &[usize],
    v: Vec<f64>,
    t: DType,
) -> Result<Tensor, String> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v.into_iter().map(|v| v as i64).collect())
        .map_err(|e| format!("{op}: {e}"))?;
    Tensor::I64(a)
        .cast(t)
        .ok_or_else(|| unsupported_type(op, t))
}

/// A float32 tensor narrowed to `t` (float32, float16, bfloat16).
pub(super) fn float_tensor(
    op: &str,
    shape: &[usize],
    v: Vec<f32>,
    t: DType,
) -> Result<Tensor, String> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("{op}: {e}"))?;
    Tensor::F32(a)
        .narrow(t)
        .ok_or_else(|| unsupported_type(op, t))
}

#[derive(Debug)]
pub struct QuantizeLinear {
    pub axis: i64,
    pub block_size: i64,
    pub output_dtype: Option<DType>,
    pub precision: Option<DType>,
}

impl QuantizeLinear {
    pub fn parse(a: &Attrs) -> P {
        let block_size = a.int("block_size", 0)?;
        if block_size < 0 {
            return Err(format!(
                "attribute 'block_size' must be >= 0, got {block_size}"
            ));
        }
        Ok(Box::new(QuantizeLinear {
            axis: a.int("axis", 1)?,
            block_size,
            output_dtype: dtype_attr(a, "output_dtype")?,
            precision: dtype_attr(a, "precision")?,
        }))
    }

    fn out_type(&self, zp: Option<DType>) -> DType {
        zp.or(self.output_dtype).unwrap_or(DType::U8)
    }
}

impl Op for QuantizeLinear {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let zp = if cx.has_input(2) {
            match cx.input(2).dtype {
                Some(t) => Some(t),
                None => {
                    return vec![TensorType {
                        dtype: None,
                        shape: cx.input(0).shape,
                    }]
                }
            }
        } else {
            None
        };
        vec![TensorType {
            dtype: Some(self.out_type(zp)),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        quantize_linear
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

fn quantize_linear(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "QuantizeLinear";
    let p = ctx.attrs::<QuantizeLinear>()?;
    let x = input(OP, inputs, 0)?;
    let scale = input(OP, inputs, 1)?;
    let zp = opt_input(inputs, 2);
    let t = p.out_type(zp.map(|z| z.dtype()));
    if let (Some(o), Some(z)) = (p.output_dtype, zp) {
        if o != z.dtype() {
            return Err(format!(
                "{OP}: output_dtype {o} differs from the zero point's type {}",
                z.dtype()
            ));
        }
    }
    let (lo, hi) = qrange(OP, t)?;
    if !(float_math(x.dtype()) || matches!(x.dtype(), DType::F64 | DType::I32)) {
        return Err(unsupported_type(OP, x.dtype()));
    }
    let f64_math =
        x.dtype() == DType::F64 || x.dtype() == DType::I32 || p.precision == Some(DType::F64);
    check_out(ctx, OP, x.shape(), 8)?;
    let (layout, s, z) = params(OP, x, scale, zp, p.axis, p.block_size)?;
    let xs = x.to_f64_vec();
    let mut out = Vec::with_capacity(xs.len());
    for (i, &v) in xs.iter().enumerate() {
        let k = layout.idx(i);
        let (sv, zv) = (*s.get(k).unwrap_or(&1.0), *z.get(k).unwrap_or(&0.0));
        out.push(quantize1(v, sv, zv, lo, hi, f64_math));
    }
    Ok(vec![int_tensor(OP, x.shape(), out, t)?])
}

#[derive(Debug)]
pub struct DequantizeLinear {
    pub axis: i64,
    pub block_size: i64,
    pub output_dtype: Option<DType>,
}

impl DequantizeLinear {
    pub fn parse(a: &Attrs) -> P {
        let block_size = a.int("block_size", 0)?;
        if block_size < 0 {
            return Err(format!(
                "attribute 'block_size' must be >= 0, got {block_size}"
            ));
        }
        Ok(Box::new(DequantizeLinear {
            axis: a.int("axis", 1)?,
            block_size,
            output_dtype: dtype_attr(a, "output_dtype")?,
        }))
    }
}

impl Op for DequantizeLinear {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: self.output_dtype.or(cx.input(1).dtype),
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        dequantize_linear
    }
    fn any_element_type(&self) -> bool {
        true
    }
    /// One elementwise dispatch, `f32(x - zp) * scale` as the reference computes it (exact
    /// integer difference, one rounded product), for a per-tensor scale and zero point and x
    /// uint8/int8/int32 (held as int32 on the GPU).
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        const OP: &str = "DequantizeLinear";
        let x = c.input(0)?.dtype;
        if ![DType::U8, DType::I8, DType::I32].contains(&x) {
            return Err(format!(
                "{OP} of {x} is not on webgpu (uint8, int8, int32 are)"
            ));
        }
        let per_tensor = |i: usize| -> R<bool> {
            Ok(!c.has_input(i) || super::wgsl::numel(&c.input(i)?.shape) == 1)
        };
        if !per_tensor(1)? || !per_tensor(2)? {
            return Err(format!(
                "{OP}: only a per-tensor scale and zero point are on webgpu (per-axis and blocked are not)"
            ));
        }
        if c.ty(1)? != Ty::F32 {
            return Err(format!("{OP}: scale must be a float on webgpu"));
        }
        if c.has_input(2) {
            c.ew(3, "f32(v0 - v2) * v1")
        } else {
            c.ew(2, "f32(v0) * v1")
        }
    }
}

fn dequantize_linear(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DequantizeLinear";
    let p = ctx.attrs::<DequantizeLinear>()?;
    let x = input(OP, inputs, 0)?;
    let scale = input(OP, inputs, 1)?;
    let zp = opt_input(inputs, 2);
    if x.dtype() != DType::I32 {
        qrange(OP, x.dtype())?;
    }
    if let Some(z) = zp {
        if z.dtype() != x.dtype() {
            return Err(format!(
                "{OP}: zero point type {} differs from x's type {}",
                z.dtype(),
                x.dtype()
            ));
        }
    }
    let t = p.output_dtype.unwrap_or(scale.dtype());
    if !float_math(t) || !float_math(scale.dtype()) {
        return Err(unsupported_type(OP, t));
    }
    check_out(ctx, OP, x.shape(), 32)?;
    let (layout, s, z) = params(OP, x, scale, zp, p.axis, p.block_size)?;
    let xs = x.to_f64_vec();
    let out = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = layout.idx(i);
            (v - z.get(k).unwrap_or(&0.0)) as f32 * *s.get(k).unwrap_or(&1.0) as f32
        })
        .collect();
    Ok(vec![float_tensor(OP, x.shape(), out, t)?])
}

super::plain_ops!(DynamicQuantizeLinear, MatMulInteger, QLinearMatMul);

impl Op for DynamicQuantizeLinear {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![
            TensorType {
                dtype: Some(DType::U8),
                shape: cx.input(0).shape,
            },
            TensorType::new(DType::F32, vec![]),
            TensorType::new(DType::U8, vec![]),
        ]
    }
    fn kernel(&self) -> Kernel {
        dynamic_quantize_linear
    }
    fn any_element_type(&self) -> bool {
        true
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        lower::dynamic_quantize_linear(c)
    }
}

/// DynamicQuantizeLinear's uint8 scale and zero point for `x`: its range widened to hold 0.
pub(super) fn dynamic_params(x: &ArrayD<f32>) -> (f32, f32) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in x.iter() {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let scale = if hi == lo { 1.0 } else { hi - lo } / 255.0;
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp)
}

fn dynamic_quantize_linear(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DynamicQuantizeLinear";
    let x = match input(OP, inputs, 0)? {
        Tensor::F32(a) => a,
        t => return Err(unsupported_type(OP, t.dtype())),
    };
    check_out(ctx, OP, x.shape(), 8)?;
    let (scale, zp) = dynamic_params(x);
    let out = x
        .iter()
        .map(|&v| quantize1(v as f64, scale as f64, zp as f64, 0.0, 255.0, false))
        .collect();
    Ok(vec![
        int_tensor(OP, x.shape(), out, DType::U8)?,
        Tensor::scalar_f32(scale),
        int_tensor(OP, &[], vec![zp as f64], DType::U8)?,
    ])
}

/// `x - zp` as int32, the zero point a scalar or one value per row (`per` = the row's element
/// count and `n` rows, A) or per column (`per` = 1 and `n` columns, B).
pub(super) fn centered(
    op: &str,
    what: &str,
    x: &Tensor,
    zp: Option<&Tensor>,
    col: bool,
) -> Result<Tensor, String> {
    let sh = x.shape();
    let (n, stride) = match (sh.len(), col) {
        (0, _) => return Err(format!("{op}: {what} must have rank >= 1")),
        (r, true) if r >= 2 => (sh[r - 1], 1),
        (r, false) if r >= 2 => (sh[r - 2], sh[r - 1]),
        (_, _) => (sh[0], 1),
    };
    let z = int8_zero_points(op, what, x, zp)?;
    let per_elem = z.len() != 1;
    if per_elem && (z.len() != n || sh.len() < 2) {
        return Err(format!(
            "{op}: {what}'s zero point has {} elements; want 1 or {n} (one per {})",
            z.len(),
            if col { "column" } else { "row" }
        ));
    }
    let v: Vec<i32> = x
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let k = if per_elem { (i / stride.max(1)) % n } else { 0 };
            (v - z.get(k).unwrap_or(&0.0)) as i32
        })
        .collect();
    ArrayD::from_shape_vec(IxDyn(sh), v)
        .map(Tensor::I32)
        .map_err(|e| format!("{op}: {e}"))
}

pub(super) fn int_matmul(
    ctx: &KernelCtx,
    op: &str,
    a: Tensor,
    b: Tensor,
) -> Result<ArrayD<i32>, String> {
    match super::matmul::matmul(ctx, &[Some(&a), Some(&b)])
        .map_err(|e| format!("{op}: {e}"))?
        .pop()
    {
        Some(Tensor::I32(y)) => Ok(y),
        _ => Err(format!(
            "{op}: internal: integer MatMul gave no int32 result"
        )),
    }
}

pub(super) fn infer_matmul(cx: &InferCx, dtype: Option<DType>) -> TensorType {
    let mut t = Op::infer(&super::matmul::MatMul, cx).remove(0);
    t.dtype = dtype;
    t
}

impl Op for MatMulInteger {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![infer_matmul(cx, Some(DType::I32))]
    }
    fn kernel(&self) -> Kernel {
        matmul_integer
    }
    fn any_element_type(&self) -> bool {
        true
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        lower::matmul_integer(c)
    }
}

fn matmul_integer(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MatMulInteger";
    let a = centered(OP, "A", input(OP, inputs, 0)?, opt_input(inputs, 2), false)?;
    let b = centered(OP, "B", input(OP, inputs, 1)?, opt_input(inputs, 3), true)?;
    Ok(vec![Tensor::I32(int_matmul(ctx, OP, a, b)?)])
}

impl Op for QLinearMatMul {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![infer_matmul(cx, cx.input(7).dtype)]
    }
    fn kernel(&self) -> Kernel {
        qlinear_matmul
    }
    fn any_element_type(&self) -> bool {
        true
    }
}

/// A scale that is a scalar or one value per row/column (`n` of them).
pub(super) fn scales(op: &str, what: &str, s: &Tensor, n: usize) -> Result<Vec<f32>, String> {
    if !float_math(s.dtype()) {
        return Err(format!("{op}: {what} must be float, got {}", s.dtype()));
    }
    let v: Vec<f32> = s.to_f64_vec().iter().map(|&v| v as f32).collect();
    if v.len() != 1 && v.len() != n {
        return Err(format!(
            "{op}: {what} has {} elements; want 1 or {n}",
            v.len()
        ));
    }
    Ok(v)
}

fn qlinear_matmul(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "QLinearMatMul";
    let (a, b) = (input(OP, inputs, 0)?, input(OP, inputs, 3)?);
    let (m, n) = match (a.shape(), b.shape()) {
        (sa, sb) if sa.len() >= 2 && sb.len() >= 2 => (sa[sa.len() - 2], sb[sb.len() - 1]),
        (sa, sb) => return Err(format!("{OP}: a {sa:?} and b {sb:?} must have rank >= 2")),
    };
    let sa = scales(OP, "a_scale", input(OP, inputs, 1)?, m)?;
    let sb = scales(OP, "b_scale", input(OP, inputs, 4)?, n)?;
    let sy = scales(OP, "y_scale", input(OP, inputs, 6)?, 1)?;
    let yz = input(OP, inputs, 7)?;
    let (lo, hi) = qrange(OP, yz.dtype())?;
    let yz = *yz
        .to_f64_vec()
        .first()
        .ok_or_else(|| format!("{OP}: y_zero_point is empty"))?;
    let ac = centered(OP, "a", a, Some(input(OP, inputs, 2)?), false)?;
    let bc = centered(OP, "b", b, Some(input(OP, inputs, 5)?), true)?;
    let acc = int_matmul(ctx, OP, ac, bc)?;
    let t = input(OP, inputs, 7)?.dtype();
    let shape = acc.shape().to_vec();
    let out = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let r = if sa.len() == 1 { 0 } else { (i / n) % m };
            let c = if sb.len() == 1 { 0 } else { i % n };
            let mult = sa[r] * sb[c] / sy[0];
            ((v as f32 * mult).round_ties_even() as f64 + yz).clamp(lo, hi)
        })
        .collect();
    Ok(vec![int_tensor(OP, &shape, out, t)?])
}

#[cfg(test)]
#[path = "quant_tests.rs"]
mod tests;

/// The zero point(s) of an int8/uint8 operand `x` as float64 (0 when omitted): `x` must be int8
/// or uint8 and the zero point of its type. Shared by MatMulInteger and the integer convolutions.
pub(super) fn int8_zero_points(
    op: &str,
    what: &str,
    x: &Tensor,
    zp: Option<&Tensor>,
) -> Result<Vec<f64>, String> {
    if !matches!(x.dtype(), DType::I8 | DType::U8) {
        return Err(format!(
            "{op}: {what} must be int8 or uint8, got {}",
            x.dtype()
        ));
    }
    Ok(match zp {
        None => vec![0.0],
        Some(z) if z.dtype() != x.dtype() => {
            return Err(format!(
                "{op}: {what}'s zero point type {} differs from {}",
                z.dtype(),
                x.dtype()
            ))
        }
        Some(z) => z.to_f64_vec(),
    })
}
