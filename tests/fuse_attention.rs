//! The Attention fusion: exact op counts, parity with the unfused graph on masks that matter
//! (left padding, a fully masked row, mask values other than 0/1), the mask proof, and the
//! patterns that must not fuse, with the reason the report gives.

mod common;

use std::collections::HashMap;

use common::{ops, parity, repo, seeded_f32};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::passes::Trace;
use fuselab::runtime::parity::compare;
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};
use ndarray::{ArrayD, IxDyn};

const HEADS: i64 = 2;
const HEAD: i64 = 4;
const HIDDEN: i64 = HEADS * HEAD;
const TOL: f64 = 1e-5;
const MIN: f32 = f32::MIN;

/// A float initializer stored as `dt` (float16 rounds).
fn float_init(b: &mut GraphBuilder, name: &str, t: Tensor, dt: DType) -> ValueId {
    b.initializer(name, &t.narrow(dt).unwrap())
}

fn scalar_as(b: &mut GraphBuilder, name: &str, v: f32, dt: DType) -> ValueId {
    float_init(b, name, Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)), dt)
}

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    b.initializer(name, &Tensor::from_i64s(v))
}

/// How the block under test differs from BERT's.
#[derive(Clone, Copy)]
struct Spec {
    mask: Mask,
    /// Scale as Mul(c) (true) or Div(√d) (false).
    mul_scale: bool,
    /// K read through perm (0,2,3,1) (true) or (0,2,1,3) (false: not Kᵀ).
    key_perm_ok: bool,
    /// V projects a second input instead of x (cross-attention).
    cross: bool,
    /// The probabilities are also a graph output.
    probs_output: bool,
    /// The scale is a graph input, not a constant.
    scale_input: bool,
    /// The Mul scale's value (when `mul_scale`).
    scale: f32,
    /// F in Where(keep, 0, F).
    filter: f32,
    /// F is written as (filter · 2) · 0.5, which float32 rounds to -inf when filter = MIN.
    filter_chain: bool,
    /// Static (batch, seq) instead of the named dims.
    fixed: Option<(i64, i64)>,
    /// The element type of x, the weights and the mask values.
    dtype: DType,
    /// Whisper: the query projection itself is scaled, Mul(Add(MatMul(x, Wq), bq), c).
    q_scale: Option<f32>,
    /// The value projection is scaled the same way (the output would be: no fusion).
    v_scale: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Mask {
    None,
    /// Where(Unsqueeze(Cast(A, bool), [1, 2]), 0, MIN): A[b, k].
    Padding,
    /// transformers 5.x: Flatten(Cast(A, bool)) gathered at b·T + k, reshaped to [B, 1, 1, T].
    Gathered,
    /// As Gathered with b·T + k + 1: reads past the end for the last key.
    GatheredShifted,
    /// Unsqueeze at [1, 3]: A[b, q] masks queries, not keys.
    QueryAxis,
    /// Where(cond, MIN, 0): the branches swapped.
    Inverted,
    /// GPT-2: keep k <= q and A[b, k] (`strict`: k < q, which Attention cannot express).
    Causal {
        strict: bool,
    },
    /// Squeeze (no axes) of Padding's [B, 1, 1, T] condition: [B, T], which broadcasts over
    /// (query, key) when B = T, not over keys.
    SqueezeAll,
}

const BERT: Spec = Spec {
    mask: Mask::Padding,
    mul_scale: true,
    key_perm_ok: true,
    cross: false,
    probs_output: false,
    scale_input: false,
    scale: 0.5, // 1/√HEAD
    filter: MIN,
    filter_chain: false,
    fixed: None,
    dtype: DType::F32,
    q_scale: None,
    v_scale: false,
};

fn projection(
    b: &mut GraphBuilder,
    x: ValueId,
    perm: &[i64],
    seed: u32,
    dt: DType,
    scale: Option<f32>,
) -> ValueId {
    let w = float_init(
        b,
        &format!("w{seed}"),
        seeded_f32(&[HIDDEN as usize, HIDDEN as usize], seed),
        dt,
    );
    let bias = float_init(
        b,
        &format!("b{seed}"),
        seeded_f32(&[HIDDEN as usize], seed + 7),
        dt,
    );
    let mm = b.op("MatMul", &[x, w], vec![]);
    let mut add = b.op("Add", &[bias, mm], vec![]);
    if let Some(c) = scale {
        let c = scalar_as(b, &format!("proj_scale{seed}"), c, dt);
        add = b.op("Mul", &[add, c], vec![]);
    }
    let shape = ints(b, &format!("split{seed}"), &[0, 0, -1, HEAD]);
    let r = b.op("Reshape", &[add, shape], vec![]);
    b.op("Transpose", &[r], vec![attr::ints("perm", perm)])
}

/// The additive mask [B, 1, 1, T] (or [B, 1, T, 1] for QueryAxis) from A [batch, seq] int64.
fn mask(b: &mut GraphBuilder, a: ValueId, spec: Spec) -> ValueId {
    let kind = spec.mask;
    let bool_a = b.op("Cast", &[a], vec![attr::int("to", DType::BOOL.0 as i64)]);
    let zero = scalar_as(b, "mask_zero", 0.0, spec.dtype);
    let mut min = scalar_as(b, "mask_min", spec.filter, spec.dtype);
    if spec.filter_chain {
        let two = scalar_as(b, "mask_two", 2.0, spec.dtype);
        let half = scalar_as(b, "mask_half", 0.5, spec.dtype);
        let doubled = b.op("Mul", &[min, two], vec![]);
        min = b.op("Mul", &[doubled, half], vec![]);
    }
    let cond = match kind {
        Mask::Padding | Mask::Inverted => {
            let axes = ints(b, "mask_axes", &[1, 2]);
            b.op("Unsqueeze", &[bool_a, axes], vec![])
        }
        Mask::QueryAxis => {
            let axes = ints(b, "mask_axes", &[1, 3]);
            b.op("Unsqueeze", &[bool_a, axes], vec![])
        }
        Mask::Gathered | Mask::GatheredShifted => {
            // b·T + k over [B, 1, 1, T], T = A's dim 1.
            let shape = b.op("Shape", &[a], vec![]);
            let i0 = ints(b, "i0", &[0]);
            let i1 = ints(b, "i1", &[1]);
            let batch = b.op("Gather", &[shape, i0], vec![]);
            let t = b.op("Gather", &[shape, i1], vec![]);
            let z = b.initializer("z", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 0)));
            let one = b.initializer("one", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 1)));
            let sq = ints(b, "sq0", &[0]);
            let batch_s = b.op("Squeeze", &[batch, sq], vec![]);
            let t_s = b.op("Squeeze", &[t, sq], vec![]);
            let rb = b.op("Range", &[z, batch_s, one], vec![]);
            let rk = b.op("Range", &[z, t_s, one], vec![]);
            let ax_b = ints(b, "ax_b", &[1, 2, 3]);
            let ax_k = ints(b, "ax_k", &[0, 1, 2]);
            let bi = b.op("Unsqueeze", &[rb, ax_b], vec![]);
            let ki = b.op("Unsqueeze", &[rk, ax_k], vec![]);
            let bt = b.op("Mul", &[bi, t], vec![]);
            let mut at = b.op("Add", &[ki, bt], vec![]);
            if kind == Mask::GatheredShifted {
                at = b.op("Add", &[at, one], vec![]);
            }
            let flat = b.op("Flatten", &[bool_a], vec![attr::int("axis", 2)]);
            let g = b.op("Gather", &[flat, at], vec![attr::int("axis", 0)]);
            let minus1 = ints(b, "minus1", &[-1]);
            let r1 = b.op("Reshape", &[g, minus1], vec![]);
            let like = b.op("Shape", &[at], vec![]);
            b.op("Reshape", &[r1, like], vec![])
        }
        Mask::Causal { strict } => {
            let shape = b.op("Shape", &[a], vec![]);
            let i1 = b.initializer("i1", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 1)));
            let t = b.op("Gather", &[shape, i1], vec![]);
            let z = b.initializer("z", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 0)));
            let r = b.op("Range", &[z, t, i1], vec![]);
            let ax_q = ints(b, "ax_q", &[0, 1, 3]);
            let ax_k = ints(b, "ax_k", &[0, 1, 2]);
            let qi = b.op("Unsqueeze", &[r, ax_q], vec![]);
            let ki = b.op("Unsqueeze", &[r, ax_k], vec![]);
            let cmp = if strict { "Less" } else { "LessOrEqual" };
            let causal = b.op(cmp, &[ki, qi], vec![]);
            let axes = ints(b, "mask_axes", &[1, 2]);
            let pad = b.op("Unsqueeze", &[bool_a, axes], vec![]);
            b.op("And", &[causal, pad], vec![])
        }
        Mask::SqueezeAll => {
            let axes = ints(b, "mask_axes", &[1, 2]);
            let up = b.op("Unsqueeze", &[bool_a, axes], vec![]);
            b.op("Squeeze", &[up], vec![])
        }
        Mask::None => unreachable!(),
    };
    if kind == Mask::Inverted {
        b.op("Where", &[cond, min, zero], vec![])
    } else {
        b.op("Where", &[cond, zero, min], vec![])
    }
}

