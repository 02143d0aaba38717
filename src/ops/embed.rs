//! com.microsoft EmbedLayerNormalization (onnxruntime's docs/ContribOperators.md).
//!
//! | op | domain, versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | EmbedLayerNormalization | com.microsoft 1 | `epsilon` (1e-12) | input_ids, segment_ids?, word_embedding, position_embedding, segment_embedding?, gamma, beta, mask?, position_ids? -> output, mask_index, embedding_sum? |
//!
//! The kernel works in one pass per token: the token's word row, segment row (when given) and
//! position row are summed straight into the output, the sum is copied out when `embedding_sum`
//! is asked for, and the row is then normalized in place by the same row normalization as
//! LayerNormalization (`transformer.rs`), statistics in float32.
//!
//! Inputs: input_ids [B, S], segment_ids? [B, S], word_embedding [V, H], position_embedding
//! [P, H], segment_embedding? [G, H], gamma [H], beta [H], mask? [B, S], position_ids? [B, S] or
//! [1, S]. Ids, mask and position ids are int32 (the schema's only `T1`), tables and gamma/beta
//! float32. segment_ids and segment_embedding come together or not at all.
//!
//! Outputs: output [B, S, H]; mask_index [B] int32; embedding_sum? [B, S, H] (the sum before
//! normalization). Without position_ids, token `s` reads position row `s`. mask_index[b] counts
//! the entries of mask row `b` equal to 1 (for a right-padded 1…10…0 mask: the position of the
//! first 0, the "number of words" the schema describes; onnxruntime's CPU kernel counts the same
//! way for other masks too); without a mask it is all zeros.
//!
//! Every id is bound-checked against its table: an id (word, segment or position) outside
//! [0, rows) is an error naming the input, the token and the table size, never a read out of
//! bounds. Negative ids are errors too (onnxruntime's kernel rejects them; ONNX Gather would
//! wrap them). A sequence longer than the position table, without position_ids, is an error.
//!
//! WebGPU: one dispatch (`wgsl::embed_layer_norm`), plus one writing mask_index's zeros; the
//! mask input is not supported there.

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, opt_input};
use super::lanes::elements;
use super::lowering::{NodeCtx, Ty, R};
use super::transformer::{normalize_row, shaped, vector_param, wanted};
use super::wgsl;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

const OP: &str = "EmbedLayerNormalization";

#[derive(Debug)]
pub struct EmbedLayerNormalization {
    pub epsilon: f32,
}

impl EmbedLayerNormalization {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(EmbedLayerNormalization {
            epsilon: a.float("epsilon", 1e-12)?,
        }))
    }
}

impl Op for EmbedLayerNormalization {
    /// output and embedding_sum are [B, S, H] of the word table's type (H its dim 1), mask_index
    /// int32 [B]; [B, S] is input_ids' shape.
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let ids = cx.input(0);
        let table = cx.input(2);
        let ids_dims = ids.shape.as_ref().filter(|s| s.len() == 2);
        let hidden = table
            .shape
            .as_ref()
            .filter(|s| s.len() == 2)
            .map(|s| s[1].clone());
        let out = TensorType {
            dtype: table.dtype,
            shape: ids_dims
                .map(|s| vec![s[0].clone(), s[1].clone(), hidden.unwrap_or(Dim::Unknown)]),
        };
        let mask_index = TensorType {
            dtype: Some(DType::I32),
            shape: ids_dims.map(|s| vec![s[0].clone()]),
        };
        vec![out.clone(), mask_index, out]
    }
    fn kernel(&self) -> Kernel {
        embed_layer_norm
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let ids = &c.input(0)?.shape;
        let [b, s] = ids[..] else {
            return Err("input_ids must be [batch, seq]".into());
        };
        let word = &c.input(2)?.shape;
        let pos = &c.input(3)?.shape;
        let hidden = *word.last().ok_or("word_embedding must be 2-D")?;
        if c.has_input(7) {
            return Err("the mask input has no webgpu kernel yet".into());
        }
        let segments = if c.has_input(1) && c.has_input(4) {
            Some(c.input(4)?.shape[0])
        } else {
            None
        };
        let embed = wgsl::embed_layer_norm(&wgsl::Embed {
            batch: b,
            seq: s,
            hidden,
            words: word[0],
            positions: pos[0],
            segments,
            position_rows: if c.has_input(8) {
                Some(c.input(8)?.shape[0])
            } else {
                None
            },
            epsilon: self.epsilon,
            sum_out: c.has_out(2),
        })?;
        let mut dispatches = vec![embed];
        if c.has_out(1) {
            // Without a mask input, mask_index is all zeros (the reference kernel's contract).
            let mut zeros = wgsl::elementwise(&c.out(1)?.shape, Ty::I32, &[], "0i");
            zeros.writes = vec![wgsl::Bind::Out(1)];
            dispatches.push(zeros);
        }
        Ok(Lowered::Run {
            dispatches,
            scratch: vec![],
        })
    }
}

