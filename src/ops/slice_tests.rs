use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node, ValueId};

fn with_outputs(mut n: Node, count: u32) -> Node {
    n.outputs = (0..count).map(|i| Some(ValueId(i))).collect();
    n
}

#[test]
fn slice_basic_defaults_and_clamping() {
    let x = iota(&[3, 4]);
    let n = node("Slice", vec![]);
    let s = |v: &[i64]| Tensor::from_i64s(v);
    // rows 0..2, cols 1..3
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[0, 1]), &s(&[2, 3]), &s(&[0, 1]), &s(&[1, 1])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[2, 2], &[1., 2., 5., 6.]));
    // Default axes (leading) and steps; end past the end clamps.
    let y = run_first(slice, &n, 13, &[&x, &s(&[1]), &s(&[i64::MAX])]).unwrap();
    assert_eq!(y, f32s(&[2, 4], &[4., 5., 6., 7., 8., 9., 10., 11.]));
    // Negative axis and negative start/end.
    let y = run_first(slice, &n, 13, &[&x, &s(&[-3]), &s(&[-1]), &s(&[-1])]).unwrap();
    assert_eq!(y, f32s(&[3, 2], &[1., 2., 5., 6., 9., 10.]));
    // Start past the end: empty.
    let y = run_first(slice, &n, 13, &[&x, &s(&[10]), &s(&[20]), &s(&[1])]).unwrap();
    assert_eq!(y.shape(), &[3, 0]);
    // Step 2 with int32 starts/ends.
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &i32s(&[1], &[0]), &i32s(&[1], &[4]), &s(&[1]), &s(&[3])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[3, 2], &[0., 3., 4., 7., 8., 11.]));
}

#[test]
fn slice_negative_steps() {
    let x = iota(&[5]);
    let n = node("Slice", vec![]);
    let s = |v: &[i64]| Tensor::from_i64s(v);
    // Whole axis reversed: start -1, end INT64_MIN.
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[-1]), &s(&[i64::MIN]), &s(&[0]), &s(&[-1])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[5], &[4., 3., 2., 1., 0.]));
    // 4, 2 (stop before 1)
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[10]), &s(&[1]), &s(&[0]), &s(&[-2])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[2], &[4., 2.]));
    // 3, 0 (end -10 clamps to -1: runs through index 0)
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[3]), &s(&[-10]), &s(&[0]), &s(&[-3])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[2], &[3., 0.]));
    // start <= end with a negative step: empty
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[1]), &s(&[3]), &s(&[0]), &s(&[-1])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[0], &[]));
    // A huge negative step takes just the start.
    let y = run_first(
        slice,
        &n,
        13,
        &[&x, &s(&[2]), &s(&[i64::MIN]), &s(&[0]), &s(&[i64::MIN])],
    )
    .unwrap();
    assert_eq!(y, f32s(&[1], &[2.]));
    // An empty axis stays empty whatever the step.
    let z = f32s(&[0, 2], &[]);
    let y = run_first(
        slice,
        &n,
        13,
        &[&z, &s(&[-1]), &s(&[i64::MIN]), &s(&[0]), &s(&[-1])],
    )
    .unwrap();
    assert_eq!(y.shape(), &[0, 2]);
}

#[test]
fn slice_attribute_form_and_errors() {
    let x = iota(&[2, 3]);
    let n = node(
        "Slice",
        vec![
            attr::ints("starts", &[1]),
            attr::ints("ends", &[3]),
            attr::ints("axes", &[1]),
        ],
    );
    assert_eq!(
        run_first(slice, &n, 1, &[&x]).unwrap(),
        f32s(&[2, 2], &[1., 2., 4., 5.])
    );
    let p = node("Slice", vec![]);
    let s = |v: &[i64]| Tensor::from_i64s(v);
    let e = run_first(slice, &p, 13, &[&x, &s(&[0]), &s(&[1]), &s(&[0]), &s(&[0])]).unwrap_err();
    assert_eq!(e, "Slice: step for axis 0 is 0");
    let e = run_first(slice, &p, 13, &[&x, &s(&[0, 0]), &s(&[1])]).unwrap_err();
    assert!(e.contains("same length"), "{e}");
    let e = run_first(slice, &p, 13, &[&x, &s(&[0, 0]), &s(&[1, 1]), &s(&[1, -1])]).unwrap_err();
    assert!(e.contains("more than once"), "{e}");
    let e = run_first(slice, &p, 13, &[&x, &s(&[0]), &s(&[1]), &s(&[2])]).unwrap_err();
    assert!(e.contains("out of range"), "{e}");
    let e = run_first(slice, &p, 13, &[&x, &s(&[0])]).unwrap_err();
    assert_eq!(e, "Slice: missing required input 2");
}

