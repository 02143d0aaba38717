//! Normalizations over channels, groups and trailing axes, and Dropout (LayerNormalization is
//! in transformer.rs, LpNormalization in lanes.rs).
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | BatchNormalization | 1- | `epsilon` (1e-5), `momentum` (0.9); `spatial` (1) before 9; `training_mode` (0) from 14; `is_test`, `consumed_inputs` (before 7) ignored | X: T, scale, B, mean, var -> Y: T, running_mean?, running_var?, saved_mean? (before 14), saved_var? (before 14) |
//! | InstanceNormalization | 1- | `epsilon` (1e-5) | input: T, scale: T [C], B: T [C] -> output: T |
//! | GroupNormalization | 18- | `num_groups` (required), `epsilon` (1e-5), `stash_type` (1, from 21) | X: T, scale, bias ([num_groups] in 18, [C] from 21) -> Y: T |
//! | LRN | 1- | `size` (required), `alpha` (1e-4), `beta` (0.75), `bias` (1) | X: T -> Y: T |
//! | MeanVarianceNormalization | 9- | `axes` ([0, 2, 3]) | X: T -> Y: T |
//! | RMSNormalization | 23- | `axis` (-1), `epsilon` (1e-5), `stash_type` (1) | X: T, scale: V -> Y: V |
//! | Dropout | 1- | `ratio` (0.5) before 12, ignored; `seed` from 12, ignored | data: T, ratio? (from 12), training_mode? (from 12) -> output: T, mask? (T before 10, bool from 10) |
//!
//! X is [N, C, D1, ...] (a 1-D X is [N] with C = 1). BatchNormalization in inference mode is
//! `(x - mean) / sqrt(var + epsilon) * scale + B` per channel. Training mode (from 14
//! `training_mode = 1`; before 14 asked for by naming more than output Y, as onnxruntime reads
//! it) normalizes with the batch's own per-channel mean and population variance and outputs
//! `running = input * momentum + batch * (1 - momentum)` for mean and var (before 14 also the
//! batch's mean and var as saved_mean and saved_var). With `spatial = 0` (before 9) every
//! (channel, position) has its own statistics and parameters, shaped [C, D1, ...].
//! InstanceNormalization normalizes each (n, c) over D1...; GroupNormalization each (n, group of
//! C / num_groups channels), then scales per group (18) or per channel (21). MVN is
//! `(x - mean) / (sqrt(var) + 1e-9)` over `axes` (its function body). RMSNormalization is
//! `x / sqrt(mean(x^2) + epsilon) * scale` over dims [axis, rank), scale broadcast to them.
//! LRN: `x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2),
//! c + ceil((size-1)/2)])^beta`.
//!
//! Statistics are computed in float64 whatever the data type and `stash_type` (which parses but
//! changes nothing: at least the precision it asks for). Parameters (scale, bias, mean, var) may
//! be float32 or float64 independently of X (BatchNormalization's T1/T2, RMSNormalization's V).
//! Dropout is inference: output = data and an all-true (all-one before 10) mask; a true
//! `training_mode` with a non-zero ratio (random dropout) is an error naming it.

use ndarray::{ArrayD, IxDyn};

use super::broadcast::check_unidirectional;
use super::common::{check_out, input, norm_axes, norm_axis, opt_input, unsupported_type};
use super::lanes::elements;
use super::lowering::{NodeCtx, R};
use super::transformer::{placeholder, required, shaped, wanted, Real};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::{Dim, Node, TensorType};
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

// ---------------------------------------------------------------------------------------------
// Shared machinery

