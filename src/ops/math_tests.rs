//! Unit tests of math.rs. Expected values are worked by hand (or, for the transcendental
//! functions, taken from Python's math module in float64), never from these kernels.

use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, sym, GraphBuilder};
use crate::ir::{attr, Dim};
use crate::onnx::proto::AttributeProto;

/// Runs the kernel the registry gives a default-domain `op` node with `attrs` at `opset`.
fn run_op(
    op: &str,
    attrs: Vec<AttributeProto>,
    opset: i64,
    inputs: &[&Tensor],
) -> Result<Tensor, String> {
    let n = node(op, attrs);
    let k = crate::ops::resolve(&n, opset)
        .map_err(|e| e.to_string())?
        .kernel();
    run_first(k, &n, opset, inputs)
}

fn unary(op: &str, x: &Tensor) -> Result<Tensor, String> {
    run_op(op, vec![], 22, &[x])
}

#[test]
fn trigonometry() {
    let cases: [(&str, f64, f64); 9] = [
        ("Tan", 0.5, 0.546_302_489_843_790_5),
        ("Asin", 0.5, std::f64::consts::FRAC_PI_6),
        ("Acos", 0.5, std::f64::consts::FRAC_PI_3),
        ("Atan", 1., std::f64::consts::FRAC_PI_4),
        ("Sinh", 1., 1.175_201_193_643_801_4),
        ("Cosh", 1., 1.543_080_634_815_243_7),
        ("Asinh", 1., 0.881_373_587_019_543),
        ("Acosh", 2., 1.316_957_896_924_816_6),
        ("Atanh", 0.5, 0.549_306_144_334_054_8),
    ];
    for (op, x, want) in cases {
        let y = unary(op, &f64s(&[1], &[x])).unwrap();
        assert_close(&y, &f64s(&[1], &[want]), 1e-15);
        let y = unary(op, &f32s(&[1], &[x as f32])).unwrap();
        assert_close(&y, &f32s(&[1], &[want as f32]), 1e-6);
        let e = unary(op, &i64s(&[1], &[1])).unwrap_err();
        assert_eq!(e, format!("{op}: element type int64 is not supported"));
    }
    // Outside the domain: NaN, not an error.
    let y = unary("Asin", &f32s(&[1], &[2.])).unwrap();
    assert!(y.to_f64_vec()[0].is_nan());
}

#[test]
fn integer_mod_takes_the_divisors_sign_and_fmod_the_dividends() {
    let x = i64s(&[6], &[-4, 7, 5, 4, -7, 8]);
    let y = i64s(&[6], &[2, -3, 8, -2, 3, 5]);
    let z = run_op("Mod", vec![], 13, &[&x, &y]).unwrap();
    assert_eq!(z, i64s(&[6], &[0, -2, 5, 0, 2, 3]));
    let fmod = || vec![attr::int("fmod", 1)];
    let z = run_op("Mod", fmod(), 13, &[&x, &y]).unwrap();
    assert_eq!(z, i64s(&[6], &[0, 1, 5, 0, -1, 3]));
    // Broadcast, and MIN % -1 without a trap.
    let x = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let z = run_op("Mod", vec![], 10, &[&x, &i32s(&[], &[3])]).unwrap();
    assert_eq!(z, i32s(&[2, 3], &[1, 2, 0, 1, 2, 0]));
    let m = i32s(&[1], &[i32::MIN]);
    let z = run_op("Mod", vec![], 13, &[&m, &i32s(&[1], &[-1])]).unwrap();
    assert_eq!(z, i32s(&[1], &[0]));
}

