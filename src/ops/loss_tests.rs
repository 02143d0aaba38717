//! Unit tests of loss.rs: values worked by hand.

use super::super::common::test_util::*;
use super::*;
use crate::ir::{attr, Node, ValueId};

fn nll(attrs: Vec<crate::onnx::proto::AttributeProto>) -> Node {
    node("NegativeLogLikelihoodLoss", attrs)
}

fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> KernelResult {
    let ins: Vec<Option<&Tensor>> = ins.iter().map(|&t| Some(t)).collect();
    let op = super::super::resolve(n, opset).map_err(|e| e.to_string())?;
    run_at(op.kernel(), n, opset, &ins)
}

fn scores() -> Tensor {
    f32s(&[2, 3], &[-1., -2., -3., -0.5, -1.5, -2.5])
}

#[test]
fn nll_reductions_weights_and_ignore_index() {
    let t = i64s(&[2], &[2, 0]);
    let none = nll(vec![attr::string("reduction", "none")]);
    assert_eq!(
        run(&none, 13, &[&scores(), &t]).unwrap()[0],
        f32s(&[2], &[3., 0.5])
    );
    let sum = nll(vec![attr::string("reduction", "sum")]);
    assert_eq!(
        run(&sum, 13, &[&scores(), &t]).unwrap()[0],
        f32s(&[], &[3.5])
    );
    let mean = nll(vec![]);
    assert_eq!(
        run(&mean, 22, &[&scores(), &t]).unwrap()[0],
        f32s(&[], &[1.75])
    );
    // Weights: loss -w[t] * x; the mean divides by the weights taken.
    let w = f32s(&[3], &[1., 2., 4.]);
    assert_eq!(
        run(&none, 12, &[&scores(), &t, &w]).unwrap()[0],
        f32s(&[2], &[12., 0.5])
    );
    assert_eq!(
        run(&mean, 12, &[&scores(), &t, &w]).unwrap()[0],
        f32s(&[], &[2.5])
    );
    // ignore_index: the ignored element is 0 and does not count in the mean.
    let ii = nll(vec![attr::int("ignore_index", 2)]);
    assert_eq!(
        run(&ii, 13, &[&scores(), &t]).unwrap()[0],
        f32s(&[], &[0.5])
    );
    // N-D: [1, 2, 2] with target [1, 2] picks class per position.
    let x = f64s(&[1, 2, 2], &[1., 2., 3., 4.]);
    let t = i32s(&[1, 2], &[1, 0]);
    assert_eq!(
        run(&none, 13, &[&x, &t]).unwrap()[0],
        f64s(&[1, 2], &[-3., -2.])
    );
}

#[test]
fn sce_log_softmax_and_log_prob_output() {
    let n = node("SoftmaxCrossEntropyLoss", vec![]);
    let x = f32s(&[1, 2], &[0., 0.]);
    let t = i64s(&[1], &[1]);
    let ln2 = std::f32::consts::LN_2;
    let y = run(&n, 13, &[&x, &t]).unwrap();
    assert_eq!(y.len(), 1);
    assert_close(&y[0], &f32s(&[], &[ln2]), 1e-6);
    // Naming the second output asks for log_prob.
    let mut n2 = node(
        "SoftmaxCrossEntropyLoss",
        vec![attr::string("reduction", "none")],
    );
    n2.outputs = vec![Some(ValueId(0)), Some(ValueId(1))];
    let y = run(&n2, 12, &[&x, &t]).unwrap();
    assert_close(&y[0], &f32s(&[1], &[ln2]), 1e-6);
    assert_close(&y[1], &f32s(&[1, 2], &[-ln2, -ln2]), 1e-6);
}

#[test]
fn loss_errors() {
    let mean = nll(vec![]);
    let e = run(&mean, 13, &[&scores(), &i64s(&[2], &[3, 0])]).unwrap_err();
    assert_eq!(
        e,
        "NegativeLogLikelihoodLoss: target value 3 is outside [0, 3) and is not ignore_index"
    );
    let e = run(&mean, 13, &[&scores(), &i64s(&[3], &[0, 0, 0])]).unwrap_err();
    assert!(e.contains("target must have shape [2]"), "{e}");
    let e = run(&mean, 13, &[&f32s(&[3], &[1., 2., 3.]), &i64s(&[], &[0])]).unwrap_err();
    assert!(e.contains("rank 2 or more"), "{e}");
    let e = run(
        &mean,
        13,
        &[&scores(), &i64s(&[2], &[0, 0]), &f32s(&[2], &[1., 1.])],
    )
    .unwrap_err();
    assert!(e.contains("weight must have shape [3]"), "{e}");
    let bad = nll(vec![attr::string("reduction", "max")]);
    let e = run(&bad, 13, &[&scores(), &i64s(&[2], &[0, 0])]).unwrap_err();
    assert!(e.contains("'reduction' must be"), "{e}");
}
