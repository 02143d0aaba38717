//! ai.onnx `Attention` (scaled dot-product attention), and the per-head core it shares with
//! com.microsoft `MultiHeadAttention` and `GroupQueryAttention` (ms_attention.rs).
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Attention | 23- | `is_causal` (0), `kv_num_heads`, `q_num_heads` (3-D inputs only), `qk_matmul_output_mode` (0), `scale` (1/√head_size), `softcap` (0: none), `softmax_precision` (none); from 25 `left_window_size`, `right_window_size` (-1: unbounded) | Q, K, V, attn_mask?, past_key?, past_value?, nonpad_kv_seqlen? (from 24) -> Y, present_key?, present_value?, qk_matmul_output? |
//!
//! Q is [B, Hq, Sq, D] or [B, Sq, Hq·D] (3-D inputs split by `q_num_heads`/`kv_num_heads`), K
//! and V [B, Hkv, S, D] / [B, Hkv, S, Dv] or 3-D likewise; Hq must be a multiple of Hkv (query
//! head h reads key/value head h / (Hq / Hkv), grouped-query attention). past_key/past_value
//! (heads-first) are concatenated in front of K and V into present_key/present_value, of total
//! length L. Per (batch, query head): scores = (Q·√scale)·(K·√scale)ᵀ [Sq, L]; then softcap
//! (`c·tanh(s / c)`) when `softcap > 0`; then the additive bias; softmax over the keys; Y = P·V.
//! The bias is the mask (bool: true attends, false adds -inf; numeric: added; a last dim
//! shorter than L is padded with -inf; broadcast right-aligned to [B, Hq, Sq, L]) plus -inf
//! where a key is outside the causal frontier (`j <= i + offset`), the window (opset 25) or past
//! `nonpad_kv_seqlen[b]`. `offset` is past_key's length, else `nonpad_kv_seqlen[b] - Sq`, else 0.
//! A query row whose bias is -inf for every key outputs zeros (Y and mode-3 probabilities).
//! qk_matmul_output is the raw scores (mode 0), after softcap (1), after the bias (2) or the
//! probabilities (3). The softmax runs in the compute type (float32 for float16/bfloat16
//! inputs, float64 for float64) whatever `softmax_precision` names (1, 10, 11 or 16).
//! Version 24 adds nonpad_kv_seqlen; 25 adds the window attributes. Version 25 refuses
//! q_num_heads/kv_num_heads with 4-D inputs; 23 and 24 take them when they agree with the shapes.

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn, LinalgScalar};

use super::common::{check_out, input, opt_input, Float};
use super::matmul::{MatElem, Strided};
use super::reduce::softmax_row;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

mod kernel;
pub use kernel::*;

type P = Result<Box<dyn Op>, String>;

const OP: &str = "Attention";

// ---------------------------------------------------------------------------------------------
// The shared core

/// The element types attention computes in (float32 and float64).
pub(super) trait AttnFloat: Float + LinalgScalar + MatElem {
    const DTYPE: DType;
    fn from_f64(v: f64) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn view(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn wrap(a: ArrayD<Self>) -> Tensor;
}

macro_rules! attn_float {
    ($t:ty, $variant:ident) => {
        impl AttnFloat for $t {
            const DTYPE: DType = DType::$variant;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn view(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$variant(a)
            }
        }
    };
}
attn_float!(f32, F32);
attn_float!(f64, F64);

/// One attention problem's sizes. Buffers are heads-first: Q [B, Hq, Sq, Dk], K [B, Hkv, L, Dk],
/// V [B, Hkv, L, Dv], the output [B, Hq, Sq, Dv], scores [B, Hq, Sq, L].
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub dk: usize,
    pub dv: usize,
}

/// Which stage of the scores the caller wants back (ai.onnx `qk_matmul_output_mode` + 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Capture {
    None,
    /// Q·Kᵀ as computed (inputs already scaled).
    Raw,
    /// After the softcap.
    Capped,
    /// After the softcap and the bias.
    Biased,
    /// The probabilities (fully masked rows zero).
    Probs,
}

/// Adds the additive bias [Sq, L] of (batch, query head) into its scores (a score it hides may
/// be set to -inf instead). Called from several threads at once (`--threads`), each with its
/// own scores.
pub(super) type BiasFn<'a, T> = dyn Fn(usize, usize, &mut [T]) -> Result<(), String> + Sync + 'a;

