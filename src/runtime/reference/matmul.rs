//! MatMul (numpy matmul semantics, ONNX 13) and Gemm (ONNX 13: C optional).

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayD, ArrayView2, ArrayViewMut2, IxDyn, Zip};

use super::broadcast::{broadcast_shape, check_unidirectional};
use super::common::{check_out, input, opt_input, type_mismatch, unsupported_type, Num};
use super::{KernelCtx, KernelResult};
use crate::tensor::Tensor;

/// Element types with a matrix-product kernel: `y += alpha * a · b`.
trait MatElem: Num {
    fn gemm_acc(alpha: f32, a: ArrayView2<Self>, b: ArrayView2<Self>, y: &mut ArrayViewMut2<Self>);
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
}

macro_rules! mat_float {
    ($t:ty $(, $small:ident)?) => {
        impl MatElem for $t {
            $(
            fn small_product(a: &[$t], b: &[$t], y: &mut [$t], m: usize, k: usize, n: usize) -> bool {
                $small(a, b, y, m, k, n)
            }
            )?
            fn gemm_acc(
                alpha: f32,
                a: ArrayView2<$t>,
                b: ArrayView2<$t>,
                y: &mut ArrayViewMut2<$t>,
            ) {
                // ndarray hands float products to matrixmultiply's blocked kernels.
                general_mat_mul(alpha as $t, &a, &b, 1.0, y);
            }
        }
    };
}
mat_float!(f32, small_sgemm);
mat_float!(f64);

