//! Linear algebra on batches of small matrices: ai.onnx Det.
//!
//! | op | versions | attributes | inputs -> output |
//! |---|---|---|---|
//! | Det | 11- (22: bfloat16) | none | X: T `[*, M, M]` -> Y: T `[*]`; T float |
//!
//! Each determinant comes from an LU factorization with partial pivoting, in float64 whatever
//! T is, rounded to T once. A 0 x 0 matrix has determinant 1; a singular one 0 (a zero pivot
//! ends its factorization). Version 22 adds bfloat16 only.

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, unsupported_type};
use super::{InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

super::plain_ops!(
    /// ai.onnx Det: the determinant of each trailing square matrix.
    Det
);

impl Op for Det {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        let shape = x.shape.and_then(|s| {
            let n = s.len();
            (n >= 2).then(|| s[..n - 2].to_vec())
        });
        vec![TensorType {
            dtype: x.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        det
    }
}

/// The determinant of the row-major `m` x `m` matrix in `a` (overwritten by its factors).
fn det_lu(a: &mut [f64], m: usize) -> f64 {
    let mut d = 1.0;
    for k in 0..m {
        let p = (k..m)
            .max_by(|&i, &j| a[i * m + k].abs().total_cmp(&a[j * m + k].abs()))
            .unwrap_or(k);
        let pivot = a[p * m + k];
        if pivot == 0.0 {
            return 0.0;
        }
        if p != k {
            for c in 0..m {
                a.swap(k * m + c, p * m + c);
            }
            d = -d;
        }
        d *= pivot;
        for r in k + 1..m {
            let f = a[r * m + k] / pivot;
            if f != 0.0 {
                for c in k + 1..m {
                    a[r * m + c] -= f * a[k * m + c];
                }
            }
        }
    }
    d
}

fn det(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Det";
    let x = input(OP, inputs, 0)?;
    let shape = x.shape();
    let n = shape.len();
    if n < 2 || shape[n - 1] != shape[n - 2] {
        return Err(format!(
            "{OP}: input must be [*, M, M] (square in its last two dims), got {shape:?}"
        ));
    }
    let m = shape[n - 1];
    let out_shape = &shape[..n - 2];
    check_out(ctx, OP, out_shape, 64)?;
    let v = match x {
        Tensor::F32(_) | Tensor::F64(_) => x.to_f64_vec(),
        t => return Err(unsupported_type(OP, t.dtype())),
    };
    let size = m * m;
    let dets: Vec<f64> = if size == 0 {
        vec![1.0; out_shape.iter().product()]
    } else {
        v.chunks_exact(size)
            .map(|c| det_lu(&mut c.to_vec(), m))
            .collect()
    };
    let shape = IxDyn(out_shape);
    let err = |e: ndarray::ShapeError| format!("{OP}: {e}");
    Ok(vec![match x {
        Tensor::F32(_) => Tensor::F32(
            ArrayD::from_shape_vec(shape, dets.iter().map(|&d| d as f32).collect()).map_err(err)?,
        ),
        _ => Tensor::F64(ArrayD::from_shape_vec(shape, dets).map_err(err)?),
    }])
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::super::resolve;
    use super::*;

    fn run(x: &Tensor) -> Result<Tensor, String> {
        let n = node("Det", vec![]);
        let k = resolve(&n, 11).map_err(|e| e.to_string())?.kernel();
        run_first(k, &n, 11, &[x])
    }

    #[test]
    fn determinants_of_batches() {
        // 1*4 - 2*3 = -2; a permutation matrix (one swap) gives -1; a singular one 0.
        let x = f64s(
            &[3, 2, 2],
            &[1., 2., 3., 4., 0., 1., 1., 0., 1., 2., 2., 4.],
        );
        assert_eq!(run(&x).unwrap(), f64s(&[3], &[-2., -1., 0.]));
        let x = f32s(&[3, 3], &[2., 0., 0., 0., 3., 0., 1., 1., 4.]);
        assert_eq!(run(&x).unwrap(), f32s(&[], &[24.]));
        // 0 x 0 matrices: determinant 1.
        assert_eq!(run(&f32s(&[2, 0, 0], &[])).unwrap(), f32s(&[2], &[1., 1.]));
    }

    #[test]
    fn bad_inputs() {
        let e = run(&f32s(&[2, 3], &[0.; 6])).unwrap_err();
        assert!(e.contains("square in its last two dims"), "{e}");
        let e = run(&f32s(&[3], &[0.; 3])).unwrap_err();
        assert!(e.contains("[*, M, M]"), "{e}");
        let e = run(&i32s(&[1, 1], &[1])).unwrap_err();
        assert!(e.contains("element type int32"), "{e}");
        assert!(resolve(&node("Det", vec![]), 10).is_err());
    }
}
