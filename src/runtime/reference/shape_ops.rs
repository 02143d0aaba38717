//! Data-movement kernels: Identity, Reshape, Transpose, Shape, Unsqueeze, Squeeze, Concat, plus
//! Cast and Constant.

use ndarray::{concatenate, ArrayD, ArrayViewD, Axis, IxDyn};

use super::common::{
    bits, check_out, input, int_list, map_tensor, norm_axes, norm_axis, opt_input, type_mismatch,
};
use super::{KernelCtx, KernelResult};
use crate::onnx::proto::data_type as dt;
use crate::onnx::tensor::to_tensor;
use crate::tensor::{DType, Tensor};

pub fn identity(_ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    Ok(vec![input("Identity", inputs, 0)?.clone()])
}

/// The output shape of a kernel whose output is its input 0 with the same elements in the same
/// row-major order, only relabelled (Identity, Reshape, Squeeze, Unsqueeze, Flatten). The
/// executor uses it to hand over input 0 without a copy when this node is its last reader.
pub type RelabelShape = fn(&KernelCtx, &[Option<&Tensor>]) -> Result<Vec<usize>, String>;

/// The `RelabelShape` of a default-domain op, if it only relabels its input's shape.
pub fn relabel_shape(op_type: &str) -> Option<RelabelShape> {
    Some(match op_type {
        "Identity" => |_, inputs| Ok(input("Identity", inputs, 0)?.shape().to_vec()),
        "Reshape" => reshape_shape,
        "Squeeze" => squeeze_shape,
        "Unsqueeze" => unsqueeze_shape,
        "Flatten" => super::index_ops::flatten_shape,
        _ => return None,
    })
}

/// `t` (owned) relabelled to `shape`, which has its element count: no copy when `t` is row-major.
pub fn relabel(op: &str, t: Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if shape.iter().product::<usize>() != t.len() {
        return Err(format!(
            "{op}: cannot reshape {:?} ({} elements) to {shape:?}",
            t.shape(),
            t.len()
        ));
    }
    Ok(map_tensor!(t, a => a
        .into_shape_clone(IxDyn(shape))
        .map_err(|e| format!("{op}: {e}"))?))
}

/// Same data in a new shape with the same element count (row-major order is preserved).
fn reshaped(op: &str, t: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    if n != t.len() {
        return Err(format!(
            "{op}: cannot reshape {:?} ({} elements) to {shape:?}",
            t.shape(),
            t.len()
        ));
    }
    // `to_shape` borrows a row-major input and copies only what the output needs to own.
    Ok(map_tensor!(t, a => a
        .to_shape(IxDyn(shape))
        .map_err(|e| format!("{op}: {e}"))?
        .into_owned()))
}

/// Reshape (5, 13; 14+ adds `allowzero`): 0 copies the input dim (unless allowzero), -1 is
/// inferred from the element count.
pub fn reshape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = reshape_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Reshape",
        input("Reshape", inputs, 0)?,
        &shape,
    )?])
}

fn reshape_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Reshape";
    let data = input(OP, inputs, 0)?;
    let spec = int_list(OP, "shape", input(OP, inputs, 1)?)?;
    let allowzero = ctx.opset >= 14 && ctx.node.attr_int("allowzero").unwrap_or(0) != 0;
    let mismatch = || {
        format!(
            "{OP}: cannot reshape {:?} ({} elements) to {spec:?}",
            data.shape(),
            data.len()
        )
    };
    if allowzero && spec.contains(&0) && spec.contains(&-1) {
        return Err(format!(
            "{OP}: shape {spec:?} has both 0 and -1, which allowzero=1 makes ambiguous"
        ));
    }
    let mut infer = None;
    let mut shape = Vec::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        shape.push(match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(format!("{OP}: shape {spec:?} has more than one -1"));
                }
                1
            }
            0 if !allowzero => *data.shape().get(i).ok_or_else(|| {
                format!(
                    "{OP}: shape {spec:?} has 0 at index {i}, past the input rank {} of {:?}",
                    data.shape().len(),
                    data.shape()
                )
            })?,
            d if d < 0 => return Err(format!("{OP}: invalid dimension {d} in shape {spec:?}")),
            d => usize::try_from(d).map_err(|_| mismatch())?,
        });
    }
    // Overflow here means the product cannot equal the element count.
    let known = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(mismatch)?;
    if let Some(i) = infer {
        if known == 0 || data.len() % known != 0 {
            return Err(mismatch());
        }
        shape[i] = data.len() / known;
    } else if known != data.len() {
        return Err(mismatch());
    }
    Ok(shape)
}

