//! The `rms_norm` fusion (decomposed RMS norm → SimplifiedLayerNormalization / RMSNormalization)
//! and `skip_layer_norm` on its output (→ SkipSimplifiedLayerNormalization), on hand-built
//! graphs in each exporter's spelling: exact op counts, parity with the unfused graph, and the
//! cases that must not fuse, with the reason the report gives.

mod common;

use common::{assert_parity_within, assert_rejected, counts, fuse, ops, seeded_f32};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};

const HIDDEN: usize = 8;
const TOL: f64 = 1e-5;
/// float16 outputs: the fused op rounds once where the pattern rounds before the weight Mul.
const TOL_F16: f64 = 1e-2;

#[derive(Clone, Copy, PartialEq)]
enum Square {
    Pow,
    MulSelf,
}

#[derive(Clone, Copy, PartialEq)]
enum Inverse {
    /// transformers' legacy exporter: `Mul(x, Div(1, Sqrt(·)))`.
    DivOne,
    /// torch dynamo: `Mul(x, Reciprocal(Sqrt(·)))`.
    Reciprocal,
    /// `Div(x, Sqrt(·))`.
    DivX,
}

#[derive(Clone, Copy)]
struct Spec {
    square: Square,
    inverse: Inverse,
    weight: bool,
    /// The input's type; float16 gets the Cast(f32) … Cast(f16) sandwich.
    dtype: DType,
    axis: i64,
    eps_const: bool,
    /// ReduceMean's axes as an input (opset 18 on) rather than an attribute.
    axes_input: bool,
}

const LLAMA: Spec = Spec {
    square: Square::Pow,
    inverse: Inverse::DivOne,
    weight: true,
    dtype: DType::F32,
    axis: -1,
    eps_const: true,
    axes_input: false,
};

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> ValueId {
    b.initializer(name, &Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v)))
}

fn hidden_input(b: &mut GraphBuilder, name: &str, dtype: DType) -> ValueId {
    b.input(
        name,
        dtype,
        vec![sym("batch"), sym("seq"), Dim::Known(HIDDEN as i64)],
    )
}

/// The decomposed RMS norm of `x` (f32 arithmetic; a float16 `x` is cast in and out); returns
/// (y, the values between: [square, mean square, + eps, rms, normalized]).
fn decomposed_rms(b: &mut GraphBuilder, x: ValueId, spec: Spec) -> (ValueId, Vec<ValueId>) {
    let tag = x.0;
    let f16 = spec.dtype == DType::F16;
    let xf = if f16 {
        b.op("Cast", &[x], vec![attr::int("to", 1)])
    } else {
        x
    };
    let sq = match spec.square {
        Square::Pow => {
            let two = scalar(b, &format!("two_{tag}"), 2.0);
            b.op("Pow", &[xf, two], vec![])
        }
        Square::MulSelf => b.op("Mul", &[xf, xf], vec![]),
    };
    let ms = if spec.axes_input {
        let axes = Tensor::I64(ArrayD::from_elem(IxDyn(&[1]), spec.axis));
        let axes = b.initializer(&format!("axes_{tag}"), &axes);
        b.op("ReduceMean", &[sq, axes], vec![])
    } else {
        b.op("ReduceMean", &[sq], vec![attr::ints("axes", &[spec.axis])])
    };
    let eps = if spec.eps_const {
        scalar(b, &format!("eps_{tag}"), 1e-6)
    } else {
        b.input("eps", DType::F32, vec![])
    };
    let ve = b.op("Add", &[ms, eps], vec![]);
    let rms = b.op("Sqrt", &[ve], vec![]);
    let n = match spec.inverse {
        Inverse::DivOne => {
            let one = scalar(b, &format!("one_{tag}"), 1.0);
            let r = b.op("Div", &[one, rms], vec![]);
            b.op("Mul", &[xf, r], vec![])
        }
        Inverse::Reciprocal => {
            let r = b.op("Reciprocal", &[rms], vec![]);
            b.op("Mul", &[r, xf], vec![])
        }
        Inverse::DivX => b.op("Div", &[xf, rms], vec![]),
    };
    let n = if f16 {
        b.op("Cast", &[n], vec![attr::int("to", 10)])
    } else {
        n
    };
    let mut y = n;
    if spec.weight {
        let w = seeded_f32(&[HIDDEN], 5 + tag);
        let w = w.cast(spec.dtype).unwrap();
        let w = b.initializer(&format!("weight_{tag}"), &w);
        y = b.op("Mul", &[w, n], vec![]);
    }
    (y, vec![sq, ms, ve, rms, n])
}

