//! Unit tests of conv.rs. Expected values are worked by hand (small cases, the ONNX operator
//! doc's examples, which are 3x3 neighbourhood sums) or come from a naive convolution written
//! here straight from the definition (every output, every tap, bounds checked).

use super::super::common::test_util::*;
use super::*;
use crate::builder::{sym, GraphBuilder};
use crate::ir::{attr, Model, Node, ValueId};
use crate::onnx::proto::AttributeProto;

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    attr::ints(name, v)
}

/// Deterministic values in about [-1, 1].
fn wave(n: usize, phase: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.7 + phase).sin() * 1.3).clamp(-1.0, 1.0))
        .collect()
}

fn conv1(attrs: Vec<AttributeProto>, ins: &[&Tensor]) -> Result<Tensor, String> {
    run_first(conv, &node("Conv", attrs), 22, ins)
}

#[test]
fn conv_small_by_hand_with_bias_and_f64() {
    // 3x3 iota * [[1, 2], [3, 4]]: 0+2+9+16, 1+4+12+20, 3+8+18+28, 4+10+21+32.
    let x = iota(&[1, 1, 3, 3]);
    let w = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let y = conv1(vec![], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2, 2], &[27., 37., 57., 67.]));
    let b = f32s(&[1], &[10.]);
    let y = conv1(vec![], &[&x, &w, &b]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2, 2], &[37., 47., 67., 77.]));
    let xd = f64s(&[1, 1, 3, 3], &[0., 1., 2., 3., 4., 5., 6., 7., 8.]);
    let wd = f64s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let y = conv1(vec![], &[&xd, &wd]).unwrap();
    assert_eq!(y, f64s(&[1, 1, 2, 2], &[27., 37., 57., 67.]));
}

#[test]
fn conv_pads_and_strides_as_the_operator_doc() {
    let x = iota(&[1, 1, 5, 5]);
    let w = f32s(&[1, 1, 3, 3], &[1.; 9]);
    let k = || ints("kernel_shape", &[3, 3]);
    let y = conv1(vec![k(), ints("pads", &[1, 1, 1, 1])], &[&x, &w]).unwrap();
    let want = [
        12., 21., 27., 33., 24., 33., 54., 63., 72., 51., 63., 99., 108., 117., 81., 93., 144.,
        153., 162., 111., 72., 111., 117., 123., 84.,
    ];
    assert_eq!(y, f32s(&[1, 1, 5, 5], &want));
    let y = conv1(vec![k()], &[&x, &w]).unwrap();
    let want = [54., 63., 72., 99., 108., 117., 144., 153., 162.];
    assert_eq!(y, f32s(&[1, 1, 3, 3], &want));
    // 7x5, strides 2: padded 1 all round, and asymmetric (top/bottom only).
    let x = iota(&[1, 1, 7, 5]);
    let s = || ints("strides", &[2, 2]);
    let y = conv1(vec![k(), s(), ints("pads", &[1, 1, 1, 1])], &[&x, &w]).unwrap();
    let want = [
        12., 27., 24., 63., 108., 81., 123., 198., 141., 112., 177., 124.,
    ];
    assert_eq!(y, f32s(&[1, 1, 4, 3], &want));
    let y = conv1(vec![k(), s(), ints("pads", &[1, 0, 1, 0])], &[&x, &w]).unwrap();
    assert_eq!(
        y,
        f32s(
            &[1, 1, 4, 2],
            &[21., 33., 99., 117., 189., 207., 171., 183.]
        )
    );
}

