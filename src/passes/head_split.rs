//! A Split of the heads' last axis → one Slice per part: the form the attention matchers read.
//! torch's dynamo exporter writes GPT-NeoX's packed projection (`[B, S, N, 3·D]` per head) as
//! one Split of the transposed heads; the legacy exporter writes the same cut as three Slices,
//! which `multi_head_attention` takes as head-local ops (`mha_query`).
//!
//! ```text
//!   before                                          after
//!
//!   t ─► Transpose(0,2,1,3) ─► h [B, N, S, W]        h ─► Slice(axis 3, [0, D))  ─► q
//!   h ─► Split(axis 3) ─► q, k, v                    h ─► Slice(axis 3, [D, 2D)) ─► k
//!                                                    h ─► Slice(axis 3, [2D, W)) ─► v
//! ```
//! Exact: each Slice takes the elements its Split output held. Guards: the Split's input is a
//! 4-D Transpose(0,2,1,3) output (the heads layout, nothing else), it cuts the last axis, and
//! every part's width is known from inference (the Split's own sizes, `ops::slice::Split`).
//! When the attention then does not fuse, the graph keeps two more nodes than before.

use crate::ir::types::Dim;
use crate::ir::{Model, NodeId};
use crate::passes::fuse_rotary::shared_ints;
use crate::passes::matchers::{fresh_node_name, produced_by, require_perm};
use crate::passes::rewrite::{Anchors, NewNode, Patch, Proposal, Rule, RuleKind};

pub struct HeadSplit;

impl Rule for HeadSplit {
    fn name(&self) -> &'static str {
        "head_split"
    }

    fn kind(&self) -> RuleKind {
        RuleKind::Cleanup
    }

    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Split"])
    }

    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let g = &model.graph;
        let n = g.node(id);
        let Some(h) = n.input(0) else {
            return Proposal::NoMatch;
        };
        let Some((t_id, t)) = produced_by(g, h, "Transpose") else {
            return Proposal::NoMatch;
        };
        if require_perm(model, t, t_id, &[0, 2, 1, 3]).is_err() {
            return Proposal::NoMatch;
        }
        let Some(split) = crate::ops::attrs_of::<crate::ops::slice::Split>(model, n) else {
            return Proposal::NoMatch;
        };
        if !matches!(split.axis, 3 | -1) || g.value(h).ty.rank() != Some(4) {
            return Proposal::NoMatch;
        }
        let mut widths = vec![];
        for out in n.outputs.iter() {
            let w = out
                .and_then(|o| g.value(o).ty.shape.as_ref()?.get(3).cloned())
                .and_then(|d| match d {
                    Dim::Known(w) => Some(w),
                    _ => None,
                });
            match w {
                Some(w) => widths.push(w),
                None => return Proposal::Reject("a part's width is not known".into()),
            }
        }
        let mut patch = Patch {
            remove: vec![id],
            ..Default::default()
        };
        let axes = shared_ints(model, &mut patch, "head_split_axes", &[3]);
        let mut start = 0;
        for (i, w) in widths.into_iter().enumerate() {
            let out = n.output(i).expect("width of a present output");
            let cut = |patch: &mut Patch, what: &str, v: i64| {
                shared_ints(model, patch, &format!("head_split_{what}_{v}"), &[v])
            };
            let (s, e) = (
                cut(&mut patch, "start", start),
                cut(&mut patch, "end", start + w),
            );
            let mut slice = NewNode::new("Slice", "");
            slice.name = fresh_node_name(g, &format!("{}_Slice", g.name(out)));
            slice.inputs = vec![Some(h.into()), Some(s), Some(e), Some(axes)];
            slice.outputs = vec![Some(out.into())];
            patch.add.push(slice);
            start += w;
        }
        Proposal::Rewrite(patch)
    }
}
