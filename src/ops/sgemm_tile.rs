//! The micro-kernel's side of the packed GEMM (sgemm.rs): one A block times one B panel, strip
//! by strip ([`Tile`]), A packed or read in place, and the dispatch to each ISA's kernel.

use super::*;

/// One A block (packed, or read in place) times one packed B panel.
pub(super) struct Tile {
    pub(super) kc: usize,
    pub(super) mr: usize,
    pub(super) nr: usize,
    pub(super) ldc: usize,
    /// Add the product to C (false: store it, reading nothing of C).
    pub(super) add: bool,
}

/// Fewest A strips in a block for which `Tile::strip` asks for the next B strip ahead.
const L2_HINT_TURNS: usize = 4;

/// Asks for the cache line holding `p` in L2 (a hint: any address, nothing is read).
#[inline(always)]
fn prefetch_l2(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl Tile {
    /// `C[rows, cols] += A block · B panel`, tile by tile; B's strip is the outer loop so it
    /// stays in L1 while the A strips stream from L2.
    ///
    /// # Safety
    /// `c` is valid for reads and writes of rows `i0..i0 + mc` and columns `j0..j0 + nc`
    /// (rows `ldc` apart), and no other thread touches them meanwhile.
    pub(super) unsafe fn block(
        &self,
        isa: Isa,
        ap: AStrips,
        b: &BSource,
        [i0, mc]: [usize; 2],
        [j0, nc]: [usize; 2],
        c: CPtr,
    ) {
        let nr = self.nr;
        for jr in (0..nc).step_by(nr) {
            // SAFETY: the strip's rows and columns lie in the block (the caller's promise).
            unsafe { self.strip(isa, ap, b, [i0, mc], [j0, jr, (nc - jr).min(nr)], c) };
        }
    }

    /// Columns `j0 + jr..` (`nw` of them: one strip of B) of rows `i0..i0 + mc` of C, every A
    /// strip of the block in turn.
    ///
    /// # Safety
    /// `c` is valid for reads and writes of those rows and columns (rows `ldc` apart), and no
    /// other thread touches them meanwhile.
    unsafe fn strip(
        &self,
        isa: Isa,
        ap: AStrips,
        b: &BSource,
        [i0, mc]: [usize; 2],
        [j0, jr, nw]: [usize; 3],
        c: CPtr,
    ) {
        let Tile {
            kc,
            mr,
            nr,
            ldc,
            add,
        } = *self;
        let (bs, ldb) = b.strip(j0, jr, nw, kc, nr);
        // A packed strip's successor follows it in memory. Its first pass would wait on memory
        // (each weight is read once per run, from DRAM at real size), so each A strip's turn
        // asks for its share of the next strip's lines into L2. With few A strips (a few rows
        // of A) the lines would come in bursts, and the micro-kernel's own prefetch already
        // streams B: no hints there.
        let (lines, turns) = ((kc * nr).div_ceil(16), mc.div_ceil(mr));
        let per_turn = lines.div_ceil(turns);
        for ir in (0..mc).step_by(mr) {
            if ldb == nr && turns >= L2_HINT_TURNS {
                let next = bs.as_ptr().wrapping_add(kc * nr);
                for line in (ir / mr * per_turn..lines).take(per_turn) {
                    prefetch_l2(next.wrapping_add(line * 16));
                }
            }
            let mh = (mc - ir).min(mr);
            let (a, rows) = match ap {
                AStrips::Packed(ap) => (AStrip::Packed(&ap[ir / mr * kc * mr..][..kc * mr]), mr),
                AStrips::InPlace(a, lda) => (AStrip::Rows(&a[ir * lda..], lda, mh), mh),
            };
            let at = (i0 + ir) * ldc + j0 + jr;
            if mh == rows && nw == nr {
                // SAFETY: a full tile (of the rows the kernel writes) inside the strip (the
                // caller's promise).
                unsafe { micro(isa, kc, a, (bs, ldb), (c.0.add(at), ldc), add) };
            } else {
                let mut tmp = [0f32; 12 * 32];
                // SAFETY: `tmp` holds an MR x NR tile with rows NR apart.
                unsafe { micro(isa, kc, a, (bs, ldb), (tmp.as_mut_ptr(), nr), false) };
                for r in 0..mh {
                    for (jj, &t) in tmp[r * nr..][..nw].iter().enumerate() {
                        // SAFETY: row ir + r < mc and column jr + jj < jr + nw: in the strip.
                        unsafe {
                            let cv = c.0.add(at + r * ldc + jj);
                            cv.write(if add { cv.read() + t } else { t });
                        }
                    }
                }
            }
        }
    }
}

/// A block's strips as the micro-kernels read them: packed (`MR` rows per strip, `kc` deep), or
/// A itself from the block's first row and panel's first column on, rows `lda` apart.
#[derive(Clone, Copy)]
pub(super) enum AStrips<'a> {
    Packed(&'a [f32]),
    InPlace(&'a [f32], usize),
}

/// One strip of [`AStrips`]: packed, or `rows` rows of A in place (`lda` apart).
enum AStrip<'a> {
    Packed(&'a [f32]),
    Rows(&'a [f32], usize, usize),
}

/// Whether `isa`'s micro-kernel can read row-major A in place ([`AStrips::InPlace`]).
pub(super) fn in_place(isa: Isa) -> bool {
    cfg!(target_arch = "x86_64") && isa == Isa::Avx512
}

/// The in-place micro-kernel of `isa` (see [`in_place`]) on `rows` rows of A.
///
/// # Safety
/// As [`micro`]'s, with A's `rows` rows of `kc` floats `lda` apart.
unsafe fn in_place_kernel(
    isa: Isa,
    rows: usize,
    kc: usize,
    a: (*const f32, usize),
    b: (*const f32, usize),
    c: (*mut f32, usize),
    add: bool,
) {
    match isa {
        // SAFETY: the caller's promise; AVX-512F is `isa`'s (checked where it was chosen).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::k32_direct(rows, kc, a, b, c, add) },
        _ => {
            let _ = (rows, kc, a, b, c, add);
            unreachable!("sgemm: no in-place {isa:?} micro-kernel")
        }
    }
}

/// `c[r·ldc + j] += Σ_p a(r, p) · b[p·ldb + j]` for a full `MR x NR` tile of packed A
/// (`a[p·MR + r]`), or a `rows x NR` tile of A read in place (`a[r·lda + p]`); `=` without
/// `add`: C is then only written.
///
/// # Safety
/// `c` is valid for writes (and reads, with `add`) of that tile, rows `ldc` apart.
unsafe fn micro(
    isa: Isa,
    kc: usize,
    a: AStrip,
    (b, ldb): (&[f32], usize),
    (c, ldc): (*mut f32, usize),
    add: bool,
) {
    let (mr, nr) = tile(isa);
    assert!(kc > 0 && ldb >= nr && b.len() >= (kc - 1) * ldb + nr && ldc >= nr);
    let b = b.as_ptr();
    let a = match a {
        AStrip::Packed(a) => {
            assert!(a.len() >= kc * mr);
            a.as_ptr()
        }
        AStrip::Rows(a, lda, rows) => {
            assert!((1..=mr).contains(&rows) && a.len() >= (rows - 1) * lda + kc);
            // SAFETY: as below; A's `rows` rows of `kc` lie in `a` (just asserted).
            return unsafe {
                in_place_kernel(isa, rows, kc, (a.as_ptr(), lda), (b, ldb), (c, ldc), add)
            };
        }
    };
    // SAFETY (each arm): `sgemm_with` / `PackedA::new` / `PackedB::new_with` checked that this
    // target has the kernel's features, the lengths just asserted are every offset the kernel
    // reads of A and B, and C is the caller's promise.
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::k12x32(kc, a, (b, ldb), (c, ldc), add) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::k6x16(kc, a, (b, ldb), (c, ldc), add) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => unsafe { wasm::kernel(kc, a, (b, ldb), (c, ldc), add) },
        #[allow(unreachable_patterns)]
        _ => unreachable!("sgemm: no {isa:?} micro-kernel on this target"),
    }
}
