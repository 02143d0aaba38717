//! The transformer fusions (LayerNormalization, SkipLayerNormalization, Gelu, BiasGelu,
//! FastGelu) on hand-built graphs: exact op counts, parity with the unfused graph, and the cases
//! that must not fuse, with the reason the report gives.

mod common;

use common::{assert_parity_within, counts, fuse, ops, parity, seeded_f32};
use fuselab::builder::{dims, sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const HIDDEN: i64 = 8;
/// Largest accepted |fused - unfused| (f32, rows of 8).
const TOL: f64 = 1e-5;
const TRANSFORMER_RULES: &[&str] = &[
    "layer_norm",
    "skip_layer_norm",
    "gelu",
    "bias_gelu",
    "fast_gelu",
];

fn vector(b: &mut GraphBuilder, name: &str, n: usize, seed: u32) -> ValueId {
    b.initializer(name, &seeded_f32(&[n], seed))
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    scalar_as(b, name, v, DType::F32)
}

/// A rank-0 constant stored as `dt` (float16 rounds: √(2/π) becomes 0.7978515625).
fn scalar_as(b: &mut GraphBuilder, name: &str, v: f32, dt: DType) -> ValueId {
    let t = Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v));
    b.initializer(name, &t.narrow(dt).unwrap())
}

/// [batch, seq, HIDDEN] f32.
fn hidden_input(b: &mut GraphBuilder, name: &str) -> ValueId {
    let mut shape = vec![sym("batch"), sym("seq")];
    shape.push(Dim::Known(HIDDEN));
    b.input(name, DType::F32, shape)
}

fn assert_parity(a: &Model, b: &Model) {
    assert_parity_within(a, b, TOL);
}

/// Nothing fused; the report names the reason.
fn assert_not_fused(m: &Model, rules: &[&str], needle: &str) -> Model {
    let (opt, trace) = fuse(m, rules);
    let fused: Vec<&str> = trace.rewrites.iter().map(|r| r.rule.as_str()).collect();
    let reasons: Vec<String> = trace
        .rejected
        .iter()
        .map(|r| format!("{}: {}", r.rule, r.reason))
        .collect();
    assert!(
        fused.is_empty(),
        "fused by {fused:?}; expected rejection '{needle}'"
    );
    assert!(
        reasons.iter().any(|r| r.contains(needle)),
        "no rejection mentions '{needle}': {reasons:?}"
    );
    opt
}

// ---------------------------------------------------------------- LayerNormalization

#[derive(Clone, Copy)]
enum Eps {
    Const,
    Input,
}

#[derive(Clone, Copy)]
struct LnSpec {
    eps: Eps,
    axis: i64,
    affine: bool,
}

const LN: LnSpec = LnSpec {
    eps: Eps::Const,
    axis: -1,
    affine: true,
};

/// torch's opset-14 LayerNorm decomposition of `x`; returns (y, [mean, d, d², var, var+eps,
/// std, normalized]).
fn decomposed_ln(b: &mut GraphBuilder, x: ValueId, spec: LnSpec) -> (ValueId, Vec<ValueId>) {
    let axes = vec![attr::ints("axes", &[spec.axis])];
    let m1 = b.op("ReduceMean", &[x], axes.clone());
    let d = b.op("Sub", &[x, m1], vec![]);
    let two = scalar(b, &format!("two_{}", d.0), 2.0);
    let p = b.op("Pow", &[d, two], vec![]);
    let v = b.op("ReduceMean", &[p], axes);
    let eps = match spec.eps {
        Eps::Const => scalar(b, &format!("eps_{}", d.0), 1e-5),
        Eps::Input => b.input("eps", DType::F32, vec![]),
    };
    let ve = b.op("Add", &[v, eps], vec![]);
    let s = b.op("Sqrt", &[ve], vec![]);
    let n = b.op("Div", &[d, s], vec![]);
    let mut y = n;
    if spec.affine {
        let scale = vector(b, &format!("gamma_{}", d.0), HIDDEN as usize, 1);
        let bias = vector(b, &format!("beta_{}", d.0), HIDDEN as usize, 2);
        let m = b.op("Mul", &[n, scale], vec![]);
        y = b.op("Add", &[m, bias], vec![]);
    }
    (y, vec![m1, d, p, v, ve, s, n])
}