/// Transpose: `perm` defaults to reversing the axes.
pub fn transpose(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Transpose";
    let data = input(OP, inputs, 0)?;
    let rank = data.shape().len();
    let perm: Vec<usize> = match ctx.node.attr_ints("perm") {
        None => (0..rank).rev().collect(),
        Some(p) => {
            let mut seen = vec![false; rank];
            let mut out = Vec::with_capacity(rank);
            for &v in p {
                match usize::try_from(v).ok().filter(|&u| u < rank) {
                    Some(u) if !seen[u] => {
                        seen[u] = true;
                        out.push(u);
                    }
                    _ => break,
                }
            }
            if out.len() != rank || p.len() != rank {
                return Err(format!(
                    "{OP}: perm {p:?} is not a permutation of the {rank} axes of {:?}",
                    data.shape()
                ));
            }
            out
        }
    };
    Ok(vec![map_tensor!(data, a => permuted(a, &perm))])
}

/// `a` with its axes permuted, in row-major order. A row-major input is walked directly: an
/// odometer over the output's outer dims, the innermost dim copied as one run (a slice copy when
/// it is the input's innermost too). Otherwise ndarray permutes a view and copies it.
fn permuted<T: Copy>(a: &ArrayD<T>, perm: &[usize]) -> ArrayD<T> {
    let (src, rank) = match a.as_slice() {
        Some(s) if a.ndim() > 0 && !s.is_empty() => (s, a.ndim()),
        _ => {
            return a
                .view()
                .permuted_axes(perm.to_vec())
                .as_standard_layout()
                .into_owned()
        }
    };
    let shape = a.shape();
    let mut in_strides = vec![1usize; rank];
    for d in (0..rank - 1).rev() {
        in_strides[d] = in_strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let (inner, step) = (out_shape[rank - 1], strides[rank - 1]);
    let mut out = Vec::with_capacity(src.len());
    let mut idx = vec![0usize; rank - 1];
    let mut base = 0usize;
    for _ in 0..src.len() / inner {
        if step == 1 {
            out.extend_from_slice(&src[base..base + inner]);
        } else {
            out.extend((0..inner).map(|j| src[base + j * step]));
        }
        for d in (0..rank - 1).rev() {
            idx[d] += 1;
            base += strides[d];
            if idx[d] < out_shape[d] {
                break;
            }
            base -= strides[d] * out_shape[d];
            idx[d] = 0;
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).expect("a permutation keeps the element count")
}

/// Shape; from version 15, `start`/`end` slice it, clamped to [0, rank] after adding rank to
/// negative values.
pub fn shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let data = input("Shape", inputs, 0)?;
    let dims: Vec<i64> = data.shape().iter().map(|&d| d as i64).collect();
    let r = dims.len() as i64;
    let (mut start, mut end) = (0, r);
    if ctx.opset >= 15 {
        let clamp = |v: i64| if v < 0 { v + r } else { v }.clamp(0, r);
        start = clamp(ctx.node.attr_int("start").unwrap_or(0));
        end = clamp(ctx.node.attr_int("end").unwrap_or(r));
    }
    let slice = if start < end {
        &dims[start as usize..end as usize]
    } else {
        &[]
    };
    Ok(vec![Tensor::from_i64s(slice)])
}

/// Axes of Squeeze/Unsqueeze: an input from version 13, an attribute before.
fn axes_arg(
    ctx: &KernelCtx,
    op: &str,
    inputs: &[Option<&Tensor>],
) -> Result<Option<Vec<i64>>, String> {
    if ctx.opset >= 13 {
        opt_input(inputs, 1)
            .map(|t| int_list(op, "axes", t))
            .transpose()
    } else {
        Ok(ctx.node.attr_ints("axes").map(<[i64]>::to_vec))
    }
}

/// Unsqueeze: axes index the output, whose rank is input rank + len(axes).
pub fn unsqueeze(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = unsqueeze_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Unsqueeze",
        input("Unsqueeze", inputs, 0)?,
        &shape,
    )?])
}

