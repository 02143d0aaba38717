//! Unit tests of arg.rs: values worked by hand.

use super::super::common::test_util::*;
use super::super::lanes::run_node;
use super::*;
use crate::builder::{dims, GraphBuilder};
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> KernelResult {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    run_node(n, opset, &ins)
}

fn one(n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
    run(n, opset, ins).map(|mut v| v.remove(0))
}

#[test]
fn argmax_argmin_axes_and_keepdims() {
    let x = f32s(&[2, 2], &[2., 1., 3., 10.]);
    let y = one(&node("ArgMax", vec![]), 13, &[&x]).unwrap();
    assert_eq!(y, i64s(&[1, 2], &[1, 1]));
    let n = node(
        "ArgMax",
        vec![attr::int("axis", 1), attr::int("keepdims", 0)],
    );
    assert_eq!(one(&n, 13, &[&x]).unwrap(), i64s(&[2], &[0, 1]));
    let n = node("ArgMin", vec![attr::int("axis", -1)]);
    assert_eq!(one(&n, 1, &[&x]).unwrap(), i64s(&[2, 1], &[1, 0]));
    // Strided lanes: axis 1 of [2, 3, 2].
    let x = i64s(&[2, 3, 2], &[5, 0, 7, 9, 1, 9, 0, 4, 0, 3, 8, 2]);
    let n = node(
        "ArgMax",
        vec![attr::int("axis", 1), attr::int("keepdims", 0)],
    );
    assert_eq!(one(&n, 13, &[&x]).unwrap(), i64s(&[2, 2], &[1, 1, 2, 0]));
}

#[test]
fn select_last_index_and_nan() {
    let x = i32s(&[4], &[1, 3, 3, 2]);
    let first = node("ArgMax", vec![]);
    let last = node("ArgMax", vec![attr::int("select_last_index", 1)]);
    assert_eq!(one(&first, 13, &[&x]).unwrap(), i64s(&[1], &[1]));
    assert_eq!(one(&last, 13, &[&x]).unwrap(), i64s(&[1], &[2]));
    // The attribute only exists from 12.
    assert_eq!(one(&last, 11, &[&x]).unwrap(), i64s(&[1], &[1]));
    let x = f64s(&[4], &[2., 1., 1., 2.]);
    let n = node("ArgMin", vec![attr::int("select_last_index", 1)]);
    assert_eq!(one(&n, 12, &[&x]).unwrap(), i64s(&[1], &[2]));
    // A NaN is the extreme either way; with select_last_index the last NaN.
    let x = f32s(&[4], &[1., f32::NAN, 5., f32::NAN]);
    assert_eq!(one(&first, 13, &[&x]).unwrap(), i64s(&[1], &[1]));
    assert_eq!(one(&last, 13, &[&x]).unwrap(), i64s(&[1], &[3]));
    let min = node("ArgMin", vec![]);
    assert_eq!(one(&min, 13, &[&x]).unwrap(), i64s(&[1], &[1]));
}

#[test]
fn arg_errors() {
    let n = node("ArgMax", vec![]);
    let e = one(&n, 13, &[&f32s(&[0, 2], &[])]).unwrap_err();
    assert_eq!(e, "ArgMax: axis 0 is empty: there is no index to return");
    let n2 = node("ArgMin", vec![attr::int("axis", 2)]);
    let e = one(&n2, 13, &[&f32s(&[1, 2], &[1., 2.])]).unwrap_err();
    assert!(
        e.starts_with("ArgMin: axis 2 is out of range for rank 2"),
        "{e}"
    );
    let e = one(&n, 13, &[&bools(&[2], &[true, false])]).unwrap_err();
    assert_eq!(e, "ArgMax: element type bool is not supported");
    let e = one(&n, 13, &[&f32s(&[], &[1.])]).unwrap_err();
    assert!(e.contains("out of range for rank 0"), "{e}");
}

