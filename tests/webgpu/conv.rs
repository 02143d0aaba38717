//! Conv, FusedConv and the CNN pools on WebGPU: one dispatch per node, against the reference
//! backend over the attribute space the CNNs and speech encoders use.

use super::*;

/// One Conv (or FusedConv with `z` and `act`) node on X `x`, W [m, x[1] / group, k...].
struct Case<'a> {
    x: &'a [usize],
    m: usize,
    k: &'a [usize],
    attrs: Vec<AttributeProto>,
    group: usize,
    bias: bool,
}

/// FusedConv's activation, its parameters, and Z's shape (a graph input `z`) if any.
type Fused<'a> = (&'a str, &'a [f32], Option<&'a [usize]>);

fn conv_model(p: &Case, fused: Option<Fused>) -> Model {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", p.x);
    let mut wshape = vec![p.m, p.x[1] / p.group];
    wshape.extend(p.k);
    let w = b.initializer("w", &seeded_f32(&wshape, 31));
    let bias = p
        .bias
        .then(|| b.initializer("bias", &seeded_f32(&[p.m], 32)));
    let mut attrs = p.attrs.clone();
    attrs.push(attr::int("group", p.group as i64));
    let y = match fused {
        None => b.node("", "Conv", &[Some(x), Some(w), bias], 1, attrs)[0],
        Some((act, params, z)) => {
            b.import("com.microsoft", 1);
            if !act.is_empty() {
                attrs.push(attr::string("activation", act));
            }
            if !params.is_empty() {
                attrs.push(attr::floats("activation_params", params));
            }
            let z = z.map(|shape| f32_in(&mut b, "z", shape));
            b.node(
                "com.microsoft",
                "FusedConv",
                &[Some(x), Some(w), bias, z],
                1,
                attrs,
            )[0]
        }
    };
    b.output(y, "y");
    b.build()
}

/// 1-D and 2-D Conv: strides, asymmetric pads, dilation, depthwise, group 2, no bias,
/// SAME_UPPER, VALID; each exactly one dispatch.
pub fn conv_is_one_dispatch(gpu: &Gpu) {
    let ints = attr::ints;
    let cases: Vec<(&str, Case)> = vec![
        (
            "1-D, stride 2, pads 1/2 (Whisper's)",
            Case {
                x: &[2, 6, 37],
                m: 10,
                k: &[3],
                attrs: vec![ints("strides", &[2]), ints("pads", &[1, 2])],
                group: 1,
                bias: true,
            },
        ),
        (
            "1-D, dilation 2, no bias",
            Case {
                x: &[1, 4, 29],
                m: 5,
                k: &[3],
                attrs: vec![ints("dilations", &[2]), ints("pads", &[2, 2])],
                group: 1,
                bias: false,
            },
        ),
        (
            "1-D, SAME_UPPER, stride 2",
            Case {
                x: &[1, 3, 20],
                m: 4,
                k: &[4],
                attrs: vec![
                    attr::string("auto_pad", "SAME_UPPER"),
                    ints("strides", &[2]),
                ],
                group: 1,
                bias: true,
            },
        ),
        (
            "2-D patch embedding (ViT's: kernel = stride)",
            Case {
                x: &[1, 3, 32, 32],
                m: 24,
                k: &[8, 8],
                attrs: vec![ints("strides", &[8, 8])],
                group: 1,
                bias: true,
            },
        ),
        (
            "2-D, stride 2, asymmetric pads 0/1, 1/2",
            Case {
                x: &[2, 5, 17, 15],
                m: 7,
                k: &[3, 3],
                attrs: vec![ints("strides", &[2, 2]), ints("pads", &[0, 1, 1, 2])],
                group: 1,
                bias: true,
            },
        ),
        (
            "2-D, dilation 2",
            Case {
                x: &[1, 4, 13, 11],
                m: 6,
                k: &[3, 2],
                attrs: vec![ints("dilations", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
                group: 1,
                bias: true,
            },
        ),
        (
            "2-D depthwise (group = channels), stride 2, pads 1",
            Case {
                x: &[1, 16, 14, 14],
                m: 16,
                k: &[3, 3],
                attrs: vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])],
                group: 16,
                bias: true,
            },
        ),
        (
            "2-D depthwise, channel multiplier 2, no bias",
            Case {
                x: &[1, 6, 9, 9],
                m: 12,
                k: &[5, 5],
                attrs: vec![ints("pads", &[2, 2, 2, 2])],
                group: 6,
                bias: false,
            },
        ),
        (
            "2-D, group 2",
            Case {
                x: &[2, 8, 10, 9],
                m: 6,
                k: &[3, 3],
                attrs: vec![ints("pads", &[1, 1, 1, 1])],
                group: 2,
                bias: true,
            },
        ),
        (
            "2-D, SAME_UPPER, stride 2 (odd input)",
            Case {
                x: &[1, 3, 15, 16],
                m: 5,
                k: &[3, 3],
                attrs: vec![
                    attr::string("auto_pad", "SAME_UPPER"),
                    ints("strides", &[2, 2]),
                ],
                group: 1,
                bias: true,
            },
        ),
        (
            "2-D, VALID, 1x1",
            Case {
                x: &[1, 8, 7, 7],
                m: 3,
                k: &[1, 1],
                attrs: vec![attr::string("auto_pad", "VALID")],
                group: 1,
                bias: false,
            },
        ),
    ];
    for (name, case) in &cases {
        let m = conv_model(case, None);
        let d = check(gpu, &m, &[("x", seeded_f32(case.x, 33))], 1e-5);
        assert_eq!(d, 1, "{name}");
    }
}

