//! The WebGPU backend against the reference backend: every kernel on random inputs (with
//! broadcasting and sizes that are not multiples of the workgroup), and whole models.
//!
//! Its own harness (`harness = false` in Cargo.toml): a machine without a GPU adapter reports
//! every case as skipped, with the reason, instead of passing it; with `FUSELAB_REQUIRE_GPU=1`
//! (scripts/test.sh sets it) no adapter is a failure (exit 1) instead. Natively this runs on
//! Mesa's lavapipe (`mesa-vulkan-drivers`), a CPU Vulkan. `cargo test --test webgpu [FILTER]`.

mod common;
#[path = "webgpu/conv.rs"]
mod conv;
#[path = "webgpu/models.rs"]
mod models;
#[path = "webgpu/profile.rs"]
mod profile;
#[path = "webgpu/quant_index.rs"]
mod quant_index;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use fuselab::builder::{dims, GraphBuilder};
use fuselab::ir::node::attr;
use fuselab::ir::{Model, ValueId};
use fuselab::onnx::proto::AttributeProto;
use fuselab::runtime::reference::Executor;
use fuselab::runtime::webgpu::{Gpu, GpuSession};
use fuselab::{DType, Limits, Tensor};
use ndarray::{ArrayD, IxDyn};

use common::{gpu_parity, seeded_f32};

type Case = (&'static str, fn(&Gpu));

fn f32_in(b: &mut GraphBuilder, name: &str, shape: &[usize]) -> ValueId {
    b.input(
        name,
        DType::F32,
        dims(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
    )
}

fn i64_tensor(shape: &[usize], v: Vec<i64>) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v).unwrap())
}

/// The RMS norms (what `rms_norm` and `skip_layer_norm` make of Llama's norms): one dispatch each,
/// inv_std_var, SkipSimplified's zero mean and the residual sum out; ai.onnx RMSNormalization.
fn rms_norms_are_one_dispatch_each(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let x = f32_in(&mut b, "x", &[2, 5, 96]);
    let skip = f32_in(&mut b, "skip", &[2, 5, 96]);
    let gamma = b.initializer("gamma", &seeded_f32(&[96], 21));
    let bias = b.initializer("bias", &seeded_f32(&[96], 22));
    let plain = b.node(
        "",
        "SimplifiedLayerNormalization",
        &[Some(x), Some(gamma)],
        2,
        vec![attr::float("epsilon", 1e-6)],
    );
    b.output(plain[0], "y");
    b.output(plain[1], "inv_std_var");
    let outs = b.node(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        &[Some(x), Some(skip), Some(gamma), Some(bias)],
        4,
        vec![attr::float("epsilon", 1e-6)],
    );
    b.output(outs[0], "skip_y");
    b.output(outs[1], "mean");
    b.output(outs[3], "sum");
    let n = check(
        gpu,
        &b.build(),
        &[
            ("x", seeded_f32(&[2, 5, 96], 23)),
            ("skip", seeded_f32(&[2, 5, 96], 24)),
        ],
        2e-6,
    );
    assert_eq!(n, 2, "one dispatch per norm");

    // ai.onnx RMSNormalization (what `rms_norm` writes at opset 23), over the last axis and over
    // the last two: the same kernel.
    let mut b = GraphBuilder::new("g", 23);
    let x = f32_in(&mut b, "x", &[2, 5, 96]);
    for (axis, scale) in [(-1, vec![96]), (1, vec![5, 96])] {
        let gamma = b.initializer(&format!("gamma{axis}"), &seeded_f32(&scale, 25));
        let y = b.op(
            "RMSNormalization",
            &[x, gamma],
            vec![attr::int("axis", axis), attr::float("epsilon", 1e-6)],
        );
        b.output(y, &format!("y{axis}"));
    }
    let n = check(gpu, &b.build(), &[("x", seeded_f32(&[2, 5, 96], 23))], 2e-6);
    assert_eq!(n, 2, "one dispatch per RMSNormalization");
}

/// com.microsoft RotaryEmbedding (what `rotary` makes of Llama's RoPE): a start offset on 4-D
/// input, per-token position ids, and a 3-D interleaved partial rotation; one dispatch each.
fn rotary_embedding_is_one_dispatch(gpu: &Gpu) {
    // (x shape, position_ids shape, rotary_embedding_dim, num_heads, interleaved)
    type RotaryCase = (Vec<usize>, Vec<usize>, i64, i64, bool);
    let cases: Vec<RotaryCase> = vec![
        (vec![2, 3, 5, 8], vec![1], 0, 0, false),
        (vec![2, 3, 5, 8], vec![2, 5], 0, 0, false),
        (vec![2, 5, 24], vec![2, 5], 4, 3, true),
    ];
    for (i, (xs, ps, rot, heads, inter)) in cases.into_iter().enumerate() {
        let width = if rot == 0 {
            xs[xs.len() - 1] / 2
        } else {
            rot as usize / 2
        };
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let x = f32_in(&mut b, "x", &xs);
        let pos = b.input(
            "pos",
            DType::I64,
            dims(&ps.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        );
        let cos = b.initializer("cos", &seeded_f32(&[12, width], 31));
        let sin = b.initializer("sin", &seeded_f32(&[12, width], 32));
        let y = b.node(
            "com.microsoft",
            "RotaryEmbedding",
            &[Some(x), Some(pos), Some(cos), Some(sin)],
            1,
            vec![
                attr::int("rotary_embedding_dim", rot),
                attr::int("num_heads", heads),
                attr::int("interleaved", inter as i64),
            ],
        );
        b.output(y[0], "y");
        let n: usize = ps.iter().product();
        let ids = i64_tensor(&ps, (0..n as i64).map(|v| (v * 7 + 2) % 12).collect());
        let n = check(
            gpu,
            &b.build(),
            &[("x", seeded_f32(&xs, 33)), ("pos", ids)],
            2e-6,
        );
        assert_eq!(n, 1, "case {i}");
    }
}

/// ai.onnx RotaryEmbedding (torch's opset-23 exports): per-token caches `[1, seq, r/2]` (one row
/// per token for every batch row) and `[batch, seq, r/2]`, and position ids into `[max_pos, r/2]`
/// caches, on 4-D and 3-D (interleaved, partial) input; the same one dispatch as com.microsoft's.
fn standard_rotary_embedding_is_one_dispatch(gpu: &Gpu) {
    // (x shape, cos shape, position_ids shape (empty: none), rotary_embedding_dim, num_heads,
    // interleaved)
    type Case = (Vec<usize>, Vec<usize>, Vec<usize>, i64, i64, bool);
    let cases: Vec<Case> = vec![
        (vec![2, 3, 5, 8], vec![1, 5, 4], vec![], 0, 0, false),
        (vec![2, 3, 5, 8], vec![2, 5, 4], vec![], 0, 0, false),
        (vec![2, 5, 24], vec![1, 5, 2], vec![], 4, 3, true),
        (vec![2, 3, 5, 8], vec![12, 4], vec![2, 5], 0, 0, false),
        (vec![2, 5, 24], vec![12, 2], vec![1, 5], 4, 3, true),
    ];
    for (i, (xs, cs, ps, rot, heads, inter)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("g", 23);
        let x = f32_in(&mut b, "x", &xs);
        let cos = b.initializer("cos", &seeded_f32(&cs, 31));
        let sin = b.initializer("sin", &seeded_f32(&cs, 32));
        let mut ins = vec![Some(x), Some(cos), Some(sin)];
        let mut feeds = vec![("x", seeded_f32(&xs, 33))];
        if !ps.is_empty() {
            let dims_ = dims(&ps.iter().map(|&d| d as i64).collect::<Vec<_>>());
            ins.push(Some(b.input("pos", DType::I64, dims_)));
            let n: usize = ps.iter().product();
            feeds.push((
                "pos",
                i64_tensor(&ps, (0..n as i64).map(|v| (v * 7 + 2) % 12).collect()),
            ));
        }
        let mut attrs = vec![attr::int("interleaved", inter as i64)];
        if rot > 0 {
            attrs.push(attr::int("rotary_embedding_dim", rot));
        }
        if heads > 0 {
            attrs.push(attr::int("num_heads", heads));
        }
        let y = b.node("", "RotaryEmbedding", &ins, 1, attrs);
        b.output(y[0], "y");
        let n = check(gpu, &b.build(), &feeds, 2e-6);
        assert_eq!(n, 1, "case {i}");
    }
}

/// float16 RotaryEmbedding (what `rotary` makes of a float16 decoder): x and caches float16,
/// start offset and per-token ids. One dispatch computing in float32 (the backend holds float16
/// as float32) and rounding once on the way back, as the reference does: the same values.
fn rotary_embedding_float16_is_one_dispatch(gpu: &Gpu) {
    let halve = |t: Tensor| match t {
        Tensor::F32(a) => Tensor::F16(a.mapv(half::f16::from_f32)),
        t => t,
    };
    let xs = [2usize, 3, 5, 8];
    for ps in [vec![1usize], vec![2, 5]] {
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let x = b.input("x", DType::F16, dims(&xs.map(|d| d as i64)));
        let pos = b.input(
            "pos",
            DType::I64,
            dims(&ps.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        );
        let cos = b.initializer("cos", &halve(seeded_f32(&[12, 4], 31)));
        let sin = b.initializer("sin", &halve(seeded_f32(&[12, 4], 32)));
        let y = b.node(
            "com.microsoft",
            "RotaryEmbedding",
            &[Some(x), Some(pos), Some(cos), Some(sin)],
            1,
            vec![],
        );
        b.output(y[0], "y");
        let n: usize = ps.iter().product();
        let ids = i64_tensor(&ps, (0..n as i64).map(|v| (v * 7 + 2) % 12).collect());
        let x = halve(seeded_f32(&xs, 33));
        let n = check_abs(gpu, &b.build(), &[("x", x), ("pos", ids)], 0.0);
        assert_eq!(n, 1, "position_ids {ps:?}");
    }
}

/// com.microsoft MatMulNBits (what `matmul_nbits` makes of a QDQ weight): 4-bit codes with packed
/// zero points, a partial last block and a bias; 8-bit codes with the default zero point. Any
/// bytes are valid codes, so B and the zero points are seeded bytes. One dispatch each.
fn matmul_nbits_is_one_dispatch(gpu: &Gpu) {
    for (i, case) in NBITS_CASES.iter().enumerate() {
        let d = check(
            gpu,
            &nbits_graph(case, DType::F32),
            &[("a", nbits_a(case, DType::F32))],
            1e-5,
        );
        assert_eq!(d, 1, "case {i}");
    }
}

/// The same MatMulNBits with float16 A, scales and bias (onnxruntime's 4-bit quantizer on a float16
/// model; its T is one type for A and the scales), held as f16 where the adapter has `shader-f16`
/// and widened to f32 without it: one dispatch, the f32 sum rounded once to float16 as the
/// reference rounds it (a float16 ulp of the largest output apart at most: the sums' order).
fn matmul_nbits_float16_is_one_dispatch(gpu: &Gpu) {
    for g in [gpu.clone(), gpu.clone().without_f16()] {
        for (i, case) in NBITS_CASES.iter().enumerate() {
            let m = nbits_graph(case, DType::F16);
            let d = check(&g, &m, &[("a", nbits_a(case, DType::F16))], 2e-3);
            assert_eq!(d, 1, "case {i}, f16 storage {}", g.has_f16());
        }
    }
}

/// (K, N, bits, block_size, zero points, bias)
type NBitsCase = (usize, usize, usize, usize, bool, bool);

const NBITS_CASES: [NBitsCase; 3] = [
    (48, 24, 4, 32, true, true),
    (64, 70, 8, 16, false, false),
    (40, 9, 4, 16, false, true),
];

fn in_type(t: Tensor, dt: DType) -> Tensor {
    match (t, dt) {
        (Tensor::F32(a), DType::F16) => Tensor::F16(a.mapv(half::f16::from_f32)),
        (t, _) => t,
    }
}

fn nbits_a(&(k, ..): &NBitsCase, dt: DType) -> Tensor {
    in_type(seeded_f32(&[2, 5, k], 53), dt)
}

fn nbits_graph(&(k, n, bits, bs, zp, bias): &NBitsCase, dt: DType) -> Model {
    let nb = k.div_ceil(bs);
    let bytes = |len: usize, seed: usize| {
        let v: Vec<u8> = (0..len)
            .map(|i| ((i * 73 + seed * 29 + i / 7) % 256) as u8)
            .collect();
        v
    };
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let a = b.input("a", dt, dims(&[2, 5, k as i64]));
    let blob = bs * bits / 8;
    let w =
        Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[n, nb, blob]), bytes(n * nb * blob, 1)).unwrap());
    let w = b.initializer("b", &w);
    let sc = seeded_f32(&[n, nb], 51)
        .as_f32()
        .unwrap()
        .mapv(|v| 0.01 + 0.02 * v.abs());
    let sc = b.initializer("scales", &in_type(Tensor::F32(sc), dt));
    let mut ins = vec![Some(a), Some(w), Some(sc), None, None, None];
    if zp {
        let row = (nb * bits).div_ceil(8);
        let z = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[n, row]), bytes(n * row, 2)).unwrap());
        ins[3] = Some(b.initializer("zp", &z));
    }
    if bias {
        ins[5] = Some(b.initializer("bias", &in_type(seeded_f32(&[n], 52), dt)));
    }
    while ins.last() == Some(&None) {
        ins.pop();
    }
    let attrs = vec![
        attr::int("K", k as i64),
        attr::int("N", n as i64),
        attr::int("bits", bits as i64),
        attr::int("block_size", bs as i64),
    ];
    let y = b.node("com.microsoft", "MatMulNBits", &ins, 1, attrs);
    b.output(y[0], "y");
    b.build()
}

