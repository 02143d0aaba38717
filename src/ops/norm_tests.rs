//! Unit tests of norm.rs: values worked by hand from the spec's formulas.

use super::super::common::test_util::*;
use super::super::lanes::run_node;
use super::*;
use crate::builder::{dims, GraphBuilder};
use crate::ir::{attr, ValueId};
use crate::onnx::proto::AttributeProto;

/// A node naming `n_out` outputs.
fn node_out(op: &str, attrs: Vec<AttributeProto>, n_out: usize) -> Node {
    let mut n = node(op, attrs);
    n.outputs = (0..n_out).map(|i| Some(ValueId(i as u32))).collect();
    n
}

fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> KernelResult {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    run_node(n, opset, &ins)
}

fn one(n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
    run(n, opset, ins).map(|mut v| v.remove(0))
}

fn eps0() -> AttributeProto {
    attr::float("epsilon", 0.0)
}

#[test]
fn batch_norm_inference() {
    // Channel 0 [1, 2], channel 1 [3, 4]; var 0.25 -> divide by 0.5.
    let x = f32s(&[1, 2, 1, 2], &[1., 2., 3., 4.]);
    let (scale, b) = (f32s(&[2], &[1., 2.]), f32s(&[2], &[0., 1.]));
    let (mean, var) = (f32s(&[2], &[1.5, 3.5]), f32s(&[2], &[0.25, 0.25]));
    let n = node("BatchNormalization", vec![eps0()]);
    for opset in [7, 9, 14, 15] {
        let y = one(&n, opset, &[&x, &scale, &b, &mean, &var]).unwrap();
        assert_eq!(y, f32s(&[1, 2, 1, 2], &[-1., 1., -1., 3.]), "opset {opset}");
    }
    // The default epsilon 1e-5: 0.5 / sqrt(0.25 + 1e-5).
    let y = one(
        &node("BatchNormalization", vec![]),
        15,
        &[&x, &scale, &b, &mean, &var],
    );
    let k = 0.5 / (0.25f64 + 1e-5).sqrt();
    let want = [-k, k, 1. - 2. * k, 1. + 2. * k].map(|v| v as f32);
    assert_close(&y.unwrap(), &f32s(&[1, 2, 1, 2], &want), 1e-6);
    // A 1-D X is [N] with one channel; parameters may be float64 with float32 X.
    let x1 = f32s(&[3], &[1., 2., 3.]);
    let p = |v: f64| f64s(&[1], &[v]);
    let y = one(&n, 15, &[&x1, &p(2.), &p(0.), &p(2.), &p(1.)]).unwrap();
    assert_eq!(y, f32s(&[3], &[-2., 0., 2.]));
    // spatial = 0 (before 9): one parameter per (channel, position).
    let x = f64s(&[1, 2, 2], &[1., 2., 3., 4.]);
    let q = |v: [f64; 4]| f64s(&[2, 2], &v);
    let ns = node("BatchNormalization", vec![eps0(), attr::int("spatial", 0)]);
    let ins = [
        &x,
        &q([1.; 4]),
        &q([0.; 4]),
        &q([0., 1., 2., 3.]),
        &q([1., 4., 1., 0.25]),
    ];
    let y = one(&ns, 7, &ins).unwrap();
    assert_eq!(y, f64s(&[1, 2, 2], &[1., 0.5, 1., 2.]));
    let e = one(&n, 7, &ins).unwrap_err();
    assert_eq!(
        e,
        "BatchNormalization: scale of shape [2, 2] cannot be broadcast to [2]"
    );
}

