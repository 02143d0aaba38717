//! Static type/shape inference for the comparison, logical and indexing ops (Gather, Slice,
//! Split, Expand, Range, ConstantOfShape, Flatten, Trilu, Where and friends).

use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::{attr, Dim, Model, ValueId};
use fuselab::onnx::tensor::from_tensor;
use fuselab::ops::verify;
use fuselab::{DType, Error, Tensor};
use ndarray::{ArrayD, IxDyn};

/// The inferred shape, with the `?value[axis]` symbols inference gives undecided dims shown as
/// `Unknown` (what these tests are about is which dims are decided).
fn shape(m: &Model, v: ValueId) -> Option<Vec<Dim>> {
    let dims = m.graph.value(v).ty.shape.clone()?;
    Some(
        dims.into_iter()
            .map(|d| match d {
                d if d.is_undecided() => Dim::Unknown,
                d => d,
            })
            .collect(),
    )
}

fn dtype(m: &Model, v: ValueId) -> Option<DType> {
    m.graph.value(v).ty.dtype
}

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::F32(ArrayD::zeros(IxDyn(shape)))
}

#[test]
fn comparisons_are_bool_and_broadcast() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("B"), Dim::Known(1)]);
    let y = b.input("Y", DType::F32, dims(&[4]));
    let mut outs = Vec::new();
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"] {
        outs.push(b.op(op, &[x, y], vec![]));
    }
    let p = b.input("P", DType::BOOL, dims(&[2, 1, 3]));
    let q = b.input("Q", DType::BOOL, dims(&[5, 1]));
    for op in ["And", "Or", "Xor"] {
        outs.push(b.op(op, &[p, q], vec![]));
    }
    let not = b.op("Not", &[p], vec![]);
    b.output(not, "N");
    let m = b.build();
    for &o in &outs[..5] {
        assert_eq!(dtype(&m, o), Some(DType::BOOL));
        assert_eq!(shape(&m, o), Some(vec![sym("B"), Dim::Known(4)]));
    }
    for &o in &outs[5..] {
        assert_eq!(dtype(&m, o), Some(DType::BOOL));
        assert_eq!(shape(&m, o), Some(dims(&[2, 5, 3])));
    }
    assert_eq!(shape(&m, not), Some(dims(&[2, 1, 3])));
    assert_eq!(dtype(&m, not), Some(DType::BOOL));
}

#[test]
fn comparisons_of_different_types_fail_verify() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let y = b.input("Y", DType::I64, dims(&[2]));
    let e = b.op("Equal", &[x, y], vec![]);
    b.output(e, "E");
    match verify(&b.build()) {
        Err(Error::Verify(msg)) => assert!(msg.contains("Equal"), "{msg}"),
        other => panic!("expected a verify error, got {other:?}"),
    }
}

#[test]
fn where_broadcasts_three_ways() {
    let mut b = GraphBuilder::new("g", 17);
    let c = b.input(
        "C",
        DType::BOOL,
        vec![Dim::Known(1), Dim::Known(1), sym("S")],
    );
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("B"), Dim::Known(1), Dim::Known(1)],
    );
    let y = b.input("Y", DType::F32, dims(&[3, 1]));
    let w = b.op("Where", &[c, x, y], vec![]);
    b.output(w, "W");
    let m = b.build();
    assert_eq!(dtype(&m, w), Some(DType::F32));
    assert_eq!(shape(&m, w), Some(vec![sym("B"), Dim::Known(3), sym("S")]));
}

#[test]
fn gather_embedding_keeps_symbolic_dims() {
    let mut b = GraphBuilder::new("g", 17);
    let table = b.initializer("wte", &zeros(&[100, 64]));
    let ids = b.input("ids", DType::I64, vec![sym("batch"), sym("seq")]);
    let emb = b.op("Gather", &[table, ids], vec![]);
    // A scalar index on axis 1 drops that axis.
    let idx = b.initializer("one", &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), 1)));
    let col = b.op("Gather", &[emb, idx], vec![attr::int("axis", -2)]);
    b.output(col, "C");
    let m = b.build();
    assert_eq!(
        shape(&m, emb),
        Some(vec![sym("batch"), sym("seq"), Dim::Known(64)])
    );
    assert_eq!(dtype(&m, emb), Some(DType::F32));
    assert_eq!(shape(&m, col), Some(vec![sym("batch"), Dim::Known(64)]));
}

