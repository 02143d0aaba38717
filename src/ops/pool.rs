//! Pooling: ai.onnx MaxPool, AveragePool, LpPool, and GlobalMaxPool, GlobalAveragePool,
//! GlobalLpPool.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | MaxPool | 1, 8, 10, 11, 12, 22 | `auto_pad` (NOTSET), `kernel_shape` (required), `pads` (0s), `strides` (1s); `storage_order` (0) from 8; `ceil_mode` (0) and `dilations` (1s) from 10 | X [N, C, D...]: T -> Y: T, Indices: int64 (optional, from 8) |
//! | AveragePool | 1, 7, 10, 11, 19, 22 | MaxPool's but `storage_order`; `count_include_pad` (0) from 7; `ceil_mode` from 10; `dilations` from 19 | X: T -> Y: T (float) |
//! | LpPool | 1, 2, 11, 18, 22 | `auto_pad`, `kernel_shape` (required), `pads`, `strides`, `p` (2: float in 1, int from 2); `ceil_mode` and `dilations` from 18 | X: T -> Y: T (float) |
//! | GlobalMaxPool, GlobalAveragePool | 1, 22 | none | X [N, C, D...]: T -> Y [N, C, 1...]: T (float) |
//! | GlobalLpPool | 1, 2, 22 | `p` (2: float in 1, int from 2) | X: T -> Y [N, C, 1...]: T (float) |
//!
//! The window geometry (output sizes, auto_pad, ceil_mode) is window.rs's. Windows read only
//! inside the input: Max and Lp (`(Σ|x|^p)^(1/p)`) skip the padding, AveragePool divides by
//! the taps inside the input, or with `count_include_pad` by those inside the padded input (a
//! ceil_mode window's part past the end padding never counts). The first maximum in a window
//! wins; Indices are flat positions in X (N, C, then the spatial dims row-major, or
//! column-major with `storage_order` 1). As onnxruntime, the pools take pads smaller than the
//! kernel only. Versions 11 (wording), 12 (MaxPool int8/uint8, widened to int32 before the
//! kernel) and 22 (bfloat16) change no computed value; MaxPool also takes int32.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, lane_sum, unsupported_type};
use super::lowering::{run, NodeCtx, Ty};
use super::window::{data, same, spatial, tap_major, to3, Axis, Elem, Padded, Window};
use super::{wgsl, Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;
type R<T> = Result<T, String>;

/// The window attributes at this version: `dilations` and `ceil_mode` from the versions given.
fn window(a: &Attrs, dilations_since: i64, ceil_since: i64) -> R<Window> {
    let w = Window::read(a, a.opset >= dilations_since, a.opset >= ceil_since)?;
    let Some(k) = &w.kernel_shape else {
        return Err("attribute 'kernel_shape' is required".into());
    };
    if let Some(p) = &w.pads {
        if p.iter().enumerate().any(|(j, &p)| p >= k[j % k.len()]) {
            return Err(format!(
                "attribute 'pads' {p:?} must be smaller than 'kernel_shape' {k:?} on every axis"
            ));
        }
    }
    Ok(w)
}

/// `p`: a float in version 1, an int from 2; positive.
fn p_norm(a: &Attrs) -> R<f64> {
    let p = if a.opset < 2 {
        a.float("p", 2.0)? as f64
    } else {
        a.int("p", 2)? as f64
    };
    if p > 0.0 {
        Ok(p)
    } else {
        Err(format!("attribute 'p' must be positive, got {p}"))
    }
}

#[derive(Debug)]
pub struct MaxPool {
    pub window: Window,
    pub storage_order: bool,
    /// The version has the Indices output (from 8).
    pub indices: bool,
}

impl MaxPool {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(MaxPool {
            window: window(a, 10, 10)?,
            storage_order: a.opset >= 8 && a.flag("storage_order", false)?,
            indices: a.opset >= 8,
        }))
    }
}

#[derive(Debug)]
pub struct AveragePool {
    pub window: Window,
    pub count_include_pad: bool,
}