#[test]
fn float_mod() {
    let x = f64s(&[2], &[-4.5, 7.5]);
    let y = f64s(&[2], &[2., -2.]);
    let z = run_op("Mod", vec![attr::int("fmod", 1)], 13, &[&x, &y]).unwrap();
    assert_eq!(z, f64s(&[2], &[-0.5, 1.5]));
    let z = run_op("Mod", vec![], 28, &[&x, &y]).unwrap();
    assert_eq!(z, f64s(&[2], &[1.5, -0.5]));
    // fmod = 0 edge cases (opset 28): a zero result takes the divisor's sign; an infinite
    // divisor of the other sign is the result; a zero divisor or infinite dividend is NaN.
    let inf = f32::INFINITY;
    let x = f32s(&[6], &[-0., 0., -3., 3., 1., inf]);
    let y = f32s(&[6], &[2., -2., inf, inf, 0., 2.]);
    let z = run_op("Mod", vec![], 28, &[&x, &y]).unwrap();
    let v: Vec<f32> = z.as_f32().unwrap().iter().copied().collect();
    assert!(v[0] == 0. && v[0].is_sign_positive(), "{v:?}");
    assert!(v[1] == 0. && v[1].is_sign_negative(), "{v:?}");
    assert_eq!(&v[2..4], &[inf, 3.]);
    assert!(v[4].is_nan() && v[5].is_nan(), "{v:?}");
}

#[test]
fn mod_refuses_what_the_spec_leaves_undefined() {
    let x = f32s(&[1], &[1.]);
    let e = run_op("Mod", vec![], 13, &[&x, &x]).unwrap_err();
    assert_eq!(
        e,
        "Mod: fmod=0 on float32 inputs needs opset 28 (before it the spec requires fmod=1 for floats)"
    );
    let a = i64s(&[2], &[1, 2]);
    let e = run_op("Mod", vec![], 13, &[&a, &i64s(&[2], &[1, 0])]).unwrap_err();
    assert_eq!(e, "Mod: integer division by zero");
    let e = run_op("Mod", vec![attr::int("fmod", 2)], 13, &[&a, &a]).unwrap_err();
    assert_eq!(e, "attribute 'fmod' must be 0 or 1, got 2");
    let e = run_op("Mod", vec![], 13, &[&a, &i32s(&[1], &[1])]).unwrap_err();
    assert_eq!(e, "Mod: input types differ: int64 and int32");
    let e = run_op("Mod", vec![], 13, &[&a, &i64s(&[3], &[1, 2, 3])]).unwrap_err();
    assert!(e.contains("cannot be broadcast"), "{e}");
}

fn shift(dir: &str, opset: i64, x: &Tensor, s: &Tensor) -> Result<Tensor, String> {
    let attrs = vec![attr::string("direction", dir)];
    run_op("BitShift", attrs, opset, &[x, s])
}

#[test]
fn bit_shifts() {
    let x = i32s(&[3], &[16, 4, 1]);
    let s = i32s(&[3], &[1, 2, 3]);
    assert_eq!(shift("LEFT", 11, &x, &s).unwrap(), i32s(&[3], &[32, 16, 8]));
    assert_eq!(shift("RIGHT", 11, &x, &s).unwrap(), i32s(&[3], &[8, 1, 0]));
    // Bits shifted past the top are lost; counts of the width or more give 0.
    let x = i32s(&[3], &[1, 3, 5]);
    let s = i32s(&[3], &[31, 31, 32]);
    let want = i32s(&[3], &[i32::MIN, i32::MIN, 0]);
    assert_eq!(shift("LEFT", 28, &x, &s).unwrap(), want);
    let x = i64s(&[2], &[1, 1]);
    let s = i64s(&[2], &[40, 64]);
    let want = i64s(&[2], &[1 << 40, 0]);
    assert_eq!(shift("LEFT", 28, &x, &s).unwrap(), want);
    // Opset 28, signed: arithmetic right shift; a negative or too large count gives the sign
    // fill alone (-1 for a negative X, else 0).
    let x = i32s(&[4], &[-16, -16, 16, -16]);
    let s = i32s(&[4], &[2, 40, -1, -1]);
    let want = i32s(&[4], &[-4, -1, 0, -1]);
    assert_eq!(shift("RIGHT", 28, &x, &s).unwrap(), want);
    assert_eq!(
        shift("LEFT", 28, &x, &s).unwrap(),
        i32s(&[4], &[-64, 0, 0, 0])
    );
    // Before 28 the values are unsigned: -16 is 0xFFFF_FFF0, shifted logically.
    let x = i32s(&[1], &[-16]);
    assert_eq!(
        shift("RIGHT", 11, &x, &i32s(&[1], &[28])).unwrap(),
        i32s(&[1], &[15])
    );
    // Broadcast.
    let x = i64s(&[2, 2], &[1, 2, 3, 4]);
    assert_eq!(
        shift("LEFT", 11, &x, &i64s(&[], &[2])).unwrap(),
        i64s(&[2, 2], &[4, 8, 12, 16])
    );
}

