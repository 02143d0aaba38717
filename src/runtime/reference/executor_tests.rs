use super::*;
use crate::builder::GraphBuilder;
use crate::ir::{attr, Dim};
use crate::tensor::DType;
use ndarray::{ArrayD, IxDyn};

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

fn run(m: &Model, feeds: &[(&str, Tensor)]) -> Vec<(String, Tensor)> {
    let inputs: HashMap<String, Tensor> = feeds
        .iter()
        .map(|(k, t)| (k.to_string(), t.clone()))
        .collect();
    Executor::new(m, &Limits::default())
        .unwrap()
        .run(&inputs)
        .unwrap()
}

/// Storage types reach a compute kernel widened and leave narrowed to their declared type:
/// float16 1 + 2^-11 is a tie that the float32 sum leaves exact and the narrowing rounds
/// to even (1.0); int8 -100 + -100 wraps to 56; data movement (Transpose) keeps the type.
#[test]
fn storage_types_are_widened_for_kernels_and_narrowed_back() {
    use half::f16;
    let mut b = GraphBuilder::new("g", 17);
    let h = b.input("H", DType::F16, vec![Dim::Known(2)]);
    let q = b.input("Q", DType::I8, vec![Dim::Known(2)]);
    let hs = b.op("Add", &[h, h], vec![]);
    let hh = b.op("Add", &[hs, h], vec![]);
    let qq = b.op("Add", &[q, q], vec![]);
    let qt = b.op("Transpose", &[qq], vec![]);
    b.output(hh, "HH");
    b.output(qt, "QT");
    let m = b.build();
    let tie = f16::from_f32(1.0 + 2f32.powi(-11) / 3.0);
    let halves = ArrayD::from_shape_vec(IxDyn(&[2]), vec![f16::ONE, tie]).unwrap();
    let bytes = ArrayD::from_shape_vec(IxDyn(&[2]), vec![-100i8, 7]).unwrap();
    let out = run(&m, &[("H", Tensor::F16(halves)), ("Q", Tensor::I8(bytes))]);
    let Tensor::F16(hh) = &out[0].1 else {
        panic!("HH is {:?}", out[0].1.dtype())
    };
    assert_eq!(hh.iter().map(|v| v.to_f32()).collect::<Vec<_>>()[0], 3.0);
    // Each f16 sum rounds: 3 * tie in f32, rounded once per Add, never a float32 result.
    let twice = f16::from_f32(tie.to_f32() * 2.0);
    assert_eq!(hh[1], f16::from_f32(twice.to_f32() + tie.to_f32()));
    assert_eq!(
        out[1].1,
        Tensor::I8(ArrayD::from_shape_vec(IxDyn(&[2]), vec![56, 14]).unwrap())
    );
}

/// A kernel's prepared state (Conv's packed weights) is kept only for initializers: one
/// executor run twice with two different W fed as an input gives each W's result, and an
/// initializer W prepared on the first run gives the same values on the second.
#[test]
fn prepared_state_is_kept_for_initializers_only() {
    let shape = [20, 3, 3, 3];
    let w1: Vec<f32> = (0..540).map(|i| (i % 11) as f32 * 0.1 - 0.5).collect();
    let w2: Vec<f32> = w1.iter().map(|v| v * -2.0 + 0.25).collect();
    let xv: Vec<f32> = (0..3 * 64).map(|i| (i % 7) as f32 * 0.3 - 1.0).collect();
    let x = f32s(&[1, 3, 8, 8], &xv);
    let conv = |w_init: Option<&[f32]>| {
        let mut b = GraphBuilder::new("g", 17);
        let xi = b.input("X", DType::F32, [1, 3, 8, 8].map(Dim::Known).to_vec());
        let w = match w_init {
            Some(v) => b.initializer("W", &f32s(&shape, v)),
            None => b.input(
                "W",
                DType::F32,
                shape.map(|d| Dim::Known(d as i64)).to_vec(),
            ),
        };
        let y = b.op("Conv", &[xi, w], vec![attr::ints("pads", &[1, 1, 1, 1])]);
        b.output(y, "Y");
        b.build()
    };
    let fed = conv(None);
    let ex = Executor::new(&fed, &Limits::default()).unwrap();
    let feed = |w: &[f32]| {
        HashMap::from([
            ("X".to_string(), x.clone()),
            ("W".to_string(), f32s(&shape, w)),
        ])
    };
    let y1 = ex.run(&feed(&w1)).unwrap();
    let y2 = ex.run(&feed(&w2)).unwrap();
    assert_ne!(y1, y2);
    for (w, want) in [(&w1, &y1), (&w2, &y2)] {
        let m = conv(Some(w));
        let ex = Executor::new(&m, &Limits::default()).unwrap();
        let only_x = HashMap::from([("X".to_string(), x.clone())]);
        assert_eq!(&ex.run(&only_x).unwrap(), want);
        assert_eq!(&ex.run(&only_x).unwrap(), want, "second run, prepared W");
    }
}

