//! Unit tests of lanes.rs: values worked by hand (or from the spec's formula in float64).

use super::super::common::test_util::*;
use super::*;
use crate::ir::attr;

fn one(n: &crate::ir::Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    run_node(n, opset, &ins).map(|mut v| v.remove(0))
}

#[test]
fn lanes_layout() {
    let l = Lanes::new(&[2, 3, 4], 1, false);
    assert_eq!((l.outer, l.len, l.inner), (2, 3, 4));
    let l = Lanes::new(&[2, 3, 4], 1, true);
    assert_eq!((l.outer, l.len, l.inner), (2, 12, 1));
    let l = Lanes::new(&[5], 0, false);
    assert_eq!((l.outer, l.len, l.inner), (1, 5, 1));
    // Strided lanes come in (outer, inner) order, each gathered in axis order.
    let v: Vec<i32> = (0..12).collect();
    let mut seen = vec![];
    Lanes::new(&[2, 3, 2], 1, false).each(&v, |n, l| seen.push((n, l.to_vec())));
    assert_eq!(
        seen,
        [
            (0, vec![0, 2, 4]),
            (1, vec![1, 3, 5]),
            (2, vec![6, 8, 10]),
            (3, vec![7, 9, 11])
        ]
    );
    // Nothing to visit in an empty array.
    Lanes::new(&[0, 3], 1, false).each(&[] as &[i32], |_, _| panic!("visited"));
}

#[test]
fn strided_lanes_in_tiles() {
    // 20 columns: one full tile of 16 and a partial one of 4.
    let v: Vec<i64> = (0..120).collect();
    let l = Lanes::new(&[2, 3, 20], 1, false);
    let mut n_seen = vec![];
    l.each(&v, |n, lane| {
        let (o, j) = (n / 20, n % 20);
        let base = (o * 60 + j) as i64;
        assert_eq!(lane, [base, base + 20, base + 40], "lane {n}");
        n_seen.push(n);
    });
    assert_eq!(n_seen, (0..40).collect::<Vec<_>>());
    let mut w = v.clone();
    l.map(&mut w, |lane| lane.reverse());
    for (i, &x) in w.iter().enumerate() {
        let (o, k, j) = (i / 60, i / 20 % 3, i % 20);
        assert_eq!(x, (o * 60 + (2 - k) * 20 + j) as i64, "element {i}");
    }
    let s = Lanes::span(&[2, 3, 4, 5], 1, 2);
    assert_eq!((s.outer, s.len, s.inner), (2, 12, 5));
}

#[test]
fn log_softmax_values_axes_and_versions() {
    let x = f64s(&[1, 3], &[1., 2., 3.]);
    let lse = 3.0 + (1.0 + (-1f64).exp() + (-2f64).exp()).ln();
    let y = one(&node("LogSoftmax", vec![]), 13, &[&x]).unwrap();
    assert_close(&y, &f64s(&[1, 3], &[1. - lse, 2. - lse, 3. - lse]), 1e-14);
    assert_close(
        &y,
        &f64s(&[1, 3], &[-2.4076059644, -1.4076059644, -0.4076059644]),
        1e-9,
    );
    // Large values do not overflow: [1000, 1000] -> -ln 2 each.
    let big = f32s(&[2], &[1000., 1000.]);
    let y = one(&node("LogSoftmax", vec![]), 13, &[&big]).unwrap();
    assert_close(&y, &f32s(&[2], &[-std::f32::consts::LN_2; 2]), 1e-6);
    // Axis 0 of [[0, 0], [0, ln 3]]: column 1 is [ln(1/4), ln(3/4)].
    let x = f64s(&[2, 2], &[0., 0., 0., 3f64.ln()]);
    let n0 = node("LogSoftmax", vec![attr::int("axis", 0)]);
    let y = one(&n0, 13, &[&x]).unwrap();
    let h = -std::f64::consts::LN_2;
    assert_close(
        &y,
        &f64s(&[2, 2], &[h, 0.25f64.ln(), h, 0.75f64.ln()]),
        1e-14,
    );
    // Before 13: default axis 1 and the input coerced to 2-D: one row of 4 zeros.
    let z = f32s(&[1, 2, 2], &[0.; 4]);
    let y = one(&node("LogSoftmax", vec![]), 11, &[&z]).unwrap();
    assert_close(&y, &f32s(&[1, 2, 2], &[-(4f32.ln()); 4]), 1e-6);
    let y = one(&node("LogSoftmax", vec![]), 13, &[&z]).unwrap();
    assert_close(&y, &f32s(&[1, 2, 2], &[-(2f32.ln()); 4]), 1e-6);
}

