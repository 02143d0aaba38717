//! FusedElementwise: the opt-in chain fusion (`fused_elementwise`) and its expression language.
//! Exact op counts and expressions, bit-exact parity with the unfused chain at sizes that cross
//! the kernel's chunks, the cases that must not fuse with the reason the report gives, the
//! bundled GPT-2/BERT exports with and without the rule, and hostile expression text.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{assert_parity_within, counts, fuse, ops, parity, repo};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::expr::{Expr, MAX_DEPTH};
use fuselab::ir::model::FUSELAB_DOMAIN;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::passes::{
    rules, Anchors, Engine, Proposal, Rule, RuleKind, ALL_RULES, BACKEND_LOWERING_RULES,
};
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};
use ndarray::{ArrayD, IxDyn};

const RULE: &[&str] = &["fused_elementwise"];

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    b.initializer(name, &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)))
}

/// The `expression` of every FusedElementwise node, with its input names.
fn fused_nodes(m: &Model) -> Vec<(String, Vec<String>)> {
    let g = &m.graph;
    g.node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == "FusedElementwise")
        .map(|n| {
            assert_eq!(n.domain, FUSELAB_DOMAIN);
            let names = n.inputs.iter().flatten().map(|&v| g.name(v).to_string());
            (n.attr_string("expression").unwrap(), names.collect())
        })
        .collect()
}

/// Bit-exact parity at each size of the symbolic dim `N`.
fn assert_exact_at(a: &Model, b: &Model, sizes: &[usize]) {
    for &n in sizes {
        let p = parity(a, b, &[("N", n)]);
        assert_eq!(p.max_abs_diff, 0.0, "N={n}");
    }
}

/// Sizes of N that give outputs below, at and across the kernel's 512-element chunks.
const ODD_SIZES: &[usize] = &[1, 7, 171, 1031];

/// `Relu(Mul(Add(x, y), 0.5))` over x, y f32 [N, 3].
fn relu_mul_add() -> (GraphBuilder, [ValueId; 3]) {
    let mut b = GraphBuilder::new("chain", 17);
    let x = b.input("x", DType::F32, vec![sym("N"), dims(&[3])[0].clone()]);
    let y = b.input("y", DType::F32, vec![sym("N"), dims(&[3])[0].clone()]);
    let half = scalar(&mut b, "half", 0.5);
    let s = b.op("Add", &[x, y], vec![]);
    let p = b.op("Mul", &[s, half], vec![]);
    let r = b.op("Relu", &[p], vec![]);
    (b, [s, p, r])
}

#[test]
fn fuses_relu_mul_add_with_the_scalar_folded() {
    let (mut b, [_, _, r]) = relu_mul_add();
    b.output(r, "out");
    let m = b.build();
    let (opt, trace) = fuse(&m, RULE);
    assert_eq!(m.graph.node_count(), 3);
    assert_eq!(ops(&opt), counts(&[("FusedElementwise", 1)]));
    assert_eq!(
        fused_nodes(&opt),
        vec![(
            "(relu (mul (add x0 x1) 0.5))".to_string(),
            vec!["x".to_string(), "y".to_string()]
        )]
    );
    assert_eq!(trace.rewrites.len(), 1);
    assert_eq!(trace.rewrites[0].removed.len(), 3);
    assert_eq!(opt.opset("ai.fuselab"), Some(1));
    // The folded scalar's initializer is gone; the output keeps its name and type.
    assert!(opt
        .graph
        .find("half")
        .is_none_or(|v| opt.graph.initializer(v).is_none()));
    assert_eq!(opt.graph.name(opt.graph.outputs[0]), "out");
    assert_eq!(
        opt.graph.value(opt.graph.outputs[0]).ty.to_string(),
        "float32[N, 3]"
    );
    assert_exact_at(&m, &opt, ODD_SIZES);
}

