use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node};
use crate::limits::Limits;
use crate::onnx::tensor::from_tensor;

fn run_small(k: super::super::Kernel, n: &Node, ins: &[&Tensor]) -> Result<Vec<Tensor>, String> {
    let limits = Limits {
        max_tensor_bytes: 1024,
    };
    let op = crate::ops::resolve(n, 17).map_err(|e| format!("{e:?}"))?;
    let ctx = KernelCtx {
        node: n,
        op: &*op,
        opset: 17,
        limits: &limits,
        prepared: None,
    };
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    k(&ctx, &ins)
}

#[test]
fn gather_axis0_embedding_lookup() {
    // A [4, 2] table indexed by [2, 3] ids gives [2, 3, 2].
    let table = iota(&[4, 2]);
    let ids = i64s(&[2, 3], &[0, 3, 1, -1, 2, -4]);
    let y = run_first(gather, &node("Gather", vec![]), 13, &[&table, &ids]).unwrap();
    assert_eq!(
        y,
        f32s(
            &[2, 3, 2],
            &[0., 1., 6., 7., 2., 3., 6., 7., 4., 5., 0., 1.]
        )
    );
}

#[test]
fn gather_inner_axis_scalar_and_int32_indices() {
    let x = i64s(&[2, 3], &[10, 11, 12, 20, 21, 22]);
    let n = node("Gather", vec![attr::int("axis", -1)]);
    // Scalar index drops the axis.
    let y = run_first(gather, &n, 13, &[&x, &i32s(&[], &[2])]).unwrap();
    assert_eq!(y, i64s(&[2], &[12, 22]));
    let y = run_first(gather, &n, 13, &[&x, &i32s(&[2], &[-3, 1])]).unwrap();
    assert_eq!(y, i64s(&[2, 2], &[10, 11, 20, 21]));
    // Empty indices give an empty axis.
    let y = run_first(gather, &n, 13, &[&x, &i64s(&[0], &[])]).unwrap();
    assert_eq!(y, i64s(&[2, 0], &[]));
    // Bool data works too, and a non-contiguous input.
    let b = bools(&[2, 2], &[true, false, false, false]);
    let Tensor::Bool(ba) = &b else { unreachable!() };
    let bt = Tensor::Bool(ba.t().to_owned());
    let n0 = node("Gather", vec![]);
    assert_eq!(
        run_first(gather, &n0, 13, &[&bt, &i64s(&[1], &[1])]).unwrap(),
        bools(&[1, 2], &[false, false])
    );
}

