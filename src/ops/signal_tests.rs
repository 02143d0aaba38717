//! Unit tests of signal.rs: small transforms and windows worked by hand.

use super::super::common::test_util::*;
use super::super::lanes::run_node;
use super::*;
use crate::ir::{attr, Node};

fn run(n: &Node, opset: i64, ins: &[Option<&Tensor>]) -> Result<Tensor, String> {
    run_node(n, opset, ins).map(|mut v| v.remove(0))
}

const S3: f32 = 0.866_025_4; // sqrt(3) / 2

#[test]
fn dft_forward_onesided_and_lengths() {
    // [1, 2, 3, 4] -> [10, -2 + 2i, -2, -2 - 2i] (radix-2 path).
    let x = f32s(&[1, 4, 1], &[1., 2., 3., 4.]);
    let y = run(&node("DFT", vec![]), 17, &[Some(&x)]).unwrap();
    let want = [10., 0., -2., 2., -2., 0., -2., -2.];
    assert_close(&y, &f32s(&[1, 4, 2], &want), 1e-5);
    let n = node("DFT", vec![attr::int("onesided", 1)]);
    let y = run(&n, 17, &[Some(&x)]).unwrap();
    assert_close(&y, &f32s(&[1, 3, 2], &want[..6]), 1e-5);
    // Length 3 (the direct sum): [6, -1.5 + 0.866i, -1.5 - 0.866i].
    let x3 = f64s(&[1, 3, 1], &[1., 2., 3.]);
    let y = run(&node("DFT", vec![]), 17, &[Some(&x3)]).unwrap();
    let s3 = S3 as f64;
    assert_close(&y, &f64s(&[1, 3, 2], &[6., 0., -1.5, s3, -1.5, -s3]), 1e-6);
    // dft_length 4 pads [1, 2] with zeros: [3, 1 - 2i, -1, 1 + 2i]; 1 cuts to [1].
    let x2 = f32s(&[1, 2, 1], &[1., 2.]);
    let four = i64s(&[], &[4]);
    let y = run(&node("DFT", vec![]), 17, &[Some(&x2), Some(&four)]).unwrap();
    assert_close(
        &y,
        &f32s(&[1, 4, 2], &[3., 0., 1., -2., -1., 0., 1., 2.]),
        1e-6,
    );
    let one = i32s(&[1], &[1]);
    let y = run(&node("DFT", vec![]), 20, &[Some(&x2), Some(&one)]).unwrap();
    assert_close(&y, &f32s(&[1, 1, 2], &[1., 0.]), 1e-6);
}

#[test]
fn dft_inverse_and_irfft() {
    let spec = f32s(&[1, 4, 2], &[10., 0., -2., 2., -2., 0., -2., -2.]);
    let n = node("DFT", vec![attr::int("inverse", 1)]);
    let y = run(&n, 17, &[Some(&spec)]).unwrap();
    assert_close(
        &y,
        &f32s(&[1, 4, 2], &[1., 0., 2., 0., 3., 0., 4., 0.]),
        1e-6,
    );
    // One-sided inverse: default length 2·(3 - 1) = 4, real output.
    let half = f32s(&[1, 3, 2], &[10., 0., -2., 2., -2., 0.]);
    let n = node(
        "DFT",
        vec![attr::int("inverse", 1), attr::int("onesided", 1)],
    );
    let y = run(&n, 20, &[Some(&half)]).unwrap();
    assert_close(&y, &f32s(&[1, 4, 1], &[1., 2., 3., 4.]), 1e-6);
    // Odd length 3 from bins [6, -1.5 + 0.866i].
    let half = f32s(&[1, 2, 2], &[6., 0., -1.5, S3]);
    let three = i64s(&[], &[3]);
    let y = run(&n, 20, &[Some(&half), Some(&three)]).unwrap();
    assert_close(&y, &f32s(&[1, 3, 1], &[1., 2., 3.]), 1e-6);
}

