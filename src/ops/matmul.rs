//! Matrix products: ai.onnx MatMul and Gemm, com.microsoft FusedGemm.
//!
//! | op | versions | attributes (default) | inputs -> output |
//! |---|---|---|---|
//! | MatMul | 1- | none | A, B: T -> Y: T; numpy matmul (1-D operands promoted, batch dims broadcast) |
//! | Gemm | 1- | `alpha` (1.0), `beta` (1.0), `transA` (0), `transB` (0); `broadcast` before 7 (ignored) | A, B, C (optional from 11): T -> Y: T = alpha·A'·B' + beta·C, A and B 2-D, C broadcast to [M, N] |
//! | FusedGemm (com.microsoft) | 1- | Gemm's, and `activation` (required: Relu, Tanh or Sigmoid) | as Gemm, float32 only; Y = activation(Gemm) |
//!
//! MatMul 9 and 13 and Gemm 9, 11 (C optional) and 13 widened the types; Gemm 7 replaced the
//! `broadcast` attribute by unidirectional broadcasting of C. No computed value here branches on
//! the opset. FusedGemm's `activation_alpha`/`_beta`/`_gamma` (parameters of activations it
//! does not take) are ignored.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayD, ArrayView, ArrayView2, ArrayViewMut2, IxDyn, ShapeBuilder, Zip};

use super::broadcast::{batch_strides, broadcast_shape, check_unidirectional};
use super::common::{check_out, input, opt_input, type_mismatch, unsupported_type, Num};
use super::infer::broadcast_dims;
use super::lowering::{prepend, run, NodeCtx, Ty};
use super::sgemm::small_sgemm;
#[path = "matmul_packed.rs"]
mod packed;
pub use super::sgemm::{PackedA, Strided};
use super::wgsl::{self, lit, strides};
use super::{Attrs, InferCx, Kernel, KernelCtx, KernelResult, Lowered, Op};
use crate::ir::TensorType;
use crate::tensor::{DType, Tensor};

type P = Result<Box<dyn Op>, String>;

super::plain_ops!(MatMul);

impl Op for MatMul {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        let (a, b) = (cx.input(0), cx.input(1));
        // Rank-1 operands (promoted, then the added dim dropped) are left unknown.
        let shape = match (&a.shape, &b.shape) {
            (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
                broadcast_dims(&x[..x.len() - 2], &y[..y.len() - 2]).map(|mut batch| {
                    batch.push(x[x.len() - 2].clone());
                    batch.push(y[y.len() - 1].clone());
                    batch
                })
            }
            _ => None,
        };
        vec![TensorType {
            dtype: a.dtype,
            shape,
        }]
    }
    fn kernel(&self) -> Kernel {
        matmul
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        lower_matmul(c)
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

#[derive(Debug, Clone)]
pub struct Gemm {
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl Gemm {
    pub fn parse(a: &Attrs) -> P {
        Ok(Box::new(Gemm::read(a)?))
    }

    fn read(a: &Attrs) -> Result<Gemm, String> {
        Ok(Gemm {
            alpha: a.float("alpha", 1.0)?,
            beta: a.float("beta", 1.0)?,
            trans_a: a.flag("transA", false)?,
            trans_b: a.flag("transB", false)?,
        })
    }

    /// [M, N] from 2-D A and B (as transA/transB read them).
    fn infer_out(&self, cx: &InferCx) -> TensorType {
        let (a, b) = (cx.input(0), cx.input(1));
        let shape = match (&a.shape, &b.shape) {
            (Some(x), Some(y)) if x.len() == 2 && y.len() == 2 => Some(vec![
                x[if self.trans_a { 1 } else { 0 }].clone(),
                y[if self.trans_b { 0 } else { 1 }].clone(),
            ]),
            _ => None,
        };
        TensorType {
            dtype: a.dtype,
            shape,
        }
    }
}

impl Op for Gemm {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        vec![self.infer_out(cx)]
    }
    fn kernel(&self) -> Kernel {
        gemm
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        lower_gemm(c, self, "v0")
    }
    fn same_type_inputs(&self) -> bool {
        true
    }
}

/// FusedGemm's activations: each one's own kernel and WGSL form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Relu,
    Tanh,
    Sigmoid,
}

