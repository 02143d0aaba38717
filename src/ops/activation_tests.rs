//! Unit tests of activation.rs. Expected values are worked by hand or from the spec's formula
//! in float64 (Python's math module), never from these kernels.

use super::super::common::test_util::*;
use super::*;
use crate::ir::attr;
use crate::onnx::proto::AttributeProto;

/// Runs the kernel the registry gives a default-domain `op` node with `attrs` at `opset`.
fn run_op(
    op: &str,
    attrs: Vec<AttributeProto>,
    opset: i64,
    inputs: &[Option<&Tensor>],
) -> Result<Tensor, String> {
    let n = node(op, attrs);
    let k = crate::ops::resolve(&n, opset)
        .map_err(|e| e.to_string())?
        .kernel();
    run_at(k, &n, opset, inputs).map(|mut v| v.remove(0))
}

fn one(op: &str, attrs: Vec<AttributeProto>, x: &Tensor) -> Result<Tensor, String> {
    run_op(op, attrs, 24, &[Some(x)])
}

#[test]
fn clip_bounds_from_attributes_before_11() {
    let x = f32s(&[3], &[-2., 0.5, 2.]);
    let attrs = vec![attr::float("min", -1.), attr::float("max", 1.)];
    let y = run_op("Clip", attrs, 6, &[Some(&x)]).unwrap();
    assert_eq!(y, f32s(&[3], &[-1., 0.5, 1.]));
    // The defaults are +-FLT_MAX: infinities clip to them, NaN stays.
    let x = f64s(&[3], &[f64::INFINITY, f64::NEG_INFINITY, 3.]);
    let y = run_op("Clip", vec![], 6, &[Some(&x)]).unwrap();
    let m = f32::MAX as f64;
    assert_eq!(y, f64s(&[3], &[m, -m, 3.]));
    // At 11 the attributes mean nothing: no bounds, nothing clipped.
    let x = f32s(&[2], &[-5., 5.]);
    let attrs = vec![attr::float("min", -1.), attr::float("max", 1.)];
    let y = run_op("Clip", attrs, 11, &[Some(&x)]).unwrap();
    assert_eq!(y, x);
}

#[test]
fn clip_bounds_from_inputs_from_11() {
    let x = f32s(&[3], &[-2., 0., 2.]);
    let (lo, hi) = (f32s(&[], &[-1.]), f32s(&[], &[1.]));
    let y = run_op("Clip", vec![], 13, &[Some(&x), Some(&lo), Some(&hi)]).unwrap();
    assert_eq!(y, f32s(&[3], &[-1., 0., 1.]));
    // Only a max (min omitted); a bound of shape [1] is accepted as a scalar.
    let zero = f32s(&[1], &[0.]);
    let y = run_op("Clip", vec![], 13, &[Some(&x), None, Some(&zero)]).unwrap();
    assert_eq!(y, f32s(&[3], &[-2., 0., 0.]));
    // min > max: every element becomes max (numpy's clip).
    let (lo, hi) = (f32s(&[], &[2.]), f32s(&[], &[1.]));
    let y = run_op("Clip", vec![], 13, &[Some(&x), Some(&lo), Some(&hi)]).unwrap();
    assert_eq!(y, f32s(&[3], &[1., 1., 1.]));
    let nan = f32s(&[1], &[f32::NAN]);
    let y = run_op("Clip", vec![], 13, &[Some(&nan), Some(&lo)]).unwrap();
    assert!(y.to_f64_vec()[0].is_nan());
    // Integer types (12).
    let x = i32s(&[3], &[-5, 3, 9]);
    let (lo, hi) = (i32s(&[], &[0]), i32s(&[], &[4]));
    let y = run_op("Clip", vec![], 12, &[Some(&x), Some(&lo), Some(&hi)]).unwrap();
    assert_eq!(y, i32s(&[3], &[0, 3, 4]));
    let x = i64s(&[2], &[-5, 9]);
    let y = run_op("Clip", vec![], 13, &[Some(&x), Some(&i64s(&[], &[-1]))]).unwrap();
    assert_eq!(y, i64s(&[2], &[-1, 9]));
}

