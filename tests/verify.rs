//! The builder and verify(): each invariant violation is caught and named.

mod common;

use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::{attr, Dim, Node};
use fuselab::ops::verify;
use fuselab::{DType, Error};

fn verify_err(m: &fuselab::ir::Model) -> String {
    match verify(m) {
        Err(Error::Verify(msg)) => msg,
        other => panic!("expected a verify error, got {other:?}"),
    }
}

#[test]
fn builder_graph_verifies_and_infers_shapes() {
    let m = common::eyelike_add(None);
    verify(&m).unwrap();
    let y = m.graph.outputs[0];
    assert_eq!(m.graph.value(y).ty.shape, Some(vec![sym("N"), sym("N")]));
    assert_eq!(m.graph.value(y).ty.dtype, Some(DType::F32));
}

#[test]
fn undefined_value_is_named() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let ghost = b.graph.value_named("ghost");
    let y = b.op("Add", &[x, ghost], vec![]);
    b.output(y, "Y");
    let msg = verify_err(&b.build());
    assert!(msg.contains("undefined value 'ghost'"), "{msg}");
}

#[test]
fn cycle_is_detected() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let loop_back = b.graph.value_named("loop_back");
    let a = b.op("Add", &[x, loop_back], vec![]);
    // Relu(a) writes loop_back, which the Add reads: a two-node cycle.
    let mut relu = Node::new("Relu", "");
    relu.name = "relu".into();
    relu.inputs = vec![Some(a)];
    relu.outputs = vec![Some(loop_back)];
    b.graph.add_node(relu).unwrap();
    b.output(a, "Y");
    let msg = verify_err(&b.build());
    assert!(msg.contains("cycle"), "{msg}");
}

#[test]
fn value_defined_twice_is_refused() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let y = b.op("Relu", &[x], vec![]);
    let mut dup = Node::new("Neg", "");
    dup.inputs = vec![Some(x)];
    dup.outputs = vec![Some(y)];
    let err = b.graph.add_node(dup).unwrap_err().to_string();
    assert!(err.contains("produced twice"), "{err}");
}

#[test]
fn duplicate_node_names_are_accepted() {
    // onnx IR.md: a node's name is for diagnostics; onnxruntime runs such files (silero-vad).
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let y = b.op("Relu", &[x], vec![]);
    let z = b.op("Neg", &[y], vec![]);
    b.output(z, "Z");
    let mut m = b.build();
    let ids: Vec<_> = m.graph.node_ids().collect();
    let mut n = m.graph.remove_node(ids[1]);
    n.name = m.graph.node(ids[0]).name.clone();
    let again = m.graph.add_node(n).unwrap();
    assert_eq!(m.graph.node(ids[0]).name, m.graph.node(again).name);
    verify(&m).unwrap();
}

#[test]
fn type_mismatch_is_reported() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let i = b.input("I", DType::I64, dims(&[2]));
    let y = b.op("Add", &[x, i], vec![]);
    b.output(y, "Y");
    let msg = verify_err(&b.build());
    assert!(
        msg.contains("'X' is float32 but input 'I' is int64"),
        "{msg}"
    );
}

#[test]
fn declared_output_type_contradicting_the_op_is_reported() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let c = b.op("Cast", &[x], vec![attr::int("to", DType::I64.0 as i64)]);
    b.output(c, "C");
    let mut m = b.build();
    m.graph.value_mut(c).ty.dtype = Some(DType::F64);
    let msg = verify_err(&m);
    assert!(
        msg.contains("declared float64 but the op computes int64"),
        "{msg}"
    );
}

#[test]
fn output_never_produced_is_reported() {
    let mut b = GraphBuilder::new("g", 17);
    b.input("X", DType::F32, dims(&[2]));
    let nothing = b.graph.value_named("nothing");
    b.graph.outputs.push(nothing);
    assert!(verify_err(&b.build()).contains("'nothing' is never produced"));
}

#[test]
fn inference_handles_matmul_transpose_reshape() {
    let mut b = GraphBuilder::new("g", 17);
    let a = b.input(
        "A",
        DType::F32,
        vec![sym("B"), Dim::Known(3), Dim::Known(4)],
    );
    let w = b.initializer(
        "W",
        &fuselab::Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[4, 5]))),
    );
    let mm = b.op("MatMul", &[a, w], vec![]);
    let t = b.op("Transpose", &[mm], vec![attr::ints("perm", &[0, 2, 1])]);
    let shape = b.initializer("shape", &fuselab::Tensor::from_i64s(&[0, -1]));
    let r = b.op("Reshape", &[t, shape], vec![]);
    b.output(r, "R");
    let m = b.build();
    let g = &m.graph;
    assert_eq!(
        g.value(mm).ty.shape,
        Some(vec![sym("B"), Dim::Known(3), Dim::Known(5)])
    );
    assert_eq!(
        g.value(t).ty.shape,
        Some(vec![sym("B"), Dim::Known(5), Dim::Known(3)])
    );
    // [0, -1] on [B, 5, 3]: 0 copies B, and -1 is 15 once B cancels out.
    assert_eq!(g.value(r).ty.shape, Some(vec![sym("B"), Dim::Known(15)]));
}
