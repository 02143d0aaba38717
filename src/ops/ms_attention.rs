//! com.microsoft `MultiHeadAttention` and `GroupQueryAttention` (onnxruntime's
//! docs/ContribOperators.md contracts), on the per-head core of sdpa.rs.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | MultiHeadAttention | com.microsoft 1 | `num_heads` (required), `scale` (0: 1/√head_size), `mask_filter_value` (-10000), `unidirectional` (0) | query, key?, value?, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?, past_sequence_length? (refused), cache_indirection? (refused) -> output, present_key?, present_value?, qk? (refused) |
//! | GroupQueryAttention | com.microsoft 1 | `num_heads`, `kv_num_heads` (required), `scale` (0: 1/√head_size), `softcap` (0), `local_window_size` (-1, else positive), `causal` (1); `do_rotary`, `smooth_softmax`, `sliding_window_cache`, `qk_output` only 0; `k_quant_type`/`v_quant_type` only "NONE" | query, key?, value?, past_key?, past_value?, seqlens_k, total_sequence_length, attention_bias? (input 10); cos/sin caches, position_ids, head_sink, k/v scales, q/k norm weights, query_seqlens refused -> output, present_key?, present_value?, output_qk? (refused) |
//!
//! MultiHeadAttention: query [B, S, N·D]; key [B, L, N·D] and value [B, L, N·Dv] (heads split
//! by `num_heads`, `bias` [N·D + N·D + N·Dv] added first), or key/value already heads-first
//! [B, N, L, D] (cross attention: no bias on them, no past). past_key/past_value [B, N, P, D]
//! go in front into present_key/present_value. Scores are Q·Kᵀ·scale plus: `mask_filter_value`
//! for keys the key_padding_mask (int32: [B] valid lengths, [B, P+L] or [B, S, P+L] with 0 for
//! padding) hides, the lowest float32 instead for keys after the query (`unidirectional = 1`,
//! key j hidden from query i when j > P + i, as onnxruntime's CPU kernel adds one mask value
//! per score, the causal one winning), and attention_bias ([B or 1, N or 1, S, P+L]). The
//! output is [B, S, N·Dv]. The 5-D packed QKV/KV forms are refused.
//!
//! GroupQueryAttention: query [B, S, Hq·D] (or packed [B, S, (Hq + 2·Hkv)·D] with no key and
//! value), key/value [B, S, Hkv·D]; query head h reads key/value head h / (Hq / Hkv). Batch b
//! holds T_b = seqlens_k[b] + 1 tokens after the step; the first prompt (S equal to
//! total_sequence_length) has no past, otherwise P_b = T_b - S tokens of past_key/past_value
//! (BNSH) precede the new ones. present_key/present_value are [B, Hkv, max(P_buf,
//! total_sequence_length), D]: the P_b past rows, the S new rows, zeros after. Query i of batch
//! b sits at position P_b + i and attends the keys j < T_b with j <= P_b + i (with `causal`),
//! and j > P_b + i - local_window_size (when it is not -1: the window holds the query's own
//! key and the local_window_size - 1 before it). Scores are Q·Kᵀ·scale, then
//! softcap (`c·tanh(s / c)`), then attention_bias ([B or 1, Hq or 1, S, total]); the output is
//! [B, S, Hq·D]. Rotary embedding, quantized caches and the other refused inputs are errors
//! naming them.
//!
//! Element types: float32 (float16/bfloat16 arrive widened to float32) and float64.

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, opt_input};
use super::sdpa::{
    attend, concat_seq, data, elems, merge_heads, split_heads, wrap, AttnFloat, Capture, Dims,
};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

const MHA: &str = "MultiHeadAttention";
const GQA: &str = "GroupQueryAttention";