#[test]
fn conv_dilations_auto_pad_and_3d() {
    // Dilation 2: taps at (0,0), (0,2), (2,0), (2,2) of a 4x4 iota.
    let x = iota(&[1, 1, 4, 4]);
    let w = f32s(&[1, 1, 2, 2], &[1.; 4]);
    let y = conv1(vec![ints("dilations", &[2, 2])], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2, 2], &[20., 24., 36., 40.]));
    // 1-D [1, 2, 3, 4] * [1, 1]: SAME pads one zero at the end (UPPER) or the start (LOWER).
    let x = f32s(&[1, 1, 4], &[1., 2., 3., 4.]);
    let w = f32s(&[1, 1, 2], &[1., 1.]);
    let pad = |s: &str| vec![attr::string("auto_pad", s)];
    let y = conv1(pad("SAME_UPPER"), &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 4], &[3., 5., 7., 4.]));
    let y = conv1(pad("SAME_LOWER"), &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 4], &[1., 3., 5., 7.]));
    let y = conv1(pad("VALID"), &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 3], &[3., 5., 7.]));
    // SAME with stride 2 on 5: out 3, total pad (3-1)*2 + 3 - 5 = 2, one each side.
    let x = f32s(&[1, 1, 5], &[1., 2., 3., 4., 5.]);
    let w = f32s(&[1, 1, 3], &[1., 1., 1.]);
    let mut a = pad("SAME_LOWER");
    a.push(ints("strides", &[2]));
    let y = conv1(a, &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 3], &[3., 9., 9.]));
    // 3-D: a 2x2x2 kernel of ones over a 2x2x2 iota is the sum 0..7.
    let y = conv1(
        vec![],
        &[&iota(&[1, 1, 2, 2, 2]), &f32s(&[1, 1, 2, 2, 2], &[1.; 8])],
    );
    assert_eq!(y.unwrap(), f32s(&[1, 1, 1, 1, 1], &[28.]));
}

#[test]
fn conv_groups_by_hand() {
    // Two groups of one channel, 1x1 kernels: channel 0 doubled, channel 1 tripled.
    let x = f32s(&[1, 2, 2, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let g = || vec![attr::int("group", 2)];
    let y = conv1(g(), &[&x, &f32s(&[2, 1, 1, 1], &[2., 3.])]).unwrap();
    assert_eq!(
        y,
        f32s(&[1, 2, 2, 2], &[2., 4., 6., 8., 15., 18., 21., 24.])
    );
    // Depthwise 2x2 kernels: one output each, [1, 0, 0, 1] (diagonal) and [0, 1, 1, 0].
    let w = f32s(&[2, 1, 2, 2], &[1., 0., 0., 1., 0., 1., 1., 0.]);
    let y = conv1(g(), &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 2, 1, 1], &[5., 13.]));
    // Group 2 with two input channels each (im2col per group): sums of each pair.
    let x = f32s(&[1, 4, 1, 1], &[1., 2., 3., 4.]);
    let y = conv1(g(), &[&x, &f32s(&[2, 2, 1, 1], &[1.; 4])]).unwrap();
    assert_eq!(y, f32s(&[1, 2, 1, 1], &[3., 7.]));
}

/// Conv from the definition: every output position, every tap, bounds checked.
/// `geo`: strides, dilations, begin pads and output spatial dims.
fn naive_conv(
    (x, xs): (&[f32], &[usize]),
    (w, ws): (&[f32], &[usize]),
    g: usize,
    geo: [&[usize]; 4],
) -> Vec<f32> {
    let [s, d, pb, os] = geo;
    let n = xs.len() - 2;
    let (c, m) = (xs[1], ws[0]);
    let (cg, mg) = (c / g, m / g);
    let unravel = |mut i: usize, shape: &[usize]| {
        let mut v = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            v[a] = i % shape[a];
            i /= shape[a];
        }
        v
    };
    let (osz, ksz): (usize, usize) = (os.iter().product(), ws[2..].iter().product());
    let mut y = vec![0f32; xs[0] * m * osz];
    for (yi, yv) in y.iter_mut().enumerate() {
        let (b, oc, o) = (yi / (m * osz), yi / osz % m, unravel(yi % osz, os));
        let grp = oc / mg;
        for ci in 0..cg {
            for t in 0..ksz {
                let k = unravel(t, &ws[2..]);
                let mut at = b * c + grp * cg + ci;
                let mut inside = true;
                for a in 0..n {
                    let p = (o[a] * s[a] + k[a] * d[a]) as i64 - pb[a] as i64;
                    inside &= p >= 0 && (p as usize) < xs[a + 2];
                    at = at * xs[a + 2] + p.max(0) as usize;
                }
                if inside {
                    *yv += x[at] * w[(oc * cg + ci) * ksz + t];
                }
            }
        }
    }
    y
}

