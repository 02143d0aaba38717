use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, GraphBuilder};
use crate::ir::attr;
use crate::tensor::DType;

fn ge(axis: i64) -> crate::ir::Node {
    node("GatherElements", vec![attr::int("axis", axis)])
}

#[test]
fn strided_walks_a_transposed_view() {
    // A [3, 2] row-major array read as its [2, 3] transpose.
    let v: Vec<usize> = Strided::new(&[2, 3], &[1, 2]).collect();
    assert_eq!(v, [0, 2, 4, 1, 3, 5]);
    // A scalar walk visits one offset; an empty one none.
    assert_eq!(Strided::new(&[], &[]).collect::<Vec<_>>(), [0]);
    assert_eq!(Strided::new(&[3, 0], &[1, 1]).count(), 0);
    assert_eq!(strides_of(&[2, 3, 4]), [12, 4, 1]);
}

#[test]
fn gather_elements_spec_examples() {
    // axis 1: out[i][j] = data[i][indices[i][j]].
    let data = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let idx = i64s(&[2, 2], &[0, 0, 1, 0]);
    let y = run_first(gather_elements, &ge(1), 13, &[&data, &idx]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[1., 1., 4., 3.]));
    // axis 0 with negative indices: out[i][j] = data[indices[i][j]][j].
    let data = i32s(&[3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let idx = i32s(&[2, 3], &[-1, -2, 0, -2, 0, 0]);
    let y = run_first(gather_elements, &ge(0), 11, &[&data, &idx]).unwrap();
    assert_eq!(y, i32s(&[2, 3], &[7, 5, 3, 4, 2, 3]));
    // Indices narrower than data off the axis (onnxruntime's rule): rows 0 and 1, one column.
    let data = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let idx = i64s(&[2, 1], &[2, 0]);
    let y = run_first(gather_elements, &ge(-1), 13, &[&data, &idx]).unwrap();
    assert_eq!(y, i64s(&[2, 1], &[3, 4]));
    // Bool data, empty indices.
    let b = bools(&[2], &[true, false]);
    let y = run_first(gather_elements, &ge(0), 13, &[&b, &i64s(&[3], &[1, 1, 0])]).unwrap();
    assert_eq!(y, bools(&[3], &[false, false, true]));
    let y = run_first(gather_elements, &ge(0), 13, &[&b, &i64s(&[0], &[])]).unwrap();
    assert_eq!(y, bools(&[0], &[]));
}

#[test]
fn gather_elements_errors() {
    let data = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let e = run_first(
        gather_elements,
        &ge(1),
        13,
        &[&data, &i64s(&[2, 1], &[0, 2])],
    )
    .unwrap_err();
    assert_eq!(
        e,
        "GatherElements: index 2 is out of range for axis 1 of size 2 (valid: [-2, 1])"
    );
    let e = run_first(gather_elements, &ge(0), 13, &[&data, &i64s(&[1, 1], &[-3])]).unwrap_err();
    assert!(e.contains("index -3 is out of range for axis 0"), "{e}");
    let e = run_first(gather_elements, &ge(0), 13, &[&data, &i64s(&[2], &[0, 1])]).unwrap_err();
    assert!(e.contains("do not fit data of shape [2, 2]"), "{e}");
    let e = run_first(
        gather_elements,
        &ge(0),
        13,
        &[&data, &i64s(&[1, 3], &[0; 3])],
    )
    .unwrap_err();
    assert!(e.contains("do not fit"), "{e}");
    let e = run_first(gather_elements, &ge(0), 13, &[&data, &f32s(&[1, 1], &[0.])]).unwrap_err();
    assert_eq!(
        e,
        "GatherElements: indices must be int32 or int64, got float32"
    );
    let e = run_first(gather_elements, &ge(2), 13, &[&data, &i64s(&[1, 1], &[0])]).unwrap_err();
    assert!(e.contains("axis 2 is out of range"), "{e}");
}

#[test]
fn gather_nd_spec_examples() {
    let n = node("GatherND", vec![]);
    let data = i32s(&[2, 2], &[0, 1, 2, 3]);
    // Full tuples pick elements; 1-tuples pick rows.
    let y = run_first(gather_nd, &n, 11, &[&data, &i64s(&[2, 2], &[0, 0, 1, 1])]).unwrap();
    assert_eq!(y, i32s(&[2], &[0, 3]));
    let y = run_first(gather_nd, &n, 11, &[&data, &i64s(&[2, 1], &[1, 0])]).unwrap();
    assert_eq!(y, i32s(&[2, 2], &[2, 3, 0, 1]));
    let data = f32s(&[2, 2, 2], &[0., 1., 2., 3., 4., 5., 6., 7.]);
    let y = run_first(gather_nd, &n, 12, &[&data, &i64s(&[2, 2], &[0, 1, 1, 0])]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[2., 3., 4., 5.]));
    let y = run_first(
        gather_nd,
        &n,
        12,
        &[&data, &i64s(&[2, 1, 2], &[0, 1, 1, 0])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[2, 1, 2], &[2., 3., 4., 5.]));
    // batch_dims 1: batch b picks row indices[b] of data[b]; negative counts from the end.
    let nb = node("GatherND", vec![attr::int("batch_dims", 1)]);
    let y = run_first(gather_nd, &nb, 12, &[&data, &i64s(&[2, 1], &[1, -2])]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[2., 3., 4., 5.]));
    // Opset 11 has no batch_dims: the attribute is not read.
    let y = run_first(gather_nd, &nb, 11, &[&data, &i64s(&[2, 1], &[1, 0])]).unwrap();
    assert_eq!(y, f32s(&[2, 2, 2], &[4., 5., 6., 7., 0., 1., 2., 3.]));
}

