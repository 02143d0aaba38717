//! The `matmul_nbits` fusion (blocked DequantizeLinear of a constant weight → MatMul →
//! com.microsoft.MatMulNBits with the weight repacked) on hand-built graphs: every weight type
//! (int4, uint4, int8, uint8; with and without zero points), a partial last block, a weight read
//! by two MatMuls, float16; exact op counts, the attributes and inputs of the fused node, parity
//! with the unfused graph on the reference backend, and the cases that must not fuse, with the
//! reason the report gives.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Same weight, same float32 products: only the summation order of the MatMul may differ.
const TOL: f64 = 1e-5;
const TOL_F16: f64 = 1e-2;

#[derive(Clone, Copy)]
struct Spec {
    k: usize,
    n: usize,
    block: i64,
    axis: i64,
    /// The quantized weight's type: I4, U4, I8 or U8.
    wtype: DType,
    zero_point: bool,
    /// A's and the scale's type.
    dtype: DType,
}

const INT4: Spec = Spec {
    k: 64,
    n: 24,
    block: 32,
    axis: 0,
    wtype: DType::I4,
    zero_point: false,
    dtype: DType::F32,
};

/// Deterministic codes of `t` over its whole range, [k, n].
fn codes(t: DType, shape: &[usize], seed: usize) -> Tensor {
    let (lo, hi) = match t {
        DType::I4 => (-8i32, 7i32),
        DType::U4 => (0, 15),
        DType::I8 => (-128, 127),
        _ => (0, 255),
    };
    let len: usize = shape.iter().product();
    let v: Vec<i32> = (0..len)
        .map(|i| lo + ((i * 7 + seed * 13 + i / 5) % (hi - lo + 1) as usize) as i32)
        .collect();
    let sh = IxDyn(shape);
    match t {
        DType::I4 => {
            Tensor::I4(ArrayD::from_shape_vec(sh, v.iter().map(|&x| x as i8).collect()).unwrap())
        }
        DType::U4 => {
            Tensor::U4(ArrayD::from_shape_vec(sh, v.iter().map(|&x| x as u8).collect()).unwrap())
        }
        DType::I8 => {
            Tensor::I8(ArrayD::from_shape_vec(sh, v.iter().map(|&x| x as i8).collect()).unwrap())
        }
        _ => Tensor::U8(ArrayD::from_shape_vec(sh, v.iter().map(|&x| x as u8).collect()).unwrap()),
    }
}

fn a_input(b: &mut GraphBuilder, spec: Spec) -> ValueId {
    b.input(
        "a",
        spec.dtype,
        vec![sym("batch"), sym("seq"), Dim::Known(spec.k as i64)],
    )
}

/// `DequantizeLinear(W_q, scale, zp?)` per `spec`; returns the dequantized weight.
fn dequantized(b: &mut GraphBuilder, spec: Spec) -> ValueId {
    let nb = spec.k.div_ceil(spec.block.max(1) as usize);
    let sshape = if spec.block == 0 {
        vec![spec.n]
    } else {
        vec![nb, spec.n]
    };
    let w = b.initializer("w_q", &codes(spec.wtype, &[spec.k, spec.n], 1));
    // Scales in [0.01, 0.03): positive, distinct per block and column.
    let s = seeded_f32(&sshape, 3)
        .as_f32()
        .unwrap()
        .mapv(|v| 0.02 + 0.01 * v);
    let s = b.initializer("scale", &Tensor::F32(s).cast(spec.dtype).unwrap());
    let mut ins = vec![Some(w), Some(s)];
    if spec.zero_point {
        ins.push(Some(b.initializer("zp", &codes(spec.wtype, &sshape, 2))));
    }
    let attrs = vec![
        attr::int("axis", spec.axis),
        attr::int("block_size", spec.block),
    ];
    b.node("", "DequantizeLinear", &ins, 1, attrs)[0]
}

fn model(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, spec);
    let w = dequantized(&mut b, spec);
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    b.build()
}

fn fused_node(m: &Model) -> &fuselab::ir::Node {
    let g = &m.graph;
    let id = g
        .node_ids()
        .find(|&id| g.node(id).op_type == "MatMulNBits")
        .expect("a MatMulNBits");
    g.node(id)
}

