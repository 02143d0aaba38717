//! com.microsoft quantized matrix products, as onnxruntime's contrib operator contract
//! (ContribOperators.md) defines them.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | MatMulNBits (com.microsoft) | 1 | `K`, `N`, `block_size` (required; a power of two >= 16), `bits` (4; 8 too, 2 refused), `accuracy_level` (0, ignored), `weight_prepacked` (0; others refused) | A [..., K]: T, B [N, k_blocks, blob_size]: uint8, scales [N, k_blocks]: T, zero_points? (uint8 packed [N, ceil(k_blocks·bits/8)], or T [N, k_blocks]), g_idx? (int32 [K]), bias? [N]: T -> Y [..., N]: T (float32, float16, bfloat16) |
//! | DynamicQuantizeMatMul (com.microsoft) | 1 | none | A: float32, B [..., K, N]: int8/uint8, b_scale (float32, scalar or [N]), b_zero_point? (B's type, scalar or [N]), bias? (float32 [N]) -> Y: float32 |
//!
//! MatMulNBits: `Y = A · W + bias` with `W[k, n] = (q[n, k] - zp[n, k / block_size]) ·
//! scale[n, k / block_size]`, `k_blocks = ceil(K / block_size)` and `blob_size = block_size ·
//! bits / 8`. Row n of B holds its K codes block after block, each block's codes packed low bits
//! first into its blob (the last block's padding codes are not read). Packed zero points are
//! packed the same way, each row of N starting on a new byte; without zero points every code's is
//! `2^(bits - 1)`. Scales and unpacked zero points are read as N·k_blocks values in row-major
//! order (the flat [N·k_blocks] form older quantizers wrote included). A B with a 0 among its
//! dims (the others as above) is an omitted projection: Y is zeros plus bias. `g_idx` is taken
//! only when it maps each k to `k / block_size` (what quantizers write without act-order); any
//! other grouping is refused. The product is computed in float32 (float16/bfloat16 A widened,
//! Y rounded once); `accuracy_level`, onnxruntime's permission to quantize or downcast A, is
//! ignored. bits 2 (and prepacked weights) are refused with an error naming them.
//!
//! DynamicQuantizeMatMul quantizes A as DynamicQuantizeLinear does (uint8, its range widened to
//! hold 0), then `Y[.., n] = ((A_q - a_zp) · (B - b_zp))[.., n] · (a_scale · b_scale[n]) +
//! bias[n]`, the integer product exact in int32 and the rest in float32, as onnxruntime does.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, opt_input, unsupported_type};
use super::lowering::{run, Lowered, NodeCtx, Ty};
use super::quant::{
    centered, dynamic_params, float_math, float_tensor, infer_matmul, int_matmul, quantize1,
};
use super::wgsl::{self, numel};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

#[derive(Debug)]
pub struct MatMulNBits {
    pub k: usize,
    pub n: usize,
    pub bits: usize,
    pub block_size: usize,
}

/// A required positive integer attribute (at most i32::MAX).
fn positive(a: &Attrs, name: &str) -> R<usize> {
    match a.opt_int(name)? {
        None => Err(format!("attribute '{name}' is required")),
        Some(v) if (1..=i32::MAX as i64).contains(&v) => Ok(v as usize),
        Some(v) => Err(format!(
            "attribute '{name}' must be positive (at most {}), got {v}",
            i32::MAX
        )),
    }
}

impl MatMulNBits {
    pub fn parse(a: &Attrs) -> P {
        let bits = match a.int("bits", 4)? {
            b @ (4 | 8) => b as usize,
            2 => return Err("attribute 'bits' 2 (2-bit weights) is not supported".into()),
            b => return Err(format!("attribute 'bits' must be 2, 4 or 8, got {b}")),
        };
        let block_size = positive(a, "block_size")?;
        if block_size < 16 || !block_size.is_power_of_two() {
            return Err(format!(
                "attribute 'block_size' must be a power of two >= 16, got {block_size}"
            ));
        }
        match a.int("weight_prepacked", 0)? {
            0 => {}
            p => {
                return Err(format!(
                    "attribute 'weight_prepacked' {p} (an execution provider's layout) is not supported"
                ))
            }
        }
        Ok(Box::new(MatMulNBits {
            k: positive(a, "K")?,
            n: positive(a, "N")?,
            bits,
            block_size,
        }))
    }

    fn blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    fn blob(&self) -> usize {
        self.block_size * self.bits / 8
    }
}

