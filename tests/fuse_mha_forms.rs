//! `multi_head_attention` on the query and mask forms of model families beyond Llama: a per-head
//! norm of q and k (Qwen3 before the head Transpose, Gemma3 after it), GPT-NeoX's fused QKV
//! sliced per head with partial rotary, Phi-3's full rotary written as the partial form (an
//! empty pass part), ModernBERT's Split/Squeeze of a `[.., 3, N, D]` projection, and T5's two
//! score additions (relative position bias, then padding mask), and torch dynamo's sdpa Kᵀ
//! (flatten, Transpose(0,2,1), unflatten). Exact op counts after fusion,
//! parity with the unfused graph, and the near misses that must not fuse.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const N: i64 = 4;
const D: i64 = 8;
const H: i64 = N * D;
const RULES: &[&str] = &["rotary", "multi_head_attention", "cse", "dce"];

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    b.initializer(name, &t)
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    b.initializer(name, &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)))
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Form {
    /// q/k: Reshape → norm → Transpose (Qwen3).
    NormThenTranspose,
    /// q/k: Reshape → Transpose → norm (Gemma3).
    TransposeThenNorm,
    /// One projection [.., N, 3D] per head, Transpose, Slice each part; rotary on the first D/2
    /// channels (GPT-NeoX).
    FusedQkvPartial,
    /// Separate projections, rotary as Concat(rotary(x[.., :D]), x[.., D:]) (Phi-3).
    EmptyPassPart,
    /// One projection Reshape [.., 3, N, D], Split on axis -3, Squeeze, Transpose (ModernBERT).
    SplitSqueeze,
    /// Not head-local: q keeps only the first half of the heads (a Slice of axis 1), repeated.
    HeadAxisSlice,
    /// A norm whose scale is [N, D]: per head, so it does not commute with the Transpose.
    PerHeadScale,
    /// Kᵀ as torch dynamo decomposes sdpa: Reshape(k, [-1, L, D]), Transpose(0,2,1), Reshape to
    /// k's leading dims + [D, L], the targets built from Shape(k).
    FlatKeyTranspose,
    /// The same with the final target k's leading dims + [L, D]: not a transpose.
    FlatKeyWrongOrder,
}