/// `x` with `add` added to each row of `add.len()` elements.
fn add_rows<T: AttnFloat>(x: &mut [T], add: &[T]) {
    if add.is_empty() {
        return;
    }
    for row in x.chunks_exact_mut(add.len()) {
        row.iter_mut().zip(add).for_each(|(o, &a)| *o = *o + a);
    }
}

/// The scale factor: `scale` unless 0, else 1/√d.
fn scale_for<T: AttnFloat>(scale: f32, d: usize) -> T {
    if scale == 0.0 {
        T::ONE / T::from_f64(d as f64).sqrt()
    } else {
        T::from_f64(scale as f64)
    }
}

/// attention_bias [B or 1, N or 1, S, L] as a per-(batch, head) [S, L] slice reader.
struct AttnBias<T> {
    dims: [usize; 4],
    vals: Vec<T>,
}

impl<T: AttnFloat> AttnBias<T> {
    fn new(op: &str, t: &Tensor, b: usize, n: usize, s: usize, l: usize) -> Result<Self, String> {
        let ok = match *t.shape() {
            [tb, tn, ts, tl] => (tb == b || tb == 1) && (tn == n || tn == 1) && ts == s && tl == l,
            _ => false,
        };
        if !ok {
            return Err(format!(
                "{op}: attention_bias {:?} must be [{b} or 1, {n} or 1, {s}, {l}]",
                t.shape()
            ));
        }
        let mut dims = [0; 4];
        dims.copy_from_slice(t.shape());
        Ok(AttnBias {
            dims,
            vals: data::<T>(op, t, "attention_bias")?,
        })
    }

    /// Adds the [S, L] slice of (batch b, head h) into `buf`.
    fn add(&self, b: usize, h: usize, buf: &mut [T]) {
        let [tb, tn, ts, tl] = self.dims;
        let at = ((b % tb) * tn + h % tn) * ts * tl;
        buf.iter_mut()
            .zip(&self.vals[at..][..ts * tl])
            .for_each(|(o, &v)| *o = *o + v);
    }
}

/// The output list: output, then present_key/present_value where named (empty where not).
fn outputs<T: AttnFloat>(
    ctx: &KernelCtx,
    op: &str,
    y: Tensor,
    present: [(&[usize], Vec<T>); 2],
) -> KernelResult {
    let n_out = ctx.node.outputs.len().clamp(1, 3);
    let mut outs = vec![y];
    for (i, (shape, v)) in present.into_iter().enumerate().take(n_out - 1) {
        outs.push(if ctx.node.output(i + 1).is_some() {
            wrap(op, shape, v)?
        } else {
            T::wrap(ArrayD::zeros(IxDyn(&[0])))
        });
    }
    Ok(outs)
}

fn refuse(op: &str, inputs: &[Option<&Tensor>], which: &[(usize, &str)]) -> Result<(), String> {
    for &(i, name) in which {
        if opt_input(inputs, i).is_some() {
            return Err(format!("{op}: input {i} ({name}) is not supported"));
        }
    }
    Ok(())
}