#[test]
fn slice_with_constant_bounds() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("B"), Dim::Known(10), Dim::Known(6)],
    );
    let i = |b: &mut GraphBuilder, n: &str, v: &[i64]| b.initializer(n, &Tensor::from_i64s(v));
    let starts = i(&mut b, "starts", &[1, -1]);
    let ends = i(&mut b, "ends", &[i64::MAX, i64::MIN]);
    let axes = i(&mut b, "axes", &[1, -1]);
    let steps = i(&mut b, "steps", &[3, -2]);
    let s = b.op("Slice", &[x, starts, ends, axes, steps], vec![]);
    // The whole of a symbolic axis: [0, INT64_MAX) keeps the symbol.
    let z = i(&mut b, "zero", &[0]);
    let big = i(&mut b, "big", &[i64::MAX]);
    let ax0 = i(&mut b, "ax0", &[0]);
    let whole = b.op("Slice", &[x, z, big, ax0], vec![]);
    // Non-constant ends: the sliced axis is unknown, the others pass through.
    let dyn_end = b.input("E", DType::I64, dims(&[1]));
    let ax2 = i(&mut b, "ax2", &[2]);
    let partial = b.op("Slice", &[x, z, dyn_end, ax2], vec![]);
    b.output(s, "S");
    b.output(whole, "W");
    b.output(partial, "P");
    let m = b.build();
    // axis 1: 1, 4, 7 -> 3; axis 2: 5, 3, 1 -> 3
    assert_eq!(
        shape(&m, s),
        Some(vec![sym("B"), Dim::Known(3), Dim::Known(3)])
    );
    assert_eq!(
        shape(&m, whole),
        Some(vec![sym("B"), Dim::Known(10), Dim::Known(6)])
    );
    assert_eq!(
        shape(&m, partial),
        Some(vec![sym("B"), Dim::Known(10), Dim::Unknown])
    );
}

#[test]
fn split_shapes() {
    let mut b = GraphBuilder::new("g", 18);
    let x = b.input("X", DType::F32, vec![sym("B"), Dim::Known(7)]);
    let sizes = b.initializer("sizes", &Tensor::from_i64s(&[2, 5]));
    let by_sizes = b.node(
        "",
        "Split",
        &[Some(x), Some(sizes)],
        2,
        vec![attr::int("axis", 1)],
    );
    let uneven = b.node(
        "",
        "Split",
        &[Some(x)],
        3,
        vec![attr::int("axis", -1), attr::int("num_outputs", 3)],
    );
    let m = b.build();
    assert_eq!(shape(&m, by_sizes[0]), Some(vec![sym("B"), Dim::Known(2)]));
    assert_eq!(shape(&m, by_sizes[1]), Some(vec![sym("B"), Dim::Known(5)]));
    let got: Vec<_> = uneven.iter().map(|&v| shape(&m, v)).collect();
    assert_eq!(
        got,
        vec![
            Some(vec![sym("B"), Dim::Known(3)]),
            Some(vec![sym("B"), Dim::Known(3)]),
            Some(vec![sym("B"), Dim::Known(1)]),
        ]
    );
    assert_eq!(dtype(&m, uneven[2]), Some(DType::F32));

    // Opset 13: equal parts from the output count; the split axis is unknown when uneven.
    let mut b = GraphBuilder::new("g", 13);
    let x = b.input("X", DType::I64, dims(&[6, 4]));
    let even = b.node("", "Split", &[Some(x)], 3, vec![]);
    let odd = b.node("", "Split", &[Some(x)], 3, vec![attr::int("axis", 1)]);
    let m = b.build();
    assert_eq!(shape(&m, even[2]), Some(dims(&[2, 4])));
    assert_eq!(shape(&m, odd[0]), Some(vec![Dim::Known(6), Dim::Unknown]));
}

