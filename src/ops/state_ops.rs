//! Sequence ops that carry a recurrent state between calls (Gated DeltaNet, Mamba):
//! ai.onnx CausalConvWithState and LinearAttention.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | CausalConvWithState | 27- | `activation` ("none"; "silu" or "swish": x·sigmoid(x)) | input: T `[B, C, L]`, weight: T `[C, 1, k]`, bias?: T `[C]`, past_state?: T `[B, C, k-1]` -> output: T `[B, C, L]`, present_state: T `[B, C, k-1]` |
//! | LinearAttention | 27- | `q_num_heads`, `kv_num_heads` (required), `update_rule` ("gated_delta"; "linear", "gated", "delta"), `scale` (0: 1/√d_k), `chunk_size` (64; a tuning hint) | query: T `[B, T, Hq·dk]`, key: T `[B, T, Hkv·dk]`, value: T `[B, T, Hkv·dv]`, past_state?: S `[B, Hkv, dk, dv]`, decay?: T, beta?: T -> output: T `[B, T, Hq·dv]`, present_state: S |
//!
//! CausalConvWithState: each channel is convolved with its own kernel over `past_state` (zeros
//! when absent) followed by the input, without padding, so output position `l` sees inputs
//! `l - k + 1 ..= l`; present_state is the last `k - 1` positions of that concatenation.
//!
//! LinearAttention runs the recurrence token by token, per batch and KV head, on a state
//! `S [dk, dv]` (past_state, or zeros): "linear" `S += k ⊗ v`; "gated" first scales `S` by
//! `exp(g)`; "delta" writes `β·(v − Sᵀk)` in place of `v`; "gated_delta" both (the decay
//! first). The output of query head `h` reads KV head `h / (Hq / Hkv)`: `o = scale · qᵀS`.
//! decay is `[B, T, Hkv]` (per head) or `[B, T, Hkv·dk]` (per key dim), beta `[B, T, Hkv]`
//! or `[B, T, 1]`; the gated rules require decay and the delta rules beta, the others refuse
//! them. Everything is computed in the compute type (float32 for float16/bfloat16) and
//! present_state has past_state's type (query's when absent).

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, opt_input, unsupported_type};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

/// The float32 values of a float input (the executor has widened half types to float32).
fn f32_values(op: &str, t: &Tensor) -> Result<Vec<f32>, String> {
    match t {
        Tensor::F32(a) => Ok(a.iter().copied().collect()),
        other => Err(unsupported_type(op, other.dtype())),
    }
}