#[test]
fn fuses_a_broadcasting_chain() {
    // ([N, 3, 4] + [4]) * [3, 1] → [N, 3, 4].
    let mut b = GraphBuilder::new("bcast", 17);
    let a = b.input(
        "a",
        DType::F32,
        vec![sym("N"), dims(&[3])[0].clone(), dims(&[4])[0].clone()],
    );
    let v = b.input("v", DType::F32, dims(&[4]));
    let c = b.input("c", DType::F32, dims(&[3, 1]));
    let s = b.op("Add", &[a, v], vec![]);
    let p = b.op("Mul", &[s, c], vec![]);
    b.output(p, "out");
    let m = b.build();
    let (opt, _) = fuse(&m, RULE);
    assert_eq!(ops(&opt), counts(&[("FusedElementwise", 1)]));
    assert_eq!(
        fused_nodes(&opt),
        vec![(
            "(mul (add x0 x1) x2)".to_string(),
            vec!["a".into(), "v".into(), "c".into()]
        )]
    );
    assert_eq!(
        opt.graph.value(opt.graph.outputs[0]).ty.to_string(),
        "float32[N, 3, 4]"
    );
    let p = parity(&m, &opt, &[("N", 2)]);
    assert_eq!(p.max_abs_diff, 0.0);
    assert_exact_at(&m, &opt, ODD_SIZES);
}

#[test]
fn fuses_every_op_with_tight_parity() {
    // (1 - sigmoid(x)) * tanh(erf(y) - exp(-|x|)) / sqrt(|y| + 1) + log(|x| + 1) ^ 2, relu'd, with x
    // [N, 5] and y [5] broadcast, and a Constant-node scalar.
    let mut b = GraphBuilder::new("all_ops", 17);
    let x = b.input("x", DType::F32, vec![sym("N"), dims(&[5])[0].clone()]);
    let y = b.input("y", DType::F32, dims(&[5]));
    let one = scalar(&mut b, "one", 1.0);
    let two = b.op(
        "Constant",
        &[],
        vec![attr::tensor(
            "value",
            fuselab::onnx::tensor::from_tensor("two", &Tensor::scalar_f32(2.0)),
        )],
    );
    let sx = b.op("Sigmoid", &[x], vec![]);
    let ax = b.op("Abs", &[x], vec![]);
    let nx = b.op("Neg", &[ax], vec![]);
    let ex = b.op("Exp", &[nx], vec![]);
    let ey = b.op("Erf", &[y], vec![]);
    let d = b.op("Sub", &[ey, ex], vec![]);
    let t = b.op("Tanh", &[d], vec![]);
    let sx1 = b.op("Sub", &[one, sx], vec![]);
    let st = b.op("Mul", &[sx1, t], vec![]);
    let ay = b.op("Abs", &[y], vec![]);
    let ay1 = b.op("Add", &[ay, one], vec![]);
    let r = b.op("Sqrt", &[ay1], vec![]);
    let q = b.op("Div", &[st, r], vec![]);
    let ax2 = b.op("Abs", &[x], vec![]);
    let ax1 = b.op("Add", &[ax2, one], vec![]);
    let l = b.op("Log", &[ax1], vec![]);
    let l2 = b.op("Pow", &[l, two], vec![]);
    let s = b.op("Add", &[q, l2], vec![]);
    let out = b.op("Relu", &[s], vec![]);
    b.output(out, "out");
    let m = b.build();
    assert_eq!(m.graph.node_count(), 20);
    let (opt, _) = fuse(&m, RULE);
    // The Constant goes with the chain; `one` is read twice but is a literal, not a shared value.
    assert_eq!(ops(&opt), counts(&[("FusedElementwise", 1)]));
    assert_eq!(
        fused_nodes(&opt),
        vec![(
            "(relu (add (div (mul (sub 1.0 (sigmoid x0)) (tanh (sub (erf x1) (exp (neg (abs x0)))))) \
             (sqrt (add (abs x1) 1.0))) (pow (log (add (abs x0) 1.0)) 2.0)))"
                .to_string(),
            vec!["x".into(), "y".into()]
        )]
    );
    assert_exact_at(&m, &opt, ODD_SIZES);
    assert_parity_within(&m, &opt, 0.0);
}