impl Op for MatMulNBits {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let a = cx.input(0);
        let shape = a.shape.filter(|s| !s.is_empty()).map(|mut s| {
            s.pop();
            s.push(Dim::Known(self.n as i64));
            s
        });
        vec![TensorType {
            dtype: a.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        matmul_nbits
    }
    fn any_element_type(&self) -> bool {
        true
    }
    fn packed_byte_inputs(&self) -> &'static [usize] {
        &[1, 3]
    }
    /// One dispatch (`wgsl::matmul_nbits`), float32, with B and zero points constant (uploaded
    /// as packed bytes).
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        const OP: &str = "MatMulNBits";
        if c.ty(0)? != Ty::F32 {
            return Err(format!("{OP} is float32-only on webgpu"));
        }
        let (k, n) = (self.k, self.n);
        let a = &c.input(0)?.shape;
        if a.last() != Some(&k) {
            return Err(format!("{OP}: A's last dim must be K = {k}, got {a:?}"));
        }
        let b = c.input(1)?;
        let want = [n, self.blocks(), self.blob()];
        if c.statics.get(1).copied().flatten().is_none()
            || (c.has_input(3) && c.statics.get(3).copied().flatten().is_none())
        {
            return Err(format!(
                "{OP}: B and zero points must be constants on webgpu (read packed)"
            ));
        }
        if b.dtype != DType::U8 || b.shape != want {
            return Err(format!(
                "{OP}: B must be uint8 {want:?} on webgpu, got {} {:?}",
                b.dtype, b.shape
            ));
        }
        if c.ty(2)? != Ty::F32 || numel(&c.input(2)?.shape) != n * self.blocks() {
            return Err(format!("{OP}: scales must be float32 [N, k_blocks]"));
        }
        let zero_points = c.has_input(3);
        if zero_points {
            let z = c.input(3)?;
            let row = (self.blocks() * self.bits).div_ceil(8);
            if z.dtype != DType::U8 || numel(&z.shape) != n * row {
                return Err(format!(
                    "{OP}: only packed uint8 zero points [N, {row}] are on webgpu, got {} {:?}",
                    z.dtype, z.shape
                ));
            }
        }
        if c.has_input(4) && numel(&c.input(4)?.shape) != 0 {
            return Err(format!("{OP}: g_idx is not on webgpu"));
        }
        let bias = c.has_input(5);
        if bias && (c.ty(5)? != Ty::F32 || numel(&c.input(5)?.shape) != n) {
            return Err(format!("{OP}: bias must be float32 [N]"));
        }
        run(wgsl::matmul_nbits(&wgsl::NBits {
            m: numel(a) / k,
            k,
            n,
            bits: self.bits,
            block: self.block_size,
            zero_points,
            bias,
        }))
    }
}

/// A float32 copy of a float input of type `t` (A's), with `n` elements when `n` is given.
fn floats(op: &str, what: &str, x: &Tensor, t: DType, n: Option<usize>) -> R<Vec<f32>> {
    if x.dtype() != t {
        return Err(format!("{op}: {what} has type {}, A has {t}", x.dtype()));
    }
    if let Some(n) = n.filter(|&n| n != x.len()) {
        return Err(format!(
            "{op}: {what} has shape {:?} ({} elements); want {n}",
            x.shape(),
            x.len()
        ));
    }
    Ok(match x.as_f32() {
        Some(a) => a.iter().copied().collect(),
        None => x.to_f64_vec().iter().map(|&v| v as f32).collect(),
    })
}

fn matmul_nbits(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MatMulNBits";
    let p = ctx.attrs::<MatMulNBits>()?;
    let (k, n) = (p.k, p.n);
    let (nb, blob) = (p.blocks(), p.blob());
    let a = input(OP, inputs, 0)?;
    let t = a.dtype();
    if !float_math(t) {
        return Err(unsupported_type(OP, t));
    }
    let ash = a.shape();
    if ash.last() != Some(&k) {
        return Err(format!(
            "{OP}: A's last dim must be K = {k}, got shape {ash:?}"
        ));
    }
    let mut shape = ash.to_vec();
    shape.pop();
    shape.push(n);
    check_out(ctx, OP, &shape, 32)?;
    let bias = opt_input(inputs, 5)
        .map(|b| floats(OP, "bias", b, t, Some(n)))
        .transpose()?;
    let b = match input(OP, inputs, 1)? {
        Tensor::U8(b) => b,
        b => return Err(format!("{OP}: B must be uint8, got {}", b.dtype())),
    };
    let want = [n, nb, blob];
    let fits = b.ndim() == 3 && b.shape().iter().zip(&want).all(|(&d, &w)| d == w || d == 0);
    if !fits {
        return Err(format!(
            "{OP}: B must have shape {want:?} (N, ceil(K / block_size), block_size * bits / 8), or that with some dims 0; got {:?}",
            b.shape()
        ));
    }
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let mut y = if b.is_empty() {
        // An omitted projection: zeros (plus the bias below).
        vec![0f32; rows * n]
    } else {
        let w = dequantize(ctx, inputs, p, b.as_slice_memory_order(), t)?;
        let a32 = match a.as_f32() {
            Some(a) => a.clone(),
            None => ArrayD::from_shape_vec(IxDyn(ash), floats(OP, "A", a, t, None)?)
                .map_err(|e| format!("{OP}: {e}"))?,
        };
        let w = ArrayD::from_shape_vec(IxDyn(&[k, n]), w).map_err(|e| format!("{OP}: {e}"))?;
        let prod = super::matmul::matmul(ctx, &[Some(&Tensor::F32(a32)), Some(&Tensor::F32(w))])
            .map_err(|e| format!("{OP}: {e}"))?;
        match prod.into_iter().next() {
            Some(Tensor::F32(y)) => y.into_iter().collect(),
            _ => return Err(format!("{OP}: internal: MatMul gave no float32 result")),
        }
    };
    if let Some(bias) = bias {
        for row in y.chunks_exact_mut(n) {
            row.iter_mut().zip(&bias).for_each(|(v, b)| *v += b);
        }
    }
    Ok(vec![float_tensor(OP, &shape, y, t)?])
}

