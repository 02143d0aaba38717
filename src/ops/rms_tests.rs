//! Unit tests of rms.rs: values worked by hand (rows whose mean square is a perfect square),
//! a plain f64 RMS norm written here, and error cases.

use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, GraphBuilder};
use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{attr, Node, ValueId};
use crate::onnx::proto::AttributeProto;

fn node(op: &str, domain: &str, attrs: Vec<AttributeProto>, n_out: usize, omit: &[usize]) -> Node {
    let mut n = Node::new(op, domain);
    for a in attrs {
        n.set_attr(a);
    }
    n.outputs = (0..n_out)
        .map(|i| (!omit.contains(&i)).then_some(ValueId(i as u32)))
        .collect();
    n
}

fn run(k: Kernel, n: &Node, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, String> {
    run_at(k, n, 17, inputs)
}

fn assert_vals(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol, "element {i}: got {a}, want {b}");
    }
}

const SLN: &str = "SimplifiedLayerNormalization";
const SSLN: &str = "SkipSimplifiedLayerNormalization";

#[test]
fn simplified_hand_values() {
    // Row [1, 7]: mean square 25, d = 5; row [2, -2]: mean square 4, d = 2.
    let x = f32s(&[2, 2], &[1., 7., 2., -2.]);
    let g = f32s(&[2], &[1., 0.5]);
    for domain in ["", MS_DOMAIN] {
        let n = node(SLN, domain, vec![attr::float("epsilon", 0.0)], 2, &[]);
        let out = run(simplified_layer_norm, &n, &[Some(&x), Some(&g)]).unwrap();
        assert_vals(&out[0], &[2, 2], &[0.2, 0.7, 1.0, -0.5], 1e-7);
        assert_vals(&out[1], &[2, 1], &[0.2, 0.5], 1e-7);
        assert_eq!(out[1].dtype(), DType::F32);
    }
    // Default epsilon 1e-5: d = sqrt(25 + 1e-5).
    let n = node(SLN, "", vec![], 1, &[]);
    let out = run(simplified_layer_norm, &n, &[Some(&x), Some(&g)]).unwrap();
    assert_eq!(out.len(), 1);
    let d = (25.0f64 + 1e-5).sqrt();
    assert!((out[0].to_f64_vec()[1] - 3.5 / d).abs() < 1e-6);
}

#[test]
fn simplified_axis_stash_and_f64() {
    // axis 0 of [2, 2]: one row [1, 7, 2, -2] (mean square 14.5); stash float64.
    let xv = [1., 7., 2., -2.];
    let n = node(
        SLN,
        "",
        vec![
            attr::int("axis", 0),
            attr::float("epsilon", 0.0),
            attr::int("stash_type", 11),
        ],
        2,
        &[],
    );
    let g = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let out = run(
        simplified_layer_norm,
        &n,
        &[Some(&f32s(&[2, 2], &[1., 7., 2., -2.])), Some(&g)],
    )
    .unwrap();
    let d = 14.5f64.sqrt();
    let want: Vec<f64> = xv
        .iter()
        .zip([1., 2., 3., 4.])
        .map(|(v, g)| v / d * g)
        .collect();
    assert_vals(&out[0], &[2, 2], &want, 1e-6);
    assert_eq!(out[1].dtype(), DType::F64);
    assert_vals(&out[1], &[1, 1], &[1.0 / d], 1e-7);
    // float64 data; scale [1] broadcasts; inv_std_var omitted.
    let n = node(SLN, "", vec![attr::float("epsilon", 0.0)], 2, &[1]);
    let x = f64s(&[1, 2], &[3., 4.]);
    let out = run(
        simplified_layer_norm,
        &n,
        &[Some(&x), Some(&f64s(&[1], &[2.]))],
    )
    .unwrap();
    let d = 12.5f64.sqrt();
    assert_vals(&out[0], &[1, 2], &[6. / d, 8. / d], 1e-12);
    assert_eq!(out[0].dtype(), DType::F64);
}