#[test]
fn a_one_element_constant_of_higher_rank_stays_an_input() {
    // Mul(Neg(x [3]), c [1, 1]) is [1, 3]: folding c into a literal would make it [3].
    // Neg(x [3]) + d [1] stays [3], so d becomes a literal.
    let mut b = GraphBuilder::new("ranks", 17);
    let x = b.input("x", DType::F32, dims(&[3]));
    let c = b.initializer("c", &Tensor::F32(ArrayD::from_elem(IxDyn(&[1, 1]), 3.0)));
    let d = b.initializer("d", &Tensor::F32(ArrayD::from_elem(IxDyn(&[1]), 0.25)));
    let n = b.op("Neg", &[x], vec![]);
    let p = b.op("Mul", &[n, c], vec![]);
    let q = b.op("Add", &[p, d], vec![]);
    b.output(q, "out");
    let m = b.build();
    let (opt, _) = fuse(&m, RULE);
    assert_eq!(
        fused_nodes(&opt),
        vec![(
            "(add (mul (neg x0) x1) 0.25)".to_string(),
            vec!["x".into(), "c".into()]
        )]
    );
    assert_eq!(
        opt.graph.value(opt.graph.outputs[0]).ty.to_string(),
        "float32[1, 3]"
    );
    assert_eq!(parity(&m, &opt, &[]).max_abs_diff, 0.0);
}

// ---------------------------------------------------------------- not fused

/// The report's rejection reasons of the rule.
fn reasons(trace: &fuselab::passes::Trace) -> Vec<String> {
    trace
        .rejected
        .iter()
        .filter(|r| r.rule == "fused_elementwise")
        .map(|r| format!("{}: {}", r.candidate, r.reason))
        .collect()
}

fn assert_reason(trace: &fuselab::passes::Trace, needle: &str) {
    let rs = reasons(trace);
    assert!(
        rs.iter().any(|r| r.contains(needle)),
        "no rejection mentions {needle:?}: {rs:?}"
    );
}

/// Nothing fused; a rejection says `needle`; outputs unchanged.
fn assert_not_fused(m: &Model, needle: &str) {
    let (opt, trace) = fuse(m, RULE);
    assert!(trace.rewrites.is_empty(), "{:?}", trace.rewrites);
    assert_eq!(ops(&opt), ops(m));
    assert_reason(&trace, needle);
}

#[test]
fn an_intermediate_read_outside_the_chain_ends_it() {
    // t = Add(x, y) also feeds a MatMul: Add → Relu must not fuse.
    let mut b = GraphBuilder::new("shared", 17);
    let x = b.input("x", DType::F32, dims(&[3, 3]));
    let y = b.input("y", DType::F32, dims(&[3, 3]));
    let t = b.op("Add", &[x, y], vec![]);
    let r = b.op("Relu", &[t], vec![]);
    let mm = b.op("MatMul", &[t, x], vec![]);
    b.output(r, "r");
    b.output(mm, "mm");
    assert_not_fused(
        &b.build(),
        "add_1: a lone elementwise op, nothing to fuse: 'add_1_out0' is read 2 times, also by \
         MatMul 'matmul_3' outside the chain",
    );

    // In a longer chain the group splits there: Mul and Relu fuse, the Add stays.
    let (mut b, [s, _, r]) = relu_mul_add();
    let w = b.input("w", DType::F32, dims(&[3, 3]));
    let mm = b.op("MatMul", &[s, w], vec![]);
    b.output(r, "out");
    b.output(mm, "mm");
    let m = b.build();
    let (opt, trace) = fuse(&m, RULE);
    assert_eq!(
        ops(&opt),
        counts(&[("Add", 1), ("FusedElementwise", 1), ("MatMul", 1)])
    );
    assert_eq!(
        fused_nodes(&opt),
        vec![("(relu (mul x0 0.5))".to_string(), vec!["add_1_out0".into()])]
    );
    assert_reason(&trace, "'add_1_out0' is read 2 times, also by MatMul");
    assert_exact_at(&m, &opt, &[1, 5]);
}

#[test]
fn an_intermediate_that_is_a_graph_output_ends_the_chain() {
    let mut b = GraphBuilder::new("visible", 17);
    let x = b.input("x", DType::F32, dims(&[4]));
    let t = b.op("Exp", &[x], vec![]);
    let r = b.op("Neg", &[t], vec![]);
    b.output(r, "r");
    b.output(t, "t");
    assert_not_fused(
        &b.build(),
        "a lone elementwise op, nothing to fuse: 't' is a graph output",
    );

    let (mut b, [s, _, r]) = relu_mul_add();
    b.output(r, "out");
    b.output(s, "sum");
    let m = b.build();
    let (opt, trace) = fuse(&m, RULE);
    assert_eq!(ops(&opt), counts(&[("Add", 1), ("FusedElementwise", 1)]));
    assert_eq!(fused_nodes(&opt)[0].0, "(relu (mul x0 0.5))");
    assert_reason(&trace, "'sum' is a graph output");
    assert_exact_at(&m, &opt, &[3]);
}

