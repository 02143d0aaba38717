//! Unit tests of reduce_more.rs: values worked by hand.

use super::super::common::test_util::*;
use super::super::lanes::run_node;
use crate::ir::{attr, Node};
use crate::tensor::Tensor;

/// Runs `op` at opset 18 with axes as input 1 (`None`: omitted) and `keepdims`.
fn red(op: &str, x: &Tensor, axes: Option<&[i64]>, keepdims: i64) -> Result<Tensor, String> {
    let n = node(op, vec![attr::int("keepdims", keepdims)]);
    run_at18(&n, x, axes)
}

fn run_at18(n: &Node, x: &Tensor, axes: Option<&[i64]>) -> Result<Tensor, String> {
    let a = axes.map(Tensor::from_i64s);
    run_node(n, 18, &[Some(x), a.as_ref()]).map(|mut v| v.remove(0))
}

fn x23() -> Tensor {
    f32s(&[2, 3], &[1., -2., 3., -4., 5., -6.])
}

#[test]
fn each_reduction_by_hand() {
    let x = x23();
    let ax1: Option<&[i64]> = Some(&[1]);
    assert_eq!(
        red("ReduceMax", &x, ax1, 1).unwrap(),
        f32s(&[2, 1], &[3., 5.])
    );
    assert_eq!(red("ReduceMin", &x, None, 0).unwrap(), f32s(&[], &[-6.]));
    let y = red("ReduceProd", &x, Some(&[0]), 0).unwrap();
    assert_eq!(y, f32s(&[3], &[-4., -10., -18.]));
    assert_eq!(
        red("ReduceL1", &x, ax1, 1).unwrap(),
        f32s(&[2, 1], &[6., 15.])
    );
    let y = red("ReduceL2", &x, ax1, 0).unwrap();
    assert_close(&y, &f32s(&[2], &[14f32.sqrt(), 77f32.sqrt()]), 1e-6);
    let y = red("ReduceSumSquare", &x, ax1, 0).unwrap();
    assert_eq!(y, f32s(&[2], &[14., 77.]));
    let p = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let y = red("ReduceLogSum", &p, Some(&[-1]), 0).unwrap();
    assert_close(&y, &f32s(&[2], &[3f32.ln(), 7f32.ln()]), 1e-6);
    let l = f64s(&[2, 2], &[0., 3f64.ln(), 2f64.ln(), 2f64.ln()]);
    let y = red("ReduceLogSumExp", &l, ax1, 0).unwrap();
    assert_close(&y, &f64s(&[2], &[4f64.ln(); 2]), 1e-15);
    // Large values do not overflow.
    let big = f32s(&[2], &[1000., 1000.]);
    let y = red("ReduceLogSumExp", &big, None, 0).unwrap();
    assert_close(&y, &f32s(&[], &[1000. + std::f32::consts::LN_2]), 1e-4);
    // Several axes, not trailing: axes 0 and 2 of [2, 2, 2].
    let c = f64s(&[2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let a02: Option<&[i64]> = Some(&[2, 0]);
    assert_eq!(red("ReduceMax", &c, a02, 0).unwrap(), f64s(&[2], &[6., 8.]));
    assert_eq!(
        red("ReduceProd", &c, a02, 1).unwrap(),
        f64s(&[1, 2, 1], &[60., 672.])
    );
}

#[test]
fn axes_attribute_before_18_and_noop() {
    let x = x23();
    let n = node("ReduceMax", vec![attr::ints("axes", &[0])]);
    let y = run_node(&n, 13, &[Some(&x)]).unwrap();
    assert_eq!(y[0], f32s(&[1, 3], &[1., 5., 3.]));
    // From 18 the attribute is not read: no axes input reduces everything.
    assert_eq!(run_at18(&n, &x, None).unwrap(), f32s(&[1, 1], &[5.]));
    let noop = node("ReduceMin", vec![attr::int("noop_with_empty_axes", 1)]);
    assert_eq!(run_at18(&noop, &x, None).unwrap(), x);
    assert_eq!(run_at18(&noop, &x, Some(&[])).unwrap(), x);
    // Before 18 there is no such attribute.
    let y = run_node(&noop, 13, &[Some(&x)]).unwrap();
    assert_eq!(y[0], f32s(&[1, 1], &[-6.]));
}

#[test]
fn empty_sets_reduce_to_the_identity() {
    let e = f32s(&[2, 0], &[]);
    let a: Option<&[i64]> = Some(&[1]);
    let inf = f32::INFINITY;
    let cases = [
        ("ReduceMax", -inf),
        ("ReduceMin", inf),
        ("ReduceProd", 1.),
        ("ReduceL1", 0.),
        ("ReduceL2", 0.),
        ("ReduceSumSquare", 0.),
        ("ReduceLogSum", -inf),
        ("ReduceLogSumExp", -inf),
    ];
    for (op, want) in cases {
        assert_eq!(red(op, &e, a, 0).unwrap(), f32s(&[2], &[want; 2]), "{op}");
    }
    let i = i64s(&[0], &[]);
    assert_eq!(
        red("ReduceMax", &i, None, 0).unwrap(),
        i64s(&[], &[i64::MIN])
    );
    assert_eq!(
        red("ReduceMin", &i, None, 0).unwrap(),
        i64s(&[], &[i64::MAX])
    );
    let b = bools(&[0], &[]);
    assert_eq!(red("ReduceMax", &b, None, 0).unwrap(), bools(&[], &[false]));
    assert_eq!(red("ReduceMin", &b, None, 0).unwrap(), bools(&[], &[true]));
    // Kept dims of size 0: an empty output.
    let y = red("ReduceMax", &f32s(&[0, 3], &[]), a, 1).unwrap();
    assert_eq!(y, f32s(&[0, 1], &[]));
}

#[test]
fn integers_bools_and_nan() {
    let w = i32s(&[2], &[65536, 65536]);
    assert_eq!(red("ReduceProd", &w, None, 0).unwrap(), i32s(&[], &[0]));
    let v = i32s(&[2], &[-3, 4]);
    assert_eq!(red("ReduceL1", &v, None, 0).unwrap(), i32s(&[], &[7]));
    assert_eq!(
        red("ReduceSumSquare", &v, None, 0).unwrap(),
        i32s(&[], &[25])
    );
    let v = i64s(&[2], &[3, 4]);
    assert_eq!(red("ReduceL2", &v, None, 0).unwrap(), i64s(&[], &[5]));
    // ln 2 = 0.69 truncates to 0.
    let z = i64s(&[2], &[0, 0]);
    assert_eq!(
        red("ReduceLogSumExp", &z, None, 0).unwrap(),
        i64s(&[], &[0])
    );
    let b = bools(&[2, 2], &[true, false, false, false]);
    let a: Option<&[i64]> = Some(&[1]);
    assert_eq!(
        red("ReduceMax", &b, a, 0).unwrap(),
        bools(&[2], &[true, false])
    );
    assert_eq!(
        red("ReduceMin", &b, a, 0).unwrap(),
        bools(&[2], &[false, false])
    );
    let e = red("ReduceProd", &b, a, 0).unwrap_err();
    assert_eq!(e, "ReduceProd: element type bool is not supported");
    // A NaN wins Max and Min wherever it is.
    for x in [[1., f32::NAN, 3.], [f32::NAN, 1., 3.], [1., 3., f32::NAN]] {
        let x = f32s(&[3], &x);
        assert!(red("ReduceMax", &x, None, 0).unwrap().to_f64_vec()[0].is_nan());
        assert!(red("ReduceMin", &x, None, 0).unwrap().to_f64_vec()[0].is_nan());
    }
}

#[test]
fn bad_axes() {
    let x = x23();
    let e = red("ReduceL1", &x, Some(&[1, -1]), 1).unwrap_err();
    assert_eq!(e, "ReduceL1: axis -1 appears more than once in [1, -1]");
    let e = red("ReduceMax", &x, Some(&[2]), 1).unwrap_err();
    assert!(
        e.starts_with("ReduceMax: axis 2 is out of range for rank 2"),
        "{e}"
    );
    let n = node("ReduceL2", vec![]);
    let f = f32s(&[1], &[1.]);
    let e = run_node(&n, 18, &[Some(&x), Some(&f)]).unwrap_err();
    assert_eq!(e, "ReduceL2: 'axes' must be int64, got float32");
}
