//! `hard_swish_clip`: `x · Clip(x + 3, 0, 6) / 6` → HardSwish (opset ≥ 14) or
//! `x · HardSigmoid(x, 1/6, 0.5)` (below 14), on hand-built graphs: exact op counts, values over
//! the whole range (both saturated ends and the ramp), and the forms that must not fuse.

mod common;

use std::collections::HashMap;

use common::{assert_rejected, counts, fuse, ops};
use fuselab::builder::{sym, GraphBuilder};
use fuselab::ir::types::Dim;
use fuselab::ir::{attr, Model, ValueId};
use fuselab::runtime::reference::Executor;
use fuselab::{DType, Limits, Tensor};
use half::f16;
use ndarray::{ArrayD, IxDyn};

/// Where the ops sit relative to the Clip.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// `Div(Mul(x, r), 6)`: paddle2onnx's order.
    MulThenDiv,
    /// `Mul(x, Div(r, 6))`.
    DivThenMul,
    /// `Mul(Mul(r, x), 1/6)`, operands swapped.
    MulThenSixth,
}

const FORMS: [Form; 3] = [Form::MulThenDiv, Form::DivThenMul, Form::MulThenSixth];

struct Spec {
    opset: i64,
    dtype: DType,
    form: Form,
    add: f32,
    lo: f32,
    hi: f32,
    /// The dims of the 3 and the 6 (`[]`; paddle2onnx writes `[1]`).
    dims: &'static [usize],
}

impl Spec {
    fn new(opset: i64, form: Form) -> Spec {
        Spec {
            opset,
            dtype: DType::F32,
            form,
            add: 3.0,
            lo: 0.0,
            hi: 6.0,
            dims: &[],
        }
    }
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32, dtype: DType) -> ValueId {
    splat(b, name, v, dtype, &[])
}

/// A one-element constant of shape `dims`.
fn splat(b: &mut GraphBuilder, name: &str, v: f32, dtype: DType, dims: &[usize]) -> ValueId {
    let t = match dtype {
        DType::F16 => Tensor::F16(ArrayD::from_elem(IxDyn(dims), f16::from_f32(v))),
        _ => Tensor::F32(ArrayD::from_elem(IxDyn(dims), v)),
    };
    b.initializer(name, &t)
}

/// The spelled-out hard-swish; `extra_reader` also makes the Clip's output a graph output.
fn model(s: &Spec, extra_reader: bool) -> Model {
    let mut b = GraphBuilder::new("hswish_clip", s.opset);
    let x = b.input("x", s.dtype, vec![sym("batch"), sym("seq"), Dim::Known(8)]);
    let three = splat(&mut b, "three", s.add, s.dtype, s.dims);
    let u = b.op("Add", &[three, x], vec![]);
    let r = if s.opset < 11 {
        let bounds = vec![attr::float("min", s.lo), attr::float("max", s.hi)];
        b.op("Clip", &[u], bounds)
    } else {
        let lo = scalar(&mut b, "lo", s.lo, s.dtype);
        let hi = scalar(&mut b, "hi", s.hi, s.dtype);
        b.op("Clip", &[u, lo, hi], vec![])
    };
    let y = match s.form {
        Form::MulThenDiv => {
            let six = splat(&mut b, "six", 6.0, s.dtype, s.dims);
            let m = b.op("Mul", &[x, r], vec![]);
            b.op("Div", &[m, six], vec![])
        }
        Form::DivThenMul => {
            let six = scalar(&mut b, "six", 6.0, s.dtype);
            let d = b.op("Div", &[r, six], vec![]);
            b.op("Mul", &[x, d], vec![])
        }
        Form::MulThenSixth => {
            let sixth = scalar(&mut b, "sixth", 1.0 / 6.0, s.dtype);
            let m = b.op("Mul", &[r, x], vec![]);
            b.op("Mul", &[sixth, m], vec![])
        }
    };
    b.output(y, "y");
    if extra_reader {
        b.output(r, "relu6");
    }
    b.build()
}

