//! BatchNormalization folded into the Conv before it: op counts, parity, and what must not fold.

mod common;

use common::{counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model};
use fuselab::Tensor;

const RULES: &[&str] = &["conv_batchnorm"];

/// How the model differs from the plain `BN(Conv(x, w, b))`.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    NoConvBias,
    /// The BatchNormalization in training mode (training_mode = 1, with running outputs).
    Training,
    /// W a graph input (not a constant).
    WeightInput,
    /// The Conv's output also a graph output.
    ConvOutput,
}

fn model(v: Variant) -> Model {
    let mut b = GraphBuilder::new("conv_bn", 15);
    let x = b.input(
        "x",
        fuselab::DType::F32,
        vec![sym("batch"), Dim::Known(3), Dim::Known(5), Dim::Known(5)],
    );
    let w = if v == Variant::WeightInput {
        b.input(
            "w",
            fuselab::DType::F32,
            vec![Dim::Known(4), Dim::Known(3), Dim::Known(3), Dim::Known(3)],
        )
    } else {
        b.initializer("w", &seeded_f32(&[4, 3, 3, 3], 1))
    };
    let mut ins = vec![x, w];
    if v != Variant::NoConvBias {
        ins.push(b.initializer("b", &seeded_f32(&[4], 2)));
    }
    let t = b.op(
        "Conv",
        &ins,
        vec![
            attr::ints("pads", &[1, 1, 1, 1]),
            attr::ints("strides", &[2, 2]),
        ],
    );
    // Positive variances, scales away from 1.
    let var = seeded_f32(&[4], 3)
        .as_f32()
        .unwrap()
        .mapv(|v| v.abs() + 0.5);
    let stats = [
        b.initializer("scale", &seeded_f32(&[4], 4)),
        b.initializer("bias", &seeded_f32(&[4], 5)),
        b.initializer("mean", &seeded_f32(&[4], 6)),
        b.initializer("var", &Tensor::F32(var)),
    ];
    let mut bn_ins = vec![t];
    bn_ins.extend(stats);
    let mut attrs = vec![attr::float("epsilon", 1e-3)];
    if v == Variant::Training {
        attrs.push(attr::int("training_mode", 1));
    }
    let y = b.op("BatchNormalization", &bn_ins, attrs);
    b.output(y, "y");
    if v == Variant::ConvOutput {
        b.output(t, "t");
    }
    b.build()
}

#[test]
fn batchnorm_folds_into_the_conv_with_parity() {
    for v in [Variant::Plain, Variant::NoConvBias] {
        let m = model(v);
        let (opt, trace) = fuse(&m, RULES);
        assert_eq!(ops(&opt), counts(&[("Conv", 1)]));
        assert_eq!(trace.rewrites[0].removed.len(), 2);
        let n = opt.graph.node(opt.graph.node_ids().next().unwrap());
        assert_eq!(
            n.attr_ints("strides"),
            Some(&[2, 2][..]),
            "Conv's attributes kept"
        );
        assert_eq!(n.inputs.len(), 3, "a bias is always written");
        for batch in [2, 1] {
            let p = parity(&m, &opt, &[("batch", batch)]);
            assert!(p.max_abs_diff <= 1e-5, "batch {batch}: {}", p.max_abs_diff);
        }
    }
}

#[test]
fn what_must_not_fold() {
    let reject = |v, needle: &str| common::assert_rejected(&model(v), RULES, needle);
    // Training mode normalizes by the batch's own statistics: the constants are not the math.
    reject(Variant::Training, "training mode");
    // A W that is a graph input can be fed anything at run time.
    reject(Variant::WeightInput, "is not a float32 constant");
    reject(Variant::ConvOutput, "is a graph output");
}
