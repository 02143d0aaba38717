//! Shape-subgraph simplification with dynamic dims: shape_fold, reshape_target, reshape_noop and
//! cse on the Shape → Gather → Unsqueeze → Concat → Reshape chains that exporters emit.

mod common;

use common::{ops, parity};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::ops::shape_value::{int_elements, reshape_dims};
use fuselab::ops::verify;
use fuselab::passes::{optimize, Trace};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const RULES: &[&str] = &[
    "dce",
    "const_fold",
    "shape_fold",
    "reshape_target",
    "reshape_noop",
    "cse",
];

fn ints(b: &mut GraphBuilder, name: &str, v: &[i64]) -> ValueId {
    b.initializer(
        name,
        &Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap()),
    )
}

fn scalar_index(b: &mut GraphBuilder, name: &str, i: i64) -> ValueId {
    b.initializer(name, &Tensor::I64(ArrayD::from_elem(IxDyn(&[]), i)))
}

fn run(m: &Model) -> (Model, Trace) {
    let mut opt = m.clone();
    let trace = optimize(&mut opt, RULES).expect("optimize");
    verify(&opt).expect("verifies");
    (opt, trace)
}

fn x_input(b: &mut GraphBuilder) -> ValueId {
    b.input(
        "x",
        DType::F32,
        vec![sym("batch"), sym("seq"), Dim::Known(64)],
    )
}

/// dim `i` of x as a 1-D value, computed the way torch exports it (its own Shape each time).
fn dim_of(b: &mut GraphBuilder, x: ValueId, i: i64) -> ValueId {
    let s = b.op("Shape", &[x], vec![]);
    let idx = scalar_index(b, &format!("idx_{}", s.0), i);
    let d = b.op("Gather", &[s, idx], vec![attr::int("axis", 0)]);
    let axes = ints(b, &format!("axes_{}", s.0), &[0]);
    b.op("Unsqueeze", &[d, axes], vec![])
}

/// GPT-2's split-heads Reshape: `Reshape(x, Concat(batch, seq, [4], [16]))`.
fn split_heads() -> Model {
    let mut b = GraphBuilder::new("split_heads", 14);
    let x = x_input(&mut b);
    let bd = dim_of(&mut b, x, 0);
    let sd = dim_of(&mut b, x, 1);
    let heads = ints(&mut b, "heads", &[4, 16]);
    let target = b.op("Concat", &[bd, sd, heads], vec![attr::int("axis", 0)]);
    let y = b.op("Reshape", &[x, target], vec![]);
    b.output(y, "y");
    b.build()
}

#[test]
fn symbolic_elements_flow_through_the_chain() {
    let m = split_heads();
    let g = &m.graph;
    let y = g.outputs[0];
    let reshape = g.node(g.producer(y).unwrap());
    let target = reshape.input(1).unwrap();
    assert_eq!(
        int_elements(g, target),
        Some(vec![
            sym("batch"),
            sym("seq"),
            Dim::Known(4),
            Dim::Known(16)
        ])
    );
    // Inference now knows the Reshape's output shape with its dims still symbolic.
    assert_eq!(
        g.value(y).ty.shape,
        Some(vec![
            sym("batch"),
            sym("seq"),
            Dim::Known(4),
            Dim::Known(16)
        ])
    );
}

#[test]
fn reshape_dims_solves_minus_one_by_cancelling_symbols() {
    let input = [sym("batch"), sym("seq"), Dim::Known(64)];
    let target = [Dim::Known(-1), sym("seq"), Dim::Known(4), Dim::Known(16)];
    assert_eq!(
        reshape_dims(Some(&input), &target, false),
        vec![sym("batch"), sym("seq"), Dim::Known(4), Dim::Known(16)]
    );
    // batch * seq is no single dim: unknown, not a guess.
    let flat = [Dim::Known(-1), Dim::Known(64)];
    assert_eq!(
        reshape_dims(Some(&input), &flat, false),
        vec![Dim::Unknown, Dim::Known(64)]
    );
    assert_eq!(
        reshape_dims(
            Some(&input),
            &[Dim::Known(0), Dim::Known(0), Dim::Known(64)],
            false
        ),
        input.to_vec()
    );
}