/// MultiHeadAttention as `multi_head_attention` emits it (query [B, S, N·D], heads-first key and
/// value, an additive bias with a fully masked row): one dispatch, with and without the bias.
fn multi_head_attention_is_one_dispatch(gpu: &Gpu) {
    for (bias_shape, name) in [(Some([2, 1, 5, 6]), "bias"), (None, "none")] {
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let q = f32_in(&mut b, "q", &[2, 5, 12]);
        let k = f32_in(&mut b, "k", &[2, 3, 6, 4]);
        let v = f32_in(&mut b, "v", &[2, 3, 6, 4]);
        let mut ins = vec![Some(q), Some(k), Some(v)];
        let mut feeds = vec![
            ("q", seeded_f32(&[2, 5, 12], 41)),
            ("k", seeded_f32(&[2, 3, 6, 4], 42)),
            ("v", seeded_f32(&[2, 3, 6, 4], 43)),
        ];
        if let Some(shape) = bias_shape {
            let m = f32_in(&mut b, "m", &shape);
            ins.extend([None, None, Some(m)]);
            let low = f32::MIN;
            let vals: Vec<f32> = (0..60)
                .map(|i| if i < 6 || i % 7 == 3 { low } else { 0.0 })
                .collect();
            feeds.push((
                "m",
                Tensor::F32(ArrayD::from_shape_vec(IxDyn(&shape), vals).unwrap()),
            ));
        }
        let y = b.node(
            "com.microsoft",
            "MultiHeadAttention",
            &ins,
            1,
            vec![attr::int("num_heads", 3), attr::float("scale", 0.4)],
        );
        b.output(y[0], "y");
        assert_eq!(check(gpu, &b.build(), &feeds, 2e-6), 1, "{name}");
    }
}

/// MultiHeadAttention in its encoder form (3-D key and value, an int32 key_padding_mask with a
/// fully masked row and a nonzero that is not 1): one dispatch.
fn multi_head_attention_3d_with_key_padding_is_one_dispatch(gpu: &Gpu) {
    // Plain, then causal (`unidirectional`, what `multi_head_attention` writes for a proved
    // causal mask): the first row of batch 0 sees only padded and later keys (fully masked).
    for (causal, kpm) in [(false, true), (true, true), (true, false)] {
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let q = f32_in(&mut b, "q", &[2, 5, 12]);
        let k = f32_in(&mut b, "k", &[2, 6, 12]);
        let v = f32_in(&mut b, "v", &[2, 6, 12]);
        let m = kpm.then(|| b.input("m", DType::I32, fuselab::builder::dims(&[2, 6])));
        let y = b.node(
            "com.microsoft",
            "MultiHeadAttention",
            &[Some(q), Some(k), Some(v), None, m],
            1,
            vec![
                attr::int("num_heads", 3),
                attr::float("scale", 0.4),
                attr::float("mask_filter_value", f32::MIN),
                attr::int("unidirectional", causal as i64),
            ],
        );
        b.output(y[0], "y");
        let mask = if causal {
            vec![0, 0, 1, 1, 1, 1, 1, 7, 0, 1, 1, 0]
        } else {
            vec![0, 0, 0, 0, 0, 0, 1, 7, 0, 1, 1, 0]
        };
        let mut feeds = vec![
            ("q", seeded_f32(&[2, 5, 12], 44)),
            ("k", seeded_f32(&[2, 6, 12], 45)),
            ("v", seeded_f32(&[2, 6, 12], 46)),
        ];
        if kpm {
            feeds.push((
                "m",
                Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[2, 6]), mask).unwrap()),
            ));
        }
        let what = format!("causal {causal}, key_padding_mask {kpm}");
        assert_eq!(check(gpu, &b.build(), &feeds, 2e-6), 1, "{what}");
    }
}

/// Runs `m` on both backends with `inputs` and asserts every output within `tol`, relative for
/// large values (|gpu - reference| <= tol · (1 + |reference|)); returns the dispatch count.
fn check(gpu: &Gpu, m: &Model, inputs: &[(&str, Tensor)], tol: f64) -> usize {
    compare(gpu, m, inputs, tol, false)
}

/// As `check`, with an absolute tolerance.
fn check_abs(gpu: &Gpu, m: &Model, inputs: &[(&str, Tensor)], tol: f64) -> usize {
    compare(gpu, m, inputs, tol, true)
}

fn compare(gpu: &Gpu, m: &Model, inputs: &[(&str, Tensor)], tol: f64, absolute: bool) -> usize {
    let inputs: HashMap<String, Tensor> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let limits = Limits::default();
    let want = Executor::new(m, &limits).unwrap().run(&inputs).unwrap();
    let s = pollster::block_on(GpuSession::for_inputs(gpu, m, &inputs, &limits)).unwrap();
    let got = pollster::block_on(s.run(&inputs)).unwrap();
    assert_eq!(want.len(), got.len());
    for ((wn, w), (gn, gt)) in want.iter().zip(&got) {
        assert_eq!(wn, gn);
        assert_eq!(w.dtype(), gt.dtype(), "{wn}");
        assert_eq!(w.shape(), gt.shape(), "{wn}");
        // Mixed tolerance: absolute near zero, relative for large values.
        let worst = w
            .to_f64_vec()
            .iter()
            .zip(gt.to_f64_vec())
            .map(|(a, b)| (a - b).abs() / if absolute { 1.0 } else { 1.0 + a.abs() })
            .fold(0.0f64, f64::max);
        assert!(
            worst <= tol,
            "{wn}: max |gpu - reference| / (1 + |reference|) = {worst:e} > {tol:e}"
        );
    }
    s.dispatches()
}

