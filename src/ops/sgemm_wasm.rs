//! The wasm32 SIMD128 micro-kernel of the packed GEMM (sgemm.rs): one `MR x NR` tile of C per
//! call in 128-bit vectors. wasm has 16 vector registers' worth of locals that V8 keeps in xmm
//! registers (one of them its scratch), so the tile holds `MR · NR / 4` accumulators plus `NR /
//! 4` loads of B and one broadcast of A: 4 x 8 is 8 + 2 + 1. Without relaxed SIMD there is no
//! fused multiply-add: each step is a multiply and an add, rounded twice.

/// Rows of A per tile.
pub const MR: usize = 4;
/// Columns of B per tile (`NR / 4` vectors).
pub const NR: usize = 8;

/// `c[r·ldc + j] += Σ_p a[p·MR + r] · b[p·ldb + j]` for one `MR x NR` tile.
///
/// Written out accumulator by accumulator: the wasm build is optimized for size (`opt-level =
/// "z"`), where LLVM neither unrolls loops nor vectorizes them, so an array of accumulators
/// indexed in a loop would live in linear memory. Named locals become V8 registers.
///
/// # Safety
/// `a` holds `kc · MR` floats, `b` `kc` rows of `NR` floats `ldb` apart, and `c` an `MR x NR`
/// tile with rows `ldc` apart.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, ldb: usize, c: *mut f32, ldc: usize) {
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
            let a0 = f32x4_splat(*ap);
            c00 = f32x4_add(c00, f32x4_mul(a0, b0));
            c01 = f32x4_add(c01, f32x4_mul(a0, b1));
            let a1 = f32x4_splat(*ap.add(1));
            c10 = f32x4_add(c10, f32x4_mul(a1, b0));
            c11 = f32x4_add(c11, f32x4_mul(a1, b1));
            let a2 = f32x4_splat(*ap.add(2));
            c20 = f32x4_add(c20, f32x4_mul(a2, b0));
            c21 = f32x4_add(c21, f32x4_mul(a2, b1));
            let a3 = f32x4_splat(*ap.add(3));
            c30 = f32x4_add(c30, f32x4_mul(a3, b0));
            c31 = f32x4_add(c31, f32x4_mul(a3, b1));
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
            v128_store(cp, f32x4_add(v128_load(cp), s0));
            let cp = cp.add(1);
            v128_store(cp, f32x4_add(v128_load(cp), s1));
        }
    }
}