#[test]
fn every_weight_type_fuses_with_the_same_result() {
    for (wtype, zero_point, bits, zp_input) in [
        (DType::I4, false, 4, false),
        (DType::I4, true, 4, true),
        (DType::U4, false, 4, true),
        (DType::U4, true, 4, true),
        (DType::I8, false, 8, false),
        (DType::U8, true, 8, true),
    ] {
        let spec = Spec {
            wtype,
            zero_point,
            ..INT4
        };
        let m = model(spec);
        let (opt, trace) = fuse(&m, &["matmul_nbits"]);
        assert_eq!(ops(&opt), counts(&[("MatMulNBits", 1)]), "{wtype}");
        assert_eq!(trace.rewrites[0].removed.len(), 2);
        let n = fused_node(&opt);
        assert_eq!(n.domain, "com.microsoft");
        assert_eq!(n.attr_int("K"), Some(64));
        assert_eq!(n.attr_int("N"), Some(24));
        assert_eq!(n.attr_int("bits"), Some(bits));
        assert_eq!(n.attr_int("block_size"), Some(32));
        // A signed weight without zero points needs none (MatMulNBits' default is 2^(bits-1)).
        assert_eq!(n.inputs.len(), if zp_input { 4 } else { 3 }, "{wtype}");
        let b = opt.graph.constant(n.input(1).unwrap()).unwrap();
        assert_eq!(b.dims, vec![24, 2, 32 * bits / 8]);
        let s = opt.graph.constant(n.input(2).unwrap()).unwrap();
        assert_eq!(s.dims, vec![24, 2]);
        if zp_input {
            let z = opt.graph.constant(n.input(3).unwrap()).unwrap();
            assert_eq!(z.dims, vec![24, if bits == 4 { 1 } else { 2 }]);
        }
        assert_parity_within(&m, &opt, TOL);
    }
}

#[test]
fn a_partial_last_block_is_kept() {
    // K = 48 with blocks of 32: DequantizeLinear's scale has 2 rows, the second block half used.
    for wtype in [DType::I4, DType::U4] {
        let spec = Spec {
            k: 48,
            wtype,
            zero_point: true,
            ..INT4
        };
        let m = model(spec);
        let (opt, _) = fuse(&m, &["matmul_nbits"]);
        assert_eq!(ops(&opt), counts(&[("MatMulNBits", 1)]));
        assert_eq!(fused_node(&opt).attr_int("K"), Some(48));
        let b = opt
            .graph
            .constant(fused_node(&opt).input(1).unwrap())
            .unwrap();
        assert_eq!(b.dims, vec![24, 2, 16]);
        assert_parity_within(&m, &opt, TOL);
    }
}

#[test]
fn a_weight_read_by_two_matmuls_gives_two_nodes_sharing_its_initializers() {
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, INT4);
    let w = dequantized(&mut b, INT4);
    let y = b.op("MatMul", &[a, w], vec![]);
    let t = b.op("Tanh", &[a], vec![]);
    let z = b.op("MatMul", &[t, w], vec![]);
    b.output(y, "y");
    b.output(z, "z");
    let m = b.build();
    let (opt, trace) = fuse(&m, &["matmul_nbits"]);
    assert_eq!(ops(&opt), counts(&[("MatMulNBits", 2), ("Tanh", 1)]));
    assert_eq!(
        trace.rewrites.len(),
        1,
        "one rewrite takes the DequantizeLinear and both"
    );
    let g = &opt.graph;
    let fused: Vec<_> = g
        .node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == "MatMulNBits")
        .collect();
    assert_eq!(fused[0].inputs[1..], fused[1].inputs[1..]);
    assert_eq!(g.initializers().count(), 2, "B and scales, once");
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn float16_activations_and_scales_fuse() {
    let spec = Spec {
        dtype: DType::F16,
        ..INT4
    };
    let m = model(spec);
    let (opt, _) = fuse(&m, &["matmul_nbits"]);
    assert_eq!(ops(&opt), counts(&[("MatMulNBits", 1)]));
    let s = fused_node(&opt).input(2).unwrap();
    assert_eq!(opt.graph.value(s).ty.dtype, Some(DType::F16));
    assert_parity_within(&m, &opt, TOL_F16);
}

#[test]
fn a_per_axis_dequantization_is_refused() {
    let spec = Spec {
        block: 0,
        axis: 1,
        ..INT4
    };
    assert_rejected(&model(spec), &["matmul_nbits"], "not blocked along K");
}

#[test]
fn a_block_that_is_no_power_of_two_from_16_is_refused() {
    for block in [8, 24] {
        let spec = Spec { block, ..INT4 };
        assert_rejected(&model(spec), &["matmul_nbits"], "not a power of two >= 16");
    }
}

