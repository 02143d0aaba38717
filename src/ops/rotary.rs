//! Rotary position embeddings (RoPE): ai.onnx RotaryEmbedding and onnxruntime's com.microsoft
//! RotaryEmbedding (docs/ContribOperators.md), on one rotation core.
//!
//! | op | domain, versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | RotaryEmbedding | ai.onnx 23- | `interleaved` (0), `rotary_embedding_dim` (0: the head size), `num_heads` (required for 3-D X) | X: T, cos_cache: T, sin_cache: T, position_ids?: int64 -> Y: T; T float |
//! | RotaryEmbedding | com.microsoft 1 | `interleaved` (0), `is_packed_batching` (0; 1 refused), `num_heads` (0), `rotary_embedding_dim` (0), `scale` (1.0; other values refused) | input: T, position_ids: int64, cos_cache: T, sin_cache: T -> output: T |
//!
//! X is 4-D `[batch, num_heads, seq, head]` or 3-D `[batch, seq, num_heads * head]`. The first
//! `rot` elements of each head vector are rotated in pairs (`x[i]`, `x[i + rot/2]`), or with
//! `interleaved` (`x[2i]`, `x[2i + 1]`), by the angle whose cosine and sine are row `r` of the
//! caches, column `i`: `(x1·cos − x2·sin, x1·sin + x2·cos)`; the rest of the head is copied.
//!
//! The row: ai.onnx with `position_ids` `[batch or 1, seq]` reads the caches `[max_pos, rot/2]`
//! at the token's position id; without, the caches are `[batch or 1, seq, rot/2]` and the row is
//! the token's own. com.microsoft's `position_ids` is `[batch, seq]` (a position per token) or
//! `[1]` (a start: token `s` sits at `position_ids[0] + s`); its caches are `[max_pos, rot/2]`;
//! `rot` is `rotary_embedding_dim` when given (then `num_heads` must be too, for 3-D input), else
//! twice the caches' width. A position outside the caches is an error. onnxruntime's kernels
//! take no `scale` and no packed batching; both are refused rather than guessed. float16 runs
//! through the executor's widening (computed in float32, each output rounded once to float16).
//! On WebGPU the com.microsoft op is one dispatch in float32 (`wgsl::rotary`), which is how that
//! backend holds float16 tensors (`wgsl::Ty::of`).

use std::borrow::Cow;

use super::common::{check_out, input, unsupported_type};
use super::lanes::elements;
use super::lowering::{run, Lowered, NodeCtx, Ty};
use super::transformer::{required, shaped, Real};
use super::wgsl::{self, RotaryRows};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

type P = Result<Box<dyn Op>, String>;

/// ai.onnx RotaryEmbedding (23).
#[derive(Debug)]
pub struct RotaryEmbedding {
    pub interleaved: bool,
    /// 0: the whole head.
    pub rotary_embedding_dim: i64,
    /// 0: not given (required for 3-D input).
    pub num_heads: i64,
}

impl RotaryEmbedding {
    pub fn parse(a: &Attrs) -> P {
        let (rotary_embedding_dim, num_heads) = dims_attrs(a, "RotaryEmbedding")?;
        Ok(Box::new(RotaryEmbedding {
            interleaved: a.flag("interleaved", false)?,
            rotary_embedding_dim,
            num_heads,
        }))
    }
}

/// com.microsoft RotaryEmbedding (onnxruntime's contract).
#[derive(Debug)]
pub struct MsRotaryEmbedding {
    pub interleaved: bool,
    pub rotary_embedding_dim: i64,
    pub num_heads: i64,
}

impl MsRotaryEmbedding {
    pub fn parse(a: &Attrs) -> P {
        const OP: &str = "RotaryEmbedding";
        if a.flag("is_packed_batching", false)? {
            return Err(format!(
                "{OP}: attribute 'is_packed_batching' = 1 (ragged batches) is not implemented"
            ));
        }
        let scale = a.float("scale", 1.0)?;
        if scale != 1.0 {
            return Err(format!(
                "{OP}: attribute 'scale' = {scale} is not implemented (onnxruntime's kernels \
                 take no scale; only 1.0 is accepted)"
            ));
        }
        let (rotary_embedding_dim, num_heads) = dims_attrs(a, OP)?;
        Ok(Box::new(MsRotaryEmbedding {
            interleaved: a.flag("interleaved", false)?,
            rotary_embedding_dim,
            num_heads,
        }))
    }
}