/// [B, S, W] for a 3-D value's known dims.
fn three(op: &str, t: &Tensor, what: &str) -> Result<[usize; 3], String> {
    match *t.shape() {
        [b, s, w] => Ok([b, s, w]),
        ref s => Err(format!(
            "{op}: {what} must be 3-D [batch, seq, hidden], got {s:?}"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// MultiHeadAttention

#[derive(Debug)]
pub struct MultiHeadAttention {
    /// Required; `None` when absent (the kernel refuses it).
    pub num_heads: Option<i64>,
    /// 0: 1/√head_size.
    pub scale: f32,
    pub mask_filter_value: f32,
    pub unidirectional: i64,
}

impl MultiHeadAttention {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(MultiHeadAttention {
            num_heads: a.opt_int("num_heads")?,
            scale: a.float("scale", 0.0)?,
            mask_filter_value: a.float("mask_filter_value", -10000.0)?,
            unidirectional: a.int("unidirectional", 0)?,
        }))
    }
}

impl Op for MultiHeadAttention {
    /// output [B, S, N·Dv] with Dv from value (3-D: its width; 4-D: N·its head size).
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let q = cx.input(0);
        let v = cx.input(2).shape;
        let y = match (q.shape.as_deref(), v.as_deref()) {
            (Some([b, s, _]), Some([_, _, w])) => Some(vec![b.clone(), s.clone(), w.clone()]),
            (Some([b, s, _]), Some([_, Dim::Known(n), _, Dim::Known(d)])) => {
                Some(vec![b.clone(), s.clone(), Dim::Known(n * d)])
            }
            (Some([b, s, _]), _) => Some(vec![b.clone(), s.clone(), Dim::Unknown]),
            _ => None,
        };
        let t = |shape| TensorType {
            dtype: q.dtype,
            shape,
        };
        // present_key/present_value: [B, N, P + L, D] and [B, N, P + L, Dv].
        let n = self.num_heads.filter(|&n| n > 0);
        let per_head = |w: Option<&Dim>| match (w, n) {
            (Some(Dim::Known(w)), Some(n)) if w % n == 0 => Dim::Known(w / n),
            _ => Dim::Unknown,
        };
        let k = cx.input(1).shape;
        let (kv_len, dk, dv) = match (k.as_deref(), v.as_deref()) {
            (Some([_, l, w]), Some([_, _, vw])) => {
                (l.clone(), per_head(Some(w)), per_head(Some(vw)))
            }
            (Some([_, _, l, d]), Some([_, _, _, vd])) => (l.clone(), d.clone(), vd.clone()),
            _ => (Dim::Unknown, Dim::Unknown, Dim::Unknown),
        };
        let total = match (cx.has_input(6), cx.input(6).shape.as_deref(), &kv_len) {
            (false, _, l) => l.clone(),
            (true, Some([_, _, Dim::Known(p), _]), Dim::Known(l)) => Dim::Known(p + l),
            _ => Dim::Unknown,
        };
        let batch = q
            .shape
            .as_deref()
            .and_then(|s| s.first().cloned())
            .unwrap_or(Dim::Unknown);
        let heads = n.map_or(Dim::Unknown, Dim::Known);
        let present = |d: Dim| Some(vec![batch.clone(), heads.clone(), total.clone(), d]);
        let (pk, pv) = if q.shape.as_ref().is_some_and(|s| s.len() == 3) {
            (present(dk), present(dv))
        } else {
            (None, None)
        };
        cx.fit(vec![t(y), t(pk), t(pv)])
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| match input(MHA, inputs, 0)? {
            Tensor::F32(_) => mha::<f32>(ctx, inputs),
            Tensor::F64(_) => mha::<f64>(ctx, inputs),
            t => Err(format!("{MHA}: query must be float, got {}", t.dtype())),
        }
    }
}

fn mha<T: AttnFloat>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let a = ctx.attrs::<MultiHeadAttention>()?;
    refuse(
        MHA,
        inputs,
        &[(8, "past_sequence_length"), (9, "cache_indirection")],
    )?;
    if ctx.node.output(3).is_some() {
        return Err(format!("{MHA}: the qk output is not supported"));
    }
    let causal = match a.unidirectional {
        0 => false,
        1 => true,
        u => return Err(format!("{MHA}: unidirectional must be 0 or 1, got {u}")),
    };
    let n = a.num_heads.unwrap_or(0);
    let qt = input(MHA, inputs, 0)?;
    let [b, s, hq] = three(MHA, qt, "query (the packed 5-D QKV form is not supported)")?;
    if n <= 0 || hq as i64 % n != 0 {
        return Err(format!(
            "{MHA}: num_heads {n} must be positive and divide the query's hidden size {hq}"
        ));
    }
    let n = n as usize;
    let d = hq / n;
    let (kt, vt) = match (opt_input(inputs, 1), opt_input(inputs, 2)) {
        (Some(k), Some(v)) => (k, v),
        _ => {
            return Err(format!(
                "{MHA}: key and value are required (the packed QKV/KV forms are not supported)"
            ))
        }
    };
    // key/value: 3-D (projected, heads split here) or 4-D heads-first (cross attention cache).
    let bnsh_kv = kt.shape().len() == 4;
    let (kv_len, dv) = match (kt.shape(), vt.shape()) {
        (&[kb, kl, kw], &[vb, vl, vw])
            if kb == b && vb == b && kl == vl && kw == hq && vw.is_multiple_of(n) =>
        {
            (kl, vw / n)
        }
        (&[kb, kn, kl, kd], &[vb, vn, vl, vd])
            if [kb, kn, kd] == [b, n, d] && [vb, vn, vl] == [b, n, kl] =>
        {
            (kl, vd)
        }
        (ks, vs) => {
            return Err(format!(
                "{MHA}: key {ks:?} and value {vs:?} must be [{b}, L, {hq}] and [{b}, L, {n}·Dv], \
                 or [{b}, {n}, L, {d}] and [{b}, {n}, L, Dv] (the packed KV form is not supported)"
            ))
        }
    };
    let past = match (opt_input(inputs, 6), opt_input(inputs, 7)) {
        (None, None) => None,
        (Some(_), Some(_)) if bnsh_kv => {
            return Err(format!(
                "{MHA}: past_key/past_value with heads-first key/value are not supported"
            ))
        }
        (Some(pk), Some(pv)) => match (pk.shape(), pv.shape()) {
            (&[b1, n1, p1, d1], &[b2, n2, p2, d2])
                if [b1, n1, d1] == [b, n, d] && [b2, n2, p2, d2] == [b, n, p1, dv] =>
            {
                Some((p1, pk, pv))
            }
            (ks, vs) => {
                return Err(format!(
                    "{MHA}: past_key {ks:?} and past_value {vs:?} must be [{b}, {n}, P, {d}] and \
                     [{b}, {n}, P, {dv}]"
                ))
            }
        },
        _ => return Err(format!("{MHA}: past_key and past_value go together")),
    };
    let p = past.as_ref().map_or(0, |x| x.0);
    let l = p
        .checked_add(kv_len)
        .ok_or_else(|| format!("{MHA}: total sequence length overflows"))?;
    let bias = match opt_input(inputs, 3) {
        None => None,
        Some(t) => {
            let want = 2 * hq + n * dv;
            if t.shape() != [want] {
                return Err(format!("{MHA}: bias must be [{want}], got {:?}", t.shape()));
            }
            if bnsh_kv {
                return Err(format!(
                    "{MHA}: bias with heads-first key/value is not supported"
                ));
            }
            Some(data::<T>(MHA, t, "bias")?)
        }
    };
    // key_padding_mask: per (b, i) row, the keys it hides.
    let mask: Option<(Vec<i32>, usize)> = match opt_input(inputs, 4) {
        None => None,
        Some(Tensor::I32(m)) => {
            let rows = match *m.shape() {
                [mb] if mb == b => 0,
                [mb, ml] if mb == b && ml == l => 1,
                [mb, ms, ml] if mb == b && ms == s && ml == l => s,
                ref sh => {
                    return Err(format!(
                    "{MHA}: key_padding_mask {sh:?} must be [{b}], [{b}, {l}] or [{b}, {s}, {l}]"
                ))
                }
            };
            Some((m.iter().copied().collect(), rows))
        }
        Some(t) => {
            return Err(format!(
                "{MHA}: key_padding_mask must be int32, got {}",
                t.dtype()
            ))
        }
    };
    let attn_bias = opt_input(inputs, 5)
        .map(|t| AttnBias::<T>::new(MHA, t, b, n, s, l))
        .transpose()?;

    let bt = bits(T::DTYPE);
    check_out(ctx, MHA, &[b, s, n * dv], bt)?;
    check_out(ctx, MHA, &[b, n, l, d], bt)?;
    check_out(ctx, MHA, &[b, n, l, dv], bt)?;
    check_out(ctx, MHA, &[b, n, s, l], bt)?;
    elems(MHA, &[b, n, s, l])?;

    let mut q = data::<T>(MHA, qt, "query")?;
    let mut k = data::<T>(MHA, kt, "key")?;
    let mut v = data::<T>(MHA, vt, "value")?;
    if let Some(bias) = &bias {
        add_rows(&mut q, &bias[..hq]);
        add_rows(&mut k, &bias[hq..2 * hq]);
        add_rows(&mut v, &bias[2 * hq..]);
    }
    let scale = scale_for::<T>(a.scale, d);
    let q = split_heads(&q, b, s, n, d, scale);
    if !bnsh_kv {
        k = split_heads(&k, b, kv_len, n, d, T::ONE);
        v = split_heads(&v, b, kv_len, n, dv, T::ONE);
    }
    if let Some((p, pk, pv)) = past {
        k = concat_seq(&data::<T>(MHA, pk, "past_key")?, &k, b * n, p, kv_len, d);
        v = concat_seq(&data::<T>(MHA, pv, "past_value")?, &v, b * n, p, kv_len, dv);
    }
    let dims = Dims {
        batch: b,
        q_heads: n,
        kv_heads: n,
        q_len: s,
        kv_len: l,
        dk: d,
        dv,
    };
    let filter = T::from_f64(a.mask_filter_value as f64);
    let lowest = T::from_f64(f32::MIN as f64);
    let mut fill = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
        if l == 0 {
            return Ok(());
        }
        for (i, row) in buf.chunks_exact_mut(l).enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                let hidden = match &mask {
                    None => false,
                    Some((m, 0)) => j as i64 >= m[bi] as i64,
                    Some((m, rows)) => m[(bi * rows + i % rows) * l + j] == 0,
                };
                *x = if causal && j > p + i {
                    lowest
                } else if hidden {
                    filter
                } else {
                    T::ZERO
                };
            }
        }
        if let Some(ab) = &attn_bias {
            ab.add(bi, h, buf);
        }
        Ok(())
    };
    let (y, _) = attend(&dims, &q, &k, &v, T::ZERO, Capture::None, &mut fill)?;
    let y = wrap(MHA, &[b, s, n * dv], merge_heads(&y, b, n, s, dv))?;
    outputs(ctx, MHA, y, [(&[b, n, l, d], k), (&[b, n, l, dv], v)])
}

