//! dce, identity and const_fold: exact op counts, parity, and the cases they must leave alone.

mod common;

use common::{ops, parity};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::{attr, Model};
use fuselab::ops::verify;
use fuselab::passes::{optimize, Trace};
use fuselab::{DType, Tensor};

fn run(m: &Model, rules: &[&str]) -> (Model, Trace) {
    let mut opt = m.clone();
    let trace = optimize(&mut opt, rules).unwrap();
    verify(&opt).unwrap();
    (opt, trace)
}

fn count(v: &[(&str, usize)]) -> Vec<(String, usize)> {
    v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

#[test]
fn dce_removes_only_dead_nodes() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let live = b.op("Relu", &[x], vec![]);
    let dead = b.op("Neg", &[x], vec![]);
    b.op("Exp", &[dead], vec![]); // dead chain: Neg → Exp, read by nothing
    b.output(live, "Y");
    let m = b.build();
    let (opt, trace) = run(&m, &["dce"]);
    assert_eq!(ops(&opt), count(&[("Relu", 1)]));
    assert_eq!(trace.rewrites.len(), 2);
    assert_eq!(parity(&m, &opt, &[("N", 5)]).max_abs_diff, 0.0);
}

#[test]
fn identity_is_removed_and_output_names_survive() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let r = b.op("Relu", &[x], vec![]);
    let i1 = b.op("Identity", &[r], vec![]);
    let n = b.op("Neg", &[i1], vec![]);
    let i2 = b.op("Identity", &[n], vec![]);
    b.output(i2, "Y");
    let m = b.build();
    let (opt, _) = run(&m, &["identity"]);
    assert_eq!(ops(&opt), count(&[("Neg", 1), ("Relu", 1)]));
    assert_eq!(opt.graph.name(opt.graph.outputs[0]), "Y");
    assert_eq!(parity(&m, &opt, &[("N", 5)]).max_abs_diff, 0.0);
}

#[test]
fn identity_from_graph_input_to_graph_output_stays() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let y = b.op("Identity", &[x], vec![]);
    b.output(y, "Y");
    let (opt, trace) = run(&b.build(), &["identity"]);
    assert_eq!(ops(&opt), count(&[("Identity", 1)]));
    assert!(
        trace.rejected[0]
            .reason
            .contains("fed directly by graph input"),
        "{:?}",
        trace.rejected
    );
}

#[test]
fn const_fold_evaluates_constant_subgraphs_only() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[3]));
    let c = b.op(
        "Constant",
        &[],
        vec![attr::floats("value_floats", &[1.0, 2.0, 3.0])],
    );
    let w = b.initializer(
        "W",
        &Tensor::F32(ndarray::arr1(&[0.5f32, 0.25, 2.0]).into_dyn()),
    );
    let cw = b.op("Mul", &[c, w], vec![]); // constant: folds
    let y = b.op("Add", &[x, cw], vec![]); // reads X: stays
    b.output(y, "Y");
    let m = b.build();
    let (opt, trace) = run(&m, &["const_fold"]);
    assert_eq!(ops(&opt), count(&[("Add", 1)]));
    assert_eq!(trace.rewrites.len(), 2); // the Constant, then the Mul
                                         // The folded Mul's output is an initializer; W and the Constant's value are gone.
    assert_eq!(opt.graph.initializers().count(), 1);
    assert_eq!(parity(&m, &opt, &[]).max_abs_diff, 0.0);
}