impl AveragePool {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(AveragePool {
            window: window(a, 19, 10)?,
            count_include_pad: a.opset >= 7 && a.flag("count_include_pad", false)?,
        }))
    }
}

#[derive(Debug)]
pub struct LpPool {
    pub window: Window,
    pub p: f64,
}

impl LpPool {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(LpPool {
            window: window(a, 18, 18)?,
            p: p_norm(a)?,
        }))
    }
}

#[derive(Debug)]
pub struct GlobalLpPool {
    pub p: f64,
}

impl GlobalLpPool {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(GlobalLpPool { p: p_norm(a)? }))
    }
}

super::plain_ops!(GlobalMaxPool, GlobalAveragePool);

/// Y's type: X's, with the spatial dims the window gives.
fn infer_pool(w: &Window, cx: &InferCx) -> TensorType {
    let x = cx.input(0);
    let shape = x.shape.filter(|s| s.len() >= 3).map(|s| {
        let n = s.len() - 2;
        let mut out = s[..2].to_vec();
        out.extend((0..n).map(|i| w.infer_dim(i, n, &s[i + 2], w.kernel(i))));
        out
    });
    TensorType {
        dtype: x.dtype,
        shape,
    }
}

/// [N, C, 1...] for the global pools.
fn infer_global(cx: &InferCx) -> Vec<TensorType> {
    let x = cx.input(0);
    let shape = x.shape.filter(|s| s.len() >= 3).map(|s| {
        let mut out = s[..2].to_vec();
        out.resize(s.len(), Dim::Known(1));
        out
    });
    vec![TensorType {
        dtype: x.dtype,
        shape,
    }]
}

impl Op for MaxPool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let y = infer_pool(&self.window, cx);
        let shape = y.shape.clone();
        vec![
            y,
            TensorType {
                dtype: Some(DType::I64),
                shape,
            },
        ]
    }
    fn kernel(&self) -> Kernel {
        max_pool
    }
    /// One dispatch (`wgsl::max_pool`) for float32 X, without the Indices output.
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        const OP: &str = "MaxPool";
        if c.has_out(1) {
            return Err(format!("{OP}: the Indices output is not on webgpu"));
        }
        if c.ty(0)? != Ty::F32 {
            return Err(format!("{OP} is float32-only on webgpu"));
        }
        let xs = &c.input(0)?.shape;
        let axes = pool_axes(OP, &self.window, xs)?;
        run(wgsl::max_pool(xs[0] * xs[1], &axes))
    }
}

impl Op for AveragePool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![infer_pool(&self.window, cx)]
    }
    fn kernel(&self) -> Kernel {
        average_pool
    }
}

impl Op for LpPool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![infer_pool(&self.window, cx)]
    }
    fn kernel(&self) -> Kernel {
        lp_pool
    }
}

impl Op for GlobalMaxPool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        infer_global(cx)
    }
    fn kernel(&self) -> Kernel {
        global_max_pool
    }
}

impl Op for GlobalAveragePool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        infer_global(cx)
    }
    fn kernel(&self) -> Kernel {
        global_average_pool
    }
    /// The mean of each (N, C) plane: one row-reduction dispatch, float32.
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let xs = &c.input(0)?.shape;
        spatial("GlobalAveragePool", xs)?;
        if c.ty(0)? != Ty::F32 {
            return Err("GlobalAveragePool is float32-only on webgpu".into());
        }
        run(wgsl::reduce_rows(
            xs[0] * xs[1],
            xs[2..].iter().product(),
            true,
        ))
    }
}

impl Op for GlobalLpPool {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        infer_global(cx)
    }
    fn kernel(&self) -> Kernel {
        global_lp_pool
    }
}

/// What a windowed pool computes.
#[derive(Clone, Copy)]
enum Kind {
    Max { col_major: bool, indices: bool },
    Mean { include_pad: bool },
    Lp(f64),
}

