//! A packed, cache-blocked float32 GEMM for x86-64 and wasm32 SIMD128: `c += alpha · a · b`.
//!
//! The loop nest is the classic one (Goto/BLIS): B is packed a `KC x NC` panel at a time into
//! column strips `NR` wide, A a `MC x KC` block at a time into row strips `MR` tall, and a
//! register-tiled micro-kernel multiplies one strip of each into an `MR x NR` tile of C. The
//! strips are contiguous per `k`, so the micro-kernel's inner loop is `NR / lanes` vector loads
//! of B, `MR` broadcasts of A and `MR · NR / lanes` fused multiply-adds, with every accumulator in
//! a register: 12 x 32 (24 of the 32 zmm registers) with AVX-512F, 6 x 16 (12 of 16 ymm) with
//! AVX2 + FMA, and a smaller tile for wasm's 128-bit vectors (`sgemm_wasm.rs`). Edges are packed
//! with zeros and computed into a scratch tile. With AVX-512, row-major A at alpha 1 is not
//! packed at all: its kernel reads 1 to 12 rows of A where they lie (`sgemm_tile.rs`).
//!
//! `small_sgemm` is the other kernel here: one or two rows of A (a decode step) with no packing
//! at all, B streamed row by row (AVX-512 / AVX2 + FMA, or SIMD128 in wasm).
//!
//! The packing buffers are per thread and kept between calls, so a steady-state run allocates
//! nothing here. Other targets and CPUs without these features use the caller's
//! fallback (matrixmultiply through ndarray). Products of a column-major (transposed) operand
//! pack by gathering; the micro-kernels see no strides but A's row stride (read in place) and
//! B's (row-major B read in place).

use std::cell::RefCell;
use std::mem::MaybeUninit;

#[path = "sgemm_thin.rs"]
mod thin;
use thin::{dots, DOT_ROWS, NARROW_COLS};
#[path = "sgemm_pack.rs"]
mod packing;
#[path = "sgemm_small.rs"]
mod small;
use packing::pack;
#[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
use packing::{pack_shared, SHARED_A_MAX};
#[cfg(test)]
pub(super) use small::sgemm_rows;
pub use small::{small_sgemm, small_takes};

/// A float32 matrix in a slice: element `(i, j)` at `data[i * rs + j * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T: Copy> Strided<'a, T> {
    /// A row-major `[rows, cols]` matrix.
    pub fn rows(data: &'a [T], cols: usize) -> Self {
        Strided {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// Whether every element of a `rows x cols` matrix lies inside `data`.
    pub fn covers(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        (rows - 1)
            .checked_mul(self.rs)
            .zip((cols - 1).checked_mul(self.cs))
            .and_then(|(a, b)| a.checked_add(b))
            .is_some_and(|last| last < self.data.len())
    }

    /// The same matrix transposed (no copy).
    pub fn t(self) -> Self {
        Strided {
            data: self.data,
            rs: self.cs,
            cs: self.rs,
        }
    }
}

/// The instruction sets with a micro-kernel here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Avx512,
    Avx2,
    /// wasm32 with 128-bit SIMD (the npm package's builds): a multiply and an add per step, or
    /// one `f32x4.relaxed_madd` in the relaxed-SIMD build.
    Simd128,
}

/// The best micro-kernel this CPU runs, if any.
pub fn best_isa() -> Option<Isa> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Some(Isa::Avx512);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Some(Isa::Avx2);
        }
    }
    if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
        return Some(Isa::Simd128);
    }
    None
}

/// Whether this CPU can run `isa`'s micro-kernel.
pub fn supports(isa: Isa) -> bool {
    match (isa, best_isa()) {
        (_, None) => false,
        (Isa::Simd128, Some(best)) => best == Isa::Simd128,
        (Isa::Avx2, Some(best)) => best != Isa::Simd128,
        (Isa::Avx512, Some(best)) => best == Isa::Avx512,
    }
}

/// Depth of a packed panel: a 32-wide strip of B `KC` deep is 32 KiB, about L1.
const KC: usize = 256;
/// Rows of A packed at a time (a multiple of both MRs): 144 x 256 floats, 144 KiB, in L2.
const MC: usize = 144;
/// Columns of B packed at a time: 256 x 3072 floats, 3 MiB, in L3.
const NC: usize = 3072;