fn tensor(op: &str, shape: &[usize], v: Vec<f32>) -> Result<Tensor, String> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(Tensor::F32)
        .map_err(|e| format!("{op}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// CausalConvWithState

#[derive(Debug)]
pub struct CausalConvWithState {
    /// SiLU after the convolution ("silu" and "swish" are the same function).
    pub silu: bool,
}

impl CausalConvWithState {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let silu = match a.string("activation")?.as_deref() {
            None | Some("none") => false,
            Some("silu") | Some("swish") => true,
            Some(s) => {
                return Err(format!(
                    "CausalConvWithState: attribute 'activation' is '{s}'; 'none', 'silu' or \
                     'swish' expected"
                ))
            }
        };
        Ok(Box::new(CausalConvWithState { silu }))
    }
}

impl Op for CausalConvWithState {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let k = cx
            .input(1)
            .shape
            .and_then(|w| w.get(2).cloned())
            .and_then(|d| match d {
                Dim::Known(k) if k >= 1 => Some(k - 1),
                _ => None,
            });
        let state = x.shape.as_ref().and_then(|s| {
            (s.len() == 3).then(|| {
                vec![
                    s[0].clone(),
                    s[1].clone(),
                    k.map_or(Dim::Unknown, Dim::Known),
                ]
            })
        });
        vec![
            x.clone(),
            TensorType {
                dtype: x.dtype,
                shape: state,
            },
        ]
    }
    fn kernel(&self) -> Kernel {
        causal_conv
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn causal_conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "CausalConvWithState";
    let silu = ctx.attrs::<CausalConvWithState>()?.silu;
    let (x, w) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
    let (b, c, l) = match *x.shape() {
        [b, c, l] => (b, c, l),
        _ => {
            return Err(format!(
                "{OP}: input must be [B, C, L], got {:?}",
                x.shape()
            ))
        }
    };
    let k = match *w.shape() {
        [wc, 1, k] if wc == c && k >= 1 => k,
        _ => {
            return Err(format!(
                "{OP}: weight must be [C, 1, k] = [{c}, 1, k >= 1], got {:?}",
                w.shape()
            ))
        }
    };
    let bias = opt_input(inputs, 2);
    if let Some(t) = bias {
        if t.shape() != [c] {
            return Err(format!("{OP}: bias must be [{c}], got {:?}", t.shape()));
        }
    }
    let past = opt_input(inputs, 3);
    if let Some(t) = past {
        if t.shape() != [b, c, k - 1] {
            return Err(format!(
                "{OP}: past_state must be [B, C, k-1] = [{b}, {c}, {}], got {:?}",
                k - 1,
                t.shape()
            ));
        }
    }
    check_out(ctx, OP, x.shape(), 32)?;
    check_out(ctx, OP, &[b, c, l.saturating_add(k - 1)], 32)?;
    let xs = f32_values(OP, x)?;
    let ws = f32_values(OP, w)?;
    let bs = bias.map(|t| f32_values(OP, t)).transpose()?;
    let ps = past.map(|t| f32_values(OP, t)).transpose()?;
    let n = l + k - 1;
    let mut out = Vec::with_capacity(b * c * l);
    let mut state = Vec::with_capacity(b * c * (k - 1));
    let mut padded = vec![0f32; n];
    for bc in 0..b * c {
        let ch = bc % c;
        match &ps {
            Some(p) => padded[..k - 1].copy_from_slice(&p[bc * (k - 1)..(bc + 1) * (k - 1)]),
            None => padded[..k - 1].fill(0.0),
        }
        padded[k - 1..].copy_from_slice(&xs[bc * l..(bc + 1) * l]);
        let wk = &ws[ch * k..(ch + 1) * k];
        let b0 = bs.as_ref().map_or(0.0, |v| v[ch]);
        for i in 0..l {
            let mut acc = b0;
            for (j, &wj) in wk.iter().enumerate() {
                acc += wj * padded[i + j];
            }
            if silu {
                acc /= 1.0 + (-acc).exp();
            }
            out.push(acc);
        }
        state.extend_from_slice(&padded[l..]);
    }
    Ok(vec![
        tensor(OP, &[b, c, l], out)?,
        tensor(OP, &[b, c, k - 1], state)?,
    ])
}

// ---------------------------------------------------------------------------------------------
// LinearAttention

#[derive(Debug)]
pub struct LinearAttention {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub gated: bool,
    pub delta: bool,
    /// 0: 1/√d_k.
    pub scale: f32,
}

impl LinearAttention {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        const OP: &str = "LinearAttention";
        let heads = |name: &str| -> Result<usize, String> {
            let v = a
                .opt_int(name)?
                .ok_or_else(|| format!("{OP}: attribute '{name}' is required"))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("{OP}: attribute '{name}' = {v} must be positive"))
        };
        let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
        if !q_heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "{OP}: q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}"
            ));
        }
        let (gated, delta) = match a.string("update_rule")?.as_deref() {
            None | Some("gated_delta") => (true, true),
            Some("linear") => (false, false),
            Some("gated") => (true, false),
            Some("delta") => (false, true),
            Some(r) => {
                return Err(format!(
                    "{OP}: attribute 'update_rule' is '{r}'; 'linear', 'gated', 'delta' or \
                     'gated_delta' expected"
                ))
            }
        };
        a.int("chunk_size", 64)?;
        Ok(Box::new(LinearAttention {
            q_heads,
            kv_heads,
            gated,
            delta,
            scale: a.float("scale", 0.0)?,
        }))
    }
}

impl Op for LinearAttention {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (q, v) = (cx.input(0), cx.input(2));
        let dims = |s: &Option<Vec<Dim>>| match s.as_deref() {
            Some([b, t, Dim::Known(hd)]) => Some((b.clone(), t.clone(), *hd)),
            _ => None,
        };
        let (hq, hkv) = (self.q_heads as i64, self.kv_heads as i64);
        let (qd, vd) = (dims(&q.shape), dims(&v.shape));
        let out = match (&qd, &vd) {
            (Some((b, t, _)), Some((_, _, hv))) if hv % hkv == 0 => Some(vec![
                b.clone(),
                t.clone(),
                hq.checked_mul(hv / hkv).map_or(Dim::Unknown, Dim::Known),
            ]),
            _ => None,
        };
        let state = match (&qd, &vd) {
            (Some((b, _, hk)), Some((_, _, hv))) if hk % hq == 0 && hv % hkv == 0 => Some(vec![
                b.clone(),
                Dim::Known(hkv),
                Dim::Known(hk / hq),
                Dim::Known(hv / hkv),
            ]),
            _ => None,
        };
        let state_type = if cx.has_input(3) {
            cx.input(3).dtype
        } else {
            q.dtype
        };
        vec![
            TensorType {
                dtype: q.dtype,
                shape: out,
            },
            TensorType {
                dtype: state_type,
                shape: state,
            },
        ]
    }
    fn kernel(&self) -> Kernel {
        linear_attention
    }
}