#[test]
fn hardmax_first_maximum() {
    let x = f32s(&[2, 3], &[1., 3., 3., 2., 1., 0.]);
    let y = one(&node("Hardmax", vec![]), 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[0., 1., 0., 1., 0., 0.]));
    let n0 = node("Hardmax", vec![attr::int("axis", 0)]);
    let y = one(&n0, 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[0., 1., 1., 1., 0., 0.]));
    // Opset 11: rows of the input coerced to 2-D at axis 1.
    let x = f64s(&[1, 2, 2], &[1., 5., 3., 2.]);
    let y = one(&node("Hardmax", vec![]), 11, &[&x]).unwrap();
    assert_eq!(y, f64s(&[1, 2, 2], &[0., 1., 0., 0.]));
    // A NaN counts as the maximum (numpy's argmax).
    let x = f32s(&[3], &[1., f32::NAN, 3.]);
    let y = one(&node("Hardmax", vec![]), 13, &[&x]).unwrap();
    assert_eq!(y, f32s(&[3], &[0., 1., 0.]));
    let e = one(&node("Hardmax", vec![]), 13, &[&i64s(&[2], &[1, 2])]).unwrap_err();
    assert_eq!(e, "Hardmax: element type int64 is not supported");
    let n = node("Hardmax", vec![attr::int("axis", 1)]);
    let e = one(&n, 13, &[&f32s(&[2], &[1., 2.])]).unwrap_err();
    assert!(e.contains("axis 1 is out of range for rank 1"), "{e}");
}

#[test]
fn cumprod_exclusive_reverse_and_axes() {
    let x = f64s(&[4], &[1., 2., 3., 4.]);
    let a0 = Tensor::from_i64s(&[0]);
    let cases = [
        (0, 0, [1., 2., 6., 24.]),
        (1, 0, [1., 1., 2., 6.]),
        (0, 1, [24., 24., 12., 4.]),
        (1, 1, [24., 12., 4., 1.]),
    ];
    for (ex, rev, want) in cases {
        let n = node(
            "CumProd",
            vec![attr::int("exclusive", ex), attr::int("reverse", rev)],
        );
        let y = one(&n, 26, &[&x, &a0]).unwrap();
        assert_eq!(y, f64s(&[4], &want), "exclusive {ex} reverse {rev}");
    }
    // 2-D int32 along axis 0 (strided lanes), and axis -1; integers wrap.
    let m = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let y = one(&node("CumProd", vec![]), 26, &[&m, &i32s(&[], &[0])]).unwrap();
    assert_eq!(y, i32s(&[2, 3], &[1, 2, 3, 4, 10, 18]));
    let y = one(&node("CumProd", vec![]), 26, &[&m, &i64s(&[1], &[-1])]).unwrap();
    assert_eq!(y, i32s(&[2, 3], &[1, 2, 6, 4, 20, 120]));
    let w = i32s(&[2], &[i32::MAX, 2]);
    let y = one(&node("CumProd", vec![]), 26, &[&w, &a0]).unwrap();
    assert_eq!(y, i32s(&[2], &[i32::MAX, -2]));
    let n = node("CumProd", vec![]);
    let e = one(&n, 26, &[&bools(&[1], &[true]), &a0]).unwrap_err();
    assert_eq!(e, "CumProd: element type bool is not supported");
    let e = one(&n, 26, &[&m, &Tensor::from_i64s(&[-3])]).unwrap_err();
    assert!(e.contains("axis -3 is out of range for rank 2"), "{e}");
    // Not in the registry before 26.
    assert!(run_node(&n, 25, &[Some(&m), Some(&a0)]).is_err());
}

