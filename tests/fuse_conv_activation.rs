//! Conv (+ residual Add) + activation → com.microsoft.FusedConv: op counts, parity, and what
//! must not fuse.

mod common;

use common::{counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model};
use fuselab::onnx::proto::AttributeProto;
use fuselab::{DType, Tensor};

const RULES: &[&str] = &["conv_activation"];

/// How the graph after the Conv looks.
#[derive(Clone, Copy, PartialEq)]
enum Tail {
    /// `act(Conv(x))`.
    Direct,
    /// `act(Conv(x) + z)`, z an input of the Conv output's shape.
    Residual,
    /// `act(Conv(x) + z)`, z [1, 4, 1, 1] (broadcast).
    Broadcast,
    /// `act(Conv(x))`, and Conv's output also read by a Neg.
    SharedConv,
    /// Sum(t, z): opset-9 ResNets' residual.
    Sum,
    /// Sum(t, z, z): three operands, no FusedConv form.
    Sum3,
}

/// x [batch, 3, 6, 6] → Conv(4 filters 3x3, pad 1, bias) → tail with `act` (attributes `attrs`,
/// extra inputs `bounds` as constants for Clip 11+), at `opset`, in `dtype`.
fn model(
    act: &str,
    attrs: Vec<AttributeProto>,
    bounds: &[f32],
    tail: Tail,
    dtype: DType,
    opset: i64,
) -> Model {
    let mut b = GraphBuilder::new("conv_act", opset);
    let shape = |c| vec![sym("batch"), Dim::Known(c), Dim::Known(6), Dim::Known(6)];
    let x = b.input("x", dtype, shape(3));
    let cast = |t: Tensor| match dtype {
        DType::F64 => Tensor::F64(t.as_f32().unwrap().mapv(f64::from)),
        _ => t,
    };
    let w = b.initializer("w", &cast(seeded_f32(&[4, 3, 3, 3], 1)));
    let bias = b.initializer("bias", &cast(seeded_f32(&[4], 2)));
    let t = b.op(
        "Conv",
        &[x, w, bias],
        vec![attr::ints("pads", &[1, 1, 1, 1])],
    );
    let s = match tail {
        Tail::Direct | Tail::SharedConv => t,
        Tail::Residual => {
            let z = b.input("z", dtype, shape(4));
            b.op("Add", &[z, t], vec![])
        }
        Tail::Sum | Tail::Sum3 => {
            let z = b.input("z", dtype, shape(4));
            let ins = if tail == Tail::Sum {
                vec![t, z]
            } else {
                vec![t, z, z]
            };
            b.op("Sum", &ins, vec![])
        }
        Tail::Broadcast => {
            let z = b.input(
                "z",
                dtype,
                vec![Dim::Known(1), Dim::Known(4), Dim::Known(1), Dim::Known(1)],
            );
            b.op("Add", &[t, z], vec![])
        }
    };
    let mut ins = vec![s];
    for (i, &v) in bounds.iter().enumerate() {
        ins.push(b.initializer(
            &format!("bound{i}"),
            &Tensor::F32(ndarray::arr0(v).into_dyn()),
        ));
    }
    let y = b.op(act, &ins, attrs);
    b.output(y, "y");
    if tail == Tail::SharedConv {
        let n = b.op("Neg", &[t], vec![]);
        b.output(n, "n");
    }
    b.build()
}

fn assert_rejected(m: &Model, needle: &str) {
    common::assert_rejected(m, RULES, needle)
}

/// Fuses `m` into one FusedConv with `activation` `act` and `params`, `inputs` inputs, and
/// checks parity at two batch sizes.
fn assert_fused(m: &Model, act: &str, params: &[f32], inputs: usize) {
    let (opt, _) = fuse(m, RULES);
    assert_eq!(ops(&opt), counts(&[("FusedConv", 1)]), "{act}");
    let id = opt.graph.node_ids().next().unwrap();
    let n = opt.graph.node(id);
    assert_eq!(n.domain, "com.microsoft");
    assert_eq!(n.attr_string("activation").as_deref(), Some(act));
    assert_eq!(
        n.attr_ints("pads"),
        Some(&[1, 1, 1, 1][..]),
        "Conv's attributes carried"
    );
    assert_eq!(
        n.attr_floats("activation_params").unwrap_or_default(),
        params,
        "{act}"
    );
    assert_eq!(n.inputs.len(), inputs, "{act}");
    for batch in [2, 1] {
        let p = parity(m, &opt, &[("batch", batch)]);
        assert!(
            p.max_abs_diff <= 1e-6,
            "{act} at batch {batch}: {}",
            p.max_abs_diff
        );
    }
}

#[test]
fn conv_and_each_activation_fuse_with_parity() {
    for act in ["Relu", "Tanh", "Sigmoid"] {
        assert_fused(
            &model(act, vec![], &[], Tail::Direct, DType::F32, 17),
            act,
            &[],
            3,
        );
    }
    let m = model(
        "LeakyRelu",
        vec![attr::float("alpha", 0.2)],
        &[],
        Tail::Direct,
        DType::F32,
        17,
    );
    assert_fused(&m, "LeakyRelu", &[0.2], 3);
    // HardSigmoid's defaults (alpha 0.2, beta 0.5) come from the ops layer when absent.
    let m = model(
        "HardSigmoid",
        vec![attr::float("alpha", 1.0 / 6.0)],
        &[],
        Tail::Direct,
        DType::F32,
        17,
    );
    assert_fused(&m, "HardSigmoid", &[1.0 / 6.0, 0.5], 3);
    // Clip: bounds as constant inputs (11+), one absent; as attributes before 11.
    let m = model("Clip", vec![], &[-0.5, 0.75], Tail::Direct, DType::F32, 17);
    assert_fused(&m, "Clip", &[-0.5, 0.75], 3);
    let m = model("Clip", vec![], &[0.0], Tail::Direct, DType::F32, 17);
    assert_fused(&m, "Clip", &[0.0, f32::MAX], 3);
    let m = model(
        "Clip",
        vec![attr::float("min", 0.0), attr::float("max", 6.0)],
        &[],
        Tail::Direct,
        DType::F32,
        10,
    );
    assert_fused(&m, "Clip", &[0.0, 6.0], 3);
}

