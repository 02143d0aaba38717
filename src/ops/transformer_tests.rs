//! Unit tests of transformer.rs. Expected values come from a plain two-pass layer norm in f64
//! written here, from composing the existing Add/Erf kernels, or from values worked by hand.

use std::collections::HashMap;

use super::super::common::test_util::*;
use super::super::elementwise::{add, erf};
use super::super::{Attrs, Kernel};
use super::*;
use crate::builder::{dims, GraphBuilder};
use crate::ir::model::MS_DOMAIN;
use crate::ir::types::{Dim, TensorType};
use crate::ir::{attr, Node, ValueId};
use crate::limits::Limits;
use crate::onnx::proto::AttributeProto;
use crate::runtime::reference::Executor;

/// A node naming `n_out` outputs; `omit` lists output slots left empty (omitted optionals).
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

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec()
}

/// Deterministic, irregular values in about [-2, 2].
fn wave(n: usize, phase: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (2.0 * ((i as f64) * 0.731 + phase).sin() + 0.1 * (i % 3) as f64) as f32)
        .collect()
}

/// Two-pass layer norm over rows of `cols` in f64: (y, mean, 1/sqrt(var + eps)).
fn ref_layer_norm(
    x: &[f64],
    cols: usize,
    gamma: &[f64],
    beta: Option<&[f64]>,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut means, mut invs) = (vec![], vec![], vec![]);
    for row in x.chunks(cols) {
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / cols as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            y.push((v - mean) * inv * gamma[j] + beta.map_or(0.0, |b| b[j]));
        }
        means.push(mean);
        invs.push(inv);
    }
    (y, means, invs)
}

