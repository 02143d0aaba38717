//! Unit tests of recurrent.rs: one-unit cells with piecewise-linear activations, worked by hand.

use super::super::common::test_util::*;
use super::super::lanes::run_node;
use super::*;
use crate::ir::{attr, Node, ValueId};
use crate::onnx::proto::AttributeProto;

/// A node naming `n_out` outputs (`None` where `absent` says).
fn node_out(op: &str, attrs: Vec<AttributeProto>, n_out: usize) -> Node {
    let mut n = node(op, attrs);
    n.outputs = (0..n_out).map(|i| Some(ValueId(i as u32))).collect();
    n
}

fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> KernelResult {
    run_node(n, opset, ins)
}

fn acts(names: &[&str]) -> AttributeProto {
    attr::strings("activations", names)
}

#[test]
fn rnn_forward_reverse_bidirectional() {
    // H = relu(x + 0.5 H): forward 1, 2.5; reverse (from t = 1) 2, 2.
    let x = f32s(&[2, 1, 1], &[1., 2.]);
    let w = f32s(&[1, 1, 1], &[1.]);
    let r = f32s(&[1, 1, 1], &[0.5]);
    let n = node_out("RNN", vec![acts(&["Relu"]), attr::int("hidden_size", 1)], 2);
    let out = run(&n, 14, &[Some(&x), Some(&w), Some(&r)]).unwrap();
    assert_eq!(out[0], f32s(&[2, 1, 1, 1], &[1., 2.5]));
    assert_eq!(out[1], f32s(&[1, 1, 1], &[2.5]));
    let n = node_out(
        "RNN",
        vec![acts(&["Relu"]), attr::string("direction", "reverse")],
        2,
    );
    let out = run(&n, 7, &[Some(&x), Some(&w), Some(&r)]).unwrap();
    assert_eq!(out[0], f32s(&[2, 1, 1, 1], &[2., 2.]));
    assert_eq!(out[1], f32s(&[1, 1, 1], &[2.]));
    // Both ways: one list of one direction's length serves both.
    let w2 = f32s(&[2, 1, 1], &[1., 1.]);
    let r2 = f32s(&[2, 1, 1], &[0.5, 0.5]);
    let n = node_out(
        "RNN",
        vec![acts(&["Relu"]), attr::string("direction", "bidirectional")],
        2,
    );
    let out = run(&n, 14, &[Some(&x), Some(&w2), Some(&r2)]).unwrap();
    assert_eq!(out[0], f32s(&[2, 2, 1, 1], &[1., 2., 2.5, 2.]));
    assert_eq!(out[1], f32s(&[2, 1, 1], &[2.5, 2.]));
}

#[test]
fn rnn_sequence_lens_bias_initial_h_and_layout() {
    // Batch 2: entry 0 runs two steps, entry 1 one; Y past a length is 0.
    let x = f64s(&[2, 2, 1], &[1., 3., 2., 4.]);
    let w = f64s(&[1, 1, 1], &[1.]);
    let r = f64s(&[1, 1, 1], &[0.5]);
    // Biases Wb 1 and Rb -1 cancel; initial_h [2, 0].
    let b = f64s(&[1, 2], &[1., -1.]);
    let lens = i32s(&[2], &[2, 1]);
    let h0 = f64s(&[1, 2, 1], &[2., 0.]);
    let n = node_out("RNN", vec![acts(&["Relu"])], 2);
    let ins = [
        Some(&x),
        Some(&w),
        Some(&r),
        Some(&b),
        Some(&lens),
        Some(&h0),
    ];
    let out = run(&n, 14, &ins).unwrap();
    // Entry 0: relu(1 + 1) = 2, relu(2 + 1) = 3; entry 1: relu(3) = 3, then nothing.
    assert_eq!(out[0], f64s(&[2, 1, 2, 1], &[2., 3., 3., 0.]));
    assert_eq!(out[1], f64s(&[1, 2, 1], &[3., 3.]));
    // Reverse: entry 1 starts at its own last step (t = 0).
    let n = node_out(
        "RNN",
        vec![acts(&["Relu"]), attr::string("direction", "reverse")],
        2,
    );
    let out = run(&n, 14, &ins).unwrap();
    // Entry 0: t = 1: relu(2 + 1) = 3, t = 0: relu(1 + 1.5) = 2.5.
    assert_eq!(out[0], f64s(&[2, 1, 2, 1], &[2.5, 3., 3., 0.]));
    assert_eq!(out[1], f64s(&[1, 2, 1], &[2.5, 3.]));
    // layout = 1: X [batch, seq, input], initial_h [batch, D, H], Y [batch, seq, D, H].
    let xb = f64s(&[2, 2, 1], &[1., 2., 3., 4.]);
    let h0b = f64s(&[2, 1, 1], &[2., 0.]);
    let n = node_out("RNN", vec![acts(&["Relu"]), attr::int("layout", 1)], 2);
    let ins = [
        Some(&xb),
        Some(&w),
        Some(&r),
        Some(&b),
        Some(&lens),
        Some(&h0b),
    ];
    let out = run(&n, 14, &ins).unwrap();
    assert_eq!(out[0], f64s(&[2, 2, 1, 1], &[2., 3., 3., 0.]));
    assert_eq!(out[1], f64s(&[2, 1, 1], &[3., 3.]));
    // A zero length gives zero output and a zero final state.
    let lens0 = i32s(&[2], &[2, 0]);
    let ins = [
        Some(&x),
        Some(&w),
        Some(&r),
        Some(&b),
        Some(&lens0),
        Some(&h0),
    ];
    let n = node_out("RNN", vec![acts(&["Relu"])], 2);
    let out = run(&n, 14, &ins).unwrap();
    assert_eq!(out[1], f64s(&[1, 2, 1], &[3., 0.]));
}

