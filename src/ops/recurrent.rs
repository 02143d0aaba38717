//! The recurrent layers: RNN, GRU and LSTM, each one cell run over a sequence, forward, in
//! reverse or both ways.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | RNN | 7, 14, 22 | `hidden_size` (R's last dim), `direction` ("forward"), `activations` (["Tanh"] per direction), `activation_alpha`, `activation_beta`, `clip` (none), `layout` (0, from 14) | X: T, W: T, R: T, B?: T, sequence_lens?: int32, initial_h?: T -> Y?: T, Y_h?: T |
//! | GRU | 7, 14, 22 | as RNN, `activations` (["Sigmoid", "Tanh"] per direction), `linear_before_reset` (0) | X, W, R, B?, sequence_lens?, initial_h? -> Y?, Y_h? |
//! | LSTM | 7, 14, 22 | as RNN, `activations` (["Sigmoid", "Tanh", "Tanh"] per direction), `input_forget` (0) | X, W, R, B?, sequence_lens?, initial_h?, initial_c?: T, P?: T -> Y?, Y_h?, Y_c?: T |
//!
//! Shapes (H = hidden_size, D = 2 for "bidirectional", else 1; G = 1 RNN, 3 GRU, 4 LSTM): X
//! [seq, batch, input], W [D, G·H, input], R [D, G·H, H], B [D, 2·G·H] (W's biases, then R's),
//! sequence_lens [batch], initial_h/initial_c [D, batch, H], P [D, 3·H]; Y [seq, D, batch, H],
//! Y_h/Y_c [D, batch, H]. With `layout = 1` (from 14) X is [batch, seq, input], initial_h/c and
//! Y_h/c are [batch, D, H] and Y is [batch, seq, D, H]. Gate order in W, R and B: GRU z, r, h;
//! LSTM i, o, f, c; P holds LSTM's peepholes i, o, f.
//!
//! Per step t, with `x·W` meaning `x · Wᵀ` and every bias both of its W and R parts:
//! RNN `H = f(x·W + H·R + b)`. GRU `z = f(x·Wz + H·Rz + bz)`, `r = f(x·Wr + H·Rr + br)`,
//! `h = g(x·Wh + (r ⊙ H)·Rh + bh)` (`linear_before_reset = 1`: `g(x·Wh + Wbh + r ⊙ (H·Rh +
//! Rbh))`), `H = (1 - z) ⊙ h + z ⊙ H`. LSTM `i = f(x·Wi + H·Ri + Pi ⊙ C + bi)`, `f = f(x·Wf +
//! H·Rf + Pf ⊙ C + bf)` (`input_forget = 1`: `1 - i`), `c = g(x·Wc + H·Rc + bc)`, `C = f ⊙ C +
//! i ⊙ c`, `o = f(x·Wo + H·Ro + Po ⊙ C + bo)` (the new C), `H = o ⊙ h(C)`.
//!
//! Activations (names case-insensitive, as onnxruntime reads them): Relu, Tanh, Sigmoid,
//! Affine (`alpha·x + beta`), LeakyRelu, ThresholdedRelu, ScaledTanh (`alpha·tanh(beta·x)`),
//! HardSigmoid, Elu, Softsign, Softplus. The list names f (g, h) for the forward direction,
//! then again for the reverse one; a list of one direction's length serves both. Alphas and
//! betas are taken in order by the activations that use one (as onnxruntime reads the lists),
//! defaulting to the ONNX op's default (LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid 0.2 and
//! 0.5, Elu 1, Affine 1 and 0, ScaledTanh 1 and 1). `clip` bounds every activation's input to
//! [-clip, clip] (the gates'; not LSTM's `h(C)`).
//!
//! `sequence_lens[b]` (in [0, seq]) is batch entry b's length: the reverse direction starts
//! from its step `len - 1`; Y past it is zero, and Y_h/Y_c hold the state at its last step
//! (zero for a length 0). Versions 7, 14 (`layout`) and 22 (bfloat16) are the ones from 7 on;
//! the old `output_sequence` attribute (before 7) is not read. Element types float32 and
//! float64 (float16 widened by the executor); gate products are one matrix product per
//! direction for the whole input sequence, then one per step for the recurrence, in float32
//! through `matmul::sgemm` (float64 through ndarray), activations in float64.

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayD, ArrayView2, ArrayViewMut2, IxDyn};

