//! The wasm32 SIMD128 micro-kernel of the packed GEMM (sgemm.rs): one `MR x NR` tile of C per
//! call in 128-bit vectors. wasm has 16 vector registers' worth of locals that V8 keeps in xmm
//! registers (one of them its scratch), so the tile holds `MR · NR / 4` accumulators plus `NR /
//! 4` loads of B and one broadcast of A: 4 x 8 is 8 + 2 + 1. Without relaxed SIMD there is no
//! fused multiply-add: each step is a multiply and an add, rounded twice.

/// Rows of A per tile.
pub const MR: usize = 4;
/// Columns of B per tile (`NR / 4` vectors).
pub const NR: usize = 8;

/// `c[r·ldc + j] += Σ_p a[p·MR + r] · b[p·ldb + j]` for one `MR x NR` tile (`=` without
/// `add`).
///
/// Written out accumulator by accumulator: the wasm build is optimized for size (`opt-level =
/// "z"`), where LLVM neither unrolls loops nor vectorizes them, so an array of accumulators
/// indexed in a loop would live in linear memory. Named locals become V8 registers.
///
/// # Safety
/// `a` holds `kc · MR` floats, `b` `kc` rows of `NR` floats `ldb` apart, and `c` an `MR x NR`
/// tile with rows `ldc` apart.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[inline(always)]
fn madd(
    a: core::arch::wasm32::v128,
    b: core::arch::wasm32::v128,
    c: core::arch::wasm32::v128,
) -> core::arch::wasm32::v128 {
    use core::arch::wasm32::*;
    #[cfg(target_feature = "relaxed-simd")]
    {
        f32x4_relaxed_madd(a, b, c)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        f32x4_add(c, f32x4_mul(a, b))
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub unsafe fn kernel(
    kc: usize,
    a: *const f32,
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    add: bool,
) {
    use core::arch::wasm32::*;
    let z = f32x4_splat(0.0);
    let (mut c00, mut c01, mut c10, mut c11) = (z, z, z, z);
    let (mut c20, mut c21, mut c30, mut c31) = (z, z, z, z);
    let (mut ap, mut bp) = (a, b);
    for _ in 0..kc {
        // SAFETY: step p's MR floats of A and NR floats of B's row p (the caller's promise);
        // wasm loads need no alignment.
        unsafe {
            let b0 = v128_load(bp as *const v128);
            let b1 = v128_load(bp.add(4) as *const v128);
            let a0 = v128_load32_splat(ap as *const u32);
            c00 = madd(a0, b0, c00);
            c01 = madd(a0, b1, c01);
            let a1 = v128_load32_splat(ap.add(1) as *const u32);
            c10 = madd(a1, b0, c10);
            c11 = madd(a1, b1, c11);
            let a2 = v128_load32_splat(ap.add(2) as *const u32);
            c20 = madd(a2, b0, c20);
            c21 = madd(a2, b1, c21);
            let a3 = v128_load32_splat(ap.add(3) as *const u32);
            c30 = madd(a3, b0, c30);
            c31 = madd(a3, b1, c31);
            ap = ap.add(MR);
            bp = bp.add(ldb);
        }
    }
    for (r, [s0, s1]) in [[c00, c01], [c10, c11], [c20, c21], [c30, c31]]
        .into_iter()
        .enumerate()
    {
        // SAFETY: row r of the tile, its NR columns (the caller's promise).
        unsafe {
            let cp = c.add(r * ldc) as *mut v128;
            let cp1 = cp.add(1);
            if add {
                v128_store(cp, f32x4_add(v128_load(cp), s0));
                v128_store(cp1, f32x4_add(v128_load(cp1), s1));
            } else {
                v128_store(cp, s0);
                v128_store(cp1, s1);
            }
        }
    }
}

/// `y[j] = a3·b3[j] + (a2·b2[j] + (a1·b1[j] + (a0·b0[j] + y[j])))` over `y`'s length (each `b`
/// at least as long): the small-product kernel's step over 4 rows of B, in vectors of 4 (the
/// size-optimized build does not vectorize the plain loop), with the plain loop's order.
#[cfg(target_arch = "wasm32")]
pub fn axpy4(y: &mut [f32], b: [&[f32]; 4], a: [f32; 4]) {
    let n = y.len();
    assert!(b.iter().all(|r| r.len() >= n));
    let mut j = 0;
    #[cfg(target_feature = "simd128")]
    {
        use core::arch::wasm32::*;
        let av = [
            f32x4_splat(a[0]),
            f32x4_splat(a[1]),
            f32x4_splat(a[2]),
            f32x4_splat(a[3]),
        ];
        while j + 4 <= n {
            // SAFETY: j + 4 <= n, and every row of b holds at least n floats (asserted).
            unsafe {
                let yp = y.as_mut_ptr().add(j) as *mut v128;
                let x = |r: usize| v128_load(b[r].as_ptr().add(j) as *const v128);
                let mut s = v128_load(yp);
                s = madd(av[0], x(0), s);
                s = madd(av[1], x(1), s);
                s = madd(av[2], x(2), s);
                s = madd(av[3], x(3), s);
                v128_store(yp, s);
            }
            j += 4;
        }
    }
    for j in j..n {
        y[j] = a[3] * b[3][j] + (a[2] * b[2][j] + (a[1] * b[1][j] + (a[0] * b[0][j] + y[j])));
    }
}

/// `y[j] = a·b[j] + y[j]` over `y`'s length (`b` at least as long), in vectors of 4.
#[cfg(target_arch = "wasm32")]
pub fn axpy1(y: &mut [f32], b: &[f32], a: f32) {
    let n = y.len();
    assert!(b.len() >= n);
    let mut j = 0;
    #[cfg(target_feature = "simd128")]
    {
        use core::arch::wasm32::*;
        let av = f32x4_splat(a);
        while j + 4 <= n {
            // SAFETY: j + 4 <= n <= b.len() (asserted).
            unsafe {
                let yp = y.as_mut_ptr().add(j) as *mut v128;
                v128_store(
                    yp,
                    madd(
                        av,
                        v128_load(b.as_ptr().add(j) as *const v128),
                        v128_load(yp),
                    ),
                );
            }
            j += 4;
        }
    }
    for j in j..n {
        y[j] += a * b[j];
    }
}