fn assert_vals(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let g = vals(got);
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol,
            "element {i}: got {a}, want {b}\n{got:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// LayerNormalization

#[test]
fn layer_norm_hand_values() {
    // Row [1, 2, 3]: mean 2, var 2/3; row [0, 0, 6]: mean 2, var 8.
    let x = f32s(&[2, 3], &[1., 2., 3., 0., 0., 6.]);
    let g = f32s(&[3], &[1., 2., 0.5]);
    let b = f32s(&[3], &[0., 1., -1.]);
    let n = node(
        "LayerNormalization",
        "",
        vec![attr::float("epsilon", 0.0)],
        3,
        &[],
    );
    let out = run(layer_norm, &n, &[Some(&x), Some(&g), Some(&b)]).unwrap();
    let s = (1.5f64).sqrt(); // 1 / sqrt(2/3)
    let t = 1.0 / 8f64.sqrt();
    let want = [
        -s,
        1.0,
        0.5 * s - 1.0,
        -2.0 * t,
        -4.0 * t + 1.0,
        0.5 * 4.0 * t - 1.0,
    ];
    assert_vals(&out[0], &[2, 3], &want, 1e-6);
    assert_vals(&out[1], &[2, 1], &[2.0, 2.0], 1e-6);
    assert_vals(&out[2], &[2, 1], &[s, t], 1e-6);
    assert_eq!(out[1].dtype(), DType::F32);
}

#[test]
fn layer_norm_matches_reference_over_axes() {
    let shape = [2, 3, 4];
    let xv = wave(24, 0.3);
    let x = f32s(&shape, &xv);
    let xd: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    for axis in [-1i64, 1, 0, -3] {
        let a = if axis < 0 { axis + 3 } else { axis } as usize;
        let norm: Vec<usize> = shape[a..].to_vec();
        let cols: usize = norm.iter().product();
        let gv = wave(cols, 1.1);
        let bv = wave(cols, 2.2);
        let g = f32s(&norm, &gv);
        let b = f32s(&norm, &bv);
        let gd: Vec<f64> = gv.iter().map(|&v| v as f64).collect();
        let bd: Vec<f64> = bv.iter().map(|&v| v as f64).collect();
        let mut stat: Vec<usize> = shape.to_vec();
        stat[a..].iter_mut().for_each(|d| *d = 1);
        for with_b in [true, false] {
            let n = node(
                "LayerNormalization",
                "",
                vec![attr::int("axis", axis)],
                3,
                &[],
            );
            let ins = [Some(&x), Some(&g), with_b.then_some(&b)];
            let out = run(layer_norm, &n, &ins).unwrap();
            let (y, m, inv) = ref_layer_norm(&xd, cols, &gd, with_b.then_some(&bd[..]), 1e-5);
            assert_vals(&out[0], &shape, &y, 1e-5);
            assert_vals(&out[1], &stat, &m, 1e-6);
            assert_vals(&out[2], &stat, &inv, 1e-5);
        }
    }
}

#[test]
fn layer_norm_broadcasts_scale_and_bias() {
    // axis 1 of [2, 3, 4]: normalized shape [3, 4]; Scale [4] and B [3, 1] broadcast to it.
    let xv = wave(24, 0.9);
    let x = f32s(&[2, 3, 4], &xv);
    let g = f32s(&[4], &[1., -1., 2., 0.5]);
    let b = f32s(&[3, 1], &[0.1, 0.2, 0.3]);
    let n = node("LayerNormalization", "", vec![attr::int("axis", 1)], 1, &[]);
    let out = run(layer_norm, &n, &[Some(&x), Some(&g), Some(&b)]).unwrap();
    assert_eq!(out.len(), 1);
    let gd: Vec<f64> = (0..12).map(|j| [1., -1., 2., 0.5][j % 4]).collect();
    let bd: Vec<f64> = (0..12).map(|j| [0.1, 0.2, 0.3][j / 4]).collect();
    let xd: Vec<f64> = xv.iter().map(|&v| v as f64).collect();
    let (y, _, _) = ref_layer_norm(&xd, 12, &gd, Some(&bd), 1e-5);
    assert_vals(&out[0], &[2, 3, 4], &y, 1e-5);
    // Scale that does not broadcast to [3, 4], or only multidirectionally, is refused.
    for bad in [f32s(&[3], &[1.; 3]), f32s(&[2, 3, 4], &[1.; 24])] {
        let e = run(layer_norm, &n, &[Some(&x), Some(&bad)]).unwrap_err();
        assert!(
            e.contains("LayerNormalization") && e.contains("Scale"),
            "{e}"
        );
    }
}

#[test]
fn layer_norm_types_and_stash() {
    let xv: Vec<f64> = wave(8, 0.5).iter().map(|&v| v as f64).collect();
    let g = [1.0f64, 2.0, 3.0, 4.0];
    let (y, m, inv) = ref_layer_norm(&xv, 4, &g, None, 1e-5f32 as f64);
    // float64 data, default stash_type: f64 Y, f32 statistics (onnxruntime does the same).
    let x = f64s(&[2, 4], &xv);
    let n = node("LayerNormalization", "", vec![], 3, &[]);
    let out = run(layer_norm, &n, &[Some(&x), Some(&f64s(&[4], &g))]).unwrap();
    assert_eq!(out[0].dtype(), DType::F64);
    assert_eq!(out[1].dtype(), DType::F32);
    assert_vals(&out[0], &[2, 4], &y, 1e-12);
    assert_vals(&out[1], &[2, 1], &m, 1e-6);
    // stash_type 11: f64 statistics, for f32 data too.
    let n = node(
        "LayerNormalization",
        "",
        vec![attr::int("stash_type", 11)],
        3,
        &[],
    );
    let out = run(layer_norm, &n, &[Some(&x), Some(&f64s(&[4], &g))]).unwrap();
    assert_eq!(out[2].dtype(), DType::F64);
    assert_vals(&out[2], &[2, 1], &inv, 1e-12);
    let xf: Vec<f32> = xv.iter().map(|&v| v as f32).collect();
    let gf = f32s(&[4], &[1., 2., 3., 4.]);
    let out = run(layer_norm, &n, &[Some(&f32s(&[2, 4], &xf)), Some(&gf)]).unwrap();
    assert_eq!((out[0].dtype(), out[1].dtype()), (DType::F32, DType::F64));
    assert_vals(&out[1], &[2, 1], &m, 1e-6);
}

#[test]
fn layer_norm_omitted_outputs_and_odd_layouts() {
    let xv = wave(6, 0.0);
    let x = f32s(&[2, 3], &xv);
    let g = f32s(&[3], &[1., 1., 1.]);
    // Mean omitted, InvStdDev named: slot 1 is a placeholder, slot 2 the statistics.
    let n = node("LayerNormalization", "", vec![], 3, &[1]);
    let out = run(layer_norm, &n, &[Some(&x), Some(&g)]).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[1].len(), 0);
    assert_eq!(out[2].shape(), &[2, 1]);
    // A transposed (column-major) X gives the same result as its row-major copy.
    let Tensor::F32(a) = f32s(&[3, 2], &xv) else {
        unreachable!()
    };
    let xt = Tensor::F32(a.t().to_owned());
    let xc = Tensor::F32(a.t().as_standard_layout().into_owned());
    let want = run(layer_norm, &n, &[Some(&xc), Some(&g)]).unwrap();
    let got = run(layer_norm, &n, &[Some(&xt), Some(&g)]).unwrap();
    assert_close(&got[0], &want[0], 0.0);
    assert_close(&got[2], &want[2], 0.0);
    // Empty rows, and an empty normalized axis (statistics over no elements are NaN).
    let out = run(layer_norm, &n, &[Some(&f32s(&[0, 3], &[])), Some(&g)]).unwrap();
    assert_eq!((out[0].shape(), out[2].shape()), (&[0, 3][..], &[0, 1][..]));
    let out = run(
        layer_norm,
        &n,
        &[Some(&f32s(&[2, 0], &[])), Some(&f32s(&[0], &[]))],
    )
    .unwrap();
    assert_eq!(out[0].shape(), &[2, 0]);
    assert!(vals(&out[2]).iter().all(|v| v.is_nan()));
}

