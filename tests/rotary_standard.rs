//! `rotary_standard` (ai.onnx RotaryEmbedding, opset 23 → com.microsoft.RotaryEmbedding) on
//! hand-built graphs: the op count, the inputs and attributes of the op it writes, exact parity
//! with the standard op (4-D and 3-D x, full, partial and interleaved rotation, per-token tables
//! and position ids), and the caches it must leave alone, with the reason.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const D: i64 = 8;
const HEADS: i64 = 2;
const RULES: &[&str] = &["rotary_standard", "dce"];

#[derive(Clone, Copy)]
struct Spec {
    /// x as [batch, heads, seq, D] (true) or [batch, seq, heads·D].
    four_d: bool,
    /// rotary_embedding_dim (0: the whole head).
    rot: i64,
    interleaved: bool,
    /// The tables' first dim: 1 (one table for every row of the batch) or a batch of their own.
    table_batch: i64,
    /// The tables' seq dim is x's (true) or 1.
    per_token: bool,
}

const FULL: Spec = Spec {
    four_d: true,
    rot: 0,
    interleaved: false,
    table_batch: 1,
    per_token: true,
};

/// `y = RotaryEmbedding(x, cos, sin)` (ai.onnx 23), the tables graph inputs.
fn standard(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("rope23", 23);
    let x_shape = if spec.four_d {
        vec![sym("batch"), Dim::Known(HEADS), sym("seq"), Dim::Known(D)]
    } else {
        vec![sym("batch"), sym("seq"), Dim::Known(HEADS * D)]
    };
    let x = b.input("x", DType::F32, x_shape);
    let half = if spec.rot == 0 { D / 2 } else { spec.rot / 2 };
    let seq = if spec.per_token {
        sym("seq")
    } else {
        Dim::Known(1)
    };
    let table = vec![Dim::Known(spec.table_batch), seq, Dim::Known(half)];
    let cos = b.input("cos", DType::F32, table.clone());
    let sin = b.input("sin", DType::F32, table);
    let mut attrs = vec![attr::int("interleaved", spec.interleaved as i64)];
    if !spec.four_d {
        attrs.push(attr::int("num_heads", HEADS));
    }
    if spec.rot > 0 {
        attrs.push(attr::int("rotary_embedding_dim", spec.rot));
    }
    let y = b.op("RotaryEmbedding", &[x, cos, sin], attrs);
    b.output(y, "y");
    b.build()
}

/// The one RotaryEmbedding of `m`: (domain, input count, interleaved, num_heads,
/// rotary_embedding_dim).
fn rotary(m: &Model) -> (String, usize, Option<i64>, Option<i64>, Option<i64>) {
    let g = &m.graph;
    let n = g
        .node_ids()
        .map(|id| g.node(id))
        .find(|n| n.op_type == "RotaryEmbedding")
        .expect("a RotaryEmbedding");
    (
        n.domain.clone(),
        n.inputs.len(),
        n.attr_int("interleaved"),
        n.attr_int("num_heads"),
        n.attr_int("rotary_embedding_dim"),
    )
}

#[test]
fn per_token_tables_become_cache_rows_read_from_start_zero() {
    let m = standard(FULL);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(trace.rewrites.len(), 1);
    assert_eq!(ops(&opt), counts(&[("Reshape", 2), ("RotaryEmbedding", 1)]));
    assert_eq!(
        rotary(&opt),
        ("com.microsoft".into(), 4, Some(0), None, None)
    );
    let g = &opt.graph;
    let n = g
        .node_ids()
        .map(|id| g.node(id))
        .find(|n| n.op_type == "RotaryEmbedding")
        .unwrap();
    let start = g.constant(n.input(1).unwrap()).unwrap();
    let start = fuselab::onnx::tensor::to_tensor(start, &fuselab::Limits::default()).unwrap();
    let zero = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[1]), vec![0]).unwrap());
    assert_eq!(start, zero, "a start offset of 0");
    assert_parity_within(&m, &opt, 0.0);
}

#[test]
fn partial_interleaved_and_three_d_rotations_keep_their_meaning() {
    for (spec, heads) in [
        // A partial rotary on 4-D heads: onnxruntime's op wants num_heads with it.
        (Spec { rot: 4, ..FULL }, Some(HEADS)),
        (
            Spec {
                interleaved: true,
                ..FULL
            },
            None,
        ),
        (
            Spec {
                four_d: false,
                ..FULL
            },
            Some(HEADS),
        ),
        (
            Spec {
                four_d: false,
                rot: 4,
                interleaved: true,
                ..FULL
            },
            Some(HEADS),
        ),
    ] {
        let m = standard(spec);
        let (opt, _) = fuse(&m, RULES);
        let rot = (spec.rot > 0).then_some(spec.rot);
        assert_eq!(
            rotary(&opt),
            (
                "com.microsoft".into(),
                4,
                Some(spec.interleaved as i64),
                heads,
                rot
            )
        );
        assert_parity_within(&m, &opt, 0.0);
    }
}

#[test]
fn position_ids_only_change_places() {
    let mut b = GraphBuilder::new("rope23_pos", 23);
    let x = b.input(
        "x",
        DType::F32,
        vec![
            sym("batch"),
            Dim::Known(HEADS),
            Dim::Known(3),
            Dim::Known(D),
        ],
    );
    let cos = b.input("cos", DType::F32, vec![Dim::Known(8), Dim::Known(D / 2)]);
    let sin = b.input("sin", DType::F32, vec![Dim::Known(8), Dim::Known(D / 2)]);
    let pos = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[1, 3]), vec![5, 0, 7]).unwrap());
    let pos = b.initializer("pos", &pos);
    let y = b.op("RotaryEmbedding", &[x, cos, sin, pos], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(ops(&opt), counts(&[("RotaryEmbedding", 1)]));
    let g = &opt.graph;
    let n = g.node(g.node_ids().next().unwrap());
    let names: Vec<&str> = n.inputs.iter().map(|v| g.name(v.unwrap())).collect();
    assert_eq!(names, ["x", "pos", "cos", "sin"]);
    assert_parity_within(&m, &opt, 0.0);
}

/// Tables of their own per batch row cannot be one cache read from a start offset, and a table
/// that broadcasts along seq is not one row per token: both stay the standard op.
#[test]
fn tables_that_are_not_one_row_per_token_stay() {
    assert_rejected(
        &standard(Spec {
            table_batch: 2,
            ..FULL
        }),
        RULES,
        "is not [1, seq, r/2] with x's seq dim",
    );
    assert_rejected(
        &standard(Spec {
            per_token: false,
            ..FULL
        }),
        RULES,
        "is not [1, seq, r/2] with x's seq dim",
    );
}

/// Both caches must be half the rotated channels wide: a sine table of another width is refused
/// by name (before, only the cosine's width was checked and the kernel failed at run time).
#[test]
fn caches_of_another_width_stay() {
    let mut b = GraphBuilder::new("rope23", 23);
    let x = b.input(
        "x",
        DType::F32,
        vec![sym("batch"), Dim::Known(HEADS), sym("seq"), Dim::Known(D)],
    );
    let cos = b.input(
        "cos",
        DType::F32,
        vec![Dim::Known(1), sym("seq"), Dim::Known(D / 2)],
    );
    let sin = b.input(
        "sin",
        DType::F32,
        vec![Dim::Known(1), sym("seq"), Dim::Known(D)],
    );
    let y = b.op("RotaryEmbedding", &[x, cos, sin], vec![]);
    b.output(y, "y");
    assert_rejected(
        &b.build(),
        RULES,
        "is not 4 wide (half the rotated channels)",
    );
}
