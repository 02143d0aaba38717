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
//! Element types: float32 (float16/bfloat16 arrive widened to float32), as onnxruntime's contract
//! (T = float, float16); float64 is refused. On WebGPU,
//! MultiHeadAttention in the forms `multi_head_attention` emits (3-D query; heads-first or 3-D key
//! and value; an optional attention_bias or int32 [B, L] key_padding_mask; `unidirectional`) is
//! one float32 dispatch (`wgsl::mha_core`).

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use super::common::{bits, check_out, input, opt_input};
use super::lowering::{run, Lowered, NodeCtx, Ty};
use super::sdpa::{
    attend, concat_seq, data, elems, merge_heads, split_heads, wrap, AttnFloat, Capture, Dims,
};
use super::wgsl::{self, Bind};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

mod gqa;
use gqa::*;

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
            vals: data::<T>(op, t, "attention_bias")?.into_owned(),
        })
    }

    /// Adds the [S, L] slice of (batch b, head h) into the first L columns of `buf`'s rows of
    /// `ld` (≥ L) elements.
    fn add_into(&self, b: usize, h: usize, buf: &mut [T], ld: usize) {
        let [tb, tn, ts, tl] = self.dims;
        if tl == 0 {
            return;
        }
        let at = ((b % tb) * tn + h % tn) * ts * tl;
        for (row, src) in buf
            .chunks_exact_mut(ld)
            .zip(self.vals[at..][..ts * tl].chunks_exact(tl))
        {
            row[..tl]
                .iter_mut()
                .zip(src)
                .for_each(|(o, &v)| *o = *o + v);
        }
    }
}

