//! Comparing two runs' outputs (original vs optimized) before any speedup is claimed.

use serde::Serialize;

use crate::tensor::Tensor;

/// Default tolerance on the max absolute difference.
pub const DEFAULT_TOLERANCE: f64 = 1e-4;

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct ParityReport {
    pub max_abs_diff: f64,
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
    pub shape: Vec<usize>,
}

/// Compares outputs pairwise by position (names may differ only if a pass renamed, which ours
/// never do). A shape or type mismatch fails parity with an infinite difference.
pub fn compare(a: &[(String, Tensor)], b: &[(String, Tensor)], tolerance: f64) -> ParityReport {
    let mut outputs = Vec::new();
    let mut worst = 0.0f64;
    for (i, (name, ta)) in a.iter().enumerate() {
        let d = b.get(i).and_then(|(_, tb)| ta.max_abs_diff(tb));
        worst = worst.max(d.unwrap_or(f64::INFINITY));
        outputs.push(OutputDiff {
            name: name.clone(),
            max_abs_diff: d,
            shape: ta.shape().to_vec(),
        });
    }
    if a.len() != b.len() {
        worst = f64::INFINITY;
    }
    ParityReport {
        max_abs_diff: worst,
        tolerance,
        ok: worst <= tolerance,
        outputs,
    }
}
