//! The window functions (Hann, Hamming, Blackman: one cosine-sum window) and MelWeightMatrix.

#[allow(unused_imports)]
use super::*;

// ---------------------------------------------------------------------------------------------
// Windows

/// A cosine-sum window's attributes and coefficients `a0 - a1·cos(x) + a2·cos(2x)`.
#[derive(Debug)]
pub struct CosineWindow {
    pub periodic: bool,
    pub dtype: DType,
    pub coef: [f64; 3],
    pub name: &'static str,
}

impl CosineWindow {
    fn parse(a: &Attrs, name: &'static str, coef: [f64; 3]) -> R<CosineWindow> {
        Ok(CosineWindow {
            periodic: a.flag("periodic", true)?,
            dtype: output_datatype(a)?,
            coef,
            name,
        })
    }

    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let size = const_scalar(cx, 0).and_then(|v| usize::try_from(v).ok());
        vec![TensorType {
            dtype: Some(self.dtype),
            shape: Some(vec![known(size)]),
        }]
    }

    fn run(&self, ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
        let op = self.name;
        let size = scalar_int(op, "size", input(op, inputs, 0)?)?;
        let size = usize::try_from(size)
            .map_err(|_| format!("{op}: 'size' must not be negative, got {size}"))?;
        check_out(ctx, op, &[size], bits(self.dtype))?;
        let n = if self.periodic {
            size as f64
        } else {
            size as f64 - 1.0
        };
        let [a0, a1, a2] = self.coef;
        let v = (0..size)
            .map(|i| {
                let x = 2.0 * PI * i as f64 / n;
                a0 - a1 * x.cos() + a2 * (2.0 * x).cos()
            })
            .collect();
        Ok(vec![typed(op, &[size], v, self.dtype)?])
    }
}

macro_rules! window_op {
    ($name:ident, $coef:expr) => {
        #[derive(Debug)]
        pub struct $name(pub CosineWindow);

        impl $name {
            pub fn parse(a: &Attrs) -> P {
                Ok(Box::new($name(CosineWindow::parse(
                    a,
                    stringify!($name),
                    $coef,
                )?)))
            }
        }

        impl Op for $name {
            fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
                self.0.infer(cx)
            }
            fn kernel(&self) -> Kernel {
                |ctx, inputs| ctx.attrs::<$name>()?.0.run(ctx, inputs)
            }
        }
    };
}

window_op!(HannWindow, [0.5, 0.5, 0.0]);
window_op!(HammingWindow, [25.0 / 46.0, 21.0 / 46.0, 0.0]);
window_op!(BlackmanWindow, [0.42, 0.5, 0.08]);

// ---------------------------------------------------------------------------------------------
// MelWeightMatrix

#[derive(Debug)]
pub struct MelWeightMatrix {
    pub dtype: DType,
}

impl MelWeightMatrix {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(MelWeightMatrix {
            dtype: output_datatype(a)?,
        }))
    }
}

impl Op for MelWeightMatrix {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let bins = const_scalar(cx, 0).and_then(|v| usize::try_from(v).ok());
        let rows = const_scalar(cx, 1)
            .and_then(|v| usize::try_from(v).ok())
            .map(|n| n / 2 + 1);
        vec![TensorType {
            dtype: Some(self.dtype),
            shape: Some(vec![known(rows), known(bins)]),
        }]
    }
    fn kernel(&self) -> Kernel {
        mel_weight_matrix
    }
}

pub(super) fn mel_weight_matrix(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MelWeightMatrix";
    let p = ctx.attrs::<MelWeightMatrix>()?;
    let int = |i: usize, what: &str| scalar_int(OP, what, input(OP, inputs, i)?);
    let float = |i: usize, what: &str| scalar_float(OP, what, input(OP, inputs, i)?);
    let mels = int(0, "num_mel_bins")?;
    let mels = usize::try_from(mels)
        .ok()
        .filter(|&m| m <= i32::MAX as usize)
        .ok_or_else(|| format!("{OP}: 'num_mel_bins' must not be negative, got {mels}"))?;
    let dft_length = positive(OP, "dft_length", int(1, "dft_length")?)?;
    let rate = positive(OP, "sample_rate", int(2, "sample_rate")?)?;
    let (low, high) = (float(3, "lower_edge_hertz")?, float(4, "upper_edge_hertz")?);
    let rows = dft_length / 2 + 1;
    check_out(ctx, OP, &[rows, mels], bits(p.dtype))?;
    let mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / 10f64.ln();
    let (low_mel, high_mel) = (mel(low), mel(high));
    let step = (high_mel - low_mel) / (mels + 2) as f64;
    let edges: Vec<f64> = (0..mels + 2)
        .map(|i| {
            let m = i as f64 * step + low_mel;
            let f = 700.0 * (m / 2595.0 * 10f64.ln()).exp_m1();
            ((dft_length + 1) as f64 * f / rate as f64).floor()
        })
        .collect();
    let mut out = vec![0.0; rows * mels];
    let row = |e: f64| -> R<usize> {
        if e >= 0.0 && e < rows as f64 {
            Ok(e as usize)
        } else {
            Err(format!(
                "{OP}: a band edge falls on spectrogram bin {e}, outside [0, {rows}): the edges [{low}, {high}] Hz do not fit sample_rate {rate} and dft_length {dft_length}"
            ))
        }
    };
    for i in 0..mels {
        let (l, c, h) = (edges[i], edges[i + 1], edges[i + 2]);
        if c == l {
            out[row(c)? * mels + i] = 1.0;
        } else if l < c {
            for j in row(l)?..=row(c)? {
                out[j * mels + i] = (j as f64 - l) / (c - l);
            }
        }
        if h > c {
            // The fall ends before bin h, which may be one past the last row.
            let end = row(h - 1.0)?;
            for j in row(c)?..=end {
                out[j * mels + i] = (h - j as f64) / (h - c);
            }
        }
    }
    Ok(vec![typed(OP, &[rows, mels], out, p.dtype)?])
}
