//! The `rotary` fusion (rotate-half RoPE → com.microsoft.RotaryEmbedding) on hand-built graphs:
//! exact op counts for q and k sharing one pair of angle tables, parity with the unfused graph,
//! and the near misses that must not fuse, with the reason the report gives; float16 x with
//! float16 tables or float32 tables cast to float16 (either side of the Unsqueeze); and the
//! float16 Llama and Qwen3 zoo models through the default rules.

mod common;

use std::collections::BTreeMap;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::runtime::parity::HALF_TOLERANCE;
use fuselab::{DType, Tensor};
use half::f16;
use ndarray::{ArrayD, IxDyn};

const D: i64 = 8;
const RULES: &[&str] = &["rotary", "cse", "dce"];

#[derive(Clone, Copy)]
struct Spec {
    /// Where the first half ends (D / 2 for RoPE).
    cut: i64,
    /// Concat(-x2, x1) (RoPE) or Concat(x1, -x2).
    neg_first: bool,
    /// The tables' seq dim: the input's (true) or 1 (broadcast).
    per_token: bool,
    /// Cos(Concat(F, F)) or Cos(Concat(F, G)).
    doubled: bool,
    /// The tables scaled by a constant (transformers' attention_scaling).
    scaled: bool,
    /// x's element type (and the tables', unless `cast`).
    x: DType,
    /// The tables computed in float32 and cast to x's type: `Unsqueeze(Cast(C))` (Below) or
    /// `Cast(Unsqueeze(C))` (Above).
    cast: Option<CastAt>,
}

#[derive(Clone, Copy, PartialEq)]
enum CastAt {
    Below,
    Above,
}

const ROPE: Spec = Spec {
    cut: D / 2,
    neg_first: true,
    per_token: true,
    doubled: true,
    scaled: false,
    x: DType::F32,
    cast: None,
};

const ROPE_F16: Spec = Spec {
    x: DType::F16,
    ..ROPE
};

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    b.initializer(name, &t)
}

/// `x·cos4 + rotate_half(x)·sin4` for x in `xs`, sharing the tables.
fn rope_model(spec: Spec, n_proj: usize) -> Model {
    let mut b = GraphBuilder::new("rope", 17);
    let seq = if spec.per_token {
        sym("seq")
    } else {
        Dim::Known(1)
    };
    let table_ty = if spec.cast.is_some() {
        DType::F32
    } else {
        spec.x
    };
    let f = b.input(
        "f",
        table_ty,
        vec![Dim::Known(1), seq.clone(), Dim::Known(D / 2)],
    );
    let other = if spec.doubled {
        f
    } else {
        b.input("g", table_ty, vec![Dim::Known(1), seq, Dim::Known(D / 2)])
    };
    let cat = b.op("Concat", &[f, other], vec![attr::int("axis", -1)]);
    let axis1 = ints(&mut b, "axis1", &[1]);
    let to_x = vec![attr::int("to", spec.x.0 as i64)];
    let mut tables = Vec::new();
    for trig in ["Cos", "Sin"] {
        let mut t = b.op(trig, &[cat], vec![]);
        if spec.scaled {
            let s = ArrayD::from_elem(IxDyn(&[]), 0.9f32);
            let s = match table_ty {
                DType::F16 => Tensor::F16(s.mapv(f16::from_f32)),
                _ => Tensor::F32(s),
            };
            let s = b.initializer(&format!("scale_{trig}"), &s);
            t = b.op("Mul", &[t, s], vec![]);
        }
        if spec.cast == Some(CastAt::Below) {
            t = b.op("Cast", &[t], to_x.clone());
        }
        let mut t4 = b.op("Unsqueeze", &[t, axis1], vec![]);
        if spec.cast == Some(CastAt::Above) {
            t4 = b.op("Cast", &[t4], to_x.clone());
        }
        tables.push(t4);
    }
    let (zero, cut, end, last) = (
        ints(&mut b, "zero", &[0]),
        ints(&mut b, "cut", &[spec.cut]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "last", &[-1]),
    );
    for i in 0..n_proj {
        let x = b.input(
            &format!("x{i}"),
            spec.x,
            vec![sym("batch"), Dim::Known(2), sym("seq"), Dim::Known(D)],
        );
        let a = b.op("Mul", &[x, tables[0]], vec![]);
        let x1 = b.op("Slice", &[x, zero, cut, last], vec![]);
        let x2 = b.op("Slice", &[x, cut, end, last], vec![]);
        let n = b.op("Neg", &[x2], vec![]);
        let pair = if spec.neg_first { [n, x1] } else { [x1, n] };
        let rot = b.op("Concat", &pair, vec![attr::int("axis", -1)]);
        let m = b.op("Mul", &[rot, tables[1]], vec![]);
        let y = b.op("Add", &[a, m], vec![]);
        b.output(y, &format!("y{i}"));
    }
    b.build()
}