/// `c[i * ldc + j] += alpha · Σ_p a(i, p) · b(p, j)` for `a` `[m, k]`, `b` `[k, n]`, by the best
/// micro-kernel of this CPU; false (nothing done) when it has none.
///
/// Panics if an operand does not cover its shape or `c` is too short (callers build them from
/// shapes they checked).
pub fn sgemm(
    mkn: [usize; 3],
    alpha: f32,
    a: Strided<f32>,
    b: Strided<f32>,
    c: &mut [f32],
    ldc: usize,
) -> bool {
    match best_isa() {
        Some(isa) => {
            sgemm_with(isa, mkn, alpha, a, b, c, ldc);
            true
        }
        None => false,
    }
}

/// [`sgemm`] with a chosen micro-kernel (tests run each one the CPU has).
///
/// Panics if this CPU lacks `isa` (see [`supports`]) or the operands do not cover their shapes.
pub fn sgemm_with(
    isa: Isa,
    [m, k, n]: [usize; 3],
    alpha: f32,
    a: Strided<f32>,
    b: Strided<f32>,
    c: &mut [f32],
    ldc: usize,
) {
    assert!(supports(isa), "sgemm: this CPU has no {isa:?}");
    assert!(a.covers(m, k), "sgemm: A out of bounds");
    if m <= DOT_ROWS && a.cs == 1 && b.rs == 1 && k > 0 {
        return dots(isa, [m, k, n], alpha, a, b, c, ldc);
    }
    drive(isa, [m, k, n], ASide::Pack(a, alpha), b, c, ldc);
}

/// An `[m, k]` float32 matrix packed once, in the order [`sgemm_packed`] reads it: for each
/// `KC`-deep panel, each `MC`-row block in strips of the kernel's `MR` rows. For weights that
/// every run multiplies (a Conv's W), so that no run packs them again.
pub struct PackedA {
    isa: Isa,
    m: usize,
    k: usize,
    data: Vec<f32>,
}

impl PackedA {
    /// Packs `a` [m, k] for this CPU's kernel; None when it has none.
    pub fn new(a: Strided<f32>, m: usize, k: usize) -> Option<PackedA> {
        let isa = best_isa()?;
        assert!(a.covers(m, k), "sgemm: A out of bounds");
        let mr = tile(isa).0;
        let mut data = vec![0f32; k * m.div_ceil(mr) * mr];
        let mut at = 0;
        for pc in (0..k).step_by(KC) {
            let kc = (k - pc).min(KC);
            for ic in (0..m).step_by(MC) {
                let mc = (m - ic).min(MC);
                let len = mc.div_ceil(mr) * mr * kc;
                pack(a, ic, mc, pc, kc, mr, 1.0, &mut data[at..at + len]);
                at += len;
            }
        }
        Some(PackedA { isa, m, k, data })
    }

    /// The block of rows `ic..` in the panel of columns `pc..` (as `new` laid them out).
    fn block(&self, pc: usize, ic: usize) -> &[f32] {
        let mr = tile(self.isa).0;
        let kc = (self.k - pc).min(KC);
        // Panels before `pc` hold every row; this panel's blocks before `ic` hold `ic` rows.
        let at = pc * self.m.div_ceil(mr) * mr + ic * kc;
        &self.data[at..at + (self.m - ic).min(MC).div_ceil(mr) * mr * kc]
    }
}

/// `c[i * ldc + j] += Σ_p a(i, p) · b(p, j)` for `a` packed by [`PackedA::new`] and `b`
/// `[a.k, n]`.
pub fn sgemm_packed(a: &PackedA, n: usize, b: Strided<f32>, c: &mut [f32], ldc: usize) {
    drive(a.isa, [a.m, a.k, n], ASide::Packed(a), b, c, ldc);
}

/// A `[k, n]` float32 matrix (a MatMul's constant weight) packed once in the order `drive` packs
/// B on the fly: for each `NC`-column block, each `KC`-deep panel in strips of the kernel's `NR`
/// columns (zeros past `n`). [`sgemm_packed_b`] then reads the same values in the same order as
/// [`sgemm`] would, so the results are the same bit for bit, without a strided walk over B.
pub struct PackedB {
    isa: Isa,
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// Packs `b` [k, n] for this CPU's kernel; None when it has none or packing would not be
    /// used (see [`PackedB::new_with`]).
    pub fn new(b: Strided<f32>, k: usize, n: usize) -> Option<PackedB> {
        PackedB::new_with(best_isa()?, b, k, n)
    }