fn ln_model(opset: i64, spec: LnSpec) -> (GraphBuilder, Vec<ValueId>) {
    let mut b = GraphBuilder::new("ln", opset);
    let x = hidden_input(&mut b, "x");
    let (y, mids) = decomposed_ln(&mut b, x, spec);
    b.output(y, "y");
    (b, mids)
}

#[test]
fn layer_norm_fuses_the_decomposed_form() {
    let m = ln_model(17, LN).0.build();
    let (opt, trace) = fuse(&m, &["layer_norm"]);
    assert_eq!(m.graph.node_count(), 9);
    assert_eq!(ops(&opt), counts(&[("LayerNormalization", 1)]));
    assert_eq!(trace.rewrites[0].removed.len(), 9);
    let id = opt.graph.node_ids().next().unwrap();
    let n = opt.graph.node(id);
    assert_eq!(n.attr_float("epsilon"), Some(1e-5));
    assert_eq!(n.attr_int("axis"), Some(-1));
    assert_eq!(n.inputs.len(), 3);
    assert_parity(&m, &opt);
}

#[test]
fn layer_norm_raises_opset_14_to_17() {
    let m = ln_model(14, LN).0.build();
    let (opt, _) = fuse(&m, &["layer_norm"]);
    assert_eq!(ops(&opt), counts(&[("LayerNormalization", 1)]));
    assert_eq!(m.opset(""), Some(14));
    assert_eq!(opt.opset(""), Some(17));
    assert_parity(&m, &opt);
}

#[test]
fn layer_norm_without_affine_gets_a_ones_scale() {
    let spec = LnSpec {
        affine: false,
        ..LN
    };
    let m = ln_model(17, spec).0.build();
    let (opt, _) = fuse(&m, &["layer_norm"]);
    assert_eq!(m.graph.node_count(), 7);
    assert_eq!(ops(&opt), counts(&[("LayerNormalization", 1)]));
    let id = opt.graph.node_ids().next().unwrap();
    let scale = opt.graph.node(id).input(1).unwrap();
    assert_eq!(opt.graph.constant(scale).unwrap().dims, vec![HIDDEN]);
    assert_parity(&m, &opt);
}

#[test]
fn layer_norm_rejects_a_non_constant_epsilon() {
    let spec = LnSpec {
        eps: Eps::Input,
        ..LN
    };
    let m = ln_model(17, spec).0.build();
    assert_not_fused(&m, &["layer_norm"], "epsilon 'eps' is not a constant");
}

#[test]
fn layer_norm_rejects_a_reduction_over_another_axis() {
    // Normalizing over the seq axis is not what LayerNormalization(axis=-1) computes.
    let spec = LnSpec { axis: 1, ..LN };
    let m = ln_model(17, spec).0.build();
    assert_not_fused(&m, &["layer_norm"], "not only the last axis");
}

#[test]
fn layer_norm_rejects_an_intermediate_with_a_second_reader() {
    let (mut b, mids) = ln_model(17, LN);
    let var = mids[3];
    let extra = b.op("Neg", &[var], vec![]);
    b.output(extra, "var_neg");
    assert_not_fused(&b.build(), &["layer_norm"], "2 consumers");
}

#[test]
fn layer_norm_rejects_an_intermediate_that_is_a_graph_output() {
    let (mut b, mids) = ln_model(17, LN);
    b.output(mids[0], "mean");
    assert_not_fused(&b.build(), &["layer_norm"], "is a graph output");
}

#[test]
fn layer_norm_is_not_raised_from_below_opset_14() {
    let m = ln_model(13, LN).0.build();
    assert_not_fused(&m, &["layer_norm"], "opset 13");
}

// ---------------------------------------------------------------- SkipLayerNormalization

enum SkipForm {
    Plain,
    BiasOnInput,
    BiasOnSkip,
}