#[test]
fn bit_shift_refusals() {
    let x = i32s(&[1], &[1]);
    let e = shift("UP", 11, &x, &x).unwrap_err();
    assert_eq!(
        e,
        "attribute 'direction' must be 'LEFT' or 'RIGHT', got 'UP'"
    );
    let e = run_op("BitShift", vec![], 11, &[&x, &x]).unwrap_err();
    assert_eq!(e, "attribute 'direction' is required");
    let f = f32s(&[1], &[1.]);
    let e = shift("LEFT", 11, &f, &f).unwrap_err();
    assert_eq!(e, "BitShift: element type float32 is not supported");
    let e = shift("LEFT", 11, &x, &i64s(&[1], &[1])).unwrap_err();
    assert_eq!(e, "BitShift: input types differ: int32 and int64");
}

#[test]
fn bitwise_ops() {
    let x = i32s(&[2], &[12, -1]);
    let y = i32s(&[2], &[10, 5]);
    let and = run_op("BitwiseAnd", vec![], 18, &[&x, &y]);
    assert_eq!(and.unwrap(), i32s(&[2], &[8, 5]));
    let or = run_op("BitwiseOr", vec![], 18, &[&x, &y]);
    assert_eq!(or.unwrap(), i32s(&[2], &[14, -1]));
    let xor = run_op("BitwiseXor", vec![], 18, &[&x, &y]);
    assert_eq!(xor.unwrap(), i32s(&[2], &[6, -6]));
    let x = i64s(&[2, 2], &[1, 2, 3, 4]);
    let and = run_op("BitwiseAnd", vec![], 18, &[&x, &i64s(&[], &[6])]);
    assert_eq!(and.unwrap(), i64s(&[2, 2], &[0, 2, 2, 4]));
    let not = run_op("BitwiseNot", vec![], 18, &[&i64s(&[3], &[0, -1, 5])]);
    assert_eq!(not.unwrap(), i64s(&[3], &[-1, 0, -6]));
    let b = bools(&[1], &[true]);
    let e = run_op("BitwiseNot", vec![], 18, &[&b]).unwrap_err();
    assert_eq!(e, "BitwiseNot: element type bool is not supported");
    let e = run_op("BitwiseOr", vec![], 18, &[&b, &b]).unwrap_err();
    assert_eq!(e, "BitwiseOr: element type bool is not supported");
}

fn variadic(op: &str, opset: i64, inputs: &[&Tensor]) -> Result<Tensor, String> {
    run_op(op, vec![], opset, inputs)
}

#[test]
fn min_max_sum_mean_broadcast_across_all_inputs() {
    let a = f32s(&[2, 1], &[1., 5.]);
    let b = f32s(&[3], &[3., 0., 4.]);
    let c = f32s(&[], &[2.]);
    let ins = [&a, &b, &c];
    let max = variadic("Max", 13, &ins).unwrap();
    assert_eq!(max, f32s(&[2, 3], &[3., 2., 4., 5., 5., 5.]));
    let min = variadic("Min", 13, &ins).unwrap();
    assert_eq!(min, f32s(&[2, 3], &[1., 0., 1., 2., 0., 2.]));
    let sum = variadic("Sum", 13, &ins).unwrap();
    assert_eq!(sum, f32s(&[2, 3], &[6., 3., 7., 10., 7., 11.]));
    let mean = variadic("Mean", 13, &ins).unwrap();
    let want = [2., 1., 7. / 3., 10. / 3., 7. / 3., 11. / 3.];
    assert_close(&mean, &f32s(&[2, 3], &want), 1e-6);
    // One input is a copy.
    assert_eq!(variadic("Mean", 13, &[&b]).unwrap(), b);
    assert_eq!(variadic("Max", 13, &[&b]).unwrap(), b);
    // Integers for Min/Max (12).
    let x = i64s(&[2], &[3, -2]);
    let y = i64s(&[2], &[1, 4]);
    assert_eq!(variadic("Max", 12, &[&x, &y]).unwrap(), i64s(&[2], &[3, 4]));
    assert_eq!(
        variadic("Min", 12, &[&x, &y]).unwrap(),
        i64s(&[2], &[1, -2])
    );
}

