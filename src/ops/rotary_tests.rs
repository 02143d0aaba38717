//! Unit tests of rotary.rs: rotations worked by hand (angles of 90 and 180 degrees, so the
//! expected values are exact).

use super::super::common::test_util::*;
use super::super::{resolve, Kernel};
use super::*;
use crate::ir::model::MS_DOMAIN;
use crate::ir::{attr, Node};
use crate::onnx::proto::AttributeProto;

fn onnx_node(attrs: Vec<AttributeProto>) -> Node {
    node("RotaryEmbedding", attrs)
}

fn ms_node(attrs: Vec<AttributeProto>) -> Node {
    let mut n = Node::new("RotaryEmbedding", MS_DOMAIN);
    for a in attrs {
        n.set_attr(a);
    }
    n
}

fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> Result<Vec<f32>, String> {
    let k: Kernel = resolve(n, opset).map_err(|e| e.to_string())?.kernel();
    run_at(k, n, opset, ins).map(|v| v[0].to_f64_vec().iter().map(|&x| x as f32).collect())
}

/// Caches of two positions: position 0 turns by 0 degrees, position 1 by 90 (cos 0, sin 1).
fn caches(half: usize) -> (Tensor, Tensor) {
    let mut cos = vec![1.0; half];
    cos.extend(vec![0.0; half]);
    let mut sin = vec![0.0; half];
    sin.extend(vec![1.0; half]);
    (f32s(&[2, half], &cos), f32s(&[2, half], &sin))
}

#[test]
fn onnx_halves_and_interleaved_4d() {
    // [batch 1, heads 1, seq 2, head 4]; token 1 sits at position 1 (90 degrees).
    let x = f32s(&[1, 1, 2, 4], &[1., 2., 3., 4., 1., 2., 3., 4.]);
    let (cos, sin) = caches(2);
    let pos = i64s(&[1, 2], &[0, 1]);
    let ins = [Some(&x), Some(&cos), Some(&sin), Some(&pos)];
    // Halves: pairs (x0, x2), (x1, x3) -> (-x2, x0), (-x3, x1).
    let got = run(&onnx_node(vec![]), 23, &ins).unwrap();
    assert_eq!(got, [1., 2., 3., 4., -3., -4., 1., 2.]);
    // Interleaved: pairs (x0, x1), (x2, x3) -> (-x1, x0), (-x3, x2).
    let got = run(&onnx_node(vec![attr::int("interleaved", 1)]), 23, &ins).unwrap();
    assert_eq!(got, [1., 2., 3., 4., -2., 1., -4., 3.]);
}