/// Returns (builder, residual sum, inner bias Add if any); `y` is already a graph output.
fn skip_model(
    form: SkipForm,
    skip_shape: Option<Vec<Dim>>,
) -> (GraphBuilder, ValueId, Option<ValueId>, ValueId) {
    let mut b = GraphBuilder::new("skip", 14);
    let a = hidden_input(&mut b, "a");
    let s = match skip_shape {
        Some(shape) => b.input("b", DType::F32, shape),
        None => hidden_input(&mut b, "b"),
    };
    let bias = vector(&mut b, "bias", HIDDEN as usize, 3);
    let (sum, inner) = match form {
        SkipForm::Plain => (b.op("Add", &[a, s], vec![]), None),
        SkipForm::BiasOnInput => {
            let ab = b.op("Add", &[a, bias], vec![]);
            (b.op("Add", &[ab, s], vec![]), Some(ab))
        }
        SkipForm::BiasOnSkip => {
            let sb = b.op("Add", &[bias, s], vec![]);
            (b.op("Add", &[a, sb], vec![]), Some(sb))
        }
    };
    let (y, _) = decomposed_ln(&mut b, sum, LN);
    b.output(y, "y");
    (b, sum, inner, y)
}

/// The first node of type `op` (the test expects one).
fn find_node(m: &Model, op: &str) -> fuselab::ir::Node {
    let g = &m.graph;
    let id = g.node_ids().find(|&id| g.node(id).op_type == op);
    g.node(id.unwrap_or_else(|| panic!("no {op} node"))).clone()
}

fn only_node(m: &Model) -> fuselab::ir::Node {
    let id = m.graph.node_ids().next().unwrap();
    m.graph.node(id).clone()
}

#[test]
fn skip_layer_norm_fuses_all_three_forms() {
    for (form, inputs) in [
        (SkipForm::Plain, 4),
        (SkipForm::BiasOnInput, 5),
        (SkipForm::BiasOnSkip, 5),
    ] {
        let m = skip_model(form, None).0.build();
        assert_eq!(m.opset(""), Some(14));
        let (opt, _) = fuse(&m, TRANSFORMER_RULES);
        assert_eq!(ops(&opt), counts(&[("SkipLayerNormalization", 1)]));
        let n = only_node(&opt);
        assert_eq!(n.domain, "com.microsoft");
        assert_eq!(n.inputs.len(), inputs);
        assert_eq!(
            n.outputs.len(),
            1,
            "no residual output when the sum has no other reader"
        );
        assert_eq!(n.attr_float("epsilon"), Some(1e-5));
        assert_eq!(opt.opset("com.microsoft"), Some(1));
        assert_parity(&m, &opt);
    }
}

#[test]
fn skip_layer_norm_writes_the_residual_sum_when_it_is_read_again() {
    // GPT-2's pre-LN block: the residual sum feeds the norm and the next residual Add.
    let (mut b, sum, _, y) = skip_model(SkipForm::BiasOnInput, None);
    let next = b.op("Add", &[sum, y], vec![]);
    b.output(next, "next");
    let m = b.build();
    let (opt, _) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(
        ops(&opt),
        counts(&[("Add", 1), ("SkipLayerNormalization", 1)])
    );
    let skip = find_node(&opt, "SkipLayerNormalization");
    assert_eq!(skip.outputs.len(), 4);
    assert_eq!(
        skip.output(3),
        Some(sum),
        "input_skip_bias_sum is the residual sum"
    );
    assert_parity(&m, &opt);
}

#[test]
fn skip_layer_norm_takes_a_skip_shared_by_the_batch() {
    // GPT-2's and Whisper's first norm add position embeddings [1, seq, H] (or [seq, H]) to
    // [batch, seq, H]: the op's skip may be either shape, and the [B, S, H] side is its input
    // whichever side of the Add it is on.
    for shape in [
        vec![Dim::Known(1), sym("seq"), Dim::Known(HIDDEN)],
        vec![sym("seq"), Dim::Known(HIDDEN)],
    ] {
        for swapped in [false, true] {
            let mut b = GraphBuilder::new("skip_shared", 14);
            let a = hidden_input(&mut b, "a");
            let s = b.input("pos", DType::F32, shape.clone());
            let sum = if swapped {
                b.op("Add", &[s, a], vec![])
            } else {
                b.op("Add", &[a, s], vec![])
            };
            let (y, _) = decomposed_ln(&mut b, sum, LN);
            b.output(y, "y");
            let m = b.build();
            let (opt, _) = fuse(&m, TRANSFORMER_RULES);
            assert_eq!(ops(&opt), counts(&[("SkipLayerNormalization", 1)]));
            let n = only_node(&opt);
            assert_eq!(
                n.input(0),
                Some(a),
                "the full [B, S, H] operand is the input"
            );
            assert_eq!(n.input(1), Some(s));
            for (batch, seq) in [(3, 4), (1, 1)] {
                let p = parity(&m, &opt, &[("batch", batch), ("seq", seq)]);
                assert!(p.max_abs_diff <= TOL, "{shape:?} at {batch}x{seq}");
            }
        }
    }
}