#[test]
fn cumsum_exclusive_reverse_and_axes() {
    let x = f64s(&[4], &[1., 2., 3., 4.]);
    let a0 = Tensor::from_i64s(&[0]);
    let cases = [
        (0, 0, [1., 3., 6., 10.]),
        (1, 0, [0., 1., 3., 6.]),
        (0, 1, [10., 9., 7., 4.]),
        (1, 1, [9., 7., 4., 0.]),
    ];
    for (ex, rev, want) in cases {
        let n = node(
            "CumSum",
            vec![attr::int("exclusive", ex), attr::int("reverse", rev)],
        );
        let y = one(&n, 14, &[&x, &a0]).unwrap();
        assert_eq!(y, f64s(&[4], &want), "exclusive {ex} reverse {rev}");
    }
    // 2-D: axis 0 (strided lanes) with a 0-D int32 axis, and axis -1.
    let m = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let y = one(&node("CumSum", vec![]), 11, &[&m, &i32s(&[], &[0])]).unwrap();
    assert_eq!(y, i32s(&[2, 3], &[1, 2, 3, 5, 7, 9]));
    let y = one(&node("CumSum", vec![]), 14, &[&m, &i64s(&[1], &[-1])]).unwrap();
    assert_eq!(y, i32s(&[2, 3], &[1, 3, 6, 4, 9, 15]));
    // Integers wrap.
    let w = i32s(&[2], &[i32::MAX, 1]);
    let y = one(&node("CumSum", vec![]), 14, &[&w, &a0]).unwrap();
    assert_eq!(y, i32s(&[2], &[i32::MAX, i32::MIN]));

    let n = node("CumSum", vec![]);
    let e = one(&n, 14, &[&m, &i64s(&[2], &[0, 1])]).unwrap_err();
    assert_eq!(
        e,
        "CumSum: 'axis' must be one int32 or int64 value, got int64 of shape [2]"
    );
    let e = one(&n, 14, &[&m, &Tensor::from_i64s(&[2])]).unwrap_err();
    assert!(e.contains("axis 2 is out of range for rank 2"), "{e}");
    let e = one(&n, 14, &[&m, &f32s(&[], &[0.])]).unwrap_err();
    assert!(e.contains("'axis' must be one int32 or int64"), "{e}");
    let e = one(&n, 14, &[&bools(&[1], &[true]), &a0]).unwrap_err();
    assert_eq!(e, "CumSum: element type bool is not supported");
    assert!(run_node(&n, 14, &[Some(&m)])
        .unwrap_err()
        .contains("input 1"));
    // Not in the registry before 11.
    assert!(one(&n, 10, &[&m, &a0]).is_err());
}

#[test]
fn lp_normalization_l1_l2_and_zero_norm() {
    let x = f32s(&[2, 2], &[3., 4., 0., 0.]);
    let y = one(&node("LpNormalization", vec![]), 22, &[&x]).unwrap();
    assert_close(&y, &f32s(&[2, 2], &[0.6, 0.8, 0., 0.]), 1e-7);
    let n1 = node("LpNormalization", vec![attr::int("p", 1)]);
    let y = one(&n1, 1, &[&x]).unwrap();
    assert_close(&y, &f32s(&[2, 2], &[3. / 7., 4. / 7., 0., 0.]), 1e-7);
    let x = f64s(&[2, 2], &[3., 4., 4., 3.]);
    let n = node(
        "LpNormalization",
        vec![attr::int("p", 1), attr::int("axis", 0)],
    );
    let y = one(&n, 22, &[&x]).unwrap();
    assert_close(
        &y,
        &f64s(&[2, 2], &[3. / 7., 4. / 7., 4. / 7., 3. / 7.]),
        1e-15,
    );
    let bad = node("LpNormalization", vec![attr::int("p", 3)]);
    let e = one(&bad, 22, &[&x]).unwrap_err();
    assert!(
        e.contains("LpNormalization: attribute 'p' is 3; only 1 and 2 are defined"),
        "{e}"
    );
    let e = one(&node("LpNormalization", vec![]), 22, &[&i32s(&[1], &[1])]).unwrap_err();
    assert_eq!(e, "LpNormalization: element type int32 is not supported");
}
