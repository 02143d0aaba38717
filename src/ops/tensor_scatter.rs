//! ai.onnx TensorScatter: the functional KV-cache update.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | TensorScatter | 24- | `axis` (-2), `mode` ("linear"; or "circular") | past_cache: T, update: T, write_indices?: int64 `[batch]` -> present_cache: T; T any |
//!
//! present_cache is past_cache with, for every index `p` over the dims before `axis` (the
//! first of which is the batch `b`) and every `s` below update's size along `axis`,
//! `present[p, w[b] + s, ...] = update[p, s, ...]`; `w` is write_indices (0s when absent),
//! taken modulo the cache's size along `axis` in circular mode. update has past_cache's shape
//! except along `axis`, where it is not larger. `axis` must not be the batch dim (0). In linear
//! mode a write past the cache, and in either mode a negative write index, is an error.

use super::common::{check_out, input, norm_axis, opt_input, type_mismatch};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

const OP: &str = "TensorScatter";

#[derive(Debug)]
pub struct TensorScatter {
    pub axis: i64,
    pub circular: bool,
}

impl TensorScatter {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        let circular = match a.string("mode")?.as_deref() {
            None | Some("linear") => false,
            Some("circular") => true,
            Some(m) => {
                return Err(format!(
                    "{OP}: attribute 'mode' is '{m}'; 'linear' or 'circular' expected"
                ))
            }
        };
        Ok(Box::new(TensorScatter {
            axis: a.int("axis", -2)?,
            circular,
        }))
    }
}

impl Op for TensorScatter {
    fn any_element_type(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        tensor_scatter
    }
}

/// Where each update row goes: (update offset, cache offset) of each run of `inner` elements.
fn plan(
    p: &TensorScatter,
    cache: &[usize],
    upd: &[usize],
    writes: Option<&[i64]>,
) -> Result<(Vec<(usize, usize)>, usize), String> {
    let axis = norm_axis(OP, p.axis, cache.len())?;
    if axis == 0 {
        return Err(format!("{OP}: axis {} is the batch dim", p.axis));
    }
    let (max, seq) = (cache[axis], upd.get(axis).copied().unwrap_or(0));
    let same_else =
        upd.len() == cache.len() && (0..cache.len()).all(|d| d == axis || upd[d] == cache[d]);
    if !same_else || seq > max {
        return Err(format!(
            "{OP}: update {upd:?} must match past_cache {cache:?} except along axis {axis}, \
             where it may not be larger"
        ));
    }
    let batch = cache[0];
    if let Some(w) = writes {
        if w.len() != batch {
            return Err(format!(
                "{OP}: write_indices has {} values, the batch is {batch}",
                w.len()
            ));
        }
    }
    let outer: usize = cache[..axis].iter().product();
    let per_batch = outer / batch.max(1);
    let inner: usize = cache[axis + 1..].iter().product();
    let mut runs = Vec::with_capacity(outer * seq);
    for o in 0..outer {
        let w = writes.map_or(0, |w| w[o / per_batch.max(1)]);
        let w = usize::try_from(w).map_err(|_| format!("{OP}: write index {w} is negative"))?;
        for s in 0..seq {
            let mut at = w.saturating_add(s);
            if p.circular {
                at %= max.max(1);
            } else if at >= max {
                return Err(format!(
                    "{OP}: write index {w} + {s} is past the cache's {max} positions (linear mode)"
                ));
            }
            runs.push(((o * seq + s) * inner, (o * max + at) * inner));
        }
    }
    Ok((runs, inner))
}

fn write<T: Copy>(
    past: &ndarray::ArrayD<T>,
    upd: &ndarray::ArrayD<T>,
    runs: &[(usize, usize)],
    inner: usize,
) -> ndarray::ArrayD<T> {
    let mut out = past.as_standard_layout().into_owned();
    let u = upd.as_standard_layout();
    if let (Some(dst), Some(src)) = (out.as_slice_mut(), u.as_slice()) {
        for &(from, to) in runs {
            dst[to..to + inner].copy_from_slice(&src[from..from + inner]);
        }
    }
    out
}

