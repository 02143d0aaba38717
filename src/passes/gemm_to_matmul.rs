//! `Reshape(x, [-1, K]) → Gemm(·, W, C) → Reshape(·, [d0, .., N])` → `Add(MatMul(x, W), C)`.
//!
//! ```text
//!   before                                          after
//!
//!   x [b, s, K] ─► Reshape [-1, K] ─► Gemm(W, C)      x [b, s, K] ─► MatMul(W) ─► Add(C) ─► y
//!                 ─► Reshape [b, s, N] ─► y
//! ```
//! torch exports GPT-2's Conv1D layers like this. MatMul broadcasts over the leading dims, so the
//! flatten/unflatten pair and the shape chains feeding it go away, and the bias Add becomes
//! visible to the fusions that absorb biases (SkipLayerNormalization, FastGelu, BiasGelu).
//!
//! Guards: Gemm has alpha = beta = 1, transA = transB = 0, a constant W of shape [K, N] and a
//! constant 1-D C of N elements (or none); the first Reshape's target is [-1, K] with K x's
//! statically known last dim; the second Reshape's target is x's leading dims (provably, as
//! symbols or numbers) then N; the intermediates have one reader and are not graph outputs.
//!
//! One corner differs, with empty inputs only: when every leading dim is 0 the original's second
//! Reshape reads its target `[0, 0, N]` as "copy" and gives `[0, N, N]`, the MatMul `[0, 0, N]`
//! (both empty); with only a later leading dim 0 the original fails and the rewrite runs.

use crate::ir::types::Dim;
use crate::ir::{Model, Node, NodeId};
use crate::ops::shape_value::int_elements;
use crate::passes::matchers::{
    constant_shape, fresh_node_name, last_dim, produced_by, sole_consumer_op,
};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};

pub struct GemmToMatMul;

impl Rule for GemmToMatMul {
    fn name(&self) -> &'static str {
        "gemm_to_matmul"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Gemm"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let gemm = g.node(id);
        if !gemm.is("Gemm") {
            return Proposal::NoMatch;
        }
        let Some(a) = gemm.input(0) else {
            return Proposal::NoMatch;
        };
        let Some((r1_id, r1)) = produced_by(g, a, "Reshape") else {
            return Proposal::NoMatch;
        };
        match propose(model, id, r1_id, r1) {
            Ok(p) => Proposal::Rewrite(p),
            Err(why) => Proposal::Reject(why),
        }
    }
}

fn propose(model: &Model, gemm_id: NodeId, r1_id: NodeId, r1: &Node) -> Result<Patch, String> {
    let g = &model.graph;
    let gemm = g.node(gemm_id);
    let attrs = crate::ops::attrs_of::<crate::ops::matmul::Gemm>(model, gemm)
        .ok_or("Gemm's attributes are not parsed")?;
    for (name, set) in [("transA", attrs.trans_a), ("transB", attrs.trans_b)] {
        if set {
            return Err(format!("Gemm has {name} = 1"));
        }
    }
    for (name, v) in [("alpha", attrs.alpha), ("beta", attrs.beta)] {
        if v != 1.0 {
            return Err(format!("Gemm has {name} != 1"));
        }
    }
    let x = r1.input(0).ok_or("Reshape has no input")?;
    let a = r1.output(0).ok_or("Reshape has no output")?;
    let k = last_dim(g, x)?;
    let t1 = r1.input(1).and_then(|t| int_elements(g, t));
    if t1 != Some(vec![Dim::Known(-1), Dim::Known(k)]) {
        return Err(format!("first Reshape's target is not [-1, {k}]"));
    }
    sole_consumer_op(g, a, "Gemm", "flattened input")?;
    let w = gemm.input(1).ok_or("Gemm has no B")?;
    let wt = constant_shape(model, w).ok_or("Gemm's B is not a constant")?;
    let &[wk, n] = wt.as_slice() else {
        return Err("Gemm's B is not 2-D".into());
    };
    if wk as i64 != k {
        return Err(format!("Gemm's B is [{wk}, {n}], not [{k}, N]"));
    }
    let c = gemm.input(2);
    if let Some(c) = c {
        let ct = constant_shape(model, c).ok_or("Gemm's C is not a constant")?;
        if ct != [n] {
            return Err(format!("Gemm's C has shape {ct:?}, not [{n}]"));
        }
    }
    let y = gemm.output(0).ok_or("Gemm has no output")?;
    let (r2_id, r2) = sole_consumer_op(g, y, "Reshape", "Gemm output")?;
    let lead = g.value(x).ty.shape.clone().ok_or("x's shape is unknown")?;
    let mut want: Vec<Dim> = lead[..lead.len() - 1].to_vec();
    want.push(Dim::Known(n as i64));
    let t2 = r2.input(1).and_then(|t| int_elements(g, t));
    let provable = want.iter().all(|d| *d != Dim::Unknown);
    if !provable || t2.as_ref() != Some(&want) {
        return Err("second Reshape does not provably restore x's leading dims".into());
    }
    let out = r2.output(0).ok_or("Reshape has no output")?;
    let mut mm = NewNode::new("MatMul", "");
    mm.name = fresh_node_name(g, &format!("{}_MatMul", gemm.label(gemm_id)));
    mm.inputs = vec![Some(x.into()), Some(w.into())];
    let mut patch = Patch {
        remove: vec![r1_id, gemm_id, r2_id],
        ..Default::default()
    };
    match c {
        None => {
            mm.outputs = vec![Some(out.into())];
            patch.add.push(mm);
        }
        Some(c) => {
            let ty = g.value(out).ty.clone();
            let mid = patch.new_value(&g.fresh_name(&format!("{}_matmul", g.name(out))), ty);
            mm.outputs = vec![Some(mid)];
            let mut add = NewNode::new("Add", "");
            add.name = fresh_node_name(g, &format!("{}_bias", gemm.label(gemm_id)));
            add.inputs = vec![Some(mid), Some(c.into())];
            add.outputs = vec![Some(out.into())];
            patch.add.push(mm);
            patch.add.push(add);
        }
    }
    Ok(patch)
}
