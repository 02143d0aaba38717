//! com.microsoft `Attention` (onnxruntime's docs/ContribOperators.md), the multi-head
//! self-attention the `attention` fusion emits, float32.
//!
//! | attribute | default | here |
//! |---|---|---|
//! | `num_heads` | required | must be positive and divide the hidden size |
//! | `unidirectional` | 0 | 0, or 1 (causal) |
//! | `scale` | 0 (= 1/√D) | |
//! | `mask_filter_value` | -10000 | added to masked (padded) keys' scores |
//! | `qkv_hidden_sizes` | none | three equal widths only |
//! | `do_rotary`, `past_present_share_buffer` | 0 | only 0 |
//!
//! Inputs: input [B, S, H_in], weights [H_in, 3·H], bias? [3·H], mask_index? (int32, raw 2-D
//! [B, S] only), past, attention_bias, past_sequence_length (refused). Outputs: output
//! [B, S, H]; present (refused). The version 1 schema is the only one.
//!
//! `Q|K|V = input · weights + bias` ([B, S, 3·H] split into N heads of D = H / N), then per batch
//! and head `softmax(Q·Kᵀ · scale + mask) · V`, heads merged back to [B, S, H]. The raw 2-D
//! `mask_index` [B, S] keeps key k of batch b where `mask_index[b, k] > 0` and adds
//! `mask_filter_value` to the score otherwise.
//!
//! The packed projection is one matrix product; then per (batch, head) the [S, S] scores are one
//! product of strided views of the packed rows (nothing copied), each row is scaled, masked and
//! normalized in place by the Softmax kernel's row routine, and one more product applies them to
//! V, written straight into the head's columns of the output: the [B, N, S, S] tensor is never
//! built, one [S, S] buffer serves every head, and the products are the MatMul kernel's. With
//! `unidirectional = 1` key k is also masked for queries q < k (causal), and there the lowest
//! float is added instead of `mask_filter_value`, as onnxruntime's kernel does whatever
//! `mask_filter_value` is. Anything unsupported is an error naming it. WebGPU: the projection
//! (+ bias) into scratch, then one attention dispatch.

use ndarray::{ArrayD, ArrayView2, IxDyn};

use super::common::{check_out, input, opt_input, unsupported_type};
use super::lanes::elements;
use super::lowering::{NodeCtx, R};
use super::matmul::{sgemm, MatElem, Strided};
use super::reduce::softmax_row;
use super::wgsl::{self, MatMul};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

const OP: &str = "Attention";

#[derive(Debug)]
pub struct Attention {
    /// Required by the schema; `None` when absent, which the kernel and lowering refuse as they
    /// refuse a count that is not positive or does not divide the hidden size.
    pub num_heads: Option<i64>,
    /// 1: causal (key k masked for queries before it); values other than 0 and 1 are kernel
    /// errors (the lowering treats any non-zero value as 1).
    pub unidirectional: i64,
    /// Widths of Q, K and V; only three equal widths are supported.
    pub qkv_hidden_sizes: Option<Vec<i64>>,
    /// The scores' factor; 0 means the default 1/√(head size).
    pub scale: f32,
    /// Added to the scores of keys the mask pads out.
    pub mask_filter_value: f32,
    /// Not supported when set (the kernel refuses it).
    pub do_rotary: bool,
    /// Not supported when set (the kernel refuses it).
    pub past_present_share_buffer: bool,
}

impl Attention {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(Attention {
            num_heads: a.opt_int("num_heads")?,
            unidirectional: a.int("unidirectional", 0)?,
            qkv_hidden_sizes: a.ints("qkv_hidden_sizes")?,
            scale: a.float("scale", 0.0)?,
            mask_filter_value: a.float("mask_filter_value", -10000.0)?,
            do_rotary: a.flag("do_rotary", false)?,
            past_present_share_buffer: a.flag("past_present_share_buffer", false)?,
        }))
    }

    /// The factor scores are scaled by, for heads of `head_dim`.
    pub fn scale_for(&self, head_dim: usize) -> f32 {
        match self.scale {
            0.0 => 1.0 / (head_dim as f32).sqrt(),
            c => c,
        }
    }
}

