//! The small-product kernel: `y = a · b` for up to `SMALL_M` rows of A (a decode step's one
//! token) with no packing at all, AVX2 + FMA tiles of one row of B.

/// Largest `m` the small-product kernel takes. It streams B once per 4 rows, so from 5 rows on
/// the packed kernel (which reads B in place once per 12 or 6 rows) is faster: on this project's
/// AVX-512 machine, 5x768x768 29.7 GFLOP/s small against 40.3 packed (39.3 with the AVX2
/// micro-kernel), 16x768x2304 33.1 against 67.4 (60.5), while at 4 rows the small kernel leads,
/// 40.9 against 28.5 (34.8). Measured with `sgemm_timing` (`sgemm_tests.rs`).
#[cfg(any(target_arch = "x86_64", test))]
const SMALL_M: usize = 4;

/// `y = a · b` in float32 for few rows (a decode step's one token), on x86-64 with AVX2 and
/// FMA: no packing at all, which at up to `SMALL_M` rows costs more than the product. Elsewhere
/// (and for larger `m`) it returns false.
pub fn small_sgemm(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) -> bool {
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
pub(super) unsafe fn sgemm_avx2(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    sgemm_rows(a, b, y, m, k, n);
}

/// Row blocks of 4 (then single rows), each swept by `sgemm_cols`.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
pub(crate) fn sgemm_rows(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
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