#[test]
fn conv_paths_agree_with_the_naive_definition() {
    // (X shape, W shape, group, strides, dilations, pads): the im2col, pointwise, strided 1x1,
    // depthwise (multiplier 1 and 2, strides 1 and 2) paths, 1-D to 3-D; the last two large
    // enough for several im2col blocks (in 3-D, blocks across depth slices).
    type Case = (
        Vec<usize>,
        Vec<usize>,
        usize,
        Vec<usize>,
        Vec<usize>,
        Vec<usize>,
    );
    let cases: Vec<Case> = vec![
        (
            vec![2, 4, 9],
            vec![6, 2, 3],
            2,
            vec![2],
            vec![2],
            vec![1, 2],
        ),
        (
            vec![1, 3, 7, 6],
            vec![4, 3, 3, 2],
            1,
            vec![2, 1],
            vec![1, 2],
            vec![1, 0, 2, 1],
        ),
        (
            vec![2, 4, 6, 5],
            vec![8, 1, 3, 3],
            4,
            vec![1, 1],
            vec![1, 1],
            vec![1, 1, 1, 1],
        ),
        (
            vec![1, 4, 7, 6],
            vec![4, 1, 3, 3],
            4,
            vec![2, 2],
            vec![1, 1],
            vec![1, 1, 1, 1],
        ),
        (
            vec![1, 4, 5, 5],
            vec![4, 1, 3, 3],
            4,
            vec![1, 2],
            vec![2, 1],
            vec![2, 0, 0, 2],
        ),
        (
            vec![2, 4, 3, 5],
            vec![5, 4, 1, 1],
            1,
            vec![1, 1],
            vec![1, 1],
            vec![0, 0, 0, 0],
        ),
        (
            vec![1, 3, 6, 6],
            vec![2, 3, 1, 1],
            1,
            vec![2, 2],
            vec![1, 1],
            vec![0, 0, 0, 0],
        ),
        (
            vec![1, 2, 4, 5, 3],
            vec![3, 2, 2, 3, 2],
            1,
            vec![1, 2, 1],
            vec![2, 1, 1],
            vec![0, 1, 1, 1, 0, 0],
        ),
        (
            vec![1, 32, 64, 64],
            vec![2, 32, 3, 3],
            1,
            vec![1, 1],
            vec![1, 1],
            vec![1; 4],
        ),
        (
            vec![1, 8, 6, 40, 40],
            vec![2, 8, 3, 3, 3],
            1,
            vec![1; 3],
            vec![1; 3],
            vec![1; 6],
        ),
    ];
    for (xs, ws, g, s, d, p) in cases {
        let n = xs.len() - 2;
        let xv = wave(xs.iter().product(), 0.3);
        let wv = wave(ws.iter().product(), 1.1);
        let os: Vec<usize> = (0..n)
            .map(|a| (xs[a + 2] + p[a] + p[a + n] - d[a] * (ws[a + 2] - 1) - 1) / s[a] + 1)
            .collect();
        let want = naive_conv((&xv, &xs), (&wv, &ws), g, [&s, &d, &p[..n], &os]);
        let i64s = |v: &[usize]| v.iter().map(|&v| v as i64).collect::<Vec<_>>();
        let a = vec![
            attr::int("group", g as i64),
            ints("strides", &i64s(&s)),
            ints("dilations", &i64s(&d)),
            ints("pads", &i64s(&p)),
        ];
        let y = conv1(a, &[&f32s(&xs, &xv), &f32s(&ws, &wv)]).unwrap();
        let mut shape = vec![xs[0], ws[0]];
        shape.extend(&os);
        assert_close(&y, &f32s(&shape, &want), 1e-4);
    }
}

fn convt(opset: i64, attrs: Vec<AttributeProto>, ins: &[&Tensor]) -> Result<Tensor, String> {
    run_first(conv_transpose, &node("ConvTranspose", attrs), opset, ins)
}