macro_rules! mat_int {
    ($t:ty) => {
        impl MatElem for $t {
            fn gemm_acc(
                alpha: f32,
                a: ArrayView2<$t>,
                b: ArrayView2<$t>,
                y: &mut ArrayViewMut2<$t>,
            ) {
                // i-k-j order: the inner loop runs along a row of b and a row of the accumulator.
                let mut acc = vec![<$t>::ZERO; b.ncols()];
                for (arow, mut yrow) in a.rows().into_iter().zip(y.rows_mut()) {
                    acc.iter_mut().for_each(|v| *v = 0);
                    for (&aik, brow) in arow.iter().zip(b.rows()) {
                        for (s, &bkj) in acc.iter_mut().zip(brow.iter()) {
                            *s = s.wadd(aik.wmul(bkj));
                        }
                    }
                    for (yv, &s) in yrow.iter_mut().zip(&acc) {
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
/// it applies and matrixmultiply otherwise: for fused kernels (Attention's packed projection)
/// that need the same product MatMul computes.
pub(super) fn sgemm(a: ArrayView2<f32>, b: ArrayView2<f32>) -> Array2<f32> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let mut y = Array2::<f32>::zeros((m, n));
    if let (Some(sa), Some(sb), Some(sy)) = (a.as_slice(), b.as_slice(), y.as_slice_mut()) {
        if small_sgemm(sa, sb, sy, m, k, n) {
            return y;
        }
    }
    general_mat_mul(1.0, &a, &b, 0.0, &mut y);
    y
}

/// Largest `m` the small-product kernel takes; above it matrixmultiply's packing pays off.
#[cfg(any(target_arch = "x86_64", test))]
const SMALL_M: usize = 64;

/// `y = a · b` in float32 for few rows (transformer weights at small batch x seq), on x86-64
/// with AVX2 and FMA: matrixmultiply packs both operands on every call, which at 8 rows costs
/// more than the product. Elsewhere (and for larger `m`) it returns false.
fn small_sgemm(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if m <= SMALL_M
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports the features `sgemm_avx2` is compiled for (checked just
            // above); the function itself is safe code.
            unsafe { sgemm_avx2(a, b, y, m, k, n) };
            return true;
        }
    }
    let _ = (a, b, y, m, k, n);
    false
}

/// `sgemm_rows` compiled for AVX2 + FMA, so its fixed-width tiles become 256-bit FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sgemm_avx2(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    sgemm_rows(a, b, y, m, k, n);
}

/// Row blocks of 4 (then single rows), each swept by `sgemm_cols`.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn sgemm_rows(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    let mut i = 0;
    while i + 4 <= m {
        sgemm_cols::<4>(a, b, y, i, k, n);
        i += 4;
    }
    while i < m {
        sgemm_cols::<1>(a, b, y, i, k, n);
        i += 1;
    }
}

/// Column tiles of 16, then 8, then single columns, for rows `i..i + R`.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn sgemm_cols<const R: usize>(a: &[f32], b: &[f32], y: &mut [f32], i: usize, k: usize, n: usize) {
    let mut j = 0;
    while j + 16 <= n {
        sgemm_tile::<R, 16>(a, b, y, i, j, k, n);
        j += 16;
    }
    while j + 8 <= n {
        sgemm_tile::<R, 8>(a, b, y, i, j, k, n);
        j += 8;
    }
    while j < n {
        sgemm_tile::<R, 1>(a, b, y, i, j, k, n);
        j += 1;
    }
}

/// One R x W tile of `y`: R x W accumulators (registers), updated once per `k` from a
/// contiguous run of W values of a row of `b` and one value of each of the R rows of `a`.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
fn sgemm_tile<const R: usize, const W: usize>(
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    i: usize,
    j: usize,
    k: usize,
    n: usize,
) {
    let mut acc = [[0f32; W]; R];
    for kk in 0..k {
        let brow: &[f32; W] = b[kk * n + j..][..W].try_into().expect("W values");
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = a[(i + r) * k + kk];
            for (s, &bv) in acc_r.iter_mut().zip(brow) {
                *s = av.mul_add(bv, *s);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        y[(i + r) * n + j..][..W].copy_from_slice(acc_r);
    }
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

/// Row-major strides of `shape`, with 0 where a dim is 1 so that it broadcasts, right-aligned to
/// a batch shape of rank `rank`.
fn batch_strides(shape: &[usize], rank: usize) -> Vec<usize> {
    let mut strides = vec![0; rank];
    let mut s = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let slot = rank - shape.len() + i;
        strides[slot] = if d == 1 { 0 } else { s };
        s *= d;
    }
    strides
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
    let mut full = batch.clone();
    full.extend([m, n]);
    check_out(ctx, OP, &full, (std::mem::size_of::<T>() * 8) as u64)?;
    let mut out_shape = batch.clone();
    if a.ndim() > 1 {
        out_shape.push(m);
    }
    if b.ndim() > 1 {
        out_shape.push(n);
    }
    let count: usize = batch.iter().product();
    let mut out = vec![T::ZERO; count * m * n];
    if m * n > 0 && k > 0 {
        let a = a.as_standard_layout();
        let b = b.as_standard_layout();
        let (da, db) = match (a.as_slice(), b.as_slice()) {
            (Some(x), Some(y)) => (x, y),
            _ => return Err(format!("{OP}: internal error: operand not contiguous")),
        };
        let stra = batch_strides(batch_a, batch.len());
        let strb = batch_strides(batch_b, batch.len());
        for (bi, chunk) in out.chunks_mut(m * n).enumerate() {
            // Decompose the output batch index and map it into each operand's batch.
            let (mut rem, mut oa, mut ob) = (bi, 0, 0);
            for d in (0..batch.len()).rev() {
                let idx = rem % batch[d];
                rem /= batch[d];
                oa += idx * stra[d];
                ob += idx * strb[d];
            }
            let (sa, sb) = (
                &da[oa * m * k..(oa + 1) * m * k],
                &db[ob * k * n..(ob + 1) * k * n],
            );
            if T::small_product(sa, sb, chunk, m, k, n) {
                continue;
            }
            let av = ArrayView2::from_shape((m, k), sa).map_err(|e| format!("{OP}: {e}"))?;
            let bv = ArrayView2::from_shape((k, n), sb).map_err(|e| format!("{OP}: {e}"))?;
            let mut yv =
                ArrayViewMut2::from_shape((m, n), chunk).map_err(|e| format!("{OP}: {e}"))?;
            T::gemm_acc(1.0, av, bv, &mut yv);
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| format!("{OP}: {e}"))
}

/// Gemm: Y = alpha * A' * B' + beta * C with A', B' optionally transposed, C unidirectionally
/// broadcast to [M, N]. Versions 11 and 13 differ only in types.
/// com.microsoft FusedGemm: Gemm (same inputs and attributes), then `activation` (Relu, Tanh or
/// Sigmoid) on the product through that op's own kernel, so fused and unfused compute the same
/// values. Float32, as in onnxruntime.
pub fn fused_gemm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
    const OP: &str = "FusedGemm";
    let a = input(OP, inputs, 0)?;
    if a.dtype() != crate::tensor::DType::F32 {
        return Err(unsupported_type(OP, a.dtype()));
    }
    let act: super::Kernel = match ctx.node.attr_string("activation").as_deref() {
        Some("Relu") => super::elementwise::relu,
        Some("Tanh") => super::elementwise::tanh,
        Some("Sigmoid") => super::elementwise::sigmoid,
        other => {
            return Err(format!(
                "{OP}: activation {other:?} is not supported (Relu, Tanh, Sigmoid)"
            ))
        }
    };
    let y = gemm(ctx, inputs)?;
    let y: Vec<Option<&Tensor>> = y.iter().map(Some).collect();
    act(ctx, &y)
}

pub fn gemm(ctx: &KernelCtx, inputs: &[Option<&Tensor>]) -> KernelResult {
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
    let node = ctx.node;
    let p = GemmParams {
        alpha: node.attr_float("alpha").unwrap_or(1.0),
        beta: node.attr_float("beta").unwrap_or(1.0),
        trans_a: node.attr_int("transA").unwrap_or(0) != 0,
        trans_b: node.attr_int("transB").unwrap_or(0) != 0,
    };
    Ok(vec![match (a, b, c) {
        (Tensor::F32(a), Tensor::F32(b), c) => {
            Tensor::F32(gemm_typed(ctx, &p, a, b, c.and_then(Tensor::as_f32))?)
        }
        (Tensor::F64(a), Tensor::F64(b), c) => Tensor::F64(gemm_typed(
            ctx,
            &p,
            a,
            b,
            c.and_then(|t| match t {
                Tensor::F64(x) => Some(x),
                _ => None,
            }),
        )?),
        (Tensor::I32(a), Tensor::I32(b), c) => Tensor::I32(gemm_typed(
            ctx,
            &p,
            a,
            b,
            c.and_then(|t| match t {
                Tensor::I32(x) => Some(x),
                _ => None,
            }),
        )?),
        (Tensor::I64(a), Tensor::I64(b), c) => {
            Tensor::I64(gemm_typed(ctx, &p, a, b, c.and_then(Tensor::as_i64))?)
        }
        (a, _, _) => return Err(unsupported_type(OP, a.dtype())),
    }])
}

struct GemmParams {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
}

fn as_2d<'a, T>(what: &str, a: &'a ArrayD<T>) -> Result<ArrayView2<'a, T>, String> {
    a.view()
        .into_dimensionality()
        .map_err(|_| format!("Gemm: {what} must be 2-D, got shape {:?}", a.shape()))
}

