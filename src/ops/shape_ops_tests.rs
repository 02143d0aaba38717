use super::super::common::test_util::*;
use super::*;
use crate::ir::attr;
use crate::onnx::proto::data_type as dt;
use crate::onnx::tensor::from_tensor;
use crate::ops::cast::{cast, constant};
use crate::ops::concat::concat;

#[test]
fn identity_clones() {
    let x = i32s(&[2], &[1, 2]);
    assert_eq!(run1(identity, "Identity", &[&x]).unwrap(), x);
}

#[test]
fn reshape_zero_and_minus_one() {
    let x = iota(&[2, 3, 4]);
    let n = node("Reshape", vec![]);
    let y = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[0, -1])]).unwrap();
    assert_eq!(y, iota(&[2, 12]));
    let y = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[-1, 0, 2])]).unwrap();
    assert_eq!(y, iota(&[4, 3, 2]));
    let y = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[24])]).unwrap();
    assert_eq!(y, iota(&[24]));
    // scalar <-> [1]
    let s = f32s(&[1], &[5.]);
    let y = run_first(reshape, &n, 14, &[&s, &Tensor::from_i64s(&[])]).unwrap();
    assert_eq!(y, f32s(&[], &[5.]));
}

#[test]
fn reshape_allowzero() {
    let x = f32s(&[0, 3], &[]);
    let n = node("Reshape", vec![attr::int("allowzero", 1)]);
    let y = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[3, 0])]).unwrap();
    assert_eq!(y.shape(), &[3, 0]);
    // Without allowzero the 0 copies input dim 1, asking for [3, 3]: a size mismatch.
    let plain = node("Reshape", vec![]);
    let y = run_first(reshape, &plain, 14, &[&x, &Tensor::from_i64s(&[3, 0])]);
    assert!(y.unwrap_err().contains("[3, 0]"));
    // allowzero is ignored before opset 14
    let y = run_first(
        reshape,
        &n,
        13,
        &[&iota(&[2, 3]), &Tensor::from_i64s(&[0, 3])],
    )
    .unwrap();
    assert_eq!(y, iota(&[2, 3]));
    let e = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[0, -1])]).unwrap_err();
    assert!(e.contains("allowzero"), "{e}");
}

#[test]
fn reshape_errors() {
    let x = iota(&[2, 3]);
    let n = node("Reshape", vec![]);
    let e = run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[4, -1])]).unwrap_err();
    assert_eq!(e, "Reshape: cannot reshape [2, 3] (6 elements) to [4, -1]");
    assert!(run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[-1, -1])]).is_err());
    assert!(run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[-2, 3])]).is_err());
    assert!(run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[1, 1, 0])]).is_err());
    assert!(run_first(reshape, &n, 14, &[&x, &Tensor::from_i64s(&[i64::MAX, 2])]).is_err());
    assert!(run_first(reshape, &n, 14, &[&x, &f32s(&[1], &[6.])]).is_err());
}

