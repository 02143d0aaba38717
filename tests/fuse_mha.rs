//! The `multi_head_attention` fusion (decoder self-attention with rotary q →
//! com.microsoft.MultiHeadAttention) on a hand-built Llama-style block: grouped key/value heads
//! repeated as transformers does, a causal mask with left padding as the additive bias; exact op
//! counts, parity with the unfused graph, and the near misses that must not fuse.

mod common;

use common::{assert_parity_within, assert_rejected, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const HEADS: i64 = 4;
const KV_HEADS: i64 = 2;
const D: i64 = 8;
const RULES: &[&str] = &["rotary", "multi_head_attention", "cse", "dce"];

#[derive(Clone, Copy)]
struct Spec {
    /// The score scale as Mul (true) or Div by its inverse.
    mul_scale: bool,
    /// An additive mask input [batch, 1, seq, seq].
    mask: bool,
    /// The perm of the context Transpose (0, 2, 1, 3 merges the heads back).
    ctx_perm: [i64; 4],
    /// The scores also leave the block (a second reader).
    scores_out: bool,
}

const LLAMA: Spec = Spec {
    mul_scale: true,
    mask: true,
    ctx_perm: [0, 2, 1, 3],
    scores_out: false,
};

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    b.initializer(name, &t)
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    b.initializer(name, &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)))
}

/// x [batch, seq, HEADS·D] → q/k/v projections, RoPE on q and k, repeat_kv, attention.
fn block(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("llama", 17);
    let (bs, ss) = (sym("batch"), sym("seq"));
    let x = b.input(
        "x",
        DType::F32,
        vec![bs.clone(), ss.clone(), Dim::Known(HEADS * D)],
    );
    let f = b.input(
        "f",
        DType::F32,
        vec![Dim::Known(1), ss.clone(), Dim::Known(D / 2)],
    );
    // Tables and the rotate-half pieces shared by q and k.
    let cat = b.op("Concat", &[f, f], vec![attr::int("axis", -1)]);
    let axis1 = ints(&mut b, "axis1", &[1]);
    let cos = b.op("Cos", &[cat], vec![]);
    let sin = b.op("Sin", &[cat], vec![]);
    let cos4 = b.op("Unsqueeze", &[cos, axis1], vec![]);
    let sin4 = b.op("Unsqueeze", &[sin, axis1], vec![]);
    let (zero, half, end, last) = (
        ints(&mut b, "zero", &[0]),
        ints(&mut b, "half", &[D / 2]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "last", &[-1]),
    );
    let heads = |b: &mut GraphBuilder, name: &str, n: i64, rope: bool| {
        let w = b.initializer(
            &format!("w{name}"),
            &seeded_f32(
                &[(HEADS * D) as usize, (n * D) as usize],
                name.len() as u32 + 3,
            ),
        );
        let p = b.op("MatMul", &[x, w], vec![]);
        let shape = ints(b, &format!("shape_{name}"), &[0, 0, n, D]);
        let r = b.op("Reshape", &[p, shape], vec![]);
        let t = b.op("Transpose", &[r], vec![attr::ints("perm", &[0, 2, 1, 3])]);
        if !rope {
            return t;
        }
        let a = b.op("Mul", &[t, cos4], vec![]);
        let x1 = b.op("Slice", &[t, zero, half, last], vec![]);
        let x2 = b.op("Slice", &[t, half, end, last], vec![]);
        let neg = b.op("Neg", &[x2], vec![]);
        let rot = b.op("Concat", &[neg, x1], vec![attr::int("axis", -1)]);
        let m = b.op("Mul", &[rot, sin4], vec![]);
        b.op("Add", &[a, m], vec![])
    };
    let q = heads(&mut b, "q", HEADS, true);
    let k = heads(&mut b, "k", KV_HEADS, true);
    let v = heads(&mut b, "v", KV_HEADS, false);
    // repeat_kv: [B, KV, S, D] → [B, KV, 1, S, D] → Expand → Reshape [B, HEADS, S, D].
    let rep = |b: &mut GraphBuilder, t: ValueId, tag: &str| {
        let ax = ints(b, &format!("ax2_{tag}"), &[2]);
        let u = b.op("Unsqueeze", &[t, ax], vec![]);
        let shape = b.op("Shape", &[u], vec![]);
        let ones = ints(b, &format!("ones_{tag}"), &[1, 1, HEADS / KV_HEADS, 1, 1]);
        let target = b.op("Mul", &[shape, ones], vec![]);
        let e = b.op("Expand", &[u, target], vec![]);
        let merged = ints(b, &format!("merged_{tag}"), &[0, HEADS, -1, D]);
        b.op("Reshape", &[e, merged], vec![])
    };
    let k = rep(&mut b, k, "k");
    let v = rep(&mut b, v, "v");
    let kt = b.op("Transpose", &[k], vec![attr::ints("perm", &[0, 1, 3, 2])]);
    let qk = b.op("MatMul", &[q, kt], vec![]);
    let scaled = if spec.mul_scale {
        let c = scalar(&mut b, "scale", 1.0 / (D as f32).sqrt());
        b.op("Mul", &[qk, c], vec![])
    } else {
        let c = scalar(&mut b, "scale", (D as f32).sqrt());
        b.op("Div", &[qk, c], vec![])
    };
    let scores = if spec.mask {
        let m = b.input(
            "mask",
            DType::F32,
            vec![bs.clone(), Dim::Known(1), ss.clone(), ss.clone()],
        );
        b.op("Add", &[scaled, m], vec![])
    } else {
        scaled
    };
    if spec.scores_out {
        b.output(scores, "scores");
    }
    let p = b.op("Softmax", &[scores], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[p, v], vec![]);
    let ct = b.op(
        "Transpose",
        &[ctx],
        vec![attr::ints("perm", &spec.ctx_perm)],
    );
    let out_shape = ints(&mut b, "out_shape", &[0, 0, HEADS * D]);
    let y = b.op("Reshape", &[ct, out_shape], vec![]);
    b.output(y, "y");
    b.build()
}

