//! Packing for the packed GEMM (sgemm.rs): the strips the micro-kernel reads, from A or B, and
//! A packed once for every thread and column block of a product.

use super::Strided;
#[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
use super::{tile, CPtr, Isa, KC};

/// Most floats of A that [`super::drive_with`] packs once for all its loop nests (32 MiB).
#[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
pub(super) const SHARED_A_MAX: usize = 1 << 23;

/// Packs `a` `[m, k]` times `alpha` into `out` in [`super::PackedA`]'s layout, its `MR`-row
/// strips split over `parts` threads (each strip is written by one thread only).
#[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
pub(super) fn pack_shared(
    isa: Isa,
    a: Strided<f32>,
    [m, k]: [usize; 2],
    alpha: f32,
    out: &mut [f32],
    parts: Option<usize>,
) {
    let mr = tile(isa).0;
    let per_panel = m.div_ceil(mr);
    let mp = per_panel * mr;
    assert!(out.len() >= k * mp);
    let base = CPtr(out.as_mut_ptr());
    // Strip `s` of panel `pc` (all of its blocks' strips in a row) starts `pc · mp + s · mr · kc`
    // floats in, as `PackedA::block` reads it.
    let units = k.div_ceil(KC) * per_panel;
    let run = |range: std::ops::Range<usize>| {
        for u in range {
            let (pc, s) = (u / per_panel * KC, u % per_panel);
            let kc = (k - pc).min(KC);
            let at = pc * mp + s * mr * kc;
            // SAFETY: `at..at + mr · kc` lies in `out` (asserted: the last strip of the last
            // panel ends at k · mp) and is this unit's alone.
            let strip = unsafe { std::slice::from_raw_parts_mut(base.at(at), mr * kc) };
            pack(a, s * mr, (m - s * mr).min(mr), pc, kc, mr, alpha, strip);
        }
    };
    match parts {
        Some(parts) => crate::threads::for_each_part(units, parts.min(units), run),
        None => run(0..units),
    }
}

/// Packs rows `r0..r0 + rows` and columns `p0..p0 + kc` of `x` into strips of `w` rows: strip
/// `s` holds, for each column `p`, the `w` values of rows `s·w..s·w + w` (zeros past the end),
/// times `scale`. A uses it directly; B packs as its transpose (strips of `w` columns).
#[allow(clippy::too_many_arguments)]
pub(super) fn pack(
    x: Strided<f32>,
    r0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    w: usize,
    scale: f32,
    out: &mut [f32],
) {
    for (s, strip) in out[..rows.div_ceil(w) * w * kc]
        .chunks_exact_mut(w * kc)
        .enumerate()
    {
        let live = (rows - s * w).min(w);
        if live < w {
            strip.fill(0.0);
        }
        let first = r0 + s * w;
        if x.rs == 1 {
            // The strip's `w` values at each `p` are contiguous in `x` (B row-major).
            for (p, dst) in strip.chunks_exact_mut(w).enumerate() {
                let src = &x.data[first + (p0 + p) * x.cs..][..live];
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = v * scale;
                }
            }
        } else {
            for r in 0..live {
                let base = (first + r) * x.rs + p0 * x.cs;
                if x.cs == 1 {
                    let src = &x.data[base..base + kc];
                    for (p, &v) in src.iter().enumerate() {
                        strip[p * w + r] = v * scale;
                    }
                } else {
                    for p in 0..kc {
                        strip[p * w + r] = x.data[base + p * x.cs] * scale;
                    }
                }
            }
        }
    }
}