fn tensor_scatter(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<TensorScatter>()?;
    let past = input(OP, inputs, 0)?;
    let upd = input(OP, inputs, 1)?;
    let writes = match opt_input(inputs, 2) {
        Some(t) => Some(
            t.to_i64_vec()
                .ok_or_else(|| format!("{OP}: write_indices must be int64, got {}", t.dtype()))?,
        ),
        None => None,
    };
    let (runs, inner) = plan(p, past.shape(), upd.shape(), writes.as_deref())?;
    check_out(ctx, OP, past.shape(), super::common::bits(past.dtype()))?;
    macro_rules! same {
        ($($v:ident),*) => {
            match (past, upd) {
                $((Tensor::$v(a), Tensor::$v(b)) => Tensor::$v(write(a, b, &runs, inner)),)*
                (a, b) => return Err(type_mismatch(OP, a.dtype(), b.dtype())),
            }
        };
    }
    Ok(vec![same!(
        F32, F64, I32, I64, Bool, F16, BF16, I8, U8, I16, U16, U32, U64
    )])
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::super::resolve;
    use super::*;
    use crate::ir::attr;

    fn run(
        attrs: Vec<crate::onnx::proto::AttributeProto>,
        ins: &[Option<&Tensor>],
    ) -> KernelResult {
        let n = node("TensorScatter", attrs);
        let k = resolve(&n, 24).map_err(|e| e.to_string())?.kernel();
        run_at(k, &n, 24, ins)
    }

    #[test]
    fn linear_and_circular_writes() {
        // Cache [batch 2, seq 3, 1]; updates of 2 positions per batch.
        let past = f32s(&[2, 3, 1], &[0.; 6]);
        let upd = f32s(&[2, 2, 1], &[1., 2., 3., 4.]);
        let got = run(vec![], &[Some(&past), Some(&upd)]).unwrap();
        assert_eq!(got[0], f32s(&[2, 3, 1], &[1., 2., 0., 3., 4., 0.]));
        let w = i64s(&[2], &[1, 0]);
        let got = run(vec![], &[Some(&past), Some(&upd), Some(&w)]).unwrap();
        assert_eq!(got[0], f32s(&[2, 3, 1], &[0., 1., 2., 3., 4., 0.]));
        // Circular: batch 0 writes at 2, then wraps to 0.
        let w = i64s(&[2], &[2, 0]);
        let circ = vec![attr::string("mode", "circular")];
        let got = run(circ, &[Some(&past), Some(&upd), Some(&w)]).unwrap();
        assert_eq!(got[0], f32s(&[2, 3, 1], &[2., 0., 1., 3., 4., 0.]));
        // The same write is past the cache in linear mode.
        let e = run(vec![], &[Some(&past), Some(&upd), Some(&w)]).unwrap_err();
        assert!(e.contains("past the cache's 3 positions"), "{e}");
    }

    #[test]
    fn axis_and_shape_checks() {
        // axis 2 of [1, 2, 2]: heads stay, positions along the last dim.
        let past = i64s(&[1, 2, 2], &[0; 4]);
        let upd = i64s(&[1, 2, 1], &[7, 8]);
        let w = i64s(&[1], &[1]);
        let got = run(
            vec![attr::int("axis", 2)],
            &[Some(&past), Some(&upd), Some(&w)],
        )
        .unwrap();
        assert_eq!(got[0], i64s(&[1, 2, 2], &[0, 7, 0, 8]));
        let e = run(vec![attr::int("axis", 0)], &[Some(&past), Some(&upd)]).unwrap_err();
        assert!(e.contains("is the batch dim"), "{e}");
        let bad = i64s(&[1, 1, 1], &[0]);
        let e = run(vec![], &[Some(&past), Some(&bad)]).unwrap_err();
        assert!(e.contains("must match past_cache"), "{e}");
        let neg = i64s(&[1], &[-1]);
        let e = run(
            vec![attr::int("axis", 2)],
            &[Some(&past), Some(&upd), Some(&neg)],
        )
        .unwrap_err();
        assert!(e.contains("negative"), "{e}");
        let n = node("TensorScatter", vec![attr::string("mode", "ring")]);
        assert!(resolve(&n, 24).is_err());
    }
}
