use super::super::common::test_util::*;
use super::super::sgemm::sgemm_rows;
use super::*;
use crate::ir::{attr, Node};

#[test]
fn matmul_2d() {
    let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f32s(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[58., 64., 139., 154.]));
    let a = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let b = i64s(&[3, 2], &[7, 8, 9, 10, 11, 12]);
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    assert_eq!(y, i64s(&[2, 2], &[58, 64, 139, 154]));
}

#[test]
fn matmul_1d_operands() {
    let v = f64s(&[3], &[1., 2., 3.]);
    let m = f64s(&[3, 2], &[1., 0., 0., 1., 1., 1.]);
    // [3] x [3,2] -> [2]
    assert_eq!(
        run1(matmul, "MatMul", &[&v, &m]).unwrap(),
        f64s(&[2], &[4., 5.])
    );
    // [2,3] x [3] -> [2]
    let mt = f64s(&[2, 3], &[1., 0., 1., 0., 1., 1.]);
    assert_eq!(
        run1(matmul, "MatMul", &[&mt, &v]).unwrap(),
        f64s(&[2], &[4., 5.])
    );
    // [3] x [3] -> scalar
    assert_eq!(
        run1(matmul, "MatMul", &[&v, &v]).unwrap(),
        f64s(&[], &[14.])
    );
}

#[test]
fn matmul_batched_broadcast() {
    // A: [2, 1, 2, 2], B: [3, 2, 2] -> [2, 3, 2, 2]
    let a: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let a = f32s(&[2, 1, 2, 2], &a);
    // B batches: identity, 2*identity, swap
    let b = f32s(
        &[3, 2, 2],
        &[1., 0., 0., 1., 2., 0., 0., 2., 0., 1., 1., 0.],
    );
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    #[rustfmt::skip]
    let want = [
        0., 1., 2., 3.,   0., 2., 4., 6.,   1., 0., 3., 2.,
        4., 5., 6., 7.,   8., 10., 12., 14., 5., 4., 7., 6.,
    ];
    assert_eq!(y, f32s(&[2, 3, 2, 2], &want));
    // [2,2] x [2,2,1] broadcasts A over B's batch
    let b = f32s(&[2, 2, 1], &[1., 1., 1., -1.]);
    let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[2, 2, 1], &[3., 7., -1., -1.]));
}

/// The small-product kernel across its column chunk (16384 columns) and with a depth that is not
/// a multiple of the rows of B it reads per pass: every element as a float64 product gives it.
#[test]
fn small_product_crosses_its_column_chunk() {
    let (k, n) = (7usize, 16384 + 37);
    for m in [1usize, 2] {
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 - 6.5) / 3.0).collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 29 % 31) as f32 - 15.0) / 8.0)
            .collect();
        let mut y = vec![f32::NAN; m * n];
        sgemm_rows(&a, &b, &mut y, m, k, n);
        for i in 0..m {
            for j in 0..n {
                let w: f64 = (0..k)
                    .map(|t| a[i * k + t] as f64 * b[t * n + j] as f64)
                    .sum();
                let got = y[i * n + j] as f64;
                assert!(
                    (got - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{m}x{k}x{n} [{i}, {j}]: {got} vs {w}"
                );
            }
        }
    }
}

/// The small-product kernel (and whatever `matmul` picks on this machine) against a float64
/// product, over shapes that exercise every row and column tail.
#[test]
fn small_product_matches_f64_over_tails() {
    for m in [1usize, 2, 3, 4, 5, 8, 9, 64, 65] {
        for n in [1usize, 7, 8, 9, 15, 16, 17, 40] {
            for k in [1usize, 3, 7, 64] {
                let a: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                    .collect();
                let b: Vec<f32> = (0..k * n)
                    .map(|i| ((i * 53 % 19) as f32 - 9.0) / 5.0)
                    .collect();
                let mut want = vec![0f64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k)
                            .map(|t| a[i * k + t] as f64 * b[t * n + j] as f64)
                            .sum();
                    }
                }
                let mut y = vec![0f32; m * n];
                sgemm_rows(&a, &b, &mut y, m, k, n);
                let got =
                    run1(matmul, "MatMul", &[&f32s(&[m, k], &a), &f32s(&[k, n], &b)]).unwrap();
                for (idx, (&p, &q)) in y.iter().zip(got.as_f32().unwrap().iter()).enumerate() {
                    let w = want[idx];
                    let tol = 1e-5 * (1.0 + w.abs());
                    assert!(
                        (p as f64 - w).abs() <= tol,
                        "{m}x{k}x{n} [{idx}]: {p} vs {w}"
                    );
                    assert!(
                        (q as f64 - w).abs() <= tol,
                        "{m}x{k}x{n} [{idx}]: {q} vs {w}"
                    );
                }
            }
        }
    }
    // NaN and inf propagate as in a plain product.
    let a = f32s(&[1, 2], &[f32::NAN, 1.0]);
    let b = f32s(&[2, 2], &[1.0, 0.0, f32::INFINITY, 2.0]);
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    let y = y.as_f32().unwrap();
    assert!(y[[0, 0]].is_nan() && y[[0, 1]].is_nan());
    let a = f32s(&[1, 2], &[0.5, 1.0]);
    let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[1, 2], &[f32::INFINITY, 2.0]));
}