#[test]
fn clip_rejects_bad_bounds_and_types() {
    let x = f32s(&[3], &[-2., 0., 2.]);
    let two = f32s(&[2], &[0., 1.]);
    let e = run_op("Clip", vec![], 13, &[Some(&x), Some(&two)]).unwrap_err();
    assert_eq!(e, "Clip: 'min' must be a scalar, got shape [2]");
    let e = run_op("Clip", vec![], 13, &[Some(&x), None, Some(&two)]).unwrap_err();
    assert_eq!(e, "Clip: 'max' must be a scalar, got shape [2]");
    let d = f64s(&[], &[0.]);
    let e = run_op("Clip", vec![], 13, &[Some(&x), Some(&d)]).unwrap_err();
    assert_eq!(e, "Clip: input types differ: float32 and float64");
    let b = bools(&[1], &[true]);
    let e = run_op("Clip", vec![], 13, &[Some(&b)]).unwrap_err();
    assert_eq!(e, "Clip: element type bool is not supported");
    let e = run_op("Clip", vec![attr::int("min", 0)], 6, &[Some(&x)]).unwrap_err();
    assert!(e.contains("attribute 'min' has the wrong type"), "{e}");
}

#[test]
fn relu_family() {
    let x = f32s(&[3], &[-2., 0., 3.]);
    assert_close(
        &one("LeakyRelu", vec![], &x).unwrap(),
        &f32s(&[3], &[-0.02, 0., 3.]),
        1e-7,
    );
    let y = one("LeakyRelu", vec![attr::float("alpha", 0.5)], &x).unwrap();
    assert_eq!(y, f32s(&[3], &[-1., 0., 3.]));
    let xd = f64s(&[3], &[-2., 0., 3.]);
    let y = one("LeakyRelu", vec![attr::float("alpha", 0.5)], &xd).unwrap();
    assert_eq!(y, f64s(&[3], &[-1., 0., 3.]));
    let x = f32s(&[3], &[0.5, 1., 1.5]);
    assert_eq!(
        one("ThresholdedRelu", vec![], &x).unwrap(),
        f32s(&[3], &[0., 0., 1.5])
    );
    let x = f32s(&[3], &[-2., -0.5, 0.]);
    let y = one("ThresholdedRelu", vec![attr::float("alpha", -1.)], &x).unwrap();
    assert_eq!(y, f32s(&[3], &[0., -0.5, 0.]));
}

#[test]
fn exponential_units() {
    let em1 = -0.632_120_558_828_557_7_f64; // exp(-1) - 1
    let x = f64s(&[3], &[-1., 0., 1.]);
    let y = one("Elu", vec![attr::float("alpha", 2.)], &x).unwrap();
    assert_close(&y, &f64s(&[3], &[2. * em1, 0., 1.]), 1e-15);
    let y = one("Elu", vec![], &x).unwrap();
    assert_close(&y, &f64s(&[3], &[em1, 0., 1.]), 1e-15);

    // Selu's defaults: gamma * alpha * (exp(-1) - 1), gamma * 2.
    let x = f32s(&[3], &[-1., 0., 2.]);
    let y = one("Selu", vec![], &x).unwrap();
    assert_close(&y, &f32s(&[3], &[-1.111_330_7, 0., 2.101_402]), 1e-6);
    let attrs = vec![attr::float("alpha", 2.), attr::float("gamma", 3.)];
    let y = one("Selu", attrs, &x).unwrap();
    assert_close(&y, &f32s(&[3], &[6. * em1 as f32, 0., 6.]), 1e-6);

    // Celu with alpha 2: min(0, 2 * (exp(-2 / 2) - 1)).
    let x = f32s(&[3], &[-2., 0., 3.]);
    let y = one("Celu", vec![attr::float("alpha", 2.)], &x).unwrap();
    assert_close(&y, &f32s(&[3], &[2. * em1 as f32, 0., 3.]), 1e-6);
}

#[test]
fn hard_sigmoid_and_hard_swish() {
    let x = f32s(&[5], &[-3., 0., 1., 3., f32::NAN]);
    let y = one("HardSigmoid", vec![], &x).unwrap();
    let v = y.to_f64_vec();
    assert_close(&f64s(&[4], &v[..4]), &f64s(&[4], &[0., 0.5, 0.7, 1.]), 1e-7);
    assert!(v[4].is_nan());
    let attrs = vec![attr::float("alpha", 1.), attr::float("beta", 0.)];
    let y = one("HardSigmoid", attrs, &f32s(&[2], &[0.25, 2.])).unwrap();
    assert_eq!(y, f32s(&[2], &[0.25, 1.]));

    let x = f32s(&[5], &[-4., -1., 0., 1., 4.]);
    let y = one("HardSwish", vec![], &x).unwrap();
    assert_close(&y, &f32s(&[5], &[0., -1. / 3., 0., 2. / 3., 4.]), 1e-7);
}