#[test]
fn split_by_sizes_equal_and_num_outputs() {
    let x = iota(&[2, 5]);
    let n = node("Split", vec![attr::int("axis", 1)]);
    let out = run_at(
        split,
        &n,
        13,
        &[Some(&x), Some(&Tensor::from_i64s(&[2, 0, 3]))],
    )
    .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], f32s(&[2, 2], &[0., 1., 5., 6.]));
    assert_eq!(out[1].shape(), &[2, 0]);
    assert_eq!(out[2], f32s(&[2, 3], &[2., 3., 4., 7., 8., 9.]));
    // Opset 11: sizes as an attribute, negative axis.
    let n = with_outputs(
        node(
            "Split",
            vec![attr::int("axis", -1), attr::ints("split", &[4, 1])],
        ),
        2,
    );
    let out = run_at(split, &n, 11, &[Some(&x)]).unwrap();
    assert_eq!(out[1], f32s(&[2, 1], &[4., 9.]));
    // Equal parts: one per output.
    let y = iota(&[6]);
    let n = with_outputs(node("Split", vec![]), 3);
    let out = run_at(split, &n, 13, &[Some(&y)]).unwrap();
    assert_eq!(
        out,
        vec![iota(&[2]), f32s(&[2], &[2., 3.]), f32s(&[2], &[4., 5.])]
    );
    // Opset 18 num_outputs, uneven: 7 -> 3, 3, 1.
    let z = iota(&[7]);
    let n = with_outputs(node("Split", vec![attr::int("num_outputs", 3)]), 3);
    let out = run_at(split, &n, 18, &[Some(&z)]).unwrap();
    let shapes: Vec<&[usize]> = out.iter().map(|t| t.shape()).collect();
    assert_eq!(shapes, vec![&[3][..], &[3], &[1]]);
    assert_eq!(out[2], f32s(&[1], &[6.]));
}

#[test]
fn split_errors() {
    let x = iota(&[5]);
    let n = with_outputs(node("Split", vec![]), 2);
    let e = run_at(
        split,
        &n,
        13,
        &[Some(&x), Some(&Tensor::from_i64s(&[2, 2]))],
    )
    .unwrap_err();
    assert_eq!(
        e,
        "Split: split sizes [2, 2] do not sum to the size 5 of axis 0"
    );
    let e = run_at(
        split,
        &n,
        13,
        &[Some(&x), Some(&Tensor::from_i64s(&[6, -1]))],
    )
    .unwrap_err();
    assert_eq!(e, "Split: negative split size -1");
    let e = run_at(split, &n, 13, &[Some(&x)]).unwrap_err();
    assert!(e.contains("cannot be split evenly into 2"), "{e}");
    let e = run_at(split, &n, 13, &[Some(&x), Some(&Tensor::from_i64s(&[5]))]).unwrap_err();
    assert!(
        e.contains("1 split sizes but the node has 2 outputs"),
        "{e}"
    );
    let k = with_outputs(node("Split", vec![attr::int("num_outputs", 3)]), 2);
    let e = run_at(split, &k, 18, &[Some(&x)]).unwrap_err();
    assert!(e.contains("num_outputs is 3"), "{e}");
    // 5 into 4 parts of 2 leaves nothing for the last: not a valid split.
    let k = with_outputs(node("Split", vec![attr::int("num_outputs", 4)]), 4);
    assert!(run_at(split, &k, 18, &[Some(&x)]).is_err());
    let k = with_outputs(node("Split", vec![attr::int("num_outputs", 2)]), 2);
    let e = run_at(
        split,
        &k,
        18,
        &[Some(&x), Some(&Tensor::from_i64s(&[2, 3]))],
    )
    .unwrap_err();
    assert!(e.contains("not both"), "{e}");
    let e = run_at(split, &n, 13, &[Some(&f32s(&[], &[1.]))]).unwrap_err();
    assert!(e.contains("scalar"), "{e}");
}