pub fn max_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MaxPool";
    let p = ctx.attrs::<MaxPool>()?;
    let outs = ctx.node.outputs.len().max(1);
    let most = if p.indices { 2 } else { 1 };
    if outs > most {
        return Err(format!(
            "{OP}: the node names {outs} outputs, the op has at most {most} at this opset"
        ));
    }
    let kind = Kind::Max {
        col_major: p.storage_order,
        indices: ctx.node.output(1).is_some(),
    };
    let x = input(OP, inputs, 0)?;
    let mut out = match x.dtype() {
        DType::F32 => pool_typed::<f32>(ctx, OP, &p.window, x, kind),
        DType::F64 => pool_typed::<f64>(ctx, OP, &p.window, x, kind),
        DType::I32 => pool_typed::<i32>(ctx, OP, &p.window, x, kind),
        t => Err(unsupported_type(OP, t)),
    }?;
    // An Indices slot left empty still gets a (placeholder) value.
    if outs == 2 && out.len() == 1 {
        out.push(Tensor::I64(ArrayD::zeros(IxDyn(&[0]))));
    }
    Ok(out)
}

pub fn average_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<AveragePool>()?;
    let kind = Kind::Mean {
        include_pad: p.count_include_pad,
    };
    float_pool(ctx, "AveragePool", &p.window, inputs, kind)
}

pub fn lp_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<LpPool>()?;
    float_pool(ctx, "LpPool", &p.window, inputs, Kind::Lp(p.p))
}

fn float_pool(
    ctx: &KernelCtx,
    op: &str,
    w: &Window,
    inputs: &[Option<&Tensor>],
    kind: Kind,
) -> KernelResult {
    let x = input(op, inputs, 0)?;
    match x.dtype() {
        DType::F32 => pool_typed::<f32>(ctx, op, w, x, kind),
        DType::F64 => pool_typed::<f64>(ctx, op, w, x, kind),
        t => Err(unsupported_type(op, t)),
    }
}

/// One output's window along one axis: its first tap inside the input and how many are inside.
#[derive(Clone, Copy)]
struct Span {
    first: usize,
    n: usize,
}

fn spans(a: &Axis) -> Vec<Span> {
    (0..a.out)
        .map(|o| {
            let (lo, hi) = a.taps(o);
            Span {
                first: if hi > lo { a.pos(o, lo) } else { 0 },
                n: hi - lo,
            }
        })
        .collect()
}

/// Folds `f(acc, value, row-major spatial offset)` over a window's taps inside the input.
#[inline(always)]
fn fold<T: Copy, A>(
    xp: &[T],
    a: &[Axis; 3],
    t: [&Span; 3],
    init: A,
    f: impl Fn(A, T, usize) -> A,
) -> A {
    let mut acc = init;
    let (h, w) = (a[1].inp, a[2].inp);
    let mut iz = t[0].first;
    for _ in 0..t[0].n {
        let mut iy = t[1].first;
        for _ in 0..t[1].n {
            let base = (iz * h + iy) * w;
            let row = &xp[base..base + w];
            let mut ix = t[2].first;
            for _ in 0..t[2].n {
                acc = f(acc, row[ix], base + ix);
                ix += a[2].d;
            }
            iy += a[1].d;
        }
        iz += a[0].d;
    }
    acc
}

/// Calls `f(plane, plane's data, window)` for every output, in output order.
fn each_window<T>(
    xd: &[T],
    isz: usize,
    sp: &[Vec<Span>; 3],
    mut f: impl FnMut(usize, &[T], [&Span; 3]),
) {
    for (c, xp) in xd.chunks_exact(isz.max(1)).enumerate() {
        for tz in &sp[0] {
            for ty in &sp[1] {
                for tx in &sp[2] {
                    f(c, xp, [tz, ty, tx]);
                }
            }
        }
    }
}

