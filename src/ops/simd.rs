//! Loops compiled for the widest vectors this CPU has, chosen at run time: the one owner of that
//! policy for the reference kernels' slice loops (the GEMM's intrinsics micro-kernels choose
//! their own, in sgemm.rs).
//!
//! On x86-64 the native build targets baseline x86-64 (SSE2), so LLVM vectorizes a plain loop
//! 4 floats wide. [`widest`] runs a closure inside a function compiled for AVX-512F or AVX2
//! when the CPU has it; marked `#[inline(always)]`, the closure (and the `#[inline(always)]`
//! loops it calls) is compiled into that function with its features. The features bring no
//! FMA contraction (Rust never fuses a product and a sum by itself), so every tier gives the
//! plain loop's bits. Elsewhere (wasm32 builds with simd128 at compile time) the closure just
//! runs.
//!
//! The wasm build is optimized for size (`opt-level = "z"`), where LLVM vectorizes no loop. The
//! hot element-wise math (fastmath's exp, tanh and erf forms) is therefore written once over
//! `fastmath::Lane`, and [`map_biased`] and the row routines below run it on [`V4`] (four lanes
//! in a SIMD128 vector) there, on `f32` elsewhere.
//!
//! ```ignore
//! simd::widest(#[cfg_attr(target_arch = "x86_64", inline(always))] || body(x, y))
//! ```
//! The attribute is x86-64's only: in the size-optimized wasm build, forcing every such closure
//! (and the closures they pass on) inline cost 11 KB (2,506,819 against 2,495,856 bytes after
//! wasm-opt), for loops that are the same there either way.

use super::fastmath::Lane;

