//! Convolutions: ai.onnx Conv and ConvTranspose, com.microsoft FusedConv.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | Conv | 1, 11, 22 | `auto_pad` (NOTSET), `dilations` (1s), `group` (1), `kernel_shape` (W's dims), `pads` (0s), `strides` (1s) | X [N, C, D...], W [M, C/group, k...], B [M] (optional): T -> Y [N, M, out...]: T (float) |
//! | FusedConv (com.microsoft) | 1 | Conv's, and `activation` (none: identity; Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid), `activation_params` (LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta; required for those) | X, W, B? as Conv, Z? (Y's shape): T -> Y = activation(Conv(X, W, B) + Z): T (float) |
//! | ConvTranspose | 1, 11, 22 | Conv's, and `output_padding` (0s), `output_shape` (computed) | X [N, C, D...], W [C, M/group, k...], B [M] (optional): T -> Y [N, M, out...]: T (float) |
//!
//! Conv's output sizes are window.rs's. ConvTranspose: with `ek = d·(k - 1) + 1`,
//! `out = s·(in - 1) + output_padding + ek - pb - pe`; SAME_* make `out = in·s` and an `output_shape` sets it;
//! either way the pads are the total `s·(in - 1) + output_padding + ek - out` split in two
//! (floor halves): from 11 the smaller half first for SAME_UPPER and last otherwise, before 11
//! the other way round (registry entry 11). Conv 11 only reworded auto_pad, 22 added bfloat16:
//! no computed value changes. 1 to 3 spatial dims are supported; more is an error naming the op.
//!
//! FusedConv is onnxruntime's contrib op (its CPU kernel takes float32; float64 runs here too):
//! Z, when given, is added before the activation, and an activation it does not list is refused
//! at parse.
//!
//! The float32 kernel: im2col feeding MatMul's GEMM (`matmul::MatElem`), no copy at all for
//! 1x1 stride-1 unpadded kernels, and a direct loop for depthwise groups (one input channel
//! each; conv/depthwise.rs), which reads a padded copy of the channel split by stride
//! (window.rs's `Padded`), so that each tap is one vectorized run over the outputs and the
//! loop starts from the bias. ConvTranspose is the GEMM of W' and X, then col2im.

use std::ops::Range;

use ndarray::{ArrayD, IxDyn};

use super::activation::Act;
use super::common::{check_out, input, opt_input, type_mismatch, unsupported_type, Num};
use super::math::{max_nan, Elem as MathElem, Fp};
use super::matmul::{MatElem, Strided};
use super::window::{
    data, derived, in_range, offset, same, span, spatial, to3, AutoPad, Axis, Elem, Padded, Window,
};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

mod depthwise;
mod fused;
mod geometry;
mod lower;
pub use fused::*;
use geometry::Geometry;

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

#[derive(Debug)]
pub struct Conv {
    pub window: Window,
    pub group: i64,
}

impl Conv {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Conv::read(a)?))
    }

    /// The explicit `pads` ([begin..., end...]) for `n` spatial axes, zeros when absent; None
    /// when `auto_pad` computes them instead.
    pub fn explicit_pads(&self, n: usize) -> Option<Vec<i64>> {
        (self.window.auto_pad == AutoPad::NotSet)
            .then(|| self.window.pads.clone().unwrap_or_else(|| vec![0; 2 * n]))
    }

    /// Conv's attributes (also ConvInteger's, QLinearConv's and FusedConv's).
    pub(super) fn read(a: &Attrs) -> R<Conv> {
        Ok(Conv {
            window: Window::read(a, true, false)?,
            group: group(a)?,
        })
    }

    /// Y's shape from X (input `xi`) and W (input `wi`), as far as known.
    pub(super) fn infer_shape(&self, cx: &InferCx, xi: usize, wi: usize) -> Option<Vec<Dim>> {
        shapes(cx, xi, wi).map(|(x, w)| {
            let n = x.len() - 2;
            let mut out = vec![
                x[0].clone(),
                w.as_ref().map_or(Dim::Unknown, |w| w[0].clone()),
            ];
            for i in 0..n {
                let k = self.window.kernel(i);
                let k = k.or_else(|| w.as_ref().and_then(|w| known(&w[i + 2])));
                out.push(self.window.infer_dim(i, n, &x[i + 2], k));
            }
            out
        })
    }

    /// Runs Conv with these attributes on X, W and the optional B of `inputs` (float32 or
    /// float64), errors naming `op`.
    pub(super) fn run(
        &self,
        ctx: &KernelCtx,
        op: &'static str,
        inputs: &[Option<&Tensor>],
    ) -> KernelResult {
        let spec = Spec {
            op,
            window: &self.window,
            group: self.group as usize,
            transpose: None,
        };
        conv_any(ctx, inputs, &spec)
    }
}

