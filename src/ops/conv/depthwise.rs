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
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just above), the feature `channels_avx512` is
        // compiled for; the function itself is safe code.
        unsafe { channels_avx512(p, w, y, b, [ksz, osz]) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above), the feature `channels_avx` is compiled
        // for; the function itself is safe code.
        unsafe { channels_avx(p, w, y, b, [ksz, osz]) };
        return;
    }
    channels(p, w, y, b, [ksz, osz]);
}

/// The output channels from the loaded copy `p` (closures written here, in each function, so
/// that they take its target features).
macro_rules! channels {
    ($p:ident, $w:ident, $y:ident, $b:ident, $ksz:ident, $osz:ident) => {
        for (j, (wj, yj)) in $w
            .chunks_exact($ksz)
            .zip($y.chunks_exact_mut($osz))
            .enumerate()
        {
            let bias = $b.and_then(|b| b.get(j)).copied().unwrap_or(T::ZERO);
            $p.run(yj, bias, |t, acc, row| {
                row.fold(acc, &wj[t..], |o, v, w| o.wadd(w.wmul(v)))
            });
        }
    };
}

fn channels<T: Num>(
    p: &mut Padded<T>,
    w: &[T],
    y: &mut [T],
    b: Option<&[T]>,
    [ksz, osz]: [usize; 2],
) {
    channels!(p, w, y, b, ksz, osz);
}

/// `channels` compiled for AVX's 256-bit vectors (no FMA: products and sums round as in the
/// plain build, so both give the same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn channels_avx<T: Num>(
    p: &mut Padded<T>,
    w: &[T],
    y: &mut [T],
    b: Option<&[T]>,
    [ksz, osz]: [usize; 2],
) {
    channels!(p, w, y, b, ksz, osz);
}

/// `channels` compiled for AVX-512's 512-bit vectors (no FMA either).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn channels_avx512<T: Num>(
    p: &mut Padded<T>,
    w: &[T],
    y: &mut [T],
    b: Option<&[T]>,
    [ksz, osz]: [usize; 2],
) {
    channels!(p, w, y, b, ksz, osz);
}

#[cfg(test)]
#[path = "depthwise_tests.rs"]
mod tests;
