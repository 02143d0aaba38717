//! The `dynamic_quantize_matmul` fusion (quantize_dynamic's DynamicQuantizeLinear →
//! MatMulInteger → Cast → Mul by a_scale·b_scale → [Add bias] → com.microsoft.DynamicQuantizeMatMul)
//! on hand-built graphs: int8 and uint8 weights, scalar and per-column scales and zero points,
//! with and without bias, one quantized A read by three projections; exact op counts, parity with
//! the unfused graph on the reference backend, and the cases that must not fuse, with the reason
//! the report gives.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const K: usize = 16;
const N: usize = 12;
/// The same integer product scaled by the same float32 factor: equal up to rounding.
const TOL: f64 = 1e-5;

#[derive(Clone, Copy)]
struct Spec {
    /// B's type: I8 or U8.
    btype: DType,
    /// b_scale and b_zero_point per column ([N]) rather than scalars.
    per_column: bool,
    zero_point: bool,
    bias: bool,
}

const QUANTIZE_DYNAMIC: Spec = Spec {
    btype: DType::I8,
    per_column: false,
    zero_point: true,
    bias: true,
};

fn ints(t: DType, shape: &[usize], seed: usize) -> Tensor {
    let len: usize = shape.iter().product();
    let v: Vec<i32> = (0..len)
        .map(|i| ((i * 37 + seed * 11) % 256) as i32)
        .collect();
    let sh = IxDyn(shape);
    match t {
        DType::I8 => Tensor::I8(
            ArrayD::from_shape_vec(sh, v.iter().map(|&x| (x - 128) as i8).collect()).unwrap(),
        ),
        _ => Tensor::U8(ArrayD::from_shape_vec(sh, v.iter().map(|&x| x as u8).collect()).unwrap()),
    }
}

fn a_input(b: &mut GraphBuilder) -> ValueId {
    b.input(
        "a",
        DType::F32,
        vec![sym("batch"), sym("seq"), Dim::Known(K as i64)],
    )
}

/// `DynamicQuantizeLinear(a)`: (A_q, a_scale, a_zero_point).
fn quantize(b: &mut GraphBuilder, a: ValueId) -> (ValueId, ValueId, ValueId) {
    let o = b.node("", "DynamicQuantizeLinear", &[Some(a)], 3, vec![]);
    (o[0], o[1], o[2])
}

/// One projection of the quantized A, as quantize_dynamic writes it; returns its output.
fn projection(
    b: &mut GraphBuilder,
    (aq, s, z): (ValueId, ValueId, ValueId),
    spec: Spec,
    tag: usize,
) -> ValueId {
    let pshape: Vec<usize> = if spec.per_column { vec![N] } else { vec![] };
    let w = b.initializer(&format!("b_{tag}"), &ints(spec.btype, &[K, N], tag));
    let mut ins = vec![Some(aq), Some(w), Some(z)];
    if spec.zero_point {
        let zp = ints(spec.btype, &pshape, tag + 3);
        ins.push(Some(b.initializer(&format!("b_zp_{tag}"), &zp)));
    }
    let p = b.node("", "MatMulInteger", &ins, 1, vec![])[0];
    let pf = b.op("Cast", &[p], vec![attr::int("to", 1)]);
    let bs = seeded_f32(&pshape, tag as u32)
        .as_f32()
        .unwrap()
        .mapv(|v| 0.01 + 0.005 * v);
    let bs = b.initializer(&format!("b_scale_{tag}"), &Tensor::F32(bs));
    let sc = b.op("Mul", &[s, bs], vec![]);
    let y = b.op("Mul", &[pf, sc], vec![]);
    if !spec.bias {
        return y;
    }
    let bias = b.initializer(&format!("bias_{tag}"), &seeded_f32(&[N], 40 + tag as u32));
    b.op("Add", &[bias, y], vec![])
}

fn model(spec: Spec) -> Model {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let q = quantize(&mut b, a);
    let y = projection(&mut b, q, spec, 1);
    b.output(y, "y");
    b.build()
}

#[test]
fn every_quantize_dynamic_spelling_fuses() {
    for btype in [DType::I8, DType::U8] {
        for per_column in [false, true] {
            for (zero_point, bias) in [(true, true), (false, false), (false, true)] {
                let spec = Spec {
                    btype,
                    per_column,
                    zero_point,
                    bias,
                };
                let m = model(spec);
                let (opt, trace) = fuse(&m, &["dynamic_quantize_matmul"]);
                assert_eq!(ops(&opt), counts(&[("DynamicQuantizeMatMul", 1)]));
                assert_eq!(trace.rewrites[0].removed.len(), if bias { 6 } else { 5 });
                let g = &opt.graph;
                let n = g.node(g.node_ids().next().unwrap());
                assert_eq!(n.domain, "com.microsoft");
                assert_eq!(g.name(n.input(0).unwrap()), "a");
                assert_eq!(n.input(3).is_some(), zero_point);
                assert_eq!(
                    n.inputs.len(),
                    if bias {
                        5
                    } else if zero_point {
                        4
                    } else {
                        3
                    }
                );
                assert_parity_within(&m, &opt, TOL);
            }
        }
    }
}