#[test]
fn expand_flatten_trilu() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("B"), Dim::Known(1), Dim::Known(4)],
    );
    let target = b.initializer("target", &Tensor::from_i64s(&[3, 1]));
    let e = b.op("Expand", &[x, target], vec![]);
    let dyn_shape = b.input("S", DType::I64, dims(&[4]));
    let e2 = b.op("Expand", &[x, dyn_shape], vec![]);
    let f = b.op("Flatten", &[x], vec![]);
    let f0 = b.op("Flatten", &[x], vec![attr::int("axis", 0)]);
    let f2 = b.op("Flatten", &[x], vec![attr::int("axis", -1)]);
    let t = b.op("Trilu", &[x], vec![attr::int("upper", 0)]);
    for (v, n) in [
        (e, "E"),
        (e2, "E2"),
        (f, "F"),
        (f0, "F0"),
        (f2, "F2"),
        (t, "T"),
    ] {
        b.output(v, n);
    }
    let m = b.build();
    assert_eq!(
        shape(&m, e),
        Some(vec![sym("B"), Dim::Known(3), Dim::Known(4)])
    );
    assert_eq!(shape(&m, e2), Some(vec![Dim::Unknown; 4]));
    assert_eq!(shape(&m, f), Some(vec![sym("B"), Dim::Known(4)]));
    assert_eq!(shape(&m, f0), Some(vec![Dim::Known(1), Dim::Unknown]));
    assert_eq!(shape(&m, f2), Some(vec![sym("B"), Dim::Known(4)]));
    assert_eq!(shape(&m, t), shape(&m, x));
    assert_eq!(dtype(&m, f), Some(DType::F32));
}

#[test]
fn range_and_constant_of_shape() {
    let mut b = GraphBuilder::new("g", 17);
    let s = |b: &mut GraphBuilder, n: &str, v: i64| {
        b.initializer(n, &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), v)))
    };
    let (start, limit, delta) = (s(&mut b, "s", 10), s(&mut b, "l", 0), s(&mut b, "d", -3));
    let r = b.op("Range", &[start, limit, delta], vec![]);
    let lim = b.input("L", DType::I64, dims(&[]));
    let r2 = b.op("Range", &[start, lim, delta], vec![]);
    let shp = b.initializer("shp", &Tensor::from_i64s(&[2, 3]));
    let c = b.op("ConstantOfShape", &[shp], vec![]);
    let one = from_tensor("value", &Tensor::from_i64s(&[1]));
    let dyn_shp = b.input("SH", DType::I64, dims(&[3]));
    let c2 = b.op(
        "ConstantOfShape",
        &[dyn_shp],
        vec![attr::tensor("value", one)],
    );
    for (v, n) in [(r, "R"), (r2, "R2"), (c, "C"), (c2, "C2")] {
        b.output(v, n);
    }
    let m = b.build();
    // 10, 7, 4, 1
    assert_eq!(shape(&m, r), Some(dims(&[4])));
    assert_eq!(dtype(&m, r), Some(DType::I64));
    assert_eq!(shape(&m, r2), Some(vec![Dim::Unknown]));
    assert_eq!(shape(&m, c), Some(dims(&[2, 3])));
    assert_eq!(dtype(&m, c), Some(DType::F32));
    assert_eq!(shape(&m, c2), Some(vec![Dim::Unknown; 3]));
    assert_eq!(dtype(&m, c2), Some(DType::I64));
}