/// Float parameter input `i` as float64, broadcast unidirectionally to `to`.
fn param(
    op: &str,
    what: &str,
    inputs: &[Option<&Tensor>],
    i: usize,
    to: &[usize],
) -> Result<Vec<f64>, String> {
    let a = match input(op, inputs, i)? {
        Tensor::F32(a) => a.mapv(f64::from),
        Tensor::F64(a) => a.clone(),
        t => return Err(format!("{op}: '{what}' must be float, got {}", t.dtype())),
    };
    check_unidirectional(op, what, a.shape(), to)?;
    let b = a
        .broadcast(IxDyn(to))
        .ok_or_else(|| format!("{op}: {what} cannot be broadcast to {to:?}"))?;
    Ok(b.iter().copied().collect())
}

/// Mean and population variance of every element of `parts`, in float64 (two passes).
fn moments<'a, T: Real + 'a>(parts: impl Iterator<Item = &'a [T]> + Clone) -> (f64, f64) {
    let (mut n, mut sum) = (0usize, 0.0);
    for p in parts.clone() {
        n += p.len();
        sum += p.iter().map(|v| v.to_f64()).sum::<f64>();
    }
    let mean = sum / n as f64;
    let sq: f64 = parts
        .map(|p| p.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>())
        .sum();
    (mean, sq / n as f64)
}

/// `(v - mean) * k + b` for every `v` of `row`.
fn affine<T: Real>(row: &mut [T], mean: f64, k: f64, b: f64) {
    for v in row {
        *v = T::from_f64((v.to_f64() - mean) * k + b);
    }
}

/// X as [N, C, spatial size]; a 1-D X is [N] with C = 1.
fn ncs(op: &str, shape: &[usize], min_rank: usize) -> Result<(usize, usize, usize), String> {
    if shape.len() < min_rank {
        return Err(format!(
            "{op}: X must have rank {min_rank} or more ([N, C, ...]), got shape {shape:?}"
        ));
    }
    let n = shape.first().copied().unwrap_or(1);
    let c = shape.get(1).copied().unwrap_or(1);
    Ok((n, c, shape.get(2..).map_or(1, |d| d.iter().product())))
}

/// Float values as a tensor of `dtype` (float64, else float32).
fn float_tensor(op: &str, dtype: DType, shape: &[usize], v: Vec<f64>) -> Result<Tensor, String> {
    if dtype == DType::F64 {
        shaped(op, shape, v)
    } else {
        shaped(op, shape, v.into_iter().map(|x| x as f32).collect())
    }
}

/// Runs `f::<T>` for X's element type (float32 or float64).
macro_rules! by_float_type {
    ($op:expr, $x:expr, $f:ident($($arg:expr),*)) => {
        match input($op, $x, 0)?.dtype() {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            t => Err(unsupported_type($op, t)),
        }
    };
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization

#[derive(Debug)]
pub struct BatchNormalization {
    pub epsilon: f32,
    pub momentum: f32,
    /// From 14 the `training_mode` attribute; before, `None`: training mode is asked for by
    /// naming more outputs than Y.
    pub training_mode: Option<bool>,
    /// `spatial` (before 9): false gives every (channel, position) its own statistics.
    pub spatial: bool,
}

impl BatchNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(BatchNormalization {
            epsilon: a.float("epsilon", 1e-5)?,
            momentum: a.float("momentum", 0.9)?,
            training_mode: if a.opset >= 14 {
                Some(a.flag("training_mode", false)?)
            } else {
                None
            },
            spatial: a.opset >= 9 || a.flag("spatial", true)?,
        }))
    }

    pub fn training(&self, node: &Node) -> bool {
        self.training_mode
            .unwrap_or_else(|| (1..5).any(|i| node.output(i).is_some()))
    }

    /// The shape of the parameters and statistics for X of `shape`.
    fn param_shape<D: Clone>(&self, shape: &[D], one: D) -> Vec<D> {
        match shape.get(1..) {
            Some(rest) if !self.spatial && rest.len() > 1 => rest.to_vec(),
            Some([c, ..]) => vec![c.clone()],
            _ => vec![one],
        }
    }
}

