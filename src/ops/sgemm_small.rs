//! The small-product kernel: `y = a · b` for up to `SMALL_M` rows of A (a decode step's one
//! token) with no packing at all, B streamed row by row through AVX-512 or AVX2 + FMA, or (in
//! the wasm build) SIMD128.

#[cfg(not(target_arch = "wasm32"))]
use super::thin::madd;

/// Largest `m` the small-product kernel takes. It streams B once, row by row; the packed kernel
/// walks strips of B's columns down its rows, which at one row of A leaves it waiting on memory
/// (with its prefetch) but from 3 rows on is faster. GFLOP/s on this project's AVX-512 machine,
/// small against packed (`sgemm_timing` in `sgemm_tests.rs`, 2026-12-06): 1x768x2304 16.6 /
/// 7.6, 1x768x50257 13.9 / 3.1, 2x768x2304 27.1 / 26.1, 3x768x2304 35.8 / 38.9.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
const SMALL_M: usize = 2;

/// Columns per unit of work when threads split the product (`--threads`): whole cache lines,
/// so no two threads write one.
#[cfg(target_arch = "x86_64")]
const UNIT_COLS: usize = 64;

/// The columns of B and y one call computes: B's rows are `n` long, the call takes columns
/// `j0..j0 + w` of them into `y`, whose rows are `ldy` apart.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub n: usize,
    pub j0: usize,
    pub w: usize,
    pub ldy: usize,
}

#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
impl Window {
    /// All `n` columns into a row-major `[m, n]` y.
    pub(crate) fn all(n: usize) -> Window {
        Window {
            n,
            j0: 0,
            w: n,
            ldy: n,
        }
    }
}

/// A compiled [`sgemm_window`]: `(a, b, y, m, k, window)`.
#[cfg(target_arch = "x86_64")]
type WindowFn = unsafe fn(&[f32], &[f32], &mut [f32], usize, usize, Window);

/// Whether [`small_sgemm`] computes products of `m` rows on this machine.
pub fn small_takes(m: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        m <= SMALL_M && has!("avx2") && has!("fma")
    }
    #[cfg(target_arch = "wasm32")]
    {
        m <= SMALL_M
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    {
        let _ = m;
        false
    }
}

/// `y = a · b` in float32 for few rows (a decode step's one token), on x86-64 with AVX2 and
/// FMA, and on wasm32: no packing at all, which at up to `SMALL_M` rows costs more than the
/// product. Elsewhere (and for larger `m`) it returns false. Inside a pool of several threads the columns split
/// between them, each streaming its part of every row of B; every element's sum keeps its
/// order, so the result is the same bit for bit.
pub fn small_sgemm(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if small_takes(m) {
            // Both are safe code compiled for their features, which the CPU has (checked here).
            let kernel: WindowFn = if has!("avx512f") {
                window_avx512
            } else {
                window_avx2
            };
            let units = n.div_ceil(UNIT_COLS);
            let Some(parts) = crate::threads::split(units, (m + 64) * k * n) else {
                // SAFETY: see `kernel`.
                unsafe { kernel(a, b, y, m, k, Window::all(n)) };
                return true;
            };
            // Each part computes its columns into its own [m, w] block of `parts_y` (blocks
            // in part order, each `m · UNIT_COLS` floats per unit), copied into y after.
            let block = m * UNIT_COLS;
            let cols = |units: &std::ops::Range<usize>| {
                let j0 = units.start * UNIT_COLS;
                (j0, (units.end * UNIT_COLS).min(n) - j0)
            };
            let mut parts_y = vec![0f32; units * block];
            let done = crate::threads::for_each_rows(&mut parts_y, block, parts, |r, piece| {
                let (j0, w) = cols(&r);
                let win = Window { n, j0, w, ldy: w };
                // SAFETY: see `kernel`.
                unsafe { kernel(a, b, piece, m, k, win) };
                Ok(())
            });
            debug_assert!(done.is_ok(), "the parts never fail");
            for p in 0..parts {
                let r = crate::threads::part(p, units, parts);
                let (j0, w) = cols(&r);
                let src = &parts_y[r.start * block..];
                for i in 0..m {
                    y[i * n + j0..][..w].copy_from_slice(&src[i * w..][..w]);
                }
            }
            return true;
        }
    }
    #[cfg(target_arch = "wasm32")]
    if small_takes(m) {
        // One thread; the window's column loops are SIMD128 (`wasm::axpy4` / `axpy1`).
        sgemm_window(a, b, y, m, k, Window::all(n));
        return true;
    }
    let _ = (a, b, y, m, k, n);
    false
}