fn dims_attrs(a: &Attrs, op: &str) -> Result<(i64, i64), String> {
    let rot = a.int("rotary_embedding_dim", 0)?;
    let heads = a.int("num_heads", 0)?;
    if rot < 0 || rot % 2 != 0 {
        return Err(format!(
            "{op}: attribute 'rotary_embedding_dim' = {rot} must be even and not negative"
        ));
    }
    if heads < 0 {
        return Err(format!(
            "{op}: attribute 'num_heads' = {heads} must not be negative"
        ));
    }
    Ok((rot, heads))
}

/// Y has X's type and shape.
fn infer_same(cx: &InferCx) -> Vec<TensorType> {
    vec![cx.input(0)]
}

impl Op for MsRotaryEmbedding {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        infer_same(cx)
    }
    fn kernel(&self) -> Kernel {
        rotary_ms
    }
    /// One dispatch (`wgsl::rotary`), float32 (float16 held as float32), for the shapes the
    /// reference kernel accepts.
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let g = lowered_geometry(c, self.num_heads, self.rotary_embedding_dim, 2)?;
        if c.input(2)?.shape.len() != 2 {
            return Err("RotaryEmbedding: cos_cache must be 2-D".into());
        }
        let rows_from = match c.input(1)?.shape[..] {
            [1] => RotaryRows::Start,
            [b, s] if b == g.batch && s == g.seq => RotaryRows::PerToken,
            ref pos => {
                return Err(format!(
                    "RotaryEmbedding: position_ids {pos:?} is neither [1] nor [batch, seq]"
                ))
            }
        };
        lower_rotation(c, &g, self.interleaved, rows_from, 2)
    }
}

impl Op for RotaryEmbedding {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        infer_same(cx)
    }
    fn kernel(&self) -> Kernel {
        rotary_onnx
    }
    /// The same dispatch as com.microsoft's, its bindings in this op's input order: position ids
    /// `[batch or 1, seq]` into caches `[max_pos, rot/2]`, or per-token caches `[batch or 1, seq,
    /// rot/2]` without them.
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let g = lowered_geometry(c, self.num_heads, self.rotary_embedding_dim, 1)?;
        let cos = &c.input(1)?.shape;
        // Row b · seq + s when the rows are per batch row, row s when one row serves them all.
        let per_batch = |b: usize| match b {
            1 => Some(false),
            b if b == g.batch => Some(true),
            _ => None,
        };
        let rows_from = if c.has_input(3) {
            match (&c.input(3)?.shape[..], cos.len()) {
                ([b, s], 2) if *s == g.seq => {
                    per_batch(*b).map(|per_batch| RotaryRows::StandardIds { per_batch })
                }
                _ => None,
            }
        } else {
            match cos[..] {
                [b, s, _] if s == g.seq => {
                    per_batch(b).map(|per_batch| RotaryRows::StandardTable { per_batch })
                }
                _ => None,
            }
        };
        let rows_from = rows_from.ok_or_else(|| {
            format!("RotaryEmbedding: caches {cos:?} do not give a row per token of x")
        })?;
        lower_rotation(c, &g, self.interleaved, rows_from, 1)
    }
}