/// The axes in effect for X of shape `xs` (1 to 3 spatial dims).
fn pool_axes(op: &str, w: &Window, xs: &[usize]) -> R<Vec<Axis>> {
    spatial(op, xs)?;
    let k: Vec<usize> = w
        .kernel_shape
        .iter()
        .flatten()
        .map(|&k| k as usize)
        .collect();
    w.axes(op, &xs[2..], &k)
}

fn pool_typed<T: Elem>(
    ctx: &KernelCtx,
    op: &str,
    w: &Window,
    xt: &Tensor,
    kind: Kind,
) -> KernelResult {
    let x = same::<T>(op, xt, xt)?;
    let xs = x.shape();
    let axes = pool_axes(op, w, xs)?;
    let mut shape = xs[..2].to_vec();
    shape.extend(axes.iter().map(|a| a.out));
    check_out(ctx, op, &shape, (std::mem::size_of::<T>() * 8) as u64)?;
    let with_indices = matches!(kind, Kind::Max { indices: true, .. });
    if with_indices {
        check_out(ctx, &format!("{op} Indices"), &shape, 64)?;
    }
    let a = to3(&axes);
    let sp = [spans(&a[0]), spans(&a[1]), spans(&a[2])];
    let isz: usize = xs[2..].iter().product();
    let total: usize = shape.iter().product();
    let mut y = Vec::with_capacity(total);
    let mut ind = Vec::with_capacity(if with_indices { total } else { 0 });
    let xd = data(x);
    if let (Kind::Max { col_major, .. }, true) = (kind, with_indices) {
        each_window(&xd, isz, &sp, |c, xp, t| {
            // The first maximum: a later value must be greater (none: the type's lowest, -1).
            let (best, at) = fold(xp, &a, t, (T::LOWEST, usize::MAX), |(b, at), v, p| {
                if at == usize::MAX || v > b {
                    (v, p)
                } else {
                    (b, at)
                }
            });
            y.push(best);
            let (hw, w) = (a[1].inp * a[2].inp, a[2].inp);
            let at = match at {
                usize::MAX => None,
                p if col_major => Some(p / hw + (p / w % a[1].inp + p % w * a[1].inp) * a[0].inp),
                p => Some(p),
            };
            ind.push(at.map_or(-1, |p| (c * isz + p) as i64));
        });
    } else {
        // Tap by tap into each plane's outputs (vectorizable rows), then the divisors / roots.
        let init = if let Kind::Max { .. } = kind {
            T::LOWEST
        } else {
            T::ZERO
        };
        y.resize(total, init);
        let osz: usize = a.iter().map(|a| a.out).product();
        // Max and Mean through a padded copy of each plane (the filler, -inf or 0, changes no
        // max or sum), a tap one contiguous run; Lp and what has no copy tap by tap.
        let mut padded = match kind {
            Kind::Lp(_) => None,
            _ => Padded::new(&a, init),
        };
        let taps = vec![(); a[2].k];
        for (xp, yp) in xd
            .chunks_exact(isz.max(1))
            .zip(y.chunks_exact_mut(osz.max(1)))
        {
            match (kind, padded.as_mut()) {
                // NaN never wins (as in onnxruntime).
                (Kind::Max { .. }, Some(p)) => {
                    p.load(xp);
                    p.run(yp, init, |_, acc, row| {
                        row.fold(acc, &taps, |b, v, ()| if v > b { v } else { b })
                    })
                }
                (Kind::Mean { .. }, Some(p)) => {
                    p.load(xp);
                    p.run(yp, init, |_, acc, row| {
                        row.fold(acc, &taps, |s, v, ()| s.wadd(v))
                    })
                }
                (Kind::Max { .. }, None) => {
                    tap_major(xp, yp, &a, |b, v, _| if v > b { v } else { b })
                }
                (Kind::Mean { .. }, None) => tap_major(xp, yp, &a, |s, v, _| s.wadd(v)),
                (Kind::Lp(p), _) => tap_major(xp, yp, &a, |s, v, _| {
                    s.wadd(T::from_f64(v.to_f64().abs().powf(p)))
                }),
            }
        }
        match kind {
            Kind::Mean { include_pad } => {
                let counts = |a: &Axis| -> Vec<usize> {
                    (0..a.out)
                        .map(|o| match a.taps(o) {
                            _ if include_pad => a.padded_taps(o),
                            (lo, hi) => hi - lo,
                        })
                        .collect()
                };
                let (cz, cy, cx) = (counts(&a[0]), counts(&a[1]), counts(&a[2]));
                let mut per_plane = Vec::with_capacity(cz.len() * cy.len() * cx.len());
                for z in &cz {
                    for y in &cy {
                        per_plane.extend(cx.iter().map(|x| z * y * x));
                    }
                }
                for (v, &n) in y.iter_mut().zip(per_plane.iter().cycle()) {
                    *v = v.div_count(n).unwrap_or(T::ZERO);
                }
            }
            Kind::Lp(p) => y
                .iter_mut()
                .for_each(|v| *v = T::from_f64(v.to_f64().powf(1.0 / p))),
            Kind::Max { .. } => {}
        }
    }
    let mut out = vec![shaped(op, &shape, y)?];
    if with_indices {
        out.push(shaped(op, &shape, ind)?);
    }
    Ok(out)
}

