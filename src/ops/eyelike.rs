//! EyeLike (ai.onnx) and the fused AddEyeLike (ai.fuselab), which replaces Add(A, EyeLike(A, k))
//! with one copy of A plus a walk along one diagonal.
//!
//! | op | versions | attributes (default) | inputs -> outputs |
//! |---|---|---|---|
//! | EyeLike | 9, 22 | `k` (0), `dtype` (the input's type) | 2-D input -> ones on diagonal k (j - i == k), zeros elsewhere |
//! | AddEyeLike (ai.fuselab) | 1 | `k` (0), `dtype` (must equal A's type when given) | 2-D A (numeric) -> A + EyeLike(A, k) |
//!
//! EyeLike 22 only adds element types this backend does not hold; the kernel does not branch on
//! the opset. AddEyeLike keeps the unfused EyeLike's `dtype` so the rewrite can be undone.

use ndarray::{s, ArrayD, ArrayViewMut2, Ix2};

use super::common::{bits, check_out, input, unsupported_type, Num};
use super::lowering::{run, NodeCtx, R};
use super::wgsl::{self, Ty};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::onnx::proto::data_type as dt;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

/// The optional `dtype` attribute, a TensorProto data type.
fn dtype_attr(a: &Attrs) -> R<Option<DType>> {
    a.opt_int("dtype")?
        .map(|d| {
            i32::try_from(d)
                .map(DType)
                .map_err(|_| format!("attribute 'dtype' is not a type: {d}"))
        })
        .transpose()
}

/// The WGSL expression of the k-th diagonal's indicator in kernel type `t`: 1 on it (`j - i ==
/// k` at output coordinates c0 = i, c1 = j), 0 elsewhere.
fn diagonal_expr(t: Ty, k: i64) -> String {
    let one = match t {
        Ty::F32 => "1.0",
        Ty::I32 => "1i",
        Ty::U32 => "1u",
    };
    format!("select({}, {one}, i32(c1) - i32(c0) == {k}i)", t.zero())
}

#[derive(Debug)]
pub struct EyeLike {
    pub k: i64,
    /// `None`: the input's type.
    pub dtype: Option<DType>,
}

impl EyeLike {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(EyeLike {
            k: a.int("k", 0)?,
            dtype: dtype_attr(a)?,
        }))
    }
}

impl Op for EyeLike {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let x = cx.input(0);
        vec![TensorType {
            dtype: self.dtype.or(x.dtype),
            shape: x.shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        eye_like
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let out = &c.out(0)?.shape;
        if out.len() != 2 {
            return Err("EyeLike needs a 2-D input".into());
        }
        let t = c.out_ty(0)?;
        run(wgsl::elementwise(out, t, &[], &diagonal_expr(t, self.k)))
    }
}

#[derive(Debug)]
pub struct AddEyeLike {
    pub k: i64,
    /// When given, it must be A's type (the kernel's error otherwise).
    pub dtype: Option<DType>,
}

impl AddEyeLike {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(AddEyeLike {
            k: a.int("k", 0)?,
            dtype: dtype_attr(a)?,
        }))
    }
}

impl Op for AddEyeLike {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![cx.input(0)]
    }
    fn kernel(&self) -> Kernel {
        add_eye_like
    }
    fn lower(&self, c: &NodeCtx) -> R<Lowered> {
        let out = &c.out(0)?.shape;
        if out.len() != 2 {
            return Err("AddEyeLike needs a 2-D input".into());
        }
        let t = c.ty(0)?;
        if t == Ty::U32 {
            return Err("AddEyeLike of bool".into());
        }
        c.ew(1, &format!("v0 + {}", diagonal_expr(t, self.k)))
    }
}