#[test]
fn a_value_read_twice_inside_the_chain_ends_it() {
    // Mul(t, t) with t = Exp(x): the tree would compute t twice.
    let mut b = GraphBuilder::new("square", 17);
    let x = b.input("x", DType::F32, dims(&[4]));
    let t = b.op("Exp", &[x], vec![]);
    let sq = b.op("Mul", &[t, t], vec![]);
    b.output(sq, "y");
    assert_not_fused(
        &b.build(),
        "'exp_1_out0' is read 2 times; the expression is a tree",
    );
}

#[test]
fn an_int64_chain_is_not_fused() {
    let mut b = GraphBuilder::new("ints", 17);
    let x = b.input("x", DType::I64, dims(&[4]));
    let y = b.input("y", DType::I64, dims(&[4]));
    let s = b.op("Add", &[x, y], vec![]);
    let p = b.op("Mul", &[s, y], vec![]);
    b.output(p, "p");
    assert_not_fused(&b.build(), "'x' is int64; the fused op is f32 only");
}

#[test]
fn a_float_op_next_to_an_int64_one_is_not_fused() {
    // Pow(x f32, 2 int64) is refused, so its f32 neighbour stands alone.
    let mut b = GraphBuilder::new("mixed", 17);
    let x = b.input("x", DType::F32, dims(&[4]));
    let two = b.initializer("two", &Tensor::from_i64s(&[2]));
    let e = b.op("Exp", &[x], vec![]);
    let p = b.op("Pow", &[e, two], vec![]);
    b.output(p, "p");
    let m = b.build();
    assert_not_fused(&m, "feeds Pow 'pow_2', which cannot join: 'two' is int64");
}

#[test]
fn a_single_elementwise_op_is_not_fused() {
    let mut b = GraphBuilder::new("one", 17);
    let x = b.input("x", DType::F32, dims(&[4]));
    let y = b.input("y", DType::F32, dims(&[4]));
    let s = b.op("Add", &[x, y], vec![]);
    b.output(s, "s");
    assert_not_fused(
        &b.build(),
        "add_1: a lone elementwise op, nothing to fuse: 's' is a graph output",
    );
}

#[test]
fn a_legacy_broadcast_attribute_is_not_fused() {
    let mut b = GraphBuilder::new("legacy", 17);
    let x = b.input("x", DType::F32, dims(&[4]));
    let t = b.op("Neg", &[x], vec![]);
    let s = b.op("Add", &[t, x], vec![attr::int("broadcast", 1)]);
    b.output(s, "s");
    let (_, trace) = fuse(&b.build(), RULE);
    assert!(trace.rewrites.is_empty());
    assert_reason(&trace, "has attribute 'broadcast'");
}

#[test]
fn a_chain_deeper_than_the_expression_limit_is_not_fused() {
    let mut b = GraphBuilder::new("deep", 17);
    let mut v = b.input("x", DType::F32, dims(&[2]));
    for _ in 0..MAX_DEPTH + 1 {
        v = b.op("Neg", &[v], vec![]);
    }
    b.output(v, "y");
    assert_not_fused(&b.build(), "more than 256 ops deep");

    let mut b = GraphBuilder::new("deep_ok", 17);
    let mut v = b.input("x", DType::F32, dims(&[2]));
    for _ in 0..MAX_DEPTH {
        v = b.op("Neg", &[v], vec![]);
    }
    b.output(v, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, RULE);
    assert_eq!(ops(&opt), counts(&[("FusedElementwise", 1)]));
    assert_eq!(parity(&m, &opt, &[]).max_abs_diff, 0.0);
}

// ---------------------------------------------------------------- the bundled exports

fn load(stem: &str) -> Model {
    let path = repo().join(format!("tests/models/{stem}.onnx"));
    fuselab::io::load_file(&path, &Limits::default()).unwrap()
}