#[test]
fn gather_nd_errors() {
    let n = node("GatherND", vec![]);
    let data = f32s(&[2, 2], &[0., 1., 2., 3.]);
    let e = run_first(gather_nd, &n, 13, &[&data, &i64s(&[1, 2], &[0, 2])]).unwrap_err();
    assert_eq!(
        e,
        "GatherND: index 2 is out of range for axis 1 of size 2 (valid: [-2, 1])"
    );
    let e = run_first(gather_nd, &n, 13, &[&data, &i64s(&[1, 3], &[0, 0, 0])]).unwrap_err();
    assert!(e.contains("must be in [1, 2]"), "{e}");
    let e = run_first(gather_nd, &n, 13, &[&data, &i64s(&[1, 0], &[])]).unwrap_err();
    assert!(e.contains("must be in [1, 2]"), "{e}");
    let nb = node("GatherND", vec![attr::int("batch_dims", 1)]);
    let e = run_first(gather_nd, &nb, 13, &[&data, &i64s(&[3, 1], &[0, 0, 0])]).unwrap_err();
    assert!(
        e.contains("batch dims of indices [3, 1] and data [2, 2] differ"),
        "{e}"
    );
    let nb2 = node("GatherND", vec![attr::int("batch_dims", 2)]);
    let e = run_first(gather_nd, &nb2, 13, &[&data, &i64s(&[2, 1], &[0, 0])]).unwrap_err();
    assert!(e.contains("batch_dims 2 must be below"), "{e}");
    let neg = node("GatherND", vec![attr::int("batch_dims", -1)]);
    let e = run_first(gather_nd, &neg, 13, &[&data, &i64s(&[1, 1], &[0])]).unwrap_err();
    assert!(e.contains("batch_dims must be >= 0"), "{e}");
}

fn se(axis: i64, reduction: &str) -> crate::ir::Node {
    node(
        "ScatterElements",
        vec![
            attr::int("axis", axis),
            attr::string("reduction", reduction),
        ],
    )
}

#[test]
fn scatter_elements_spec_examples() {
    let data = f32s(&[1, 5], &[1., 2., 3., 4., 5.]);
    let upd = f32s(&[1, 2], &[1.1, 2.1]);
    let y = run_first(
        scatter_elements,
        &se(1, "none"),
        18,
        &[&data, &i64s(&[1, 2], &[1, 3]), &upd],
    );
    assert_eq!(y.unwrap(), f32s(&[1, 5], &[1., 1.1, 3., 2.1, 5.]));
    let y = run_first(
        scatter_elements,
        &se(1, "none"),
        18,
        &[&data, &i32s(&[1, 2], &[1, -3]), &upd],
    );
    assert_eq!(y.unwrap(), f32s(&[1, 5], &[1., 1.1, 2.1, 4., 5.]));
    // Reductions on a duplicated index 1 (data 2, updates 1.1 then 2.1).
    let dup = i64s(&[1, 2], &[1, 1]);
    let at = |r: &str| {
        let y = run_first(scatter_elements, &se(1, r), 18, &[&data, &dup, &upd]).unwrap();
        y.to_f64_vec()[1]
    };
    assert!((at("add") - 5.2).abs() < 1e-5);
    assert!((at("mul") - 2.0 * 1.1 * 2.1).abs() < 1e-5);
    assert!((at("max") - 2.1).abs() < 1e-5);
    assert!((at("min") - 1.1).abs() < 1e-5);
    assert!((at("none") - 2.1).abs() < 1e-5);
    // axis 0 on a 3x3 zero matrix.
    let zeros = f32s(&[3, 3], &[0.; 9]);
    let idx = i64s(&[2, 3], &[1, 0, 2, 0, 2, 1]);
    let upd = f32s(&[2, 3], &[1., 1.1, 1.2, 2., 2.1, 2.2]);
    let y = run_first(scatter_elements, &se(0, "none"), 11, &[&zeros, &idx, &upd]).unwrap();
    assert_eq!(y, f32s(&[3, 3], &[2., 1.1, 0., 1., 0., 2.2, 0., 2.1, 1.2]));
}

