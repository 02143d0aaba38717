//! ai.onnx data layout: Tile, ReverseSequence, DepthToSpace, SpaceToDepth and Size. Each kernel
//! is one generic copy (`gather_scatter::take`) over the offsets a strided walk of the input
//! visits; output sizes are checked against the limits before anything is allocated.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | Tile | 6, 13 | none | input, repeats (int64, one per dim, >= 0) -> output_dim[i] = input_dim[i] * repeats[i] |
//! | ReverseSequence | 10, 28 | `batch_axis` (1), `time_axis` (0), each 0 or 1 and different | input (rank >= 2), sequence_lens (int64, [batch]) -> the first sequence_lens[b] steps of batch b reversed |
//! | DepthToSpace | 1 | `blocksize` (required) | input [N, C, H, W] -> [N, C/bs², H·bs, W·bs], DCR order |
//! | DepthToSpace | 11, 13, 28 | `blocksize` (required), `mode` ("DCR"; "CRD") | as 1 in the given order |
//! | SpaceToDepth | 1, 13 | `blocksize` (required) | input [N, C, H, W] -> [N, C·bs², H/bs, W/bs], DCR order |
//! | SpaceToDepth | 28 | `blocksize` (required), `mode` ("DCR"; "CRD") | as 1 in the given order |
//! | Size | 1, 13, 19, 21, 23, 24, 25 | none | data -> int64 scalar, its element count |
//!
//! Version changes: Tile 1 (tiles and axis inputs) is not covered; DepthToSpace gains `mode`
//! in 11 and SpaceToDepth in 28 (before, DCR only, the attribute is not read). Every other
//! listed version only adds element types. DCR orders the moved block as (row, column, depth),
//! CRD as (depth, row, column): DepthToSpace DCR is x.reshape(N, bs, bs, C', H, W) transposed
//! (0, 3, 4, 1, 5, 2), CRD x.reshape(N, C', bs, bs, H, W) transposed (0, 1, 4, 2, 5, 3);
//! SpaceToDepth is the inverse of each.

use ndarray::ArrayD;

use super::common::{bits, check_out, input, int_list};
use super::gather_scatter::{index_values, strides_of, take_tensor, Starts};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

super::plain_ops!(Tile, Size);

/// `d * m / q` for inference: exact known numbers; a symbol only when it is unchanged.
fn scale_dim(d: &Dim, m: i64, q: i64) -> Dim {
    match d {
        Dim::Known(k) => match k.checked_mul(m) {
            Some(p) if q > 0 && p % q == 0 => Dim::Known(p / q),
            _ => Dim::Unknown,
        },
        d if m == q => d.clone(),
        _ => Dim::Unknown,
    }
}

impl Op for Tile {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = match (&x.shape, cx.ints(1)) {
            (Some(s), Some(r)) if r.len() == s.len() && r.iter().all(|&v| v >= 0) => {
                Some(s.iter().zip(&r).map(|(d, &k)| scale_dim(d, k, 1)).collect())
            }
            (Some(s), None) => Some(vec![Dim::Unknown; s.len()]),
            _ => None,
        };
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        tile
    }
}

impl Op for Size {
    fn infer(&self, _: &InferCx) -> Vec<TensorType> {
        vec![TensorType::new(DType::I64, vec![])]
    }
    fn kernel(&self) -> Kernel {
        size
    }
    fn reads_only_shapes(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct ReverseSequence {
    pub batch_axis: usize,
    pub time_axis: usize,
}

impl ReverseSequence {
    pub fn parse(a: &Attrs) -> P {
        let (b, t) = (a.int("batch_axis", 1)?, a.int("time_axis", 0)?);
        match (b, t) {
            (0, 1) | (1, 0) => Ok(Box::new(ReverseSequence {
                batch_axis: b as usize,
                time_axis: t as usize,
            })),
            _ => Err(format!(
                "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order, got \
                 {b} and {t}"
            )),
        }
    }
}

impl Op for ReverseSequence {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        reverse_sequence
    }
}

/// DepthToSpace and SpaceToDepth's attributes.
#[derive(Debug)]
pub struct Blocks {
    pub blocksize: usize,
    /// Column-row-depth order (`mode` "CRD"); false: the default DCR.
    pub crd: bool,
}

impl Blocks {
    fn parse(op: &str, a: &Attrs, mode_since: i64) -> Result<Blocks, String> {
        let bs = a
            .opt_int("blocksize")?
            .ok_or_else(|| format!("{op}: attribute 'blocksize' is required"))?;
        if bs < 1 || bs > u32::MAX as i64 {
            return Err(format!("{op}: blocksize must be >= 1, got {bs}"));
        }
        let mode = if a.opset >= mode_since {
            a.string("mode")?
        } else {
            None
        };
        let crd = match mode.as_deref() {
            None | Some("DCR") => false,
            Some("CRD") => true,
            Some(m) => return Err(format!("{op}: mode '{m}' is not DCR or CRD")),
        };
        Ok(Blocks {
            blocksize: bs as usize,
            crd,
        })
    }

