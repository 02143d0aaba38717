use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, sym, GraphBuilder};
use crate::ir::attr;

fn ints(v: &[i64]) -> Tensor {
    i64s(&[v.len()], v)
}

#[test]
fn tile_repeats_each_axis() {
    let n = node("Tile", vec![]);
    let x = i32s(&[2, 2], &[1, 2, 3, 4]);
    let y = run_first(tile, &n, 13, &[&x, &ints(&[1, 2])]).unwrap();
    assert_eq!(y, i32s(&[2, 4], &[1, 2, 1, 2, 3, 4, 3, 4]));
    let y = run_first(tile, &n, 6, &[&x, &ints(&[2, 1])]).unwrap();
    assert_eq!(y, i32s(&[4, 2], &[1, 2, 3, 4, 1, 2, 3, 4]));
    let y = run_first(tile, &n, 13, &[&x, &ints(&[2, 2])]).unwrap();
    assert_eq!(
        y,
        i32s(&[4, 4], &[1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4])
    );
    // Zero repeats empty the axis; a scalar tiles to itself; bool and 1-D work.
    let y = run_first(tile, &n, 13, &[&x, &ints(&[0, 3])]).unwrap();
    assert_eq!(y, i32s(&[0, 6], &[]));
    let s = f32s(&[], &[7.]);
    assert_eq!(run_first(tile, &n, 13, &[&s, &ints(&[])]).unwrap(), s);
    let b = bools(&[2], &[true, false]);
    let y = run_first(tile, &n, 13, &[&b, &i32s(&[1], &[3])]).unwrap();
    assert_eq!(y, bools(&[6], &[true, false, true, false, true, false]));
}

#[test]
fn tile_refuses_hostile_repeats() {
    let n = node("Tile", vec![]);
    let x = f32s(&[1, 2], &[1., 2.]);
    let e = run_first(tile, &n, 13, &[&x, &ints(&[-1, 1])]).unwrap_err();
    assert!(
        e.starts_with("Tile: repeats [-1, 1] are negative or too large"),
        "{e}"
    );
    // 2^40 x 2^41 elements: refused before anything is allocated.
    let e = run_first(tile, &n, 13, &[&x, &ints(&[1 << 40, 1 << 40])]).unwrap_err();
    assert!(e.contains("Tile") && e.contains("limit"), "{e}");
    let e = run_first(tile, &n, 13, &[&x, &ints(&[i64::MAX, i64::MAX])]).unwrap_err();
    assert!(e.contains("Tile"), "{e}");
    let e = run_first(tile, &n, 13, &[&x, &ints(&[2])]).unwrap_err();
    assert!(e.contains("one entry per input dim"), "{e}");
    let e = run_first(tile, &n, 13, &[&x, &f32s(&[2], &[1., 1.])]).unwrap_err();
    assert!(e.contains("'repeats' must be int64"), "{e}");
}

#[test]
fn size_counts_elements() {
    let n = node("Size", vec![]);
    let y = run_first(size, &n, 13, &[&iota(&[2, 3, 4])]).unwrap();
    assert_eq!(y, i64s(&[], &[24]));
    let y = run_first(size, &n, 1, &[&bools(&[0, 3], &[])]).unwrap();
    assert_eq!(y, i64s(&[], &[0]));
}

fn rs(batch: i64, time: i64) -> crate::ir::Node {
    node(
        "ReverseSequence",
        vec![attr::int("batch_axis", batch), attr::int("time_axis", time)],
    )
}

#[test]
fn reverse_sequence_spec_examples() {
    // time_axis 0: column b holds sequence b; its first lens[b] entries reversed.
    let x = i64s(
        &[4, 4],
        &[0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15],
    );
    let y = run_first(reverse_sequence, &rs(1, 0), 10, &[&x, &ints(&[4, 3, 2, 1])]).unwrap();
    assert_eq!(
        y,
        i64s(
            &[4, 4],
            &[3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15]
        )
    );
    // time_axis 1: row b holds sequence b; inner dims move as blocks.
    let x = f32s(
        &[2, 3, 2],
        &[0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11.],
    );
    let y = run_first(reverse_sequence, &rs(0, 1), 10, &[&x, &ints(&[3, 2])]).unwrap();
    assert_eq!(
        y,
        f32s(
            &[2, 3, 2],
            &[4., 5., 2., 3., 0., 1., 8., 9., 6., 7., 10., 11.]
        )
    );
    // A length of 0 leaves the sequence as it is.
    let y = run_first(reverse_sequence, &rs(0, 1), 10, &[&x, &ints(&[0, 1])]).unwrap();
    assert_eq!(y, x);
}