/// x [batch, seq, H] → q, k, v in `form`, rotary on q and k, attention with an additive mask.
fn block(form: Form) -> Model {
    let mut b = GraphBuilder::new("block", 17);
    let (bs, ss) = (sym("batch"), sym("seq"));
    let x = b.input("x", DType::F32, vec![bs.clone(), ss.clone(), Dim::Known(H)]);
    let r = if form == Form::FusedQkvPartial {
        D / 2
    } else {
        D
    };
    let f = b.input(
        "f",
        DType::F32,
        vec![Dim::Known(1), ss.clone(), Dim::Known(r / 2)],
    );
    let cat = b.op("Concat", &[f, f], vec![attr::int("axis", -1)]);
    let axis1 = ints(&mut b, "axis1", &[1]);
    let cos = b.op("Cos", &[cat], vec![]);
    let sin = b.op("Sin", &[cat], vec![]);
    let cos4 = b.op("Unsqueeze", &[cos, axis1], vec![]);
    let sin4 = b.op("Unsqueeze", &[sin, axis1], vec![]);
    let (zero, half, rr, end, last) = (
        ints(&mut b, "zero", &[0]),
        ints(&mut b, "half", &[r / 2]),
        ints(&mut b, "r", &[r]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "last", &[-1]),
    );
    let rope = |b: &mut GraphBuilder, t: ValueId| {
        let a = b.op("Mul", &[t, cos4], vec![]);
        let x1 = b.op("Slice", &[t, zero, half, last], vec![]);
        let x2 = b.op("Slice", &[t, half, end, last], vec![]);
        let neg = b.op("Neg", &[x2], vec![]);
        let rot = b.op("Concat", &[neg, x1], vec![attr::int("axis", -1)]);
        let m = b.op("Mul", &[rot, sin4], vec![]);
        b.op("Add", &[a, m], vec![])
    };
    // The partial form: Concat(rope(t[.., :r]), t[.., r:]).
    let partial = |b: &mut GraphBuilder, t: ValueId| {
        let head = b.op("Slice", &[t, zero, rr, last], vec![]);
        let pass = b.op("Slice", &[t, rr, end, last], vec![]);
        let rot = rope(b, head);
        b.op("Concat", &[rot, pass], vec![attr::int("axis", -1)])
    };
    let proj = |b: &mut GraphBuilder, name: &str, cols: i64| {
        let w = b.initializer(
            &format!("w{name}"),
            &seeded_f32(&[H as usize, cols as usize], name.len() as u32 + 5),
        );
        b.op("MatMul", &[x, w], vec![])
    };
    let perm = |b: &mut GraphBuilder, t: ValueId, p: &[i64]| {
        b.op("Transpose", &[t], vec![attr::ints("perm", p)])
    };
    let split4 = ints(&mut b, "split4", &[0, 0, N, D]);
    let norm_w = b.initializer("norm_w", &seeded_f32(&[D as usize], 9));
    let norm_w2 = b.initializer("norm_w2", &seeded_f32(&[N as usize, D as usize], 9));
    let norm = |b: &mut GraphBuilder, t: ValueId, w: ValueId| {
        let attrs = vec![attr::int("axis", -1), attr::float("epsilon", 1e-6)];
        b.op("SimplifiedLayerNormalization", &[t, w], attrs)
    };
    let (q, k, v) = match form {
        Form::FusedQkvPartial => {
            let p = proj(&mut b, "qkv", 3 * H);
            let s = ints(&mut b, "split_qkv", &[0, 0, N, 3 * D]);
            let t = b.op("Reshape", &[p, s], vec![]);
            let t = perm(&mut b, t, &[0, 2, 1, 3]);
            let part = |b: &mut GraphBuilder, i: i64| {
                let (s0, s1) = (
                    ints(b, &format!("p{i}_0"), &[i * D]),
                    ints(b, &format!("p{i}_1"), &[(i + 1) * D]),
                );
                b.op("Slice", &[t, s0, s1, last], vec![])
            };
            let (q, k, v) = (part(&mut b, 0), part(&mut b, 1), part(&mut b, 2));
            (partial(&mut b, q), partial(&mut b, k), v)
        }
        Form::SplitSqueeze => {
            let p = proj(&mut b, "qkv", 3 * H);
            let s = ints(&mut b, "split_qkv", &[0, 0, 3, N, D]);
            let t = b.op("Reshape", &[p, s], vec![]);
            let sizes = ints(&mut b, "sizes", &[1, 1, 1]);
            let parts = b.node(
                "",
                "Split",
                &[Some(t), Some(sizes)],
                3,
                vec![attr::int("axis", -3)],
            );
            let axis = ints(&mut b, "axis_m3", &[-3]);
            let mut heads = parts.iter().map(|&p| {
                let sq = b.op("Squeeze", &[p, axis], vec![]);
                perm(&mut b, sq, &[0, 2, 1, 3])
            });
            let (q, k, v) = (
                heads.next().unwrap(),
                heads.next().unwrap(),
                heads.next().unwrap(),
            );
            (rope(&mut b, q), rope(&mut b, k), v)
        }
        _ => {
            let heads = |b: &mut GraphBuilder, name: &str, is_v: bool| {
                let p = proj(b, name, H);
                let t = b.op("Reshape", &[p, split4], vec![]);
                let t = match (form, is_v) {
                    (_, true) => perm(b, t, &[0, 2, 1, 3]),
                    (Form::NormThenTranspose, _) => {
                        let n = norm(b, t, norm_w);
                        perm(b, n, &[0, 2, 1, 3])
                    }
                    (Form::TransposeThenNorm, _) => {
                        let t = perm(b, t, &[0, 2, 1, 3]);
                        norm(b, t, norm_w)
                    }
                    (Form::PerHeadScale, _) => {
                        let t = perm(b, t, &[0, 2, 1, 3]);
                        norm(b, t, norm_w2)
                    }
                    (Form::HeadAxisSlice, _) if name == "q" => {
                        // Heads [0, N/2) twice: a Slice of axis 1, then Concat on axis 1.
                        let t = perm(b, t, &[0, 2, 1, 3]);
                        let (a0, a1, ax) = (
                            ints(b, "h0", &[0]),
                            ints(b, "h1", &[N / 2]),
                            ints(b, "hax", &[1]),
                        );
                        let s = b.op("Slice", &[t, a0, a1, ax], vec![]);
                        b.op("Concat", &[s, s], vec![attr::int("axis", 1)])
                    }
                    _ => perm(b, t, &[0, 2, 1, 3]),
                };
                match (form, is_v) {
                    (_, true) => t,
                    (Form::EmptyPassPart, _) => partial(b, t),
                    _ => rope(b, t),
                }
            };
            let q = heads(&mut b, "q", false);
            let k = heads(&mut b, "k", false);
            let v = heads(&mut b, "v", true);
            (q, k, v)
        }
    };
    let kt = match form {
        Form::FlatKeyTranspose | Form::FlatKeyWrongOrder => {
            let shape = b.op("Shape", &[k], vec![]);
            let (lo, m2, m1, zero0) = (
                ints(&mut b, "lo", &[i64::MIN]),
                ints(&mut b, "m2", &[-2]),
                ints(&mut b, "m1", &[-1]),
                ints(&mut b, "zero0", &[0]),
            );
            let lead = b.op("Slice", &[shape, lo, m2, zero0], vec![]);
            let len = b.op("Slice", &[shape, m2, m1, zero0], vec![]);
            let dd = ints(&mut b, "dd", &[D]);
            let inner = b.op("Concat", &[m1, len, dd], vec![attr::int("axis", 0)]);
            let flat = b.op("Reshape", &[k, inner], vec![]);
            let t = perm(&mut b, flat, &[0, 2, 1]);
            let tail: [ValueId; 2] = if form == Form::FlatKeyTranspose {
                [dd, len]
            } else {
                [len, dd]
            };
            let outer = b.op(
                "Concat",
                &[lead, tail[0], tail[1]],
                vec![attr::int("axis", 0)],
            );
            b.op("Reshape", &[t, outer], vec![])
        }
        _ => perm(&mut b, k, &[0, 1, 3, 2]),
    };
    let qk = b.op("MatMul", &[q, kt], vec![]);
    let c = scalar(&mut b, "scale", 1.0 / (D as f32).sqrt());
    let scaled = b.op("Mul", &[qk, c], vec![]);
    let m = b.input("mask", DType::F32, vec![bs, Dim::Known(1), ss.clone(), ss]);
    let scores = b.op("Add", &[scaled, m], vec![]);
    let p = b.op("Softmax", &[scores], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[p, v], vec![]);
    let ct = perm(&mut b, ctx, &[0, 2, 1, 3]);
    let out_shape = ints(&mut b, "out_shape", &[0, 0, H]);
    let y = b.op("Reshape", &[ct, out_shape], vec![]);
    b.output(y, "y");
    b.build()
}