impl Op for BatchNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let stats = |i: usize| TensorType {
            dtype: cx.input(i).dtype,
            shape: x.shape.as_ref().map(|s| self.param_shape(s, Dim::Known(1))),
        };
        vec![x.clone(), stats(3), stats(4), stats(3), stats(4)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| by_float_type!("BatchNormalization", inputs, batch_norm(ctx, inputs))
    }
}

fn batch_norm<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "BatchNormalization";
    let p = ctx.attrs::<BatchNormalization>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let shape = x.shape();
    let (n, c, s) = ncs(OP, shape, 1)?;
    let training = p.training(ctx.node);
    let (n_out, want) = wanted(ctx, OP, if p.training_mode.is_some() { 3 } else { 5 })?;
    if n_out > 1 && !training {
        return Err(format!(
            "{OP}: outputs running_mean and running_var exist only with training_mode = 1"
        ));
    }
    let pshape = p.param_shape(shape, 1);
    let (c, s) = if p.spatial { (c, s) } else { (c * s, 1) };
    let [scale, bias, mean_in, var_in] = [(1, "scale"), (2, "B"), (3, "mean"), (4, "var")]
        .map(|(i, what)| param(OP, what, inputs, i, &pshape));
    let (scale, bias, mean_in, var_in) = (scale?, bias?, mean_in?, var_in?);
    check_out(ctx, OP, shape, T::DTYPE.bits().unwrap_or(64))?;
    let mut y = elements(x).into_owned();
    let (mean, var) = if training {
        (0..c)
            .map(|ch| moments((0..n).map(|i| &y[(i * c + ch) * s..][..s])))
            .unzip()
    } else {
        (mean_in.clone(), var_in.clone())
    };
    let eps = p.epsilon as f64;
    if !y.is_empty() {
        for (k, chunk) in y.chunks_exact_mut(s).enumerate() {
            let ch = k % c;
            let inv = 1.0 / (var[ch] + eps).sqrt();
            affine(chunk, mean[ch], inv * scale[ch], bias[ch]);
        }
    }
    let mut outs = vec![shaped(OP, shape, y)?];
    if n_out > 1 {
        let m = p.momentum as f64;
        let run = |a: &[f64], b: &[f64]| -> Vec<f64> {
            a.iter()
                .zip(b)
                .map(|(a, b)| a * m + b * (1.0 - m))
                .collect()
        };
        let stats = [run(&mean_in, &mean), run(&var_in, &var), mean, var];
        let types = [3, 4].map(|i| opt_input(inputs, i).map_or(T::DTYPE, |t| t.dtype()));
        for (i, v) in stats.into_iter().enumerate().take(n_out - 1) {
            let dtype = types[i % 2];
            outs.push(if want[i + 1] {
                float_tensor(OP, dtype, &pshape, v)?
            } else {
                placeholder(dtype)
            });
        }
    }
    Ok(outs)
}

// ---------------------------------------------------------------------------------------------
// InstanceNormalization, GroupNormalization

#[derive(Debug)]
pub struct InstanceNormalization {
    pub epsilon: f32,
}

impl InstanceNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(InstanceNormalization {
            epsilon: a.float("epsilon", 1e-5)?,
        }))
    }
}

impl Op for InstanceNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let eps = ctx.attrs::<InstanceNormalization>()?.epsilon;
            const OP: &str = "InstanceNormalization";
            by_float_type!(OP, inputs, group_norm(ctx, inputs, OP, None, true, eps))
        }
    }
}

#[derive(Debug)]
pub struct GroupNormalization {
    pub num_groups: usize,
    pub epsilon: f32,
    /// From 21: scale and bias per channel (per group in 18).
    pub per_channel: bool,
    /// From 21; statistics are float64 whatever it asks.
    pub stash_type: i64,
}

