//! The optimize job: parity catches a rule that changes semantics; the report reflects it.

mod common;

use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::{Model, Node, NodeId};
use fuselab::passes::{Anchors, Patch, Proposal, Rule, RuleKind};
use fuselab::pipeline::{for_backend, optimize, optimize_with, Backend, OptimizeOptions};
use fuselab::DType;

/// A wrong rule on purpose: Relu(x) → Neg(x).
struct ReluToNeg;

impl Rule for ReluToNeg {
    fn name(&self) -> &'static str {
        "relu_to_neg"
    }
    fn kind(&self) -> RuleKind {
        RuleKind::Fusion
    }
    fn anchors(&self) -> Anchors {
        Anchors::onnx(&["Relu"])
    }
    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        let n = model.graph.node(id);
        if !n.is("Relu") {
            return Proposal::NoMatch;
        }
        let mut neg = Node::new("Neg", "");
        neg.name = format!("{}_neg", n.name);
        neg.inputs = n.inputs.clone();
        neg.outputs = n.outputs.clone();
        Proposal::Rewrite(Patch {
            remove: vec![id],
            add: vec![neg.into()],
            ..Default::default()
        })
    }
}

fn relu_model() -> Model {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let y = b.op("Relu", &[x], vec![]);
    b.output(y, "Y");
    b.build()
}

/// Optimizes `model` with the wrong rule and checks that parity catches it.
fn caught_relu_to_neg(model: &Model) -> fuselab::report::OptimizeReport {
    let (_, rep) = optimize_with(
        model,
        vec![Box::new(ReluToNeg)],
        &OptimizeOptions::default(),
        &|| 0.0,
    )
    .unwrap();
    let p = rep.parity.as_ref().unwrap();
    assert!(!p.ok);
    assert!(p.max_abs_diff > 0.1, "{}", p.max_abs_diff);
    rep
}

#[test]
fn parity_fails_for_a_rule_that_changes_semantics() {
    let rep = caught_relu_to_neg(&relu_model());
    assert_eq!(rep.rewrites.len(), 1);
}

/// Per-node parity names the fusion to suspect: with a correct fusion (AddEyeLike) and a wrong
/// one (Relu -> Neg) in one graph, the wrong one's own output differs and comes first; the correct
/// one's output matches the original value of the same name exactly.
#[test]
fn per_node_parity_points_at_the_wrong_fusion() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N"), sym("N")]);
    let e = b.op("EyeLike", &[x], vec![]);
    let y = b.op("Add", &[e, x], vec![]);
    let z = b.op("Relu", &[y], vec![]);
    b.output(z, "Z");
    let model = b.build();
    let mut rules = fuselab::passes::rules(&["add_eyelike"]).unwrap();
    rules.push(Box::new(ReluToNeg));
    let opts = OptimizeOptions {
        dims: [("N".to_string(), 16)].into(),
        ..Default::default()
    };
    let (opt, rep) = optimize_with(&model, rules, &opts, &|| 0.0).unwrap();
    assert_eq!(opt.graph.node_count(), 2);
    let p = rep.parity.unwrap();
    assert!(!p.ok);
    let nodes: Vec<(&str, Option<f64>)> = p
        .nodes
        .iter()
        .map(|d| (d.op.as_str(), d.max_abs_diff))
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_eq!(nodes[0].0, "Neg");
    assert!(nodes[0].1.unwrap() > 0.1, "{nodes:?}");
    assert_eq!(nodes[1], ("AddEyeLike", Some(0.0)));
}

/// X → [AddEyeLike pattern] → S; S → Mystery → M; X → Mystery → U → [AddEyeLike pattern] → T.
/// The reference backend has no Mystery: S and its fusion are compared, M, T and T's fusion not.
fn half_mystery() -> Model {
    let mut b = GraphBuilder::new("g", 17);
    let n = || vec![sym("N"), sym("N")];
    let x = b.input("X", DType::F32, n());
    let e = b.op("EyeLike", &[x], vec![]);
    let s = b.op("Add", &[x, e], vec![]);
    let m = b.node("com.example", "Mystery", &[Some(s)], 1, vec![])[0];
    let u = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    let e2 = b.op("EyeLike", &[u], vec![]);
    let t = b.op("Add", &[u, e2], vec![]);
    b.output(s, "S");
    b.output(m, "M");
    b.output(t, "T");
    let mut model = b.build();
    model.ensure_opset("com.example", 1);
    for v in [m, u] {
        model.graph.value_mut(v).ty = fuselab::ir::TensorType::new(DType::F32, n());
    }
    model
}