/// An int32 input of shape [B, S] (or [1, S] where `allow_one_row`), as row-major elements.
fn ids<'a>(
    what: &str,
    t: &'a Tensor,
    b: usize,
    s: usize,
    allow_one_row: bool,
) -> Result<Cow<'a, [i32]>, String> {
    let Tensor::I32(a) = t else {
        return Err(format!("{OP}: {what} must be int32, got {}", t.dtype()));
    };
    let ok = a.shape() == [b, s] || (allow_one_row && a.shape() == [1, s]);
    if !ok {
        let also = if allow_one_row { " or [1, S]" } else { "" };
        return Err(format!(
            "{OP}: {what} has shape {:?}; it must be [B, S] = [{b}, {s}]{also} (input_ids' shape)",
            a.shape()
        ));
    }
    Ok(elements(a))
}

/// A 2-D float32 embedding table: (row-major elements, rows).
struct Table<'a> {
    what: &'static str,
    data: Cow<'a, [f32]>,
    rows: usize,
}

impl<'a> Table<'a> {
    fn read(what: &'static str, t: &'a Tensor, h: Option<usize>) -> Result<Table<'a>, String> {
        let Tensor::F32(a) = t else {
            return Err(format!("{OP}: {what} must be float32, got {}", t.dtype()));
        };
        let &[rows, cols] = a.shape() else {
            return Err(format!(
                "{OP}: {what} must be 2-D [rows, hidden], got shape {:?}",
                a.shape()
            ));
        };
        if let Some(h) = h.filter(|&h| h != cols) {
            return Err(format!(
                "{OP}: {what} has hidden size {cols}, word_embedding has {h}"
            ));
        }
        Ok(Table {
            what,
            data: elements(a),
            rows,
        })
    }

    /// Row `id` for token (b, s), bound-checked.
    fn row(&self, id: i32, h: usize, ids: &str, b: usize, s: usize) -> Result<&[f32], String> {
        match usize::try_from(id) {
            Ok(r) if r < self.rows => Ok(&self.data[r * h..][..h]),
            _ => Err(format!(
                "{OP}: {ids}[{b}, {s}] = {id} is out of range: {} has {} rows",
                self.what, self.rows
            )),
        }
    }
}

fn f32_vector<'a>(
    inputs: &[Option<&'a Tensor>],
    i: usize,
    what: &str,
) -> Result<&'a ArrayD<f32>, String> {
    match input(OP, inputs, i)? {
        Tensor::F32(a) => Ok(a),
        t => Err(format!("{OP}: {what} must be float32, got {}", t.dtype())),
    }
}