#[test]
fn softplus_softsign_mish_swish() {
    // The stable form: no overflow at 100, no lost result at -100.
    let x = f32s(&[5], &[0., 1., -1., 100., -100.]);
    let y = one("Softplus", vec![], &x).unwrap();
    let want = [std::f32::consts::LN_2, 1.313_261_7, 0.313_261_7, 100., 0.];
    assert_close(&y, &f32s(&[5], &want), 1e-6);
    assert!(y.to_f64_vec()[4] > 0.0);

    let x = f64s(&[3], &[-3., 0., 1.]);
    let y = one("Softsign", vec![], &x).unwrap();
    assert_eq!(y, f64s(&[3], &[-0.75, 0., 0.5]));

    let x = f64s(&[3], &[0., 1., -1.]);
    let y = one("Mish", vec![], &x).unwrap();
    let want = [0., 0.865_098_388_267_310_3, -0.303_401_461_374_108_95];
    assert_close(&y, &f64s(&[3], &want), 1e-14);

    let x = f32s(&[3], &[0., 1., -2.]);
    let y = one("Swish", vec![], &x).unwrap();
    assert_close(&y, &f32s(&[3], &[0., 0.731_058_6, -0.238_405_84]), 1e-6);
    let y = one("Swish", vec![attr::float("alpha", 2.)], &x).unwrap();
    let want = [0., 0.880_797_1, -2. * (1. / (1. + 4f64.exp())) as f32];
    assert_close(&y, &f32s(&[3], &want), 1e-6);
}

#[test]
fn float_activations_refuse_other_types_and_bad_attributes() {
    let i = i32s(&[1], &[1]);
    let e = one("LeakyRelu", vec![], &i).unwrap_err();
    assert_eq!(e, "LeakyRelu: element type int32 is not supported");
    let e = one("Mish", vec![], &bools(&[1], &[true])).unwrap_err();
    assert_eq!(e, "Mish: element type bool is not supported");
    let x = f32s(&[1], &[1.]);
    let e = one("Elu", vec![attr::int("alpha", 2)], &x).unwrap_err();
    assert_eq!(
        e,
        "attribute 'alpha' has the wrong type: FLOAT expected, found INT"
    );
    let e = run_op("Softsign", vec![], 24, &[]).unwrap_err();
    assert_eq!(e, "Softsign: missing required input 0");
}

#[test]
fn prelu_broadcasts_the_slope_to_x() {
    let x = f32s(&[2, 3], &[-1., 2., -3., 4., -5., 6.]);
    let slope = f32s(&[3], &[0.1, 0.2, 0.3]);
    let y = run_op("PRelu", vec![], 16, &[Some(&x), Some(&slope)]).unwrap();
    assert_close(&y, &f32s(&[2, 3], &[-0.1, 2., -0.9, 4., -1., 6.]), 1e-7);
    let slope = f32s(&[2, 1], &[2., 3.]);
    let y = run_op("PRelu", vec![], 16, &[Some(&x), Some(&slope)]).unwrap();
    assert_eq!(y, f32s(&[2, 3], &[-2., 2., -6., 4., -15., 6.]));
    // Integer types (9).
    let x = i64s(&[2], &[-4, 4]);
    let y = run_op("PRelu", vec![], 9, &[Some(&x), Some(&i64s(&[], &[2]))]).unwrap();
    assert_eq!(y, i64s(&[2], &[-8, 4]));
}

#[test]
fn prelu_refuses_a_slope_that_would_grow_x() {
    let x = f32s(&[2, 3], &[0.; 6]);
    let e = run_op(
        "PRelu",
        vec![],
        16,
        &[Some(&x), Some(&f32s(&[2], &[1., 2.]))],
    )
    .unwrap_err();
    assert_eq!(e, "PRelu: slope of shape [2] cannot be broadcast to [2, 3]");
    let x3 = f32s(&[3], &[0.; 3]);
    let e = run_op("PRelu", vec![], 16, &[Some(&x3), Some(&x)]).unwrap_err();
    assert_eq!(e, "PRelu: slope of shape [2, 3] cannot be broadcast to [3]");
    let e = run_op("PRelu", vec![], 16, &[Some(&x3), Some(&i32s(&[], &[1]))]).unwrap_err();
    assert_eq!(e, "PRelu: input types differ: float32 and int32");
    let e = run_op("PRelu", vec![], 16, &[Some(&x3)]).unwrap_err();
    assert_eq!(e, "PRelu: missing required input 1");
}