#[test]
fn skip_layer_norm_rejects_a_skip_broadcast_over_the_sequence() {
    // [1, 1, H] (or another seq) broadcasts in Add; SkipLayerNormalization reads [1, S, H] only.
    for shape in [
        vec![Dim::Known(1), Dim::Known(1), Dim::Known(HIDDEN)],
        vec![Dim::Known(1), sym("other"), Dim::Known(HIDDEN)],
    ] {
        let (b, ..) = skip_model(SkipForm::Plain, Some(shape));
        let m = b.build();
        let (opt, trace) = fuse(&m, TRANSFORMER_RULES);
        assert_eq!(ops(&opt), counts(&[("Add", 1), ("LayerNormalization", 1)]));
        assert!(trace.rejected.iter().any(
            |r| r.rule == "skip_layer_norm" && r.reason.contains("not provably the same shape")
        ));
    }
}

/// Add(a, b) → native LayerNormalization with `axis` and a Mean output that `read_mean` reads.
fn native_ln_model(axis: i64, read_mean: bool) -> Model {
    let mut b = GraphBuilder::new("skip17", 17);
    let a = hidden_input(&mut b, "a");
    let s = hidden_input(&mut b, "b");
    let sum = b.op("Add", &[a, s], vec![]);
    let scale = if axis == -1 {
        vector(&mut b, "gamma", 8, 1)
    } else {
        b.input("gamma", DType::F32, vec![sym("seq"), Dim::Known(HIDDEN)])
    };
    let outs = b.node(
        "",
        "LayerNormalization",
        &[Some(sum), Some(scale)],
        if read_mean { 2 } else { 1 },
        vec![attr::int("axis", axis)],
    );
    b.output(outs[0], "y");
    if read_mean {
        b.output(outs[1], "mean");
    }
    b.build()
}

#[test]
fn skip_layer_norm_rejects_a_norm_over_other_axes() {
    assert_not_fused(
        &native_ln_model(1, false),
        &["skip_layer_norm"],
        "axis 1 is not the last axis",
    );
}

#[test]
fn skip_layer_norm_rejects_a_read_mean_output() {
    assert_not_fused(
        &native_ln_model(-1, true),
        &["skip_layer_norm"],
        "output 1 ('mean') is read",
    );
}

#[test]
fn skip_layer_norm_keeps_a_bias_add_that_is_a_graph_output() {
    // The inner Add(a, bias) is a graph output: it is not absorbed, the outer Add still is.
    let (mut b, _, inner, _) = skip_model(SkipForm::BiasOnInput, None);
    b.output(inner.unwrap(), "a_plus_bias");
    let m = b.build();
    let (opt, _) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(
        ops(&opt),
        counts(&[("Add", 1), ("SkipLayerNormalization", 1)])
    );
    let skip = find_node(&opt, "SkipLayerNormalization");
    assert_eq!(skip.inputs.len(), 4, "no bias input");
    assert_parity(&m, &opt);
}

// ---------------------------------------------------------------- Gelu / BiasGelu

#[derive(Clone, Copy, PartialEq)]
enum GeluForm {
    DivSqrt2,
    MulInvSqrt2,
    HalfXFirst,
}