#[test]
fn batch_norm_training() {
    // Channel 0 [1, 3]: mean 2, var 1; channel 1 [10, 30]: mean 20, var 100.
    let x = f32s(&[2, 2], &[1., 10., 3., 30.]);
    let (ones, zeros) = (f32s(&[2], &[1., 1.]), f32s(&[2], &[0., 0.]));
    let ins = [&x, &ones, &zeros, &zeros, &ones];
    let want_y = f32s(&[2, 2], &[-1., -1., 1., 1.]);
    let n = node_out(
        "BatchNormalization",
        vec![eps0(), attr::int("training_mode", 1)],
        3,
    );
    let y = run(&n, 15, &ins).unwrap();
    assert_eq!(y[0], want_y);
    // running = input * 0.9 + batch * 0.1
    assert_close(&y[1], &f32s(&[2], &[0.2, 2.0]), 1e-6);
    assert_close(&y[2], &f32s(&[2], &[1.0, 10.9]), 1e-5);
    // Training mode naming only Y still normalizes with the batch's statistics.
    let n1 = node_out(
        "BatchNormalization",
        vec![eps0(), attr::int("training_mode", 1)],
        1,
    );
    assert_eq!(run(&n1, 14, &ins).unwrap(), vec![want_y.clone()]);
    // Before 14: training mode is naming more outputs than Y; saved_mean and saved_var too.
    let n5 = node_out(
        "BatchNormalization",
        vec![eps0(), attr::float("momentum", 0.5)],
        5,
    );
    let y = run(&n5, 9, &ins).unwrap();
    assert_eq!(y[0], want_y);
    assert_eq!(y[1], f32s(&[2], &[1., 10.]));
    assert_eq!(y[2], f32s(&[2], &[1., 50.5]));
    assert_eq!(
        (&y[3], &y[4]),
        (&f32s(&[2], &[2., 20.]), &f32s(&[2], &[1., 100.]))
    );
    let n1 = node_out("BatchNormalization", vec![eps0()], 1);
    assert_eq!(run(&n1, 9, &ins).unwrap(), vec![x.clone()]);
    // The statistics have the type of the mean and var inputs (T2).
    let (m64, v64) = (f64s(&[2], &[0., 0.]), f64s(&[2], &[1., 1.]));
    let y = run(&n, 15, &[&x, &ones, &zeros, &m64, &v64]).unwrap();
    assert_close(&y[1], &f64s(&[2], &[0.2, 2.0]), 1e-6);
    // training_mode = 0 has only output Y.
    let bad = node_out("BatchNormalization", vec![], 3);
    let e = run(&bad, 15, &ins).unwrap_err();
    assert_eq!(
        e,
        "BatchNormalization: outputs running_mean and running_var exist only with training_mode = 1"
    );
    let e = run(&node_out("BatchNormalization", vec![], 4), 15, &ins).unwrap_err();
    assert!(e.contains("names 4 outputs, the op has at most 3"), "{e}");
}

#[test]
fn batch_norm_errors() {
    let x = f32s(&[1, 2, 1, 1], &[1., 2.]);
    let p2 = f32s(&[2], &[1., 1.]);
    let n = node("BatchNormalization", vec![]);
    let e = one(&n, 15, &[&x, &f32s(&[3], &[1.; 3]), &p2, &p2, &p2]).unwrap_err();
    assert_eq!(
        e,
        "BatchNormalization: scale of shape [3] cannot be broadcast to [2]"
    );
    let e = one(&n, 15, &[&x, &p2, &p2, &i64s(&[2], &[0, 0]), &p2]).unwrap_err();
    assert_eq!(e, "BatchNormalization: 'mean' must be float, got int64");
    let e = one(&n, 15, &[&x, &p2, &p2, &p2]).unwrap_err();
    assert!(e.contains("missing required input 4"), "{e}");
    let e = one(&n, 15, &[&i32s(&[1, 2], &[1, 2]), &p2, &p2, &p2, &p2]).unwrap_err();
    assert_eq!(e, "BatchNormalization: element type int32 is not supported");
    let e = one(&n, 15, &[&f32s(&[], &[1.]), &p2, &p2, &p2, &p2]).unwrap_err();
    assert!(e.contains("X must have rank 1 or more"), "{e}");
}

#[test]
fn instance_and_group_norm() {
    // Channel 0 [1, 3] -> [-1, 1]; channel 1 [2, 4] -> [-1, 1]; then scale and bias per channel.
    let x = f32s(&[1, 2, 2], &[1., 3., 2., 4.]);
    let (s, b) = (f32s(&[2], &[2., 5.]), f32s(&[2], &[1., 7.]));
    let n = node("InstanceNormalization", vec![eps0()]);
    let y = one(&n, 22, &[&x, &s, &b]).unwrap();
    assert_eq!(y, f32s(&[1, 2, 2], &[-1., 3., 2., 12.]));
    let e = one(&n, 6, &[&f32s(&[2], &[1., 2.]), &s, &b]).unwrap_err();
    assert!(
        e.contains("InstanceNormalization: X must have rank 2 or more"),
        "{e}"
    );

    // Two groups of two channels: [1, 3] and [10, 30] normalize to [-1, 1] each.
    let x = f64s(&[1, 4, 1], &[1., 3., 10., 30.]);
    let g = |attrs: Vec<AttributeProto>| {
        let mut a = vec![eps0(), attr::int("num_groups", 2)];
        a.extend(attrs);
        node("GroupNormalization", a)
    };
    let (s4, b4) = (f64s(&[4], &[1., 2., 3., 4.]), f64s(&[4], &[0., 0., 0., 1.]));
    let y = one(&g(vec![]), 21, &[&x, &s4, &b4]).unwrap();
    assert_close(&y, &f64s(&[1, 4, 1], &[-1., 2., -3., 5.]), 1e-15);
    // Opset 18: scale and bias per group.
    let (s2, b2) = (f64s(&[2], &[2., 3.]), f64s(&[2], &[0., 1.]));
    let y = one(&g(vec![]), 18, &[&x, &s2, &b2]).unwrap();
    assert_close(&y, &f64s(&[1, 4, 1], &[-2., 2., -2., 4.]), 1e-15);
    let e = one(&g(vec![]), 18, &[&x, &s4, &b4]).unwrap_err();
    assert_eq!(
        e,
        "GroupNormalization: scale of shape [4] cannot be broadcast to [2]"
    );
    let g3 = node("GroupNormalization", vec![attr::int("num_groups", 3)]);
    let e = one(&g3, 21, &[&x, &s4, &b4]).unwrap_err();
    assert_eq!(
        e,
        "GroupNormalization: num_groups 3 does not divide the 4 channels"
    );
    let e = one(&node("GroupNormalization", vec![]), 21, &[&x, &s4, &b4]).unwrap_err();
    assert!(e.contains("'num_groups' is required"), "{e}");
    let g0 = node("GroupNormalization", vec![attr::int("num_groups", 0)]);
    let e = one(&g0, 21, &[&x, &s4, &b4]).unwrap_err();
    assert!(e.contains("'num_groups' must be positive, got 0"), "{e}");
    assert!(one(&g(vec![]), 17, &[&x, &s2, &b2]).is_err());
}