/// The element types of every RotaryEmbedding's inputs 0, 2 and 3 (x and the caches).
fn rotary_input_types(m: &Model) -> Vec<[Option<DType>; 3]> {
    let g = &m.graph;
    g.node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == "RotaryEmbedding")
        .map(|n| [0, 2, 3].map(|i| n.input(i).and_then(|v| g.value(v).ty.dtype)))
        .collect()
}

/// What two rotary sites (q and k) of `rope_model` leave: the shared tables (Concat, Cos, Sin),
/// one Slice + Reshape per cache, and the fused ops.
const TWO_SITES: &[(&str, usize)] = &[
    ("Concat", 1),
    ("Cos", 1),
    ("Reshape", 2),
    ("RotaryEmbedding", 2),
    ("Sin", 1),
    ("Slice", 2),
];

#[test]
fn q_and_k_share_one_pair_of_caches() {
    let m = rope_model(ROPE, 2);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(ops(&opt), counts(TWO_SITES));
    let fused: Vec<_> = trace
        .rewrites
        .iter()
        .filter(|r| r.rule == "rotary")
        .collect();
    assert_eq!(fused.len(), 2);
    for id in opt.graph.node_ids() {
        let n = opt.graph.node(id);
        if n.op_type == "RotaryEmbedding" {
            assert_eq!(n.domain, "com.microsoft");
            assert_eq!(n.attr_int("interleaved"), Some(0));
            let pos = opt.graph.constant(n.input(1).unwrap()).unwrap();
            assert_eq!(pos.dims, vec![1], "a start offset");
        }
    }
    assert_parity_within(&m, &opt, 1e-6);
}

#[test]
fn scaled_tables_fuse() {
    let spec = Spec {
        scaled: true,
        ..ROPE
    };
    let m = rope_model(spec, 1);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(
        ops(&opt),
        counts(&[
            ("Concat", 1),
            ("Cos", 1),
            ("Mul", 2),
            ("Reshape", 2),
            ("RotaryEmbedding", 1),
            ("Sin", 1),
            ("Slice", 2),
        ])
    );
    assert_parity_within(&m, &opt, 1e-6);
}

#[test]
fn rotate_half_the_other_way_round_is_not_rope() {
    let spec = Spec {
        neg_first: false,
        ..ROPE
    };
    assert_rejected(&rope_model(spec, 1), &["rotary"], "does not join");
}

#[test]
fn a_cut_off_the_middle_is_not_rope() {
    let spec = Spec { cut: 3, ..ROPE };
    assert_rejected(&rope_model(spec, 1), &["rotary"], "not x[..., h:]");
}

#[test]
fn tables_with_unequal_halves_are_refused() {
    // Cos(Concat(F, G)): the fused op would use F's half for both.
    let spec = Spec {
        doubled: false,
        ..ROPE
    };
    assert_rejected(&rope_model(spec, 1), &["rotary"], "not Concat(F, F)");
}

#[test]
fn a_table_broadcast_along_seq_is_no_cache() {
    // One row for every token: token s would read row s of a one-row cache.
    let spec = Spec {
        per_token: false,
        ..ROPE
    };
    assert_rejected(&rope_model(spec, 1), &["rotary"], "with x's seq dim");
}