use super::common::{check_out, input, opt_input, unsupported_type};
use super::lanes::elements;
use super::matmul::sgemm;
use super::transformer::{placeholder, required, same_type, shaped, wanted, Real};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

mod kernel;
use kernel::*;

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

// ---------------------------------------------------------------------------------------------
// Attributes

/// One activation function with its alpha and beta.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f32, f32),
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
}

impl Act {
    /// The activation called `name` (case-insensitive), taking its alpha and beta (when it has
    /// them) from the front of `alphas` and `betas`.
    fn parse(
        name: &str,
        alphas: &mut impl Iterator<Item = f32>,
        betas: &mut impl Iterator<Item = f32>,
    ) -> R<Act> {
        let mut a = |default: f32| alphas.next().unwrap_or(default);
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(a(1.0), betas.next().unwrap_or(0.0)),
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => Act::ScaledTanh(a(1.0), betas.next().unwrap_or(1.0)),
            "hardsigmoid" => Act::HardSigmoid(a(0.2), betas.next().unwrap_or(0.5)),
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            _ => {
                return Err(format!(
                    "attribute 'activations': unknown activation '{name}'"
                ))
            }
        })
    }

    #[inline]
    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => {
                if x >= 0.0 {
                    1.0 / (1.0 + (-x).exp())
                } else {
                    let e = x.exp();
                    e / (1.0 + e)
                }
            }
            Act::Affine(a, b) => a as f64 * x + b as f64,
            Act::LeakyRelu(a) => {
                if x < 0.0 {
                    a as f64 * x
                } else {
                    x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a as f64 {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a as f64 * (b as f64 * x).tanh(),
            Act::HardSigmoid(a, b) => (a as f64 * x + b as f64).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x < 0.0 {
                    a as f64 * x.exp_m1()
                } else {
                    x
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => {
                // log(1 + e^x) without overflow for large x.
                if x > 0.0 {
                    x + (-x).exp().ln_1p()
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }

    /// Whether direction slot `d` runs the sequence backwards.
    fn reversed(self, d: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && d == 1)
    }
}

/// The attributes RNN, GRU and LSTM share.
#[derive(Debug)]
pub struct RnnAttrs {
    /// `None`: R's last dim.
    pub hidden_size: Option<usize>,
    pub direction: Direction,
    /// Per direction slot, the activations f (g, h).
    pub acts: Vec<Vec<Act>>,
    pub clip: Option<f64>,
    /// `layout = 1` (from 14): batch-major X, Y, initial and final states.
    pub batch_major: bool,
}

impl RnnAttrs {
    fn parse(a: &Attrs, defaults: &[&str]) -> R<RnnAttrs> {
        let hidden_size = match a.opt_int("hidden_size")? {
            None => None,
            Some(h) if (1..=i64::from(i32::MAX)).contains(&h) => Some(h as usize),
            Some(h) => return Err(format!("attribute 'hidden_size' must be positive, got {h}")),
        };
        let direction = match a.string("direction")?.as_deref() {
            None | Some("forward") => Direction::Forward,
            Some("reverse") => Direction::Reverse,
            Some("bidirectional") => Direction::Bidirectional,
            Some(d) => {
                return Err(format!(
                    "attribute 'direction' must be forward, reverse or bidirectional, got '{d}'"
                ))
            }
        };
        let per = defaults.len();
        let nd = direction.count();
        let names: Vec<String> = match a.strings("activations")? {
            None => defaults.iter().map(|s| s.to_string()).collect(),
            Some(v) => v,
        };
        // One direction's list serves both; a two-direction list for one direction (RNN's
        // spec default ["Tanh", "Tanh"]) uses its first half.
        let names: Vec<&str> = match names.len() {
            n if n == per * nd => names.iter().map(String::as_str).collect(),
            n if n == per => names
                .iter()
                .chain(&names)
                .take(per * nd)
                .map(String::as_str)
                .collect(),
            n if n == 2 * per && nd == 1 => names[..per].iter().map(String::as_str).collect(),
            n => {
                return Err(format!(
                    "attribute 'activations' has {n} entries, expected {per} per direction ({})",
                    per * nd
                ))
            }
        };
        let mut alphas = a
            .floats("activation_alpha")?
            .unwrap_or_default()
            .into_iter();
        let mut betas = a.floats("activation_beta")?.unwrap_or_default().into_iter();
        let acts = names
            .iter()
            .map(|n| Act::parse(n, &mut alphas, &mut betas))
            .collect::<R<Vec<Act>>>()?;
        let acts = acts.chunks(per).map(<[Act]>::to_vec).collect();
        let clip = match a.opt_float("clip")? {
            None => None,
            Some(c) if c > 0.0 => Some(c as f64),
            Some(c) => return Err(format!("attribute 'clip' must be positive, got {c}")),
        };
        let batch_major = match a.opset >= 14 {
            true => match a.int("layout", 0)? {
                0 => false,
                1 => true,
                l => return Err(format!("attribute 'layout' must be 0 or 1, got {l}")),
            },
            false => false,
        };
        Ok(RnnAttrs {
            hidden_size,
            direction,
            acts,
            clip,
            batch_major,
        })
    }

    /// Output types: Y, Y_h (and Y_c for LSTM), shaped from X, R and the attributes.
    fn infer(&self, cx: &InferCx, outputs: usize) -> Vec<TensorType> {
        let x = cx.input(0);
        let hidden = match self.hidden_size {
            Some(h) => Dim::Known(h as i64),
            None => match cx.input(2).shape.as_deref() {
                Some([_, _, h]) => h.clone(),
                _ => Dim::Unknown,
            },
        };
        let nd = Dim::Known(self.direction.count() as i64);
        let (y, state) = match x.shape.as_deref() {
            Some([a, b, _]) => {
                let (seq, batch) = if self.batch_major { (b, a) } else { (a, b) };
                let (seq, batch) = (seq.clone(), batch.clone());
                if self.batch_major {
                    (
                        Some(vec![batch.clone(), seq, nd.clone(), hidden.clone()]),
                        Some(vec![batch, nd, hidden]),
                    )
                } else {
                    (
                        Some(vec![seq, nd.clone(), batch.clone(), hidden.clone()]),
                        Some(vec![nd, batch, hidden]),
                    )
                }
            }
            _ => (None, None),
        };
        let mut out = vec![TensorType {
            dtype: x.dtype,
            shape: y,
        }];
        for _ in 1..outputs {
            out.push(TensorType {
                dtype: x.dtype,
                shape: state.clone(),
            });
        }
        cx.fit(out)
    }
}

/// What differs between the three cells.
#[derive(Clone, Copy, Debug)]
enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru { .. } => "GRU",
            Cell::Lstm { .. } => "LSTM",
        }
    }

    /// Gates per hidden unit (G).
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    fn outputs(self) -> usize {
        if matches!(self, Cell::Lstm { .. }) {
            3
        } else {
            2
        }
    }
}