#[test]
fn gru_linear_before_reset() {
    // z = r = 0.5 (Affine alpha 0, beta 0.5), g = Relu; Wh = Rh = 1, Rbh = 1.
    let x = f32s(&[2, 1, 1], &[2., 4.]);
    let w = f32s(&[1, 3, 1], &[0., 0., 1.]);
    let r = f32s(&[1, 3, 1], &[0., 0., 1.]);
    let b = f32s(&[1, 6], &[0., 0., 0., 0., 0., 1.]);
    let attrs = |lbr: i64| {
        vec![
            acts(&["Affine", "Relu"]),
            attr::floats("activation_alpha", &[0.]),
            attr::floats("activation_beta", &[0.5]),
            attr::int("linear_before_reset", lbr),
        ]
    };
    // lbr 0: h = relu(2 + 1) = 3, H = 1.5; h = relu(4 + 0.5·1.5 + 1) = 5.75, H = 3.625.
    let out = run(
        &node_out("GRU", attrs(0), 2),
        14,
        &[Some(&x), Some(&w), Some(&r), Some(&b)],
    )
    .unwrap();
    assert_eq!(out[0], f32s(&[2, 1, 1, 1], &[1.5, 3.625]));
    assert_eq!(out[1], f32s(&[1, 1, 1], &[3.625]));
    // lbr 1: h = relu(2 + 0.5·(0 + 1)) = 2.5, H = 1.25; h = relu(4 + 0.5·2.25) = 5.125,
    // H = 3.1875.
    let out = run(
        &node_out("GRU", attrs(1), 2),
        7,
        &[Some(&x), Some(&w), Some(&r), Some(&b)],
    )
    .unwrap();
    assert_eq!(out[0], f32s(&[2, 1, 1, 1], &[1.25, 3.1875]));
}

#[test]
fn lstm_peepholes_clip_and_outputs() {
    // f = identity (Affine defaults 1, 0), g = h = Relu; W only feeds c; P = [0.5, 2, 0.25]
    // (i, o, f); initial_c 1. i = 0.5, f = 0.25, c = 2, C = 1.25, o = 2.5, H = 3.125.
    let x = f32s(&[1, 1, 1], &[2.]);
    let w = f32s(&[1, 4, 1], &[0., 0., 0., 1.]);
    let r = f32s(&[1, 4, 1], &[0., 0., 0., 0.]);
    let c0 = f32s(&[1, 1, 1], &[1.]);
    let p = f32s(&[1, 3], &[0.5, 2., 0.25]);
    let a = vec![acts(&["Affine", "Relu", "Relu"])];
    let ins = [
        Some(&x),
        Some(&w),
        Some(&r),
        None,
        None,
        None,
        Some(&c0),
        Some(&p),
    ];
    let out = run(&node_out("LSTM", a.clone(), 3), 14, &ins).unwrap();
    assert_eq!(out[0], f32s(&[1, 1, 1, 1], &[3.125]));
    assert_eq!(out[1], f32s(&[1, 1, 1], &[3.125]));
    assert_eq!(out[2], f32s(&[1, 1, 1], &[1.25]));
    // clip 1: c = min(2, 1), C = 0.75, o = min(1.5, 1), H = 0.75.
    let mut ac = a.clone();
    ac.push(attr::float("clip", 1.0));
    let out = run(&node_out("LSTM", ac, 3), 14, &ins).unwrap();
    assert_eq!(out[1], f32s(&[1, 1, 1], &[0.75]));
    assert_eq!(out[2], f32s(&[1, 1, 1], &[0.75]));
    // input_forget: f = 1 - i = 0.5, C = 0.5 + 1 = 1.5, o = 3, H = 4.5.
    let mut af = a.clone();
    af.push(attr::int("input_forget", 1));
    let out = run(&node_out("LSTM", af, 3), 14, &ins).unwrap();
    assert_eq!(out[1], f32s(&[1, 1, 1], &[4.5]));
    // Y omitted: its slot is an empty placeholder.
    let mut n = node_out("LSTM", a, 3);
    n.outputs[0] = None;
    let out = run(&n, 14, &ins).unwrap();
    assert_eq!(out[0].len(), 0);
    assert_eq!(out[2], f32s(&[1, 1, 1], &[1.25]));
}