#[derive(Debug)]
pub struct FusedGemm {
    pub gemm: Gemm,
    /// The `activation` attribute: `None` when absent, `Err(name)` for one not supported. Both
    /// are the kernel's errors (the WebGPU lowering takes an absent one as the identity).
    pub activation: Option<Result<Activation, String>>,
}

impl FusedGemm {
    pub fn parse(a: &Attrs) -> P {
        let activation = a.string("activation")?.map(|s| match s.as_str() {
            "Relu" => Ok(Activation::Relu),
            "Tanh" => Ok(Activation::Tanh),
            "Sigmoid" => Ok(Activation::Sigmoid),
            _ => Err(s),
        });
        Ok(Box::new(FusedGemm {
            gemm: Gemm::read(a)?,
            activation,
        }))
    }
}

impl Op for FusedGemm {
    fn infer(&self, cx: &InferCx) -> Vec<TensorType> {
        // Gemm's output type: the activation keeps it.
        vec![self.gemm.infer_out(cx)]
    }
    fn kernel(&self) -> Kernel {
        fused_gemm
    }
    fn lower(&self, c: &NodeCtx) -> Result<Lowered, String> {
        let act = match &self.activation {
            Some(Ok(Activation::Relu)) => super::lowering::RELU,
            Some(Ok(Activation::Tanh)) => super::lowering::TANH,
            Some(Ok(Activation::Sigmoid)) => super::lowering::SIGMOID,
            // As the reference kernel: no activation is not a FusedGemm (it would be a Gemm).
            None => return Err("FusedGemm without an activation".into()),
            Some(Err(other)) => return Err(format!("FusedGemm activation '{other}'")),
        };
        lower_gemm(c, &self.gemm, act)
    }
}

fn lower_matmul(c: &NodeCtx) -> Result<Lowered, String> {
    let (a, b) = (&c.input(0)?.shape, &c.input(1)?.shape);
    if c.ty(0)? != Ty::F32 {
        return Err("MatMul is float32-only on webgpu".into());
    }
    // 1-D operands are promoted (a row / a column) and the added dim dropped from the output.
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.clone()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.clone()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    if b2[b2.len() - 2] != k {
        return Err(format!("MatMul inner dims differ: {a:?} x {b:?}"));
    }
    let ab = &a2[..a2.len() - 2];
    let bb = &b2[..b2.len() - 2];
    let rank = ab.len().max(bb.len());
    let batch: Vec<usize> = (0..rank)
        .map(|j| {
            let da = if j + ab.len() >= rank {
                ab[j + ab.len() - rank]
            } else {
                1
            };
            let db = if j + bb.len() >= rank {
                bb[j + bb.len() - rank]
            } else {
                1
            };
            da.max(db)
        })
        .collect();
    let mat_strides = |dims: &[usize], mat: usize| -> Vec<usize> {
        let own = strides(dims);
        (0..rank)
            .map(|j| {
                if j + dims.len() < rank {
                    0
                } else {
                    let jj = j + dims.len() - rank;
                    if dims[jj] == 1 {
                        0
                    } else {
                        own[jj] * mat
                    }
                }
            })
            .collect()
    };
    run(wgsl::matmul(&wgsl::MatMul {
        m,
        n,
        k,
        batch: &batch,
        a_batch: mat_strides(ab, m * k),
        b_batch: mat_strides(bb, k * n),
        trans_a: false,
        trans_b: false,
        extra: None,
        epilogue: "acc".into(),
    }))
}

