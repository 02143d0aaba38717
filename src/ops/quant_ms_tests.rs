//! Unit tests of quant_ms.rs: small hand-checked products (the expected sums worked out in the
//! comments) and the errors of what is refused.

use super::super::common::test_util::*;
use super::*;
use crate::ir::model::MS_DOMAIN;
use crate::ir::{attr, Node};

fn u8s(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::U8(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

fn nbits_node(k: i64, n: i64, bits: i64, block: i64) -> Node {
    let mut node = Node::new("MatMulNBits", MS_DOMAIN);
    for a in [
        attr::int("K", k),
        attr::int("N", n),
        attr::int("bits", bits),
        attr::int("block_size", block),
    ] {
        node.set_attr(a);
    }
    node
}

fn nbits(node: &Node, ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    run_at(matmul_nbits, node, 1, ins).map(|mut v| v.remove(0))
}

/// K 20, N 2, block 16 (two blocks, the second with 4 of its 16 codes used), 4 bits.
/// Row 0: every code 9; row 1: codes 10, 7, 10, 7, ... (bytes 0x7A), the unused codes of its
/// second block 15 (0xFF bytes), which must not count.
fn b_20x2() -> Tensor {
    let mut v = vec![0x99u8; 16];
    v.extend([0x7A; 8]);
    v.extend([0x7A, 0x7A, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
    u8s(&[2, 2, 8], &v)
}

/// A [2, 20]: a row of ones, then 0, 1, ..., 19.
fn a_2x20() -> Tensor {
    let mut v = vec![1f32; 20];
    v.extend((0..20).map(|i| i as f32));
    f32s(&[2, 20], &v)
}

#[test]
fn nbits_4bit_default_zero_point() {
    let node = nbits_node(20, 2, 4, 16);
    let scales = f32s(&[2, 2], &[1., 2., 0.5, 1.]);
    let y = nbits(&node, &[Some(&a_2x20()), Some(&b_20x2()), Some(&scales)]).unwrap();
    // Zero point 8. Row 0: W = 1 for k < 16, 2 after. Ones: 16 + 4·2 = 24; iota: 120 +
    // 2·(16+17+18+19) = 260. Row 1: W = 2, -1, ... scaled 0.5 then 1. Ones: 8·0.5 + 2 = 6;
    // iota: (0+2+..+14) - (1+3+..+15)/2 + 2·16 - 17 + 2·18 - 19 = 56 - 32 + 32 = 56.
    assert_eq!(y, f32s(&[2, 2], &[24., 6., 260., 56.]));
    // Bias, and A with batch dims.
    let a = Tensor::F32(
        a_2x20()
            .as_f32()
            .unwrap()
            .clone()
            .into_shape_with_order(IxDyn(&[2, 1, 20]))
            .unwrap(),
    );
    let bias = f32s(&[2], &[1., -1.]);
    let ins = [
        Some(&a),
        Some(&b_20x2()),
        Some(&scales),
        None,
        None,
        Some(&bias),
    ];
    let y = nbits(&node, &ins).unwrap();
    assert_eq!(y, f32s(&[2, 1, 2], &[25., 5., 261., 55.]));
}

#[test]
fn nbits_zero_points_packed_and_float() {
    let node = nbits_node(20, 2, 4, 16);
    let scales = f32s(&[2, 2], &[1., 2., 0.5, 1.]);
    let ones = f32s(&[1, 20], &[1.; 20]);
    // Packed: one byte per row (2 blocks of 4 bits). Row 0: block 0's zero point 9 (low nibble),
    // block 1's 8; row 1: 8 and 8 (the default).
    let zp = u8s(&[2, 1], &[0x89, 0x88]);
    let y = nbits(
        &node,
        &[Some(&ones), Some(&b_20x2()), Some(&scales), Some(&zp)],
    )
    .unwrap();
    // Row 0: block 0 all (9 - 9) = 0, block 1 4·2 = 8.
    assert_eq!(y, f32s(&[1, 2], &[8., 6.]));
    // Unpacked float zero points: row 0 block 0 8.5 -> W 0.5.
    let zp = f32s(&[2, 2], &[8.5, 8., 8., 8.]);
    let y = nbits(
        &node,
        &[Some(&ones), Some(&b_20x2()), Some(&scales), Some(&zp)],
    )
    .unwrap();
    assert_eq!(y, f32s(&[1, 2], &[16., 6.]));
    // A simple g_idx (k / block_size) changes nothing; another grouping is refused.
    let g: Vec<i32> = (0..20).map(|k| k / 16).collect();
    let gi = i32s(&[20], &g);
    let ins = [
        Some(&ones),
        Some(&b_20x2()),
        Some(&scales),
        Some(&zp),
        Some(&gi),
    ];
    assert_eq!(nbits(&node, &ins).unwrap(), f32s(&[1, 2], &[16., 6.]));
    let gi = i32s(&[20], &[0; 20]);
    let ins = [
        Some(&ones),
        Some(&b_20x2()),
        Some(&scales),
        Some(&zp),
        Some(&gi),
    ];
    let e = nbits(&node, &ins).unwrap_err();
    assert!(e.contains("g_idx"), "{e}");
}

#[test]
fn nbits_8bit_and_float16() {
    // K 16, N 1, 8 bits: codes 128 + i, zero point 128 by default, scale 0.5 -> W = i / 2.
    let node = nbits_node(16, 1, 8, 16);
    let b = u8s(&[1, 1, 16], &(0..16).map(|i| 128 + i).collect::<Vec<u8>>());
    let s = f32s(&[1, 1], &[0.5]);
    let y = nbits(&node, &[Some(&f32s(&[16], &[1.; 16])), Some(&b), Some(&s)]).unwrap();
    // 1-D A: Y has shape [N]; (0 + 1 + ... + 15) / 2 = 60.
    assert_eq!(y, f32s(&[1], &[60.]));
    let h = |v: &[f32]| f32s(&[v.len()], v).narrow(DType::F16).unwrap();
    let y = nbits(&node, &[Some(&h(&[1.; 16])), Some(&b), Some(&h(&[0.5]))]).unwrap();
    assert_eq!(y, h(&[60.]));
}

#[test]
fn nbits_empty_weight_is_bias() {
    let node = nbits_node(20, 2, 4, 16);
    let b = u8s(&[2, 0, 8], &[]);
    let bias = f32s(&[2], &[3., 4.]);
    let e = f32s(&[0], &[]);
    let ins = [Some(&a_2x20()), Some(&b), Some(&e), None, None, Some(&bias)];
    assert_eq!(
        nbits(&node, &ins).unwrap(),
        f32s(&[2, 2], &[3., 4., 3., 4.])
    );
}

#[test]
fn nbits_refusals() {
    let parse = |n: &Node| {
        crate::ops::resolve(n, 1)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let e = parse(&nbits_node(20, 2, 2, 16)).unwrap_err();
    assert!(e.contains("'bits' 2"), "{e}");
    let e = parse(&nbits_node(20, 2, 3, 16)).unwrap_err();
    assert!(e.contains("'bits' must be"), "{e}");
    let e = parse(&nbits_node(20, 2, 4, 24)).unwrap_err();
    assert!(e.contains("power of two"), "{e}");
    let e = parse(&nbits_node(0, 2, 4, 16)).unwrap_err();
    assert!(e.contains("'K'"), "{e}");
    let mut n = nbits_node(20, 2, 4, 16);
    n.set_attr(attr::int("weight_prepacked", 1));
    assert!(parse(&n).unwrap_err().contains("weight_prepacked"));

    let node = nbits_node(20, 2, 4, 16);
    let s = f32s(&[2, 2], &[1.; 4]);
    let e = nbits(
        &node,
        &[Some(&f32s(&[1, 19], &[0.; 19])), Some(&b_20x2()), Some(&s)],
    );
    assert!(e.unwrap_err().contains("last dim must be K = 20"));
    let b = u8s(&[2, 2, 4], &[0; 16]);
    let e = nbits(&node, &[Some(&a_2x20()), Some(&b), Some(&s)]).unwrap_err();
    assert!(e.contains("B must have shape [2, 2, 8]"), "{e}");
    let e = nbits(
        &node,
        &[
            Some(&a_2x20()),
            Some(&b_20x2()),
            Some(&f32s(&[3], &[1.; 3])),
        ],
    );
    assert!(e.unwrap_err().contains("scales has shape [3]"));
    let zp = u8s(&[2, 2], &[0; 4]);
    let e = nbits(
        &node,
        &[Some(&a_2x20()), Some(&b_20x2()), Some(&s), Some(&zp)],
    );
    assert!(e.unwrap_err().contains("packed uint8 zero_points"));
    let s64 = f64s(&[2, 2], &[1.; 4]);
    let e = nbits(&node, &[Some(&a_2x20()), Some(&b_20x2()), Some(&s64)]);
    assert!(e.unwrap_err().contains("scales has type"));
}

fn dqmm(ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let node = Node::new("DynamicQuantizeMatMul", MS_DOMAIN);
    run_at(dynamic_quantize_matmul, &node, 1, ins).map(|mut v| v.remove(0))
}

#[test]
fn dynamic_quantize_matmul_values() {
    // A [[0, 255]]: scale 1, zero point 0, so A_q = A. B - b_zp = [[9, 18], [2, 2]].
    let b = u8s(&[2, 2], &[10, 20, 3, 4]);
    let bzp = u8s(&[2], &[1, 2]);
    let bs = f32s(&[2], &[0.5, 2.]);
    let bias = f32s(&[2], &[1., 2.]);
    let a = f32s(&[1, 2], &[0., 255.]);
    let y = dqmm(&[Some(&a), Some(&b), Some(&bs), Some(&bzp), Some(&bias)]).unwrap();
    // [255·2·0.5 + 1, 255·2·2 + 2].
    assert_eq!(y, f32s(&[1, 2], &[256., 1022.]));
    // A [[-255, 0]]: scale 1, zero point 255, A_q - a_zp = [-255, 0]; no b_zp, scalar scale.
    let a = f32s(&[1, 2], &[-255., 0.]);
    let y = dqmm(&[Some(&a), Some(&b), Some(&f32s(&[], &[2.]))]).unwrap();
    assert_eq!(y, f32s(&[1, 2], &[-5100., -10200.]));
    // A value between codes rounds: A [[0, 2, 255]] -> scale 1, A_q [0, 2, 255].
    let b3 = Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[3, 1]), vec![1i8, -1, 1]).unwrap());
    let a = f32s(&[1, 3], &[0., 2.4, 255.]);
    let y = dqmm(&[Some(&a), Some(&b3), Some(&f32s(&[1], &[1.]))]).unwrap();
    assert_eq!(y, f32s(&[1, 1], &[253.]));
}

#[test]
fn dynamic_quantize_matmul_refusals() {
    let b = u8s(&[2, 2], &[0; 4]);
    let a = f32s(&[1, 2], &[0., 1.]);
    let e = dqmm(&[Some(&a), Some(&b), Some(&f32s(&[3], &[1.; 3]))]).unwrap_err();
    assert!(e.contains("b_scale has 3 elements"), "{e}");
    let e = dqmm(&[Some(&a), Some(&b), Some(&f64s(&[], &[1.]))]).unwrap_err();
    assert!(e.contains("b_scale must be float32"), "{e}");
    let bias = f32s(&[3], &[0.; 3]);
    let e = dqmm(&[
        Some(&a),
        Some(&b),
        Some(&f32s(&[], &[1.])),
        None,
        Some(&bias),
    ])
    .unwrap_err();
    assert!(e.contains("bias has 3 elements; want 2"), "{e}");
    let bad = Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[1]), vec![0i8]).unwrap());
    let e = dqmm(&[Some(&a), Some(&b), Some(&f32s(&[], &[1.])), Some(&bad)]).unwrap_err();
    assert!(e.contains("zero point type"), "{e}");
    let e = dqmm(&[
        Some(&f64s(&[1, 2], &[0., 1.])),
        Some(&b),
        Some(&f32s(&[], &[1.])),
    ]);
    assert!(e.unwrap_err().contains("not supported"));
}