#[test]
fn reverse_sequence_errors() {
    let x = iota(&[2, 3]);
    let e = run_first(reverse_sequence, &rs(1, 0), 10, &[&x, &ints(&[1, 3, 2])]).unwrap_err();
    assert_eq!(
        e,
        "ReverseSequence: sequence length 3 is out of range [0, 2] (the time dim)"
    );
    let e = run_first(reverse_sequence, &rs(1, 0), 10, &[&x, &ints(&[1, -1, 2])]).unwrap_err();
    assert!(e.contains("sequence length -1"), "{e}");
    let e = run_first(reverse_sequence, &rs(1, 0), 10, &[&x, &ints(&[1, 1])]).unwrap_err();
    assert!(e.contains("must have shape [3]"), "{e}");
    let e = run_first(reverse_sequence, &rs(1, 0), 10, &[&iota(&[3]), &ints(&[1])]).unwrap_err();
    assert!(e.contains("rank >= 2"), "{e}");
    let e = run_first(reverse_sequence, &rs(1, 1), 10, &[&x, &ints(&[1, 1, 1])]).unwrap_err();
    assert!(
        e.contains("must be 0 and 1 in some order, got 1 and 1"),
        "{e}"
    );
}

fn d2s(bs: i64, mode: Option<&str>) -> crate::ir::Node {
    let mut a = vec![attr::int("blocksize", bs)];
    if let Some(m) = mode {
        a.push(attr::string("mode", m));
    }
    node("DepthToSpace", a)
}

fn s2d(bs: i64, mode: Option<&str>) -> crate::ir::Node {
    let mut n = d2s(bs, mode);
    n.op_type = "SpaceToDepth".into();
    n
}

#[test]
fn depth_to_space_orders() {
    // 8 channels of 1x1, blocksize 2 -> 2 channels of 2x2. DCR: out[c][i][j] = in[(2i+j)*2 + c];
    // CRD: out[c][i][j] = in[4c + 2i + j].
    let x = iota(&[1, 8, 1, 1]);
    let dcr = f32s(&[1, 2, 2, 2], &[0., 2., 4., 6., 1., 3., 5., 7.]);
    assert_eq!(
        run_first(depth_to_space, &d2s(2, None), 13, &[&x]).unwrap(),
        dcr
    );
    assert_eq!(
        run_first(depth_to_space, &d2s(2, Some("DCR")), 13, &[&x]).unwrap(),
        dcr
    );
    let y = run_first(depth_to_space, &d2s(2, Some("CRD")), 13, &[&x]).unwrap();
    assert_eq!(y, iota(&[1, 2, 2, 2]));
    // Opset 1 has no mode: always DCR.
    assert_eq!(
        run_first(depth_to_space, &d2s(2, Some("CRD")), 1, &[&x]).unwrap(),
        dcr
    );
    // Spatial: in[k][0][w] = 2k + w; out[2h+i][2w+j] = in[2i+j][h][w].
    let x = iota(&[1, 4, 1, 2]);
    let y = run_first(depth_to_space, &d2s(2, None), 11, &[&x]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2, 4], &[0., 2., 1., 3., 4., 6., 5., 7.]));
}

