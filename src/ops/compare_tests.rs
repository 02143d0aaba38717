use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};
use crate::limits::Limits;

#[test]
fn comparisons_same_shape() {
    let a = f32s(&[4], &[1., 2., 3., f32::NAN]);
    let b = f32s(&[4], &[2., 2., 2., f32::NAN]);
    let want = |v: &[bool]| bools(&[4], v);
    assert_eq!(
        run1(equal, "Equal", &[&a, &b]).unwrap(),
        want(&[false, true, false, false])
    );
    assert_eq!(
        run1(less, "Less", &[&a, &b]).unwrap(),
        want(&[true, false, false, false])
    );
    assert_eq!(
        run1(less_or_equal, "LessOrEqual", &[&a, &b]).unwrap(),
        want(&[true, true, false, false])
    );
    assert_eq!(
        run1(greater, "Greater", &[&a, &b]).unwrap(),
        want(&[false, false, true, false])
    );
    assert_eq!(
        run1(greater_or_equal, "GreaterOrEqual", &[&a, &b]).unwrap(),
        want(&[false, true, true, false])
    );
}

#[test]
fn comparisons_broadcast_and_types() {
    // [2, 1] vs [3] -> [2, 3]
    let a = i64s(&[2, 1], &[1, 5]);
    let b = i64s(&[3], &[0, 1, 6]);
    assert_eq!(
        run1(less_or_equal, "LessOrEqual", &[&a, &b]).unwrap(),
        bools(&[2, 3], &[false, true, true, false, false, true])
    );
    let a = i32s(&[2, 2], &[-1, 0, 1, 2]);
    let b = i32s(&[], &[0]);
    assert_eq!(
        run1(greater_or_equal, "GreaterOrEqual", &[&a, &b]).unwrap(),
        bools(&[2, 2], &[false, true, true, true])
    );
    let a = f64s(&[1, 3], &[0.5, 1.5, 2.5]);
    let b = f64s(&[2, 1], &[1.0, 2.0]);
    assert_eq!(
        run1(greater, "Greater", &[&a, &b]).unwrap(),
        bools(&[2, 3], &[false, true, true, false, false, true])
    );
    // Equal takes bools; the orderings do not.
    let p = bools(&[3], &[true, false, true]);
    let q = bools(&[1], &[true]);
    assert_eq!(
        run1(equal, "Equal", &[&p, &q]).unwrap(),
        bools(&[3], &[true, false, true])
    );
    let e = run1(less, "Less", &[&p, &q]).unwrap_err();
    assert_eq!(e, "Less: element type bool is not supported");
}

#[test]
fn comparison_errors_and_empty() {
    let a = f32s(&[2], &[1., 2.]);
    let b = i64s(&[2], &[1, 2]);
    let e = run1(equal, "Equal", &[&a, &b]).unwrap_err();
    assert_eq!(e, "Equal: input types differ: float32 and int64");
    let c = f32s(&[3], &[1., 2., 3.]);
    let e = run1(greater, "Greater", &[&a, &c]).unwrap_err();
    assert!(
        e.starts_with("Greater:") && e.contains("[2]") && e.contains("[3]"),
        "{e}"
    );
    let e = run1(equal, "Equal", &[&a]).unwrap_err();
    assert_eq!(e, "Equal: missing required input 1");
    // Empty broadcasts against size 1 to empty.
    let z = f32s(&[0, 2], &[]);
    let one = f32s(&[1], &[1.]);
    assert_eq!(
        run1(less, "Less", &[&z, &one]).unwrap(),
        bools(&[0, 2], &[])
    );
    let mut n = Node::new("Equal", "");
    n.set_attr(attr::int("broadcast", 1));
    // The op's own kernel choice: a node with the legacy attributes gets the refusal.
    let legacy = super::super::resolve(&n, 6).unwrap().kernel();
    assert!(run_at(legacy, &n, 6, &[Some(&a), Some(&a)])
        .unwrap_err()
        .contains("legacy"));
}