impl Op for Attention {
    /// [batch, seq, hidden] with hidden a third of the packed weights' width.
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let w = cx.input(1).shape;
        let shape = match (x.shape.as_deref(), w.as_deref()) {
            (Some([b, s, _]), Some([_, Dim::Known(w3)])) if w3 % 3 == 0 => {
                Some(vec![b.clone(), s.clone(), Dim::Known(w3 / 3)])
            }
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        attention
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let x = &c.input(0)?.shape;
        let w = &c.input(1)?.shape;
        let [b, s, h_in] = x[..] else {
            return Err("Attention input must be [batch, seq, hidden]".into());
        };
        if w.len() != 2 || w[0] != h_in || w[1] % 3 != 0 {
            return Err(format!(
                "Attention weights {w:?} are not [{h_in}, 3·hidden]"
            ));
        }
        for (i, what) in UNSUPPORTED_INPUTS {
            if c.has_input(i) {
                return Err(format!("Attention input {i} ({what}) is not supported"));
            }
        }
        let h = w[1] / 3;
        let heads = self.num_heads.unwrap_or(0);
        if heads <= 0 || h % heads as usize != 0 {
            return Err(format!(
                "num_heads {heads} does not divide the hidden size {h}"
            ));
        }
        let heads = heads as usize;
        let d = h / heads;
        let masked = c.has_input(3);
        if masked && c.input(3)?.shape != [b, s] {
            return Err(format!(
                "mask_index {:?} (webgpu takes the raw [{b}, {s}] mask)",
                c.input(3)?.shape
            ));
        }
        // 1: the packed projection (+ bias) into scratch; 2: scores, softmax and context.
        let mut proj = wgsl::matmul(&MatMul {
            m: b * s,
            n: 3 * h,
            k: h_in,
            batch: &[],
            a_batch: vec![],
            b_batch: vec![],
            trans_a: false,
            trans_b: false,
            extra: c.has_input(2).then(|| "col".to_string()),
            epilogue: if c.has_input(2) {
                "acc + e".into()
            } else {
                "acc".into()
            },
        });
        proj.writes = vec![wgsl::Bind::Scratch(0)];
        let core = wgsl::attention_core(&wgsl::AttentionCore {
            batch: b,
            seq: s,
            heads,
            head_dim: d,
            scale: self.scale_for(d),
            filter: self.mask_filter_value,
            causal: self.unidirectional != 0,
            masked,
        })?;
        Ok(Lowered::Run {
            dispatches: vec![proj, core],
            scratch: vec![(b * s * 3 * h * 4) as u64],
        })
    }
}

/// Optional inputs neither the kernel nor the lowering supports: (position, name).
const UNSUPPORTED_INPUTS: [(usize, &str); 3] = [
    (4, "past"),
    (5, "attention_bias"),
    (6, "past_sequence_length"),
];