#[test]
fn space_to_depth_inverts_depth_to_space() {
    // 2 channels of 2x2. DCR: channel (2i+j)*2 + c = in[c][i][j]; CRD: 4c + 2i + j.
    let x = iota(&[1, 2, 2, 2]);
    let y = run_first(space_to_depth, &s2d(2, None), 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[1, 8, 1, 1], &[0., 4., 1., 5., 2., 6., 3., 7.]));
    let y = run_first(space_to_depth, &s2d(2, Some("CRD")), 28, &[&x]).unwrap();
    assert_eq!(y, iota(&[1, 8, 1, 1]));
    // Before 28 the mode attribute is not read.
    let y = run_first(space_to_depth, &s2d(2, Some("CRD")), 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[1, 8, 1, 1], &[0., 4., 1., 5., 2., 6., 3., 7.]));
    // Round trips, both orders, on a larger int input.
    let x = i64s(&[2, 3, 4, 6], &(0..144).collect::<Vec<_>>());
    for mode in ["DCR", "CRD"] {
        let s = run_first(space_to_depth, &s2d(2, Some(mode)), 28, &[&x]).unwrap();
        assert_eq!(s.shape(), [2, 12, 2, 3]);
        let back = run_first(depth_to_space, &d2s(2, Some(mode)), 28, &[&s]).unwrap();
        assert_eq!(back, x, "{mode}");
    }
}

#[test]
fn depth_space_errors() {
    let x = iota(&[1, 6, 2, 2]);
    let e = run_first(depth_to_space, &d2s(2, None), 13, &[&x]).unwrap_err();
    assert_eq!(
        e,
        "DepthToSpace: channels 6 are not a multiple of blocksize² = 4"
    );
    let e = run_first(space_to_depth, &s2d(4, None), 13, &[&x]).unwrap_err();
    assert!(e.contains("multiples of blocksize 4"), "{e}");
    let e = run_first(depth_to_space, &d2s(2, None), 13, &[&iota(&[4, 2, 2])]).unwrap_err();
    assert!(e.contains("must be 4-D"), "{e}");
    let e = run_first(depth_to_space, &node("DepthToSpace", vec![]), 13, &[&x]).unwrap_err();
    assert!(e.contains("'blocksize' is required"), "{e}");
    let e = run_first(depth_to_space, &d2s(0, None), 13, &[&x]).unwrap_err();
    assert!(e.contains("blocksize must be >= 1"), "{e}");
    let e = run_first(space_to_depth, &s2d(2, Some("RCD")), 28, &[&x]).unwrap_err();
    assert!(e.contains("mode 'RCD' is not DCR or CRD"), "{e}");
    // A huge blocksize on a one-pixel input overflows the output dims: refused, not panicking.
    let big = d2s(1 << 31, None);
    let e = run_first(depth_to_space, &big, 13, &[&iota(&[1, 1, 1, 1])]).unwrap_err();
    assert!(e.contains("DepthToSpace"), "{e}");
}

#[test]
fn inference() {
    let mut b = GraphBuilder::new("g", 18);
    let x = b.input(
        "x",
        DType::F32,
        vec![sym("N"), Dim::Known(8), Dim::Known(3), sym("W")],
    );
    let reps = b.initializer("reps", &ints(&[1, 2, 1, 3]));
    let t = b.op("Tile", &[x, reps], vec![]);
    let d = b.op("DepthToSpace", &[x], vec![attr::int("blocksize", 2)]);
    let y = b.input("y", DType::I64, dims(&[1, 2, 4, 6]));
    let s = b.op("SpaceToDepth", &[y], vec![attr::int("blocksize", 2)]);
    let n = b.op("Size", &[x], vec![]);
    let r = b.op("ReverseSequence", &[x, reps], vec![]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    assert_eq!(
        ty(t),
        TensorType::new(
            DType::F32,
            vec![
                sym("N"),
                Dim::Known(16),
                Dim::Known(3),
                Dim::undecided("tile_1_out0", 3)
            ]
        )
    );
    assert_eq!(
        ty(d),
        TensorType::new(
            DType::F32,
            vec![
                sym("N"),
                Dim::Known(2),
                Dim::Known(6),
                Dim::undecided("depthtospace_2_out0", 3)
            ]
        )
    );
    assert_eq!(ty(s), TensorType::new(DType::I64, dims(&[1, 8, 2, 3])));
    assert_eq!(ty(n), TensorType::new(DType::I64, vec![]));
    assert_eq!(ty(r), ty(x));
}
