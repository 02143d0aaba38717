//! The `mask_filter_value` a fused attention op gets for a proved mask: what keeps the mask's
//! meaning when the op computes in float32.

use crate::tensor::DType;

/// The `mask_filter_value` that keeps the meaning of a proved mask with filter `f` on `dt` scores.
/// The op computes in float32 and masks future keys with the lowest float32 (set, not added to),
/// so a causal float32 mask must have F = f32::MIN. In float16 a masked score s + F rounds to F
/// itself when F is the lowest float16 and |s| < 16 (half its ulp of 32): a padded query that
/// sees only masked keys weights every key alike (a uniform row). Only f32::MIN absorbs s the
/// same way in float32, so that F is emitted as f32::MIN: kept keys see masked ones at
/// probability 0 as before, and a fully masked row is uniform wherever float16 rounds it so
/// (scores within ±16; past that float16 itself overflows to -inf or keeps the largest score).
/// Any other float16 F is refused with a causal mask, and kept as it is without one.
pub fn op_filter(dt: DType, f: f64, causal: bool) -> Result<f32, String> {
    let f16_lowest = f64::from(half::f16::MIN);
    match dt {
        DType::F32 if causal && f as f32 != f32::MIN => Err(format!(
            "causal mask with filter {f}: onnxruntime's causal masking uses the lowest float"
        )),
        DType::F32 => Ok(f as f32),
        _ if f == f16_lowest => Ok(f32::MIN),
        _ if causal => Err(format!(
            "causal mask on {dt} scores with filter {f}: only the lowest {dt} rounds a row of \
             masked scores to one value the way the lowest float32 does in the op"
        )),
        _ => Ok(f as f32),
    }
}