#[test]
fn onnx_partial_rotation_3d_and_no_position_ids() {
    // 3-D [1, 1, 2 heads * 4]; rotary dim 2: only (x0, x1) of each head turns.
    let x = f32s(&[1, 1, 8], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let (cos, sin) = (f32s(&[1, 1, 1], &[-1.]), f32s(&[1, 1, 1], &[0.]));
    let n = onnx_node(vec![
        attr::int("num_heads", 2),
        attr::int("rotary_embedding_dim", 2),
    ]);
    let got = run(&n, 23, &[Some(&x), Some(&cos), Some(&sin), None]).unwrap();
    assert_eq!(got, [-1., -2., 3., 4., -5., -6., 7., 8.]);
    // 3-D input without num_heads is refused.
    let err = run(&onnx_node(vec![]), 23, &[Some(&x), Some(&cos), Some(&sin)]).unwrap_err();
    assert!(err.contains("needs attribute 'num_heads'"), "{err}");
}

#[test]
fn onnx_bad_shapes_and_positions() {
    let x = f32s(&[1, 1, 2, 4], &[0.; 8]);
    let (cos, sin) = caches(2);
    let far = i64s(&[1, 2], &[0, 2]);
    let err = run(
        &onnx_node(vec![]),
        23,
        &[Some(&x), Some(&cos), Some(&sin), Some(&far)],
    )
    .unwrap_err();
    assert!(
        err.contains("position 2 is outside the caches' 2 rows"),
        "{err}"
    );
    let neg = i64s(&[1, 2], &[0, -1]);
    assert!(run(
        &onnx_node(vec![]),
        23,
        &[Some(&x), Some(&cos), Some(&sin), Some(&neg)]
    )
    .is_err());
    let (c3, s3) = caches(3);
    let pos = i64s(&[1, 2], &[0, 1]);
    let err = run(
        &onnx_node(vec![]),
        23,
        &[Some(&x), Some(&c3), Some(&s3), Some(&pos)],
    )
    .unwrap_err();
    assert!(err.contains("last dim must be rot/2 = 2"), "{err}");
    let err = onnx_node(vec![attr::int("rotary_embedding_dim", 3)]);
    assert!(resolve(&err, 23).is_err());
    let x2 = f32s(&[2, 4], &[0.; 8]);
    let err = run(&onnx_node(vec![]), 23, &[Some(&x2), Some(&cos), Some(&sin)]).unwrap_err();
    assert!(err.contains("must be 3-D"), "{err}");
}

#[test]
fn ms_start_position_and_per_token_ids() {
    // 3-D [1, 2 tokens, 4]: one head of 4, the head size taken from the caches (2 * 2).
    let x = f32s(&[1, 2, 4], &[1., 2., 3., 4., 1., 2., 3., 4.]);
    let (cos, sin) = caches(2);
    // position_ids [1] = start 0: tokens at positions 0 and 1.
    let start = i64s(&[1], &[0]);
    let n = ms_node(vec![]);
    let got = run(&n, 1, &[Some(&x), Some(&start), Some(&cos), Some(&sin)]).unwrap();
    assert_eq!(got, [1., 2., 3., 4., -3., -4., 1., 2.]);
    // Per-token ids [1, 2]: both at position 1.
    let ids = i64s(&[1, 2], &[1, 1]);
    let got = run(&n, 1, &[Some(&x), Some(&ids), Some(&cos), Some(&sin)]).unwrap();
    assert_eq!(got, [-3., -4., 1., 2., -3., -4., 1., 2.]);
    // Start 1 runs past the two cached positions.
    let late = i64s(&[1], &[1]);
    let err = run(&n, 1, &[Some(&x), Some(&late), Some(&cos), Some(&sin)]).unwrap_err();
    assert!(err.contains("position 2 is outside"), "{err}");
}

#[test]
fn ms_attributes() {
    assert!(resolve(&ms_node(vec![attr::int("is_packed_batching", 1)]), 1).is_err());
    assert!(resolve(&ms_node(vec![attr::float("scale", 2.0)]), 1).is_err());
    assert!(resolve(&ms_node(vec![attr::float("scale", 1.0)]), 1).is_ok());
    // rotary_embedding_dim without num_heads on 3-D input.
    let x = f32s(&[1, 1, 8], &[0.; 8]);
    let (cos, sin) = caches(1);
    let start = i64s(&[1], &[0]);
    let n = ms_node(vec![attr::int("rotary_embedding_dim", 2)]);
    let err = run(&n, 1, &[Some(&x), Some(&start), Some(&cos), Some(&sin)]).unwrap_err();
    assert!(err.contains("needs 'num_heads'"), "{err}");
    // With num_heads 2: heads of 4, the first 2 of each rotated (position 0: unchanged).
    let n = ms_node(vec![
        attr::int("rotary_embedding_dim", 2),
        attr::int("num_heads", 2),
        attr::int("interleaved", 1),
    ]);
    let x = f32s(&[1, 1, 8], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let got = run(&n, 1, &[Some(&x), Some(&start), Some(&cos), Some(&sin)]).unwrap();
    assert_eq!(got, [1., 2., 3., 4., 5., 6., 7., 8.]);
}