#[test]
fn top_k_largest_smallest_ties_and_axes() {
    let x = f32s(&[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let k3 = Tensor::from_i64s(&[3]);
    let y = run(&node("TopK", vec![]), 11, &[&x, &k3]).unwrap();
    assert_eq!(y[0], f32s(&[3, 3], &[3., 2., 1., 7., 6., 5., 11., 10., 9.]));
    assert_eq!(y[1], i64s(&[3, 3], &[3, 2, 1, 3, 2, 1, 3, 2, 1]));
    let small = node("TopK", vec![attr::int("largest", 0)]);
    let y = run(&small, 11, &[&x, &k3]).unwrap();
    assert_eq!(y[0], f32s(&[3, 3], &[0., 1., 2., 4., 5., 6., 8., 9., 10.]));
    assert_eq!(y[1], i64s(&[3, 3], &[0, 1, 2, 0, 1, 2, 0, 1, 2]));
    // `largest` exists from 11: before, always the largest.
    let y = run(&small, 10, &[&x, &k3]).unwrap();
    assert_eq!(y[1], i64s(&[3, 3], &[3, 2, 1, 3, 2, 1, 3, 2, 1]));
    // Equal values in index order.
    let t = i64s(&[5], &[1, 3, 3, 2, 3]);
    let k2 = Tensor::from_i64s(&[2]);
    let y = run(&node("TopK", vec![]), 11, &[&t, &k2]).unwrap();
    assert_eq!((&y[0], &y[1]), (&i64s(&[2], &[3, 3]), &i64s(&[2], &[1, 2])));
    let y = run(&small, 11, &[&t, &k2]).unwrap();
    assert_eq!((&y[0], &y[1]), (&i64s(&[2], &[1, 2]), &i64s(&[2], &[0, 3])));
    // Axis 0 (strided), and NaN above every number.
    let x = f64s(&[3, 2], &[1., 5., 4., f64::NAN, 3., 3.]);
    let n = node("TopK", vec![attr::int("axis", 0)]);
    let y = run(&n, 11, &[&x, &k2]).unwrap();
    assert_eq!(y[1], i64s(&[2, 2], &[1, 1, 2, 0]));
    let v = y[0].to_f64_vec();
    assert!(
        v[0] == 4. && v[1].is_nan() && v[2] == 3. && v[3] == 5.,
        "{v:?}"
    );
    // k = 0, and the version-1 attribute.
    let y = run(&node("TopK", vec![]), 11, &[&x, &Tensor::from_i64s(&[0])]).unwrap();
    assert_eq!(y[0].shape(), &[3, 0]);
    let v1 = node("TopK", vec![attr::int("k", 1)]);
    let y = run(&v1, 1, &[&i32s(&[3], &[4, 9, 2])]).unwrap();
    assert_eq!((&y[0], &y[1]), (&i32s(&[1], &[9]), &i64s(&[1], &[1])));
}

#[test]
fn top_k_errors() {
    let x = f32s(&[3], &[1., 2., 3.]);
    let n = node("TopK", vec![]);
    let e = run(&n, 11, &[&x, &Tensor::from_i64s(&[4])]).unwrap_err();
    assert_eq!(e, "TopK: k = 4 is outside [0, 3] (the size of axis 0)");
    let e = run(&n, 11, &[&x, &Tensor::from_i64s(&[-1])]).unwrap_err();
    assert!(e.contains("k = -1 is outside"), "{e}");
    let e = run(&n, 11, &[&x, &Tensor::from_i64s(&[1, 2])]).unwrap_err();
    assert_eq!(
        e,
        "TopK: 'K' must be one int64 value, got int64 of shape [2]"
    );
    let e = run(&n, 11, &[&x]).unwrap_err();
    assert!(e.contains("missing required input 1"), "{e}");
    let e = run(&node("TopK", vec![]), 9, &[&x]).unwrap_err();
    assert!(e.contains("'k' is required before opset 10"), "{e}");
    let e = run(&n, 11, &[&bools(&[1], &[true]), &Tensor::from_i64s(&[1])]).unwrap_err();
    assert_eq!(e, "TopK: element type bool is not supported");
}

#[test]
fn inference_of_arg_and_top_k() {
    let mut b = GraphBuilder::new("g", 13);
    let x = b.input("x", DType::F32, vec![Dim::Sym("B".into()), Dim::Known(5)]);
    let k = b.initializer("k", &Tensor::from_i64s(&[2]));
    let am = b.op("ArgMax", &[x], vec![attr::int("axis", 1)]);
    let an = b.op("ArgMin", &[x], vec![attr::int("keepdims", 0)]);
    let tk = b.node("", "TopK", &[Some(x), Some(k)], 2, vec![]);
    let y = b.input("y", DType::F32, dims(&[4, 3]));
    let tu = b.node(
        "",
        "TopK",
        &[Some(y), Some(x)],
        2,
        vec![attr::int("axis", 0)],
    );
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    let b_ = Dim::Sym("B".into());
    assert_eq!(
        ty(am),
        TensorType::new(DType::I64, vec![b_.clone(), Dim::Known(1)])
    );
    assert_eq!(ty(an), TensorType::new(DType::I64, dims(&[5])));
    assert_eq!(
        ty(tk[0]),
        TensorType::new(DType::F32, vec![b_.clone(), Dim::Known(2)])
    );
    assert_eq!(
        ty(tk[1]),
        TensorType::new(DType::I64, vec![b_, Dim::Known(2)])
    );
    // K not known statically: that dim stays unknown (named), the others are kept.
    let s = ty(tu[0]).shape.unwrap();
    assert!(s[0].is_undecided() && s[1] == Dim::Known(3), "{s:?}");
}
