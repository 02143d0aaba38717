//! DynamicQuantizeLinear and MatMulInteger on WebGPU: one dispatch each.

use super::*;
use crate::ops::lowering::{run, NodeCtx};
use crate::ops::wgsl::{self, numel};

/// DynamicQuantizeLinear (`wgsl::dynamic_quantize_linear`): float32 X, bit-exact with the
/// reference (the same arithmetic as DynamicQuantizeMatMul's quantization of A).
pub(super) fn dynamic_quantize_linear(c: &NodeCtx) -> R<Lowered> {
    let x = c.input(0)?;
    if x.dtype != DType::F32 {
        return Err(format!(
            "DynamicQuantizeLinear of {} is not on webgpu (float32 is)",
            x.dtype
        ));
    }
    run(wgsl::dynamic_quantize_linear(numel(&x.shape)))
}

/// MatMulInteger (`wgsl::matmul_integer`): A [..., M, K] and a 2-D B [K, N], int8/uint8 held
/// widened; a_zero_point a scalar, b_zero_point a scalar or one per column.
pub(super) fn matmul_integer(c: &NodeCtx) -> R<Lowered> {
    const OP: &str = "MatMulInteger";
    let (a, b) = (c.input(0)?, c.input(1)?);
    for (i, what) in [(0, "A"), (1, "B"), (2, "a_zero_point"), (3, "b_zero_point")] {
        if c.has_input(i) && !matches!(c.input(i)?.dtype, DType::U8 | DType::I8) {
            return Err(format!("{OP}: {what} must be int8 or uint8"));
        }
    }
    let [k, n] = b.shape[..] else {
        return Err(format!(
            "{OP}: only a 2-D B [K, N] is on webgpu, got {:?}",
            b.shape
        ));
    };
    if a.shape.len() < 2 || a.shape.last() != Some(&k) {
        return Err(format!(
            "{OP}: A must be [..., M, K] with K = {k}, got {:?}",
            a.shape
        ));
    }
    let zp = |i: usize| -> R<usize> {
        Ok(if c.has_input(i) {
            numel(&c.input(i)?.shape)
        } else {
            0
        })
    };
    let (za, zb) = (zp(2)?, zp(3)?);
    if za > 1 || ![0, 1, n].contains(&zb) {
        return Err(format!(
            "{OP}: on webgpu a_zero_point must be a scalar and b_zero_point a scalar or [{n}]"
        ));
    }
    run(wgsl::matmul_integer(
        numel(&a.shape) / k.max(1),
        k,
        n,
        za == 1,
        zb,
    ))
}