fn block(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("attention", 14);
    let (batch, seq) = match spec.fixed {
        Some((b, s)) => (Dim::Known(b), Dim::Known(s)),
        None => (sym("batch"), sym("seq")),
    };
    let dt = spec.dtype;
    let x = b.input(
        "x",
        dt,
        vec![batch.clone(), seq.clone(), Dim::Known(HIDDEN)],
    );
    let a = b.input("attention_mask", DType::I64, vec![batch, seq]);
    let q = projection(&mut b, x, &[0, 2, 1, 3], 1, dt, spec.q_scale);
    let kperm: &[i64] = if spec.key_perm_ok {
        &[0, 2, 3, 1]
    } else {
        &[0, 2, 1, 3]
    };
    let k = projection(&mut b, x, kperm, 2, dt, None);
    let v_in = if spec.cross {
        b.input(
            "memory",
            DType::F32,
            vec![sym("batch"), sym("seq"), Dim::Known(HIDDEN)],
        )
    } else {
        x
    };
    let v_scale = spec.v_scale.then_some(0.5);
    let v = projection(&mut b, v_in, &[0, 2, 1, 3], 3, dt, v_scale);
    let qk = b.op("MatMul", &[q, k], vec![]);
    let scaled = if spec.scale_input {
        let c = b.input("scale", DType::F32, vec![]);
        b.op("Mul", &[qk, c], vec![])
    } else if spec.mul_scale {
        let c = scalar_as(&mut b, "scale", spec.scale, dt);
        b.op("Mul", &[qk, c], vec![])
    } else {
        let c = scalar_as(&mut b, "sqrt_d", (HEAD as f32).sqrt(), dt);
        b.op("Div", &[qk, c], vec![])
    };
    let logits = match spec.mask {
        Mask::None => scaled,
        _ => {
            let m = mask(&mut b, a, spec);
            b.op("Add", &[scaled, m], vec![])
        }
    };
    let probs = b.op("Softmax", &[logits], vec![attr::int("axis", -1)]);
    let ctx = b.op("MatMul", &[probs, v], vec![]);
    let t = b.op("Transpose", &[ctx], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    let merge = ints(&mut b, "merge", &[0, 0, -1]);
    let y = b.op("Reshape", &[t, merge], vec![]);
    b.output(y, "y");
    if spec.probs_output {
        b.output(probs, "probs");
    }
    if spec.mask == Mask::None {
        // Keep the (unused) mask input read so the interface is the same in every spec.
        let c = b.op("Identity", &[a], vec![]);
        b.output(c, "mask_copy");
    }
    b.build()
}

fn fuse(m: &Model) -> (Model, Trace) {
    common::fuse(m, &[])
}

/// The (first) Attention node of `m`.
fn attention_node(m: &Model) -> &fuselab::ir::Node {
    m.graph
        .node_ids()
        .map(|id| m.graph.node(id))
        .find(|n| n.op_type == "Attention")
        .expect("an Attention node")
}

fn count(m: &Model, op: &str) -> usize {
    ops(m)
        .into_iter()
        .find(|(o, _)| o == op)
        .map_or(0, |(_, n)| n)
}

/// The largest output difference of two models run on `inputs`.
fn outputs_diff(a: &Model, b: &Model, inputs: &HashMap<String, Tensor>) -> f64 {
    let limits = Limits::default();
    let ra = Executor::new(a, &limits).unwrap().run(inputs).unwrap();
    let rb = Executor::new(b, &limits).unwrap().run(inputs).unwrap();
    compare(&ra, &rb, 0.0).max_abs_diff
}

/// Runs both models on x (seeded) and the given mask rows; the largest output difference.
fn diff_with_mask(a: &Model, b: &Model, batch: usize, seq: usize, mask: &[i64]) -> f64 {
    let limits = Limits::default();
    // x in the type the model declares (float16 rounds).
    let g = &a.graph;
    let dt = g
        .inputs
        .iter()
        .find(|&&v| g.name(v) == "x")
        .and_then(|&v| g.value(v).ty.dtype);
    let x = seeded_f32(&[batch, seq, HIDDEN as usize], 3);
    let mut inputs = HashMap::new();
    inputs.insert("x".to_string(), x.narrow(dt.unwrap()).unwrap());
    inputs.insert(
        "attention_mask".to_string(),
        Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), mask.to_vec()).unwrap()),
    );
    let ra = Executor::new(a, &limits).unwrap().run(&inputs).unwrap();
    let rb = Executor::new(b, &limits).unwrap().run(&inputs).unwrap();
    compare(&ra, &rb, 0.0).max_abs_diff
}

