//! Thin products, where the packed micro-kernel would compute mostly padding: a few rows of A
//! times a B stored transposed ([`dots`]), and A times a few columns of B ([`narrow`]).

#[cfg(target_arch = "x86_64")]
use super::tile;
use super::{ASide, Isa, Strided, KC, MC, SCRATCH};

/// Most rows of A that [`dots`] takes.
pub(super) const DOT_ROWS: usize = 4;

/// A few rows of A times a B stored transposed (`b.rs == 1`: a Linear layer's weights [N, K]
/// under Gemm's transB): every output is the dot product of two contiguous runs, and packing B
/// would cost more than the product.
pub(super) fn dots(
    isa: Isa,
    [m, k, n]: [usize; 3],
    alpha: f32,
    a: Strided<f32>,
    b: Strided<f32>,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(b.covers(k, n), "sgemm: B out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        ldc >= n && (m - 1) * ldc + n <= c.len(),
        "sgemm: C out of bounds"
    );
    let args = (k, n, m, alpha, a, b, ldc);
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,fma")]
        fn wide(args: DotArgs, c: &mut [f32]) {
            dots_body(args, c)
        }
        #[target_feature(enable = "avx2,fma")]
        fn narrow(args: DotArgs, c: &mut [f32]) {
            dots_body(args, c)
        }
        // SAFETY: `sgemm_with` checked that the CPU has `isa`'s features.
        unsafe {
            match isa {
                Isa::Avx512 => wide(args, c),
                Isa::Avx2 => narrow(args, c),
                Isa::Simd128 => unreachable!("sgemm: no SIMD128 on x86-64"),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        dots_body(args, c)
    }
}

/// `dots`' operands: k, n, m, alpha, A, B, ldc.
type DotArgs<'a> = (
    usize,
    usize,
    usize,
    f32,
    Strided<'a, f32>,
    Strided<'a, f32>,
    usize,
);

/// The loops of [`dots`], inlined into each target-feature wrapper so that they vectorize.
#[inline(always)]
fn dots_body((k, n, m, alpha, a, b, ldc): DotArgs, c: &mut [f32]) {
    for j in 0..n {
        let bj = &b.data[j * b.cs..][..k];
        for i in 0..m {
            c[i * ldc + j] += alpha * dot(&a.data[i * a.rs..][..k], bj);
        }
    }
}

/// `a · b + c`: one fused multiply-add on x86-64 (the callers' wrappers enable FMA); elsewhere a
/// multiply and an add (wasm has no scalar FMA instruction: its `mul_add` is a software routine).
#[inline(always)]
pub(super) fn madd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        a.mul_add(b, c)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        a * b + c
    }
}

/// `Σ x[i]·y[i]` in 32 lanes (inlined into the caller's target features, so they vectorize).
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 32];
    let (xs, ys) = (x.chunks_exact(32), y.chunks_exact(32));
    let tail: f32 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(p, q)| p * q)
        .sum();
    for (xc, yc) in xs.zip(ys) {
        for l in 0..32 {
            acc[l] = madd(xc[l], yc[l], acc[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Most columns of B that [`narrow`] takes.
pub(super) const NARROW_COLS: usize = 4;

/// A times a few columns of B (a squeeze-excitation 1x1 Conv on a 1x1 image): one
/// matrix-vector product per column, reading A once each, where the micro-kernel would fill a
/// 32-column tile for every column. The caller checked the operands' bounds.
pub(super) fn narrow(
    isa: Isa,
    [m, k, n]: [usize; 3],
    a: ASide,
    b: Strided<f32>,
    c: &mut [f32],
    ldc: usize,
) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let s = &mut *s;
        super::grow(&mut s.bp, k);
        super::grow(&mut s.ap, m);
        for j in 0..n {
            let col = &mut s.bp[..k];
            for (p, v) in col.iter_mut().enumerate() {
                *v = b.data[p * b.rs + j * b.cs];
            }
            let args = NarrowArgs {
                m,
                k,
                a,
                col,
                acc: &mut s.ap[..m],
            };
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                fn wide(args: NarrowArgs) {
                    narrow_body::<12>(args)
                }
                #[target_feature(enable = "avx2,fma")]
                fn thin(args: NarrowArgs) {
                    narrow_body::<6>(args)
                }
                debug_assert_eq!(tile(isa).0, if isa == Isa::Avx512 { 12 } else { 6 });
                // SAFETY: `sgemm_with` / `PackedA::new` checked that the CPU has `isa`'s
                // features.
                unsafe {
                    match isa {
                        Isa::Avx512 => wide(args),
                        Isa::Avx2 => thin(args),
                        Isa::Simd128 => unreachable!("sgemm: no SIMD128 on x86-64"),
                    }
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                debug_assert_eq!(super::tile(isa).0, super::wasm::MR);
                narrow_body::<{ super::wasm::MR }>(args)
            }
            for (i, &v) in s.ap[..m].iter().enumerate() {
                c[i * ldc + j] += v;
            }
        }
    });
}

/// [`narrow`]'s operands for one column: `acc` [m] is set to `a · col` (times alpha).
struct NarrowArgs<'a> {
    m: usize,
    k: usize,
    a: ASide<'a>,
    col: &'a [f32],
    acc: &'a mut [f32],
}