#[test]
fn mvn_and_rms_norm() {
    // Default axes [0, 2, 3]: channel 0 is [1, 3] -> [-1, 1], channel 1 [5, 5] -> 0.
    let x = f32s(&[2, 2, 1, 1], &[1., 5., 3., 5.]);
    let n = node("MeanVarianceNormalization", vec![]);
    let y = one(&n, 13, &[&x]).unwrap();
    assert_close(&y, &f32s(&[2, 2, 1, 1], &[-1., 0., 1., 0.]), 1e-7);
    let n1 = node("MeanVarianceNormalization", vec![attr::ints("axes", &[1])]);
    let y = one(&n1, 9, &[&f64s(&[2, 2], &[1., 3., 5., 5.])]).unwrap();
    assert_close(&y, &f64s(&[2, 2], &[-1., 1., 0., 0.]), 1e-8);
    let e = one(&n, 13, &[&f32s(&[2, 2], &[1.; 4])]).unwrap_err();
    assert!(e.contains("axis 2 is out of range for rank 2"), "{e}");

    // Rows [1, 1] and [2, 2]: root mean squares 1 and 2.
    let x = f32s(&[2, 2], &[1., 1., 2., 2.]);
    let n = node("RMSNormalization", vec![eps0()]);
    let y = one(&n, 23, &[&x, &f32s(&[2], &[2., 3.])]).unwrap();
    assert_eq!(y, f32s(&[2, 2], &[2., 3., 2., 3.]));
    // Axis 0: one mean over all four, sqrt(2.5); scale [1] broadcast; Y has scale's type.
    let n0 = node("RMSNormalization", vec![eps0(), attr::int("axis", 0)]);
    let y = one(&n0, 23, &[&x, &f64s(&[1], &[1.])]).unwrap();
    let r = 2.5f64.sqrt();
    assert_close(&y, &f64s(&[2, 2], &[1. / r, 1. / r, 2. / r, 2. / r]), 1e-7);
    let e = one(&n, 23, &[&x, &f32s(&[3], &[1.; 3])]).unwrap_err();
    assert_eq!(
        e,
        "RMSNormalization: scale of shape [3] cannot be broadcast to [2]"
    );
    assert!(one(&n, 22, &[&x, &x]).is_err());
}