/// Gemm / FusedGemm: `act(alpha · A'B' + beta · C)`; `act` is a WGSL expression in `v0`.
fn lower_gemm(c: &NodeCtx, p: &Gemm, act: &str) -> Result<Lowered, String> {
    let (a, b) = (&c.input(0)?.shape, &c.input(1)?.shape);
    if a.len() != 2 || b.len() != 2 {
        return Err("Gemm needs 2-D A and B".into());
    }
    let (ta, tb) = (p.trans_a, p.trans_b);
    let (m, k) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
    let n = if tb { b[0] } else { b[1] };
    let alpha = lit(p.alpha)?;
    let beta = lit(p.beta)?;
    let (extra, v) = if c.has_input(2) {
        let cs = &c.input(2)?.shape;
        let st = wgsl::broadcast_strides(cs, &[m, n]);
        (
            Some(format!("row * {}u + col * {}u", st[0], st[1])),
            format!("{alpha} * acc + {beta} * e"),
        )
    } else {
        (None, format!("{alpha} * acc"))
    };
    run(wgsl::matmul(&wgsl::MatMul {
        m,
        n,
        k,
        batch: &[],
        a_batch: vec![],
        b_batch: vec![],
        trans_a: ta,
        trans_b: tb,
        extra,
        epilogue: format!("act_({v})"),
    }))
    .map(|l| prepend(l, &format!("fn act_(v0: f32) -> f32 {{ return {act}; }}")))
}

/// Element types with a matrix-product kernel.
pub trait MatElem: Num {
    /// `y[i·ldy + j] += alpha · Σ_p a(i, p) · b(p, j)` for `a` [m, k] and `b` [k, n] (`mkn`),
    /// any strides (a transposed operand is a stride swap). Operands must cover their shapes.
    fn gemm_acc(
        alpha: f32,
        mkn: [usize; 3],
        a: Strided<Self>,
        b: Strided<Self>,
        y: &mut [Self],
        ldy: usize,
    );
    /// `y = a · b` for row-major `a` [m, k], `b` [k, n], `y` [m, n] (zeros on entry) by a kernel
    /// tuned for small products; false when there is none for this type or machine (then the
    /// caller uses `gemm_acc`).
    fn small_product(
        _a: &[Self],
        _b: &[Self],
        _y: &mut [Self],
        _m: usize,
        _k: usize,
        _n: usize,
    ) -> bool {
        false
    }
    /// `a` [m, k] packed once for [`MatElem::gemm_packed`]; None where this type or CPU has no
    /// packed kernel.
    fn pack_a(_a: Strided<Self>, _m: usize, _k: usize) -> Option<PackedA> {
        None
    }
    /// MatMul's whole output by its constant B packed once: `count` products of `a`'s `[m, k]`
    /// blocks (product `i`'s at `a_at(i)`) with `b`, in a row; None when not done (see
    /// `matmul_packed::products`), and where `small_product` takes these products.
    fn const_b_products(
        _: &KernelCtx,
        _: &[Self],
        _: &[Self],
        (_, _): (usize, &dyn Fn(usize) -> usize),
        _: [usize; 3],
    ) -> Option<Vec<Self>> {
        None
    }
    /// `y[i·ldy + j] += Σ_p a(i, p) · b(p, j)` for `a` packed by [`MatElem::pack_a`].
    fn gemm_packed(_a: &PackedA, _n: usize, _b: Strided<Self>, _y: &mut [Self], _ldy: usize) {
        unreachable!("gemm_packed without pack_a")
    }
}

/// ndarray views of `gemm_acc`'s operands (shapes the callers checked; a mismatch is a bug).
fn views<'a, T>(
    [m, k, n]: [usize; 3],
    a: Strided<'a, T>,
    b: Strided<'a, T>,
    y: &'a mut [T],
    ldy: usize,
) -> (ArrayView2<'a, T>, ArrayView2<'a, T>, ArrayViewMut2<'a, T>) {
    const BAD: &str = "gemm_acc: operand does not cover its shape";
    (
        ArrayView2::from_shape((m, k).strides((a.rs, a.cs)), a.data).expect(BAD),
        ArrayView2::from_shape((k, n).strides((b.rs, b.cs)), b.data).expect(BAD),
        ArrayViewMut2::from_shape((m, n).strides((ldy, 1)), y).expect(BAD),
    )
}

