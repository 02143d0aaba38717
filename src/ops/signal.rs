//! Signal processing: the discrete Fourier transform, the short-time Fourier transform, the
//! three cosine-sum windows and the mel filter bank.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | DFT | 17, 20 | `inverse` (0), `onesided` (0); `axis` (1) attribute in 17, input from 20 (default -2) | input: T [..., 1 or 2], dft_length?: int32/int64 scalar, axis?: int64 scalar (from 20) -> output: T [..., 2] ([..., 1] for onesided inverse) |
//! | STFT | 17 | `onesided` (1) | signal: T [batch, length, 1 or 2], frame_step: int scalar, window?: T [frame_length], frame_length?: int scalar -> output: T [batch, frames, bins, 2] |
//! | HannWindow, HammingWindow, BlackmanWindow | 17 | `periodic` (1), `output_datatype` (1 = float) | size: int32/int64 scalar -> output [size] |
//! | MelWeightMatrix | 17 | `output_datatype` (1 = float) | num_mel_bins, dft_length, sample_rate: int scalars, lower_edge_hertz, upper_edge_hertz: float scalars -> output [dft_length / 2 + 1, num_mel_bins] |
//!
//! DFT: the last input dim holds a real value (1) or a real and an imaginary part (2); `axis`
//! (in [-r, -2] or [0, r - 2]) is the one transformed, every other dim a batch. The signal is
//! cut or zero-padded to `dft_length` (default: the axis' size) and transformed, `y[k] = Σ x[n]
//! e^(-2πi·kn/N)` (inverse: `1/N Σ y[k] e^(2πi·kn/N)`). Forward with `onesided` keeps bins
//! 0..=N/2. Inverse with `onesided` is the real inverse of a one-sided spectrum (numpy's irfft):
//! N defaults to 2·(size - 1), the first N/2 + 1 bins are used, extended by conjugate symmetry,
//! and the real output has last dim 1. Opset 20 moved `axis` from the attribute (default 1) to
//! input 2 (default -2); nothing else changed.
//!
//! STFT: frame f is `signal[b, f·step .. f·step + frame_length]` times the window (default all
//! ones), transformed as a DFT of frame_length; `frames = (length - frame_length) / step + 1`;
//! bins `frame_length / 2 + 1` with `onesided`, else frame_length. frame_length defaults to the
//! window's length, else the signal length; given both, they must agree.
//!
//! The windows are `a0 - a1·cos(x) + a2·cos(2x)`, `x = 2πn / N`, n in [0, size), N = size
//! (periodic) or size - 1 (symmetric): Hann (0.5, 0.5, 0), Hamming (25/46, 21/46, 0), Blackman
//! (0.42, 0.5, 0.08). A symmetric window of size 1 divides 0 by 0, as the spec's function body
//! does: NaN (0 in an integer type). MelWeightMatrix follows the spec's reference: (num_mel_bins
//! plus 2) band edges spaced evenly in mel (`2595·log10(1 + f/700)`) from the lower edge by
//! (high - low) / (num_mel_bins + 2), each mapped to spectrogram bin `floor((dft_length + 1)·f /
//! sample_rate)`; band i rises linearly from edge i to 1 at edge i + 1 and falls to edge i + 2
//! (a band whose rise is empty gets a 1 at its center). A band edge outside the spectrogram's
//! bins is an error. Computation is in float64; outputs are converted to the requested type
//! (floats round, integers truncate).
//!
//! The transform is a radix-2 FFT for power-of-two lengths and a direct sum over a twiddle
//! table otherwise (O(N²) per lane).

use std::f64::consts::PI;

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, opt_input, unsupported_type};
use super::lanes::elements;
use super::transformer::{required, same_type, shaped, Real};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::onnx::proto::data_type as dt;
use crate::tensor::{DType, Tensor};

mod windows;
pub use windows::*;

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

/// An integer scalar input (rank 0, or one element of rank 1), int32 or int64.
fn scalar_int(op: &str, what: &str, t: &Tensor) -> R<i64> {
    match (t.dtype(), t.shape().len(), t.to_i64_vec().as_deref()) {
        (DType::I32 | DType::I64, 0 | 1, Some(&[v])) => Ok(v),
        _ => Err(format!(
            "{op}: '{what}' must be an int32 or int64 scalar, got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )),
    }
}

/// A float scalar input.
fn scalar_float(op: &str, what: &str, t: &Tensor) -> R<f64> {
    match (t.dtype(), t.shape().len(), t.len()) {
        (DType::F32 | DType::F64, 0 | 1, 1) => Ok(t.to_f64_vec()[0]),
        _ => Err(format!(
            "{op}: '{what}' must be a float scalar, got {} of shape {:?}",
            t.dtype(),
            t.shape()
        )),
    }
}

/// A statically known scalar input's value.
fn const_scalar(cx: &InferCx, i: usize) -> Option<i64> {
    match cx.ints(i).as_deref() {
        Some(&[v]) => Some(v),
        _ => None,
    }
}

fn known(v: Option<usize>) -> Dim {
    v.map_or(Dim::Unknown, |v| Dim::Known(v as i64))
}

fn dim_value(d: &Dim) -> Option<usize> {
    match d {
        Dim::Known(v) => usize::try_from(*v).ok(),
        _ => None,
    }
}

/// A length from an int input: at least 1.
fn positive(op: &str, what: &str, v: i64) -> R<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v >= 1 && v <= i32::MAX as usize)
        .ok_or_else(|| format!("{op}: '{what}' must be in [1, 2^31 - 1], got {v}"))
}

