//! The `rotary` fusion's interleaved form (GPT-J's "rotate every two" → com.microsoft
//! RotaryEmbedding with `interleaved = 1` on the `[batch, seq, heads·head]` view) on hand-built
//! graphs: exact op counts, parity with the unfused graph, the partial rotary (only the first r
//! channels of each head), the near misses that must not fuse, with the reason the report gives;
//! and the GPT-J zoo export through the default rules.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Heads, the rotated channels of each head, the whole head (D > R: partial rotary).
const N: i64 = 2;
const R: i64 = 8;
const D: i64 = 12;
const RULES: &[&str] = &["rotary", "cse", "dce"];

#[derive(Clone, Copy)]
struct Spec {
    /// Rotate only k[..., :R] of a [B, S, N, D] k and join the rest back (GPT-J).
    partial: bool,
    /// stack((-odd, even)) (GPT-J) or stack((even, -odd)).
    neg_first: bool,
    /// Tile repeats: [1, 1, 1, 1, 2] repeats each column twice side by side.
    repeats: [i64; 5],
    /// The tables' seq dim: the input's (true) or 1 (broadcast).
    per_token: bool,
    /// repeat_interleave as dynamo writes it: Expand to `repeats` instead of Tile by them.
    expand: bool,
}

const GPTJ: Spec = Spec {
    partial: false,
    neg_first: true,
    repeats: [1, 1, 1, 1, 2],
    per_token: true,
    expand: false,
};

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    let t = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    b.initializer(name, &t)
}

/// GPT-J's rotation of q and k ([batch, seq, N, head]) by tables sin, cos [1, seq, R/2] (graph
/// inputs: the rule needs no proof of what they hold), repeat_interleave'd as the legacy
/// exporter writes it (Unsqueeze 2, Unsqueeze 4, Tile, Reshape).
fn gptj_model(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("gptj", 17);
    let seq = if spec.per_token {
        sym("seq")
    } else {
        Dim::Known(1)
    };
    let head = if spec.partial { D } else { R };
    let (u2, u4, tile, flat4) = (
        ints(&mut b, "u2", &[2]),
        ints(&mut b, "u4", &[4]),
        ints(&mut b, "repeats", &spec.repeats),
        ints(&mut b, "flat4", &[1, -1, 1, R]),
    );
    let mut tables = vec![];
    for name in ["cos", "sin"] {
        let t = b.input(
            name,
            DType::F32,
            vec![Dim::Known(1), seq.clone(), Dim::Known(R / 2)],
        );
        let t = b.op("Unsqueeze", &[t, u2], vec![]);
        let t = b.op("Unsqueeze", &[t, u4], vec![]);
        let t = b.op(
            if spec.expand { "Expand" } else { "Tile" },
            &[t, tile],
            vec![],
        );
        tables.push(b.op("Reshape", &[t, flat4], vec![]));
    }
    let (zero, one, two, end, last, cut) = (
        ints(&mut b, "zero", &[0]),
        ints(&mut b, "one", &[1]),
        ints(&mut b, "two", &[2]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "last", &[3]),
        ints(&mut b, "cut", &[R]),
    );
    let (neg1, pairs) = (
        ints(&mut b, "neg1", &[-1]),
        ints(&mut b, "pairs", &[0, 0, N, R]),
    );
    for name in ["q", "k"] {
        let k = b.input(
            name,
            DType::F32,
            vec![sym("batch"), sym("seq"), Dim::Known(N), Dim::Known(head)],
        );
        let x = if spec.partial {
            b.op("Slice", &[k, zero, cut, last], vec![])
        } else {
            k
        };
        let a = b.op("Mul", &[x, tables[0]], vec![]);
        let even = b.op("Slice", &[x, zero, end, last, two], vec![]);
        let odd = b.op("Slice", &[x, one, end, last, two], vec![]);
        let n = b.op("Neg", &[odd], vec![]);
        let n = b.op("Unsqueeze", &[n, neg1], vec![]);
        let e = b.op("Unsqueeze", &[even, neg1], vec![]);
        let pair = if spec.neg_first { [n, e] } else { [e, n] };
        let stacked = b.op("Concat", &pair, vec![attr::int("axis", -1)]);
        let rot = b.op("Reshape", &[stacked, pairs], vec![]);
        let m = b.op("Mul", &[rot, tables[1]], vec![]);
        let mut y = b.op("Add", &[a, m], vec![]);
        if spec.partial {
            let pass = b.op("Slice", &[k, cut, end, last], vec![]);
            y = b.op("Concat", &[y, pass], vec![attr::int("axis", -1)]);
        }
        b.output(y, &format!("{name}_out"));
    }
    b.build()
}