/// `0.5 * x * (1 + erf(x / √2))` on `x`; returns (y, [scaled, erf, 1 + erf]).
fn erf_gelu(b: &mut GraphBuilder, x: ValueId, form: GeluForm, one: f32) -> (ValueId, Vec<ValueId>) {
    let scaled = match form {
        GeluForm::MulInvSqrt2 => {
            let c = scalar(b, "inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2);
            b.op("Mul", &[c, x], vec![])
        }
        _ => {
            let c = scalar(b, "sqrt2", std::f32::consts::SQRT_2);
            b.op("Div", &[x, c], vec![])
        }
    };
    let e = b.op("Erf", &[scaled], vec![]);
    let one = scalar(b, "one", one);
    let p = b.op("Add", &[e, one], vec![]);
    let half = scalar(b, "half", 0.5);
    let y = if form == GeluForm::HalfXFirst {
        let hx = b.op("Mul", &[half, x], vec![]);
        b.op("Mul", &[hx, p], vec![])
    } else {
        let xp = b.op("Mul", &[x, p], vec![]);
        b.op("Mul", &[xp, half], vec![])
    };
    (y, vec![scaled, e, p])
}

fn gelu_model(form: GeluForm, one: f32) -> (GraphBuilder, Vec<ValueId>) {
    let mut b = GraphBuilder::new("gelu", 14);
    let x = hidden_input(&mut b, "x");
    let (y, mids) = erf_gelu(&mut b, x, form, one);
    b.output(y, "y");
    (b, mids)
}

#[test]
fn gelu_fuses_every_erf_form() {
    for form in [
        GeluForm::DivSqrt2,
        GeluForm::MulInvSqrt2,
        GeluForm::HalfXFirst,
    ] {
        let m = gelu_model(form, 1.0).0.build();
        let (opt, _) = fuse(&m, TRANSFORMER_RULES);
        assert_eq!(m.graph.node_count(), 5);
        assert_eq!(ops(&opt), counts(&[("Gelu", 1)]));
        assert_eq!(only_node(&opt).domain, "com.microsoft");
        assert_parity(&m, &opt);
    }
}

#[test]
fn gelu_rejects_a_wrong_constant() {
    let m = gelu_model(GeluForm::DivSqrt2, 2.0).0.build();
    assert_not_fused(&m, &["gelu"], "not the constant 1");
}

#[test]
fn gelu_rejects_a_non_constant_half() {
    let mut b = GraphBuilder::new("gelu", 14);
    let x = hidden_input(&mut b, "x");
    let c = scalar(&mut b, "sqrt2", std::f32::consts::SQRT_2);
    let s = b.op("Div", &[x, c], vec![]);
    let e = b.op("Erf", &[s], vec![]);
    let one = scalar(&mut b, "one", 1.0);
    let p = b.op("Add", &[e, one], vec![]);
    let xp = b.op("Mul", &[x, p], vec![]);
    let half = b.input("half", DType::F32, vec![]);
    let y = b.op("Mul", &[xp, half], vec![]);
    b.output(y, "y");
    assert_not_fused(&b.build(), &["gelu"], "not by x or 0.5");
}

#[test]
fn gelu_rejects_an_intermediate_with_a_second_reader() {
    let (mut b, mids) = gelu_model(GeluForm::DivSqrt2, 1.0);
    let extra = b.op("Neg", &[mids[1]], vec![]);
    b.output(extra, "erf_neg");
    assert_not_fused(&b.build(), &["gelu"], "2 consumers");
}

#[test]
fn gelu_rejects_an_intermediate_that_is_a_graph_output() {
    let (mut b, mids) = gelu_model(GeluForm::DivSqrt2, 1.0);
    b.output(mids[2], "one_plus_erf");
    assert_not_fused(&b.build(), &["gelu"], "is a graph output");
}

fn bias_gelu_model(bias_len: usize, bias_read_twice: bool) -> Model {
    let mut b = GraphBuilder::new("bias_gelu", 14);
    let a = hidden_input(&mut b, "a");
    let w = b.initializer("w", &seeded_f32(&[8, 8], 5));
    let mm = b.op("MatMul", &[a, w], vec![]);
    let bias = vector(&mut b, "bias", bias_len, 4);
    let t = b.op("Add", &[mm, bias], vec![]);
    let (y, _) = erf_gelu(&mut b, t, GeluForm::DivSqrt2, 1.0);
    b.output(y, "y");
    if bias_read_twice {
        b.output(t, "pre_gelu");
    }
    b.build()
}

#[test]
fn bias_gelu_absorbs_the_bias_add() {
    let m = bias_gelu_model(8, false);
    let (opt, _) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("BiasGelu", 1), ("MatMul", 1)]));
    assert_parity(&m, &opt);
}