// ---------------------------------------------------------------------------------------------
// GroupQueryAttention

#[derive(Debug)]
pub struct GroupQueryAttention {
    pub num_heads: Option<i64>,
    pub kv_num_heads: Option<i64>,
    /// 0: 1/√head_size.
    pub scale: f32,
    /// 0: none.
    pub softcap: f32,
    /// -1: no window.
    pub local_window_size: i64,
    pub causal: i64,
    pub do_rotary: i64,
    pub smooth_softmax: i64,
    pub sliding_window_cache: i64,
    pub qk_output: i64,
    pub k_quant_type: Option<String>,
    pub v_quant_type: Option<String>,
}

impl GroupQueryAttention {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(GroupQueryAttention {
            num_heads: a.opt_int("num_heads")?,
            kv_num_heads: a.opt_int("kv_num_heads")?,
            scale: a.float("scale", 0.0)?,
            softcap: a.float("softcap", 0.0)?,
            local_window_size: a.int("local_window_size", -1)?,
            causal: a.int("causal", 1)?,
            do_rotary: a.int("do_rotary", 0)?,
            smooth_softmax: a.int("smooth_softmax", 0)?,
            sliding_window_cache: a.int("sliding_window_cache", 0)?,
            qk_output: a.int("qk_output", 0)?,
            k_quant_type: a.string("k_quant_type")?,
            v_quant_type: a.string("v_quant_type")?,
        }))
    }
}