fn rms_model(opset: i64, spec: Spec) -> (GraphBuilder, Vec<ValueId>) {
    let mut b = GraphBuilder::new("rms", opset);
    let x = hidden_input(&mut b, "x", spec.dtype);
    let (y, mids) = decomposed_rms(&mut b, x, spec);
    b.output(y, "y");
    (b, mids)
}

fn only_node(m: &Model) -> &fuselab::ir::Node {
    let id = m.graph.node_ids().next().unwrap();
    m.graph.node(id)
}

#[test]
fn rms_norm_fuses_every_exporters_spelling() {
    for square in [Square::Pow, Square::MulSelf] {
        for inverse in [Inverse::DivOne, Inverse::Reciprocal, Inverse::DivX] {
            let spec = Spec {
                square,
                inverse,
                ..LLAMA
            };
            let m = rms_model(17, spec).0.build();
            let (opt, trace) = fuse(&m, &["rms_norm"]);
            let before = if inverse == Inverse::DivX { 6 } else { 7 };
            assert_eq!(m.graph.node_count(), before);
            assert_eq!(ops(&opt), counts(&[("SimplifiedLayerNormalization", 1)]));
            assert_eq!(trace.rewrites[0].removed.len(), before);
            let n = only_node(&opt);
            assert_eq!(n.domain, "");
            assert_eq!(n.attr_float("epsilon"), Some(1e-6));
            assert_eq!(n.attr_int("axis"), Some(-1));
            assert_eq!(n.inputs.len(), 2);
            assert_parity_within(&m, &opt, TOL);
        }
    }
}

