//! Unit tests of quant_conv.rs: hand-worked convolutions of centered values (the sums in the
//! comments).

use super::super::common::test_util::*;
use super::*;
use crate::ir::attr;

fn u8s(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::U8(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}
fn i8s(shape: &[usize], v: &[i8]) -> Tensor {
    Tensor::I8(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

fn ci(
    attrs: Vec<crate::onnx::proto::AttributeProto>,
    ins: &[Option<&Tensor>],
) -> Result<Tensor, String> {
    run_at(conv_integer, &node("ConvInteger", attrs), 10, ins).map(|mut v| v.remove(0))
}

fn qlc(ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    run_at(qlinear_conv, &node("QLinearConv", vec![]), 10, ins).map(|mut v| v.remove(0))
}

#[test]
fn conv_integer_centers_and_pads_with_the_zero_point() {
    // x - 1 is 0..8 in 3x3, w - 1 is [[1, 2], [3, 4]]: Conv's [27, 37, 57, 67].
    let x = u8s(&[1, 1, 3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let w = u8s(&[1, 1, 2, 2], &[2, 3, 4, 5]);
    let (xz, wz) = (u8s(&[], &[1]), u8s(&[], &[1]));
    let y = ci(vec![], &[Some(&x), Some(&w), Some(&xz), Some(&wz)]).unwrap();
    assert_eq!(y, i32s(&[1, 1, 2, 2], &[27, 37, 57, 67]));
    // Padded by 1: the padding is x's zero point (centered 0). First row: 4·0, 3·0 + 4·1,
    // 3·1 + 4·2, 3·2; had the padding been a raw 0 (centered -1) these would differ.
    let pads = vec![attr::ints("pads", &[1, 1, 1, 1])];
    let y = ci(pads, &[Some(&x), Some(&w), Some(&xz), Some(&wz)]).unwrap();
    assert_eq!(y.shape(), &[1, 1, 4, 4]);
    assert_eq!(&y.to_f64_vec()[..4], &[0., 4., 11., 6.]);
    // No zero points: raw values.
    let y = ci(vec![], &[Some(&x), Some(&w)]).unwrap();
    // 1·2 + 2·3 + 4·4 + 5·5 = 49.
    assert_eq!(y.to_f64_vec()[0], 49.);
}

#[test]
fn conv_integer_per_channel_weight_zero_point_and_int8() {
    // w - [1, 2] = [4, 5] per output channel, x [3, 4].
    let x = u8s(&[1, 1, 1, 2], &[3, 4]);
    let w = u8s(&[2, 1, 1, 1], &[5, 7]);
    let wz = u8s(&[2], &[1, 2]);
    let y = ci(vec![], &[Some(&x), Some(&w), None, Some(&wz)]).unwrap();
    assert_eq!(y, i32s(&[1, 2, 1, 2], &[12, 16, 15, 20]));
    let x = i8s(&[1, 1, 1, 2], &[-3, 4]);
    let w = i8s(&[1, 1, 1, 1], &[-2]);
    let y = ci(vec![], &[Some(&x), Some(&w), Some(&i8s(&[], &[-1]))]).unwrap();
    assert_eq!(y, i32s(&[1, 1, 1, 2], &[4, -10]));
}

#[test]
fn conv_integer_refusals() {
    let x = u8s(&[1, 1, 1, 2], &[3, 4]);
    let w = u8s(&[2, 1, 1, 1], &[5, 7]);
    let e = ci(vec![], &[Some(&x), Some(&w), Some(&i8s(&[], &[0]))]).unwrap_err();
    assert!(
        e.contains("x's zero point type int8 differs from uint8"),
        "{e}"
    );
    let e = ci(
        vec![],
        &[Some(&x), Some(&w), None, Some(&u8s(&[3], &[0; 3]))],
    )
    .unwrap_err();
    assert!(e.contains("want a scalar or [2]"), "{e}");
    let e = ci(vec![], &[Some(&x), Some(&w), Some(&u8s(&[2], &[0; 2]))]).unwrap_err();
    assert!(
        e.contains("x's zero point has shape [2]; want a scalar"),
        "{e}"
    );
    let e = ci(vec![], &[Some(&f32s(&[1, 1, 1, 2], &[0.; 2])), Some(&w)]).unwrap_err();
    assert!(e.contains("x must be int8 or uint8"), "{e}");
    let w3 = u8s(&[1, 2, 1, 1], &[1, 1]);
    let e = ci(vec![], &[Some(&x), Some(&w3)]).unwrap_err();
    assert!(e.starts_with("ConvInteger: X has 1 channels"), "{e}");
}

#[test]
fn qlinear_conv_requantizes_per_channel_with_ties_to_even() {
    // x - 1 = [2, 3] (scale 0.5); w - [1, 2] = [4, 5] (scales [1, 0.5]); acc [[8, 12], [10,
    // 15]], plus B [2, 0] -> [[10, 14], [10, 15]]. Multipliers 0.5·1/2 = 0.25 and 0.125:
    // 2.5 -> 2, 3.5 -> 4, 1.25 -> 1, 1.875 -> 2; plus y_zero_point 10.
    let x = u8s(&[1, 1, 1, 2], &[3, 4]);
    let w = u8s(&[2, 1, 1, 1], &[5, 7]);
    let (xs, xz) = (f32s(&[], &[0.5]), u8s(&[], &[1]));
    let (ws, wz) = (f32s(&[2], &[1., 0.5]), u8s(&[2], &[1, 2]));
    let (ys, yz) = (f32s(&[], &[2.]), u8s(&[], &[10]));
    let b = i32s(&[2], &[2, 0]);
    let ins = [
        Some(&x),
        Some(&xs),
        Some(&xz),
        Some(&w),
        Some(&ws),
        Some(&wz),
        Some(&ys),
        Some(&yz),
        Some(&b),
    ];
    assert_eq!(qlc(&ins).unwrap(), u8s(&[1, 2, 1, 2], &[12, 14, 11, 12]));
    // int8 output saturates at 127.
    let yz8 = i8s(&[], &[126]);
    let mut ins8 = ins;
    ins8[7] = Some(&yz8);
    assert_eq!(
        qlc(&ins8).unwrap(),
        i8s(&[1, 2, 1, 2], &[127, 127, 127, 127])
    );
    // Errors: a B of the wrong type, a w_scale of the wrong length.
    let bf = f32s(&[2], &[0.; 2]);
    let mut bad = ins;
    bad[8] = Some(&bf);
    assert!(qlc(&bad)
        .unwrap_err()
        .contains("B must be int32 of shape [2]"));
    let ws3 = f32s(&[3], &[1.; 3]);
    let mut bad = ins;
    bad[4] = Some(&ws3);
    assert!(qlc(&bad).unwrap_err().contains("w_scale has 3 elements"));
}
