use super::super::common::test_util::*;
use super::*;

#[test]
fn add_same_shape_and_broadcast() {
    let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f32s(&[2, 3], &[10., 20., 30., 40., 50., 60.]);
    let y = run1(add, "Add", &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[11., 22., 33., 44., 55., 66.]));
    // [2,3] + [3]
    let c = f32s(&[3], &[1., 0., -1.]);
    let y = run1(add, "Add", &[&a, &c]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[2., 2., 2., 5., 5., 5.]));
    // [2,1] + [1,3]
    let col = f32s(&[2, 1], &[1., 2.]);
    let row = f32s(&[1, 3], &[10., 20., 30.]);
    let y = run1(add, "Add", &[&col, &row]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[11., 21., 31., 12., 22., 32.]));
    // scalar on either side
    let s = f32s(&[], &[100.]);
    assert_eq!(
        run1(add, "Add", &[&s, &c]).unwrap(),
        f32s(&[3], &[101., 100., 99.])
    );
    assert_eq!(
        run1(add, "Add", &[&c, &s]).unwrap(),
        f32s(&[3], &[101., 100., 99.])
    );
    // a [1,1] operand broadcasting against a 1-D one raises the rank
    let one = f32s(&[1, 1], &[1.]);
    assert_eq!(
        run1(add, "Add", &[&c, &one]).unwrap(),
        f32s(&[1, 3], &[2., 1., 0.])
    );
}

#[test]
fn non_contiguous_inputs() {
    // A transposed (column-major) view of the same data goes through the Zip path.
    let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let at = match &a {
        Tensor::F32(x) => Tensor::F32(x.t().to_owned()),
        _ => unreachable!(),
    };
    let y = run1(sub, "Sub", &[&at, &a]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[0., 1., -1., 0.]));
}

#[test]
fn sub_mul_div_types() {
    let a = i64s(&[3], &[7, -7, 9]);
    let b = i64s(&[3], &[2, 2, -4]);
    assert_eq!(
        run1(sub, "Sub", &[&a, &b]).unwrap(),
        i64s(&[3], &[5, -9, 13])
    );
    assert_eq!(
        run1(mul, "Mul", &[&a, &b]).unwrap(),
        i64s(&[3], &[14, -14, -36])
    );
    // integer Div truncates toward zero
    assert_eq!(
        run1(div, "Div", &[&a, &b]).unwrap(),
        i64s(&[3], &[3, -3, -2])
    );
    let a = i32s(&[2], &[i32::MAX, i32::MIN]);
    let b = i32s(&[2], &[1, -1]);
    assert_eq!(
        run1(add, "Add", &[&a, &b]).unwrap(),
        i32s(&[2], &[i32::MIN, i32::MAX])
    );
    assert_eq!(
        run1(div, "Div", &[&a, &b]).unwrap(),
        i32s(&[2], &[i32::MAX, i32::MIN])
    );
    let a = f64s(&[2], &[1., -3.]);
    let b = f64s(&[2], &[4., 0.]);
    let y = run1(div, "Div", &[&a, &b]).unwrap();
    assert_eq!(y, f64s(&[2], &[0.25, f64::NEG_INFINITY]));
}

#[test]
fn int_div_by_zero_is_error() {
    let a = i32s(&[2], &[1, 2]);
    let b = i32s(&[2], &[1, 0]);
    let e = run1(div, "Div", &[&a, &b]).unwrap_err();
    assert!(e.contains("division by zero"), "{e}");
}

