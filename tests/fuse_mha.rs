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
    /// The target of the Reshape that merges the heads.
    out_shape: &'static [i64],
}

const LLAMA: Spec = Spec {
    mul_scale: true,
    mask: true,
    ctx_perm: [0, 2, 1, 3],
    scores_out: false,
    out_shape: &[0, 0, HEADS * D],
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
    let out_shape = ints(&mut b, "out_shape", spec.out_shape);
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

/// torch dynamo's GPT-2 merges the heads straight into [B*S, H] rows: the fused op's [B, S, H]
/// output feeds that Reshape, which stays.
#[test]
fn heads_merged_into_rows_keep_their_reshape() {
    let m = block(Spec {
        out_shape: &[-1, HEADS * D],
        ..LLAMA
    });
    let (opt, _) = fuse(&m, RULES);
    let got = ops(&opt);
    let count = |op: &str| got.iter().find(|(o, _)| o == op).map_or(0, |p| p.1);
    assert_eq!(count("MultiHeadAttention"), 1, "{got:?}");
    assert_eq!(count("Softmax"), 0, "{got:?}");
    let y = opt.graph.outputs[0];
    let reshape = opt.graph.node(opt.graph.producer(y).unwrap());
    assert_eq!(reshape.op_type, "Reshape");
    let from = opt.graph.producer(reshape.input(0).unwrap()).unwrap();
    assert_eq!(opt.graph.node(from).op_type, "MultiHeadAttention");
    assert_parity_within(&m, &opt, 1e-5);
    // A 4-element target may read dim 2 or 3 of its input, which the op's output does not have.
    let m = block(Spec {
        out_shape: &[0, 0, HEADS, D],
        ..LLAMA
    });
    let (opt, trace) = fuse(&m, RULES);
    assert!(ops(&opt).iter().all(|(op, _)| op != "MultiHeadAttention"));
    assert!(
        (trace.rejected.iter()).any(|r| r.reason.contains("are not the query projection's shape")),
        "{:?}",
        trace.rejected
    );
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
fn an_unfused_rotary_query_is_refused() {
    // Before `rotary` has run, q is the rotate-half arithmetic, not the heads or a RotaryEmbedding.
    let m = block(LLAMA);
    let (opt, trace) = fuse(&m, &["multi_head_attention"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty());
    assert_rejected(&m, &["multi_head_attention"], "are not a Transpose");
}

// ------------------------------------------------------------------ encoder self-attention

const HIDDEN: i64 = HEADS * D;

#[derive(Clone, Copy, PartialEq)]
enum EncMask {
    None,
    /// Where(Unsqueeze(Cast(A, bool), [1, 2]), 0, F): [B, 1, 1, T], provable.
    Padding,
    /// transformers 5.x's dynamo form: `GatherND(Cast(A, bool), [b, k] coordinates)` with the
    /// batch and key aranges expanded to [B, 1, 1, T] and concatenated on a new last axis.
    GatherNd,
    /// A graph input [batch, 1, seq, seq] added as it is.
    Bias,
    /// A graph input [batch, 1, 1, seq]: broadcasts over queries, which attention_bias cannot.
    RowBias,
}

/// BERT's encoder block as int8 exports leave it: each projection is MatMul then a per-column
/// Mul (a dequantization scale), so `attention` (which wants plain MatMul projections) refuses;
/// Kᵀ is Transpose(0,2,3,1) of the Reshape, V Transpose(0,2,1,3).
fn encoder(mask: EncMask, dt: DType) -> Model {
    let mut b = GraphBuilder::new("encoder", 17);
    let (bs, ss) = (sym("batch"), sym("seq"));
    let x = b.input("x", dt, vec![bs.clone(), ss.clone(), Dim::Known(HIDDEN)]);
    let a = b.input("attention_mask", DType::I64, vec![bs.clone(), ss.clone()]);
    let split = ints(&mut b, "split", &[0, 0, HEADS, D]);
    let narrow = |t: Tensor| t.narrow(dt).unwrap();
    let heads = |b: &mut GraphBuilder, i: u32, perm: &[i64]| {
        let w = b.initializer(
            &format!("w{i}"),
            &narrow(seeded_f32(&[HIDDEN as usize, HIDDEN as usize], i)),
        );
        let c = b.initializer(
            &format!("col_scale{i}"),
            &narrow(seeded_f32(&[HIDDEN as usize], 10 + i)),
        );
        let mm = b.op("MatMul", &[x, w], vec![]);
        let p = b.op("Mul", &[mm, c], vec![]);
        let r = b.op("Reshape", &[p, split], vec![]);
        b.op("Transpose", &[r], vec![attr::ints("perm", perm)])
    };
    let q = heads(&mut b, 1, &[0, 2, 1, 3]);
    let k = heads(&mut b, 2, &[0, 2, 3, 1]);
    let v = heads(&mut b, 3, &[0, 2, 1, 3]);
    let qk = b.op("MatMul", &[q, k], vec![]);
    let c = b.initializer(
        "scale",
        &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 1.0 / (D as f32).sqrt()))
            .narrow(dt)
            .unwrap(),
    );
    let mut logits = b.op("Mul", &[qk, c], vec![]);
    // Where(keep, 0, F): F the lowest float of the scores' type.
    let filtered = |b: &mut GraphBuilder, keep: ValueId| {
        let f = if dt == DType::F16 { -65504.0 } else { f32::MIN };
        let scalar_dt = |b: &mut GraphBuilder, name: &str, v: f32| {
            let t = Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v));
            b.initializer(name, &t.narrow(dt).unwrap())
        };
        let zero = scalar_dt(b, "zero", 0.0);
        let f = scalar_dt(b, "filter", f);
        b.op("Where", &[keep, zero, f], vec![])
    };
    let m = match mask {
        EncMask::None => None,
        EncMask::Padding => {
            let keep = b.op("Cast", &[a], vec![attr::int("to", DType::BOOL.0 as i64)]);
            let axes = ints(&mut b, "mask_axes", &[1, 2]);
            let keep = b.op("Unsqueeze", &[keep, axes], vec![]);
            Some(filtered(&mut b, keep))
        }
        EncMask::GatherNd => {
            let keep = b.op("Cast", &[a], vec![attr::int("to", DType::BOOL.0 as i64)]);
            let shape = b.op("Shape", &[a], vec![]);
            let dim = |b: &mut GraphBuilder, i: i64| {
                let s = ints(b, &format!("start{i}"), &[i]);
                let e = ints(b, &format!("end{i}"), &[i + 1]);
                b.op("Slice", &[shape, s, e], vec![])
            };
            let (bd, td) = (dim(&mut b, 0), dim(&mut b, 1));
            let ones = ints(&mut b, "ones", &[1, 1]);
            let target = b.op("Concat", &[bd, ones, td], vec![attr::int("axis", 0)]);
            let (zero, one) = (
                b.initializer("i0", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 0))),
                b.initializer("i1", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 1))),
            );
            let coord = |b: &mut GraphBuilder, d: ValueId, axes: &[i64]| {
                let n = b.op("Squeeze", &[d], vec![]);
                let r = b.op("Range", &[zero, n, one], vec![]);
                let ax = ints(b, &format!("axes{}", axes[0]), axes);
                let u = b.op("Unsqueeze", &[r, ax], vec![]);
                let e = b.op("Expand", &[u, target], vec![]);
                let last = ints(b, &format!("last{}", axes[0]), &[-1]);
                b.op("Unsqueeze", &[e, last], vec![])
            };
            let bi = coord(&mut b, bd, &[1, 2, 3]);
            let ki = coord(&mut b, td, &[0, 1, 2]);
            let idx = b.op("Concat", &[bi, ki], vec![attr::int("axis", -1)]);
            let keep = b.op("GatherND", &[keep, idx], vec![]);
            Some(filtered(&mut b, keep))
        }
        EncMask::Bias => Some(b.input("bias", dt, vec![bs.clone(), Dim::Known(1), ss.clone(), ss])),
        EncMask::RowBias => Some(b.input("bias", dt, vec![bs, Dim::Known(1), Dim::Known(1), ss])),
    };
    if let Some(m) = m {
        logits = b.op("Add", &[logits, m], vec![]);
    }
    let probs = b.op("Softmax", &[logits], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[probs, v], vec![]);
    let ct = b.op("Transpose", &[ctx], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let merge = ints(&mut b, "merge", &[0, 0, HIDDEN]);
    let y = b.op("Reshape", &[ct, merge], vec![]);
    b.output(y, "y");
    if !matches!(mask, EncMask::Padding | EncMask::GatherNd) {
        let keep_read = b.op("Identity", &[a], vec![]);
        b.output(keep_read, "mask_copy");
    }
    b.build()
}