fn unary_and_binary_ops_broadcast(gpu: &Gpu) {
    for op in ["Add", "Sub", "Mul", "Div", "Pow"] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &[7, 13, 3]);
        let y = f32_in(&mut b, "y", &[13, 1]);
        let z = b.op(op, &[x, y], vec![]);
        b.output(z, "z");
        // Pow of a negative base needs an integral exponent; use |x| + 0.5 as the base.
        let xs = if op == "Pow" {
            Tensor::F32(
                seeded_f32(&[7, 13, 3], 1)
                    .as_f32()
                    .unwrap()
                    .mapv(|v| v.abs() + 0.5),
            )
        } else {
            seeded_f32(&[7, 13, 3], 1)
        };
        let ys = if op == "Div" {
            Tensor::F32(seeded_f32(&[13, 1], 2).as_f32().unwrap().mapv(|v| v + 2.0))
        } else {
            seeded_f32(&[13, 1], 2)
        };
        let n = check(gpu, &b.build(), &[("x", xs), ("y", ys)], 1e-5);
        assert_eq!(n, 1, "{op}");
    }
    for op in [
        "Neg",
        "Abs",
        "Sqrt",
        "Exp",
        "Log",
        "Erf",
        "Tanh",
        "Sigmoid",
        "Relu",
        "Cos",
        "Sin",
        "Reciprocal",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "x", &[300]);
        let z = b.op(op, &[x], vec![]);
        b.output(z, "z");
        let xs = seeded_f32(&[300], 3).as_f32().unwrap().mapv(|v| {
            if matches!(op, "Sqrt" | "Log") {
                v.abs() + 0.01
            } else {
                v * 4.0
            }
        });
        check(gpu, &b.build(), &[("x", Tensor::F32(xs))], 2e-6);
    }
}

/// activation.rs's lowerings: one float32 dispatch each, attributes baked in as literals.
fn activations(gpu: &Gpu) {
    let cases: Vec<(&str, i64, Vec<AttributeProto>)> = vec![
        ("LeakyRelu", 16, vec![attr::float("alpha", 0.1)]),
        ("Elu", 22, vec![attr::float("alpha", 0.5)]),
        ("Selu", 22, vec![]),
        ("Celu", 12, vec![attr::float("alpha", 1.5)]),
        ("HardSigmoid", 22, vec![]),
        ("HardSwish", 22, vec![]),
        ("Softplus", 22, vec![]),
        ("Softsign", 22, vec![]),
        ("Mish", 22, vec![]),
        ("ThresholdedRelu", 22, vec![attr::float("alpha", 0.3)]),
        ("Swish", 24, vec![attr::float("alpha", 1.5)]),
        (
            "Shrink",
            9,
            vec![attr::float("lambd", 0.7), attr::float("bias", 0.2)],
        ),
        ("Gelu", 20, vec![]),
        ("Gelu", 20, vec![attr::string("approximate", "tanh")]),
        (
            "Clip",
            6,
            vec![attr::float("min", -0.5), attr::float("max", 2.0)],
        ),
    ];
    let xs = Tensor::F32(seeded_f32(&[300], 8).as_f32().unwrap().mapv(|v| v * 4.0));
    for (op, opset, attrs) in cases {
        let mut b = GraphBuilder::new("g", opset);
        let x = f32_in(&mut b, "x", &[300]);
        let z = b.op(op, &[x], attrs);
        b.output(z, "z");
        let n = check(gpu, &b.build(), &[("x", xs.clone())], 1e-5);
        assert_eq!(n, 1, "{op}");
    }
    // Clip's bounds as inputs (opset 11 on), both or only a min.
    for bounds in [&[-0.5f32, 2.0][..], &[-0.5]] {
        let mut b = GraphBuilder::new("g", 13);
        let x = f32_in(&mut b, "x", &[300]);
        let mut ins = vec![x];
        for (i, &v) in bounds.iter().enumerate() {
            ins.push(b.initializer(&format!("b{i}"), &Tensor::scalar_f32(v)));
        }
        let z = b.op("Clip", &ins, vec![]);
        b.output(z, "z");
        let n = check(gpu, &b.build(), &[("x", xs.clone())], 0.0);
        assert_eq!(n, 1, "Clip {bounds:?}");
    }
    // PRelu's slope broadcasts to X.
    let mut b = GraphBuilder::new("g", 16);
    let x = f32_in(&mut b, "x", &[7, 13, 3]);
    let s = f32_in(&mut b, "s", &[13, 1]);
    let z = b.op("PRelu", &[x, s], vec![]);
    b.output(z, "z");
    let ins = [
        ("x", seeded_f32(&[7, 13, 3], 9)),
        ("s", seeded_f32(&[13, 1], 10)),
    ];
    assert_eq!(check(gpu, &b.build(), &ins, 1e-6), 1);
}

fn comparisons_where_cast_expand(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[4, 65]);
    let y = f32_in(&mut b, "y", &[65]);
    let less = b.op("Less", &[x, y], vec![]);
    let not = b.op("Not", &[less], vec![]);
    let w = b.op("Where", &[not, x, y], vec![]);
    let as_int = b.op("Cast", &[w], vec![attr::int("to", 7)]);
    let back = b.op("Cast", &[as_int], vec![attr::int("to", 1)]);
    let shape = b.initializer("shape", &Tensor::from_i64s(&[3, 4, 65]));
    let big = b.op("Expand", &[back, shape], vec![]);
    b.output(big, "z");
    let xs = Tensor::F32(seeded_f32(&[4, 65], 4).as_f32().unwrap().mapv(|v| v * 9.0));
    let ys = Tensor::F32(seeded_f32(&[65], 5).as_f32().unwrap().mapv(|v| v * 9.0));
    check(gpu, &b.build(), &[("x", xs), ("y", ys)], 0.0);
}

/// A Slice that leaves nothing (Phi-3's rotary pass part `x[..., D:]` when the rotary covers the
/// whole head) and a Concat that joins it: zero-size values on the way, the same result.
fn empty_slice_joined_by_concat(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[2, 3, 2, 8]);
    let ints =
        |b: &mut GraphBuilder, name: &str, v: &[i64]| b.initializer(name, &Tensor::from_i64s(v));
    let (zero, d, end, last) = (
        ints(&mut b, "zero", &[0]),
        ints(&mut b, "d", &[8]),
        ints(&mut b, "end", &[i64::MAX]),
        ints(&mut b, "last", &[-1]),
    );
    let head = b.op("Slice", &[x, zero, d, last], vec![]);
    let pass = b.op("Slice", &[x, d, end, last], vec![]);
    let neg = b.op("Neg", &[head], vec![]);
    let y = b.op("Concat", &[neg, pass], vec![attr::int("axis", -1)]);
    b.output(y, "y");
    check(gpu, &b.build(), &[("x", seeded_f32(&[2, 3, 2, 8], 6))], 0.0);
}

/// IsNaN and IsInf (each sign choice) read the float's bits: NaN, ±infinity, ±0, the largest
/// finite values and ordinary ones, as the reference computes them (Where turns the flags into
/// numbers the comparison can read).
fn nan_and_infinity_tests(gpu: &Gpu) {
    let special = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::MAX,
        f32::MIN,
        1.5,
        -2.0,
        f32::MIN_POSITIVE,
    ];
    let xs = Tensor::F32(
        ndarray::ArrayD::from_shape_vec(vec![special.len()], special.to_vec()).unwrap(),
    );
    let cases: Vec<(&str, Vec<AttributeProto>)> = vec![
        ("IsNaN", vec![]),
        ("IsInf", vec![]),
        ("IsInf", vec![attr::int("detect_positive", 0)]),
        ("IsInf", vec![attr::int("detect_negative", 0)]),
    ];
    for (op, attrs) in cases {
        let mut b = GraphBuilder::new("g", 20);
        let x = f32_in(&mut b, "x", &[special.len()]);
        let flag = b.op(op, &[x], attrs);
        let one = b.initializer("one", &Tensor::F32(ndarray::ArrayD::from_elem(vec![], 1.0)));
        let zero = b.initializer(
            "zero",
            &Tensor::F32(ndarray::ArrayD::from_elem(vec![], 0.0)),
        );
        let z = b.op("Where", &[flag, one, zero], vec![]);
        b.output(z, "z");
        assert_eq!(check(gpu, &b.build(), &[("x", xs.clone())], 0.0), 2, "{op}");
    }
}

fn matmul_batched_broadcast_and_vectors(gpu: &Gpu) {
    for (a, bs) in [
        (vec![2, 3, 37, 19], vec![19, 23]),
        (vec![4, 1, 8, 16], vec![3, 16, 9]),
        (vec![5], vec![5, 7]),
        (vec![6, 33], vec![33]),
        (vec![1, 64, 64], vec![64, 130]),
        (vec![2, 8, 64], vec![64, 1000]),
    ] {
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "a", &a);
        let y = f32_in(&mut b, "b", &bs);
        let z = b.op("MatMul", &[x, y], vec![]);
        b.output(z, "z");
        check(
            gpu,
            &b.build(),
            &[("a", seeded_f32(&a, 6)), ("b", seeded_f32(&bs, 7))],
            1e-5,
        );
    }
}

fn gemm_transposes_bias_and_fused_activation(gpu: &Gpu) {
    // m = 17 takes the one-thread-per-element kernel, m = 40 the tiled one.
    for (m, ta, tb, act) in [
        (17, 0, 0, None),
        (40, 1, 0, None),
        (40, 0, 1, Some("Tanh")),
        (17, 1, 1, Some("Relu")),
        (40, 1, 1, None),
        (17, 0, 1, None),
    ] {
        let (k, n) = (29, 21);
        let a_shape = if ta == 1 { vec![k, m] } else { vec![m, k] };
        let b_shape = if tb == 1 { vec![n, k] } else { vec![k, n] };
        let mut b = GraphBuilder::new("g", 17);
        let x = f32_in(&mut b, "a", &a_shape);
        let w = b.initializer("w", &seeded_f32(&b_shape, 8));
        let c = b.initializer("c", &seeded_f32(&[n], 9));
        let mut attrs = vec![
            attr::int("transA", ta),
            attr::int("transB", tb),
            attr::float("alpha", 0.75),
            attr::float("beta", 1.5),
        ];
        let z = match act {
            None => b.op("Gemm", &[x, w, c], attrs),
            Some(a) => {
                attrs.push(attr::string("activation", a));
                b.import("com.microsoft", 1);
                b.node(
                    "com.microsoft",
                    "FusedGemm",
                    &[Some(x), Some(w), Some(c)],
                    1,
                    attrs,
                )[0]
            }
        };
        b.output(z, "z");
        check(gpu, &b.build(), &[("a", seeded_f32(&a_shape, 10))], 1e-5);
    }
}