#[test]
fn float16_x_with_float16_tables_fuses() {
    let m = rope_model(ROPE_F16, 2);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(ops(&opt), counts(TWO_SITES));
    let f16 = Some(DType::F16);
    assert_eq!(rotary_input_types(&opt), vec![[f16; 3]; 2]);
    assert_parity_within(&m, &opt, HALF_TOLERANCE);
}

#[test]
fn scaled_float16_tables_fuse() {
    let spec = Spec {
        scaled: true,
        ..ROPE_F16
    };
    let m = rope_model(spec, 1);
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(
        ops(&opt)
            .iter()
            .find(|(k, _)| k == "RotaryEmbedding")
            .map(|p| p.1),
        Some(1)
    );
    assert_parity_within(&m, &opt, HALF_TOLERANCE);
}

#[test]
fn float32_tables_cast_to_float16_feed_float16_caches() {
    let f16 = Some(DType::F16);
    for at in [CastAt::Below, CastAt::Above] {
        let spec = Spec {
            cast: Some(at),
            scaled: true,
            ..ROPE_F16
        };
        let m = rope_model(spec, 2);
        let (opt, _) = fuse(&m, RULES);
        // Below: the caches are sliced from the model's own float16 tables (its two Casts stay);
        // Above: from the float32 tables, each cast once (the model's Casts of the rank-4
        // tables go with their readers).
        assert_eq!(
            ops(&opt),
            counts(&[
                ("Cast", 2),
                ("Concat", 1),
                ("Cos", 1),
                ("Mul", 2),
                ("Reshape", 2),
                ("RotaryEmbedding", 2),
                ("Sin", 1),
                ("Slice", 2),
            ]),
            "cast {}",
            if at == CastAt::Below {
                "below"
            } else {
                "above"
            }
        );
        assert_eq!(rotary_input_types(&opt), vec![[f16; 3]; 2]);
        assert_parity_within(&m, &opt, HALF_TOLERANCE);
    }
}

#[test]
fn bfloat16_x_is_refused() {
    // onnxruntime's schema lists bfloat16, but its CPU provider has no kernel for it: a session
    // of the fused model would fail to load.
    let spec = Spec {
        x: DType::BF16,
        ..ROPE
    };
    assert_rejected(
        &rope_model(spec, 1),
        &["rotary"],
        "the fused op takes float32 and float16",
    );
}

#[test]
fn float16_tables_with_unequal_halves_are_refused_through_casts() {
    // The Casts are stepped over, not trusted: Cos(Concat(F, G)) still fails the halves guard.
    for cast in [None, Some(CastAt::Below), Some(CastAt::Above)] {
        let spec = Spec {
            doubled: false,
            cast,
            ..ROPE_F16
        };
        assert_rejected(&rope_model(spec, 1), &["rotary"], "not Concat(F, F)");
    }
}

/// The default rules on a float16 zoo decoder (onnxruntime's float16 converter, keep_io_types):
/// what fused, parity at the float16 tolerance, and the rejection reasons of `rule`.
fn zoo_fp16(stem: &str, rule: &str) -> (BTreeMap<String, usize>, Vec<String>) {
    let path = common::repo().join(format!("tests/models/zoo/{stem}.onnx"));
    let m = fuselab::io::load_file(&path, &fuselab::Limits::default()).unwrap();
    let (_, rep) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    let p = rep.parity.as_ref().unwrap();
    println!(
        "{stem}: parity {:e} (tolerance {:e})",
        p.max_abs_diff, p.tolerance
    );
    assert!(p.ok && p.tolerance == HALF_TOLERANCE, "{stem}: {p:?}");
    let why = rep
        .rejected
        .iter()
        .filter(|r| r.rule == rule)
        .map(|r| r.reason.clone())
        .collect();
    (rep.fusions.into_iter().collect(), why)
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|&(k, n)| (k.to_string(), n)).collect()
}