impl GroupNormalization {
    pub fn parse(a: &Attrs) -> P {
        let g = a
            .opt_int("num_groups")?
            .ok_or("GroupNormalization: attribute 'num_groups' is required")?;
        let num_groups = usize::try_from(g).ok().filter(|&g| g > 0).ok_or_else(|| {
            format!("GroupNormalization: attribute 'num_groups' must be positive, got {g}")
        })?;
        Ok(Box::new(GroupNormalization {
            num_groups,
            epsilon: a.float("epsilon", 1e-5)?,
            per_channel: a.opset >= 21,
            stash_type: a.int("stash_type", 1)?,
        }))
    }
}

impl Op for GroupNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| {
            let p = ctx.attrs::<GroupNormalization>()?;
            let (g, pc, eps) = (Some(p.num_groups), p.per_channel, p.epsilon);
            const OP: &str = "GroupNormalization";
            by_float_type!(OP, inputs, group_norm(ctx, inputs, OP, g, pc, eps))
        }
    }
}

/// Normalizes each (n, group of channels) of X [N, C, ...]: `groups` of them (C when `None`),
/// then scales and shifts per channel or per group.
fn group_norm<T: Real>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    groups: Option<usize>,
    per_channel: bool,
    eps: f32,
) -> KernelResult {
    let x = required::<T>(op, inputs, 0)?;
    let shape = x.shape();
    let (_, c, s) = ncs(op, shape, 2)?;
    let g = groups.unwrap_or(c);
    if c > 0 && (g == 0 || c % g != 0) {
        return Err(format!(
            "{op}: num_groups {g} does not divide the {c} channels"
        ));
    }
    let pshape = [if per_channel { c } else { g }];
    let scale = param(op, "scale", inputs, 1, &pshape)?;
    let bias = param(op, "bias", inputs, 2, &pshape)?;
    check_out(ctx, op, shape, T::DTYPE.bits().unwrap_or(64))?;
    let mut y = elements(x).into_owned();
    if !y.is_empty() {
        let per_group = c / g;
        for (r, row) in y.chunks_exact_mut(per_group * s).enumerate() {
            let gi = r % g;
            let (mean, var) = moments(std::iter::once(&*row));
            let inv = 1.0 / (var + eps as f64).sqrt();
            for (k, chunk) in row.chunks_exact_mut(s).enumerate() {
                let pi = if per_channel { gi * per_group + k } else { gi };
                affine(chunk, mean, inv * scale[pi], bias[pi]);
            }
        }
    }
    Ok(vec![shaped(op, shape, y)?])
}

// ---------------------------------------------------------------------------------------------
// MeanVarianceNormalization, RMSNormalization

#[derive(Debug)]
pub struct MeanVarianceNormalization {
    pub axes: Vec<i64>,
}

impl MeanVarianceNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(MeanVarianceNormalization {
            axes: a.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
        }))
    }
}

impl Op for MeanVarianceNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| by_float_type!("MeanVarianceNormalization", inputs, mvn(ctx, inputs))
    }
}

fn mvn<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MeanVarianceNormalization";
    let x = required::<T>(OP, inputs, 0)?;
    let mut axes = norm_axes(
        OP,
        &ctx.attrs::<MeanVarianceNormalization>()?.axes,
        x.ndim(),
    )?;
    crate::ops::common::sort_usizes(&mut axes);
    check_out(ctx, OP, x.shape(), T::DTYPE.bits().unwrap_or(64))?;
    // The normalized axes permuted to the end: each group is one contiguous run.
    let mut order: Vec<usize> = (0..x.ndim()).filter(|d| !axes.contains(d)).collect();
    order.extend(&axes);
    let len: usize = axes.iter().map(|&d| x.shape()[d]).product();
    let mut buf = x
        .view()
        .permuted_axes(IxDyn(&order))
        .as_standard_layout()
        .into_owned();
    if let Some(s) = buf.as_slice_mut().filter(|s| !s.is_empty() && len > 0) {
        for chunk in s.chunks_exact_mut(len) {
            let (mean, var) = moments(std::iter::once(&*chunk));
            affine(chunk, mean, 1.0 / (var.sqrt() + 1e-9), 0.0);
        }
    }
    let mut back = vec![0; order.len()];
    for (i, &d) in order.iter().enumerate() {
        back[d] = i;
    }
    let y = buf.permuted_axes(IxDyn(&back));
    Ok(vec![T::wrap(y.as_standard_layout().into_owned())])
}

