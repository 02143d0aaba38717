//! Gated and biased elementwise ops: ai.onnx SwiGLU and onnxruntime's com.microsoft BiasAdd
//! (docs/ContribOperators.md).
//!
//! | op | domain, versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | SwiGLU | ai.onnx 28- | `alpha` (1.0) | A: T, B: T (same shape, no broadcasting) -> Y: T = `A·sigmoid(alpha·A)·B`; T float |
//! | BiasAdd | com.microsoft 1 | none | X: T `[N, S, C]`, bias: T `[C]`, skip: T `[N, S, C]` -> Y: T = `X + bias + skip` |
//!
//! Both run in the compute types float32 and float64 (the executor widens float16 and
//! bfloat16). SwiGLU's sigmoid is `1 / (1 + exp(-alpha·a))`, as Swish's.

use std::borrow::Cow;

use ndarray::{ArrayD, IxDyn};

use super::common::{check_out, input, type_mismatch, unsupported_type, Float};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Op};
use crate::ir::TensorType;
use crate::tensor::Tensor;

/// ai.onnx SwiGLU (28).
#[derive(Debug)]
pub struct SwiGLU {
    pub alpha: f32,
}

impl SwiGLU {
    pub fn parse(a: &Attrs) -> Result<Box<dyn Op>, String> {
        Ok(Box::new(SwiGLU {
            alpha: a.float("alpha", 1.0)?,
        }))
    }
}

super::plain_ops!(
    /// com.microsoft BiasAdd: `X + bias + skip`.
    BiasAdd
);

