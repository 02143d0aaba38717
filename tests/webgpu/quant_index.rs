//! GatherND, DynamicQuantizeLinear and MatMulInteger on WebGPU against the reference backend.

use super::*;

/// GatherND at batch_dims 0 (whole-row and element tuples, negative indices) and 1: one
/// dispatch each, values copied exactly.
pub fn gather_nd_is_one_dispatch(gpu: &Gpu) {
    for (data, idx_shape, idx, batch_dims) in [
        (vec![4, 3, 5], vec![2, 2, 1], vec![0i64, 3, -1, 2], 0),
        (vec![4, 3, 5], vec![3, 2], vec![1, 2, -4, 0, 3, -1], 0),
        (vec![4, 3, 5], vec![2, 3], vec![0, 1, 2, 3, 2, 4], 0),
        (vec![3, 4, 5], vec![3, 2, 1], vec![0, 3, -1, 1, 2, 2], 1),
        (vec![2, 7, 6], vec![2, 1], vec![6, -7], 1),
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &data);
        let i = b.input(
            "i",
            DType::I64,
            dims(&idx_shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        );
        let y = b.op(
            "GatherND",
            &[x, i],
            vec![attr::int("batch_dims", batch_dims)],
        );
        b.output(y, "y");
        let d = check(
            gpu,
            &b.build(),
            &[
                ("x", seeded_f32(&data, 41)),
                ("i", i64_tensor(&idx_shape, idx)),
            ],
            0.0,
        );
        assert_eq!(d, 1, "{data:?} {idx_shape:?} batch_dims {batch_dims}");
    }
}

fn run_both(
    gpu: &Gpu,
    m: &Model,
    inputs: &HashMap<String, Tensor>,
) -> (Vec<(String, Tensor)>, usize) {
    let limits = Limits::default();
    let want = Executor::new(m, &limits).unwrap().run(inputs).unwrap();
    let s = pollster::block_on(GpuSession::for_inputs(gpu, m, inputs, &limits)).unwrap();
    let got = pollster::block_on(s.run(inputs)).unwrap();
    assert_eq!(got, want);
    (got, s.dispatches())
}

/// DynamicQuantizeLinear is one dispatch whose uint8 output, scale and zero point equal the
/// reference's bit for bit: ties of x / scale (a range making the scale 1/128 exactly), a
/// range not containing 0, a constant input, and more values than one workgroup quantizes.
pub fn dynamic_quantize_linear_is_bit_exact(gpu: &Gpu) {
    let dql = |n: usize| {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &[n]);
        let y = b.node("", "DynamicQuantizeLinear", &[Some(x)], 3, vec![]);
        b.output(y[0], "y");
        b.output(y[1], "scale");
        b.output(y[2], "zero_point");
        b.build()
    };
    let units = [
        -128.0f32, 127.0, 2.5, 3.5, -2.5, -3.5, 0.5, 1.5, 100.5, -100.5, 0.0, 5.5,
    ];
    let ties: Vec<f32> = units.iter().map(|u| u / 128.0).collect();
    let n_big = 10_000;
    let big: Vec<f32> = (0..n_big)
        .map(|i| ((i * 7919) % 10007) as f32 / 10007.0 * 3.7 - 1.3)
        .collect();
    for (name, xs) in [
        ("ties", ties),
        ("positive range", vec![0.5, 1.25, 3.0, 2.2, 0.7]),
        ("negative range", vec![-0.5, -1.25, -3.0, -2.2]),
        ("constant", vec![0.0; 7]),
        ("10,000 values", big),
    ] {
        let n = xs.len();
        let inputs = HashMap::from([(
            "x".to_string(),
            Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n]), xs).unwrap()),
        )]);
        let (got, d) = run_both(gpu, &dql(n), &inputs);
        assert_eq!(d, 1, "{name}");
        assert_eq!(got[0].1.dtype(), DType::U8, "{name}");
        assert_eq!(got[2].1.dtype(), DType::U8, "{name}");
    }
}

/// MatMulInteger, uint8 A with a scalar zero point (DynamicQuantizeLinear's outputs, as the
/// int8 BERT has it) and int8/uint8 B, scalar and per-column zero points: exact int32.
pub fn matmul_integer_is_exact(gpu: &Gpu) {
    let (k, n) = (37, 11);
    let bytes: Vec<u8> = (0..k * n).map(|i| ((i * 73 + i / 7) % 256) as u8).collect();
    let b_u8 = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[k, n]), bytes.clone()).unwrap());
    let b_i8 = Tensor::I8(
        ArrayD::from_shape_vec(IxDyn(&[k, n]), bytes.iter().map(|&v| v as i8).collect()).unwrap(),
    );
    let zp_cols = Tensor::U8(
        ArrayD::from_shape_vec(IxDyn(&[n]), (0..n as u8).map(|i| 100 + 3 * i).collect()).unwrap(),
    );
    for (name, bt, zp) in [
        (
            "uint8 B, per-column zero point",
            b_u8.clone(),
            Some(zp_cols),
        ),
        (
            "uint8 B, scalar zero point",
            b_u8,
            Some(Tensor::U8(ArrayD::from_elem(IxDyn(&[]), 128))),
        ),
        ("int8 B, no zero point", b_i8, None),
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &[2, 5, k]);
        let q = b.node("", "DynamicQuantizeLinear", &[Some(x)], 3, vec![]);
        let w = b.initializer("w", &bt);
        let wz = zp.map(|z| b.initializer("wz", &z));
        let y = b.node(
            "",
            "MatMulInteger",
            &[Some(q[0]), Some(w), Some(q[2]), wz],
            1,
            vec![],
        );
        b.output(y[0], "y");
        let inputs = HashMap::from([("x".to_string(), seeded_f32(&[2, 5, k], 42))]);
        let (got, d) = run_both(gpu, &b.build(), &inputs);
        assert_eq!(d, 2, "{name}");
        assert_eq!(got[0].1.dtype(), DType::I32, "{name}");
    }
}