#[test]
fn bias_gelu_rejects_a_bias_that_is_not_of_the_hidden_size() {
    // A [1] bias broadcasts; BiasGelu's B is the hidden-size vector. Gelu alone fuses.
    let m = bias_gelu_model(1, false);
    let (opt, trace) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("Add", 1), ("Gelu", 1), ("MatMul", 1)]));
    assert!(trace.rejected.iter().any(|r| r.rule == "bias_gelu"
        && r.reason
            .contains("not a single-use Add of a 1-D constant bias of size 8")));
    assert_parity(&m, &opt);
}

#[test]
fn bias_gelu_rejects_a_biased_value_that_is_a_graph_output() {
    let m = bias_gelu_model(8, true);
    let (opt, trace) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("Add", 1), ("Gelu", 1), ("MatMul", 1)]));
    assert!(trace.rejected.iter().any(|r| r.rule == "bias_gelu"));
}

/// `y = Gelu(A·W + bias)` with the standard Gelu (ai.onnx 20, as torch's dynamo exporter writes
/// it), `approximate` as given.
fn standard_gelu_model(approximate: Option<&str>, bias_len: usize) -> Model {
    let mut b = GraphBuilder::new("bias_gelu_20", 20);
    let a = hidden_input(&mut b, "a");
    let w = b.initializer("w", &seeded_f32(&[8, 8], 5));
    let mm = b.op("MatMul", &[a, w], vec![]);
    let bias = vector(&mut b, "bias", bias_len, 4);
    let t = b.op("Add", &[mm, bias], vec![]);
    let attrs = approximate
        .map(|v| attr::string("approximate", v))
        .into_iter()
        .collect();
    let y = b.op("Gelu", &[t], attrs);
    b.output(y, "y");
    b.build()
}

#[test]
fn the_standard_gelu_takes_its_bias_as_bias_gelu_or_fast_gelu() {
    for (approximate, fused) in [
        (None, "BiasGelu"),
        (Some("none"), "BiasGelu"),
        (Some("tanh"), "FastGelu"),
    ] {
        let m = standard_gelu_model(approximate, 8);
        let (opt, _) = fuse(&m, TRANSFORMER_RULES);
        assert_eq!(
            ops(&opt),
            counts(&[(fused, 1), ("MatMul", 1)]),
            "{approximate:?}"
        );
        let g = &opt.graph;
        let n = g
            .node_ids()
            .map(|id| g.node(id))
            .find(|n| n.op_type == fused)
            .unwrap();
        assert_eq!((n.domain.as_str(), n.inputs.len()), ("com.microsoft", 2));
        assert_parity(&m, &opt);
    }
    // A bias that broadcasts is not BiasGelu's B: the standard Gelu stays as it is.
    let m = standard_gelu_model(Some("tanh"), 1);
    let (opt, trace) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("Add", 1), ("Gelu", 1), ("MatMul", 1)]));
    assert!(trace.rejected.iter().any(|r| r.rule == "bias_gelu"));
}

// ---------------------------------------------------------------- FastGelu

#[derive(Clone, Copy, PartialEq)]
enum TanhForm {
    Pow,
    MulCube,
    HalfPlusHalfTanh,
    /// BLOOM's `tanh((x * √(2/π)) * (1 + (x * 0.044715) * x))`.
    Factored,
}

