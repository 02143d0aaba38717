//! The standard ai.onnx RotaryEmbedding (opset 23) → com.microsoft.RotaryEmbedding, the same
//! rotation with the caches read by row. torch's dynamo exporter at opset 23 already writes the
//! rotary of a Llama/Qwen/Mistral layer as the standard op, with the tables it computed per token:
//!
//! ```text
//!   before                                              after
//!
//!   x ─► RotaryEmbedding (ai.onnx) ─► y                 x ─► RotaryEmbedding (com.microsoft) ─► y
//!          ▲ cos [1, seq, r/2], sin [1, seq, r/2]              ▲ [0] (start), Reshape(cos, [-1, r/2]),
//!          (no position_ids)                                   Reshape(sin, [-1, r/2])
//!
//!   x ─► RotaryEmbedding (ai.onnx) ─► y                 x ─► RotaryEmbedding (com.microsoft) ─► y
//!          ▲ cos, sin [max_pos, r/2], position_ids             ▲ position_ids, cos, sin
//! ```
//! Why: without position_ids the standard op's caches are `[batch, seq, r/2]`, and the exporter
//! writes `[1, seq, r/2]` (one table for every sequence of the batch). onnxruntime (1.32) refuses
//! that at any batch but 1 ("Inputs 'cos_cache' and 'sin_cache' are expected to have the same
//! shape as input 'x'"), so the exported model does not run there; onnxruntime's own op reads a
//! `[max_pos, r/2]` cache at positions `start + s`, which is exactly row s of the table with start
//! 0, at every batch. It is also the form `multi_head_attention` takes its query and key from.
//! With position_ids the two ops differ only in their input order.
//!
//! Guards: x is float32 or float16, 4-D or 3-D (3-D needs `num_heads`, as both ops state); the
//! caches without position_ids are rank 3 with first dim 1 and x's seq dim (the same known or
//! symbolic dim: a table that broadcast along seq would not be one row per token), their last dim
//! known; with position_ids they are rank 2. The attributes (`interleaved`, `num_heads`,
//! `rotary_embedding_dim`) carry over unchanged; both ops define them alike.

use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{Model, NodeId};
use crate::ops::{attrs_of, rotary::RotaryEmbedding};
use crate::passes::fuse_rotary::shared_ints;
use crate::passes::matchers::{fresh_node_name, require_f32_or_f16};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};

pub struct RotaryStandard;

impl Rule for RotaryStandard {
    fn name(&self) -> &'static str {
        "rotary_standard"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["RotaryEmbedding"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        if !model.graph.node(id).is("RotaryEmbedding") {
            return Proposal::NoMatch;
        }
        Proposal::from(convert(model, id).map(Some))
    }
}