/// Per (batch, query head): scores = Q·Kᵀ (the caller scales Q and K), softcap when
/// `softcap > 0`, plus the additive bias that `bias(b, h, scores)` adds ([Sq, L], row-major),
/// softmax over each row (a row that is -inf throughout, every key hidden, becomes zeros),
/// then the probabilities times V. Query head h reads key/value head h / (Hq / Hkv). Returns the
/// output [B, Hq, Sq, Dv] and the captured scores [B, Hq, Sq, L] (empty for `Capture::None`).
/// The caller has checked the sizes (`check_out`) and that Hkv divides Hq. Inside a pool of
/// several threads the (batch, head) pairs split between them (not while capturing scores);
/// every head is computed the same way wherever it runs.
pub(super) fn attend<T: AttnFloat>(
    d: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    softcap: T,
    capture: Capture,
    bias: &BiasFn<T>,
) -> Result<(Vec<T>, Vec<T>), String> {
    let (sq, l) = (d.q_len, d.kv_len);
    if d.kv_heads == 0 || !d.q_heads.is_multiple_of(d.kv_heads) {
        return Err(format!(
            "{} query heads are not a multiple of {} key/value heads",
            d.q_heads, d.kv_heads
        ));
    }
    let units = d.batch * d.q_heads;
    let mut y = vec![T::ZERO; units * sq * d.dv];
    // Heads `heads` into their rows `ys` of the output (and of the captured scores, if any).
    let run = |heads: std::ops::Range<usize>, ys: &mut [T], mut kept: Option<&mut [T]>| {
        let mut s = vec![T::ZERO; sq * l];
        for (i, bh) in heads.enumerate() {
            let yh = &mut ys[i * sq * d.dv..][..sq * d.dv];
            let kh = kept.as_deref_mut().map(|k| &mut k[i * sq * l..][..sq * l]);
            head(d, (q, k, v), softcap, (capture, kh), bias, bh, yh, &mut s)?;
        }
        Ok::<(), String>(())
    };
    if capture != Capture::None {
        let mut kept = vec![T::ZERO; units * sq * l];
        run(0..units, &mut y, Some(&mut kept))?;
        return Ok((y, kept));
    }
    let work = units * sq * l * (d.dk + d.dv);
    match crate::threads::split(units, work) {
        Some(parts) => {
            crate::threads::for_each_rows(&mut y, sq * d.dv, parts, |r, ys| run(r, ys, None))?
        }
        None => run(0..units, &mut y, None)?,
    }
    Ok((y, Vec::new()))
}

/// One (batch, query head) `bh` of [`attend`] into `y` ([Sq, Dv]), with the caller's scratch
/// `s` for the scores ([Sq, L]); `kept` receives the captured stage.
#[allow(clippy::too_many_arguments)]
fn head<T: AttnFloat>(
    d: &Dims,
    (q, k, v): (&[T], &[T], &[T]),
    softcap: T,
    (capture, mut kept): (Capture, Option<&mut [T]>),
    bias: &BiasFn<T>,
    bh: usize,
    y: &mut [T],
    s: &mut [T],
) -> Result<(), String> {
    let (sq, l) = (d.q_len, d.kv_len);
    let (b, h) = (bh / d.q_heads, bh % d.q_heads);
    let kvh = b * d.kv_heads + h / (d.q_heads / d.kv_heads);
    let (qs, ks, vs) = (
        &q[bh * sq * d.dk..][..sq * d.dk],
        &k[kvh * l * d.dk..][..l * d.dk],
        &v[kvh * l * d.dv..][..l * d.dv],
    );
    let mut keep = |stage: Capture, s: &[T]| {
        if let Some(kept) = kept.as_deref_mut().filter(|_| capture == stage) {
            kept.copy_from_slice(s);
        }
    };
    // Scores = Q·Kᵀ into the row-major scratch (Kᵀ is K read column-major), by the same GEMM
    // as MatMul (`MatElem::gemm_acc`: the packed kernel where the CPU has one).
    s.iter_mut().for_each(|x| *x = T::ZERO);
    if sq > 0 && d.dk > 0 {
        let kt = Strided {
            data: ks,
            rs: 1,
            cs: d.dk,
        };
        T::gemm_acc(1.0, [sq, d.dk, l], Strided::rows(qs, d.dk), kt, s, l);
    }
    keep(Capture::Raw, s);
    if softcap > T::ZERO {
        for x in s.iter_mut() {
            *x = softcap * (*x / softcap).tanh();
        }
    }
    keep(Capture::Capped, s);
    bias(b, h, s)?;
    keep(Capture::Biased, s);
    if l > 0 {
        // The widest vectors the CPU has (`simd`) for the softmax's exp.
        super::simd::widest(
            #[cfg_attr(target_arch = "x86_64", inline(always))]
            || {
                for row in s.chunks_exact_mut(l) {
                    // Stops at the first key not hidden: the first one, in a causal row.
                    if row.iter().all(|&x| x == T::NEG_INFINITY) {
                        row.iter_mut().for_each(|x| *x = T::ZERO);
                    } else {
                        softmax_row(row);
                    }
                }
            },
        );
    }
    keep(Capture::Probs, s);
    if sq > 0 && l > 0 && d.dv > 0 {
        let p = Strided::rows(s, l);
        T::gemm_acc(1.0, [sq, l, d.dv], p, Strided::rows(vs, d.dv), y, d.dv);
    }
    Ok(())
}