fn gemm_typed<T: MatElem>(
    ctx: &KernelCtx,
    p: &GemmParams,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    const OP: &str = "Gemm";
    let mut av = as_2d("A", a)?;
    let mut bv = as_2d("B", b)?;
    if p.trans_a {
        av = av.reversed_axes();
    }
    if p.trans_b {
        bv = bv.reversed_axes();
    }
    let (m, k) = av.dim();
    let (k2, n) = bv.dim();
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
        T::gemm_acc(p.alpha, av, bv, &mut y.view_mut());
    }
    Ok(y.into_dyn())
}

#[cfg(test)]
mod tests {
    use super::super::common::test_util::*;
    use super::*;
    use crate::ir::{attr, Node};

    #[test]
    fn matmul_2d() {
        let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = f32s(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        assert_eq!(y, f32s(&[2, 2], &[58., 64., 139., 154.]));
        let a = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let b = i64s(&[3, 2], &[7, 8, 9, 10, 11, 12]);
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        assert_eq!(y, i64s(&[2, 2], &[58, 64, 139, 154]));
    }

    #[test]
    fn matmul_1d_operands() {
        let v = f64s(&[3], &[1., 2., 3.]);
        let m = f64s(&[3, 2], &[1., 0., 0., 1., 1., 1.]);
        // [3] x [3,2] -> [2]
        assert_eq!(
            run1(matmul, "MatMul", &[&v, &m]).unwrap(),
            f64s(&[2], &[4., 5.])
        );
        // [2,3] x [3] -> [2]
        let mt = f64s(&[2, 3], &[1., 0., 1., 0., 1., 1.]);
        assert_eq!(
            run1(matmul, "MatMul", &[&mt, &v]).unwrap(),
            f64s(&[2], &[4., 5.])
        );
        // [3] x [3] -> scalar
        assert_eq!(
            run1(matmul, "MatMul", &[&v, &v]).unwrap(),
            f64s(&[], &[14.])
        );
    }

    #[test]
    fn matmul_batched_broadcast() {
        // A: [2, 1, 2, 2], B: [3, 2, 2] -> [2, 3, 2, 2]
        let a: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let a = f32s(&[2, 1, 2, 2], &a);
        // B batches: identity, 2*identity, swap
        let b = f32s(
            &[3, 2, 2],
            &[1., 0., 0., 1., 2., 0., 0., 2., 0., 1., 1., 0.],
        );
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        #[rustfmt::skip]
        let want = [
            0., 1., 2., 3.,   0., 2., 4., 6.,   1., 0., 3., 2.,
            4., 5., 6., 7.,   8., 10., 12., 14., 5., 4., 7., 6.,
        ];
        assert_eq!(y, f32s(&[2, 3, 2, 2], &want));
        // [2,2] x [2,2,1] broadcasts A over B's batch
        let b = f32s(&[2, 2, 1], &[1., 1., 1., -1.]);
        let a = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        assert_eq!(y, f32s(&[2, 2, 1], &[3., 7., -1., -1.]));
    }

    /// The small-product kernel (and whatever `matmul` picks on this machine) against a float64
    /// product, over shapes that exercise every row and column tail.
    #[test]
    fn small_product_matches_f64_over_tails() {
        for m in [1usize, 2, 3, 4, 5, 8, 9, 64, 65] {
            for n in [1usize, 7, 8, 9, 15, 16, 17, 40] {
                for k in [1usize, 3, 64] {
                    let a: Vec<f32> = (0..m * k)
                        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                        .collect();
                    let b: Vec<f32> = (0..k * n)
                        .map(|i| ((i * 53 % 19) as f32 - 9.0) / 5.0)
                        .collect();
                    let mut want = vec![0f64; m * n];
                    for i in 0..m {
                        for j in 0..n {
                            want[i * n + j] = (0..k)
                                .map(|t| a[i * k + t] as f64 * b[t * n + j] as f64)
                                .sum();
                        }
                    }
                    let mut y = vec![0f32; m * n];
                    sgemm_rows(&a, &b, &mut y, m, k, n);
                    let got =
                        run1(matmul, "MatMul", &[&f32s(&[m, k], &a), &f32s(&[k, n], &b)]).unwrap();
                    for (idx, (&p, &q)) in y.iter().zip(got.as_f32().unwrap().iter()).enumerate() {
                        let w = want[idx];
                        let tol = 1e-5 * (1.0 + w.abs());
                        assert!(
                            (p as f64 - w).abs() <= tol,
                            "{m}x{k}x{n} [{idx}]: {p} vs {w}"
                        );
                        assert!(
                            (q as f64 - w).abs() <= tol,
                            "{m}x{k}x{n} [{idx}]: {q} vs {w}"
                        );
                    }
                }
            }
        }
        // NaN and inf propagate as in a plain product.
        let a = f32s(&[1, 2], &[f32::NAN, 1.0]);
        let b = f32s(&[2, 2], &[1.0, 0.0, f32::INFINITY, 2.0]);
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        let y = y.as_f32().unwrap();
        assert!(y[[0, 0]].is_nan() && y[[0, 1]].is_nan());
        let a = f32s(&[1, 2], &[0.5, 1.0]);
        let y = run1(matmul, "MatMul", &[&a, &b]).unwrap();
        assert_eq!(y, f32s(&[1, 2], &[f32::INFINITY, 2.0]));
    }

    #[test]
    fn matmul_errors_and_empty() {
        let a = f32s(&[2, 3], &[0.; 6]);
        let b = f32s(&[2, 3], &[0.; 6]);
        let e = run1(matmul, "MatMul", &[&a, &b]).unwrap_err();
        assert!(e.contains("[2, 3]") && e.contains("inner"), "{e}");
        let s = f32s(&[], &[1.]);
        assert!(run1(matmul, "MatMul", &[&s, &a]).is_err());
        let a3 = f32s(&[2, 1, 1], &[0.; 2]);
        let b3 = f32s(&[3, 1, 1], &[0.; 3]);
        assert!(run1(matmul, "MatMul", &[&a3, &b3])
            .unwrap_err()
            .contains("broadcast"));
        // K = 0 gives zeros
        let a = f32s(&[2, 0], &[]);
        let b = f32s(&[0, 3], &[]);
        assert_eq!(
            run1(matmul, "MatMul", &[&a, &b]).unwrap(),
            f32s(&[2, 3], &[0.; 6])
        );
    }

    fn gemm_node(alpha: f32, beta: f32, ta: i64, tb: i64) -> Node {
        let mut n = Node::new("Gemm", "");
        n.set_attr(attr::float("alpha", alpha));
        n.set_attr(attr::float("beta", beta));
        n.set_attr(attr::int("transA", ta));
        n.set_attr(attr::int("transB", tb));
        n
    }

    #[test]
    fn gemm_transposes_and_c_broadcast() {
        let a = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = f32s(&[3, 2], &[7., 8., 9., 10., 11., 12.]);
        let c = f32s(&[2], &[1., -1.]);
        let n = gemm_node(1.0, 1.0, 0, 0);
        let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[59., 63., 140., 153.]));
        // A given as [3,2] with transA, B as [2,3] with transB; alpha 2, beta 0.5, C [2,1]
        let at = f32s(&[3, 2], &[1., 4., 2., 5., 3., 6.]);
        let bt = f32s(&[2, 3], &[7., 9., 11., 8., 10., 12.]);
        let c = f32s(&[2, 1], &[2., 4.]);
        let n = gemm_node(2.0, 0.5, 1, 1);
        let y = run_at(gemm, &n, 13, &[Some(&at), Some(&bt), Some(&c)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[117., 129., 280., 310.]));
        // no C, scalar C
        let n = Node::new("Gemm", "");
        let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[58., 64., 139., 154.]));
        let s = f32s(&[], &[1.]);
        let y = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&s)]).unwrap();
        assert_eq!(y[0], f32s(&[2, 2], &[59., 65., 140., 155.]));
        // integer Gemm
        let ai = i32s(&[1, 2], &[1, 2]);
        let bi = i32s(&[2, 1], &[3, 4]);
        let ci = i32s(&[1], &[5]);
        let y = run_at(gemm, &n, 13, &[Some(&ai), Some(&bi), Some(&ci)]).unwrap();
        assert_eq!(y[0], i32s(&[1, 1], &[16]));
    }

    #[test]
    fn gemm_beta_zero_ignores_c_values() {
        let a = f32s(&[1, 1], &[2.]);
        let c = f32s(&[1], &[f32::NAN]);
        let n = gemm_node(1.5, 0.0, 0, 0);
        let y = run_at(gemm, &n, 13, &[Some(&a), Some(&a), Some(&c)]).unwrap();
        assert_eq!(y[0], f32s(&[1, 1], &[6.]));
        // but C's shape is still checked
        let c = f32s(&[2], &[0., 0.]);
        assert!(run_at(gemm, &n, 13, &[Some(&a), Some(&a), Some(&c)]).is_err());
    }

    #[test]
    fn gemm_errors() {
        let n = Node::new("Gemm", "");
        let a = f32s(&[2, 3], &[0.; 6]);
        let e = run_at(gemm, &n, 13, &[Some(&a), Some(&a)]).unwrap_err();
        assert!(e.contains("inner"), "{e}");
        let v = f32s(&[3], &[0.; 3]);
        let e = run_at(gemm, &n, 13, &[Some(&v), Some(&a)]).unwrap_err();
        assert!(e.contains("2-D"), "{e}");
        let b = f32s(&[3, 2], &[0.; 6]);
        let c = f32s(&[3], &[0.; 3]);
        let e = run_at(gemm, &n, 13, &[Some(&a), Some(&b), Some(&c)]).unwrap_err();
        assert!(e.contains("[3]") && e.contains("[2, 2]"), "{e}");
    }
}
