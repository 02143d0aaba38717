//! Unit tests of ms_attention.rs: one-head cases worked by hand (head size 1, so the scores
//! are products of two numbers), the masks and caches, and error cases.

use super::super::common::test_util::*;
use super::*;
use crate::ir::model::MS_DOMAIN;
use crate::ir::{attr, Node, ValueId};
use crate::onnx::proto::AttributeProto;

fn node(op: &str, attrs: Vec<AttributeProto>, n_out: usize) -> Node {
    let mut n = Node::new(op, MS_DOMAIN);
    for a in attrs {
        n.set_attr(a);
    }
    n.outputs = (0..n_out).map(|i| Some(ValueId(i as u32))).collect();
    n
}

fn mha_node(attrs: Vec<AttributeProto>, n_out: usize) -> Node {
    let mut a = vec![attr::int("num_heads", 1)];
    a.extend(attrs);
    node(MHA, a, n_out)
}

fn run(n: &Node, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, String> {
    let op = super::super::resolve(n, 1).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, 1, inputs)
}

fn assert_vals(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol, "element {i}: got {a}, want {b}");
    }
    assert_eq!(g.len(), want.len());
}

/// The weight of the first of two keys whose scores are `s0` and `s1`.
fn p0(s0: f64, s1: f64) -> f64 {
    1.0 / (1.0 + (s1 - s0).exp())
}

/// One query 1 against keys 1 and 2 (scores 1 and 2), values 3 and 5.
#[test]
fn mha_by_hand_bias_and_padding() {
    let q = f32s(&[1, 1, 1], &[1.0]);
    let k = f32s(&[1, 2, 1], &[1.0, 2.0]);
    let v = f32s(&[1, 2, 1], &[3.0, 5.0]);
    let y = run(&mha_node(vec![], 1), &[Some(&q), Some(&k), Some(&v)]).unwrap();
    let p = p0(1.0, 2.0);
    assert_vals(&y[0], &[1, 1, 1], &[3.0 * p + 5.0 * (1.0 - p)], 1e-5);
    // bias [q, k, v] = [0, 0, 1] shifts the values by 1.
    let bias = f32s(&[3], &[0.0, 0.0, 1.0]);
    let y = run(
        &mha_node(vec![], 1),
        &[Some(&q), Some(&k), Some(&v), Some(&bias)],
    )
    .unwrap();
    assert_vals(&y[0], &[1, 1, 1], &[4.0 * p + 6.0 * (1.0 - p)], 1e-5);
    // key 1 padded: mask_filter_value -10000 leaves key 0 alone.
    let mask = i32s(&[1, 2], &[1, 0]);
    let ins = [Some(&q), Some(&k), Some(&v), None, Some(&mask)];
    let y = run(&mha_node(vec![], 1), &ins).unwrap();
    assert_vals(&y[0], &[1, 1, 1], &[3.0], 1e-5);
    // The same as lengths [1].
    let lens = i32s(&[1], &[1]);
    let ins = [Some(&q), Some(&k), Some(&v), None, Some(&lens)];
    let y = run(&mha_node(vec![], 1), &ins).unwrap();
    assert_vals(&y[0], &[1, 1, 1], &[3.0], 1e-5);
    // attention_bias [1, 1, 1, 2] = [1, 0] evens the scores: the mean.
    let ab = f32s(&[1, 1, 1, 2], &[1.0, 0.0]);
    let ins = [Some(&q), Some(&k), Some(&v), None, None, Some(&ab)];
    let y = run(&mha_node(vec![], 1), &ins).unwrap();
    assert_vals(&y[0], &[1, 1, 1], &[4.0], 1e-5);
}

/// Two queries (0 and 0: plain means), a past of one key, causal: query 0 sees past + key 0,
/// query 1 all three. present = past then new.
#[test]
fn mha_past_and_unidirectional() {
    let q = f32s(&[1, 2, 1], &[0.0, 0.0]);
    let k = f32s(&[1, 2, 1], &[1.0, 2.0]);
    let v = f32s(&[1, 2, 1], &[4.0, 8.0]);
    let pk = f32s(&[1, 1, 1, 1], &[9.0]);
    let pv = f32s(&[1, 1, 1, 1], &[0.0]);
    let n = mha_node(vec![attr::int("unidirectional", 1)], 3);
    let ins = [
        Some(&q),
        Some(&k),
        Some(&v),
        None,
        None,
        None,
        Some(&pk),
        Some(&pv),
    ];
    let y = run(&n, &ins).unwrap();
    assert_vals(&y[0], &[1, 2, 1], &[2.0, 4.0], 1e-5);
    assert_vals(&y[1], &[1, 1, 3, 1], &[9.0, 1.0, 2.0], 0.0);
    assert_vals(&y[2], &[1, 1, 3, 1], &[0.0, 4.0, 8.0], 0.0);
}