#[test]
fn blocks_along_n_are_refused() {
    // axis 1: one scale per 32 columns of a row, not per 32 rows of a column.
    let spec = Spec {
        k: 24,
        n: 64,
        axis: 1,
        ..INT4
    };
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, spec);
    let w = b.initializer("w_q", &codes(DType::I4, &[24, 64], 1));
    let s = b.initializer("scale", &seeded_f32(&[24, 2], 3));
    let attrs = vec![attr::int("axis", 1), attr::int("block_size", 32)];
    let w = b.node("", "DequantizeLinear", &[Some(w), Some(s)], 1, attrs)[0];
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["matmul_nbits"], "not K (axis 0)");
}

#[test]
fn a_weight_read_by_something_else_is_refused() {
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, INT4);
    let w = dequantized(&mut b, INT4);
    let y = b.op("MatMul", &[a, w], vec![]);
    let r = b.op("Relu", &[w], vec![]);
    b.output(y, "y");
    b.output(r, "r");
    assert_rejected(
        &b.build(),
        &["matmul_nbits"],
        "not only as a MatMul's weight",
    );
}

#[test]
fn a_weight_on_the_left_of_the_matmul_is_refused() {
    let mut b = GraphBuilder::new("qdq", 21);
    let x = b.input("x", DType::F32, vec![Dim::Known(24), sym("m")]);
    let w = dequantized(&mut b, INT4);
    let y = b.op("MatMul", &[w, x], vec![]);
    b.output(y, "y");
    assert_rejected(
        &b.build(),
        &["matmul_nbits"],
        "not only as a MatMul's weight",
    );
}

#[test]
fn a_scale_that_is_not_constant_is_refused() {
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, INT4);
    let w = b.initializer("w_q", &codes(DType::I4, &[64, 24], 1));
    let s = b.input("s", DType::F32, vec![Dim::Known(2), Dim::Known(24)]);
    let attrs = vec![attr::int("axis", 0), attr::int("block_size", 32)];
    let w = b.node("", "DequantizeLinear", &[Some(w), Some(s)], 1, attrs)[0];
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["matmul_nbits"], "scale 's' is not a constant");
}

#[test]
fn activations_of_another_type_than_the_scales_are_refused() {
    // Opset 23's output_dtype: float32 scales dequantize to a float16 weight for a float16 A.
    // MatMulNBits has one T for A and its scales.
    let mut b = GraphBuilder::new("qdq", 23);
    let a = a_input(
        &mut b,
        Spec {
            dtype: DType::F16,
            ..INT4
        },
    );
    let w = b.initializer("w_q", &codes(DType::I4, &[64, 24], 1));
    let s = b.initializer("scale", &seeded_f32(&[2, 24], 3));
    let attrs = vec![
        attr::int("axis", 0),
        attr::int("block_size", 32),
        attr::int("output_dtype", 10),
    ];
    let w = b.node("", "DequantizeLinear", &[Some(w), Some(s)], 1, attrs)[0];
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    assert_rejected(
        &b.build(),
        &["matmul_nbits"],
        "MatMulNBits takes one type for both",
    );
}

#[test]
fn a_weight_that_is_a_graph_output_is_refused() {
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, INT4);
    let w = dequantized(&mut b, INT4);
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    b.output(w, "w");
    assert_rejected(&b.build(), &["matmul_nbits"], "is a graph output");
}

#[test]
fn a_block_far_beyond_k_is_refused() {
    // K = 64 in one block of 2^20: B would be 2^19 bytes of padding per column.
    let mut b = GraphBuilder::new("qdq", 21);
    let a = a_input(&mut b, INT4);
    let w = b.initializer("w_q", &codes(DType::I4, &[64, 24], 1));
    let s = b.initializer("scale", &seeded_f32(&[1, 24], 3));
    let attrs = vec![attr::int("axis", 0), attr::int("block_size", 1 << 20)];
    let w = b.node("", "DequantizeLinear", &[Some(w), Some(s)], 1, attrs)[0];
    let y = b.op("MatMul", &[a, w], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["matmul_nbits"], "larger than K = 64 needs");
}

#[test]
fn a_block_up_to_the_power_of_two_above_k_fuses() {
    // K = 48 in one block of 64: the scale has one row, the block 16 codes of padding.
    let spec = Spec {
        k: 48,
        block: 64,
        zero_point: true,
        ..INT4
    };
    let m = model(spec);
    let (opt, _) = fuse(&m, &["matmul_nbits"]);
    assert_eq!(ops(&opt), counts(&[("MatMulNBits", 1)]));
    assert_parity_within(&m, &opt, TOL);
}