/// `sgemm_window` compiled for AVX2 + FMA, so its inner loop becomes 256-bit FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn window_avx2(
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    m: usize,
    k: usize,
    w: Window,
) {
    sgemm_window(a, b, y, m, k, w);
}

/// `sgemm_window` compiled for AVX-512F, so its inner loop becomes 512-bit FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn window_avx512(
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    m: usize,
    k: usize,
    w: Window,
) {
    sgemm_window(a, b, y, m, k, w);
}

/// Columns of `y` computed at a time: `m` rows of up to 16384 floats (64 KiB each) stay in L2
/// while B streams past once. A run of B's row this long crosses 16 pages, so the hardware
/// prefetcher (which stops at page ends) keeps up; at 1024 columns it restarted every 4 KiB.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
const CHUNK: usize = 16384;

/// Rows of B read per pass over `y`: each element of `y` is loaded and stored once per
/// `ROWS` fused multiply-adds instead of once per one.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
const ROWS: usize = 4;

/// `y = a · b` for row-major `a` [m, k], `b` [k, n] and `y` [m, n]: [`sgemm_window`] over all
/// columns.
#[cfg(test)]
pub(crate) fn sgemm_rows(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, n: usize) {
    sgemm_window(a, b, y, m, k, Window::all(n));
}

/// Columns `j0..j0 + w` of `a · b` into `y` (rows `ldy` apart), B read row by row: for each
/// chunk of columns, `y[i, chunk] += a[i, p] · b[p, chunk]` for p = 0, 1, ..., `ROWS` rows of B
/// a pass. Each element's sum runs over p in order from 0, one fused multiply-add a step (the
/// same operations in the same order at any `ROWS` or window). B's rows are read front to back
/// in runs of up to `CHUNK` floats, which the hardware prefetcher follows; walking a narrow tile
/// of columns down B instead jumps a whole row per step, and at one row of A that left the
/// product waiting on memory.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32", test))]
#[inline(always)]
fn sgemm_window(a: &[f32], b: &[f32], y: &mut [f32], m: usize, k: usize, win: Window) {
    let Window { n, j0, w, ldy } = win;
    for c0 in (0..w).step_by(CHUNK) {
        let cw = (w - c0).min(CHUNK);
        for i in 0..m {
            y[i * ldy + c0..][..cw].fill(0.0);
        }
        let brow = |p: usize| &b[p * n + j0 + c0..][..cw];
        let mut p = 0;
        while p + ROWS <= k {
            let (b0, b1, b2, b3) = (brow(p), brow(p + 1), brow(p + 2), brow(p + 3));
            for i in 0..m {
                let av = &a[i * k + p..][..ROWS];
                let (a0, a1, a2, a3) = (av[0], av[1], av[2], av[3]);
                let yrow = &mut y[i * ldy + c0..][..cw];
                #[cfg(target_arch = "wasm32")]
                super::wasm::axpy4(yrow, [b0, b1, b2, b3], [a0, a1, a2, a3]);
                #[cfg(not(target_arch = "wasm32"))]
                for ((((s, &x0), &x1), &x2), &x3) in yrow.iter_mut().zip(b0).zip(b1).zip(b2).zip(b3)
                {
                    *s = madd(a3, x3, madd(a2, x2, madd(a1, x1, madd(a0, x0, *s))));
                }
            }
            p += ROWS;
        }
        for p in p..k {
            let bp = brow(p);
            for i in 0..m {
                let av = a[i * k + p];
                let yrow = &mut y[i * ldy + c0..][..cw];
                #[cfg(target_arch = "wasm32")]
                super::wasm::axpy1(yrow, bp, av);
                #[cfg(not(target_arch = "wasm32"))]
                for (s, &bv) in yrow.iter_mut().zip(bp) {
                    *s = madd(av, bv, *s);
                }
            }
        }
    }
}