#[test]
fn slice_with_a_run_time_step_leaves_the_sliced_axis_unknown() {
    // steps is a graph input: [0, 10) on axis 0 may have 10, 5, 4, ... elements.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![Dim::Known(10), Dim::Known(6)]);
    let i = |b: &mut GraphBuilder, n: &str, v: &[i64]| b.initializer(n, &Tensor::from_i64s(v));
    let starts = i(&mut b, "starts", &[0]);
    let ends = i(&mut b, "ends", &[10]);
    let axes = i(&mut b, "axes", &[0]);
    let steps = b.input("steps", DType::I64, vec![Dim::Known(1)]);
    let y = b.op("Slice", &[x, starts, ends, axes, steps], vec![]);
    b.output(y, "Y");
    let m = b.build();
    assert_eq!(shape(&m, y), Some(vec![Dim::Unknown, Dim::Known(6)]));
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap())
}

/// BERT's position ids: a `[1, P]` buffer sliced to the input's length, `Shape(ids)[1]`. Its rows
/// are min(seq, P) (a symbol of its own), and adding them to a `[batch, seq, H]` tensor gives
/// seq rows: the two are equal or one is 1 wherever the Add runs.
#[test]
fn position_ids_cut_to_the_input_length_broadcast_as_its_length() {
    let build = |start: i64, table_dim: Dim| {
        let mut b = GraphBuilder::new("g", 17);
        let ids = b.input("ids", DType::I64, vec![sym("batch"), sym("seq")]);
        let x = b.input(
            "X",
            DType::F32,
            vec![sym("batch"), sym("seq"), Dim::Known(4)],
        );
        let table = b.input("T", DType::I64, vec![Dim::Known(1), table_dim]);
        let pos = b.input("E", DType::F32, vec![Dim::Known(128), Dim::Known(4)]);
        let shape = b.op("Shape", &[ids], vec![]);
        let one = b.initializer("one", &i64s(&[1]));
        let len = b.op("Gather", &[shape, one], vec![attr::int("axis", 0)]);
        let starts = b.initializer("starts", &i64s(&[start]));
        let axes = b.initializer("axes", &i64s(&[1]));
        let cut = b.op("Slice", &[table, starts, len, axes], vec![]);
        let emb = b.op("Gather", &[pos, cut], vec![]);
        let sum = b.op("Add", &[x, emb], vec![]);
        b.output(sum, "Y");
        (b.build(), cut, sum)
    };
    let (m, cut, sum) = build(0, Dim::Known(128));
    assert_eq!(
        shape(&m, cut),
        Some(vec![Dim::Known(1), Dim::min_of("seq", 128)])
    );
    assert_eq!(Dim::min_of("seq", 128).as_min(), Some(("seq", 128)));
    assert_eq!(
        shape(&m, sum),
        Some(vec![sym("batch"), sym("seq"), Dim::Known(4)])
    );
    // From 1, the rows are min(seq, 128) - 1 clamped at 0: not tracked.
    let (m, cut, sum) = build(1, Dim::Known(128));
    assert_eq!(shape(&m, cut), Some(vec![Dim::Known(1), Dim::Unknown]));
    assert_eq!(
        shape(&m, sum),
        Some(vec![sym("batch"), Dim::Unknown, Dim::Known(4)])
    );
    // A table of symbolic length: nothing to clamp against.
    let (m, cut, _) = build(0, sym("P"));
    assert_eq!(shape(&m, cut), Some(vec![Dim::Known(1), Dim::Unknown]));
}

/// min(s, d) collapses only against s itself.
#[test]
fn a_min_symbol_broadcasts_only_against_its_own_symbol() {
    use fuselab::ops::infer::broadcast_dims;
    let m = Dim::min_of("seq", 128);
    assert_eq!(
        broadcast_dims(&[sym("seq")], std::slice::from_ref(&m)),
        Some(vec![sym("seq")])
    );
    assert_eq!(
        broadcast_dims(std::slice::from_ref(&m), &[sym("seq")]),
        Some(vec![sym("seq")])
    );
    assert_eq!(
        broadcast_dims(&[sym("len")], std::slice::from_ref(&m)),
        Some(vec![Dim::Unknown])
    );
    assert_eq!(
        broadcast_dims(&[Dim::Known(1)], std::slice::from_ref(&m)),
        Some(vec![m])
    );
}
