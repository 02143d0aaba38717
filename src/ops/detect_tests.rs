//! Unit tests of detect.rs: values worked by hand.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let op = super::super::resolve(n, opset).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, opset, ins).map(|mut v| v.remove(0))
}

#[test]
fn nms_selects_by_score_and_overlap() {
    let n = node("NonMaxSuppression", vec![]);
    // Box 1 overlaps box 0 by IoU 0.9 / 1.1; box 2 is far away.
    let boxes = f32s(
        &[1, 3, 4],
        &[0., 0., 1., 1., 0., 0.1, 1., 1.1, 0., 10., 1., 11.],
    );
    let scores = f32s(&[1, 1, 3], &[0.9, 0.95, 0.5]);
    let three = i64s(&[1], &[3]);
    let half = f32s(&[1], &[0.5]);
    let got = run(
        &n,
        11,
        &[Some(&boxes), Some(&scores), Some(&three), Some(&half)],
    );
    assert_eq!(got, Ok(i64s(&[2, 3], &[0, 0, 1, 0, 0, 2])));
    // A score threshold drops box 2; one box per class at most.
    let t = f32s(&[1], &[0.6]);
    let got = run(
        &n,
        10,
        &[
            Some(&boxes),
            Some(&scores),
            Some(&three),
            Some(&half),
            Some(&t),
        ],
    );
    assert_eq!(got, Ok(i64s(&[1, 3], &[0, 0, 1])));
    let one = i64s(&[1], &[1]);
    let got = run(
        &n,
        11,
        &[Some(&boxes), Some(&scores), Some(&one), Some(&half)],
    );
    assert_eq!(got, Ok(i64s(&[1, 3], &[0, 0, 1])));
    // Without max_output_boxes_per_class nothing is selected.
    let got = run(&n, 11, &[Some(&boxes), Some(&scores)]);
    assert_eq!(got, Ok(i64s(&[0, 3], &[])));
    // Centre format: the same boxes as [x, y, w, h].
    let c = node("NonMaxSuppression", vec![attr::int("center_point_box", 1)]);
    let centred = f32s(
        &[1, 3, 4],
        &[0.5, 0.5, 1., 1., 0.6, 0.5, 1., 1., 10.5, 0.5, 1., 1.],
    );
    let got = run(
        &c,
        11,
        &[Some(&centred), Some(&scores), Some(&three), Some(&half)],
    );
    assert_eq!(got, Ok(i64s(&[2, 3], &[0, 0, 1, 0, 0, 2])));
}

#[test]
fn nms_errors() {
    let n = node("NonMaxSuppression", vec![]);
    let boxes = f32s(&[1, 1, 4], &[0., 0., 1., 1.]);
    let scores = f32s(&[1, 1, 1], &[1.]);
    let one = i64s(&[1], &[1]);
    let e = run(
        &n,
        11,
        &[
            Some(&boxes),
            Some(&scores),
            Some(&one),
            Some(&f32s(&[1], &[1.5])),
        ],
    );
    assert_eq!(
        e.unwrap_err(),
        "NonMaxSuppression: iou_threshold 1.5 is outside [0, 1]"
    );
    let e = run(&n, 11, &[Some(&f32s(&[1, 1, 3], &[0.; 3])), Some(&scores)]);
    assert!(e.unwrap_err().contains("boxes must have shape"));
    let e = run(&n, 11, &[Some(&boxes), Some(&f32s(&[1, 1, 2], &[0.; 2]))]);
    assert!(e
        .unwrap_err()
        .contains("scores must have shape [1, classes, 1]"));
    let bad = node("NonMaxSuppression", vec![attr::int("center_point_box", 2)]);
    assert!(run(&bad, 11, &[Some(&boxes), Some(&scores)])
        .unwrap_err()
        .contains("'center_point_box' must be 0 or 1"));
}

#[test]
fn roi_align_half_pixel_and_max() {
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let rois = f32s(&[1, 4], &[0., 0., 1., 1.]);
    let bi = i64s(&[1], &[0]);
    let ins = [Some(&x), Some(&rois), Some(&bi)];
    let one = |v: f32| Ok(f32s(&[1, 1, 1, 1], &[v]));
    // half_pixel (16's default): the roi is [-0.5, 0.5]², its one sample at element [0, 0].
    let n = node("RoiAlign", vec![attr::int("sampling_ratio", 1)]);
    assert_eq!(run(&n, 16, &ins), one(1.));
    // Before 16 (output_half_pixel): the sample at (0.5, 0.5), the mean of all four.
    assert_eq!(run(&n, 10, &ins), one(2.5));
    // max: the largest weighted corner, 0.25 * 4.
    let m = node(
        "RoiAlign",
        vec![attr::int("sampling_ratio", 1), attr::string("mode", "max")],
    );
    assert_eq!(run(&m, 10, &ins), one(1.));
    let bad_batch = i64s(&[1], &[1]);
    let e = run(&n, 16, &[Some(&x), Some(&rois), Some(&bad_batch)]).unwrap_err();
    assert_eq!(e, "RoiAlign: batch index 1 is outside [0, 1)");
    let e = run(
        &n,
        16,
        &[Some(&x), Some(&f32s(&[1, 3], &[0.; 3])), Some(&bi)],
    )
    .unwrap_err();
    assert!(e.contains("rois must be [R, 4]"), "{e}");
    // A hostile sampling ratio is refused against the limits, not allocated.
    let huge = node("RoiAlign", vec![attr::int("sampling_ratio", 1 << 30)]);
    assert!(run(&huge, 16, &ins).is_err());
    let bad = node("RoiAlign", vec![attr::int("output_height", 0)]);
    assert!(run(&bad, 16, &ins)
        .unwrap_err()
        .contains("'output_height' must be positive"));
}

#[test]
fn max_unpool_scatters_at_indices() {
    let n = node(
        "MaxUnpool",
        vec![
            attr::ints("kernel_shape", &[1, 2]),
            attr::ints("strides", &[1, 2]),
        ],
    );
    let x = f32s(&[1, 1, 1, 2], &[5., 6.]);
    let i = i64s(&[1, 1, 1, 2], &[1, 2]);
    assert_eq!(
        run(&n, 11, &[Some(&x), Some(&i)]),
        Ok(f32s(&[1, 1, 1, 4], &[0., 5., 6., 0.]))
    );
    // output_shape: the unpooled [1, 4] at the origin of [2, 5].
    let os = i64s(&[4], &[1, 1, 2, 5]);
    assert_eq!(
        run(&n, 9, &[Some(&x), Some(&i), Some(&os)]),
        Ok(f32s(
            &[1, 1, 2, 5],
            &[0., 5., 6., 0., 0., 0., 0., 0., 0., 0.]
        ))
    );
    let far = i64s(&[1, 1, 1, 2], &[1, 4]);
    let e = run(&n, 11, &[Some(&x), Some(&far)]).unwrap_err();
    assert_eq!(
        e,
        "MaxUnpool: index 4 is outside the unpooled tensor [1, 1, 1, 4]"
    );
    let small = i64s(&[4], &[1, 1, 1, 3]);
    let e = run(&n, 11, &[Some(&x), Some(&i), Some(&small)]).unwrap_err();
    assert!(e.contains("at least the unpooled shape"), "{e}");
    let none = node("MaxUnpool", vec![]);
    assert!(run(&none, 11, &[Some(&x), Some(&i)])
        .unwrap_err()
        .contains("'kernel_shape' is required"));
}