fn convert(model: &Model, id: NodeId) -> Result<Patch, String> {
    let g = &model.graph;
    let node = g.node(id);
    let attrs = attrs_of::<RotaryEmbedding>(model, node)
        .ok_or("the RotaryEmbedding's attributes do not parse")?;
    let (Some(x), Some(cos), Some(sin), Some(y)) =
        (node.input(0), node.input(1), node.input(2), node.output(0))
    else {
        return Err("RotaryEmbedding lacks an input or its output".into());
    };
    require_f32_or_f16(g, x)?;
    let shape = g.value(x).ty.shape.clone().unwrap_or_default();
    let known = |d: &Dim| match d {
        Dim::Known(n) if *n > 0 => Some(*n),
        _ => None,
    };
    let (seq, heads, head) = match shape.len() {
        4 => (&shape[2], known(&shape[1]), known(&shape[3])),
        3 if attrs.num_heads > 0 => {
            let head = known(&shape[2])
                .filter(|w| w % attrs.num_heads == 0)
                .map(|w| w / attrs.num_heads);
            (&shape[1], Some(attrs.num_heads), head)
        }
        3 => return Err("a 3-D input without num_heads".into()),
        _ => {
            return Err(format!(
                "'{}' {} is not 3-D or 4-D",
                g.name(x),
                g.value(x).ty
            ))
        }
    };
    // The standard op rotates the whole head when rotary_embedding_dim is 0; onnxruntime's op
    // rotates twice the caches' width: the same only when the caches are half a head wide.
    // onnxruntime's op also wants num_heads whenever rotary_embedding_dim is given.
    let rot = match attrs.rotary_embedding_dim {
        0 => head.ok_or("the head size is not known")?,
        r => r,
    };
    for c in [cos, sin] {
        let width = g
            .value(c)
            .ty
            .shape
            .as_ref()
            .and_then(|s| s.last().and_then(known));
        if width != Some(rot / 2) {
            return Err(format!(
                "the cache '{}' {} is not {} wide (half the rotated channels)",
                g.name(c),
                g.value(c).ty,
                rot / 2
            ));
        }
    }
    let num_heads = match (attrs.num_heads, attrs.rotary_embedding_dim) {
        (0, 0) => 0,
        (0, _) => heads.ok_or("a partial rotary whose head count is not known")?,
        (n, _) => n,
    };
    let cache_shape = |v| g.value(v).ty.shape.clone();
    let mut patch = Patch {
        remove: vec![id],
        opsets: vec![(MS_DOMAIN.to_string(), 1)],
        ..Default::default()
    };
    let inputs = if let Some(pos) = node.input(3) {
        for c in [cos, sin] {
            if cache_shape(c).is_none_or(|s| s.len() != 2) {
                return Err(format!(
                    "the cache '{}' with position_ids is not 2-D",
                    g.name(c)
                ));
            }
        }
        vec![
            Some(x.into()),
            Some(pos.into()),
            Some(cos.into()),
            Some(sin.into()),
        ]
    } else {
        let mut caches = vec![];
        for c in [cos, sin] {
            let half = match cache_shape(c).as_deref() {
                Some([Dim::Known(1), s, Dim::Known(h)])
                    if s == seq && !matches!(s, Dim::Unknown) && *h > 0 =>
                {
                    *h
                }
                _ => {
                    return Err(format!(
                        "the cache '{}' {} is not [1, seq, r/2] with x's seq dim",
                        g.name(c),
                        g.value(c).ty
                    ))
                }
            };
            let rows = shared_ints(
                model,
                &mut patch,
                &format!("rotary_rows_{half}"),
                &[-1, half],
            );
            let ty = TensorType {
                dtype: g.value(c).ty.dtype,
                shape: Some(vec![seq.clone(), Dim::Known(half)]),
            };
            let base = format!("{}_rows", g.name(c));
            let out = patch.new_value(&g.fresh_name(&base), ty);
            let mut reshape = NewNode::new("Reshape", "");
            reshape.name = fresh_node_name(g, &format!("{base}_Reshape"));
            reshape.inputs = vec![Some(c.into()), Some(rows)];
            reshape.outputs = vec![Some(out)];
            patch.add.push(reshape);
            caches.push(Some(out));
        }
        let start = shared_ints(model, &mut patch, "rotary_start", &[0]);
        vec![Some(x.into()), Some(start), caches[0], caches[1]]
    };
    let mut fused = NewNode::new("RotaryEmbedding", MS_DOMAIN);
    fused.name = fresh_node_name(g, &format!("{}_RotaryEmbedding", g.name(y)));
    fused.inputs = inputs;
    fused.outputs = vec![Some(y.into())];
    fused.set_attr(crate::ir::attr::int(
        "interleaved",
        attrs.interleaved as i64,
    ));
    for (name, v) in [
        ("num_heads", num_heads),
        ("rotary_embedding_dim", attrs.rotary_embedding_dim),
    ] {
        if v > 0 {
            fused.set_attr(crate::ir::attr::int(name, v));
        }
    }
    patch.add.push(fused);
    Ok(patch)
}