#[test]
fn matmul_errors_and_empty() {
    let a = f32s(&[2, 3], &[0.; 6]);
    let b = f32s(&[2, 3], &[0.; 6]);
    let e = run1(matmul, "MatMul", &[&a, &b]).unwrap_err();
    assert!(e.contains("[2, 3]") && e.contains("inner"), "{e}");
    let s = f32s(&[], &[1.]);
    assert!(run1(matmul, "MatMul", &[&s, &a]).is_err());
    let a3 = f32s(&[2, 1, 1], &[0.; 2]);
    let b3 = f32s(&[3, 1, 1], &[0.; 3]);
    assert!(run1(matmul, "MatMul", &[&a3, &b3])
        .unwrap_err()
        .contains("broadcast"));
    // K = 0 gives zeros
    let a = f32s(&[2, 0], &[]);
    let b = f32s(&[0, 3], &[]);
    assert_eq!(
        run1(matmul, "MatMul", &[&a, &b]).unwrap(),
        f32s(&[2, 3], &[0.; 6])
    );
}

fn gemm_node(alpha: f32, beta: f32, ta: i64, tb: i64) -> Node {
    let mut n = Node::new("Gemm", "");
    n.set_attr(attr::float("alpha", alpha));
    n.set_attr(attr::float("beta", beta));
    n.set_attr(attr::int("transA", ta));
    n.set_attr(attr::int("transB", tb));
    n
}

#[test]
fn gemm_transposes_and_c_broadcast() {
    let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f32s(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
    let c = f32s(&[2], &[1., -1.]);
    let n = gemm_node(1.0, 1.0, 0, 0);
    let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
    assert_eq!(y[0], f32s(&[2, 2], &[59., 63., 140., 153.]));
    // A given as [3,2] with transA, B as [2,3] with transB; alpha 2, beta 0.5, C [2,1]
    let at = f32s(&[3, 2], &[1., 4., 2., 5., 3., 6.]);
    let bt = f32s(&[2, 3], &[7., 9., 11., 8., 10., 12.]);
    let c = f32s(&[2, 1], &[2., 4.]);
    let n = gemm_node(2.0, 0.5, 1, 1);
    let y = run_at(gemm, &n, 13, &[Some(&at), Some(&bt), Some(&c)]).unwrap();
    assert_eq!(y[0], f32s(&[2, 2], &[117., 129., 280., 310.]));
    // no C, scalar C
    let n = Node::new("Gemm", "");
    let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b)]).unwrap();
    assert_eq!(y[0], f32s(&[2, 2], &[58., 64., 139., 154.]));
    let s = f32s(&[], &[1.]);
    let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&s)]).unwrap();
    assert_eq!(y[0], f32s(&[2, 2], &[59., 65., 140., 155.]));
    // integer Gemm
    let ai = i32s(&[1, 2], &[1, 2]);
    let bi = i32s(&[2, 1], &[3, 4]);
    let ci = i32s(&[1], &[5]);
    let y = run_at(gemm, &n, 13, &[Some(&ai), Some(&bi), Some(&ci)]).unwrap();
    assert_eq!(y[0], i32s(&[1, 1], &[16]));
}

#[test]
fn gemm_beta_zero_ignores_c_values() {
    let a = f32s(&[1, 1], &[2.]);
    let c = f32s(&[1], &[f32::NAN]);
    let n = gemm_node(1.5, 0.0, 0, 0);
    let y = run_at(gemm, &n, 13, &[Some(&a), Some(&a), Some(&c)]).unwrap();
    assert_eq!(y[0], f32s(&[1, 1], &[6.]));
    // but C's shape is still checked
    let c = f32s(&[2], &[0., 0.]);
    assert!(run_at(gemm, &n, 13, &[Some(&a), Some(&a), Some(&c)]).is_err());
}