    /// [`PackedB::new`] for a chosen micro-kernel. None (nothing packed) where `sgemm` would not
    /// run the blocked kernel over B's panels: an empty product, few columns (`narrow`), a B
    /// stored transposed (`dots` may take it), or `b` not covering `[k, n]`.
    pub fn new_with(isa: Isa, b: Strided<f32>, k: usize, n: usize) -> Option<PackedB> {
        if !supports(isa) || k == 0 || n <= NARROW_COLS || b.rs == 1 || !b.covers(k, n) {
            return None;
        }
        let nr = tile(isa).1;
        let mut data = vec![0f32; k.checked_mul(n.checked_next_multiple_of(nr)?)?];
        let mut at = 0;
        for jc in (0..n).step_by(NC) {
            let nc = (n - jc).min(NC);
            for pc in (0..k).step_by(KC) {
                let kc = (k - pc).min(KC);
                let len = nc.div_ceil(nr) * nr * kc;
                pack(b.t(), jc, nc, pc, kc, nr, 1.0, &mut data[at..at + len]);
                at += len;
            }
        }
        Some(PackedB { isa, k, n, data })
    }

    /// The shape `[k, n]` that was packed.
    pub fn shape(&self) -> [usize; 2] {
        [self.k, self.n]
    }

    /// The panel of rows `pc..` in the block of columns `jc..` (as `new` laid them out).
    fn panel(&self, jc: usize, pc: usize) -> &[f32] {
        let nr = tile(self.isa).1;
        let ncp = (self.n - jc).min(NC).div_ceil(nr) * nr;
        // Blocks before `jc` are `NC` wide (a multiple of `nr`) and `k` deep.
        let at = jc * self.k + pc * ncp;
        &self.data[at..at + (self.k - pc).min(KC) * ncp]
    }
}

/// `c[i * ldc + j] += alpha · Σ_p a(i, p) · b(p, j)` (or `=`, for [`COut::Fill`]) for `a`
/// `[m, b.k]` and `b` packed by [`PackedB::new`]: what [`sgemm_with`] computes with `b`'s
/// kernel into a zeroed C, bit for bit.
///
/// Panics if `a` does not cover `[m, k]` or `c` is too short (callers check the shapes).
pub fn sgemm_packed_b(m: usize, alpha: f32, a: Strided<f32>, b: &PackedB, c: COut, ldc: usize) {
    assert!(a.covers(m, b.k), "sgemm: A out of bounds");
    drive_with(
        b.isa,
        [m, b.k, b.n],
        ASide::Pack(a, alpha),
        BSide::Packed(b),
        c,
        ldc,
    );
}