fn assert_not_fused(spec: Spec, needle: &str) {
    let m = assert_rejected(spec, needle);
    let (opt, _) = fuse(&m);
    assert!(parity(&m, &opt, &[("batch", 2), ("seq", 3)]).max_abs_diff <= TOL);
}

/// Not fused by `attention`, with a rejection naming `needle`; returns the model. (Run alone:
/// `multi_head_attention` takes several of these forms, and `assert_not_fused` checks that the
/// whole pipeline keeps parity on them.)
fn assert_rejected(spec: Spec, needle: &str) -> Model {
    let m = block(spec);
    let (opt, trace) = common::fuse(&m, &["attention"]);
    assert_eq!(count(&opt, "Attention"), 0);
    let reasons: Vec<String> = trace
        .rejected
        .iter()
        .filter(|r| r.rule == "attention")
        .map(|r| r.reason.clone())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains(needle)),
        "no attention rejection mentions '{needle}': {reasons:?}"
    );
    m
}

#[test]
fn attention_fuses_bert_self_attention_with_a_padding_mask() {
    let m = block(BERT);
    let (opt, trace) = fuse(&m);
    // 19 nodes of attention and 3 of mask become Attention fed by Cast(bool) → Cast(int32).
    assert_eq!(m.graph.node_count(), 22);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Cast".to_string(), 2)]
    );
    let attn = attention_node(&opt);
    assert_eq!(attn.domain, "com.microsoft");
    assert_eq!(attn.attr_int("num_heads"), Some(HEADS));
    assert_eq!(attn.attr_float("scale"), Some(0.5));
    assert_eq!(attn.attr_float("mask_filter_value"), Some(MIN));
    let w = attn.input(1).unwrap();
    assert_eq!(
        opt.graph.constant(w).unwrap().dims,
        vec![HIDDEN, 3 * HIDDEN]
    );
    let rule_events = trace.rewrites.iter().filter(|e| e.rule == "attention");
    assert_eq!(rule_events.count(), 1);
    for (batch, seq) in [(2, 3), (1, 1)] {
        let p = parity(&m, &opt, &[("batch", batch), ("seq", seq)]);
        assert!(p.max_abs_diff <= TOL, "{} at {batch}x{seq}", p.max_abs_diff);
    }
}

