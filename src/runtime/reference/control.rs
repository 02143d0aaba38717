//! If, Loop and Scan on the reference backend: the executor hands a control-flow node here with
//! its bodies (planned models), its inputs and the outer-scope values its bodies read; each
//! body runs on a nested executor, planned once per run of the node.

use std::collections::HashMap;

use ndarray::{ArrayD, Axis, IxDyn};

use super::executor::Executor;
use crate::ir::{Dim, Model};
use crate::ops::control_flow::Scan;
use crate::ops::KernelCtx;
use crate::tensor::{DType, Tensor};
use crate::{Error, Result};

/// Most iterations a Loop may run (a trip count above it is refused before the first one; a
/// cond-driven loop stops with an error on reaching it).
pub const MAX_ITERATIONS: u64 = 1 << 20;

pub fn is_control(op_type: &str) -> bool {
    matches!(op_type, "If" | "Loop" | "Scan")
}

/// Applies `$body` to the array inside a tensor and wraps the result in the same variant.
macro_rules! same_variant {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            Tensor::F32($a) => Tensor::F32($body),
            Tensor::F64($a) => Tensor::F64($body),
            Tensor::I32($a) => Tensor::I32($body),
            Tensor::I64($a) => Tensor::I64($body),
            Tensor::Bool($a) => Tensor::Bool($body),
            Tensor::F16($a) => Tensor::F16($body),
            Tensor::BF16($a) => Tensor::BF16($body),
            Tensor::I8($a) => Tensor::I8($body),
            Tensor::U8($a) => Tensor::U8($body),
            Tensor::I16($a) => Tensor::I16($body),
            Tensor::U16($a) => Tensor::U16($body),
            Tensor::U32($a) => Tensor::U32($body),
            Tensor::U64($a) => Tensor::U64($body),
            Tensor::I4($a) => Tensor::I4($body),
            Tensor::U4($a) => Tensor::U4($body),
            Tensor::Str($a) => Tensor::Str($body),
        }
    };
}

/// Runs control-flow node `ctx.node`.
pub(super) fn run(
    ctx: &KernelCtx,
    bodies: &[(String, Model)],
    args: &[Option<&Tensor>],
    outer: &HashMap<&str, &Tensor>,
) -> Result<Vec<Tensor>> {
    let node = ctx.node;
    let err = |message: String| Error::Kernel {
        op_type: node.op_type.clone(),
        node: node.name.clone(),
        message,
    };
    let body = |name: &str| -> Result<Executor> {
        let m = bodies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m)
            .ok_or_else(|| err(format!("attribute '{name}' (a graph) is missing")))?;
        Executor::new(m, ctx.limits)
    };
    let bytes_cap = ctx.limits.max_tensor_bytes;
    match node.op_type.as_str() {
        "If" => {
            let cond = args
                .first()
                .copied()
                .flatten()
                .ok_or_else(|| err("input 'cond' is missing".into()))?;
            let c = flag(cond).map_err(|m| err(format!("cond {m}")))?;
            let ex = body(if c { "then_branch" } else { "else_branch" })?;
            let outs = ex.run_body(Vec::new(), outer)?;
            if outs.len() < node.outputs.len() {
                return Err(err(format!(
                    "the branch has {} outputs, the node names {}",
                    outs.len(),
                    node.outputs.len()
                )));
            }
            Ok(outs)
        }
        "Loop" => {
            let trip = match args.first().copied().flatten() {
                Some(t) => {
                    let m = match t.to_i64_vec().as_deref() {
                        Some([m]) => *m,
                        _ => return Err(err("trip count M is not one int64".into())),
                    };
                    if m < 0 || m as u64 > MAX_ITERATIONS {
                        return Err(err(format!(
                            "trip count {m} is outside 0..={MAX_ITERATIONS} (the iteration limit)"
                        )));
                    }
                    Some(m as u64)
                }
                None => None,
            };
            let mut cond = match args.get(1).copied().flatten() {
                Some(t) => flag(t).map_err(|m| err(format!("cond {m}")))?,
                None => true,
            };
            let mut carried: Vec<Tensor> = Vec::new();
            for (i, a) in args.iter().enumerate().skip(2) {
                carried.push(
                    a.ok_or_else(|| err(format!("loop-carried input {i} is missing")))?
                        .clone(),
                );
            }
            let n = carried.len();
            let ex = body("body")?;
            let mut scans: Vec<Vec<Tensor>> = Vec::new();
            let mut scan_bytes = 0u64;
            let mut i = 0u64;
            while cond && trip.is_none_or(|m| i < m) {
                if i >= MAX_ITERATIONS {
                    return Err(err(format!(
                        "ran {MAX_ITERATIONS} iterations (the limit) without stopping"
                    )));
                }
                let mut formal = vec![scalar_i64(i as i64), scalar_bool(cond)];
                formal.append(&mut carried);
                let mut outs = ex.run_body(formal, outer)?.into_iter();
                cond = match outs.next() {
                    Some(t) => flag(&t).map_err(|m| err(format!("the body's cond {m}")))?,
                    None => return Err(err("the body has no outputs".into())),
                };
                carried = outs.by_ref().take(n).collect();
                if carried.len() != n {
                    return Err(err(format!(
                        "the body returns fewer than {n} carried values"
                    )));
                }
                let rest: Vec<Tensor> = outs.collect();
                scan_bytes = scan_bytes.saturating_add(rest.iter().map(bytes_of).sum());
                if scan_bytes > bytes_cap {
                    return Err(err(format!(
                        "scan outputs grow past {bytes_cap} bytes (the tensor limit)"
                    )));
                }
                if scans.is_empty() {
                    scans = rest.into_iter().map(|t| vec![t]).collect();
                } else {
                    for (s, t) in scans.iter_mut().zip(rest) {
                        s.push(t);
                    }
                }
                i += 1;
            }
            let k = node.outputs.len().saturating_sub(n);
            let mut outs = carried;
            for j in 0..k {
                match scans.get(j) {
                    Some(parts) => outs.push(stack(parts, 0).map_err(err)?),
                    None => outs.push(empty_scan(&bodies_model(bodies, "body"), n + 1 + j)),
                }
            }
            Ok(outs)
        }
        "Scan" => {
            let op = (ctx.op as &dyn std::any::Any)
                .downcast_ref::<Scan>()
                .ok_or_else(|| err("not a Scan op".into()))?;
            let ran = if op.batched {
                run_scan8(op, &body("body")?, args, outer, bytes_cap)
            } else {
                run_scan(op, &body("body")?, args, outer, bytes_cap)
            };
            ran.map_err(|e| match e {
                Error::Other(m) => err(m),
                e => e,
            })
        }
        other => Err(err(format!("{other} is not a control-flow op"))),
    }
}