macro_rules! mat_float {
    ($t:ty $(, $small:ident, $packed:path, { $($extra:item)* })?) => {
        impl MatElem for $t {
            $($($extra)*)?
            $(
            fn small_product(a: &[$t], b: &[$t], y: &mut [$t], m: usize, k: usize, n: usize) -> bool {
                $small(a, b, y, m, k, n)
            }
            )?
            fn gemm_acc(
                alpha: f32,
                mkn: [usize; 3],
                a: Strided<$t>,
                b: Strided<$t>,
                y: &mut [$t],
                ldy: usize,
            ) {
                $(
                // The packed kernel where the target has one (AVX-512 / AVX2, wasm SIMD128).
                if $packed(mkn, alpha, a, b, y, ldy) {
                    return;
                }
                )?
                // Elsewhere ndarray hands float products to matrixmultiply's blocked kernels.
                let (a, b, mut y) = views(mkn, a, b, y, ldy);
                general_mat_mul(alpha as $t, &a, &b, 1.0, &mut y);
            }
        }
    };
}
mat_float!(f64);
mat_float!(f32, small_sgemm, super::sgemm::sgemm, {
    fn pack_a(a: Strided<f32>, m: usize, k: usize) -> Option<PackedA> {
        PackedA::new(a, m, k)
    }
    fn gemm_packed(a: &PackedA, n: usize, b: Strided<f32>, y: &mut [f32], ldy: usize) {
        super::sgemm::sgemm_packed(a, n, b, y, ldy)
    }
    fn const_b_products(
        c: &KernelCtx,
        a: &[f32],
        b: &[f32],
        a_at: (usize, &dyn Fn(usize) -> usize),
        mkn: [usize; 3],
    ) -> Option<Vec<f32>> {
        if super::sgemm::small_takes(mkn[0]) {
            return None;
        }
        packed::products(c, a, b, a_at, mkn)
    }
});

macro_rules! mat_int {
    ($t:ty) => {
        impl MatElem for $t {
            fn gemm_acc(
                alpha: f32,
                [m, k, n]: [usize; 3],
                a: Strided<$t>,
                b: Strided<$t>,
                y: &mut [$t],
                ldy: usize,
            ) {
                // i-k-j order: the inner loop runs along a row of b and a row of the accumulator.
                let mut acc = vec![<$t>::ZERO; n];
                for i in 0..m {
                    acc.iter_mut().for_each(|v| *v = 0);
                    for p in 0..k {
                        let aik = a.data[i * a.rs + p * a.cs];
                        for (j, s) in acc.iter_mut().enumerate() {
                            *s = s.wadd(aik.wmul(b.data[p * b.rs + j * b.cs]));
                        }
                    }
                    for (yv, &s) in y[i * ldy..][..n].iter_mut().zip(&acc) {
                        *yv = yv.wadd(s.scale(alpha));
                    }
                }
            }
        }
    };
}
mat_int!(i32);
mat_int!(i64);

/// `a · b` in float32 for row-major `a` [m, k] and `b` [k, n], by the small-product kernel where
/// it applies and `MatElem::gemm_acc` otherwise: for fused kernels (Attention's packed
/// projection) that need the same product MatMul computes.
pub(super) fn sgemm(a: ArrayView2<f32>, b: ArrayView2<f32>) -> Array2<f32> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let mut y = Array2::<f32>::zeros((m, n));
    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
    let (sa, sb) = (
        a.as_slice().expect("standard layout"),
        b.as_slice().expect("standard layout"),
    );
    let sy = y.as_slice_mut().expect("fresh array");
    if !small_sgemm(sa, sb, sy, m, k, n) && m * n * k > 0 {
        f32::gemm_acc(
            1.0,
            [m, k, n],
            Strided::rows(sa, k),
            Strided::rows(sb, n),
            sy,
            n,
        );
    }
    y
}