/// A [B, S, H·D] tensor's data as heads-first [B, H, S, D], each element times `mul`. Written in
/// order, never zeroed first.
pub(super) fn split_heads<T: AttnFloat>(
    x: &[T],
    b: usize,
    s: usize,
    heads: usize,
    d: usize,
    mul: T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for bi in 0..b {
        for h in 0..heads {
            for si in 0..s {
                let src = &x[((bi * s + si) * heads + h) * d..][..d];
                out.extend(src.iter().map(|&v| v * mul));
            }
        }
    }
    out
}

/// Heads-first [B, H, S, D] data back to [B, S, H·D] (written in order, never zeroed first).
pub(super) fn merge_heads<T: AttnFloat>(
    x: &[T],
    b: usize,
    heads: usize,
    s: usize,
    d: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for bi in 0..b {
        for si in 0..s {
            for h in 0..heads {
                out.extend_from_slice(&x[((bi * heads + h) * s + si) * d..][..d]);
            }
        }
    }
    out
}

/// Concatenates heads-first past [B, H, P, D] and new [B, H, S, D] along the sequence axis.
pub(super) fn concat_seq<T: AttnFloat>(
    past: &[T],
    new: &[T],
    bh: usize,
    p: usize,
    s: usize,
    d: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(bh * (p + s) * d);
    for i in 0..bh {
        out.extend_from_slice(&past[i * p * d..][..p * d]);
        out.extend_from_slice(&new[i * s * d..][..s * d]);
    }
    out
}

/// `shape`'s element count, or an error when it overflows.
pub(super) fn elems(op: &str, shape: &[usize]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("{op}: the size of {shape:?} overflows"))
}

pub(super) fn wrap<T: AttnFloat>(op: &str, shape: &[usize], v: Vec<T>) -> Result<Tensor, String> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(T::wrap)
        .map_err(|e| format!("{op}: {e}"))
}

/// A float input of the compute type `T`, in standard (row-major) order.
/// A tensor's elements in row-major order: borrowed where it is stored that way (no copy).
pub(super) fn data<'a, T: AttnFloat>(
    op: &str,
    t: &'a Tensor,
    what: &str,
) -> Result<Cow<'a, [T]>, String> {
    T::view(t)
        .map(|a| match a.as_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(a.iter().copied().collect()),
        })
        .ok_or_else(|| {
            format!(
                "{op}: {what} must be {} like the query, got {}",
                T::DTYPE,
                t.dtype()
            )
        })
}

// ---------------------------------------------------------------------------------------------
// ai.onnx Attention

#[derive(Debug)]
pub struct Attention {
    pub is_causal: bool,
    pub q_num_heads: Option<i64>,
    pub kv_num_heads: Option<i64>,
    /// 0 raw scores, 1 after softcap, 2 after the bias, 3 probabilities.
    pub qk_matmul_output_mode: i64,
    /// `None`: 1/√(Q's head size).
    pub scale: Option<f32>,
    /// 0 (or below): no softcap.
    pub softcap: f32,
    /// The softmax's element type (an ONNX data type number); the kernel computes in the
    /// compute type whatever it is, and refuses numbers other than 1, 10, 11 and 16.
    pub softmax_precision: Option<i64>,
    /// From 25; -1 unbounded.
    pub left_window_size: i64,
    pub right_window_size: i64,
}