#[test]
fn scatter_elements_versions_and_types() {
    let data = i64s(&[3], &[5, 5, 5]);
    let idx = i64s(&[2], &[0, 0]);
    let upd = i64s(&[2], &[2, 3]);
    // Before 16 the reduction attribute is not read: plain assignment, last update wins.
    let y = run_first(scatter_elements, &se(0, "add"), 13, &[&data, &idx, &upd]).unwrap();
    assert_eq!(y, i64s(&[3], &[3, 5, 5]));
    let y = run_first(scatter_elements, &se(0, "add"), 16, &[&data, &idx, &upd]).unwrap();
    assert_eq!(y, i64s(&[3], &[10, 5, 5]));
    let y = run_first(scatter_elements, &se(0, "mul"), 16, &[&data, &idx, &upd]).unwrap();
    assert_eq!(y, i64s(&[3], &[30, 5, 5]));
    let e = run_first(scatter_elements, &se(0, "max"), 16, &[&data, &idx, &upd]).unwrap_err();
    assert_eq!(
        e,
        "ScatterElements: reduction 'max' exists from opset 18; the model imports 16"
    );
    let e = run_first(scatter_elements, &se(0, "sum"), 18, &[&data, &idx, &upd]).unwrap_err();
    assert!(e.contains("unknown reduction 'sum'"), "{e}");
    // Bool: add is or, mul is and.
    let b = bools(&[2], &[false, true]);
    let i = i64s(&[2], &[0, 1]);
    let u = bools(&[2], &[true, false]);
    let y = run_first(scatter_elements, &se(0, "add"), 18, &[&b, &i, &u]).unwrap();
    assert_eq!(y, bools(&[2], &[true, true]));
    let y = run_first(scatter_elements, &se(0, "mul"), 18, &[&b, &i, &u]).unwrap();
    assert_eq!(y, bools(&[2], &[false, false]));
    // max and min keep NaN from either side.
    let d = f64s(&[2], &[f64::NAN, 1.]);
    let u = f64s(&[2], &[3., f64::NAN]);
    let y = run_first(scatter_elements, &se(0, "max"), 18, &[&d, &i, &u]).unwrap();
    assert!(y.to_f64_vec().iter().all(|v| v.is_nan()), "{y:?}");
    // Scatter (9, 10) is ScatterElements without reduction; refused from 11.
    let s = node("Scatter", vec![attr::int("axis", 0)]);
    let y = run_first(scatter_elements, &s, 10, &[&data, &idx, &upd]).unwrap();
    assert_eq!(y, i64s(&[3], &[3, 5, 5]));
    let e = run_first(scatter_elements, &s, 11, &[&data, &idx, &upd]).unwrap_err();
    assert!(e.contains("Scatter is deprecated from opset 11"), "{e}");
}

#[test]
fn scatter_elements_errors() {
    let data = f32s(&[2, 2], &[0.; 4]);
    let upd = f32s(&[1, 2], &[1., 2.]);
    let e = run_first(
        scatter_elements,
        &se(1, "none"),
        18,
        &[&data, &i64s(&[1, 2], &[0, 2]), &upd],
    );
    assert_eq!(
        e.unwrap_err(),
        "ScatterElements: index 2 is out of range for axis 1 of size 2 (valid: [-2, 1])"
    );
    let e = run_first(
        scatter_elements,
        &se(1, "none"),
        18,
        &[&data, &i64s(&[2, 1], &[0, 1]), &upd],
    );
    assert!(e
        .unwrap_err()
        .contains("updates of shape [1, 2] differ from indices of shape [2, 1]"));
    let u64 = f64s(&[1, 2], &[1., 2.]);
    let e = run_first(
        scatter_elements,
        &se(1, "none"),
        18,
        &[&data, &i64s(&[1, 2], &[0, 1]), &u64],
    );
    assert_eq!(
        e.unwrap_err(),
        "ScatterElements: input types differ: float32 and float64"
    );
}