#[test]
fn projections_of_one_quantized_input_each_fuse() {
    // A layer's q, k and v read one DynamicQuantizeLinear: each fused node quantizes A again,
    // to the same values, and the DynamicQuantizeLinear goes with the last.
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let q = quantize(&mut b, a);
    for (i, name) in ["q", "k", "v"].iter().enumerate() {
        let y = projection(&mut b, q, QUANTIZE_DYNAMIC, i + 1);
        b.output(y, name);
    }
    let m = b.build();
    assert_eq!(m.graph.node_count(), 16);
    let (opt, trace) = fuse(&m, &["dynamic_quantize_matmul"]);
    assert_eq!(ops(&opt), counts(&[("DynamicQuantizeMatMul", 3)]));
    assert_eq!(trace.rewrites.len(), 3);
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn a_quantized_input_read_elsewhere_stays() {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let q = quantize(&mut b, a);
    let y = projection(&mut b, q, QUANTIZE_DYNAMIC, 1);
    b.output(y, "y");
    b.output(q.1, "a_scale");
    let m = b.build();
    let (opt, _) = fuse(&m, &["dynamic_quantize_matmul"]);
    assert_eq!(
        ops(&opt),
        counts(&[("DynamicQuantizeLinear", 1), ("DynamicQuantizeMatMul", 1)])
    );
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn a_bias_that_is_not_a_column_vector_stays_an_add() {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let q = quantize(&mut b, a);
    let spec = Spec {
        bias: false,
        ..QUANTIZE_DYNAMIC
    };
    let y = projection(&mut b, q, spec, 1);
    let c = b.initializer("c", &seeded_f32(&[1, N], 5));
    let z = b.op("Add", &[y, c], vec![]);
    b.output(z, "z");
    let m = b.build();
    let (opt, _) = fuse(&m, &["dynamic_quantize_matmul"]);
    assert_eq!(
        ops(&opt),
        counts(&[("Add", 1), ("DynamicQuantizeMatMul", 1)])
    );
    assert_parity_within(&m, &opt, TOL);
}

/// The quantize_dynamic graph with one thing changed by `edit` (given the builder, the quantized
/// A and the names it needs), returning the output.
fn edited(edit: impl FnOnce(&mut GraphBuilder, (ValueId, ValueId, ValueId)) -> ValueId) -> Model {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let q = quantize(&mut b, a);
    let y = edit(&mut b, q);
    b.output(y, "y");
    b.build()
}

#[test]
fn a_cast_to_another_type_is_refused() {
    let m = edited(|b, (aq, s, z)| {
        let w = b.initializer("b", &ints(DType::I8, &[K, N], 1));
        let p = b.op("MatMulInteger", &[aq, w, z], vec![]);
        let pf = b.op("Cast", &[p], vec![attr::int("to", 11)]);
        let s64 = b.op("Cast", &[s], vec![attr::int("to", 11)]);
        b.op("Mul", &[pf, s64], vec![])
    });
    assert_rejected(&m, &["dynamic_quantize_matmul"], "not float32");
}

#[test]
fn another_zero_point_for_a_is_refused() {
    let m = edited(|b, (aq, s, _)| {
        let w = b.initializer("b", &ints(DType::I8, &[K, N], 1));
        let z = b.initializer("z", &Tensor::U8(ArrayD::from_elem(IxDyn(&[]), 128)));
        let p = b.op("MatMulInteger", &[aq, w, z], vec![]);
        let pf = b.op("Cast", &[p], vec![attr::int("to", 1)]);
        let bs = b.initializer("bs", &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.01)));
        let sc = b.op("Mul", &[s, bs], vec![]);
        b.op("Mul", &[pf, sc], vec![])
    });
    assert_rejected(
        &m,
        &["dynamic_quantize_matmul"],
        "does not read the dynamic zero point",
    );
}

#[test]
fn weights_that_are_not_constant_are_refused() {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let w = b.input(
        "w",
        DType::I8,
        vec![Dim::Known(K as i64), Dim::Known(N as i64)],
    );
    let (aq, s, z) = quantize(&mut b, a);
    let p = b.op("MatMulInteger", &[aq, w, z], vec![]);
    let pf = b.op("Cast", &[p], vec![attr::int("to", 1)]);
    let bs = b.initializer("bs", &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.01)));
    let sc = b.op("Mul", &[s, bs], vec![]);
    let y = b.op("Mul", &[pf, sc], vec![]);
    b.output(y, "y");
    assert_rejected(
        &b.build(),
        &["dynamic_quantize_matmul"],
        "B 'w' is not a constant",
    );
}

#[test]
fn a_scale_that_broadcasts_another_way_is_refused() {
    let m = edited(|b, (aq, s, z)| {
        let w = b.initializer("b", &ints(DType::I8, &[K, N], 1));
        let p = b.op("MatMulInteger", &[aq, w, z], vec![]);
        let pf = b.op("Cast", &[p], vec![attr::int("to", 1)]);
        let bs = b.initializer("bs", &seeded_f32(&[1, N], 2));
        let sc = b.op("Mul", &[s, bs], vec![]);
        b.op("Mul", &[pf, sc], vec![])
    });
    assert_rejected(
        &m,
        &["dynamic_quantize_matmul"],
        "want float32 with 1 or 12 elements",
    );
}

#[test]
fn an_integer_product_read_twice_is_refused() {
    let mut b = GraphBuilder::new("dq", 17);
    let a = a_input(&mut b);
    let (aq, s, z) = quantize(&mut b, a);
    let w = b.initializer("b", &ints(DType::I8, &[K, N], 1));
    let p = b.op("MatMulInteger", &[aq, w, z], vec![]);
    let pf = b.op("Cast", &[p], vec![attr::int("to", 1)]);
    let bs = b.initializer("bs", &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), 0.01)));
    let sc = b.op("Mul", &[s, bs], vec![]);
    let y = b.op("Mul", &[pf, sc], vec![]);
    b.output(y, "y");
    b.output(p, "p");
    assert_rejected(
        &b.build(),
        &["dynamic_quantize_matmul"],
        "is a graph output",
    );
}
