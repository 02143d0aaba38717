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

use ndarray::{ArrayD, ArrayView2, IxDyn, LinalgScalar};

use super::common::{check_out, input, opt_input, Float};
use super::reduce::softmax_row;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

const OP: &str = "Attention";

// ---------------------------------------------------------------------------------------------
// The shared core

/// The element types attention computes in (float32 and float64).
pub(super) trait AttnFloat: Float + LinalgScalar {
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

/// Fills the additive bias [Sq, L] of (batch, query head).
pub(super) type BiasFn<'a, T> = dyn FnMut(usize, usize, &mut [T]) -> Result<(), String> + 'a;

/// Per (batch, query head): scores = Q·Kᵀ (the caller scales Q and K), softcap when
/// `softcap > 0`, plus the additive bias `bias(b, h, buf)` fills ([Sq, L], row-major, zeroed
/// before the call), softmax over each row (a row whose bias is -inf throughout becomes zeros),
/// then the probabilities times V. Query head h reads key/value head h / (Hq / Hkv). Returns the
/// output [B, Hq, Sq, Dv] and the captured scores [B, Hq, Sq, L] (empty for `Capture::None`).
/// The caller has checked the sizes (`check_out`) and that Hkv divides Hq.
pub(super) fn attend<T: AttnFloat>(
    d: &Dims,
    q: &[T],
    k: &[T],
    v: &[T],
    softcap: T,
    capture: Capture,
    bias: &mut BiasFn<T>,
) -> Result<(Vec<T>, Vec<T>), String> {
    let (sq, l) = (d.q_len, d.kv_len);
    if d.kv_heads == 0 || !d.q_heads.is_multiple_of(d.kv_heads) {
        return Err(format!(
            "{} query heads are not a multiple of {} key/value heads",
            d.q_heads, d.kv_heads
        ));
    }
    let group = d.q_heads / d.kv_heads;
    let shape_err = |e: ndarray::ShapeError| format!("attention buffers: {e}");
    let mut y = vec![T::ZERO; d.batch * d.q_heads * sq * d.dv];
    let mut kept = if capture == Capture::None {
        Vec::new()
    } else {
        vec![T::ZERO; d.batch * d.q_heads * sq * l]
    };
    let mut buf = vec![T::ZERO; sq * l];
    let capped = softcap > T::ZERO;
    for b in 0..d.batch {
        for h in 0..d.q_heads {
            let bh = b * d.q_heads + h;
            let kvh = b * d.kv_heads + h / group;
            let qv = ArrayView2::from_shape((sq, d.dk), &q[bh * sq * d.dk..][..sq * d.dk])
                .map_err(shape_err)?;
            let kv = ArrayView2::from_shape((l, d.dk), &k[kvh * l * d.dk..][..l * d.dk])
                .map_err(shape_err)?;
            let vv = ArrayView2::from_shape((l, d.dv), &v[kvh * l * d.dv..][..l * d.dv])
                .map_err(shape_err)?;
            // Row-major whatever layout the product picked (it may be column-major).
            let mut scores = qv.dot(&kv.t()).as_standard_layout().into_owned();
            let keep = |stage: Capture, kept: &mut Vec<T>, s: &[T]| {
                if capture == stage {
                    kept[bh * sq * l..][..sq * l].copy_from_slice(s);
                }
            };
            let s = scores
                .as_slice_mut()
                .ok_or("attention scores are row-major")?;
            keep(Capture::Raw, &mut kept, s);
            if capped {
                for x in s.iter_mut() {
                    *x = softcap * (*x / softcap).tanh();
                }
            }
            keep(Capture::Capped, &mut kept, s);
            buf.iter_mut().for_each(|x| *x = T::ZERO);
            bias(b, h, &mut buf)?;
            s.iter_mut().zip(&buf).for_each(|(x, &m)| *x = *x + m);
            keep(Capture::Biased, &mut kept, s);
            if l > 0 {
                for (row, brow) in s.chunks_exact_mut(l).zip(buf.chunks_exact(l)) {
                    if brow.iter().all(|&m| m == T::NEG_INFINITY) {
                        row.iter_mut().for_each(|x| *x = T::ZERO);
                    } else {
                        softmax_row(row);
                    }
                }
            }
            keep(Capture::Probs, &mut kept, s);
            let out = scores.dot(&vv).as_standard_layout().into_owned();
            y[bh * sq * d.dv..][..sq * d.dv]
                .copy_from_slice(out.as_slice().ok_or("attention output is row-major")?);
        }
    }
    Ok((y, kept))
}

/// A [B, S, H·D] tensor's data as heads-first [B, H, S, D], each element times `mul`.
pub(super) fn split_heads<T: AttnFloat>(
    x: &[T],
    b: usize,
    s: usize,
    heads: usize,
    d: usize,
    mul: T,
) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    for bi in 0..b {
        for si in 0..s {
            for h in 0..heads {
                let src = &x[((bi * s + si) * heads + h) * d..][..d];
                let dst = &mut out[((bi * heads + h) * s + si) * d..][..d];
                dst.iter_mut().zip(src).for_each(|(o, &v)| *o = v * mul);
            }
        }
    }
    out
}