impl Op for SwiGLU {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        swiglu
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

impl Op for BiasAdd {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        bias_add
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// Element `i` of every input combined by `f` (inputs already checked: same type; `shapes`
/// gives how each is indexed: its length divides the output's, and it repeats).
fn combine<T: Copy>(
    op: &str,
    shape: &[usize],
    ins: &[&ArrayD<T>],
    f: impl Fn(&[T]) -> T,
) -> Result<ArrayD<T>, String> {
    let n: usize = shape.iter().product();
    let flats: Vec<Cow<[T]>> = ins.iter().map(|a| super::lanes::elements(a)).collect();
    let mut vals = Vec::with_capacity(ins.len());
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        vals.clear();
        vals.extend(flats.iter().map(|v| v[i % v.len()]));
        out.push(f(&vals));
    }
    ArrayD::from_shape_vec(IxDyn(shape), out).map_err(|e| format!("{op}: {e}"))
}

fn swiglu(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "SwiGLU";
    let alpha = ctx.attrs::<SwiGLU>()?.alpha;
    let (a, b) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
    if a.shape() != b.shape() {
        return Err(format!(
            "{OP}: A {:?} and B {:?} must have the same shape (no broadcasting)",
            a.shape(),
            b.shape()
        ));
    }
    check_out(ctx, OP, a.shape(), super::common::bits(a.dtype()))?;
    fn run<T: Float + std::ops::Neg<Output = T>>(
        a: &ArrayD<T>,
        b: &ArrayD<T>,
        alpha: T,
        exp: fn(T) -> T,
    ) -> Result<ArrayD<T>, String> {
        combine("SwiGLU", a.shape(), &[a, b], |v| {
            let g = v[0].wdiv(T::ONE.wadd(exp(-(alpha.wmul(v[0])))));
            g.wmul(v[1])
        })
    }
    Ok(vec![match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(run(a, b, alpha, f32::exp)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(run(a, b, f64::from(alpha), f64::exp)?),
        (Tensor::F32(_) | Tensor::F64(_), b) => {
            return Err(type_mismatch(OP, a.dtype(), b.dtype()))
        }
        (a, _) => return Err(unsupported_type(OP, a.dtype())),
    }])
}

fn bias_add(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "BiasAdd";
    let (x, bias, skip) = (
        input(OP, inputs, 0)?,
        input(OP, inputs, 1)?,
        input(OP, inputs, 2)?,
    );
    let c = match *x.shape() {
        [_, _, c] => c,
        _ => {
            return Err(format!(
                "{OP}: X must be 3-D [N, S, C], got {:?}",
                x.shape()
            ))
        }
    };
    if bias.shape() != [c] || skip.shape() != x.shape() {
        return Err(format!(
            "{OP}: bias must be [C] = [{c}] and skip X's shape {:?}; got {:?} and {:?}",
            x.shape(),
            bias.shape(),
            skip.shape()
        ));
    }
    check_out(ctx, OP, x.shape(), super::common::bits(x.dtype()))?;
    fn run<T: Float>(x: &ArrayD<T>, b: &ArrayD<T>, s: &ArrayD<T>) -> Result<ArrayD<T>, String> {
        combine("BiasAdd", x.shape(), &[x, b, s], |v| {
            v[0].wadd(v[1]).wadd(v[2])
        })
    }
    Ok(vec![match (x, bias, skip) {
        (Tensor::F32(x), Tensor::F32(b), Tensor::F32(s)) => Tensor::F32(run(x, b, s)?),
        (Tensor::F64(x), Tensor::F64(b), Tensor::F64(s)) => Tensor::F64(run(x, b, s)?),
        (Tensor::F32(_) | Tensor::F64(_), b, s) => {
            let other = if b.dtype() != x.dtype() { b } else { s };
            return Err(type_mismatch(OP, x.dtype(), other.dtype()));
        }
        (x, _, _) => return Err(unsupported_type(OP, x.dtype())),
    }])
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::super::resolve;
    use super::*;
    use crate::ir::model::MS_DOMAIN;
    use crate::ir::{attr, Node};

    fn run(n: &Node, opset: i64, ins: &[&Tensor]) -> Result<Tensor, String> {
        let k = resolve(n, opset).map_err(|e| e.to_string())?.kernel();
        run_first(k, n, opset, ins)
    }

    #[test]
    fn swiglu_values() {
        // sigmoid(0) = 1/2; alpha 2 at a = ln 3 / 2: sigmoid(ln 3) = 3/4.
        let a = f64s(&[2], &[0., 3f64.ln() / 2.]);
        let b = f64s(&[2], &[5., 4.]);
        let n = node("SwiGLU", vec![attr::float("alpha", 2.0)]);
        let y = run(&n, 28, &[&a, &b]).unwrap();
        assert_close(&y, &f64s(&[2], &[0., 3f64.ln() / 2. * 0.75 * 4.]), 1e-7);
        let y = run(
            &node("SwiGLU", vec![]),
            28,
            &[&f32s(&[1], &[0.]), &f32s(&[1], &[3.])],
        );
        assert_eq!(y.unwrap(), f32s(&[1], &[0.]));
        let e = run(&n, 28, &[&a, &f64s(&[1], &[1.])]).unwrap_err();
        assert!(e.contains("must have the same shape"), "{e}");
        let e = run(&n, 28, &[&f32s(&[2], &[0.; 2]), &b]).unwrap_err();
        assert!(e.contains("input types differ"), "{e}");
        assert!(resolve(&n, 27).is_err());
    }

    #[test]
    fn bias_add_values() {
        let mut n = Node::new("BiasAdd", MS_DOMAIN);
        n.outputs = vec![];
        let x = f32s(&[1, 2, 2], &[1., 2., 3., 4.]);
        let bias = f32s(&[2], &[10., 20.]);
        let skip = f32s(&[1, 2, 2], &[100., 200., 300., 400.]);
        let y = run(&n, 1, &[&x, &bias, &skip]).unwrap();
        assert_eq!(y, f32s(&[1, 2, 2], &[111., 222., 313., 424.]));
        let e = run(&n, 1, &[&x, &f32s(&[3], &[0.; 3]), &skip]).unwrap_err();
        assert!(e.contains("bias must be [C] = [2]"), "{e}");
        let e = run(&n, 1, &[&bias, &bias, &bias]).unwrap_err();
        assert!(e.contains("X must be 3-D"), "{e}");
    }
}
