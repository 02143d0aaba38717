//! com.microsoft SkipLayerNormalization and the kernel it shares with
//! SkipSimplifiedLayerNormalization (rms.rs): the residual sum, then each row normalized
//! (transformer.rs holds the row functions and the attribute types).

#[allow(unused_imports)]
use super::*;

/// onnxruntime's input/skip contract for the Skip*LayerNormalization ops: input is 2-D
/// [tokens, hidden] or 3-D [batch, seq, hidden]; skip has input's shape, or for a 3-D input
/// [1, seq, hidden] or [seq, hidden]. Returns the hidden size (not 0).
fn check_skip(op: &str, shape: &[usize], skip: &[usize]) -> Result<usize, String> {
    if !(2..=3).contains(&shape.len()) {
        return Err(format!(
            "{op}: input must be 2-D [tokens, hidden] or 3-D [batch, seq, hidden], got shape {shape:?}"
        ));
    }
    let h = shape[shape.len() - 1];
    if h == 0 {
        return Err(format!("{op}: hidden size (input's last dim) is 0"));
    }
    let skip_ok =
        skip == shape || (shape.len() == 3 && (skip == [1, shape[1], h] || skip == [shape[1], h]));
    if !skip_ok {
        return Err(format!(
            "{op}: skip of shape {skip:?} does not fit input {shape:?} (skip must have input's shape, \
             or [1, seq, hidden] or [seq, hidden] for a 3-D input)"
        ));
    }
    Ok(h)
}

/// com.microsoft SkipLayerNormalization: `input` is [batch, seq, hidden] or [tokens, hidden]; `skip` has input's shape, or for a 3-D
/// input [1, seq, hidden] or [seq, hidden] (shared by every batch). gamma, beta and bias are 1-D
/// of the hidden size. mean and inv_std_var are float32 (onnxruntime's type `U`), shaped as
/// input with the last dim 1.
pub fn skip_layer_norm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let eps = ctx.attrs::<SkipLayerNormalization>()?.epsilon;
    skip_norm(ctx, inputs, "SkipLayerNormalization", false, eps)
}

/// SkipLayerNormalization and, with `simplified`, SkipSimplifiedLayerNormalization (rms.rs):
/// one kernel. The simplified op has no beta (its bias is input 3, not 4), normalizes by the
/// root mean square without centering, and its `mean` output, which onnxruntime leaves
/// unwritten, is zeros here.
pub(in crate::ops) fn skip_norm(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    simplified: bool,
    eps: f32,
) -> KernelResult {
    match input(op, inputs, 0)?.dtype() {
        DType::F32 => skip_norm_typed::<f32>(ctx, inputs, op, simplified, eps),
        DType::F64 => skip_norm_typed::<f64>(ctx, inputs, op, simplified, eps),
        t => Err(unsupported_type(op, t)),
    }
}

fn skip_norm_typed<T: Real>(
    ctx: &KernelCtx,
    inputs: &[Option<&Tensor>],
    op: &str,
    simplified: bool,
    eps: f32,
) -> KernelResult {
    let x = required::<T>(op, inputs, 0)?;
    let skip = required::<T>(op, inputs, 1)?;
    let gamma = required::<T>(op, inputs, 2)?;
    let (beta, bias) = if simplified {
        (None, same_type::<T>(op, inputs, 3)?)
    } else {
        (
            same_type::<T>(op, inputs, 3)?,
            same_type::<T>(op, inputs, 4)?,
        )
    };
    let (n_out, want) = wanted(ctx, op, 4)?;
    let shape = x.shape();
    let h = check_skip(op, shape, skip.shape())?;
    let gamma = vector_param(op, "gamma", gamma, h)?;
    let beta = beta.map(|b| vector_param(op, "beta", b, h)).transpose()?;
    let bias = bias.map(|b| vector_param(op, "bias", b, h)).transpose()?;
    let mut stat_shape = shape.to_vec();
    stat_shape[shape.len() - 1] = 1;
    let bits = T::DTYPE.bits().unwrap_or(64);
    check_out(ctx, op, shape, bits)?;
    if want[3] {
        check_out(ctx, op, shape, bits)?;
    }
    if want[1] || want[2] {
        check_out(ctx, op, &stat_shape, 32)?;
    }

    let xs = elements(x);
    let ss = elements(skip);
    let total = xs.len();
    let mut y = vec![T::ZERO; total];
    let mut sum = if want[3] {
        vec![T::ZERO; total]
    } else {
        Vec::new()
    };
    let rows = total / h;
    // At least 1: with no skip rows there are no input rows either.
    let skip_rows = (ss.len() / h).max(1);
    // The residual sums first (a memory-bound pass), then each row normalized in place.
    for (r, (yr, xr)) in y.chunks_exact_mut(h).zip(xs.chunks_exact(h)).enumerate() {
        let sr = &ss[(r % skip_rows) * h..][..h];
        match &bias {
            Some(b) => {
                for (((o, &a), &s), &c) in yr.iter_mut().zip(xr).zip(sr).zip(b.iter()) {
                    *o = a + s + c;
                }
            }
            None => {
                for ((o, &a), &s) in yr.iter_mut().zip(xr).zip(sr) {
                    *o = a + s;
                }
            }
        }
    }
    if want[3] {
        sum.copy_from_slice(&y);
    }
    let norm = |yr: &mut [T]| -> (f32, f32) {
        match (simplified, T::DTYPE == DType::F64) {
            (true, true) => (
                0.0,
                crate::ops::rms::rms_row::<T, f64>(yr, &gamma, eps as f64) as f32,
            ),
            (true, false) => (0.0, crate::ops::rms::rms_row::<T, f32>(yr, &gamma, eps)),
            (false, true) => {
                let (m, inv) = normalize_row::<T, f64>(yr, &gamma, beta.as_deref(), eps as f64);
                (m as f32, inv as f32)
            }
            (false, false) => normalize_row::<T, f32>(yr, &gamma, beta.as_deref(), eps),
        }
    };
    let mut means = Vec::with_capacity(if want[1] { rows } else { 0 });
    let mut invs = Vec::with_capacity(if want[2] { rows } else { 0 });
    if want[1] || want[2] {
        for yr in y.chunks_exact_mut(h) {
            let (m, inv) = norm(yr);
            if want[1] {
                means.push(m);
            }
            if want[2] {
                invs.push(inv);
            }
        }
    } else {
        // Without the statistics, rows split between threads inside a pool of several
        // (`--threads`); each row is normalized the same way anywhere. About 4 multiply-adds'
        // worth per element (two passes to sum, one to scale).
        let run = |_: std::ops::Range<usize>, ys: &mut [T]| -> Result<(), String> {
            ys.chunks_exact_mut(h).for_each(|yr| {
                norm(yr);
            });
            Ok(())
        };
        match crate::threads::split(rows, total * 4) {
            Some(parts) => crate::threads::for_each_rows(&mut y, h, parts, run)?,
            None => run(0..rows, &mut y)?,
        }
    }

    let mut outs = vec![shaped(op, shape, y)?];
    for (i, stats) in [(1, means), (2, invs)] {
        if i < n_out {
            outs.push(if want[i] {
                shaped(op, &stat_shape, stats)?
            } else {
                placeholder(DType::F32)
            });
        }
    }
    if n_out > 3 {
        outs.push(if want[3] {
            shaped(op, shape, sum)?
        } else {
            placeholder(T::DTYPE)
        });
    }
    Ok(outs)
}
