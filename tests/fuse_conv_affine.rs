//! A per-channel Mul/Add after a Conv or a BatchNormalization folded into its parameters
//! (`conv_affine`), and IR 3 models, whose weights are listed as graph inputs, treated as
//! onnxruntime treats them: as constants. Op counts, parity, and what must not fold.

mod common;

use common::{counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::Tensor;

const RULES: &[&str] = &["conv_affine"];

fn x_dims() -> Vec<Dim> {
    vec![sym("batch"), Dim::Known(3), Dim::Known(5), Dim::Known(5)]
}

/// How the model differs from `Relu(Add(Mul(Conv(x, w, b), c), d))`.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    /// Mul(c, t) and Add(d, t): the constant first.
    Swapped,
    NoConvBias,
    /// c a rank-0 scalar.
    ScalarScale,
    /// c of shape [1, 1, 5]: varies along the width.
    AlongWidth,
    /// c of shape [1, 1, 4, 1, 1]: broadcasts the output to rank 5.
    MoreDims,
    /// c a graph input.
    ScaleInput,
    /// The Conv's output also a graph output.
    ConvOutput,
}

fn conv(b: &mut GraphBuilder, x: ValueId, bias: bool) -> ValueId {
    let mut ins = vec![x, b.initializer("w", &seeded_f32(&[4, 3, 3, 3], 1))];
    if bias {
        ins.push(b.initializer("b", &seeded_f32(&[4], 2)));
    }
    b.op("Conv", &ins, vec![attr::ints("pads", &[1, 1, 1, 1])])
}

fn model(v: Variant) -> Model {
    let mut b = GraphBuilder::new("conv_affine", 15);
    let x = b.input("x", fuselab::DType::F32, x_dims());
    let t = conv(&mut b, x, v != Variant::NoConvBias);
    let c = match v {
        Variant::ScalarScale => b.initializer("c", &seeded_f32(&[], 3)),
        Variant::AlongWidth => b.initializer("c", &seeded_f32(&[1, 1, 5], 3)),
        Variant::MoreDims => b.initializer("c", &seeded_f32(&[1, 1, 4, 1, 1], 3)),
        Variant::ScaleInput => b.input(
            "c",
            fuselab::DType::F32,
            vec![Dim::Known(4), Dim::Known(1), Dim::Known(1)],
        ),
        _ => b.initializer("c", &seeded_f32(&[4, 1, 1], 3)),
    };
    let d = b.initializer("d", &seeded_f32(&[1, 4, 1, 1], 4));
    let y = if v == Variant::Swapped {
        let s = b.op("Mul", &[c, t], vec![]);
        b.op("Add", &[d, s], vec![])
    } else {
        let s = b.op("Mul", &[t, c], vec![]);
        b.op("Add", &[s, d], vec![])
    };
    let r = b.op("Relu", &[y], vec![]);
    b.output(r, "y");
    if v == Variant::ConvOutput {
        b.output(t, "t");
    }
    b.build()
}

fn assert_parity(m: &Model, opt: &Model) {
    for batch in [2, 1] {
        let p = parity(m, opt, &[("batch", batch)]);
        assert!(p.max_abs_diff <= 1e-5, "batch {batch}: {}", p.max_abs_diff);
    }
}

#[test]
fn scale_and_shift_fold_into_the_conv_with_parity() {
    for v in [
        Variant::Plain,
        Variant::Swapped,
        Variant::NoConvBias,
        Variant::ScalarScale,
    ] {
        let m = model(v);
        let (opt, trace) = fuse(&m, RULES);
        assert_eq!(ops(&opt), counts(&[("Conv", 1), ("Relu", 1)]));
        assert_eq!(trace.rewrites.len(), 2, "the Mul, then the Add");
        assert_parity(&m, &opt);
        // With the other CNN rules the Relu joins too: one node.
        let (all, _) = fuse(&m, &["conv_affine", "conv_activation"]);
        assert_eq!(ops(&all), counts(&[("FusedConv", 1)]));
        assert_parity(&m, &all);
    }
}

#[test]
fn what_must_not_fold() {
    let reject = |v, needle: &str| common::assert_rejected(&model(v), RULES, needle);
    // A scale that differs along the width is not a change of the Conv's weights.
    reject(Variant::AlongWidth, "not one value per channel");
    // Folding would lose the broadcast to rank 5.
    reject(Variant::MoreDims, "more dimensions");
    reject(Variant::ConvOutput, "is a graph output");
    // A scale computed at run time (here a graph input; in a ResNet or MobileNet the residual
    // Add's shortcut) is not this pattern: nothing folds and nothing is reported.
    let m = model(Variant::ScaleInput);
    let (opt, trace) = fuse(&m, RULES);
    assert!(
        trace.rewrites.is_empty() && trace.rejected.is_empty(),
        "{trace:?}"
    );
    assert_eq!(ops(&opt), ops(&m));
}

/// `Add(Mul(BatchNormalization(t), c), d)` over `m` channels, every parameter seeded and passed
/// through `ty` (the element type under test).
fn norm_scale_shift(
    b: &mut GraphBuilder,
    t: ValueId,
    m: usize,
    ty: fn(Tensor) -> Tensor,
) -> ValueId {
    let var = seeded_f32(&[m], 5)
        .as_f32()
        .unwrap()
        .mapv(|v| v.abs() + 0.5);
    let ins = [
        t,
        b.initializer("scale", &ty(seeded_f32(&[m], 6))),
        b.initializer("bias", &ty(seeded_f32(&[m], 7))),
        b.initializer("mean", &ty(seeded_f32(&[m], 8))),
        b.initializer("var", &ty(Tensor::F32(var))),
    ];
    let n = b.op(
        "BatchNormalization",
        &ins,
        vec![attr::float("epsilon", 1e-3)],
    );
    let c = b.initializer("c", &ty(seeded_f32(&[m, 1, 1], 9)));
    let s = b.op("Mul", &[n, c], vec![]);
    let d = b.initializer("d", &ty(seeded_f32(&[m, 1, 1], 10)));
    b.op("Add", &[s, d], vec![])
}

