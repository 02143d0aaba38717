//! Unit tests of sample.rs: values worked by hand.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    let op = super::super::resolve(n, opset).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, opset, &ins).map(|mut v| v.remove(0))
}

fn gs(mode: &str, padding: &str, align: i64) -> Node {
    node(
        "GridSample",
        vec![
            attr::string("mode", mode),
            attr::string("padding_mode", padding),
            attr::int("align_corners", align),
        ],
    )
}

#[test]
fn grid_sample_modes_and_padding() {
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let centre = f32s(&[1, 1, 1, 2], &[0., 0.]);
    let one = |v: f32| f32s(&[1, 1, 1, 1], &[v]);
    // The centre is x = y = 0.5 either way: the mean of the four, or (rounding half to even)
    // element [0, 0].
    assert_eq!(
        run(&gs("linear", "zeros", 0), 20, &[&x, &centre]),
        Ok(one(2.5))
    );
    assert_eq!(
        run(&gs("linear", "zeros", 1), 22, &[&x, &centre]),
        Ok(one(2.5))
    );
    assert_eq!(
        run(&gs("nearest", "zeros", 0), 20, &[&x, &centre]),
        Ok(one(1.))
    );
    // The outer corner (-1, -1) without align_corners is x = y = -0.5: half outside each way.
    let corner = f32s(&[1, 1, 1, 2], &[-1., -1.]);
    assert_eq!(
        run(&gs("linear", "zeros", 0), 20, &[&x, &corner]),
        Ok(one(0.25))
    );
    assert_eq!(
        run(&gs("linear", "border", 0), 20, &[&x, &corner]),
        Ok(one(1.))
    );
    assert_eq!(
        run(&gs("linear", "reflection", 0), 20, &[&x, &corner]),
        Ok(one(1.))
    );
    // Far outside: zeros reads 0, border the corner element, reflection folds back inside
    // (x = 3 on [0, 1] reflects to 1, y = -2 to 0 with align_corners; y = 1.5 rounds half
    // to even to 2 and reflects to 0).
    let far = f32s(&[1, 1, 1, 2], &[5., -5.]);
    assert_eq!(
        run(&gs("nearest", "zeros", 1), 20, &[&x, &far]),
        Ok(one(0.))
    );
    assert_eq!(
        run(&gs("nearest", "border", 1), 20, &[&x, &far]),
        Ok(one(2.))
    );
    assert_eq!(
        run(&gs("nearest", "reflection", 1), 20, &[&x, &far]),
        Ok(one(2.))
    );
    let below = f32s(&[1, 1, 1, 2], &[-1., 2.]);
    assert_eq!(
        run(&gs("nearest", "reflection", 1), 20, &[&x, &below]),
        Ok(one(1.))
    );
    // Cubic at an element centre is that element; version 16 spells it "bicubic".
    let first = f32s(&[1, 1, 1, 2], &[-1., -1.]);
    assert_eq!(
        run(&gs("cubic", "zeros", 1), 20, &[&x, &first]),
        Ok(one(1.))
    );
    assert_eq!(
        run(&gs("bicubic", "border", 1), 16, &[&x, &first]),
        Ok(one(1.))
    );
    assert_eq!(
        run(&gs("bilinear", "zeros", 1), 16, &[&x, &centre]),
        Ok(one(2.5))
    );
    // 1-D from 20: X [1, 1, 3], grid [1, 2, 1].
    let x1 = f64s(&[1, 1, 3], &[0., 10., 20.]);
    let g1 = f64s(&[1, 2, 1], &[-0.5, 1.]);
    assert_eq!(
        run(&gs("linear", "zeros", 1), 20, &[&x1, &g1]),
        Ok(f64s(&[1, 1, 2], &[5., 20.]))
    );
}

#[test]
fn grid_sample_errors() {
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let e = run(
        &gs("linear", "zeros", 0),
        16,
        &[&x, &f32s(&[1, 1, 1, 2], &[0., 0.])],
    );
    assert!(e.unwrap_err().contains("'mode' must be \"bilinear\""));
    let e = run(
        &gs("bilinear", "zeros", 0),
        20,
        &[&x, &f32s(&[1, 1, 1, 2], &[0., 0.])],
    );
    assert!(e.unwrap_err().contains("'mode' must be \"linear\""));
    let e = run(
        &gs("linear", "wrap", 0),
        20,
        &[&x, &f32s(&[1, 1, 1, 2], &[0., 0.])],
    );
    assert!(e.unwrap_err().contains("'padding_mode' must be"));
    let e = run(
        &gs("linear", "zeros", 0),
        20,
        &[&x, &f32s(&[1, 1, 1, 3], &[0.; 3])],
    );
    assert!(e
        .unwrap_err()
        .contains("grid must have shape [1, out..., 2]"));
    let x3 = f32s(&[1, 1, 1, 1, 1], &[1.]);
    let e = run(
        &gs("bilinear", "zeros", 0),
        16,
        &[&x3, &f32s(&[1, 1, 1, 1, 3], &[0.; 3])],
    );
    assert!(e.unwrap_err().contains("X must have rank 4"));
    let x9 = f32s(&[1; 11], &[1.]);
    let g9 = f32s(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 9], &[0.; 9]);
    let e = run(&gs("cubic", "zeros", 0), 20, &[&x9, &g9]).unwrap_err();
    assert!(
        e.contains("9 spatial axes give each point 4^9 neighbours"),
        "{e}"
    );
    assert!(run(&gs("linear", "zeros", 0), 20, &[&x9, &g9]).is_ok());
    let empty = f32s(&[1, 1, 0, 2], &[]);
    let e = run(
        &gs("linear", "border", 0),
        20,
        &[&empty, &f32s(&[1, 1, 1, 2], &[0., 0.])],
    );
    assert!(e.unwrap_err().contains("X has an empty spatial axis"));
    let xi = i64s(&[1, 1, 1, 1], &[1]);
    let e = run(
        &gs("linear", "zeros", 0),
        20,
        &[&xi, &f32s(&[1, 1, 1, 2], &[0., 0.])],
    );
    assert_eq!(
        e.unwrap_err(),
        "GridSample: element type int64 is not supported"
    );
}

#[test]
fn affine_grid_base_points() {
    let theta = f32s(&[1, 2, 3], &[1., 0., 0., 0., 1., 0.]);
    let size = i64s(&[4], &[1, 1, 2, 2]);
    let n = node("AffineGrid", vec![]);
    assert_eq!(
        run(&n, 20, &[&theta, &size]),
        Ok(f32s(
            &[1, 2, 2, 2],
            &[-0.5, -0.5, 0.5, -0.5, -0.5, 0.5, 0.5, 0.5]
        ))
    );
    // align_corners: the corners; a translation by theta's last column.
    let n = node("AffineGrid", vec![attr::int("align_corners", 1)]);
    let theta = f32s(&[1, 2, 3], &[1., 0., 1., 0., 2., 0.]);
    assert_eq!(
        run(&n, 20, &[&theta, &size]),
        Ok(f32s(&[1, 2, 2, 2], &[0., -2., 2., -2., 0., 2., 2., 2.]))
    );
    let e = run(&n, 20, &[&theta, &i64s(&[5], &[1, 1, 2, 2, 2])]).unwrap_err();
    assert!(e.contains("theta must have shape [1, 3, 4]"), "{e}");
    let e = run(&n, 20, &[&theta, &i64s(&[3], &[1, 1, 2])]).unwrap_err();
    assert!(e.contains("size must have 4"), "{e}");
}
