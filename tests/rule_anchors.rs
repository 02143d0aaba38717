//! The engine offers a rule only the nodes its `Rule::anchors` name. Anchors that miss an op the
//! rule rewrites (or rejects at) would make it silently stop firing there, so offering every
//! node instead must give the same trace: for each anchored rule alone (on the raw exports and
//! on what the other rules leave) and for the whole registry, on the bundled models.

mod common;

use std::collections::HashMap;

use fuselab::ir::{Model, NodeId};
use fuselab::passes::{rule, Anchors, Engine, Proposal, Rule, RuleKind, REGISTRY};
use fuselab::Limits;
use serde_json::Value;

fn load(path: &str) -> Model {
    fuselab::io::load_file(&common::repo().join(path), &Limits::default()).unwrap()
}

/// The bundled models, the transformers with their dims fixed (where the shape rules fire), and
/// the zoo's int8 BERT and 4-bit QDQ Llama.
fn models() -> Vec<(String, Model)> {
    let mut out = vec![("eyelike_add".to_string(), load("examples/eyelike_add.onnx"))];
    for stem in ["gpt2_tiny", "gpt2_tiny_op17", "bert_tiny", "bert_tiny_op17"] {
        let m = load(&format!("tests/models/{stem}.onnx"));
        let mut fixed = m.clone();
        let dims = HashMap::from([("batch".to_string(), 1), ("seq".to_string(), 8)]);
        fuselab::passes::specialize::fix_dims(&mut fixed, &dims).unwrap();
        out.push((stem.to_string(), m));
        out.push((format!("{stem} at 1x8"), fixed));
    }
    // Quantized zoo models, where dynamic_quantize_matmul and matmul_nbits fire (and, on the
    // Llama, rotary and multi_head_attention).
    for stem in ["bert_tiny_int8", "llama_gqa_tiny_int4_qdq"] {
        out.push((
            stem.to_string(),
            load(&format!("tests/models/zoo/{stem}.onnx")),
        ));
    }
    out
}

/// The trace (rewrites, rejections, iterations) as JSON and the resulting graph's op counts.
fn run(model: &Model, rules: Vec<Box<dyn Rule>>, offer_every_node: bool) -> (Value, Ops) {
    let mut m = model.clone();
    let mut engine = Engine::new(rules);
    engine.offer_every_node = offer_every_node;
    let trace = engine.run(&mut m).unwrap();
    (serde_json::to_value(&trace).unwrap(), common::ops(&m))
}

type Ops = Vec<(String, usize)>;

/// Where dispatching by anchors differs from offering every node, if anywhere.
fn dispatch_differs(model: &Model, rules: &dyn Fn() -> Vec<Box<dyn Rule>>) -> Option<String> {
    let (trace, ops) = run(model, rules(), false);
    let (every_trace, every_ops) = run(model, rules(), true);
    if trace == every_trace && ops == every_ops {
        return None;
    }
    let (a, b) = (pretty(&trace), pretty(&every_trace));
    let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
    let from = |t: &[String]| t.iter().skip(first).take(12).cloned().collect::<Vec<_>>();
    Some(format!(
        "dispatched: {ops:?}\nevery node: {every_ops:?}\ntraces differ from line {first}:\n{}\n---\n{}",
        from(&a).join("\n"),
        from(&b).join("\n")
    ))
}

fn pretty(v: &Value) -> Vec<String> {
    let text = serde_json::to_string_pretty(v).unwrap();
    text.lines().map(str::to_string).collect()
}

/// Rewrites by `rule` that removed a node of `op_type`.
fn rewrites_removing(trace: &Value, rule: &str, op_type: &str) -> usize {
    let events = trace["rewrites"].as_array().unwrap();
    events
        .iter()
        .filter(|e| e["rule"] == rule)
        .filter(|e| {
            let removed = e["removed"].as_array().unwrap();
            removed.iter().any(|n| n["op_type"] == op_type)
        })
        .count()
}

fn registry() -> Vec<Box<dyn Rule>> {
    REGISTRY
        .iter()
        .map(|&r| Box::new(r) as Box<dyn Rule>)
        .collect()
}

fn anchored() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|r| r.anchors() != Anchors::Any)
        .map(|r| r.name())
        .collect()
}

#[test]
fn anchors_miss_nothing_a_rule_fires_or_rejects_at() {
    let anchored = anchored();
    assert!(anchored.len() >= 10, "{anchored:?}");
    for (name, m) in models() {
        if let Some(d) = dispatch_differs(&m, &registry) {
            panic!("{name}, every rule: {d}");
        }
        for &r in &anchored {
            let alone = || vec![Box::new(rule(r).unwrap()) as Box<dyn Rule>];
            if let Some(d) = dispatch_differs(&m, &alone) {
                panic!("{name}, {r} alone: {d}");
            }
            // What the other rules leave: the fused ops a rule works on (an MS Gelu for
            // bias_gelu) exist only there.
            let mut rest = m.clone();
            let others: Vec<Box<dyn Rule>> =
                registry().into_iter().filter(|o| o.name() != r).collect();
            Engine::new(others).run(&mut rest).unwrap();
            if let Some(d) = dispatch_differs(&rest, &alone) {
                panic!("{name} after the other rules, {r} alone: {d}");
            }
        }
    }
}

/// A registered rule with narrower anchors than it declares.
struct Narrowed(&'static str, Anchors);

impl Rule for Narrowed {
    fn name(&self) -> &'static str {
        self.0
    }
    fn kind(&self) -> RuleKind {
        rule(self.0).unwrap().kind()
    }
    fn anchors(&self) -> Anchors {
        self.1.clone()
    }
    fn propose(&self, model: &Model, id: NodeId) -> Proposal {
        rule(self.0).unwrap().propose(model, id)
    }
}

#[test]
fn the_check_catches_anchors_that_miss_an_op() {
    // fast_gelu also absorbs a bias Add into a FastGelu it made (twice in gpt2_tiny); anchored
    // on Tanh alone it would no longer.
    let narrowed = || -> Vec<Box<dyn Rule>> {
        REGISTRY
            .iter()
            .map(|&r| match r.name() {
                "fast_gelu" => {
                    Box::new(Narrowed("fast_gelu", Anchors::onnx(&["Tanh"]))) as Box<dyn Rule>
                }
                _ => Box::new(r),
            })
            .collect()
    };
    let m = load("tests/models/gpt2_tiny.onnx");
    assert_eq!(dispatch_differs(&m, &registry), None);
    assert!(dispatch_differs(&m, &narrowed).is_some());
    let (trace, _) = run(&m, narrowed(), false);
    let (every_trace, _) = run(&m, narrowed(), true);
    assert_eq!(rewrites_removing(&trace, "fast_gelu", "FastGelu"), 0);
    assert_eq!(rewrites_removing(&every_trace, "fast_gelu", "FastGelu"), 2);
}