#[test]
fn lstm_default_activations() {
    // All weights zero, bias on c only: i = f = o = sigmoid(0) = 0.5, c = tanh(1).
    let x = f32s(&[1, 1, 1], &[3.]);
    let w = f32s(&[1, 4, 1], &[0.; 4]);
    let r = f32s(&[1, 4, 1], &[0.; 4]);
    let b = f32s(&[1, 8], &[0., 0., 0., 1., 0., 0., 0., 0.]);
    let out = run(
        &node_out("LSTM", vec![], 3),
        7,
        &[Some(&x), Some(&w), Some(&r), Some(&b)],
    )
    .unwrap();
    let c = 0.5 * 1f64.tanh();
    let h = 0.5 * c.tanh();
    assert_close(&out[2], &f32s(&[1, 1, 1], &[c as f32]), 1e-7);
    assert_close(&out[1], &f32s(&[1, 1, 1], &[h as f32]), 1e-7);
}

#[test]
fn activations_match_their_ops() {
    let cases: [(Act, f64, f64); 10] = [
        (Act::LeakyRelu(0.01), -2., -0.02),
        (Act::ThresholdedRelu(1.), 0.5, 0.),
        (Act::ThresholdedRelu(1.), 1.5, 1.5),
        (Act::ScaledTanh(2., 0.), 3., 0.),
        (Act::HardSigmoid(0.2, 0.5), 1., 0.7),
        (Act::HardSigmoid(0.2, 0.5), 10., 1.),
        (Act::Elu(1.), 0., 0.),
        (Act::Softsign, -1., -0.5),
        (Act::Softplus, 0., std::f64::consts::LN_2),
        (Act::Sigmoid, 0., 0.5),
    ];
    for (a, x, want) in cases {
        assert!((a.apply(x) - want).abs() < 1e-6, "{a:?}({x})");
    }
    assert!((Act::Softplus.apply(1000.) - 1000.).abs() < 1e-9);
    assert!(Act::Sigmoid.apply(-1000.) >= 0.);
}

#[test]
fn bad_attributes_and_inputs() {
    let x = f32s(&[1, 1, 1], &[1.]);
    let w = f32s(&[1, 1, 1], &[1.]);
    let r = f32s(&[1, 1, 1], &[1.]);
    let ins = [Some(&x), Some(&w), Some(&r)];
    let err = |n: Node, ins: &[Option<&Tensor>]| run(&n, 14, ins).unwrap_err();
    let e = err(
        node_out("RNN", vec![attr::string("direction", "up")], 2),
        &ins,
    );
    assert!(
        e.contains("'direction' must be forward, reverse or bidirectional"),
        "{e}"
    );
    let e = err(node_out("GRU", vec![acts(&["Sigmoid"])], 2), &ins);
    assert!(
        e.contains("'activations' has 1 entries, expected 2 per direction"),
        "{e}"
    );
    let e = err(node_out("RNN", vec![acts(&["Swish"])], 2), &ins);
    assert!(e.contains("unknown activation 'Swish'"), "{e}");
    let e = err(node_out("RNN", vec![attr::float("clip", -1.)], 2), &ins);
    assert!(e.contains("'clip' must be positive"), "{e}");
    let e = err(node_out("RNN", vec![attr::int("layout", 2)], 2), &ins);
    assert!(e.contains("'layout' must be 0 or 1"), "{e}");
    // W of the wrong gate count (a GRU needs 3·H rows).
    let e = err(node_out("GRU", vec![], 2), &ins);
    assert!(
        e.contains("GRU: 'W' must have shape [1, 3, 1], got [1, 1, 1]"),
        "{e}"
    );
    let e = err(
        node_out("RNN", vec![], 2),
        &[Some(&w), Some(&w), Some(&f32s(&[1, 1], &[1.]))],
    );
    assert!(
        e.contains("'R' must have shape [1, 1, 1]") || e.contains("R must be 3-D"),
        "{e}"
    );
    let e = err(
        node_out("RNN", vec![], 2),
        &[Some(&f32s(&[1, 1], &[1.])), Some(&w), Some(&r)],
    );
    assert!(e.contains("X must be 3-D"), "{e}");
    let lens = i32s(&[1], &[2]);
    let e = err(
        node_out("RNN", vec![], 2),
        &[Some(&x), Some(&w), Some(&r), None, Some(&lens)],
    );
    assert!(e.contains("sequence_lens value 2 is outside [0, 1]"), "{e}");
    let e = err(
        node_out("RNN", vec![], 2),
        &[Some(&x), Some(&w), Some(&r), Some(&f32s(&[1, 3], &[0.; 3]))],
    );
    assert!(e.contains("'B' must have shape [1, 2]"), "{e}");
    let e = err(
        node_out("RNN", vec![], 2),
        &[Some(&x), Some(&w), Some(&f64s(&[1, 1, 1], &[1.]))],
    );
    assert!(
        e.contains("input types differ") || e.contains("float"),
        "{e}"
    );
}