fn count(m: &Model, op: &str) -> usize {
    ops(m).iter().find(|(o, _)| o == op).map_or(0, |p| p.1)
}

#[test]
fn per_head_norms_before_or_after_the_head_transpose_fuse() {
    for form in [Form::NormThenTranspose, Form::TransposeThenNorm] {
        let m = block(form);
        let (opt, _) = fuse(&m, RULES);
        // q: split, its norm on [B, S, N, D] and one Reshape back to 3-D; k keeps split, norm
        // and Transpose (the op reads keys heads-first); v split and Transpose; the rotary
        // caches are a Slice and a Reshape each.
        let want = counts(&[
            ("Concat", 1),
            ("Cos", 1),
            ("MatMul", 3),
            ("MultiHeadAttention", 1),
            ("Reshape", 6),
            ("RotaryEmbedding", 2),
            ("Sin", 1),
            ("SimplifiedLayerNormalization", 2),
            ("Slice", 2),
            ("Transpose", 2),
        ]);
        assert_eq!(ops(&opt), want, "{form:?}");
        assert_parity_within(&m, &opt, 1e-5);
    }
}

#[test]
fn fused_qkv_sliced_per_head_with_partial_rotary_fuses() {
    let m = block(Form::FusedQkvPartial);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(count(&opt, "MultiHeadAttention"), 1, "{:?}", ops(&opt));
    assert_eq!(
        count(&opt, "Softmax") + count(&opt, "Neg"),
        0,
        "{:?}",
        ops(&opt)
    );
    // q is sliced out of the [B, S, N, 3D] split and merged back; the Transpose stays for k, v.
    assert_eq!(count(&opt, "Transpose"), 1, "{:?}", ops(&opt));
    let g = &opt.graph;
    let mha = g
        .node_ids()
        .find(|&i| g.node(i).op_type == "MultiHeadAttention")
        .unwrap();
    let rope = g.node(g.producer(g.node(mha).input(0).unwrap()).unwrap());
    assert_eq!(rope.op_type, "RotaryEmbedding");
    assert_eq!(rope.attr_int("rotary_embedding_dim"), Some(D / 2));
    assert_eq!(rope.attr_int("num_heads"), Some(N));
    assert_parity_within(&m, &opt, 1e-5);
}