/// The loops of [`narrow`], inlined into each target-feature wrapper so that they vectorize;
/// `MR` is the packed strips' height for that wrapper's kernel.
#[inline(always)]
fn narrow_body<const MR: usize>(NarrowArgs { m, k, a, col, acc }: NarrowArgs) {
    match a {
        ASide::Packed(pa) => {
            for pc in (0..k).step_by(KC) {
                let kc = (k - pc).min(KC);
                let x = &col[pc..pc + kc];
                for ic in (0..m).step_by(MC) {
                    let block = pa.block(pc, ic);
                    let rows = (m - ic).min(MC);
                    for (si, strip) in block.chunks_exact(MR * kc).enumerate() {
                        // Four chains of fused multiply-adds, so that each waits on its own
                        // latency rather than on the one before.
                        let mut t = [[0f32; MR]; 4];
                        let (quads, xq) = (strip.chunks_exact(4 * MR), x.chunks_exact(4));
                        let (rest, xr) = (quads.remainder(), xq.remainder());
                        for (ap, xv) in quads.zip(xq) {
                            for (q, tq) in t.iter_mut().enumerate() {
                                for (tv, &av) in tq.iter_mut().zip(&ap[q * MR..][..MR]) {
                                    *tv = madd(av, xv[q], *tv);
                                }
                            }
                        }
                        for (ap, &xv) in rest.chunks_exact(MR).zip(xr) {
                            for (tv, &av) in t[0].iter_mut().zip(ap) {
                                *tv = madd(av, xv, *tv);
                            }
                        }
                        let t: [f32; MR] =
                            std::array::from_fn(|l| (t[0][l] + t[1][l]) + (t[2][l] + t[3][l]));
                        let i0 = si * MR;
                        let live = rows.saturating_sub(i0).min(MR);
                        let dst = &mut acc[ic + i0..][..live];
                        for (d, &tv) in dst.iter_mut().zip(&t) {
                            // The first panel sets, the later ones add.
                            *d = if pc == 0 { tv } else { *d + tv };
                        }
                    }
                }
            }
        }
        ASide::Pack(a, alpha) if a.cs == 1 => {
            for (i, d) in acc.iter_mut().enumerate() {
                *d = alpha * dot(&a.data[i * a.rs..][..k], col);
            }
        }
        ASide::Pack(a, alpha) => {
            // Column p of A starts at p·cs; contiguous when A is stored transposed.
            acc.fill(0.0);
            for (p, &xv) in col.iter().enumerate() {
                let xv = alpha * xv;
                if a.rs == 1 {
                    for (d, &av) in acc.iter_mut().zip(&a.data[p * a.cs..][..m]) {
                        *d = madd(av, xv, *d);
                    }
                } else {
                    for (i, d) in acc.iter_mut().enumerate() {
                        *d = madd(a.data[i * a.rs + p * a.cs], xv, *d);
                    }
                }
            }
        }
    }
}