#[derive(Debug)]
pub struct RNN(pub RnnAttrs);

#[derive(Debug)]
pub struct GRU {
    pub rnn: RnnAttrs,
    pub linear_before_reset: bool,
}

#[derive(Debug)]
pub struct LSTM {
    pub rnn: RnnAttrs,
    pub input_forget: bool,
}

impl RNN {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(RNN(RnnAttrs::parse(a, &["Tanh"])?)))
    }
}

impl GRU {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(GRU {
            rnn: RnnAttrs::parse(a, &["Sigmoid", "Tanh"])?,
            linear_before_reset: a.flag("linear_before_reset", false)?,
        }))
    }
}

impl LSTM {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(LSTM {
            rnn: RnnAttrs::parse(a, &["Sigmoid", "Tanh", "Tanh"])?,
            input_forget: a.flag("input_forget", false)?,
        }))
    }
}

impl Op for RNN {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.0.infer(cx, 2)
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| recurrent(ctx, inputs, &ctx.attrs::<RNN>()?.0, Cell::Rnn)
    }
}

impl Op for GRU {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.rnn.infer(cx, 2)
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let p = ctx.attrs::<GRU>()?;
            let cell = Cell::Gru {
                linear_before_reset: p.linear_before_reset,
            };
            recurrent(ctx, inputs, &p.rnn, cell)
        }
    }
}

impl Op for LSTM {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        self.rnn.infer(cx, 3)
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let p = ctx.attrs::<LSTM>()?;
            let cell = Cell::Lstm {
                input_forget: p.input_forget,
            };
            recurrent(ctx, inputs, &p.rnn, cell)
        }
    }
}

#[cfg(test)]
#[path = "recurrent_tests.rs"]
mod tests;
