//! Unit tests of pool.rs, with values worked by hand (small inputs; the window of each output is
//! written out in the comments).

use super::super::common::test_util::*;
use super::*;
use crate::builder::{sym, GraphBuilder};
use crate::ir::{attr, Node, ValueId};
use crate::onnx::proto::AttributeProto;

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    attr::ints(name, v)
}

/// A node of `op` naming `n_out` outputs.
fn pool_node(op: &str, attrs: Vec<AttributeProto>, n_out: u32) -> Node {
    let mut n = node(op, attrs);
    n.outputs = (0..n_out).map(|i| Some(ValueId(i))).collect();
    n
}

fn run_pool(
    k: Kernel,
    op: &str,
    opset: i64,
    attrs: Vec<AttributeProto>,
    x: &Tensor,
) -> Result<Tensor, String> {
    run_first(k, &pool_node(op, attrs, 1), opset, &[x])
}

fn maxp(attrs: Vec<AttributeProto>, x: &Tensor) -> Result<Tensor, String> {
    run_pool(max_pool, "MaxPool", 22, attrs, x)
}

fn avgp(attrs: Vec<AttributeProto>, x: &Tensor) -> Result<Tensor, String> {
    run_pool(average_pool, "AveragePool", 22, attrs, x)
}

/// MaxPool's Y and Indices.
fn max_with_indices(opset: i64, attrs: Vec<AttributeProto>, x: &Tensor) -> (Tensor, Tensor) {
    let n = pool_node("MaxPool", attrs, 2);
    let mut out = run_at(max_pool, &n, opset, &[Some(x)]).unwrap();
    let i = out.pop().unwrap();
    (out.pop().unwrap(), i)
}

#[test]
fn max_pool_strides_and_indices_in_both_storage_orders() {
    // 4x4 iota, 2x2 windows, stride 2: the bottom-right of each window.
    let x = iota(&[1, 2, 4, 4]);
    let a = || vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])];
    let (y, i) = max_with_indices(22, a(), &x);
    let want = [5., 7., 13., 15., 21., 23., 29., 31.];
    assert_eq!(y, f32s(&[1, 2, 2, 2], &want));
    assert_eq!(i, i64s(&[1, 2, 2, 2], &[5, 7, 13, 15, 21, 23, 29, 31]));
    // Column-major spatial index h + w * 4, after the plane's offset (16 for channel 1).
    let mut b = a();
    b.push(attr::int("storage_order", 1));
    let (_, i) = max_with_indices(22, b, &x);
    assert_eq!(i, i64s(&[1, 2, 2, 2], &[5, 13, 7, 15, 21, 29, 23, 31]));
    // 3-D, column-major z + y * D + x * D * H: the maximum at (z 1, y 0, x 0) is 1, not 4.
    let x3 = f32s(&[1, 1, 2, 2, 2], &[0., 1., 2., 3., 9., 5., 6., 7.]);
    let k3 = || vec![ints("kernel_shape", &[2, 2, 2])];
    let (y, i) = max_with_indices(22, k3(), &x3);
    assert_eq!(
        (y, i),
        (f32s(&[1, 1, 1, 1, 1], &[9.]), i64s(&[1, 1, 1, 1, 1], &[4]))
    );
    let mut c = k3();
    c.push(attr::int("storage_order", 1));
    assert_eq!(max_with_indices(22, c, &x3).1, i64s(&[1, 1, 1, 1, 1], &[1]));
    // Without an Indices output the node gets Y alone; before 8 a second output is an error.
    assert_eq!(maxp(a(), &x).unwrap().shape(), &[1, 2, 2, 2]);
    let n = pool_node("MaxPool", a(), 2);
    let e = run_at(max_pool, &n, 7, &[Some(&x)]).unwrap_err();
    assert!(e.contains("at most 1"), "{e}");
}