#[test]
fn full_rotary_written_with_an_empty_pass_part_fuses() {
    let m = block(Form::EmptyPassPart);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(count(&opt, "MultiHeadAttention"), 1, "{:?}", ops(&opt));
    let g = &opt.graph;
    let mha = g
        .node_ids()
        .find(|&i| g.node(i).op_type == "MultiHeadAttention")
        .unwrap();
    let rope = g.node(g.producer(g.node(mha).input(0).unwrap()).unwrap());
    assert_eq!(rope.op_type, "RotaryEmbedding");
    assert_eq!(
        rope.attr_int("rotary_embedding_dim"),
        None,
        "the whole head rotates"
    );
    // q's projection is read as it is: no merging Reshape.
    assert_eq!(
        g.node(g.producer(rope.input(0).unwrap()).unwrap()).op_type,
        "MatMul"
    );
    assert_parity_within(&m, &opt, 1e-5);
}

#[test]
fn split_and_squeezed_heads_merge_with_one_reshape() {
    let m = block(Form::SplitSqueeze);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(count(&opt, "MultiHeadAttention"), 1, "{:?}", ops(&opt));
    assert_eq!(count(&opt, "Softmax"), 0);
    // q: Squeeze then the merging Reshape; k and v keep Squeeze + Transpose.
    assert_eq!(count(&opt, "Squeeze"), 3, "{:?}", ops(&opt));
    assert_eq!(count(&opt, "Transpose"), 2, "{:?}", ops(&opt));
    assert_parity_within(&m, &opt, 1e-5);
}

#[test]
fn dynamo_sdpa_key_transpose_by_flattening_fuses() {
    let m = block(Form::FlatKeyTranspose);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(count(&opt, "MultiHeadAttention"), 1, "{:?}", ops(&opt));
    assert_eq!(count(&opt, "Softmax"), 0, "{:?}", ops(&opt));
    // The flatten / Transpose(0,2,1) / unflatten and the shape arithmetic go: k is read
    // heads-first as it is.
    assert_eq!(count(&opt, "Shape"), 0, "{:?}", ops(&opt));
    assert_eq!(count(&opt, "Transpose"), 2, "{:?}", ops(&opt));
    assert_parity_within(&m, &opt, 1e-5);
    // Unflattened to [.., L, D] the keys are not transposed, only reshuffled.
    let m = block(Form::FlatKeyWrongOrder);
    let (m, _) = fuse(&m, &["rotary"]);
    assert_rejected(&m, &["multi_head_attention"], "the keys are not transposed");
}

#[test]
fn query_ops_that_mix_heads_are_refused() {
    let m = block(Form::HeadAxisSlice);
    let (m, _) = fuse(&m, &["rotary"]);
    assert_rejected(&m, &["multi_head_attention"], "are not a Transpose");
    // A [N, D] scale differs per head: it broadcasts over [B, N, S, D], not over [B, S, N, D].
    let m = block(Form::PerHeadScale);
    let (m, _) = fuse(&m, &["rotary"]);
    assert_rejected(&m, &["multi_head_attention"], "are not a Transpose");
}

// ------------------------------------------------------------------ T5: bias + padding mask