/// BLOOM's attention: heads folded into the batch (`Reshape` to `[batch * 4, -1, 16]`, the
/// size computed as `Mul(Gather(Shape(x), 0), 4)`), then `batch` recovered as that dim of a
/// later value `Div` 4. Inference keeps `4*batch` and divides it back, so the output is
/// `[batch, seq, 64]` again (before, a fresh symbol stood for batch and residual fusions
/// after it could not prove the shapes equal).
#[test]
fn heads_folded_into_the_batch_divide_back_out() {
    let mut b = GraphBuilder::new("bloom_heads", 14);
    let x = x_input(&mut b);
    let batch = dim_of(&mut b, x, 0);
    let four = ints(&mut b, "four", &[4]);
    let rows = b.op("Mul", &[batch, four], vec![]);
    let tail = ints(&mut b, "tail", &[-1, 16]);
    let target = b.op("Concat", &[rows, tail], vec![attr::int("axis", 0)]);
    let folded = b.op("Reshape", &[x, target], vec![]);
    let doubled = b.op("Add", &[folded, folded], vec![]);
    let rows_again = dim_of(&mut b, doubled, 0);
    let batch_again = b.op("Div", &[rows_again, four], vec![]);
    let seq = dim_of(&mut b, doubled, 1);
    let hidden = ints(&mut b, "hidden", &[64]);
    let back = b.op(
        "Concat",
        &[batch_again, seq, hidden],
        vec![attr::int("axis", 0)],
    );
    let y = b.op("Reshape", &[doubled, back], vec![]);
    let z = b.op("Add", &[y, x], vec![]);
    b.output(z, "z");
    let m = b.build();
    let g = &m.graph;
    assert_eq!(
        g.value(folded).ty.shape,
        Some(vec![sym("4*batch"), sym("seq"), Dim::Known(16)])
    );
    assert_eq!(int_elements(g, batch_again), Some(vec![sym("batch")]));
    let x_shape = Some(vec![sym("batch"), sym("seq"), Dim::Known(64)]);
    assert_eq!(g.value(y).ty.shape, x_shape);
    assert_eq!(g.value(g.outputs[0]).ty.shape, x_shape);
    // A factor that does not divide the scale leaves the size undecided.
    assert_eq!(
        reshape_dims(
            Some(&[sym("4*batch"), Dim::Known(16)]),
            &[Dim::Known(-1), Dim::Known(3)],
            false
        ),
        vec![Dim::Unknown, Dim::Known(3)]
    );
}

#[test]
fn split_heads_chain_folds_to_a_constant_target() {
    let m = split_heads();
    assert_eq!(m.graph.node_count(), 8);
    let (opt, _) = run(&m);
    assert_eq!(ops(&opt), vec![("Reshape".to_string(), 1)]);
    let id = opt.graph.node_ids().next().unwrap();
    let t = opt.graph.node(id).input(1).unwrap();
    let tensor = fuselab::onnx::tensor::to_tensor(
        opt.graph.constant(t).expect("constant target"),
        &fuselab::Limits::default(),
    )
    .unwrap();
    assert_eq!(tensor.to_i64_vec(), Some(vec![0, 0, 4, 16]));
    for (batch, seq) in [(2, 3), (1, 1), (3, 0)] {
        assert_eq!(
            parity(&m, &opt, &[("batch", batch), ("seq", seq)]).max_abs_diff,
            0.0
        );
    }
}

#[test]
fn a_static_dim_of_a_dynamic_shape_folds() {
    // Gather(Shape(x), 2) is 64 even though x's other dims are dynamic.
    let mut b = GraphBuilder::new("static_dim", 14);
    let x = x_input(&mut b);
    let d = dim_of(&mut b, x, 2);
    b.output(d, "hidden");
    let m = b.build();
    let (opt, trace) = run(&m);
    assert_eq!(opt.graph.node_count(), 0);
    assert!(trace.rewrites.iter().any(|r| r.rule == "shape_fold"));
    let v = opt.graph.outputs[0];
    assert_eq!(
        fuselab::onnx::tensor::to_tensor(opt.graph.initializer(v).unwrap(), &Default::default())
            .unwrap()
            .to_i64_vec(),
        Some(vec![64])
    );
}