#[test]
fn transpose_every_perm_of_4d_matches_ndarray() {
    let x = iota(&[2, 3, 1, 4]);
    let a = x.as_f32().unwrap().clone();
    // A non-row-major input of the same values takes the ndarray path.
    let t = Tensor::F32(a.clone().reversed_axes());
    let mut perms = Vec::new();
    for p0 in 0..4i64 {
        for p1 in 0..4 {
            for p2 in 0..4 {
                let p3 = 6 - p0 - p1 - p2;
                let p = [p0, p1, p2, p3];
                if (0..4).all(|i| p.contains(&i)) {
                    perms.push(p);
                }
            }
        }
    }
    assert_eq!(perms.len(), 24);
    for p in perms {
        let n = node("Transpose", vec![attr::ints("perm", &p)]);
        let y = run_first(transpose, &n, 13, &[&x]).unwrap();
        let up: Vec<usize> = p.iter().map(|&v| v as usize).collect();
        let want = a
            .view()
            .permuted_axes(up.clone())
            .as_standard_layout()
            .into_owned();
        assert_eq!(y, Tensor::F32(want), "perm {p:?}");
        assert!(y.as_f32().unwrap().is_standard_layout());
        // reversed_axes then perm: axis i of `t` is axis 3 - i of `a`.
        let yt = run_first(transpose, &n, 13, &[&t]).unwrap();
        let rev: Vec<usize> = up.iter().map(|&v| 3 - v).collect();
        let want = a
            .view()
            .permuted_axes(rev)
            .as_standard_layout()
            .into_owned();
        assert_eq!(yt, Tensor::F32(want), "perm {p:?} of a non-row-major input");
    }
    // Empty, scalar and 1-D inputs.
    let n = node("Transpose", vec![]);
    let e = f32s(&[0, 3], &[]);
    assert_eq!(
        run_first(transpose, &n, 13, &[&e]).unwrap(),
        f32s(&[3, 0], &[])
    );
    let s = f32s(&[], &[7.]);
    assert_eq!(run_first(transpose, &n, 13, &[&s]).unwrap(), s);
    let v = i64s(&[3], &[1, 2, 3]);
    assert_eq!(run_first(transpose, &n, 13, &[&v]).unwrap(), v);
}

#[test]
fn transpose_default_and_perm() {
    let x = iota(&[2, 3]);
    let n = node("Transpose", vec![]);
    let y = run_first(transpose, &n, 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[3, 2], &[0., 3., 1., 4., 2., 5.]));
    let x = iota(&[2, 1, 3]);
    let n = node("Transpose", vec![attr::ints("perm", &[2, 0, 1])]);
    let y = run_first(transpose, &n, 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[3, 2, 1], &[0., 3., 1., 4., 2., 5.]));
    assert!(y.as_f32().unwrap().is_standard_layout());
    for bad in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3], &[-1, 0, 1]] {
        let n = node("Transpose", vec![attr::ints("perm", bad)]);
        let e = run_first(transpose, &n, 13, &[&x]).unwrap_err();
        assert!(e.contains("permutation"), "{e}");
    }
}

#[test]
fn shape_start_end() {
    let x = iota(&[2, 3, 4]);
    let n = node("Shape", vec![]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[2, 3, 4])
    );
    let n = node("Shape", vec![attr::int("start", -1)]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[4])
    );
    let n = node("Shape", vec![attr::int("end", -1)]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[2, 3])
    );
    let n = node("Shape", vec![attr::int("start", 1), attr::int("end", 2)]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[3])
    );
    let n = node("Shape", vec![attr::int("start", -10), attr::int("end", 10)]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[2, 3, 4])
    );
    let n = node("Shape", vec![attr::int("start", 2), attr::int("end", 1)]);
    assert_eq!(
        run_first(shape, &n, 15, &[&x]).unwrap(),
        Tensor::from_i64s(&[])
    );
    // before 15 the attributes do not exist
    let n = node("Shape", vec![attr::int("start", 1)]);
    assert_eq!(
        run_first(shape, &n, 13, &[&x]).unwrap(),
        Tensor::from_i64s(&[2, 3, 4])
    );
}

#[test]
fn unsqueeze_axes_input() {
    let x = iota(&[3, 4]);
    let n = node("Unsqueeze", vec![]);
    let y = run_first(unsqueeze, &n, 13, &[&x, &Tensor::from_i64s(&[0, -1])]).unwrap();
    assert_eq!(y, iota(&[1, 3, 4, 1]));
    let y = run_first(unsqueeze, &n, 13, &[&x, &Tensor::from_i64s(&[1])]).unwrap();
    assert_eq!(y, iota(&[3, 1, 4]));
    let e = run_first(unsqueeze, &n, 13, &[&x, &Tensor::from_i64s(&[4])]).unwrap_err();
    assert!(e.contains("out of range"), "{e}");
    let e = run_first(unsqueeze, &n, 13, &[&x, &Tensor::from_i64s(&[0, -4])]).unwrap_err();
    assert!(e.contains("more than once"), "{e}");
    assert!(run_first(unsqueeze, &n, 13, &[&x]).is_err());
    // opset 11 style: attribute
    let n = node("Unsqueeze", vec![attr::ints("axes", &[0])]);
    assert_eq!(
        run_first(unsqueeze, &n, 11, &[&x]).unwrap(),
        iota(&[1, 3, 4])
    );
}