const ENCODER_RULES: &[&str] = &["attention", "multi_head_attention", "dce"];

fn mha_node(m: &Model) -> fuselab::ir::Node {
    let g = &m.graph;
    let id = g
        .node_ids()
        .find(|&i| g.node(i).op_type == "MultiHeadAttention");
    g.node(id.expect("a MultiHeadAttention")).clone()
}

/// Both models on seeded x and the given mask rows (and a seeded bias when the model has one).
fn diff_with_mask(a: &Model, b: &Model, batch: usize, seq: usize, mask: &[i64]) -> f64 {
    let limits = fuselab::Limits::default();
    let mut inputs = std::collections::HashMap::from([
        (
            "x".to_string(),
            seeded_f32(&[batch, seq, HIDDEN as usize], 3),
        ),
        (
            "attention_mask".to_string(),
            Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), mask.to_vec()).unwrap()),
        ),
    ]);
    if a.graph.inputs.len() == 3 {
        inputs.insert("bias".into(), seeded_f32(&[batch, 1, seq, seq], 4));
    }
    let run = |m: &Model| {
        fuselab::runtime::reference::Executor::new(m, &limits)
            .unwrap()
            .run(&inputs)
            .unwrap()
    };
    fuselab::runtime::parity::compare(&run(a), &run(b), 0.0).max_abs_diff
}