/// The tanh GELU on `x`, its constants stored as `dt`; returns (y, [cube, tanh]).
fn tanh_gelu(
    b: &mut GraphBuilder,
    x: ValueId,
    form: TanhForm,
    coeff: f32,
    dt: DType,
) -> (ValueId, Vec<ValueId>) {
    let scalar = |b: &mut GraphBuilder, name: &str, v: f32| scalar_as(b, name, v, dt);
    let k = scalar(b, "coeff", coeff);
    let c = scalar(b, "sqrt_2_over_pi", 0.797_884_6);
    let (cube, u) = if form == TanhForm::Factored {
        let kx = b.op("Mul", &[x, k], vec![]);
        let kxx = b.op("Mul", &[kx, x], vec![]);
        let one = scalar(b, "one_inner", 1.0);
        let d = b.op("Add", &[one, kxx], vec![]);
        let cx = b.op("Mul", &[x, c], vec![]);
        (kxx, b.op("Mul", &[cx, d], vec![]))
    } else {
        let cube = if form == TanhForm::MulCube {
            let sq = b.op("Mul", &[x, x], vec![]);
            b.op("Mul", &[sq, x], vec![])
        } else {
            let three = scalar(b, "three", 3.0);
            b.op("Pow", &[x, three], vec![])
        };
        let kc = b.op("Mul", &[k, cube], vec![]);
        let s = b.op("Add", &[x, kc], vec![]);
        (cube, b.op("Mul", &[s, c], vec![]))
    };
    let t = b.op("Tanh", &[u], vec![]);
    let half = scalar(b, "half", 0.5);
    let y = if form == TanhForm::HalfPlusHalfTanh {
        let ht = b.op("Mul", &[t, half], vec![]);
        let p = b.op("Add", &[half, ht], vec![]);
        b.op("Mul", &[x, p], vec![])
    } else {
        let one = scalar(b, "one", 1.0);
        let hx = b.op("Mul", &[x, half], vec![]);
        let p = b.op("Add", &[one, t], vec![]);
        b.op("Mul", &[hx, p], vec![])
    };
    (y, vec![cube, t])
}

fn fast_gelu_model(form: TanhForm, coeff: f32, bias: bool) -> (GraphBuilder, Vec<ValueId>) {
    let mut b = GraphBuilder::new("fast_gelu", 14);
    let mut x = hidden_input(&mut b, "x");
    if bias {
        let c = vector(&mut b, "bias", HIDDEN as usize, 6);
        x = b.op("Add", &[x, c], vec![]);
    }
    let (y, mids) = tanh_gelu(&mut b, x, form, coeff, DType::F32);
    b.output(y, "y");
    (b, mids)
}

#[test]
fn fast_gelu_fuses_every_tanh_form() {
    for form in [
        TanhForm::Pow,
        TanhForm::MulCube,
        TanhForm::HalfPlusHalfTanh,
        TanhForm::Factored,
    ] {
        let m = fast_gelu_model(form, 0.044715, false).0.build();
        let (opt, _) = fuse(&m, TRANSFORMER_RULES);
        assert_eq!(ops(&opt), counts(&[("FastGelu", 1)]));
        assert_eq!(only_node(&opt).inputs.len(), 1);
        assert_parity(&m, &opt);
    }
}

#[test]
fn fast_gelu_absorbs_a_bias() {
    let m = fast_gelu_model(TanhForm::Pow, 0.044715, true).0.build();
    let (opt, _) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("FastGelu", 1)]));
    assert_eq!(only_node(&opt).inputs.len(), 2);
    assert_parity(&m, &opt);
}

#[test]
fn fast_gelu_fuses_float16_with_its_rounded_constants() {
    // In a float16 model √(2/π) is 0.7978515625 and 0.044715 is 0.044708251953125: each is the
    // float16 nearest the constant, which `matchers::is_scalar` accepts for float16 constants.
    let mut b = GraphBuilder::new("fast_gelu16", 14);
    let x = b.input(
        "x",
        DType::F16,
        vec![sym("batch"), sym("seq"), Dim::Known(HIDDEN)],
    );
    let (y, _) = tanh_gelu(&mut b, x, TanhForm::Pow, 0.044715, DType::F16);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, TRANSFORMER_RULES);
    assert_eq!(ops(&opt), counts(&[("FastGelu", 1)]));
    assert_parity_within(&m, &opt, 1e-2);
}