/// W [K, N] in float32 from B's codes (`b`, row-major [N, k_blocks, blob]), the scales and the
/// zero points.
fn dequantize(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    p: &MatMulNBits,
    b: Option<&[u8]>,
    t: DType,
) -> R<Vec<f32>> {
    const OP: &str = "MatMulNBits";
    let (k, n, bits, bs) = (p.k, p.n, p.bits, p.block_size);
    let (nb, blob) = (p.blocks(), p.blob());
    let b = b.ok_or_else(|| format!("{OP}: internal: B is not contiguous"))?;
    let scales = floats(OP, "scales", input(OP, inputs, 2)?, t, Some(n * nb))?;
    let mask = (1u32 << bits) - 1;
    let code = |bytes: &[u8], i: usize| (bytes[i * bits / 8] as u32 >> (i * bits % 8)) & mask;
    // Zero points per (n, block), as float32.
    let zps: Vec<f32> = match opt_input(inputs, 3) {
        None => vec![(1u32 << (bits - 1)) as f32; n * nb],
        Some(Tensor::U8(z)) => {
            let row = (nb * bits).div_ceil(8);
            if z.len() != n * row {
                return Err(format!(
                    "{OP}: packed uint8 zero_points have shape {:?}; want [{n}, {row}] (N, ceil(k_blocks * bits / 8))",
                    z.shape()
                ));
            }
            let z: Vec<u8> = z.iter().copied().collect();
            z.chunks_exact(row)
                .flat_map(|r| (0..nb).map(|j| code(r, j) as f32))
                .collect()
        }
        Some(z) if float_math(z.dtype()) => floats(OP, "zero_points", z, t, Some(n * nb))?,
        Some(z) => {
            return Err(format!(
                "{OP}: zero_points must be uint8 (packed) or A's type {t}, got {}",
                z.dtype()
            ))
        }
    };
    if let Some(g) = opt_input(inputs, 4).filter(|g| !g.is_empty()) {
        let simple = g.dtype() == DType::I32
            && g.len() == k
            && g.to_f64_vec()
                .iter()
                .enumerate()
                .all(|(i, &v)| v == (i / bs) as f64);
        if !simple {
            return Err(format!(
                "{OP}: g_idx other than k / block_size for each k (act-order grouping) is not supported"
            ));
        }
    }
    check_out(ctx, &format!("{OP} dequantized weight"), &[k, n], 32)?;
    let mut w = vec![0f32; k * n];
    for (j, row) in b.chunks_exact(nb * blob).enumerate().take(n) {
        for (blk, bytes) in row.chunks_exact(blob).enumerate() {
            let (s, z) = (scales[j * nb + blk], zps[j * nb + blk]);
            for i in 0..bs.min(k - blk * bs) {
                w[(blk * bs + i) * n + j] = (code(bytes, i) as f32 - z) * s;
            }
        }
    }
    Ok(w)
}

super::plain_ops!(DynamicQuantizeMatMul);