#[test]
fn encoder_attention_with_a_padding_mask_reads_it_as_key_padding_mask() {
    let m = encoder(EncMask::Padding, DType::F32);
    assert_rejected(
        &m,
        &["attention"],
        "does not scale the scores by a scalar constant",
    );
    let (opt, _) = fuse(&m, ENCODER_RULES);
    let got = ops(&opt);
    // The projections stay (MatMul, Mul each); the rest is one node and the mask's two Casts.
    let want: Vec<(String, usize)> = [
        ("Cast", 2),
        ("MatMul", 3),
        ("Mul", 3),
        ("MultiHeadAttention", 1),
    ]
    .iter()
    .map(|(o, n)| (o.to_string(), *n))
    .collect();
    assert_eq!(got, want);
    let n = mha_node(&opt);
    assert_eq!(n.inputs.len(), 5, "query, key, value, -, key_padding_mask");
    assert_eq!(n.attr_float("mask_filter_value"), Some(f32::MIN));
    // Keys and values are the 3-D projections.
    for i in [1, 2] {
        let v = n.input(i).unwrap();
        assert_eq!(opt.graph.value(v).ty.rank(), Some(3));
    }
    let cases: [(&str, &[i64]); 4] = [
        ("all kept", &[1, 1, 1, 1, 1, 1, 1, 1]),
        ("left padding", &[0, 0, 1, 1, 1, 1, 1, 0]),
        ("a fully masked row", &[0, 0, 0, 0, 1, 0, 1, 0]),
        (
            "values other than 0/1",
            &[2, -1, 0, 1 << 40, 0, 7, 1 << 32, -5],
        ),
    ];
    for (what, mask) in cases {
        let d = diff_with_mask(&m, &opt, 2, 4, mask);
        assert!(d <= 1e-5, "{what}: {d}");
    }
}

#[test]
fn encoder_attention_with_a_full_bias_reads_it_as_attention_bias() {
    let m = encoder(EncMask::Bias, DType::F32);
    let (opt, _) = fuse(&m, ENCODER_RULES);
    let n = mha_node(&opt);
    assert_eq!(n.inputs.len(), 6, "query, key, value, -, -, attention_bias");
    let d = diff_with_mask(&m, &opt, 2, 3, &[1; 6]);
    assert!(d <= 1e-5, "{d}");
}

#[test]
fn encoder_attention_without_a_mask() {
    let m = encoder(EncMask::None, DType::F32);
    let (opt, _) = fuse(&m, ENCODER_RULES);
    assert_eq!(mha_node(&opt).inputs.len(), 3);
    assert_parity_within(&m, &opt, 1e-5);
}

#[test]
fn a_bias_broadcast_over_queries_is_refused() {
    // [B, 1, 1, L] adds to every query row in the graph; attention_bias must be [.., S, L].
    let m = encoder(EncMask::RowBias, DType::F32);
    assert_rejected(
        &m,
        ENCODER_RULES,
        "nor is it a [B or 1, 1 or 4, S, L] attention_bias",
    );
}

#[test]
fn float16_encoder_attention_takes_only_a_proved_padding_mask() {
    let m = encoder(EncMask::Padding, DType::F16);
    let (opt, _) = fuse(&m, ENCODER_RULES);
    assert_eq!(mha_node(&opt).inputs.len(), 5);
    // F = -65504 goes in as the lowest float32 (attention_mask::op_filter).
    assert_eq!(
        mha_node(&opt).attr_float("mask_filter_value"),
        Some(f32::MIN)
    );
    assert_parity_within(&m, &opt, 2e-2);
    // The same mask read by GatherND of coordinates (torch's dynamo exporter).
    let m = encoder(EncMask::GatherNd, DType::F16);
    let (opt, _) = fuse(&m, ENCODER_RULES);
    assert_eq!(mha_node(&opt).inputs.len(), 5);
    assert_eq!(ops(&opt).iter().find(|(op, _)| op == "GatherND"), None);
    assert_parity_within(&m, &opt, 2e-2);
    // An unproved bias: in float16 a row with only masked keys rounds to one value.
    let m = encoder(EncMask::Bias, DType::F16);
    assert_rejected(&m, ENCODER_RULES, "float16 scores take only a proved mask");
}