fn group(a: &Attrs) -> R<i64> {
    match a.int("group", 1)? {
        g if (1..=i32::MAX as i64).contains(&g) => Ok(g),
        g => Err(format!(
            "attribute 'group' must be positive (at most {}), got {g}",
            i32::MAX
        )),
    }
}

fn known(d: &Dim) -> Option<i64> {
    match d {
        Dim::Known(v) => Some(*v),
        _ => None,
    }
}

/// X's shape (input `xi`), and W's (input `wi`) when it has X's rank (>= 3).
fn shapes(cx: &InferCx, xi: usize, wi: usize) -> Option<(Vec<Dim>, Option<Vec<Dim>>)> {
    let x = cx.input(xi).shape.filter(|s| s.len() >= 3)?;
    let w = cx.input(wi).shape.filter(|w| w.len() == x.len());
    Some((x, w))
}

impl Op for Conv {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape: self.infer_shape(cx, 0, 1),
        }]
    }
    fn kernel(&self) -> Kernel {
        conv
    }
    fn lower(&self, c: &super::NodeCtx) -> R<super::Lowered> {
        self.lower_with(c, "Conv", "v0")
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub struct ConvTranspose {
    pub window: Window,
    pub group: i64,
    pub output_padding: Option<Vec<i64>>,
    /// The spatial dims, or a whole [N, C, ...] shape (its spatial tail is read).
    pub output_shape: Option<Vec<i64>>,
    /// Before 11 the larger half of computed pads goes first for SAME_UPPER (else last).
    pub upper_first: bool,
}

impl ConvTranspose {
    pub fn parse(a: &Attrs) -> P {
        let window = Window::read(a, true, false)?;
        let output_padding = a.ints("output_padding")?;
        in_range("output_padding", &output_padding, 0)?;
        let output_shape = a.ints("output_shape")?;
        in_range("output_shape", &output_shape, 0)?;
        Ok(Box::new(ConvTranspose {
            window,
            group: group(a)?,
            output_padding,
            output_shape,
            upper_first: a.opset < 11,
        }))
    }

    fn requested(&self, i: usize, n: usize) -> R<Option<i64>> {
        match &self.output_shape {
            None => Ok(None),
            Some(s) if s.len() == n => Ok(Some(s[i])),
            Some(s) if s.len() == n + 2 => Ok(Some(s[i + 2])),
            Some(s) => Err(format!(
                "ConvTranspose: attribute 'output_shape' {s:?} is for {} spatial axes, the input has {n}",
                s.len()
            )),
        }
    }

    /// Output length and pads of spatial axis `i` of `n`.
    fn out_len(&self, i: usize, n: usize, inp: i64, k: i64) -> R<(i64, i64, i64)> {
        let w = &self.window;
        let (s, d) = (w.stride(i), w.dilation(i));
        let op = self.output_padding.as_ref().and_then(|p| p.get(i).copied());
        let full = s
            .saturating_mul(inp.saturating_sub(1))
            .saturating_add(op.unwrap_or(0))
            .saturating_add(d.saturating_mul(k.saturating_sub(1)))
            .saturating_add(1);
        let same = matches!(w.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let (out, pb, pe) = match self.requested(i, n)? {
            Some(o) => (o, None, None),
            None if same => (inp.saturating_mul(s), None, None),
            None if w.auto_pad == AutoPad::Valid => (full, Some(0), Some(0)),
            None => {
                let (pb, pe) = w.pad(i, n);
                (
                    full.saturating_sub(pb).saturating_sub(pe),
                    Some(pb),
                    Some(pe),
                )
            }
        };
        if out < 0 || (inp > 0 && out == 0 && pb.is_some()) {
            return Err(format!(
                "ConvTranspose: the output length on spatial axis {i} would be {out}"
            ));
        }
        if let (Some(pb), Some(pe)) = (pb, pe) {
            return Ok((out, pb, pe));
        }
        let total = full.saturating_sub(out);
        let half = total.div_euclid(2);
        let upper = w.auto_pad == AutoPad::SameUpper;
        Ok(if upper != self.upper_first {
            (out, half, total - half)
        } else {
            (out, total - half, half)
        })
    }

    fn infer_dim(&self, i: usize, n: usize, inp: &Dim, k: Option<i64>) -> Dim {
        let w = &self.window;
        if let Ok(Some(o)) = self.requested(i, n) {
            return Dim::Known(o);
        }
        let (Some(k), s) = (k.filter(|&k| k > 0), w.stride(i)) else {
            return Dim::Unknown;
        };
        match inp {
            Dim::Known(v) => self
                .out_len(i, n, *v, k)
                .map_or(Dim::Unknown, |o| Dim::Known(o.0)),
            Dim::Sym(name) if w.auto_pad != AutoPad::NotSet && w.auto_pad != AutoPad::Valid => {
                if s == 1 {
                    Dim::Sym(name.clone())
                } else {
                    derived(format!("{s}*{name}"))
                }
            }
            Dim::Sym(name) => {
                let op = self.output_padding.as_ref().and_then(|p| p.get(i).copied());
                let (pb, pe) = if w.auto_pad == AutoPad::Valid {
                    (0, 0)
                } else {
                    w.pad(i, n)
                };
                let c = op.unwrap_or(0) + w.dilation(i).saturating_mul(k - 1) + 1 - pb - pe;
                match (s, c) {
                    (1, 1) => Dim::Sym(name.clone()),
                    (1, c) => derived(format!("{name}{}", offset(c - 1))),
                    (s, c) => derived(format!("{s}*({name}-1){}", offset(c))),
                }
            }
            Dim::Unknown => Dim::Unknown,
        }
    }
}

impl Op for ConvTranspose {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let shape = shapes(cx, 0, 1).map(|(x, w)| {
            let n = x.len() - 2;
            let m = match (w.as_ref().map(|w| &w[1]), self.group) {
                (Some(d), 1) => d.clone(),
                (Some(Dim::Known(m)), g) => m.checked_mul(g).map_or(Dim::Unknown, Dim::Known),
                _ => Dim::Unknown,
            };
            let mut out = vec![x[0].clone(), m];
            for i in 0..n {
                let k = self.window.kernel(i);
                let k = k.or_else(|| w.as_ref().and_then(|w| known(&w[i + 2])));
                out.push(self.infer_dim(i, n, &x[i + 2], k));
            }
            out
        });
        vec![TensorType {
            dtype: cx.input(0).dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        conv_transpose
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// What Conv and ConvTranspose tell the shared kernel.
struct Spec<'a> {
    op: &'static str,
    window: &'a Window,
    group: usize,
    /// ConvTranspose's own attributes; `None` for Conv.
    transpose: Option<&'a ConvTranspose>,
}

pub fn conv(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    ctx.attrs::<Conv>()?.run(ctx, "Conv", inputs)
}

pub fn conv_transpose(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<ConvTranspose>()?;
    let spec = Spec {
        op: "ConvTranspose",
        window: &p.window,
        group: p.group as usize,
        transpose: Some(p),
    };
    conv_any(ctx, inputs, &spec)
}

fn conv_any(ctx: &KernelCtx, inputs: &[Option<&Tensor>], spec: &Spec) -> KernelResult {
    match input(spec.op, inputs, 0)?.dtype() {
        DType::F32 => conv_typed::<f32>(ctx, inputs, spec),
        DType::F64 => conv_typed::<f64>(ctx, inputs, spec),
        t => Err(unsupported_type(spec.op, t)),
    }
}

/// `y += a · b` for row-major `a` [m, k], `b` [k, n] and `y` [m, n] (rows `ldy` apart) by
/// MatMul's GEMM; `a` may instead be given transposed ([k, m] row-major).
fn product<T: MatElem>(
    a: &[T],
    a_t: bool,
    b: &[T],
    y: &mut [T],
    mkn: [usize; 3],
    ldy: usize,
) -> R<()> {
    let [m, k, n] = mkn;
    let a = if a_t {
        Strided::rows(a, m).t()
    } else {
        Strided::rows(a, k)
    };
    T::gemm_acc(1.0, mkn, a, Strided::rows(b, n), y, ldy);
    Ok(())
}

/// Elements of an im2col block: whole output rows, about a megabyte of float32, so the columns
/// stay in cache between im2col and the GEMM (and a large image needs no image-sized buffer).
const COL_BLOCK: usize = 1 << 18;

/// Conv (`transpose` false) and ConvTranspose: checks, then per image and group a GEMM.
fn conv_typed<T: Elem + MatElem>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    spec: &Spec,
) -> KernelResult {
    let (op, g) = (spec.op, spec.group);
    let transpose = spec.transpose.is_some();
    let xt = input(op, inputs, 0)?;
    let x = same::<T>(op, xt, xt)?;
    let w = same::<T>(op, xt, input(op, inputs, 1)?)?;
    let b = opt_input(inputs, 2)
        .map(|b| same::<T>(op, xt, b))
        .transpose()?;
    let (xs, ws) = (x.shape(), w.shape());
    let Geometry {
        axes,
        m,
        w_in,
        shape,
    } = spec.geometry(xs, ws, b.map(|b| b.shape()))?;
    let (c, kernel) = (xs[1], &ws[2..]);
    let bits = (std::mem::size_of::<T>() * 8) as u64;
    check_out(ctx, op, &shape, bits)?;
    let a = to3(&axes);
    let ksz: usize = kernel.iter().product();
    let isz: usize = xs[2..].iter().product();
    let osz: usize = axes.iter().map(|a| a.out).product();
    let (cg, mg) = (w_in, m / g);
    let pointwise = a
        .iter()
        .all(|a| a.k == 1 && a.s == 1 && a.pb == 0 && a.pe == 0);
    let depthwise = !transpose && cg == 1 && !pointwise;
    // The GEMM's other operand: blocks of im2col columns [cg·ksz, rows·OW] (Conv), or the
    // product's columns [mg·ksz, isz] before col2im (ConvTranspose).
    let rows = a[0].out * a[1].out;
    let block =
        (COL_BLOCK / cg.saturating_mul(ksz).saturating_mul(a[2].out).max(1)).clamp(1, rows.max(1));
    let col_len = match () {
        _ if transpose => [mg * ksz, isz],
        _ if pointwise || depthwise => [0, 0],
        _ => [cg * ksz, block * a[2].out],
    };
    check_out(ctx, &format!("{op} im2col buffer"), &col_len, bits)?;
    let mut col = vec![T::ZERO; col_len[0] * col_len[1]];
    let (x, w) = (data(x), data(w));
    let b = b.map(data);
    // Depthwise groups read one padded copy of their input channel (made once, reloaded per
    // group), and start from the bias.
    let mut padded = if depthwise {
        Padded::new(&a, T::ZERO)
    } else {
        None
    };
    // Y starts from the bias (one pass, not a zero fill and an add after): the GEMMs and
    // col2im add into it, the depthwise loop sets it from the same bias.
    let total: usize = shape.iter().product();
    let mut y = match b.as_ref().filter(|_| osz > 0) {
        Some(b) => {
            let mut y = Vec::with_capacity(total);
            for &bv in b.iter().cycle().take(total / osz) {
                y.resize(y.len() + osz, bv);
            }
            y
        }
        None => vec![T::ZERO; total],
    };
    let gemm_k = if transpose { cg } else { cg * ksz };
    // Conv's W, when it is an initializer, packed once per group for the GEMM (kept by the
    // executor for later runs).
    let packed = match () {
        _ if transpose || depthwise || gemm_k == 0 => None,
        _ => ctx
            .prepare(1, || {
                let wk = mg * gemm_k;
                (0..g)
                    .map(|gi| T::pack_a(Strided::rows(&w[gi * wk..][..wk], gemm_k), mg, gemm_k))
                    .collect::<Option<Vec<_>>>()
            })
            .and_then(Option::as_ref),
    };
    for (xi, yi) in x
        .chunks_exact((c * isz).max(1))
        .zip(y.chunks_exact_mut((m * osz).max(1)))
    {
        for gi in 0..g {
            let xg = &xi[gi * cg * isz..][..cg * isz];
            let yg = &mut yi[gi * mg * osz..][..mg * osz];
            let wg = &w[gi * mg * cg * ksz..][..mg * cg * ksz];
            if osz == 0 || isz == 0 || gemm_k == 0 {
                continue;
            }
            if transpose {
                col.iter_mut().for_each(|v| *v = T::ZERO);
                product(wg, true, xg, &mut col, [mg * ksz, cg, isz], isz)?;
                col2im(&col, yg, mg, &a);
            } else if depthwise {
                let bg = b.as_ref().map(|b| &b[gi * mg..][..mg]);
                depthwise::group(xg, wg, yg, bg, &a, &mut padded);
            } else if let (true, Some(p)) = (pointwise, packed) {
                T::gemm_packed(&p[gi], osz, Strided::rows(xg, osz), yg, osz);
            } else if pointwise {
                product(wg, false, xg, yg, [mg, cg, osz], osz)?;
            } else {
                for r0 in (0..rows).step_by(block) {
                    let r1 = (r0 + block).min(rows);
                    let n = (r1 - r0) * a[2].out;
                    let col = &mut col[..cg * ksz * n];
                    im2col(xg, cg, &a, col, r0..r1);
                    let y0 = &mut yg[r0 * a[2].out..];
                    match packed {
                        Some(p) => T::gemm_packed(&p[gi], n, Strided::rows(col, n), y0, osz),
                        None => product(wg, false, col, y0, [mg, cg * ksz, n], osz)?,
                    }
                }
            }
        }
    }
    let y = ArrayD::from_shape_vec(IxDyn(&shape), y).map_err(|e| format!("{op}: {e}"))?;
    Ok(vec![T::wrap(y)])
}

impl ConvTranspose {
    fn axes(&self, x: &[usize], k: &[usize]) -> R<Vec<Axis>> {
        let n = x.len();
        // The lengths checks Conv's geometry does (its sizes are not used).
        let mut w = self.window.clone();
        w.auto_pad = AutoPad::Valid;
        w.kernel_shape = None;
        w.axes("ConvTranspose", x, &vec![1; n])?;
        if let Some(p) = self.output_padding.as_ref().filter(|p| p.len() != n) {
            return Err(format!(
                "ConvTranspose: attribute 'output_padding' {p:?} is for {} spatial axes, the input has {n}",
                p.len()
            ));
        }
        (0..n)
            .map(|i| {
                let (out, pb, pe) = self.out_len(i, n, x[i] as i64, k[i] as i64)?;
                Ok(Axis {
                    inp: x[i],
                    out: out as usize,
                    k: k[i],
                    s: self.window.stride(i) as usize,
                    d: self.window.dilation(i) as usize,
                    pb,
                    pe,
                })
            })
            .collect()
    }
}

/// Rows (c, kz, ky, kx) by columns (oz, oy, ox) of one group's input channels `x`, for the
/// output rows (oz, oy) numbered `rows`; compiled for the widest vectors the CPU has (the
/// strided gathers of a stride-2 stem vectorize).
fn im2col<T: Num>(x: &[T], cg: usize, a: &[Axis; 3], col: &mut [T], rows: Range<usize>) {
    super::simd::widest(
        #[cfg_attr(target_arch = "x86_64", inline(always))]
        || im2col_body(x, cg, a, col, rows),
    )
}

#[inline(always)]
fn im2col_body<T: Num>(x: &[T], cg: usize, a: &[Axis; 3], col: &mut [T], rows: Range<usize>) {
    let [az, ay, ax] = a;
    let isz = az.inp * ay.inp * ax.inp;
    let mut dsts = col.chunks_exact_mut(ax.out);
    for xc in x.chunks_exact(isz).take(cg) {
        for kz in 0..az.k {
            let (z0, z1) = az.outs_of_tap(kz);
            for ky in 0..ay.k {
                let (y0, y1) = ay.outs_of_tap(ky);
                for kx in 0..ax.k {
                    let (x0, x1) = ax.outs_of_tap(kx);
                    for r in rows.clone() {
                        let (oz, oy) = (r / ay.out, r % ay.out);
                        let Some(dst) = dsts.next() else { return };
                        if !(z0..z1).contains(&oz) || !(y0..y1).contains(&oy) || x0 >= x1 {
                            dst.iter_mut().for_each(|v| *v = T::ZERO);
                            continue;
                        }
                        let src = (az.pos(oz, kz) * ay.inp + ay.pos(oy, ky)) * ax.inp;
                        let from = &xc[src..][..ax.inp][ax.pos(x0, kx)..];
                        dst[..x0].iter_mut().for_each(|v| *v = T::ZERO);
                        dst[x1..].iter_mut().for_each(|v| *v = T::ZERO);
                        let n = x1 - x0;
                        if ax.s == 1 {
                            dst[x0..x1].copy_from_slice(&from[..n]);
                        } else if ax.s == 2 {
                            // Every other value: the first of each pair, then the last value
                            // alone (its pair may end past the row).
                            let (body, last) = dst[x0..x1].split_at_mut(n - 1);
                            for (v, pair) in body.iter_mut().zip(from.chunks_exact(2)) {
                                *v = pair[0];
                            }
                            last[0] = from[2 * (n - 1)];
                        } else {
                            let strided = from.iter().step_by(ax.s);
                            for (v, &xv) in dst[x0..x1].iter_mut().zip(strided) {
                                *v = xv;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// ConvTranspose's scatter: row (j, kz, ky, kx) of `col` (one value per input position) adds
/// into output channel j at `i·s + k·d - pb`. `a`'s `inp` is X's length, `out` Y's.
fn col2im<T: Num>(col: &[T], y: &mut [T], mg: usize, a: &[Axis; 3]) {
    let [az, ay, ax] = a;
    let isz = az.inp * ay.inp * ax.inp;
    let osz = az.out * ay.out * ax.out;
    // Which inputs land inside the output, for tap k: the roles of `outs_of_tap` swapped.
    let ins = |a: &Axis, k: usize| span((k * a.d) as i64 - a.pb, a.s, a.inp, a.out as i64);
    let mut rows = col.chunks_exact(isz);
    for yj in y.chunks_exact_mut(osz).take(mg) {
        for kz in 0..az.k {
            let (z0, z1) = ins(az, kz);
            for ky in 0..ay.k {
                let (y0, y1) = ins(ay, ky);
                for kx in 0..ax.k {
                    let (x0, x1) = ins(ax, kx);
                    let Some(row) = rows.next() else { return };
                    for iz in z0..z1 {
                        for iy in y0..y1 {
                            let dst = (az.pos(iz, kz) * ay.out + ay.pos(iy, ky)) * ax.out;
                            let dst = &mut yj[dst..][..ax.out];
                            let src = &row[(iz * ay.inp + iy) * ax.inp..][..ax.inp];
                            // The source first: for an empty span `pos` is meaningless (it
                            // wraps below 0) and must not be stepped from.
                            let outs = (ax.pos(x0, kx)..).step_by(ax.s);
                            for (&v, o) in src[x0..x1].iter().zip(outs) {
                                dst[o] = dst[o].wadd(v);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "conv_tests.rs"]
mod tests;