#[test]
fn gemm_errors() {
    let n = Node::new("Gemm", "");
    let a = f32s(&[2, 3], &[0.; 6]);
    let e = run_at(gemm, &n, 13, &[Some(&a), Some(&a)]).unwrap_err();
    assert!(e.contains("inner"), "{e}");
    let v = f32s(&[3], &[0.; 3]);
    let e = run_at(gemm, &n, 13, &[Some(&v), Some(&a)]).unwrap_err();
    assert!(e.contains("2-D"), "{e}");
    let b = f32s(&[3, 2], &[0.; 6]);
    let c = f32s(&[3], &[0.; 3]);
    let e = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&c)]).unwrap_err();
    assert!(e.contains("[3]") && e.contains("[2, 2]"), "{e}");
}

#[test]
fn fused_gemm_applies_its_activation_and_names_a_bad_one() {
    let a = f32s(&[1, 2], &[1., -2.]);
    let b = f32s(&[2, 2], &[1., 0., 0., 1.]);
    let ms = crate::ir::model::MS_DOMAIN;
    let node = |act: Option<&str>| {
        let mut n = Node::new("FusedGemm", ms);
        n.set_attr(attr::float("alpha", 2.0));
        if let Some(act) = act {
            n.set_attr(attr::string("activation", act));
        }
        n
    };
    let y = run_at(fused_gemm, &node(Some("Relu")), 1, &[Some(&a), Some(&b)]).unwrap();
    assert_eq!(y[0], f32s(&[1, 2], &[2., 0.]));
    let y = run_at(fused_gemm, &node(Some("Tanh")), 1, &[Some(&a), Some(&b)]).unwrap();
    assert_close(&y[0], &f32s(&[1, 2], &[2f32.tanh(), (-4f32).tanh()]), 1e-6);
    let e = run_at(fused_gemm, &node(Some("Elu")), 1, &[Some(&a), Some(&b)]).unwrap_err();
    assert!(
        e.contains("activation Some(\"Elu\") is not supported"),
        "{e}"
    );
    let e = run_at(fused_gemm, &node(None), 1, &[Some(&a), Some(&b)]).unwrap_err();
    assert!(e.contains("activation None is not supported"), "{e}");
    let i = i32s(&[1, 1], &[1]);
    let e = run_at(fused_gemm, &node(Some("Relu")), 1, &[Some(&i), Some(&i)]).unwrap_err();
    assert!(e.contains("int32"), "{e}");
}

#[test]
fn gemm_attributes_of_the_wrong_type_are_parse_errors() {
    let mut n = Node::new("Gemm", "");
    n.set_attr(attr::int("alpha", 2));
    let a = f32s(&[1, 1], &[1.]);
    let e = run_at(gemm, &n, 13, &[Some(&a), Some(&a)]).unwrap_err();
    assert!(e.contains("'alpha'"), "{e}");
}

/// A constant float32 B under an executor's prepared slot: the first run leaves it unpacked,
/// later runs use it packed once, and every run (batched, B broadcast) equals the one-off
/// call bit for bit.
#[test]
fn constant_b_packed_from_the_second_run_matches() {
    let vals = |n: usize, s: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + s) % 101) as f32 / 50.0 - 1.0)
            .collect()
    };
    let [m, k, n] = [150, 300, 45];
    let a = f32s(&[2, m, k], &vals(2 * m * k, 1));
    let b = f32s(&[k, n], &vals(k * n, 2));
    let want = run1(matmul, "MatMul", &[&a, &b]).unwrap();
    let (node, limits) = (Node::new("MatMul", ""), crate::limits::Limits::default());
    let op = super::super::resolve(&node, 17).unwrap();
    let cell = super::super::PreparedCell::new();
    for run in 0..3 {
        let ctx = KernelCtx {
            node: &node,
            op: &*op,
            opset: 17,
            limits: &limits,
            prepared: Some(super::super::Prepared {
                cell: &cell,
                constant: 0b10,
            }),
        };
        let got = matmul(&ctx, &[Some(&a), Some(&b)]).unwrap().remove(0);
        assert!(got == want, "run {run} differs");
        assert!(cell.get().is_some());
    }
}