#[test]
fn const_fold_leaves_large_outputs_and_overridable_initializers() {
    // Expand of a 2048-element constant to 2048x2048 would fold into 4M elements: growth over
    // the folding limit.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2048, 2048]));
    let row = b.initializer(
        "Z",
        &Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2048]))),
    );
    let shape = b.initializer(
        "S",
        &Tensor::I64(ndarray::arr1(&[2048i64, 2048]).into_dyn()),
    );
    let e = b.op("Expand", &[row, shape], vec![]);
    let y = b.op("Add", &[e, x], vec![]);
    b.output(y, "Y");
    let (opt, trace) = run(&b.build(), &["const_fold"]);
    assert_eq!(ops(&opt), count(&[("Add", 1), ("Expand", 1)]));
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.reason.contains("folding limit")),
        "{:?}",
        trace.rejected
    );

    // A Cast of a 4M-element constant is the same weight in another type, not growth: it folds.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F64, dims(&[2048, 2048]));
    let big = b.initializer(
        "W",
        &Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[2048, 2048]))),
    );
    let c = b.op("Cast", &[big], vec![attr::int("to", 11)]);
    let y = b.op("Add", &[c, x], vec![]);
    b.output(y, "Y");
    let (opt, _) = run(&b.build(), &["const_fold"]);
    assert_eq!(ops(&opt), count(&[("Add", 1)]));

    // An initializer that is also a graph input is a default, not a constant.
    let mut b = GraphBuilder::new("g", 17);
    let w = b.initializer("W", &Tensor::F32(ndarray::arr1(&[1.0f32]).into_dyn()));
    b.graph.inputs.push(w);
    let y = b.op("Neg", &[w], vec![]);
    b.output(y, "Y");
    let (opt, _) = run(&b.build(), &["const_fold"]);
    assert_eq!(ops(&opt), count(&[("Neg", 1)]));
}

#[test]
fn values_read_by_subgraphs_are_not_redirected() {
    use fuselab::onnx::proto::{attribute_type, AttributeProto, GraphProto, NodeProto};
    // If(cond) { then: Relu(y) } else { Neg(y) }, where y = Identity(X) in the outer graph.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, dims(&[2]));
    let cond = b.input("C", DType::BOOL, dims(&[]));
    let y = b.op("Identity", &[x], vec![]);
    let y_name = b.graph.name(y).to_string();
    let branch = |op: &str| GraphProto {
        name: op.into(),
        node: vec![NodeProto {
            op_type: op.into(),
            input: vec![y_name.clone()],
            output: vec![format!("{op}_out")],
            ..Default::default()
        }],
        output: vec![fuselab::onnx::proto::ValueInfoProto {
            name: format!("{op}_out"),
            ..Default::default()
        }],
        ..Default::default()
    };
    let graph_attr = |name: &str, g: GraphProto| AttributeProto {
        name: name.into(),
        r#type: attribute_type::GRAPH,
        g: Some(Box::new(g)),
        ..Default::default()
    };
    let out = b.node(
        "",
        "If",
        &[Some(cond)],
        1,
        vec![
            graph_attr("then_branch", branch("Relu")),
            graph_attr("else_branch", branch("Neg")),
        ],
    )[0];
    let if_id = b.graph.producer(out).unwrap();
    let node = b.graph.remove_node(if_id);
    let mut node = node;
    node.implicit_inputs = vec![y];
    b.graph.add_node(node).unwrap();
    b.output(out, "Z");
    let m = b.build();
    verify(&m).unwrap();
    let (opt, trace) = run(&m, &["identity", "dce"]);
    assert_eq!(ops(&opt), count(&[("Identity", 1), ("If", 1)]));
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.reason.contains("read by name inside a subgraph")),
        "{:?}",
        trace.rejected
    );
    // And the saved model still loads: the body's reference resolves.
    let bytes = fuselab::io::to_bytes(&opt).unwrap();
    fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
}

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> fuselab::ir::ValueId {
    b.initializer(name, &Tensor::I64(ndarray::arr1(v).into_dyn()))
}