#[test]
fn min_max_propagate_nan() {
    let nan = f64::NAN;
    let a = f64s(&[3], &[nan, 1., 2.]);
    let b = f64s(&[3], &[0., nan, 1.]);
    for op in ["Max", "Min"] {
        let v = variadic(op, 13, &[&a, &b]).unwrap().to_f64_vec();
        assert!(v[0].is_nan() && v[1].is_nan(), "{op}: {v:?}");
        assert_eq!(v[2], if op == "Max" { 2. } else { 1. });
    }
}

#[test]
fn variadic_refusals() {
    let a = f32s(&[2, 1], &[1., 5.]);
    let b = f32s(&[3], &[3., 0., 4.]);
    // Before 8 the inputs must have one shape.
    let e = variadic("Max", 7, &[&a, &b]).unwrap_err();
    assert_eq!(
        e,
        "Max: input 1 has shape [3] but input 0 has [2, 1] (broadcasting needs opset 8)"
    );
    assert_eq!(
        variadic("Sum", 6, &[&b, &b]).unwrap(),
        f32s(&[3], &[6., 0., 8.])
    );
    let e = variadic("Max", 13, &[&b, &f32s(&[2], &[0., 0.])]).unwrap_err();
    assert!(e.contains("cannot be broadcast"), "{e}");
    let e = variadic("Min", 13, &[&b, &f64s(&[1], &[0.])]).unwrap_err();
    assert_eq!(e, "Min: input types differ: float32 and float64");
    let i = i32s(&[1], &[1]);
    let e = variadic("Sum", 13, &[&i, &i]).unwrap_err();
    assert_eq!(e, "Sum: element type int32 is not supported");
    let e = variadic("Mean", 13, &[]).unwrap_err();
    assert_eq!(e, "Mean: missing required input 0");
    assert!(variadic("Max", 5, &[&b]).is_err());
}

#[test]
fn inference_broadcasts_and_keeps_symbols() {
    let mut b = GraphBuilder::new("g", 18);
    let x = b.input(
        "x",
        DType::F32,
        vec![sym("B"), Dim::Known(1), Dim::Known(4)],
    );
    let y = b.input("y", DType::F32, dims(&[3, 1]));
    let i = b.input("i", DType::I64, dims(&[2, 3]));
    let j = b.input("j", DType::I64, dims(&[3]));
    let u = b.graph.new_value("u", TensorType::default());
    b.graph.inputs.push(u);
    let max = b.op("Max", &[x, y, x], vec![]);
    let mean = b.op("Mean", &[x], vec![]);
    let sh = b.op("BitShift", &[i, j], vec![attr::string("direction", "LEFT")]);
    let md = b.op("Mod", &[j, i], vec![]);
    let tan = b.op("Tan", &[x], vec![]);
    let unknown = b.op("Sum", &[x, u], vec![]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    let want = Some(vec![sym("B"), Dim::Known(3), Dim::Known(4)]);
    assert_eq!(ty(max).shape, want);
    assert_eq!(ty(max).dtype, Some(DType::F32));
    assert_eq!(ty(mean), ty(x));
    assert_eq!(ty(tan), ty(x));
    assert_eq!(ty(sh).shape, Some(dims(&[2, 3])));
    assert_eq!(ty(sh).dtype, Some(DType::I64));
    assert_eq!(ty(md).shape, Some(dims(&[2, 3])));
    assert_eq!(ty(unknown).dtype, Some(DType::F32));
    assert_eq!(ty(unknown).shape, None);
}