#[test]
fn dft_axis_attribute_and_input() {
    // [[1, 2], [3, 4]] along axis 0: columns [1, 3] -> [4, -2], [2, 4] -> [6, -2].
    let x = f32s(&[2, 2, 1], &[1., 2., 3., 4.]);
    let want = f32s(&[2, 2, 2], &[4., 0., 6., 0., -2., 0., -2., 0.]);
    let y = run(&node("DFT", vec![attr::int("axis", 0)]), 17, &[Some(&x)]).unwrap();
    assert_close(&y, &want, 1e-6);
    let y = run(&node("DFT", vec![attr::int("axis", -3)]), 17, &[Some(&x)]).unwrap();
    assert_close(&y, &want, 1e-6);
    let axis = i64s(&[], &[0]);
    let y = run(&node("DFT", vec![]), 20, &[Some(&x), None, Some(&axis)]).unwrap();
    assert_close(&y, &want, 1e-6);
    // The default -2 from 20 is the last signal axis: rows [1, 2] -> [3, -1], [3, 4] -> [7, -1].
    let y = run(&node("DFT", vec![]), 20, &[Some(&x)]).unwrap();
    assert_close(
        &y,
        &f32s(&[2, 2, 2], &[3., 0., -1., 0., 7., 0., -1., 0.]),
        1e-6,
    );
}

#[test]
fn dft_bad_inputs() {
    let x = f32s(&[1, 2, 1], &[1., 2.]);
    let e = run(&node("DFT", vec![attr::int("axis", 2)]), 17, &[Some(&x)]).unwrap_err();
    assert!(e.contains("axis 2 is out of range for rank 3"), "{e}");
    let e = run(&node("DFT", vec![attr::int("axis", -1)]), 17, &[Some(&x)]).unwrap_err();
    assert!(e.contains("axis -1 is out of range"), "{e}");
    let x3 = f32s(&[1, 1, 3], &[1., 2., 3.]);
    let e = run(&node("DFT", vec![]), 17, &[Some(&x3)]).unwrap_err();
    assert!(e.contains("last dim of 1 (real) or 2 (complex)"), "{e}");
    let zero = i64s(&[], &[0]);
    let e = run(&node("DFT", vec![]), 17, &[Some(&x), Some(&zero)]).unwrap_err();
    assert!(
        e.contains("'dft_length' must be in [1, 2^31 - 1], got 0"),
        "{e}"
    );
    let e = run(&node("DFT", vec![]), 17, &[Some(&x), Some(&x)]).unwrap_err();
    assert!(
        e.contains("'dft_length' must be an int32 or int64 scalar"),
        "{e}"
    );
}

#[test]
fn stft_frames_and_window() {
    // Frames [1, 2] and [3, 4] -> [3, -1] and [7, -1].
    let x = f32s(&[1, 4, 1], &[1., 2., 3., 4.]);
    let step = i64s(&[], &[2]);
    let fl = i64s(&[], &[2]);
    let n = node("STFT", vec![]);
    let y = run(&n, 17, &[Some(&x), Some(&step), None, Some(&fl)]).unwrap();
    let want = [3., 0., -1., 0., 7., 0., -1., 0.];
    assert_close(&y, &f32s(&[1, 2, 2, 2], &want), 1e-6);
    // Window [1, 0] keeps each frame's first sample; onesided 0 keeps every bin (here both).
    let w = f32s(&[2], &[1., 0.]);
    let n0 = node("STFT", vec![attr::int("onesided", 0)]);
    let y = run(&n0, 17, &[Some(&x), Some(&step), Some(&w)]).unwrap();
    assert_close(
        &y,
        &f32s(&[1, 2, 2, 2], &[1., 0., 1., 0., 3., 0., 3., 0.]),
        1e-6,
    );
    // Neither window nor frame_length: one frame of the whole signal, bins 0..=2.
    let y = run(&n, 17, &[Some(&x), Some(&step)]).unwrap();
    assert_close(&y, &f32s(&[1, 1, 3, 2], &[10., 0., -2., 2., -2., 0.]), 1e-5);
    let three = i64s(&[], &[3]);
    let e = run(&n, 17, &[Some(&x), Some(&step), Some(&w), Some(&three)]).unwrap_err();
    assert!(
        e.contains("frame_length 3 differs from the window's length 2"),
        "{e}"
    );
    let five = i64s(&[], &[5]);
    let e = run(&n, 17, &[Some(&x), Some(&step), None, Some(&five)]).unwrap_err();
    assert!(
        e.contains("frame length 5 must be in [1, signal length 4]"),
        "{e}"
    );
    let e = run(&n, 17, &[Some(&x), Some(&i64s(&[], &[0]))]).unwrap_err();
    assert!(e.contains("'frame_step' must be in [1"), "{e}");
}

