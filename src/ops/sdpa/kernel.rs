//! ai.onnx Attention's kernel: input checks, 3-D/4-D layouts, past key/value, masks and the per-head core.

#[allow(unused_imports)]
use super::*;

pub fn attention(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    match input(OP, inputs, 0)? {
        Tensor::F32(_) => attention_typed::<f32>(ctx, inputs),
        Tensor::F64(_) => attention_typed::<f64>(ctx, inputs),
        t => Err(format!("{OP}: Q must be a float tensor, got {}", t.dtype())),
    }
}

/// A Q/K/V tensor's sizes heads-first [B, H, S, D], for 3-D inputs split by the `heads`
/// attribute (named `attr`).
pub(super) fn heads_first(
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

pub(super) fn attention_typed<T: AttnFloat>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
) -> KernelResult {
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
    let bits = crate::ops::common::bits(T::DTYPE);
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
            x.into_owned()
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
    let bias = |bi: usize, h: usize, buf: &mut [T]| -> Result<(), String> {
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
    let (y, qk) = attend(&dims, &q, &ks, &v, softcap, capture, &bias)?;

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
pub(super) struct Mask<T> {
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

    /// Adds the mask's [Sq, L] slice for (batch b, head h) into `buf` (keys past the mask's last
    /// dim: -inf).
    fn fill(&self, b: usize, h: usize, buf: &mut [T]) {
        let [mb, mh, mq, ml] = self.dims;
        let [_, _, sq, l] = self.full;
        for i in 0..sq {
            let src = (((b % mb) * mh + (h % mh)) * mq + (i % mq)) * ml;
            let row = &mut buf[i * l..][..l];
            for (j, x) in row.iter_mut().enumerate() {
                *x = if j < ml {
                    *x + self.vals[src + j]
                } else {
                    T::NEG_INFINITY
                };
            }
        }
    }
}

pub(super) fn t_from_f64<T: AttnFloat>(v: Vec<f64>) -> Vec<T> {
    v.into_iter().map(T::from_f64).collect()
}