#[test]
fn attention_keeps_the_meaning_of_any_mask() {
    let m = block(BERT);
    let (opt, _) = fuse(&m);
    assert_eq!(count(&opt, "Attention"), 1);
    let cases: [(&str, &[i64]); 5] = [
        ("all kept", &[1, 1, 1, 1, 1, 1, 1, 1]),
        ("right padding", &[1, 1, 1, 0, 1, 1, 0, 0]),
        ("left padding", &[0, 0, 1, 1, 0, 1, 1, 1]),
        // Every key masked: the original's scores all round to MIN, a uniform softmax.
        ("a fully masked row", &[0, 0, 0, 0, 1, 0, 1, 0]),
        // Cast to bool keeps any nonzero value, negative or past i32.
        (
            "values other than 0/1",
            &[2, -1, 0, 1 << 40, 0, 7, 1 << 32, -5],
        ),
    ];
    for (what, mask) in cases {
        let d = diff_with_mask(&m, &opt, 2, 4, mask);
        assert!(d <= TOL, "{what}: max diff {d}");
    }
}

#[test]
fn attention_proves_the_transformers_gathered_mask() {
    let spec = Spec {
        mask: Mask::Gathered,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Cast".to_string(), 2)]
    );
    let d = diff_with_mask(&m, &opt, 2, 4, &[0, 0, 1, 1, 1, 0, 1, 0]);
    assert!(d <= TOL, "{d}");
}

