//! Unit tests of deform.rs: values worked by hand.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let op = super::super::resolve(n, opset).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, opset, ins).map(|mut v| v.remove(0))
}

#[test]
fn deform_conv_offsets_mask_and_bias() {
    let n = node("DeformConv", vec![]);
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let w = f32s(&[1, 1, 1, 1], &[2.]);
    // Zero offsets: a plain 1x1 convolution.
    let zero = f32s(&[1, 2, 2, 2], &[0.; 8]);
    assert_eq!(
        run(&n, 19, &[Some(&x), Some(&w), Some(&zero)]),
        Ok(f32s(&[1, 1, 2, 2], &[2., 4., 6., 8.]))
    );
    // Every tap half an element to the right: the right neighbour outside reads 0.
    let right = f32s(&[1, 2, 2, 2], &[0., 0., 0., 0., 0.5, 0.5, 0.5, 0.5]);
    assert_eq!(
        run(&n, 22, &[Some(&x), Some(&w), Some(&right)]),
        Ok(f32s(&[1, 1, 2, 2], &[3., 2., 7., 4.]))
    );
    // Bias and mask.
    let b = f32s(&[1], &[1.]);
    let mask = f32s(&[1, 1, 2, 2], &[0.5; 4]);
    assert_eq!(
        run(
            &n,
            22,
            &[Some(&x), Some(&w), Some(&zero), Some(&b), Some(&mask)]
        ),
        Ok(f32s(&[1, 1, 2, 2], &[2., 3., 4., 5.]))
    );
    let e = run(
        &n,
        22,
        &[Some(&x), Some(&w), Some(&f32s(&[1, 2, 1, 1], &[0.; 2]))],
    );
    assert!(e
        .unwrap_err()
        .contains("offset must have shape [1, 2, 2, 2]"));
    let e = run(
        &n,
        22,
        &[Some(&f32s(&[1, 1, 2], &[0.; 2])), Some(&w), Some(&zero)],
    );
    assert!(e.unwrap_err().contains("only 2-D convolution"));
    let bad = node("DeformConv", vec![attr::int("group", 0)]);
    assert!(run(&bad, 22, &[Some(&x), Some(&w), Some(&zero)])
        .unwrap_err()
        .contains("'group' must be positive"));
}
