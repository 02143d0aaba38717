//! The x86-64 micro-kernels of the packed GEMM (sgemm.rs): one register-tiled `MR x NR` tile
//! of C per call, AVX-512F and AVX2 + FMA.

use std::arch::x86_64::*;

/// Rows of B ahead that the micro-kernels ask the cache for: at few rows of A each strip of
/// B is read once, straight from memory, and the hardware prefetcher alone leaves the
/// kernel waiting. GPT-2 small at 1x8 (fused graph, `benches/compare_builds.py --real`):
/// 79 ms without, 58 ms at 8 rows ahead, 49-51 ms at 16.
const PREFETCH_ROWS: usize = 16;

/// Stores a kernel's rows of two zmm accumulators into C's rows `ldc` apart, or adds them to C
/// with `add` (a macro: the accumulators stay in registers, where a function's reference to
/// them made the compiler spill them).
macro_rules! store_rows {
    ($acc:expr, $c:expr, $ldc:expr, $add:expr) => {
        for (r, acc_r) in $acc.iter().enumerate() {
            let cr = $c.add(r * $ldc);
            let cr2 = cr.add(16);
            if $add {
                _mm512_storeu_ps(cr, _mm512_add_ps(_mm512_loadu_ps(cr), acc_r[0]));
                _mm512_storeu_ps(cr2, _mm512_add_ps(_mm512_loadu_ps(cr2), acc_r[1]));
            } else {
                _mm512_storeu_ps(cr, acc_r[0]);
                _mm512_storeu_ps(cr2, acc_r[1]);
            }
        }
    };
}

/// 12 x 32 tile: 24 zmm accumulators, two loads of B and 12 broadcasts of A per step.
///
/// # Safety
/// The CPU has AVX-512F; `a` holds `kc · 12` floats, `b` `kc` rows of 32 `ldb` apart, and
/// `c` a 12 x 32 tile with rows `ldc` apart (read only with `add`; without it the tile is stored).
#[target_feature(enable = "avx512f")]
pub unsafe fn k12x32(
    kc: usize,
    a: *const f32,
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    add: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; 12];
    for p in 0..kc {
        let b0 = _mm512_loadu_ps(b.add(p * ldb));
        let b1 = _mm512_loadu_ps(b.add(p * ldb + 16));
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb + 16) as *const i8);
        let ap = a.add(p * 12);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(r));
            acc_r[0] = _mm512_fmadd_ps(av, b0, acc_r[0]);
            acc_r[1] = _mm512_fmadd_ps(av, b1, acc_r[1]);
        }
    }
    store_rows!(acc, c, ldc, add);
}

/// 6 x 16 tile: 12 ymm accumulators, two loads of B and 6 broadcasts of A per step.
///
/// # Safety
/// The CPU has AVX2 and FMA; `a` holds `kc · 6` floats, `b` `kc` rows of 16 `ldb` apart,
/// and `c` a 6 x 16 tile with rows `ldc` apart (read only with `add`).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn k6x16(
    kc: usize,
    a: *const f32,
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    add: bool,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; 6];
    for p in 0..kc {
        let b0 = _mm256_loadu_ps(b.add(p * ldb));
        let b1 = _mm256_loadu_ps(b.add(p * ldb + 8));
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb + 8) as *const i8);
        let ap = a.add(p * 6);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = _mm256_set1_ps(*ap.add(r));
            acc_r[0] = _mm256_fmadd_ps(av, b0, acc_r[0]);
            acc_r[1] = _mm256_fmadd_ps(av, b1, acc_r[1]);
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let cr = c.add(r * ldc);
        let cr2 = cr.add(8);
        if add {
            _mm256_storeu_ps(cr, _mm256_add_ps(_mm256_loadu_ps(cr), acc_r[0]));
            _mm256_storeu_ps(cr2, _mm256_add_ps(_mm256_loadu_ps(cr2), acc_r[1]));
        } else {
            _mm256_storeu_ps(cr, acc_r[0]);
            _mm256_storeu_ps(cr2, acc_r[1]);
        }
    }
}

/// `rows` (1 to 12) x 32 tile with A read in place: row `r`'s `kc` values at `a + r·lda`
/// (unpacked, row-major), otherwise as [`k12x32`].
///
/// # Safety
/// The CPU has AVX-512F; `a + r·lda` holds `kc` floats for each `r < rows`, `b` `kc` rows of
/// 32 `ldb` apart, and `c` a `rows` x 32 tile with rows `ldc` apart (read only with `add`).
pub unsafe fn k32_direct(
    rows: usize,
    kc: usize,
    (a, lda): (*const f32, usize),
    b: (*const f32, usize),
    c: (*mut f32, usize),
    add: bool,
) {
    macro_rules! go {
        ($($r:literal)*) => {
            match rows {
                $($r => k32_rows::<$r>(kc, (a, lda), b, c, add),)*
                _ => unreachable!("k32_direct: {rows} rows"),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[target_feature(enable = "avx512f")]
unsafe fn k32_rows<const R: usize>(
    kc: usize,
    (a, lda): (*const f32, usize),
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    add: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for p in 0..kc {
        let b0 = _mm512_loadu_ps(b.add(p * ldb));
        let b1 = _mm512_loadu_ps(b.add(p * ldb + 16));
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + PREFETCH_ROWS) * ldb + 16) as *const i8);
        let ap = a.add(p);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(r * lda));
            acc_r[0] = _mm512_fmadd_ps(av, b0, acc_r[0]);
            acc_r[1] = _mm512_fmadd_ps(av, b1, acc_r[1]);
        }
    }
    store_rows!(acc, c, ldc, add);
}