fn bodies_model<'b>(bodies: &'b [(String, Model)], name: &str) -> Option<&'b Model> {
    bodies.iter().find(|(n, _)| n == name).map(|(_, m)| m)
}

/// Scan's inputs from `skip` on (Scan 8 skips sequence_lens), every one required, and how many
/// of them are states (those before the `m` scan inputs).
fn states_and_scans<'t>(
    args: &[Option<&'t Tensor>],
    skip: usize,
    m: usize,
) -> Result<(Vec<&'t Tensor>, usize)> {
    let e = |m: String| Error::Other(m);
    let all: Vec<&Tensor> = args
        .iter()
        .enumerate()
        .skip(skip)
        .map(|(i, a)| a.ok_or_else(|| e(format!("input {i} is missing"))))
        .collect::<Result<_>>()?;
    let n = all.len().checked_sub(m).ok_or_else(|| {
        e(format!(
            "{} state and scan inputs, fewer than num_scan_inputs {m}",
            all.len()
        ))
    })?;
    Ok((all, n))
}

fn run_scan(
    op: &Scan,
    ex: &Executor,
    args: &[Option<&Tensor>],
    outer: &HashMap<&str, &Tensor>,
    bytes_cap: u64,
) -> Result<Vec<Tensor>> {
    let e = |m: String| Error::Other(m);
    let m = op.num_scan_inputs;
    let (all, n) = states_and_scans(args, 0, m)?;
    let mut states: Vec<Tensor> = all[..n].iter().map(|t| (*t).clone()).collect();
    let mut axes = Vec::with_capacity(m);
    let mut len: Option<usize> = None;
    for (j, x) in all[n..].iter().enumerate() {
        let rank = x.shape().len() as i64;
        let a = op.input_axes.get(j).copied().unwrap_or(0);
        let ax = if a < 0 { a + rank } else { a };
        if !(0..rank).contains(&ax) {
            return Err(e(format!(
                "scan input {j}: axis {a} is out of range for rank {rank}"
            )));
        }
        let l = x.shape()[ax as usize];
        if len.is_some_and(|p| p != l) {
            return Err(e(format!(
                "scan inputs differ in sequence length ({l} vs {})",
                len.unwrap_or(0)
            )));
        }
        len = Some(l);
        axes.push(ax as usize);
    }
    let len = len.unwrap_or(0);
    let mut scans: Vec<Vec<Tensor>> = Vec::new();
    let mut scan_bytes = 0u64;
    for t in 0..len {
        let mut formal = std::mem::take(&mut states);
        for (j, x) in all[n..].iter().enumerate() {
            let rev = op.input_directions.get(j).copied().unwrap_or(0) == 1;
            let idx = if rev { len - 1 - t } else { t };
            let ax = Axis(axes[j]);
            formal.push(same_variant!(*x, a => a.index_axis(ax, idx).to_owned()));
        }
        let mut outs = ex.run_body(formal, outer)?.into_iter();
        states = outs.by_ref().take(n).collect();
        if states.len() != n {
            return Err(e(format!("the body returns fewer than {n} state values")));
        }
        let rest: Vec<Tensor> = outs.collect();
        scan_bytes = scan_bytes.saturating_add(rest.iter().map(bytes_of).sum());
        if scan_bytes > bytes_cap {
            return Err(e(format!(
                "scan outputs grow past {bytes_cap} bytes (the tensor limit)"
            )));
        }
        if scans.is_empty() {
            scans = rest.into_iter().map(|t| vec![t]).collect();
        } else {
            for (s, t) in scans.iter_mut().zip(rest) {
                s.push(t);
            }
        }
    }
    let mut outs = states;
    for (k, mut parts) in scans.into_iter().enumerate() {
        if op.output_directions.get(k).copied().unwrap_or(0) == 1 {
            parts.reverse();
        }
        let rank = parts.first().map_or(0, |p| p.shape().len()) as i64 + 1;
        let a = op.output_axes.get(k).copied().unwrap_or(0);
        let ax = if a < 0 { a + rank } else { a };
        if !(0..rank).contains(&ax) {
            return Err(e(format!(
                "scan output {k}: axis {a} is out of range for rank {rank}"
            )));
        }
        outs.push(stack(&parts, ax as usize).map_err(e)?);
    }
    Ok(outs)
}