#[test]
fn partial_parity_compares_what_the_reference_backend_can_run() {
    let opts = OptimizeOptions {
        dims: [("N".to_string(), 8)].into(),
        ..Default::default()
    };
    let (opt, rep) = optimize(&half_mystery(), &opts, &|| 0.0).unwrap();
    assert_eq!(rep.fusions.get("AddEyeLike"), Some(&2));
    assert_eq!(opt.graph.node_count(), 4);
    let p = rep.parity.unwrap();
    assert!(p.ok);
    let outputs: Vec<&str> = p.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outputs, ["S"]);
    assert_eq!(p.outputs[0].max_abs_diff, Some(0.0));
    assert_eq!(p.outputs[0].shape, vec![8, 8]);
    assert_eq!(p.nodes.len(), 1, "{:?}", p.nodes);
    assert_eq!(p.nodes[0].op, "AddEyeLike");
    let left = p.partial.expect("partial");
    assert_eq!(left.missing_ops, ["Mystery (com.example)"]);
    assert_eq!(left.unchecked_outputs, ["M", "T"]);
    assert_eq!(left.unchecked_nodes.len(), 1, "{:?}", left.unchecked_nodes);
    assert_ne!(left.unchecked_nodes[0], p.nodes[0].node);
}

#[test]
fn partial_parity_still_fails_a_wrong_rule_in_what_it_compares() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let y = b.op("Relu", &[x], vec![]);
    let m = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    b.output(y, "Y");
    b.output(m, "M");
    let mut model = b.build();
    model.ensure_opset("com.example", 1);
    let rep = caught_relu_to_neg(&model);
    assert_eq!(
        rep.parity.unwrap().partial.unwrap().unchecked_outputs,
        ["M"]
    );
}

#[test]
fn with_nothing_to_compare_parity_names_the_missing_op() {
    // Every output needs the Mystery op: no partial check is possible, and the error says why.
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let m = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    let y = b.op("Relu", &[m], vec![]);
    b.output(y, "Y");
    let mut model = b.build();
    model.ensure_opset("com.example", 1);
    let err = optimize(&model, &OptimizeOptions::default(), &|| 0.0)
        .expect_err("no parity possible")
        .to_string();
    assert!(
        err.starts_with(
            "parity check: original model: unsupported op Mystery (domain 'com.example')"
        ),
        "{err}"
    );
}

#[test]
fn parity_passes_and_dims_are_reported_for_the_example() {
    let opts = OptimizeOptions {
        dims: [("N".to_string(), 12)].into(),
        ..Default::default()
    };
    let (opt, rep) = optimize(&common::eyelike_add(None), &opts, &|| 0.0).unwrap();
    assert_eq!(opt.graph.node_count(), 1);
    assert_eq!(rep.parity.as_ref().unwrap().max_abs_diff, 0.0);
    assert_eq!(rep.parity.as_ref().unwrap().outputs[0].shape, vec![12, 12]);
    assert_eq!(rep.dims.get("N"), Some(&12));
    assert_eq!(rep.fusions.get("AddEyeLike"), Some(&1));
}

#[test]
fn parity_can_be_skipped_and_tolerance_must_be_sane() {
    let opts = OptimizeOptions {
        parity: false,
        ..Default::default()
    };
    let (_, rep) = optimize(&relu_model(), &opts, &|| 0.0).unwrap();
    assert!(rep.parity.is_none());
    let bad = OptimizeOptions {
        tolerance: Some(-1.0),
        ..Default::default()
    };
    let err = optimize(&relu_model(), &bad, &|| 0.0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tolerance must be a non-negative number"),
        "{err}"
    );
}

#[test]
fn unsupported_ops_are_all_named() {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let a = b.node("com.example", "Mystery", &[Some(x)], 1, vec![])[0];
    let c = b.node("", "ImageDecoder", &[Some(a)], 1, vec![])[0];
    let d = b.node("com.example", "Mystery", &[Some(c)], 1, vec![])[0];
    b.output(d, "Y");
    let err = fuselab::runtime::reference::Executor::new(&b.build(), &Default::default())
        .err()
        .expect("unsupported")
        .to_string();
    assert!(
        err.starts_with("unsupported op Mystery (domain 'com.example') at node 'mystery_1'"),
        "{err}"
    );
    assert!(
        err.ends_with("; also missing: ImageDecoder (ai.onnx)"),
        "{err}"
    );
}

