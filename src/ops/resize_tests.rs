use super::super::common::test_util::*;
use super::*;
use crate::builder::{dims, sym, GraphBuilder};
use crate::ir::{attr, Node};
use crate::tensor::DType;

fn rs(attrs: &[(&str, &str)]) -> Node {
    node(
        "Resize",
        attrs.iter().map(|(k, v)| attr::string(k, v)).collect(),
    )
}

/// Resize at `opset` with optional roi (input 1), scales (2) and sizes (3).
fn run11(
    n: &Node,
    opset: i64,
    x: &Tensor,
    roi: Option<&Tensor>,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
) -> Result<Tensor, String> {
    let sc = scales.map(|s| f32s(&[s.len()], s));
    let sz = sizes.map(Tensor::from_i64s);
    let ins = [Some(x), roi, sc.as_ref(), sz.as_ref()];
    run_at(resize, n, opset, &ins).map(|mut v| v.remove(0))
}

fn scaled(n: &Node, x: &Tensor, scales: &[f32]) -> Tensor {
    run11(n, 19, x, None, Some(scales), None).unwrap()
}

#[test]
fn nearest_upsample_half_pixel_repeats() {
    // x = y / 2 - 0.25 rounds (half down) to 0, 0, 1, 1.
    let x = f32s(&[1, 2], &[1., 2.]);
    let y = scaled(&rs(&[]), &x, &[1., 2.]);
    assert_eq!(y, f32s(&[1, 4], &[1., 1., 2., 2.]));
    // Bool and int64 go through the same gather; at scale 1.5, x = -1/6, 1/2, 7/6.
    let b = bools(&[2], &[true, false]);
    assert_eq!(
        scaled(&rs(&[]), &b, &[1.5]),
        bools(&[3], &[true, true, false])
    );
    let i = i64s(&[2], &[5, -7]);
    assert_eq!(scaled(&rs(&[]), &i, &[2.]), i64s(&[4], &[5, 5, -7, -7]));
}

#[test]
fn nearest_modes_pick_by_the_fraction() {
    // asymmetric, scale 4 on [0, 1, 2]: x = y / 4 = 0, 0.25, 0.5, ..., 2.75 (clamped to 2).
    let x = f32s(&[3], &[0., 1., 2.]);
    let asym = |m: &str| {
        let n = rs(&[
            ("coordinate_transformation_mode", "asymmetric"),
            ("nearest_mode", m),
        ]);
        scaled(&n, &x, &[4.])
    };
    let want = |v: [f32; 12]| f32s(&[12], &v);
    let floor = want([0., 0., 0., 1., 1., 1., 1., 2., 2., 2., 2., 2.]);
    assert_eq!(asym("round_prefer_floor"), floor);
    let ceil = want([0., 0., 1., 1., 1., 1., 2., 2., 2., 2., 2., 2.]);
    assert_eq!(asym("round_prefer_ceil"), ceil);
    let down = want([0., 0., 0., 0., 1., 1., 1., 1., 2., 2., 2., 2.]);
    assert_eq!(asym("floor"), down);
    let up = want([0., 1., 1., 1., 1., 2., 2., 2., 2., 2., 2., 2.]);
    assert_eq!(asym("ceil"), up);
}

#[test]
fn linear_coordinate_modes() {
    let x = f32s(&[2], &[1., 3.]);
    let lin = |c: &str| {
        let n = rs(&[("mode", "linear"), ("coordinate_transformation_mode", c)]);
        scaled(&n, &x, &[2.])
    };
    // half_pixel: x = -0.25, 0.25, 0.75, 1.25 (clamped at the edges).
    assert_eq!(lin("half_pixel"), f32s(&[4], &[1., 1.5, 2.5, 3.]));
    // asymmetric: x = 0, 0.5, 1, 1.5.
    assert_eq!(lin("asymmetric"), f32s(&[4], &[1., 2., 3., 3.]));
    // align_corners: x = y / 3.
    let want = f32s(&[4], &[1., 5. / 3., 7. / 3., 3.]);
    assert_close(&lin("align_corners"), &want, 1e-6);
    // Integers interpolate in float64, then round half to even: 0, 0.5, 1, 1 -> 0, 0, 1, 1.
    let i = i32s(&[2], &[0, 1]);
    let n = rs(&[
        ("mode", "linear"),
        ("coordinate_transformation_mode", "asymmetric"),
    ]);
    assert_eq!(scaled(&n, &i, &[2.]), i32s(&[4], &[0, 0, 1, 1]));
}