fn linear_attention(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LinearAttention";
    let p = ctx.attrs::<LinearAttention>()?;
    let (q, k, v) = (
        input(OP, inputs, 0)?,
        input(OP, inputs, 1)?,
        input(OP, inputs, 2)?,
    );
    let (past, decay, beta) = (
        opt_input(inputs, 3),
        opt_input(inputs, 4),
        opt_input(inputs, 5),
    );
    let (hq, hkv) = (p.q_heads, p.kv_heads);
    let (b, t, qw) = match *q.shape() {
        [b, t, w] => (b, t, w),
        _ => {
            return Err(format!(
                "{OP}: query must be [B, T, Hq*dk], got {:?}",
                q.shape()
            ))
        }
    };
    if !qw.is_multiple_of(hq) {
        return Err(format!(
            "{OP}: query's last dim {qw} is not a multiple of q_num_heads {hq}"
        ));
    }
    let dk = qw / hq;
    let vw = v.shape().get(2).copied().unwrap_or(0);
    if k.shape() != [b, t, hkv * dk]
        || v.shape().len() != 3
        || v.shape()[..2] != [b, t]
        || !vw.is_multiple_of(hkv)
    {
        return Err(format!(
            "{OP}: key must be [{b}, {t}, {}] and value [{b}, {t}, Hkv*dv]; got {:?} and {:?}",
            hkv * dk,
            k.shape(),
            v.shape()
        ));
    }
    let dv = vw / hkv;
    if p.gated != decay.is_some() || p.delta != beta.is_some() {
        return Err(format!(
            "{OP}: the update rule {} decay and {} beta; got {} and {}",
            if p.gated { "needs" } else { "takes no" },
            if p.delta { "needs" } else { "takes no" },
            if decay.is_some() { "decay" } else { "no decay" },
            if beta.is_some() { "beta" } else { "no beta" },
        ));
    }
    // decay per head (width 1) or per key dim (width dk); beta per head or shared (width 0).
    let decay_w = match decay.map(|d| d.shape()) {
        None => 0,
        Some([db, dt, w]) if [*db, *dt] == [b, t] && (*w == hkv || *w == hkv * dk) => w / hkv,
        Some(s) => {
            return Err(format!(
                "{OP}: decay must be [{b}, {t}, {hkv}] or [{b}, {t}, {}], got {s:?}",
                hkv * dk
            ))
        }
    };
    let beta_per_head = match beta.map(|d| d.shape()) {
        None => false,
        Some([bb, bt, w]) if [*bb, *bt] == [b, t] && (*w == hkv || *w == 1) => *w == hkv,
        Some(s) => {
            return Err(format!(
                "{OP}: beta must be [{b}, {t}, {hkv}] or [{b}, {t}, 1], got {s:?}"
            ))
        }
    };
    let state_shape = [b, hkv, dk, dv];
    if let Some(s) = past {
        if s.shape() != state_shape {
            return Err(format!(
                "{OP}: past_state must be {state_shape:?}, got {:?}",
                s.shape()
            ));
        }
    }
    check_out(ctx, OP, &[b, t, hq * dv], 32)?;
    check_out(ctx, OP, &state_shape, 32)?;
    let (qs, ks, vs) = (f32_values(OP, q)?, f32_values(OP, k)?, f32_values(OP, v)?);
    let ds = decay.map(|d| f32_values(OP, d)).transpose()?;
    let bs = beta.map(|d| f32_values(OP, d)).transpose()?;
    let mut state = match past {
        Some(s) => f32_values(OP, s)?,
        None => vec![0f32; b * hkv * dk * dv],
    };
    let scale = if p.scale == 0.0 {
        1.0 / (dk as f32).sqrt()
    } else {
        p.scale
    };
    let group = hq / hkv;
    let mut out = vec![0f32; b * t * hq * dv];
    let mut kv = vec![0f32; dv];
    for bi in 0..b {
        for h in 0..hkv {
            let s = &mut state[(bi * hkv + h) * dk * dv..][..dk * dv];
            for ti in 0..t {
                let row = bi * t + ti;
                let kt = &ks[(row * hkv + h) * dk..][..dk];
                let vt = &vs[(row * hkv + h) * dv..][..dv];
                if let Some(d) = &ds {
                    for i in 0..dk {
                        let g =
                            d[row * hkv * decay_w + h * decay_w + if decay_w == 1 { 0 } else { i }];
                        let e = g.exp();
                        s[i * dv..(i + 1) * dv].iter_mut().for_each(|x| *x *= e);
                    }
                }
                kv.copy_from_slice(vt);
                if let Some(bv) = &bs {
                    let beta = bv[if beta_per_head { row * hkv + h } else { row }];
                    for (m, x) in kv.iter_mut().enumerate() {
                        let read: f32 = (0..dk).map(|i| s[i * dv + m] * kt[i]).sum();
                        *x = beta * (*x - read);
                    }
                }
                for i in 0..dk {
                    for m in 0..dv {
                        s[i * dv + m] += kt[i] * kv[m];
                    }
                }
                for g in 0..group {
                    let qh = h * group + g;
                    let qt = &qs[(row * hq + qh) * dk..][..dk];
                    let o = &mut out[(row * hq + qh) * dv..][..dv];
                    for (m, om) in o.iter_mut().enumerate() {
                        let acc: f32 = (0..dk).map(|i| qt[i] * s[i * dv + m]).sum();
                        *om = scale * acc;
                    }
                }
            }
        }
    }
    Ok(vec![
        tensor(OP, &[b, t, hq * dv], out)?,
        tensor(OP, &state_shape, state)?,
    ])
}

#[cfg(test)]
#[path = "state_ops_tests.rs"]
mod tests;
