//! Unit tests of state_ops.rs: recurrences worked by hand on 1-element heads.

use super::super::common::test_util::*;
use super::super::resolve;
use super::*;
use crate::ir::attr;
use crate::onnx::proto::AttributeProto;

fn run(op: &str, attrs: Vec<AttributeProto>, ins: &[Option<&Tensor>]) -> KernelResult {
    let n = node(op, attrs);
    let k = resolve(&n, 27).map_err(|e| e.to_string())?.kernel();
    run_at(k, &n, 27, ins)
}

#[test]
fn causal_conv_with_and_without_state() {
    // One channel, kernel [1, 2, 3] over [1, 1, 1] after state [10, 20].
    let x = f32s(&[1, 1, 3], &[1., 1., 1.]);
    let w = f32s(&[1, 1, 3], &[1., 2., 3.]);
    let past = f32s(&[1, 1, 2], &[10., 20.]);
    let got = run(
        "CausalConvWithState",
        vec![],
        &[Some(&x), Some(&w), None, Some(&past)],
    )
    .unwrap();
    // [10, 20, 1] -> 10 + 40 + 3; [20, 1, 1] -> 20 + 2 + 3; [1, 1, 1] -> 6.
    assert_eq!(got[0], f32s(&[1, 1, 3], &[53., 25., 6.]));
    assert_eq!(got[1], f32s(&[1, 1, 2], &[1., 1.]));
    // No state: zeros in front; bias 1; silu of 0 is 0.
    let b = f32s(&[1], &[-3.]);
    let silu = vec![attr::string("activation", "silu")];
    let got = run("CausalConvWithState", silu, &[Some(&x), Some(&w), Some(&b)]).unwrap();
    let s = |v: f32| v / (1.0 + (-v).exp());
    assert_close(&got[0], &f32s(&[1, 1, 3], &[s(0.), s(2.), s(3.)]), 1e-6);
    // Kernel size 1: an empty state.
    let w1 = f32s(&[1, 1, 1], &[2.]);
    let got = run("CausalConvWithState", vec![], &[Some(&x), Some(&w1)]).unwrap();
    assert_eq!(got[1].shape(), [1, 1, 0]);
    let e = run(
        "CausalConvWithState",
        vec![],
        &[Some(&x), Some(&w), None, Some(&x)],
    )
    .unwrap_err();
    assert!(
        e.contains("past_state must be [B, C, k-1] = [1, 1, 2]"),
        "{e}"
    );
    let e = run(
        "CausalConvWithState",
        vec![],
        &[Some(&x), Some(&f32s(&[2, 1, 1], &[1., 1.]))],
    )
    .unwrap_err();
    assert!(e.contains("weight must be [C, 1, k]"), "{e}");
    assert!(resolve(
        &node(
            "CausalConvWithState",
            vec![attr::string("activation", "relu")]
        ),
        27
    )
    .is_err());
}

fn heads(rule: &str) -> Vec<AttributeProto> {
    vec![
        attr::int("q_num_heads", 1),
        attr::int("kv_num_heads", 1),
        attr::string("update_rule", rule),
        attr::float("scale", 1.0),
    ]
}

#[test]
fn linear_attention_rules() {
    // B 1, T 2, one head of dk = dv = 1: S is a number.
    let q = f32s(&[1, 2, 1], &[1., 2.]);
    let k = f32s(&[1, 2, 1], &[1., 1.]);
    let v = f32s(&[1, 2, 1], &[3., 5.]);
    // linear: S = 3, then 8; o = q·S.
    let got = run(
        "LinearAttention",
        heads("linear"),
        &[Some(&q), Some(&k), Some(&v)],
    )
    .unwrap();
    assert_eq!(got[0], f32s(&[1, 2, 1], &[3., 16.]));
    assert_eq!(got[1], f32s(&[1, 1, 1, 1], &[8.]));
    // gated with g = ln 0.5, past S = 4: S = 2 + 3 = 5, then 2.5 + 5 = 7.5.
    let g = f32s(&[1, 2, 1], &[0.5f32.ln(), 0.5f32.ln()]);
    let past = f32s(&[1, 1, 1, 1], &[4.]);
    let ins = [Some(&q), Some(&k), Some(&v), Some(&past), Some(&g)];
    let got = run("LinearAttention", heads("gated"), &ins).unwrap();
    assert_close(&got[0], &f32s(&[1, 2, 1], &[5., 15.]), 1e-5);
    // delta with beta 0.5: S = 0 + 0.5·(3 − 0) = 1.5, then 1.5 + 0.5·(5 − 1.5) = 3.25.
    let beta = f32s(&[1, 2, 1], &[0.5, 0.5]);
    let ins = [Some(&q), Some(&k), Some(&v), None, None, Some(&beta)];
    let got = run("LinearAttention", heads("delta"), &ins).unwrap();
    assert_close(&got[0], &f32s(&[1, 2, 1], &[1.5, 6.5]), 1e-6);
    // The rule decides which of decay and beta it takes.
    let e = run("LinearAttention", heads("linear"), &ins).unwrap_err();
    assert!(e.contains("takes no decay and takes no beta"), "{e}");
    let e = run(
        "LinearAttention",
        heads("gated_delta"),
        &[Some(&q), Some(&k), Some(&v)],
    )
    .unwrap_err();
    assert!(e.contains("needs decay and needs beta"), "{e}");
}

#[test]
fn linear_attention_gqa_and_attributes() {
    // Two query heads share one KV head; default scale 1/√dk with dk = 1.
    let n = vec![
        attr::int("q_num_heads", 2),
        attr::int("kv_num_heads", 1),
        attr::string("update_rule", "linear"),
    ];
    let q = f32s(&[1, 1, 2], &[1., -2.]);
    let k = f32s(&[1, 1, 1], &[2.]);
    let v = f32s(&[1, 1, 1], &[3.]);
    let got = run("LinearAttention", n, &[Some(&q), Some(&k), Some(&v)]).unwrap();
    assert_eq!(got[0], f32s(&[1, 1, 2], &[6., -12.]));
    let bad = vec![attr::int("q_num_heads", 3), attr::int("kv_num_heads", 2)];
    assert!(resolve(&node("LinearAttention", bad), 27).is_err());
    assert!(resolve(
        &node("LinearAttention", vec![attr::int("q_num_heads", 1)]),
        27
    )
    .is_err());
    let rule = vec![
        attr::int("q_num_heads", 1),
        attr::int("kv_num_heads", 1),
        attr::string("update_rule", "fast"),
    ];
    assert!(resolve(&node("LinearAttention", rule), 27).is_err());
}
