//! Residual Add + LayerNormalization → com.microsoft.SkipLayerNormalization (the book's GPT-2
//! figure), and residual Add + SimplifiedLayerNormalization or RMSNormalization →
//! com.microsoft.SkipSimplifiedLayerNormalization (every pre-norm decoder: Llama, Qwen, Mistral).
//! Runs after `layer_norm` and `rms_norm`, so decomposed norms arrive here already fused.
//!
//! ```text
//!   before                                     after
//!
//!   A ──┐                                      A ──┐
//!       Add ──► s ──► LayerNormalization ──► y     SkipLayerNormalization ──► y
//!   B ──┘       │         ▲ gamma ▲ beta       B ──┘  ▲ gamma ▲ beta ▲ bias  └──► s (output 3)
//!               └──► (other readers of s)
//! ```
//! (The RMS form is the same without beta.) The three source forms: `LN(Add(A, B))`, `LN(Add(Add(A, bias), B))`, `LN(Add(A, Add(B, bias)))`
//! with `bias` a 1-D constant of the hidden size, absorbed into the op's `bias` input. When the
//! residual sum `s` has other readers (GPT-2's pre-LN blocks) or is a graph output, the fused node
//! also writes it, as its optional output `input_skip_bias_sum`.
//!
//! Guards: the norm normalizes the last axis only and its Mean/InvStdDev outputs are
//! unread (SkipLayerNormalization's have other shapes); A and B have the same shape, rank 2 or 3,
//! provably, or one is [B, S, H] and the other [1, S, H] or [S, H] (a skip shared by the batch,
//! such as GPT-2's and Whisper's position embeddings; the op broadcasts only that way); gamma, beta and bias are
//! 1-D constants of the hidden size (the statically known last dim); the inner bias Add, if any,
//! has the outer Add as its only reader; float32 or float16 (onnxruntime's CPU kernels take both
//! and accumulate in float32).

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::Dim;
use crate::ir::{Model, Node, NodeId, ValueId};
use crate::passes::matchers::{
    absorbable_layer_norm, bias_add, fresh_node_name, last_dim, norm_attrs, produced_by,
    require_f32_or_f16,
};
use crate::passes::rewrite::{Anchors, Patch, Proposal, Rule, RuleKind};

pub struct FuseSkipLayerNorm;

impl Rule for FuseSkipLayerNorm {
    fn name(&self) -> &'static str {
        "skip_layer_norm"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::Ops(vec![
            ("", "LayerNormalization"),
            ("", "SimplifiedLayerNormalization"),
            ("", "RMSNormalization"),
            (MS_DOMAIN, "SkipLayerNormalization"),
            (MS_DOMAIN, "SkipSimplifiedLayerNormalization"),
        ])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let ln = g.node(id);
        if ln.domain == MS_DOMAIN {
            return match ln.op_type.as_str() {
                "SkipLayerNormalization" => absorb_bias(model, id, 4),
                "SkipSimplifiedLayerNormalization" => absorb_bias(model, id, 3),
                _ => Proposal::NoMatch,
            };
        }
        if norm_attrs(model, ln).is_none() || !ln.is_onnx_domain() {
            return Proposal::NoMatch;
        }
        let Some(s) = ln.input(0) else {
            return Proposal::NoMatch;
        };
        let Some((add_id, _)) = produced_by(g, s, "Add") else {
            return Proposal::NoMatch;
        };
        match propose(model, id, add_id) {
            Ok(p) => Proposal::Rewrite(p),
            Err(why) => Proposal::Reject(why),
        }
    }
}