#[derive(Clone, Copy, PartialEq)]
enum T5Mask {
    /// scores + bias [1, N, S, S] + Where(A, 0, F) [B, 1, 1, S]
    BiasThenPadding,
    /// the same two in the other order
    PaddingThenBias,
    /// scores + bias + a second bias input [B, 1, 1, S]: nothing proves it is padding
    BiasThenRowBias,
    /// T5's decoder self-attention: scores + bias + Where(k <= q, 0, lowest) [1, 1, S, S]
    BiasThenCausal,
}

/// T5's encoder attention: no scale, Kᵀ = Transpose(0,2,3,1) of the key split, which the
/// position bias also reads (through a Transpose and Shape: the key length).
fn t5_block(mask: T5Mask) -> Model {
    let mut b = GraphBuilder::new("t5", 17);
    let (bs, ss) = (sym("batch"), sym("seq"));
    let x = b.input("x", DType::F32, vec![bs.clone(), ss.clone(), Dim::Known(H)]);
    let a = b.input("attention_mask", DType::I64, vec![bs.clone(), ss.clone()]);
    let bias = b.input(
        "bias",
        DType::F32,
        vec![Dim::Known(1), Dim::Known(N), ss.clone(), ss.clone()],
    );
    let split = ints(&mut b, "split", &[0, 0, N, D]);
    let heads = |b: &mut GraphBuilder, i: u32| {
        let w = b.initializer(&format!("w{i}"), &seeded_f32(&[H as usize, H as usize], i));
        let p = b.op("MatMul", &[x, w], vec![]);
        b.op("Reshape", &[p, split], vec![])
    };
    let (q, k, v) = (heads(&mut b, 1), heads(&mut b, 2), heads(&mut b, 3));
    let q = b.op("Transpose", &[q], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let kt = b.op("Transpose", &[k], vec![attr::ints("perm", &[0, 2, 3, 1])]);
    let k_heads = b.op("Transpose", &[k], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let k_len = b.op("Shape", &[k_heads], vec![]);
    b.output(k_len, "key_shape");
    let v = b.op("Transpose", &[v], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let scores = b.op("MatMul", &[q, kt], vec![]);
    // Where(Unsqueeze(keep, axes), 0, lowest)
    let masked = |b: &mut GraphBuilder, keep: ValueId, axes: ValueId| {
        let keep = b.op("Unsqueeze", &[keep, axes], vec![]);
        let (zero, f) = (scalar(b, "zero", 0.0), scalar(b, "filter", f32::MIN));
        b.op("Where", &[keep, zero, f], vec![])
    };
    let pad = match mask {
        T5Mask::BiasThenRowBias => b.input(
            "row_bias",
            DType::F32,
            vec![bs, Dim::Known(1), Dim::Known(1), ss],
        ),
        T5Mask::BiasThenCausal => {
            let shape = b.op("Shape", &[x], vec![]);
            let (one, two) = (ints(&mut b, "one", &[1]), ints(&mut b, "two", &[2]));
            let s = b.op("Slice", &[shape, one, two], vec![]);
            let s = b.op("Squeeze", &[s], vec![]);
            let i0 = b.initializer("i0", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 0)));
            let i1 = b.initializer("i1", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 1)));
            let r = b.op("Range", &[i0, s, i1], vec![]);
            let (ax0, ax1) = (ints(&mut b, "ax0", &[0]), ints(&mut b, "ax1", &[1]));
            let ki = b.op("Unsqueeze", &[r, ax0], vec![]);
            let qi = b.op("Unsqueeze", &[r, ax1], vec![]);
            let keep = b.op("LessOrEqual", &[ki, qi], vec![]);
            let axes = ints(&mut b, "mask_axes", &[0, 1]);
            masked(&mut b, keep, axes)
        }
        _ => {
            let keep = b.op("Cast", &[a], vec![attr::int("to", DType::BOOL.0 as i64)]);
            let axes = ints(&mut b, "mask_axes", &[1, 2]);
            masked(&mut b, keep, axes)
        }
    };
    let (first, second) = match mask {
        T5Mask::PaddingThenBias => (pad, bias),
        _ => (bias, pad),
    };
    let s1 = b.op("Add", &[scores, first], vec![]);
    let s2 = b.op("Add", &[s1, second], vec![]);
    let p = b.op("Softmax", &[s2], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[p, v], vec![]);
    let ct = b.op("Transpose", &[ctx], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let merge = ints(&mut b, "merge", &[0, 0, H]);
    let y = b.op("Reshape", &[ct, merge], vec![]);
    b.output(y, "y");
    if matches!(mask, T5Mask::BiasThenRowBias | T5Mask::BiasThenCausal) {
        let keep_read = b.op("Identity", &[a], vec![]);
        b.output(keep_read, "mask_copy");
    }
    b.build()
}

