//! Unit tests of rearrange.rs: values worked by hand.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    let op = super::super::resolve(n, opset).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, opset, &ins).map(|mut v| v.remove(0))
}

#[test]
fn col2im_adds_overlapping_blocks() {
    let n = node("Col2Im", vec![]);
    // One 2x2 block filling a 2x2 image: a reshape.
    let x = f32s(&[1, 4, 1], &[1., 2., 3., 4.]);
    let img = i64s(&[2], &[2, 2]);
    let blk = i64s(&[2], &[2, 2]);
    assert_eq!(
        run(&n, 18, &[&x, &img, &blk]),
        Ok(f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]))
    );
    // Two 1x2 blocks overlapping on a 1x3 image: [a, b + c, d].
    let x = f32s(&[1, 2, 2], &[1., 2., 3., 4.]);
    let img = i64s(&[2], &[1, 3]);
    let blk = i64s(&[2], &[1, 2]);
    assert_eq!(
        run(&n, 18, &[&x, &img, &blk]),
        Ok(f32s(&[1, 1, 1, 3], &[1., 5., 4.]))
    );
    let e = run(&n, 18, &[&f32s(&[1, 2, 3], &[0.; 6]), &img, &blk]).unwrap_err();
    assert!(e.contains("number of blocks [1, 2] = 2, got 3"), "{e}");
    let e = run(&n, 18, &[&f32s(&[1, 3, 2], &[0.; 6]), &img, &blk]).unwrap_err();
    assert!(e.contains("not a multiple of prod(block_shape) = 2"), "{e}");
    let bad = node("Col2Im", vec![attr::ints("strides", &[0, 1])]);
    let e = run(&bad, 18, &[&x, &img, &blk]).unwrap_err();
    assert!(e.contains("'strides' values must be >= 1"), "{e}");
}

#[test]
fn center_crop_pad_centres() {
    let n = node("CenterCropPad", vec![]);
    let x = i32s(&[4], &[1, 2, 3, 4]);
    let to = |v: i64| run(&n, 18, &[&x, &i64s(&[1], &[v])]);
    assert_eq!(to(2), Ok(i32s(&[2], &[2, 3])));
    assert_eq!(to(3), Ok(i32s(&[3], &[1, 2, 3])));
    assert_eq!(to(6), Ok(i32s(&[6], &[0, 1, 2, 3, 4, 0])));
    assert_eq!(to(5), Ok(i32s(&[5], &[1, 2, 3, 4, 0])));
    let e = to(-1).unwrap_err();
    assert!(e.contains("negative"), "{e}");
    // Axes: only axis 1 of [2, 3] cropped to 1.
    let n = node("CenterCropPad", vec![attr::ints("axes", &[-1])]);
    let x = bools(&[2, 3], &[true, false, true, false, true, false]);
    assert_eq!(
        run(&n, 18, &[&x, &i64s(&[1], &[1])]),
        Ok(bools(&[2, 1], &[false, true]))
    );
    let e = run(&n, 18, &[&x, &i64s(&[2], &[1, 1])]).unwrap_err();
    assert!(e.contains("2 values for 1 axes"), "{e}");
}