fn shaped<T: Elem>(op: &str, shape: &[usize], v: Vec<T>) -> R<Tensor> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map(T::wrap)
        .map_err(|e| format!("{op}: {e}"))
}

/// A global pool: `f` of each (n, c) plane.
fn global<T: Elem>(
    ctx: &KernelCtx,
    op: &str,
    inputs: &[Option<&Tensor>],
    f: impl Fn(&[T]) -> T,
) -> KernelResult {
    let xt = input(op, inputs, 0)?;
    let x = same::<T>(op, xt, xt)?;
    let xs = x.shape();
    if xs.len() < 3 {
        return Err(format!(
            "{op}: X must be [N, C, spatial...], got shape {xs:?}"
        ));
    }
    let mut shape = xs[..2].to_vec();
    shape.resize(xs.len(), 1);
    check_out(ctx, op, &shape, (std::mem::size_of::<T>() * 8) as u64)?;
    let isz: usize = xs[2..].iter().product();
    let y: Vec<T> = if isz == 0 {
        vec![f(&[]); xs[0] * xs[1]]
    } else {
        data(x).chunks_exact(isz).map(f).collect()
    };
    Ok(vec![shaped(op, &shape, y)?])
}

/// Dispatches a global pool on float32 / float64 with `$f` (a closure over `&[T]`, generic
/// through `Elem`).
macro_rules! global_float {
    ($ctx:expr, $op:expr, $inputs:expr, |$v:ident| $body:expr) => {
        match input($op, $inputs, 0)?.dtype() {
            DType::F32 => global::<f32>($ctx, $op, $inputs, |$v: &[f32]| $body),
            DType::F64 => global::<f64>($ctx, $op, $inputs, |$v: &[f64]| $body),
            t => Err(unsupported_type($op, t)),
        }
    };
}

fn max_of<T: Elem>(v: &[T]) -> T {
    let mut it = v.iter().copied();
    let first = it.next().unwrap_or(T::LOWEST);
    it.fold(first, |m, x| if x > m { x } else { m })
}

/// The mean of `v`, summed in lanes (`common::lane_sum`).
fn mean_of<T: Elem>(v: &[T]) -> T {
    lane_sum(v).div_count(v.len()).unwrap_or(T::ZERO)
}

pub fn global_max_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    global_float!(ctx, "GlobalMaxPool", inputs, |v| max_of(v))
}

pub fn global_average_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    global_float!(ctx, "GlobalAveragePool", inputs, |v| mean_of(v))
}

pub fn global_lp_pool(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<GlobalLpPool>()?.p;
    global_float!(ctx, "GlobalLpPool", inputs, |v| {
        let s: f64 = v.iter().map(|x| x.to_f64().abs().powf(p)).sum();
        Elem::from_f64(s.powf(1.0 / p))
    })
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