#[test]
fn scatter_nd_spec_examples() {
    let n = |r: &str| node("ScatterND", vec![attr::string("reduction", r)]);
    let data = f32s(&[8], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let idx = i64s(&[4, 1], &[4, 3, 1, 7]);
    let upd = f32s(&[4], &[9., 10., 11., 12.]);
    let y = run_first(scatter_nd, &n("none"), 11, &[&data, &idx, &upd]).unwrap();
    assert_eq!(y, f32s(&[8], &[1., 11., 3., 10., 9., 6., 7., 12.]));
    // Slices: row 1 replaced; with a negative index.
    let m = i32s(&[2, 2], &[1, 2, 3, 4]);
    let y = run_first(
        scatter_nd,
        &n("none"),
        13,
        &[&m, &i64s(&[1, 1], &[-1]), &i32s(&[1, 2], &[9, 8])],
    );
    assert_eq!(y.unwrap(), i32s(&[2, 2], &[1, 2, 9, 8]));
    // Reductions over a repeated index.
    let v = i64s(&[3], &[1, 2, 3]);
    let idx = i64s(&[3, 1], &[0, 0, 2]);
    let upd = i64s(&[3], &[10, 20, 30]);
    let at = |r: &str, opset| run_first(scatter_nd, &n(r), opset, &[&v, &idx, &upd]);
    assert_eq!(at("add", 16).unwrap(), i64s(&[3], &[31, 2, 33]));
    assert_eq!(at("mul", 16).unwrap(), i64s(&[3], &[200, 2, 90]));
    assert_eq!(at("max", 18).unwrap(), i64s(&[3], &[20, 2, 30]));
    assert_eq!(at("min", 18).unwrap(), i64s(&[3], &[1, 2, 3]));
    assert_eq!(at("add", 13).unwrap(), i64s(&[3], &[20, 2, 30]));
    assert!(at("min", 16).unwrap_err().contains("exists from opset 18"));
}

#[test]
fn scatter_nd_errors() {
    let n = node("ScatterND", vec![]);
    let m = f32s(&[2, 2], &[0.; 4]);
    let e = run_first(
        scatter_nd,
        &n,
        18,
        &[&m, &i64s(&[1, 2], &[0, -3]), &f32s(&[1], &[1.])],
    );
    assert_eq!(
        e.unwrap_err(),
        "ScatterND: index -3 is out of range for axis 1 of size 2 (valid: [-2, 1])"
    );
    let e = run_first(
        scatter_nd,
        &n,
        18,
        &[&m, &i64s(&[1, 1], &[0]), &f32s(&[2], &[1., 2.])],
    );
    assert!(e.unwrap_err().contains("updates must have shape [1, 2]"));
    let e = run_first(
        scatter_nd,
        &n,
        18,
        &[&m, &i64s(&[1, 3], &[0; 3]), &f32s(&[1], &[1.])],
    );
    assert!(e.unwrap_err().contains("must be in [1, 2]"));
}

#[test]
fn inference() {
    let mut b = GraphBuilder::new("g", 18);
    let data = b.input(
        "data",
        DType::F32,
        vec![crate::builder::sym("B"), Dim::Known(3), Dim::Known(4)],
    );
    let idx = b.input("idx", DType::I64, dims(&[5, 2]));
    let idx3 = b.input("idx3", DType::I64, dims(&[2, 6, 4]));
    let batch = b.input(
        "batch",
        DType::I64,
        vec![crate::builder::sym("B"), Dim::Known(7), Dim::Known(1)],
    );
    let g = b.op("GatherND", &[data, idx], vec![]);
    let gb = b.op("GatherND", &[data, batch], vec![attr::int("batch_dims", 1)]);
    let ge = b.op("GatherElements", &[data, idx3], vec![attr::int("axis", 1)]);
    let upd = b.input("upd", DType::F32, dims(&[2, 6, 4]));
    let se = b.op("ScatterElements", &[data, idx3, upd], vec![]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    assert_eq!(
        ty(g),
        TensorType::new(DType::F32, vec![Dim::Known(5), Dim::Known(4)])
    );
    assert_eq!(
        ty(gb),
        TensorType::new(
            DType::F32,
            vec![crate::builder::sym("B"), Dim::Known(7), Dim::Known(4)]
        )
    );
    assert_eq!(ty(ge), TensorType::new(DType::F32, dims(&[2, 6, 4])));
    assert_eq!(ty(se), ty(data));
}
