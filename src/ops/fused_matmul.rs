//! onnxruntime's com.microsoft FusedMatMul (docs/ContribOperators.md): MatMul with its operands
//! transposed and the product scaled.
//!
//! | op | domain, versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | FusedMatMul | com.microsoft 1 | `alpha` (1.0), `transA` (0), `transB` (0), `transBatchA` (0), `transBatchB` (0) | A: T, B: T -> Y: T = alpha·A'·B'; T float |
//!
//! An operand of rank r >= 2 is first permuted: with `transBatch*` its first dim moves to
//! position r - 2 (dims `[1, ..., r-2, 0, r-1]`), then with `trans*` its last two dims swap;
//! the product is numpy's matmul of the results (batch dims broadcast), as MatMul computes it.
//! onnxruntime behaves so (checked against its CPU kernel: `transBatchA` and `transA` together
//! take dims `[1, ..., r-1, 0]`). A rank-1 operand is not permuted.

use ndarray::ArrayD;

use super::common::{check_out, input, unsupported_type};
use super::matmul::matmul;
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::{Dim, TensorType};
use crate::tensor::Tensor;

const OP: &str = "FusedMatMul";

#[derive(Debug)]
pub struct FusedMatMul {
    pub alpha: f32,
    pub trans_a: bool,
    pub trans_b: bool,
    pub trans_batch_a: bool,
    pub trans_batch_b: bool,
}

impl FusedMatMul {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(FusedMatMul {
            alpha: a.float("alpha", 1.0)?,
            trans_a: a.flag("transA", false)?,
            trans_b: a.flag("transB", false)?,
            trans_batch_a: a.flag("transBatchA", false)?,
            trans_batch_b: a.flag("transBatchB", false)?,
        }))
    }
}

/// The dim order an operand of rank `r` is read in.
fn perm(r: usize, batch: bool, trans: bool) -> Vec<usize> {
    let mut p: Vec<usize> = (0..r).collect();
    if r >= 2 {
        if batch {
            p = (1..r - 1).chain([0, r - 1]).collect();
        }
        if trans {
            p.swap(r - 2, r - 1);
        }
    }
    p
}

fn permuted(t: &Tensor, p: &[usize]) -> Tensor {
    if p.iter().enumerate().all(|(i, &d)| i == d) {
        return t.clone();
    }
    macro_rules! go {
        ($($v:ident),*) => {
            match t {
                $(Tensor::$v(a) => Tensor::$v(a.view().permuted_axes(p).as_standard_layout().into_owned()),)*
                other => other.clone(),
            }
        };
    }
    go!(F32, F64)
}

impl Op for FusedMatMul {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (a, b) = (cx.input(0), cx.input(1));
        let view = |s: Option<Vec<Dim>>, batch, trans| {
            s.map(|s| {
                perm(s.len(), batch, trans)
                    .iter()
                    .map(|&i| s[i].clone())
                    .collect::<Vec<_>>()
            })
        };
        let (sa, sb) = (
            view(a.shape, self.trans_batch_a, self.trans_a),
            view(b.shape, self.trans_batch_b, self.trans_b),
        );
        let shape = match (&sa, &sb) {
            (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
                super::infer::broadcast_dims(&x[..x.len() - 2], &y[..y.len() - 2]).map(
                    |mut batch| {
                        batch.push(x[x.len() - 2].clone());
                        batch.push(y[y.len() - 1].clone());
                        batch
                    },
                )
            }
            _ => None,
        };
        vec![TensorType {
            dtype: a.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        fused_matmul
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

fn fused_matmul(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    let p = ctx.attrs::<FusedMatMul>()?;
    let (a, b) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
    for t in [a, b] {
        if !matches!(t, Tensor::F32(_) | Tensor::F64(_)) {
            return Err(unsupported_type(OP, t.dtype()));
        }
    }
    // The permuted copies are the size of the inputs; check them as outputs.
    check_out(ctx, OP, a.shape(), super::common::bits(a.dtype()))?;
    check_out(ctx, OP, b.shape(), super::common::bits(b.dtype()))?;
    let a = permuted(a, &perm(a.shape().len(), p.trans_batch_a, p.trans_a));
    let b = permuted(b, &perm(b.shape().len(), p.trans_batch_b, p.trans_b));
    let mut y = matmul(ctx, &[Some(&a), Some(&b)]).map_err(|e| e.replacen("MatMul", OP, 1))?;
    if p.alpha != 1.0 {
        let scale = |t: &mut ArrayD<f32>| t.mapv_inplace(|v| v * p.alpha);
        match y.first_mut() {
            Some(Tensor::F32(t)) => scale(t),
            Some(Tensor::F64(t)) => t.mapv_inplace(|v| v * f64::from(p.alpha)),
            _ => {}
        }
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::super::resolve;
    use super::*;
    use crate::ir::model::MS_DOMAIN;
    use crate::ir::{attr, Node};

    fn run(
        attrs: Vec<crate::onnx::proto::AttributeProto>,
        a: &Tensor,
        b: &Tensor,
    ) -> Result<Tensor, String> {
        let mut n = Node::new("FusedMatMul", MS_DOMAIN);
        for x in attrs {
            n.set_attr(x);
        }
        let k = resolve(&n, 1).map_err(|e| e.to_string())?.kernel();
        run_first(k, &n, 1, &[a, b])
    }

    #[test]
    fn transposes_and_alpha() {
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let i = f32s(&[2, 2], &[1., 0., 0., 1.]);
        assert_eq!(run(vec![], &a, &i).unwrap(), a);
        let at = f32s(&[2, 2], &[1., 3., 2., 4.]);
        assert_eq!(run(vec![attr::int("transA", 1)], &a, &i).unwrap(), at);
        assert_eq!(run(vec![attr::int("transB", 1)], &i, &a).unwrap(), at);
        let y = run(vec![attr::float("alpha", 0.5)], &a, &i).unwrap();
        assert_eq!(y, f32s(&[2, 2], &[0.5, 1., 1.5, 2.]));
    }

    #[test]
    fn batch_transposes() {
        assert_eq!(perm(4, true, false), [1, 2, 0, 3]);
        assert_eq!(perm(4, true, true), [1, 2, 3, 0]);
        assert_eq!(perm(3, false, true), [0, 2, 1]);
        assert_eq!(perm(1, true, true), [0]);
        // A [2 rows, 1 batch, 2]: with transBatchA it is read as [1, 2, 2].
        let a = f64s(&[2, 1, 2], &[1., 2., 3., 4.]);
        let i = f64s(&[2, 2], &[1., 0., 0., 1.]);
        let y = run(vec![attr::int("transBatchA", 1)], &a, &i).unwrap();
        assert_eq!(y, f64s(&[1, 2, 2], &[1., 2., 3., 4.]));
        let e = run(vec![], &i32s(&[1, 1], &[1]), &i32s(&[1, 1], &[1])).unwrap_err();
        assert!(e.contains("element type int32"), "{e}");
        let e = run(vec![], &a, &f64s(&[3, 2], &[0.; 6])).unwrap_err();
        assert!(e.contains("FusedMatMul"), "{e}");
    }
}