impl Op for DynamicQuantizeMatMul {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![infer_matmul(cx, Some(DType::F32))]
    }
    fn kernel(&self) -> Kernel {
        dynamic_quantize_matmul
    }
    fn any_element_type(&self) -> bool {
        true
    }
    fn packed_byte_inputs(&self) -> &'static [usize] {
        &[1, 3]
    }
    /// One dispatch (`wgsl::dynamic_quantize_matmul`, A's quantization bit-exact with the
    /// reference) for A float32 [..., K], B a constant int8/uint8 [K, N] with a constant zero
    /// point (scalar or [N]), b_scale float32 (scalar or [N]), bias float32 [N].
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        const OP: &str = "DynamicQuantizeMatMul";
        let a = c.input(0)?;
        if a.dtype != DType::F32 {
            return Err(format!(
                "{OP}: A must be float32 on webgpu, got {}",
                a.dtype
            ));
        }
        let b = c.input(1)?;
        let [k, n] = b.shape[..] else {
            return Err(format!(
                "{OP}: only a 2-D B [K, N] is on webgpu (batched B is not), got {:?}",
                b.shape
            ));
        };
        let constant = |i: usize| c.statics.get(i).copied().flatten().is_some();
        if !matches!(b.dtype, DType::I8 | DType::U8) || !constant(1) {
            return Err(format!(
                "{OP}: B must be a constant int8/uint8 on webgpu (read packed), got {}",
                b.dtype
            ));
        }
        if a.shape.last() != Some(&k) {
            return Err(format!(
                "{OP}: A's last dim must be K = {k}, got {:?}",
                a.shape
            ));
        }
        let per_column = |i: usize, what: &str, want: &[usize]| -> R<usize> {
            let len = numel(&c.input(i)?.shape);
            if want.contains(&len) {
                Ok(len)
            } else {
                Err(format!("{OP}: {what} has {len} elements; want {want:?}"))
            }
        };
        let zero_points = if c.has_input(3) {
            if c.input(3)?.dtype != b.dtype || !constant(3) {
                return Err(format!("{OP}: b_zero_point must be a constant of B's type"));
            }
            per_column(3, "b_zero_point", &[1, n])?
        } else {
            0
        };
        if c.input(2)?.dtype != DType::F32 {
            return Err(format!("{OP}: b_scale must be float32"));
        }
        let scales = per_column(2, "b_scale", &[1, n])?;
        let bias = c.has_input(4);
        if bias && (c.input(4)?.dtype != DType::F32 || per_column(4, "bias", &[n]).is_err()) {
            return Err(format!("{OP}: bias must be float32 [{n}]"));
        }
        let m = numel(&a.shape) / k.max(1);
        if m.div_ceil(8) > 65535 {
            return Err(format!("{OP}: {m} rows of A are over webgpu's grid"));
        }
        run(wgsl::dynamic_quantize_matmul(&wgsl::Dqmm {
            m,
            k,
            n,
            signed: b.dtype == DType::I8,
            zero_points,
            scales,
            bias,
        }))
    }
}

fn dynamic_quantize_matmul(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DynamicQuantizeMatMul";
    let a = match input(OP, inputs, 0)? {
        Tensor::F32(a) => a,
        t => return Err(unsupported_type(OP, t.dtype())),
    };
    let b = input(OP, inputs, 1)?;
    let n = match b.shape() {
        [.., _, n] => *n,
        s => return Err(format!("{OP}: B must have rank >= 2, got shape {s:?}")),
    };
    let f32s = |i: usize, what: &str| -> R<Option<Vec<f32>>> {
        let Some(x) = opt_input(inputs, i) else {
            return Ok(None);
        };
        match x.as_f32() {
            Some(v) => Ok(Some(v.iter().copied().collect())),
            None => Err(format!("{OP}: {what} must be float32, got {}", x.dtype())),
        }
    };
    let b_scale = f32s(2, "b_scale")?.ok_or_else(|| format!("{OP}: missing required input 2"))?;
    if b_scale.len() != 1 && b_scale.len() != n {
        return Err(format!(
            "{OP}: b_scale has {} elements; want 1 or {n} (one per column of B)",
            b_scale.len()
        ));
    }
    let bias = f32s(4, "bias")?;
    if let Some(bias) = bias.as_ref().filter(|b| b.len() != n) {
        return Err(format!(
            "{OP}: bias has {} elements; want {n} (B's last dim)",
            bias.len()
        ));
    }
    check_out(ctx, OP, a.shape(), 32)?;
    let (scale, zp) = dynamic_params(a);
    let aq: Vec<i32> = a
        .iter()
        .map(|&v| {
            (quantize1(v as f64, scale as f64, zp as f64, 0.0, 255.0, false) - zp as f64) as i32
        })
        .collect();
    let aq = ArrayD::from_shape_vec(IxDyn(a.shape()), aq).map_err(|e| format!("{OP}: {e}"))?;
    let bc = centered(OP, "B", b, opt_input(inputs, 3), true)?;
    let acc = int_matmul(ctx, OP, Tensor::I32(aq), bc)?;
    let mut out = Vec::with_capacity(acc.len());
    for (i, &v) in acc.iter().enumerate() {
        let c = i % n.max(1);
        let s = scale * b_scale[if b_scale.len() == 1 { 0 } else { c }];
        out.push(v as f32 * s + bias.as_ref().map_or(0.0, |b| b[c]));
    }
    let shape = acc.shape().to_vec();
    Ok(vec![Tensor::F32(
        ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| format!("{OP}: {e}"))?,
    )])
}

#[cfg(test)]
#[path = "quant_ms_tests.rs"]
mod tests;
