//! Depthwise Conv: groups of one input channel, each of the group's output channels that
//! channel's windows weighted by its own kernel.

use super::super::common::Num;
use super::super::window::{tap_major, Axis, Padded};

/// One group's output channels `y` [mg, out...] from its input channel `x` [in...], kernels `w`
/// [mg, k...] and biases `b` [mg]; `y` arrives holding the bias (zero without one). Through the
/// padded copy `pad` when the caller could make one (each tap one contiguous run for a whole z
/// slice, the bias the accumulator's start, `y` overwritten), else tap by tap along output rows
/// into `y`.
pub(super) fn group<T: Num>(
    x: &[T],
    w: &[T],
    y: &mut [T],
    b: Option<&[T]>,
    a: &[Axis; 3],
    pad: &mut Option<Padded<T>>,
) {
    let osz: usize = a.iter().map(|a| a.out).product();
    let ksz: usize = a.iter().map(|a| a.k).product();
    if osz == 0 || ksz == 0 {
        return;
    }
    let Some(p) = pad.as_mut() else {
        for (wj, yj) in w.chunks_exact(ksz).zip(y.chunks_exact_mut(osz)) {
            tap_major(x, yj, a, |v, xv, t| v.wadd(wj[t].wmul(xv)));
        }
        return;
    };
    p.load(x);
    super::super::simd::widest(
        #[cfg_attr(target_arch = "x86_64", inline(always))]
        || channels(p, w, y, b, [ksz, osz]),
    );
}

/// The output channels from the loaded copy `p`: per channel the padded copy's runs times its
/// taps, from the bias. Inlined into the caller's vector build (`simd`), with its closures
/// (marked so: a closure left out of line would keep the baseline features); no FMA, so every
/// build sums and rounds as the portable one does (tested).
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn channels<T: Num>(
    p: &mut Padded<T>,
    w: &[T],
    y: &mut [T],
    b: Option<&[T]>,
    [ksz, osz]: [usize; 2],
) {
    for (j, (wj, yj)) in w.chunks_exact(ksz).zip(y.chunks_exact_mut(osz)).enumerate() {
        let bias = b.and_then(|b| b.get(j)).copied().unwrap_or(T::ZERO);
        p.run(
            yj,
            bias,
            #[cfg_attr(target_arch = "x86_64", inline(always))]
            |t, acc, row| {
                row.fold(
                    acc,
                    &wj[t..],
                    #[cfg_attr(target_arch = "x86_64", inline(always))]
                    |o, v, w| o.wadd(w.wmul(v)),
                )
            },
        );
    }
}

#[cfg(test)]
#[path = "depthwise_tests.rs"]
mod tests;