#[test]
fn float16_llama_fuses_every_layer_like_float32() {
    // Two layers: q and k rotary each, the attention (causal + padding mask proved, so
    // `unidirectional` with a key_padding_mask), the input norm and 4 residual norms, SiLU as
    // QuickGelu.
    let (fused, why) = zoo_fp16("llama_gqa_tiny_fp16", "multi_head_attention");
    assert_eq!(
        fused,
        expect(&[
            ("MultiHeadAttention", 2),
            ("QuickGelu", 2),
            ("RotaryEmbedding", 4),
            ("SimplifiedLayerNormalization", 1),
            ("SkipSimplifiedLayerNormalization", 4),
        ])
    );
    assert!(why.is_empty(), "{why:?}");
}

#[test]
fn float16_qwen3_fuses_rotary_and_norms_of_every_layer() {
    // Qwen3 adds a per-head q and k norm in each layer: 5 + 4 plain norms. Its sdpa mask is
    // Where(keep, 0, -inf) behind the Where(IsNaN(P), 0, P) guard: proved (causal + padding),
    // it fuses with the lowest float32 as filter, a fully masked row zeroed after the op.
    let (fused, why) = zoo_fp16("qwen3_tiny_fp16", "multi_head_attention");
    assert_eq!(
        fused,
        expect(&[
            ("MultiHeadAttention", 2),
            ("QuickGelu", 2),
            ("RotaryEmbedding", 4),
            ("SimplifiedLayerNormalization", 5),
            ("SkipSimplifiedLayerNormalization", 4),
        ])
    );
    assert!(why.is_empty(), "{why:?}");
}

#[test]
fn float16_rotary_computes_in_float32_and_rounds_once() {
    // The reference backend widens float16 inputs, rotates in float32 and rounds each output
    // element once: exactly f16(x1·cos − x2·sin) of the widened values.
    let (b_, s_, d) = (1usize, 3usize, 4usize);
    let h = d / 2;
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let dims = |v: &[usize]| v.iter().map(|&n| Dim::Known(n as i64)).collect::<Vec<_>>();
    let x = b.input("x", DType::F16, dims(&[b_, 1, s_, d]));
    let halves = |seed: f32| -> Tensor {
        let v: Vec<f16> = (0..s_ * h)
            .map(|i| f16::from_f32(((i as f32 + seed) * 0.37).sin()))
            .collect();
        Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[s_, h]), v).unwrap())
    };
    let (cos_t, sin_t) = (halves(0.0), halves(5.0));
    let cos = b.initializer("cos", &cos_t);
    let sin = b.initializer("sin", &sin_t);
    let pos = ints(&mut b, "pos", &[0]);
    let y = b.node(
        "com.microsoft",
        "RotaryEmbedding",
        &[Some(x), Some(pos), Some(cos), Some(sin)],
        1,
        vec![],
    );
    b.output(y[0], "y");
    let m = b.build();
    let xs: Vec<f16> = (0..s_ * d)
        .map(|i| f16::from_f32(1.0 + i as f32 / 7.0))
        .collect();
    let inputs = std::collections::HashMap::from([(
        "x".to_string(),
        Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[b_, 1, s_, d]), xs.clone()).unwrap()),
    )]);
    let limits = fuselab::Limits::default();
    let out = fuselab::runtime::reference::Executor::new(&m, &limits)
        .unwrap()
        .run(&inputs)
        .unwrap();
    let Tensor::F16(got) = &out[0].1 else {
        panic!("y is {}", out[0].1.dtype())
    };
    let (Tensor::F16(c), Tensor::F16(sn)) = (&cos_t, &sin_t) else {
        unreachable!()
    };
    let (c, sn) = (c.as_slice().unwrap(), sn.as_slice().unwrap());
    for s in 0..s_ {
        for i in 0..h {
            let (x1, x2) = (xs[s * d + i].to_f32(), xs[s * d + i + h].to_f32());
            let (cs, sn) = (c[s * h + i].to_f32(), sn[s * h + i].to_f32());
            let want = [
                f16::from_f32(cs * x1 - sn * x2),
                f16::from_f32(sn * x1 + cs * x2),
            ];
            assert_eq!(
                [got[[0, 0, s, i]], got[[0, 0, s, i + h]]],
                want,
                "row {s}, {i}"
            );
        }
    }
}