#[test]
fn mha_bad_inputs_are_errors() {
    let q = f32s(&[1, 1, 2], &[0.0; 2]);
    let k = f32s(&[1, 1, 2], &[0.0; 2]);
    let e = run(&node(MHA, vec![], 1), &[Some(&q), Some(&k), Some(&k)]).unwrap_err();
    assert!(e.contains("num_heads 0"), "{e}");
    let e = run(&mha_node(vec![], 1), &[Some(&q)]).unwrap_err();
    assert!(e.contains("key and value are required"), "{e}");
    let e = run(&mha_node(vec![], 4), &[Some(&q), Some(&k), Some(&k)]).unwrap_err();
    assert!(e.contains("qk output"), "{e}");
    let m = i64s(&[1, 1], &[1]);
    let ins = [Some(&q), Some(&k), Some(&k), None, Some(&m)];
    let e = run(&mha_node(vec![], 1), &ins).unwrap_err();
    assert!(e.contains("must be int32"), "{e}");
    let k3 = f32s(&[1, 1, 3], &[0.0; 3]);
    let e = run(&mha_node(vec![], 1), &[Some(&q), Some(&k3), Some(&k3)]).unwrap_err();
    assert!(e.contains("key [1, 1, 3]"), "{e}");
}

fn gqa_node(attrs: Vec<AttributeProto>, n_out: usize) -> Node {
    let mut a = vec![attr::int("num_heads", 2), attr::int("kv_num_heads", 1)];
    a.extend(attrs);
    node(GQA, a, n_out)
}

/// First prompt: two zero queries (both heads share the one key/value head), causal: row 0
/// sees value 4, row 1 the mean of 4 and 8.
#[test]
fn gqa_first_prompt() {
    let q = f32s(&[1, 2, 2], &[0.0; 4]);
    let k = f32s(&[1, 2, 1], &[1.0, 2.0]);
    let v = f32s(&[1, 2, 1], &[4.0, 8.0]);
    let seqlens = i32s(&[1], &[1]);
    let total = i32s(&[], &[2]);
    let ins = [
        Some(&q),
        Some(&k),
        Some(&v),
        None,
        None,
        Some(&seqlens),
        Some(&total),
    ];
    let y = run(&gqa_node(vec![], 3), &ins).unwrap();
    assert_vals(&y[0], &[1, 2, 2], &[4.0, 4.0, 6.0, 6.0], 1e-5);
    assert_vals(&y[1], &[1, 1, 2, 1], &[1.0, 2.0], 0.0);
    // A window of 1 keeps each query's own key only.
    let y = run(&gqa_node(vec![attr::int("local_window_size", 1)], 1), &ins).unwrap();
    assert_vals(&y[0], &[1, 2, 2], &[4.0, 4.0, 8.0, 8.0], 1e-5);
    // The packed form: query rows [q0, q1, k, v].
    let packed = f32s(&[1, 2, 4], &[0.0, 0.0, 1.0, 4.0, 0.0, 0.0, 2.0, 8.0]);
    let ins_p = [
        Some(&packed),
        None,
        None,
        None,
        None,
        Some(&seqlens),
        Some(&total),
    ];
    let y = run(&gqa_node(vec![], 1), &ins_p).unwrap();
    assert_vals(&y[0], &[1, 2, 2], &[4.0, 4.0, 6.0, 6.0], 1e-5);
}