/// The k-th diagonal of a rows x cols matrix (`m[i, i + k]`), or `None` when it lies outside.
fn diagonal<T>(m: ArrayViewMut2<'_, T>, k: i64) -> Option<ArrayViewMut2<'_, T>> {
    let (rows, cols) = m.dim();
    let mag = usize::try_from(k.unsigned_abs()).ok()?;
    if k >= 0 {
        (mag < cols).then(|| m.slice_move(s![.., mag..]))
    } else {
        (mag < rows).then(|| m.slice_move(s![mag.., ..]))
    }
}

fn eye<T: Clone>(rows: usize, cols: usize, k: i64, zero: T, one: T) -> ArrayD<T> {
    let mut m = ndarray::Array2::from_elem((rows, cols), zero);
    if let Some(mut d) = diagonal(m.view_mut(), k) {
        d.diag_mut().fill(one);
    }
    m.into_dyn()
}

fn rank2(op: &str, t: &Tensor) -> Result<(usize, usize), String> {
    match t.shape() {
        &[r, c] => Ok((r, c)),
        s => Err(format!("{op}: input must be 2-D, got shape {s:?}")),
    }
}

/// EyeLike: ones on the k-th diagonal, shape of the input, type `dtype` (default: the input's).
pub fn eye_like(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "EyeLike";
    let x = input(OP, inputs, 0)?;
    let (r, c) = rank2(OP, x)?;
    let a = ctx.attrs::<EyeLike>()?;
    let (k, to) = (a.k, a.dtype.unwrap_or(x.dtype()));
    check_out(ctx, OP, &[r, c], bits(to))?;
    Ok(vec![match to.0 {
        dt::FLOAT => Tensor::F32(eye(r, c, k, 0.0, 1.0)),
        dt::DOUBLE => Tensor::F64(eye(r, c, k, 0.0, 1.0)),
        dt::INT32 => Tensor::I32(eye(r, c, k, 0, 1)),
        dt::INT64 => Tensor::I64(eye(r, c, k, 0, 1)),
        dt::BOOL => Tensor::Bool(eye(r, c, k, false, true)),
        _ => return Err(unsupported_type(OP, to)),
    }])
}

/// AddEyeLike(A; k, dtype): Y[i, j] = A[i, j] + (j - i == k ? 1 : 0) for a 2-D numeric A.
/// `dtype`, when present, must equal A's type (it is what the unfused EyeLike carried).
pub fn add_eye_like(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "AddEyeLike";
    let a = input(OP, inputs, 0)?;
    rank2(OP, a)?;
    let attrs = ctx.attrs::<AddEyeLike>()?;
    let k = attrs.k;
    if let Some(d) = attrs.dtype {
        if d != a.dtype() {
            return Err(format!(
                "{OP}: dtype {d} does not match input type {}",
                a.dtype()
            ));
        }
    }
    Ok(vec![match a {
        Tensor::F32(x) => Tensor::F32(add_eye_typed(OP, x, k)?),
        Tensor::F64(x) => Tensor::F64(add_eye_typed(OP, x, k)?),
        Tensor::I32(x) => Tensor::I32(add_eye_typed(OP, x, k)?),
        Tensor::I64(x) => Tensor::I64(add_eye_typed(OP, x, k)?),
        // Add itself is not defined on bool, so neither is the fusion.
        other => return Err(unsupported_type(OP, other.dtype())),
    }])
}

fn add_eye_typed<T: Num>(op: &str, a: &ArrayD<T>, k: i64) -> Result<ArrayD<T>, String> {
    // The one pass over A: a row-major copy (a memcpy when A already is row-major).
    let mut y = a
        .as_standard_layout()
        .into_owned()
        .into_dimensionality::<Ix2>()
        .map_err(|e| format!("{op}: {e}"))?;
    if let Some(mut d) = diagonal(y.view_mut(), k) {
        d.diag_mut().mapv_inplace(|v| v.wadd(T::ONE));
    }
    Ok(y.into_dyn())
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::super::elementwise::add;
    use super::*;
    use crate::ir::{attr, Node};

    fn node(op: &str, domain: &str, attrs: Vec<crate::onnx::proto::AttributeProto>) -> Node {
        let mut n = Node::new(op, domain);
        for a in attrs {
            n.set_attr(a);
        }
        n
    }

    fn run(k: super::super::Kernel, n: &Node, x: &Tensor) -> Result<Tensor, String> {
        run_at(k, n, 22, &[Some(x)]).map(|mut v| v.remove(0))
    }

    #[test]
    fn eye_like_diagonals() {
        let x = f32s(&[3, 3], &[7.; 9]);
        let n = node("EyeLike", "", vec![]);
        let want = f32s(&[3, 3], &[1., 0., 0., 0., 1., 0., 0., 0., 1.]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        let n = node("EyeLike", "", vec![attr::int("k", 1)]);
        let want = f32s(&[3, 3], &[0., 1., 0., 0., 0., 1., 0., 0., 0.]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        let n = node("EyeLike", "", vec![attr::int("k", -1)]);
        let want = f32s(&[3, 3], &[0., 0., 0., 1., 0., 0., 0., 1., 0.]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        // k past the matrix: all zeros
        for k in [3, -3, i64::MAX, i64::MIN] {
            let n = node("EyeLike", "", vec![attr::int("k", k)]);
            assert_eq!(run(eye_like, &n, &x).unwrap(), f32s(&[3, 3], &[0.; 9]));
        }
    }

    #[test]
    fn eye_like_non_square_and_dtype() {
        let x = i32s(&[2, 4], &[0; 8]);
        let n = node("EyeLike", "", vec![attr::int("k", 1)]);
        let want = i32s(&[2, 4], &[0, 1, 0, 0, 0, 0, 1, 0]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        let x = f32s(&[3, 2], &[0.; 6]);
        let n = node("EyeLike", "", vec![attr::int("dtype", dt::DOUBLE as i64)]);
        let want = f64s(&[3, 2], &[1., 0., 0., 1., 0., 0.]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        let n = node(
            "EyeLike",
            "",
            vec![attr::int("dtype", dt::BOOL as i64), attr::int("k", -1)],
        );
        let want = bools(&[3, 2], &[false, false, true, false, false, true]);
        assert_eq!(run(eye_like, &n, &x).unwrap(), want);
        let n = node("EyeLike", "", vec![attr::int("dtype", dt::INT64 as i64)]);
        assert_eq!(
            run(eye_like, &n, &bools(&[1, 2], &[true, true])).unwrap(),
            i64s(&[1, 2], &[1, 0])
        );
    }

    #[test]
    fn eye_like_errors() {
        let n = node("EyeLike", "", vec![]);
        let e = run(eye_like, &n, &f32s(&[3], &[0.; 3])).unwrap_err();
        assert!(e.contains("2-D"), "{e}");
        let n = node("EyeLike", "", vec![attr::int("dtype", dt::FLOAT16 as i64)]);
        let e = run(eye_like, &n, &f32s(&[1, 1], &[0.])).unwrap_err();
        assert!(e.contains("float16"), "{e}");
    }

    #[test]
    fn add_eye_like_equals_eye_like_plus_add() {
        let vals: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect();
        let a = f32s(&[3, 4], &vals);
        for k in [-3, -1, 0, 1, 2, 4] {
            let eye_n = node("EyeLike", "", vec![attr::int("k", k)]);
            let eye = run(eye_like, &eye_n, &a).unwrap();
            let want = run1(add, "Add", &[&a, &eye]).unwrap();
            let fused = node("AddEyeLike", "ai.fuselab", vec![attr::int("k", k)]);
            assert_eq!(run(add_eye_like, &fused, &a).unwrap(), want, "k = {k}");
        }
        let a = i64s(&[2, 2], &[1, 2, 3, 4]);
        let n = node(
            "AddEyeLike",
            "ai.fuselab",
            vec![attr::int("dtype", dt::INT64 as i64)],
        );
        assert_eq!(
            run(add_eye_like, &n, &a).unwrap(),
            i64s(&[2, 2], &[2, 2, 3, 5])
        );
        // column-major input still produces row-major output with the right values
        let t = match f64s(&[2, 3], &[1., 2., 3., 4., 5., 6.]) {
            Tensor::F64(x) => Tensor::F64(x.t().to_owned()),
            _ => unreachable!(),
        };
        let n = node("AddEyeLike", "ai.fuselab", vec![]);
        let y = run(add_eye_like, &n, &t).unwrap();
        assert_eq!(y, f64s(&[3, 2], &[2., 4., 2., 6., 3., 6.]));
    }

    #[test]
    fn add_eye_like_errors() {
        let a = f32s(&[2, 2], &[0.; 4]);
        let n = node(
            "AddEyeLike",
            "ai.fuselab",
            vec![attr::int("dtype", dt::DOUBLE as i64)],
        );
        let e = run(add_eye_like, &n, &a).unwrap_err();
        assert!(e.contains("float64") && e.contains("float32"), "{e}");
        let n = node("AddEyeLike", "ai.fuselab", vec![]);
        assert!(run(add_eye_like, &n, &f32s(&[4], &[0.; 4])).is_err());
        assert!(run(add_eye_like, &n, &bools(&[1, 1], &[true])).is_err());
    }
}