#[test]
fn max_pool_pads_skip_the_padding() {
    // 2x2 [-1, -2, -3, -4], 2x2 windows padded 1 all round: each window's inside values only.
    let x = f32s(&[1, 1, 2, 2], &[-1., -2., -3., -4.]);
    let a = vec![ints("kernel_shape", &[2, 2]), ints("pads", &[1, 1, 1, 1])];
    let (y, i) = max_with_indices(22, a, &x);
    let want = [-1., -1., -2., -1., -1., -2., -3., -3., -4.];
    assert_eq!(y, f32s(&[1, 1, 3, 3], &want));
    assert_eq!(i, i64s(&[1, 1, 3, 3], &[0, 0, 1, 0, 0, 1, 2, 2, 3]));
    // int32 (int8 and uint8 arrive widened to it).
    let xi = i32s(&[1, 1, 4], &[3, -1, 7, 2]);
    let y = maxp(vec![ints("kernel_shape", &[2])], &xi).unwrap();
    assert_eq!(y, i32s(&[1, 1, 3], &[3, 7, 7]));
}

#[test]
fn max_pool_ceil_mode_and_dilations() {
    let x = iota(&[1, 1, 4, 4]);
    let k3s2 = || vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2])];
    // Floor: one window (rows and cols 0..3); ceil: a second, clipped window per axis.
    assert_eq!(maxp(k3s2(), &x).unwrap(), f32s(&[1, 1, 1, 1], &[10.]));
    let mut c = k3s2();
    c.push(attr::int("ceil_mode", 1));
    assert_eq!(
        maxp(c, &x).unwrap(),
        f32s(&[1, 1, 2, 2], &[10., 11., 14., 15.])
    );
    // Before 10 there is no ceil_mode: the attribute is not read.
    let mut c = k3s2();
    c.push(attr::int("ceil_mode", 1));
    let y = run_pool(max_pool, "MaxPool", 8, c, &x).unwrap();
    assert_eq!(y.shape(), &[1, 1, 1, 1]);
    // 2 inputs, kernel 3, stride 3, pads 1: ceil gives 2 windows, but the second would start
    // in the end padding (3 >= 2 + 1) and is dropped.
    let x2 = f32s(&[1, 1, 2], &[1., 2.]);
    let a = vec![
        ints("kernel_shape", &[3]),
        ints("strides", &[3]),
        ints("pads", &[1, 1]),
        attr::int("ceil_mode", 1),
    ];
    assert_eq!(maxp(a, &x2).unwrap(), f32s(&[1, 1, 1], &[2.]));
    // Dilation 2: taps (0,0), (0,2), (2,0), (2,2) from each start.
    let a = vec![ints("kernel_shape", &[2, 2]), ints("dilations", &[2, 2])];
    assert_eq!(
        maxp(a, &x).unwrap(),
        f32s(&[1, 1, 2, 2], &[10., 11., 14., 15.])
    );
}

#[test]
fn average_pool_counts_with_and_without_the_padding() {
    let x = f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
    let a = |cip: i64| {
        vec![
            ints("kernel_shape", &[2, 2]),
            ints("pads", &[1, 1, 1, 1]),
            attr::int("count_include_pad", cip),
        ]
    };
    let want = [1., 1.5, 2., 2., 2.5, 3., 3., 3.5, 4.];
    assert_eq!(avgp(a(0), &x).unwrap(), f32s(&[1, 1, 3, 3], &want));
    let want = [0.25, 0.75, 0.5, 1., 2.5, 1.5, 0.75, 1.75, 1.];
    assert_eq!(avgp(a(1), &x).unwrap(), f32s(&[1, 1, 3, 3], &want));
    // Before 7 there is no count_include_pad: the padding never counts.
    let y = run_pool(average_pool, "AveragePool", 6, a(1), &x).unwrap();
    assert_eq!(y.to_f64_vec()[0], 1.0);
    // The operator doc's ceil example: 1..16, kernel 3, stride 2 -> 2x2 (clipped windows).
    let x = f32s(
        &[1, 1, 4, 4],
        &(1..=16).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let a = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        attr::int("ceil_mode", 1),
    ];
    assert_eq!(
        avgp(a, &x).unwrap(),
        f32s(&[1, 1, 2, 2], &[6., 7.5, 12., 13.5])
    );
    // Ceil with count_include_pad: the last window [4, 6) past the end of 5 inputs (no end
    // padding) divides by its 1 tap inside, not by 2.
    let x = f32s(&[1, 1, 5], &[1., 2., 3., 4., 5.]);
    let a = vec![
        ints("kernel_shape", &[2]),
        ints("strides", &[2]),
        attr::int("ceil_mode", 1),
        attr::int("count_include_pad", 1),
    ];
    assert_eq!(avgp(a, &x).unwrap(), f32s(&[1, 1, 3], &[1.5, 3.5, 5.]));
}