pub fn attention(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let x = f32_input(inputs, 0, "input")?;
    let w = f32_input(inputs, 1, "weights")?;
    let bias = opt_input(inputs, 2)
        .map(|t| t.as_f32().ok_or_else(|| unsupported_type(OP, t.dtype())))
        .transpose()?;
    for (i, what) in UNSUPPORTED_INPUTS {
        if opt_input(inputs, i).is_some() {
            return Err(format!("{OP}: input {i} ({what}) is not supported"));
        }
    }
    if ctx.node.outputs.iter().skip(1).any(|o| o.is_some()) {
        return Err(format!("{OP}: the present output is not supported"));
    }
    let a = ctx.attrs::<Attention>()?;
    let causal = match a.unidirectional {
        0 => false,
        1 => true,
        u => return Err(format!("{OP}: unidirectional must be 0 or 1, got {u}")),
    };
    for (set, name) in [
        (a.do_rotary, "do_rotary"),
        (a.past_present_share_buffer, "past_present_share_buffer"),
    ] {
        if set {
            return Err(format!("{OP}: attribute {name} != 0 is not supported"));
        }
    }
    let [b, s, h_in] = *x.shape() else {
        return Err(format!(
            "{OP}: input must be 3-D [batch, seq, hidden], got {:?}",
            x.shape()
        ));
    };
    if w.ndim() != 2 || w.shape()[0] != h_in || w.shape()[1] % 3 != 0 {
        return Err(format!(
            "{OP}: weights must be [{h_in}, 3·hidden], got {:?}",
            w.shape()
        ));
    }
    let h = w.shape()[1] / 3;
    if let Some(sizes) = &a.qkv_hidden_sizes {
        if sizes.iter().any(|&d| d != h as i64) || sizes.len() != 3 {
            return Err(format!(
                "{OP}: qkv_hidden_sizes {sizes:?} other than three equal widths are not supported"
            ));
        }
    }
    let heads = a.num_heads.unwrap_or(0);
    if heads <= 0 || h % heads as usize != 0 {
        return Err(format!(
            "{OP}: num_heads {heads} must be positive and divide the hidden size {h}"
        ));
    }
    let heads = heads as usize;
    let d = h / heads;
    if let Some(bias) = bias {
        if bias.shape() != [3 * h] {
            return Err(format!(
                "{OP}: bias must be [{}], got {:?}",
                3 * h,
                bias.shape()
            ));
        }
    }
    let mask = match opt_input(inputs, 3) {
        None => None,
        Some(Tensor::I32(m)) if m.shape() == [b, s] => Some(m),
        Some(Tensor::I32(m)) => {
            return Err(format!(
            "{OP}: mask_index of shape {:?} is not supported (only the raw 2-D mask [{b}, {s}])",
            m.shape()
        ))
        }
        Some(t) => return Err(format!("{OP}: mask_index must be int32, got {}", t.dtype())),
    };
    let scale = a.scale_for(d);
    let filter = a.mask_filter_value;
    check_out(ctx, OP, &[b, s, 3 * h], 32)?;
    check_out(ctx, OP, &[b, s, h], 32)?;

    // The packed projection [B·S, 3H], then the bias.
    let rows = b * s;
    let x2 = x
        .view()
        .into_shape_with_order((rows, h_in))
        .map_err(|e| format!("{OP}: {e}"))?;
    let w2: ArrayView2<f32> = w
        .view()
        .into_dimensionality()
        .map_err(|e| format!("{OP}: {e}"))?;
    let x2 = x2.as_standard_layout();
    let w2 = w2.as_standard_layout();
    let mut qkv = sgemm(x2.view(), w2.view());
    let qkv = qkv.as_slice_mut().ok_or("qkv is contiguous")?;
    if let Some(bias) = bias {
        let bias = elements(bias);
        for row in qkv.chunks_exact_mut(3 * h) {
            row.iter_mut().zip(bias.iter()).for_each(|(o, &v)| *o += v);
        }
    }
    let qkv = &*qkv;

    check_out(ctx, OP, &[s, s], 32)?;
    let mut out = vec![0.0f32; rows * h];
    // padded[b·S + k]: key k of batch b is masked by mask_index.
    let padded: Vec<bool> = match mask {
        Some(m) => m.iter().map(|&v| v <= 0).collect(),
        None => vec![false; rows],
    };
    // Per (batch, head): Q [S, D], Kᵀ [D, S] and V [S, D] are strided views of the packed rows
    // (no copies), the two products are MatMul's GEMM (`MatElem::gemm_acc`) into one reused
    // score buffer and straight into the head's columns of the output, and one Softmax pass
    // per score row runs between them.
    let mut scores = vec![0.0f32; s * s];
    for bi in (0..b).filter(|_| s > 0) {
        let rows_b = &qkv[bi * s * 3 * h..][..s * 3 * h];
        let pad = &padded[bi * s..][..s];
        for head in 0..heads {
            let (qo, ko, vo) = (head * d, h + head * d, 2 * h + head * d);
            let view = |at: usize, rs: usize, cs: usize| Strided {
                data: &rows_b[at..],
                rs,
                cs,
            };
            scores.fill(0.0);
            f32::gemm_acc(
                1.0,
                [s, d, s],
                view(qo, 3 * h, 1),
                view(ko, 1, 3 * h),
                &mut scores,
                s,
            );
            // The widest vectors the CPU has (`simd`) for the scaling and the softmax's exp.
            super::simd::widest(
                #[cfg_attr(target_arch = "x86_64", inline(always))]
                || {
                    for (qi, srow) in scores.chunks_exact_mut(s).enumerate() {
                        // A padded key gets the filter value added; a later key (causal) gets
                        // the lowest float added, padded or not (onnxruntime's CPU kernel: one
                        // additive mask value per score, the causal one overriding).
                        let visible = if causal { qi + 1 } else { s };
                        let (seen, later) = srow.split_at_mut(visible);
                        for (sc, &p) in seen.iter_mut().zip(pad) {
                            *sc = if p { *sc * scale + filter } else { *sc * scale };
                        }
                        for sc in later {
                            *sc = *sc * scale + f32::MIN;
                        }
                        softmax_row(srow);
                    }
                },
            );
            let y = &mut out[bi * s * h + qo..][..(s - 1) * h + d];
            f32::gemm_acc(
                1.0,
                [s, s, d],
                Strided::rows(&scores, s),
                view(vo, 3 * h, 1),
                y,
                h,
            );
        }
    }
    let out = ArrayD::from_shape_vec(IxDyn(&[b, s, h]), out).map_err(|e| format!("{OP}: {e}"))?;
    Ok(vec![Tensor::F32(out)])
}