#[test]
fn conv_transpose_1d_by_hand() {
    let x = f32s(&[1, 1, 3], &[1., 2., 3.]);
    let w = f32s(&[1, 1, 2], &[1., 1.]);
    // Stride 1: each input adds to two neighbouring outputs.
    assert_eq!(
        convt(22, vec![], &[&x, &w]).unwrap(),
        f32s(&[1, 1, 4], &[1., 3., 5., 3.])
    );
    let s2 = || ints("strides", &[2]);
    let y = convt(22, vec![s2()], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 6], &[1., 1., 2., 2., 3., 3.]));
    let y = convt(22, vec![s2(), ints("pads", &[1, 1])], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 4], &[1., 2., 2., 3.]));
    let y = convt(22, vec![s2(), ints("output_padding", &[1])], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 7], &[1., 1., 2., 2., 3., 3., 0.]));
    // output_shape 7 > the full 6: total pad -1 splits (0, -1), one more zero at the end.
    let b = f32s(&[1], &[0.5]);
    let y = convt(22, vec![s2(), ints("output_shape", &[7])], &[&x, &w, &b]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 7], &[1.5, 1.5, 2.5, 2.5, 3.5, 3.5, 0.5]));
    // Kernel 3, stride 2: full output [1, 1, 3, 2, 5, 3, 3]; SAME_UPPER keeps 6 = 3 * 2 and
    // pads 1: from opset 11 at the end, before 11 at the start.
    let w3 = f32s(&[1, 1, 3], &[1., 1., 1.]);
    let a = || vec![s2(), attr::string("auto_pad", "SAME_UPPER")];
    let y = convt(22, a(), &[&x, &w3]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 6], &[1., 1., 3., 2., 5., 3.]));
    let y = convt(10, a(), &[&x, &w3]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 6], &[1., 3., 2., 5., 3., 3.]));
    // Dilation 2 of [1, 1]: taps two apart.
    let y = convt(22, vec![ints("dilations", &[2])], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 5], &[1., 2., 4., 2., 3.]));
}

#[test]
fn conv_transpose_groups_and_channels() {
    // C = 2, group 2, two outputs per group: W [2, 2, 1].
    let x = f32s(&[1, 2, 2], &[1., 2., 3., 4.]);
    let w = f32s(&[2, 2, 1], &[1., 10., 2., 20.]);
    let y = convt(22, vec![attr::int("group", 2)], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 4, 2], &[1., 2., 10., 20., 6., 8., 60., 80.]));
    // Group 1: both input channels add into each output channel.
    let w = f32s(&[2, 1, 1], &[1., 10.]);
    let y = convt(22, vec![], &[&x, &w]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2], &[31., 42.]));
    // 2-D with a 2x2 kernel of ones, stride 2: each input becomes a 2x2 block.
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let w = f32s(&[1, 1, 2, 2], &[1.; 4]);
    let y = convt(22, vec![ints("strides", &[2, 2])], &[&x, &w]).unwrap();
    let want = [
        1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.,
    ];
    assert_eq!(y, f32s(&[1, 1, 4, 4], &want));
}

#[test]
fn conv_errors_name_what_is_wrong() {
    let x = iota(&[1, 3, 4, 4]);
    let err = |a: Vec<AttributeProto>, ins: &[&Tensor]| conv1(a, ins).unwrap_err();
    let e = err(vec![], &[&x, &iota(&[2, 2, 3, 3])]);
    assert!(
        e.contains("X has 3 channels") && e.contains("W.shape[1] * group"),
        "{e}"
    );
    let e = err(vec![], &[&x, &iota(&[2, 3, 3])]);
    assert!(e.contains("W must have X's rank 4"), "{e}");
    let e = err(vec![], &[&iota(&[1, 3, 2, 2]), &iota(&[2, 3, 3, 3])]);
    assert!(e.contains("larger than the padded input 2 + 0 + 0"), "{e}");
    let e = err(vec![], &[&x, &iota(&[2, 3, 1, 1]), &iota(&[3])]);
    assert!(e.contains("B must have shape [2], got [3]"), "{e}");
    let e = err(vec![attr::int("group", 3)], &[&x, &iota(&[2, 1, 1, 1])]);
    assert!(e.contains("not a multiple of group 3"), "{e}");
    let e = err(
        vec![ints("kernel_shape", &[2, 2])],
        &[&x, &iota(&[2, 3, 3, 3])],
    );
    assert!(
        e.contains("'kernel_shape' [2, 2] differs from W's kernel dims [3, 3]"),
        "{e}"
    );
    let e = err(vec![ints("strides", &[1])], &[&x, &iota(&[2, 3, 3, 3])]);
    assert!(
        e.contains("'strides' is for 1 spatial axes, the input has 2"),
        "{e}"
    );
    let e = err(
        vec![],
        &[&iota(&[1, 1, 2, 2, 2, 2]), &iota(&[1, 1, 1, 1, 1, 1])],
    );
    assert!(e.contains("4 spatial dims are not supported"), "{e}");
    let e = err(vec![], &[&x, &f64s(&[1, 3, 1, 1], &[1., 1., 1.])]);
    assert!(e.contains("input types differ"), "{e}");
    let e = err(vec![], &[&i32s(&[1, 1, 1], &[1]), &i32s(&[1, 1, 1], &[1])]);
    assert!(e.contains("element type int32 is not supported"), "{e}");
    // Attribute errors at parse.
    let bad = |a: AttributeProto| conv1(vec![a], &[&x, &iota(&[2, 3, 1, 1])]).unwrap_err();
    let e = bad(ints("strides", &[1, 0]));
    assert!(e.contains("'strides' must be positive"), "{e}");
    let e = bad(ints("pads", &[0, -1, 0, 0]));
    assert!(e.contains("'pads' must be non-negative"), "{e}");
    let e = bad(attr::string("auto_pad", "SAME"));
    assert!(e.contains("'auto_pad' is 'SAME'"), "{e}");
    let e = bad(attr::int("group", 0));
    assert!(e.contains("'group' must be positive"), "{e}");
    let e = bad(ints("pads", &[1, 1, 1]));
    assert!(e.contains("even length"), "{e}");
    // ConvTranspose: W's first dim is X's channels.
    let e = convt(22, vec![], &[&x, &iota(&[2, 3, 3, 3])]).unwrap_err();
    assert!(
        e.contains("X has 3 channels") && e.contains("W.shape[0]"),
        "{e}"
    );
    let e = convt(
        22,
        vec![ints("output_shape", &[5])],
        &[&x, &iota(&[3, 1, 2, 2])],
    );
    assert!(e
        .unwrap_err()
        .contains("'output_shape' [5] is for 1 spatial axes"));
}