/// The reference kernel; see the module doc for the contract.
pub fn embed_layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    if inputs.len() > 9 {
        return Err(format!(
            "{OP}: takes at most 9 inputs, got {}",
            inputs.len()
        ));
    }
    let ids_t = input(OP, inputs, 0)?;
    let &[b, s] = ids_t.shape() else {
        return Err(format!(
            "{OP}: input_ids must be 2-D [batch, sequence], got shape {:?}",
            ids_t.shape()
        ));
    };
    let word_ids = ids("input_ids", ids_t, b, s, false)?;
    let word_t = input(OP, inputs, 2)?;
    let word = Table::read("word_embedding", word_t, None)?;
    let h = word_t.shape()[1];
    if h == 0 {
        return Err(format!("{OP}: hidden size (word_embedding's dim 1) is 0"));
    }
    let pos = Table::read("position_embedding", input(OP, inputs, 3)?, Some(h))?;
    let segment = match (opt_input(inputs, 1), opt_input(inputs, 4)) {
        (None, None) => None,
        (Some(sid), Some(tab)) => Some((
            ids("segment_ids", sid, b, s, false)?,
            Table::read("segment_embedding", tab, Some(h))?,
        )),
        (Some(_), None) => {
            return Err(format!(
                "{OP}: segment_ids is given without segment_embedding"
            ))
        }
        (None, Some(_)) => {
            return Err(format!(
                "{OP}: segment_embedding is given without segment_ids"
            ))
        }
    };
    let gamma = vector_param(OP, "gamma", f32_vector(inputs, 5, "gamma")?, h)?;
    let beta = vector_param(OP, "beta", f32_vector(inputs, 6, "beta")?, h)?;
    let mask = opt_input(inputs, 7)
        .map(|m| ids("mask", m, b, s, false))
        .transpose()?;
    let position_ids = opt_input(inputs, 8)
        .map(|p| ids("position_ids", p, b, s, true))
        .transpose()?;
    if position_ids.is_none() && s > pos.rows {
        return Err(format!(
            "{OP}: sequence length {s} exceeds position_embedding's {} rows (and no position_ids \
             are given)",
            pos.rows
        ));
    }
    let eps = ctx.attrs::<EmbedLayerNormalization>()?.epsilon;
    let (n_out, want) = wanted(ctx, OP, 3)?;
    let out_shape = [b, s, h];
    check_out(ctx, OP, &out_shape, 32)?;
    if want[2] {
        check_out(ctx, OP, &out_shape, 32)?;
    }

    let tokens = b * s;
    let mut y = vec![0f32; tokens * h];
    let mut sum = if want[2] {
        vec![0f32; tokens * h]
    } else {
        Vec::new()
    };
    for (t, row) in y.chunks_exact_mut(h).enumerate() {
        let (bi, si) = (t / s, t % s);
        let w = word.row(word_ids[t], h, "input_ids", bi, si)?;
        row.copy_from_slice(w);
        if let Some((seg_ids, seg)) = &segment {
            let g = seg.row(seg_ids[t], h, "segment_ids", bi, si)?;
            row.iter_mut().zip(g).for_each(|(o, &v)| *o += v);
        }
        let p = match &position_ids {
            None => &pos.data[si * h..][..h],
            Some(p) => {
                let k = if p.len() == tokens { t } else { si };
                pos.row(p[k], h, "position_ids", k / s, k % s)?
            }
        };
        row.iter_mut().zip(p).for_each(|(o, &v)| *o += v);
        if want[2] {
            sum[t * h..][..h].copy_from_slice(row);
        }
        normalize_row::<f32, f32>(row, &gamma, Some(&beta), eps);
    }

    let mut outs = vec![shaped(OP, &out_shape, y)?];
    if n_out > 1 {
        let counts: Vec<i32> = match (&mask, want[1]) {
            (Some(m), true) if s > 0 => m
                .chunks_exact(s)
                .map(|r| r.iter().filter(|&&v| v == 1).count() as i32)
                .collect(),
            (_, true) => vec![0; b],
            (_, false) => Vec::new(),
        };
        let shape = if want[1] { [b] } else { [0] };
        outs.push(Tensor::I32(
            ArrayD::from_shape_vec(IxDyn(&shape), counts).map_err(|e| format!("{OP}: {e}"))?,
        ));
    }
    if n_out > 2 {
        outs.push(if want[2] {
            shaped(OP, &out_shape, sum)?
        } else {
            Tensor::F32(ArrayD::zeros(IxDyn(&[0])))
        });
    }
    Ok(outs)
}

#[cfg(test)]
#[path = "embed_tests.rs"]
mod tests;