fn unsqueeze_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Unsqueeze";
    let data = input(OP, inputs, 0)?;
    let axes = axes_arg(ctx, OP, inputs)?.ok_or_else(|| format!("{OP}: 'axes' is required"))?;
    let out_rank = data.shape().len() + axes.len();
    let axes = norm_axes(OP, &axes, out_rank)?;
    let mut rest = data.shape().iter();
    Ok((0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                rest.next().copied().unwrap_or(1)
            }
        })
        .collect())
}

/// Squeeze: without axes, every dim of size 1 goes; a listed axis whose dim is not 1 is an error.
pub fn squeeze(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let shape = squeeze_shape(ctx, inputs)?;
    Ok(vec![reshaped(
        "Squeeze",
        input("Squeeze", inputs, 0)?,
        &shape,
    )?])
}

fn squeeze_shape(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<usize>, String> {
    const OP: &str = "Squeeze";
    let data = input(OP, inputs, 0)?;
    let dims = data.shape();
    let drop: Vec<usize> = match axes_arg(ctx, OP, inputs)? {
        None => (0..dims.len()).filter(|&i| dims[i] == 1).collect(),
        Some(axes) => {
            let axes = norm_axes(OP, &axes, dims.len())?;
            if let Some(&bad) = axes.iter().find(|&&a| dims[a] != 1) {
                return Err(format!(
                    "{OP}: axis {bad} of shape {dims:?} has size {}, not 1",
                    dims[bad]
                ));
            }
            axes
        }
    };
    Ok((0..dims.len())
        .filter(|i| !drop.contains(i))
        .map(|i| dims[i])
        .collect())
}

/// Concat: same type and rank everywhere; dims agree except on `axis`.
pub fn concat(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Concat";
    if inputs.is_empty() {
        return Err(format!("{OP}: needs at least one input"));
    }
    let ts: Vec<&Tensor> = (0..inputs.len())
        .map(|i| input(OP, inputs, i))
        .collect::<Result<_, _>>()?;
    let first = ts[0];
    let rank = first.shape().len();
    let axis = ctx
        .node
        .attr_int("axis")
        .ok_or_else(|| format!("{OP}: attribute 'axis' is required"))?;
    if rank == 0 {
        return Err(format!("{OP}: cannot concatenate scalars"));
    }
    let axis = norm_axis(OP, axis, rank)?;
    let mut out_shape = first.shape().to_vec();
    out_shape[axis] = 0;
    for t in &ts {
        if t.dtype() != first.dtype() {
            return Err(type_mismatch(OP, first.dtype(), t.dtype()));
        }
        let s = t.shape();
        let agrees = s.len() == rank && (0..rank).all(|d| d == axis || s[d] == first.shape()[d]);
        if !agrees {
            return Err(format!(
                "{OP}: shape {s:?} does not match {:?} outside axis {axis}",
                first.shape()
            ));
        }
        out_shape[axis] = out_shape[axis]
            .checked_add(s[axis])
            .ok_or_else(|| format!("{OP}: output dimension overflows"))?;
    }
    check_out(ctx, OP, &out_shape, bits(first.dtype()))?;
    macro_rules! cat {
        ($v:ident) => {{
            let views: Vec<ArrayViewD<_>> = ts
                .iter()
                .filter_map(|t| match t {
                    Tensor::$v(a) => Some(a.view()),
                    _ => None,
                })
                .collect();
            Tensor::$v(concatenate(Axis(axis), &views).map_err(|e| format!("{OP}: {e}"))?)
        }};
    }
    Ok(vec![match first {
        Tensor::F32(_) => cat!(F32),
        Tensor::F64(_) => cat!(F64),
        Tensor::I32(_) => cat!(I32),
        Tensor::I64(_) => cat!(I64),
        Tensor::Bool(_) => cat!(Bool),
    }])
}

/// Every source element converted with `as` (floats to ints truncate toward zero and saturate;
/// NaN becomes 0 where C leaves it undefined); bool sources give 0/1.
macro_rules! cast_num {
    ($src:expr, $t:ty) => {
        match $src {
            Tensor::F32(a) => a.mapv(|v| v as $t),
            Tensor::F64(a) => a.mapv(|v| v as $t),
            Tensor::I32(a) => a.mapv(|v| v as $t),
            Tensor::I64(a) => a.mapv(|v| v as $t),
            Tensor::Bool(a) => a.mapv(|v| u8::from(v) as $t),
        }
    };
}

/// Cast among the computable types. `saturate` (19+) and `round_mode` (24+) only concern
/// float8/float4 targets, which this backend does not hold.
pub fn cast(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Cast";
    let src = input(OP, inputs, 0)?;
    let to = ctx
        .node
        .attr_int("to")
        .ok_or_else(|| format!("{OP}: attribute 'to' is required"))?;
    let to = DType(i32::try_from(to).map_err(|_| format!("{OP}: invalid 'to' {to}"))?);
    check_out(ctx, OP, src.shape(), bits(to))?;
    Ok(vec![match to.0 {
        dt::FLOAT => Tensor::F32(cast_num!(src, f32)),
        dt::DOUBLE => Tensor::F64(cast_num!(src, f64)),
        dt::INT32 => Tensor::I32(cast_num!(src, i32)),
        dt::INT64 => Tensor::I64(cast_num!(src, i64)),
        dt::BOOL => Tensor::Bool(match src {
            Tensor::F32(a) => a.mapv(|v| v != 0.0),
            Tensor::F64(a) => a.mapv(|v| v != 0.0),
            Tensor::I32(a) => a.mapv(|v| v != 0),
            Tensor::I64(a) => a.mapv(|v| v != 0),
            Tensor::Bool(a) => a.clone(),
        }),
        _ => {
            return Err(format!(
                "{OP}: target type {to} is not supported by the reference backend"
            ))
        }
    }])
}

const CONSTANT_ATTRS: [&str; 8] = [
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "sparse_value",
];

/// Constant: exactly one of its value attributes gives the output.
pub fn constant(ctx: &KernelCtx, _inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Constant";
    let node = ctx.node;
    let present: Vec<&str> = CONSTANT_ATTRS
        .iter()
        .copied()
        .filter(|n| node.attr(n).is_some())
        .collect();
    let name = match present.as_slice() {
        [one] => *one,
        _ => {
            return Err(format!(
                "{OP}: expected exactly one of {CONSTANT_ATTRS:?}, found {present:?}"
            ))
        }
    };
    let wrong = || format!("{OP}: attribute '{name}' has the wrong attribute type");
    let vec1 = |v: usize| IxDyn(&[v]);
    let t = match name {
        "value" => {
            let tp = node.attr_tensor(name).ok_or_else(wrong)?;
            to_tensor(tp, ctx.limits).map_err(|e| format!("{OP}: {e}"))?
        }
        "value_float" => Tensor::scalar_f32(node.attr_float(name).ok_or_else(wrong)?),
        "value_floats" => {
            let v = node.attr_floats(name).ok_or_else(wrong)?;
            Tensor::F32(
                ArrayD::from_shape_vec(vec1(v.len()), v.to_vec()).map_err(|e| e.to_string())?,
            )
        }
        "value_int" => Tensor::I64(ArrayD::from_elem(
            IxDyn(&[]),
            node.attr_int(name).ok_or_else(wrong)?,
        )),
        "value_ints" => Tensor::from_i64s(node.attr_ints(name).ok_or_else(wrong)?),
        "value_string" | "value_strings" => {
            return Err(format!(
                "{OP}: '{name}' is not supported: the reference backend has no string tensors"
            ))
        }
        _ => {
            return Err(format!(
                "{OP}: '{name}' is not supported: the reference backend has no sparse tensors"
            ))
        }
    };
    Ok(vec![t])
}

#[cfg(test)]
#[path = "shape_ops_tests.rs"]
mod tests;