/// The inferred shape of `v`.
fn shape_of(m: &Model, v: ValueId) -> Vec<Dim> {
    m.graph.value(v).ty.shape.clone().unwrap()
}

#[test]
fn inference_keeps_symbols_and_derives_names() {
    let mut b = GraphBuilder::new("g", 22);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("N"), Dim::Known(3), sym("H"), Dim::Known(224)],
    );
    let w7 = b.initializer("W7", &Tensor::F32(ArrayD::zeros(IxDyn(&[64, 3, 7, 7]))));
    let stem = vec![ints("strides", &[2, 2]), ints("pads", &[3, 3, 3, 3])];
    let y = b.op("Conv", &[x, w7], stem.clone());
    let y2 = b.op("Conv", &[x, w7], stem);
    let w3 = b.initializer("W3", &Tensor::F32(ArrayD::zeros(IxDyn(&[64, 64, 3, 3]))));
    let same = b.op("Conv", &[y, w3], vec![ints("pads", &[1, 1, 1, 1])]);
    let w1 = b.initializer("W1", &Tensor::F32(ArrayD::zeros(IxDyn(&[8, 64, 1, 1]))));
    let point = b.op("Conv", &[same, w1], vec![]);
    let up = b.op(
        "Conv",
        &[y, w3],
        vec![attr::string("auto_pad", "SAME_UPPER")],
    );
    let wt = b.initializer("WT", &Tensor::F32(ArrayD::zeros(IxDyn(&[64, 4, 2, 2]))));
    let t = b.op("ConvTranspose", &[y, wt], vec![ints("strides", &[2, 2])]);
    let t1 = b.op("ConvTranspose", &[y, wt], vec![ints("pads", &[0, 0, 1, 1])]);
    let m = b.build();
    let stem_h = Dim::Sym("?((H-1)/2+1)".into());
    assert_eq!(
        shape_of(&m, y),
        vec![sym("N"), Dim::Known(64), stem_h.clone(), Dim::Known(112)]
    );
    assert_eq!(
        shape_of(&m, y2),
        shape_of(&m, y),
        "same input and attributes, same name"
    );
    assert_eq!(m.graph.value(y).ty.dtype, Some(DType::F32));
    assert_eq!(
        shape_of(&m, same),
        shape_of(&m, y),
        "3x3 pad 1 stride 1 keeps the symbol"
    );
    assert_eq!(
        shape_of(&m, point)[1..],
        [Dim::Known(8), stem_h.clone(), Dim::Known(112)]
    );
    assert_eq!(shape_of(&m, up), shape_of(&m, y));
    let th = Dim::Sym("?(2*(?((H-1)/2+1)-1)+2)".into());
    assert_eq!(
        shape_of(&m, t),
        vec![sym("N"), Dim::Known(4), th, Dim::Known(224)]
    );
    assert_eq!(
        shape_of(&m, t1)[2..],
        [stem_h, Dim::Known(112)],
        "k2 s1 pads 0+1 keeps it"
    );
}