#[test]
fn simplified_errors() {
    let x = f32s(&[2, 2], &[1.; 4]);
    let g = f32s(&[2], &[1.; 2]);
    let n = node(SLN, "", vec![attr::int("stash_type", 2)], 2, &[]);
    let e = run(simplified_layer_norm, &n, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("stash_type 2 is not supported"), "{e}");
    let n = node(SLN, "", vec![attr::int("axis", 2)], 1, &[]);
    let e = run(simplified_layer_norm, &n, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains(SLN) && e.contains("axis"), "{e}");
    let n = node(SLN, "", vec![], 1, &[]);
    let e = run(
        simplified_layer_norm,
        &n,
        &[Some(&x), Some(&f32s(&[3], &[1.; 3]))],
    )
    .unwrap_err();
    assert!(e.contains(SLN) && e.contains("scale"), "{e}");
    let e = run(
        simplified_layer_norm,
        &n,
        &[Some(&x), Some(&f64s(&[2], &[1.; 2]))],
    )
    .unwrap_err();
    assert!(e.contains("float64"), "{e}");
    let xi = i32s(&[2], &[1, 2]);
    let e = run(simplified_layer_norm, &n, &[Some(&xi), Some(&xi)]).unwrap_err();
    assert!(e.contains(SLN) && e.contains("int32"), "{e}");
    let e = run(
        simplified_layer_norm,
        &n,
        &[Some(&f32s(&[], &[1.])), Some(&g)],
    )
    .unwrap_err();
    assert!(e.contains("scalar"), "{e}");
    let n3 = node(SLN, "", vec![], 3, &[]);
    let e = run(simplified_layer_norm, &n3, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("at most 2"), "{e}");
}

#[test]
fn skip_simplified_hand_values() {
    // input + skip + bias = rows [1, 7] and [2, -2] (d = 5 and 2).
    let x = f32s(&[1, 2, 2], &[0., 5., 2., -3.]);
    let skip = f32s(&[2, 2], &[1., 1., 0., 0.]);
    let bias = f32s(&[2], &[0., 1.]);
    let g = f32s(&[2], &[1., 0.5]);
    let n = node(SSLN, MS_DOMAIN, vec![attr::float("epsilon", 0.0)], 4, &[]);
    let out = run(
        skip_simplified_layer_norm,
        &n,
        &[Some(&x), Some(&skip), Some(&g), Some(&bias)],
    )
    .unwrap();
    assert_vals(&out[0], &[1, 2, 2], &[0.2, 0.7, 1.0, -0.5], 1e-7);
    assert_vals(&out[1], &[1, 2, 1], &[0., 0.], 0.0);
    assert_vals(&out[2], &[1, 2, 1], &[0.2, 0.5], 1e-7);
    assert_vals(&out[3], &[1, 2, 2], &[1., 7., 2., -2.], 0.0);
    // A skip of [1, seq, hidden] shared by two batches, no bias, only output 0 and 3 named.
    let x = f32s(&[2, 1, 2], &[0., 6., 1., -3.]);
    let skip = f32s(&[1, 1, 2], &[1., 1.]);
    let n = node(
        SSLN,
        MS_DOMAIN,
        vec![attr::float("epsilon", 0.0)],
        4,
        &[1, 2],
    );
    let out = run(
        skip_simplified_layer_norm,
        &n,
        &[Some(&x), Some(&skip), Some(&g)],
    )
    .unwrap();
    assert_vals(&out[0], &[2, 1, 2], &[0.2, 0.7, 1.0, -0.5], 1e-7);
    assert_eq!(out[1].len(), 0);
    assert_vals(&out[3], &[2, 1, 2], &[1., 7., 2., -2.], 0.0);
    // default epsilon 1e-12, float64
    let n = node(SSLN, MS_DOMAIN, vec![], 1, &[]);
    let x = f64s(&[1, 2], &[1., 7.]);
    let z = f64s(&[1, 2], &[0., 0.]);
    let out = run(
        skip_simplified_layer_norm,
        &n,
        &[Some(&x), Some(&z), Some(&f64s(&[2], &[1., 1.]))],
    )
    .unwrap();
    let d = (25.0f64 + 1e-12).sqrt();
    assert_vals(&out[0], &[1, 2], &[1. / d, 7. / d], 1e-15);
}