#[test]
fn squeeze_axes_input() {
    let x = iota(&[1, 3, 1, 2]);
    let n = node("Squeeze", vec![]);
    assert_eq!(run_first(squeeze, &n, 13, &[&x]).unwrap(), iota(&[3, 2]));
    let y = run_first(squeeze, &n, 13, &[&x, &Tensor::from_i64s(&[-2])]).unwrap();
    assert_eq!(y, iota(&[1, 3, 2]));
    let e = run_first(squeeze, &n, 13, &[&x, &Tensor::from_i64s(&[1])]).unwrap_err();
    assert!(e.contains("size 3"), "{e}");
    assert!(run_first(squeeze, &n, 13, &[&x, &Tensor::from_i64s(&[4])]).is_err());
    let n = node("Squeeze", vec![attr::ints("axes", &[0])]);
    assert_eq!(run_first(squeeze, &n, 11, &[&x]).unwrap(), iota(&[3, 1, 2]));
}

#[test]
fn concat_axes() {
    let a = iota(&[2, 2]);
    let b = f32s(&[2, 1], &[9., 9.]);
    let n = node("Concat", vec![attr::int("axis", -1)]);
    let y = run_first(concat, &n, 13, &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[0., 1., 9., 2., 3., 9.]));
    let n0 = node("Concat", vec![attr::int("axis", 0)]);
    let c = i64s(&[1], &[5]);
    let d = i64s(&[2], &[6, 7]);
    assert_eq!(
        run_first(concat, &n0, 13, &[&c, &d]).unwrap(),
        i64s(&[3], &[5, 6, 7])
    );
    let e = run_first(concat, &n0, 13, &[&a, &b]).unwrap_err();
    assert!(e.contains("[2, 1]"), "{e}");
    let e = run_first(concat, &n0, 13, &[&a, &c]).unwrap_err();
    assert!(e.contains("float32") && e.contains("int64"), "{e}");
    let n5 = node("Concat", vec![attr::int("axis", 2)]);
    assert!(run_first(concat, &n5, 13, &[&a, &a])
        .unwrap_err()
        .contains("axis 2"));
    let none = node("Concat", vec![]);
    assert!(run_first(concat, &none, 13, &[&a]).is_err());
}

/// A KV cache's join (past rows then new ones on axis 2): the block copies of row-major inputs,
/// an empty past, and an input stored transposed (ndarray's walk) all give ndarray's result.
#[test]
fn concat_blocks_match_ndarray() {
    use ndarray::{concatenate, ArrayD, Axis, IxDyn};
    let arr = |shape: &[usize], from: f32| {
        let n: usize = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| from + i as f32).collect()).unwrap()
    };
    let n2 = node("Concat", vec![attr::int("axis", 2)]);
    let past = arr(&[2, 3, 4, 5], 0.0);
    let new = arr(&[2, 3, 1, 5], 1000.0);
    let empty = arr(&[2, 3, 0, 5], 0.0);
    // Stored transposed: the same logical [2, 3, 4, 5] tensor, column-major.
    let t = arr(&[5, 4, 3, 2], 500.0).reversed_axes();
    assert!(t.as_slice().is_none());
    for parts in [vec![&past, &new], vec![&empty, &new], vec![&t, &new, &past]] {
        let views: Vec<_> = parts.iter().map(|a| a.view()).collect();
        let want = Tensor::F32(concatenate(Axis(2), &views).unwrap());
        let ts: Vec<Tensor> = parts.iter().map(|a| Tensor::F32((*a).clone())).collect();
        let refs: Vec<&Tensor> = ts.iter().collect();
        assert_eq!(run_first(concat, &n2, 13, &refs).unwrap(), want);
    }
}

