use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, sym, GraphBuilder};
use crate::ir::{attr, Node};
use crate::limits::Limits;
use crate::tensor::DType;

fn pad_node(mode: &str) -> Node {
    node("Pad", vec![attr::string("mode", mode)])
}

fn p(v: &[i64]) -> Tensor {
    Tensor::from_i64s(v)
}

#[test]
fn constant_pad_from_inputs() {
    // [[1, 2], [3, 4]], one column before and one row after, filled with 9.
    let x = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let c = f32s(&[], &[9.]);
    let y = run_first(pad, &pad_node("constant"), 13, &[&x, &p(&[0, 1, 1, 0]), &c]).unwrap();
    let want = [9., 1., 2., 9., 3., 4., 9., 9., 9.];
    assert_eq!(y, f32s(&[3, 3], &want));
    // Without constant_value: zeros; the default mode is constant.
    let y = run_first(pad, &node("Pad", vec![]), 11, &[&x, &p(&[1, 0, 0, 0])]).unwrap();
    assert_eq!(y, f32s(&[3, 2], &[0., 0., 1., 2., 3., 4.]));
}

#[test]
fn reflect_edge_and_wrap_on_one_axis() {
    let x = i32s(&[3], &[1, 2, 3]);
    let run = |mode: &str, pads: &[i64]| run_first(pad, &pad_node(mode), 19, &[&x, &p(pads)]);
    assert_eq!(
        run("reflect", &[2, 2]).unwrap(),
        i32s(&[7], &[3, 2, 1, 2, 3, 2, 1])
    );
    // Longer than the axis: the mirror repeats with period 2 * (3 - 1) (numpy's reading).
    assert_eq!(
        run("reflect", &[5, 0]).unwrap(),
        i32s(&[8], &[2, 1, 2, 3, 2, 1, 2, 3])
    );
    assert_eq!(
        run("edge", &[2, 1]).unwrap(),
        i32s(&[6], &[1, 1, 1, 2, 3, 3])
    );
    assert_eq!(
        run("wrap", &[4, 2]).unwrap(),
        i32s(&[9], &[3, 1, 2, 3, 1, 2, 3, 1, 2])
    );
    // A one-element axis reflects to itself.
    let one = i32s(&[1], &[7]);
    let y = run_first(pad, &pad_node("reflect"), 19, &[&one, &p(&[2, 1])]).unwrap();
    assert_eq!(y, i32s(&[4], &[7, 7, 7, 7]));
}