#[test]
fn rms_norm_without_weight_gets_a_ones_scale() {
    let spec = Spec {
        weight: false,
        ..LLAMA
    };
    let m = rms_model(17, spec).0.build();
    let (opt, _) = fuse(&m, &["rms_norm"]);
    assert_eq!(ops(&opt), counts(&[("SimplifiedLayerNormalization", 1)]));
    let scale = only_node(&opt).input(1).unwrap();
    let t = opt.graph.constant(scale).unwrap();
    assert_eq!(t.dims, vec![HIDDEN as i64]);
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn rms_norm_absorbs_the_float16_cast_sandwich() {
    let spec = Spec {
        dtype: DType::F16,
        ..LLAMA
    };
    let m = rms_model(17, spec).0.build();
    assert_eq!(m.graph.node_count(), 9);
    let (opt, _) = fuse(&m, &["rms_norm"]);
    assert_eq!(ops(&opt), counts(&[("SimplifiedLayerNormalization", 1)]));
    let n = only_node(&opt);
    let x = n.input(0).unwrap();
    assert_eq!(opt.graph.name(x), "x");
    assert_eq!(opt.graph.value(x).ty.dtype, Some(DType::F16));
    assert_parity_within(&m, &opt, TOL_F16);
}

#[test]
fn rms_norm_keeps_a_front_cast_that_nothing_undoes() {
    // float16 in, float32 out (no Cast back): the norm starts at the Cast's float32 output, and
    // the float16 weight of the sandwich form does not apply.
    let mut b = GraphBuilder::new("rms", 17);
    let x = hidden_input(&mut b, "x", DType::F16);
    let xf = b.op("Cast", &[x], vec![attr::int("to", 1)]);
    let two = scalar(&mut b, "two", 2.0);
    let sq = b.op("Pow", &[xf, two], vec![]);
    let ms = b.op("ReduceMean", &[sq], vec![attr::ints("axes", &[-1])]);
    let eps = scalar(&mut b, "eps", 1e-6);
    let ve = b.op("Add", &[ms, eps], vec![]);
    let rms = b.op("Sqrt", &[ve], vec![]);
    let y = b.op("Div", &[xf, rms], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, &["rms_norm"]);
    assert_eq!(
        ops(&opt),
        counts(&[("Cast", 1), ("SimplifiedLayerNormalization", 1)])
    );
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn rms_norm_at_opset_23_is_the_standard_rmsnormalization() {
    let spec = Spec {
        axes_input: true,
        ..LLAMA
    };
    let m = rms_model(23, spec).0.build();
    let (opt, _) = fuse(&m, &["rms_norm"]);
    assert_eq!(ops(&opt), counts(&[("RMSNormalization", 1)]));
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn rms_norm_leaves_a_weight_that_is_not_a_hidden_vector() {
    // A [1, HIDDEN] weight broadcasts like the vector here, but the fused op's scale must be 1-D
    // of the hidden size: the Mul stays, the norm still fuses.
    let spec = Spec {
        weight: false,
        ..LLAMA
    };
    let mut b = GraphBuilder::new("rms", 17);
    let x = hidden_input(&mut b, "x", DType::F32);
    let (y, _) = decomposed_rms(&mut b, x, spec);
    let w = b.initializer("w2", &seeded_f32(&[1, HIDDEN], 9));
    let z = b.op("Mul", &[y, w], vec![]);
    b.output(z, "z");
    let m = b.build();
    let (opt, _) = fuse(&m, &["rms_norm"]);
    assert_eq!(
        ops(&opt),
        counts(&[("Mul", 1), ("SimplifiedLayerNormalization", 1)])
    );
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn rms_norm_rejects_a_reduction_over_another_axis() {
    let spec = Spec { axis: 1, ..LLAMA };
    assert_rejected(
        &rms_model(17, spec).0.build(),
        &["rms_norm"],
        "not only the last axis",
    );
}

#[test]
fn rms_norm_rejects_a_non_constant_epsilon() {
    let spec = Spec {
        eps_const: false,
        ..LLAMA
    };
    assert_rejected(
        &rms_model(17, spec).0.build(),
        &["rms_norm"],
        "epsilon 'eps' is not a constant",
    );
}

#[test]
fn rms_norm_rejects_an_intermediate_with_a_second_reader() {
    let (mut b, mids) = rms_model(17, LLAMA);
    let extra = b.op("Neg", &[mids[1]], vec![]);
    b.output(extra, "ms_neg");
    assert_rejected(&b.build(), &["rms_norm"], "2 consumers");
}

#[test]
fn rms_norm_rejects_float64() {
    // Statistics in float64 need stash_type 11, which onnxruntime's CPU kernel does not have.
    let mut b = GraphBuilder::new("rms", 17);
    let x = hidden_input(&mut b, "x", DType::F64);
    let two = b.initializer("two", &Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 2.0)));
    let sq = b.op("Pow", &[x, two], vec![]);
    let ms = b.op("ReduceMean", &[sq], vec![attr::ints("axes", &[-1])]);
    let eps = b.initializer("eps", &Tensor::F64(ArrayD::from_elem(IxDyn(&[]), 1e-6)));
    let ve = b.op("Add", &[ms, eps], vec![]);
    let rms = b.op("Sqrt", &[ve], vec![]);
    let y = b.op("Div", &[x, rms], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["rms_norm"], "float32 and float16");
}

#[test]
fn rms_norm_leaves_the_inside_of_a_layer_norm_to_layer_norm() {
    // (x - mean) → Pow 2 → ReduceMean → Add eps → Sqrt → Div(d, ·) is an RMS norm of d, but
    // fusing it would hide the LayerNormalization around it.
    let mut b = GraphBuilder::new("ln", 17);
    let x = hidden_input(&mut b, "x", DType::F32);
    let m1 = b.op("ReduceMean", &[x], vec![attr::ints("axes", &[-1])]);
    let d = b.op("Sub", &[x, m1], vec![]);
    let two = scalar(&mut b, "two", 2.0);
    let p = b.op("Pow", &[d, two], vec![]);
    let v = b.op("ReduceMean", &[p], vec![attr::ints("axes", &[-1])]);
    let eps = scalar(&mut b, "eps", 1e-5);
    let ve = b.op("Add", &[v, eps], vec![]);
    let s = b.op("Sqrt", &[ve], vec![]);
    let y = b.op("Div", &[d, s], vec![]);
    b.output(y, "y");
    let m = b.build();
    assert_rejected(&m, &["rms_norm"], "the inside of a LayerNormalization");
    let (opt, _) = fuse(&m, &["layer_norm", "rms_norm"]);
    assert_eq!(ops(&opt), counts(&[("LayerNormalization", 1)]));
}

#[test]
fn a_cube_is_no_rms_norm() {
    let mut b = GraphBuilder::new("cube", 17);
    let x = hidden_input(&mut b, "x", DType::F32);
    let three = scalar(&mut b, "three", 3.0);
    let p = b.op("Pow", &[x, three], vec![]);
    let ms = b.op("ReduceMean", &[p], vec![attr::ints("axes", &[-1])]);
    let eps = scalar(&mut b, "eps", 1e-6);
    let ve = b.op("Add", &[ms, eps], vec![]);
    let rms = b.op("Sqrt", &[ve], vec![]);
    let y = b.op("Div", &[x, rms], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, trace) = fuse(&m, &["rms_norm"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty() && trace.rejected.is_empty());
}

/// A pre-norm decoder's two residual steps: h1 = x + f(norm(x)), h2 = h1 + g(norm(h1)); the
/// output reads norm(h2) and h2. Returns the model and the number of nodes.
fn pre_norm_blocks(dtype: DType) -> Model {
    let spec = Spec { dtype, ..LLAMA };
    let mut b = GraphBuilder::new("decoder", 17);
    let x = hidden_input(&mut b, "x", dtype);
    let (n0, _) = decomposed_rms(&mut b, x, spec);
    let f = b.op("Tanh", &[n0], vec![]);
    let h1 = b.op("Add", &[x, f], vec![]);
    let (n1, _) = decomposed_rms(&mut b, h1, spec);
    let g = b.op("Sigmoid", &[n1], vec![]);
    let h2 = b.op("Add", &[h1, g], vec![]);
    let (n2, _) = decomposed_rms(&mut b, h2, spec);
    b.output(n2, "y");
    b.output(h2, "h2");
    b.build()
}

#[test]
fn residual_add_and_rms_norm_become_skip_simplified_layer_norm() {
    let m = pre_norm_blocks(DType::F32);
    let (opt, _) = fuse(&m, &["rms_norm", "skip_layer_norm"]);
    assert_eq!(
        ops(&opt),
        counts(&[
            ("Sigmoid", 1),
            ("SimplifiedLayerNormalization", 1),
            ("SkipSimplifiedLayerNormalization", 2),
            ("Tanh", 1),
        ])
    );
    // Both residual sums have other readers (the next residual Add; the graph output h2), so
    // both fused nodes write them out as input_skip_bias_sum.
    let mut sums = Vec::new();
    for id in opt.graph.node_ids() {
        let n = opt.graph.node(id);
        if n.op_type == "SkipSimplifiedLayerNormalization" {
            assert_eq!(n.domain, "com.microsoft");
            assert_eq!(n.inputs.len(), 3, "input, skip, gamma");
            sums.push(opt.graph.name(n.output(3).expect("input_skip_bias_sum")));
        }
    }
    assert_eq!(sums.len(), 2);
    assert!(sums.contains(&"h2"), "{sums:?}");
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn skip_simplified_layer_norm_absorbs_a_bias_add() {
    let mut b = GraphBuilder::new("bias", 17);
    let x = hidden_input(&mut b, "x", DType::F32);
    let a = hidden_input(&mut b, "a", DType::F32);
    let bias = b.initializer("bias", &seeded_f32(&[HIDDEN], 11));
    let ab = b.op("Add", &[a, bias], vec![]);
    let h = b.op("Add", &[x, ab], vec![]);
    let (y, _) = decomposed_rms(&mut b, h, LLAMA);
    b.output(y, "y");
    let m = b.build();
    let (opt, _) = fuse(&m, &["rms_norm", "skip_layer_norm"]);
    assert_eq!(
        ops(&opt),
        counts(&[("SkipSimplifiedLayerNormalization", 1)])
    );
    let n = only_node(&opt);
    assert_eq!(n.inputs.len(), 4, "input, skip, gamma, bias");
    assert_eq!(n.outputs.len(), 1, "the sum has no other reader");
    assert_parity_within(&m, &opt, TOL);
}

#[test]
fn float16_pre_norm_blocks_fuse_like_float32_ones() {
    // The mixed-precision export: float16 residual stream, each norm Cast to float32 and back.
    let m = pre_norm_blocks(DType::F16);
    let (opt, _) = fuse(&m, &["rms_norm", "skip_layer_norm"]);
    assert_eq!(
        ops(&opt),
        counts(&[
            ("Sigmoid", 1),
            ("SimplifiedLayerNormalization", 1),
            ("SkipSimplifiedLayerNormalization", 2),
            ("Tanh", 1),
        ])
    );
    assert_parity_within(&m, &opt, TOL_F16);
}

#[test]
fn skip_simplified_layer_norm_refuses_float64() {
    let mut b = GraphBuilder::new("f64", 17);
    let x = hidden_input(&mut b, "x", DType::F64);
    let s = hidden_input(&mut b, "s", DType::F64);
    let h = b.op("Add", &[x, s], vec![]);
    let w = b.initializer("w", &seeded_f32(&[HIDDEN], 3).cast(DType::F64).unwrap());
    let y = b.op(
        "SimplifiedLayerNormalization",
        &[h, w],
        vec![attr::float("epsilon", 1e-6)],
    );
    b.output(y, "y");
    assert_rejected(
        &b.build(),
        &["skip_layer_norm"],
        "takes float32 and float16",
    );
}