/// The instruction sets [`at`] compiles a closure for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    /// The build's own target (SSE2 on x86-64, simd128 on wasm32).
    #[cfg_attr(not(test), allow(dead_code))]
    Plain,
    /// AVX2: 8 floats a vector.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// AVX-512F: 16 floats a vector.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Tier {
    /// Whether this CPU runs code compiled for the tier.
    pub(crate) fn available(self) -> bool {
        match self {
            Tier::Plain => true,
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// `f()` compiled for the widest tier this CPU has.
#[inline(always)]
pub(crate) fn widest<R>(f: impl FnOnce() -> R) -> R {
    for t in [Tier::Avx512, Tier::Avx2] {
        if t.available() {
            return at(t, f);
        }
    }
    f()
}

/// `f()` compiled for tier `t`, or as it is when this CPU lacks `t` (tests compare the tiers).
#[inline(always)]
pub(crate) fn at<R>(t: Tier, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn wide<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2")]
        fn mid<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if t.available() {
            match t {
                // SAFETY: the CPU has AVX-512F (`available` checked it); `wide` is safe code.
                Tier::Avx512 => return unsafe { wide(f) },
                // SAFETY: the CPU has AVX2 (`available` checked it); `mid` is safe code.
                Tier::Avx2 => return unsafe { mid(f) },
                Tier::Plain => {}
            }
        }
    }
    let _ = t;
    f()
}

/// An element-wise float32 function written once over [`Lane`] (fastmath's forms), so that a
/// slice loop can run it four lanes at a time where the build does not vectorize loops itself.
pub(crate) trait LaneFn: Sync {
    fn at<L: Lane>(&self, x: L) -> L;
}

/// `ys[i] = f(xs[i] + bias[i % bias.len()])` (without a bias, `f(xs[i])`), `ys` and `xs` of one
/// length, a whole number of bias rows. In the wasm build (SIMD128) four lanes at a time through
/// [`V4`]: that build is optimized for size, where LLVM vectorizes no loop. Elsewhere a plain
/// loop, inlined into the caller (call it inside [`widest`]).
#[inline(always)]
pub(crate) fn map_biased<F: LaneFn>(ys: &mut [f32], xs: &[f32], bias: Option<&[f32]>, f: &F) {
    match bias {
        None => map_row(ys, xs, None, f),
        Some(b) => {
            for (yr, xr) in ys.chunks_exact_mut(b.len()).zip(xs.chunks_exact(b.len())) {
                map_row(yr, xr, Some(b), f);
            }
        }
    }
}

#[inline(always)]
fn map_row<F: LaneFn>(ys: &mut [f32], xs: &[f32], b: Option<&[f32]>, f: &F) {
    let n = ys.len().min(xs.len());
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let i = {
        let mut i = 0;
        while i + 4 <= n {
            let x = V4::load(&xs[i..]);
            let x = match b {
                Some(b) => x + V4::load(&b[i..]),
                None => x,
            };
            f.at(x).store(&mut ys[i..]);
            i += 4;
        }
        i
    };
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    let i = 0;
    for j in i..n {
        let x = match b {
            Some(b) => xs[j] + b[j],
            None => xs[j],
        };
        ys[j] = f.at(x);
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use v4::{layer_norm_row, rms_row, softmax_row, V4};

/// Four float32 lanes in a wasm SIMD128 vector, as a [`Lane`].
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod v4 {
    use super::super::fastmath::{Lane, ROUND_MAGIC};
    use core::arch::wasm32::*;

    #[derive(Clone, Copy)]
    pub(crate) struct V4(v128);

    impl V4 {
        /// The first four floats of `s` (panics if shorter).
        #[inline(always)]
        pub(crate) fn load(s: &[f32]) -> V4 {
            assert!(s.len() >= 4);
            // SAFETY: four floats are in bounds (asserted); wasm loads need no alignment.
            V4(unsafe { v128_load(s.as_ptr() as *const v128) })
        }
        /// Into the first four floats of `s` (panics if shorter).
        #[inline(always)]
        pub(crate) fn store(self, s: &mut [f32]) {
            assert!(s.len() >= 4);
            // SAFETY: as in `load`.
            unsafe { v128_store(s.as_mut_ptr() as *mut v128, self.0) }
        }
    }

    macro_rules! binop {
        ($tr:ident, $f:ident, $op:ident) => {
            impl std::ops::$tr for V4 {
                type Output = V4;
                #[inline(always)]
                fn $f(self, o: V4) -> V4 {
                    V4($op(self.0, o.0))
                }
            }
        };
    }
    binop!(Add, add, f32x4_add);
    binop!(Sub, sub, f32x4_sub);
    binop!(Mul, mul, f32x4_mul);
    binop!(Div, div, f32x4_div);

    /// Softmax over one row in four lanes: the max and the sum each in four partial
    /// accumulators, exp through `fastmath::exp_l`, then each value divided by the sum (the
    /// scalar `reduce::softmax_row`'s passes, with 4 partial sums instead of 8).
    pub(crate) fn softmax_row(row: &mut [f32]) {
        let n4 = row.len() / 4 * 4;
        let (body, tail) = row.split_at_mut(n4);
        let fold = |v: v128| {
            [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ]
        };
        let mut m = f32x4_splat(f32::NEG_INFINITY);
        for c in body.chunks_exact(4) {
            // pmax(m, x) = m < x ? x : m, as the scalar `if v > m { v } else { m }`.
            m = f32x4_pmax(m, V4::load(c).0);
        }
        let max = fold(m)
            .iter()
            .chain(tail.iter())
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        // `exp_l` is 0 below EXP_LO (-104, Softmax's EXP_ZERO): the scalar loop's select.
        let mx = V4::splat(max);
        let mut sum = f32x4_splat(0.0);
        for c in body.chunks_exact_mut(4) {
            let e = super::super::fastmath::exp_l(V4::load(c) - mx);
            e.store(c);
            sum = f32x4_add(sum, e.0);
        }
        let mut total = 0.0;
        for v in tail.iter_mut() {
            *v = super::super::fastmath::exp(*v - max);
            total += *v;
        }
        let total = fold(sum).iter().sum::<f32>() + total;
        let t = f32x4_splat(total);
        for c in body.chunks_exact_mut(4) {
            V4(f32x4_div(V4::load(c).0, t)).store(c);
        }
        for v in tail.iter_mut() {
            *v /= total;
        }
    }

    /// `Σ f(v)` over a row: four partial sums over whole vectors, then the tail.
    #[inline(always)]
    fn sum4(row: &[f32], f: impl Fn(v128) -> v128, g: impl Fn(f32) -> f32) -> f32 {
        let mut acc = f32x4_splat(0.0);
        let body = row.chunks_exact(4);
        let tail = body.remainder().iter().fold(0.0, |s, &v| s + g(v));
        for c in body {
            acc = f32x4_add(acc, f(V4::load(c).0));
        }
        let lanes = [
            f32x4_extract_lane::<0>(acc),
            f32x4_extract_lane::<1>(acc),
            f32x4_extract_lane::<2>(acc),
            f32x4_extract_lane::<3>(acc),
        ];
        lanes.iter().fold(tail, |s, &x| s + x)
    }

    /// `transformer::normalize_row` for float32 rows and statistics: `(v - mean) · inv · gamma
    /// (+ beta)`, `inv = 1 / sqrt(var + eps)`; returns (mean, inv).
    pub(crate) fn layer_norm_row(
        row: &mut [f32],
        gamma: &[f32],
        beta: Option<&[f32]>,
        eps: f32,
    ) -> (f32, f32) {
        let n = row.len() as f32;
        let mean = sum4(row, |v| v, |v| v) / n;
        let m = f32x4_splat(mean);
        let var = sum4(
            row,
            |v| {
                let d = f32x4_sub(v, m);
                f32x4_mul(d, d)
            },
            |v| (v - mean) * (v - mean),
        ) / n;
        let inv = 1.0 / (var + eps).sqrt();
        let iv = f32x4_splat(inv);
        let len = row.len().min(gamma.len());
        let mut i = 0;
        while i + 4 <= len {
            let z = f32x4_mul(f32x4_sub(V4::load(&row[i..]).0, m), iv);
            let y = f32x4_mul(z, V4::load(&gamma[i..]).0);
            let y = match beta {
                Some(b) => f32x4_add(y, V4::load(&b[i..]).0),
                None => y,
            };
            V4(y).store(&mut row[i..]);
            i += 4;
        }
        for j in i..len {
            let y = (row[j] - mean) * inv * gamma[j];
            row[j] = match beta {
                Some(b) => y + b[j],
                None => y,
            };
        }
        (mean, inv)
    }

    /// `rms::rms_row` for float32 rows and statistics: `v / d · gamma`, `d = sqrt(mean(v²) +
    /// eps)`; returns `1 / d`.
    pub(crate) fn rms_row(row: &mut [f32], gamma: &[f32], eps: f32) -> f32 {
        let n = row.len() as f32;
        let d = (sum4(row, |v| f32x4_mul(v, v), |v| v * v) / n + eps).sqrt();
        let dv = f32x4_splat(d);
        let len = row.len().min(gamma.len());
        let mut i = 0;
        while i + 4 <= len {
            let y = f32x4_mul(
                f32x4_div(V4::load(&row[i..]).0, dv),
                V4::load(&gamma[i..]).0,
            );
            V4(y).store(&mut row[i..]);
            i += 4;
        }
        for j in i..len {
            row[j] = row[j] / d * gamma[j];
        }
        1.0 / d
    }

    impl Lane for V4 {
        type Mask = v128;
        #[inline(always)]
        fn splat(v: f32) -> V4 {
            V4(f32x4_splat(v))
        }
        #[inline(always)]
        fn abs(self) -> V4 {
            V4(f32x4_abs(self.0))
        }
        #[inline(always)]
        fn copysign(self, sign: V4) -> V4 {
            V4(v128_bitselect(sign.0, self.0, f32x4_splat(-0.0)))
        }
        #[inline(always)]
        fn min_or(self, hi: f32) -> V4 {
            // pmin(h, x) = x < h ? x : h: a NaN x gives h, as f32::min does.
            V4(f32x4_pmin(f32x4_splat(hi), self.0))
        }
        #[inline(always)]
        fn lt(self, o: V4) -> v128 {
            f32x4_lt(self.0, o.0)
        }
        #[inline(always)]
        fn gt(self, o: V4) -> v128 {
            f32x4_gt(self.0, o.0)
        }
        #[inline(always)]
        fn is_nan(self) -> v128 {
            f32x4_ne(self.0, self.0)
        }
        #[inline(always)]
        fn select(m: v128, a: V4, b: V4) -> V4 {
            V4(v128_bitselect(a.0, b.0, m))
        }
        #[inline(always)]
        fn scale_pow2(p: V4, t: V4) -> V4 {
            let pow2i = |n: v128| i32x4_shl(i32x4_add(n, i32x4_splat(127)), 23);
            let ni = i32x4_sub(t.0, i32x4_splat(ROUND_MAGIC.to_bits() as i32));
            let n1 = i32x4_shr(ni, 1);
            V4(f32x4_mul(
                f32x4_mul(p.0, pow2i(n1)),
                pow2i(i32x4_sub(ni, n1)),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tier runs the closure once and returns its value, whether or not the CPU has it.
    #[test]
    fn every_tier_runs_the_closure() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
        let plain: Vec<f32> = x.iter().map(|v| v * 0.5 + 1.0).collect();
        for t in [Tier::Plain, Tier::Avx2, Tier::Avx512] {
            let got = at(
                t,
                #[inline(always)]
                || x.iter().map(|v| v * 0.5 + 1.0).collect::<Vec<f32>>(),
            );
            assert_eq!(got, plain, "{t:?}");
        }
        assert!(Tier::Plain.available());
        assert_eq!(widest(|| 7), 7);
    }
}
