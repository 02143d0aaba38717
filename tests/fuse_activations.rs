//! The gated activations: `quick_gelu` (x·sigmoid(α·x) → com.microsoft.QuickGelu, SiLU at α = 1)
//! and `hard_swish` (x·HardSigmoid(x) → HardSwish), on hand-built graphs: exact op counts, parity
//! with the unfused graph, and the cases that must not fuse.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const TOL: f64 = 1e-6;

fn input(b: &mut GraphBuilder, dtype: DType) -> ValueId {
    b.input("x", dtype, vec![sym("batch"), sym("seq"), Dim::Known(8)])
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    b.initializer(name, &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)))
}

/// `x · sigmoid(α·x)` (α None: `x · sigmoid(x)`), operands in the given order.
fn swish(alpha: Option<f32>, x_first: bool) -> Model {
    let mut b = GraphBuilder::new("swish", 17);
    let x = input(&mut b, DType::F32);
    let u = match alpha {
        Some(a) => {
            let c = scalar(&mut b, "alpha", a);
            let ops = if x_first { [x, c] } else { [c, x] };
            b.op("Mul", &ops, vec![])
        }
        None => x,
    };
    let s = b.op("Sigmoid", &[u], vec![]);
    let ops = if x_first { [x, s] } else { [s, x] };
    let y = b.op("Mul", &ops, vec![]);
    b.output(y, "y");
    b.build()
}

#[test]
fn silu_and_quick_gelu_fuse_in_either_operand_order() {
    for (alpha, nodes) in [(None, 2), (Some(1.702), 3), (Some(1.0), 3)] {
        for x_first in [true, false] {
            let m = swish(alpha, x_first);
            assert_eq!(m.graph.node_count(), nodes);
            let (opt, _) = fuse(&m, &["quick_gelu"]);
            assert_eq!(ops(&opt), counts(&[("QuickGelu", 1)]));
            let id = opt.graph.node_ids().next().unwrap();
            let n = opt.graph.node(id);
            assert_eq!(n.domain, "com.microsoft");
            assert_eq!(n.attr_float("alpha"), Some(alpha.unwrap_or(1.0)));
            assert_parity_within(&m, &opt, TOL);
        }
    }
}

#[test]
fn silu_of_a_scaled_value_keeps_the_scale() {
    // u = x·2, y = u·sigmoid(u): a SiLU of u (α 1), not a QuickGelu of x with α 2.
    let mut b = GraphBuilder::new("silu", 17);
    let x = input(&mut b, DType::F32);
    let two = scalar(&mut b, "two", 2.0);
    let u = b.op("Mul", &[x, two], vec![]);
    let s = b.op("Sigmoid", &[u], vec![]);
    let y = b.op("Mul", &[u, s], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, &["quick_gelu"]);
    assert_eq!(ops(&opt), counts(&[("Mul", 1), ("QuickGelu", 1)]));
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn swiglu_gate_fuses_and_the_up_projection_stays() {
    // Llama's MLP: silu(gate) · up.
    let mut b = GraphBuilder::new("swiglu", 17);
    let x = input(&mut b, DType::F32);
    let wg = b.initializer("wg", &seeded_f32(&[8, 16], 1));
    let wu = b.initializer("wu", &seeded_f32(&[8, 16], 2));
    let gate = b.op("MatMul", &[x, wg], vec![]);
    let up = b.op("MatMul", &[x, wu], vec![]);
    let s = b.op("Sigmoid", &[gate], vec![]);
    let act = b.op("Mul", &[gate, s], vec![]);
    let y = b.op("Mul", &[act, up], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, &["quick_gelu"]);
    assert_eq!(
        ops(&opt),
        counts(&[("MatMul", 2), ("Mul", 1), ("QuickGelu", 1)])
    );
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn a_sigmoid_gate_on_another_value_is_no_swish() {
    // GLU: a · sigmoid(b) is not x · sigmoid(x).
    let mut b = GraphBuilder::new("glu", 17);
    let x = input(&mut b, DType::F32);
    let z = b.input(
        "z",
        DType::F32,
        vec![sym("batch"), sym("seq"), Dim::Known(8)],
    );
    let s = b.op("Sigmoid", &[z], vec![]);
    let y = b.op("Mul", &[x, s], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, trace) = fuse(&m, &["quick_gelu"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty() && trace.rejected.is_empty());
}

#[test]
fn quick_gelu_rejects_a_sigmoid_read_twice() {
    let mut b = GraphBuilder::new("twice", 17);
    let x = input(&mut b, DType::F32);
    let s = b.op("Sigmoid", &[x], vec![]);
    let y = b.op("Mul", &[x, s], vec![]);
    b.output(y, "y");
    b.output(s, "gate");
    assert_rejected(&b.build(), &["quick_gelu"], "is a graph output");
}

#[test]
fn quick_gelu_rejects_float64() {
    let mut b = GraphBuilder::new("f64", 17);
    let x = input(&mut b, DType::F64);
    let s = b.op("Sigmoid", &[x], vec![]);
    let y = b.op("Mul", &[s, x], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["quick_gelu"], "takes float32 and float16");
}

#[test]
fn quick_gelu_fuses_float16_silu() {
    // The SwiGLU gate of a float16 decoder; onnxruntime's CPU QuickGelu runs float16.
    let mut b = GraphBuilder::new("f16", 17);
    let x = input(&mut b, DType::F16);
    let s = b.op("Sigmoid", &[x], vec![]);
    let y = b.op("Mul", &[x, s], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, &["quick_gelu"]);
    assert_eq!(ops(&opt), counts(&[("QuickGelu", 1)]));
    assert_parity_within(&m, &opt, 1e-2);
}

fn hard_swish(opset: i64, alpha: f32, beta: f32) -> Model {
    let mut b = GraphBuilder::new("hswish", opset);
    let x = input(&mut b, DType::F32);
    let h = b.op(
        "HardSigmoid",
        &[x],
        vec![attr::float("alpha", alpha), attr::float("beta", beta)],
    );
    let y = b.op("Mul", &[h, x], vec![]);
    b.output(y, "y");
    b.build()
}

#[test]
fn hard_swish_fuses_the_spelled_out_form() {
    let m = hard_swish(17, 1.0 / 6.0, 0.5);
    let (opt, _) = fuse(&m, &["hard_swish"]);
    assert_eq!(ops(&opt), counts(&[("HardSwish", 1)]));
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn hard_swish_rejects_another_hard_sigmoid() {
    // MobileNet/Paddle's HardSigmoid(alpha 0.2) times x is a different function.
    let m = hard_swish(17, 0.2, 0.5);
    assert_rejected(&m, &["hard_swish"], "HardSwish's are 1/6 and 0.5");
}

#[test]
fn hard_swish_needs_opset_14() {
    let m = hard_swish(13, 1.0 / 6.0, 0.5);
    assert_rejected(&m, &["hard_swish"], "HardSwish needs 14");
}