#[test]
fn windows() {
    let four = i64s(&[], &[4]);
    let y = run(&node("HannWindow", vec![]), 17, &[Some(&four)]).unwrap();
    assert_close(&y, &f32s(&[4], &[0., 0.5, 1., 0.5]), 1e-7);
    let three = i32s(&[], &[3]);
    let sym = || vec![attr::int("periodic", 0)];
    let y = run(&node("HannWindow", sym()), 17, &[Some(&three)]).unwrap();
    assert_close(&y, &f32s(&[3], &[0., 1., 0.]), 1e-7);
    let two = i64s(&[], &[2]);
    let y = run(&node("BlackmanWindow", vec![]), 17, &[Some(&two)]).unwrap();
    assert_close(&y, &f32s(&[2], &[0., 1.]), 1e-7);
    let n = node(
        "HammingWindow",
        vec![attr::int("periodic", 0), attr::int("output_datatype", 11)],
    );
    let y = run(&n, 17, &[Some(&two)]).unwrap();
    assert_close(&y, &f64s(&[2], &[4. / 46., 4. / 46.]), 1e-12);
    let n = node("HannWindow", vec![attr::int("output_datatype", 6)]);
    assert_eq!(
        run(&n, 17, &[Some(&four)]).unwrap(),
        i32s(&[4], &[0, 0, 1, 0])
    );
    let e = run(&node("HannWindow", vec![]), 17, &[Some(&i64s(&[], &[-1]))]).unwrap_err();
    assert!(e.contains("'size' must not be negative"), "{e}");
    let n = node("HannWindow", vec![attr::int("output_datatype", 8)]);
    let e = super::super::resolve(&n, 17).err().unwrap().to_string();
    assert!(
        e.contains("'output_datatype' must be a numeric tensor type, got 8"),
        "{e}"
    );
}

#[test]
fn mel_weight_matrix() {
    // The spec's example: 8 bands over 16-point DFT bins at 8192 Hz, 0 to 4096 Hz.
    let ins = [
        i32s(&[], &[8]),
        i32s(&[], &[16]),
        i32s(&[], &[8192]),
        f32s(&[], &[0.]),
        f32s(&[], &[4096.]),
    ];
    let ins: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let y = run(&node("MelWeightMatrix", vec![]), 17, &ins).unwrap();
    let mut want = vec![0f32; 9 * 8];
    for (row, cols) in [
        (0, &[0, 1][..]),
        (1, &[2, 3]),
        (2, &[4]),
        (3, &[5]),
        (4, &[6]),
        (5, &[7]),
    ] {
        for &c in cols {
            want[row * 8 + c] = 1.;
        }
    }
    assert_eq!(y, f32s(&[9, 8], &want));
    // An upper edge far past the Nyquist frequency puts band edges past the last bin.
    let mut bad = ins.clone();
    let high = f32s(&[], &[16384.]);
    bad[4] = Some(&high);
    let e = run(&node("MelWeightMatrix", vec![]), 17, &bad).unwrap_err();
    assert!(e.contains("outside [0, 9)"), "{e}");
}
