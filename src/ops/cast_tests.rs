//! Unit tests of cast.rs: BitCast on bit patterns worked by hand.

use ndarray::{ArrayD, IxDyn};

use super::super::common::test_util::*;
use super::super::resolve;
use super::*;
use crate::ir::attr;
use crate::onnx::proto::data_type as dt;

fn bitcast(to: i32, x: &Tensor) -> Result<Tensor, String> {
    let n = node("BitCast", vec![attr::int("to", i64::from(to))]);
    let k = resolve(&n, 26).map_err(|e| e.to_string())?.kernel();
    run_first(k, &n, 26, &[x])
}

#[test]
fn bitcast_rereads_the_bits() {
    let one = f32s(&[2], &[1.0, -2.0]);
    let bits = i32s(&[2], &[0x3f80_0000, 0xc000_0000_u32 as i32]);
    assert_eq!(bitcast(dt::INT32, &one).unwrap(), bits);
    assert_eq!(bitcast(dt::FLOAT, &bits).unwrap(), one);
    assert_eq!(
        bitcast(dt::INT64, &f64s(&[], &[1.0])).unwrap(),
        i64s(&[], &[0x3ff0_0000_0000_0000])
    );
    let m1 = Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[1]), vec![-1i8]).unwrap());
    let want = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[1]), vec![255u8]).unwrap());
    assert_eq!(bitcast(dt::UINT8, &m1).unwrap(), want);
    let t = bools(&[2], &[true, false]);
    let want = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[2]), vec![1u8, 0]).unwrap());
    assert_eq!(bitcast(dt::UINT8, &t).unwrap(), want);
}

#[test]
fn bitcast_refuses_other_widths_and_types() {
    let e = bitcast(dt::INT64, &f32s(&[1], &[1.0])).unwrap_err();
    assert!(e.contains("differ in width"), "{e}");
    let e = bitcast(dt::STRING, &f32s(&[1], &[1.0])).unwrap_err();
    assert!(e.contains("has no fixed bit width"), "{e}");
    let n = node("BitCast", vec![]);
    assert!(resolve(&n, 26).is_err());
    let n = node("BitCast", vec![attr::int("to", 6)]);
    assert!(resolve(&n, 25).is_err());
}