/// Decoding one token after a past of one: query 1 (head size 1) against keys 3 (past) and
/// 1 (new), softcap 1 on the scores, present = [past, new].
#[test]
fn gqa_decode_with_past_and_softcap() {
    let q = f32s(&[1, 1, 2], &[1.0, 1.0]);
    let k = f32s(&[1, 1, 1], &[1.0]);
    let v = f32s(&[1, 1, 1], &[2.0]);
    let pk = f32s(&[1, 1, 1, 1], &[3.0]);
    let pv = f32s(&[1, 1, 1, 1], &[6.0]);
    let seqlens = i32s(&[1], &[1]);
    let total = i32s(&[1], &[2]);
    let ins = [
        Some(&q),
        Some(&k),
        Some(&v),
        Some(&pk),
        Some(&pv),
        Some(&seqlens),
        Some(&total),
    ];
    let y = run(&gqa_node(vec![attr::float("softcap", 1.0)], 3), &ins).unwrap();
    let p = p0(3f64.tanh(), 1f64.tanh());
    let want = 6.0 * p + 2.0 * (1.0 - p);
    assert_vals(&y[0], &[1, 1, 2], &[want, want], 1e-5);
    assert_vals(&y[1], &[1, 1, 2, 1], &[3.0, 1.0], 0.0);
    assert_vals(&y[2], &[1, 1, 2, 1], &[6.0, 2.0], 0.0);
}

#[test]
fn gqa_bad_inputs_are_errors() {
    let q = f32s(&[1, 1, 2], &[0.0; 2]);
    let k = f32s(&[1, 1, 1], &[0.0]);
    let seqlens = i32s(&[1], &[0]);
    let total = i32s(&[1], &[1]);
    let ins = [
        Some(&q),
        Some(&k),
        Some(&k),
        None,
        None,
        Some(&seqlens),
        Some(&total),
    ];
    let e = run(&gqa_node(vec![attr::int("do_rotary", 1)], 1), &ins).unwrap_err();
    assert!(e.contains("do_rotary=1 is not supported"), "{e}");
    let e = run(&node(GQA, vec![attr::int("num_heads", 2)], 1), &ins).unwrap_err();
    assert!(e.contains("kv_num_heads None"), "{e}");
    let bad = i64s(&[1], &[0]);
    let ins_b = [
        Some(&q),
        Some(&k),
        Some(&k),
        None,
        None,
        Some(&bad),
        Some(&total),
    ];
    let e = run(&gqa_node(vec![], 1), &ins_b).unwrap_err();
    assert!(e.contains("seqlens_k must be int32"), "{e}");
    let big = i32s(&[1], &[5]);
    let ins_c = [
        Some(&q),
        Some(&k),
        Some(&k),
        None,
        None,
        Some(&big),
        Some(&total),
    ];
    let e = run(&gqa_node(vec![], 1), &ins_c).unwrap_err();
    assert!(e.contains("seqlens_k[0] = 5"), "{e}");
    let e = run(
        &gqa_node(
            vec![attr::int("causal", 0), attr::int("local_window_size", 2)],
            1,
        ),
        &ins,
    )
    .unwrap_err();
    assert!(e.contains("local_window_size 2"), "{e}");
}

/// Inside a pool of threads the (batch, head) pairs split between them: the output is the
/// one-thread output bit for bit, with a key_padding_mask, causal masking and more heads than
/// threads (2 batches x 8 heads of 128 queries: enough work to split).
#[test]
fn mha_threads_give_the_same_bits() {
    let (b, s, n, d) = (2usize, 128usize, 8usize, 16usize);
    let vals = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 - 500.0) / 250.0)
            .collect()
    };
    let q = f32s(&[b, s, n * d], &vals(b * s * n * d, 1));
    let k = f32s(&[b, s, n * d], &vals(b * s * n * d, 2));
    let v = f32s(&[b, s, n * d], &vals(b * s * n * d, 3));
    let mask_vals: Vec<i32> = (0..b * s)
        .map(|i| i32::from(i % s < s - 5 * (i / s)))
        .collect();
    let mask =
        Tensor::I32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[b, s]), mask_vals).unwrap());
    let node = node(
        MHA,
        vec![
            attr::int("num_heads", n as i64),
            attr::int("unidirectional", 1),
        ],
        1,
    );
    let ins = [Some(&q), Some(&k), Some(&v), None, Some(&mask)];
    let one = run(&node, &ins).unwrap();
    assert!(crate::threads::split(b * n, usize::MAX).is_none());
    for threads in [2, 3] {
        let many = crate::threads::with_threads(threads, || {
            assert!(crate::threads::split(b * n, b * n * s * s * 2 * d).is_some());
            run(&node, &ins).unwrap()
        })
        .unwrap();
        assert_eq!(f32_bits(&one[0]), f32_bits(&many[0]), "{threads} threads");
    }
}