    /// Output dims of a [N, C, H, W] input: channels times `c`, spatial dims times `s`, each as
    /// a fraction (multiplier, divisor).
    fn infer(&self, cx: &InferCx, c: (i64, i64), s: (i64, i64)) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.as_ref().filter(|d| d.len() == 4).map(|d| {
            vec![
                d[0].clone(),
                scale_dim(&d[1], c.0, c.1),
                scale_dim(&d[2], s.0, s.1),
                scale_dim(&d[3], s.0, s.1),
            ]
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
}

#[derive(Debug)]
pub struct DepthToSpace(pub Blocks);

impl DepthToSpace {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(DepthToSpace(Blocks::parse(
            "DepthToSpace",
            a,
            11,
        )?)))
    }
}

impl Op for DepthToSpace {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let b = self.0.blocksize as i64;
        self.0.infer(cx, (1, b * b), (b, 1))
    }
    fn kernel(&self) -> Kernel {
        depth_to_space
    }
}

#[derive(Debug)]
pub struct SpaceToDepth(pub Blocks);

impl SpaceToDepth {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(SpaceToDepth(Blocks::parse(
            "SpaceToDepth",
            a,
            28,
        )?)))
    }
}

impl Op for SpaceToDepth {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let b = self.0.blocksize as i64;
        self.0.infer(cx, (b * b, 1), (1, b))
    }
    fn kernel(&self) -> Kernel {
        space_to_depth
    }
}

/// Tile (6, 13): the input repeated `repeats[i]` times along each axis i.
pub fn tile(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Tile";
    let x = input(OP, inputs, 0)?;
    let reps = int_list(OP, "repeats", input(OP, inputs, 1)?)?;
    let dims = x.shape();
    if reps.len() != dims.len() {
        return Err(format!(
            "{OP}: repeats {reps:?} must have one entry per input dim, input shape {dims:?}"
        ));
    }
    let mut out = Vec::with_capacity(dims.len());
    for (&d, &r) in dims.iter().zip(&reps) {
        let n = usize::try_from(r)
            .ok()
            .and_then(|r| d.checked_mul(r))
            .ok_or_else(|| {
                format!("{OP}: repeats {reps:?} are negative or too large for input shape {dims:?}")
            })?;
        out.push(n);
    }
    check_out(ctx, OP, &out, bits(x.dtype()))?;
    // The output walks [r0, d0, r1, d1, ..., r_last] (each repeat restarting its axis) and
    // copies whole rows of the last axis.
    let strides = strides_of(dims);
    let (mut walk, mut step) = (Vec::new(), Vec::new());
    for (i, (&d, &r)) in dims.iter().zip(&reps).enumerate() {
        walk.push(r as usize);
        step.push(0);
        if i + 1 < dims.len() {
            walk.push(d);
            step.push(strides[i]);
        }
    }
    let run = dims.last().copied().unwrap_or(1);
    Ok(vec![take_tensor(
        OP,
        x,
        Starts::Walk(&walk, &step),
        run,
        &out,
    )?])
}

/// Size (1-25): the element count as an int64 scalar.
pub fn size(_: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let x = input("Size", inputs, 0)?;
    Ok(vec![Tensor::I64(ArrayD::from_elem(
        ndarray::IxDyn(&[]),
        x.len() as i64,
    ))])
}

