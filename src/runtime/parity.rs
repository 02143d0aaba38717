//! Comparing two runs' outputs (original vs optimized) before any speedup is claimed.

use serde::Serialize;

use crate::tensor::{DType, Tensor};

/// Default tolerance on the max absolute difference of an output.
pub const DEFAULT_TOLERANCE: f64 = 1e-4;
/// Default tolerance for a float16 or bfloat16 output: a fused op that accumulates in float32
/// rounds once where the pattern rounded at every step (float16's spacing is 2^-10 at 1, 2^-8 at
/// 4), so 1e-4 would refuse every float16 fusion.
pub const HALF_TOLERANCE: f64 = 2e-2;

/// The tolerance an output of `dtype` gets when none is given.
pub fn default_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => HALF_TOLERANCE,
        _ => DEFAULT_TOLERANCE,
    }
}

/// The tolerance every output of `model` gets when none is given: `HALF_TOLERANCE` when the
/// main graph computes in float16 or bfloat16 anywhere (an fp16 export with float32 inputs and
/// outputs, as onnxruntime's converter leaves them, rounds inside just the same), else `None`
/// (each output by its own type, `default_tolerance`).
pub fn model_tolerance(model: &crate::ir::Model) -> Option<f64> {
    let g = &model.graph;
    let half = (0..g.value_count()).any(|i| {
        let ty = g.value(crate::ir::ValueId(i as u32)).ty.dtype;
        matches!(ty, Some(DType::F16 | DType::BF16))
    });
    half.then_some(HALF_TOLERANCE)
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct ParityReport {
    pub max_abs_diff: f64,
    /// The largest tolerance applied to an output (each output has its own: `OutputDiff`).
    pub tolerance: f64,
    pub ok: bool,
    /// Per output: name and max abs diff (null where shapes or types differ).
    pub outputs: Vec<OutputDiff>,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct OutputDiff {
    pub name: String,
    pub max_abs_diff: Option<f64>,
    pub tolerance: f64,
    pub shape: Vec<usize>,
}

/// Compares outputs pairwise by position (names may differ only if a pass renamed, which ours
/// never do), each within `tolerance`, or by default within `default_tolerance` of its type.
/// A shape or type mismatch fails parity with an infinite difference.
pub fn compare(
    a: &[(String, Tensor)],
    b: &[(String, Tensor)],
    tolerance: Option<f64>,
) -> ParityReport {
    let mut outputs = Vec::new();
    let (mut worst, mut widest, mut ok) = (0.0f64, 0.0f64, a.len() == b.len());
    for (i, (name, ta)) in a.iter().enumerate() {
        let d = b.get(i).and_then(|(_, tb)| ta.max_abs_diff(tb));
        let tol = tolerance.unwrap_or_else(|| default_tolerance(ta.dtype()));
        let diff = d.unwrap_or(f64::INFINITY);
        worst = worst.max(diff);
        widest = widest.max(tol);
        ok &= diff <= tol;
        outputs.push(OutputDiff {
            name: name.clone(),
            max_abs_diff: d,
            tolerance: tol,
            shape: ta.shape().to_vec(),
        });
    }
    if a.len() != b.len() {
        worst = f64::INFINITY;
    }
    ParityReport {
        max_abs_diff: worst,
        tolerance: tolerance.unwrap_or(widest),
        ok,
        outputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use ndarray::arr1;

    fn out(t: Tensor) -> Vec<(String, Tensor)> {
        vec![("y".into(), t)]
    }

    fn f32s(v: &[f32]) -> Tensor {
        Tensor::F32(arr1(v).into_dyn())
    }

    fn f16s(v: &[f32]) -> Tensor {
        Tensor::F16(arr1(v).mapv(f16::from_f32).into_dyn())
    }

    #[test]
    fn the_default_tolerance_follows_each_outputs_type() {
        // 0.0078125 apart: one float16 step at 2, far beyond float32's 1e-4.
        let (a, b) = ([2.0, 1.0], [2.0078125, 1.0]);
        let half = compare(&out(f16s(&a)), &out(f16s(&b)), None);
        assert!(half.ok && half.tolerance == HALF_TOLERANCE, "{half:?}");
        let single = compare(&out(f32s(&a)), &out(f32s(&b)), None);
        assert!(
            !single.ok && single.tolerance == DEFAULT_TOLERANCE,
            "{single:?}"
        );
        // An explicit tolerance applies to every output, float16 ones too.
        assert!(!compare(&out(f16s(&a)), &out(f16s(&b)), Some(1e-3)).ok);
        // Mixed outputs: each within its own; the report shows the widest.
        let mixed = |x: &[f32]| vec![("h".into(), f16s(x)), ("s".into(), f32s(&a))];
        let m = compare(&mixed(&a), &mixed(&b), None);
        assert!(m.ok && m.tolerance == HALF_TOLERANCE, "{m:?}");
        assert_eq!(m.outputs[1].tolerance, DEFAULT_TOLERANCE);
    }

    #[test]
    fn a_model_that_computes_in_float16_gets_the_half_tolerance() {
        use crate::builder::{dims, GraphBuilder};
        use crate::ir::attr;
        let model = |inner: DType| {
            let mut b = GraphBuilder::new("m", 17);
            let x = b.input("x", DType::F32, dims(&[2]));
            let h = b.op("Cast", &[x], vec![attr::int("to", inner.0 as i64)]);
            let y = b.op("Cast", &[h], vec![attr::int("to", 1)]);
            b.output(y, "y");
            b.build()
        };
        assert_eq!(model_tolerance(&model(DType::F16)), Some(HALF_TOLERANCE));
        assert_eq!(model_tolerance(&model(DType::F64)), None);
    }
}