/// FusedConv: Z added, then each of onnxruntime's activations, all in the one dispatch.
pub fn fused_conv_is_one_dispatch(gpu: &Gpu) {
    let case = Case {
        x: &[1, 6, 11, 10],
        m: 8,
        k: &[3, 3],
        attrs: vec![
            attr::ints("strides", &[2, 1]),
            attr::ints("pads", &[1, 0, 1, 2]),
        ],
        group: 2,
        bias: true,
    };
    let acts: [(&str, &[f32]); 7] = [
        ("", &[]),
        ("Relu", &[]),
        ("Tanh", &[]),
        ("Sigmoid", &[]),
        ("LeakyRelu", &[0.1]),
        ("Clip", &[-0.5, 0.75]),
        ("HardSigmoid", &[0.2, 0.5]),
    ];
    // Y: (11 + 1 + 1 - 3) / 2 + 1 = 6 rows, (10 + 0 + 2 - 3) + 1 = 10 columns.
    let y: &[usize] = &[1, 8, 6, 10];
    for (act, params) in acts {
        for z in [None, Some(y)] {
            let m = conv_model(&case, Some((act, params, z)));
            let mut feeds = vec![("x", seeded_f32(case.x, 34))];
            feeds.extend(z.map(|z| ("z", seeded_f32(z, 35))));
            let d = check(gpu, &m, &feeds, 1e-5);
            assert_eq!(d, 1, "{act} z={}", z.is_some());
        }
    }
}

/// What the kernel does not take is an error naming the node, not a panic: a float64 Conv.
pub fn unsupported_conv_is_an_error(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("x", DType::F64, dims(&[1, 2, 5]));
    let w = b.initializer("w", &Tensor::F64(ArrayD::from_elem(IxDyn(&[3, 2, 3]), 0.5)));
    let y = b.op("Conv", &[x, w], vec![]);
    b.output(y, "y");
    let m = b.build();
    let id = m.graph.node_ids().next().unwrap();
    let label = m.graph.node(id).label(id);
    let inputs = HashMap::from([(
        "x".to_string(),
        Tensor::F64(ArrayD::from_elem(IxDyn(&[1, 2, 5]), 1.0)),
    )]);
    let e = pollster::block_on(GpuSession::for_inputs(gpu, &m, &inputs, &Limits::default()))
        .err()
        .expect("a float64 Conv is refused")
        .to_string();
    assert!(
        e.contains("Conv") && e.contains(&label) && e.contains("float64"),
        "{e}"
    );
}

/// MaxPool (stride, padding, ceil_mode, dilation) and GlobalAveragePool: one dispatch each.
pub fn pools_are_one_dispatch_each(gpu: &Gpu) {
    let ints = attr::ints;
    for (x, attrs) in [
        (
            vec![1, 4, 17, 17],
            vec![
                ints("kernel_shape", &[3, 3]),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 1, 1]),
            ],
        ),
        (
            vec![2, 3, 10, 9],
            vec![
                ints("kernel_shape", &[2, 3]),
                ints("strides", &[2, 2]),
                attr::int("ceil_mode", 1),
            ],
        ),
        (
            vec![1, 2, 12, 11],
            vec![ints("kernel_shape", &[3, 2]), ints("dilations", &[2, 2])],
        ),
        (
            vec![2, 3, 20],
            vec![
                ints("kernel_shape", &[4]),
                attr::string("auto_pad", "SAME_UPPER"),
                ints("strides", &[3]),
            ],
        ),
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let xi = f32_in(&mut b, "x", &x);
        let y = b.op("MaxPool", &[xi], attrs);
        b.output(y, "y");
        let d = check(gpu, &b.build(), &[("x", seeded_f32(&x, 43))], 0.0);
        assert_eq!(d, 1, "MaxPool {x:?}");
    }
    for x in [vec![2, 5, 7, 9], vec![1, 3, 100]] {
        let mut b = GraphBuilder::new("g", 17);
        let xi = f32_in(&mut b, "x", &x);
        let y = b.op("GlobalAveragePool", &[xi], vec![]);
        b.output(y, "y");
        let d = check(gpu, &b.build(), &[("x", seeded_f32(&x, 44))], 1e-6);
        assert_eq!(d, 1, "GlobalAveragePool {x:?}");
    }
}
