//! Whole models with convolutions, GatherND and integer quantization on WebGPU, original and
//! optimized, against the reference backend.

use std::collections::BTreeMap;

use super::*;

/// Every transformer of `gpu_parity::ZOO` (convolutions in ViT and Whisper, GatherND in the
/// dynamo exports, int8 and int4 quantization, float16, and every attention, norm, rotary and
/// GELU fusion the default rules make of them), original and optimized, within the model's
/// bound of the reference, in fewer dispatches optimized. The browser runs the same table
/// (tests/wasm.rs).
pub fn zoo_models_match_the_reference(gpu: &Gpu) {
    let limits = Limits::default();
    let mut bad = Vec::new();
    for z in gpu_parity::ZOO {
        let m = fuselab::io::load_file(&common::repo().join(z.path()), &limits).unwrap();
        let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
        let inputs = zoo_inputs(&m, z.batch, z.seq);
        let (du, nu) = max_abs_diff(gpu, &m, &inputs);
        let (df, nf) = max_abs_diff(gpu, &fused, &inputs);
        println!(
            "{} {}x{}: max |diff| {du:e} original ({nu} dispatches), {df:e} optimized ({nf}); \
             bound {:e}",
            z.name(),
            z.batch,
            z.seq,
            z.bound
        );
        if du > z.bound || df > z.bound {
            bad.push(format!("{}: {du:e} / {df:e} over {:e}", z.name(), z.bound));
        }
        if nf >= nu {
            bad.push(format!(
                "{}: {nf} dispatches optimized, {nu} original",
                z.name()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `gpu_parity::resnet_block` (Conv + BatchNormalization + Relu, MaxPool, a residual Add +
/// Relu, HardSigmoid, GlobalAveragePool, Gemm), original and optimized (the batch norms folded,
/// FusedConv with Relu, with the residual Z, with HardSigmoid's parameters), within its bound.
pub fn resnet_block_matches_the_reference(gpu: &Gpu) {
    let m = gpu_parity::resnet_block();
    let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    assert_eq!(
        gpu_parity::fused_convs(&fused),
        BTreeMap::from([
            ("HardSigmoid".to_string(), 1),
            ("Relu".to_string(), 2),
            ("Relu+Z".to_string(), 1)
        ])
    );
    let ops = fuselab::report::op_histogram(&fused);
    assert_eq!(ops.get("BatchNormalization"), None, "{ops:?}");
    // BatchNormalization has no WebGPU kernel: the original runs on the reference backend only,
    // and the optimized graph's GPU run is held to it as well as to its own reference run.
    let limits = Limits::default();
    let bound = gpu_parity::RESNET_BLOCK_BOUND;
    for batch in [1, 2] {
        let inputs = zoo_inputs(&m, batch, 1);
        let want = Executor::new(&m, &limits).unwrap().run(&inputs).unwrap();
        let s = pollster::block_on(GpuSession::for_inputs(gpu, &fused, &inputs, &limits)).unwrap();
        let got = pollster::block_on(s.run(&inputs)).unwrap();
        let du = gpu_parity::max_abs_diff(&want, &got);
        let (df, nf) = max_abs_diff(gpu, &fused, &inputs);
        println!(
            "resnet_block batch {batch}: max |diff| {du:e} optimized on WebGPU vs original on \
             reference, {df:e} optimized ({nf} dispatches)"
        );
        assert!(du <= bound && df <= bound, "{du:e} / {df:e} over {bound:e}");
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
        assert!(d <= gpu_parity::TORCHVISION_BOUND, "{name}: {d:e}");
    }
}
