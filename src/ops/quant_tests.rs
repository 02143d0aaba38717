use super::super::common::test_util::*;
use super::*;
use crate::ir::attr;

fn u8s(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::U8(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn i8s(shape: &[usize], v: &[i8]) -> Tensor {
    Tensor::I8(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn q(
    opset: i64,
    attrs: Vec<crate::onnx::proto::AttributeProto>,
    ins: &[&Tensor],
) -> Result<Tensor, String> {
    run_first(quantize_linear, &node("QuantizeLinear", attrs), opset, ins)
}
fn dq(
    opset: i64,
    attrs: Vec<crate::onnx::proto::AttributeProto>,
    ins: &[&Tensor],
) -> Result<Tensor, String> {
    run_first(
        dequantize_linear,
        &node("DequantizeLinear", attrs),
        opset,
        ins,
    )
}

#[test]
fn quantize_per_tensor_ties_to_even_and_saturates() {
    let x = f32s(&[6], &[0., 2., 3., 1000., -254., -1000.]);
    let y = q(10, vec![], &[&x, &f32s(&[], &[2.]), &u8s(&[], &[128])]).unwrap();
    // 3 / 2 = 1.5 -> 2; 1000 / 2 + 128 -> 255; -254 / 2 + 128 = 1; -1000 -> 0.
    assert_eq!(y, u8s(&[6], &[128, 129, 130, 255, 1, 0]));
    // 2.5 -> 2 and -2.5 -> -2 (ties to even), int8 saturates at -128/127.
    let x = f32s(&[4], &[5., -5., 1000., -1000.]);
    let y = q(13, vec![], &[&x, &f32s(&[], &[2.]), &i8s(&[], &[0])]).unwrap();
    assert_eq!(y, i8s(&[4], &[2, -2, 127, -128]));
    // No zero point: uint8 with zero point 0.
    let y = q(13, vec![], &[&f32s(&[2], &[-3., 7.]), &f32s(&[], &[1.])]).unwrap();
    assert_eq!(y, u8s(&[2], &[0, 7]));
}

#[test]
fn quantize_per_axis_and_blocked() {
    // x [2, 3], axis 1 scales [1, 2, 4], zero points [0, 10, 20].
    let x = f32s(&[2, 3], &[1., 2., 4., -1., -2., -4.]);
    let y = q(
        13,
        vec![],
        &[&x, &f32s(&[3], &[1., 2., 4.]), &u8s(&[3], &[0, 10, 20])],
    )
    .unwrap();
    assert_eq!(y, u8s(&[2, 3], &[1, 11, 21, 0, 9, 19]));
    // Blocked: x [1, 5], block 2 on axis 1 -> scale [1, 3]: blocks {0,1} {2,3} {4}.
    let x = f32s(&[1, 5], &[2., 4., 6., 8., 10.]);
    let at = vec![attr::int("axis", 1), attr::int("block_size", 2)];
    let y = q(
        21,
        at.clone(),
        &[
            &x,
            &f32s(&[1, 3], &[1., 2., 10.]),
            &i8s(&[1, 3], &[0, 1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(y, i8s(&[1, 5], &[2, 4, 4, 5, 0]));
    // output_dtype without a zero point.
    let at2 = vec![attr::int("output_dtype", DType::I8.0 as i64)];
    let y = q(21, at2, &[&f32s(&[2], &[-3., 3.]), &f32s(&[], &[1.])]).unwrap();
    assert_eq!(y, i8s(&[2], &[-3, 3]));
}

#[test]
fn dequantize_modes() {
    let x = u8s(&[4], &[0, 3, 128, 255]);
    let y = dq(10, vec![], &[&x, &f32s(&[], &[2.]), &u8s(&[], &[128])]).unwrap();
    assert_eq!(y, f32s(&[4], &[-256., -250., 0., 254.]));
    // Per axis 0 on [2, 2].
    let x = i8s(&[2, 2], &[1, -1, 4, 8]);
    let at = vec![attr::int("axis", 0)];
    let y = dq(13, at, &[&x, &f32s(&[2], &[0.5, 2.]), &i8s(&[2], &[1, 0])]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[0., -1., 8., 16.]));
    // Blocked on axis 0: x [3, 1], block 2 -> scale [2, 1].
    let x = i8s(&[3, 1], &[1, 2, 3]);
    let at = vec![attr::int("axis", 0), attr::int("block_size", 2)];
    let y = dq(21, at, &[&x, &f32s(&[2, 1], &[1., 10.])]).unwrap();
    assert_eq!(y, f32s(&[3, 1], &[1., 2., 30.]));
    // int32 without zero point.
    let y = dq(13, vec![], &[&i32s(&[2], &[-7, 9]), &f32s(&[], &[0.5])]).unwrap();
    assert_eq!(y, f32s(&[2], &[-3.5, 4.5]));
}

#[test]
fn bad_parameters_are_errors() {
    let x = f32s(&[2, 3], &[0.; 6]);
    let e = q(13, vec![], &[&x, &f32s(&[2], &[1., 1.])]).unwrap_err();
    assert!(e.contains("neither per tensor nor per axis"), "{e}");
    let e = q(
        13,
        vec![],
        &[&x, &f32s(&[3], &[1.; 3]), &u8s(&[2], &[0, 0])],
    )
    .unwrap_err();
    assert_eq!(
        e,
        "QuantizeLinear: zero point shape [2] differs from scale shape [3]"
    );
    let at = vec![attr::int("axis", 1), attr::int("block_size", 2)];
    let e = q(21, at, &[&x, &f32s(&[2, 1], &[1.; 2])]).unwrap_err();
    assert!(
        e.contains("blocked by 2 on axis 1 (want dim 2 there"),
        "{e}"
    );
    let e = dq(
        13,
        vec![],
        &[&u8s(&[1], &[0]), &f32s(&[], &[1.]), &i8s(&[], &[0])],
    )
    .unwrap_err();
    assert!(e.contains("zero point type int8 differs"), "{e}");
    let n = node("QuantizeLinear", vec![attr::int("block_size", -1)]);
    assert!(super::super::resolve(&n, 21).is_err());
}

#[test]
fn dynamic_quantize_linear_formula() {
    // min -1 (with 0), max 2: scale 3/255, zero point round(1 / scale) = round(85) = 85.
    let x = f32s(&[3], &[-1., 0., 2.]);
    let out = run_at(
        dynamic_quantize_linear,
        &node("DynamicQuantizeLinear", vec![]),
        11,
        &[Some(&x)],
    )
    .unwrap();
    assert_eq!(out[0], u8s(&[3], &[0, 85, 255]));
    assert_close(&out[1], &f32s(&[], &[3. / 255.]), 1e-9);
    assert_eq!(out[2], u8s(&[], &[85]));
}

#[test]
fn matmul_integer_zero_points() {
    // A [2, 2] uint8 with per-row zero points [1, 2], B [2, 2] int8? no: same-type rule per input only.
    let a = u8s(&[2, 2], &[3, 4, 5, 6]);
    let b = u8s(&[2, 2], &[1, 2, 3, 4]);
    let mi = |ins: &[Option<&Tensor>]| {
        run_at(matmul_integer, &node("MatMulInteger", vec![]), 10, ins).map(|mut v| v.remove(0))
    };
    // (A - [[1],[2]]) = [[2, 3], [3, 4]]; (B - [1, 0] per column) = [[0, 2], [2, 4]].
    let y = mi(&[
        Some(&a),
        Some(&b),
        Some(&u8s(&[2], &[1, 2])),
        Some(&u8s(&[2], &[1, 0])),
    ])
    .unwrap();
    assert_eq!(y, i32s(&[2, 2], &[6, 16, 8, 22]));
    let y = mi(&[Some(&a), Some(&b)]).unwrap();
    assert_eq!(y, i32s(&[2, 2], &[15, 22, 23, 34]));
    let e = mi(&[Some(&a), Some(&b), Some(&u8s(&[3], &[0, 0, 0]))]).unwrap_err();
    assert!(
        e.contains("A's zero point has 3 elements; want 1 or 2"),
        "{e}"
    );
}

#[test]
fn qlinear_matmul_requantizes() {
    // a = [[2, 4]] zp 0 scale 0.5 -> [[1, 2]]; b = [[2], [2]] zp 0 scale 1 -> [[2], [2]].
    // real product 6; y_scale 4, y_zp 10 -> round(1.5) = 2 -> 12.
    let ins = [
        u8s(&[1, 2], &[2, 4]),
        f32s(&[], &[0.5]),
        u8s(&[], &[0]),
        u8s(&[2, 1], &[2, 2]),
        f32s(&[], &[1.]),
        u8s(&[], &[0]),
        f32s(&[], &[4.]),
        u8s(&[], &[10]),
    ];
    let r: Vec<&Tensor> = ins.iter().collect();
    let y = run_first(qlinear_matmul, &node("QLinearMatMul", vec![]), 10, &r).unwrap();
    assert_eq!(y, u8s(&[1, 1], &[12]));
}