fn softmax_reduce_layer_norms(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[3, 5, 77]);
    let s = b.op("Softmax", &[x], vec![attr::int("axis", -1)]);
    b.output(s, "softmax");
    let r = b.op(
        "ReduceMean",
        &[x],
        vec![attr::ints("axes", &[-1]), attr::int("keepdims", 1)],
    );
    b.output(r, "mean");
    let gamma = b.initializer("gamma", &seeded_f32(&[77], 11));
    let beta = b.initializer("beta", &seeded_f32(&[77], 12));
    let ln = b.node(
        "",
        "LayerNormalization",
        &[Some(x), Some(gamma), Some(beta)],
        1,
        vec![attr::float("epsilon", 1e-5), attr::int("axis", -1)],
    );
    b.output(ln[0], "ln");
    let xs = Tensor::F32(
        seeded_f32(&[3, 5, 77], 13)
            .as_f32()
            .unwrap()
            .mapv(|v| v * 5.0),
    );
    assert_eq!(check(gpu, &b.build(), &[("x", xs)], 2e-6), 3);

    // SkipLayerNormalization with bias and the residual sum out (GPT-2's pre-LN form).
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let x = f32_in(&mut b, "x", &[2, 5, 96]);
    let skip = f32_in(&mut b, "skip", &[2, 5, 96]);
    let gamma = b.initializer("gamma", &seeded_f32(&[96], 14));
    let beta = b.initializer("beta", &seeded_f32(&[96], 15));
    let bias = b.initializer("bias", &seeded_f32(&[96], 16));
    let outs = b.node(
        "com.microsoft",
        "SkipLayerNormalization",
        &[Some(x), Some(skip), Some(gamma), Some(beta), Some(bias)],
        4,
        vec![attr::float("epsilon", 1e-5)],
    );
    b.output(outs[0], "y");
    b.output(outs[3], "sum");
    let n = check(
        gpu,
        &b.build(),
        &[
            ("x", seeded_f32(&[2, 5, 96], 17)),
            ("skip", seeded_f32(&[2, 5, 96], 18)),
        ],
        2e-6,
    );
    assert_eq!(n, 1, "SkipLayerNormalization is one dispatch");

    // Without an `epsilon` attribute the op's default (1e-12) applies on both backends: rows of
    // variance ~1e-8 normalize to O(1) values with it, and to ~0.03 of that with 1e-5 (the
    // default the WebGPU lowering once used on its own).
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let x = f32_in(&mut b, "x", &[2, 3, 64]);
    let skip = f32_in(&mut b, "skip", &[2, 3, 64]);
    let gamma = b.initializer("gamma", &Tensor::F32(ndarray::ArrayD::ones(vec![64])));
    let outs = b.node(
        "com.microsoft",
        "SkipLayerNormalization",
        &[Some(x), Some(skip), Some(gamma)],
        1,
        vec![],
    );
    b.output(outs[0], "y");
    let tiny = |seed| {
        Tensor::F32(
            seeded_f32(&[2, 3, 64], seed)
                .as_f32()
                .unwrap()
                .mapv(|v| v * 1e-4),
        )
    };
    check(
        gpu,
        &b.build(),
        &[("x", tiny(19)), ("skip", tiny(20))],
        1e-3,
    );
}

fn gelus_and_add_eyelike_are_one_dispatch_each(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1).import("ai.fuselab", 1);
    let x = f32_in(&mut b, "x", &[37, 50]);
    let bias = b.initializer("bias", &seeded_f32(&[50], 19));
    let g = b.node("com.microsoft", "Gelu", &[Some(x)], 1, vec![])[0];
    b.output(g, "gelu");
    let bg = b.node(
        "com.microsoft",
        "BiasGelu",
        &[Some(x), Some(bias)],
        1,
        vec![],
    )[0];
    b.output(bg, "bias_gelu");
    let fg = b.node(
        "com.microsoft",
        "FastGelu",
        &[Some(x), Some(bias)],
        1,
        vec![],
    )[0];
    b.output(fg, "fast_gelu");
    let eye = b.node(
        "ai.fuselab",
        "AddEyeLike",
        &[Some(x)],
        1,
        vec![attr::int("k", 3)],
    )[0];
    b.output(eye, "add_eye");
    let xs = Tensor::F32(
        seeded_f32(&[37, 50], 20)
            .as_f32()
            .unwrap()
            .mapv(|v| v * 4.0),
    );
    assert_eq!(check(gpu, &b.build(), &[("x", xs)], 2e-6), 4);
}

fn index_ops(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[2, 6, 5, 3]);
    let t = b.op("Transpose", &[x], vec![attr::ints("perm", &[0, 2, 1, 3])]);
    b.output(t, "t");
    let starts = b.initializer("starts", &Tensor::from_i64s(&[1, -4]));
    let ends = b.initializer("ends", &Tensor::from_i64s(&[6, 100]));
    let axes = b.initializer("axes", &Tensor::from_i64s(&[1, 2]));
    let steps = b.initializer("steps", &Tensor::from_i64s(&[2, 1]));
    let sl = b.op("Slice", &[x, starts, ends, axes, steps], vec![]);
    b.output(sl, "slice");
    let sizes = b.initializer("split", &Tensor::from_i64s(&[1, 3, 2]));
    let parts = b.node(
        "",
        "Split",
        &[Some(x), Some(sizes)],
        3,
        vec![attr::int("axis", 1)],
    );
    b.output(parts[0], "p0");
    b.output(parts[2], "p2");
    let cat = b.op(
        "Concat",
        &[parts[2], x, parts[1]],
        vec![attr::int("axis", 1)],
    );
    b.output(cat, "cat");
    let table = b.initializer("table", &seeded_f32(&[11, 4], 21));
    let ids = b.input("ids", DType::I64, dims(&[2, 3]));
    let emb = b.op("Gather", &[table, ids], vec![]);
    b.output(emb, "emb");
    let cols = b.initializer("cols", &Tensor::from_i64s(&[2, 0]));
    let g1 = b.op("Gather", &[x, cols], vec![attr::int("axis", 3)]);
    b.output(g1, "gather_axis3");
    let n = check(
        gpu,
        &b.build(),
        &[
            ("x", seeded_f32(&[2, 6, 5, 3], 22)),
            ("ids", i64_tensor(&[2, 3], vec![0, 10, -1, 3, 3, -11])),
        ],
        0.0,
    );
    assert_eq!(
        n, 8,
        "Transpose, Slice, Split (one per output: 3), Concat, 2 Gathers"
    );
}

fn eyelike_add_example_end_to_end(gpu: &Gpu) {
    let m = fuselab::io::load_file(
        &common::repo().join("examples/eyelike_add.onnx"),
        &Limits::default(),
    )
    .unwrap();
    let name = m.graph.name(m.graph.inputs[0]).to_string();
    let x = seeded_f32(&[70, 70], 23);
    assert_eq!(
        check(gpu, &m, &[(name.as_str(), x.clone())], 0.0),
        2,
        "EyeLike, Add"
    );
    let (fused, _) = common::fuse(&m, &["add_eyelike"]);
    assert_eq!(
        check(gpu, &fused, &[(name.as_str(), x)], 0.0),
        1,
        "AddEyeLike"
    );
}

fn shape_mismatch_and_missing_inputs_are_errors(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[4, 4]);
    let z = b.op("Relu", &[x], vec![]);
    b.output(z, "z");
    let m = b.build();
    let s = pollster::block_on(GpuSession::new(
        gpu,
        &m,
        &HashMap::new(),
        &Limits::default(),
    ))
    .unwrap();
    let run = |inputs: HashMap<String, Tensor>| {
        pollster::block_on(s.run(&inputs)).unwrap_err().to_string()
    };
    let e = run(HashMap::from([("x".into(), seeded_f32(&[4, 5], 1))]));
    assert!(e.contains("prepared for float32 [4, 4]"), "{e}");
    let e = run(HashMap::new());
    assert!(e.contains("input 'x': missing"), "{e}");
    let e = run(HashMap::from([
        ("x".into(), seeded_f32(&[4, 4], 1)),
        ("y".into(), seeded_f32(&[1], 1)),
    ]));
    assert!(e.contains("'y': is not an input"), "{e}");
}

/// GPT-2 and BERT tiny, unfused and fused, on the GPU vs the reference backend (same inputs).
fn transformers_end_to_end(gpu: &Gpu) {
    let limits = Limits::default();
    for name in ["gpt2_tiny", "bert_tiny", "gpt2_tiny_op17", "bert_tiny_op17"] {
        let path = common::repo().join(format!("tests/models/{name}.onnx"));
        let m = fuselab::io::load_file(&path, &limits).unwrap();
        let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
        for (b, s) in [(2, 8), (1, 13)] {
            let dims = HashMap::from([("batch".to_string(), b), ("seq".to_string(), s)]);
            let inputs =
                fuselab::runtime::inputs::random_inputs(&m, &HashMap::new(), &dims, 7, &limits)
                    .unwrap();
            let named: Vec<(&str, Tensor)> = inputs
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            // The opset-17 exports are held to their opset-13 twins' bound.
            let bound = gpu_parity::zoo(name.trim_end_matches("_op17")).bound;
            let unfused = check_abs(gpu, &m, &named, bound);
            let fused_n = check_abs(gpu, &fused, &named, bound);
            println!("{name} {b}x{s}: {unfused} dispatches unfused, {fused_n} fused");
            assert!(
                fused_n * 10 <= unfused * 4,
                "{name}: fused {fused_n} > 40% of unfused {unfused}"
            );
        }
    }
}