#[test]
fn logical_ops() {
    let a = bools(&[2, 2], &[true, true, false, false]);
    let b = bools(&[2, 2], &[true, false, true, false]);
    assert_eq!(
        run1(and, "And", &[&a, &b]).unwrap(),
        bools(&[2, 2], &[true, false, false, false])
    );
    assert_eq!(
        run1(or, "Or", &[&a, &b]).unwrap(),
        bools(&[2, 2], &[true, true, true, false])
    );
    assert_eq!(
        run1(xor, "Xor", &[&a, &b]).unwrap(),
        bools(&[2, 2], &[false, true, true, false])
    );
    assert_eq!(
        run1(not, "Not", &[&a]).unwrap(),
        bools(&[2, 2], &[false, false, true, true])
    );
    // Broadcasting a [2] row over [2, 2].
    let row = bools(&[2], &[true, false]);
    assert_eq!(
        run1(and, "And", &[&a, &row]).unwrap(),
        bools(&[2, 2], &[true, false, false, false])
    );
    let f = f32s(&[2], &[1., 0.]);
    assert_eq!(
        run1(and, "And", &[&f, &f]).unwrap_err(),
        "And: element type float32 is not supported"
    );
    assert_eq!(
        run1(or, "Or", &[&row, &f]).unwrap_err(),
        "Or: input types differ: bool and float32"
    );
    assert_eq!(
        run1(not, "Not", &[&f]).unwrap_err(),
        "Not: element type float32 is not supported"
    );
    assert!(run1(xor, "Xor", &[&row, &bools(&[3], &[true; 3])]).is_err());
}

#[test]
fn where_selects_with_broadcast() {
    let c = bools(&[2, 2], &[true, false, false, true]);
    let x = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let y = f32s(&[2, 2], &[9., 8., 7., 6.]);
    assert_eq!(
        run1(where_, "Where", &[&c, &x, &y]).unwrap(),
        f32s(&[2, 2], &[1., 8., 7., 4.])
    );
    // condition [2, 1], X scalar, Y [3] -> [2, 3]
    let c = bools(&[2, 1], &[true, false]);
    let x = i64s(&[], &[-1]);
    let y = i64s(&[3], &[10, 20, 30]);
    assert_eq!(
        run1(where_, "Where", &[&c, &x, &y]).unwrap(),
        i64s(&[2, 3], &[-1, -1, -1, 10, 20, 30])
    );
    // bool X/Y, empty condition
    let c = bools(&[0], &[]);
    let t = bools(&[1], &[true]);
    assert_eq!(
        run1(where_, "Where", &[&c, &t, &t]).unwrap(),
        bools(&[0], &[])
    );
    // non-contiguous inputs take the general path
    let base = i32s(&[2, 2], &[1, 2, 3, 4]);
    let Tensor::I32(b) = &base else {
        unreachable!()
    };
    let xt = Tensor::I32(b.t().to_owned());
    let c = bools(&[2, 2], &[true, true, false, false]);
    let y = i32s(&[2, 2], &[0, 0, 0, 0]);
    assert_eq!(
        run1(where_, "Where", &[&c, &xt, &y]).unwrap(),
        i32s(&[2, 2], &[1, 3, 0, 0])
    );
}

#[test]
fn where_errors() {
    let c = bools(&[2], &[true, false]);
    let x = f32s(&[2], &[1., 2.]);
    let xi = i32s(&[2], &[1, 2]);
    assert_eq!(
        run1(where_, "Where", &[&x, &x, &x]).unwrap_err(),
        "Where: condition must be bool, got float32"
    );
    assert_eq!(
        run1(where_, "Where", &[&c, &x, &xi]).unwrap_err(),
        "Where: input types differ: float32 and int32"
    );
    let y3 = f32s(&[3], &[1., 2., 3.]);
    assert_eq!(
        run1(where_, "Where", &[&c, &x, &y3]).unwrap_err(),
        "Where: shapes [2], [2] and [3] cannot be broadcast together"
    );
    // Output size is checked before allocating.
    let node = Node::new("Where", "");
    let limits = Limits {
        max_tensor_bytes: 64,
    };
    let op = super::super::resolve(&node, 16).unwrap();
    let ctx = KernelCtx {
        node: &node,
        op: &*op,
        opset: 16,
        limits: &limits,
        prepared: None,
    };
    let c = bools(&[5, 1], &[true; 5]);
    let x = f32s(&[1, 5], &[0.; 5]);
    let e = where_(&ctx, &[Some(&c), Some(&x), Some(&x)]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
}