#[test]
fn average_pool_auto_pad_and_dilations() {
    let x = f64s(&[1, 1, 4], &[1., 2., 3., 4.]);
    let a = |pad: &str, cip: i64| {
        vec![
            ints("kernel_shape", &[2]),
            attr::string("auto_pad", pad),
            attr::int("count_include_pad", cip),
        ]
    };
    // One pad: at the end (UPPER) or the start (LOWER); counted only with count_include_pad.
    assert_eq!(
        avgp(a("SAME_UPPER", 0), &x).unwrap(),
        f64s(&[1, 1, 4], &[1.5, 2.5, 3.5, 4.])
    );
    assert_eq!(
        avgp(a("SAME_UPPER", 1), &x).unwrap(),
        f64s(&[1, 1, 4], &[1.5, 2.5, 3.5, 2.])
    );
    assert_eq!(
        avgp(a("SAME_LOWER", 0), &x).unwrap(),
        f64s(&[1, 1, 4], &[1., 1.5, 2.5, 3.5])
    );
    assert_eq!(
        avgp(a("SAME_LOWER", 1), &x).unwrap(),
        f64s(&[1, 1, 4], &[0.5, 1.5, 2.5, 3.5])
    );
    assert_eq!(
        avgp(a("VALID", 1), &x).unwrap(),
        f64s(&[1, 1, 3], &[1.5, 2.5, 3.5])
    );
    // Dilations from 19: [x0, x2] and [x1, x3].
    let d = || vec![ints("kernel_shape", &[2]), ints("dilations", &[2])];
    assert_eq!(avgp(d(), &x).unwrap(), f64s(&[1, 1, 2], &[2., 3.]));
}

#[test]
fn lp_pool_and_the_global_pools() {
    let x = f32s(&[1, 1, 2], &[3., 4.]);
    let k = || ints("kernel_shape", &[2]);
    let lp = |opset: i64, a: Vec<AttributeProto>, x: &Tensor| {
        run_pool(lp_pool, "LpPool", opset, a, x).unwrap()
    };
    assert_eq!(lp(18, vec![k()], &x), f32s(&[1, 1, 1], &[5.]));
    assert_eq!(
        lp(18, vec![k(), attr::int("p", 1)], &x),
        f32s(&[1, 1, 1], &[7.])
    );
    // Version 1 takes p as a float; the padding adds nothing.
    let y = lp(
        1,
        vec![k(), attr::float("p", 1.0), ints("pads", &[1, 1])],
        &x,
    );
    assert_eq!(y, f32s(&[1, 1, 3], &[3., 7., 4.]));
    // Global pools: [1, 2, 3, 4] and [-1, -5, 2, 0] per channel.
    let x = f32s(&[1, 2, 2, 2], &[1., 2., 3., 4., -1., -5., 2., 0.]);
    let g = |k: Kernel, op: &str, a: Vec<AttributeProto>| run_pool(k, op, 22, a, &x).unwrap();
    let avg = g(global_average_pool, "GlobalAveragePool", vec![]);
    assert_eq!(avg, f32s(&[1, 2, 1, 1], &[2.5, -1.]));
    assert_eq!(
        g(global_max_pool, "GlobalMaxPool", vec![]),
        f32s(&[1, 2, 1, 1], &[4., 2.])
    );
    let l2 = g(global_lp_pool, "GlobalLpPool", vec![]);
    assert_close(&l2, &f32s(&[1, 2, 1, 1], &[30f32.sqrt(); 2]), 1e-6);
    let l1 = g(global_lp_pool, "GlobalLpPool", vec![attr::int("p", 1)]);
    assert_eq!(l1, f32s(&[1, 2, 1, 1], &[10., 8.]));
}