fn histogram(m: &Model) -> BTreeMap<String, usize> {
    ops(m).into_iter().collect()
}

fn with_opt_in() -> Vec<&'static str> {
    ALL_RULES
        .iter()
        .chain(BACKEND_LOWERING_RULES.iter())
        .copied()
        .collect()
}

#[test]
fn default_rules_make_no_fused_elementwise() {
    assert!(!ALL_RULES.contains(&"fused_elementwise"));
    for (stem, nodes) in [("gpt2_tiny", 24), ("bert_tiny", 21)] {
        let (opt, trace) = fuse(&load(stem), &[]);
        assert_eq!(opt.graph.node_count(), nodes, "{stem}");
        assert!(fused_nodes(&opt).is_empty(), "{stem}");
        assert!(opt.opset("ai.fuselab").is_none(), "{stem}");
        assert!(trace.rewrites.iter().all(|e| e.rule != "fused_elementwise"));
    }
}

/// What the opt-in rule adds on top of the defaults: exactly these FusedElementwise nodes, the
/// named fusions untouched, parity within 1e-4.
#[test]
fn opt_in_rule_on_the_bundled_exports() {
    // After the defaults neither keeps an elementwise op (gpt2's embedding sum is the first
    // SkipLayerNormalization, its position embeddings the skip): nothing is left to fuse.
    // Alone on the raw exports the rule fuses the decomposed norms, the tanh/erf GELUs, the
    // score scaling + mask Adds and (bert) the bias + residual Adds.
    let cases: [(&str, usize, &[&str], usize, usize); 2] = [
        ("gpt2_tiny", 24, &[], 492, 9),
        ("bert_tiny", 21, &[], 258, 14),
    ];
    for (stem, nodes, want, alone_nodes, alone_fused) in cases {
        let m = load(stem);
        let (def, _) = fuse(&m, &[]);
        let (opt, trace) = fuse(&m, &with_opt_in());
        let got: Vec<String> = fused_nodes(&opt).into_iter().map(|(e, _)| e).collect();
        println!(
            "{stem}: {} nodes, {:?}",
            opt.graph.node_count(),
            histogram(&opt)
        );
        println!("{stem}: {got:?}");
        println!("{stem}: {:?}", reasons(&trace));
        assert_eq!(got, want, "{stem}");
        assert_eq!(opt.graph.node_count(), nodes, "{stem}");
        // Every op the rule does not take keeps its count: no named fusion lost a pattern.
        let (hd, ho) = (histogram(&def), histogram(&opt));
        for (op, n) in &hd {
            let elementwise = fuselab::ir::expr::UnaryOp::from_onnx(op).is_some()
                || fuselab::ir::expr::BinaryOp::from_onnx(op).is_some();
            if !elementwise {
                assert_eq!(ho.get(op), Some(n), "{stem}: {op}");
            }
        }
        assert_parity_within(&m, &opt, 1e-4);
        // Alone, on the raw export.
        let (alone, _) = fuse(&m, RULE);
        println!(
            "{stem} alone: {} nodes, {:?}",
            alone.graph.node_count(),
            histogram(&alone)
        );
        for (e, ins) in fused_nodes(&alone) {
            println!("  {e} <- {ins:?}");
        }
        assert_eq!(alone.graph.node_count(), alone_nodes, "{stem}");
        assert_eq!(fused_nodes(&alone).len(), alone_fused, "{stem}");
        if stem == "bert_tiny" {
            let gelu = "(mul (mul x0 (add (erf (div x0 1.4142135)) 1.0)) 0.5)";
            assert_eq!(
                fused_nodes(&alone)
                    .iter()
                    .filter(|(e, _)| e == gelu)
                    .count(),
                2
            );
        }
        assert_parity_within(&m, &alone, 1e-4);
        for e in &got {
            assert_eq!(&Expr::parse(e, 8).unwrap().to_string(), e);
        }
    }
}

/// The rule as an ordinary (not deferred) rule, last in the list.
struct LastNotDeferred(Box<dyn Rule>);

impl Rule for LastNotDeferred {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn kind(&self) -> RuleKind {
        self.0.kind()
    }
    fn anchors(&self) -> Anchors {
        self.0.anchors()
    }
    fn propose(&self, model: &Model, id: fuselab::ir::NodeId) -> Proposal {
        self.0.propose(model, id)
    }
}