#[test]
fn cast_types() {
    let x = f32s(&[4], &[1.9, -1.9, 0.0, f32::NAN]);
    let n = node("Cast", vec![attr::int("to", dt::INT32 as i64)]);
    assert_eq!(
        run_first(cast, &n, 19, &[&x]).unwrap(),
        i32s(&[4], &[1, -1, 0, 0])
    );
    let n = node("Cast", vec![attr::int("to", dt::BOOL as i64)]);
    assert_eq!(
        run_first(cast, &n, 13, &[&x]).unwrap(),
        bools(&[4], &[true, true, false, true])
    );
    let b = bools(&[2], &[true, false]);
    let n = node("Cast", vec![attr::int("to", dt::DOUBLE as i64)]);
    assert_eq!(
        run_first(cast, &n, 13, &[&b]).unwrap(),
        f64s(&[2], &[1., 0.])
    );
    let n = node("Cast", vec![attr::int("to", dt::INT64 as i64)]);
    assert_eq!(
        run_first(cast, &n, 13, &[&i32s(&[1], &[-3])]).unwrap(),
        i64s(&[1], &[-3])
    );
    let n = node("Cast", vec![attr::int("to", dt::FLOAT8E4M3FN as i64)]);
    let e = run_first(cast, &n, 13, &[&x]).unwrap_err();
    assert!(e.contains("float8e4m3fn is not supported"), "{e}");
    let n = node("Cast", vec![]);
    assert!(run_first(cast, &n, 13, &[&x]).is_err());
}

#[test]
fn constant_attrs() {
    let n = node("Constant", vec![attr::float("value_float", 2.5)]);
    assert_eq!(run_first(constant, &n, 13, &[]).unwrap(), f32s(&[], &[2.5]));
    let n = node("Constant", vec![attr::floats("value_floats", &[1., 2.])]);
    assert_eq!(
        run_first(constant, &n, 13, &[]).unwrap(),
        f32s(&[2], &[1., 2.])
    );
    let n = node("Constant", vec![attr::int("value_int", 7)]);
    assert_eq!(run_first(constant, &n, 13, &[]).unwrap(), i64s(&[], &[7]));
    let n = node("Constant", vec![attr::ints("value_ints", &[1, 2, 3])]);
    assert_eq!(
        run_first(constant, &n, 13, &[]).unwrap(),
        i64s(&[3], &[1, 2, 3])
    );
    let t = f64s(&[2, 1], &[3., 4.]);
    let n = node(
        "Constant",
        vec![attr::tensor("value", from_tensor("c", &t))],
    );
    assert_eq!(run_first(constant, &n, 13, &[]).unwrap(), t);
    let n = node("Constant", vec![attr::string("value_string", "hi")]);
    assert_eq!(
        run_first(constant, &n, 13, &[]).unwrap(),
        strs(&[], &["hi"])
    );
    let n = node(
        "Constant",
        vec![attr::strings("value_strings", &["a", "b"])],
    );
    assert_eq!(
        run_first(constant, &n, 13, &[]).unwrap(),
        strs(&[2], &["a", "b"])
    );
    let n = node("Constant", vec![]);
    assert!(run_first(constant, &n, 13, &[]).is_err());
    let n = node(
        "Constant",
        vec![attr::int("value_int", 1), attr::float("value_float", 1.)],
    );
    assert!(run_first(constant, &n, 13, &[]).is_err());
    // right name, wrong attribute type
    let n = node("Constant", vec![attr::int("value_float", 1)]);
    assert!(run_first(constant, &n, 13, &[])
        .unwrap_err()
        .contains("wrong"));
}
