//! Unit tests of sdpa.rs: one- and two-key cases worked by hand, the masks, the caches, the
//! captured scores, and error cases.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node, ValueId};
use crate::onnx::proto::AttributeProto;

fn node(attrs: Vec<AttributeProto>, n_out: usize, omit: &[usize]) -> Node {
    let mut n = Node::new("Attention", "");
    for a in attrs {
        n.set_attr(a);
    }
    n.outputs = (0..n_out)
        .map(|i| (!omit.contains(&i)).then_some(ValueId(i as u32)))
        .collect();
    n
}

fn run(n: &Node, opset: i64, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, String> {
    run_at(attention, n, opset, inputs)
}

fn assert_vals(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol, "element {i}: got {a}, want {b}");
    }
}

/// The weight of the first of two keys whose scores are `s0` and `s1`.
fn p0(s0: f64, s1: f64) -> f64 {
    1.0 / (1.0 + (s1 - s0).exp())
}

/// One query [1, 0] against keys [1, 0] and [0, 1] with values 10 and 20: scores 1/√2 and 0.
#[test]
fn two_keys_by_hand() {
    let q = f32s(&[1, 1, 1, 2], &[1.0, 0.0]);
    let k = f32s(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]);
    let v = f32s(&[1, 1, 2, 1], &[10.0, 20.0]);
    let y = run(&node(vec![], 1, &[]), 23, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    let p = p0(0.5f64.sqrt(), 0.0);
    assert_vals(&y[0], &[1, 1, 1, 1], &[10.0 * p + 20.0 * (1.0 - p)], 1e-5);
    // scale 2 and softcap 1: scores 1·tanh(2) and 0.
    let n = node(
        vec![attr::float("scale", 2.0), attr::float("softcap", 1.0)],
        1,
        &[],
    );
    let y = run(&n, 23, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    let p = p0(2f64.tanh(), 0.0);
    assert_vals(&y[0], &[1, 1, 1, 1], &[10.0 * p + 20.0 * (1.0 - p)], 1e-5);
}

/// 3-D inputs, two query heads sharing one key/value head (grouped-query), causal: query 0
/// sees key 0 only, query 1 both keys (all scores 0 with zero queries, so a plain mean).
#[test]
fn gqa_causal_3d() {
    let q = f32s(&[1, 2, 2], &[0.0; 4]);
    let k = f32s(&[1, 2, 1], &[1.0, 2.0]);
    let v = f32s(&[1, 2, 1], &[4.0, 8.0]);
    let n = node(
        vec![
            attr::int("q_num_heads", 2),
            attr::int("kv_num_heads", 1),
            attr::int("is_causal", 1),
        ],
        1,
        &[],
    );
    let y = run(&n, 23, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    // [B, S, Hq·Dv]: query 0 (both heads) = 4, query 1 = 6.
    assert_vals(&y[0], &[1, 2, 2], &[4.0, 4.0, 6.0, 6.0], 1e-6);
}

/// A bool mask hides key 1 from query 0; query 1's row is all false: zero output and zero
/// probabilities (mode 3), where a float mask of -inf gives the same.
#[test]
fn masks_and_fully_masked_rows() {
    let q = f32s(&[1, 1, 2, 1], &[1.0, 1.0]);
    let k = f32s(&[1, 1, 2, 1], &[1.0, 2.0]);
    let v = f32s(&[1, 1, 2, 1], &[3.0, 5.0]);
    let m = bools(&[2, 2], &[true, false, false, false]);
    let n = node(vec![attr::int("qk_matmul_output_mode", 3)], 4, &[1, 2]);
    let y = run(&n, 23, &[Some(&q), Some(&k), Some(&v), Some(&m)]).unwrap();
    assert_vals(&y[0], &[1, 1, 2, 1], &[3.0, 0.0], 1e-6);
    assert_vals(&y[3], &[1, 1, 2, 2], &[1.0, 0.0, 0.0, 0.0], 1e-6);
    let inf = f32::NEG_INFINITY;
    let mf = f32s(&[2, 2], &[0.0, inf, inf, inf]);
    let y = run(&n, 23, &[Some(&q), Some(&k), Some(&v), Some(&mf)]).unwrap();
    assert_vals(&y[0], &[1, 1, 2, 1], &[3.0, 0.0], 1e-6);
    // A mask shorter than the keys reads -inf past its end: [1] hides key 1.
    let short = f32s(&[1], &[0.0]);
    let y = run(
        &node(vec![], 1, &[]),
        23,
        &[Some(&q), Some(&k), Some(&v), Some(&short)],
    )
    .unwrap();
    assert_vals(&y[0], &[1, 1, 2, 1], &[3.0, 3.0], 1e-6);
}

/// past_key/past_value go in front of K and V; causal with a past of 1 lets query 0 see keys
/// 0 and 1 (offset 1). Mode 0 returns the raw scaled scores.
#[test]
fn past_and_present() {
    let q = f64s(&[1, 1, 1, 1], &[1.0]);
    let k = f64s(&[1, 1, 1, 1], &[2.0]);
    let v = f64s(&[1, 1, 1, 1], &[7.0]);
    let pk = f64s(&[1, 1, 1, 1], &[0.0]);
    let pv = f64s(&[1, 1, 1, 1], &[1.0]);
    let n = node(vec![attr::int("is_causal", 1)], 4, &[]);
    let ins = [Some(&q), Some(&k), Some(&v), None, Some(&pk), Some(&pv)];
    let y = run(&n, 24, &ins).unwrap();
    let p = p0(0.0, 2.0);
    assert_vals(&y[0], &[1, 1, 1, 1], &[p + 7.0 * (1.0 - p)], 1e-12);
    assert_vals(&y[1], &[1, 1, 2, 1], &[0.0, 2.0], 0.0);
    assert_vals(&y[2], &[1, 1, 2, 1], &[1.0, 7.0], 0.0);
    assert_vals(&y[3], &[1, 1, 1, 2], &[0.0, 2.0], 1e-12);
}

/// nonpad_kv_seqlen (24) hides keys past each batch's length; the window (25) bounds both
/// sides of the query's position.
#[test]
fn nonpad_and_window() {
    let q = f32s(&[1, 1, 1, 1], &[0.0]);
    let k = f32s(&[1, 1, 3, 1], &[0.0; 3]);
    let v = f32s(&[1, 1, 3, 1], &[1.0, 2.0, 6.0]);
    let len = i64s(&[1], &[2]);
    let ins = [Some(&q), Some(&k), Some(&v), None, None, None, Some(&len)];
    let y = run(&node(vec![], 1, &[]), 24, &ins).unwrap();
    assert_vals(&y[0], &[1, 1, 1, 1], &[1.5], 1e-6);
    let e = run(&node(vec![], 1, &[]), 23, &ins).unwrap_err();
    assert!(e.contains("from opset 24"), "{e}");
    // Query 0 at position 0, right window 1: keys 0 and 1.
    let n = node(vec![attr::int("right_window_size", 1)], 1, &[]);
    let y = run(&n, 25, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    assert_vals(&y[0], &[1, 1, 1, 1], &[1.5], 1e-6);
    // Before 25 the attribute does not exist: all three keys.
    let y = run(&n, 24, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    assert_vals(&y[0], &[1, 1, 1, 1], &[3.0], 1e-6);
}

#[test]
fn bad_inputs_are_errors() {
    let q = f32s(&[1, 3, 1, 1], &[0.0; 3]);
    let k = f32s(&[1, 2, 1, 1], &[0.0; 2]);
    let v = f32s(&[1, 2, 1, 1], &[0.0; 2]);
    let n = node(vec![], 1, &[]);
    let e = run(&n, 23, &[Some(&q), Some(&k), Some(&v)]).unwrap_err();
    assert!(e.contains("multiple of"), "{e}");
    let q3 = f32s(&[1, 1, 2], &[0.0; 2]);
    let k3 = f32s(&[1, 1, 2], &[0.0; 2]);
    let e = run(&n, 23, &[Some(&q3), Some(&k3), Some(&k3)]).unwrap_err();
    assert!(e.contains("need the q_num_heads"), "{e}");
    let e = run(&n, 23, &[Some(&q3), Some(&k), Some(&v)]).unwrap_err();
    assert!(e.contains("same rank"), "{e}");
    let q1 = f32s(&[1, 1, 1, 1], &[0.0]);
    let k1 = f32s(&[1, 1, 1, 1], &[0.0]);
    let bad_mask = f32s(&[3, 1], &[0.0; 3]);
    let e = run(&n, 23, &[Some(&q1), Some(&k1), Some(&k1), Some(&bad_mask)]).unwrap_err();
    assert!(e.contains("does not broadcast"), "{e}");
    let e = run(&n, 23, &[Some(&q1), Some(&k1), Some(&k1), None, Some(&k1)]).unwrap_err();
    assert!(e.contains("go together"), "{e}");
    let len = i64s(&[1], &[1]);
    let ins = [
        Some(&q1),
        Some(&k1),
        Some(&k1),
        None,
        Some(&k1),
        Some(&k1),
        Some(&len),
    ];
    let e = run(&n, 24, &ins).unwrap_err();
    assert!(e.contains("cannot be combined"), "{e}");
    let mode = node(vec![attr::int("qk_matmul_output_mode", 4)], 1, &[]);
    let e = run(&mode, 23, &[Some(&q1), Some(&k1), Some(&k1)]).unwrap_err();
    assert!(e.contains("qk_matmul_output_mode"), "{e}");
    let heads4 = node(vec![attr::int("q_num_heads", 1)], 1, &[]);
    let e = run(&heads4, 25, &[Some(&q1), Some(&k1), Some(&k1)]).unwrap_err();
    assert!(e.contains("must not be set with 4-D"), "{e}");
    let i = i64s(&[1, 1, 1, 1], &[0]);
    let e = run(&n, 23, &[Some(&i), Some(&k1), Some(&k1)]).unwrap_err();
    assert!(e.contains("float"), "{e}");
}