/// The float16 Llama (onnxruntime's converter): its causal + padding mask is proved, so each
/// layer's attention is one MultiHeadAttention with `unidirectional = 1`, the padding as an
/// int32 key_padding_mask and F = -65504 as the lowest float32. Parity with the original on the
/// reference backend (which rounds every op to float16) holds at the float16 tolerance on left
/// padding too, where the padded queries' rows are fully masked (uniform in both). onnxruntime-
/// web's WebGPU MultiHeadAttention refuses unidirectional: `--target ort-webgpu` leaves it.
#[test]
fn float16_llama_attention_is_causal_multi_head_attention() {
    use fuselab::passes::target::Target;
    use fuselab::pipeline::{optimize, OptimizeOptions};
    let path = common::repo().join("tests/models/zoo/llama_gqa_tiny_fp16.onnx");
    let m = fuselab::io::load_file(&path, &fuselab::Limits::default()).unwrap();
    let (opt, rep) = optimize(&m, &OptimizeOptions::default(), &|| 0.0).unwrap();
    assert!(
        rep.parity.as_ref().is_some_and(|p| p.ok),
        "{:?}",
        rep.parity
    );
    assert_eq!(rep.fusions.get("MultiHeadAttention"), Some(&2));
    let g = &opt.graph;
    let mhas: Vec<_> = g
        .node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == "MultiHeadAttention")
        .collect();
    assert_eq!(mhas.len(), 2);
    for n in &mhas {
        assert_eq!(n.attr_int("unidirectional"), Some(1));
        assert_eq!(n.attr_float("mask_filter_value"), Some(f32::MIN));
        assert_eq!(n.inputs.len(), 5, "query, key, value, -, key_padding_mask");
    }
    let limits = fuselab::Limits::default();
    let ids: Vec<i64> = (0..2 * 6).map(|i| (i * 37 + 5) % 1000).collect();
    for mask in [
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1],
    ] {
        let t = |v: Vec<i64>| Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[2, 6]), v).unwrap());
        let inputs = std::collections::HashMap::from([
            ("input_ids".to_string(), t(ids.clone())),
            ("attention_mask".to_string(), t(mask.to_vec())),
        ]);
        let run = |m: &Model| {
            fuselab::runtime::reference::Executor::new(m, &limits)
                .unwrap()
                .run(&inputs)
                .unwrap()
        };
        let d = fuselab::runtime::parity::compare(&run(&m), &run(&opt), 0.0).max_abs_diff;
        println!("mask {mask:?}: max |diff| {d:e}");
        assert!(
            d <= fuselab::runtime::parity::HALF_TOLERANCE,
            "{mask:?}: {d}"
        );
    }
    let web = OptimizeOptions {
        target: Some(Target::OrtWebgpu),
        ..Default::default()
    };
    let (_, rep) = optimize(&m, &web, &|| 0.0).unwrap();
    assert_eq!(rep.fusions.get("MultiHeadAttention"), None);
    assert!(rep
        .rejected
        .iter()
        .any(|r| r.reason.contains("refuses unidirectional")));
}

/// A decode step's inputs for the zoo's decode exports: `seq` new ids after `past` cached keys
/// and values (seeded), the mask `mask` ([batch, past + seq]).
fn decode_inputs(
    m: &Model,
    (batch, seq, past): (usize, usize, usize),
    mask: &[i64],
) -> std::collections::HashMap<String, Tensor> {
    let total = past + seq;
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| (i as i64 * 37 + 5) % 1000)
        .collect();
    let mut inputs = std::collections::HashMap::from([
        (
            "input_ids".to_string(),
            Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), ids).unwrap()),
        ),
        (
            "attention_mask".to_string(),
            Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[batch, total]), mask.to_vec()).unwrap()),
        ),
    ]);
    let g = &m.graph;
    for (i, &v) in g.inputs.iter().enumerate() {
        let name = g.name(v);
        if name.starts_with("past_") {
            let Some([_, Dim::Known(kv), _, Dim::Known(d)]) = g.value(v).ty.shape.as_deref() else {
                panic!("{name}: not [batch, heads, past, head]");
            };
            let shape = [batch, *kv as usize, past, *d as usize];
            inputs.insert(name.to_string(), seeded_f32(&shape, 10 + i as u32));
        }
    }
    inputs
}