fn propose(model: &Model, ln_id: NodeId, add_id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let ln = g.node(ln_id);
    let add = g.node(add_id);
    let s = add.output(0).ok_or("Add has no output")?;
    let (Some(a), Some(b)) = (add.input(0), add.input(1)) else {
        return Err("Add is not binary".into());
    };
    require_f32_or_f16(g, s)?;
    let hidden = last_dim(g, s)?;
    let rank = g.value(s).ty.rank().unwrap_or(0);
    let (y, gamma, beta) = absorbable_layer_norm(model, ln, ln_id, rank as i64, hidden)?;
    let simplified = !ln.is("LayerNormalization");
    let op = if simplified {
        "SkipSimplifiedLayerNormalization"
    } else {
        "SkipLayerNormalization"
    };

    let mut remove = vec![ln_id, add_id];
    // Form 2 or 3: one Add operand is itself Add(X, bias) read only by this Add.
    let (mut input, mut skip, mut bias) = (a, b, None);
    if a != b {
        if let Some((inner, x, c)) = bias_add(model, a, hidden) {
            (input, bias) = (x, Some(c));
            remove.push(inner);
        } else if let Some((inner, x, c)) = bias_add(model, b, hidden) {
            (skip, bias) = (x, Some(c));
            remove.push(inner);
        }
    }
    // The skip may be shared by every batch row ([1, S, H] or [S, H], GPT-2's position
    // embeddings): then it is the skip, and the full [B, S, H] operand the input.
    if skip_fits(g, skip, input) && !skip_fits(g, input, skip) {
        std::mem::swap(&mut input, &mut skip);
    }
    if !skip_fits(g, input, skip) {
        let (ti, ts) = (&g.value(input).ty, &g.value(skip).ty);
        return Err(format!(
            "input '{}' {ti} and skip '{}' {ts} are not provably the same shape \
             (or [1, S, H] / [S, H] for a skip shared by the batch)",
            g.name(input),
            g.name(skip)
        ));
    }
    if !(2..=3).contains(&rank) {
        return Err(format!("rank {rank}; {op} takes rank 2 or 3"));
    }

    let mut fused = Node::new(op, MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_{op}", ln.label(ln_id)));
    fused.inputs = vec![Some(input), Some(skip), Some(gamma)];
    if !simplified {
        fused.inputs.push(beta);
    }
    if bias.is_some() {
        fused.inputs.push(bias);
    }
    while fused.inputs.last() == Some(&None) {
        fused.inputs.pop();
    }
    let sum_read = g.is_graph_output(s) || g.consumers(s).len() > 1;
    fused.outputs = vec![Some(y)];
    if sum_read {
        fused.outputs.extend([None, None, Some(s)]);
    }
    let (_, eps, _) = norm_attrs(model, ln).ok_or("the norm's attributes are not parsed")?;
    fused.set_attr(crate::ir::attr::float("epsilon", eps));
    Ok(Patch {
        remove,
        add: vec![fused.into()],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    })
}

/// The Skip*LayerNormalization contract: `skip` has `input`'s shape, or, for a 3-D input
/// [B, S, H], is [1, S, H] or [S, H] (the same S and H, provably).
fn skip_fits(g: &crate::ir::Graph, input: ValueId, skip: ValueId) -> bool {
    let (ti, ts) = (&g.value(input).ty, &g.value(skip).ty);
    if ti.same_shape_as(ts) {
        return true;
    }
    match (ti.shape.as_deref(), ts.shape.as_deref()) {
        // A skip of min(S, P) rows (position embeddings cut to the input's length) is S rows
        // wherever the residual Add runs (it fails to broadcast otherwise).
        (Some([_, s, h]), Some([Dim::Known(1), s2, h2]) | Some([s2, h2])) => {
            (s.provably_eq(s2) || s2.is_min_of(s)) && h.provably_eq(h2)
        }
        _ => false,
    }
}

/// A second anchor: a Skip(Simplified)LayerNormalization without bias whose input or skip is a
/// single-use `Add(X, bias)` (an Add that appeared after the fusion, e.g. from `gemm_to_matmul`)
/// takes the bias in, at input `bias_slot`.
fn absorb_bias(model: &Model, id: NodeId, bias_slot: usize) -> Proposal {
    let g = &model.graph;
    let skip = g.node(id);
    if skip.input(bias_slot).is_some() {
        return Proposal::NoMatch;
    }
    let (Some(input), Some(sk), Some(y)) = (skip.input(0), skip.input(1), skip.output(0)) else {
        return Proposal::NoMatch;
    };
    let Ok(hidden) = last_dim(g, y) else {
        return Proposal::NoMatch;
    };
    let found = [(0, input), (1, sk)]
        .into_iter()
        .find_map(|(slot, v)| bias_add(model, v, hidden).map(|(add, x, c)| (slot, add, x, c)));
    let Some((slot, add_id, x, c)) = found else {
        return Proposal::NoMatch;
    };
    let other = if slot == 0 { sk } else { input };
    if !g.value(x).ty.same_shape_as(&g.value(other).ty) {
        return Proposal::NoMatch;
    }
    let mut fused = skip.clone();
    fused.name = fresh_node_name(g, &format!("{}_bias", skip.label(id)));
    fused.inputs[slot] = Some(x);
    fused.inputs.resize(bias_slot + 1, None);
    fused.inputs[bias_slot] = Some(c);
    Proposal::Rewrite(Patch {
        remove: vec![add_id, id],
        add: vec![fused.into()],
        ..Default::default()
    })
}
