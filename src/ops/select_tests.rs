use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, sym, GraphBuilder};
use crate::ir::attr;

#[test]
fn non_zero_lists_coordinates() {
    let n = node("NonZero", vec![]);
    let y = run_first(non_zero, &n, 13, &[&i32s(&[2, 2], &[1, 0, 1, 1])]).unwrap();
    assert_eq!(y, i64s(&[2, 3], &[0, 1, 1, 0, 0, 1]));
    // -0.0 is zero, NaN is not.
    let y = run_first(non_zero, &n, 9, &[&f32s(&[4], &[0., -0., f32::NAN, 2.])]).unwrap();
    assert_eq!(y, i64s(&[1, 2], &[2, 3]));
    let y = run_first(non_zero, &n, 13, &[&bools(&[2, 1], &[false, true])]).unwrap();
    assert_eq!(y, i64s(&[2, 1], &[1, 0]));
    let y = run_first(non_zero, &n, 13, &[&f64s(&[3], &[0.; 3])]).unwrap();
    assert_eq!(y, i64s(&[1, 0], &[]));
    // A scalar: no coordinate rows, one column per non-zero (onnx's reference).
    let y = run_first(non_zero, &n, 13, &[&i64s(&[], &[5])]).unwrap();
    assert_eq!(y, i64s(&[0, 1], &[]));
}

fn comp(axis: Option<i64>) -> crate::ir::Node {
    node(
        "Compress",
        axis.map(|a| attr::int("axis", a)).into_iter().collect(),
    )
}

#[test]
fn compress_spec_examples() {
    let x = f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]);
    let c = |v: &[bool]| bools(&[v.len()], v);
    let y = run_first(
        compress,
        &comp(Some(0)),
        11,
        &[&x, &c(&[false, true, true])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[2, 2], &[3., 4., 5., 6.]));
    let y = run_first(compress, &comp(Some(1)), 11, &[&x, &c(&[false, true])]).unwrap();
    assert_eq!(y, f32s(&[3, 1], &[2., 4., 6.]));
    let y = run_first(compress, &comp(Some(-1)), 11, &[&x, &c(&[false, true])]).unwrap();
    assert_eq!(y, f32s(&[3, 1], &[2., 4., 6.]));
    // No axis: the flattened input; a short condition drops the rest.
    let y = run_first(
        compress,
        &comp(None),
        9,
        &[&x, &c(&[false, true, false, false, true])],
    );
    assert_eq!(y.unwrap(), f32s(&[2], &[2., 5.]));
    // A longer condition is fine while its extra entries are false; all false is empty.
    let y = run_first(
        compress,
        &comp(Some(0)),
        11,
        &[&x, &c(&[true, false, false, false])],
    );
    assert_eq!(y.unwrap(), f32s(&[1, 2], &[1., 2.]));
    let y = run_first(compress, &comp(Some(1)), 11, &[&x, &c(&[false, false])]).unwrap();
    assert_eq!(y, f32s(&[3, 0], &[]));
}

#[test]
fn compress_errors() {
    let x = i64s(&[3, 2], &[1, 2, 3, 4, 5, 6]);
    let e = run_first(
        compress,
        &comp(Some(1)),
        11,
        &[&x, &bools(&[3], &[true, false, true])],
    );
    assert_eq!(
        e.unwrap_err(),
        "Compress: condition is true at position 2, past the 2 entries it selects from"
    );
    let e = run_first(compress, &comp(Some(0)), 11, &[&x, &i64s(&[3], &[1, 0, 1])]);
    assert_eq!(
        e.unwrap_err(),
        "Compress: condition must be bool, got int64"
    );
    let e = run_first(
        compress,
        &comp(Some(0)),
        11,
        &[&x, &bools(&[1, 1], &[true])],
    );
    assert!(e.unwrap_err().contains("must be 1-D"));
    let e = run_first(compress, &comp(Some(2)), 11, &[&x, &bools(&[1], &[true])]);
    assert!(e.unwrap_err().contains("axis 2 is out of range"));
}

fn uniq(axis: Option<i64>, sorted: i64) -> crate::ir::Node {
    let mut a = vec![attr::int("sorted", sorted)];
    if let Some(ax) = axis {
        a.push(attr::int("axis", ax));
    }
    let mut n = node("Unique", a);
    n.outputs = vec![None; 4];
    n
}

fn run_unique(n: &crate::ir::Node, x: &Tensor) -> Vec<Tensor> {
    run_at(unique, n, 11, &[Some(x)]).unwrap()
}