pub fn matmul(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "MatMul";
    let a = input(OP, inputs, 0)?;
    let b = input(OP, inputs, 1)?;
    Ok(vec![match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(matmul_typed(ctx, a, b)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(matmul_typed(ctx, a, b)?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(matmul_typed(ctx, a, b)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(matmul_typed(ctx, a, b)?),
        (a, b) if a.dtype() == b.dtype() => return Err(unsupported_type(OP, a.dtype())),
        (a, b) => return Err(type_mismatch(OP, a.dtype(), b.dtype())),
    }])
}

fn matmul_typed<T: MatElem>(
    ctx: &KernelCtx,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> Result<ArrayD<T>, String> {
    const OP: &str = "MatMul";
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err(format!(
            "{OP}: operands must have rank >= 1, got shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        ));
    }
    // numpy: a 1-D A is a row vector [1, K], a 1-D B a column vector [K, 1]; the added dim is
    // dropped from the result.
    let sa: Vec<usize> = if a.ndim() == 1 {
        vec![1, a.len()]
    } else {
        a.shape().to_vec()
    };
    let sb: Vec<usize> = if b.ndim() == 1 {
        vec![b.len(), 1]
    } else {
        b.shape().to_vec()
    };
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return Err(format!(
            "{OP}: inner dimensions differ: {:?} x {:?} ({k} vs {k2})",
            a.shape(),
            b.shape()
        ));
    }
    let batch_a = &sa[..sa.len() - 2];
    let batch_b = &sb[..sb.len() - 2];
    let batch = broadcast_shape(OP, batch_a, batch_b)?;
    let full = [&batch[..], &[m, n]].concat();
    check_out(ctx, OP, &full, (std::mem::size_of::<T>() * 8) as u64)?;
    let mut out_shape = batch.clone();
    if a.ndim() > 1 {
        out_shape.push(m);
    }
    if b.ndim() > 1 {
        out_shape.push(n);
    }
    let count: usize = batch.iter().product();
    let shaped =
        |out| ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| format!("{OP}: {e}"));
    if m * n == 0 || k == 0 {
        return shaped(vec![T::ZERO; count * m * n]);
    }
    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
    let (Some(da), Some(db)) = (a.as_slice(), b.as_slice()) else {
        return Err(format!("{OP}: internal error: operand not contiguous"));
    };
    let stra = batch_strides(batch_a, batch.len());
    let strb = batch_strides(batch_b, batch.len());
    // The output batch index decomposed and mapped into each operand's batch.
    let operands = |bi: usize| {
        let (mut rem, mut oa, mut ob) = (bi, 0, 0);
        for d in (0..batch.len()).rev() {
            let idx = rem % batch[d];
            rem /= batch[d];
            oa += idx * stra[d];
            ob += idx * strb[d];
        }
        (oa, ob)
    };
    if batch_b.iter().product::<usize>() == 1 {
        let a_at = |bi| operands(bi).0 * m * k;
        if let Some(y) = T::const_b_products(ctx, da, db, (count, &a_at), [m, k, n]) {
            return shaped(y);
        }
    }
    let mut out = vec![T::ZERO; count * m * n];
    for (bi, chunk) in out.chunks_mut(m * n).enumerate() {
        let (oa, ob) = operands(bi);
        let (sa, sb) = (
            &da[oa * m * k..(oa + 1) * m * k],
            &db[ob * k * n..(ob + 1) * k * n],
        );
        if !T::small_product(sa, sb, chunk, m, k, n) {
            let (sa, sb) = (Strided::rows(sa, k), Strided::rows(sb, n));
            T::gemm_acc(1.0, [m, k, n], sa, sb, chunk, n);
        }
    }
    shaped(out)
}

/// Gemm: Y = alpha * A' * B' + beta * C with A', B' optionally transposed, C unidirectionally
/// broadcast to [M, N].
pub fn gemm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    gemm_with(ctx, ctx.attrs::<Gemm>()?, inputs)
}

/// com.microsoft FusedGemm: Gemm (same inputs and attributes), then `activation` (Relu, Tanh or
/// Sigmoid) on the product through that op's own kernel, so fused and unfused compute the same
/// values. Float32, as in onnxruntime.
pub fn fused_gemm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "FusedGemm";
    let f = ctx.attrs::<FusedGemm>()?;
    let a = input(OP, inputs, 0)?;
    if a.dtype() != DType::F32 {
        return Err(unsupported_type(OP, a.dtype()));
    }
    let act: Kernel = match &f.activation {
        Some(Ok(Activation::Relu)) => super::elementwise::relu,
        Some(Ok(Activation::Tanh)) => super::elementwise::tanh,
        Some(Ok(Activation::Sigmoid)) => super::elementwise::sigmoid,
        other => {
            let name = other.as_ref().and_then(|r| r.as_ref().err());
            return Err(format!(
                "{OP}: activation {name:?} is not supported (Relu, Tanh, Sigmoid)"
            ));
        }
    };
    let y = gemm_with(ctx, &f.gemm, inputs)?;
    let y: Vec<Option<&Tensor>> = y.iter().map(Some).collect();
    act(ctx, &y)
}

