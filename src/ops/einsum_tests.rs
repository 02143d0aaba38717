//! Unit tests of einsum.rs: small products worked by hand.

use super::super::common::test_util::*;
use super::super::resolve;
use super::*;
use crate::ir::attr;

fn eq(e: &str, ins: &[&Tensor]) -> Result<Tensor, String> {
    let n = node("Einsum", vec![attr::string("equation", e)]);
    let k = resolve(&n, 12).map_err(|e| e.to_string())?.kernel();
    run_first(k, &n, 12, ins)
}

#[test]
fn matmul_transpose_and_implicit_output() {
    let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let b = f32s(&[2, 2], &[5., 6., 7., 8.]);
    let ab = f32s(&[2, 2], &[19., 22., 43., 50.]);
    assert_eq!(eq("ij,jk->ik", &[&a, &b]).unwrap(), ab);
    // Implicit: labels found once, in ASCII order: i, k.
    assert_eq!(eq("ij,jk", &[&a, &b]).unwrap(), ab);
    // Spaces are ignored; "ji" implicit is "ij" (sorted), so the output is a transposed.
    assert_eq!(
        eq("ij -> ji", &[&a]).unwrap(),
        f32s(&[2, 2], &[1., 3., 2., 4.])
    );
    assert_eq!(eq("ji", &[&a]).unwrap(), f32s(&[2, 2], &[1., 3., 2., 4.]));
    // Upper case sorts before lower case.
    assert_eq!(eq("aB", &[&a]).unwrap(), f32s(&[2, 2], &[1., 3., 2., 4.]));
}

#[test]
fn sums_diagonals_and_scalars() {
    let a = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(eq("ij->i", &[&a]).unwrap(), i64s(&[2], &[6, 15]));
    assert_eq!(eq("ij->", &[&a]).unwrap(), i64s(&[], &[21]));
    let m = f64s(&[2, 2], &[1., 2., 3., 4.]);
    assert_eq!(eq("ii->i", &[&m]).unwrap(), f64s(&[2], &[1., 4.]));
    assert_eq!(eq("ii", &[&m]).unwrap(), f64s(&[], &[5.]));
    let v = f32s(&[3], &[1., 2., 3.]);
    assert_eq!(eq("i,i", &[&v, &v]).unwrap(), f32s(&[], &[14.]));
    assert_eq!(
        eq("i,j->ij", &[&v, &f32s(&[2], &[1., -1.])]).unwrap(),
        f32s(&[3, 2], &[1., -1., 2., -2., 3., -3.])
    );
}

#[test]
fn ellipsis_batches_and_broadcasts() {
    // Batch diagonal: [2, 2, 2] -> [2, 2].
    let x = iota(&[2, 2, 2]);
    assert_eq!(
        eq("...ii->...i", &[&x]).unwrap(),
        f32s(&[2, 2], &[0., 3., 4., 7.])
    );
    // Implicit with ellipsis: batch dims first.
    assert_eq!(eq("...ii", &[&x]).unwrap(), f32s(&[2], &[3., 11.]));
    // [2, 1, 1, 2] x [3, 2, 1] broadcasts to [2, 3, 1, 1].
    let a = f32s(&[2, 1, 1, 2], &[1., 2., 3., 4.]);
    let b = f32s(&[3, 2, 1], &[1., 1., 0., 1., 1., 0.]);
    let y = eq("...ij,...jk->...ik", &[&a, &b]).unwrap();
    assert_eq!(y, f32s(&[2, 3, 1, 1], &[3., 2., 1., 7., 4., 3.]));
}

#[test]
fn bad_equations_and_operands() {
    let a = f32s(&[2, 2], &[0.; 4]);
    let err = |e: &str, ins: &[&Tensor]| eq(e, ins).unwrap_err();
    assert!(err("ij,jk->ik", &[&a]).contains("has 2 terms but the node has 1 inputs"));
    assert!(err("ijk->i", &[&a]).contains("does not fit term of 3 letters"));
    assert!(err("i1->i", &[&a]).contains("only letters and '...'"));
    assert!(err("ij->ii", &[&a]).contains("output term repeats"));
    assert!(err("ij->k", &[&a]).contains("output label 'k' is in no input term"));
    assert!(err("......->", &[&a]).contains("more than one ellipsis"));
    let b = f32s(&[3], &[0.; 3]);
    assert!(err("ij,j->i", &[&a, &b]).contains("label 'j' has sizes 2 and 3"));
    let i = i32s(&[2], &[1, 2]);
    assert!(err("i,i", &[&b, &i]).contains("input types differ"));
    assert!(err("i", &[&bools(&[1], &[true])]).contains("element type bool"));
    // Not in the registry before 12.
    let n = node("Einsum", vec![attr::string("equation", "i")]);
    assert!(resolve(&n, 11).is_err());
}
