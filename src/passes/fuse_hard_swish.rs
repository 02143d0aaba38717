//! `x · HardSigmoid(x, alpha = 1/6, beta = 0.5)` → ai.onnx HardSwish (opset 14): the form
//! exporters write hard-swish in when the target opset predates the op, or when a model spells it
//! out (MobileNetV3-style blocks).
//!
//! ```text
//!   before                                           after
//!
//!   x ─► HardSigmoid(1/6, 0.5) ─► Mul(x, ·) ─► y      x ─► HardSwish ─► y
//!   └─────────────────────────────┘
//! ```
//! Either operand order of the Mul.
//!
//! Guards: the HardSigmoid's output has exactly one reader and is not a graph output; its alpha is
//! 1/6 and its beta 0.5 within `CONST_REL_TOL` (HardSwish hard-codes them; MobileNet's and
//! Paddle's HardSigmoid with alpha 0.2 is another function); the Mul multiplies by x itself; x is
//! float32 or float16 (float64 HardSwish has no onnxruntime CPU kernel); the model imports ai.onnx opset ≥ 14
//! (the rule does not raise opsets).

use crate::ir::{Model, Node, NodeId};
use crate::ops::activation::{Act, FloatFn};
use crate::passes::matchers::{
    fresh_node_name, other_input, require_f32_or_f16, sole_consumer_op, CONST_REL_TOL,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

/// The ai.onnx opset that has HardSwish.
const HARD_SWISH_OPSET: i64 = 14;

pub struct FuseHardSwish;

impl Rule for FuseHardSwish {
    fn name(&self) -> &'static str {
        "hard_swish"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["HardSigmoid"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let hs = g.node(id);
        if !hs.is("HardSigmoid") {
            return Proposal::NoMatch;
        }
        let (Some(x), Some(s)) = (hs.input(0), hs.output(0)) else {
            return Proposal::NoMatch;
        };
        let gates = g.consumers(s).iter().any(|&c| {
            let n = g.node(c);
            n.is("Mul") && other_input(n, s) == Some(x)
        });
        if !gates {
            return Proposal::NoMatch;
        }
        Proposal::from(fuse(model, id).map(Some))
    }
}

fn fuse(model: &Model, hs_id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let hs = g.node(hs_id);
    let x = hs.input(0).ok_or("HardSigmoid has no input")?;
    let s = hs.output(0).ok_or("HardSigmoid has no output")?;
    let Some(&FloatFn(Act::HardSigmoid { alpha, beta })) =
        crate::ops::attrs_of::<FloatFn>(model, hs)
    else {
        return Err("HardSigmoid's attributes are not parsed".into());
    };
    let near = |v: f32, want: f64| (v as f64 - want).abs() <= CONST_REL_TOL * want.abs();
    if !(near(alpha, 1.0 / 6.0) && near(beta, 0.5)) {
        return Err(format!(
            "HardSigmoid has alpha {alpha} and beta {beta}; HardSwish's are 1/6 and 0.5"
        ));
    }
    let opset = model.opset("").unwrap_or(1);
    if opset < HARD_SWISH_OPSET {
        return Err(format!(
            "the model imports ai.onnx opset {opset}; HardSwish needs {HARD_SWISH_OPSET}"
        ));
    }
    let (mul_id, mul) = sole_consumer_op(g, s, "Mul", "hard sigmoid")?;
    if other_input(mul, s) != Some(x) {
        return Err(format!(
            "Mul '{}' does not multiply the hard sigmoid by its input",
            mul.label(mul_id)
        ));
    }
    require_f32_or_f16(g, x)?;
    let y = mul.output(0).ok_or("Mul has no output")?;
    let mut fused = Node::new("HardSwish", "");
    fused.name = fresh_node_name(g, &format!("{}_HardSwish", g.name(y)));
    fused.inputs = vec![Some(x)];
    fused.outputs = vec![Some(y)];
    Ok(Patch {
        remove: vec![hs_id, mul_id],
        add: vec![fused.into()],
        ..Default::default()
    })
}