#[test]
fn errors() {
    let a = f32s(&[2, 3], &[0.; 6]);
    let b = f32s(&[4], &[0.; 4]);
    let e = run1(add, "Add", &[&a, &b]).unwrap_err();
    assert!(e.contains("[2, 3]") && e.contains("[4]"), "{e}");
    let c = i64s(&[3], &[0; 3]);
    let e = run1(mul, "Mul", &[&a, &c]).unwrap_err();
    assert!(e.contains("float32") && e.contains("int64"), "{e}");
    let t = bools(&[1], &[true]);
    let e = run1(add, "Add", &[&t, &t]).unwrap_err();
    assert!(e.contains("bool"), "{e}");
    let e = run1(sqrt, "Sqrt", &[&c]).unwrap_err();
    assert!(e.contains("int64"), "{e}");
    let node = crate::ir::Node::new("Add", "");
    let e = run_at(add, &node, 17, &[Some(&a)]).unwrap_err();
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn broadcast_output_limit() {
    let a = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1 << 16, 1])));
    let b = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1, 1 << 16])));
    let node = crate::ir::Node::new("Add", "");
    let limits = crate::limits::Limits {
        max_tensor_bytes: 1 << 20,
    };
    let op = crate::ops::resolve(&node, 17).unwrap();
    let ctx = KernelCtx {
        node: &node,
        op: &*op,
        opset: 17,
        limits: &limits,
        prepared: None,
    };
    let e = add(&ctx, &[Some(&a), Some(&b)]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn pow_types() {
    let x = f32s(&[3], &[2., 4., 9.]);
    let y = f32s(&[3], &[3., 0.5, 0.5]);
    assert_eq!(
        run1(pow, "Pow", &[&x, &y]).unwrap(),
        f32s(&[3], &[8., 2., 3.])
    );
    let e = i64s(&[], &[2]);
    assert_eq!(
        run1(pow, "Pow", &[&x, &e]).unwrap(),
        f32s(&[3], &[4., 16., 81.])
    );
    let b = i32s(&[3], &[2, -3, 5]);
    let e = i64s(&[3], &[10, 3, 0]);
    assert_eq!(
        run1(pow, "Pow", &[&b, &e]).unwrap(),
        i32s(&[3], &[1024, -27, 1])
    );
    let h = f64s(&[1], &[0.5]);
    assert_eq!(run1(pow, "Pow", &[&b, &h]).unwrap(), i32s(&[3], &[1, 0, 2]));
    // int32 overflow: an integer exponent wraps (3^21 mod 2^32), a float one saturates, as the
    // narrowing `as` does; an int64 base with a float exponent truncates toward zero.
    let three = i32s(&[1], &[3]);
    let e21 = i64s(&[1], &[21]);
    assert_eq!(
        run1(pow, "Pow", &[&three, &e21]).unwrap(),
        i32s(&[1], &[1_870_418_611])
    );
    let f21 = f32s(&[1], &[21.]);
    assert_eq!(
        run1(pow, "Pow", &[&three, &f21]).unwrap(),
        i32s(&[1], &[i32::MAX])
    );
    let big = i64s(&[2], &[10, -8]);
    let third = f64s(&[1], &[1. / 3.]);
    let r = run1(pow, "Pow", &[&big, &third]).unwrap();
    assert_eq!(r.dtype(), DType::I64);
    assert_eq!(r.to_i64_vec().unwrap(), vec![2, 0]);
    let neg = i32s(&[1], &[-1]);
    assert!(run1(pow, "Pow", &[&b, &neg])
        .unwrap_err()
        .contains("negative"));
}

#[test]
fn unary_math() {
    let x = f32s(&[3], &[-1., 0., 4.]);
    assert_eq!(run1(abs, "Abs", &[&x]).unwrap(), f32s(&[3], &[1., 0., 4.]));
    assert_eq!(
        run1(neg, "Neg", &[&x]).unwrap(),
        f32s(&[3], &[1., -0., -4.])
    );
    assert_eq!(
        run1(relu, "Relu", &[&x]).unwrap(),
        f32s(&[3], &[0., 0., 4.])
    );
    let i = i64s(&[3], &[-5, 0, 5]);
    assert_eq!(run1(relu, "Relu", &[&i]).unwrap(), i64s(&[3], &[0, 0, 5]));
    assert_eq!(run1(abs, "Abs", &[&i]).unwrap(), i64s(&[3], &[5, 0, 5]));
    assert_eq!(run1(neg, "Neg", &[&i]).unwrap(), i64s(&[3], &[5, 0, -5]));
    let p = f64s(&[3], &[1., 4., 0.25]);
    assert_eq!(
        run1(sqrt, "Sqrt", &[&p]).unwrap(),
        f64s(&[3], &[1., 2., 0.5])
    );
    let z = f64s(&[2], &[0., 1.]);
    assert_close(
        &run1(exp, "Exp", &[&z]).unwrap(),
        &f64s(&[2], &[1., std::f64::consts::E]),
        1e-15,
    );
    assert_close(
        &run1(log, "Log", &[&p]).unwrap(),
        &f64s(&[3], &[0., 4f64.ln(), -(4f64.ln())]),
        1e-15,
    );
    let s = f32s(&[3], &[0., 1000., -1000.]);
    assert_eq!(
        run1(sigmoid, "Sigmoid", &[&s]).unwrap(),
        f32s(&[3], &[0.5, 1., 0.])
    );
    assert_close(
        &run1(tanh, "Tanh", &[&s]).unwrap(),
        &f32s(&[3], &[0., 1., -1.]),
        0.0,
    );
}

#[test]
fn erf_matches_known_values() {
    // Values from Python's math.erf.
    let xs = [0.0, 1e-10, 0.1, 0.5, 1.0, -1.0, 2.4999, 2.5, 3.0, 5.9, 7.0];
    let want = [
        0.0,
        1.1283791670955126e-10,
        0.1124629160182849,
        0.5204998778130465,
        0.8427007929497149,
        -0.8427007929497149,
        0.9995928300996666,
        0.999593047982555,
        0.9999779095030014,
        0.9999999999999999,
        1.0,
    ];
    let y = run1(erf, "Erf", &[&f64s(&[xs.len()], &xs)]).unwrap();
    assert_close(&y, &f64s(&[want.len()], &want), 1e-15);
    let y = run1(erf, "Erf", &[&f32s(&[1], &[f32::NAN])]).unwrap();
    assert!(y.to_f64_vec()[0].is_nan());
}