#[test]
fn fast_gelu_rejects_a_float16_constant_off_by_more_than_its_rounding() {
    // 0.0449 is a different coefficient in float16 too (0.044891357421875, ~29 ulps away).
    let mut b = GraphBuilder::new("fast_gelu16", 14);
    let x = b.input("x", DType::F16, vec![Dim::Known(2), Dim::Known(HIDDEN)]);
    let (y, _) = tanh_gelu(&mut b, x, TanhForm::Pow, 0.0449, DType::F16);
    b.output(y, "y");
    assert_not_fused(&b.build(), &["fast_gelu"], "no constant operand 0.044715");
}

#[test]
fn fast_gelu_rejects_a_wrong_coefficient() {
    let m = fast_gelu_model(TanhForm::Pow, 0.05, false).0.build();
    assert_not_fused(&m, &["fast_gelu"], "no constant operand 0.044715");
}

/// BLOOM's factored form with another coefficient is another function; its x² read twice is
/// needed outside: neither fuses.
#[test]
fn fast_gelu_rejects_a_factored_form_that_is_not_gelu() {
    let m = fast_gelu_model(TanhForm::Factored, 0.05, false).0.build();
    assert_not_fused(&m, &["fast_gelu"], "no constant operand 0.797");
    let (mut b, mids) = fast_gelu_model(TanhForm::Factored, 0.044715, false);
    let extra = b.op("Neg", &[mids[0]], vec![]);
    b.output(extra, "square_neg");
    assert_not_fused(
        &b.build(),
        &["fast_gelu"],
        "is read outside the GELU pattern",
    );
}

#[test]
fn fast_gelu_rejects_an_intermediate_with_a_second_reader() {
    let (mut b, mids) = fast_gelu_model(TanhForm::Pow, 0.044715, false);
    let extra = b.op("Neg", &[mids[1]], vec![]);
    b.output(extra, "tanh_neg");
    assert_not_fused(&b.build(), &["fast_gelu"], "2 consumers");
}

#[test]
fn fast_gelu_rejects_an_intermediate_that_is_a_graph_output() {
    let (mut b, mids) = fast_gelu_model(TanhForm::Pow, 0.044715, false);
    b.output(mids[0], "cube");
    assert_not_fused(&b.build(), &["fast_gelu"], "read outside the GELU pattern");
}

#[test]
fn fusions_refuse_float64() {
    let mut b = GraphBuilder::new("gelu64", 14);
    let x = b.input("x", DType::F64, dims(&[2, 8]));
    let c = b.initializer(
        "sqrt2",
        &Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 2f64.sqrt())),
    );
    let s = b.op("Div", &[x, c], vec![]);
    let e = b.op("Erf", &[s], vec![]);
    let one = b.initializer("one", &Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 1.0)));
    let p = b.op("Add", &[e, one], vec![]);
    let half = b.initializer("half", &Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 0.5)));
    let xp = b.op("Mul", &[x, p], vec![]);
    let y = b.op("Mul", &[xp, half], vec![]);
    b.output(y, "y");
    assert_not_fused(&b.build(), &["gelu"], "takes float32 and float16");
}

#[test]
fn a_one_element_constant_of_higher_rank_is_not_a_scalar() {
    // 0.5 as [1, 1, 1] broadcasts the rank-2 x to rank 3; a fused Gelu would give rank 2.
    // Only rank-0 constants count as the pattern's scalars.
    let mut b = GraphBuilder::new("gelu_rank", 14);
    let x = b.input("x", DType::F32, dims(&[2, 8]));
    let c = scalar(&mut b, "sqrt2", std::f32::consts::SQRT_2);
    let s = b.op("Div", &[x, c], vec![]);
    let e = b.op("Erf", &[s], vec![]);
    let one = scalar(&mut b, "one", 1.0);
    let p = b.op("Add", &[e, one], vec![]);
    let xp = b.op("Mul", &[x, p], vec![]);
    let half = b.initializer(
        "half",
        &Tensor::F32(ArrayD::from_elem(IxDyn(&[1, 1, 1]), 0.5)),
    );
    let y = b.op("Mul", &[xp, half], vec![]);
    b.output(y, "y");
    let m = b.build();
    assert_eq!(m.graph.value(y).ty.rank(), Some(3));
    assert_not_fused(&m, &["gelu"], "not by x or 0.5");
}