/// The QDQ 4-bit Llama after the default rules (MatMulNBits ×15, the norm, rotary and attention
/// fusions around them) runs whole on WebGPU and matches the reference backend.
fn quantized_llama_end_to_end(gpu: &Gpu) {
    let limits = Limits::default();
    let path = common::repo().join("tests/models/zoo/llama_gqa_tiny_int4_qdq.onnx");
    let m = fuselab::io::load_file(&path, &limits).unwrap();
    let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    let nbits = fused
        .graph
        .node_ids()
        .filter(|&id| fused.graph.node(id).op_type == "MatMulNBits")
        .count();
    assert_eq!(nbits, 15);
    let dims = HashMap::from([("batch".to_string(), 2), ("seq".to_string(), 7)]);
    let inputs =
        fuselab::runtime::inputs::random_inputs(&m, &HashMap::new(), &dims, 7, &limits).unwrap();
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let bound = gpu_parity::zoo("llama_gqa_tiny_int4_qdq").bound;
    let n = check_abs(gpu, &fused, &named, bound);
    println!("llama_gqa_tiny_int4_qdq 2x7: {n} dispatches fused");
}

/// `fuselab bench --backend webgpu --json` reports the dispatches of both graphs, and `run
/// --backend webgpu` writes what the reference backend writes.
fn cli_backend_flag(_gpu: &Gpu) {
    let bin = env!("CARGO_BIN_EXE_fuselab");
    let model = common::repo().join("examples/eyelike_add.onnx");
    let out = std::process::Command::new(bin)
        .args([
            "bench",
            model.to_str().unwrap(),
            "--backend",
            "webgpu",
            "--json",
        ])
        .args(["--runs", "3", "--warmup", "1", "--dim", "N=33"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep["backend"], "webgpu");
    assert_eq!(rep["dispatches"]["original"], 2);
    assert_eq!(rep["dispatches"]["optimized"], 1);
    assert_eq!(rep["max_abs_diff"], 0.0);
    assert!(rep["adapter"].as_str().is_some_and(|a| !a.is_empty()));
    let dir = std::env::temp_dir().join(format!("fuselab-gpu-run-{}", std::process::id()));
    let mut files = Vec::new();
    for backend in ["reference", "webgpu"] {
        let d = dir.join(backend);
        let st = std::process::Command::new(bin)
            .args([
                "run",
                model.to_str().unwrap(),
                "--backend",
                backend,
                "--dim",
                "N=33",
            ])
            .args(["--out", d.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        files.push(std::fs::read(d.join("Y.npy")).unwrap());
    }
    assert_eq!(
        files[0], files[1],
        "run --backend webgpu wrote other values"
    );
    let e = std::process::Command::new(bin)
        .args([
            "bench",
            model.to_str().unwrap(),
            "--backend",
            "webgpu",
            "--profile",
        ])
        .output()
        .unwrap();
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("reference backend only"));
}

/// An opt-in `fused_elementwise` chain runs as one generated kernel with the unfused result.
fn fused_elementwise_is_one_kernel(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[3, 70]);
    let y = f32_in(&mut b, "y", &[70]);
    let half = b.initializer("half", &Tensor::scalar_f32(0.5));
    let s = b.op("Add", &[x, y], vec![]);
    let m = b.op("Mul", &[s, half], vec![]);
    let t = b.op("Tanh", &[m], vec![]);
    let e = b.op("Erf", &[t], vec![]);
    let sg = b.op("Sigmoid", &[e], vec![]);
    let r = b.op("Sub", &[sg, y], vec![]);
    b.output(r, "z");
    let m = b.build();
    let inputs = [
        ("x", seeded_f32(&[3, 70], 30)),
        ("y", seeded_f32(&[70], 31)),
    ];
    assert_eq!(check(gpu, &m, &inputs, 2e-6), 6);
    let (fused, _) = common::fuse(&m, &["fused_elementwise"]);
    assert_eq!(
        common::ops(&fused),
        common::counts(&[("FusedElementwise", 1)])
    );
    assert_eq!(check(gpu, &fused, &inputs, 2e-6), 1);
}

fn comparisons_logic_and_reduce_sum(gpu: &Gpu) {
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[5, 33]);
    let y = f32_in(&mut b, "y", &[33]);
    let mut bools = Vec::new();
    for op in ["Equal", "LessOrEqual", "Greater", "GreaterOrEqual", "Less"] {
        let v = b.op(op, &[x, y], vec![]);
        b.output(v, &op.to_lowercase());
        bools.push(v);
    }
    for (op, (p, q)) in [("And", (1, 2)), ("Or", (0, 3)), ("Xor", (2, 4))] {
        let v = b.op(op, &[bools[p], bools[q]], vec![]);
        b.output(v, &op.to_lowercase());
    }
    let axes = b.initializer("axes", &Tensor::from_i64s(&[1]));
    let r = b.op("ReduceSum", &[x, axes], vec![attr::int("keepdims", 0)]);
    b.output(r, "sum");
    // Values on a coarse grid, so that equal pairs occur.
    let grid = |t: Tensor| Tensor::F32(t.as_f32().unwrap().mapv(|v| (v * 3.0).round()));
    let xs = grid(seeded_f32(&[5, 33], 40));
    let ys = grid(seeded_f32(&[33], 41));
    assert_eq!(check(gpu, &b.build(), &[("x", xs), ("y", ys)], 1e-6), 9);
}

/// Attention (with a padding mask, causal or not) and EmbedLayerNormalization on their own.
fn attention_and_embed_layer_norm(gpu: &Gpu) {
    let (batch, seq, hidden) = (2, 7, 32);
    for causal in [0, 1] {
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let x = f32_in(&mut b, "x", &[batch, seq, hidden]);
        let mask = b.input("mask", DType::I32, dims(&[batch as i64, seq as i64]));
        let w = b.initializer("w", &seeded_f32(&[hidden, 3 * hidden], 42));
        let bias = b.initializer("bias", &seeded_f32(&[3 * hidden], 43));
        let out = b.node(
            "com.microsoft",
            "Attention",
            &[Some(x), Some(w), Some(bias), Some(mask)],
            1,
            vec![
                attr::int("num_heads", 4),
                attr::int("unidirectional", causal),
            ],
        )[0];
        b.output(out, "y");
        // Row 0 pads its last two keys; row 1 masks every key (a uniform softmax).
        let m: Vec<i32> = (0..batch * seq).map(|i| i32::from(i < seq - 2)).collect();
        let mask_t = Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), m).unwrap());
        let n = check_abs(
            gpu,
            &b.build(),
            &[
                ("x", seeded_f32(&[batch, seq, hidden], 44)),
                ("mask", mask_t),
            ],
            1e-5,
        );
        assert_eq!(n, 2, "projection, then attention");
    }
    let mut b = GraphBuilder::new("g", 17);
    b.import("com.microsoft", 1);
    let ids = b.input("ids", DType::I32, dims(&[batch as i64, seq as i64]));
    let segs = b.input("segs", DType::I32, dims(&[batch as i64, seq as i64]));
    let word = b.initializer("word", &seeded_f32(&[50, hidden], 45));
    let pos = b.initializer("pos", &seeded_f32(&[16, hidden], 46));
    let seg = b.initializer("seg", &seeded_f32(&[2, hidden], 47));
    let gamma = b.initializer("gamma", &seeded_f32(&[hidden], 48));
    let beta = b.initializer("beta", &seeded_f32(&[hidden], 49));
    let outs = b.node(
        "com.microsoft",
        "EmbedLayerNormalization",
        &[
            Some(ids),
            Some(segs),
            Some(word),
            Some(pos),
            Some(seg),
            Some(gamma),
            Some(beta),
        ],
        2,
        vec![attr::float("epsilon", 1e-12)],
    );
    b.output(outs[0], "y");
    b.output(outs[1], "mask_index");
    let ints = |v: Vec<i32>| Tensor::I32(ArrayD::from_shape_vec(IxDyn(&[batch, seq]), v).unwrap());
    let n = check_abs(
        gpu,
        &b.build(),
        &[
            (
                "ids",
                ints((0..batch * seq).map(|i| (i * 7 % 50) as i32).collect()),
            ),
            (
                "segs",
                ints((0..batch * seq).map(|i| (i % 2) as i32).collect()),
            ),
        ],
        1e-5,
    );
    assert_eq!(n, 2, "the embedding, then the zero mask_index");
}

/// A device that goes away mid-session is an error on the next run, not a panic.
fn a_lost_device_is_an_error(_gpu: &Gpu) {
    let own = pollster::block_on(Gpu::new()).unwrap();
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[4]);
    let z = b.op("Relu", &[x], vec![]);
    b.output(z, "z");
    let m = b.build();
    let s = pollster::block_on(GpuSession::new(
        &own,
        &m,
        &HashMap::new(),
        &Limits::default(),
    ))
    .unwrap();
    let inputs = HashMap::from([("x".to_string(), seeded_f32(&[4], 1))]);
    assert!(pollster::block_on(s.run(&inputs)).is_ok());
    own.destroy();
    let e = pollster::block_on(s.run(&inputs)).unwrap_err().to_string();
    assert!(e.starts_with("webgpu: "), "{e}");
    println!("  after destroy: {e}");
}