/// Every default rule (the exports' shape chains fold only with all cleanups); the op count of
/// `op` in the result and the rejection reasons.
fn fuse_all(m: &Model, op: &str) -> (Model, usize, Vec<String>) {
    let (opt, trace) = fuse(m, &fuselab::passes::ALL_RULES);
    let n = ops(&opt)
        .into_iter()
        .find(|(o, _)| o == op)
        .map_or(0, |(_, n)| n);
    let why = trace.rejected.iter().map(|r| r.reason.clone()).collect();
    (opt, n, why)
}

/// (batch, seq, past) of a decode step, and its attention_mask [batch, past + seq].
type DecodeCase = ((usize, usize, usize), Vec<i64>);

/// The decode step `m` and its fused `opt` agree within `tol` on each case.
fn assert_decode_parity(m: &Model, opt: &Model, cases: &[DecodeCase], tol: f64) {
    let limits = fuselab::Limits::default();
    for (shape, mask) in cases {
        let inputs = decode_inputs(m, *shape, mask);
        let run = |m: &Model| {
            fuselab::runtime::reference::Executor::new(m, &limits)
                .unwrap()
                .run(&inputs)
                .unwrap()
        };
        let d = fuselab::runtime::parity::compare(&run(m), &run(opt), 0.0).max_abs_diff;
        println!("{shape:?} {mask:?}: max |diff| {d:e}");
        assert!(d <= tol, "{shape:?} {mask:?}: {d}");
    }
}

fn zoo(name: &str) -> Model {
    let path = common::repo().join("tests/models/zoo").join(name);
    fuselab::io::load_file(&path, &fuselab::Limits::default()).unwrap()
}

fn gpt2_decode() -> Model {
    zoo("gpt2_tiny_decode.onnx")
}