#[test]
fn skip_simplified_errors() {
    let n = node(SSLN, MS_DOMAIN, vec![], 1, &[]);
    let x = f32s(&[2, 3, 4], &[0.; 24]);
    let g = f32s(&[4], &[1.; 4]);
    let e = |ins: &[Option<&Tensor>]| run(skip_simplified_layer_norm, &n, ins).unwrap_err();
    let m = e(&[Some(&f32s(&[4], &[0.; 4])), Some(&g), Some(&g)]);
    assert!(m.contains(SSLN) && m.contains("2-D"), "{m}");
    let m = e(&[Some(&x), Some(&f32s(&[2, 1, 4], &[0.; 8])), Some(&g)]);
    assert!(m.contains("skip of shape"), "{m}");
    let m = e(&[Some(&x), Some(&x), Some(&f32s(&[3], &[1.; 3]))]);
    assert!(m.contains("'gamma' has length 3"), "{m}");
    let m = e(&[Some(&x), Some(&x), Some(&g), Some(&f32s(&[5], &[0.; 5]))]);
    assert!(m.contains("'bias'"), "{m}");
    let xi = i32s(&[2, 4], &[0; 8]);
    let m = e(&[Some(&xi), Some(&xi), Some(&g)]);
    assert!(m.contains(SSLN) && m.contains("int32"), "{m}");
    let m = e(&[Some(&x), Some(&x)]);
    assert!(m.contains("input 2"), "{m}");
}

#[test]
fn inference() {
    let mut b = GraphBuilder::new("g", 17);
    b.import(MS_DOMAIN, 1);
    let bsym = Dim::Sym("B".into());
    let x = b.input(
        "x",
        DType::F32,
        vec![bsym.clone(), Dim::Known(3), Dim::Known(4)],
    );
    let skip = b.input("skip", DType::F32, dims(&[3, 4]));
    let g = b.initializer("g", &f32s(&[4], &[1., 2., 3., 4.]));
    let s = b.node(MS_DOMAIN, SSLN, &[Some(x), Some(skip), Some(g)], 4, vec![]);
    let r = b.node("", SLN, &[Some(s[0]), Some(g)], 2, vec![]);
    let r1 = b.node(
        MS_DOMAIN,
        SLN,
        &[Some(s[3]), Some(g)],
        2,
        vec![attr::int("axis", 1), attr::int("stash_type", 11)],
    );
    for (v, name) in [(r[0], "y"), (r[1], "inv"), (r1[1], "inv1"), (s[2], "sinv")] {
        b.output(v, name);
    }
    let m = b.build();
    let ty = |v: ValueId| m.graph.value(v).ty.clone();
    let full = TensorType::new(DType::F32, vec![bsym.clone(), Dim::Known(3), Dim::Known(4)]);
    let stat = TensorType::new(DType::F32, vec![bsym.clone(), Dim::Known(3), Dim::Known(1)]);
    assert_eq!(ty(s[0]), full);
    assert_eq!(ty(s[2]), stat);
    assert_eq!(ty(s[3]), full);
    assert_eq!(ty(r[0]), full);
    assert_eq!(ty(r[1]), stat);
    let stat1 = TensorType::new(DType::F64, vec![bsym, Dim::Known(1), Dim::Known(1)]);
    assert_eq!(ty(r1[1]), stat1);
    crate::ops::verify(&m).unwrap();
}

// QuickGelu is activation.rs's Swish with alpha 1.702 by default; its tests sit here
// (activation_tests.rs is near its size limit).
#[test]
fn quick_gelu_values_and_errors() {
    let quick_gelu = |n: &Node, x: &Tensor| {
        let k = crate::ops::resolve(n, 1)
            .map_err(|e| e.to_string())?
            .kernel();
        run(k, n, &[Some(x)])
    };
    // alpha 1.702 (default): x * sigmoid(1.702 x); at 0 -> 0, at large |x| -> x or 0.
    let x = f32s(&[4], &[0., 1., -1., 30.]);
    let n = node("QuickGelu", MS_DOMAIN, vec![], 1, &[]);
    let out = quick_gelu(&n, &x).unwrap();
    let s = |v: f64| 1.0 / (1.0 + (-v).exp());
    let want = [0., s(1.702), -s(-1.702), 30.];
    assert_vals(&out[0], &[4], &want, 1e-6);
    // alpha 1: x * sigmoid(x); sigmoid(ln 3) = 0.75.
    let n = node(
        "QuickGelu",
        MS_DOMAIN,
        vec![attr::float("alpha", 1.0)],
        1,
        &[],
    );
    let l3 = 3f64.ln();
    let out = quick_gelu(&n, &f64s(&[1], &[l3])).unwrap();
    assert_vals(&out[0], &[1], &[0.75 * l3], 1e-12);
    let e = quick_gelu(&n, &i32s(&[1], &[1])).unwrap_err();
    assert!(e.contains("QuickGelu") && e.contains("int32"), "{e}");
}