impl Op for GroupQueryAttention {
    /// output [B, S, Hq·D] with D from the query (or the packed query) width.
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let q = cx.input(0);
        let y = match q.shape.as_deref() {
            Some([b, s, w]) => {
                let w = match (w, self.num_heads, self.kv_num_heads, cx.has_input(1)) {
                    (w, _, _, true) => w.clone(),
                    (Dim::Known(w), Some(n), Some(kv), false) if n > 0 && kv > 0 => {
                        let parts = n + 2 * kv;
                        if w % parts == 0 {
                            Dim::Known(w / parts * n)
                        } else {
                            Dim::Unknown
                        }
                    }
                    _ => Dim::Unknown,
                };
                Some(vec![b.clone(), s.clone(), w])
            }
            _ => None,
        };
        let t = |shape| TensorType {
            dtype: q.dtype,
            shape,
        };
        let present = Some(vec![Dim::Unknown; 4]);
        cx.fit(vec![t(y), t(present.clone()), t(present)])
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| match input(GQA, inputs, 0)? {
            Tensor::F32(_) => gqa::<f32>(ctx, inputs),
            Tensor::F64(_) => gqa::<f64>(ctx, inputs),
            t => Err(format!("{GQA}: query must be float, got {}", t.dtype())),
        }
    }
}

