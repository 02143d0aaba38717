//! MatMul's constant B (a weight initializer) packed once per executor for the blocked kernel,
//! so that the runs after the first read it as contiguous strips instead of walking B's rows
//! a row length apart (and copying the ragged last strip) on every call.
//!
//! Packing waits for the second run: a row-major B is read in place, so packing is a copy that
//! the per-call path never makes, and a one-shot run (the optimizer's parity check) would pay
//! its time and the second copy of the weights for nothing. From the second run on the packed
//! copy lives as long as the executor, doubling those weights' memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::ops::sgemm::{sgemm_packed_b, COut, PackedB, Strided, FILLS};
use crate::ops::KernelCtx;

/// What a MatMul node keeps: whether it ran once, and B packed from its second run on (None
/// where the kernel would not use packed panels: see [`PackedB::new`]).
#[derive(Default)]
struct LazyB {
    ran: AtomicBool,
    packed: OnceLock<Option<PackedB>>,
}

/// MatMul's whole output, `count` products `[m, n]` in a row: product `i` is `a`'s row-major
/// `[m, k]` block at `a_at(i)` times `b` [k, n] (input 1, the same B for every product), by B
/// packed once, written straight into fresh memory (nothing zeroed first; in the one-thread
/// wasm builds, whose gzipped size has a budget, added into zeros: see `sgemm::FILLS`). None
/// (nothing done) where B is not an initializer, the caller keeps nothing, this is the node's
/// first run, B does not pack, or an operand is short.
pub(super) fn products(
    ctx: &KernelCtx,
    a: &[f32],
    b: &[f32],
    (count, a_at): (usize, &dyn Fn(usize) -> usize),
    [m, k, n]: [usize; 3],
) -> Option<Vec<f32>> {
    let lazy = ctx.prepare(1, LazyB::default)?;
    let packed = match lazy.packed.get() {
        Some(p) => p,
        None if lazy.ran.swap(true, Ordering::Relaxed) => lazy
            .packed
            .get_or_init(|| PackedB::new(Strided::rows(b, n), k, n)),
        None => return None,
    };
    let p = packed.as_ref().filter(|p| p.shape() == [k, n])?;
    let len = count.checked_mul(m.checked_mul(n)?)?;
    if len == 0 || (0..count).any(|i| a_at(i) + m * k > a.len()) {
        return None;
    }
    let block_a = |i| Strided::rows(&a[a_at(i)..][..m * k], k);
    if !FILLS {
        let mut y = vec![0f32; len];
        for (i, block) in y.chunks_mut(m * n).enumerate() {
            sgemm_packed_b(m, 1.0, block_a(i), p, COut::Add(block), n);
        }
        return Some(y);
    }
    let mut y = Vec::with_capacity(len);
    for (i, block) in y.spare_capacity_mut().chunks_mut(m * n).enumerate() {
        sgemm_packed_b(m, 1.0, block_a(i), p, COut::Fill(block), n);
    }
    // SAFETY: the `len` elements are the products' blocks, and `COut::Fill` writes every
    // element of its block.
    unsafe { y.set_len(len) };
    Some(y)
}