/// X's geometry for a lowering, the rotated width `rot` fitted to the caches (input `cos_at`,
/// last axis rot/2).
fn lowered_geometry(c: &NodeCtx, heads: i64, rot: i64, cos_at: usize) -> Result<Geometry, String> {
    const OP: &str = "RotaryEmbedding";
    if c.ty(0)? != Ty::F32 {
        return Err(format!("{OP} on webgpu takes float32 and float16 only"));
    }
    let cos = &c.input(cos_at)?.shape;
    let width = *cos
        .last()
        .ok_or_else(|| format!("{OP}: cos_cache is a scalar"))?;
    let rot = rot as usize;
    let hint = if rot == 0 { width * 2 } else { 0 };
    let mut g = Geometry::of(OP, &c.input(0)?.shape, heads as usize, hint)?;
    g.rot = if rot == 0 { hint } else { rot };
    if g.rot > g.head || g.rot != width * 2 {
        return Err(format!(
            "{OP}: rotary dim {} does not fit head {} and caches {cos:?}",
            g.rot, g.head
        ));
    }
    Ok(g)
}

fn lower_rotation(
    c: &NodeCtx,
    g: &Geometry,
    interleaved: bool,
    rows_from: RotaryRows,
    cos_at: usize,
) -> Result<Lowered, String> {
    let cos = &c.input(cos_at)?.shape;
    run(wgsl::rotary(&wgsl::Rotary {
        batch: g.batch,
        seq: g.seq,
        heads: g.heads,
        head: g.head,
        rot: g.rot,
        bnsh: g.bnsh,
        interleaved,
        rows_from,
        rows: cos[..cos.len() - 1].iter().product(),
    }))
}

// ---------------------------------------------------------------------------------------------
// The rotation core

/// Where the head vectors sit in X and how much of each is rotated.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    batch: usize,
    seq: usize,
    heads: usize,
    head: usize,
    /// Elements rotated at the front of each head (even, <= head).
    rot: usize,
    /// `[batch, heads, seq, head]` (4-D X); otherwise `[batch, seq, heads * head]`.
    bnsh: bool,
    interleaved: bool,
}

impl Geometry {
    /// X's layout: 4-D `[B, N, S, H]` or 3-D `[B, S, N*H]` with `heads` (0 = not known) and
    /// `head_hint` (the head size when `heads` is not given, 0 = none).
    fn of(op: &str, shape: &[usize], heads: usize, head_hint: usize) -> Result<Geometry, String> {
        let (batch, seq, heads, head, bnsh) = match *shape {
            [b, n, s, h] => (b, s, n, h, true),
            [b, s, hidden] => {
                let n = if heads > 0 {
                    heads
                } else if head_hint > 0 && hidden.is_multiple_of(head_hint) {
                    hidden / head_hint
                } else {
                    return Err(format!(
                        "{op}: 3-D input [batch, seq, hidden] needs attribute 'num_heads'"
                    ));
                };
                if !hidden.is_multiple_of(n) {
                    return Err(format!(
                        "{op}: the hidden size {hidden} is not a multiple of num_heads = {n}"
                    ));
                }
                (b, s, n, hidden / n, false)
            }
            _ => {
                return Err(format!(
                    "{op}: input must be 3-D [batch, seq, hidden] or 4-D [batch, heads, seq, \
                     head], got shape {shape:?}"
                ))
            }
        };
        Ok(Geometry {
            batch,
            seq,
            heads,
            head,
            rot: head,
            bnsh,
            interleaved: false,
        })
    }

    /// Offset of head `n` of token (`b`, `s`).
    fn offset(&self, b: usize, s: usize, n: usize) -> usize {
        let h = self.head;
        if self.bnsh {
            ((b * self.heads + n) * self.seq + s) * h
        } else {
            ((b * self.seq + s) * self.heads + n) * h
        }
    }
}

/// The caches as `[rows, rot/2]` tables and the row each token (`b * seq + s`) reads.
struct Angles<'a, T: Clone> {
    cos: Cow<'a, [T]>,
    sin: Cow<'a, [T]>,
    rows: Vec<usize>,
}