/// The output type attribute `output_datatype` (default float), one of the numeric types.
fn output_datatype(a: &Attrs) -> R<DType> {
    let t = a.int("output_datatype", i64::from(dt::FLOAT))?;
    let d = i32::try_from(t).map(DType).ok().filter(|d| {
        matches!(
            d.0,
            dt::UINT8
                | dt::UINT16
                | dt::UINT32
                | dt::UINT64
                | dt::INT8
                | dt::INT16
                | dt::INT32
                | dt::INT64
                | dt::FLOAT16
                | dt::FLOAT
                | dt::DOUBLE
                | dt::BFLOAT16
        )
    });
    d.ok_or_else(|| format!("attribute 'output_datatype' must be a numeric tensor type, got {t}"))
}

/// `v` (float64) as a tensor of type `to`.
fn typed(op: &str, shape: &[usize], v: Vec<f64>, to: DType) -> R<Tensor> {
    let t = Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| format!("{op}: {e}"))?);
    t.cast(to).ok_or_else(|| unsupported_type(op, to))
}

// ---------------------------------------------------------------------------------------------
// The transform

/// A length-`n` transform's twiddle factors `e^(-2πi·j/n)`, j in [0, n).
struct Plan {
    n: usize,
    cos: Vec<f64>,
    sin: Vec<f64>,
}

impl Plan {
    fn new(n: usize) -> Plan {
        let (cos, sin) = (0..n)
            .map(|j| {
                let a = 2.0 * PI * j as f64 / n as f64;
                (a.cos(), a.sin())
            })
            .unzip();
        Plan { n, cos, sin }
    }

    /// The transform of (re, im) (length n) in place: forward `e^(-…)`, inverse `e^(+…)`
    /// without the 1/n.
    fn run(&self, re: &mut [f64], im: &mut [f64], inverse: bool, tmp: &mut Vec<f64>) {
        let n = self.n;
        let s = if inverse { 1.0 } else { -1.0 };
        if n <= 1 {
            return;
        }
        if n.is_power_of_two() {
            // Bit-reversal permutation, then butterflies of growing span.
            let bits = n.trailing_zeros();
            for i in 0..n {
                let j = i.reverse_bits() >> (usize::BITS - bits);
                if j > i {
                    re.swap(i, j);
                    im.swap(i, j);
                }
            }
            let mut len = 2;
            while len <= n {
                let step = n / len;
                for start in (0..n).step_by(len) {
                    for k in 0..len / 2 {
                        let (c, si) = (self.cos[k * step], s * self.sin[k * step]);
                        let (a, b) = (start + k, start + k + len / 2);
                        let (br, bi) = (re[b] * c - im[b] * si, re[b] * si + im[b] * c);
                        re[b] = re[a] - br;
                        im[b] = im[a] - bi;
                        re[a] += br;
                        im[a] += bi;
                    }
                }
                len *= 2;
            }
            return;
        }
        tmp.clear();
        tmp.resize(2 * n, 0.0);
        for k in 0..n {
            let (mut sr, mut si) = (0.0, 0.0);
            let mut j = 0usize;
            for t in 0..n {
                let (c, w) = (self.cos[j], s * self.sin[j]);
                sr += re[t] * c - im[t] * w;
                si += re[t] * w + im[t] * c;
                j += k;
                if j >= n {
                    j -= n;
                }
            }
            tmp[k] = sr;
            tmp[n + k] = si;
        }
        re.copy_from_slice(&tmp[..n]);
        im.copy_from_slice(&tmp[n..]);
    }
}

// ---------------------------------------------------------------------------------------------
// DFT

#[derive(Debug)]
pub struct DFT {
    pub inverse: bool,
    pub onesided: bool,
    /// The attribute (17-19); from 20 `None`: input 2, default -2.
    pub axis: Option<i64>,
}

impl DFT {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(DFT {
            inverse: a.flag("inverse", false)?,
            onesided: a.flag("onesided", false)?,
            axis: if a.opset < 20 {
                Some(a.int("axis", 1)?)
            } else {
                None
            },
        }))
    }

    fn irfft(&self) -> bool {
        self.inverse && self.onesided
    }
}