/// C as the driver gets it: a matrix to add the product to, or memory to fill with it (every
/// element of the `[m, n]` block written, none read: a fresh output needs no zeroing first;
/// only where [`FILLS`]).
pub enum COut<'a> {
    Add(&'a mut [f32]),
    Fill(&'a mut [MaybeUninit<f32>]),
}

/// Whether [`COut::Fill`] may be used: not in the one-thread wasm builds, whose gzipped size has
/// a budget (scripts/check_wasm_size.sh); there outputs are zeroed and added into, as before.
pub const FILLS: bool = cfg!(any(not(target_arch = "wasm32"), feature = "wasm-threads"));

/// The micro-kernel's tile: rows of A, columns of B.
fn tile(isa: Isa) -> (usize, usize) {
    match isa {
        Isa::Avx512 => (12, 32),
        Isa::Avx2 => (6, 16),
        Isa::Simd128 => (wasm::MR, wasm::NR),
    }
}

/// A as the driver gets it: to pack on the fly (times alpha), or packed already.
#[derive(Clone, Copy)]
enum ASide<'a> {
    Pack(Strided<'a, f32>, f32),
    Packed(&'a PackedA),
}

/// B as the driver gets it: a matrix to read in place or pack per panel, or packed already.
#[derive(Clone, Copy)]
enum BSide<'a> {
    Strided(Strided<'a, f32>),
    Packed(&'a PackedB),
}

/// The blocked loop nest around the micro-kernel.
fn drive(isa: Isa, [m, k, n]: [usize; 3], a: ASide, b: Strided<f32>, c: &mut [f32], ldc: usize) {
    if n <= NARROW_COLS && m > 0 && k > 0 {
        assert!(b.covers(k, n), "sgemm: B out of bounds");
        return thin::narrow(isa, [m, k, n], a, b, c, ldc);
    }
    drive_with(isa, [m, k, n], a, BSide::Strided(b), COut::Add(c), ldc)
}

fn drive_with(isa: Isa, [m, k, n]: [usize; 3], a: ASide, bside: BSide, c: COut, ldc: usize) {
    let (cp, clen, fill) = match c {
        COut::Add(c) => (CPtr(c.as_mut_ptr()), c.len(), false),
        COut::Fill(c) => {
            if !FILLS {
                unreachable!("sgemm: COut::Fill in a build without it");
            }
            (CPtr(c.as_mut_ptr().cast()), c.len(), true)
        }
    };
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        ldc >= n && (m - 1) * ldc + n <= clen,
        "sgemm: C out of bounds"
    );
    if k == 0 {
        // An empty sum: C as it is, or zeros.
        for i in (0..m).filter(|_| fill) {
            // SAFETY: row i's n elements lie in C (asserted above).
            unsafe { std::ptr::write_bytes(cp.0.add(i * ldc), 0, n) };
        }
        return;
    }
    let b = match bside {
        BSide::Strided(b) => {
            assert!(b.covers(k, n), "sgemm: B out of bounds");
            Ok(b)
        }
        // `PackedB::new_with` packs only B that takes none of the thin paths.
        BSide::Packed(p) => Err(p),
    };
    let (mr, nr) = tile(isa);
    let strips = n.div_ceil(nr);
    let parts = crate::threads::split(strips, (m + 64) * k * n);
    // Row-major A at alpha 1 is read in place where the CPU's kernel can (`in_place`): no
    // packing at all, and rows past the last full strip need no padded copy.
    let a_in_place = match a {
        ASide::Pack(pa, alpha) if in_place(isa) && pa.cs == 1 && alpha == 1.0 => Some(pa),
        _ => None,
    };
    // A to pack, where more than one loop nest would pack it (every thread, every NC block):
    // packed once, by all the threads, into the calling thread's scratch, and read from there.
    // Not in the one-thread wasm builds, whose gzipped size has a budget (scripts/
    // check_wasm_size.sh): there the wide products pack A per block as before (the same bits).
    #[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
    let shared = match a {
        ASide::Pack(pa, alpha)
            if a_in_place.is_none()
                && (parts.is_some() || n > NC)
                && k * m.div_ceil(mr) * mr <= SHARED_A_MAX =>
        {
            let mut data = SCRATCH.with(|s| std::mem::take(&mut s.borrow_mut().ap));
            grow(&mut data, k * m.div_ceil(mr) * mr);
            pack_shared(isa, pa, [m, k], alpha, &mut data, parts);
            Some(PackedA { isa, m, k, data })
        }
        _ => None,
    };
    #[cfg(not(any(not(target_arch = "wasm32"), feature = "wasm-threads")))]
    let shared: Option<PackedA> = None;
    let a = shared.as_ref().map_or(a, ASide::Packed);
    // The whole loop nest for C's columns in strips `part` (`nr` wide, the last one ragged):
    // packing A (each thread its own copy), reading or packing B, the micro-kernels.
    let run = |part: std::ops::Range<usize>| {
        let (lo, hi) = (part.start * nr, (part.end * nr).min(n));
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let Scratch { ap, bp } = &mut *s;
            if b.is_ok() {
                grow(bp, KC.min(k) * (hi - lo).min(NC).div_ceil(nr) * nr);
            }
            if let (ASide::Pack(..), None) = (a, a_in_place) {
                grow(ap, KC.min(k) * m.min(MC).div_ceil(mr) * mr);
            }
            for jc in (0..n).step_by(NC) {
                // This part's columns of the block: `j0` is a strip boundary, so a packed
                // panel's strips for it start `(j0 - jc) · kc` floats in.
                let (j0, j1) = (jc.max(lo), (jc + NC).min(hi));
                if j0 >= j1 {
                    continue;
                }
                let nc = j1 - j0;
                for pc in (0..k).step_by(KC) {
                    let kc = (k - pc).min(KC);
                    // A row-major B is read in place, strip by strip (only a ragged last strip
                    // is copied, zero-padded); any other B is packed, unless it was packed
                    // already.
                    let bsrc = match b {
                        Ok(b) if b.cs == 1 => {
                            let tail = nc / nr * nr;
                            if tail < nc {
                                pack(b.t(), j0 + tail, nc - tail, pc, kc, nr, 1.0, bp);
                            }
                            BSource {
                                direct: Some((b, pc)),
                                packed: &bp[..],
                            }
                        }
                        Ok(b) => {
                            pack(b.t(), j0, nc, pc, kc, nr, 1.0, bp);
                            BSource {
                                direct: None,
                                packed: &bp[..],
                            }
                        }
                        Err(p) => BSource {
                            direct: None,
                            packed: &p.panel(jc, pc)[(j0 - jc) * kc..],
                        },
                    };
                    for ic in (0..m).step_by(MC) {
                        let mc = (m - ic).min(MC);
                        let ablock = match (a, a_in_place) {
                            (_, Some(a)) => AStrips::InPlace(&a.data[ic * a.rs + pc..], a.rs),
                            (ASide::Pack(a, alpha), None) => {
                                pack(a, ic, mc, pc, kc, mr, alpha, ap);
                                AStrips::Packed(&ap[..])
                            }
                            (ASide::Packed(p), None) => AStrips::Packed(p.block(pc, ic)),
                        };
                        // The first panel fills C where it is memory to fill.
                        let add = !(fill && pc == 0);
                        let tile = Tile {
                            kc,
                            mr,
                            nr,
                            ldc,
                            add,
                        };
                        // SAFETY: rows `ic..ic + mc` and columns `j0..j1` lie in C (asserted
                        // above), and no other part writes these columns.
                        unsafe { tile.block(isa, ablock, &bsrc, [ic, mc], [j0, nc], cp) };
                    }
                }
            }
        });
    };
    // Inside a pool of several threads (`threads::with_threads`) the columns split between
    // them, each thread running the whole loop nest for its own: no join per panel, and every
    // element's sum keeps its order. Work in multiply-adds, plus each element of B at 64: at
    // few rows the product is bound by streaming B from memory (GPT-2 small at 1x8 gains from
    // 2 threads), while a tiny model's B sits in L2 and its products are too small to hand out.
    match parts {
        Some(parts) => crate::threads::for_each_part(strips, parts, run),
        None => run(0..strips),
    }
    if let Some(p) = shared {
        SCRATCH.with(|s| s.borrow_mut().ap = p.data);
    }
}