#[test]
fn attention_without_mask_and_with_div_scale() {
    let spec = Spec {
        mask: Mask::None,
        mul_scale: false,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Identity".to_string(), 1)]
    );
    let attn = attention_node(&opt);
    assert_eq!(attn.inputs.len(), 3);
    assert_eq!(attn.attr_float("scale"), Some(0.5));
    assert!(parity(&m, &opt, &[("batch", 2), ("seq", 3)]).max_abs_diff <= TOL);
}

#[test]
fn attention_rejects_a_gather_that_may_read_past_the_mask() {
    let spec = Spec {
        mask: Mask::GatheredShifted,
        ..BERT
    };
    let m = assert_rejected(spec, "indices are not provably within the data");
    // The original fails on the last key; a fused op that ran would hide that.
    let limits = Limits::default();
    let inputs = fuselab::runtime::inputs::random_inputs(
        &m,
        &HashMap::new(),
        &HashMap::from([("batch".to_string(), 2), ("seq".to_string(), 3)]),
        7,
        &limits,
    )
    .unwrap();
    let err = Executor::new(&m, &limits)
        .unwrap()
        .run(&inputs)
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn attention_rejects_a_mask_over_queries() {
    let spec = Spec {
        mask: Mask::QueryAxis,
        ..BERT
    };
    assert_not_fused(spec, "is not Where(keep, 0, F)");
}

#[test]
fn attention_rejects_an_inverted_mask() {
    let spec = Spec {
        mask: Mask::Inverted,
        ..BERT
    };
    assert_not_fused(spec, "is not Where(keep, 0, F)");
}

#[test]
fn attention_rejects_a_key_that_is_not_transposed() {
    let spec = Spec {
        key_perm_ok: false,
        ..BERT
    };
    let m = block(spec);
    // Q·K with K as [B, N, S, D] needs S = D to type-check; with seq symbolic the rule stops at the
    // perm.
    let (opt, trace) = fuse(&m);
    assert_eq!(count(&opt, "Attention"), 0);
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.rule == "attention" && r.reason.contains("not [0, 2, 3, 1]")),
        "{:?}",
        trace.rejected
    );
}

#[test]
fn attention_rejects_cross_attention() {
    let spec = Spec {
        cross: true,
        ..BERT
    };
    assert_not_fused(spec, "do not project the same input");
}

#[test]
fn attention_rejects_probabilities_that_are_a_graph_output() {
    let spec = Spec {
        probs_output: true,
        ..BERT
    };
    assert_not_fused(spec, "is a graph output");
}

#[test]
fn attention_rejects_a_scale_that_is_not_constant() {
    let spec = Spec {
        scale_input: true,
        ..BERT
    };
    assert_not_fused(spec, "does not scale the scores by a scalar constant");
}

#[test]
fn attention_rejects_float64() {
    let mut b = GraphBuilder::new("attention64", 14);
    let x = b.input("x", DType::F64, dims(&[1, 2, HIDDEN]));
    let p = b.op("Softmax", &[x], vec![]);
    let y = b.op("MatMul", &[p, x], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (_, trace) = fuse(&m);
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.rule == "attention" && r.reason.contains("takes float32 and float16")),
        "{:?}",
        trace.rejected
    );
}

#[test]
fn bert_tiny_at_fixed_dims_fuses_both_attention_blocks() {
    let path = repo().join("tests/models/bert_tiny.onnx");
    let mut m = fuselab::io::load::load_file(&path, &Limits::default()).unwrap();
    let fixed = HashMap::from([("batch".to_string(), 2), ("seq".to_string(), 8)]);
    fuselab::passes::specialize::fix_dims(&mut m, &fixed).unwrap();
    let (opt, _) = fuse(&m);
    assert_eq!(count(&opt, "Attention"), 2);
    assert_eq!(count(&opt, "Softmax"), 0);
    let mut inputs = HashMap::new();
    let ids: Vec<i64> = (0..16).map(|i| (i * 37) % 1000).collect();
    let ids = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[2, 8]), ids).unwrap());
    inputs.insert("input_ids".to_string(), ids);
    let tt = Tensor::I64(ArrayD::from_shape_fn(IxDyn(&[2, 8]), |i| (i[1] % 2) as i64));
    inputs.insert("token_type_ids".to_string(), tt);
    // Left padding in row 0, right padding in row 1.
    let mask = Tensor::I64(ArrayD::from_shape_fn(IxDyn(&[2, 8]), |i| {
        (if i[0] == 0 { i[1] >= 3 } else { i[1] < 5 }) as i64
    }));
    inputs.insert("attention_mask".to_string(), mask);
    let d = outputs_diff(&m, &opt, &inputs);
    assert!(d <= 1e-4, "{d}");
}