#[test]
fn llama_attention_becomes_one_multi_head_attention() {
    for mul_scale in [true, false] {
        let m = block(Spec { mul_scale, ..LLAMA });
        let (opt, trace) = fuse(&m, RULES);
        // The report still counts q's rotary after the attention fusion moved it.
        let fused = fuselab::report::fusion_counts(&opt, &trace);
        assert_eq!(fused.get("RotaryEmbedding"), Some(&2), "{fused:?}");
        assert_eq!(fused.get("MultiHeadAttention"), Some(&1), "{fused:?}");
        let got = ops(&opt);
        let count = |op: &str| got.iter().find(|(o, _)| o == op).map_or(0, |p| p.1);
        assert_eq!(count("MultiHeadAttention"), 1, "{got:?}");
        assert_eq!(count("RotaryEmbedding"), 2, "{got:?}");
        assert_eq!(count("Softmax") + count("Neg"), 0, "{got:?}");
        // What stays: k's and v's head splits (MultiHeadAttention reads them heads-first).
        assert_eq!(count("Transpose"), 2, "{got:?}");
        for id in opt.graph.node_ids() {
            let n = opt.graph.node(id);
            if n.op_type == "MultiHeadAttention" {
                assert_eq!(n.attr_int("num_heads"), Some(HEADS));
                let s = n.attr_float("scale").unwrap();
                assert!((s - 1.0 / (D as f32).sqrt()).abs() < 1e-7, "{s}");
                assert_eq!(n.inputs.len(), 6, "query, key, value, -, -, attention_bias");
                // q's rotary reads the 3-D projection.
                let q = opt.graph.producer(n.input(0).unwrap()).unwrap();
                assert_eq!(opt.graph.node(q).attr_int("num_heads"), Some(HEADS));
            }
        }
        assert_parity_within(&m, &opt, 1e-5);
    }
}

#[test]
fn attention_without_a_mask_has_no_bias_input() {
    let m = block(Spec {
        mask: false,
        ..LLAMA
    });
    let (opt, _) = fuse(&m, RULES);
    let id = opt
        .graph
        .node_ids()
        .find(|&i| opt.graph.node(i).op_type == "MultiHeadAttention")
        .expect("fused");
    assert_eq!(opt.graph.node(id).inputs.len(), 3);
    assert_parity_within(&m, &opt, 1e-5);
}

#[test]
fn heads_merged_in_another_order_are_refused() {
    let m = block(Spec {
        ctx_perm: [0, 1, 3, 2],
        ..LLAMA
    });
    let (m, _) = fuse(&m, &["rotary"]);
    assert_rejected(&m, &["multi_head_attention"], "not [0, 2, 1, 3]");
}

#[test]
fn scores_read_outside_the_block_are_refused() {
    let m = block(Spec {
        scores_out: true,
        ..LLAMA
    });
    let (m, _) = fuse(&m, &["rotary"]);
    assert_rejected(&m, &["multi_head_attention"], "is a graph output");
}

#[test]
fn attention_without_rotary_is_left_to_the_attention_rule() {
    // Before `rotary` has run, q is no RotaryEmbedding: no candidate, no report entry.
    let m = block(LLAMA);
    let (opt, trace) = fuse(&m, &["multi_head_attention"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty() && trace.rejected.is_empty());
}