/// Where a strip of B comes from: read in place from row-major B from row `pc` on (the
/// ragged last strip, if any, packed at the start of `packed`), or packed strips.
struct BSource<'a> {
    direct: Option<(Strided<'a, f32>, usize)>,
    packed: &'a [f32],
}

impl<'a> BSource<'a> {
    /// Strip `jr` (columns `j0 + jr..`, `nw` of them) of a panel `kc` deep: the slice the
    /// micro-kernel reads and the distance between its rows.
    fn strip(&self, j0: usize, jr: usize, nw: usize, kc: usize, nr: usize) -> (&'a [f32], usize) {
        match self.direct {
            Some((b, pc)) if nw == nr => {
                let at = pc * b.rs + j0 + jr;
                (&b.data[at..at + (kc - 1) * b.rs + nr], b.rs)
            }
            Some(_) => (&self.packed[..kc * nr], nr),
            None => (&self.packed[jr / nr * kc * nr..][..kc * nr], nr),
        }
    }
}

#[derive(Default)]
struct Scratch {
    ap: Vec<f32>,
    bp: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn grow(v: &mut Vec<f32>, len: usize) {
    if v.len() < len {
        v.resize(len, 0.0);
    }
}

/// C's base pointer, shared by the threads that write disjoint columns of it (a `&mut [f32]`
/// per thread would alias: C's rows interleave every thread's columns).
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
impl CPtr {
    /// The element `i` floats in (a method, so that closures capture the `Sync` wrapper).
    #[cfg(any(not(target_arch = "wasm32"), feature = "wasm-threads"))]
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

// SAFETY: CPtr is only dereferenced by `Tile::strip`, whose callers give each thread its own
// columns of C, and by `pack_shared`, whose threads each write their own strips of packed A.
unsafe impl Send for CPtr {}
// SAFETY: as above.
unsafe impl Sync for CPtr {}

#[path = "sgemm_tile.rs"]
mod tiles;
use tiles::{in_place, AStrips, Tile};
#[path = "sgemm_wasm.rs"]
mod wasm;
#[cfg(target_arch = "x86_64")]
#[path = "sgemm_x86.rs"]
mod x86;

#[cfg(test)]
#[path = "sgemm_tests.rs"]
mod tests;