fn t5_diff(a: &Model, b: &Model, mask: &[i64]) -> f64 {
    let (batch, seq) = (2, mask.len() / 2);
    let limits = fuselab::Limits::default();
    let inputs = std::collections::HashMap::from([
        ("x".to_string(), seeded_f32(&[batch, seq, H as usize], 3)),
        (
            "attention_mask".to_string(),
            Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), mask.to_vec()).unwrap()),
        ),
        (
            "bias".to_string(),
            seeded_f32(&[1, N as usize, seq, seq], 4),
        ),
    ]);
    let run = |m: &Model| {
        fuselab::runtime::reference::Executor::new(m, &limits)
            .unwrap()
            .run(&inputs)
            .unwrap()
    };
    fuselab::runtime::parity::compare(&run(a), &run(b), 0.0).max_abs_diff
}

/// The T5 block with `mask`, fused by multi_head_attention: (original, fused, its one
/// MultiHeadAttention).
fn fused_t5(mask: T5Mask) -> (Model, Model, fuselab::ir::Node) {
    let m = t5_block(mask);
    let (opt, _) = fuse(&m, &["multi_head_attention", "dce"]);
    let g = &opt.graph;
    let id = g
        .node_ids()
        .find(|&i| g.node(i).op_type == "MultiHeadAttention");
    let n = g.node(id.expect("fused")).clone();
    (m, opt, n)
}

#[test]
fn a_position_bias_and_a_padding_mask_become_attention_bias_and_key_padding_mask() {
    for mask in [T5Mask::BiasThenPadding, T5Mask::PaddingThenBias] {
        let (m, opt, n) = fused_t5(mask);
        let g = &opt.graph;
        assert_eq!(
            n.inputs.len(),
            6,
            "query, key, value, -, key_padding_mask, attention_bias"
        );
        assert_eq!(g.name(n.input(5).unwrap()), "bias");
        assert_eq!(n.attr_float("mask_filter_value"), Some(f32::MIN));
        assert_eq!(n.attr_float("scale"), Some(1.0));
        // The key split stays for the Transpose the key length is read from.
        assert_eq!(count(&opt, "Softmax"), 0);
        assert_eq!(count(&opt, "Transpose"), 1, "{:?}", ops(&opt));
        for rows in [[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 0, 1]] {
            let d = t5_diff(&m, &opt, &rows);
            assert!(d <= 1e-5, "{rows:?}: {d}");
        }
    }
}

/// T5's decoder: the position bias plus a causal mask (the lowest float32 after the query) is
/// attention_bias plus `unidirectional`, no key_padding_mask; the same values at every length.
#[test]
fn a_position_bias_and_a_causal_mask_become_attention_bias_and_unidirectional() {
    let (m, opt, n) = fused_t5(T5Mask::BiasThenCausal);
    let g = &opt.graph;
    assert_eq!(n.inputs.len(), 6);
    assert_eq!(n.input(4), None, "no key_padding_mask");
    assert_eq!(g.name(n.input(5).unwrap()), "bias");
    assert_eq!(n.attr_int("unidirectional"), Some(1));
    assert_eq!(n.attr_float("mask_filter_value"), Some(f32::MIN));
    assert_eq!(count(&opt, "Softmax"), 0);
    // batch 2 at seq 3 and 5 (the mask input is not read: the causal part needs none).
    for len in [6, 10] {
        let d = t5_diff(&m, &opt, &vec![1; len]);
        assert!(d <= 1e-5, "seq {}: {d}", len / 2);
    }
}

#[test]
fn two_added_biases_without_a_provable_padding_mask_are_refused() {
    let m = t5_block(T5Mask::BiasThenRowBias);
    assert_rejected(
        &m,
        &["multi_head_attention"],
        "two masks added to the scores, not an attention_bias and a proved mask",
    );
}