fn f32_input<'a>(
    inputs: &[Option<&'a Tensor>],
    i: usize,
    what: &str,
) -> Result<&'a ArrayD<f32>, String> {
    let t = input(OP, inputs, i)?;
    t.as_f32()
        .ok_or_else(|| format!("{OP}: {what} must be float32, got {}", t.dtype()))
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::{f32s, i32s, i64s, run_at};
    use super::*;
    use crate::ir::{attr, Node};

    fn node(heads: i64) -> Node {
        let mut n = Node::new("Attention", crate::ir::model::MS_DOMAIN);
        n.set_attr(attr::int("num_heads", heads));
        n
    }

    /// One head of size 1, weights picking Q = K = V = x: softmax over the keys of x_q·x_k.
    #[test]
    fn one_head_matches_the_formula_and_masks_keys() {
        let x = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 3], &[1.0, 1.0, 1.0]);
        let mask = i32s(&[1, 3], &[1, 0, 1]);
        let mut n = node(1);
        n.set_attr(attr::float("mask_filter_value", f32::MIN));
        let y = run_at(attention, &n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap();
        let y = y[0].as_f32().unwrap();
        for (q, &xq) in [1.0f32, 2.0, 3.0].iter().enumerate() {
            // Key 1 is masked: weights over keys 0 and 2 only.
            let (e0, e2) = ((xq * 1.0).exp(), (xq * 3.0).exp());
            let want = (e0 * 1.0 + e2 * 3.0) / (e0 + e2);
            assert!((y[[0, q, 0]] - want).abs() < 1e-5, "{q}: {}", y[[0, q, 0]]);
        }
    }

    /// Causal: query q attends keys 0..=q; with key 0 padded, query 0 sees no key at all and the
    /// uniform softmax over the (all equally masked) row averages every value.
    #[test]
    fn causal_masks_later_keys_once() {
        let x = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 3], &[1.0, 1.0, 1.0]);
        let mask = i32s(&[1, 3], &[0, 1, 1]);
        let mut n = node(1);
        n.set_attr(attr::int("unidirectional", 1));
        n.set_attr(attr::float("mask_filter_value", f32::MIN));
        let y = run_at(attention, &n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap();
        let y = y[0].as_f32().unwrap();
        assert!((y[[0, 0, 0]] - 2.0).abs() < 1e-6, "{}", y[[0, 0, 0]]);
        assert!(
            (y[[0, 1, 0]] - 2.0).abs() < 1e-6,
            "only key 1: {}",
            y[[0, 1, 0]]
        );
        let (e1, e2) = ((3.0f32 * 2.0).exp(), (3.0f32 * 3.0).exp());
        let want = (e1 * 2.0 + e2 * 3.0) / (e1 + e2);
        assert!((y[[0, 2, 0]] - want).abs() < 1e-5, "{}", y[[0, 2, 0]]);
    }

    /// The causal part adds the lowest float, not mask_filter_value: with the default -10000,
    /// query 0 (its only key padded) still sees key 0 far above the later keys.
    #[test]
    fn causal_keys_get_the_lowest_float_whatever_the_filter() {
        let x = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 3], &[1.0, 1.0, 1.0]);
        let mask = i32s(&[1, 3], &[0, 1, 1]);
        let mut n = node(1);
        n.set_attr(attr::int("unidirectional", 1));
        let y = run_at(attention, &n, 1, &[Some(&x), Some(&w), None, Some(&mask)]).unwrap();
        let y = y[0].as_f32().unwrap();
        assert!((y[[0, 0, 0]] - 1.0).abs() < 1e-6, "{}", y[[0, 0, 0]]);
        assert!((y[[0, 1, 0]] - 2.0).abs() < 1e-6, "{}", y[[0, 1, 0]]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = f32s(&[1, 2, 4], &[0.0; 8]);
        let w = f32s(&[4, 12], &[0.0; 48]);
        let run = |n: &Node, ins: &[Option<&Tensor>]| run_at(attention, n, 1, ins).unwrap_err();
        assert!(run(&node(3), &[Some(&x), Some(&w)]).contains("must be positive and divide"));
        assert!(run(&node(0), &[Some(&x), Some(&w)]).contains("num_heads 0"));
        let w_bad = f32s(&[3, 12], &[0.0; 36]);
        assert!(run(&node(2), &[Some(&x), Some(&w_bad)]).contains("weights must be [4, 3·hidden]"));
        let mask_1d = i32s(&[1], &[2]);
        let e = run(&node(2), &[Some(&x), Some(&w), None, Some(&mask_1d)]);
        assert!(
            e.contains("mask_index of shape [1] is not supported"),
            "{e}"
        );
        let mask_i64 = i64s(&[1, 2], &[1, 1]);
        let e = run(&node(2), &[Some(&x), Some(&w), None, Some(&mask_i64)]);
        assert!(e.contains("must be int32"), "{e}");
        let mut uni = node(2);
        uni.set_attr(attr::int("unidirectional", 2));
        assert!(run(&uni, &[Some(&x), Some(&w)]).contains("unidirectional must be 0 or 1"));
        let past = f32s(&[1], &[0.0]);
        let e = run(&node(2), &[Some(&x), Some(&w), None, None, Some(&past)]);
        assert!(e.contains("past"), "{e}");
        let x2 = f32s(&[2, 4], &[0.0; 8]);
        assert!(run(&node(2), &[Some(&x2), Some(&w)]).contains("must be 3-D"));
    }
}