#[derive(Debug)]
pub struct RMSNormalization {
    pub axis: i64,
    pub epsilon: f32,
    /// Statistics are float64 whatever it asks.
    pub stash_type: i64,
}

impl RMSNormalization {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(RMSNormalization {
            axis: a.int("axis", -1)?,
            epsilon: a.float("epsilon", 1e-5)?,
            stash_type: a.int("stash_type", 1)?,
        }))
    }
}

impl Op for RMSNormalization {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![TensorType {
            dtype: cx.input(1).dtype,
            shape: cx.input(0).shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| by_float_type!("RMSNormalization", inputs, rms_norm(ctx, inputs))
    }
    /// SimplifiedLayerNormalization's one dispatch (statistics in float32), when the scale has
    /// one element per normalized element.
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let x = &c.input(0)?.shape;
        let axis = super::lowering::norm_axis(self.axis, x.len())?;
        let len: usize = x[axis..].iter().product();
        super::transformer::lower_layer_norm(
            c,
            self.epsilon,
            len,
            true,
            None,
            None,
            (None, None, None),
        )
    }
}

fn rms_norm<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "RMSNormalization";
    let p = ctx.attrs::<RMSNormalization>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let shape = x.shape();
    let axis = norm_axis(OP, p.axis, shape.len())?;
    let scale = param(OP, "scale", inputs, 1, &shape[axis..])?;
    check_out(ctx, OP, shape, 64)?;
    let mut y = elements(x).into_owned();
    let cols = scale.len();
    if !y.is_empty() {
        for row in y.chunks_exact_mut(cols) {
            let ms = row.iter().map(|v| v.to_f64().powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + p.epsilon as f64).sqrt();
            for (v, g) in row.iter_mut().zip(&scale) {
                *v = T::from_f64(v.to_f64() * inv * g);
            }
        }
    }
    // Y has scale's type (V), which may differ from X's.
    Ok(vec![
        match (shaped(OP, shape, y)?, input(OP, inputs, 1)?.dtype()) {
            (Tensor::F32(a), DType::F64) => Tensor::F64(a.mapv(f64::from)),
            (Tensor::F64(a), DType::F32) => Tensor::F32(a.mapv(|v| v as f32)),
            (t, _) => t,
        },
    ])
}

// ---------------------------------------------------------------------------------------------
// LRN

#[derive(Debug)]
pub struct LRN {
    pub size: usize,
    pub alpha: f32,
    pub beta: f32,
    pub bias: f32,
}

impl LRN {
    pub fn parse(a: &Attrs) -> P {
        let size = a
            .opt_int("size")?
            .ok_or("LRN: attribute 'size' is required")?;
        Ok(Box::new(LRN {
            size: usize::try_from(size)
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| format!("LRN: attribute 'size' must be positive, got {size}"))?,
            alpha: a.float("alpha", 1e-4)?,
            beta: a.float("beta", 0.75)?,
            bias: a.float("bias", 1.0)?,
        }))
    }
}

impl Op for LRN {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        |ctx, inputs| by_float_type!("LRN", inputs, lrn(ctx, inputs))
    }
}