#[test]
fn layer_norm_errors() {
    let x = f32s(&[2, 3], &[0.; 6]);
    let g = f32s(&[3], &[1.; 3]);
    let n = node("LayerNormalization", "", vec![], 1, &[]);
    let e = run(layer_norm, &n, &[Some(&x)]).unwrap_err();
    assert!(
        e.contains("LayerNormalization") && e.contains("input 1"),
        "{e}"
    );
    let e = run(layer_norm, &n, &[Some(&x), Some(&f64s(&[3], &[1.; 3]))]).unwrap_err();
    assert!(e.contains("float32") && e.contains("float64"), "{e}");
    let e = run(layer_norm, &n, &[Some(&i64s(&[3], &[1; 3])), Some(&g)]).unwrap_err();
    assert!(e.contains("int64") && e.contains("not supported"), "{e}");
    let e = run(layer_norm, &n, &[Some(&f32s(&[], &[1.])), Some(&g)]).unwrap_err();
    assert!(e.contains("scalar"), "{e}");
    let n = node("LayerNormalization", "", vec![attr::int("axis", 2)], 1, &[]);
    let e = run(layer_norm, &n, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("axis 2"), "{e}");
    let n = node(
        "LayerNormalization",
        "",
        vec![attr::int("stash_type", 10)],
        1,
        &[],
    );
    let e = run(layer_norm, &n, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("stash_type 10"), "{e}");
    let n = node("LayerNormalization", "", vec![], 4, &[]);
    let e = run(layer_norm, &n, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("at most 3"), "{e}");
}