/// GPT-2 (packed QKV, causal and padding mask) with batch and seq left symbolic.
#[test]
fn gpt2_tiny_fuses_causal_attention_with_dynamic_dims() {
    let path = repo().join("tests/models/gpt2_tiny.onnx");
    let m = fuselab::io::load::load_file(&path, &Limits::default()).unwrap();
    let (opt, trace) = fuse(&m);
    assert_eq!(count(&opt, "Attention"), 2);
    assert_eq!(count(&opt, "Softmax"), 0);
    let attn: Vec<_> = opt
        .graph
        .node_ids()
        .map(|id| opt.graph.node(id))
        .filter(|n| n.op_type == "Attention")
        .collect();
    for a in &attn {
        assert_eq!(a.attr_int("unidirectional"), Some(1));
        assert_eq!(a.inputs.len(), 4, "the padding mask is an input");
    }
    assert!(trace.rejected.iter().all(|r| r.rule != "attention"));
    for (batch, seq) in [(2usize, 5usize), (1, 1)] {
        let mut inputs = HashMap::new();
        let ids = ArrayD::from_shape_fn(IxDyn(&[batch, seq]), |i| {
            ((i[0] * 31 + i[1] * 7) % 1000) as i64
        });
        inputs.insert("input_ids".to_string(), Tensor::I64(ids));
        // Row 0 left-padded (its first query sees no key), row 1 right-padded.
        let mask = ArrayD::from_shape_fn(IxDyn(&[batch, seq]), |i| {
            (if i[0] == 0 {
                i[1] >= 2 || seq == 1
            } else {
                i[1] < 3
            }) as i64
        });
        inputs.insert("attention_mask".to_string(), Tensor::I64(mask));
        let d = outputs_diff(&m, &opt, &inputs);
        assert!(d <= 1e-4, "{batch}x{seq}: {d}");
    }
}

#[test]
fn attention_fuses_a_causal_padding_mask() {
    let spec = Spec {
        mask: Mask::Causal { strict: false },
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Cast".to_string(), 2)]
    );
    let attn = attention_node(&opt);
    assert_eq!(attn.attr_int("unidirectional"), Some(1));
    // Row 0: the first query's only key is padded (a fully masked row).
    let d = diff_with_mask(&m, &opt, 2, 4, &[0, 1, 1, 1, 1, 1, 0, 0]);
    assert!(d <= TOL, "{d}");
}

#[test]
fn attention_rejects_a_strictly_causal_mask() {
    let spec = Spec {
        mask: Mask::Causal { strict: true },
        ..BERT
    };
    assert_not_fused(spec, "Less 'less_");
}

#[test]
fn attention_rejects_a_causal_mask_whose_filter_is_not_the_lowest_float() {
    // onnxruntime sets future keys to the lowest float whatever mask_filter_value is: with
    // F = -10000 the fused graph would differ from the original.
    let spec = Spec {
        mask: Mask::Causal { strict: false },
        filter: -10000.0,
        ..BERT
    };
    assert_not_fused(spec, "causal mask with filter -10000");
}