/// Phi-3's head split when the rotary dim is the whole head: `Slice [0:16]` of a 16-wide axis
/// (whole) feeds the rotation, `Slice [16:]` (empty) the pass part, and a Concat joins them.
/// All three go; parity is exact.
#[test]
fn whole_slices_empty_concat_parts_and_one_input_concats_are_removed() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("B"), sym("S"), dims(&[16])[0].clone()],
    );
    let (s0, s16, end, ax) = (
        ints(&mut b, "s0", &[0]),
        ints(&mut b, "s16", &[16]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "ax", &[-1]),
    );
    let rot = b.op("Slice", &[x, s0, s16, ax], vec![]);
    let rot = b.op("Neg", &[rot], vec![]);
    let pass = b.op("Slice", &[x, s16, end, ax], vec![]);
    let joined = b.op("Concat", &[rot, pass], vec![attr::int("axis", -1)]);
    // Whole axes with symbolic sizes: [0, INT64_MAX) in steps of 1 over batch and seq.
    let (z2, e2, a2) = (
        ints(&mut b, "z2", &[0, 0]),
        ints(&mut b, "e2", &[i64::MAX, i64::MAX]),
        ints(&mut b, "a2", &[0, 1]),
    );
    let all = b.op("Slice", &[joined, z2, e2, a2], vec![]);
    let one = b.op("Concat", &[all], vec![attr::int("axis", 0)]);
    let y = b.op("Relu", &[one], vec![]);
    b.output(y, "Y");
    let m = b.build();
    let (opt, trace) = run(&m, &["identity", "concat_empty", "dce"]);
    assert_eq!(ops(&opt), count(&[("Neg", 1), ("Relu", 1)]), "{trace:?}");
    assert_eq!(parity(&m, &opt, &[("B", 2), ("S", 3)]).max_abs_diff, 0.0);
}

/// What is not a pass-through stays: a whole-axis Slice with step -1 reverses the axis, a Slice
/// that keeps part of a known axis, one of a symbolic axis to a bound that may cut it, and a
/// Concat whose only empty candidate has a size inference cannot tell.
#[test]
fn reversing_partial_and_unknown_slices_and_concats_stay() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("S"), dims(&[8])[0].clone()]);
    let (s0, s8, ax1) = (
        ints(&mut b, "s0", &[0]),
        ints(&mut b, "s8", &[8]),
        ints(&mut b, "ax1", &[1]),
    );
    let (m1, lo, mone) = (
        ints(&mut b, "m1", &[-1]),
        ints(&mut b, "lo", &[i64::MIN]),
        ints(&mut b, "mone", &[-1]),
    );
    let reversed = b.op("Slice", &[x, m1, lo, ax1, mone], vec![]);
    let (s4, ax0) = (ints(&mut b, "s4", &[4]), ints(&mut b, "ax0", &[0]));
    let part = b.op("Slice", &[reversed, s0, s4, ax1], vec![]);
    let cut = b.op("Slice", &[part, s0, s8, ax0], vec![]);
    let joined = b.op("Concat", &[cut, part], vec![attr::int("axis", 0)]);
    b.output(joined, "Y");
    let m = b.build();
    let (opt, _) = run(&m, &["identity", "concat_empty", "dce"]);
    assert_eq!(ops(&opt), count(&[("Concat", 1), ("Slice", 3)]));
    assert_eq!(parity(&m, &opt, &[("S", 11)]).max_abs_diff, 0.0);
}