#[test]
fn unique_spec_examples() {
    // Example 1: unsorted, flattened.
    let out = run_unique(&uniq(None, 0), &f32s(&[6], &[2., 1., 1., 3., 4., 3.]));
    assert_eq!(out[0], f32s(&[4], &[2., 1., 3., 4.]));
    assert_eq!(out[1], i64s(&[4], &[0, 1, 3, 4]));
    assert_eq!(out[2], i64s(&[6], &[0, 1, 1, 2, 3, 2]));
    assert_eq!(out[3], i64s(&[4], &[1, 2, 2, 1]));
    // Example 2: sorted, flattened 2-D input.
    let out = run_unique(&uniq(None, 1), &i32s(&[2, 2], &[1, 3, 2, 3]));
    assert_eq!(out[0], i32s(&[3], &[1, 2, 3]));
    assert_eq!(out[1], i64s(&[3], &[0, 2, 1]));
    assert_eq!(out[2], i64s(&[4], &[0, 2, 1, 2]));
    assert_eq!(out[3], i64s(&[3], &[1, 1, 2]));
    // Example 3: rows.
    let x = i64s(&[3, 3], &[1, 0, 0, 1, 0, 0, 2, 3, 4]);
    let out = run_unique(&uniq(Some(0), 1), &x);
    assert_eq!(out[0], i64s(&[2, 3], &[1, 0, 0, 2, 3, 4]));
    assert_eq!(out[1], i64s(&[2], &[0, 2]));
    assert_eq!(out[2], i64s(&[3], &[0, 0, 1]));
    assert_eq!(out[3], i64s(&[2], &[2, 1]));
    // Example 4: subtensors along axis 1 of a [2, 4, 2] input (and axis -2, the same axis).
    let x = f32s(
        &[2, 4, 2],
        &[
            1., 1., 0., 1., 2., 1., 0., 1., 1., 1., 0., 1., 2., 1., 0., 1.,
        ],
    );
    for axis in [1, -2] {
        let out = run_unique(&uniq(Some(axis), 1), &x);
        assert_eq!(
            out[0],
            f32s(
                &[2, 3, 2],
                &[0., 1., 1., 1., 2., 1., 0., 1., 1., 1., 2., 1.]
            )
        );
        assert_eq!(out[1], i64s(&[3], &[1, 0, 2]));
        assert_eq!(out[2], i64s(&[4], &[1, 0, 2, 0]));
        assert_eq!(out[3], i64s(&[3], &[2, 1, 1]));
    }
}

#[test]
fn unique_corners() {
    // NaNs sort last and count as one value; unsorted keeps first occurrences.
    let x = f64s(&[5], &[f64::NAN, 1., f64::NAN, 0., 1.]);
    let out = run_unique(&uniq(None, 1), &x);
    let y = out[0].to_f64_vec();
    assert_eq!(&y[..2], &[0., 1.]);
    assert!(y[2].is_nan() && y.len() == 3);
    assert_eq!(out[1], i64s(&[3], &[3, 1, 0]));
    assert_eq!(out[2], i64s(&[5], &[2, 1, 2, 0, 1]));
    assert_eq!(out[3], i64s(&[3], &[1, 2, 2]));
    // Bool, unsorted; an empty input; a scalar.
    let out = run_unique(&uniq(None, 0), &bools(&[3], &[true, false, true]));
    assert_eq!(out[0], bools(&[2], &[true, false]));
    assert_eq!(out[2], i64s(&[3], &[0, 1, 0]));
    let out = run_unique(&uniq(None, 1), &f32s(&[0], &[]));
    assert_eq!(out[0], f32s(&[0], &[]));
    assert_eq!(out[3], i64s(&[0], &[]));
    let out = run_unique(&uniq(None, 1), &i32s(&[], &[4]));
    assert_eq!(out[0], i32s(&[1], &[4]));
    // Errors: axis out of range; an axis on a scalar.
    let e = run_at(unique, &uniq(Some(2), 1), 11, &[Some(&iota(&[2, 2]))]).unwrap_err();
    assert!(e.contains("axis 2 is out of range"), "{e}");
    let e = run_at(unique, &uniq(Some(0), 1), 11, &[Some(&iota(&[]))]).unwrap_err();
    assert!(e.contains("rank >= 1"), "{e}");
}

fn one_hot_node(axis: i64) -> crate::ir::Node {
    node("OneHot", vec![attr::int("axis", axis)])
}

#[test]
fn one_hot_spec_examples() {
    // Without axis: [3] indices, depth 12 (a float), values int32 [off 2, on 5].
    let idx = i64s(&[3], &[0, 7, 8]);
    let vals = i32s(&[2], &[2, 5]);
    let y = run_first(
        one_hot,
        &node("OneHot", vec![]),
        11,
        &[&idx, &f32s(&[], &[12.]), &vals],
    );
    let mut want = vec![2; 36];
    for (row, col) in [(0, 0), (1, 7), (2, 8)] {
        want[row * 12 + col] = 5;
    }
    assert_eq!(y.unwrap(), i32s(&[3, 12], &want));
    // axis 1 on [2, 2] float indices: out[i][d][j] = on where indices[i][j] == d.
    let idx = f32s(&[2, 2], &[1., 3., 2., 0.]);
    let vals = f32s(&[2], &[0., 1.]);
    let depth = i64s(&[1], &[4]);
    let y = run_first(one_hot, &one_hot_node(1), 11, &[&idx, &depth, &vals]).unwrap();
    #[rustfmt::skip]
    let want = f32s(&[2, 4, 2], &[
        0., 0., 1., 0., 0., 0., 0., 1.,
        0., 1., 0., 0., 1., 0., 0., 0.,
    ]);
    assert_eq!(y, want);
    // Same with axis -2 (the same position in a rank-3 output).
    let y = run_first(one_hot, &one_hot_node(-2), 11, &[&idx, &depth, &vals]).unwrap();
    assert_eq!(y, want);
    // axis 0 on [2] indices: out[d][i].
    let y = run_first(
        one_hot,
        &one_hot_node(0),
        11,
        &[&i32s(&[2], &[2, 0]), &depth, &vals],
    );
    assert_eq!(y.unwrap(), f32s(&[4, 2], &[0., 1., 0., 0., 1., 0., 0., 0.]));
}