#[test]
fn shrink_floats_and_integers() {
    let x = f32s(&[5], &[-1., -0.5, 0., 0.5, 1.]);
    let y = one("Shrink", vec![], &x).unwrap();
    assert_eq!(y, f32s(&[5], &[-1., 0., 0., 0., 1.]));
    let attrs = || vec![attr::float("lambd", 1.5), attr::float("bias", 1.5)];
    let x = f64s(&[5], &[-2., -1., 0., 1., 2.]);
    let y = one("Shrink", attrs(), &x).unwrap();
    assert_eq!(y, f64s(&[5], &[-0.5, 0., 0., 0., 0.5]));
    // Integers: x + bias in float64, truncated toward zero.
    let attrs = vec![attr::float("lambd", 1.5), attr::float("bias", 0.5)];
    let x = i32s(&[5], &[-3, -1, 0, 2, 5]);
    let y = one("Shrink", attrs, &x).unwrap();
    assert_eq!(y, i32s(&[5], &[-2, 0, 0, 1, 4]));
    let e = one("Shrink", vec![], &bools(&[1], &[true])).unwrap_err();
    assert_eq!(e, "Shrink: element type bool is not supported");
}

#[test]
fn gelu_exact_and_tanh() {
    let x = f32s(&[3], &[-1., 0., 1.]);
    let y = one("Gelu", vec![], &x).unwrap();
    assert_close(&y, &f32s(&[3], &[-0.158_655_25, 0., 0.841_344_8]), 1e-6);
    let attrs = || vec![attr::string("approximate", "tanh")];
    let y = one("Gelu", attrs(), &x).unwrap();
    assert_close(&y, &f32s(&[3], &[-0.158_808, 0., 0.841_192]), 1e-6);
    let xd = f64s(&[2], &[-1., 1.]);
    let y = one("Gelu", attrs(), &xd).unwrap();
    assert_close(
        &y,
        &f64s(&[2], &[-0.158_808_009_391_723_24, 0.841_191_990_608_276_8]),
        1e-12,
    );
    let e = one("Gelu", attrs(), &i32s(&[1], &[1])).unwrap_err();
    assert_eq!(e, "Gelu: element type int32 is not supported");
    let e = run_op("Gelu", attrs(), 20, &[Some(&x), Some(&x)]).unwrap_err();
    assert_eq!(e, "Gelu: takes one input");
    let e = one("Gelu", vec![attr::string("approximate", "erf")], &x).unwrap_err();
    assert_eq!(
        e,
        "attribute 'approximate' must be 'none' or 'tanh', got 'erf'"
    );
}

#[test]
fn parse_picks_the_attribute_form_by_opset() {
    let n = node("Clip", vec![attr::float("max", 6.)]);
    let at = |opset| {
        let op = crate::ops::resolve(&n, opset).unwrap();
        op.get::<Clip>().unwrap().attr_bounds
    };
    assert_eq!(at(6), Some((-f32::MAX, 6.)));
    assert_eq!(at(10), Some((-f32::MAX, 6.)));
    assert_eq!(at(11), None);
    // Not covered before the first version the registry lists.
    assert!(crate::ops::resolve(&node("PRelu", vec![]), 6).is_err());
    assert!(crate::ops::resolve(&node("Swish", vec![]), 23).is_err());
}

#[test]
fn map_elems_reads_an_input_in_another_layout_in_logical_order() {
    // An owned array with reversed axes keeps its strides (not standard layout): the map copies
    // it to standard layout first, so element (i, j) of the result is f of element (i, j).
    let a = ndarray::Array2::from_shape_vec((2, 3), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap()
        .into_dyn();
    let mut t = a.reversed_axes();
    assert!(!t.is_standard_layout());
    let y = map_elems(&t, |v| v * 10.0);
    assert_eq!(y.shape(), [3, 2]);
    assert_eq!(
        y.iter().copied().collect::<Vec<_>>(),
        [10.0, 40.0, 20.0, 50.0, 30.0, 60.0]
    );
    map_elems_in_place(&mut t, |v| v + 1.0);
    assert_eq!(t.shape(), [3, 2]);
    assert_eq!(
        t.iter().copied().collect::<Vec<_>>(),
        [2.0, 5.0, 3.0, 6.0, 4.0, 7.0]
    );
}

/// Inside a pool of threads Swish (and QuickGelu, its alias) splits its elements in runs of 4096
/// (the last one short): the same bits as on one thread.
#[test]
fn swish_threads_give_the_same_bits() {
    let len: usize = 97 * 3072;
    let wave: Vec<f32> = (0..len)
        .map(|i| (4.0 * (i as f64 * 0.731).sin()) as f32)
        .collect();
    let x = f32s(&[97, 3072], &wave);
    let attrs = || vec![attr::float("alpha", 1.3)];
    let one_thread = one("Swish", attrs(), &x).unwrap();
    for threads in [2, 3] {
        let many = crate::threads::with_threads(threads, || {
            assert!(crate::threads::split(len.div_ceil(4096), len * 16).is_some());
            one("Swish", attrs(), &x).unwrap()
        })
        .unwrap();
        assert_eq!(f32_bits(&one_thread), f32_bits(&many), "{threads} threads");
    }
}