/// Heads-first [B, H, S, D] data back to [B, S, H·D].
pub(super) fn merge_heads<T: AttnFloat>(
    x: &[T],
    b: usize,
    heads: usize,
    s: usize,
    d: usize,
) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    for bi in 0..b {
        for h in 0..heads {
            for si in 0..s {
                let src = &x[((bi * heads + h) * s + si) * d..][..d];
                out[((bi * s + si) * heads + h) * d..][..d].copy_from_slice(src);
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
pub(super) fn data<T: AttnFloat>(op: &str, t: &Tensor, what: &str) -> Result<Vec<T>, String> {
    T::view(t)
        .map(|a| a.iter().copied().collect())
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
                (Dim::Known(s), Some([_, _, Dim::Known(p), _])) => Dim::Known(s + p),
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
                    (Dim::Known(h), Dim::Known(dv)) => Dim::Known(h * dv),
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

pub fn attention(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    match input(OP, inputs, 0)? {
        Tensor::F32(_) => attention_typed::<f32>(ctx, inputs),
        Tensor::F64(_) => attention_typed::<f64>(ctx, inputs),
        t => Err(format!("{OP}: Q must be a float tensor, got {}", t.dtype())),
    }
}

/// A Q/K/V tensor's sizes heads-first [B, H, S, D], for 3-D inputs split by the `heads`
/// attribute (named `attr`).
fn heads_first(
    t: &Tensor,
    what: &str,
    heads: Option<i64>,
    attr: &str,
    v25: bool,
) -> Result<[usize; 4], String> {
    match *t.shape() {
        [b, h, s, d] => {
            if let Some(n) = heads {
                if v25 {
                    return Err(format!(
                        "{OP}: {attr} must not be set with 4-D inputs (opset 25)"
                    ));
                }
                if n != h as i64 {
                    return Err(format!(
                        "{OP}: {attr} {n} disagrees with {what}'s {h} heads"
                    ));
                }
            }
            Ok([b, h, s, d])
        }
        [b, s, w] => {
            let n = heads.ok_or_else(|| format!("{OP}: 3-D inputs need the {attr} attribute"))?;
            if n <= 0 || w as i64 % n != 0 {
                return Err(format!(
                    "{OP}: {attr} {n} must be positive and divide {what}'s hidden size {w}"
                ));
            }
            let n = n as usize;
            Ok([b, n, s, w / n])
        }
        ref s => Err(format!("{OP}: {what} must be 3-D or 4-D, got {s:?}")),
    }
}

fn attention_typed<T: AttnFloat>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let a = ctx.attrs::<Attention>()?;
    let v25 = ctx.opset >= 25;
    let (qt, kt, vt) = (
        input(OP, inputs, 0)?,
        input(OP, inputs, 1)?,
        input(OP, inputs, 2)?,
    );
    let rank = qt.shape().len();
    if kt.shape().len() != rank || vt.shape().len() != rank {
        return Err(format!(
            "{OP}: Q, K and V must have the same rank, got {:?}, {:?} and {:?}",
            qt.shape(),
            kt.shape(),
            vt.shape()
        ));
    }
    let [b, hq, sq, dk] = heads_first(qt, "Q", a.q_num_heads, "q_num_heads", v25)?;
    let [kb, hkv, skv, kdk] = heads_first(kt, "K", a.kv_num_heads, "kv_num_heads", v25)?;
    let [vb, vh, vs, dv] = heads_first(vt, "V", a.kv_num_heads, "kv_num_heads", v25)?;
    if kb != b || vb != b || vh != hkv || vs != skv || kdk != dk {
        return Err(format!(
            "{OP}: K {:?} and V {:?} do not match Q {:?} (batch, key/value heads, key length, \
             head size)",
            kt.shape(),
            vt.shape(),
            qt.shape()
        ));
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        return Err(format!(
            "{OP}: Q's {hq} heads must be a multiple of K/V's {hkv} heads"
        ));
    }
    if !(0..=3).contains(&a.qk_matmul_output_mode) {
        return Err(format!(
            "{OP}: qk_matmul_output_mode must be 0, 1, 2 or 3, got {}",
            a.qk_matmul_output_mode
        ));
    }
    if let Some(p) = a.softmax_precision {
        if ![1, 10, 11, 16].contains(&p) {
            return Err(format!(
                "{OP}: softmax_precision must be 1, 10, 11 or 16, got {p}"
            ));
        }
    }
    for (w, name) in [
        (a.left_window_size, "left_window_size"),
        (a.right_window_size, "right_window_size"),
    ] {
        if w < -1 {
            return Err(format!("{OP}: {name} must be -1 or nonnegative, got {w}"));
        }
    }

    // The caches.
    let (pk, pv) = (opt_input(inputs, 4), opt_input(inputs, 5));
    let past = match (pk, pv) {
        (None, None) => None,
        (Some(pk), Some(pv)) => {
            let p = match (pk.shape(), pv.shape()) {
                (&[b1, h1, p1, d1], &[b2, h2, p2, d2])
                    if [b1, h1, d1] == [b, hkv, dk] && [b2, h2, p2, d2] == [b, hkv, p1, dv] =>
                {
                    p1
                }
                _ => {
                    return Err(format!(
                        "{OP}: past_key {:?} and past_value {:?} must be [{b}, {hkv}, P, {dk}] and \
                         [{b}, {hkv}, P, {dv}]",
                        pk.shape(),
                        pv.shape()
                    ))
                }
            };
            Some((p, pk, pv))
        }
        _ => return Err(format!("{OP}: past_key and past_value go together")),
    };
    let nonpad = match opt_input(inputs, 6) {
        None => None,
        Some(_) if ctx.opset < 24 => {
            return Err(format!("{OP}: nonpad_kv_seqlen exists from opset 24"))
        }
        Some(_) if past.is_some() => {
            return Err(format!(
                "{OP}: nonpad_kv_seqlen cannot be combined with past_key/past_value"
            ))
        }
        Some(t) => {
            let n = t
                .to_i64_vec()
                .filter(|_| t.shape().len() == 1)
                .ok_or_else(|| {
                    format!(
                        "{OP}: nonpad_kv_seqlen must be a 1-D int64 tensor, got {} {:?}",
                        t.dtype(),
                        t.shape()
                    )
                })?;
            if n.len() != b {
                return Err(format!(
                    "{OP}: nonpad_kv_seqlen has {} entries for batch {b}",
                    n.len()
                ));
            }
            Some(n)
        }
    };
    let plen = past.as_ref().map_or(0, |p| p.0);
    let l = plen
        .checked_add(skv)
        .ok_or_else(|| format!("{OP}: total sequence length overflows"))?;

    // The mask, as [mb, mh, mq, ml] (left-padded with 1s) of additive values.
    let mask = match opt_input(inputs, 3) {
        None => None,
        Some(m) => Some(Mask::new(m, [b, hq, sq, l])?),
    };

    // Output sizes, checked before anything is allocated.
    let bits = super::common::bits(T::DTYPE);
    let y_shape = if rank == 3 {
        vec![
            b,
            sq,
            hq.checked_mul(dv).ok_or("Attention: size overflows")?,
        ]
    } else {
        vec![b, hq, sq, dv]
    };
    check_out(ctx, OP, &y_shape, bits)?;
    check_out(ctx, OP, &[b, hkv, l, dk], bits)?;
    check_out(ctx, OP, &[b, hkv, l, dv], bits)?;
    check_out(ctx, OP, &[b, hq, sq, l], bits)?;
    elems(OP, &[b, hq, sq, l])?;

    let scale = match a.scale {
        Some(s) => T::from_f64(s as f64),
        None => T::ONE / T::from_f64(dk as f64).sqrt(),
    };
    let root = scale.sqrt();
    let to_bnsh = |t: &Tensor, what: &str, [bb, h, s, d]: [usize; 4]| -> Result<Vec<T>, String> {
        let x = data::<T>(OP, t, what)?;
        Ok(if rank == 3 {
            split_heads(&x, bb, s, h, d, T::ONE)
        } else {
            x
        })
    };
    let q: Vec<T> = to_bnsh(qt, "Q", [b, hq, sq, dk])?
        .into_iter()
        .map(|x| x * root)
        .collect();
    let mut k = to_bnsh(kt, "K", [b, hkv, skv, dk])?;
    let mut v = to_bnsh(vt, "V", [b, hkv, skv, dv])?;
    if let Some((p, pk, pv)) = past {
        k = concat_seq(&data::<T>(OP, pk, "past_key")?, &k, b * hkv, p, skv, dk);
        v = concat_seq(&data::<T>(OP, pv, "past_value")?, &v, b * hkv, p, skv, dv);
    }
    let ks: Vec<T> = k.iter().map(|&x| x * root).collect();

    let dims = Dims {
        batch: b,
        q_heads: hq,
        kv_heads: hkv,
        q_len: sq,
        kv_len: l,
        dk,
        dv,
    };
    let capture = match a.qk_matmul_output_mode {
        _ if ctx.node.output(3).is_none() => Capture::None,
        0 => Capture::Raw,
        1 => Capture::Capped,
        2 => Capture::Biased,
        _ => Capture::Probs,
    };
    let (left, right) = (a.left_window_size, a.right_window_size);
    let causal = a.is_causal;
    let sq_i = sq as i64;
    let mut bias = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
        if let Some(m) = &mask {
            m.fill(bi, h, buf);
        }
        let offset = match (&nonpad, past) {
            (Some(n), _) => n[bi] - sq_i,
            (None, Some((p, _, _))) => p as i64,
            (None, None) => 0,
        };
        let limited = causal || left >= 0 || right >= 0 || nonpad.is_some();
        if !limited || l == 0 {
            return Ok(());
        }
        for (i, row) in buf.chunks_exact_mut(l).enumerate() {
            let pos = i as i64 + offset;
            for (j, x) in row.iter_mut().enumerate() {
                let j = j as i64;
                let hidden = (causal && j > pos)
                    || (left >= 0 && pos - j > left)
                    || (right >= 0 && j - pos > right)
                    || nonpad.as_ref().is_some_and(|n| j >= n[bi]);
                if hidden {
                    *x = T::NEG_INFINITY;
                }
            }
        }
        Ok(())
    };
    let softcap = T::from_f64(a.softcap as f64);
    let (y, qk) = attend(&dims, &q, &ks, &v, softcap, capture, &mut bias)?;

    let y = if rank == 3 {
        merge_heads(&y, b, hq, sq, dv)
    } else {
        y
    };
    let mut outs = vec![wrap(OP, &y_shape, y)?];
    let n_out = ctx.node.outputs.len().clamp(1, 4);
    let empty = || T::wrap(ArrayD::zeros(IxDyn(&[0])));
    if n_out > 1 {
        outs.push(if ctx.node.output(1).is_some() {
            wrap(OP, &[b, hkv, l, dk], k)?
        } else {
            empty()
        });
    }
    if n_out > 2 {
        outs.push(if ctx.node.output(2).is_some() {
            wrap(OP, &[b, hkv, l, dv], v)?
        } else {
            empty()
        });
    }
    if n_out > 3 {
        outs.push(if capture == Capture::None {
            empty()
        } else {
            wrap(OP, &[b, hq, sq, l], qk)?
        });
    }
    Ok(outs)
}

/// attn_mask as additive values over [B, Hq, Sq, L], broadcast right-aligned; a last dim
/// shorter than L reads -inf beyond its end.
struct Mask<T> {
    dims: [usize; 4],
    /// [B, Hq, Sq, L].
    full: [usize; 4],
    vals: Vec<T>,
}

impl<T: AttnFloat> Mask<T> {
    fn new(m: &Tensor, full: [usize; 4]) -> Result<Mask<T>, String> {
        let shape = m.shape();
        if shape.is_empty() || shape.len() > 4 {
            return Err(format!(
                "{OP}: attn_mask must have rank 1 to 4, got {shape:?}"
            ));
        }
        let mut dims = [1usize; 4];
        dims[4 - shape.len()..].copy_from_slice(shape);
        let names = ["batch", "query heads", "query length"];
        for (i, name) in names.iter().enumerate() {
            if dims[i] != 1 && dims[i] != full[i] {
                return Err(format!(
                    "{OP}: attn_mask {shape:?} does not broadcast to {full:?} ({name})"
                ));
            }
        }
        if dims[3] > full[3] {
            return Err(format!(
                "{OP}: attn_mask {shape:?} is longer than the {} keys",
                full[3]
            ));
        }
        let vals: Vec<T> = match m {
            Tensor::Bool(a) => a
                .iter()
                .map(|&keep| if keep { T::ZERO } else { T::NEG_INFINITY })
                .collect(),
            t if T::view(t).is_some() => T::view(t).into_iter().flatten().copied().collect(),
            Tensor::I32(_) | Tensor::I64(_) => t_from_f64(m.to_f64_vec()),
            t => {
                return Err(format!(
                    "{OP}: attn_mask must be bool or of Q's type {}, got {}",
                    T::DTYPE,
                    t.dtype()
                ))
            }
        };
        Ok(Mask { dims, full, vals })
    }

    /// Adds the mask's [Sq, L] slice for (batch b, head h) into `buf` (zeroed).
    fn fill(&self, b: usize, h: usize, buf: &mut [T]) {
        let [mb, mh, mq, ml] = self.dims;
        let [_, _, sq, l] = self.full;
        for i in 0..sq {
            let src = (((b % mb) * mh + (h % mh)) * mq + (i % mq)) * ml;
            let row = &mut buf[i * l..][..l];
            for (j, x) in row.iter_mut().enumerate() {
                *x = if j < ml {
                    self.vals[src + j]
                } else {
                    T::NEG_INFINITY
                };
            }
        }
    }
}

fn t_from_f64<T: AttnFloat>(v: Vec<f64>) -> Vec<T> {
    v.into_iter().map(T::from_f64).collect()
}

#[cfg(test)]
#[path = "sdpa_tests.rs"]
mod tests;