/// A DFT axis in [-r, -2] or [0, r - 2], as [0, r - 2].
fn dft_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r - 1).contains(&a).then_some(a as usize)
}

/// The transform length and output length along the axis for an axis of `n_in` elements.
fn dft_lengths(p: &DFT, n_in: usize, dft_length: Option<usize>) -> Option<(usize, usize)> {
    let n = match dft_length {
        Some(n) => n,
        None if p.irfft() => n_in.checked_sub(1)?.checked_mul(2)?,
        None => n_in,
    };
    let out = if p.onesided && !p.inverse {
        n / 2 + 1
    } else {
        n
    };
    Some((n, out))
}

impl Op for DFT {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().map(|s| {
            let r = s.len();
            let axis = match self.axis {
                Some(a) => Some(a),
                None if cx.has_input(2) => const_scalar(cx, 2),
                None => Some(-2),
            };
            let mut out: Vec<Dim> = match axis.and_then(|a| dft_axis(a, r)) {
                Some(axis) => {
                    let dft_length = if cx.has_input(1) {
                        const_scalar(cx, 1).and_then(|v| usize::try_from(v).ok())
                    } else {
                        None
                    };
                    let len = if cx.has_input(1) {
                        dft_length.and_then(|d| dft_lengths(self, 0, Some(d)))
                    } else {
                        dim_value(&s[axis]).and_then(|n| dft_lengths(self, n, None))
                    };
                    let len = len.map(|l| l.1);
                    let mut o = s.clone();
                    o[axis] = known(len);
                    o
                }
                None => vec![Dim::Unknown; r],
            };
            if let Some(last) = out.last_mut() {
                *last = Dim::Known(if self.irfft() { 1 } else { 2 });
            }
            out
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| match input("DFT", inputs, 0)?.dtype() {
            DType::F32 => dft::<f32>(ctx, inputs),
            DType::F64 => dft::<f64>(ctx, inputs),
            t => Err(unsupported_type("DFT", t)),
        }
    }
}

fn dft<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DFT";
    let p = ctx.attrs::<DFT>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let shape = x.shape();
    let r = shape.len();
    let c = *shape.last().unwrap_or(&0);
    if r < 2 || !(c == 1 || c == 2) {
        return Err(format!(
            "{OP}: input must have rank 2 or more and a last dim of 1 (real) or 2 (complex), got shape {shape:?}"
        ));
    }
    let axis = match p.axis {
        Some(a) => a,
        None => opt_input(inputs, 2)
            .map(|t| scalar_int(OP, "axis", t))
            .transpose()?
            .unwrap_or(-2),
    };
    let axis = dft_axis(axis, r).ok_or_else(|| {
        format!(
            "{OP}: axis {axis} is out of range for rank {r} (valid: [{}, -2] and [0, {}])",
            -(r as i64),
            r as i64 - 2
        )
    })?;
    let dft_length = opt_input(inputs, 1)
        .map(|t| scalar_int(OP, "dft_length", t).and_then(|v| positive(OP, "dft_length", v)))
        .transpose()?;
    let n_in = shape[axis];
    let (n, n_out) = dft_lengths(p, n_in, dft_length).ok_or_else(|| {
        format!("{OP}: an inverse one-sided DFT of an empty axis needs dft_length")
    })?;
    if n == 0 {
        return Err(format!(
            "{OP}: the transform length is 0 (axis {axis} of shape {shape:?} is empty)"
        ));
    }
    let c_out = if p.irfft() { 1 } else { 2 };
    let mut out_shape = shape.to_vec();
    out_shape[axis] = n_out;
    out_shape[r - 1] = c_out;
    check_out(ctx, OP, &out_shape, bits(T::DTYPE))?;
    let xv = elements(x);
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..r - 1].iter().product();
    let plan = Plan::new(n);
    let total: usize = out_shape.iter().product();
    let mut y = vec![T::ZERO; total];
    let (mut re, mut im, mut tmp) = (vec![0.0; n], vec![0.0; n], Vec::new());
    // IRFFT reads bins 0..=n/2; the others come from conjugate symmetry.
    let used = if p.irfft() { n / 2 + 1 } else { n };
    for o in 0..outer {
        for i in 0..inner {
            re.fill(0.0);
            im.fill(0.0);
            for k in 0..used.min(n_in) {
                let at = ((o * n_in + k) * inner + i) * c;
                re[k] = xv[at].to_f64();
                if c == 2 {
                    im[k] = xv[at + 1].to_f64();
                }
            }
            if p.irfft() {
                for k in 1..n.div_ceil(2) {
                    re[n - k] = re[k];
                    im[n - k] = -im[k];
                }
            }
            plan.run(&mut re, &mut im, p.inverse, &mut tmp);
            let scale = if p.inverse { 1.0 / n as f64 } else { 1.0 };
            for k in 0..n_out {
                let at = ((o * n_out + k) * inner + i) * c_out;
                y[at] = T::from_f64(re[k] * scale);
                if c_out == 2 {
                    y[at + 1] = T::from_f64(im[k] * scale);
                }
            }
        }
    }
    Ok(vec![shaped(OP, &out_shape, y)?])
}