fn gqa<T: AttnFloat>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let a = ctx.attrs::<GroupQueryAttention>()?;
    for (v, name) in [
        (a.do_rotary, "do_rotary"),
        (a.smooth_softmax, "smooth_softmax"),
        (a.sliding_window_cache, "sliding_window_cache"),
        (a.qk_output, "qk_output"),
    ] {
        if v != 0 {
            return Err(format!("{GQA}: {name}={v} is not supported"));
        }
    }
    for (q, name) in [
        (&a.k_quant_type, "k_quant_type"),
        (&a.v_quant_type, "v_quant_type"),
    ] {
        if let Some(q) = q.as_deref().filter(|q| *q != "NONE") {
            return Err(format!(
                "{GQA}: {name} {q} (a quantized cache) is not supported"
            ));
        }
    }
    refuse(
        GQA,
        inputs,
        &[
            (7, "cos_cache"),
            (8, "sin_cache"),
            (9, "position_ids"),
            (11, "head_sink"),
            (12, "k_scale"),
            (13, "v_scale"),
            (14, "q_norm_weight"),
            (15, "k_norm_weight"),
            (16, "query_seqlens"),
        ],
    )?;
    if ctx.node.output(3).is_some() {
        return Err(format!("{GQA}: the output_qk output is not supported"));
    }
    let causal = match a.causal {
        0 => false,
        1 => true,
        c => return Err(format!("{GQA}: causal must be 0 or 1, got {c}")),
    };
    let window = a.local_window_size;
    if window != -1 && (window <= 0 || !causal) {
        return Err(format!(
            "{GQA}: local_window_size {window} must be -1, or positive with causal = 1"
        ));
    }
    let (hq, hkv) = match (a.num_heads, a.kv_num_heads) {
        (Some(n), Some(kv)) if n > 0 && kv > 0 && n % kv == 0 => (n as usize, kv as usize),
        (n, kv) => {
            return Err(format!(
                "{GQA}: num_heads {n:?} must be a positive multiple of kv_num_heads {kv:?}"
            ))
        }
    };
    let qt = input(GQA, inputs, 0)?;
    let [b, s, w] = three(GQA, qt, "query")?;
    let packed = opt_input(inputs, 1).is_none();
    let d = if packed {
        if opt_input(inputs, 2).is_some() {
            return Err(format!("{GQA}: value without key"));
        }
        let parts = hq + 2 * hkv;
        if !w.is_multiple_of(parts) {
            return Err(format!(
                "{GQA}: packed query width {w} is not (num_heads + 2·kv_num_heads)·head_size"
            ));
        }
        w / parts
    } else {
        if !w.is_multiple_of(hq) {
            return Err(format!(
                "{GQA}: num_heads {hq} does not divide the query's hidden size {w}"
            ));
        }
        w / hq
    };
    let (q, k, v) = if packed {
        let all = data::<T>(GQA, qt, "query")?;
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        if w > 0 {
            for row in all.chunks_exact(w) {
                q.extend_from_slice(&row[..hq * d]);
                k.extend_from_slice(&row[hq * d..(hq + hkv) * d]);
                v.extend_from_slice(&row[(hq + hkv) * d..]);
            }
        }
        (q, k, v)
    } else {
        let (kt, vt) = (input(GQA, inputs, 1)?, input(GQA, inputs, 2)?);
        let want = [b, s, hkv * d];
        if three(GQA, kt, "key")? != want || three(GQA, vt, "value")? != want {
            return Err(format!(
                "{GQA}: key {:?} and value {:?} must be {want:?}",
                kt.shape(),
                vt.shape()
            ));
        }
        (
            data::<T>(GQA, qt, "query")?,
            data::<T>(GQA, kt, "key")?,
            data::<T>(GQA, vt, "value")?,
        )
    };
    let seqlens = match input(GQA, inputs, 5)? {
        Tensor::I32(t) if t.shape() == [b] => t.iter().map(|&x| x as i64).collect::<Vec<_>>(),
        t => {
            return Err(format!(
                "{GQA}: seqlens_k must be int32 [{b}], got {} {:?}",
                t.dtype(),
                t.shape()
            ))
        }
    };
    let total = match input(GQA, inputs, 6)? {
        Tensor::I32(t) if t.len() == 1 => t.iter().next().map_or(0, |&x| x as i64),
        t => {
            return Err(format!(
                "{GQA}: total_sequence_length must be an int32 scalar, got {} {:?}",
                t.dtype(),
                t.shape()
            ))
        }
    };
    let past = match (opt_input(inputs, 3), opt_input(inputs, 4)) {
        (None, None) => None,
        (Some(pk), Some(pv)) => match (pk.shape(), pv.shape()) {
            (&[b1, n1, p1, d1], &[b2, n2, p2, d2])
                if [b1, n1, d1] == [b, hkv, d] && [b2, n2, p2, d2] == [b, hkv, p1, d] =>
            {
                Some((p1, pk, pv))
            }
            (ks, vs) => {
                return Err(format!(
                    "{GQA}: past_key {ks:?} and past_value {vs:?} must be [{b}, {hkv}, P, {d}]"
                ))
            }
        },
        _ => return Err(format!("{GQA}: past_key and past_value go together")),
    };
    let p_buf = past.as_ref().map_or(0, |x| x.0);
    if total < s as i64 && past.is_none() {
        return Err(format!(
            "{GQA}: total_sequence_length {total} is below the sequence length {s} with no past"
        ));
    }
    let first_prompt = total == s as i64;
    let lp = p_buf.max(
        usize::try_from(total)
            .map_err(|_| format!("{GQA}: total_sequence_length {total} is negative"))?,
    );
    // Per batch: (tokens after the step, past tokens before it).
    let mut spans = Vec::with_capacity(b);
    for (bi, &sk) in seqlens.iter().enumerate() {
        let t = sk + 1;
        let past_len = if first_prompt { 0 } else { t - s as i64 };
        if t < 1 || t > lp as i64 || past_len < 0 || (past_len as usize > p_buf && !first_prompt) {
            return Err(format!(
                "{GQA}: seqlens_k[{bi}] = {sk} does not fit sequence length {s}, past length \
                 {p_buf} and total_sequence_length {total}"
            ));
        }
        if (past_len as usize) + s > lp {
            return Err(format!(
                "{GQA}: batch {bi}'s {past_len} past and {s} new tokens exceed the present \
                 length {lp}"
            ));
        }
        spans.push((t as usize, past_len as usize));
    }
    let attn_bias = opt_input(inputs, 10)
        .map(|t| AttnBias::<T>::new(GQA, t, b, hq, s, total as usize))
        .transpose()?;

    let bt = bits(T::DTYPE);
    check_out(ctx, GQA, &[b, s, hq * d], bt)?;
    check_out(ctx, GQA, &[b, hkv, lp, d], bt)?;
    check_out(ctx, GQA, &[b, hkv, lp, d], bt)?;
    check_out(ctx, GQA, &[b, hq, s, lp], bt)?;
    elems(GQA, &[b, hq, s, lp])?;

    let scale = scale_for::<T>(a.scale, d);
    let q = split_heads(&q, b, s, hq, d, scale);
    let k = split_heads(&k, b, s, hkv, d, T::ONE);
    let v = split_heads(&v, b, s, hkv, d, T::ONE);
    // The presents: past rows, new rows, zeros.
    let (pk, pv) = match past {
        Some((_, pk, pv)) => (
            data::<T>(GQA, pk, "past_key")?,
            data::<T>(GQA, pv, "past_value")?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut present_k = vec![T::ZERO; b * hkv * lp * d];
    let mut present_v = vec![T::ZERO; b * hkv * lp * d];
    for (bi, &(_, past_len)) in spans.iter().enumerate() {
        for h in 0..hkv {
            let i = bi * hkv + h;
            let dst = i * lp * d;
            let src = i * p_buf * d;
            present_k[dst..][..past_len * d].copy_from_slice(&pk[src..][..past_len * d]);
            present_v[dst..][..past_len * d].copy_from_slice(&pv[src..][..past_len * d]);
            let at = dst + past_len * d;
            present_k[at..][..s * d].copy_from_slice(&k[i * s * d..][..s * d]);
            present_v[at..][..s * d].copy_from_slice(&v[i * s * d..][..s * d]);
        }
    }
    let dims = Dims {
        batch: b,
        q_heads: hq,
        kv_heads: hkv,
        q_len: s,
        kv_len: lp,
        dk: d,
        dv: d,
    };
    let mut fill = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
        if let Some(ab) = &attn_bias {
            // [S, total] into the [S, lp] rows.
            let tl = total as usize;
            let mut tmp = vec![T::ZERO; s * tl];
            ab.add(bi, h, &mut tmp);
            if tl > 0 {
                for (row, src) in buf.chunks_exact_mut(lp).zip(tmp.chunks_exact(tl)) {
                    row[..tl].copy_from_slice(src);
                }
            }
        }
        let (t, past_len) = spans[bi];
        if lp == 0 {
            return Ok(());
        }
        for (i, row) in buf.chunks_exact_mut(lp).enumerate() {
            let pos = (past_len + i) as i64;
            for (j, x) in row.iter_mut().enumerate() {
                let jj = j as i64;
                let hidden = j >= t || (causal && jj > pos) || (window > 0 && pos - jj >= window);
                if hidden {
                    *x = T::NEG_INFINITY;
                }
            }
        }
        Ok(())
    };
    let softcap = T::from_f64(a.softcap as f64);
    let (y, _) = attend(
        &dims,
        &q,
        &present_k,
        &present_v,
        softcap,
        Capture::None,
        &mut fill,
    )?;
    let y = wrap(GQA, &[b, s, hq * d], merge_heads(&y, b, hq, s, d))?;
    outputs(
        ctx,
        GQA,
        y,
        [(&[b, hkv, lp, d], present_k), (&[b, hkv, lp, d], present_v)],
    )
}

#[cfg(test)]
#[path = "ms_attention_tests.rs"]
mod tests;