/// Runs `m` on x = [-8, 8) in steps of 1/16 (256 values, both saturated ends and the ramp).
fn run(m: &Model, dtype: DType) -> Vec<f64> {
    let xs: Vec<f32> = (0..256).map(|i| i as f32 / 16.0 - 8.0).collect();
    let a = ArrayD::from_shape_vec(IxDyn(&[2, 16, 8]), xs).unwrap();
    let x = match dtype {
        DType::F16 => Tensor::F16(a.mapv(f16::from_f32)),
        _ => Tensor::F32(a),
    };
    let inputs = HashMap::from([("x".to_string(), x)]);
    let out = Executor::new(m, &Limits::default())
        .expect("plan")
        .run(&inputs)
        .expect("run");
    out[0].1.to_f64_vec()
}

/// Both models agree with x·min(max(x + 3, 0), 6)/6 within `tol` everywhere on the grid.
fn assert_hard_swish(before: &Model, after: &Model, dtype: DType, tol: f64) {
    let xs = (0..256).map(|i| i as f64 / 16.0 - 8.0);
    let want: Vec<f64> = xs.map(|x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0).collect();
    for m in [before, after] {
        let got = run(m, dtype);
        let worst = want
            .iter()
            .zip(&got)
            .map(|(w, g)| (w - g).abs())
            .fold(0.0, f64::max);
        assert!(worst <= tol, "max |diff| {worst} > {tol}");
    }
}

#[test]
fn fuses_to_hard_swish_at_opset_14_in_every_form() {
    for form in FORMS {
        let m = model(&Spec::new(17, form), false);
        assert_eq!(m.graph.node_count(), 4);
        let (opt, trace) = fuse(&m, &["hard_swish_clip"]);
        assert_eq!(ops(&opt), counts(&[("HardSwish", 1)]), "{form:?}");
        assert_eq!(trace.rewrites.len(), 1);
        assert_hard_swish(&m, &opt, DType::F32, 1e-6);
    }
}

#[test]
fn below_opset_14_it_writes_hard_sigmoid_times_x() {
    // Opset 12 (PaddleOCR v4) reads the bounds from inputs, opset 10 from attributes.
    for opset in [10, 12, 13] {
        for form in FORMS {
            let m = model(&Spec::new(opset, form), false);
            let (opt, _) = fuse(&m, &["hard_swish_clip"]);
            assert_eq!(
                ops(&opt),
                counts(&[("HardSigmoid", 1), ("Mul", 1)]),
                "opset {opset} {form:?}"
            );
            let hs = opt
                .graph
                .node_ids()
                .map(|id| opt.graph.node(id))
                .find(|n| n.op_type == "HardSigmoid")
                .unwrap();
            assert_eq!(hs.attr_float("alpha"), Some(1.0 / 6.0));
            assert_eq!(hs.attr_float("beta"), Some(0.5));
            assert_eq!(opt.opset(""), Some(opset), "the import is not raised");
            assert_hard_swish(&m, &opt, DType::F32, 1e-6);
        }
    }
}

#[test]
fn float16_fuses_at_opset_14_only() {
    let mut s = Spec::new(17, Form::MulThenDiv);
    s.dtype = DType::F16;
    let m = model(&s, false);
    let (opt, _) = fuse(&m, &["hard_swish_clip"]);
    assert_eq!(ops(&opt), counts(&[("HardSwish", 1)]));
    // float16 rounds |y| ≤ 8 to 2^-8; the two forms round at different steps.
    assert_hard_swish(&m, &opt, DType::F16, 1e-2);

    // onnxruntime's CPU HardSigmoid is float32 only.
    s.opset = 13;
    assert_rejected(&model(&s, false), &["hard_swish_clip"], "f32 only");
}