/// `x` rotated as `g` says; `angles.rows` are in range (checked by the callers).
fn rotate<T: Real>(x: &[T], g: &Geometry, a: &Angles<T>) -> Vec<T> {
    let mut out = x.to_vec();
    let half = g.rot / 2;
    for b in 0..g.batch {
        for s in 0..g.seq {
            let r = a.rows[b * g.seq + s] * half;
            let (cos, sin) = (&a.cos[r..r + half], &a.sin[r..r + half]);
            for n in 0..g.heads {
                let o = g.offset(b, s, n);
                let (src, dst) = (&x[o..o + g.rot], &mut out[o..o + g.rot]);
                for i in 0..half {
                    let (i1, i2) = if g.interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (x1, x2) = (src[i1], src[i2]);
                    dst[i1] = cos[i] * x1 - sin[i] * x2;
                    dst[i2] = sin[i] * x1 + cos[i] * x2;
                }
            }
        }
    }
    out
}

/// Sets `g.rot` from `rot` (0: the head), checking it fits the head and the caches'
/// `[.., rot/2]` shapes.
fn fit_rot<T: Real>(
    op: &str,
    g: &mut Geometry,
    rot: usize,
    cos: &ndarray::ArrayD<T>,
    sin: &ndarray::ArrayD<T>,
) -> Result<(), String> {
    g.rot = if rot == 0 { g.head } else { rot };
    if g.rot > g.head || !g.rot.is_multiple_of(2) {
        return Err(format!(
            "{op}: the rotary dim {} must be even and at most the head size {}",
            g.rot, g.head
        ));
    }
    if cos.shape() != sin.shape() {
        return Err(format!(
            "{op}: cos_cache {:?} and sin_cache {:?} differ in shape",
            cos.shape(),
            sin.shape()
        ));
    }
    match cos.shape().last() {
        Some(&w) if w == g.rot / 2 => Ok(()),
        _ => Err(format!(
            "{op}: the caches' last dim must be rot/2 = {}, got shape {:?}",
            g.rot / 2,
            cos.shape()
        )),
    }
}

/// Checks every row against the caches' `n_rows`.
fn check_rows(op: &str, rows: &[usize], n_rows: usize) -> Result<(), String> {
    match rows.iter().find(|&&r| r >= n_rows) {
        Some(r) => Err(format!(
            "{op}: position {r} is outside the caches' {n_rows} rows"
        )),
        None => Ok(()),
    }
}

/// Position ids as rows (negative ones are out of range).
fn positions(op: &str, t: &Tensor) -> Result<Vec<usize>, String> {
    let v = t
        .to_i64_vec()
        .ok_or_else(|| format!("{op}: position_ids must be int64, got {}", t.dtype()))?;
    Ok(v.into_iter()
        .map(|p| usize::try_from(p).unwrap_or(usize::MAX))
        .collect())
}