#[test]
fn pool_errors_name_what_is_wrong() {
    let x = iota(&[1, 1, 4, 4]);
    let e = maxp(vec![], &x).unwrap_err();
    assert!(e.contains("'kernel_shape' is required"), "{e}");
    let a = vec![ints("kernel_shape", &[2, 2]), ints("pads", &[2, 0, 0, 0])];
    let e = maxp(a, &x).unwrap_err();
    assert!(e.contains("must be smaller than 'kernel_shape'"), "{e}");
    let e = maxp(vec![ints("kernel_shape", &[5, 1])], &x).unwrap_err();
    assert!(e.contains("MaxPool: the kernel's extent 5"), "{e}");
    let e = maxp(vec![ints("kernel_shape", &[2])], &x).unwrap_err();
    assert!(
        e.contains("'kernel_shape' is for 1 spatial axes, the input has 2"),
        "{e}"
    );
    let e = maxp(vec![ints("kernel_shape", &[2])], &iota(&[4, 4])).unwrap_err();
    assert!(e.contains("X must be [N, C, spatial...]"), "{e}");
    let e = avgp(vec![ints("kernel_shape", &[1])], &i32s(&[1, 1, 1], &[1])).unwrap_err();
    assert!(
        e.contains("AveragePool: element type int32 is not supported"),
        "{e}"
    );
    let bad_p = vec![ints("kernel_shape", &[1]), attr::int("p", 0)];
    let e = run_pool(lp_pool, "LpPool", 18, bad_p, &x).unwrap_err();
    assert!(e.contains("'p' must be positive"), "{e}");
    let e = run_pool(global_max_pool, "GlobalMaxPool", 22, vec![], &iota(&[2, 2])).unwrap_err();
    assert!(e.contains("GlobalMaxPool: X must be"), "{e}");
}

#[test]
fn pool_inference() {
    let mut b = GraphBuilder::new("g", 22);
    let x = b.input(
        "X",
        DType::F32,
        vec![sym("N"), Dim::Known(64), sym("H"), Dim::Known(112)],
    );
    let a = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        ints("pads", &[1, 1, 1, 1]),
    ];
    let outs = b.node("", "MaxPool", &[Some(x)], 2, a);
    let same = b.op(
        "AveragePool",
        &[x],
        vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
    );
    let c = vec![
        ints("kernel_shape", &[2, 2]),
        ints("strides", &[2, 2]),
        attr::int("ceil_mode", 1),
    ];
    let ceil = b.op("LpPool", &[x], c);
    let g = b.op("GlobalAveragePool", &[x], vec![]);
    let m = b.build();
    let ty = |v: ValueId| m.graph.value(v).ty.clone();
    let h = Dim::Sym("?((H-1)/2+1)".into());
    let y = ty(outs[0]);
    assert_eq!(y.dtype, Some(DType::F32));
    assert_eq!(
        y.shape,
        Some(vec![sym("N"), Dim::Known(64), h, Dim::Known(56)])
    );
    assert_eq!(ty(outs[1]).dtype, Some(DType::I64));
    assert_eq!(ty(outs[1]).shape, y.shape);
    assert_eq!(
        ty(same).shape,
        Some(vec![sym("N"), Dim::Known(64), sym("H"), Dim::Known(112)])
    );
    let ceil = ty(ceil).shape.unwrap();
    assert_eq!(ceil[2], Dim::Sym("?(ceil_window(H-2,2,0))".into()));
    assert_eq!(ceil[3], Dim::Known(56));
    let g = ty(g).shape.unwrap();
    assert_eq!(
        g,
        vec![sym("N"), Dim::Known(64), Dim::Known(1), Dim::Known(1)]
    );
}