/// torch's dynamo ViT: the scores `[B, 4, S, S]` plus `Where(Expand(all true [1, 1, S, 1],
/// [B, 1, S, S]), 0, lowest)`, a mask that keeps every key. The Add and the mask's chain go;
/// parity is exact. What stays: a Where whose condition is a graph input (it may be false), an
/// Add of a stored zero (a bias a random initialization left at zero: the bias fusions take it),
/// and a computed zero that broadcasts the other operand to a larger shape.
#[test]
fn adds_of_a_computed_zero_mask_are_removed() {
    let mut b = GraphBuilder::new("g", 20);
    let s = dims(&[5])[0].clone();
    let scores = b.input(
        "scores",
        DType::F32,
        vec![sym("B"), dims(&[4])[0].clone(), s.clone(), s.clone()],
    );
    let keep = b.initializer(
        "keep",
        &Tensor::Bool(ndarray::ArrayD::from_elem(
            ndarray::IxDyn(&[1, 1, 5, 1]),
            true,
        )),
    );
    let zero = b.initializer("zero", &Tensor::F32(ndarray::arr0(0.0f32).into_dyn()));
    let low = b.initializer("low", &Tensor::F32(ndarray::arr0(f32::MIN).into_dyn()));
    let shape_b = b.op("Shape", &[scores], vec![attr::int("end", 1)]);
    let rest = ints(&mut b, "rest", &[1, 5, 5]);
    let target = b.op("Concat", &[shape_b, rest], vec![attr::int("axis", 0)]);
    let cond = b.op("Expand", &[keep, target], vec![]);
    let mask = b.op("Where", &[cond, zero, low], vec![]);
    let y = b.op("Add", &[scores, mask], vec![]);
    let y = b.op("Softmax", &[y], vec![attr::int("axis", -1)]);
    b.output(y, "Y");
    // A condition that may be false.
    let any = b.input(
        "any",
        DType::BOOL,
        vec![sym("B"), dims(&[1])[0].clone(), s.clone(), s.clone()],
    );
    let mask2 = b.op("Where", &[any, zero, low], vec![]);
    let y2 = b.op("Add", &[scores, mask2], vec![]);
    b.output(y2, "Y2");
    // A stored zero bias.
    let bias = b.initializer("bias", &Tensor::F32(ndarray::Array1::zeros(5).into_dyn()));
    let y3 = b.op("Add", &[scores, bias], vec![]);
    b.output(y3, "Y3");
    // A computed zero that broadcasts the scores' row [S] to [B, 1, S, S].
    let row = b.input("row", DType::F32, vec![s.clone()]);
    let y4 = b.op("Add", &[row, mask], vec![]);
    b.output(y4, "Y4");
    let m = b.build();
    let (opt, trace) = run(&m, &["identity", "dce"]);
    assert_eq!(
        ops(&opt),
        count(&[
            ("Add", 3),
            ("Concat", 1),
            ("Expand", 1),
            ("Shape", 1),
            ("Softmax", 1),
            ("Where", 2),
        ]),
        "{trace:?}"
    );
    assert_eq!(parity(&m, &opt, &[("B", 2)]).max_abs_diff, 0.0);
}

/// `head_split`: a Split of the transposed heads' last axis (GPT-NeoX's packed q/k/v, as torch's
/// dynamo exporter writes it) becomes one Slice per part with exact parity; a Split of anything
/// but the heads layout, or of another axis, stays.
#[test]
fn a_split_of_the_heads_becomes_slices() {
    let build = |perm: &[i64], axis: i64| {
        let mut b = GraphBuilder::new("heads", 18);
        let x = b.input(
            "x",
            DType::F32,
            vec![
                sym("B"),
                sym("S"),
                fuselab::ir::Dim::Known(2),
                fuselab::ir::Dim::Known(12),
            ],
        );
        let h = b.op("Transpose", &[x], vec![attr::ints("perm", perm)]);
        let parts = b.node(
            "",
            "Split",
            &[Some(h)],
            3,
            vec![attr::int("axis", axis), attr::int("num_outputs", 3)],
        );
        for (i, p) in parts.into_iter().enumerate() {
            b.output(p, &format!("p{i}"));
        }
        b.build()
    };
    let m = build(&[0, 2, 1, 3], 3);
    let (opt, trace) = run(&m, &["head_split", "dce"]);
    assert_eq!(ops(&opt), count(&[("Slice", 3), ("Transpose", 1)]));
    assert_eq!(trace.rewrites.len(), 1);
    assert_eq!(parity(&m, &opt, &[("B", 2), ("S", 5)]).max_abs_diff, 0.0);
    for (perm, axis) in [([0, 1, 2, 3], 3), ([0, 2, 1, 3], 1)] {
        let m = build(&perm, axis);
        let (opt, _) = run(&m, &["head_split", "dce"]);
        assert_eq!(ops(&opt), ops(&m), "perm {perm:?} axis {axis}");
    }
}