#[test]
fn gather_errors() {
    let x = iota(&[3, 2]);
    let n = node("Gather", vec![]);
    let e = run_first(gather, &n, 13, &[&x, &i64s(&[2], &[0, 3])]).unwrap_err();
    assert_eq!(
        e,
        "Gather: index 3 is out of range for axis 0 of size 3 (valid: [-3, 2])"
    );
    let e = run_first(gather, &n, 13, &[&x, &i64s(&[1], &[-4])]).unwrap_err();
    assert!(e.contains("index -4"), "{e}");
    let e = run_first(gather, &n, 13, &[&x, &i64s(&[1], &[i64::MIN])]).unwrap_err();
    assert!(e.contains("out of range"), "{e}");
    let e = run_first(gather, &n, 13, &[&x, &f32s(&[1], &[0.])]).unwrap_err();
    assert_eq!(e, "Gather: indices must be int32 or int64, got float32");
    let bad_axis = node("Gather", vec![attr::int("axis", 2)]);
    assert!(run_first(gather, &bad_axis, 13, &[&x, &i64s(&[1], &[0])])
        .unwrap_err()
        .contains("axis 2"));
    let e = run_first(gather, &n, 13, &[&f32s(&[], &[1.]), &i64s(&[], &[0])]).unwrap_err();
    assert!(e.contains("rank >= 1"), "{e}");
    // Output limit: 300 indices of a [1, 1] row are 1200 bytes, over 1024.
    let e = run_small(gather, &n, &[&iota(&[1, 1]), &i64s(&[300], &[0; 300])]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn expand_bidirectional() {
    let x = f32s(&[3, 1], &[1., 2., 3.]);
    let n = node("Expand", vec![]);
    let y = run_first(expand, &n, 13, &[&x, &Tensor::from_i64s(&[2, 1, 2])]).unwrap();
    assert_eq!(
        y,
        f32s(
            &[2, 3, 2],
            &[1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.]
        )
    );
    // A shape of lower rank with 1s keeps the input dims.
    let y = run_first(expand, &n, 13, &[&x, &Tensor::from_i64s(&[1])]).unwrap();
    assert_eq!(y, x);
    let y = run_first(
        expand,
        &n,
        13,
        &[&i64s(&[], &[7]), &Tensor::from_i64s(&[2])],
    )
    .unwrap();
    assert_eq!(y, i64s(&[2], &[7, 7]));
    let row = f32s(&[1, 3], &[1., 2., 3.]);
    let y = run_first(expand, &n, 13, &[&row, &Tensor::from_i64s(&[0, 1])]).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
}

/// The run-copying path (float32, trailing runs of ≥ 16 elements) gives what broadcasting element
/// by element gives: a KV cache repeated for grouped heads, broadcast leading and middle dims,
/// several broadcast dims, an empty output.
#[test]
fn expand_by_runs_matches_elementwise_broadcast() {
    let n = node("Expand", vec![]);
    let cases: [(&[usize], &[i64]); 5] = [
        (&[2, 3, 1, 5, 4], &[1, 1, 4, 1, 1]),
        (&[4, 16], &[3, 1, 1]),
        (&[1, 2, 1, 32], &[2, 2, 3, 32]),
        (&[3, 1, 1, 4, 5], &[3, 2, 2, 4, 5]),
        (&[0, 1, 16], &[0, 2, 16]),
    ];
    for (shape, target) in cases {
        let x = iota(shape);
        let y = run_first(expand, &n, 13, &[&x, &Tensor::from_i64s(target)]).unwrap();
        let Tensor::F32(a) = &x else { unreachable!() };
        let out: Vec<usize> = y.shape().to_vec();
        let want = a.broadcast(IxDyn(&out)).unwrap().to_owned();
        assert_eq!(y, Tensor::F32(want), "{shape:?} to {target:?}");
    }
}

#[test]
fn expand_errors() {
    let x = f32s(&[3], &[1., 2., 3.]);
    let n = node("Expand", vec![]);
    let e = run_first(expand, &n, 13, &[&x, &Tensor::from_i64s(&[2, 2])]).unwrap_err();
    assert_eq!(
        e,
        "Expand: input of shape [3] cannot be expanded to shape [2, 2]"
    );
    let e = run_first(expand, &n, 13, &[&x, &Tensor::from_i64s(&[-1, 3])]).unwrap_err();
    assert!(e.contains("negative dimension -1"), "{e}");
    let e = run_first(
        expand,
        &n,
        13,
        &[&x, &Tensor::from_i64s(&[1 << 40, 1 << 40, 3])],
    )
    .unwrap_err();
    assert!(e.contains("Expand"), "{e}");
    let e = run_small(expand, &n, &[&x, &Tensor::from_i64s(&[100, 3])]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn flatten_axes() {
    let x = iota(&[2, 3, 4]);
    let f = |axis: i64| {
        let n = node("Flatten", vec![attr::int("axis", axis)]);
        run_first(flatten, &n, 13, &[&x]).map(|t| t.shape().to_vec())
    };
    assert_eq!(f(0).unwrap(), vec![1, 24]);
    assert_eq!(f(1).unwrap(), vec![2, 12]);
    assert_eq!(f(2).unwrap(), vec![6, 4]);
    assert_eq!(f(3).unwrap(), vec![24, 1]);
    assert_eq!(f(-1).unwrap(), vec![6, 4]);
    assert_eq!(f(-3).unwrap(), vec![1, 24]);
    let e = f(4).unwrap_err();
    assert_eq!(
        e,
        "Flatten: axis 4 is out of range for rank 3 (valid: [-3, 3])"
    );
    assert!(f(-4).is_err());
    // Default axis 1; values keep row-major order.
    let y = run_first(flatten, &node("Flatten", vec![]), 13, &[&x]).unwrap();
    assert_eq!(y, iota(&[2, 12]));
    let z = run_first(
        flatten,
        &node("Flatten", vec![]),
        13,
        &[&f32s(&[0, 3], &[])],
    )
    .unwrap();
    assert_eq!(z.shape(), &[0, 3]);
}

#[test]
fn trilu_upper_lower_offsets() {
    let x = iota(&[3, 4]);
    let up = node("Trilu", vec![]);
    let lo = node("Trilu", vec![attr::int("upper", 0)]);
    let k = |v: i64| i64s(&[], &[v]);
    assert_eq!(
        run_first(trilu, &up, 14, &[&x]).unwrap(),
        f32s(&[3, 4], &[0., 1., 2., 3., 0., 5., 6., 7., 0., 0., 10., 11.])
    );
    assert_eq!(
        run_first(trilu, &up, 14, &[&x, &k(1)]).unwrap(),
        f32s(&[3, 4], &[0., 1., 2., 3., 0., 0., 6., 7., 0., 0., 0., 11.])
    );
    assert_eq!(
        run_first(trilu, &lo, 14, &[&x]).unwrap(),
        f32s(&[3, 4], &[0., 0., 0., 0., 4., 5., 0., 0., 8., 9., 10., 0.])
    );
    assert_eq!(
        run_first(trilu, &lo, 14, &[&x, &k(-1)]).unwrap(),
        f32s(&[3, 4], &[0., 0., 0., 0., 4., 0., 0., 0., 8., 9., 0., 0.])
    );
    // Offsets far outside the matrix keep everything or nothing.
    assert_eq!(run_first(trilu, &lo, 14, &[&x, &k(i64::MAX)]).unwrap(), x);
    assert_eq!(
        run_first(trilu, &up, 14, &[&x, &k(i64::MAX)]).unwrap(),
        f32s(&[3, 4], &[0.; 12])
    );
    // Batched bool causal mask.
    let b = bools(&[2, 2, 2], &[true; 8]);
    assert_eq!(
        run_first(trilu, &lo, 14, &[&b]).unwrap(),
        bools(
            &[2, 2, 2],
            &[true, false, true, true, true, false, true, true]
        )
    );
    assert_eq!(
        run_first(trilu, &up, 14, &[&f32s(&[0, 3], &[])])
            .unwrap()
            .shape(),
        &[0, 3]
    );
}

#[test]
fn trilu_errors() {
    let n = node("Trilu", vec![]);
    let e = run_first(trilu, &n, 14, &[&f32s(&[3], &[1., 2., 3.])]).unwrap_err();
    assert_eq!(e, "Trilu: input must have rank >= 2, got [3]");
    let e = run_first(
        trilu,
        &n,
        14,
        &[&iota(&[2, 2]), &Tensor::from_i64s(&[1, 2])],
    )
    .unwrap_err();
    assert!(e.contains("single int64"), "{e}");
}

#[test]
fn range_values_and_lengths() {
    let n = node("Range", vec![]);
    let r = |a: &Tensor, b: &Tensor, c: &Tensor| run_first(range, &n, 11, &[a, b, c]);
    let i = |v: i64| i64s(&[], &[v]);
    assert_eq!(r(&i(0), &i(5), &i(2)).unwrap(), i64s(&[3], &[0, 2, 4]));
    assert_eq!(r(&i(10), &i(4), &i(-3)).unwrap(), i64s(&[2], &[10, 7]));
    assert_eq!(r(&i(5), &i(0), &i(1)).unwrap(), i64s(&[0], &[]));
    assert_eq!(r(&i(3), &i(3), &i(1)).unwrap(), i64s(&[0], &[]));
    let j = |v: i32| i32s(&[], &[v]);
    assert_eq!(
        r(&j(-2), &j(2), &j(1)).unwrap(),
        i32s(&[4], &[-2, -1, 0, 1])
    );
    let f = |v: f32| f32s(&[], &[v]);
    assert_eq!(
        r(&f(1.0), &f(2.0), &f(0.25)).unwrap(),
        f32s(&[4], &[1.0, 1.25, 1.5, 1.75])
    );
    assert_eq!(r(&f(0.0), &f(1.1), &f(0.5)).unwrap().shape(), &[3]);
    let d = |v: f64| f64s(&[], &[v]);
    assert_eq!(
        r(&d(1.0), &d(-1.0), &d(-0.5)).unwrap(),
        f64s(&[4], &[1.0, 0.5, 0.0, -0.5])
    );
    // Extreme int64 operands do not overflow.
    assert_eq!(
        r(&i(i64::MIN), &i(i64::MAX), &i(i64::MAX)).unwrap(),
        i64s(&[3], &[i64::MIN, -1, i64::MAX - 1])
    );
}

#[test]
fn range_errors() {
    let n = node("Range", vec![]);
    let r = |a: &Tensor, b: &Tensor, c: &Tensor| run_first(range, &n, 11, &[a, b, c]);
    let i = |v: i64| i64s(&[], &[v]);
    assert_eq!(r(&i(0), &i(5), &i(0)).unwrap_err(), "Range: delta is 0");
    let f = |v: f32| f32s(&[], &[v]);
    assert_eq!(r(&f(0.), &f(1.), &f(0.)).unwrap_err(), "Range: delta is 0");
    assert!(r(&f(0.), &f(f32::NAN), &f(1.)).unwrap_err().contains("NaN"));
    let e = r(&f(0.), &f(f32::INFINITY), &f(1.)).unwrap_err();
    assert!(e.contains("Range:") && e.contains("overflows"), "{e}");
    let e = r(&i(0), &i(i64::MAX), &i(1)).unwrap_err();
    assert!(e.contains("Range") && e.contains("overflows"), "{e}");
    let e = r(&i(0), &f(1.), &i(1)).unwrap_err();
    assert!(e.contains("share one type"), "{e}");
    let e = r(&Tensor::from_i64s(&[0, 1]), &i(1), &i(1)).unwrap_err();
    assert_eq!(e, "Range: 'start' must be a scalar, got shape [2]");
    let b = bools(&[], &[true]);
    assert_eq!(
        r(&b, &b, &b).unwrap_err(),
        "Range: element type bool is not supported"
    );
    let e = run_small(range, &n, &[&i(0), &i(1000), &i(1)]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
}

#[test]
fn constant_of_shape_values() {
    let plain = node("ConstantOfShape", vec![]);
    let y = run_first(constant_of_shape, &plain, 9, &[&Tensor::from_i64s(&[2, 3])]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[0.; 6]));
    let tp = from_tensor("value", &i64s(&[1], &[7]));
    let n = node("ConstantOfShape", vec![attr::tensor("value", tp)]);
    let y = run_first(constant_of_shape, &n, 9, &[&Tensor::from_i64s(&[2])]).unwrap();
    assert_eq!(y, i64s(&[2], &[7, 7]));
    // Empty shape: a scalar; a 0 dim: empty.
    let y = run_first(constant_of_shape, &n, 9, &[&Tensor::from_i64s(&[])]).unwrap();
    assert_eq!(y, i64s(&[], &[7]));
    let y = run_first(constant_of_shape, &n, 9, &[&Tensor::from_i64s(&[0, 4])]).unwrap();
    assert_eq!(y, i64s(&[0, 4], &[]));
    let tb = from_tensor("value", &bools(&[1], &[true]));
    let n = node("ConstantOfShape", vec![attr::tensor("value", tb)]);
    let y = run_first(constant_of_shape, &n, 20, &[&Tensor::from_i64s(&[2])]).unwrap();
    assert_eq!(y, bools(&[2], &[true, true]));
}

#[test]
fn constant_of_shape_errors() {
    let plain = node("ConstantOfShape", vec![]);
    let e = run_first(
        constant_of_shape,
        &plain,
        9,
        &[&Tensor::from_i64s(&[2, -3])],
    )
    .unwrap_err();
    assert!(e.contains("negative dimension -3"), "{e}");
    let e = run_first(
        constant_of_shape,
        &plain,
        9,
        &[&Tensor::from_i64s(&[1 << 40, 1 << 40])],
    )
    .unwrap_err();
    assert!(
        e.contains("ConstantOfShape") && e.contains("overflows"),
        "{e}"
    );
    let e = run_small(constant_of_shape, &plain, &[&Tensor::from_i64s(&[300])]).unwrap_err();
    assert!(e.contains("limit"), "{e}");
    let two = from_tensor("value", &f32s(&[2], &[1., 2.]));
    let n = node("ConstantOfShape", vec![attr::tensor("value", two)]);
    let e = run_first(constant_of_shape, &n, 9, &[&Tensor::from_i64s(&[2])]).unwrap_err();
    assert!(e.contains("exactly one element"), "{e}");
    let mut half = from_tensor("value", &f32s(&[1], &[1.]));
    half.data_type = DType::F16.0;
    half.raw_data = vec![0, 0x3c].into();
    half.float_data.clear();
    let n = node("ConstantOfShape", vec![attr::tensor("value", half)]);
    let e = run_first(constant_of_shape, &n, 9, &[&Tensor::from_i64s(&[2])]).unwrap_err();
    assert!(e.contains("float16 is not supported"), "{e}");
}