fn lrn<T: Real>(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "LRN";
    let p = ctx.attrs::<LRN>()?;
    let x = required::<T>(OP, inputs, 0)?;
    let shape = x.shape();
    let (_, c, s) = ncs(OP, shape, 2)?;
    check_out(ctx, OP, shape, T::DTYPE.bits().unwrap_or(64))?;
    let xs = elements(x);
    let mut y = vec![T::ZERO; xs.len()];
    let (lo, hi) = ((p.size - 1) / 2, p.size / 2);
    let (alpha, beta, bias) = (p.alpha as f64 / p.size as f64, p.beta as f64, p.bias as f64);
    if !y.is_empty() {
        for (bx, by) in xs.chunks_exact(c * s).zip(y.chunks_exact_mut(c * s)) {
            for (ch, out) in by.chunks_exact_mut(s).enumerate() {
                let window = ch.saturating_sub(lo)..ch.saturating_add(hi).min(c - 1) + 1;
                for (j, o) in out.iter_mut().enumerate() {
                    let sum: f64 = window.clone().map(|i| bx[i * s + j].to_f64().powi(2)).sum();
                    let v = bx[ch * s + j].to_f64();
                    *o = T::from_f64(v / (bias + alpha * sum).powf(beta));
                }
            }
        }
    }
    Ok(vec![shaped(OP, shape, y)?])
}

// ---------------------------------------------------------------------------------------------
// Dropout

#[derive(Debug)]
pub struct Dropout {
    /// From 10 the mask is bool (the data's type before).
    pub bool_mask: bool,
    /// From 12: ratio and training_mode are inputs 1 and 2.
    pub mode_inputs: bool,
}

impl Dropout {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Dropout {
            bool_mask: a.opset >= 10,
            mode_inputs: a.opset >= 12,
        }))
    }
}

impl Op for Dropout {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let mask = TensorType {
            dtype: if self.bool_mask {
                Some(DType::BOOL)
            } else {
                x.dtype
            },
            shape: x.shape.clone(),
        };
        vec![x, mask]
    }
    fn kernel(&self) -> Kernel {
        dropout
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        if c.has_out(1) || c.has_input(2) {
            return Err("Dropout with a mask output or a training_mode input".into());
        }
        Ok(Lowered::Alias)
    }
}

/// The one value of a scalar input (`what` names it in the error).
fn scalar(op: &str, what: &str, t: &Tensor) -> Result<f64, String> {
    match t.to_f64_vec().as_slice() {
        [v] => Ok(*v),
        _ => Err(format!(
            "{op}: '{what}' must be a scalar, got shape {:?}",
            t.shape()
        )),
    }
}

pub fn dropout(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Dropout";
    let p = ctx.attrs::<Dropout>()?;
    let x = input(OP, inputs, 0)?;
    if p.mode_inputs {
        let training = match opt_input(inputs, 2) {
            Some(t @ Tensor::Bool(_)) => scalar(OP, "training_mode", t)? != 0.0,
            Some(t) => {
                return Err(format!(
                    "{OP}: 'training_mode' must be bool, got {}",
                    t.dtype()
                ))
            }
            None => false,
        };
        let ratio = match opt_input(inputs, 1) {
            Some(t) => scalar(OP, "ratio", t)?,
            None => 0.5,
        };
        if training && ratio != 0.0 {
            return Err(format!(
                "{OP}: training_mode is true with ratio {ratio}: random dropout is not supported \
                 (inference, or ratio 0, is)"
            ));
        }
    }
    let (n_out, want) = wanted(ctx, OP, 2)?;
    let mut outs = vec![x.clone()];
    if n_out > 1 {
        outs.push(if !want[1] {
            placeholder(DType::F32)
        } else if p.bool_mask {
            check_out(ctx, OP, x.shape(), 8)?;
            Tensor::Bool(ArrayD::from_elem(IxDyn(x.shape()), true))
        } else {
            match x {
                Tensor::F32(a) => Tensor::F32(ArrayD::ones(a.raw_dim())),
                Tensor::F64(a) => Tensor::F64(ArrayD::ones(a.raw_dim())),
                other => return Err(unsupported_type(OP, other.dtype())),
            }
        });
    }
    Ok(outs)
}

#[cfg(test)]
#[path = "norm_tests.rs"]
mod tests;