#[test]
fn one_element_constants_fuse_unless_they_broadcast() {
    // paddle2onnx's [1]-shaped 3 and 6 against a rank-3 x change no shape.
    let mut s = Spec::new(12, Form::MulThenDiv);
    s.dims = &[1];
    let m = model(&s, false);
    let (opt, _) = fuse(&m, &["hard_swish_clip"]);
    assert_eq!(ops(&opt), counts(&[("HardSigmoid", 1), ("Mul", 1)]));
    assert_hard_swish(&m, &opt, DType::F32, 1e-6);
    // A [1, 1, 1, 1] constant makes the rank-3 x rank 4: y's shape is not x's.
    s.dims = &[1, 1, 1, 1];
    let m = model(&s, false);
    let (opt, trace) = fuse(&m, &["hard_swish_clip"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty());
}

#[test]
fn other_constants_are_another_function() {
    // ReLU6 of x + 2, or a Clip to [0, 5] or [-1, 6], is not hard-swish.
    let mut s = Spec::new(17, Form::MulThenDiv);
    s.add = 2.0;
    let m = model(&s, false);
    let (opt, trace) = fuse(&m, &["hard_swish_clip"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(
        trace.rewrites.is_empty() && trace.rejected.is_empty(),
        "not a candidate"
    );

    for (lo, hi) in [(0.0, 5.0), (-1.0, 6.0)] {
        let mut s = Spec::new(17, Form::DivThenMul);
        (s.lo, s.hi) = (lo, hi);
        assert_rejected(&model(&s, false), &["hard_swish_clip"], "ReLU6 has 0 and 6");
    }
}

#[test]
fn a_clip_read_elsewhere_stays() {
    // The ReLU6 is also a graph output: removing it would lose a value someone reads.
    let m = model(&Spec::new(17, Form::MulThenDiv), true);
    assert_rejected(&m, &["hard_swish_clip"], "graph output");
}

/// `x`, `relu6(x + 3)` and `divisor` in a new opset-17 graph with x of shape [batch, 8]: what
/// the hand-made variants below build on.
fn relu6_of_x_plus_3(b: &mut GraphBuilder, divisor: f32) -> (ValueId, ValueId, ValueId) {
    let x = b.input("x", DType::F32, vec![sym("batch"), Dim::Known(8)]);
    let three = scalar(b, "three", 3.0, DType::F32);
    let lo = scalar(b, "lo", 0.0, DType::F32);
    let hi = scalar(b, "hi", 6.0, DType::F32);
    let d = scalar(b, "divisor", divisor, DType::F32);
    let u = b.op("Add", &[x, three], vec![]);
    (x, b.op("Clip", &[u, lo, hi], vec![]), d)
}

#[test]
fn a_product_with_another_value_is_no_hard_swish() {
    // z · Clip(x + 3, 0, 6) / 6: the gate reads x, the product another input.
    let mut b = GraphBuilder::new("gate", 17);
    let (_, r, six) = relu6_of_x_plus_3(&mut b, 6.0);
    let z = b.input("z", DType::F32, vec![sym("batch"), Dim::Known(8)]);
    let m = b.op("Mul", &[z, r], vec![]);
    let y = b.op("Div", &[m, six], vec![]);
    b.output(y, "y");
    let m = b.build();
    let (opt, trace) = fuse(&m, &["hard_swish_clip"]);
    assert_eq!(ops(&opt), ops(&m));
    assert!(trace.rewrites.is_empty() && trace.rejected.is_empty());
}

#[test]
fn dividing_by_another_constant_is_rejected() {
    // x · relu6(x + 3) / 3 is twice hard-swish: the last node must divide by 6.
    let mut b = GraphBuilder::new("third", 17);
    let (x, r, three) = relu6_of_x_plus_3(&mut b, 3.0);
    let m = b.op("Mul", &[x, r], vec![]);
    let y = b.op("Div", &[m, three], vec![]);
    b.output(y, "y");
    assert_rejected(&b.build(), &["hard_swish_clip"], "not a division by 6");
}