/// Row `b` of a `[batch or 1, seq]` table of rows.
fn per_token(
    op: &str,
    what: &str,
    shape: &[usize],
    g: &Geometry,
    v: &[usize],
) -> Result<Vec<usize>, String> {
    let pb = match *shape {
        [pb, s] if s == g.seq && (pb == g.batch || pb == 1) => pb,
        _ => {
            return Err(format!(
                "{op}: {what} must be [batch or 1, seq] = [{}, {}], got {shape:?}",
                g.batch, g.seq
            ))
        }
    };
    let mut rows = Vec::with_capacity(g.batch * g.seq);
    for b in 0..g.batch {
        let b = if pb == 1 { 0 } else { b };
        rows.extend_from_slice(&v[b * g.seq..(b + 1) * g.seq]);
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// ai.onnx RotaryEmbedding

fn rotary_onnx(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    match input("RotaryEmbedding", inputs, 0)? {
        Tensor::F32(_) => rotary_onnx_typed::<f32>(ctx, inputs),
        Tensor::F64(_) => rotary_onnx_typed::<f64>(ctx, inputs),
        t => Err(unsupported_type("RotaryEmbedding", t.dtype())),
    }
}

fn rotary_onnx_typed<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "RotaryEmbedding";
    let p = ctx.attrs::<RotaryEmbedding>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let (cos, sin) = (required::<T>(OP, inputs, 1)?, required::<T>(OP, inputs, 2)?);
    let mut g = Geometry::of(OP, x.shape(), p.num_heads as usize, 0)?;
    g.interleaved = p.interleaved;
    fit_rot(OP, &mut g, p.rotary_embedding_dim as usize, cos, sin)?;
    check_out(ctx, OP, x.shape(), T::DTYPE.bits().unwrap_or(64))?;
    let rows = match super::common::opt_input(inputs, 3) {
        Some(pos) => {
            if cos.ndim() != 2 {
                return Err(format!(
                    "{OP}: with position_ids the caches are [max_position, rot/2], got {:?}",
                    cos.shape()
                ));
            }
            let rows = per_token(OP, "position_ids", pos.shape(), &g, &positions(OP, pos)?)?;
            check_rows(OP, &rows, cos.shape()[0])?;
            rows
        }
        None => match *cos.shape() {
            [cb, s, _] if s == g.seq && (cb == g.batch || cb == 1) => {
                let ids: Vec<usize> = (0..cb * s).collect();
                per_token(OP, "the caches' [batch, seq]", &[cb, s], &g, &ids)?
            }
            _ => {
                return Err(format!(
                    "{OP}: without position_ids the caches are [batch, seq, rot/2] = [{}, {}, \
                     {}], got {:?}",
                    g.batch,
                    g.seq,
                    g.rot / 2,
                    cos.shape()
                ))
            }
        },
    };
    let angles = Angles {
        cos: elements(cos),
        sin: elements(sin),
        rows,
    };
    let out = rotate(&elements(x), &g, &angles);
    Ok(vec![shaped(OP, x.shape(), out)?])
}

// ---------------------------------------------------------------------------------------------
// com.microsoft RotaryEmbedding

fn rotary_ms(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    match input("RotaryEmbedding", inputs, 0)? {
        Tensor::F32(_) => rotary_ms_typed::<f32>(ctx, inputs),
        Tensor::F64(_) => rotary_ms_typed::<f64>(ctx, inputs),
        t => Err(unsupported_type("RotaryEmbedding", t.dtype())),
    }
}

fn rotary_ms_typed<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "RotaryEmbedding";
    let p = ctx.attrs::<MsRotaryEmbedding>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let pos = input(OP, inputs, 1)?;
    let (cos, sin) = (required::<T>(OP, inputs, 2)?, required::<T>(OP, inputs, 3)?);
    let [max_pos, width] = *cos.shape() else {
        return Err(format!(
            "{OP}: cos_cache must be 2-D [max_position, rot/2], got {:?}",
            cos.shape()
        ));
    };
    let rot = p.rotary_embedding_dim as usize;
    if rot > 0 && p.num_heads == 0 && x.ndim() == 3 {
        return Err(format!(
            "{OP}: attribute 'rotary_embedding_dim' needs 'num_heads' for 3-D input"
        ));
    }
    // Without rotary_embedding_dim the head is as wide as the caches say.
    let hint = if rot == 0 { width.saturating_mul(2) } else { 0 };
    let mut g = Geometry::of(OP, x.shape(), p.num_heads as usize, hint)?;
    g.interleaved = p.interleaved;
    fit_rot(OP, &mut g, if rot == 0 { hint } else { rot }, cos, sin)?;
    check_out(ctx, OP, x.shape(), T::DTYPE.bits().unwrap_or(64))?;
    let ids = positions(OP, pos)?;
    let rows = match (pos.shape(), ids.as_slice()) {
        ([1], &[start]) => (0..g.batch)
            .flat_map(|_| (0..g.seq).map(move |s| start.saturating_add(s)))
            .collect(),
        (shape, _) => per_token(OP, "position_ids", shape, &g, &ids)?,
    };
    check_rows(OP, &rows, max_pos)?;
    let angles = Angles {
        cos: elements(cos),
        sin: elements(sin),
        rows,
    };
    let out = rotate(&elements(x), &g, &angles);
    Ok(vec![shaped(OP, x.shape(), out)?])
}

#[cfg(test)]
#[path = "rotary_tests.rs"]
mod tests;