/// A value bigger than the device's buffer limit is refused at prepare time, naming it.
fn a_buffer_over_the_device_limit_is_an_error(gpu: &Gpu) {
    let small = gpu.clone().with_max_binding_bytes(1024);
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[17, 16]);
    let z = b.op("Relu", &[x], vec![]);
    b.output(z, "z");
    let m = b.build();
    let e = pollster::block_on(GpuSession::new(
        &small,
        &m,
        &HashMap::new(),
        &Limits::default(),
    ))
    .err()
    .expect("a 1 KiB device cannot hold 17x16 floats")
    .to_string();
    assert!(
        e.contains("needs 1088 bytes, over this device's 1024-byte buffer limit"),
        "{e}"
    );
    // 16x16 floats (exactly 1 KiB) fit.
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[16, 16]);
    let z = b.op("Relu", &[x], vec![]);
    b.output(z, "z");
    assert!(pollster::block_on(GpuSession::new(
        &small,
        &b.build(),
        &HashMap::new(),
        &Limits::default()
    ))
    .is_ok());
}

/// The harness itself: with no Vulkan driver to load (this binary run again, the loader pointed
/// at a file that does not exist), FUSELAB_REQUIRE_GPU=1 makes the run fail, naming the variable;
/// without it the cases report skipped.
fn no_adapter_fails_only_when_a_gpu_is_required(_gpu: &Gpu) {
    let run = |require: bool| {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.arg("a_lost_device_is_an_error")
            .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
            .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
            .env_remove(REQUIRE_GPU);
        if require {
            c.env(REQUIRE_GPU, "1");
        }
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text.into_owned())
    };
    let (code, text) = run(true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FUSELAB_REQUIRE_GPU=1 but there is no GPU adapter, so the 1 WebGPU tests"),
        "{text}"
    );
    let (code, text) = run(false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("test a_lost_device_is_an_error ... skipped"),
        "{text}"
    );
}

/// The ONNX node-test corpus on the GPU: every case the reference backend passes (the list in
/// tests/onnx_conformance_expected.txt), optimized and lowered as `fuselab bench --backend
/// webgpu` does, on its first data set. A case whose ops, attributes or element types the WebGPU
/// backend does not claim is refused when the session is planned (counted, not run); every case
/// it plans must run and match the reference backend within 1e-4 · (1 + |reference|).
fn node_corpus_cases_it_claims_match(gpu: &Gpu) {
    use fuselab::onnx::proto::TensorProto;
    use fuselab::pipeline::{for_backend, Backend};
    use prost::Message;
    let root = common::node_corpus();
    let listed =
        std::fs::read_to_string(common::repo().join("tests/onnx_conformance_expected.txt"))
            .unwrap();
    let limits = Limits::default();
    let read_pb = |p: std::path::PathBuf| {
        let tp = TensorProto::decode(std::fs::read(&p).unwrap().as_slice()).unwrap();
        fuselab::onnx::tensor::to_tensor(&tp, &limits).unwrap()
    };
    let (mut ran, mut refused) = (0usize, 0usize);
    let mut bad = Vec::new();
    for name in listed
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
    {
        let dir = root.join(name);
        let model = fuselab::io::load_file(&dir.join("model.onnx"), &limits).unwrap();
        let mut optimized = model.clone();
        fuselab::passes::optimize(&mut optimized, &[]).unwrap();
        let m = for_backend(&optimized, Backend::Webgpu).unwrap();
        let g = &m.graph;
        let inputs: HashMap<String, Tensor> = g
            .inputs
            .iter()
            .filter(|&&v| g.initializer(v).is_none())
            .enumerate()
            .map(|(i, &v)| {
                let t = read_pb(dir.join(format!("test_data_set_0/input_{i}.pb")));
                (g.name(v).to_string(), t)
            })
            .collect();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(s) = pollster::block_on(GpuSession::for_inputs(gpu, &m, &inputs, &limits))
            else {
                return Ok(false);
            };
            let want = Executor::new(&m, &limits)
                .and_then(|ex| ex.run(&inputs))
                .map_err(|e| format!("reference: {e}"))?;
            let got = pollster::block_on(s.run(&inputs)).map_err(|e| format!("run: {e}"))?;
            for ((wn, w), (_, gt)) in want.iter().zip(&got) {
                if w.dtype() != gt.dtype() || w.shape() != gt.shape() {
                    return Err(format!(
                        "{wn}: {} {:?} on the GPU, {} {:?} expected",
                        gt.dtype(),
                        gt.shape(),
                        w.dtype(),
                        w.shape()
                    ));
                }
                let worst = w
                    .to_f64_vec()
                    .iter()
                    .zip(gt.to_f64_vec())
                    .filter(|(a, b)| !(a.is_nan() && b.is_nan()) && **a != *b)
                    .map(|(a, b)| (a - b).abs() / (1.0 + a.abs()))
                    .fold(
                        0.0f64,
                        |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
                    );
                // float16 is computed in float32 on the GPU, rounded once at the end; the
                // reference rounds each op's result: a few float16 ulps (2^-10) apart.
                let tol = if w.dtype() == DType::F16 { 2e-3 } else { 1e-4 };
                if worst > tol {
                    return Err(format!(
                        "{wn}: max |gpu - reference| / (1 + |ref|) = {worst:e}"
                    ));
                }
            }
            Ok(true)
        }));
        match outcome {
            Ok(Ok(true)) => ran += 1,
            Ok(Ok(false)) => refused += 1,
            Ok(Err(e)) => {
                ran += 1;
                bad.push(format!("{name}: {e}"));
            }
            Err(_) => {
                ran += 1;
                bad.push(format!("{name}: panicked"));
            }
        }
    }
    println!(
        "node corpus on webgpu: {ran} cases planned and run, {} match; {refused} not claimed \
         (refused when planned)",
        ran - bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} cases differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(ran > 100, "only {ran} corpus cases ran on the GPU");
}

/// Runs `m` on both backends; returns the largest |gpu - reference| over all outputs (which
/// must have the same types and shapes) and the dispatch count.
fn max_abs_diff(gpu: &Gpu, m: &Model, inputs: &HashMap<String, Tensor>) -> (f64, usize) {
    let limits = Limits::default();
    let want = Executor::new(m, &limits).unwrap().run(inputs).unwrap();
    let s = pollster::block_on(GpuSession::for_inputs(gpu, m, inputs, &limits)).unwrap();
    let got = pollster::block_on(s.run(inputs)).unwrap();
    (gpu_parity::max_abs_diff(&want, &got), s.dispatches())
}

/// A zoo model, and the same after the default rules.
fn zoo_pair(name: &str) -> (Model, Model) {
    let path = common::repo().join(format!("tests/models/zoo/{name}.onnx"));
    let m = fuselab::io::load_file(&path, &Limits::default()).unwrap();
    let (fused, _) = fuselab::pipeline::optimize(&m, &Default::default(), &|| 0.0).unwrap();
    (m, fused)
}

fn zoo_inputs(m: &Model, batch: usize, seq: usize) -> HashMap<String, Tensor> {
    let dims = HashMap::from([("batch".to_string(), batch), ("seq".to_string(), seq)]);
    fuselab::runtime::inputs::random_inputs(m, &HashMap::new(), &dims, 7, &Limits::default())
        .unwrap()
}

/// Decode steps: GPT-2's fused MultiHeadAttention reads the cache and writes
/// present_key/present_value (two cache appends and the attention core, causal after the
/// cache); the grouped-query Llama's reads its repeated cache heads-first with the mask as
/// attention_bias (also when exported with one new token, its query heads grouped: it runs at
/// seq 1 only). Unfused and fused runs match the reference backend, present outputs too
/// (`total` follows from past + seq), an empty cache included.
fn decode_step_attention_matches_the_reference(gpu: &Gpu) {
    for (stem, one_token) in [
        ("gpt2_tiny_decode", false),
        ("llama_gqa_tiny_decode", false),
        ("llama_gqa_tiny_decode1", true),
    ] {
        let path = common::repo().join(format!("tests/models/zoo/{stem}.onnx"));
        let m = fuselab::io::load_file(&path, &Limits::default()).unwrap();
        let mut opts = fuselab::pipeline::OptimizeOptions::default();
        if one_token {
            opts.dims.insert("seq".to_string(), 1);
        }
        let (fused, rep) = fuselab::pipeline::optimize(&m, &opts, &|| 0.0).unwrap();
        assert_eq!(rep.fusions.get("MultiHeadAttention"), Some(&2), "{stem}");
        for (b, s, p) in [(2, 3, 5), (1, 1, 12), (2, 2, 0)] {
            let s = if one_token { 1 } else { s };
            let dims = HashMap::from([
                ("batch".to_string(), b),
                ("seq".to_string(), s),
                ("past".to_string(), p),
            ]);
            let inputs = fuselab::runtime::inputs::random_inputs(
                &m,
                &HashMap::new(),
                &dims,
                7,
                &Limits::default(),
            )
            .unwrap();
            let (du, nu) = max_abs_diff(gpu, &m, &inputs);
            let (df, nf) = max_abs_diff(gpu, &fused, &inputs);
            println!(
                "{stem} {b}x{s} after {p}: max |diff| {du:e} unfused ({nu} dispatches), {df:e} fused ({nf})"
            );
            assert!(du <= 1e-4 && df <= 1e-4, "{stem}: {du:e} / {df:e}");
            assert!(nf < nu, "{stem}");
        }
    }
}

/// The float16 GPT-2, unfused and fused (SkipLayerNormalization, FastGelu in float16), runs on
/// WebGPU computed in float32 and matches the reference backend (which rounds every op's result
/// to float16) within the project's float16 bound: with float16 held as f16 (`shader-f16`, which
/// lavapipe has) and widened to f32 (the fallback).
fn float16_gpt2_matches_the_reference(gpu: &Gpu) {
    let (m, fused) = zoo_pair("gpt2_tiny_fp16");
    for gpu in [gpu.clone(), gpu.clone().without_f16()] {
        float16_gpt2_on(&gpu, &m, &fused);
    }
}