/// Resize (`Op::saturates`) clamps its widened integer results into uint8 as onnxruntime
/// does: cubic upsampling of a 0 -> 255 step overshoots both ends, and those values must
/// come out 0 and 255 (wrapping would give values near the other end). Each uint8 value is
/// the float32 Resize of the same data rounded half to even and clamped.
#[test]
fn resize_saturates_when_narrowing_to_uint8() {
    let mut b = GraphBuilder::new("g", 17);
    let u = b.input("U", DType::U8, vec![Dim::Known(1), Dim::Known(6)]);
    let f = b.input("F", DType::F32, vec![Dim::Known(1), Dim::Known(6)]);
    let scales = b.initializer("scales", &f32s(&[2], &[1., 3.]));
    let cubic = || vec![attr::string("mode", "cubic")];
    let ru = b.node("", "Resize", &[Some(u), None, Some(scales)], 1, cubic())[0];
    let rf = b.node("", "Resize", &[Some(f), None, Some(scales)], 1, cubic())[0];
    b.output(ru, "RU");
    b.output(rf, "RF");
    let m = b.build();
    let v = [0u8, 0, 0, 255, 255, 255];
    let ut = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[1, 6]), v.to_vec()).unwrap());
    let ft = f32s(&[1, 6], &v.map(f32::from));
    let out = run(&m, &[("U", ut), ("F", ft)]);
    let Tensor::F32(rf) = &out[1].1 else {
        panic!("RF is {:?}", out[1].1.dtype())
    };
    assert!(rf.iter().any(|&x| x < -0.5) && rf.iter().any(|&x| x > 255.5));
    let want: Vec<u8> = rf
        .iter()
        .map(|&x| x.round_ties_even().clamp(0.0, 255.0) as u8)
        .collect();
    let want = Tensor::U8(ArrayD::from_shape_vec(IxDyn(&[1, 18]), want).unwrap());
    assert_eq!(out[0].1, want);
}

/// A value read by a Reshape and then by a later node keeps its data for that node: only the
/// last reader may take it.
#[test]
fn relabel_moves_only_at_the_last_reader() {
    let mut b = GraphBuilder::new("g", 17);
    let a = b.input("A", DType::F32, vec![Dim::Known(2), Dim::Known(3)]);
    let x = b.op("Add", &[a, a], vec![]);
    let shape = b.initializer("shape", &Tensor::from_i64s(&[3, 2]));
    // x is read by the Reshape first, by the Mul after it: no move at the Reshape.
    let r = b.op("Reshape", &[x, shape], vec![]);
    let y = b.op("Mul", &[x, x], vec![]);
    // x2 is read only by the Unsqueeze: moved there.
    let x2 = b.op("Neg", &[y], vec![]);
    let u = b.op("Unsqueeze", &[x2], vec![attr::ints("axes", &[0])]);
    let u = b.op("Unsqueeze", &[u], vec![attr::ints("axes", &[0])]);
    // The graph input A (borrowed) goes through Identity: copied, and A stays intact.
    let i = b.op("Identity", &[a], vec![]);
    let s = b.op("Sub", &[i, a], vec![]);
    b.output(r, "R");
    b.output(y, "Y");
    b.output(u, "U");
    b.output(s, "S");
    let mut m = b.build();
    // Squeeze/Unsqueeze at opset 11 take axes as an attribute.
    m.proto.opset_import[0].version = 11;
    let av = [1., 2., 3., 4., 5., 6.];
    let out = run(&m, &[("A", f32s(&[2, 3], &av))]);
    let two: Vec<f32> = av.iter().map(|v| 2.0 * v).collect();
    let sq: Vec<f32> = two.iter().map(|v| v * v).collect();
    let neg: Vec<f32> = sq.iter().map(|v| -v).collect();
    assert_eq!(out[0], ("R".into(), f32s(&[3, 2], &two)));
    assert_eq!(out[1], ("Y".into(), f32s(&[2, 3], &sq)));
    assert_eq!(out[2], ("U".into(), f32s(&[1, 1, 2, 3], &neg)));
    assert_eq!(out[3], ("S".into(), f32s(&[2, 3], &[0.; 6])));
}

/// A graph output that a Reshape also reads is still returned whole, and a Reshape reading
/// the same value twice (data and shape) is not moved.
#[test]
fn relabel_keeps_graph_outputs_and_values_read_twice() {
    let mut b = GraphBuilder::new("g", 17);
    let a = b.input("A", DType::F32, vec![Dim::Known(4)]);
    let x = b.op("Add", &[a, a], vec![]);
    let f = b.op("Flatten", &[x], vec![attr::int("axis", 0)]);
    b.output(x, "X");
    b.output(f, "F");
    let k = b.input("K", DType::I64, vec![Dim::Known(1)]);
    let k2 = b.op("Mul", &[k, k], vec![]);
    let r = b.op("Reshape", &[k2, k2], vec![]);
    b.output(r, "R");
    let m = b.build();
    let out = run(
        &m,
        &[
            ("A", f32s(&[4], &[1., 2., 3., 4.])),
            ("K", Tensor::from_i64s(&[1])),
        ],
    );
    assert_eq!(out[0], ("X".into(), f32s(&[4], &[2., 4., 6., 8.])));
    assert_eq!(out[1], ("F".into(), f32s(&[1, 4], &[2., 4., 6., 8.])));
    assert_eq!(out[2], ("R".into(), Tensor::from_i64s(&[1])));
}

#[test]
fn relabel_reuses_a_row_major_buffer_and_copies_otherwise() {
    let t = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let p = t.as_f32().unwrap().as_ptr();
    let r = relabel("Reshape", t, &[3, 2]).unwrap();
    assert_eq!(r.as_f32().unwrap().as_ptr(), p);
    assert_eq!(r, f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.]));
    // A transposed (column-major) array is read in row-major order of its logical shape.
    let a = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
    let r = relabel("Reshape", Tensor::F32(a.reversed_axes()), &[6]).unwrap();
    assert_eq!(r, f32s(&[6], &[1., 4., 2., 5., 3., 6.]));
    assert!(relabel("Reshape", f32s(&[2], &[1., 2.]), &[3]).is_err());
}