/// ReverseSequence (10, 28): for each batch entry b, its first sequence_lens[b] time steps in
/// reverse order; the rest unchanged.
pub fn reverse_sequence(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "ReverseSequence";
    let x = input(OP, inputs, 0)?;
    let lens_t = input(OP, inputs, 1)?;
    let at = ctx.attrs::<ReverseSequence>()?;
    let dims = x.shape();
    if dims.len() < 2 {
        return Err(format!("{OP}: input must have rank >= 2, got {dims:?}"));
    }
    let (nb, nt) = (dims[at.batch_axis], dims[at.time_axis]);
    let lens = index_values(OP, "sequence_lens", lens_t)?;
    if lens_t.shape() != [nb] {
        return Err(format!(
            "{OP}: sequence_lens must have shape [{nb}] (the batch dim), got {:?}",
            lens_t.shape()
        ));
    }
    let lens: Vec<usize> = lens
        .iter()
        .map(|&l| {
            usize::try_from(l).ok().filter(|&l| l <= nt).ok_or_else(|| {
                format!("{OP}: sequence length {l} is out of range [0, {nt}] (the time dim)")
            })
        })
        .collect::<Result<_, _>>()?;
    check_out(ctx, OP, dims, bits(x.dtype()))?;
    let inner: usize = dims[2..].iter().product();
    let time_first = at.time_axis == 0;
    // Rows (i0, i1) of the first two axes in order; each reads the row its time step mirrors.
    let mut starts = (0..dims[0] * dims[1]).map(|row| {
        let (i0, i1) = (row / dims[1], row % dims[1]);
        let (t, b) = if time_first { (i0, i1) } else { (i1, i0) };
        let src_t = if t < lens[b] { lens[b] - 1 - t } else { t };
        let src = if time_first {
            src_t * dims[1] + b
        } else {
            b * dims[1] + src_t
        };
        src * inner
    });
    Ok(vec![take_tensor(
        OP,
        x,
        Starts::Iter(&mut starts),
        inner,
        dims,
    )?])
}

/// The [N, C, H, W] dims of a DepthToSpace/SpaceToDepth input.
fn nchw(op: &str, x: &Tensor) -> Result<[usize; 4], String> {
    x.shape()
        .try_into()
        .map_err(|_| format!("{op}: input must be 4-D [N, C, H, W], got {:?}", x.shape()))
}

/// Copies `x` viewed as `tmp` (a 6-D reshape) transposed by `perm` into `out`.
fn permute6(
    ctx: &KernelCtx,
    op: &str,
    x: &Tensor,
    tmp: [usize; 6],
    perm: [usize; 6],
    out: &[usize],
) -> KernelResult {
    check_out(ctx, op, out, bits(x.dtype()))?;
    let st = strides_of(&tmp);
    let shape: Vec<usize> = perm.iter().map(|&p| tmp[p]).collect();
    let step: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    Ok(vec![take_tensor(
        op,
        x,
        Starts::Walk(&shape, &step),
        1,
        out,
    )?])
}

/// DepthToSpace (1-28): channel blocks of bs² moved into bs x bs spatial blocks.
pub fn depth_to_space(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "DepthToSpace";
    let x = input(OP, inputs, 0)?;
    let Blocks { blocksize: bs, crd } = ctx.attrs::<DepthToSpace>()?.0;
    let [n, c, h, w] = nchw(OP, x)?;
    let sq = bs.saturating_mul(bs);
    if c % sq != 0 {
        return Err(format!(
            "{OP}: channels {c} are not a multiple of blocksize² = {sq}"
        ));
    }
    let c2 = c / sq;
    let too_big = || {
        format!(
            "{OP}: blocksize {bs} is too large for input {:?}",
            x.shape()
        )
    };
    let (h2, w2) = (
        h.checked_mul(bs).ok_or_else(too_big)?,
        w.checked_mul(bs).ok_or_else(too_big)?,
    );
    let (tmp, perm) = if crd {
        ([n, c2, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([n, bs, bs, c2, h, w], [0, 3, 4, 1, 5, 2])
    };
    permute6(ctx, OP, x, tmp, perm, &[n, c2, h2, w2])
}

/// SpaceToDepth (1-28): bs x bs spatial blocks moved into channels.
pub fn space_to_depth(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "SpaceToDepth";
    let x = input(OP, inputs, 0)?;
    let Blocks { blocksize: bs, crd } = ctx.attrs::<SpaceToDepth>()?.0;
    let [n, c, h, w] = nchw(OP, x)?;
    if h % bs != 0 || w % bs != 0 {
        return Err(format!(
            "{OP}: height {h} and width {w} must be multiples of blocksize {bs}"
        ));
    }
    let c2 = c
        .checked_mul(bs)
        .and_then(|v| v.checked_mul(bs))
        .ok_or_else(|| {
            format!(
                "{OP}: blocksize {bs} is too large for input {:?}",
                x.shape()
            )
        })?;
    let tmp = [n, c, h / bs, bs, w / bs, bs];
    let perm = if crd {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    permute6(ctx, OP, x, tmp, perm, &[n, c2, h / bs, w / bs])
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