fn float16_gpt2_on(gpu: &Gpu, m: &Model, fused: &Model) {
    let m = m.clone();
    for (b, s) in [(2, 8), (1, 13)] {
        let inputs = zoo_inputs(&m, b, s);
        let (du, nu) = max_abs_diff(gpu, &m, &inputs);
        let (df, nf) = max_abs_diff(gpu, fused, &inputs);
        println!(
            "gpt2_tiny_fp16 {b}x{s}, f16 storage {}: max |diff| {du:e} unfused ({nu} dispatches), {df:e} fused ({nf})",
            gpu.has_f16()
        );
        let bound = gpu_parity::zoo("gpt2_tiny_fp16").bound;
        assert!(du <= bound && df <= bound, "{du:e} / {df:e} over {bound:e}");
        assert!(nf < nu);
    }
}

/// The float16 Llama (onnxruntime's float16 converter), unfused and fused (rotary in float16,
/// the RMS norms, QuickGelu), runs on WebGPU computed in float32 and matches the reference
/// backend (which rounds every op's result to float16) within the project's float16 bound.
/// The same for its 4-bit twin (MatMulNBits with float16 scales around the same fusions).
fn float16_llama_matches_the_reference(gpu: &Gpu) {
    for gpu in [gpu.clone(), gpu.clone().without_f16()] {
        for name in ["llama_gqa_tiny_fp16", "llama_gqa_tiny_fp16_int4"] {
            float16_llama_on(&gpu, name);
        }
    }
}

fn float16_llama_on(gpu: &Gpu, name: &str) {
    let (m, fused) = zoo_pair(name);
    let rotary = |m: &Model| {
        let g = &m.graph;
        g.node_ids()
            .filter(|&id| g.node(id).op_type == "RotaryEmbedding")
            .count()
    };
    assert_eq!(rotary(&fused), 4);
    for (b, s) in [(2, 8), (1, 13)] {
        let inputs = zoo_inputs(&m, b, s);
        let (du, nu) = max_abs_diff(gpu, &m, &inputs);
        let (df, nf) = max_abs_diff(gpu, &fused, &inputs);
        println!(
            "{name} {b}x{s}, f16 storage {}: max |diff| {du:e} unfused ({nu} dispatches), {df:e} fused ({nf})",
            gpu.has_f16()
        );
        let bound = fuselab::runtime::parity::HALF_TOLERANCE;
        assert!(du <= bound && df <= bound, "{du:e} / {df:e} over {bound:e}");
        assert!(nf < nu);
    }
}

/// Where the adapter has `shader-f16`, a float16 model's weights, inputs, outputs and
/// intermediates are held as f16: the fused float16 GPT-2's session holds at most 0.6x the bytes
/// it holds with float16 widened to f32 (its int64 ids, float32 logits and the f32 scratch of
/// some kernels stay 4 bytes), and its outputs are the same to the float16 bound.
fn float16_held_as_f16_takes_fewer_bytes(gpu: &Gpu) {
    if !gpu.has_f16() {
        println!("skipped: {} has no shader-f16", gpu.describe());
        return;
    }
    let (_, fused) = zoo_pair("gpt2_tiny_fp16");
    let inputs = zoo_inputs(&fused, 2, 8);
    let limits = Limits::default();
    let run = |gpu: &Gpu| {
        let s = pollster::block_on(GpuSession::for_inputs(gpu, &fused, &inputs, &limits)).unwrap();
        let out = pollster::block_on(s.run(&inputs)).unwrap();
        (s.buffer_bytes(), out)
    };
    let (half, a) = run(gpu);
    let (wide, b) = run(&gpu.clone().without_f16());
    println!("gpt2_tiny_fp16 fused 2x8: {half} buffer bytes as f16, {wide} widened");
    assert!((half as f64) <= 0.6 * wide as f64, "{half} vs {wide}");
    let d = gpu_parity::max_abs_diff(&a, &b);
    assert!(d <= fuselab::runtime::parity::HALF_TOLERANCE, "{d:e}");
}

/// A Cast to float16 rounds to nearest even as the reference does (ties, overflow to
/// infinity, subnormals), float16 inputs go up widened and float16 outputs come back narrowed.
fn float16_cast_rounds_like_the_reference(gpu: &Gpu) {
    let t = 2f32.powi(-11); // half a float16 ulp at 1
    let xs = vec![
        1.0 + t,        // tie: 1.0
        1.0004884,      // past the tie: 1.0009766
        1.0 + 3.0 * t,  // tie: to the even 1.0019531
        -(1.0 + t),     // -1.0
        65519.0,        // 65504
        65520.0,        // tie past the largest: infinity
        -70000.0,       // -infinity
        2f32.powi(-25), // tie in the subnormals: 0
        3e-8,           // the smallest subnormal, 2^-24
        1e-5,           // a subnormal
        0.1,
        -0.0,
    ];
    let n = xs.len();
    let mut b = GraphBuilder::new("g", 17);
    let x = f32_in(&mut b, "x", &[n]);
    let h = b.input("h", DType::F16, dims(&[n as i64]));
    let x16 = b.op("Cast", &[x], vec![attr::int("to", 10)]);
    let back = b.op("Cast", &[x16], vec![attr::int("to", 1)]);
    let sum = b.op("Add", &[x16, h], vec![]);
    b.output(x16, "x16");
    b.output(back, "back");
    b.output(sum, "sum");
    let m = b.build();
    let halves: Vec<half::f16> = (0..n)
        .map(|i| half::f16::from_f32(i as f32 * 0.25 - 1.0))
        .collect();
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[n]), xs).unwrap()),
        ),
        (
            "h".to_string(),
            Tensor::F16(ArrayD::from_shape_vec(IxDyn(&[n]), halves).unwrap()),
        ),
    ]);
    let limits = Limits::default();
    let want = Executor::new(&m, &limits).unwrap().run(&inputs).unwrap();
    for gpu in [gpu.clone(), gpu.clone().without_f16()] {
        let s = pollster::block_on(GpuSession::for_inputs(&gpu, &m, &inputs, &limits)).unwrap();
        let got = pollster::block_on(s.run(&inputs)).unwrap();
        assert_eq!(got, want, "f16 storage: {}", gpu.has_f16());
        assert_eq!(got[0].1.dtype(), DType::F16);
        assert_eq!(got[1].1.to_f64_vec()[..3], [1.0, 1.0009765625, 1.001953125]);
    }
}

/// DynamicQuantizeMatMul is one dispatch whose quantization of A matches the reference bit for
/// bit: ties of x / scale round to even (A's range makes the scale 1/128 exactly, and B the
/// identity shows each quantized value), and int8 and uint8 B, per-column zero points and
/// scales, bias, K past the kernel's 256-column chunks and M, N not multiples of its tile.
fn dynamic_quantize_matmul_is_one_dispatch(gpu: &Gpu) {
    let dqmm = |a_shape: &[usize], bt: Tensor, scale: Tensor, zp: Option<Tensor>, bias: bool| {
        let n = bt.shape()[1];
        let mut b = GraphBuilder::new("g", 17);
        b.import("com.microsoft", 1);
        let a = f32_in(&mut b, "a", a_shape);
        let mut ins = vec![
            Some(a),
            Some(b.initializer("b", &bt)),
            Some(b.initializer("s", &scale)),
        ];
        ins.push(zp.map(|z| b.initializer("z", &z)));
        if bias {
            ins.push(Some(b.initializer("bias", &seeded_f32(&[n], 61))));
        }
        let y = b.node("com.microsoft", "DynamicQuantizeMatMul", &ins, 1, vec![]);
        b.output(y[0], "y");
        b.build()
    };
    // Ties: A in units of 1/128 over [-1, 127/128], so a_scale = 1/128 and a_zp = 128.
    let units = [
        -128.0, 127.0, 2.5, 3.5, -2.5, -3.5, 0.5, 1.5, 100.5, -100.5, 0.0, 1.0, 5.5, 6.5, -0.5, 7.0,
    ];
    let a: Vec<f32> = units.iter().map(|u| u / 128.0).collect();
    let eye: Vec<i8> = (0..64).map(|i| (i % 9 == 0) as i8).collect();
    let m = dqmm(
        &[1, 2, 8],
        Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[8, 8]), eye).unwrap()),
        Tensor::scalar_f32(1.0),
        Some(Tensor::I8(ArrayD::from_elem(IxDyn(&[]), 0))),
        false,
    );
    let inputs = HashMap::from([(
        "a".to_string(),
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[1, 2, 8]), a).unwrap()),
    )]);
    let limits = Limits::default();
    let want = Executor::new(&m, &limits).unwrap().run(&inputs).unwrap();
    let s = pollster::block_on(GpuSession::for_inputs(gpu, &m, &inputs, &limits)).unwrap();
    let got = pollster::block_on(s.run(&inputs)).unwrap();
    assert_eq!(got, want);
    assert_eq!(s.dispatches(), 1);
    let q: Vec<f64> = got[0].1.to_f64_vec().iter().map(|v| v * 128.0).collect();
    let even = [
        -128.0, 127.0, 2.0, 4.0, -2.0, -4.0, 0.0, 2.0, 100.0, -100.0, 0.0, 1.0, 6.0, 6.0, 0.0, 7.0,
    ];
    assert_eq!(q, even);
    // 16,384 values of A over a range whose scale is not a power of two: with B the identity,
    // Y is each quantized value times the scale, so any value quantized differently shows.
    let eye: Vec<i8> = (0..256 * 256).map(|i| (i % 257 == 0) as i8).collect();
    let m = dqmm(
        &[64, 256],
        Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[256, 256]), eye).unwrap()),
        Tensor::scalar_f32(1.0),
        None,
        false,
    );
    let a = ArrayD::from_shape_fn(IxDyn(&[64, 256]), |ix| {
        let i = ix[0] * 256 + ix[1];
        ((i * 7919) % 10007) as f32 / 10007.0 * 3.7 - 1.3
    });
    let d = check(gpu, &m, &[("a", Tensor::F32(a))], 0.0);
    assert_eq!(d, 1);
    // uint8 and int8 B, per-column and scalar zero points and scales, bias.
    let (k, n) = (300, 70);
    let bytes: Vec<u8> = (0..k * n).map(|i| ((i * 73 + i / 7) % 256) as u8).collect();
    let b_u8 = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[k, n]), bytes.clone()).unwrap());
    let b_i8 = Tensor::I8(
        ArrayD::from_shape_vec(IxDyn(&[k, n]), bytes.iter().map(|&v| v as i8).collect()).unwrap(),
    );
    let col_scales = Tensor::F32(
        seeded_f32(&[n], 62)
            .as_f32()
            .unwrap()
            .mapv(|v| 0.001 + 0.01 * v.abs()),
    );
    let zp_u8 = Tensor::U8(
        ArrayD::from_shape_vec(IxDyn(&[n]), (0..n as u8).map(|i| 100 + i).collect()).unwrap(),
    );
    for (name, bt, scale, zp, bias) in [
        ("uint8, per column", b_u8, col_scales, Some(zp_u8), true),
        (
            "int8, scalar",
            b_i8.clone(),
            Tensor::scalar_f32(0.02),
            Some(Tensor::I8(ArrayD::from_elem(IxDyn(&[]), -3))),
            false,
        ),
        (
            "int8, no zero point",
            b_i8,
            Tensor::scalar_f32(0.02),
            None,
            true,
        ),
    ] {
        let m = dqmm(&[2, 5, k], bt, scale, zp, bias);
        let d = check(gpu, &m, &[("a", seeded_f32(&[2, 5, k], 63))], 1e-6);
        assert_eq!(d, 1, "{name}");
    }
}