fn gemm_with(ctx: &KernelCtx, p: &Gemm, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "Gemm";
    let a = input(OP, inputs, 0)?;
    let b = input(OP, inputs, 1)?;
    let c = opt_input(inputs, 2);
    if a.dtype() != b.dtype() {
        return Err(type_mismatch(OP, a.dtype(), b.dtype()));
    }
    if let Some(c) = c {
        if c.dtype() != a.dtype() {
            return Err(type_mismatch(OP, a.dtype(), c.dtype()));
        }
    }
    Ok(vec![match (a, b, c) {
        (Tensor::F32(a), Tensor::F32(b), c) => {
            Tensor::F32(gemm_typed(ctx, p, a, b, c.and_then(Tensor::as_f32))?)
        }
        (Tensor::F64(a), Tensor::F64(b), c) => Tensor::F64(gemm_typed(
            ctx,
            p,
            a,
            b,
            c.and_then(|t| match t {
                Tensor::F64(x) => Some(x),
                _ => None,
            }),
        )?),
        (Tensor::I32(a), Tensor::I32(b), c) => Tensor::I32(gemm_typed(
            ctx,
            p,
            a,
            b,
            c.and_then(|t| match t {
                Tensor::I32(x) => Some(x),
                _ => None,
            }),
        )?),
        (Tensor::I64(a), Tensor::I64(b), c) => {
            Tensor::I64(gemm_typed(ctx, p, a, b, c.and_then(Tensor::as_i64))?)
        }
        (a, _, _) => return Err(unsupported_type(OP, a.dtype())),
    }])
}

fn as_2d<'a, T>(what: &str, a: ArrayView<'a, T, IxDyn>) -> Result<ArrayView2<'a, T>, String> {
    let shape = a.shape().to_vec();
    a.into_dimensionality()
        .map_err(|_| format!("Gemm: {what} must be 2-D, got shape {shape:?}"))
}

/// A standard-layout 2-D operand as a row-major matrix, transposed (a stride swap) when `t`;
/// with its shape after the transposition.
fn operand<T: Copy>(v: ArrayView2<'_, T>, t: bool) -> (Strided<'_, T>, (usize, usize)) {
    let (r, c) = v.dim();
    let s = Strided::rows(v.to_slice().expect("standard layout"), c);
    if t {
        (s.t(), (c, r))
    } else {
        (s, (r, c))
    }
}

fn gemm_typed<T: MatElem>(
    ctx: &KernelCtx,
    p: &Gemm,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    const OP: &str = "Gemm";
    let (ad, bd) = (a.as_standard_layout(), b.as_standard_layout());
    let (sa, (m, k)) = operand(as_2d("A", ad.view())?, p.trans_a);
    let (sb, (k2, n)) = operand(as_2d("B", bd.view())?, p.trans_b);
    if k != k2 {
        return Err(format!(
            "{OP}: inner dimensions differ: A' is [{m}, {k}], B' is [{k2}, {n}] \
             (transA={}, transB={})",
            p.trans_a as u8, p.trans_b as u8
        ));
    }
    check_out(ctx, OP, &[m, n], (std::mem::size_of::<T>() * 8) as u64)?;
    let mut y = Array2::from_elem((m, n), T::ZERO);
    if let Some(c) = c {
        check_unidirectional(OP, "C", c.shape(), &[m, n])?;
    }
    // The reference implementation skips C when beta is 0, so a NaN in C does not leak through.
    if let Some(c) = c.filter(|_| p.beta != 0.0) {
        let cv = c.broadcast(IxDyn(&[m, n])).ok_or_else(|| {
            format!(
                "{OP}: C of shape {:?} cannot be broadcast to [{m}, {n}]",
                c.shape()
            )
        })?;
        Zip::from(y.view_mut().into_dyn())
            .and(&cv)
            .for_each(|yv, &cv| *yv = cv.scale(p.beta));
    }
    if m * n > 0 && k > 0 {
        let y = y.as_slice_mut().expect("fresh array");
        T::gemm_acc(p.alpha, [m, k, n], sa, sb, y, n);
    }
    Ok(y.into_dyn())
}

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;