#[test]
fn inference_without_weights_or_with_unknown_dims() {
    let mut b = GraphBuilder::new("g", 22);
    let x = b.input(
        "X",
        DType::F64,
        vec![sym("N"), Dim::Known(2), Dim::Unknown, Dim::Known(9)],
    );
    let w = b.input("W", DType::F64, vec![Dim::Unknown; 4]);
    let y = b.op("Conv", &[x, w], vec![ints("kernel_shape", &[3, 3])]);
    let z = b.op("Conv", &[x, w], vec![]);
    let m = b.build();
    let s = shape_of(&m, y);
    assert_eq!((s.len(), &s[0], &s[3]), (4, &sym("N"), &Dim::Known(7)));
    assert!(s[1].is_undecided() && s[2].is_undecided(), "{s:?}");
    assert_eq!(m.graph.value(z).ty.dtype, Some(DType::F64));
    assert!(
        shape_of(&m, z)[3].is_undecided(),
        "no kernel size, no spatial size"
    );
}

/// Not a check: times the reference kernels on ResNet-18 / MobileNetV3 shapes, e.g.
/// `cargo test --release --lib conv_micro_benchmark -- --ignored --nocapture`.
#[test]
#[ignore]
fn conv_micro_benchmark() {
    use std::time::Instant;
    let time = |label: &str, k: Kernel, n: &Node, ins: &[&Tensor], flops: f64| {
        let mut t: Vec<f64> = (0..15)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(run_first(k, n, 22, ins).unwrap());
                start.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        println!(
            "{label}: median {:.3} ms, min {:.3} ms, {:.1} GFLOP/s",
            t[7] * 1e3,
            t[0] * 1e3,
            flops / t[7] / 1e9
        );
    };
    let t = |shape: &[usize], phase: f32| f32s(shape, &wave(shape.iter().product(), phase));
    let p1 = || ints("pads", &[1, 1, 1, 1]);
    let (x, w) = (t(&[1, 64, 56, 56], 0.1), t(&[64, 64, 3, 3], 0.2));
    let flops = 2.0 * 64.0 * 64.0 * 9.0 * 56.0 * 56.0;
    time(
        "Conv 1x64x56x56 * 64x64x3x3 pad 1",
        conv,
        &node("Conv", vec![p1()]),
        &[&x, &w],
        flops,
    );
    let (x, w) = (t(&[1, 3, 224, 224], 0.3), t(&[64, 3, 7, 7], 0.4));
    let a = vec![ints("pads", &[3, 3, 3, 3]), ints("strides", &[2, 2])];
    let flops = 2.0 * 64.0 * 3.0 * 49.0 * 112.0 * 112.0;
    time(
        "Conv stem 1x3x224x224 * 64x3x7x7 s2",
        conv,
        &node("Conv", a),
        &[&x, &w],
        flops,
    );
    let (x, w) = (t(&[1, 64, 56, 56], 0.5), t(&[256, 64, 1, 1], 0.6));
    let flops = 2.0 * 256.0 * 64.0 * 56.0 * 56.0;
    time(
        "Conv 1x1 1x64x56x56 -> 256",
        conv,
        &node("Conv", vec![]),
        &[&x, &w],
        flops,
    );
    let (x, w) = (t(&[1, 72, 56, 56], 0.7), t(&[72, 1, 3, 3], 0.8));
    let a = vec![p1(), attr::int("group", 72)];
    let flops = 2.0 * 72.0 * 9.0 * 56.0 * 56.0;
    time(
        "Conv depthwise 1x72x56x56 3x3",
        conv,
        &node("Conv", a),
        &[&x, &w],
        flops,
    );
    let x = t(&[1, 64, 112, 112], 0.9);
    let a = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        p1(),
    ];
    let flops = 64.0 * 56.0 * 56.0 * 9.0;
    time(
        "MaxPool 1x64x112x112 3x3 s2",
        super::super::pool::max_pool,
        &node("MaxPool", a),
        &[&x],
        flops,
    );
}

fn fused(attrs: Vec<AttributeProto>, ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let mut n = Node::new("FusedConv", crate::ir::model::MS_DOMAIN);
    for a in attrs {
        n.set_attr(a);
    }
    run_at(fused_conv, &n, 1, ins).map(|mut v| v.remove(0))
}

