//! The `rotary` fusion (rotate-half RoPE → com.microsoft.RotaryEmbedding) on hand-built graphs:
//! exact op counts for q and k sharing one pair of angle tables, parity with the unfused graph,
//! and the near misses that must not fuse, with the reason the report gives.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
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
}

const ROPE: Spec = Spec {
    cut: D / 2,
    neg_first: true,
    per_token: true,
    doubled: true,
    scaled: false,
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
    let f = b.input(
        "f",
        DType::F32,
        vec![Dim::Known(1), seq.clone(), Dim::Known(D / 2)],
    );
    let other = if spec.doubled {
        f
    } else {
        b.input("g", DType::F32, vec![Dim::Known(1), seq, Dim::Known(D / 2)])
    };
    let cat = b.op("Concat", &[f, other], vec![attr::int("axis", -1)]);
    let axis1 = ints(&mut b, "axis1", &[1]);
    let mut tables = Vec::new();
    for trig in ["Cos", "Sin"] {
        let mut t = b.op(trig, &[cat], vec![]);
        if spec.scaled {
            let s = b.initializer(
                &format!("scale_{trig}"),
                &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.9)),
            );
            t = b.op("Mul", &[t, s], vec![]);
        }
        tables.push(b.op("Unsqueeze", &[t, axis1], vec![]));
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
            DType::F32,
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

#[test]
fn q_and_k_share_one_pair_of_caches() {
    let m = rope_model(ROPE, 2);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(
        ops(&opt),
        counts(&[
            ("Concat", 1),
            ("Cos", 1),
            ("Reshape", 2),
            ("RotaryEmbedding", 2),
            ("Sin", 1),
            ("Slice", 2),
        ])
    );
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
