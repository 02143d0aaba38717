//! `optimize --target`: each runtime gets only fused ops it runs where it should. onnxruntime-web's
//! WebGPU EP runs an Attention with a mask_index, EmbedLayerNormalization, FusedGemm and
//! DynamicQuantizeMatMul on the CPU (its placement log; tests/js/ort_web.test.mjs checks the saved
//! models there), so `ort-webgpu` refuses them and the attention of a masked model becomes a
//! MultiHeadAttention; a maskless one (ViT) keeps its Attention.

mod common;

use std::collections::BTreeMap;

use fuselab::ir::Model;
use fuselab::passes::target::Target;
use fuselab::pipeline::{optimize, OptimizeOptions};
use fuselab::report::OptimizeReport;
use fuselab::Limits;

fn load(rel: &str) -> Model {
    fuselab::io::load::load_file(&common::repo().join(rel), &Limits::default()).unwrap()
}

fn run(rel: &str, target: Target, rules: &[&str]) -> (Model, OptimizeReport) {
    let opts = OptimizeOptions {
        target: Some(target),
        rules: rules.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let (m, rep) = optimize(&load(rel), &opts, &|| 0.0).unwrap();
    let p = rep.parity.as_ref().unwrap();
    assert!(p.ok, "{rel} for {target:?}: parity {}", p.max_abs_diff);
    assert_eq!(rep.target, Some(target));
    (m, rep)
}

fn fused(rep: &OptimizeReport) -> BTreeMap<&str, usize> {
    rep.fusions.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

fn rejected_for_target(rep: &OptimizeReport, rule: &str) -> usize {
    rep.rejected
        .iter()
        .filter(|r| r.rule == rule && r.reason.starts_with("target ort-webgpu:"))
        .count()
}

#[test]
fn ort_webgpu_takes_masked_attention_as_multi_head_attention() {
    let (_, cpu) = run("tests/models/gpt2_tiny.onnx", Target::OrtCpu, &[]);
    assert_eq!(fused(&cpu).get("Attention"), Some(&2));
    let (m, web) = run("tests/models/gpt2_tiny.onnx", Target::OrtWebgpu, &[]);
    let f = fused(&web);
    assert_eq!(f.get("Attention"), None, "{f:?}");
    assert_eq!(f.get("MultiHeadAttention"), Some(&2), "{f:?}");
    assert_eq!(f.get("SkipLayerNormalization"), Some(&5), "{f:?}");
    assert_eq!(f.get("FastGelu"), Some(&2), "{f:?}");
    let ops = common::ops(&m);
    assert!(ops.iter().all(|(op, _)| op != "Attention"), "{ops:?}");
}

#[test]
fn ort_webgpu_keeps_an_attention_without_mask() {
    let (_, web) = run("tests/models/zoo/vit_tiny.onnx", Target::OrtWebgpu, &[]);
    let f = fused(&web);
    assert_eq!(f.get("Attention"), Some(&2), "{f:?}");
    assert_eq!(rejected_for_target(&web, "attention"), 0);
}

#[test]
fn ort_webgpu_refuses_ops_without_a_webgpu_kernel() {
    let (_, cpu) = run("tests/models/bert_tiny.onnx", Target::OrtCpu, &[]);
    let f = fused(&cpu);
    assert_eq!(f.get("EmbedLayerNormalization"), Some(&1), "{f:?}");
    assert_eq!(f.get("FusedGemm"), Some(&1), "{f:?}");
    let (m, web) = run("tests/models/bert_tiny.onnx", Target::OrtWebgpu, &[]);
    let ops = common::ops(&m);
    for op in ["EmbedLayerNormalization", "FusedGemm", "Attention"] {
        assert!(ops.iter().all(|(o, _)| o != op), "{op} in {ops:?}");
    }
    assert_eq!(rejected_for_target(&web, "gemm_activation"), 1);
    // The embedding sum's norm becomes a SkipLayerNormalization instead (the position rows are
    // provably the input's length), and the masked attention a MultiHeadAttention.
    let f = fused(&web);
    assert_eq!(f.get("SkipLayerNormalization"), Some(&5), "{f:?}");
    assert_eq!(f.get("MultiHeadAttention"), Some(&2), "{f:?}");

    let (_, q) = run(
        "tests/models/zoo/bert_tiny_int8.onnx",
        Target::OrtWebgpu,
        &[],
    );
    assert_eq!(fused(&q).get("DynamicQuantizeMatMul"), None);
    assert_eq!(rejected_for_target(&q, "dynamic_quantize_matmul"), 13);
}

#[test]
fn ort_webgpu_changes_nothing_its_ep_runs() {
    // Llama's fusions are all WebGPU kernels: the same graph for both onnxruntime targets.
    let (a, cpu) = run("tests/models/zoo/llama_gqa_tiny.onnx", Target::OrtCpu, &[]);
    let (b, web) = run(
        "tests/models/zoo/llama_gqa_tiny.onnx",
        Target::OrtWebgpu,
        &[],
    );
    assert_eq!(cpu.fusions, web.fusions);
    assert_eq!(common::ops(&a), common::ops(&b));
    assert!(web
        .rejected
        .iter()
        .all(|r| !r.reason.starts_with("target ort-webgpu")));
}

#[test]
fn only_the_fuselab_target_makes_ai_fuselab_ops() {
    let (_, rep) = run("tests/models/zoo/phi_tiny.onnx", Target::OrtCpu, &[]);
    assert_eq!(fused(&rep).get("FusedElementwise"), None);
    let (m, rep) = run("tests/models/zoo/phi_tiny.onnx", Target::Fuselab, &[]);
    assert!(
        fused(&rep).get("FusedElementwise").is_some_and(|&n| n > 0),
        "{:?}",
        rep.fusions
    );
    assert!(m
        .graph
        .node_ids()
        .any(|id| m.graph.node(id).domain == "ai.fuselab"));
    // Named explicitly for an onnxruntime target, the lowering is refused with the reason.
    let (m, rep) = run(
        "tests/models/zoo/phi_tiny.onnx",
        Target::OrtCpu,
        &["const_fold", "fused_elementwise"],
    );
    assert!(m
        .graph
        .node_ids()
        .all(|id| m.graph.node(id).domain != "ai.fuselab"));
    assert!(rep.rejected.iter().any(|r| r.rule == "fused_elementwise"
        && r.reason
            == "target ort-cpu: FusedElementwise is an ai.fuselab op that only fuselab runs"));
}