#[test]
fn cubic_downsample_and_exclude_outside() {
    // [0, 10, 0, 0] at scale 0.5: x = 0.5 and 2.5; A = -0.75 weights at distances 1.5 and
    // 0.5 are -0.09375 and 0.59375.
    let x = f64s(&[4], &[0., 10., 0., 0.]);
    let y = scaled(&rs(&[("mode", "cubic")]), &x, &[0.5]);
    assert_close(&y, &f64s(&[2], &[5.9375, -0.9375]), 1e-12);
    // exclude_outside drops position -1 at x = 0.5 (weights renormalized by 1.09375) and
    // position 4 at x = 2.5.
    let mut n = rs(&[("mode", "cubic")]);
    n.set_attr(attr::int("exclude_outside", 1));
    let y = scaled(&n, &x, &[0.5]);
    let want = f64s(&[2], &[5.9375 / 1.09375, -0.9375 / 1.09375]);
    assert_close(&y, &want, 1e-12);
}

#[test]
fn antialias_widens_the_linear_window() {
    // Scale 0.5: the triangle stretches to 4 taps, weights 1, 3, 3, 1 over 8.
    let x = f32s(&[8], &[0., 0., 0., 8., 0., 0., 0., 0.]);
    let mut n = rs(&[("mode", "linear")]);
    n.set_attr(attr::int("antialias", 1));
    let y = scaled(&n, &x, &[0.5]);
    assert_close(&y, &f32s(&[4], &[0., 3., 1., 0.]), 1e-6);
}

#[test]
fn tf_crop_and_resize_with_extrapolation() {
    let x = f32s(&[5], &[1., 2., 3., 4., 5.]);
    let mut n = rs(&[
        ("mode", "linear"),
        ("coordinate_transformation_mode", "tf_crop_and_resize"),
    ]);
    n.set_attr(attr::float("extrapolation_value", 9.));
    // roi [0.25, 0.75] over 3 outputs: x = y + 1.
    let roi = f32s(&[2], &[0.25, 0.75]);
    let y = run11(&n, 19, &x, Some(&roi), None, Some(&[3])).unwrap();
    assert_eq!(y, f32s(&[3], &[2., 3., 4.]));
    // roi [0.5, 1.5]: x = 2, 4, 6; 6 is outside.
    let roi = f32s(&[2], &[0.5, 1.5]);
    let y = run11(&n, 19, &x, Some(&roi), None, Some(&[3])).unwrap();
    assert_eq!(y, f32s(&[3], &[3., 5., 9.]));
    let e = run11(&n, 19, &x, None, None, Some(&[3])).unwrap_err();
    assert_eq!(e, "Resize: tf_crop_and_resize needs the roi input");
}