/// The output list: output, then present_key/present_value where named (empty where not).
fn outputs<T: AttnFloat>(
    ctx: &KernelCtx,
    op: &str,
    y: Tensor,
    present: [(&[usize], Cow<'_, [T]>); 2],
) -> KernelResult {
    let n_out = ctx.node.outputs.len().clamp(1, 3);
    let mut outs = vec![y];
    for (i, (shape, v)) in present.into_iter().enumerate().take(n_out - 1) {
        outs.push(if ctx.node.output(i + 1).is_some() {
            wrap(op, shape, v.into_owned())?
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
            (Some([b, s, _]), Some([_, Dim::Known(n), _, Dim::Known(d)])) => Some(vec![
                b.clone(),
                s.clone(),
                n.checked_mul(*d).map_or(Dim::Unknown, Dim::Known),
            ]),
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
            (true, Some([_, _, Dim::Known(p), _]), Dim::Known(l)) => {
                p.checked_add(*l).map_or(Dim::Unknown, Dim::Known)
            }
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
            t => Err(format!(
                "{MHA}: query must be float32 or float16 (onnxruntime's types), got {}",
                t.dtype()
            )),
        }
    }
    /// One dispatch (`wgsl::mha_core`) for the forms `multi_head_attention` emits: query
    /// [B, S, N·D], key/value heads-first or 3-D, an optional key_padding_mask [B, L] or
    /// attention_bias, `unidirectional` 0 or 1 (no past), float32, nothing else.
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        const OP: &str = "MultiHeadAttention";
        let n = self
            .num_heads
            .filter(|&n| n > 0)
            .ok_or("num_heads is required")? as usize;
        let others = [3, 8, 9].iter().any(|&i| c.has_input(i));
        // A cache: past_key/past_value with both present outputs (a decode step, as
        // `multi_head_attention` emits it), all four or none.
        let cache = [c.has_input(6), c.has_input(7), c.has_out(1), c.has_out(2)];
        let cached = cache.iter().all(|&x| x);
        if others
            || (!cached && cache.iter().any(|&x| x))
            || c.has_out(3)
            || !matches!(self.unidirectional, 0 | 1)
        {
            return Err(format!(
                "{OP} on webgpu takes query, key, value, key_padding_mask, attention_bias and \
                 past_key/past_value with both present outputs only"
            ));
        }
        if c.ty(0)? != Ty::F32 {
            return Err(format!("{OP} is float32-only on webgpu"));
        }
        let (q, k, v) = (&c.input(0)?.shape, &c.input(1)?.shape, &c.input(2)?.shape);
        let (b, s, w) = match q[..] {
            [b, s, w] => (b, s, w),
            _ => return Err(format!("{OP} on webgpu needs a 3-D query, got {q:?}")),
        };
        let (kv_3d, l, d, dv) = match (&k[..], &v[..]) {
            (&[kb, kn, l, d], &[vb, vn, vl, dv]) if (kb, kn, vb, vn, vl) == (b, n, b, n, l) => {
                (false, l, d, dv)
            }
            (&[kb, l, kw], &[vb, vl, vw]) if (kb, vb, vl) == (b, b, l) && kw % n + vw % n == 0 => {
                (true, l, kw / n, vw / n)
            }
            _ => return Err(format!("{OP}: shapes {q:?}, {k:?}, {v:?} do not agree")),
        };
        if w != n * d {
            return Err(format!("{OP}: query {q:?} is not {n} heads of {d}"));
        }
        // After a cache of p keys the core reads the present outputs: [B, N, p + l, D].
        let past = match cached {
            false => 0,
            true => {
                let (pk, pv) = (&c.input(6)?.shape, &c.input(7)?.shape);
                match (&pk[..], &pv[..]) {
                    (&[kb, kn, p, kd], &[vb, vn, vp, vd])
                        if kv_3d && (kb, kn, kd, vb, vn, vp, vd) == (b, n, d, b, n, p, dv) =>
                    {
                        p
                    }
                    _ => {
                        return Err(format!(
                            "{OP}: past_key {pk:?} and past_value {pv:?} do not fit key {k:?} \
                             and value {v:?} (3-D key/value with [B, N, P, D] caches)"
                        ))
                    }
                }
            }
        };
        let (new_len, l) = (l, past + l);
        let key_padding = match c.input(4).ok() {
            None => None,
            Some(m) if m.shape[..] == [b, l] && c.ty(4)? == Ty::I32 => Some(self.mask_filter_value),
            Some(m) => {
                return Err(format!(
                    "{OP} on webgpu takes key_padding_mask as int32 [{b}, {l}], got {:?}",
                    m.shape
                ))
            }
        };
        let bias = match c.input(5).ok().map(|i| &i.shape[..]) {
            None => None,
            Some(&[bb, bn, bs, bl])
                if (bb == 1 || bb == b) && (bn == 1 || bn == n) && (bs, bl) == (s, l) =>
            {
                Some((bb, bn))
            }
            Some(other) => return Err(format!("{OP}: attention_bias {other:?} does not fit")),
        };
        let scale = if self.scale == 0.0 {
            1.0 / (d as f32).sqrt()
        } else {
            self.scale
        };
        let core = wgsl::mha_core(&wgsl::MhaCore {
            batch: b,
            seq: s,
            kv_seq: l,
            heads: n,
            head_dim: d,
            v_dim: dv,
            scale,
            bias,
            kv_3d: kv_3d && !cached,
            key_padding,
            causal: self.unidirectional == 1,
            past,
            kv: match cached {
                true => [Bind::Out(1), Bind::Out(2)],
                false => [Bind::In(1), Bind::In(2)],
            },
        })?;
        if !cached {
            return run(core);
        }
        // present_key (output 1) from past_key (input 6) and key (1); likewise the values.
        let append = |width, k: usize| {
            wgsl::cache_append(
                (b, n, past, new_len, width),
                Bind::In(k + 5),
                Bind::In(k),
                Bind::Out(k),
            )
        };
        Ok(Lowered::Run {
            dispatches: vec![append(d, 1), append(dv, 2), core],
            scratch: vec![],
        })
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
            Some(data::<T>(MHA, t, "bias")?.into_owned())
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
        add_rows(q.to_mut(), &bias[..hq]);
        add_rows(k.to_mut(), &bias[hq..2 * hq]);
        add_rows(v.to_mut(), &bias[2 * hq..]);
    }
    let scale = scale_for::<T>(a.scale, d);
    let q = split_heads(&q, b, s, n, d, scale);
    if !bnsh_kv {
        k = Cow::Owned(split_heads(&k, b, kv_len, n, d, T::ONE));
        v = Cow::Owned(split_heads(&v, b, kv_len, n, dv, T::ONE));
    }
    if let Some((p, pk, pv)) = past {
        k = Cow::Owned(concat_seq(
            &data::<T>(MHA, pk, "past_key")?,
            &k,
            b * n,
            p,
            kv_len,
            d,
        ));
        v = Cow::Owned(concat_seq(
            &data::<T>(MHA, pv, "past_value")?,
            &v,
            b * n,
            p,
            kv_len,
            dv,
        ));
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
    // The padding and causal part depends on the batch only: [S, L] rows built once per batch
    // here, added into every head's scores.
    let per_batch: Vec<T> = if (mask.is_some() || causal) && l > 0 {
        let mut table = vec![T::ZERO; b * s * l];
        for (bi, block) in table.chunks_exact_mut(s * l).enumerate() {
            for (i, row) in block.chunks_exact_mut(l).enumerate() {
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
        }
        table
    } else {
        Vec::new()
    };
    let fill = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
        if !per_batch.is_empty() {
            add_rows(buf, &per_batch[bi * s * l..][..s * l]);
        }
        if let Some(ab) = &attn_bias {
            ab.add_into(bi, h, buf, l);
        }
        Ok(())
    };
    let (y, _) = attend(&dims, &q, &k, &v, T::ZERO, Capture::None, &fill)?;
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
                        match kv.checked_mul(2).and_then(|k2| k2.checked_add(n)) {
                            Some(parts) if w % parts == 0 => {
                                (w / parts).checked_mul(n).map_or(Dim::Unknown, Dim::Known)
                            }
                            _ => Dim::Unknown,
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
            t => Err(format!(
                "{GQA}: query must be float32 or float16 (onnxruntime's types), got {}",
                t.dtype()
            )),
        }
    }
}

#[cfg(test)]
#[path = "ms_attention_tests.rs"]
mod tests;
