//! AddEyeLike: fires exactly where docs/fused-ops.md allows, never elsewhere, with exact parity.

mod common;

use common::{eyelike_add, ops, parity};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::attr;
use fuselab::ops::verify;
use fuselab::passes::optimize;
use fuselab::DType;

fn fuse(m: &fuselab::ir::Model) -> (fuselab::ir::Model, fuselab::passes::Trace) {
    let mut opt = m.clone();
    let trace = optimize(&mut opt, &["add_eyelike"]).expect("optimize");
    verify(&opt).expect("optimized graph verifies");
    (opt, trace)
}

#[test]
fn fuses_the_book_example_once_with_zero_diff() {
    let m = eyelike_add(None);
    let (opt, trace) = fuse(&m);
    assert_eq!(m.graph.node_count(), 2);
    assert_eq!(opt.graph.node_count(), 1);
    assert_eq!(ops(&opt), vec![("AddEyeLike".to_string(), 1)]);
    assert_eq!(trace.rewrites.len(), 1);
    assert_eq!(trace.rewrites[0].removed.len(), 2);
    assert_eq!(opt.opset("ai.fuselab"), Some(1));
    // The fused node writes the original output value: name and graph-output status survive.
    assert_eq!(opt.graph.name(opt.graph.outputs[0]), "Y");
    for n in [1, 5, 64] {
        let p = parity(&m, &opt, &[("N", n)]);
        assert_eq!(p.max_abs_diff, 0.0, "N={n}");
    }
}

#[test]
fn fuses_with_nonzero_k_and_keeps_it() {
    for k in [1, -2, 7] {
        let m = eyelike_add(Some(k));
        let (opt, _) = fuse(&m);
        assert_eq!(ops(&opt), vec![("AddEyeLike".to_string(), 1)], "k={k}");
        let id = opt.graph.node_ids().next().unwrap();
        assert_eq!(opt.graph.node(id).attr_int("k"), Some(k));
        assert_eq!(parity(&m, &opt, &[("N", 6)]).max_abs_diff, 0.0, "k={k}");
    }
}

#[test]
fn fuses_with_dtype_and_swapped_add_operands() {
    // E = EyeLike(X f32, dtype=double); Y = Add(A f64, E): A is not X but has X's shape.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let a = b.input("A", DType::F64, vec![sym("N"), sym("N")]);
    let e = b.op(
        "EyeLike",
        &[x],
        vec![attr::int("dtype", DType::F64.0 as i64), attr::int("k", -1)],
    );
    let y = b.op("Add", &[a, e], vec![]);
    b.output(y, "Y");
    let m = b.build();
    let (opt, _) = fuse(&m);
    assert_eq!(ops(&opt), vec![("AddEyeLike".to_string(), 1)]);
    let id = opt.graph.node_ids().next().unwrap();
    assert_eq!(
        opt.graph.node(id).attr_int("dtype"),
        Some(DType::F64.0 as i64)
    );
    assert_eq!(parity(&m, &opt, &[("N", 9)]).max_abs_diff, 0.0);
}

fn assert_rejected(m: &fuselab::ir::Model, needle: &str) {
    let (opt, trace) = fuse(m);
    assert_eq!(
        opt.graph.node_count(),
        m.graph.node_count(),
        "must not fuse: {needle}"
    );
    assert!(trace.rewrites.is_empty());
    let reasons: Vec<&str> = trace.rejected.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.rule == "add_eyelike" && r.reason.contains(needle)),
        "expected a rejection mentioning {needle:?}, got {reasons:?}"
    );
    assert_eq!(parity(m, &opt, &[("N", 4)]).max_abs_diff, 0.0);
}

#[test]
fn does_not_fuse_when_identity_has_a_second_consumer() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, x], vec![]);
    let z = b.op("Mul", &[e, x], vec![]);
    b.output(y, "Y");
    b.output(z, "Z");
    assert_rejected(&b.build(), "2 consumers");
}

#[test]
fn does_not_fuse_when_identity_is_a_graph_output() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, x], vec![]);
    b.output(y, "Y");
    b.output(e, "E");
    assert_rejected(&b.build(), "graph output");
}

#[test]
fn does_not_fuse_when_other_input_broadcasts() {
    // Add(EyeLike(X [N,N]), B [1,N]) broadcasts B; AddEyeLike(B) would have B's shape.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let row = b.input("B", DType::F32, vec![dims(&[1])[0].clone(), sym("N")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, row], vec![]);
    b.output(y, "Y");
    assert_rejected(&b.build(), "broadcast");
}

#[test]
fn does_not_fuse_when_shapes_are_unknown_names() {
    // [N, N] vs [M, M]: equal only if N == M, which nothing proves.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let a = b.input("A", DType::F32, vec![sym("M"), sym("M")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, a], vec![]);
    b.output(y, "Y");
    let m = b.build();
    let (opt, trace) = fuse(&m);
    assert_eq!(opt.graph.node_count(), 2);
    assert!(
        trace.rejected[0].reason.contains("shape"),
        "{:?}",
        trace.rejected
    );
}

#[test]
fn does_not_fuse_through_a_squeeze_with_explicitly_empty_axes() {
    // Squeeze(Z [1,N,N], axes=[]) squeezes nothing (ONNX reference semantics): S stays
    // [1,N,N], so Add(EyeLike(X), S) broadcasts and must not become AddEyeLike(S).
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let z = b.input(
        "Z",
        DType::F32,
        vec![dims(&[1])[0].clone(), sym("N"), sym("N")],
    );
    let axes = b.initializer("axes", &fuselab::Tensor::from_i64s(&[]));
    let s = b.op("Squeeze", &[z, axes], vec![]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, s], vec![]);
    b.output(y, "Y");
    let m = b.build();
    assert_eq!(m.graph.value(s).ty.rank(), Some(3));
    let (opt, trace) = fuse(&m);
    assert_eq!(opt.graph.node_count(), 3);
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.reason.contains("broadcast")),
        "{:?}",
        trace.rejected
    );
}