/// BatchNormalization of the input (no Conv to take it) then Mul and Add: one
/// BatchNormalization with scale·c and B·c + d.
fn batchnorm_model() -> Model {
    let mut b = GraphBuilder::new("bn_affine", 15);
    let x = b.input("x", fuselab::DType::F32, x_dims());
    let y = norm_scale_shift(&mut b, x, 3, |t| t);
    b.output(y, "y");
    b.build()
}

#[test]
fn scale_and_shift_fold_into_a_batchnorm() {
    let m = batchnorm_model();
    let (opt, _) = fuse(&m, RULES);
    assert_eq!(ops(&opt), counts(&[("BatchNormalization", 1)]));
    assert_parity(&m, &opt);
}

/// Conv → BatchNormalization → Mul → Add → Relu with every weight also a graph input.
fn caffe2_style(ir_version: i64) -> Model {
    let mut b = GraphBuilder::new("ir3", 9);
    let x = b.input("x", fuselab::DType::F32, x_dims());
    let t = conv(&mut b, x, true);
    let y = norm_scale_shift(&mut b, t, 4, |t| t);
    let r = b.op("Relu", &[y], vec![]);
    b.output(r, "y");
    let mut m = b.build();
    let weights: Vec<ValueId> = m.graph.initializers().map(|(v, _)| v).collect();
    m.graph.inputs.extend(weights);
    m.proto.ir_version = ir_version;
    m
}

fn input_names(m: &Model) -> Vec<String> {
    let mut v: Vec<String> = m
        .graph
        .inputs
        .iter()
        .map(|&i| m.graph.name(i).to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn ir3_weights_listed_as_inputs_are_constants_and_stay_listed_on_save() {
    let bytes = fuselab::io::to_bytes(&caffe2_style(3)).unwrap();
    let m = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    assert_eq!(input_names(&m), ["x"], "a caller feeds only x");
    let (opt, _) = fuse(&m, &[]);
    assert_eq!(ops(&opt), counts(&[("FusedConv", 1)]));
    assert_parity(&m, &opt);

    // Saved as IR 3 again: every initializer (the folded ones among them) is an input too.
    let proto = fuselab::io::to_model_proto(&opt).unwrap();
    assert_eq!(proto.ir_version, 3);
    let g = proto.graph.as_ref().unwrap();
    let mut listed: Vec<&str> = g.input.iter().map(|i| i.name.as_str()).collect();
    let mut want: Vec<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    want.push("x");
    listed.sort();
    want.sort();
    assert_eq!(listed, want);
    assert_eq!(g.input[0].name, "x", "the real input first");
    // And the unchanged model keeps its declared inputs.
    let again = fuselab::io::to_model_proto(&m).unwrap();
    assert_eq!(again.graph.unwrap().input.len(), 1 + 8);
}

#[test]
fn from_ir4_on_a_weight_listed_as_an_input_may_be_fed_so_nothing_folds() {
    let bytes = fuselab::io::to_bytes(&caffe2_style(4)).unwrap();
    let m = fuselab::io::load_bytes(&bytes, &Default::default()).unwrap();
    assert_eq!(input_names(&m).len(), 9);
    let (opt, trace) = fuse(&m, &[]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(
        trace
            .rejected
            .iter()
            .any(|r| r.reason.contains("is not a float32 constant")),
        "{:?}",
        trace.rejected
    );
}

/// The Caffe2 chain in float16 (weights, statistics and scale/shift all float16, as
/// onnxruntime's fp16 converter leaves them): the norm and the Mul/Add fold into one float16
/// Conv (values computed in float64, rounded once); the Relu stays, since FusedConv is float32
/// only in onnxruntime.
#[test]
fn a_float16_chain_folds_into_a_float16_conv() {
    let mut b = GraphBuilder::new("f16", 15);
    let x = b.input("x", fuselab::DType::F16, x_dims());
    let h: fn(Tensor) -> Tensor = |t| Tensor::F16(t.as_f32().unwrap().mapv(half::f16::from_f32));
    let w = b.initializer("w", &h(seeded_f32(&[4, 3, 3, 3], 1)));
    let bias = b.initializer("b", &h(seeded_f32(&[4], 2)));
    let t = b.op(
        "Conv",
        &[x, w, bias],
        vec![attr::ints("pads", &[1, 1, 1, 1])],
    );
    let y = norm_scale_shift(&mut b, t, 4, h);
    let r = b.op("Relu", &[y], vec![]);
    b.output(r, "y");
    let m16 = b.build();
    let (opt, _) = fuse(&m16, &[]);
    assert_eq!(ops(&opt), counts(&[("Conv", 1), ("Relu", 1)]));
    for (_, t) in opt.graph.initializers() {
        assert_eq!(t.data_type, 10, "{} stays float16", t.name);
    }
    for batch in [2, 1] {
        let p = parity(&m16, &opt, &[("batch", batch)]);
        assert!(p.max_abs_diff <= 2e-2, "batch {batch}: {}", p.max_abs_diff);
    }
}