#[test]
fn an_op_below_its_first_covered_version_says_so() {
    // Reshape took its target shape as an input from opset 5; at 4 it is an attribute.
    let mut b = GraphBuilder::new("g", 4);
    let x = b.input("X", DType::F32, vec![sym("N")]);
    let y = b.op("Reshape", &[x], vec![]);
    b.output(y, "Y");
    let err = fuselab::runtime::reference::Executor::new(&b.build(), &Default::default())
        .err()
        .expect("unsupported")
        .to_string();
    assert_eq!(
        err,
        "unsupported op Reshape (domain 'ai.onnx') at node 'reshape_1'; \
         Reshape is covered from opset 5; the model imports 4"
    );
}

/// Each node as (name, domain, op type), in the graph's order.
fn node_list(m: &Model) -> Vec<(String, String, String)> {
    let g = &m.graph;
    g.node_ids()
        .map(|id| {
            let n = g.node(id);
            (n.label(id), n.domain.clone(), n.op_type.clone())
        })
        .collect()
}

/// `Relu(Mul(Add(x, y), 0.5))` over f32 [N, 3]: a chain no default rule fuses.
fn elementwise_chain() -> Model {
    let mut b = GraphBuilder::new("chain", 17);
    let x = b.input("x", DType::F32, vec![sym("N"), fuselab::ir::Dim::Known(3)]);
    let y = b.input("y", DType::F32, vec![sym("N"), fuselab::ir::Dim::Known(3)]);
    let half = b.initializer(
        "half",
        &fuselab::Tensor::F32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), 0.5)),
    );
    let s = b.op("Add", &[x, y], vec![]);
    let p = b.op("Mul", &[s, half], vec![]);
    let r = b.op("Relu", &[p], vec![]);
    b.output(r, "Y");
    b.build()
}

/// `for_backend` is the one place the WebGPU backend's lowering is applied: the reference
/// backend runs the optimized graph as it is; WebGPU gets the graph that one engine run of the
/// default rules and the lowering makes from the original (what `fuselab bench --backend webgpu`
/// timed before); and both front ends that bench on WebGPU take their graph from it.
#[test]
fn for_backend_lowers_for_webgpu_only_and_both_front_ends_use_it() {
    let limits = fuselab::Limits::default();
    let gpt2 = common::repo().join("tests/models/gpt2_tiny.onnx");
    let gpt2 = fuselab::io::load_file(&gpt2, &limits).unwrap();
    let opts = OptimizeOptions {
        parity: false,
        ..Default::default()
    };
    let names: Vec<&str> = fuselab::passes::ALL_RULES
        .iter()
        .chain(fuselab::passes::BACKEND_LOWERING_RULES.iter())
        .copied()
        .collect();
    for original in [gpt2, elementwise_chain()] {
        let (optimized, _) = optimize(&original, &opts, &|| 0.0).unwrap();
        let reference = for_backend(&optimized, Backend::Reference).unwrap();
        assert_eq!(node_list(&reference), node_list(&optimized));
        let gpu = for_backend(&optimized, Backend::Webgpu).unwrap();
        let mut at_once = original.clone();
        fuselab::passes::optimize(&mut at_once, &names).unwrap();
        assert_eq!(node_list(&gpu), node_list(&at_once));
    }

    // On GPT-2 the named fusions leave no chain; here the lowering is all there is.
    let chain = elementwise_chain();
    let (optimized, _) = optimize(&chain, &opts, &|| 0.0).unwrap();
    assert_eq!(optimized.graph.node_count(), 3);
    let gpu = for_backend(&optimized, Backend::Webgpu).unwrap();
    let ops: Vec<String> = node_list(&gpu).into_iter().map(|n| n.2).collect();
    assert_eq!(ops, ["FusedElementwise"]);
    assert_eq!(common::parity(&chain, &gpu, &[("N", 5)]).max_abs_diff, 0.0);

    // The CLI's bench and the wasm GpuBench (the page's WebGPU benchmark) call it.
    for file in ["src/cli/bench.rs", "src/wasm/bench.rs"] {
        let src = std::fs::read_to_string(common::repo().join(file)).unwrap();
        assert!(src.contains("pipeline::for_backend("), "{file}");
    }
}
