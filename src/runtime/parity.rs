//! Comparing two runs' outputs (original vs optimized) before any speedup is claimed.

use std::collections::HashMap;

use serde::Serialize;

use crate::ir::{NodeId, ValueId};
use crate::runtime::reference::StepObserver;
use crate::tensor::{DType, Tensor};

/// Default tolerance on the max absolute difference of the outputs.
pub const DEFAULT_TOLERANCE: f64 = 1e-4;
/// Default tolerance for a model that computes in float16 or bfloat16: a fused op that
/// accumulates in float32 rounds once where the pattern rounded at every step (float16's spacing
/// is 2^-10 at 1, 2^-8 at 4), so 1e-4 would refuse every float16 fusion.
pub const HALF_TOLERANCE: f64 = 2e-2;

/// The tolerance `model`'s outputs get when none is given: `HALF_TOLERANCE` when its main graph
/// holds a float16 or bfloat16 value anywhere (a float16 output, or an fp16 export with float32
/// inputs and outputs as onnxruntime's converter leaves them, which rounds inside just the same),
/// else `DEFAULT_TOLERANCE`.
pub fn model_tolerance(model: &crate::ir::Model) -> f64 {
    let g = &model.graph;
    let half = (0..g.value_count()).any(|i| {
        let ty = g.value(crate::ir::ValueId(i as u32)).ty.dtype;
        matches!(ty, Some(DType::F16 | DType::BF16))
    });
    if half {
        HALF_TOLERANCE
    } else {
        DEFAULT_TOLERANCE
    }
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct ParityReport {
    pub max_abs_diff: f64,
    pub tolerance: f64,
    pub ok: bool,
    /// Per output: name and max abs diff (null where shapes or types differ).
    pub outputs: Vec<OutputDiff>,
    /// Per fused node whose outputs the original graph also computes (by value name): the max
    /// abs diff over its outputs, worst first (null first: a shape or type differs) — which
    /// fusion to suspect when the outputs differ.
    pub nodes: Vec<NodeDiff>,
    /// Set when the reference backend lacks some ops: only the outputs and fused nodes it can
    /// compute without them were compared (`outputs` and `nodes` list just those).
    pub partial: Option<Partial>,
    /// Set when the original failed at the default size of a dim the caller left open and the
    /// check ran with that dim at 1 instead (an export traced at one new token runs only
    /// there): what failed, and the size used.
    pub resized: Option<String>,
}

/// What a partial parity check left out, and why.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct Partial {
    /// The op types without a kernel, as "Op (domain)", the original's first.
    pub missing_ops: Vec<String>,
    /// Outputs not compared (a missing op computes them, on either side).
    pub unchecked_outputs: Vec<String>,
    /// Fused nodes not compared, for the same reason.
    pub unchecked_nodes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[cfg_attr(target_arch = "wasm32", derive(tsify::Tsify))]
pub struct NodeDiff {
    pub node: String,
    pub op: String,
    pub max_abs_diff: Option<f64>,
}

/// An observer that keeps copies of some values of one run (`want`: value → slot).
pub struct Keep {
    want: HashMap<ValueId, usize>,
    pub got: Vec<Option<Tensor>>,
}

impl Keep {
    pub fn new(values: &[ValueId]) -> Keep {
        Keep {
            want: values.iter().enumerate().map(|(i, &v)| (v, i)).collect(),
            got: vec![None; values.len()],
        }
    }
}

impl StepObserver for Keep {
    fn before(&mut self, _: NodeId) {}
    fn after(&mut self, _: NodeId) {}
    fn produced(&mut self, v: ValueId, t: &Tensor) {
        if let Some(&i) = self.want.get(&v) {
            self.got[i] = Some(t.clone());
        }
    }
}

/// The fused nodes' diffs: `nodes` are (name, op, the slots of its outputs in `a` and `b`),
/// `a` and `b` the kept values of the original and the optimized run.
pub fn node_diffs(
    nodes: &[(String, String, Vec<usize>)],
    a: &[Option<Tensor>],
    b: &[Option<Tensor>],
) -> Vec<NodeDiff> {
    let mut out: Vec<NodeDiff> = nodes
        .iter()
        .map(|(node, op, slots)| {
            let mut worst = Some(0.0f64);
            for &i in slots {
                let d = match (&a[i], &b[i]) {
                    (Some(x), Some(y)) => x.max_abs_diff(y),
                    _ => None,
                };
                worst = worst.zip(d).map(|(w, d)| w.max(d));
            }
            NodeDiff {
                node: node.clone(),
                op: op.clone(),
                max_abs_diff: worst,
            }
        })
        .collect();
    let key = |d: &NodeDiff| d.max_abs_diff.unwrap_or(f64::INFINITY);
    crate::ops::common::sort_by_dyn(&mut out, &|x, y| key(y).total_cmp(&key(x)));
    out
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
        nodes: Vec::new(),
        resized: None,
        partial: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(model_tolerance(&model(DType::F16)), HALF_TOLERANCE);
        assert_eq!(model_tolerance(&model(DType::BF16)), HALF_TOLERANCE);
        assert_eq!(model_tolerance(&model(DType::F64)), DEFAULT_TOLERANCE);
    }
}