#[test]
fn deferral_keeps_the_named_fusions() {
    // Run merely last in each sweep, the rule would take ops that a named fusion matches only in
    // a later sweep; deferred it cannot.
    let m = load("gpt2_tiny");
    let (def, _) = fuse(&m, &[]);
    let mut eager = rules(&ALL_RULES).unwrap();
    eager.push(Box::new(LastNotDeferred(rules(RULE).unwrap().remove(0))));
    let mut opt = m.clone();
    Engine::new(eager).run(&mut opt).unwrap();
    let (hd, ho) = (histogram(&def), histogram(&opt));
    println!("default {hd:?}\neager {ho:?}");
    assert_eq!(hd.get("Attention"), Some(&2));
    assert_eq!(
        ho.get("Attention"),
        None,
        "the eager rule took the attention masks' ops"
    );
    assert!(ho.contains_key("FusedElementwise"));
}

// ---------------------------------------------------------------- expression text

#[test]
fn printed_expressions_parse_back() {
    for text in [
        "x0",
        "-0.0",
        "(neg x0)",
        "(relu (mul (add x0 x1) 0.5))",
        "(pow (sigmoid (div x2 3.4028235e38)) (sub 1e-5 (tanh (erf (exp (log (sqrt (abs x1))))))))",
    ] {
        let e = Expr::parse(text, 3).unwrap();
        assert_eq!(e.to_string(), text);
        assert_eq!(Expr::parse(&e.to_string(), 3).unwrap(), e);
    }
}

#[test]
fn hostile_expressions_are_errors() {
    let deep = "(".repeat(100_000);
    let nested = format!("{}x0{}", "(neg ".repeat(5000), ")".repeat(5000));
    for (text, needle) in [
        (deep.as_str(), "over the 65536-byte limit"),
        (nested.as_str(), "nested deeper than 256 levels"),
        ("(frobnicate x0)", "unknown op 'frobnicate'"),
        ("(add x0)", "'add' takes 2 operand(s), got 1"),
        ("(sqrt x0 x1)", "'sqrt' takes 1 operand(s), got more"),
        (
            "(add x0 x7)",
            "input x7 is out of range: the node has 2 input(s)",
        ),
        ("(add x0 x1) x1", "trailing text"),
        ("(add x0 inf)", "neither an input"),
        ("(add x0 1e39)", "not a finite float32"),
    ] {
        let e = Expr::parse(text, 2).unwrap_err().to_string();
        assert!(e.contains(needle), "{}: {e}", &text[..text.len().min(40)]);
    }
}

/// A graph with one FusedElementwise node `expression` over x, y f32 [3].
fn fused_model(expression: &str) -> Model {
    let mut b = GraphBuilder::new("handmade", 17);
    b.import(FUSELAB_DOMAIN, 1);
    let x = b.input("x", DType::F32, dims(&[3]));
    let y = b.input("y", DType::F32, dims(&[3]));
    let out = b.node(
        FUSELAB_DOMAIN,
        "FusedElementwise",
        &[Some(x), Some(y)],
        1,
        vec![attr::string("expression", expression)],
    );
    b.output(out[0], "out");
    b.build()
}

#[test]
fn a_malformed_expression_is_an_executor_error_naming_the_node() {
    let inputs: HashMap<String, Tensor> = ["x", "y"]
        .iter()
        .map(|n| (n.to_string(), common::seeded_f32(&[3], 1)))
        .collect();
    let ok = fused_model("(mul (add x0 x1) -0.5)");
    let y = Executor::new(&ok, &Limits::default())
        .unwrap()
        .run(&inputs)
        .unwrap();
    assert_eq!(y[0].1.shape(), &[3]);
    let deep = "(".repeat(100_000);
    for (text, needle) in [
        ("(add x0 x7)", "x7 is out of range"),
        ("(foo x0)", "unknown op 'foo'"),
        (deep.as_str(), "byte limit"),
    ] {
        let m = fused_model(text);
        let e = Executor::new(&m, &Limits::default())
            .unwrap()
            .run(&inputs)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("FusedElementwise node 'fusedelementwise_1'") && e.contains(needle),
            "{e}"
        );
    }
}
