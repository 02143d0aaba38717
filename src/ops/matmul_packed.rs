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

use crate::ops::sgemm::{sgemm_packed_b, PackedB, Strided};
use crate::ops::KernelCtx;

/// What a MatMul node keeps: whether it ran once, and B packed from its second run on (None
/// where the kernel would not use packed panels: see [`PackedB::new`]).
#[derive(Default)]
struct LazyB {
    ran: AtomicBool,
    packed: OnceLock<Option<PackedB>>,
}

/// `y += a · b` for row-major `a` [m, k], `b` [k, n] (MatMul's input 1, the same B for every
/// product of this call) and `y` [m, n], by B packed once; false (nothing done) where B is not
/// an initializer, the caller keeps nothing, this is the node's first run, or B does not pack.
/// `first` marks a call's first product (a batch of them counts as one run).
pub(super) fn product(
    ctx: &KernelCtx,
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    [m, k, n]: [usize; 3],
    first: bool,
) -> bool {
    let Some(lazy) = ctx.prepare(1, LazyB::default) else {
        return false;
    };
    let packed = match lazy.packed.get() {
        Some(p) => p,
        None if first && lazy.ran.swap(true, Ordering::Relaxed) => lazy
            .packed
            .get_or_init(|| PackedB::new(Strided::rows(b, n), k, n)),
        None => return false,
    };
    match packed {
        Some(p) if p.shape() == [k, n] && a.len() >= m * k && y.len() >= m * n => {
            sgemm_packed_b(m, 1.0, Strided::rows(a, k), p, y, n);
            true
        }
        _ => false,
    }
}
