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

/// Nodes of `op` whose input `slot` is given.
fn with_input(m: &Model, op: &str, slot: usize) -> usize {
    let g = &m.graph;
    g.node_ids()
        .map(|id| g.node(id))
        .filter(|n| n.op_type == op && n.inputs.get(slot).is_some_and(|v| v.is_some()))
        .count()
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

/// T5's encoder adds a position bias and a padding mask: for onnxruntime's CPU EP that is one
/// MultiHeadAttention with attention_bias and key_padding_mask; onnxruntime-web's WebGPU
/// MultiHeadAttention fails at run time on a key_padding_mask, so `ort-webgpu` leaves it unfused.
#[test]
fn ort_webgpu_refuses_a_key_padding_mask() {
    let kpm = |m: &Model| with_input(m, "MultiHeadAttention", 4);
    let (m, cpu) = run("tests/models/zoo/t5_encoder_tiny.onnx", Target::OrtCpu, &[]);
    assert_eq!(fused(&cpu).get("MultiHeadAttention"), Some(&2));
    assert_eq!(kpm(&m), 2);
    let (m, web) = run(
        "tests/models/zoo/t5_encoder_tiny.onnx",
        Target::OrtWebgpu,
        &[],
    );
    assert_eq!(fused(&web).get("MultiHeadAttention"), None);
    assert_eq!(kpm(&m), 0);
    assert_eq!(rejected_for_target(&web, "multi_head_attention"), 2);
    // The norms still fuse.
    assert_eq!(
        fused(&web).get("SkipSimplifiedLayerNormalization"),
        fused(&cpu).get("SkipSimplifiedLayerNormalization")
    );
}

/// onnxruntime-web's WebGPU FusedConv reads X, W and B only: a residual Add + Relu after a Conv
/// is FusedConv with Z for onnxruntime's CPU EP and stays apart for `ort-webgpu`, while a plain
/// Conv + Relu fuses for both.
#[test]
fn ort_webgpu_refuses_a_fused_conv_with_a_residual() {
    use fuselab::builder::{sym, GraphBuilder};
    use fuselab::ir::attr;
    use fuselab::ir::types::Dim;
    use fuselab::DType;
    let mut b = GraphBuilder::new("residual", 17);
    let shape = |c| vec![sym("batch"), Dim::Known(c), Dim::Known(6), Dim::Known(6)];
    let x = b.input("x", DType::F32, shape(4));
    let pads = || vec![attr::ints("pads", &[1, 1, 1, 1])];
    let w1 = b.initializer("w1", &common::seeded_f32(&[4, 4, 3, 3], 1));
    let c1 = b.op("Conv", &[x, w1], pads());
    let r1 = b.op("Relu", &[c1], vec![]);
    let w2 = b.initializer("w2", &common::seeded_f32(&[4, 4, 3, 3], 2));
    let c2 = b.op("Conv", &[r1, w2], pads());
    let s = b.op("Add", &[c2, x], vec![]);
    let y = b.op("Relu", &[s], vec![]);
    b.output(y, "y");
    let m = b.build();
    let fuse = |target| {
        let opts = OptimizeOptions {
            target: Some(target),
            ..Default::default()
        };
        let (opt, rep) = optimize(&m, &opts, &|| 0.0).unwrap();
        assert!(rep.parity.as_ref().unwrap().ok);
        let with_z = with_input(&opt, "FusedConv", 3);
        (fused(&rep).get("FusedConv").copied(), with_z, rep)
    };
    let (n, z, _) = fuse(Target::OrtCpu);
    assert_eq!((n, z), (Some(2), 1));
    let (n, z, web) = fuse(Target::OrtWebgpu);
    assert_eq!((n, z), (Some(1), 0));
    assert_eq!(rejected_for_target(&web, "conv_activation"), 1);
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
