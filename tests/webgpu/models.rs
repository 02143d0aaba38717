//! Whole models with convolutions, GatherND and integer quantization on WebGPU, original and
//! optimized, against the reference backend.

use super::*;

/// ViT (its patch-embedding Conv), the Whisper encoder (two 1-D Convs, stride 2 and padding),
/// the dynamo GPT-2 and Llama (GatherND), original and optimized, within 1e-4 of the reference.
pub fn conv_and_gather_nd_models_match_the_reference(gpu: &Gpu) {
    for (name, batch, seq) in [
        ("vit_tiny", 2, 1),
        ("whisper_encoder_tiny", 1, 1),
        ("gpt2_tiny_dynamo", 2, 8),
        ("llama_gqa_tiny_dynamo", 1, 13),
    ] {
        let (m, fused) = zoo_pair(name);
        let inputs = zoo_inputs(&m, batch, seq);
        let (du, nu) = max_abs_diff(gpu, &m, &inputs);
        let (df, nf) = max_abs_diff(gpu, &fused, &inputs);
        println!("{name}: max |diff| {du:e} original ({nu} dispatches), {df:e} optimized ({nf})");
        assert!(
            du <= 1e-4 && df <= 1e-4,
            "{name}: {du:e} / {df:e} over 1e-4"
        );
        assert!(nf < nu, "{name}: {nf} dispatches optimized, {nu} original");
    }
}

/// torchvision's MobileNetV3-small and ResNet-18 at 224x224, batch 1, optimized (FusedConv
/// with Z and HardSigmoid/Relu, depthwise and strided Convs, MaxPool, GlobalAveragePool,
/// Gemm): logits within 1e-3 of the reference. The models are fetched (tests/data); without
/// them the case says so and checks nothing.
pub fn torchvision_cnns_match_the_reference(gpu: &Gpu) {
    for name in ["mobilenet_v3_small", "resnet18"] {
        let path = common::repo().join(format!("tests/data/models/torchvision/{name}.onnx"));
        if !path.exists() {
            println!("{name}: {} is not fetched; not checked", path.display());
            continue;
        }
        let m = fuselab::io::load_file(&path, &Limits::default()).unwrap();
        let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
        let fused_convs = fused
            .graph
            .node_ids()
            .filter(|&id| fused.graph.node(id).op_type == "FusedConv")
            .count();
        assert!(fused_convs > 0, "{name}: no FusedConv after optimize");
        let inputs = zoo_inputs(&m, 1, 1);
        let (d, n) = max_abs_diff(gpu, &fused, &inputs);
        println!("{name} optimized: max |diff| {d:e}, {n} dispatches, {fused_convs} FusedConv");
        assert!(d <= 1e-3, "{name}: {d:e}");
    }
}
