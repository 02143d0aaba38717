//! The small-product kernel: `y = a · b` for up to `SMALL_M` rows of A (a decode step's one
//! token) with no packing at all, B streamed row by row through AVX2 + FMA.

/// Largest `m` the small-product kernel takes. It streams B once, row by row; the packed kernel
/// walks strips of B's columns down its rows, which at one row of A leaves it waiting on memory
/// (with its prefetch) but from 3 rows on is faster. GFLOP/s on this project's AVX-512 machine,
/// small against packed (`sgemm_timing` in `sgemm_tests.rs`): 1x768x2304 12.5 / 6.4,
/// 1x768x50257 7.5 / 2.0, 2x768x2304 20.1 / 23.5, 2x768x50257 9.7 / 3.9, 3x768x2304
/// 22.1 / 34.8, 4x768x768 27.2 / 59.8.
#[cfg(any(target_arch = "x86_64", test))]
const SMALL_M: usize = 2;

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
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU supports the features `sgemm_avx512` is compiled for (checked
                // just above); the function itself is safe code.
                unsafe { sgemm_avx512(a, b, y, m, k, n) };
            } else {
                // SAFETY: as above, for `sgemm_avx2`.
                unsafe { sgemm_avx2(a, b, y, m, k, n) };
            }
            return true;
        }
    }
    let _ = (a, b, y, m, k, n);
    false
}

/// `sgemm_rows` compiled for AVX2 + FMA, so its inner loop becomes 256-bit FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sgemm_avx2(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    sgemm_rows(a, b, y, m, k, n);
}

/// `sgemm_rows` compiled for AVX-512F, so its inner loop becomes 512-bit FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn sgemm_avx512(
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    sgemm_rows(a, b, y, m, k, n);
}

/// Columns of `y` computed at a time: `m` rows of up to 16384 floats (64 KiB each) stay in L2
/// while B streams past once. A run of B's row this long crosses 16 pages, so the hardware
/// prefetcher (which stops at page ends) keeps up; at 1024 columns it restarted every 4 KiB.
#[cfg(any(target_arch = "x86_64", test))]
const CHUNK: usize = 16384;

/// Rows of B read per pass over `y`: each element of `y` is loaded and stored once per
/// `ROWS` fused multiply-adds instead of once per one.
#[cfg(any(target_arch = "x86_64", test))]
const ROWS: usize = 4;

/// `y = a · b`, B read row by row: for each chunk of columns, `y[i, chunk] += a[i, p] ·
/// b[p, chunk]` for p = 0, 1, ..., `ROWS` rows of B a pass. Each element's sum runs over p in
/// order from 0, one fused multiply-add a step (the same operations in the same order at any
/// `ROWS`). B's rows are read front to back in runs of `CHUNK` floats, which the hardware
/// prefetcher follows; walking a narrow tile of columns down B instead jumps a whole row per
/// step, and at one row of A that left the product waiting on memory.
#[cfg(any(target_arch = "x86_64", test))]
#[inline(always)]
pub(crate) fn sgemm_rows(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    for j0 in (0..n).step_by(CHUNK) {
        let w = (n - j0).min(CHUNK);
        for i in 0..m {
            y[i * n + j0..][..w].fill(0.0);
        }
        let brow = |p: usize| &b[p * n + j0..][..w];
        let mut p = 0;
        while p + ROWS <= k {
            let (b0, b1, b2, b3) = (brow(p), brow(p + 1), brow(p + 2), brow(p + 3));
            for i in 0..m {
                let av = &a[i * k + p..][..ROWS];
                let (a0, a1, a2, a3) = (av[0], av[1], av[2], av[3]);
                let yrow = &mut y[i * n + j0..][..w];
                for ((((s, &x0), &x1), &x2), &x3) in yrow.iter_mut().zip(b0).zip(b1).zip(b2).zip(b3)
                {
                    *s = a3.mul_add(x3, a2.mul_add(x2, a1.mul_add(x1, a0.mul_add(x0, *s))));
                }
            }
            p += ROWS;
        }
        for p in p..k {
            let bp = brow(p);
            for i in 0..m {
                let av = a[i * k + p];
                let yrow = &mut y[i * n + j0..][..w];
                for (s, &bv) in yrow.iter_mut().zip(bp) {
                    *s = av.mul_add(bv, *s);
                }
            }
        }
    }
}