#[test]
fn sizes_axes_and_aspect_policies() {
    let x = iota(&[1, 2, 4]);
    // Axes [1, 2] (18+), sizes [2, 2]: not_larger takes scale 0.5 -> [1, 2]; nearest at
    // x = 2y + 0.5 rounds half down to 2y.
    let mut n = rs(&[("keep_aspect_ratio_policy", "not_larger")]);
    n.set_attr(attr::ints("axes", &[1, -1]));
    let y = run11(&n, 18, &x, None, None, Some(&[2, 2])).unwrap();
    assert_eq!(y, f32s(&[1, 1, 2], &[0., 2.]));
    let mut n = rs(&[("keep_aspect_ratio_policy", "not_smaller")]);
    n.set_attr(attr::ints("axes", &[1, 2]));
    let y = run11(&n, 18, &x, None, None, Some(&[4, 4])).unwrap();
    assert_eq!(y.shape(), &[1, 4, 8]);
    // Stretch: sizes as given; the old inputs layout with an empty scales tensor (opset 11).
    let empty = f32s(&[0], &[]);
    let sz = Tensor::from_i64s(&[1, 3, 2]);
    let ins = [Some(&x), Some(&empty), Some(&empty), Some(&sz)];
    let y = run_at(resize, &rs(&[]), 11, &ins).unwrap();
    assert_eq!(y[0].shape(), &[1, 3, 2]);
}