#[test]
fn layer_norm_checks_output_size() {
    let x = f32s(&[4, 4], &[0.; 16]);
    let g = f32s(&[4], &[1.; 4]);
    let n = node("LayerNormalization", "", vec![], 1, &[]);
    let limits = Limits {
        max_tensor_bytes: 32,
    };
    let op = LayerNormalization::parse(&Attrs::new(&n, 17)).unwrap();
    let ctx = KernelCtx {
        node: &n,
        op: &*op,
        opset: 17,
        limits: &limits,
        prepared: None,
    };
    let e = layer_norm(&ctx, &[Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("LayerNormalization"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// SkipLayerNormalization

/// SkipLayerNormalization composed from the Add kernel and the reference layer norm.
fn unfused_skip_ln(
    x: &Tensor,
    skip: &Tensor,
    gamma: &[f64],
    beta: Option<&[f64]>,
    bias: Option<&Tensor>,
    eps: f64,
) -> (Tensor, Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut s = run1(add, "Add", &[x, skip]).unwrap();
    if let Some(b) = bias {
        s = run1(add, "Add", &[&s, b]).unwrap();
    }
    let h = gamma.len();
    let (y, m, inv) = ref_layer_norm(&vals(&s), h, gamma, beta, eps);
    (s, y, m, inv)
}

#[test]
fn skip_layer_norm_matches_add_then_layer_norm() {
    let h = 4;
    let gv = wave(h, 0.7);
    let bv = wave(h, 1.9);
    let cv = wave(h, 3.1);
    let (g, b, c) = (f32s(&[h], &gv), f32s(&[h], &bv), f32s(&[h], &cv));
    let gd: Vec<f64> = gv.iter().map(|&v| v as f64).collect();
    let bd: Vec<f64> = bv.iter().map(|&v| v as f64).collect();
    let cases: [(&[usize], &[usize]); 4] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[1, 3, 4]),
        (&[2, 3, 4], &[3, 4]),
        (&[5, 4], &[5, 4]),
    ];
    for (xs, ss) in cases {
        let x = f32s(xs, &wave(xs.iter().product(), 0.2));
        let skip = f32s(ss, &wave(ss.iter().product(), 4.4));
        let mut stat = xs.to_vec();
        *stat.last_mut().unwrap() = 1;
        for (with_beta, with_bias) in [(true, true), (true, false), (false, true), (false, false)] {
            let n = node("SkipLayerNormalization", MS_DOMAIN, vec![], 4, &[]);
            let ins = [
                Some(&x),
                Some(&skip),
                Some(&g),
                with_beta.then_some(&b),
                with_bias.then_some(&c),
            ];
            let out = run(skip_layer_norm, &n, &ins).unwrap();
            let (sum, y, m, inv) = unfused_skip_ln(
                &x,
                &skip,
                &gd,
                with_beta.then_some(&bd[..]),
                with_bias.then_some(&c),
                1e-12,
            );
            let what = format!("{xs:?} + {ss:?}, beta {with_beta}, bias {with_bias}");
            assert_eq!(out.len(), 4, "{what}");
            assert_vals(&out[0], xs, &y, 1e-5);
            assert_vals(&out[1], &stat, &m, 1e-6);
            assert_vals(&out[2], &stat, &inv, 1e-4);
            assert_close(&out[3], &sum, 0.0);
            assert_eq!(out[1].dtype(), DType::F32);
        }
    }
}

/// Inside a pool of threads SkipLayerNormalization's rows split between them (no statistics
/// asked for; the residual sum, output 3, is still written): the same bits as on one thread.
#[test]
fn skip_layer_norm_threads_give_the_same_bits() {
    let (rows, h) = (1400, 768);
    let x = f32s(&[rows, h], &wave(rows * h, 0.2));
    let skip = f32s(&[rows, h], &wave(rows * h, 4.4));
    let (g, b, c) = (
        f32s(&[h], &wave(h, 0.7)),
        f32s(&[h], &wave(h, 1.9)),
        f32s(&[h], &wave(h, 3.1)),
    );
    let mut n = node("SkipLayerNormalization", MS_DOMAIN, vec![], 4, &[]);
    n.outputs[1] = None;
    n.outputs[2] = None;
    let ins = [Some(&x), Some(&skip), Some(&g), Some(&b), Some(&c)];
    let one = run(skip_layer_norm, &n, &ins).unwrap();
    for threads in [2, 3] {
        let many = crate::threads::with_threads(threads, || {
            assert!(crate::threads::split(rows, rows * h * 4).is_some());
            run(skip_layer_norm, &n, &ins).unwrap()
        })
        .unwrap();
        assert_eq!(
            f32_bits(&one[0]),
            f32_bits(&many[0]),
            "y at {threads} threads"
        );
        assert_eq!(
            f32_bits(&one[3]),
            f32_bits(&many[3]),
            "sum at {threads} threads"
        );
    }
}

#[test]
fn skip_layer_norm_optional_outputs_and_f64() {
    let x = f64s(&[2, 3], &[1., 2., 3., 4., 5., 9.]);
    let skip = f64s(&[2, 3], &[0., 0., 0., 1., 1., 1.]);
    let g = f64s(&[3], &[1., 1., 1.]);
    let eps = attr::float("epsilon", 1e-5);
    // Only the output: one tensor.
    let n = node(
        "SkipLayerNormalization",
        MS_DOMAIN,
        vec![eps.clone()],
        1,
        &[],
    );
    let out = run(skip_layer_norm, &n, &[Some(&x), Some(&skip), Some(&g)]).unwrap();
    assert_eq!(out.len(), 1);
    let (_, y, m, _) = unfused_skip_ln(&x, &skip, &[1., 1., 1.], None, None, 1e-5);
    assert_vals(&out[0], &[2, 3], &y, 1e-12);
    assert_eq!(out[0].dtype(), DType::F64);
    // output and input_skip_bias_sum, mean and inv_std_var omitted (GPT-2's pre-LN form).
    let n = node(
        "SkipLayerNormalization",
        MS_DOMAIN,
        vec![eps.clone()],
        4,
        &[1, 2],
    );
    let out = run(skip_layer_norm, &n, &[Some(&x), Some(&skip), Some(&g)]).unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!((out[1].len(), out[2].len()), (0, 0));
    assert_eq!(out[3], f64s(&[2, 3], &[1., 2., 3., 5., 6., 10.]));
    // mean only: float32 even for float64 data (onnxruntime's U is float32).
    let n = node("SkipLayerNormalization", MS_DOMAIN, vec![eps], 2, &[]);
    let out = run(skip_layer_norm, &n, &[Some(&x), Some(&skip), Some(&g)]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].dtype(), DType::F32);
    assert_vals(&out[1], &[2, 1], &m, 1e-6);
    assert_vals(&out[1], &[2, 1], &[2.0, 7.0], 1e-6);
}

#[test]
fn skip_layer_norm_errors() {
    let n = node("SkipLayerNormalization", MS_DOMAIN, vec![], 1, &[]);
    let x = f32s(&[2, 3, 4], &[0.; 24]);
    let g = f32s(&[4], &[1.; 4]);
    let sln = |ins: &[Option<&Tensor>]| run(skip_layer_norm, &n, ins).unwrap_err();
    let e = sln(&[
        Some(&f32s(&[4], &[0.; 4])),
        Some(&f32s(&[4], &[0.; 4])),
        Some(&g),
    ]);
    assert!(
        e.contains("SkipLayerNormalization") && e.contains("2-D"),
        "{e}"
    );
    let x4 = f32s(&[1, 2, 3, 4], &[0.; 24]);
    let e = sln(&[Some(&x4), Some(&x4), Some(&g)]);
    assert!(e.contains("[1, 2, 3, 4]"), "{e}");
    for bad in [&[2, 1, 4][..], &[4], &[1, 1, 3, 4], &[2, 3, 3]] {
        let skip = f32s(bad, &vec![0.; bad.iter().product()]);
        let e = sln(&[Some(&x), Some(&skip), Some(&g)]);
        assert!(e.contains("skip of shape"), "{bad:?}: {e}");
    }
    // a rank-2 input takes only a skip of its own shape
    let x2 = f32s(&[3, 4], &[0.; 12]);
    let e = sln(&[Some(&x2), Some(&f32s(&[1, 3, 4], &[0.; 12])), Some(&g)]);
    assert!(e.contains("skip of shape"), "{e}");
    let e = sln(&[Some(&x), Some(&x), Some(&f32s(&[3], &[1.; 3]))]);
    assert!(e.contains("'gamma' has length 3") && e.contains("4"), "{e}");
    let e = sln(&[Some(&x), Some(&x), Some(&f32s(&[1, 4], &[1.; 4]))]);
    assert!(e.contains("'gamma' must be 1-D"), "{e}");
    let e = sln(&[Some(&x), Some(&x), Some(&g), Some(&f32s(&[5], &[0.; 5]))]);
    assert!(e.contains("'beta'"), "{e}");
    let e = sln(&[
        Some(&x),
        Some(&x),
        Some(&g),
        None,
        Some(&f32s(&[1, 4], &[0.; 4])),
    ]);
    assert!(e.contains("'bias'"), "{e}");
    let e = sln(&[Some(&x), Some(&x), Some(&f64s(&[4], &[1.; 4]))]);
    assert!(e.contains("float64"), "{e}");
    let e = sln(&[Some(&x), Some(&x)]);
    assert!(e.contains("input 2"), "{e}");
    let xi = i32s(&[2, 4], &[0; 8]);
    let e = sln(&[Some(&xi), Some(&xi), Some(&g)]);
    assert!(e.contains("int32"), "{e}");
    let x0 = f32s(&[2, 0], &[]);
    let e = sln(&[Some(&x0), Some(&x0), Some(&f32s(&[0], &[]))]);
    assert!(e.contains("hidden size") && e.contains("0"), "{e}");
    let n5 = node("SkipLayerNormalization", MS_DOMAIN, vec![], 5, &[]);
    let e = run(skip_layer_norm, &n5, &[Some(&x), Some(&x), Some(&g)]).unwrap_err();
    assert!(e.contains("at most 4"), "{e}");
}

#[test]
fn skip_layer_norm_empty_batch() {
    let n = node("SkipLayerNormalization", MS_DOMAIN, vec![], 4, &[]);
    let x = f32s(&[0, 3, 4], &[]);
    let skip = f32s(&[3, 4], &[0.; 12]);
    let out = run(
        skip_layer_norm,
        &n,
        &[Some(&x), Some(&skip), Some(&f32s(&[4], &[1.; 4]))],
    );
    let out = out.unwrap();
    assert_eq!(
        (out[0].shape(), out[1].shape()),
        (&[0, 3, 4][..], &[0, 3, 1][..])
    );
}

// ---------------------------------------------------------------------------------------------
// Gelu family

fn one_out(k: Kernel, op: &str, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    run(k, &node(op, MS_DOMAIN, vec![], 1, &[]), inputs).map(|mut v| v.remove(0))
}

#[test]
fn gelu_known_values_and_erf_composition() {
    // 0.5 * x * (1 + erf(x / sqrt 2)) from Python's math.erf.
    let x = f64s(&[5], &[0., 1., -1., 3., -0.5]);
    let want = [
        0.0,
        0.841_344_746_068_542_9,
        -0.158_655_253_931_457_05,
        2.995_950_305_905_11,
        -0.154_268_769_362_993_44,
    ];
    let y = one_out(gelu, "Gelu", &[Some(&x)]).unwrap();
    assert_vals(&y, &[5], &want, 1e-14);
    // f32: equals Mul/Add around the Erf kernel, in f32 within rounding.
    let xv = wave(24, 0.1);
    let x = f32s(&[2, 3, 4], &xv);
    let scaled: Vec<f32> = xv.iter().map(|v| v / std::f32::consts::SQRT_2).collect();
    let e = run1(erf, "Erf", &[&f32s(&[24], &scaled)]).unwrap();
    let want: Vec<f64> = xv
        .iter()
        .zip(vals(&e))
        .map(|(&v, e)| 0.5 * v as f64 * (1.0 + e))
        .collect();
    let y = one_out(gelu, "Gelu", &[Some(&x)]).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_vals(&y, &[2, 3, 4], &want, 1e-6);
    // scalars and NaN
    let y = one_out(gelu, "Gelu", &[Some(&f32s(&[], &[f32::NAN]))]).unwrap();
    assert!(vals(&y)[0].is_nan() && y.shape().is_empty());
}

#[test]
fn bias_gelu_is_gelu_of_add() {
    let a = f32s(&[3, 4], &wave(12, 0.4));
    let b = f32s(&[4], &wave(4, 2.5));
    let sum = run1(add, "Add", &[&a, &b]).unwrap();
    let want = one_out(gelu, "Gelu", &[Some(&sum)]).unwrap();
    let got = one_out(bias_gelu, "BiasGelu", &[Some(&a), Some(&b)]).unwrap();
    assert_close(&got, &want, 0.0);
    let a = f64s(&[2, 2], &[0.5, -1.0, 2.0, 0.0]);
    let b = f64s(&[2], &[0.5, 2.0]);
    let got = one_out(bias_gelu, "BiasGelu", &[Some(&a), Some(&b)]).unwrap();
    let want = one_out(gelu, "Gelu", &[Some(&f64s(&[2, 2], &[1., 1., 2.5, 2.]))]).unwrap();
    assert_close(&got, &want, 0.0);
}

#[test]
fn fast_gelu_tanh_form_with_and_without_bias() {
    let tanh_gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
    };
    let xv = wave(12, 0.8);
    let bv = [0.25f32, -0.5, 1.0];
    let x = f32s(&[4, 3], &xv);
    let y = one_out(fast_gelu, "FastGelu", &[Some(&x)]).unwrap();
    let want: Vec<f64> = xv.iter().map(|&v| tanh_gelu(v as f64)).collect();
    assert_vals(&y, &[4, 3], &want, 1e-6);
    let y = one_out(fast_gelu, "FastGelu", &[Some(&x), Some(&f32s(&[3], &bv))]).unwrap();
    let want: Vec<f64> = xv
        .iter()
        .enumerate()
        .map(|(i, &v)| tanh_gelu((v + bv[i % 3]) as f64))
        .collect();
    assert_vals(&y, &[4, 3], &want, 1e-6);
    // hand values: FastGelu(0) = 0; FastGelu(1) = 0.5 * (1 + tanh(0.79788456 * 1.044715))
    let y = one_out(fast_gelu, "FastGelu", &[Some(&f64s(&[2], &[0., 1.]))]).unwrap();
    assert_vals(&y, &[2], &[0.0, 0.841_191_990_608_276_8], 1e-12);
    // an empty last dim with an empty bias
    let y = one_out(
        fast_gelu,
        "FastGelu",
        &[Some(&f32s(&[2, 0], &[])), Some(&f32s(&[0], &[]))],
    );
    assert_eq!(y.unwrap().shape(), &[2, 0]);
}