#[test]
fn cse_merges_repeated_shape_reads() {
    let mut b = GraphBuilder::new("cse", 14);
    let x = x_input(&mut b);
    let s1 = b.op("Shape", &[x], vec![]);
    let s2 = b.op("Shape", &[x], vec![]);
    let c = b.op("Concat", &[s1, s2], vec![attr::int("axis", 0)]);
    b.output(c, "shapes");
    let m = b.build();
    let (opt, _) = run(&m);
    assert_eq!(
        ops(&opt),
        vec![("Concat".to_string(), 1), ("Shape".to_string(), 1)]
    );
    assert_eq!(
        parity(&m, &opt, &[("batch", 2), ("seq", 5)]).max_abs_diff,
        0.0
    );
}

/// Each layer of an export builds its own copy of the mask from the same condition with its own
/// constants (`Where(cond, 0, -inf)` with 0 and -inf named per layer): equal small constants are
/// the same input, so the copies merge. Constants that differ in value (or in type), and large
/// ones (not compared by value), keep their nodes apart.
#[test]
fn cse_merges_nodes_whose_small_constants_are_equal() {
    let f32s =
        |v: &[f32]| Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    let mut b = GraphBuilder::new("cse_consts", 17);
    let x = x_input(&mut b);
    let zero = b.initializer("zero", &f32s(&[0.0]));
    let cond = b.op("Greater", &[x, zero], vec![]);
    let mut outs = vec![];
    for (i, (keep, drop)) in [
        (0.0, f32::NEG_INFINITY),
        (0.0, f32::NEG_INFINITY),
        (0.0, -1e9),
    ]
    .into_iter()
    .enumerate()
    {
        let k = b.initializer(&format!("keep_{i}"), &f32s(&[keep]));
        let d = b.initializer(&format!("drop_{i}"), &f32s(&[drop]));
        outs.push(b.op("Where", &[cond, k, d], vec![]));
    }
    let big: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let (b1, b2) = (
        b.initializer("big_1", &f32s(&big)),
        b.initializer("big_2", &f32s(&big)),
    );
    let a1 = b.op("Add", &[outs[0], b1], vec![]);
    let a2 = b.op("Add", &[outs[1], b2], vec![]);
    let y = b.op("Concat", &[a1, a2, outs[2]], vec![attr::int("axis", 0)]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = run(&m);
    // The first two Wheres merge; the third (-1e9) stays; the Adds read 64-element constants.
    assert_eq!(
        ops(&opt),
        vec![
            ("Add".to_string(), 2),
            ("Concat".to_string(), 1),
            ("Greater".to_string(), 1),
            ("Where".to_string(), 2)
        ]
    );
    assert_eq!(
        parity(&m, &opt, &[("batch", 2), ("seq", 3)]).max_abs_diff,
        0.0
    );
}

#[test]
fn cse_keeps_nodes_with_different_attributes() {
    let mut b = GraphBuilder::new("cse_attrs", 17);
    let x = x_input(&mut b);
    let t1 = b.op("Transpose", &[x], vec![attr::ints("perm", &[1, 0, 2])]);
    let t2 = b.op("Transpose", &[x], vec![attr::ints("perm", &[0, 1, 2])]);
    b.output(t1, "a");
    b.output(t2, "b");
    let (opt, _) = run(&b.build());
    assert_eq!(ops(&opt), vec![("Transpose".to_string(), 2)]);
}

#[test]
fn reshape_target_leaves_a_dim_it_cannot_place() {
    // Target [seq, batch, 64] swaps the symbolic dims: no constant target expresses that
    // without -1, which is ambiguous when a dim is 0. The Reshape keeps its computed target.
    let mut b = GraphBuilder::new("swap", 14);
    let x = x_input(&mut b);
    let sd = dim_of(&mut b, x, 1);
    let bd = dim_of(&mut b, x, 0);
    let h = ints(&mut b, "h", &[64]);
    let target = b.op("Concat", &[sd, bd, h], vec![attr::int("axis", 0)]);
    let y = b.op("Reshape", &[x, target], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, trace) = run(&m);
    assert!(opt
        .graph
        .node_ids()
        .any(|id| opt.graph.node(id).is("Concat")));
    assert!(trace
        .rejected
        .iter()
        .any(|r| r.rule == "reshape_target"
            && r.reason.contains("neither known nor the input's dim")));
    assert_eq!(
        parity(&m, &opt, &[("batch", 2), ("seq", 3)]).max_abs_diff,
        0.0
    );
}

/// Declares `v`'s shape as `dims` (what a tool's value_info would say).
fn declare(b: &mut GraphBuilder, v: ValueId, dims: Vec<Dim>) {
    b.graph.value_mut(v).ty = fuselab::ir::TensorType::new(DType::F32, dims);
}

fn shape_of(m: &Model, name: &str) -> Vec<Dim> {
    let v = m.graph.find(name).unwrap();
    m.graph.value(v).ty.shape.clone().unwrap()
}

#[test]
fn fresh_symbols_on_declared_shapes_unify_with_what_inference_proves() {
    // X [batch, 8] → Relu (declared [unk__1, 8]) → Sigmoid (declared [unk__2, ?]) → Add with a
    // value declared [unk__1, 8] elsewhere too: every unk__ is batch, the ? is 8.
    let mut b = GraphBuilder::new("unk", 17);
    let x = b.input("X", DType::F32, vec![sym("batch"), Dim::Known(8)]);
    let r = b.op("Relu", &[x], vec![]);
    declare(&mut b, r, vec![sym("unk__1"), Dim::Known(8)]);
    let s = b.op("Sigmoid", &[r], vec![]);
    declare(&mut b, s, vec![sym("unk__2"), Dim::Unknown]);
    let t = b.op("Tanh", &[x], vec![]);
    declare(&mut b, t, vec![sym("unk__1"), Dim::Known(8)]);
    let y = b.op("Add", &[s, t], vec![]);
    b.output(y, "Y");
    let m = b.build();
    let want = vec![sym("batch"), Dim::Known(8)];
    for v in [r, s, t, y] {
        assert_eq!(
            m.graph.value(v).ty.shape.as_ref().unwrap(),
            &want,
            "{}",
            m.graph.name(v)
        );
    }
    assert_eq!(shape_of(&m, "Y"), want);
}

#[test]
fn interface_symbols_and_conflicting_proofs_are_not_renamed() {
    // `n` names a graph input's dim: it is the interface and stays, even where inference says
    // `batch`. `unk__7` is proved `batch` at one place and `m` at another: kept as declared.
    let mut b = GraphBuilder::new("unk", 17);
    let x = b.input("X", DType::F32, vec![sym("batch"), Dim::Known(4)]);
    let z = b.input("Z", DType::F32, vec![sym("m"), Dim::Known(4)]);
    let _w = b.input("W", DType::F32, vec![sym("n"), Dim::Known(4)]);
    let r = b.op("Relu", &[x], vec![]);
    declare(&mut b, r, vec![sym("n"), Dim::Known(4)]);
    let a = b.op("Neg", &[x], vec![]);
    declare(&mut b, a, vec![sym("unk__7"), Dim::Known(4)]);
    let c = b.op("Neg", &[z], vec![]);
    declare(&mut b, c, vec![sym("unk__7"), Dim::Known(4)]);
    b.output(r, "R");
    b.output(a, "A");
    b.output(c, "C");
    let m = b.build();
    assert_eq!(shape_of(&m, "R"), vec![sym("n"), Dim::Known(4)]);
    assert_eq!(shape_of(&m, "A"), vec![sym("unk__7"), Dim::Known(4)]);
    assert_eq!(shape_of(&m, "C"), vec![sym("unk__7"), Dim::Known(4)]);
}