// ---------------------------------------------------------------------------------------------
// STFT

#[derive(Debug)]
pub struct STFT {
    pub onesided: bool,
}

impl STFT {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(STFT {
            onesided: a.flag("onesided", true)?,
        }))
    }
}

impl Op for STFT {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let frame_length = if cx.has_input(3) {
            const_scalar(cx, 3).and_then(|v| usize::try_from(v).ok())
        } else if cx.has_input(2) {
            match cx.input(2).shape.as_deref() {
                Some([d]) => dim_value(d),
                _ => None,
            }
        } else {
            None
        };
        let shape = match x.shape.as_deref() {
            Some([b, len, _]) => {
                let frame_length = match (cx.has_input(3) || cx.has_input(2), frame_length) {
                    (false, _) => dim_value(len),
                    (true, f) => f,
                };
                let step = const_scalar(cx, 1).and_then(|v| usize::try_from(v).ok());
                let frames = match (dim_value(len), frame_length, step) {
                    (Some(l), Some(f), Some(s)) if s > 0 && f <= l => Some((l - f) / s + 1),
                    _ => None,
                };
                let bins = frame_length.map(|f| if self.onesided { f / 2 + 1 } else { f });
                Some(vec![b.clone(), known(frames), known(bins), Dim::Known(2)])
            }
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| match input("STFT", inputs, 0)?.dtype() {
            DType::F32 => stft::<f32>(ctx, inputs),
            DType::F64 => stft::<f64>(ctx, inputs),
            t => Err(unsupported_type("STFT", t)),
        }
    }
}

fn stft<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "STFT";
    let p = ctx.attrs::<STFT>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let &[batch, len, c] = x.shape() else {
        return Err(format!(
            "{OP}: signal must be [batch, length, 1 or 2], got shape {:?}",
            x.shape()
        ));
    };
    if !(c == 1 || c == 2) {
        return Err(format!(
            "{OP}: signal's last dim must be 1 (real) or 2 (complex), got {c}"
        ));
    }
    let step = positive(
        OP,
        "frame_step",
        scalar_int(OP, "frame_step", input(OP, inputs, 1)?)?,
    )?;
    let window = same_type::<T>(OP, inputs, 2)?;
    let window_len = match window.map(|w| w.shape()) {
        None => None,
        Some(&[n]) => Some(n),
        Some(s) => return Err(format!("{OP}: window must be 1-D, got shape {s:?}")),
    };
    let frame_length = match opt_input(inputs, 3) {
        Some(t) => Some(positive(
            OP,
            "frame_length",
            scalar_int(OP, "frame_length", t)?,
        )?),
        None => None,
    };
    let fl = match (frame_length, window_len) {
        (Some(f), Some(w)) if f != w => {
            return Err(format!(
                "{OP}: frame_length {f} differs from the window's length {w}"
            ))
        }
        (Some(f), _) => f,
        (None, Some(w)) => w,
        (None, None) => len,
    };
    if fl == 0 || fl > len {
        return Err(format!(
            "{OP}: frame length {fl} must be in [1, signal length {len}]"
        ));
    }
    let frames = (len - fl) / step + 1;
    let bins = if p.onesided { fl / 2 + 1 } else { fl };
    let out_shape = [batch, frames, bins, 2];
    check_out(ctx, OP, &out_shape, bits(T::DTYPE))?;
    let xv = elements(x);
    let wv: Vec<f64> = match window {
        Some(w) => elements(w).iter().map(|v| v.to_f64()).collect(),
        None => vec![1.0; fl],
    };
    let plan = Plan::new(fl);
    let mut y = Vec::with_capacity(batch * frames * bins * 2);
    let (mut re, mut im, mut tmp) = (vec![0.0; fl], vec![0.0; fl], Vec::new());
    for b in 0..batch {
        for f in 0..frames {
            for t in 0..fl {
                let at = (b * len + f * step + t) * c;
                re[t] = xv[at].to_f64() * wv[t];
                im[t] = if c == 2 {
                    xv[at + 1].to_f64() * wv[t]
                } else {
                    0.0
                };
            }
            plan.run(&mut re, &mut im, false, &mut tmp);
            for k in 0..bins {
                y.push(T::from_f64(re[k]));
                y.push(T::from_f64(im[k]));
            }
        }
    }
    Ok(vec![shaped(OP, &out_shape, y)?])
}

#[cfg(test)]
#[path = "signal_tests.rs"]
mod tests;
