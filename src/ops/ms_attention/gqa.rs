//! com.microsoft GroupQueryAttention's kernel: packed or separate QKV, the BNSH cache, seqlens_k, local windows, softcap.

#[allow(unused_imports)]
use super::*;

pub(super) fn gqa<T: AttnFloat>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
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
        (Cow::Owned(q), Cow::Owned(k), Cow::Owned(v))
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
        None => (Cow::Owned(Vec::new()), Cow::Owned(Vec::new())),
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
    let fill = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
        if let Some(ab) = &attn_bias {
            // [S, total] added into the first `total` keys of the [S, lp] rows.
            ab.add_into(bi, h, buf, lp);
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
        &fill,
    )?;
    let y = wrap(GQA, &[b, s, hq * d], merge_heads(&y, b, hq, s, d))?;
    outputs(
        ctx,
        GQA,
        y,
        [
            (&[b, hkv, lp, d], present_k.into()),
            (&[b, hkv, lp, d], present_v.into()),
        ],
    )
}