#[test]
fn one_hot_index_range_by_version() {
    let idx = i64s(&[4], &[-1, -3, 3, -4]);
    let depth = i64s(&[], &[3]);
    let vals = bools(&[2], &[false, true]);
    let n = node("OneHot", vec![]);
    // From 11, [-depth, depth) counts from the end; the rest are all off.
    let y = run_first(one_hot, &n, 11, &[&idx, &depth, &vals]).unwrap();
    #[rustfmt::skip]
    let want = bools(&[4, 3], &[
        false, false, true,
        true, false, false,
        false, false, false,
        false, false, false,
    ]);
    assert_eq!(y, want);
    // Opset 9: any negative index is all off.
    let y = run_first(one_hot, &n, 9, &[&idx, &depth, &vals]).unwrap();
    assert_eq!(y, bools(&[4, 3], &[false; 12]));
    // A fractional index matches nothing.
    let y = run_first(one_hot, &n, 11, &[&f64s(&[1], &[1.5]), &depth, &vals]).unwrap();
    assert_eq!(y, bools(&[1, 3], &[false; 3]));
}

#[test]
fn one_hot_errors() {
    let idx = i64s(&[2], &[0, 1]);
    let vals = f32s(&[2], &[0., 1.]);
    let n = node("OneHot", vec![]);
    let run = |depth: &Tensor, vals: &Tensor| run_first(one_hot, &n, 11, &[&idx, depth, vals]);
    let e = run(&i64s(&[], &[-1]), &vals).unwrap_err();
    assert_eq!(
        e,
        "OneHot: depth must be a whole number in [0, 2^53), got -1"
    );
    let e = run(&f32s(&[], &[2.5]), &vals).unwrap_err();
    assert!(e.contains("got 2.5"), "{e}");
    let e = run(&i64s(&[2], &[2, 2]), &vals).unwrap_err();
    assert!(e.contains("depth must hold one number"), "{e}");
    let e = run(&i64s(&[], &[2]), &f32s(&[3], &[0., 1., 2.])).unwrap_err();
    assert!(e.contains("values must hold two elements"), "{e}");
    // A hostile depth is refused before the output is allocated.
    let e = run(&i64s(&[], &[1 << 40]), &vals).unwrap_err();
    assert!(e.contains("OneHot") && e.contains("limit"), "{e}");
    let bad = one_hot_node(2);
    let e = run_first(one_hot, &bad, 11, &[&idx, &i64s(&[], &[2]), &vals]).unwrap_err();
    assert!(
        e.contains("axis 2 is out of range for output rank 2"),
        "{e}"
    );
}

#[test]
fn inference() {
    let mut b = GraphBuilder::new("g", 13);
    let x = b.input("x", DType::F32, vec![sym("N"), Dim::Known(3)]);
    let c = b.input("c", DType::BOOL, dims(&[4]));
    let nz = b.op("NonZero", &[x], vec![]);
    let cf = b.op("Compress", &[x, c], vec![]);
    let ca = b.op("Compress", &[x, c], vec![attr::int("axis", -1)]);
    let u = b.node("", "Unique", &[Some(x)], 4, vec![attr::int("axis", 0)]);
    let uf = b.node("", "Unique", &[Some(x)], 4, vec![]);
    let idx = b.input("idx", DType::I64, dims(&[2, 5]));
    let depth = b.initializer("depth", &i64s(&[], &[7]));
    let vals = b.input("vals", DType::I32, dims(&[2]));
    let oh = b.op("OneHot", &[idx, depth, vals], vec![attr::int("axis", 1)]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    let und = |v, i| Dim::undecided(m.graph.name(v), i);
    assert_eq!(
        ty(nz),
        TensorType::new(DType::I64, vec![Dim::Known(2), und(nz, 1)])
    );
    assert_eq!(ty(cf), TensorType::new(DType::F32, vec![und(cf, 0)]));
    assert_eq!(
        ty(ca),
        TensorType::new(DType::F32, vec![sym("N"), und(ca, 1)])
    );
    assert_eq!(
        ty(u[0]),
        TensorType::new(DType::F32, vec![und(u[0], 0), Dim::Known(3)])
    );
    assert_eq!(ty(u[1]), TensorType::new(DType::I64, vec![und(u[1], 0)]));
    assert_eq!(ty(u[2]), TensorType::new(DType::I64, vec![sym("N")]));
    assert_eq!(ty(uf[2]), TensorType::new(DType::I64, vec![und(uf[2], 0)]));
    assert_eq!(ty(oh), TensorType::new(DType::I32, dims(&[2, 7, 5])));
}