/// Scan 8: for each batch entry b, Scan 9's loop over b's slices of the inputs (the scan axis is
/// 1, axis 0 of a slice) for its `sequence_lens[b]` steps (1 to the scan axis' length, as
/// onnxruntime requires); the final states stacked on a batch axis, each scan output
/// zero-padded to the scan axis' length and stacked likewise.
fn run_scan8(
    op: &Scan,
    ex: &Executor,
    args: &[Option<&Tensor>],
    outer: &HashMap<&str, &Tensor>,
    bytes_cap: u64,
) -> Result<Vec<Tensor>> {
    let e = |m: String| Error::Other(m);
    let (all, n) = states_and_scans(args, 1, op.num_scan_inputs)?;
    let batch = all
        .first()
        .and_then(|t| t.shape().first().copied())
        .unwrap_or(0);
    let mut seq = None;
    for (i, t) in all.iter().enumerate() {
        let s = t.shape();
        let scan = i >= n;
        if s.len() < 1 + usize::from(scan) || s[0] != batch {
            return Err(e(format!(
                "opset 8 takes [batch, ...] states and [batch, sequence, ...] scan inputs: input {} has shape {s:?}, batch {batch}",
                i + 1
            )));
        }
        if scan && seq.is_some_and(|q| q != s[1]) {
            return Err(e(format!(
                "scan inputs differ in sequence length ({} vs {})",
                s[1],
                seq.unwrap_or(0)
            )));
        }
        if scan {
            seq = Some(s[1]);
        }
    }
    let seq = seq.unwrap_or(0);
    if batch == 0 || seq == 0 {
        return Err(e(format!(
            "opset 8 needs a batch and a sequence of at least 1, got batch {batch}, sequence {seq}"
        )));
    }
    let lens: Vec<usize> = match args.first().copied().flatten() {
        Some(t) if !t.is_empty() => {
            let Tensor::I64(l) = t else {
                return Err(e(format!("sequence_lens is {}, int64 expected", t.dtype())));
            };
            if l.shape() != [batch] {
                return Err(e(format!(
                    "sequence_lens has shape {:?}, [{batch}] (the batch) expected",
                    l.shape()
                )));
            }
            l.iter()
                .map(|&v| {
                    // onnxruntime refuses an empty sequence too; the spec is silent on it.
                    usize::try_from(v)
                        .ok()
                        .filter(|&v| (1..=seq).contains(&v))
                        .ok_or_else(|| {
                            e(format!(
                                "sequence_lens holds {v}, outside 1..={seq} (the scan axis' length)"
                            ))
                        })
                })
                .collect::<Result<_>>()?
        }
        _ => vec![seq; batch],
    };
    let mut states: Vec<Vec<Tensor>> = vec![Vec::with_capacity(batch); n];
    let mut scans: Vec<Vec<Vec<Tensor>>> = Vec::new();
    for (b, &len) in lens.iter().enumerate() {
        let slices: Vec<Tensor> = all
            .iter()
            .enumerate()
            .map(|(i, t)| {
                same_variant!(*t, a => {
                    let a = a.index_axis(Axis(0), b);
                    if i < n {
                        a.to_owned()
                    } else {
                        a.slice_axis(Axis(0), ndarray::Slice::from(0..len)).to_owned()
                    }
                })
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = slices.iter().map(Some).collect();
        let outs = run_scan(op, ex, &refs, outer, bytes_cap)?;
        for (k, t) in outs.into_iter().enumerate() {
            match k.checked_sub(n) {
                None => states[k].push(t),
                Some(j) => {
                    if scans.len() <= j {
                        scans.resize_with(j + 1, || vec![Vec::new(); batch]);
                    }
                    scans[j][b] = (0..len)
                        .map(|i| same_variant!(&t, a => a.index_axis(Axis(0), i).to_owned()))
                        .collect();
                }
            }
        }
    }
    let mut outs = Vec::with_capacity(n + scans.len());
    for parts in &states {
        outs.push(stack(parts, 0).map_err(e)?);
    }
    for (j, per_batch) in scans.iter().enumerate() {
        // A step's shape and type (every entry ran at least one step).
        let Some(step) = per_batch.iter().find_map(|p| p.first().cloned()) else {
            return Err(e(format!("scan output {j} has no step")));
        };
        let padded = (batch as u64)
            .saturating_mul(seq as u64)
            .saturating_mul(bytes_of(&step));
        if padded > bytes_cap {
            return Err(e(format!(
                "scan output {j} would take {padded} bytes, past {bytes_cap} (the tensor limit)"
            )));
        }
        let zero = same_variant!(&step, a => a.mapv(|_| Default::default()));
        let mut rows = Vec::with_capacity(batch);
        for p in per_batch {
            let mut steps = p.clone();
            steps.resize(seq, zero.clone());
            rows.push(stack(&steps, 0).map_err(e)?);
        }
        outs.push(stack(&rows, 0).map_err(e)?);
    }
    Ok(outs)
}

fn bytes_of(t: &Tensor) -> u64 {
    (t.len() as u64).saturating_mul(t.dtype().bits().unwrap_or(64).div_ceil(8))
}

fn scalar_i64(v: i64) -> Tensor {
    Tensor::I64(ArrayD::from_elem(IxDyn(&[]), v))
}

fn scalar_bool(v: bool) -> Tensor {
    Tensor::Bool(ArrayD::from_elem(IxDyn(&[]), v))
}

/// The value of a one-element bool tensor.
fn flag(t: &Tensor) -> std::result::Result<bool, String> {
    match t {
        Tensor::Bool(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(false)),
        t => Err(format!(
            "is not one bool (a {} of shape {:?})",
            t.dtype(),
            t.shape()
        )),
    }
}

/// Stacks equal-shaped tensors of one type along a new axis `axis`.
fn stack(parts: &[Tensor], axis: usize) -> std::result::Result<Tensor, String> {
    macro_rules! by_variant {
        ($($v:ident),*) => {
            match parts.first() {
                $(Some(Tensor::$v(_)) => {
                    let views = parts
                        .iter()
                        .map(|t| match t {
                            Tensor::$v(a) => Ok(a.view()),
                            t => Err(format!("scan output changes type to {}", t.dtype())),
                        })
                        .collect::<std::result::Result<Vec<_>, String>>()?;
                    let first = views[0].shape().to_vec();
                    if views.iter().any(|v| v.shape() != first.as_slice()) {
                        return Err("scan outputs differ in shape".into());
                    }
                    let mut shape = first;
                    shape.insert(axis, views.len());
                    let views: Vec<_> =
                        views.into_iter().map(|v| v.insert_axis(Axis(axis))).collect();
                    crate::ops::concat::joined(&views, axis, &shape).map(Tensor::$v)
                })*
                None => Err("no scan output to stack".into()),
            }
        };
    }
    by_variant!(F32, F64, I32, I64, Bool, F16, BF16, I8, U8, I16, U16, U32, U64, I4, U4, Str)
}

/// The scan output of a loop that ran no iteration: empty along the stacked axis, of the body
/// output's declared type and (known) dims.
fn empty_scan(body: &Option<&Model>, out: usize) -> Tensor {
    let ty = body.and_then(|m| {
        let g = &m.graph;
        g.outputs.get(out).map(|&v| g.value(v).ty.clone())
    });
    let mut shape = vec![0usize];
    if let Some(s) = ty.as_ref().and_then(|t| t.shape.as_ref()) {
        shape.extend(s.iter().map(|d| match d {
            Dim::Known(k) => (*k).max(0) as usize,
            _ => 0,
        }));
    }
    let f = Tensor::F32(ArrayD::zeros(IxDyn(&shape)));
    let d = ty.and_then(|t| t.dtype).unwrap_or(DType::F32);
    f.cast(d).unwrap_or(f)
}