/// The attributes of every RotaryEmbedding: (interleaved, num_heads, rotary_embedding_dim).
fn rotary_attrs(m: &Model) -> Vec<(Option<i64>, Option<i64>, Option<i64>)> {
    let g = &m.graph;
    g.node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == "RotaryEmbedding")
        .map(|n| {
            (
                n.attr_int("interleaved"),
                n.attr_int("num_heads"),
                n.attr_int("rotary_embedding_dim"),
            )
        })
        .collect()
}

/// `spec` fuses with nothing refused into: one Reshape per cache (of the [1, seq, R/2] tables,
/// shared by q and k: the repeat_interleave chains go), the two Reshapes around each op (to
/// [batch, seq, N·head] and back) and the two ops, with `rotary_embedding_dim` = `rot_dim`;
/// parity with the unfused graph.
fn assert_fuses(spec: Spec, rot_dim: Option<i64>) {
    let m = gptj_model(spec);
    let (opt, trace) = fuse(&m, RULES);
    assert!(trace.rejected.is_empty(), "{:?}", trace.rejected);
    assert_eq!(ops(&opt), counts(&[("Reshape", 6), ("RotaryEmbedding", 2)]));
    assert_eq!(rotary_attrs(&opt), vec![(Some(1), Some(N), rot_dim); 2]);
    assert_parity_within(&m, &opt, 1e-6);
}

#[test]
fn q_and_k_rotate_every_two_in_one_op_each() {
    assert_fuses(GPTJ, None);
}

#[test]
fn partial_rotary_takes_the_whole_head() {
    // GPT-J rotates k[..., :R] and joins k[..., R:] back: the op takes k with
    // rotary_embedding_dim R, and the Slices and the Concat go.
    let partial = Spec {
        partial: true,
        ..GPTJ
    };
    assert_fuses(partial, Some(R));
}

#[test]
fn dynamo_repeat_interleave_by_expand_fuses() {
    // torch.onnx.export(dynamo=True) repeats each column by Expand(·, [1, 1, 1, 1, 2]).
    assert_fuses(
        Spec {
            expand: true,
            partial: true,
            ..GPTJ
        },
        Some(R),
    );
}

#[test]
fn pairs_stacked_the_other_way_round_are_not_rope() {
    // stack((even, -odd)) rotates by -angle: not the op's rotation.
    let m = gptj_model(Spec {
        neg_first: false,
        ..GPTJ
    });
    assert_rejected(
        &m,
        RULES,
        "the pairs are not stacked as (-x[1::2], x[0::2])",
    );
}

#[test]
fn tables_repeated_whole_are_not_interleaved() {
    // Tile [1, 1, 1, 2, 1] on [1, S, 1, 1, R/2] would be [C, C]; here the unsqueezed axes are
    // the same as GPT-J's, so a repeat on axis 3 makes [1, S, 1, R, 1] and is refused by shape
    // first; either way each column is not twice side by side.
    let m = gptj_model(Spec {
        repeats: [1, 1, 1, 2, 1],
        ..GPTJ
    });
    assert_rejected(&m, RULES, "table");
}

#[test]
fn a_table_broadcast_along_seq_is_no_cache() {
    let m = gptj_model(Spec {
        per_token: false,
        ..GPTJ
    });
    assert_rejected(&m, RULES, "is not [1, seq, 1, 8]");
}

/// GPT-J (transformers' export, rotary_dim 8 of 16-channel heads): the q and k rotation of both
/// layers fuses, with the partial wrapper, and so does the attention after it; parity through
/// the default pipeline.
#[test]
fn gptj_export_fuses_every_rotation() {
    let path = common::repo().join("tests/models/zoo/gptj_tiny.onnx");
    let m = fuselab::io::load_file(&path, &fuselab::Limits::default()).unwrap();
    let (opt, rep) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    let p = rep.parity.as_ref().unwrap();
    println!("gptj_tiny: parity {:e}", p.max_abs_diff);
    assert!(p.ok, "{p:?}");
    assert_eq!(
        rep.fusions.get("RotaryEmbedding"),
        Some(&4),
        "{:?}",
        rep.rejected
    );
    // The attention then takes the rotated q and k as they are (their Reshape back to heads
    // and the head Transpose cancel against its 3-D query).
    assert_eq!(
        rep.fusions.get("MultiHeadAttention"),
        Some(&2),
        "{:?}",
        rep.rejected
    );
    assert_eq!(rotary_attrs(&opt), vec![(Some(1), Some(4), Some(8)); 4]);
    let left = |op: &str| {
        ops(&opt)
            .into_iter()
            .find(|(o, _)| o == op)
            .map_or(0, |x| x.1)
    };
    assert_eq!((left("Neg"), left("Tile")), (0, 0));
}