impl Attention {
    pub fn parse(a: &Attrs) -> P {
        let windows = a.opset >= 25;
        Ok(Box::new(Attention {
            is_causal: a.flag("is_causal", false)?,
            q_num_heads: a.opt_int("q_num_heads")?,
            kv_num_heads: a.opt_int("kv_num_heads")?,
            qk_matmul_output_mode: a.int("qk_matmul_output_mode", 0)?,
            scale: a.opt_float("scale")?,
            softcap: a.float("softcap", 0.0)?,
            softmax_precision: a.opt_int("softmax_precision")?,
            left_window_size: if windows {
                a.int("left_window_size", -1)?
            } else {
                -1
            },
            right_window_size: if windows {
                a.int("right_window_size", -1)?
            } else {
                -1
            },
        }))
    }

    /// Q/K/V's shape read heads-first: [B, H, S, D] (4-D as is, 3-D split by `heads`).
    fn bnsh(shape: &[Dim], heads: Option<i64>) -> Option<[Dim; 4]> {
        match shape {
            [b, h, s, d] => Some([b.clone(), h.clone(), s.clone(), d.clone()]),
            [b, s, hd] => {
                let heads = heads.filter(|&n| n > 0)?;
                let d = match hd {
                    Dim::Known(w) if w % heads == 0 => Dim::Known(w / heads),
                    _ => Dim::Unknown,
                };
                Some([b.clone(), Dim::Known(heads), s.clone(), d])
            }
            _ => None,
        }
    }
}

impl Op for Attention {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let q = cx.input(0);
        let dtype = q.dtype;
        let (k, v) = (cx.input(1).shape, cx.input(2).shape);
        let q3 = q.shape.as_ref().map(|s| s.len() == 3);
        let qd = q
            .shape
            .as_deref()
            .and_then(|s| Self::bnsh(s, self.q_num_heads));
        let kd = k.as_deref().and_then(|s| Self::bnsh(s, self.kv_num_heads));
        let vd = v.as_deref().and_then(|s| Self::bnsh(s, self.kv_num_heads));
        // The total key length: the new keys' plus past_key's.
        let total = kd.as_ref().map(|kd| {
            if !cx.has_input(4) {
                return kd[2].clone();
            }
            match (&kd[2], cx.input(4).shape.as_deref()) {
                (Dim::Known(s), Some([_, _, Dim::Known(p), _])) => {
                    s.checked_add(*p).map_or(Dim::Unknown, Dim::Known)
                }
                _ => Dim::Unknown,
            }
        });
        let y = match (q3, &qd, &vd) {
            (Some(false), Some(qd), Some(vd)) => Some(vec![
                qd[0].clone(),
                qd[1].clone(),
                qd[2].clone(),
                vd[3].clone(),
            ]),
            (Some(true), Some(qd), Some(vd)) => {
                let w = match (&qd[1], &vd[3]) {
                    (Dim::Known(h), Dim::Known(dv)) => {
                        h.checked_mul(*dv).map_or(Dim::Unknown, Dim::Known)
                    }
                    _ => Dim::Unknown,
                };
                Some(vec![qd[0].clone(), qd[2].clone(), w])
            }
            (Some(true), _, _) => Some(vec![Dim::Unknown; 3]),
            (Some(false), _, _) => Some(vec![Dim::Unknown; 4]),
            _ => None,
        };
        let present = |x: &Option<[Dim; 4]>| {
            x.as_ref().map(|x| {
                vec![
                    x[0].clone(),
                    x[1].clone(),
                    total.clone().unwrap_or(Dim::Unknown),
                    x[3].clone(),
                ]
            })
        };
        let qk = qd.as_ref().map(|qd| {
            vec![
                qd[0].clone(),
                qd[1].clone(),
                qd[2].clone(),
                total.clone().unwrap_or(Dim::Unknown),
            ]
        });
        let t = |shape| TensorType { dtype, shape };
        cx.fit(vec![t(y), t(present(&kd)), t(present(&vd)), t(qk)])
    }
    fn kernel(&self) -> Kernel {
        attention
    }
}

#[cfg(test)]
#[path = "sdpa_tests.rs"]
mod tests;