/// Inside a pool of threads FastGelu's rows split between them (with a bias, and without one in
/// runs of 4096 elements, the last one short): the same bits as on one thread.
#[test]
fn fast_gelu_threads_give_the_same_bits() {
    let (rows, h) = (97, 3072);
    let x = f32s(&[rows, h], &wave(rows * h, 0.37));
    let bias = f32s(&[h], &wave(h, 0.11));
    for ins in [vec![Some(&x)], vec![Some(&x), Some(&bias)]] {
        let one = one_out(fast_gelu, "FastGelu", &ins).unwrap();
        for threads in [2, 3] {
            let many = crate::threads::with_threads(threads, || {
                assert!(crate::threads::split(rows, rows * h * 16).is_some());
                one_out(fast_gelu, "FastGelu", &ins).unwrap()
            })
            .unwrap();
            assert_eq!(
                f32_bits(&one),
                f32_bits(&many),
                "{} inputs, {threads} threads",
                ins.len()
            );
        }
    }
}

#[test]
fn gelu_family_errors() {
    let x = f32s(&[2, 3], &[0.; 6]);
    for (k, op) in [(fast_gelu as Kernel, "FastGelu"), (bias_gelu, "BiasGelu")] {
        let e = one_out(k, op, &[Some(&x), Some(&f32s(&[2, 3], &[0.; 6]))]).unwrap_err();
        assert!(e.contains(op) && e.contains("'bias' must be 1-D"), "{e}");
        let e = one_out(k, op, &[Some(&x), Some(&f32s(&[2], &[0.; 2]))]).unwrap_err();
        assert!(e.contains("length 2") && e.contains("3"), "{e}");
        let e = one_out(k, op, &[Some(&x), Some(&f64s(&[3], &[0.; 3]))]).unwrap_err();
        assert!(e.contains("float64"), "{e}");
        let e = one_out(k, op, &[Some(&f32s(&[], &[1.])), Some(&f32s(&[1], &[0.]))]).unwrap_err();
        assert!(e.contains("scalar"), "{e}");
        let e = one_out(
            k,
            op,
            &[Some(&i64s(&[3], &[0; 3])), Some(&i64s(&[3], &[0; 3]))],
        );
        assert!(e.unwrap_err().contains("int64"));
    }
    let e = one_out(bias_gelu, "BiasGelu", &[Some(&x)]).unwrap_err();
    assert!(e.contains("BiasGelu") && e.contains("input 1"), "{e}");
    let e = one_out(gelu, "Gelu", &[Some(&bools(&[1], &[true]))]).unwrap_err();
    assert!(e.contains("Gelu") && e.contains("bool"), "{e}");
    let e = one_out(gelu, "Gelu", &[]).unwrap_err();
    assert!(e.contains("input 0"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Type/shape inference and the executor

#[test]
fn inference_and_execution_of_fused_nodes() {
    let mut b = GraphBuilder::new("g", 17);
    b.import(MS_DOMAIN, 1);
    let x = b.input(
        "x",
        DType::F32,
        vec![Dim::Sym("B".into()), Dim::Known(3), Dim::Known(4)],
    );
    let skip = b.input("skip", DType::F32, dims(&[3, 4]));
    let g = b.initializer("g", &f32s(&[4], &[1., 2., 3., 4.]));
    let sln = b.node(
        MS_DOMAIN,
        "SkipLayerNormalization",
        &[Some(x), Some(skip), Some(g)],
        4,
        vec![],
    );
    let ln = b.node(
        "",
        "LayerNormalization",
        &[Some(sln[0]), Some(g)],
        3,
        vec![],
    );
    let ln1 = b.node(
        "",
        "LayerNormalization",
        &[Some(sln[3]), Some(g)],
        3,
        vec![attr::int("axis", 1), attr::int("stash_type", 11)],
    );
    let fg = b.node(MS_DOMAIN, "FastGelu", &[Some(ln[0]), Some(g)], 1, vec![]);
    for (v, name) in [
        (fg[0], "y"),
        (sln[1], "mean"),
        (sln[3], "sum"),
        (ln[2], "inv"),
        (ln1[1], "mean1"),
    ] {
        b.output(v, name);
    }
    let m = b.build();
    let ty = |v: ValueId| m.graph.value(v).ty.clone();
    let bsym = Dim::Sym("B".into());
    let full = TensorType::new(DType::F32, vec![bsym.clone(), Dim::Known(3), Dim::Known(4)]);
    let stat = TensorType::new(DType::F32, vec![bsym.clone(), Dim::Known(3), Dim::Known(1)]);
    assert_eq!(ty(sln[0]), full);
    assert_eq!(ty(sln[1]), stat);
    assert_eq!(ty(sln[2]), stat);
    assert_eq!(ty(sln[3]), full);
    assert_eq!(ty(ln[2]), stat);
    assert_eq!(ty(fg[0]), full);
    let stat1 = TensorType::new(DType::F64, vec![bsym, Dim::Known(1), Dim::Known(1)]);
    assert_eq!(ty(ln1[1]), stat1);
    crate::ops::verify(&m).unwrap();

    let exec = Executor::new(&m, &Limits::default()).unwrap();
    let xv = f32s(&[2, 3, 4], &wave(24, 0.6));
    let sv = f32s(&[3, 4], &wave(12, 1.6));
    let inputs = HashMap::from([
        ("x".to_string(), xv.clone()),
        ("skip".to_string(), sv.clone()),
    ]);
    let got = exec.run(&inputs).unwrap();
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["y", "mean", "sum", "inv", "mean1"]);
    assert_eq!(got[2].1, run1(add, "Add", &[&xv, &sv]).unwrap());
    assert_eq!(got[4].1.shape(), &[2, 1, 1]);
    assert_eq!(got[4].1.dtype(), DType::F64);
}

#[test]
fn inference_leaves_unknowns_unknown() {
    let mut b = GraphBuilder::new("g", 14);
    b.import(MS_DOMAIN, 1);
    let x = b.graph.new_value("x", TensorType::default());
    b.graph.inputs.push(x);
    let sln = b.node(
        MS_DOMAIN,
        "SkipLayerNormalization",
        &[Some(x), Some(x), Some(x)],
        2,
        vec![],
    );
    let ln = b.node(
        MS_DOMAIN,
        "LayerNormalization",
        &[Some(x), Some(x)],
        2,
        vec![attr::int("stash_type", 5)],
    );
    let other = b.node(MS_DOMAIN, "Attention", &[Some(x)], 1, vec![]);
    let m = b.build();
    let ty = |v: ValueId| m.graph.value(v).ty.clone();
    assert_eq!(ty(sln[1]).dtype, Some(DType::F32));
    assert_eq!(ty(sln[1]).shape, None);
    assert_eq!(ty(ln[1]), TensorType::default());
    assert_eq!(ty(other[0]), TensorType::default());
}