#[test]
fn lrn_windows() {
    let x = f32s(&[1, 3, 1, 1], &[1., 2., 3.]);
    // size 3, alpha / size = 1, beta 1, bias 1: windows {0,1}, {0,1,2}, {1,2}.
    let a = |size: i64| {
        vec![
            attr::int("size", size),
            attr::float("alpha", size as f32),
            attr::float("beta", 1.0),
        ]
    };
    let y = one(&node("LRN", a(3)), 13, &[&x]).unwrap();
    assert_close(
        &y,
        &f32s(&[1, 3, 1, 1], &[1. / 6., 2. / 15., 3. / 14.]),
        1e-7,
    );
    // size 2: windows {0,1}, {1,2}, {2}.
    let y = one(&node("LRN", a(2)), 1, &[&x]).unwrap();
    assert_close(&y, &f32s(&[1, 3, 1, 1], &[1. / 6., 1. / 7., 0.3]), 1e-7);
    // Defaults: alpha 1e-4, beta 0.75, bias 1; size 1 is the element alone.
    let y = one(&node("LRN", vec![attr::int("size", 1)]), 13, &[&x]).unwrap();
    let want: Vec<f32> = [1f64, 2., 3.]
        .iter()
        .map(|v| (v / (1.0 + 1e-4 * v * v).powf(0.75)) as f32)
        .collect();
    assert_close(&y, &f32s(&[1, 3, 1, 1], &want), 1e-7);
    let e = one(&node("LRN", vec![]), 13, &[&x]).unwrap_err();
    assert!(e.contains("LRN: attribute 'size' is required"), "{e}");
    let e = one(&node("LRN", a(0)), 13, &[&x]).unwrap_err();
    assert!(e.contains("'size' must be positive, got 0"), "{e}");
    let e = one(&node("LRN", a(3)), 13, &[&f32s(&[3], &[1.; 3])]).unwrap_err();
    assert!(e.contains("LRN: X must have rank 2 or more"), "{e}");
}

#[test]
fn dropout_is_inference() {
    let x = f32s(&[2], &[1.5, -2.]);
    let n = node_out("Dropout", vec![], 2);
    let y = run(&n, 13, &[&x]).unwrap();
    assert_eq!(y, vec![x.clone(), bools(&[2], &[true, true])]);
    // Ratio is ignored unless training; training with ratio 0 is the identity too.
    let (r, t, f) = (f32s(&[], &[0.3]), bools(&[], &[true]), bools(&[], &[false]));
    assert_eq!(run(&n, 22, &[&x, &r, &f]).unwrap()[0], x);
    let z = f64s(&[], &[0.]);
    assert_eq!(
        run(&n, 12, &[&x, &z, &t]).unwrap()[1],
        bools(&[2], &[true, true])
    );
    let e = run(&n, 13, &[&x, &r, &t]).unwrap_err();
    assert!(
        e.starts_with("Dropout: training_mode is true with ratio 0.3"),
        "{e}"
    );
    // No ratio input: 0.5.
    let e = run_node(&n, 13, &[Some(&x), None, Some(&t)]).unwrap_err();
    assert!(
        e.contains("with ratio 0.5: random dropout is not supported"),
        "{e}"
    );
    let e = run(&n, 13, &[&x, &r, &i64s(&[], &[1])]).unwrap_err();
    assert_eq!(e, "Dropout: 'training_mode' must be bool, got int64");
    let e = run(&n, 13, &[&x, &f32s(&[2], &[0., 0.]), &t]).unwrap_err();
    assert_eq!(e, "Dropout: 'ratio' must be a scalar, got shape [2]");
    // Before 10 the mask has the data's type; before 12 extra inputs are not read.
    let y = run(&n, 7, &[&x, &r, &t]).unwrap();
    assert_eq!(y[1], f32s(&[2], &[1., 1.]));
    let y = run(
        &node_out("Dropout", vec![attr::int("is_test", 0)], 1),
        6,
        &[&x],
    )
    .unwrap();
    assert_eq!(y, vec![x]);
}

#[test]
fn inference_of_norm_outputs() {
    let mut b = GraphBuilder::new("g", 23);
    let x = b.input(
        "x",
        DType::F32,
        vec![Dim::Sym("N".into()), Dim::Known(3), Dim::Known(4)],
    );
    let p = b.input("p", DType::F32, dims(&[3]));
    let p64 = b.input("p64", DType::F64, dims(&[3]));
    let bn = b.node(
        "",
        "BatchNormalization",
        &[Some(x), Some(p), Some(p), Some(p64), Some(p)],
        3,
        vec![attr::int("training_mode", 1)],
    );
    let dr = b.node("", "Dropout", &[Some(x)], 2, vec![]);
    let s = b.input("s", DType::F64, dims(&[4]));
    let rms = b.op("RMSNormalization", &[x, s], vec![]);
    let m = b.build();
    let ty = |v| m.graph.value(v).ty.clone();
    let full = TensorType::new(
        DType::F32,
        vec![Dim::Sym("N".into()), Dim::Known(3), Dim::Known(4)],
    );
    assert_eq!(ty(bn[0]), full);
    assert_eq!(ty(bn[1]), TensorType::new(DType::F64, dims(&[3])));
    assert_eq!(ty(bn[2]), TensorType::new(DType::F32, dims(&[3])));
    assert_eq!(ty(dr[0]), full);
    assert_eq!(ty(dr[1]).dtype, Some(DType::BOOL));
    assert_eq!(ty(rms).dtype, Some(DType::F64));
    assert_eq!(ty(rms).shape, full.shape);
}