#[test]
fn versions_before_11_and_upsample() {
    // Resize 10: asymmetric; nearest rounds up when downsampling (1.67 -> 2).
    let x = f32s(&[1, 1, 2, 4], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let sc = f32s(&[4], &[1., 1., 0.6, 0.6]);
    let y = run_first(resize, &rs(&[]), 10, &[&x, &sc]).unwrap();
    assert_eq!(y, f32s(&[1, 1, 1, 2], &[1., 3.]));
    let lin = rs(&[("mode", "linear")]);
    let y = run_first(
        resize,
        &lin,
        10,
        &[&f32s(&[2], &[1., 3.]), &f32s(&[1], &[2.])],
    );
    assert_eq!(y.unwrap(), f32s(&[4], &[1., 2., 3., 3.]));
    // Upsample 7 (attribute) and 9 (input).
    let x = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let want = f32s(&[2, 4], &[1., 1., 2., 2., 3., 3., 4., 4.]);
    let n7 = node("Upsample", vec![attr::floats("scales", &[1., 2.])]);
    assert_eq!(run_first(resize, &n7, 8, &[&x]).unwrap(), want);
    let n9 = node("Upsample", vec![]);
    let y = run_first(resize, &n9, 9, &[&x, &f32s(&[2], &[1., 2.])]).unwrap();
    assert_eq!(y, want);
    let e = run_first(resize, &n9, 9, &[&x, &f32s(&[2], &[1., 0.5])]).unwrap_err();
    assert_eq!(e, "Upsample: scale 0.5 must be finite and >= 1");
    let e = run_first(resize, &n9, 10, &[&x, &f32s(&[2], &[1., 2.])]).unwrap_err();
    assert_eq!(e, "Upsample is deprecated from opset 10: use Resize");
}

#[test]
fn bad_arguments_are_errors() {
    let x = f32s(&[2, 2], &[1., 2., 3., 4.]);
    let n = rs(&[]);
    let e = |s: Option<&[f32]>, z: Option<&[i64]>| run11(&n, 19, &x, None, s, z).unwrap_err();
    assert_eq!(
        e(Some(&[1., 0.]), None),
        "Resize: scale 0 must be finite and positive"
    );
    assert_eq!(
        e(Some(&[1., f32::NAN]), None),
        "Resize: scale NaN must be finite and positive"
    );
    assert_eq!(
        e(Some(&[2.]), None),
        "Resize: scales has 1 values; 2 expected (one per resized axis)"
    );
    assert_eq!(
        e(Some(&[1., 1.]), Some(&[2, 2])),
        "Resize: give scales or sizes, not both"
    );
    assert_eq!(e(None, None), "Resize: one of scales and sizes is required");
    assert_eq!(e(None, Some(&[2, -1])), "Resize: negative size -1");
    assert!(e(Some(&[1e5, 1e5]), None).contains("byte limit"));
    let empty = f32s(&[0, 2], &[]);
    let err = run11(&n, 19, &empty, None, None, Some(&[3, 2])).unwrap_err();
    assert_eq!(err, "Resize: axis 0 is empty but its output size is 3");
    let b = bools(&[2], &[true, false]);
    let lin = rs(&[("mode", "linear")]);
    let err = run11(&lin, 19, &b, None, Some(&[2.]), None).unwrap_err();
    assert_eq!(err, "Resize: mode Linear needs numbers, not bool");
    // Attribute values the opset does not define.
    let parse = |n: &Node, opset: i64| run11(n, opset, &x, None, Some(&[1., 1.]), None);
    let e = parse(&rs(&[("mode", "cubic")]), 10).unwrap_err();
    assert_eq!(e, "Resize: mode 'cubic' is not supported at opset 10");
    let sym = rs(&[("coordinate_transformation_mode", "half_pixel_symmetric")]);
    assert!(parse(&sym, 18)
        .unwrap_err()
        .contains("'half_pixel_symmetric'"));
    assert!(parse(&sym, 19).is_ok());
    let nn = rs(&[("coordinate_transformation_mode", "tf_half_pixel_for_nn")]);
    assert!(parse(&nn, 11).is_ok());
    assert!(parse(&nn, 13).is_err());
    let e = parse(&rs(&[("nearest_mode", "")]), 19).unwrap_err();
    assert_eq!(e, "Resize: nearest_mode '' is not supported at opset 19");
}

#[test]
fn inference_from_constant_scales_and_sizes() {
    let mut b = GraphBuilder::new("g", 19);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("N"), Dim::Known(3), Dim::Known(5)],
    );
    let none: Option<crate::ir::ValueId> = None;
    let sc = b.initializer("sc", &f32s(&[3], &[1., 2., 0.5]));
    let by_scales = b.node("", "Resize", &[Some(x), none, Some(sc)], 1, vec![])[0];
    let sz = b.initializer("sz", &Tensor::from_i64s(&[7]));
    let n = [Some(x), none, none, Some(sz)];
    let by_sizes = b.node("", "Resize", &n, 1, vec![attr::ints("axes", &[-1])])[0];
    let dynamic = b.input("S", DType::F32, dims(&[3]));
    let unknown = b.node("", "Resize", &[Some(x), none, Some(dynamic)], 1, vec![])[0];
    let m = b.build();
    let shape = |v| m.graph.value(v).ty.shape.clone().unwrap();
    // floor(3 * 2) = 6, floor(5 * 0.5) = 2; the symbolic batch keeps its name at scale 1.
    assert_eq!(
        shape(by_scales),
        vec![sym("N"), Dim::Known(6), Dim::Known(2)]
    );
    assert_eq!(m.graph.value(by_scales).ty.dtype, Some(DType::F32));
    assert_eq!(
        shape(by_sizes),
        vec![sym("N"), Dim::Known(3), Dim::Known(7)]
    );
    let s = shape(unknown);
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|d| !matches!(d, Dim::Known(_))), "{s:?}");
}

#[test]
fn symmetric_and_pytorch_half_pixel() {
    // half_pixel_symmetric, [0, 1, 2, 3] at scale 0.6 (2 outputs of 2.4): offset
    // 2 * (1 - 2 / 2.4) = 1/3, x = 1/3 + (y + 0.5) / 0.6 - 0.5 = 2/3, 7/3.
    let x = f32s(&[4], &[0., 1., 2., 3.]);
    let n = rs(&[
        ("mode", "linear"),
        ("coordinate_transformation_mode", "half_pixel_symmetric"),
    ]);
    assert_close(
        &scaled(&n, &x, &[0.6]),
        &f32s(&[2], &[2. / 3., 7. / 3.]),
        1e-6,
    );
    // pytorch_half_pixel maps a one-element output to 0 (the spec; the ONNX reference's -0.5
    // would blend in a clamped neighbour under cubic and give 10.9375).
    let x = f32s(&[4], &[10., 0., 0., 0.]);
    let n = rs(&[
        ("mode", "cubic"),
        ("coordinate_transformation_mode", "pytorch_half_pixel"),
    ]);
    let y = run11(&n, 19, &x, None, None, Some(&[1])).unwrap();
    assert_eq!(y, f32s(&[1], &[10.]));
}