/// The int8 BERT, original (DynamicQuantizeLinear, MatMulInteger) and after the default rules
/// (DynamicQuantizeMatMul ×13, its uint8 embeddings gathered and dequantized), runs whole on
/// WebGPU and matches the reference; uint8 arithmetic is refused by name.
fn int8_bert_matches_the_reference(gpu: &Gpu) {
    let (m, fused) = zoo_pair("bert_tiny_int8");
    let dqmm = fused
        .graph
        .node_ids()
        .filter(|&id| fused.graph.node(id).op_type == "DynamicQuantizeMatMul")
        .count();
    assert_eq!(dqmm, 13);
    let bound = gpu_parity::zoo("bert_tiny_int8").bound;
    for (b, s) in [(2, 8), (1, 13)] {
        let (d, n) = max_abs_diff(gpu, &fused, &zoo_inputs(&m, b, s));
        println!("bert_tiny_int8 fused {b}x{s}: max |diff| {d:e}, {n} dispatches");
        assert!(d <= bound, "{d:e}");
    }
    // The original graph: DynamicQuantizeLinear and MatMulInteger, each one dispatch, the
    // quantization bit-exact.
    for (b, s) in [(2, 8), (1, 13)] {
        let (d, n) = max_abs_diff(gpu, &m, &zoo_inputs(&m, b, s));
        println!("bert_tiny_int8 original {b}x{s}: max |diff| {d:e}, {n} dispatches");
        assert!(d <= bound, "{d:e}");
    }
    let limits = Limits::default();
    let mut b = GraphBuilder::new("g", 17);
    let x = b.input("x", DType::U8, dims(&[4]));
    let y = b.op("Add", &[x, x], vec![]);
    b.output(y, "y");
    let e = pollster::block_on(GpuSession::new(gpu, &b.build(), &HashMap::new(), &limits))
        .err()
        .expect("uint8 Add is refused")
        .to_string();
    assert!(e.contains("Add computing uint8 is not on webgpu"), "{e}");
}

const CASES: &[Case] = &[
    (
        "profile_times_every_dispatch_with_and_without_timestamps",
        profile::profile_times_every_dispatch_with_and_without_timestamps,
    ),
    ("conv_is_one_dispatch", conv::conv_is_one_dispatch),
    (
        "fused_conv_is_one_dispatch",
        conv::fused_conv_is_one_dispatch,
    ),
    (
        "unsupported_conv_is_an_error",
        conv::unsupported_conv_is_an_error,
    ),
    (
        "pools_are_one_dispatch_each",
        conv::pools_are_one_dispatch_each,
    ),
    (
        "gather_nd_is_one_dispatch",
        quant_index::gather_nd_is_one_dispatch,
    ),
    (
        "dynamic_quantize_linear_is_bit_exact",
        quant_index::dynamic_quantize_linear_is_bit_exact,
    ),
    (
        "matmul_integer_is_exact",
        quant_index::matmul_integer_is_exact,
    ),
    (
        "zoo_models_match_the_reference",
        models::zoo_models_match_the_reference,
    ),
    (
        "resnet_block_matches_the_reference",
        models::resnet_block_matches_the_reference,
    ),
    (
        "torchvision_cnns_match_the_reference",
        models::torchvision_cnns_match_the_reference,
    ),
    (
        "matmul_nbits_float16_is_one_dispatch",
        matmul_nbits_float16_is_one_dispatch,
    ),
    (
        "float16_gpt2_matches_the_reference",
        float16_gpt2_matches_the_reference,
    ),
    (
        "float16_held_as_f16_takes_fewer_bytes",
        float16_held_as_f16_takes_fewer_bytes,
    ),
    (
        "float16_llama_matches_the_reference",
        float16_llama_matches_the_reference,
    ),
    (
        "decode_step_attention_matches_the_reference",
        decode_step_attention_matches_the_reference,
    ),
    (
        "float16_cast_rounds_like_the_reference",
        float16_cast_rounds_like_the_reference,
    ),
    (
        "dynamic_quantize_matmul_is_one_dispatch",
        dynamic_quantize_matmul_is_one_dispatch,
    ),
    (
        "int8_bert_matches_the_reference",
        int8_bert_matches_the_reference,
    ),
    (
        "node_corpus_cases_it_claims_match",
        node_corpus_cases_it_claims_match,
    ),
    (
        "no_adapter_fails_only_when_a_gpu_is_required",
        no_adapter_fails_only_when_a_gpu_is_required,
    ),
    (
        "a_buffer_over_the_device_limit_is_an_error",
        a_buffer_over_the_device_limit_is_an_error,
    ),
    (
        "comparisons_logic_and_reduce_sum",
        comparisons_logic_and_reduce_sum,
    ),
    (
        "attention_and_embed_layer_norm",
        attention_and_embed_layer_norm,
    ),
    ("a_lost_device_is_an_error", a_lost_device_is_an_error),
    (
        "fused_elementwise_is_one_kernel",
        fused_elementwise_is_one_kernel,
    ),
    ("cli_backend_flag", cli_backend_flag),
    ("transformers_end_to_end", transformers_end_to_end),
    (
        "unary_and_binary_ops_broadcast",
        unary_and_binary_ops_broadcast,
    ),
    ("activations", activations),
    (
        "comparisons_where_cast_expand",
        comparisons_where_cast_expand,
    ),
    ("empty_slice_joined_by_concat", empty_slice_joined_by_concat),
    ("nan_and_infinity_tests", nan_and_infinity_tests),
    (
        "matmul_batched_broadcast_and_vectors",
        matmul_batched_broadcast_and_vectors,
    ),
    (
        "gemm_transposes_bias_and_fused_activation",
        gemm_transposes_bias_and_fused_activation,
    ),
    ("softmax_reduce_layer_norms", softmax_reduce_layer_norms),
    (
        "rms_norms_are_one_dispatch_each",
        rms_norms_are_one_dispatch_each,
    ),
    (
        "rotary_embedding_is_one_dispatch",
        rotary_embedding_is_one_dispatch,
    ),
    (
        "standard_rotary_embedding_is_one_dispatch",
        standard_rotary_embedding_is_one_dispatch,
    ),
    (
        "rotary_embedding_float16_is_one_dispatch",
        rotary_embedding_float16_is_one_dispatch,
    ),
    ("matmul_nbits_is_one_dispatch", matmul_nbits_is_one_dispatch),
    ("quantized_llama_end_to_end", quantized_llama_end_to_end),
    (
        "multi_head_attention_is_one_dispatch",
        multi_head_attention_is_one_dispatch,
    ),
    (
        "multi_head_attention_3d_with_key_padding_is_one_dispatch",
        multi_head_attention_3d_with_key_padding_is_one_dispatch,
    ),
    (
        "gelus_and_add_eyelike_are_one_dispatch_each",
        gelus_and_add_eyelike_are_one_dispatch_each,
    ),
    ("index_ops", index_ops),
    (
        "eyelike_add_example_end_to_end",
        eyelike_add_example_end_to_end,
    ),
    (
        "shape_mismatch_and_missing_inputs_are_errors",
        shape_mismatch_and_missing_inputs_are_errors,
    ),
];

/// Set to `1` (scripts/test.sh does), no GPU adapter fails the run instead of skipping it.
const REQUIRE_GPU: &str = "FUSELAB_REQUIRE_GPU";

fn gpu_required() -> bool {
    std::env::var(REQUIRE_GPU).is_ok_and(|v| v == "1")
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|(name, _)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", cases.len());
    let gpu = match pollster::block_on(Gpu::new()) {
        Ok(g) => g,
        Err(e) if gpu_required() => {
            eprintln!(
                "error: {REQUIRE_GPU}=1 but there is no GPU adapter, so the {} WebGPU tests did \
                 not run: {e}. Unset {REQUIRE_GPU} to let them skip instead.",
                cases.len()
            );
            std::process::exit(1);
        }
        Err(e) => {
            for (name, _) in &cases {
                println!("test {name} ... skipped ({e})");
            }
            println!(
                "\ntest result: skipped. 0 passed; 0 failed; {} skipped (no GPU adapter)\n",
                cases.len()
            );
            return;
        }
    };
    println!("adapter: {}", gpu.describe());
    let mut failed = Vec::new();
    for (name, f) in &cases {
        match catch_unwind(AssertUnwindSafe(|| f(&gpu))) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 skipped\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        cases.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        println!("failures: {}", failed.join(", "));
        std::process::exit(1);
    }
}
