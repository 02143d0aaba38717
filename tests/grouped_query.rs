//! The `grouped_query_heads` cleanup on a hand-built grouped-query step as torch's legacy
//! exporter writes sdpa with `enable_gqa` when traced with one new token: the query heads
//! `[B, 4, 1, D]` grouped to `[B, 2, 2, D]` over 2 key/value heads, and back. It becomes the
//! heads-first form with the keys and values repeated (which `multi_head_attention` fuses);
//! exact op counts, parity, and the near misses that must stay as they are.

mod common;

use common::{assert_rejected, counts, fuse, ops, parity};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const HEADS: i64 = 4;
const KV: i64 = 2;
const D: i64 = 8;
const RULE: &[&str] = &["grouped_query_heads", "dce"];

#[derive(Clone, Copy)]
struct Spec {
    /// The mask's head axis: 1 (broadcast) or KV (one row per key/value head).
    mask_heads: i64,
    /// The scores also leave the block.
    scores_out: bool,
    /// The closing Reshape's target.
    closing: &'static [i64],
}

const SDPA: Spec = Spec {
    mask_heads: 1,
    scores_out: false,
    closing: &[0, -1, 1, D],
};

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    b.initializer(name, &t)
}

/// q2 `[batch, 1, HEADS·D]` → heads → grouped → scaled scores against k `[batch, KV, past, D]`
/// (scale on both sides, as torch writes it) + mask → Softmax → · v → heads back → y.
fn step(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("gqa_step", 17);
    let (bs, ps) = (sym("batch"), sym("past"));
    let one = Dim::Known(1);
    let q2 = b.input(
        "q2",
        DType::F32,
        vec![bs.clone(), one.clone(), Dim::Known(HEADS * D)],
    );
    let kv_shape = vec![bs.clone(), Dim::Known(KV), ps.clone(), Dim::Known(D)];
    let k = b.input("k", DType::F32, kv_shape.clone());
    let v = b.input("v", DType::F32, kv_shape);
    let mask = b.input(
        "mask",
        DType::F32,
        vec![bs, Dim::Known(spec.mask_heads), one, ps],
    );
    let split = ints(&mut b, "split", &[0, 0, HEADS, D]);
    let q = b.op("Reshape", &[q2, split], vec![]);
    let q4 = b.op("Transpose", &[q], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let grouping = ints(&mut b, "grouping", &[0, KV, HEADS / KV, D]);
    let qg = b.op("Reshape", &[q4, grouping], vec![]);
    let c = b.initializer(
        "scale",
        &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), (D as f32).powf(-0.25))),
    );
    let qs = b.op("Mul", &[qg, c], vec![]);
    let kt = b.op("Transpose", &[k], vec![attr::ints("perm", &[0, 1, 3, 2])]);
    let ks = b.op("Mul", &[kt, c], vec![]);
    let scores = b.op("MatMul", &[qs, ks], vec![]);
    let masked = b.op("Add", &[scores, mask], vec![]);
    if spec.scores_out {
        b.output(masked, "scores");
    }
    let p = b.op("Softmax", &[masked], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[p, v], vec![]);
    let closing = ints(&mut b, "closing", spec.closing);
    let heads = b.op("Reshape", &[ctx, closing], vec![]);
    let t = b.op(
        "Transpose",
        &[heads],
        vec![attr::ints("perm", &[0, 2, 1, 3])],
    );
    let merge = ints(&mut b, "merge", &[0, 0, HEADS * D]);
    let y = b.op("Reshape", &[t, merge], vec![]);
    b.output(y, "y");
    b.build()
}

fn assert_same_outputs(a: &Model, b: &Model) {
    for (batch, past) in [(2, 5), (1, 1)] {
        let p = parity(a, b, &[("batch", batch), ("past", past)]);
        println!(
            "batch {batch}, past {past}: max |diff| {:e}",
            p.max_abs_diff
        );
        assert!(p.max_abs_diff <= 1e-6, "{}", p.max_abs_diff);
    }
}

/// The grouping and closing Reshapes go; the chain reads the heads as they are, and k and v are
/// repeated for them (Reshape, Expand, Reshape each); k's Transpose and scale move onto the
/// repeated keys. Same outputs.
#[test]
fn grouped_query_heads_become_heads_first_with_repeated_keys() {
    let m = step(SDPA);
    let (opt, trace) = fuse(&m, RULE);
    assert_eq!(trace.rewrites.len(), 1, "{:?}", trace.rejected);
    assert_eq!(
        ops(&opt),
        counts(&[
            ("Add", 1),
            ("Expand", 2),
            ("MatMul", 2),
            ("Mul", 2),
            ("Reshape", 6),
            ("Softmax", 1),
            ("Transpose", 3),
        ])
    );
    // Nothing is grouped any more: every 4-D value has 4 heads or 1 on its head axis.
    let g = &opt.graph;
    for id in g.node_ids() {
        for v in g.node(id).outputs.iter().flatten() {
            if let Some([_, Dim::Known(h), _, _]) = g.value(*v).ty.shape.as_deref() {
                assert!([1, HEADS].contains(h), "{}: {h} heads", g.name(*v));
            }
        }
    }
    assert_same_outputs(&m, &opt);
}

/// With the attention rule after it, the step is one MultiHeadAttention over the repeated keys
/// and values, its mask the attention_bias.
#[test]
fn the_heads_first_step_fuses_as_multi_head_attention() {
    let m = step(SDPA);
    let (opt, trace) = fuse(
        &m,
        &["grouped_query_heads", "multi_head_attention", "cse", "dce"],
    );
    assert_eq!(
        ops(&opt),
        counts(&[("Expand", 2), ("MultiHeadAttention", 1), ("Reshape", 4)]),
        "{:?}",
        trace.rejected
    );
    assert_same_outputs(&m, &opt);
}

/// A mask with a row per key/value head would be added to another query head's scores once the
/// heads are ungrouped: refused.
#[test]
fn a_mask_per_key_value_head_is_refused() {
    let m = step(Spec {
        mask_heads: KV,
        ..SDPA
    });
    assert_rejected(&m, RULE, "is not broadcast along the heads and queries");
}

/// Grouped scores that leave the block would change shape: refused.
#[test]
fn grouped_scores_read_outside_are_refused() {
    let m = step(Spec {
        scores_out: true,
        ..SDPA
    });
    assert_rejected(&m, RULE, "is a graph output");
}

/// A closing Reshape that does not give back `[B, N, S, D]` (here the groups stay as rows):
/// refused.
#[test]
fn a_closing_reshape_to_another_layout_is_refused() {
    let m = step(Spec {
        closing: &[0, KV, -1, D],
        ..SDPA
    });
    assert_rejected(&m, RULE, "does not give back [B, N, S, D]");
}