#[test]
fn residual_add_becomes_z() {
    let m = model("Relu", vec![], &[], Tail::Residual, DType::F32, 17);
    assert_fused(&m, "Relu", &[], 4);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(trace.rewrites[0].removed.len(), 3, "Conv, Add and Relu");
    let n = opt.graph.node(opt.graph.node_ids().next().unwrap());
    assert_eq!(opt.graph.name(n.inputs[3].unwrap()), "z");
}

#[test]
fn a_two_input_sum_is_a_residual_add() {
    let m = model("Relu", vec![], &[], Tail::Sum, DType::F32, 9);
    assert_fused(&m, "Relu", &[], 4);
    // Three operands: FusedConv has one Z, and nothing else is tried.
    let m = model("Relu", vec![], &[], Tail::Sum3, DType::F32, 9);
    let (opt, trace) = fuse(&m, RULES);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rejected.is_empty(), "{:?}", trace.rejected);
}

#[test]
fn what_must_not_fuse() {
    // Conv's output is read elsewhere: the plain Conv must stay.
    let m = model("Relu", vec![], &[], Tail::SharedConv, DType::F32, 17);
    assert_rejected(&m, "has 2 consumers");
    // Z of another shape: FusedConv adds Z without broadcasting.
    let m = model("Relu", vec![], &[], Tail::Broadcast, DType::F32, 17);
    assert_rejected(&m, "does not broadcast");
    // onnxruntime's FusedConv is float32 only.
    let m = model("Relu", vec![], &[], Tail::Direct, DType::F64, 17);
    assert_rejected(&m, "f32 only");
    // HardSwish and Exp are not in onnxruntime's activation list: not even candidates.
    for act in ["HardSwish", "Exp"] {
        let m = model(act, vec![], &[], Tail::Direct, DType::F32, 17);
        let (opt, trace) = fuse(&m, RULES);
        assert_eq!(ops(&opt), ops(&m), "{act}");
        assert!(trace.rejected.is_empty(), "{act}");
    }
}

#[test]
fn clip_with_a_computed_bound_does_not_fuse() {
    let mut b = GraphBuilder::new("conv_clip", 17);
    let x = b.input(
        "x",
        DType::F32,
        vec![Dim::Known(1), Dim::Known(3), Dim::Known(4), Dim::Known(4)],
    );
    let hi = b.input("hi", DType::F32, vec![]);
    let w = b.initializer("w", &seeded_f32(&[2, 3, 1, 1], 3));
    let t = b.op("Conv", &[x, w], vec![]);
    let lo = b.initializer("lo", &Tensor::F32(ndarray::arr0(0f32).into_dyn()));
    let y = b.op("Clip", &[t, lo, hi], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), "Clip's bound 'hi' is not a constant");
}

#[test]
fn conv_output_added_to_itself_does_not_fuse() {
    let mut b = GraphBuilder::new("conv_twice", 17);
    let x = b.input(
        "x",
        DType::F32,
        vec![Dim::Known(1), Dim::Known(3), Dim::Known(4), Dim::Known(4)],
    );
    let w = b.initializer("w", &seeded_f32(&[2, 3, 1, 1], 3));
    let t = b.op("Conv", &[x, w], vec![]);
    let s = b.op("Add", &[t, t], vec![]);
    let y = b.op("Relu", &[s], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, RULES);
    // Z would be the very output the fusion removes (and the Conv output is read twice).
    assert_eq!(ops(&opt), ops(&m));
    let p = parity(&m, &opt, &[]);
    assert!(p.max_abs_diff == 0.0);
}

/// A Conv without a bias fuses into a FusedConv of two inputs (no empty third slot, which
/// onnxruntime-web's WebGPU Conv would read as a bias), and with a residual into X, W, "", Z.
#[test]
fn a_conv_without_bias_leaves_no_empty_trailing_slot() {
    for residual in [false, true] {
        let mut b = GraphBuilder::new("no_bias", 17);
        let shape = || vec![sym("batch"), Dim::Known(4), Dim::Known(6), Dim::Known(6)];
        let x = b.input("x", DType::F32, shape());
        let w = b.initializer("w", &seeded_f32(&[4, 4, 3, 3], 1));
        let t = b.op("Conv", &[x, w], vec![attr::ints("pads", &[1, 1, 1, 1])]);
        let s = match residual {
            true => b.op("Add", &[t, x], vec![]),
            false => t,
        };
        let y = b.op("Relu", &[s], vec![]);
        b.output(y, "y");
        let m = b.build();
        let (opt, _) = fuse(&m, RULES);
        assert_eq!(ops(&opt), counts(&[("FusedConv", 1)]));
        let n = opt.graph.node(opt.graph.node_ids().next().unwrap());
        let slots: Vec<bool> = n.inputs.iter().map(|v| v.is_some()).collect();
        let want = match residual {
            true => vec![true, true, false, true],
            false => vec![true, true],
        };
        assert_eq!(slots, want, "residual {residual}");
        assert!(parity(&m, &opt, &[("batch", 2)]).max_abs_diff <= 1e-6);
    }
}