/// GPT-2's decode step as transformers' sdpa path exports it (`Concat(past, new)` keys and
/// values, a causal mask over past + seq built from `Range(0, past + seq)`, a -inf filter and
/// the NaN guard): each layer's attention becomes one MultiHeadAttention that reads the cache as
/// past_key/past_value, writes present_key/present_value (the graph outputs) and is causal
/// after the cache. Checked with left padding, one new token, several, and an empty cache.
#[test]
fn gpt2_decode_step_attention_reads_and_writes_the_cache() {
    let m = gpt2_decode();
    let (opt, _, why) = fuse_all(&m, "MultiHeadAttention");
    let mhas: Vec<_> = opt
        .graph
        .node_ids()
        .map(|id| opt.graph.node(id).clone())
        .filter(|n| n.op_type == "MultiHeadAttention")
        .collect();
    assert_eq!(mhas.len(), 2, "{why:?}");
    let g = &opt.graph;
    let mut presents = vec![];
    for n in &mhas {
        assert_eq!(n.attr_int("unidirectional"), Some(1));
        assert_eq!(n.attr_float("mask_filter_value"), Some(f32::MIN));
        assert_eq!(n.inputs.len(), 8, "query .. past_value");
        assert!(n.inputs[4].is_some(), "key_padding_mask");
        assert!(n.inputs[5].is_none(), "no attention_bias");
        let name = |i: usize| g.name(n.inputs[i].unwrap()).to_string();
        let out = |i: usize| g.name(n.outputs[i].unwrap()).to_string();
        // The cache of one layer in, the same layer's present out.
        let layer = out(1).trim_start_matches("present_key_").to_string();
        assert_eq!(out(2), format!("present_value_{layer}"));
        assert_eq!(name(7), format!("past_value_{layer}"));
        presents.push(layer);
    }
    presents.sort();
    assert_eq!(presents, ["0", "1"]);
    // No Concat builds a cache any more.
    let concats = g
        .node_ids()
        .filter(|&i| g.node(i).op_type == "Concat")
        .filter(|&i| g.node(i).output(0).is_some_and(|o| g.is_graph_output(o)))
        .count();
    assert_eq!(concats, 0);
    let cases = [
        (
            (2, 3, 5),
            vec![1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
        ),
        ((1, 1, 7), vec![0, 0, 0, 1, 1, 1, 1, 1]),
        // Row 1 hides every key: NaN in the pattern, zeroed by its guard and after the op.
        ((2, 2, 3), vec![1, 1, 1, 1, 1, 0, 0, 0, 0, 0]),
        ((2, 4, 0), vec![0, 1, 1, 1, 1, 1, 1, 1]),
    ];
    assert_decode_parity(&m, &opt, &cases, 1e-5);
}

/// Without present outputs nothing states that the mask's length `total` is past + seq, so the
/// mask's Gather (attention_mask at b·total + k for k < past + seq) is not provably in range and
/// the step stays unfused, with that reason.
#[test]
fn a_decode_step_without_present_outputs_is_refused() {
    let mut m = gpt2_decode();
    let keep: Vec<ValueId> = (m.graph.outputs.iter().copied())
        .filter(|&o| !m.graph.name(o).starts_with("present_"))
        .collect();
    m.graph.outputs = keep;
    let (_, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 0);
    let needle = "indices are not provably within the data";
    assert!(why.iter().any(|r| r.contains(needle)), "{why:?}");
}

/// Llama's decode step repeats its 2 cached key/value heads for 4 query heads after the Concat
/// (repeat_kv), so the op cannot take the cache (its past_key has the query's heads): the
/// Concats stay (they are the present outputs), the repeated keys and values go in heads-first,
/// and the mask, proved to be [B, 1, S, past + S], goes in as attention_bias (the op's own
/// causal mask would start at key 0). Parity with left padding and a fully masked row.
#[test]
fn a_grouped_query_decode_step_takes_its_mask_as_attention_bias() {
    let m = zoo("llama_gqa_tiny_decode.onnx");
    let (opt, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 2, "{why:?}");
    assert!(ops(&opt)
        .iter()
        .any(|(op, n)| op == "RotaryEmbedding" && *n == 4));
    let g = &opt.graph;
    for id in g.node_ids() {
        let node = g.node(id);
        if node.op_type != "MultiHeadAttention" {
            continue;
        }
        assert_eq!(
            node.inputs.len(),
            6,
            "query, key, value, -, -, attention_bias"
        );
        assert!(node.inputs[4].is_none() && node.inputs[5].is_some());
        assert_eq!(node.attr_int("unidirectional"), None);
        assert_eq!(node.outputs.len(), 1);
    }
    let cases = [
        (
            (2, 3, 5),
            vec![1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
        ),
        ((1, 1, 7), vec![0, 0, 0, 1, 1, 1, 1, 1]),
        ((2, 2, 3), vec![1, 1, 1, 1, 1, 0, 0, 0, 0, 0]),
    ];
    assert_decode_parity(&m, &opt, &cases, 1e-5);
}

/// A decode step's default inputs agree with what it states: present_key is declared
/// `[batch, 4, total, 16]` and computed as Concat(past_key, new keys), so `total` defaults to
/// past + seq (8 + 8), and the default parity run of `optimize` passes; the fused step, whose
/// present outputs MultiHeadAttention writes, states the same. A size given for `total` is kept.
#[test]
fn decode_step_inputs_default_to_the_stated_total() {
    use fuselab::runtime::inputs::random_inputs;
    let m = gpt2_decode();
    let limits = fuselab::Limits::default();
    let shape = |m: &Model, dims: &[(&str, usize)]| {
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let inputs = random_inputs(m, &Default::default(), &dims, 1, &limits).unwrap();
        inputs["attention_mask"].shape().to_vec()
    };
    assert_eq!(shape(&m, &[]), [8, 16]);
    assert_eq!(shape(&m, &[("past", 5), ("seq", 1)]), [8, 6]);
    assert_eq!(shape(&m, &[("total", 5)]), [8, 5]);
    let (opt, rep) =
        fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).expect("default parity");
    assert!(rep.parity.is_some_and(|p| p.ok));
    // The saved step states the same through MultiHeadAttention's present outputs.
    assert_eq!(shape(&opt, &[("past", 5), ("seq", 1)]), [8, 6]);
}

/// onnxruntime's float16 converter (keep_io_types) leaves the cache float32 at the boundary:
/// `present = Cast(Concat(Cast(past), new))`. The Cast back to float32 still states that total =
/// past + seq, so the float16 GPT-2 step fuses as the float32 one does (the op reads the cast
/// cache and writes the float16 present that the Casts read), and its default inputs agree with
/// that sum. The float16 Llama step does not fuse: its mask beside a repeated cache would go in
/// as a float16 attention_bias, which the op adds in float32, so a fully masked row would no
/// longer be the uniform row float16 rounding makes it in the original.
#[test]
fn a_float16_decode_step_states_its_total_through_the_casts() {
    use fuselab::runtime::inputs::random_inputs;
    let m = zoo("gpt2_tiny_decode_fp16.onnx");
    let (opt, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 2, "{why:?}");
    let g = &opt.graph;
    for id in g.node_ids() {
        let node = g.node(id);
        if node.op_type == "MultiHeadAttention" {
            assert_eq!(node.inputs.len(), 8, "query .. past_value");
            let present = node.outputs[1].unwrap();
            let o = g
                .stated_as_output(present)
                .expect("a Cast of present is an output");
            assert_ne!(o, present);
            assert!(g.name(o).starts_with("present_key_"), "{}", g.name(o));
        }
    }
    let limits = fuselab::Limits::default();
    for model in [&m, &opt] {
        let dims = [("past".to_string(), 5), ("seq".to_string(), 2)].into();
        let inputs = random_inputs(model, &Default::default(), &dims, 1, &limits).unwrap();
        assert_eq!(inputs["attention_mask"].shape(), [8, 7]);
    }
    let cases = [
        (
            (2, 3, 5),
            vec![1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
        ),
        ((1, 1, 7), vec![0, 0, 0, 1, 1, 1, 1, 1]),
    ];
    assert_decode_parity(&m, &opt, &cases, 2e-2);

    let m = zoo("llama_gqa_tiny_decode_fp16.onnx");
    let (opt, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 2, "{why:?}");
    let dims = [("past".to_string(), 5), ("seq".to_string(), 2)].into();
    let inputs = random_inputs(&m, &Default::default(), &dims, 1, &limits).unwrap();
    assert_eq!(inputs["attention_mask"].shape(), [8, 7]);
    // Its mask is sdpa's -inf behind the NaN guard: as attention_bias beside the repeated cache
    // it masks the same keys, and a fully masked row (batch row 1 of the last case) is zeroed
    // after the op as the guard zeroes it.
    let cases = [
        (
            (2, 3, 5),
            vec![1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1],
        ),
        ((1, 1, 7), vec![0, 0, 0, 1, 1, 1, 1, 1]),
        ((2, 2, 3), vec![1, 1, 1, 1, 1, 0, 0, 0, 0, 0]),
    ];
    assert_decode_parity(&m, &opt, &cases, 2e-2);
}

/// A float16 mask with a finite filter beside a repeated cache stays unfused: in float16 a fully
/// masked row rounds to one value (a uniform row), which the op's float32 sum of the bias does
/// not reproduce. (The float16 Llama step with its -inf filter replaced by the lowest float16.)
#[test]
fn a_float16_finite_mask_beside_a_repeated_cache_is_refused() {
    let mut m = zoo("llama_gqa_tiny_decode_fp16.onnx");
    let mut changed = 0;
    for id in m.graph.node_ids().collect::<Vec<_>>() {
        let node = m.graph.node(id);
        if node.op_type != "Constant" {
            continue;
        }
        let Some(t) = node
            .attributes()
            .iter()
            .find(|a| a.name == "value")
            .and_then(|a| a.t.clone())
        else {
            continue;
        };
        let value = fuselab::onnx::tensor::to_tensor(&t, &fuselab::Limits::default()).unwrap();
        let Tensor::F16(a) = &value else { continue };
        if !a.iter().any(|x| x.is_infinite() && x.is_sign_negative()) {
            continue;
        }
        let lowest = a.mapv(|x| if x.is_infinite() { half::f16::MIN } else { x });
        let proto = fuselab::onnx::tensor::from_tensor(&t.name, &Tensor::F16(lowest));
        let mut node = m.graph.remove_node(id);
        node.set_attr(attr::tensor("value", proto));
        m.graph.add_node(node).unwrap();
        changed += 1;
    }
    assert!(changed > 0, "the export's -inf filter");
    let (_, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 0);
    let needle = "only a float32 mask (or -inf behind the NaN guard) of the scores' query and key";
    assert!(why.iter().any(|r| r.contains(needle)), "{why:?}");
}

/// The same Llama step exported with one new token: torch writes sdpa's grouped-query attention
/// for that shape by grouping the query heads (`[B, 4, 1, 16]` → `[B, 2, 2, 16]`) instead of
/// repeating the cache, so the graph runs for seq = 1 only. `grouped_query_heads` makes it the
/// repeated form, which fuses as the step above (the mask as attention_bias). Parity at one new
/// token with left padding and a fully masked row; and the fused step also runs several new
/// tokens, where it matches the step exported with three (the same weights), which the original
/// cannot run.
#[test]
fn a_grouped_query_step_traced_at_one_token_fuses_like_the_repeated_one() {
    let m = zoo("llama_gqa_tiny_decode1.onnx");
    let (opt, n, why) = fuse_all(&m, "MultiHeadAttention");
    assert_eq!(n, 2, "{why:?}");
    let (three, n3, _) = fuse_all(&zoo("llama_gqa_tiny_decode.onnx"), "MultiHeadAttention");
    assert_eq!(n3, 2);
    let fused = |m: &Model| {
        let keep = ["MultiHeadAttention", "RotaryEmbedding", "Expand", "MatMul"];
        let mut v: Vec<_> = ops(m)
            .into_iter()
            .filter(|(o, _)| keep.contains(&o.as_str()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(fused(&opt), fused(&three));
    let g = &opt.graph;
    for id in g.node_ids() {
        let node = g.node(id);
        if node.op_type == "MultiHeadAttention" {
            assert_eq!(
                node.inputs.len(),
                6,
                "query, key, value, -, -, attention_bias"
            );
            assert!(node.inputs[4].is_none() && node.inputs[5].is_some());
        }
    }
    let cases = [
        ((2, 1, 5), vec![1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]),
        ((1, 1, 7), vec![0, 0, 0, 1, 1, 1, 1, 1]),
        ((2, 1, 3), vec![1, 1, 1, 1, 0, 0, 0, 0]),
    ];
    assert_decode_parity(&m, &opt, &cases, 1e-5);

    let limits = fuselab::Limits::default();
    let mask = vec![0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
    let inputs = decode_inputs(&m, (2, 3, 5), &mask);
    let run = |m: &Model| fuselab::runtime::reference::Executor::new(m, &limits)?.run(&inputs);
    let e = run(&m).expect_err("the original groups one token only");
    assert!(e.to_string().contains("cannot reshape"), "{e}");
    let (a, b) = (
        run(&opt).unwrap(),
        run(&zoo("llama_gqa_tiny_decode.onnx")).unwrap(),
    );
    let d = fuselab::runtime::parity::compare(&a, &b, 0.0).max_abs_diff;
    assert!(d <= 1e-5, "{d}");
}

/// `fuselab optimize` with no sizes on that one-token step: the original fails at the default
/// seq = 8, so the check runs again with each open dim at 1 (batch first, which does not help,
/// then seq) and says so; a caller's own `--dim seq=8` is not overridden.
#[test]
fn parity_retries_a_one_token_export_at_seq_1() {
    let m = zoo("llama_gqa_tiny_decode1.onnx");
    let (_, rep) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    let p = rep.parity.expect("checked");
    assert!(p.ok, "{}", p.max_abs_diff);
    let why = p.resized.expect("resized");
    assert!(
        why.contains("does not run with seq=8") && why.contains("checked with seq=1"),
        "{why}"
    );
    assert_eq!(rep.dims.get("seq"), Some(&1));
    assert_eq!(
        rep.dims.get("batch"),
        Some(&8),
        "batch stays at its default"
    );

    let opts = fuselab::pipeline::OptimizeOptions {
        dims: [("seq".to_string(), 8)].into(),
        ..Default::default()
    };
    let e = fuselab::pipeline::optimize(&m, &opts, &|| 0.0).expect_err("seq given");
    assert!(e.to_string().contains("seq=8"), "{e}");

    // A step that runs at the defaults is not resized.
    let m = zoo("llama_gqa_tiny_decode.onnx");
    let (_, rep) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    assert!(rep.parity.unwrap().resized.is_none());
}

/// The dynamo export of the Llama decode step declares its present outputs `[batch, 2, past +
/// seq, 16]` and its mask `[batch, total]`, which nothing ties to past + seq: at the defaults
/// (all 8) the mask is too short for the keys. The check runs again with `total` at the sum the
/// outputs declare (16) and says so. Everything fuses as in the legacy export: rotary of q and k,
/// the grouped-query attention after the cache, the norms and SiLU. A caller's own `total` is
/// kept (and here fails, naming it).
#[test]
fn parity_sizes_a_dynamo_steps_mask_by_the_sum_its_outputs_declare() {
    let m = zoo("llama_gqa_tiny_decode_dynamo.onnx");
    let (opt, rep) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    let p = rep.parity.expect("checked");
    assert!(p.ok && p.max_abs_diff <= 1e-4, "{}", p.max_abs_diff);
    let why = p.resized.expect("resized");
    assert!(
        why.contains("does not run with total=8")
            && why.contains("checked with total=16 (past + seq, as the outputs declare)"),
        "{why}"
    );
    assert_eq!(rep.dims.get("total"), Some(&16));
    let ops: std::collections::HashMap<String, usize> = common::ops(&opt).into_iter().collect();
    for (op, n) in [
        ("MultiHeadAttention", 2),
        ("RotaryEmbedding", 4),
        ("SkipSimplifiedLayerNormalization", 4),
        ("SimplifiedLayerNormalization", 1),
        ("QuickGelu", 2),
        ("Softmax", 0),
        ("Neg", 0),
    ] {
        assert_eq!(ops.get(op).copied().unwrap_or(0), n, "{op}: {ops:?}");
    }

    let opts = fuselab::pipeline::OptimizeOptions {
        dims: [("total".to_string(), 8)].into(),
        ..Default::default()
    };
    let e = fuselab::pipeline::optimize(&m, &opts, &|| 0.0).expect_err("total given");
    assert!(e.to_string().contains("total=8"), "{e}");
}