#[test]
fn wrap_matches_the_spec_example() {
    let x = f32s(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
    let y = run_first(pad, &pad_node("wrap"), 19, &[&x, &p(&[2, 1, 1, 1])]).unwrap();
    #[rustfmt::skip]
    let want = [
        3.4, 2.3, 3.4, 2.3,
        5.7, 4.5, 5.7, 4.5,
        1.2, 1.0, 1.2, 1.0,
        3.4, 2.3, 3.4, 2.3,
        5.7, 4.5, 5.7, 4.5,
        1.2, 1.0, 1.2, 1.0,
    ];
    assert_eq!(y, f32s(&[6, 4], &want));
}

#[test]
fn negative_pads_crop_then_pad() {
    let x = i64s(&[5], &[1, 2, 3, 4, 5]);
    let run = |mode: &str, pads: &[i64]| run_first(pad, &pad_node(mode), 18, &[&x, &p(pads)]);
    assert_eq!(
        run("constant", &[-1, 2]).unwrap(),
        i64s(&[6], &[2, 3, 4, 5, 0, 0])
    );
    assert_eq!(
        run("edge", &[-1, 2]).unwrap(),
        i64s(&[6], &[2, 3, 4, 5, 5, 5])
    );
    // Crop to [3, 4, 5], then mirror one at the end.
    assert_eq!(run("reflect", &[-2, 1]).unwrap(), i64s(&[4], &[3, 4, 5, 4]));
    assert_eq!(run("constant", &[-2, -3]).unwrap(), i64s(&[0], &[]));
}

#[test]
fn axes_input_from_18_and_attributes_before_11() {
    // Pad only the last axis of a [2, 3] int64 tensor.
    let x = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let c = i64s(&[1], &[-1]);
    let y = run_first(
        pad,
        &pad_node("constant"),
        18,
        &[&x, &p(&[1, 1]), &c, &p(&[-1])],
    )
    .unwrap();
    assert_eq!(y, i64s(&[2, 5], &[-1, 1, 2, 3, -1, -1, 4, 5, 6, -1]));
    // Pad 2: the `pads` and `value` attributes; Pad 1 calls them `paddings`.
    let x = f32s(&[2], &[1., 2.]);
    for (opset, name) in [(2, "pads"), (1, "paddings")] {
        let n = node(
            "Pad",
            vec![attr::ints(name, &[1, 2]), attr::float("value", 0.5)],
        );
        let y = run_first(pad, &n, opset, &[&x]).unwrap();
        assert_eq!(y, f32s(&[5], &[0.5, 1., 2., 0.5, 0.5]));
    }
}

#[test]
fn bool_and_two_axes_edge() {
    let x = bools(&[1], &[false]);
    let t = bools(&[], &[true]);
    let y = run_first(pad, &node("Pad", vec![]), 13, &[&x, &p(&[1, 1]), &t]).unwrap();
    assert_eq!(y, bools(&[3], &[true, false, true]));
    // Edge on both axes: corners take the corner element.
    let x = f64s(&[2, 2], &[1., 2., 3., 4.]);
    let y = run_first(pad, &pad_node("edge"), 13, &[&x, &p(&[1, 0, 0, 1])]).unwrap();
    let want = [1., 2., 2., 1., 2., 2., 3., 4., 4.];
    assert_eq!(y, f64s(&[3, 3], &want));
}

#[test]
fn bad_arguments_are_errors() {
    let x = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let n = pad_node("constant");
    let err = |n: &Node, opset: i64, ins: &[&Tensor]| run_first(pad, n, opset, ins).unwrap_err();
    assert_eq!(
        err(&n, 13, &[&x, &p(&[1, 1])]),
        "Pad: 'pads' has 2 values; 4 expected (begin and end for 2 axes)"
    );
    assert_eq!(
        err(&n, 13, &[&x, &p(&[0, -2, 0, -1])]),
        "Pad: axis 1 of size 2 padded by (-2, -1) has a negative or overflowing size"
    );
    assert_eq!(
        err(&n, 13, &[&x, &p(&[0, 0, i64::MAX, 0])]),
        "Pad: axis 0 of size 2 padded by (0, 9223372036854775807) has a negative or \
         overflowing size"
    );
    assert_eq!(
        err(&n, 13, &[&x, &p(&[0, 0, 0, 0]), &i64s(&[], &[1])]),
        "Pad: constant_value is int64 but the data is not"
    );
    assert_eq!(
        err(&n, 13, &[&x, &p(&[0, 0, 0, 0]), &f32s(&[2], &[1., 2.])]),
        "Pad: constant_value must have one element, got 2"
    );
    let axes = p(&[1, -1]);
    let e = err(&n, 18, &[&x, &p(&[0, 0, 0, 0]), &f32s(&[], &[0.]), &axes]);
    assert_eq!(e, "Pad: axis -1 appears more than once in [1, -1]");
    // Edge has nothing to repeat on an emptied axis.
    let e = err(&pad_node("edge"), 13, &[&x, &p(&[0, -2, 0, 1])]);
    assert_eq!(
        e,
        "Pad: mode Edge has no elements to repeat on an axis of size 2 padded by (-2, 1)"
    );
    // Over the size limit before anything is allocated.
    let big = p(&[0, 0, 1 << 40, 0]);
    assert!(err(&n, 13, &[&x, &big]).contains("over the"), "limit");
    // Parse errors: wrap before 19, unknown modes, missing pads attribute.
    let parse = |n: &Node, opset: i64| run_first(pad, n, opset, &[&x]).unwrap_err();
    assert!(parse(&pad_node("wrap"), 18).contains("mode 'wrap' is defined from opset 19"));
    assert!(parse(&pad_node("mirror"), 19).contains("mode 'mirror' is not supported"));
    assert!(parse(&pad_node("edge"), 7).contains("attribute 'pads' is required"));
}

#[test]
fn limits_are_checked_on_the_output() {
    let x = f32s(&[4], &[1., 2., 3., 4.]);
    let limits = Limits {
        max_tensor_bytes: 32,
    };
    let n = pad_node("constant");
    let op = crate::ops::resolve(&n, 13).unwrap();
    let ctx = KernelCtx {
        node: &n,
        op: &*op,
        opset: 13,
        limits: &limits,
        prepared: None,
    };
    let pads = p(&[4, 0]);
    assert!(pad(&ctx, &[Some(&x), Some(&pads)]).is_ok());
    let pads = p(&[4, 1]);
    let e = pad(&ctx, &[Some(&x), Some(&pads)]).unwrap_err();
    assert!(e.contains("over the 32 byte limit"), "{e}");
}

#[test]
fn inference_from_constant_pads() {
    let mut b = GraphBuilder::new("g", 18);
    let x = b.input("X", DType::F32, vec![sym("N"), Dim::Known(3)]);
    let pads = b.initializer("pads", &p(&[2, 1, -2, 1]));
    let y = b.op("Pad", &[x, pads], vec![]);
    let dynamic = b.input("P", DType::I64, dims(&[4]));
    let z = b.op("Pad", &[x, dynamic], vec![]);
    let ax = b.initializer("axes", &p(&[1]));
    let pads2 = b.initializer("pads2", &p(&[1, 1]));
    let c = b.initializer("c", &f32s(&[], &[0.]));
    let w = b.op("Pad", &[x, pads2, c, ax], vec![]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    // Net zero on the symbolic axis keeps it; the known one grows by 2.
    assert_eq!(ty(y).shape, Some(vec![sym("N"), Dim::Known(5)]));
    assert_eq!(ty(y).dtype, Some(DType::F32));
    let s = ty(z).shape.unwrap();
    assert_eq!(s.len(), 2);
    assert!(s.iter().all(|d| !matches!(d, Dim::Known(_))), "{s:?}");
    assert_eq!(ty(w).shape, Some(vec![sym("N"), Dim::Known(5)]));
}