#[test]
fn attention_fuses_a_padding_mask_whose_filter_is_not_the_lowest_float() {
    // Without the causal part, any F is Attention's mask_filter_value.
    let spec = Spec {
        filter: -10000.0,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(count(&opt, "Attention"), 1);
    assert_eq!(
        attention_node(&opt).attr_float("mask_filter_value"),
        Some(-10000.0)
    );
    let d = diff_with_mask(&m, &opt, 2, 3, &[1, 0, 1, 0, 0, 1]);
    assert!(d <= TOL, "{d}");
}

#[test]
fn attention_rejects_a_squeeze_without_axes_in_the_mask() {
    // Squeeze without axes also drops batch and seq when they are 1 at run time.
    let spec = Spec {
        mask: Mask::SqueezeAll,
        fixed: Some((3, 3)),
        ..BERT
    };
    let m = assert_rejected(spec, "Squeeze '");
    let (opt, _) = fuse(&m);
    assert!(parity(&m, &opt, &[]).max_abs_diff <= TOL);
}

#[test]
fn attention_rejects_a_scale_of_zero() {
    // Attention reads scale = 0 as "the default 1/√D".
    for scale in [0.0, -0.0, 1e-46] {
        let spec = Spec { scale, ..BERT };
        assert_not_fused(spec, "zero or not finite in float32");
    }
}

#[test]
fn attention_mask_constants_round_to_float32() {
    // (MIN · 2) · 0.5 is -inf in float32; only the attention rule runs, so the interpreter
    // itself folds it and must round as the graph does.
    let spec = Spec {
        filter_chain: true,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = common::fuse(&m, &["attention"]);
    assert_eq!(count(&opt, "Attention"), 1);
    assert_eq!(
        attention_node(&opt).attr_float("mask_filter_value"),
        Some(f32::NEG_INFINITY)
    );
}

#[test]
fn attention_folds_a_scaled_query_projection_into_the_scale() {
    // Whisper: q = (x·Wq + bq)·c and the scores' own Mul is 1: Attention's scale is c·1.
    let spec = Spec {
        q_scale: Some(0.5),
        scale: 1.0,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Cast".to_string(), 2)]
    );
    assert_eq!(attention_node(&opt).attr_float("scale"), Some(0.5));
    let d = diff_with_mask(&m, &opt, 2, 4, &[0, 0, 1, 1, 1, 1, 1, 0]);
    assert!(d <= TOL, "{d}");
}

#[test]
fn attention_rejects_a_scaled_value_projection() {
    let spec = Spec {
        v_scale: true,
        ..BERT
    };
    assert_not_fused(spec, "the value projection is scaled by 0.5");
}

#[test]
fn attention_fuses_float16_self_attention_and_keeps_float16_weights() {
    let spec = Spec {
        dtype: DType::F16,
        filter: -65504.0,
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    assert_eq!(
        ops(&opt),
        vec![("Attention".to_string(), 1), ("Cast".to_string(), 2)]
    );
    let attn = attention_node(&opt);
    // F = -65504 goes in as the lowest float32 (see the causal case below).
    assert_eq!(attn.attr_float("mask_filter_value"), Some(f32::MIN));
    for i in [1, 2] {
        let w = opt.graph.constant(attn.input(i).unwrap()).unwrap();
        assert_eq!(w.data_type, DType::F16.0, "input {i} stays float16");
    }
    // float16 rounding in the original: the fp16 bound.
    // [0, 0, 0, 0]: a sequence that is all padding (every row fully masked).
    for mask in [
        [1, 1, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 0, 1],
    ] {
        let d = diff_with_mask(&m, &opt, 2, 4, &mask);
        assert!(d <= 2e-2, "{mask:?}: {d}");
    }
}

#[test]
fn attention_fuses_float16_causal_attention_with_the_lowest_float32_filter() {
    // A padded query that sees only masked keys: float16 rounds each of its scores plus -65504
    // back to -65504 (a uniform row). The op computes in float32, where only the lowest float32
    // absorbs a score the same way; kept keys still see masked ones at probability 0.
    let spec = Spec {
        dtype: DType::F16,
        filter: -65504.0,
        mask: Mask::Causal { strict: false },
        ..BERT
    };
    let m = block(spec);
    let (opt, _) = fuse(&m);
    let attn = attention_node(&opt);
    assert_eq!(attn.attr_int("unidirectional"), Some(1));
    assert_eq!(attn.attr_float("mask_filter_value"), Some(f32::MIN));
    // Row 0 of batch 0 is fully masked (left padding); batch 1 is right-padded.
    for mask in [[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]] {
        let d = diff_with_mask(&m, &opt, 2, 3, &mask);
        assert!(d <= 2e-3, "{mask:?}: {d}");
    }
}

#[test]
fn attention_rejects_float16_causal_attention_with_another_filter() {
    // -10000 in float16 has an ulp of 8: a fully masked row is uniform only for scores within
    // ±4, which no float32 filter reproduces.
    let spec = Spec {
        dtype: DType::F16,
        filter: -10000.0,
        mask: Mask::Causal { strict: false },
        ..BERT
    };
    let m = assert_rejected(spec, "causal mask on float16 scores with filter -10000");
    let (opt, _) = fuse(&m);
    assert_eq!(diff_with_mask(&m, &opt, 2, 3, &[0, 1, 1, 1, 1, 0]), 0.0);
}