#[test]
fn fused_conv_activations_and_z() {
    // Conv of 3x3 iota by [[1, 2], [3, 4]] is [27, 37, 57, 67] (above); bias -40 gives
    // [-13, -3, 17, 27].
    let x = iota(&[1, 1, 3, 3]);
    let w = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let b = f32s(&[1], &[-40.]);
    let act = |name: &str, params: &[f32]| {
        let mut a = vec![attr::string("activation", name)];
        if !params.is_empty() {
            a.push(attr::floats("activation_params", params));
        }
        a
    };
    let ins = [Some(&x), Some(&w), Some(&b)];
    let y = |attrs| fused(attrs, &ins).unwrap();
    let s = |v: &[f32]| f32s(&[1, 1, 2, 2], v);
    assert_eq!(y(vec![]), s(&[-13., -3., 17., 27.]));
    assert_eq!(y(act("Relu", &[])), s(&[0., 0., 17., 27.]));
    assert_eq!(y(act("LeakyRelu", &[0.5])), s(&[-6.5, -1.5, 17., 27.]));
    assert_eq!(y(act("Clip", &[-5., 20.])), s(&[-5., -3., 17., 20.]));
    // HardSigmoid alpha 0.1, beta 0.5: clamp(-0.8), clamp(0.2), clamp(2.2), clamp(3.2).
    assert_close(
        &y(act("HardSigmoid", &[0.1, 0.5])),
        &s(&[0., 0.2, 1., 1.]),
        1e-6,
    );
    let t = |v: f32| v.tanh();
    assert_close(
        &y(act("Tanh", &[])),
        &s(&[t(-13.), t(-3.), t(17.), t(27.)]),
        1e-6,
    );
    let sg = |v: f32| 1. / (1. + (-v).exp());
    let want = s(&[sg(-13.), sg(-3.), sg(17.), sg(27.)]);
    assert_close(&y(act("Sigmoid", &[])), &want, 1e-6);
    // Z is added before the activation.
    let z = s(&[20., 1., -20., 0.]);
    let ins = [Some(&x), Some(&w), Some(&b), Some(&z)];
    assert_eq!(
        fused(act("Relu", &[]), &ins).unwrap(),
        s(&[7., 0., 0., 27.])
    );
    // Z without B, float64.
    let xd = f64s(&[1, 1, 3, 3], &[0., 1., 2., 3., 4., 5., 6., 7., 8.]);
    let wd = f64s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let zd = f64s(&[1, 1, 2, 2], &[-30., 0., 0., 0.]);
    let y = fused(act("Relu", &[]), &[Some(&xd), Some(&wd), None, Some(&zd)]).unwrap();
    assert_eq!(y, f64s(&[1, 1, 2, 2], &[0., 37., 57., 67.]));
}

#[test]
fn fused_conv_refusals() {
    let parse = |attrs: Vec<AttributeProto>| {
        let mut n = Node::new("FusedConv", crate::ir::model::MS_DOMAIN);
        for a in attrs {
            n.set_attr(a);
        }
        crate::ops::resolve(&n, 1)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let e = parse(vec![attr::string("activation", "Elu")]).unwrap_err();
    assert!(e.contains("\"Elu\" is not supported"), "{e}");
    let e = parse(vec![attr::string("activation", "LeakyRelu")]).unwrap_err();
    assert!(
        e.contains("LeakyRelu takes 1 'activation_params', got 0"),
        "{e}"
    );
    let e = parse(vec![
        attr::string("activation", "Clip"),
        attr::floats("activation_params", &[0.]),
    ])
    .unwrap_err();
    assert!(e.contains("Clip takes 2"), "{e}");
    let x = iota(&[1, 1, 3, 3]);
    let w = f32s(&[1, 1, 2, 2], &[1.; 4]);
    let z = f32s(&[1, 1, 3, 3], &[0.; 9]);
    let e = fused(vec![], &[Some(&x), Some(&w), None, Some(&z)]).unwrap_err();
    assert!(e.contains("Z must have Y's shape [1, 1, 2, 2]"), "{e}");
    let e = fused(vec![], &[Some(&x), Some(&f32s(&[1, 2, 2, 2], &[1.; 8]))]).unwrap_err();
    assert!(e.starts_with("FusedConv: X has 1 channels"), "{e}");
}
